//! The invariant assertions of Pandora's coordinators and recovery
//! coordinator (crates/dkvs/src/coordinator/invariants.rs,
//! recovery/invariants.rs) fire on the planted bugs: each bug runs, with
//! assertions on, in the seeded simulation its checker test uses
//! (tests/sim_bank.rs, tests/sim_suspicion.rs), under `catch_unwind`; the
//! table says which invariant fired first, at which seed.
//! `reclaim-mid-run`, `unguarded-phantoms` and `lock-lease` are run by
//! crates/dkvs/tests (reclaim_sim.rs, tx_semantics.rs), beside their
//! checker tests.
//!
//! Not caught by a local assertion, and why:
//! - `ignore-own-failure` alone: harmless (fencing is permanent, so the
//!   fenced coordinators' verbs fail); nothing breaks, nothing fires;
//! - `publish-before-recovery` (DART's harness publishes failed ids before
//!   recovery) and `skip-rereplication` (the membership process skips the
//!   copy): the harness's own acts; no coordinator or recovery coordinator
//!   takes part in them, and the membership state machine they bypass
//!   publishes only after `RecoveryDone`. Neither is run by these harnesses.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tandem_dkvs::recovery::RecoveryBugs;
use tandem_dkvs::{BugSwitches, Mode, INVARIANTS};
use tandem_pandora_lab::sim_run::{run, Faults, SimConfig};
use tandem_pandora_lab::sim_suspicion::{self, FencingBugs, Stall, SuspicionConfig};
use tandem_sim::Rng;

/// The invariant an assertion named, and its message, if `f` panicked with one.
fn fired(f: impl FnOnce()) -> Option<(String, String)> {
    let payload = catch_unwind(AssertUnwindSafe(f)).err()?;
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    let name = msg.split(':').next().unwrap_or("").to_string();
    match INVARIANTS.contains(&name.as_str()) {
        true => Some((name, msg)),
        false => std::panic::resume_unwind(payload),
    }
}

/// Assertion panics are in the table; other panics print as usual.
fn quiet_assertions() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !INVARIANTS.contains(&msg.split(':').next().unwrap_or("")) {
            default(info);
        }
    }));
}

/// sim_bank.rs's crash configuration.
fn crash_cfg(mode: Mode, seed: u64) -> SimConfig {
    let mut cfg = SimConfig::bank(mode, seed);
    cfg.bank_mut().customers = 24;
    cfg.txs_per_coordinator = 60;
    let mut rng = Rng::new(seed ^ 0xC4A5);
    let at = rng.range_inclusive(20_000, 150_000);
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

/// sim_bank.rs's write-skew configuration (relaxed locks).
fn hot_pair(mode: Mode, seed: u64) -> SimConfig {
    let mut cfg = SimConfig::bank(mode, seed);
    cfg.bank_mut().customers = 24;
    cfg.hot_sibling_pair = true;
    cfg
}

/// sim_bank.rs's memory loss with a compute crash inside it.
fn memory_loss_crash(seed: u64) -> SimConfig {
    let mut cfg = SimConfig::bank(Mode::Pandora, seed);
    cfg.bank_mut().customers = 24;
    cfg.txs_per_coordinator = 60;
    let mut rng = Rng::new(seed ^ 0xC0DE);
    cfg.faults.memory_failure = Some((rng.below(3) as u16, rng.range_inclusive(20_000, 120_000)));
    cfg.faults.crash_in_memory_loss = Some(rng.below(2) as u16);
    cfg
}

/// sim_suspicion.rs's verdict between join and registration.
fn verdict_before_registration(seed: u64) -> SuspicionConfig {
    let mut c = SuspicionConfig::new(seed);
    c.join_before_register = true;
    c.register_during_recovery = true;
    c.stalls = vec![Stall {
        slot: 0,
        at_ns: 0,
        for_ns: 8 * c.fd_timeout_ns,
    }];
    c
}

fn store(bugs: BugSwitches, mut cfg: SimConfig) -> SimConfig {
    cfg.bugs = bugs;
    cfg.assertions = Some(true);
    cfg
}

fn recovery(bugs: RecoveryBugs, mut cfg: SimConfig) -> SimConfig {
    cfg.faults.recovery_bugs = bugs;
    cfg.assertions = Some(true);
    cfg
}

/// One planted bug: its name, the harness, a seed budget, the invariants
/// expected to fire first, and the run of one seed.
struct Case {
    bug: String,
    harness: &'static str,
    budget: u64,
    expected: &'static [&'static str],
    run: Box<dyn Fn(u64)>,
}

fn sim(
    bug: impl Into<String>,
    harness: &'static str,
    budget: u64,
    expected: &'static [&'static str],
    cfg: impl Fn(u64) -> SimConfig + 'static,
) -> Case {
    Case {
        bug: bug.into(),
        harness,
        budget,
        expected,
        run: Box::new(move |seed| {
            run(&cfg(seed));
        }),
    }
}

fn cases() -> Vec<Case> {
    let b = BugSwitches::default;
    let r = RecoveryBugs::default;
    let mut v = Vec::new();
    for mode in Mode::ALL {
        v.push(sim(
            format!("complicit-abort / {mode}"),
            "sim_bank bank",
            40,
            &["unlock-only-held"],
            move |s| {
                store(
                    BugSwitches {
                        complicit_abort: true,
                        ..b()
                    },
                    SimConfig::bank(mode, s),
                )
            },
        ));
        v.push(sim(
            format!("covert-locks / {mode}"),
            "sim_bank bank",
            40,
            &["validation-unlocked"],
            move |s| {
                store(
                    BugSwitches {
                        covert_locks: true,
                        ..b()
                    },
                    SimConfig::bank(mode, s),
                )
            },
        ));
        v.push(sim(
            format!("relaxed-locks / {mode}"),
            "sim_bank hot pair",
            40,
            &["locks-before-validation"],
            move |s| {
                store(
                    BugSwitches {
                        relaxed_locks: true,
                        ..b()
                    },
                    hot_pair(mode, s),
                )
            },
        ));
    }
    for mode in [Mode::Ford, Mode::Traditional] {
        v.push(sim(
            format!("missing-insert-undo / {mode}"),
            "sim_bank crash, receipts",
            40,
            &["undo-before-write"],
            move |s| {
                let mut cfg = crash_cfg(mode, s);
                cfg.bank_mut().receipt_chance = 0.6;
                store(
                    BugSwitches {
                        missing_insert_undo: true,
                        ..b()
                    },
                    cfg,
                )
            },
        ));
    }
    v.push(sim(
        "logging-without-locking / traditional",
        "sim_bank crash",
        40,
        &["undo-after-lock"],
        move |s| {
            let mut cfg = crash_cfg(Mode::Traditional, s);
            cfg.faults.detect_ns = cfg.faults.detect_ns.min(3_000);
            store(
                BugSwitches {
                    logging_without_locking: true,
                    ..b()
                },
                cfg,
            )
        },
    ));
    v.push(sim(
        "ack-missed-replica",
        "sim_bank cut link",
        200,
        &["ack-on-live-replicas"],
        move |s| {
            let mut cfg = SimConfig::bank(Mode::Pandora, s);
            cfg.txs_per_coordinator = 60;
            let mut rng = Rng::new(s ^ 0xC07);
            let (n, m) = (rng.below(2) as u16, rng.below(3) as u16);
            cfg.faults.cut_link = Some((n, m, rng.range_inclusive(20_000, 120_000)));
            cfg.faults.detect_ns = 20_000;
            store(
                BugSwitches {
                    ack_missed_replica: true,
                    ..b()
                },
                cfg,
            )
        },
    ));
    let pandora_crash = |bugs: RecoveryBugs| move |s| recovery(bugs, crash_cfg(Mode::Pandora, s));
    v.push(sim(
        "skip-log-recovery",
        "sim_bank crash",
        300,
        &["decide-every-record"],
        pandora_crash(RecoveryBugs {
            skip_log_recovery: true,
            ..r()
        }),
    ));
    v.push(sim(
        "always-roll-back",
        "sim_bank crash",
        200,
        &["rollback-unacknowledged", "rollback-all-locked"],
        pandora_crash(RecoveryBugs {
            always_roll_back: true,
            ..r()
        }),
    ));
    v.push(sim(
        "reuse-old-version",
        "sim_bank crash",
        200,
        &["rollback-fresh-version"],
        pandora_crash(RecoveryBugs {
            reuse_old_version: true,
            ..r()
        }),
    ));
    v.push(sim(
        "restore-one-replica",
        "sim_bank crash",
        200,
        &["restore-before-unlock"],
        pandora_crash(RecoveryBugs {
            restore_one_replica: true,
            ..r()
        }),
    ));
    v.push(sim(
        "invalidate-logs-first",
        "sim_bank crash",
        40,
        &["invalidate-last"],
        pandora_crash(RecoveryBugs {
            invalidate_logs_first: true,
            ..r()
        }),
    ));
    v.push(sim(
        "lost-decision / traditional",
        "sim_bank crash, retries",
        1000,
        &["rollback-ours"],
        move |s| {
            let mut cfg = crash_cfg(Mode::Traditional, s);
            cfg.bank_mut().retries = 3;
            cfg.faults.detect_ns = cfg.faults.detect_ns.min(3_000);
            recovery(
                RecoveryBugs {
                    lost_decision: true,
                    ..r()
                },
                cfg,
            )
        },
    ));
    // FORD's trusting recovery does harm only with undo images taken
    // before the lock (sim_bank.rs runs the two together): that bug's own
    // assertion (`undo-after-lock`, above) is off here, so that the row
    // shows what recovery's assertions see.
    v.push(sim(
        "trust-undo-images (+ logging-without-locking) / traditional",
        "sim_bank crash",
        1500,
        &["rollback-ours"],
        move |s| {
            let mut cfg = crash_cfg(Mode::Traditional, s);
            cfg.faults.detect_ns = cfg.faults.detect_ns.min(3_000);
            cfg.bugs = BugSwitches {
                logging_without_locking: true,
                ..b()
            };
            cfg.assertions = Some(false);
            cfg.faults.recovery_bugs = RecoveryBugs {
                trust_undo_images: true,
                ..r()
            };
            cfg.recovery_assertions = Some(true);
            cfg
        },
    ));
    v.push(sim(
        "ignore-lost-primaries",
        "sim_bank memory loss + crash",
        2000,
        &["quiesced-nothing-superseded"],
        move |s| {
            recovery(
                RecoveryBugs {
                    ignore_lost_primaries: true,
                    ..r()
                },
                memory_loss_crash(s),
            )
        },
    ));
    for (name, bugs) in [
        (
            "revocable-fencing",
            FencingBugs {
                revocable_fencing: true,
                ignore_own_failure: false,
            },
        ),
        (
            "revocable-fencing + ignore-own-failure",
            FencingBugs {
                revocable_fencing: true,
                ignore_own_failure: true,
            },
        ),
    ] {
        v.push(Case {
            bug: name.into(),
            harness: "sim_suspicion verdict before registration",
            budget: 20,
            expected: &["lock-ownership", "steal-only-failed"],
            run: Box::new(move |seed| {
                sim_suspicion::run(&SuspicionConfig {
                    bugs,
                    assertions: Some(true),
                    ..verdict_before_registration(seed)
                });
            }),
        });
    }
    v
}

#[test]
fn every_planted_bug_trips_a_local_assertion() {
    quiet_assertions();
    let mut rows = Vec::new();
    let mut missed = Vec::new();
    for c in cases() {
        let hit = (0..c.budget).find_map(|seed| fired(|| (c.run)(seed)).map(|f| (seed, f)));
        match hit {
            Some((seed, (name, msg))) => {
                if !c.expected.contains(&name.as_str()) {
                    missed.push(format!(
                        "{}: {name} fired, expected {:?}",
                        c.bug, c.expected
                    ));
                }
                let detail = msg.split(": ").skip(1).collect::<Vec<_>>().join(": ");
                rows.push(format!(
                    "| {} | {} | {seed} | `{name}` | {detail} |",
                    c.bug, c.harness
                ));
            }
            None => {
                missed.push(format!(
                    "{}: no assertion fired in {} seeds",
                    c.bug, c.budget
                ));
                rows.push(format!(
                    "| {} | {} | — | none in {} seeds | |",
                    c.bug, c.harness, c.budget
                ));
            }
        }
    }
    eprintln!("\n| bug | harness | seed | invariant | message |\n|---|---|---|---|---|");
    for r in &rows {
        eprintln!("{r}");
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// With fencing permanent, coordinators that ignore their own failure stay
/// harmless (sim_suspicion.rs): their verbs fail, and no assertion fires.
#[test]
fn ignoring_ones_own_failure_alone_trips_nothing() {
    for seed in 0..20 {
        let r = sim_suspicion::run(&SuspicionConfig {
            bugs: FencingBugs {
                revocable_fencing: false,
                ignore_own_failure: true,
            },
            assertions: Some(true),
            ..verdict_before_registration(seed)
        });
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}
