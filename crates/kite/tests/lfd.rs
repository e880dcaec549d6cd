//! The paper's data structures on Kite, in the simulator under faults:
//! release consistency of every call and the structures' own invariants.

use tandem_kite::lfd::{LfdBug, LfdKind, LfdWorkload};
use tandem_kite::simcheck::{run_with, CheckOpts, Faults};

fn run(kind: LfdKind, seeds: std::ops::Range<u64>, faults: Option<Faults>) {
    let opts = CheckOpts {
        faults,
        ..CheckOpts::default()
    };
    for seed in seeds {
        let work = LfdWorkload::new(kind, 4, 4, opts.sessions, seed);
        let r = run_with(seed, &opts, Box::new(work));
        eprintln!(
            "{} seed {seed} [{}]: {} calls {:?}",
            kind.name(),
            r.faults.describe(),
            r.ops,
            r.stats.paxos_retries
        );
        assert!(
            r.violation.is_none(),
            "{} seed {seed}: {}",
            kind.name(),
            r.violation.unwrap()
        );
    }
}

#[test]
fn stack_fault_free() {
    run(LfdKind::Stack, 0..2, Some(Faults::default()));
}

#[test]
fn queue_fault_free() {
    run(LfdKind::Queue, 0..2, Some(Faults::default()));
}

#[test]
fn list_fault_free() {
    run(LfdKind::List, 0..2, Some(Faults::default()));
}

#[test]
fn structures_under_faults() {
    for kind in LfdKind::ALL {
        run(kind, 1..6, None);
    }
}

fn first_caught(kind: LfdKind, bug: LfdBug) -> Option<(u64, String)> {
    let opts = CheckOpts {
        faults: Some(Faults::default()),
        ..CheckOpts::default()
    };
    (1..=20).find_map(|seed| {
        let mut work = LfdWorkload::new(kind, 4, 4, opts.sessions, seed);
        work.bug = Some(bug);
        run_with(seed, &opts, Box::new(work))
            .violation
            .map(|v| (seed, v))
    })
}

#[test]
fn buggy_programs_are_caught() {
    for (kind, bug) in [
        (LfdKind::Stack, LfdBug::PublishFirst),
        (LfdKind::Queue, LfdBug::PublishFirst),
        (LfdKind::List, LfdBug::UnlinkUnmarked),
    ] {
        let (seed, v) = first_caught(kind, bug)
            .unwrap_or_else(|| panic!("{} with {bug:?} passed 20 seeds", kind.name()));
        eprintln!(
            "{} {bug:?}: caught at seed {seed}: {}",
            kind.name(),
            v.lines().next().unwrap_or("")
        );
    }
}
