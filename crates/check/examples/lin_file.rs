//! Check a recorded history (JSON lines) for linearizability:
//! `cargo run --release -p tandem-check --example lin_file -- h.jsonl [max_states]`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ops = tandem_check::read_jsonl(&args[1]).expect("history");
    let mut cfg = tandem_check::LinConfig::default();
    if let Some(n) = args.get(2) {
        cfg.max_states = n.parse().expect("max_states");
    }
    let t0 = std::time::Instant::now();
    match tandem_check::check_linearizable_with(&ops, &cfg) {
        Ok(s) => println!("linearizable: {s:?} in {:?}", t0.elapsed()),
        Err(v) => println!("not decided or violated: {v} in {:?}", t0.elapsed()),
    }
}
