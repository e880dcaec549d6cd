//! Kite over real processes: five `tandem node --system kite`
//! processes on loopback, the simulator's checked random mix over TCP, one
//! node stopped (SIGSTOP) for 1.5 s and another killed -9 mid-run; the
//! history must be release consistent and every session keep completing.

use std::path::Path;
use std::time::{Duration, Instant};

use tandem_kite::simcheck::Mix;
use tandem_kite_lab::procs::{Fault, Gen, KiteCluster, LoadOpts, LoadReport, NodeOpts};

const SLEEPER: usize = 1;
const VICTIM: usize = 3;

fn faulty_run(name: &str, node: NodeOpts) -> LoadReport {
    let dir = std::env::temp_dir().join(format!("tandem-kite-test-{name}-{}", std::process::id()));
    let exe = Path::new(env!("CARGO_BIN_EXE_tandem"));
    let mut cluster = KiteCluster::start(exe, 5, &node, &dir).expect("five kite nodes");
    let o = LoadOpts {
        sessions_per_node: 20,
        duration_s: 4.0,
        faults: vec![
            Fault::Sleep {
                node: SLEEPER,
                from_s: 1.0,
                for_s: 1.5,
            },
            Fault::Kill {
                node: VICTIM,
                at_s: 2.0,
            },
        ],
        ..LoadOpts::default()
    };
    let r = tandem_kite_lab::procs::run_load(&mut cluster, Gen::Checked(Mix::default()), &o)
        .expect("the load runs");
    if r.violation.is_some() {
        eprintln!("node logs:\n{}", cluster.node_logs());
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

#[test]
fn kite_processes_stay_release_consistent_under_sleep_and_kill9() {
    let started = Instant::now();
    let r = faulty_run("faults", NodeOpts::default());
    let summary = format!(
        "{:.0} ops/s, {} ops ({} unknown), {} moves, violation {:?}",
        r.throughput_ops, r.ops, r.pending_ops, r.moves, r.violation
    );
    eprintln!("{summary}");
    assert_eq!(r.violation_count, 0, "{summary}");
    assert!(r.ops > 1000, "too little load: {summary}");
    // The killed node's sessions moved (new names), none stayed on it.
    assert!(!r.alive[VICTIM] && r.alive.iter().filter(|a| **a).count() == 4);
    assert!(r.moves >= 20, "the victim's 20 sessions move: {summary}");
    assert!(r.sessions_end.iter().all(|s| s.0 != VICTIM));
    // While node SLEEPER is stopped, the other nodes keep serving (no
    // one waits on it beyond a time-out): 1.2–2.0 s, before the kill.
    let rows = &r.timeline_per_node;
    for n in (0..5).filter(|&n| n != SLEEPER) {
        let during: u64 = rows[12..20].iter().map(|row| row[n]).sum();
        assert!(
            during > 0,
            "node {n} served nothing while node {SLEEPER} slept: {rows:?}"
        );
    }
    // After the faults every session completes operations: each one's
    // last completion is in the last second of the run, and every live
    // node served in it (the sleeper too, once continued).
    for (i, &(node, done, last_s)) in r.sessions_end.iter().enumerate() {
        assert!(last_s > 3.0, "session {i} (on node {node}, {done} completed) stalled: last completion at {last_s:.2} s");
    }
    for n in (0..5).filter(|&n| r.alive[n]) {
        let last: u64 = rows[30..40].iter().map(|row| row[n]).sum();
        assert!(
            last > 0,
            "node {n} served nothing in the last second: {rows:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

/// The same run with a deliberate bug: an acquire ignores being told it is
/// delinquent, which only matters once a write timed out on the stopped
/// node. Not a gate: a race must happen, and it did in 9 of 10 runs on 2
/// cores; the same mutant is caught deterministically in simulation
/// (`crates/kite/tests/mutants.rs`). Run with `--ignored` to see it here.
#[test]
#[ignore = "timing-dependent (caught 9 of 10 runs); the simulation test in crates/kite/tests/mutants.rs is the gate"]
fn kite_mutant_skip_delinquency_check_is_caught() {
    let r = faulty_run(
        "mutant",
        NodeOpts {
            mutant: Some("skip-delinquency-check".into()),
            ..NodeOpts::default()
        },
    );
    eprintln!("{:?}", r.violation);
    assert_eq!(
        r.violation_count, 1,
        "the mutant went unnoticed: {} ops",
        r.ops
    );
}

#[test]
fn node_rejects_unknown_systems() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "node",
            "--system",
            "raft",
            "--id",
            "0",
            "--peers",
            "127.0.0.1:1",
            "--nvm",
            "/nonexistent/x",
            "--secret",
            "1",
        ])
        .output()
        .expect("run tandem");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("unknown --system 'raft': ddp, kite or zab"),
        "{stderr}"
    );
}

/// A node whose port another program holds says so at once (a node that
/// waited silently left an empty log: a cluster test once failed with no
/// clue), keeps trying for 5 s, then gives up naming the address.
#[test]
fn a_node_whose_port_is_taken_says_so_and_gives_up() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    let nvm = std::env::temp_dir().join(format!("tandem-port-taken-{}.nvm", std::process::id()));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "node",
            "--model",
            "lin-synch",
            "--id",
            "0",
            "--peers",
            &addr,
        ])
        .args([
            "--secret",
            "00000000000000000000000000000001",
            "--nvm-size",
            "1M",
            "--nvm",
        ])
        .arg(&nvm)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    assert_eq!(first.trim(), format!("{addr} is in use; retrying for 5 s"));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(!child.wait().unwrap().success());
    assert!(rest.contains(&format!("cannot listen on {addr}")), "{rest}");
    let _ = std::fs::remove_file(&nvm);
}

/// Kite is crash-stop: a replica killed under load and started again from
/// its state file is refused with the reason, rather than rejoining with
/// empty state; a fresh state file starts.
#[test]
fn a_killed_kite_replica_is_not_started_again_from_its_state() {
    let dir = std::env::temp_dir().join(format!("tandem-kite-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = tandem_net::ports::reserve_loopback().unwrap();
    let node = |nvm: &str| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"));
        c.args([
            "node",
            "--system",
            "kite",
            "--id",
            "0",
            "--peers",
            &port.to_string(),
        ])
        .args([
            "--secret",
            "00000000000000000000000000000001",
            "--nvm-size",
            "1M",
            "--nvm",
        ])
        .arg(dir.join(nvm))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
        c
    };
    let mut first = node("a.nvm").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(first.try_wait().unwrap().is_none(), "the first run is up");
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let mut again = node("a.nvm").spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while again.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    if again.try_wait().unwrap().is_none() {
        again.kill().unwrap();
        panic!("a restart from the same state file ran");
    }
    let again = again.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "a restart from the same state ran");
    assert!(stderr.contains("Kite is crash-stop"), "{stderr}");
    let mut fresh = node("b.nvm").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        fresh.try_wait().unwrap().is_none(),
        "a fresh state file starts"
    );
    fresh.kill().unwrap();
    fresh.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tandem demo kite`: stacks and queues on five processes, one stopped
/// mid-run; the others keep serving, everything checks, the figure exists.
#[test]
fn the_kite_demo_keeps_serving_while_a_replica_sleeps() {
    let dir = std::env::temp_dir().join(format!("tandem-kite-demo-{}", std::process::id()));
    let fig = dir.join("timeline");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["demo", "kite", "--figure", fig.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("release consistency: ok; structures: ok"),
        "{stdout}"
    );
    for n in [0, 2, 3, 4] {
        let row = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("node {n}:")))
            .unwrap_or_else(|| panic!("no node {n} row:\n{stdout}"));
        let during: f64 = row
            .split(',')
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(
            during > 0.0,
            "node {n} stalled while node 1 slept:\n{stdout}"
        );
    }
    assert!(dir.join("kite.svg").exists() && dir.join("kite.png").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ZAB baseline as processes (`tandem node --system zab`) serves the
/// benchmark mix: writes through node 0, the leader, from every node.
#[test]
fn zab_processes_serve_the_bench_mix() {
    use tandem_kite_lab::bench::System;
    use tandem_kite_lab::procs::{bench_tcp, BenchMix};
    let dir = std::env::temp_dir().join(format!("tandem-zab-test-{}", std::process::id()));
    let exe = Path::new(env!("CARGO_BIN_EXE_tandem"));
    let mix = BenchMix {
        system: System::Zab,
        keys: 1000,
        write_ratio: 0.5,
        sync_ratio: 0.05,
        rmw_ratio: 0.0,
    };
    let o = LoadOpts {
        sessions_per_node: 10,
        warmup_s: 0.2,
        duration_s: 1.0,
        ..LoadOpts::default()
    };
    let (res, rep) =
        bench_tcp(exe, &dir, 3, &NodeOpts::default(), mix, &o).expect("zab runs over tcp");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(res.system, "zab");
    assert!(res.throughput_ops > 100.0, "{res:?}");
    // Every node's sessions completed (a follower's writes reach the leader and back).
    assert!(
        rep.sessions_end.iter().all(|s| s.1 > 0),
        "{:?}",
        rep.sessions_end
    );
    // A write costs a forward, proposals, acks and commits: more than one message per op on average.
    assert!(rep.messages_per_op > 1.0, "{res:?}");
}

/// `tandem kite bench --net tcp`: each system's nodes set beside the
/// runtime's echo of the same shape and its cost line, in the JSON.
#[test]
fn the_tcp_bench_sets_each_node_beside_the_runtime() {
    let json =
        std::env::temp_dir().join(format!("tandem-kite-tcpbench-{}.json", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["kite", "bench", "--net", "tcp", "--systems", "kite,zab"])
        .args([
            "--measure-s",
            "0.5",
            "--warmup-s",
            "0.3",
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        v["runtime_model"]["per_syscall_ns"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert_eq!(v["echo"]["window"], 20, "{v}");
    let nodes = v["node_cpu"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{v}");
    for n in nodes {
        assert!(n["node_cpu_ns_per_message"].as_f64().unwrap() > 0.0, "{n}");
        assert!(n["vs_runtime"].as_f64().unwrap() > 0.0, "{n}");
        let share = n["node_loop_cpu_share"].as_f64().unwrap();
        assert!(share > 0.0 && share <= 1.01, "{n}");
    }
    let _ = std::fs::remove_file(&json);
}
