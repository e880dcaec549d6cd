//! `tandem compare --system ddp` against real servers: etcd with and
//! without WAL fsync and Redis with two replicas (started through
//! `scripts/peers.sh start ddp`), Tandem as five `tandem node` processes. A
//! short YCSB-A run (ycsb-b differs only in its read ratio) must give every
//! row operations, and bad input a clear error. A peer that cannot be installed (peers.sh exit 3)
//! skips the run, except under `$CI`.

use std::process::Command;

mod common;
use common::{fails_with, tandem, workspace};

#[test]
fn bad_input_is_refused_before_anything_runs() {
    fails_with(
        &["compare", "--system", "ddp", "--workload", "ycsb-z"],
        "unknown workload 'ycsb-z'",
    );
    fails_with(
        &["compare", "--system", "ddp", "--clients", "0"],
        "--clients must be at least 1",
    );
    fails_with(
        &["compare", "--system", "ddp", "--fsync", "sometimes"],
        "unknown --fsync 'sometimes'",
    );
    fails_with(
        &["compare", "--system", "mongo"],
        "unknown --system 'mongo'",
    );
}

/// Start the peers; `false` (skip) only when one cannot be installed outside CI.
fn start_peers() -> bool {
    let out = Command::new("bash")
        .arg(workspace().join("scripts/peers.sh"))
        .args(["start", "ddp"])
        .output()
        .expect("run peers.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => true,
        Some(3) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "skipped: a peer cannot be installed here: {}",
                stderr.trim()
            );
            false
        }
        _ => panic!(
            "`bash scripts/peers.sh start ddp` failed ({}):\n{stderr}",
            out.status
        ),
    }
}

#[test]
fn compare_ddp_gives_every_row_operations() {
    if !start_peers() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tandem-compare-ddp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("c.json");
    let nvm = dir.join("nvm");
    let out = tandem(&[
        "compare",
        "--system",
        "ddp",
        "--workload",
        "ycsb-a",
        "--records",
        "200",
        "--clients",
        "4",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--json",
        json.to_str().unwrap(),
        "--nvm-dir",
        nvm.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ids = [
        "tandem-lin-synch-nvm",
        "etcd-nofsync",
        "tandem-lin-synch-fsync",
        "etcd-fsync",
        "tandem-eventual-eventual-nvm",
        "redis-async",
        "redis-wait2",
    ];
    let workloads = c["workloads"].as_array().unwrap();
    assert_eq!(workloads.len(), 1, "ycsb-a");
    for w in workloads {
        let rows = w["rows"].as_array().unwrap();
        let got: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(got, ids, "{}", w["workload"]);
        for r in rows {
            assert!(
                r["ops"].as_u64().unwrap() > 0,
                "{} on {}: no operations\n{stdout}",
                r["id"],
                w["workload"]
            );
            assert!(!r["durability"].as_str().unwrap().is_empty());
        }
        assert_eq!(w["ratios"].as_array().unwrap().len(), 4, "{stdout}");
    }
    assert!(
        stdout.contains("tandem-lin-synch-fsync / etcd-fsync"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
