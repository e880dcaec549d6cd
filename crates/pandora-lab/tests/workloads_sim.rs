//! Tier-2 simulation tests of the OLTP workloads (SmallBank, TATP, TPC-C;
//! docs/DESIGN.md §6): seeded runs with a compute-node crash and recovery must
//! keep every workload's consistency check, and each check must catch a
//! re-injected store bug within a stated seed budget (docs/DESIGN.md §1
//! principle 4: every check must be able to fail). `TANDEM_SIM_SEEDS=N` raises
//! the seed count of the passing runs.

use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{BugSwitches, Mode};
use tandem_pandora_lab::sim_run::{run, SimConfig, SimReport};

fn seeds(default: u64) -> u64 {
    std::env::var("TANDEM_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One of the simulation's workload presets (`sim_run::preset`).
fn sim(mode: Mode, preset: &str, seed: u64) -> SimConfig {
    SimConfig::new(mode, preset, seed).expect("a preset")
}

/// A run whose compute node 1 crashes somewhere in the first half of its
/// clients' run, verbs in flight or not; detection after 20 µs. A run of
/// the same seed without the fault says when the clients start and how
/// long node 1's run: an estimate per transaction put the crash of some
/// seeds after node 1 had finished and left (nothing to detect then).
fn crashing(mode: Mode, preset: &str, seed: u64, txs: u32) -> SimConfig {
    let mut cfg = sim(mode, preset, seed);
    cfg.txs_per_coordinator = txs;
    let dry = run(&cfg);
    let span = (dry.node_done_ns[1] / 2).max(1);
    cfg.faults.crash = Some((
        1,
        dry.clients_start_ns + span / 10 + seed.wrapping_mul(7_919_993) % span,
    ));
    cfg.faults.detect_ns = 20_000;
    cfg
}

fn assert_clean(r: &SimReport) {
    assert!(
        r.violations.is_empty(),
        "violations:\n{}\nreplay: {}",
        r.violations.join("\n"),
        r.replay
    );
}

fn crash_runs_keep_the_check(mode: Mode, w: &str, txs: u32, n_seeds: u64) {
    let (mut committed, mut in_doubt) = (0, 0);
    let n_seeds = seeds(n_seeds);
    for seed in 0..n_seeds {
        let r = run(&crashing(mode, w, seed, txs));
        assert_clean(&r);
        assert_eq!(r.recoveries.len(), 1, "{}", r.replay);
        committed += r.committed;
        in_doubt += r.in_doubt;
        let l = r
            .outcome
            .as_ref()
            .and_then(|o| o.ledger())
            .expect("an OLTP ledger");
        eprintln!(
            "  seed {seed}: {} commits {:?}, {} aborted, {} rolled back, {} in doubt",
            r.committed, l.committed_by_type, l.aborted, l.rolled_back, r.in_doubt
        );
    }
    eprintln!("{mode}: {committed} commits, {in_doubt} in-doubt transactions over {n_seeds} seeds");
    // The victim runs about a quarter of its transactions; conflicts abort some of the rest.
    assert!(
        committed > n_seeds * txs as u64 / 2,
        "{mode}: too few commits ({committed}) for the runs to mean anything"
    );
}

/// Find a seed in `0..budget` whose check reports a violation.
fn bug_is_caught(what: &str, budget: u64, cfg: impl Fn(u64) -> SimConfig) {
    for seed in 0..budget {
        // The workload's check must catch it, not the coordinators' assertions.
        let r = run(&SimConfig {
            assertions: Some(false),
            ..cfg(seed)
        });
        if !r.violations.is_empty() {
            eprintln!(
                "{what}: caught at seed {seed}: {}\n  replay: {}",
                r.violations[0], r.replay
            );
            return;
        }
    }
    panic!("{what}: no violation in {budget} seeds");
}

/// docs/DESIGN.md §4.5: false positives must be safe. The suspected node keeps
/// running until it is revoked; its verbs then fail, and recovery treats it
/// as crashed. Every mode, SmallBank and TPC-C.
#[test]
fn false_positives_are_safe_in_every_mode() {
    for mode in [Mode::Pandora, Mode::Ford, Mode::Traditional] {
        for (w, txs, n) in [("smallbank", 60, 4), ("tpcc", 40, 3)] {
            for seed in 0..seeds(n) {
                let mut cfg = crashing(mode, w, seed, txs);
                cfg.faults.false_positive = true;
                let r = run(&cfg);
                assert_clean(&r);
                assert_eq!(r.recoveries.len(), 1, "{}", r.replay);
            }
        }
    }
}

// ---- SmallBank ----

#[test]
fn smallbank_survives_a_compute_crash_in_every_mode() {
    for mode in Mode::ALL {
        crash_runs_keep_the_check(mode, "smallbank", 40, 8);
    }
}

#[test]
fn smallbank_check_catches_complicit_abort() {
    for mode in [Mode::Pandora, Mode::Ford] {
        bug_is_caught(
            &format!("smallbank / {mode} / complicit abort"),
            10,
            |seed| {
                let mut cfg = sim(mode, "smallbank", seed);
                cfg.txs_per_coordinator = 60;
                cfg.bugs = BugSwitches {
                    complicit_abort: true,
                    ..Default::default()
                };
                cfg
            },
        );
    }
}

// ---- TATP ----

#[test]
fn tatp_survives_a_compute_crash() {
    crash_runs_keep_the_check(Mode::Pandora, "tatp", 60, 8);
    for mode in [Mode::Ford, Mode::Traditional] {
        crash_runs_keep_the_check(mode, "tatp", 60, 2);
    }
}

#[test]
fn tatp_check_catches_complicit_abort() {
    bug_is_caught("tatp / pandora / complicit abort", 10, |seed| {
        // Few subscribers, so that updates of one row collide.
        let mut cfg = sim(Mode::Pandora, "tatp-hot", seed);
        cfg.txs_per_coordinator = 80;
        cfg.bugs = BugSwitches {
            complicit_abort: true,
            ..Default::default()
        };
        cfg
    });
}

// ---- TPC-C ----

#[test]
fn tpcc_survives_a_compute_crash() {
    crash_runs_keep_the_check(Mode::Pandora, "tpcc", 40, 6);
    // Remote order lines and remote payments.
    crash_runs_keep_the_check(Mode::Pandora, "tpcc-2", 40, 3);
    for mode in [Mode::Ford, Mode::Traditional] {
        crash_runs_keep_the_check(mode, "tpcc", 40, 2);
    }
}

/// Bounded history under crashes: archiving deletes orders, lines and
/// history rows, so reclamation runs beside recovery.
#[test]
fn tpcc_bounded_survives_a_compute_crash() {
    crash_runs_keep_the_check(Mode::Pandora, "tpcc-bounded", 40, 6);
    crash_runs_keep_the_check(Mode::Ford, "tpcc-bounded", 40, 2);
}

#[test]
fn tpcc_check_catches_complicit_abort() {
    bug_is_caught("tpcc / pandora / complicit abort", 10, |seed| {
        let mut cfg = sim(Mode::Pandora, "tpcc", seed);
        cfg.txs_per_coordinator = 30;
        cfg.bugs = BugSwitches {
            complicit_abort: true,
            ..Default::default()
        };
        cfg
    });
}

// ---- Selection by name (the CLI's entry point) ----

#[test]
fn workloads_are_chosen_by_name() {
    for name in WorkloadSpec::NAMES {
        let w = WorkloadSpec::from_name(name, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(w.name(), name);
    }
    match WorkloadSpec::from_name("smallbank", Some(1_000)) {
        Ok(WorkloadSpec::SmallBank(s)) => assert_eq!((s.accounts, s.hot_accounts), (1_000, 40)),
        other => panic!("{other:?}"),
    }
    match WorkloadSpec::from_name("tpcc", Some(2)) {
        Ok(WorkloadSpec::Tpcc(t)) => assert_eq!((t.warehouses, t.tables().len()), (2, 12)),
        other => panic!("{other:?}"),
    }
    assert!(WorkloadSpec::from_name("tpch", None).is_err());
    assert!(WorkloadSpec::from_name("smallbank", Some(1)).is_err());
}
