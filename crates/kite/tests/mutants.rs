//! Every deliberate bug of [`tandem_kite::node::Mutant`] is caught by the seeded checks, within
//! a few seeds; the correct protocol passes the same seeds.

use tandem_kite::simcheck::{check, CheckOpts, Faults};
use tandem_kite::{KiteConfig, Mutant};

/// Seeds tried per mutant before giving up.
const BUDGET: u64 = 60;

fn first_caught(m: Mutant, faults: Option<Faults>) -> Option<(u64, String)> {
    let base = CheckOpts::default();
    let opts = CheckOpts {
        faults,
        cfg: KiteConfig {
            mutant: Some(m),
            // The history checker must catch it, not the node's own
            // assertions (tests/assertions.rs runs those).
            assertions: Some(false),
            ..base.cfg
        },
        ..base
    };
    (1..=BUDGET).find_map(|seed| {
        let s = check(&opts, seed, 1, |_| {});
        s.violations.first().map(|v| (seed, v.detail.clone()))
    })
}

fn caught(m: Mutant, faults: Option<Faults>) {
    match first_caught(m, faults) {
        Some((seed, detail)) => eprintln!(
            "{}: caught at seed {seed}: {}",
            m.name(),
            detail.lines().next().unwrap_or("")
        ),
        None => panic!("mutant {} survived {BUDGET} seeds", m.name()),
    }
}

#[test]
fn release_without_barrier_is_caught() {
    caught(
        Mutant::NoReleaseBarrier,
        Some(Faults {
            partition: true,
            ..Faults::default()
        }),
    );
}

#[test]
fn acquire_skipping_delinquency_is_caught() {
    caught(
        Mutant::SkipDelinquencyCheck,
        Some(Faults {
            sleep: true,
            ..Faults::default()
        }),
    );
}

#[test]
fn paxos_accepting_lower_ballot_is_caught() {
    caught(Mutant::AcceptLowerBallot, Some(Faults::default()));
}

#[test]
fn abd_without_write_back_is_caught() {
    caught(
        Mutant::NoWriteBack,
        Some(Faults {
            slow: true,
            ..Faults::default()
        }),
    );
}

#[test]
fn slow_path_without_refresh_is_caught() {
    caught(
        Mutant::NoSlowPathRefresh,
        Some(Faults {
            sleep: true,
            ..Faults::default()
        }),
    );
}

#[test]
fn stale_dm_cover_is_caught() {
    caught(
        Mutant::StaleCover,
        Some(Faults {
            partition: true,
            ..Faults::default()
        }),
    );
}
