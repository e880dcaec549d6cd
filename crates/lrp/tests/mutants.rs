//! Every deliberate bug (`tandem_lrp::Mutant`) is caught within a fixed budget: the
//! mechanism's by the image check on litmus or random programs, the data
//! structures' by the crash checker.

use tandem_lrp::check::{check, CheckOpts};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::litmus::{explore, hunt, mutant_program};
use tandem_lrp::{Mutant, PolicyKind};

/// Executions (program × seed) a mechanism mutant may take to be caught.
const BUDGET: u64 = 2000;

#[test]
fn every_mechanism_mutant_is_caught() {
    for m in Mutant::ALL.into_iter().filter(|m| m.is_mechanism()) {
        let runs = hunt(m, BUDGET);
        assert!(runs.is_some(), "{} survived {BUDGET} executions", m.name());
    }
}

/// The programs written for M2, M6 and M7 are clean without their mutant.
#[test]
fn the_mutant_programs_are_legal_under_correct_lrp() {
    for m in [Mutant::ReleaseOrder, Mutant::EpochWrap, Mutant::RetOverflow] {
        let p = mutant_program(m).expect("has a program");
        let o = explore(&p, PolicyKind::Lrp, None, 0..20, 64, |_, _, _| {});
        assert!(
            o.illegal().next().is_none(),
            "{}: illegal without the mutant",
            m.name()
        );
        assert!(
            o.images.len() > 2,
            "{}: the program reaches several images",
            m.name()
        );
    }
}

fn lfd_caught(lfd: LfdKind, m: Mutant, seeds: u64) -> bool {
    let mut o = CheckOpts::new(lfd, PolicyKind::Lrp);
    o.mutant = Some(m);
    check(&o, 1, seeds, |_, _| {}).violating_seeds > 0
}

#[test]
fn data_structure_mutants_are_caught_by_the_crash_checker() {
    assert!(lfd_caught(LfdKind::List, Mutant::ListRelaxedLink, 10));
    assert!(lfd_caught(LfdKind::Hash, Mutant::ListRelaxedLink, 10));
    assert!(lfd_caught(LfdKind::Queue, Mutant::QueueRelaxedLink, 10));
    assert!(lfd_caught(LfdKind::List, Mutant::ListUnlinkUnmarked, 20));
    assert!(lfd_caught(LfdKind::Bst, Mutant::BstEarlyPublish, 20));
}
