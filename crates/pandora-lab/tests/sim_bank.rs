//! Tier-2 simulation tests: many seeds of concurrent bank transactions per
//! mode, with torn reads and random verb delays, checking every invariant.
//! `TANDEM_SIM_SEEDS=N` raises the seed count (the CI default is bounded).

use tandem_dkvs::{BugSwitches, Mode};
use tandem_pandora_lab::sim_run::{run, SimConfig};

fn seeds() -> u64 {
    std::env::var("TANDEM_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

fn all_seeds_pass(mode: Mode) {
    let mut committed = 0;
    for seed in 0..seeds() {
        let r = run(&SimConfig::bank(mode, seed));
        assert!(
            r.violations.is_empty(),
            "{mode} seed {seed} violated invariants:\n{}\nreplay: {}",
            r.violations.join("\n"),
            r.replay
        );
        committed += r.committed;
    }
    assert!(
        committed > seeds() * 50,
        "{mode}: too few commits ({committed}) for the run to mean anything"
    );
}

#[test]
fn pandora_keeps_every_invariant() {
    all_seeds_pass(Mode::Pandora);
}

#[test]
fn ford_keeps_every_invariant() {
    all_seeds_pass(Mode::Ford);
}

#[test]
fn traditional_keeps_every_invariant() {
    all_seeds_pass(Mode::Traditional);
}

/// The write-skew-concentrated configuration used to hunt relaxed locks.
fn hot_pair(mode: Mode, seed: u64) -> SimConfig {
    let mut cfg = SimConfig::bank(mode, seed);
    cfg.bank_mut().customers = 24;
    cfg.hot_sibling_pair = true;
    cfg
}

#[test]
fn every_mode_keeps_invariants_under_concentrated_write_skew() {
    for mode in Mode::ALL {
        for seed in 0..seeds() {
            let r = run(&hot_pair(mode, seed));
            assert!(
                r.violations.is_empty(),
                "{mode} seed {seed}:\n{}\nreplay: {}",
                r.violations.join("\n"),
                r.replay
            );
        }
    }
}

/// Each re-injected C1 bug must be caught within a bounded number of seeds.
/// Seeds are fixed, so the outcome is deterministic, not flaky.
fn bug_is_caught(mode: Mode, bugs: BugSwitches, budget: u64) {
    for seed in 0..budget {
        let mut cfg = if bugs.relaxed_locks {
            hot_pair(mode, seed)
        } else {
            SimConfig::bank(mode, seed)
        };
        cfg.bugs = bugs;
        // The run's checks must catch it (tests/assertions.rs: the asserts).
        cfg.assertions = Some(false);
        let r = run(&cfg);
        if !r.violations.is_empty() {
            eprintln!(
                "{mode} {bugs:?} caught at seed {seed}: {}\n  replay: {}",
                r.violations[0], r.replay
            );
            return;
        }
    }
    panic!("{mode} with {bugs:?}: no violation in {budget} seeds");
}

#[test]
fn complicit_abort_is_caught() {
    for mode in Mode::ALL {
        bug_is_caught(
            mode,
            BugSwitches {
                complicit_abort: true,
                ..Default::default()
            },
            40,
        );
    }
}

#[test]
fn covert_locks_are_caught() {
    for mode in Mode::ALL {
        bug_is_caught(
            mode,
            BugSwitches {
                covert_locks: true,
                ..Default::default()
            },
            40,
        );
    }
}

#[test]
fn relaxed_locks_are_caught() {
    for mode in Mode::ALL {
        bug_is_caught(
            mode,
            BugSwitches {
                relaxed_locks: true,
                ..Default::default()
            },
            1500,
        );
    }
}

#[test]
fn a_seed_replays_identically() {
    let a = run(&SimConfig::bank(Mode::Pandora, 7));
    let b = run(&SimConfig::bank(Mode::Pandora, 7));
    assert_eq!(
        (a.committed, a.aborted, a.sim_time_ns, a.stats.verbs),
        (b.committed, b.aborted, b.sim_time_ns, b.stats.verbs)
    );
}

// ---- Crash recovery (docs/DESIGN.md §4.5) ----

use tandem_pandora_lab::sim_run::Faults;
use tandem_sim::Rng;

fn crash_cfg(mode: Mode, seed: u64) -> SimConfig {
    let mut cfg = SimConfig::bank(mode, seed);
    cfg.bank_mut().customers = 24;
    cfg.txs_per_coordinator = 60;
    let mut rng = Rng::new(seed ^ 0xC4A5);
    // Crash somewhere in the busy middle of the run, at an arbitrary verb boundary.
    let at = rng.range_inclusive(20_000, 150_000);
    // Detection from instant to 20 µs: a quick verdict races the victim's
    // verbs still in flight, so revocation can cut a commit half-way.
    let detect_ns = if rng.chance(0.5) {
        rng.below(4_000)
    } else {
        20_000
    };
    cfg.faults = Faults {
        crash: Some((rng.below(2) as u16, at)),
        detect_ns,
        ..Default::default()
    };
    cfg
}

fn assert_recovers(cfg: &SimConfig) -> tandem_pandora_lab::sim_run::SimReport {
    let r = run(cfg);
    assert!(
        r.violations.is_empty(),
        "{} seed {}: {}\nreplay: {}",
        cfg.mode,
        cfg.seed,
        r.violations.join("\n"),
        r.replay
    );
    assert_eq!(r.recoveries.len(), 1);
    r
}

#[test]
fn pandora_recovers_from_compute_crashes_at_random_verb_boundaries() {
    let (mut logs, mut back, mut fwd, mut window) = (0, 0, 0, 0);
    for seed in 0..seeds() {
        let r = assert_recovers(&crash_cfg(Mode::Pandora, seed));
        let rep = &r.recoveries[0];
        logs += rep.logs_found;
        back += rep.rolled_back;
        fwd += rep.rolled_forward;
        window += r.survivor_commits_during_recovery;
        assert!(
            r.survivor_commits_during_recovery > 0,
            "seed {}: survivors must commit while recovery runs",
            cfg_seed(&r)
        );
    }
    // The sweep must have exercised real decisions, not only empty logs.
    assert!(
        logs > 0 && back + fwd > 0,
        "logs {logs}, rolled back {back}, forward {fwd}"
    );
    eprintln!("pandora crash sweep: {logs} logs, {back} rolled back, {fwd} rolled forward, {window} survivor commits in recovery windows");
}

fn cfg_seed(r: &tandem_pandora_lab::sim_run::SimReport) -> &str {
    &r.replay
}

#[test]
fn pandora_survives_failure_detector_false_positives() {
    for seed in 0..seeds() {
        let mut cfg = crash_cfg(Mode::Pandora, seed);
        cfg.faults.false_positive = true;
        assert_recovers(&cfg);
    }
}

/// A crash and a slow node suspected in one run, in every mode.
/// Both are fenced and recovered; a third node keeps committing while they
/// are (liveness), and every check holds (safety). With two compute nodes,
/// both are suspected and nobody is left, and the checks still hold.
#[test]
fn a_crash_and_a_slow_suspected_node_are_both_fenced_and_recovered() {
    for mode in [Mode::Pandora, Mode::Ford, Mode::Traditional] {
        for seed in 0..seeds().min(12) {
            for nodes in [2, 3] {
                let mut cfg = crash_cfg(mode, seed);
                cfg.compute_nodes = nodes;
                let victim = cfg.faults.crash.expect("a crash").0;
                cfg.faults.suspect_too = Some(1 - victim);
                let r = run(&cfg);
                assert!(
                    r.violations.is_empty(),
                    "{mode} seed {seed}: {}\nreplay: {}",
                    r.violations.join("\n"),
                    r.replay
                );
                assert_eq!(r.recoveries.len(), 2, "replay: {}", r.replay);
                if nodes == 3 && mode == Mode::Pandora {
                    assert!(
                        r.survivor_commits_during_recovery > 0,
                        "the third node must commit on: {}",
                        r.replay
                    );
                }
            }
        }
    }
}

#[test]
fn recovery_is_idempotent_when_the_recovery_coordinator_crashes_midway() {
    let mut rng = Rng::new(99);
    for seed in 0..seeds() {
        let mut cfg = crash_cfg(Mode::Pandora, seed);
        cfg.faults.crash_recovery_after_ns = Some(rng.range_inclusive(500, 12_000));
        assert_recovers(&cfg);
    }
}

/// The first seed below `budget` whose run violates an invariant, with its
/// first violation and replay command.
fn first_violation(
    budget: u64,
    cfg_for: impl Fn(u64) -> SimConfig,
) -> Option<(u64, String, String)> {
    (0..budget).find_map(|seed| {
        // The run's checks must catch it (tests/assertions.rs: the asserts).
        let mut cfg = cfg_for(seed);
        cfg.assertions = Some(false);
        cfg.recovery_assertions = Some(false);
        let r = run(&cfg);
        r.violations
            .first()
            .map(|v| (seed, v.clone(), r.replay.clone()))
    })
}

/// The crash tests can fail: each recovery mutant is caught within a budget.
fn recovery_bug_is_caught(bugs: tandem_dkvs::recovery::RecoveryBugs, budget: u64) {
    for seed in 0..budget {
        let mut cfg = crash_cfg(Mode::Pandora, seed);
        cfg.faults.recovery_bugs = bugs;
        cfg.assertions = Some(false);
        cfg.recovery_assertions = Some(false);
        let r = run(&cfg);
        if !r.violations.is_empty() {
            eprintln!(
                "{bugs:?} caught at seed {seed}: {}\n  replay: {}",
                r.violations[0], r.replay
            );
            return;
        }
    }
    panic!("{bugs:?}: no violation in {budget} seeds");
}

#[test]
fn recovery_mutants_are_caught() {
    use tandem_dkvs::recovery::RecoveryBugs;
    recovery_bug_is_caught(
        RecoveryBugs {
            skip_log_recovery: true,
            ..Default::default()
        },
        300,
    );
    recovery_bug_is_caught(
        RecoveryBugs {
            always_roll_back: true,
            ..Default::default()
        },
        200,
    );
}

/// The baselines recover too: ford by a stop-the-world scan, traditional from
/// its lock logs; both pause live coordinators (their locks name no owner).
#[test]
fn ford_and_traditional_recover_from_compute_crashes() {
    for mode in [Mode::Ford, Mode::Traditional] {
        let (mut locks, mut back, mut fwd) = (0, 0, 0);
        for seed in 0..seeds() {
            let r = assert_recovers(&crash_cfg(mode, seed));
            let rep = &r.recoveries[0];
            locks += rep.logs_found;
            back += rep.rolled_back;
            fwd += rep.rolled_forward;
        }
        assert!(
            locks > 0 && back + fwd > 0,
            "{mode}: locks {locks}, rolled back {back}, forward {fwd}"
        );
        eprintln!("{mode} crash sweep: {locks} stray locks found, {back} rolled back, {fwd} rolled forward");
    }
}

/// FORD's C2 "missing actions" bug (inserts not undo-logged) breaks
/// traditional recovery: a partly applied insert is never rolled back.
#[test]
fn missing_insert_undo_is_caught_by_the_crash_tests() {
    for mode in [Mode::Traditional, Mode::Ford] {
        let (seed, v, replay) = first_violation(400, |seed| {
            let mut cfg = crash_cfg(mode, seed);
            cfg.bank_mut().receipt_chance = 0.6;
            cfg.bugs = BugSwitches {
                missing_insert_undo: true,
                ..Default::default()
            };
            cfg
        })
        .unwrap_or_else(|| panic!("{mode}: missing-insert-undo not caught in 400 seeds"));
        eprintln!("{mode} missing-insert-undo caught at seed {seed}: {v}\n  replay: {replay}");
    }
}

/// FORD's C2 "lost decision": deciding from the newest undo entries instead
/// of the lock log's current transaction rolls an object back to the undo
/// image of an earlier, aborted transaction. Retried transactions (same
/// objects) and quick verdicts make that window reachable.
#[test]
fn lost_decision_is_caught_by_the_crash_tests() {
    use tandem_dkvs::recovery::RecoveryBugs;
    let retrying = |seed| {
        let mut cfg = crash_cfg(Mode::Traditional, seed);
        cfg.bank_mut().retries = 3;
        cfg.faults.detect_ns = cfg.faults.detect_ns.min(3_000);
        cfg
    };
    // The fixed protocol passes this configuration ...
    for seed in 0..seeds() * 4 {
        assert_recovers(&retrying(seed));
    }
    // ... and the mutant fails it.
    let (seed, v, replay) = first_violation(1000, |seed| {
        let mut cfg = retrying(seed);
        cfg.faults.recovery_bugs = RecoveryBugs {
            lost_decision: true,
            ..Default::default()
        };
        cfg
    })
    .expect("lost decision not caught in 1000 seeds");
    eprintln!("lost decision caught at seed {seed}: {v}\n  replay: {replay}");
}

/// FORD's C2 "logging without locking": an undo image taken before the lock
/// can be stale, and rolling back to it erases a commit made in between.
/// Traditional recovery defends against it (it restores an object only if the
/// object still carries the entry's old or new version); with that check off,
/// as in FORD's recovery, the crash tests catch the bug.
#[test]
fn logging_without_locking_is_caught_by_the_crash_tests() {
    use tandem_dkvs::recovery::RecoveryBugs;
    let buggy = |seed| {
        let mut cfg = crash_cfg(Mode::Traditional, seed);
        cfg.faults.detect_ns = cfg.faults.detect_ns.min(3_000);
        cfg.bugs = BugSwitches {
            logging_without_locking: true,
            ..Default::default()
        };
        cfg
    };
    for seed in 0..seeds() * 4 {
        assert_recovers(&buggy(seed));
    }
    let (seed, v, replay) = first_violation(1500, |seed| {
        let mut cfg = buggy(seed);
        cfg.faults.recovery_bugs = RecoveryBugs {
            trust_undo_images: true,
            ..Default::default()
        };
        cfg
    })
    .expect("logging without locking not caught in 1500 seeds");
    eprintln!("logging without locking caught at seed {seed}: {v}\n  replay: {replay}");
}

// ---- Memory-node failure (docs/DESIGN.md §4.6) ----

/// Lose a memory node mid-commit: in-flight transactions commit on the live
/// replicas or abort, compute nodes run on the surviving copies, and
/// re-replication onto a replacement restores f+1 identical replicas.
#[test]
fn memory_node_loss_mid_commit_is_survived_and_rereplicated() {
    for mode in Mode::ALL {
        let mut degraded = 0;
        for seed in 0..seeds() {
            let mut cfg = SimConfig::bank(mode, seed);
            cfg.bank_mut().customers = 24;
            cfg.txs_per_coordinator = 60;
            let mut rng = Rng::new(seed ^ 0x3E3);
            cfg.faults.memory_failure =
                Some((rng.below(3) as u16, rng.range_inclusive(20_000, 120_000)));
            let r = run(&cfg);
            assert!(
                r.violations.is_empty(),
                "{mode} seed {seed}: {}\nreplay: {}",
                r.violations.join("\n"),
                r.replay
            );
            assert!(
                r.slots_rereplicated > 0,
                "{mode} seed {seed}: nothing re-replicated"
            );
            degraded += r.commits_while_degraded;
        }
        assert!(
            degraded > 0,
            "{mode}: nothing committed while running on one copy"
        );
    }
}

/// A compute node crashes as a memory node fails: its transactions in flight
/// may hold their only record of a lock on the lost primary. It is recovered
/// while every other compute node holds, from the live replicas alone
/// (`decide_quiesced`), then everyone runs on the surviving copies and the
/// replacement is filled. A recovery that decides by the lost primary locks
/// anyway (`ignore-lost-primaries`) is caught.
#[test]
fn a_compute_crash_during_a_memory_node_loss_is_recovered_from_the_live_replicas() {
    let cfg = |seed: u64, bug: bool| {
        let mut cfg = SimConfig::bank(Mode::Pandora, seed);
        cfg.bank_mut().customers = 24;
        cfg.txs_per_coordinator = 60;
        let mut rng = Rng::new(seed ^ 0xC0DE);
        cfg.faults.memory_failure =
            Some((rng.below(3) as u16, rng.range_inclusive(20_000, 120_000)));
        cfg.faults.crash_in_memory_loss = Some(rng.below(2) as u16);
        cfg.faults.recovery_bugs.ignore_lost_primaries = bug;
        cfg
    };
    let mut logs = 0;
    for seed in 0..seeds() * 2 {
        let r = assert_recovers(&cfg(seed, false));
        assert!(
            r.slots_rereplicated > 0,
            "seed {seed}: nothing re-replicated"
        );
        logs += r.recoveries[0].logs_found;
    }
    assert!(logs > 0, "no crash left a logged transaction to recover");
    let (seed, v, replay) = first_violation(2000, |seed| cfg(seed, true))
        .expect("ignore-lost-primaries not caught in 2000 seeds");
    eprintln!("ignore-lost-primaries caught at seed {seed}: {v}\n  replay: {replay}");
}

/// A compute node's link to one memory node is cut while both live (a
/// reset connection, a silence bound): its writes there fail, and the
/// membership, which still reaches the memory node, never declares it
/// failed. A commit that missed a write there waits for that verdict; the
/// node ends its incarnation when it is overdue, and recovery settles the
/// commit. Acknowledging such a commit anyway (`ack-missed-replica`, the
/// rule before real links showed it wrong) leaves the replica without the
/// write for good, or has recovery roll an acknowledged commit back.
#[test]
fn a_commit_that_missed_a_live_replica_waits_for_the_verdict() {
    let cfg = |mode: Mode, seed: u64, bug: bool| {
        let mut cfg = SimConfig::bank(mode, seed);
        cfg.txs_per_coordinator = 60;
        let mut rng = Rng::new(seed ^ 0xC07);
        let (n, m) = (rng.below(2) as u16, rng.below(3) as u16);
        cfg.faults.cut_link = Some((n, m, rng.range_inclusive(20_000, 120_000)));
        cfg.faults.detect_ns = 20_000;
        cfg.bugs.ack_missed_replica = bug;
        cfg
    };
    // Traditional logging is left out: its recovery frees only the locks
    // its lock log names (the current transaction's), so a lock whose
    // release was lost on the cut link stays held (docs/DESIGN.md §4.6).
    for mode in [Mode::Pandora, Mode::Ford] {
        let mut in_doubt = 0;
        for seed in 0..seeds() {
            let r = assert_recovers(&cfg(mode, seed, false));
            in_doubt += r.in_doubt;
        }
        assert!(
            in_doubt > 0,
            "{mode}: no commit was left in doubt by the cut"
        );
    }
    let (seed, v, replay) = first_violation(200, |seed| cfg(Mode::Pandora, seed, true))
        .expect("ack-missed-replica not caught in 200 seeds");
    eprintln!("ack-missed-replica caught at seed {seed}: {v}\n  replay: {replay}");
}
