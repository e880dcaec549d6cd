//! Tier-2 simulation tests of the OLTP workloads (SmallBank, TATP, TPC-C;
//! DESIGN.md §6): seeded runs with a compute-node crash and recovery must keep
//! every workload's consistency check, and each check must catch a re-injected
//! store bug within a stated seed budget (STYLE.md: every test must be able to
//! fail). `TANDEM_SIM_SEEDS=N` raises the seed count of the passing runs.

use tandem_bench::sim_workload::{run, SimWorkloadConfig, SimWorkloadReport};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{BugSwitches, Mode};
use tandem_workloads::smallbank::SmallBankSpec;
use tandem_workloads::tatp::TatpSpec;
use tandem_workloads::tpcc::TpccSpec;

fn seeds(default: u64) -> u64 {
    std::env::var("TANDEM_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// 1 000 accounts, FORD's 4 % hot set, balances small enough that
/// SendPayment rollbacks and WriteCheck penalties happen.
fn smallbank() -> WorkloadSpec {
    WorkloadSpec::SmallBank(SmallBankSpec { initial_balance_cents: 1_000, ..SmallBankSpec::scaled(1_000) })
}

fn tatp() -> WorkloadSpec {
    WorkloadSpec::Tatp(TatpSpec { subscribers: 1_000, ..TatpSpec::default() })
}

fn tpcc() -> WorkloadSpec {
    WorkloadSpec::Tpcc(TpccSpec::tiny(1))
}

/// Simulated time one transaction takes per coordinator, roughly (for
/// placing crashes inside the run).
fn tx_ns(w: &WorkloadSpec) -> u64 {
    match w {
        WorkloadSpec::Tpcc(_) => 100_000,
        _ => 25_000,
    }
}

/// A run whose compute node 1 crashes somewhere in the first half of its
/// transactions, verbs in flight or not.
fn crashing(mode: Mode, w: WorkloadSpec, seed: u64, txs: u32) -> SimWorkloadConfig {
    let span = tx_ns(&w) * txs as u64 / 2;
    let mut cfg = SimWorkloadConfig::new(mode, w, seed);
    cfg.txs_per_coordinator = txs;
    cfg.crash = Some((1, span / 10 + seed.wrapping_mul(7_919_993) % span));
    cfg
}

fn assert_clean(r: &SimWorkloadReport) {
    assert!(r.violations.is_empty(), "violations:\n{}\nreplay: {}", r.violations.join("\n"), r.replay);
}

fn crash_runs_keep_the_check(mode: Mode, w: fn() -> WorkloadSpec, txs: u32, n_seeds: u64) {
    let (mut committed, mut in_doubt) = (0, 0);
    let n_seeds = seeds(n_seeds);
    for seed in 0..n_seeds {
        let r = run(&crashing(mode, w(), seed, txs));
        assert_clean(&r);
        assert!(r.recovered);
        committed += r.committed;
        in_doubt += r.in_doubt;
        let l = r.outcome.as_ref().and_then(|o| o.ledger()).expect("an OLTP ledger");
        eprintln!(
            "  seed {seed}: {} commits {:?}, {} aborted, {} rolled back, {} in doubt",
            r.committed, l.committed_by_type, l.aborted, l.rolled_back, r.in_doubt
        );
    }
    eprintln!("{mode}: {committed} commits, {in_doubt} in-doubt transactions over {n_seeds} seeds");
    // The victim runs about a quarter of its transactions; conflicts abort some of the rest.
    assert!(committed > n_seeds * txs as u64 / 2, "{mode}: too few commits ({committed}) for the runs to mean anything");
}

/// Find a seed in `0..budget` whose check reports a violation.
fn bug_is_caught(what: &str, budget: u64, cfg: impl Fn(u64) -> SimWorkloadConfig) {
    for seed in 0..budget {
        let r = run(&cfg(seed));
        if !r.violations.is_empty() {
            eprintln!("{what}: caught at seed {seed}: {}\n  replay: {}", r.violations[0], r.replay);
            return;
        }
    }
    panic!("{what}: no violation in {budget} seeds");
}

/// DESIGN.md §4.5: false positives must be safe. The suspected node keeps
/// running until it is revoked; its verbs then fail, and recovery treats it
/// as crashed. Every mode, SmallBank and TPC-C.
#[test]
fn false_positives_are_safe_in_every_mode() {
    for mode in [Mode::Pandora, Mode::Ford, Mode::Traditional] {
        for (w, txs, n) in [(smallbank as fn() -> WorkloadSpec, 60, 4), (tpcc as fn() -> WorkloadSpec, 40, 3)] {
            for seed in 0..seeds(n) {
                let mut cfg = crashing(mode, w(), seed, txs);
                cfg.false_positive = true;
                let r = run(&cfg);
                assert_clean(&r);
                assert!(r.recovered, "{}", r.replay);
            }
        }
    }
}

// ---- SmallBank ----

#[test]
fn smallbank_survives_a_compute_crash_in_every_mode() {
    for mode in Mode::ALL {
        crash_runs_keep_the_check(mode, smallbank, 40, 8);
    }
}

#[test]
fn smallbank_check_catches_complicit_abort() {
    for mode in [Mode::Pandora, Mode::Ford] {
        bug_is_caught(&format!("smallbank / {mode} / complicit abort"), 10, |seed| {
            let mut cfg = SimWorkloadConfig::new(mode, smallbank(), seed);
            cfg.txs_per_coordinator = 60;
            cfg.bugs = BugSwitches { complicit_abort: true, ..Default::default() };
            cfg
        });
    }
}

// ---- TATP ----

#[test]
fn tatp_survives_a_compute_crash() {
    crash_runs_keep_the_check(Mode::Pandora, tatp, 60, 8);
    for mode in [Mode::Ford, Mode::Traditional] {
        crash_runs_keep_the_check(mode, tatp, 60, 2);
    }
}

#[test]
fn tatp_check_catches_complicit_abort() {
    bug_is_caught("tatp / pandora / complicit abort", 10, |seed| {
        // Few subscribers, so that updates of one row collide.
        let mut cfg = SimWorkloadConfig::new(Mode::Pandora, WorkloadSpec::Tatp(TatpSpec { subscribers: 8, ..TatpSpec::default() }), seed);
        cfg.txs_per_coordinator = 80;
        cfg.bugs = BugSwitches { complicit_abort: true, ..Default::default() };
        cfg
    });
}

// ---- TPC-C ----

#[test]
fn tpcc_survives_a_compute_crash() {
    crash_runs_keep_the_check(Mode::Pandora, tpcc, 40, 6);
    // Remote order lines and remote payments.
    crash_runs_keep_the_check(Mode::Pandora, || WorkloadSpec::Tpcc(TpccSpec::tiny(2)), 40, 3);
    for mode in [Mode::Ford, Mode::Traditional] {
        crash_runs_keep_the_check(mode, tpcc, 40, 2);
    }
}

#[test]
fn tpcc_check_catches_complicit_abort() {
    bug_is_caught("tpcc / pandora / complicit abort", 10, |seed| {
        let mut cfg = SimWorkloadConfig::new(Mode::Pandora, tpcc(), seed);
        cfg.txs_per_coordinator = 30;
        cfg.bugs = BugSwitches { complicit_abort: true, ..Default::default() };
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
