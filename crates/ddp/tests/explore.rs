//! Exhaustive exploration of the engine's own step functions (`src/explore.rs`):
//! at 3 nodes, two concurrent writes to one key and two reads, every
//! interleaving (FIFO links) with one message loss, or one duplicate, or one node crash
//! (and a new configuration), plus a timer firing, keeps Hermes'
//! invariants and linearizability; a mutant is found.

use tandem_ddp::explore::{explore, ExploreConfig, ExploreReport};
use tandem_ddp::{Bugs, Model};

/// A mutant's exploration has the engine's assertions off: the explorer's
/// own checks must find it.
fn run(model: &str, fault: &str, bugs: Bugs) -> ExploreReport {
    let mut cfg = ExploreConfig::small(Model::parse(model).unwrap(), fault);
    (cfg.bugs, cfg.assertions) = (bugs, bugs == Bugs::default());
    let t = std::time::Instant::now();
    let r = explore(&cfg);
    eprintln!(
        "{model} with one {fault}: {} states, {} transitions, {} final histories, complete {}, {:.1}s{}",
        r.states,
        r.transitions,
        r.final_histories,
        r.complete,
        t.elapsed().as_secs_f64(),
        r.violation.as_deref().map(|v| format!(": {v}")).unwrap_or_default()
    );
    r
}

/// Every interleaving of `model` with one `fault` keeps the invariants,
/// and the state space is exhausted.
fn clean(model: &str, fault: &str) {
    let r = run(model, fault, Bugs::default());
    assert!(r.violation.is_none(), "{model} {fault}: {:?}", r.violation);
    assert!(
        r.complete,
        "{model} {fault}: the state space was not exhausted: {r:?}"
    );
}

// One test per model and fault, so that the test threads share them out.
#[test]
fn lin_synch_keeps_its_invariants_in_every_interleaving_with_a_loss() {
    clean("lin-synch", "loss");
}

#[test]
fn lin_synch_keeps_its_invariants_in_every_interleaving_with_a_duplicate() {
    clean("lin-synch", "duplicate");
}

#[test]
fn lin_synch_keeps_its_invariants_in_every_interleaving_with_a_crash() {
    clean("lin-synch", "crash");
}

#[test]
fn lin_scope_keeps_its_invariants_in_every_interleaving_with_a_loss() {
    clean("lin-scope", "loss");
}

#[test]
fn lin_scope_keeps_its_invariants_in_every_interleaving_with_a_duplicate() {
    clean("lin-scope", "duplicate");
}

#[test]
fn lin_scope_keeps_its_invariants_in_every_interleaving_with_a_crash() {
    clean("lin-scope", "crash");
}

#[test]
fn the_explorer_finds_a_mutant() {
    let r = run(
        "lin-synch",
        "loss",
        Bugs {
            read_in_invalid: true,
            ..Bugs::default()
        },
    );
    assert!(r.violation.is_some(), "read-in-invalid not found: {r:?}");
}
