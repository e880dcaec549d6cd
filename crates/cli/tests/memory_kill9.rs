//! Memory-server loss over real processes (docs/DESIGN.md §4.6, Pandora
//! §3.2.5): three `tandem pandora memory-server` processes (two copies
//! of every partition), the membership process and two compute servers under
//! load. `kill -9` one memory server: the membership declares it failed, the
//! compute servers hold, drain and switch primaries, and keep committing; a
//! replacement (`memory-server --replaces 1`) is filled while everyone holds
//! and admitted; `check-cluster` on the new set of servers finds identical
//! replicas (f+1 copies again) and counters consistent with the ledgers.
//! The second test also kills a compute server in the same second: its
//! recovery runs while every survivor holds, on live replicas only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

mod common;
use common::{read_timeline, spawn_announcing, wait_for_log, Proc, ZooKeeper};

static SERIAL: Mutex<()> = Mutex::new(());
const SECRET: &str = "000000000000000000000000c0ffee15";

fn tandem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
}

fn memory_server(dir: &Path, name: &str, shm: bool, extra: &[&str]) -> (Proc, String) {
    let mut args = vec![
        "pandora",
        "memory-server",
        "--listen",
        "127.0.0.1:0",
        "--mem",
        "64M",
        "--secret",
        SECRET,
    ];
    args.extend(extra);
    if shm {
        args.push("--shm");
    }
    spawn_announcing(&args, Some(&dir.join(format!("{name}.log"))))
}

struct Run {
    dir: PathBuf,
    mlog: PathBuf,
    /// Memory-server addresses after the replacement.
    memory_after: String,
    reports: Vec<(u16, std::process::Output)>,
    /// Every process still up, stopped when the run is dropped.
    _procs: Vec<Proc>,
    /// The memory servers had shared regions (the compute servers map them).
    shm: bool,
}

/// What a run does besides killing memory server 1.
#[derive(Clone, Copy, PartialEq)]
enum Also {
    Nothing,
    /// `kill -9` compute server 2 in the same second.
    KillCompute,
    /// Keep the membership's state in ZooKeeper at this port, and `kill -9`
    /// the membership once it declared the memory server failed; restart it.
    RestartMembership(u16),
    /// `SIGSTOP` memory server 1 instead of killing it (alive, not
    /// answering: a false suspicion), and `SIGCONT` it after the replacement.
    StopMemory,
}

/// Send `signal` (e.g. "STOP") to process `pid`.
fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

/// The cluster under load; `kill -9` memory server 1 at 1 s (and what `also`
/// says); a replacement at 1.6 s.
fn run(tag: &str, also: Also, shm: bool) -> Run {
    let kill_compute = also == Also::KillCompute;
    let fabric = if shm { "shm" } else { "tcp" };
    let dir = std::env::temp_dir().join(format!(
        "tandem-memkill-{tag}-{fabric}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut servers: Vec<(Proc, String)> = (0..3)
        .map(|i| memory_server(&dir, &format!("mem{i}"), shm, &[]))
        .collect();
    let memory: Vec<String> = servers.iter().map(|s| s.1.clone()).collect();
    let memory = memory.join(",");
    let common = ["--memory", &memory, "--secret", SECRET, "--keys", "20000"];
    let mut mlog = dir.join("membership.log");
    let zk = match also {
        Also::RestartMembership(port) => format!("127.0.0.1:{port}"),
        _ => String::new(),
    };
    let membership = |listen: &str, log: &Path| {
        // The same command line both times: --load must not reload a running cluster.
        let mut margs = vec!["pandora", "membership", "--listen", listen, "--load"];
        margs.extend(["--timeout-ms", "50", "--memory-timeout-ms", "100"]);
        if !zk.is_empty() {
            margs.extend(["--zookeeper", zk.as_str()]);
        }
        margs.extend(common);
        spawn_announcing(&margs, Some(log))
    };
    let (mut membership_proc, maddr) = membership("127.0.0.1:0", &mlog);
    let compute = |node: u16| {
        let ledger = dir.join(format!("c{node}.ledger"));
        let json = dir.join(format!("c{node}.json"));
        // The compute servers are the load: at a lower priority they leave
        // the membership (and ZooKeeper) enough of two cores.
        Command::new("nice")
            .args(["-n", "10", env!("CARGO_BIN_EXE_tandem")])
            .args([
                "pandora",
                "compute-server",
                "--membership",
                &maddr,
                "--node",
                &node.to_string(),
            ])
            .args([
                "--coordinators",
                "8",
                "--duration",
                "4",
                "--heartbeat-ms",
                "2",
            ])
            .args([
                "--ledger",
                ledger.to_str().unwrap(),
                "--json",
                json.to_str().unwrap(),
            ])
            .args(common)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Raw children: each ends after its --duration; the test waits for them.
    let c1 = compute(1);
    let mut c2 = compute(2);
    // Their timelines start when they join (later than their start on a
    // loaded machine): the kill falls 1 s into them.
    let joined = ["compute node 1 joined", "compute node 2 joined"];
    let log = wait_for_log(&mlog, &joined, Duration::from_secs(20));
    assert!(joined.iter().all(|j| log.contains(j)), "{log}");
    std::thread::sleep(Duration::from_millis(1000));
    if kill_compute {
        // The compute server first: its transactions in flight hold locks on
        // the memory server killed next, and its recovery must do without them.
        c2.kill().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    if also == Also::StopMemory {
        signal(servers[1].0 .0.id(), "STOP");
    } else {
        servers[1].0 .0.kill().unwrap(); // SIGKILL
    }
    if let Also::RestartMembership(_) = also {
        let log = wait_for_log(&mlog, &["memory nodes {1} down"], Duration::from_secs(10));
        assert!(log.contains("memory nodes {1} down"), "{log}");
        membership_proc.0.kill().unwrap();
        let _ = membership_proc.0.wait();
        mlog = dir.join("membership2.log");
        let again;
        (membership_proc, again) = membership(&maddr, &mlog);
        assert_eq!(again, maddr);
    }
    std::thread::sleep(Duration::from_millis(600));
    let (replacement, addr) = memory_server(
        &dir,
        "replacement",
        shm,
        &["--replaces", "1", "--membership", &maddr],
    );
    let reports = vec![
        (1u16, c1.wait_with_output().unwrap()),
        (2, c2.wait_with_output().unwrap()),
    ];
    let log = wait_for_log(&mlog, &["every memory node up"], Duration::from_secs(10));
    assert!(log.contains("every memory node up"), "{log}");
    if also == Also::StopMemory {
        // Back, with old data: nobody reads it, its region keys are gone.
        signal(servers[1].0 .0.id(), "CONT");
    }
    let mut after: Vec<String> = memory.split(',').map(str::to_string).collect();
    after[1] = addr;
    let mut procs: Vec<Proc> = servers.into_iter().map(|s| s.0).collect();
    procs.extend([replacement, membership_proc]);
    Run {
        dir,
        mlog,
        memory_after: after.join(","),
        reports,
        _procs: procs,
        shm,
    }
}

/// `check-cluster` on the servers after the replacement; its stderr.
fn check_cluster(r: &Run, failed: &str) -> String {
    let ledgers = format!(
        "{},{}",
        r.dir.join("c1.ledger").display(),
        r.dir.join("c2.ledger").display()
    );
    let out = tandem()
        .args([
            "pandora",
            "check-cluster",
            "--ledgers",
            &ledgers,
            "--failed",
            failed,
        ])
        .args([
            "--memory",
            &r.memory_after,
            "--secret",
            SECRET,
            "--keys",
            "20000",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let log = std::fs::read_to_string(&r.mlog).unwrap_or_default();
    assert!(out.status.success(), "{err}\nmembership log:\n{log}");
    assert!(err.contains("replicas identical"), "{err}");
    assert!(err.contains("counters consistent"), "{err}");
    err
}

/// The survivor committed before the kill, and again within a second of it.
fn assert_kept_committing(r: &Run, node: u16) {
    let (_, out) = r.reports.iter().find(|(n, _)| *n == node).unwrap();
    let log = std::fs::read_to_string(&r.mlog).unwrap_or_default();
    assert!(
        out.status.success(),
        "compute server {node} failed:\n{}\nmembership log:\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = r.dir.join(format!("c{node}.json"));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        report["links"],
        if r.shm { "shm" } else { "tcp" },
        "{report}"
    );
    let t = read_timeline(&json);
    assert!(t.len() >= 35, "{t:?}");
    assert!(
        t[4..9].iter().all(|&c| c > 0),
        "committing before the kill: {t:?}"
    );
    assert!(
        t[20..35].iter().sum::<u64>() > 0,
        "committing after the reconfiguration and the replacement: {t:?}\n{log}"
    );
}

fn kill_dash_nine_of_a_memory_server_survivors_keep_committing_and_a_replacement_restores_f_plus_1(
    shm: bool,
) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let r = run("mem", Also::Nothing, shm);
    let log = std::fs::read_to_string(&r.mlog).unwrap();
    assert!(log.contains("memory nodes {1} down"), "{log}");
    assert!(log.contains("re-replicated onto"), "{log}");
    assert!(
        !log.contains("missed its heartbeats"),
        "no compute node was suspected:\n{log}"
    );
    assert_kept_committing(&r, 1);
    assert_kept_committing(&r, 2);
    check_cluster(&r, "");
}

fn kill_dash_nine_of_a_memory_server_and_a_compute_server_in_the_same_second(shm: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let r = run("both", Also::KillCompute, shm);
    let log = std::fs::read_to_string(&r.mlog).unwrap();
    assert!(log.contains("memory nodes {1} down"), "{log}");
    assert!(
        log.contains("compute node 2 missed its heartbeats"),
        "{log}"
    );
    assert!(log.contains("recovered node 2"), "{log}");
    assert!(log.contains("re-replicated onto"), "{log}");
    assert_kept_committing(&r, 1);
    eprintln!("{log}");
    let c2 = r.dir.join("c2.ledger");
    check_cluster(&r, c2.to_str().unwrap());
}

/// With its state in ZooKeeper, the membership is killed once it declared
/// the memory server failed, and restarted: it resumes the memory
/// configuration (the server stays down), holds everyone under a new epoch,
/// and admits the replacement announced to it.
fn the_memory_configuration_survives_a_membership_restart_with_its_state_in_zookeeper(shm: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(zk) = ZooKeeper::start_or_skip("memkill") else {
        return;
    };
    let r = run("zk", Also::RestartMembership(zk.port), shm);
    let log = std::fs::read_to_string(&r.mlog).unwrap();
    assert!(log.contains("resumed from ZooKeeper"), "{log}");
    assert!(
        log.contains("memory configuration 2: memory nodes {1} down"),
        "the restarted service holds everyone again, node 1 still down:\n{log}"
    );
    assert!(log.contains("re-replicated onto"), "{log}");
    assert_kept_committing(&r, 1);
    assert_kept_committing(&r, 2);
    check_cluster(&r, "");
}

/// A memory server that stops answering without dying (`SIGSTOP`: a slow
/// node, suspected) is declared failed and cut off like a dead one; the
/// compute servers' requests stuck on it fail at once, the hold completes,
/// and a replacement takes its place. When it wakes up, nobody uses it.
fn a_stopped_memory_server_is_cut_off_like_a_dead_one(shm: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let r = run("stop", Also::StopMemory, shm);
    let log = std::fs::read_to_string(&r.mlog).unwrap();
    assert!(log.contains("memory nodes {1} down"), "{log}");
    assert!(log.contains("re-replicated onto"), "{log}");
    assert_kept_committing(&r, 1);
    assert_kept_committing(&r, 2);
    check_cluster(&r, "");
}

// Every test above, over TCP and on the shm fabric.
tandem_fabric::on_tcp_and_shm!(
    kill_dash_nine_of_a_memory_server_survivors_keep_committing_and_a_replacement_restores_f_plus_1,
    kill_dash_nine_of_a_memory_server_and_a_compute_server_in_the_same_second,
    the_memory_configuration_survives_a_membership_restart_with_its_state_in_zookeeper,
    a_stopped_memory_server_is_cut_off_like_a_dead_one
);
