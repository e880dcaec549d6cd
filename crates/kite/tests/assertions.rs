//! The node's invariant assertions (src/invariants.rs) fire on the planted
//! bugs: every [`Mutant`] runs, assertions on, under the seeded simulation
//! its checker test uses (tests/mutants.rs: `simcheck` with the fault that
//! exposes it), then, if no assertion fired there, under random-order
//! exploration (tests/explore.rs). Each run is under `catch_unwind`; the
//! table says which invariant fired first, at which seed. The correct
//! protocol runs the same seeds and trips none (tests/basic.rs, explore.rs
//! and the sweeps with `KITE_EXPLORE_SEEDS` run it further).
//!
//! Every mutant is caught by a local assertion: the ten bugs each break a
//! rule one node can see at the moment it breaks it (a barrier skipped, a
//! bump skipped, a ballot below the promise, a value returned that too few
//! replicas hold, ...). The four regressions that the history checkers find
//! only in hand-scheduled scenarios (docs/KITE.md, "Five interleavings") are
//! caught here in seeded runs, since the assertion needs the rule broken,
//! not its consequence observed.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tandem_kite::explore::{explore_seed, ExploreOpts};
use tandem_kite::simcheck::{run_seed, CheckOpts, Faults};
use tandem_kite::{KiteConfig, Mutant, INVARIANTS};

/// Seeds per harness before giving up.
const SIM_SEEDS: u64 = 60;
const EXPLORE_SEEDS: u64 = 2_000;

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

/// Print assertion panics as one line (the table has them); other panics
/// as usual.
fn quiet_assertions() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        let name = msg.split(':').next().unwrap_or("");
        if !INVARIANTS.contains(&name) {
            default(info);
        }
    }));
}

/// The faults tests/mutants.rs runs each mutant under (`None`: drawn per
/// seed, for the four the checkers need scenarios for).
fn faults(m: Mutant) -> Option<Faults> {
    let f = Faults::default();
    match m {
        Mutant::NoReleaseBarrier | Mutant::StaleCover => Some(Faults {
            partition: true,
            ..f
        }),
        Mutant::SkipDelinquencyCheck | Mutant::NoSlowPathRefresh => {
            Some(Faults { sleep: true, ..f })
        }
        Mutant::AcceptLowerBallot => Some(f),
        Mutant::NoWriteBack => Some(Faults { slow: true, ..f }),
        _ => None,
    }
}

fn cfg(m: Option<Mutant>) -> KiteConfig {
    KiteConfig {
        mutant: m,
        assertions: Some(true),
        ..CheckOpts::default().cfg
    }
}

struct Row {
    mutant: &'static str,
    harness: &'static str,
    seed: u64,
    invariant: String,
    message: String,
}

/// The first seed at which an assertion fires with `m` planted.
fn first_firing(m: Mutant) -> Option<Row> {
    let opts = CheckOpts {
        faults: faults(m),
        cfg: cfg(Some(m)),
        ..CheckOpts::default()
    };
    let row = |harness, seed, (invariant, message)| Row {
        mutant: m.name(),
        harness,
        seed,
        invariant,
        message,
    };
    let sim = (1..=SIM_SEEDS).find_map(|seed| {
        fired(|| {
            run_seed(seed, &opts);
        })
        .map(|f| row("simcheck", seed, f))
    });
    sim.or_else(|| {
        let o = ExploreOpts {
            cfg: KiteConfig {
                mutant: Some(m),
                assertions: Some(true),
                ..KiteConfig::default()
            },
            ..ExploreOpts::default()
        };
        (0..EXPLORE_SEEDS).find_map(|seed| {
            fired(|| {
                let _ = explore_seed(seed, &o);
            })
            .map(|f| row("explore", seed, f))
        })
    })
}

#[test]
fn every_mutant_trips_a_local_assertion() {
    quiet_assertions();
    // The invariant each mutant breaks first (another firing first would
    // mean a second rule broken, worth a look, but not a failure).
    let expected: [(Mutant, &[&str]); 10] = [
        (Mutant::NoReleaseBarrier, &["release-barrier"]),
        (Mutant::SkipDelinquencyCheck, &["delinquent-acquire"]),
        (
            Mutant::AcceptLowerBallot,
            &["paxos-promise", "paxos-commit-agreement"],
        ),
        (Mutant::NoWriteBack, &["acquire-majority"]),
        (Mutant::NoSlowPathRefresh, &["fast-path-epoch"]),
        (Mutant::HelperDropsDm, &["paxos-helper-value"]),
        (Mutant::NoOwnBitAfterPropose, &["own-bit"]),
        (Mutant::CompleteOnMine, &["rmw-commit-majority"]),
        (Mutant::ResetAll, &["reset-bit-targets"]),
        (Mutant::StaleCover, &["dm-cover"]),
    ];
    let mut rows = Vec::new();
    let mut missed = Vec::new();
    for (m, names) in expected {
        match first_firing(m) {
            Some(r) if names.contains(&r.invariant.as_str()) => rows.push(r),
            Some(r) => {
                missed.push(format!(
                    "{}: {} fired, expected {names:?}",
                    m.name(),
                    r.invariant
                ));
                rows.push(r);
            }
            None => missed.push(format!("{}: no assertion fired", m.name())),
        }
    }
    eprintln!("\n| mutant | harness | seed | invariant | message |\n|---|---|---|---|---|");
    for r in &rows {
        let first = r.message.split(": ").skip(1).collect::<Vec<_>>().join(": ");
        eprintln!(
            "| {} | {} | {} | `{}` | {} |",
            r.mutant, r.harness, r.seed, r.invariant, first
        );
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// The correct protocol, assertions on, through the same seeds with faults
/// drawn per seed: no assertion fires (the checkers' own tests run it too).
/// `KITE_ASSERT_SEEDS=N` runs N seeds of the simulation (default 20).
#[test]
fn the_correct_protocol_trips_none_on_the_same_seeds() {
    let opts = CheckOpts {
        cfg: cfg(None),
        ..CheckOpts::default()
    };
    let seeds: u64 = std::env::var("KITE_ASSERT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for seed in 1..=seeds {
        let r = run_seed(seed, &opts);
        assert!(r.violation.is_none(), "seed {seed}: {:?}", r.violation);
    }
    let o = ExploreOpts {
        cfg: KiteConfig {
            assertions: Some(true),
            ..KiteConfig::default()
        },
        ..ExploreOpts::default()
    };
    for seed in 0..200 {
        explore_seed(seed, &o).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}
