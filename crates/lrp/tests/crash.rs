//! The crash checker on the machine: the RP-enforcing policies give no
//! violation on any data structure; NOP does (the checker has teeth).

use tandem_lrp::check::{check, CheckOpts};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::PolicyKind;

fn run(lfd: LfdKind, policy: PolicyKind, seeds: u64) -> tandem_lrp::check::Report {
    let o = CheckOpts::new(lfd, policy);
    check(&o, 1, seeds, |_, _| {})
}

#[test]
fn probe() {
    for lfd in [LfdKind::List, LfdKind::Hash, LfdKind::Queue] {
        for p in tandem_lrp::PolicyKind::ALL {
            let r = run(lfd, p, 30);
            eprintln!("{:?} {:?}: {} violating seeds of {}, {} images, {:.0}/s; first {:?}", lfd, p, r.violating_seeds, r.seeds, r.images, r.images_per_second, r.violations.first().map(|v| (&v.level, &v.detail)));
        }
    }
}

#[test]
fn probe_mutants() {
    for m in tandem_lrp::Mutant::ALL {
        for lfd in [LfdKind::List, LfdKind::Hash, LfdKind::Queue] {
            let mut o = CheckOpts::new(lfd, PolicyKind::Lrp);
            o.mutant = Some(m);
            let r = check(&o, 1, 100, |_, _| {});
            eprintln!("{:?} {:?}: {} of {}; first {:?}", m, lfd, r.violating_seeds, r.seeds, r.violations.first().map(|v| (v.seed, &v.level, &v.detail)));
        }
    }
}
