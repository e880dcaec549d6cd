//! Every implemented model keeps its promises under message faults and
//! crashes, in seeded simulations (spec §13).

use tandem_ddp::simcheck::{run, CheckConfig, Crash};
use tandem_ddp::Model;

fn seeds() -> u64 {
    std::env::var("DDP_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(6)
}

fn clean(model: &str, crash: Crash) {
    let model = Model::parse(model).unwrap();
    for seed in 0..seeds() {
        let mut cfg = CheckConfig::new(model, seed);
        cfg.crash = crash;
        let r = run(&cfg);
        assert!(r.violations.is_empty(), "{model} seed {seed}: {}\nreplay: {}", r.violations.join("\n"), r.replay);
        assert!(r.completed > cfg.sessions * cfg.ops / 2, "{model} seed {seed}: only {} completed", r.completed);
    }
}

#[test]
fn lin_synch_without_crashes() {
    clean("lin-synch", Crash::None);
}

#[test]
fn lin_synch_one_crash() {
    clean("lin-synch", Crash::One);
}

#[test]
fn lin_synch_whole_cluster_crash() {
    clean("lin-synch", Crash::All);
}

#[test]
fn every_implemented_model_keeps_its_promises() {
    for model in Model::all().into_iter().filter(|m| m.implemented()) {
        for crash in [Crash::None, Crash::One, Crash::All] {
            clean(&model.to_string(), crash);
        }
    }
}
