//! Blind spots a black-box campaign can have, each shown closed: a planted
//! bug that a weaker campaign (uniform crash points, primaries only, fast
//! recovery) passes is caught by DART's defaults, and the correct store still
//! passes (tests/sim.rs).
//!
//! | check | planted bug | caught by | missed by |
//! |---|---|---|---|
//! | rw edges of deletes | complicit abort, seed 212 | G2 cycle | a checker without the delete's `rw` edge |
//! | default campaign | FORD's six (docs/DESIGN.md §4.7) | `tandem dart` defaults, < 300 seeds | (missing-insert-undo, logging-without-locking: campaigns without crashes or inserts) |
//! | replica check | `restore-one-replica` | replica check | runs that read primaries only |
//! | weighted crash points | `invalidate-logs-first`, `missing-insert-undo` | weighted | uniform, 300 seeds |
//! | slow recovery | `lock-lease` (stalling pandora) | `--slow-recovery-ns 200000` | quick recovery, 100 seeds |
//! | publication of failed ids | `publish-before-recovery` | default campaign | — |
//!
//! Seeds are fixed, so every run here is deterministic.

use tandem_dart::campaign::{self, CampaignConfig, CampaignReport, StoreKind, STALL};
use tandem_dart::plan::CrashPoints;
use tandem_dkvs::Mode;

/// The default campaign of `tandem dart` with `bugs` injected.
fn defaults(mode: Mode, bugs: &[&str], seeds: u64) -> CampaignConfig {
    let mut c = CampaignConfig::new(StoreKind::Tandem(mode));
    c.seeds = Some(seeds);
    c.bug_names = bugs.iter().map(|b| b.to_string()).collect();
    c.stop_at_first = true;
    c
}

fn run(c: &CampaignConfig) -> CampaignReport {
    campaign::run(c).expect("campaign runs")
}

/// The first violating seed and the check that saw it.
fn first(c: &CampaignConfig) -> Option<(u64, String)> {
    let rep = run(c);
    rep.violations.first().map(|v| {
        eprintln!(
            "{:?}: seed {} [{}] {}",
            c.bug_names, v.seed, v.test, v.description
        );
        (v.seed, v.test.clone())
    })
}

/// The seed-212 history: two committed transactions read the same version
/// of an insert/delete pair; one deleted both keys, the other overwrote
/// both. The pair's assertion holds either way; only the delete's `rw` edge
/// shows the lost update.
#[test]
fn a_lost_update_through_a_delete_is_a_g2_cycle() {
    let mut c = CampaignConfig::new(StoreKind::Tandem(Mode::Pandora));
    c.tests = "1".into();
    c.first_seed = 212;
    c.seeds = Some(1);
    c.crash_rate = 0.0;
    c.bug_names = vec!["complicit-abort".into()];
    let rep = run(&c);
    let v = rep
        .violations
        .first()
        .expect("seed 212 reports a violation");
    assert_eq!(v.test, "litmus-1-insert-delete", "{}", v.description);
    assert!(
        v.description.contains("G2") && v.description.contains("-rw("),
        "{}",
        v.description
    );
}

/// FORD's six bugs, each in the mode where it lives, as `tandem dart
/// --store MODE --inject-bug BUG` with every other flag at its default.
/// First seeds today: complicit abort 1 (pandora) / 1 (ford), covert locks
/// 2 / 2, relaxed locks 12 / 5, missing insert undo 63, lost decision 1,
/// logging without locking 40.
#[test]
fn the_default_campaign_catches_fords_six_bugs() {
    let six: [(Mode, &[&str]); 9] = [
        (Mode::Pandora, &["complicit-abort"]),
        (Mode::Ford, &["complicit-abort"]),
        (Mode::Pandora, &["covert-locks"]),
        (Mode::Ford, &["covert-locks"]),
        (Mode::Pandora, &["relaxed-locks"]),
        (Mode::Ford, &["relaxed-locks"]),
        (Mode::Ford, &["missing-insert-undo"]),
        (Mode::Traditional, &["lost-decision"]),
        (
            Mode::Traditional,
            &["logging-without-locking", "trust-undo-images"],
        ),
    ];
    for (mode, bugs) in six {
        let (seed, test) = first(&defaults(mode, bugs, 300))
            .unwrap_or_else(|| panic!("{mode} {bugs:?}: not caught in 300 seeds"));
        eprintln!("| {mode} | {} | {seed} | {test} |", bugs.join(" + "));
    }
}

/// A recovery that rolls back only the primary leaves backups that a
/// memory-node failure would promote. Reads of primaries never see it.
#[test]
fn the_replica_check_catches_a_recovery_that_restores_one_replica() {
    let c = defaults(Mode::Pandora, &["restore-one-replica"], 300);
    let (seed, test) = first(&c).expect("restore-one-replica caught");
    assert_eq!(test, "replica-check");
    let mut blind = c.clone();
    blind.replica_check = false;
    blind.seeds = Some(100.max(seed + 1));
    assert_eq!(
        run(&blind).violation_count,
        0,
        "only the replica check can see it"
    );
}

/// A bug whose window uniform crash points do not reach in 300 seeds:
/// invalidating the logs before restoring (harmless unless the recovery
/// coordinator crashes between those steps). FORD's unlogged inserts were
/// another until inserts began reusing other keys' tombstones (slot
/// reclamation): more inserts now run unlogged under that bug, and uniform
/// crash points find it too (`the_default_campaign_catches_fords_six_bugs` keeps it).
#[test]
fn weighted_crash_points_reach_windows_that_uniform_ones_miss() {
    for (mode, bug) in [(Mode::Pandora, "invalidate-logs-first")] {
        let c = defaults(mode, &[bug], 300);
        let weighted = run(&c).violation_count;
        let mut uniform = c.clone();
        uniform.crash_points = CrashPoints::Uniform;
        let uniform = run(&uniform).violation_count;
        eprintln!(
            "{bug}: weighted crash points {weighted} violations in 300 seeds, uniform {uniform}"
        );
        assert!(weighted > 0, "{bug}: weighted crash points miss it");
        assert_eq!(
            uniform, 0,
            "{bug}: uniform crash points caught it after all"
        );
    }
}

/// Stalling pandora coordinators wait out a recovery under way. One that
/// presumes a lock's owner dead after a lease reads and overwrites the
/// crashed transaction's half-recovered objects, but only if recovery
/// outlasts the lease.
#[test]
fn slow_recovery_catches_a_coordinator_that_outwaits_a_lock() {
    let mut slow = defaults(Mode::Pandora, &["lock-lease"], 100);
    slow.on_stray = Some(STALL);
    slow.slow_recovery_ns = Some(200_000);
    first(&slow).expect("lock-lease caught with a slow recovery");
    let mut quick = slow.clone();
    quick.slow_recovery_ns = Some(0);
    assert_eq!(run(&quick).violation_count, 0, "a quick recovery hides it");
}

/// The membership side of recovery: failed ids published when recovery
/// starts let live coordinators steal locks of transactions that recovery
/// has yet to roll back.
#[test]
fn publishing_failed_ids_before_recovery_is_caught() {
    first(&defaults(Mode::Pandora, &["publish-before-recovery"], 300))
        .expect("publish-before-recovery caught");
}
