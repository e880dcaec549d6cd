//! Tier 3, DART over processes (`pandora.txt` §5; DESIGN.md §5 "over
//! processes: kill -9 a compute server at random times. Recovery then runs,
//! and the assertions must still hold"): `tandem litmus --fabric tcp
//! --crash-rate 1` starts memory servers, a membership process and one
//! `tandem litmus-worker` process per compute node, SIGKILLs one worker per
//! run, waits for the membership's log recovery, and checks the assertions
//! and the merged history (the killed worker's in-flight transactions have an
//! unknown outcome).

use std::process::Command;

/// Real processes and a real-time failure detector: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn litmus(extra: &[&str], json: &std::path::Path) -> (bool, String, serde_json::Value) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["litmus", "--store", "pandora", "--fabric", "tcp", "--crash-rate", "1", "--json", json.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let rep = std::fs::read_to_string(json).map(|s| serde_json::from_str(&s).unwrap()).unwrap_or(serde_json::Value::Null);
    (out.status.success(), text, rep)
}

fn n(rep: &serde_json::Value, field: &str) -> u64 {
    rep[field].as_u64().unwrap_or_else(|| panic!("no {field} in {rep}"))
}

#[test]
fn pandora_survives_kill_dash_nine_of_a_compute_server_process() {
    let json = std::env::temp_dir().join(format!("tandem-litmus-kill9-{}.json", std::process::id()));
    let (ok, out, rep) = litmus(&["--seeds", "10", "--compute-nodes", "2", "--clients", "4", "--txs", "60"], &json);
    assert!(ok, "{out}");
    eprintln!("{out}");
    assert_eq!(n(&rep, "runs"), 10, "{out}");
    assert_eq!(n(&rep, "violation_count"), 0, "{out}");
    // Every run killed a worker and the membership recovered it.
    assert_eq!(n(&rep, "crashes"), 10, "{out}");
    // The kills cut transactions (unknown outcome) and the rest committed.
    assert!(n(&rep, "unknown") >= 1, "{out}");
    assert!(n(&rep, "committed") > 3000, "{out}");
    assert!(n(&rep, "asserts_checked") > 500, "{out}");
}

/// The process path can fail: a coordinator bug DART catches without a crash
/// (covert locks, litmus 2) is caught here too, through the workers'
/// journals, with a kill in the run. Not a kill-only bug: the recovery
/// mutants live in the membership process, which cannot be told to inject them.
#[test]
fn a_bug_mutant_is_caught_through_the_worker_journals() {
    let json = std::env::temp_dir().join(format!("tandem-litmus-kill9-mutant-{}.json", std::process::id()));
    let (ok, out, rep) = litmus(
        &["--seeds", "3", "--tests", "2", "--compute-nodes", "2", "--clients", "4", "--txs", "40", "--inject-bug", "covert-locks", "--stop-at-first"],
        &json,
    );
    assert!(ok, "{out}");
    eprintln!("{out}");
    assert!(n(&rep, "violation_count") > 0, "covert locks not caught in 3 runs:\n{out}");
    assert!(out.contains("replay: cargo run --release -- litmus --store pandora --fabric tcp"), "{out}");
    assert!(out.contains("--crash-rate 1"), "{out}");
    // A violating run keeps its journals for inspection and says where.
    let dir = out.split("journals in ").nth(1).and_then(|r| r.split(']').next()).unwrap_or_else(|| panic!("no journal path in:\n{out}"));
    assert!(std::path::Path::new(dir).join("worker-1.jsonl").exists(), "{dir}");
    let _ = std::fs::remove_dir_all(dir);
}
