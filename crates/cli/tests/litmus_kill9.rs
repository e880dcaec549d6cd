//! Tier 3, DART over processes (Pandora §5; docs/DESIGN.md §5: over processes
//! a compute server gets `kill -9` at a random moment, recovery runs, and the
//! assertions must still hold): `tandem dart --fabric tcp
//! --crash-rate 1` starts memory servers, a membership process and one
//! `tandem litmus-worker` process per compute node, SIGKILLs one worker per
//! run, waits for the membership's log recovery, and checks the assertions
//! and the merged history (the killed worker's in-flight transactions have an
//! unknown outcome). After every run the replica check fails each memory
//! node logically, then `kill -9`s one memory-server process and re-reads
//! every key from the replicas that take over (`tandem_dart::proc_replicas`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use tandem_dart::proc_run::{self, ProcRunConfig, ProcSetup};
use tandem_dart::report::RunReport;
use tandem_dart::Suite;

/// Real processes and a real-time failure detector: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn litmus(
    fabric: &str,
    extra: &[&str],
    json: &std::path::Path,
) -> (bool, String, serde_json::Value) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "dart",
            "--store",
            "pandora",
            "--fabric",
            fabric,
            "--crash-rate",
            "1",
            "--json",
            json.to_str().unwrap(),
        ])
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let rep: serde_json::Value = std::fs::read_to_string(json)
        .map(|s| serde_json::from_str(&s).unwrap())
        .unwrap_or(serde_json::Value::Null);
    if out.status.success() {
        assert_eq!(rep["fabric"], fabric, "{rep}");
    }
    (out.status.success(), text, rep)
}

fn n(rep: &serde_json::Value, field: &str) -> u64 {
    rep[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {rep}"))
}

fn pandora_survives_kill_dash_nine_of_a_compute_server_process(shm: bool) {
    let fabric = if shm { "shm" } else { "tcp" };
    let json = std::env::temp_dir().join(format!(
        "tandem-litmus-kill9-{fabric}-{}.json",
        std::process::id()
    ));
    let (ok, out, rep) = litmus(
        fabric,
        &[
            "--seeds",
            "10",
            "--compute-nodes",
            "2",
            "--clients",
            "4",
            "--txs",
            "60",
        ],
        &json,
    );
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
    // Every run ended with a real memory-server kill, and every key read the same.
    assert_eq!(
        out.matches("killed for the replica check").count(),
        10,
        "{out}"
    );
}

/// The process path can fail: a coordinator bug DART catches without a crash
/// (covert locks, litmus 2) is caught here too, through the workers'
/// journals, with a kill in the run. Not a kill-only bug: the recovery
/// mutants (passed to the membership process) are caught too rarely over
/// processes for a deterministic test; see the replica-check tests below.
fn a_bug_mutant_is_caught_through_the_worker_journals(shm: bool) {
    let fabric = if shm { "shm" } else { "tcp" };
    let json = std::env::temp_dir().join(format!(
        "tandem-litmus-kill9-mutant-{fabric}-{}.json",
        std::process::id()
    ));
    let (ok, out, rep) = litmus(
        fabric,
        &[
            "--seeds",
            "3",
            "--tests",
            "2",
            "--compute-nodes",
            "2",
            "--clients",
            "4",
            "--txs",
            "40",
            "--inject-bug",
            "covert-locks",
            "--stop-at-first",
        ],
        &json,
    );
    assert!(ok, "{out}");
    eprintln!("{out}");
    assert!(
        n(&rep, "violation_count") > 0,
        "covert locks not caught in 3 runs:\n{out}"
    );
    assert!(
        out.contains(&format!(
            "replay: cargo run --release -- dart --store pandora --fabric {fabric}"
        )),
        "{out}"
    );
    assert!(out.contains("--crash-rate 1"), "{out}");
    // A violating run keeps its journals for inspection and says where.
    let dir = out
        .split("journals in ")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .unwrap_or_else(|| panic!("no journal path in:\n{out}"));
    assert!(
        std::path::Path::new(dir).join("worker-1.jsonl").exists(),
        "{dir}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// One process run (2 workers, one killed) called directly, so a test can set
/// the replica check's test hook.
fn proc_run(fabric: &str, seed: u64, corrupt_one_backup: bool) -> RunReport {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = ProcRunConfig {
        setup: ProcSetup {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_tandem")),
            detect_ms: 50.0,
            shm: fabric == "shm",
            net_faults: None,
        },
        bug_names: Vec::new(),
        suite: Arc::new(Suite::parse("all", 2).unwrap()),
        tests: "all".into(),
        instances: 2,
        seed,
        workers: 2,
        clients_per_worker: 4,
        txs_per_client: 40,
        assert_chance: 0.2,
        check_history: true,
        kill: true,
        kill_memory: false,
        replica_check: true,
        corrupt_one_backup,
    };
    proc_run::run(&cfg).expect("process run")
}

fn replica_violations(rep: &RunReport) -> Vec<&str> {
    rep.violations
        .iter()
        .filter(|(t, _)| t == "replica-check")
        .map(|(_, d)| d.as_str())
        .collect()
}

/// The clean run passes the replica check, and the check really killed a
/// memory-server process (the crash note says which).
fn the_replica_check_kills_a_memory_server_and_the_replicas_agree(shm: bool) {
    let fabric = if shm { "shm" } else { "tcp" };
    for seed in [3, 4] {
        let rep = proc_run(fabric, seed, false);
        let note = rep.crash_note.clone().unwrap_or_default();
        assert!(
            rep.violations.is_empty(),
            "seed {seed}: {:?}",
            rep.violations
        );
        assert!(note.contains("kill -9 of worker"), "seed {seed}: {note}");
        assert!(
            note.contains("killed for the replica check ("),
            "seed {seed}: {note}"
        );
        assert!(!note.contains("(0 of"), "the kill moved no read: {note}");
    }
}

/// Diverging replicas made for real (the test hook overwrites one live key's
/// value in its backup only) are reported by the replica check over
/// processes: by the logical failover of that key's primary and by the real
/// kill of the server holding it.
fn diverging_replicas_are_reported_by_the_replica_check_over_processes(shm: bool) {
    let fabric = if shm { "shm" } else { "tcp" };
    let rep = proc_run(fabric, 5, true);
    let note = rep.crash_note.clone().unwrap_or_default();
    assert!(note.contains("test hook: key "), "{note}");
    let found = replica_violations(&rep);
    assert!(
        found
            .iter()
            .any(|d| d.contains("replicas diverge") && d.contains("(logical failover)")),
        "{:?}",
        rep.violations
    );
    assert!(
        found
            .iter()
            .any(|d| d.contains("replicas diverge") && d.contains("killed with kill -9)")),
        "{:?}",
        rep.violations
    );
    // Nothing but the replica check sees it: the primaries are intact.
    assert_eq!(found.len(), rep.violations.len(), "{:?}", rep.violations);
    if let Some(dir) = note.split("journals in ").nth(1) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Memory-server kills among the injected faults. Every run
/// `kill -9`s a memory server mid-run (and a worker): the workers hold,
/// drain and switch primaries, the killed worker is recovered from the live
/// replicas while everyone holds, a replacement is filled and admitted, and
/// DART finds nothing. Without the copy onto the replacement
/// (`skip-rereplication`, injected into the membership process), it does.
fn pandora_survives_kill_dash_nine_of_a_memory_server_process_mid_run(shm: bool) {
    let fabric = if shm { "shm" } else { "tcp" };
    let json = std::env::temp_dir().join(format!(
        "tandem-litmus-memkill-{fabric}-{}.json",
        std::process::id()
    ));
    let args = [
        "--memory-kill-rate",
        "1",
        "--compute-nodes",
        "2",
        "--clients",
        "4",
        "--txs",
        "60",
    ];
    let (ok, out, rep) = litmus(fabric, &[&args[..], &["--seeds", "8"]].concat(), &json);
    assert!(ok, "{out}");
    assert_eq!(n(&rep, "runs"), 8, "{out}");
    assert_eq!(n(&rep, "violation_count"), 0, "{out}");
    assert_eq!(
        out.matches("mid-run; its replacement was filled and admitted")
            .count(),
        8,
        "{out}"
    );
    assert!(n(&rep, "committed") > 2000, "{out}");
    let (ok, out, rep) = litmus(
        fabric,
        &[
            &args[..],
            &["--seeds", "3", "--inject-bug", "skip-rereplication"],
        ]
        .concat(),
        &json,
    );
    assert!(ok, "{out}");
    assert!(
        n(&rep, "violation_count") > 0,
        "an empty replacement not caught in 3 runs:\n{out}"
    );
    assert!(
        out.contains("--memory-kill-rate 1"),
        "the replay says so:\n{out}"
    );
}

// Every test above, over TCP and on the shm fabric.
tandem_fabric::on_tcp_and_shm!(
    pandora_survives_kill_dash_nine_of_a_compute_server_process,
    a_bug_mutant_is_caught_through_the_worker_journals,
    the_replica_check_kills_a_memory_server_and_the_replicas_agree,
    diverging_replicas_are_reported_by_the_replica_check_over_processes,
    pandora_survives_kill_dash_nine_of_a_memory_server_process_mid_run
);
