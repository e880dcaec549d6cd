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

#[test]
fn lin_synch_and_lin_scope_keep_their_invariants_in_every_interleaving() {
    for model in ["lin-synch", "lin-scope"] {
        for fault in ["loss", "duplicate", "crash"] {
            let r = run(model, fault, Bugs::default());
            assert!(r.violation.is_none(), "{model} {fault}: {:?}", r.violation);
            assert!(
                r.complete,
                "{model} {fault}: the state space was not exhausted: {r:?}"
            );
        }
    }
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
