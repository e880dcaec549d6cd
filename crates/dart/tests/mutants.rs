//! Every test must be able to fail (docs/DESIGN.md §1): each of FORD's six bugs
//! (docs/DESIGN.md §4.7, the Pandora paper Table 1), re-injected by its test-only
//! switch, is caught by DART within a fixed seed budget, and by the litmus
//! test the paper names for it. Seeds are fixed, so this is deterministic.
//!
//! | bug | store | litmus test (paper) | crashes | budget (seeds) |
//! |---|---|---|---|---|
//! | complicit abort | pandora, ford | litmus 1 | no | 80 |
//! | covert locks | pandora, ford | litmus 2 | no | 10 |
//! | relaxed locks | pandora, ford | litmus 2 | no | 40 |
//! | missing insert undo (missing actions) | ford | litmus 1 (insert/delete) | yes | 60 |
//! | lost decision | traditional | litmus 3 | yes | 20 |
//! | logging without locking (+ FORD's trusting recovery) | traditional | litmus 3 | yes | 100 |

use tandem_dart::campaign::{self, CampaignConfig, StoreKind};
use tandem_dkvs::Mode;

/// Run seeds `0..budget` until the first violation; return (seed, test).
fn caught(
    mode: Mode,
    bugs: &[&str],
    tests: &str,
    instances: u32,
    crash: bool,
    txs: u64,
    budget: u64,
) -> (u64, String) {
    let mut c = CampaignConfig::new(StoreKind::Tandem(mode));
    c.tests = tests.into();
    c.instances = instances;
    c.seeds = Some(budget);
    c.crash_rate = if crash { 1.0 } else { 0.0 };
    c.txs_per_client = txs;
    c.bug_names = bugs.iter().map(|b| b.to_string()).collect();
    c.stop_at_first = true;
    c.jobs = 1;
    // The litmus test and its assertions must catch it (the replica check,
    // tests/blindspots.rs, often sees these bugs first).
    c.replica_check = false;
    let rep = campaign::run(&c).expect("campaign runs");
    let v = rep.violations.first().unwrap_or_else(|| {
        panic!("{mode} {bugs:?}: no violation in {budget} seeds of --tests {tests}")
    });
    eprintln!(
        "{mode} {bugs:?}: caught at seed {} by {}: {}\n  replay: {}",
        v.seed, v.test, v.description, v.replay
    );
    (v.seed, v.test.clone())
}

#[test]
fn complicit_abort_is_caught_by_litmus_1() {
    for mode in [Mode::Pandora, Mode::Ford] {
        let (_, test) = caught(mode, &["complicit-abort"], "litmus-1", 1, false, 60, 80);
        assert_eq!(test, "litmus-1");
    }
}

#[test]
fn covert_locks_are_caught_by_litmus_2() {
    for mode in [Mode::Pandora, Mode::Ford] {
        let (_, test) = caught(mode, &["covert-locks"], "2", 2, false, 60, 10);
        assert_eq!(test, "litmus-2");
    }
}

#[test]
fn relaxed_locks_are_caught_by_litmus_2() {
    for mode in [Mode::Pandora, Mode::Ford] {
        let (_, test) = caught(mode, &["relaxed-locks"], "2", 2, false, 60, 40);
        assert_eq!(test, "litmus-2");
    }
}

#[test]
fn missing_insert_undo_is_caught_by_litmus_1_insert_delete_with_crashes() {
    let (_, test) = caught(
        Mode::Ford,
        &["missing-insert-undo"],
        "litmus-1-insert-delete",
        1,
        true,
        30,
        60,
    );
    assert_eq!(test, "litmus-1-insert-delete");
}

#[test]
fn lost_decision_is_caught_by_litmus_3_with_crashes() {
    let (_, test) = caught(Mode::Traditional, &["lost-decision"], "3", 1, true, 60, 20);
    assert_eq!(test, "litmus-3");
}

#[test]
fn logging_without_locking_is_caught_by_litmus_3_with_crashes() {
    let (_, test) = caught(
        Mode::Traditional,
        &["logging-without-locking", "trust-undo-images"],
        "3",
        1,
        true,
        60,
        100,
    );
    assert_eq!(test, "litmus-3");
}
