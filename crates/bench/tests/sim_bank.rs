//! Tier-2 simulation tests: many seeds of concurrent bank transactions per
//! mode, with torn reads and random verb delays, checking every invariant.
//! `TANDEM_SIM_SEEDS=N` raises the seed count (the CI default is bounded).

use tandem_bench::sim_bank::{run, SimBankConfig};
use tandem_dkvs::{BugSwitches, Mode};

fn seeds() -> u64 {
    std::env::var("TANDEM_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30)
}

fn all_seeds_pass(mode: Mode) {
    let mut committed = 0;
    for seed in 0..seeds() {
        let r = run(&SimBankConfig::new(mode, seed));
        assert!(r.violations.is_empty(), "{mode} seed {seed} violated invariants:\n{}\nreplay: {}", r.violations.join("\n"), r.replay);
        committed += r.committed;
    }
    assert!(committed > seeds() * 50, "{mode}: too few commits ({committed}) for the run to mean anything");
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
fn hot_pair(mode: Mode, seed: u64) -> SimBankConfig {
    let mut cfg = SimBankConfig::new(mode, seed);
    cfg.bank.customers = 24;
    cfg.hot_sibling_pair = true;
    cfg
}

#[test]
fn every_mode_keeps_invariants_under_concentrated_write_skew() {
    for mode in Mode::ALL {
        for seed in 0..seeds() {
            let r = run(&hot_pair(mode, seed));
            assert!(r.violations.is_empty(), "{mode} seed {seed}:\n{}\nreplay: {}", r.violations.join("\n"), r.replay);
        }
    }
}

/// Each re-injected C1 bug must be caught within a bounded number of seeds.
/// Seeds are fixed, so the outcome is deterministic, not flaky.
fn bug_is_caught(mode: Mode, bugs: BugSwitches, budget: u64) {
    for seed in 0..budget {
        let mut cfg = if bugs.relaxed_locks { hot_pair(mode, seed) } else { SimBankConfig::new(mode, seed) };
        cfg.bugs = bugs;
        let r = run(&cfg);
        if !r.violations.is_empty() {
            eprintln!("{mode} {bugs:?} caught at seed {seed}: {}\n  replay: {}", r.violations[0], r.replay);
            return;
        }
    }
    panic!("{mode} with {bugs:?}: no violation in {budget} seeds");
}

#[test]
fn complicit_abort_is_caught() {
    for mode in Mode::ALL {
        bug_is_caught(mode, BugSwitches { complicit_abort: true, ..Default::default() }, 40);
    }
}

#[test]
fn covert_locks_are_caught() {
    for mode in Mode::ALL {
        bug_is_caught(mode, BugSwitches { covert_locks: true, ..Default::default() }, 40);
    }
}

#[test]
fn relaxed_locks_are_caught() {
    for mode in Mode::ALL {
        bug_is_caught(mode, BugSwitches { relaxed_locks: true, ..Default::default() }, 1500);
    }
}

#[test]
fn a_seed_replays_identically() {
    let a = run(&SimBankConfig::new(Mode::Pandora, 7));
    let b = run(&SimBankConfig::new(Mode::Pandora, 7));
    assert_eq!((a.committed, a.aborted, a.sim_time_ns, a.stats.verbs), (b.committed, b.aborted, b.sim_time_ns, b.stats.verbs));
}
