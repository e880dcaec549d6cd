//! Exhaustive exploration of the engine's own step functions (issue 10):
//! every interleaving of a small script with one loss, one duplicate, one
//! crash and two timer firings keeps Hermes' invariants, and a mutant is found.

use tandem_ddp::explore::{explore, ExploreConfig};
use tandem_ddp::{Bugs, Model};

fn run(model: &str, bugs: Bugs, max_states: usize) -> tandem_ddp::explore::ExploreReport {
    let mut cfg = ExploreConfig::small(Model::parse(model).unwrap());
    cfg.bugs = bugs;
    cfg.max_states = max_states;
    let t = std::time::Instant::now();
    let r = explore(&cfg);
    eprintln!("{model} {bugs:?}: {} states, {} transitions, {} final histories, complete {}, {:.1}s: {:?}", r.states, r.transitions, r.final_histories, r.complete, t.elapsed().as_secs_f64(), r.violation);
    r
}

#[test]
fn lin_synch_and_lin_scope_keep_their_invariants_in_every_interleaving() {
    for model in ["lin-synch", "lin-scope"] {
        let r = run(model, Bugs::default(), 3_000_000);
        assert!(r.violation.is_none(), "{model}: {:?}", r.violation);
        assert!(r.final_histories > 0 && r.states > 1000, "{model}: {r:?}");
    }
}

#[test]
fn the_explorer_finds_a_mutant() {
    let r = run("lin-synch", Bugs { read_in_invalid: true, ..Bugs::default() }, 3_000_000);
    assert!(r.violation.is_some(), "read-in-invalid not found: {r:?}");
}
