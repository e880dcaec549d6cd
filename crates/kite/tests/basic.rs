//! Kite end to end in the simulator: each operation alone, then seeded
//! runs under faults.

use tandem_kite::simcheck::{run_seed, CheckOpts, Faults};

#[test]
fn fault_free_runs_complete() {
    let opts = CheckOpts {
        faults: Some(Faults::default()),
        ..CheckOpts::default()
    };
    for seed in 0..3 {
        let r = run_seed(seed, &opts);
        assert!(r.violation.is_none(), "seed {seed}: {:?}", r.violation);
        assert!(r.ops > 1000, "seed {seed}: only {} ops", r.ops);
        eprintln!("seed {seed}: {} ops {:?}", r.ops, r.stats);
    }
}

#[test]
fn faulty_runs_complete() {
    for seed in 0..8 {
        let r = run_seed(seed, &CheckOpts::default());
        eprintln!(
            "seed {seed} [{}]: {} ops {:?}",
            r.faults.describe(),
            r.ops,
            r.stats
        );
        assert!(r.violation.is_none(), "seed {seed}: {:?}", r.violation);
    }
}
