//! False suspicion as it really happens, in the seeded simulator: slow nodes
//! that keep posting verbs, verdicts between join and registration,
//! registrations crossing revocations, several suspicions and a crash in one
//! run. Safety (the bank's exact check, replicas, locks, no commit by a
//! fenced incarnation) and liveness (every surviving machine finishes).

use tandem_pandora_lab::sim_suspicion::{
    run, FencingBugs, Stall, SuspicionConfig, SuspicionReport,
};

fn assert_clean(r: &SuspicionReport) {
    assert!(
        r.violations.is_empty(),
        "{} violations, first: {:?}\nreplay: {}",
        r.violations.len(),
        r.violations.first(),
        r.replay
    );
    assert!(r.committed > 0, "nothing committed; replay: {}", r.replay);
}

/// The detector judges node 1 after it joined and before it registered
/// (its heartbeats stall from the start); it registers while the membership
/// is recovering it. A fixed gap (3 timeouts) used to put the registration
/// there; when log recovery got faster it landed after recovery instead, and
/// revocable fencing went uncaught in all 20 runs.
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

#[test]
fn a_verdict_between_join_and_registration_is_safe_and_the_node_comes_back() {
    for seed in 0..20 {
        let r = run(&verdict_before_registration(seed));
        assert_clean(&r);
        assert!(
            r.declared.contains(&1),
            "seed {seed}: node 1 was not judged: {:?}",
            r.declared
        );
        assert!(r.rejoins >= 1, "seed {seed}: node 1 never came back");
    }
}

fn caught(bugs: FencingBugs, cfg: impl Fn(u64) -> SuspicionConfig, seeds: u64) -> usize {
    (0..seeds)
        .filter(|&seed| {
            // The run's checks must catch it (tests/assertions.rs: the asserts).
            !run(&SuspicionConfig {
                bugs,
                assertions: Some(false),
                ..cfg(seed)
            })
            .violations
            .is_empty()
        })
        .count()
}

/// The fencing bug, re-injected: a revoked node may register again.
/// The targeted runs and the random campaign both catch it (lost money,
/// commits by fenced incarnations); with fencing permanent, even coordinators
/// that ignore their own failure stay harmless (their verbs fail).
#[test]
fn with_fencing_that_can_be_undone_the_same_runs_lose_acknowledged_commits() {
    let both = FencingBugs {
        revocable_fencing: true,
        ignore_own_failure: true,
    };
    let revocable = FencingBugs {
        revocable_fencing: true,
        ignore_own_failure: false,
    };
    let ignoring = FencingBugs {
        revocable_fencing: false,
        ignore_own_failure: true,
    };
    assert!(
        caught(both, verdict_before_registration, 20) >= 15,
        "the old behaviour went unnoticed"
    );
    assert!(
        caught(revocable, verdict_before_registration, 20) >= 15,
        "revocable fencing alone went unnoticed"
    );
    assert!(
        caught(revocable, SuspicionConfig::random, 150) > 0,
        "the random campaign misses revocable fencing"
    );
    assert_eq!(
        caught(ignoring, verdict_before_registration, 20),
        0,
        "permanent fencing alone must be safe"
    );
}

#[test]
fn a_false_positive_and_a_crash_in_one_run() {
    for seed in 0..20 {
        let mut c = SuspicionConfig::new(seed);
        c.stalls = vec![Stall {
            slot: 0,
            at_ns: 100_000,
            for_ns: 4 * c.fd_timeout_ns,
        }];
        c.crashes = vec![(1, 100_000 + seed * 1_000)];
        let r = run(&c);
        assert_clean(&r);
        assert!(
            r.declared.contains(&1) && r.declared.contains(&2),
            "seed {seed}: declared {:?}",
            r.declared
        );
    }
}

#[test]
fn both_nodes_suspected() {
    for seed in 0..20 {
        let mut c = SuspicionConfig::new(seed);
        // Long stalls: the detector grants everyone a fresh timeout after
        // running a recovery (a pause of its own), so a short second stall
        // could end before its verdict.
        c.stalls = vec![
            Stall {
                slot: 0,
                at_ns: 80_000,
                for_ns: 12 * c.fd_timeout_ns,
            },
            Stall {
                slot: 1,
                at_ns: 80_000 + seed * 2_000,
                for_ns: 12 * c.fd_timeout_ns,
            },
        ];
        let r = run(&c);
        assert_clean(&r);
        assert!(
            r.declared.contains(&1) && r.declared.contains(&2),
            "seed {seed}: declared {:?}",
            r.declared
        );
        assert!(r.rejoins >= 2, "seed {seed}: both machines must come back");
    }
}

#[test]
fn random_suspicions_crashes_and_crossing_messages() {
    let seeds: u64 = std::env::var("TANDEM_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let (mut several, mut rejoined) = (0, 0);
    for seed in 0..seeds {
        let r = run(&SuspicionConfig::random(seed));
        assert_clean(&r);
        several += (r.declared.len() >= 2) as u32;
        rejoined += (r.rejoins > 0) as u32;
    }
    assert!(
        several > 0 && rejoined > 0,
        "the random faults must reach several suspicions ({several}) and rejoins ({rejoined})"
    );
}
