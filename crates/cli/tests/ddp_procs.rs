//! DDP over real processes: five `tandem node` processes and a
//! configuration manager, client sessions over TCP recording a history,
//! `kill -9` of one node under load and of all five, and the history
//! checked with the same linearizability checker as the simulations; and a
//! UPD model (eventual-synch) through a `kill -9` and restart, checked for
//! convergence and lost writes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_ddp_lab::load::{Load, LoadConfig};

mod common;

const SECRET: &str = "0000000000000000000000000d0d0cafe0";

fn keyring() -> tandem_fabric::auth::Keyring {
    tandem_fabric::auth::Keyring::from_master_hex(SECRET).unwrap()
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> SocketAddr {
    tandem_net::ports::reserve_loopback().unwrap()
}

struct Cluster {
    dir: PathBuf,
    peers: Vec<SocketAddr>,
    manager: SocketAddr,
    nodes: Vec<Option<Proc>>,
    /// Flags every node gets.
    extra: Vec<String>,
    /// The manager's flags for its state.
    store: Vec<String>,
    _manager: Proc,
}

/// The manager, logging to `dir/manager.log` (appended across restarts),
/// with `store` flags (where it keeps its state).
fn spawn_manager(dir: &Path, addr: SocketAddr, store: &[String]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("manager.log"))
        .unwrap();
    tandem()
        .args([
            "ddp",
            "manager",
            "--listen",
            &addr.to_string(),
            "--nodes",
            "5",
        ])
        .args(store)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn tandem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem"));
    c.env("TANDEM_SECRET", SECRET);
    c
}

impl Cluster {
    fn start(name: &str, model: &str) -> Cluster {
        Cluster::start_with(name, model, &[])
    }

    /// Five nodes started with `extra` flags (also on every restart); the
    /// manager keeps its state in `dir/manager.state`.
    fn start_with(name: &str, model: &str, extra: &[&str]) -> Cluster {
        Cluster::start_stored(name, model, extra, None)
    }

    /// The same, with the manager's state where `store` says (flags).
    fn start_stored(
        name: &str,
        model: &str,
        extra: &[&str],
        store: Option<Vec<String>>,
    ) -> Cluster {
        let dir = std::env::temp_dir().join(format!("tandem-ddp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let manager = free_addr();
        let state = dir.join("manager.state").to_str().unwrap().to_string();
        let store = store.unwrap_or(vec!["--state".into(), state]);
        let m = spawn_manager(&dir, manager, &store);
        let peers: Vec<SocketAddr> = (0..5).map(|_| free_addr()).collect();
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut c = Cluster {
            dir,
            peers,
            manager,
            nodes: (0..5).map(|_| None).collect(),
            extra,
            store,
            _manager: Proc(m),
        };
        for i in 0..5 {
            c.start_node(i, model);
        }
        c
    }

    /// `kill -9` the manager and start it again, on the same address and
    /// state file.
    fn restart_manager(&mut self) {
        self._manager.0.kill().unwrap();
        let _ = self._manager.0.wait();
        self._manager = Proc(spawn_manager(&self.dir, self.manager, &self.store));
    }

    fn start_node(&mut self, i: usize, model: &str) {
        self.start_node_with(i, model, &[]);
    }

    fn start_node_with(&mut self, i: usize, model: &str, flags: &[&str]) {
        let peers: Vec<String> = self.peers.iter().map(|p| p.to_string()).collect();
        let nvm = self.dir.join(format!("node{i}.nvm"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node{i}.log")))
            .unwrap();
        let child = tandem()
            .args([
                "node",
                "--model",
                model,
                "--id",
                &i.to_string(),
                "--peers",
                &peers.join(","),
                "--manager",
                &self.manager.to_string(),
            ])
            .args(["--nvm", nvm.to_str().unwrap(), "--nvm-size", "16M"])
            .args(&self.extra)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.nodes[i] = Some(Proc(child));
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].take() {
            p.0.kill().unwrap(); // SIGKILL
            let _ = p.0.wait();
        }
    }

    fn manager_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default()
    }

    /// The manager's log and each node's, for a failure message.
    fn logs(&self) -> String {
        let names =
            std::iter::once("manager".to_string()).chain((0..5).map(|i| format!("node{i}")));
        names
            .map(|n| {
                let text = std::fs::read_to_string(self.dir.join(format!("{n}.log")));
                format!("--- {n}.log\n{}", text.unwrap_or_default())
            })
            .collect::<String>()
            + &self.sockets()
    }

    /// `ss`'s lines for this cluster's ports (who holds a port a node wants).
    fn sockets(&self) -> String {
        let out = Command::new("ss").args(["-tanp"]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        let ports: Vec<String> = self
            .peers
            .iter()
            .map(|p| format!(":{} ", p.port()))
            .collect();
        let lines = text.unwrap_or_default();
        let mine = lines
            .lines()
            .filter(|l| ports.iter().any(|p| l.contains(p.as_str())));
        format!(
            "--- sockets on {ports:?}\n{}",
            mine.collect::<Vec<_>>().join("\n")
        )
    }

    fn load(&self, sessions: u64, epoch: Instant) -> Load {
        self.load_at(&[0, 1, 2, 3, 4], sessions, 0, epoch)
    }

    /// `sessions` sessions (numbered from `first`) spread over `nodes` only.
    fn load_at(&self, nodes: &[usize], sessions: u64, first: u64, epoch: Instant) -> Load {
        let cfg = LoadConfig {
            nodes: nodes.iter().map(|&i| self.peers[i]).collect(),
            keys: keyring(),
            sessions,
            first_session: first,
            plan: tandem_ddp::ycsb_session::SessionPlan::uniform(50, 0.5),
            seed: 7,
            timeout: Duration::from_secs(2),
        };
        Load::start(&cfg, epoch)
    }
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn completed_during(load: &Load, d: Duration) -> u64 {
    let before = load.completed.load(Ordering::Relaxed);
    std::thread::sleep(d);
    load.completed.load(Ordering::Relaxed) - before
}

fn check(ops: &[tandem_check::HistOp], dir: &Path) {
    let done = ops.iter().filter(|o| o.complete_ns.is_some()).count();
    assert!(done > 1000, "only {done} operations completed");
    if let Err(v) = tandem_check::check_linearizable(ops) {
        let _ = tandem_check::write_jsonl(dir.join("history.jsonl"), ops);
        panic!("not linearizable (history in {}): {v}", dir.display());
    }
    eprintln!(
        "{done} operations, {} unknown: linearizable",
        ops.len() - done
    );
}

/// Ten sessions; `kill -9` node 2 once they run; the manager drops it and
/// the four others keep serving.
fn kill_node_2_under_load(c: &mut Cluster, epoch: Instant) -> Load {
    let load = c.load(10, epoch);
    wait_for("the first operations", Duration::from_secs(20), || {
        load.completed.load(Ordering::Relaxed) > 500
    });
    c.kill(2);
    wait_for(
        "the manager to drop node 2",
        Duration::from_secs(10),
        || c.manager_log().contains("members [0, 1, 3, 4]"),
    );
    let during = completed_during(&load, Duration::from_millis(800));
    assert!(
        during > 100,
        "the four others kept serving: {during} operations while node 2 was down"
    );
    load
}

#[test]
fn lin_synch_survives_kill_dash_nine_of_one_node_and_it_rejoins() {
    let mut c = Cluster::start("one", "lin-synch");
    let load = kill_node_2_under_load(&mut c, Instant::now());
    c.start_node(2, "lin-synch");
    wait_for("node 2 to rejoin", Duration::from_secs(20), || {
        c.manager_log().matches("members [0, 1, 2, 3, 4]").count() >= 2
    });
    let after = completed_during(&load, Duration::from_millis(800));
    assert!(after > 100, "{after} operations after the rejoin");
    let log2 = std::fs::read_to_string(c.dir.join("node2.log")).unwrap_or_default();
    assert!(
        log2.contains("recovered from"),
        "node 2 restarted from its NVM file:\n{log2}"
    );
    check(&load.stop(), &c.dir);
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// HEAL over processes: the restarted node catches up from its Buddy's
/// buffer (not a full copy) while the others serve; the history is checked.
#[test]
fn heal_brings_a_killed_node_back_from_its_buddy() {
    let mut c = Cluster::start_with("heal", "lin-synch", &["--recovery", "heal"]);
    let load = kill_node_2_under_load(&mut c, Instant::now());
    c.start_node(2, "lin-synch");
    let log2 = || std::fs::read_to_string(c.dir.join("node2.log")).unwrap_or_default();
    wait_for("node 2 to recover by HEAL", Duration::from_secs(20), || {
        log2().contains("HEAL: recovered in")
    });
    let after = completed_during(&load, Duration::from_millis(800));
    assert!(after > 100, "{after} operations after the recovery");
    let note = log2();
    assert!(
        !note.contains("full copy"),
        "node 2 fell back to a full copy:\n{note}"
    );
    assert!(
        !note.contains("sent 0 missed updates"),
        "the Buddy had nothing for node 2, which missed 800 ms of writes:\n{note}"
    );
    eprintln!(
        "{}",
        note.lines()
            .find(|l| l.contains("HEAL:"))
            .unwrap_or_default()
    );
    check(&load.stop(), &c.dir);
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// A session at `node`, once it listens.
fn client(
    c: &Cluster,
    node: usize,
    session: u64,
) -> tandem_net::client::Client<tandem_ddp::Op, tandem_ddp::Reply> {
    let secret = keyring();
    let connect = || {
        tandem_net::client::Client::connect(c.peers[node], &secret, session, Duration::from_secs(2))
    };
    wait_for("a node to listen", Duration::from_secs(20), || {
        connect().is_ok()
    });
    connect().unwrap()
}

/// Every node's value of keys `0..keys`, read at that node.
fn finals(c: &Cluster, keys: u64) -> tandem_check::FinalStates {
    let mut out = tandem_check::FinalStates::new();
    for i in 0..c.peers.len() {
        let mut cl = client(c, i, 1_000 + i as u64);
        let values = (0..keys).map(|k| match cl.call(tandem_ddp::Op::read(k)) {
            Ok(tandem_ddp::Reply::Read { value, .. }) => (k, value),
            Ok(other) => panic!("node {i} answered a read of key {k} with {other:?}"),
            Err(e) => panic!("reading key {k} at node {i}: {e}\n{}", c.logs()),
        });
        out.insert(i as u16, values.collect());
    }
    out
}

/// Poll for 5 s until every node holds the same values (and the history
/// explains them); the last values read, and the divergence if any.
fn converged(
    c: &Cluster,
    ops: &[tandem_check::HistOp],
) -> (tandem_check::FinalStates, Option<String>) {
    let mut last = (Default::default(), None);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let f = finals(c, 50);
        match tandem_check::check_convergence(&f, ops) {
            Ok(_) => return (f, None),
            Err(v) => last = (f, Some(v.to_string())),
        }
    }
    last
}

/// Session `session` writes keys `0..keys` once each at node 2, one after
/// another; the history.
fn writes_at_node_2(
    c: &Cluster,
    session: u64,
    keys: u64,
    epoch: Instant,
) -> Vec<tandem_check::HistOp> {
    let mut cl = client(c, 2, session);
    let ns = || epoch.elapsed().as_nanos() as u64;
    (0..keys)
        .map(|key| {
            let (value, invoke_ns) = ((session + 1) << 32 | key, ns());
            let r = cl.call(tandem_ddp::Op::write(key, value, 0)).unwrap();
            assert!(matches!(r, tandem_ddp::Reply::Written { .. }), "{r:?}");
            tandem_check::HistOp {
                session,
                node: 2,
                kind: tandem_check::OpKind::Write { key, value },
                invoke_ns,
                complete_ns: Some(ns()),
                ok: true,
            }
        })
        .collect()
}

/// A UPD model over processes: node 2 writes 40 keys, is killed under
/// load and restarted, and the replicas converge. Then node 2 alone writes
/// 20 keys; those writes come after every other, so each key must end
/// with node 2's value. Its new life must take new update ids (its NVM's
/// incarnation + 1): the others (and the copy it took) hold its last
/// life's ids as applied, and drop reused ones as duplicates. Returns the
/// divergence after those writes, if any, and the keys whose acknowledged
/// write node 0 does not hold.
fn a_restarted_upd_node_loses_nothing(name: &str, extra: &[&str]) -> (Option<String>, Vec<u64>) {
    let mut c = Cluster::start_with(name, "eventual-synch", extra);
    let epoch = Instant::now();
    wait_for("the cluster to form", Duration::from_secs(20), || {
        c.manager_log().contains("members [0, 1, 2, 3, 4]")
    });
    let mut ops = writes_at_node_2(&c, 100, 40, epoch);
    let load = kill_node_2_under_load(&mut c, epoch);
    c.start_node(2, "eventual-synch");
    wait_for("node 2 to rejoin", Duration::from_secs(20), || {
        c.manager_log().matches("members [0, 1, 2, 3, 4]").count() >= 2
    });
    ops.extend(load.stop());
    if let (_, Some(v)) = converged(&c, &ops) {
        panic!("{name}: the replicas did not converge after node 2's restart: {v}");
    }
    let mine = writes_at_node_2(&c, 101, 20, epoch);
    ops.extend(mine.iter().cloned());
    let (f, diverged) = converged(&c, &ops);
    if let Err(e) = tandem_check::check_no_thin_air(&ops) {
        panic!("{name}: a read from thin air: {e}");
    }
    let _ = std::fs::remove_dir_all(&c.dir);
    let lost = |o: &tandem_check::HistOp| match o.kind {
        tandem_check::OpKind::Write { key, value } => (f[&0][&key] != Some(value)).then_some(key),
        _ => None,
    };
    (diverged, mine.iter().filter_map(lost).collect())
}

#[test]
fn eventual_synch_survives_kill_dash_nine_and_loses_no_write() {
    let (diverged, lost) = a_restarted_upd_node_loses_nothing("upd", &[]);
    assert_eq!(
        diverged, None,
        "the replicas diverged after node 2's new writes"
    );
    assert!(
        lost.is_empty(),
        "node 2's acknowledged writes to keys {lost:?} were lost"
    );
    let (diverged, lost) =
        a_restarted_upd_node_loses_nothing("upd-bug", &["--inject-bug", "reuse-origin"]);
    assert!(
        !lost.is_empty(),
        "with reuse-origin no write of node 2 was lost"
    );
    eprintln!(
        "reuse-origin over processes: node 2's writes to {} of 20 keys never reached node 0 ({})",
        lost.len(),
        diverged
            .as_deref()
            .map_or("yet the replicas converged", |d| d
                .lines()
                .next()
                .unwrap_or_default())
    );
}

#[test]
fn lin_synch_restarts_all_five_from_their_nvm_files() {
    let mut c = Cluster::start("all", "lin-synch");
    let epoch = Instant::now();
    let load = c.load(10, epoch);
    wait_for("the first operations", Duration::from_secs(20), || {
        load.completed.load(Ordering::Relaxed) > 2000
    });
    for i in 0..5 {
        c.kill(i);
    }
    for i in 0..5 {
        c.start_node(i, "lin-synch");
    }
    let before = load.completed.load(Ordering::Relaxed);
    wait_for("service after the restart", Duration::from_secs(30), || {
        load.completed.load(Ordering::Relaxed) > before + 1000
    });
    for i in 0..5 {
        let log = std::fs::read_to_string(c.dir.join(format!("node{i}.log"))).unwrap_or_default();
        assert!(
            log.contains("recovered from"),
            "node {i} restarted from its NVM file:\n{}",
            c.logs()
        );
    }
    // Lin-Synch promises non-stale reads across a whole-cluster crash (docs/DDP.md,
    // check labels S-2 and RP-2):
    // the history before and after the crash is linearizable as one.
    check(&load.stop(), &c.dir);
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// A bit flipped in the middle of one node's NVM file while the whole
/// cluster is down: that node refuses to start (naming the offset, the file
/// untouched) instead of truncating its log; started again with
/// `--nvm-corrupt move-aside`, it sets the file aside, catches up from the
/// others, and no acknowledged write is lost (the whole history, before and
/// after, is linearizable as one).
#[test]
fn lin_synch_loses_no_acknowledged_write_when_a_corrupt_nvm_is_moved_aside() {
    let mut c = Cluster::start("corrupt", "lin-synch");
    let load = c.load(10, Instant::now());
    wait_for("the first operations", Duration::from_secs(20), || {
        load.completed.load(Ordering::Relaxed) > 2000
    });
    for i in 0..5 {
        c.kill(i);
    }
    // One bit of the first frame's payload: far from the tail.
    let nvm = c.dir.join("node2.nvm");
    let mut bytes = std::fs::read(&nvm).unwrap();
    bytes[8 + 8 + 2] ^= 0x10;
    std::fs::write(&nvm, &bytes).unwrap();
    for i in [0, 1, 3, 4] {
        c.start_node(i, "lin-synch");
    }
    c.start_node(2, "lin-synch");
    let mut refused = c.nodes[2].take().unwrap();
    let status = refused.0.wait().unwrap();
    assert!(
        !status.success(),
        "node 2 started on a corrupt NVM file:\n{}",
        c.logs()
    );
    assert_eq!(
        std::fs::read(&nvm).unwrap(),
        bytes,
        "the corrupt file was changed"
    );
    let log = std::fs::read_to_string(c.dir.join("node2.log")).unwrap();
    assert!(log.contains("offset"), "the error names the offset:\n{log}");
    c.start_node_with(2, "lin-synch", &["--nvm-corrupt", "move-aside"]);
    let before = load.completed.load(Ordering::Relaxed);
    wait_for("service after the restart", Duration::from_secs(30), || {
        load.completed.load(Ordering::Relaxed) > before + 1000
    });
    wait_for(
        "node 2 to move its file aside",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(c.dir.join("node2.log"))
                .unwrap_or_default()
                .contains("moved aside")
        },
    );
    let ops = load.stop();
    check(&ops, &c.dir);
    // Node 2 holds the latest values again: every node answers the same.
    let (_, diverged) = converged(&c, &ops);
    assert!(diverged.is_none(), "{diverged:?}\n{}", c.logs());
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// `tandem demo ddp`: every model keeps its promises through whole-cluster
/// crashes, the weaker ones visibly lose what they never promised, and the
/// figure is written.
#[test]
fn the_ddp_demo_shows_the_trade_off() {
    let dir = std::env::temp_dir().join(format!("tandem-ddp-demo-{}", std::process::id()));
    let fig = dir.join("timeline");
    let out = tandem()
        .args(["demo", "ddp", "--figure", fig.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |m: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{m} ")))
            .unwrap_or_else(|| panic!("no {m} row:\n{stdout}"))
            .to_string()
    };
    let lost = |m: &str| {
        row(m)
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(lost("lin-synch"), 0, "{stdout}");
    assert_eq!(lost("lin-strict"), 0, "{stdout}");
    assert!(lost("lin-scope") > 0 && lost("re-eventual") > 0, "{stdout}");
    assert!(!stdout.contains("BROKEN"), "{stdout}");
    assert!(dir.join("ddp.svg").exists() && dir.join("ddp.png").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tandem ddp bench --net tcp`: every model runs on five real processes,
/// is counted by the nodes themselves, and sits beside the echo ceiling
/// (the same load against nodes that only carry lin-synch's messages);
/// transactions and scopes are driven too (their requests complete).
#[test]
fn the_tcp_bench_measures_models_on_processes_beside_the_echo_ceiling() {
    let dir = std::env::temp_dir().join(format!("tandem-ddp-tcpbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("tcp.json");
    let out = tandem()
        .args([
            "ddp",
            "bench",
            "--net",
            "tcp",
            "--models",
            "lin-synch,trans-synch,causal-scope",
            "--seconds",
            "0.5",
            "--clients",
            "4",
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // The echo ran in the same rounds, loaded as lin-synch: INV, ACK and
    // VAL per write, nothing else, so six peer messages per operation of
    // YCSB-A (half writes, four peers), and cheaper per message than a model.
    let echo = &v["echo"];
    assert_eq!(echo["model"], "ddp-echo", "{v}");
    assert!(echo["throughput_ops"].as_f64().unwrap() > 0.0, "{v}");
    let per_op = echo["messages_per_op"].as_f64().unwrap();
    assert!(
        (4.5..=7.5).contains(&per_op),
        "INV, ACK, VAL per write: {v}"
    );
    let echo_calls = echo["node_syscalls_per_message"].as_f64().unwrap();
    assert!(
        echo_calls > 0.0 && echo_calls < 2.0,
        "the runtime coalesces: {v}"
    );
    let line = &v["runtime_model"];
    assert!(line["per_syscall_ns"].as_f64().unwrap() > 0.0, "{v}");
    let models = v["models"].as_array().unwrap();
    assert_eq!(models.len(), 3, "{v}");
    for m in models {
        assert!(m["throughput_ops"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["messages_per_s"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["node_cpu_us_per_op"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["node_cpu_ns_per_message"].as_f64().unwrap() > 0.0, "{m}");
        let calls = m["node_syscalls_per_message"].as_f64().unwrap();
        assert!(calls > 0.0 && calls < 4.0, "{m}");
        assert!(m["of_echo_ops"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["cpu_per_message_vs_echo"].as_f64().unwrap() > 0.0, "{m}");
    }
    assert_eq!(models[0]["normalized"].as_f64(), Some(1.0));
    // --fsync: persists complete only after the syncer thread flushed them (group commit).
    let out = tandem()
        .args([
            "ddp",
            "bench",
            "--net",
            "tcp",
            "--models",
            "lin-synch",
            "--seconds",
            "0.5",
            "--clients",
            "4",
            "--fsync",
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
        v["fsync"].as_bool().unwrap() && v["models"][0]["throughput_ops"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    let bad = tandem()
        .args(["ddp", "bench", "--net", "rdma"])
        .output()
        .unwrap();
    assert!(
        !bad.status.success()
            && String::from_utf8_lossy(&bad.stderr).contains("expected sim or tcp")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A supervisor restarts a killed node at once, well inside its lease,
/// so it never falls silent. It lost its volatile state all the same:
/// under Transactional consistency the others held its prepared
/// transactions forever (reads of their keys hung at every node, and in 2
/// of 3 runs no transaction completed afterwards). The manager now sees
/// the new run's boot id, removes the node and adds it back, so the
/// members settle its transactions as after a crash.
#[test]
fn trans_synch_survives_a_node_restarted_within_its_lease() {
    let model = "trans-synch";
    let mut c = Cluster::start("bounce", model);
    let mut plan = tandem_ddp::ycsb_session::SessionPlan::uniform(50, 0.5);
    plan.tx_requests = Some(3);
    let cfg = LoadConfig {
        nodes: c.peers.clone(),
        keys: keyring(),
        sessions: 10,
        first_session: 0,
        plan,
        seed: 7,
        timeout: Duration::from_secs(2),
    };
    let load = Load::start(&cfg, Instant::now());
    wait_for("the first transactions", Duration::from_secs(20), || {
        load.completed.load(Ordering::Relaxed) > 3000
    });
    c.kill(2);
    c.start_node(2, model);
    wait_for(
        "node 2 removed and added back",
        Duration::from_secs(10),
        || c.manager_log().contains("epoch 3, members [0, 1, 2, 3, 4]"),
    );
    let after = completed_during(&load, Duration::from_millis(800));
    let _ = load.stop();
    assert!(after > 100, "{after} requests completed after the restart");
    for i in 0..5 {
        let mut cl = client(&c, i, 1_000 + i as u64);
        let stuck: Vec<u64> = (0..50)
            .filter(|&k| cl.call(tandem_ddp::Op::read(k)).is_err())
            .collect();
        assert!(stuck.is_empty(), "reads of keys {stuck:?} hang at node {i}");
    }
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// The manager is restarted (`kill -9`) after two configuration changes,
/// then a node is killed. A manager that forgot its epochs would announce
/// the removal in epoch 2, which every node, already in epoch 3, ignores:
/// the others would wait on the dead node forever. With its state file it
/// resumes at epoch 3 and the removal is epoch 4.
#[test]
fn a_restarted_manager_resumes_its_epochs() {
    restart_the_manager_then_kill_a_node(Cluster::start("manager", "lin-synch"));
}

/// The same with the manager's state in a real ZooKeeper.
#[test]
fn a_restarted_manager_resumes_its_epochs_from_zookeeper() {
    let Some(zk) = common::ZooKeeper::start_or_skip("ddp-manager") else {
        return;
    };
    let store = [
        "--zookeeper",
        &format!("127.0.0.1:{}", zk.port),
        "--zk-path",
        "/tandem/test/manager",
    ];
    let store = store.iter().map(|s| s.to_string()).collect();
    let c = Cluster::start_stored("manager-zk", "lin-synch", &[], Some(store));
    restart_the_manager_then_kill_a_node(c);
    drop(zk);
}

fn restart_the_manager_then_kill_a_node(mut c: Cluster) {
    let model = "lin-synch";
    let load = c.load(10, Instant::now());
    wait_for("the first operations", Duration::from_secs(20), || {
        load.completed.load(Ordering::Relaxed) > 500
    });
    c.kill(2);
    c.start_node(2, model);
    wait_for(
        "node 2 removed and added back",
        Duration::from_secs(10),
        || c.manager_log().contains("epoch 3, members [0, 1, 2, 3, 4]"),
    );
    c.restart_manager();
    std::thread::sleep(Duration::from_millis(300));
    c.kill(3);
    wait_for(
        "the manager to drop node 3",
        Duration::from_secs(10),
        || c.manager_log().contains("members [0, 1, 2, 4]"),
    );
    let during = completed_during(&load, Duration::from_millis(800));
    let ops = load.stop();
    assert!(
        during > 100,
        "{during} operations after node 3 was dropped; manager log:\n{}",
        c.manager_log()
    );
    assert!(
        c.manager_log().contains("epoch 4, members [0, 1, 2, 4]"),
        "{}",
        c.manager_log()
    );
    eprintln!("{}", c.manager_log());
    check(&ops, &c.dir);
    let _ = std::fs::remove_dir_all(&c.dir);
}

/// A state file that is not one, or one naming more nodes than the
/// cluster has, stops the manager at once with the reason.
#[test]
fn the_manager_refuses_a_state_it_cannot_use() {
    let dir = std::env::temp_dir().join(format!("tandem-ddp-badstate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("manager.state");
    let addr = free_addr().to_string();
    let args = [
        "ddp", "manager", "--listen", &addr, "--nodes", "3", "--secret", SECRET, "--state",
    ];
    std::fs::write(&state, b"epoch 3").unwrap();
    common::fails_with(
        &[&args[..], &[state.to_str().unwrap()]].concat(),
        "not a manager state",
    );
    std::fs::write(&state, br#"{"epoch":4,"members":[0,4],"boots":{}}"#).unwrap();
    common::fails_with(
        &[&args[..], &[state.to_str().unwrap()]].concat(),
        "names node 4, beyond --nodes 3",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every argument of process `pid`, as `/proc` shows it to any local user.
/// A spawn returns once the child has left its parent's memory, which is
/// before `execve` has set up the new program's arguments: under load the
/// command line reads empty for a while. So read until it has the
/// program's arguments, or the process is gone.
fn command_line(pid: u32) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_else(|e| panic!("cannot read the command line of {pid}: {e}"));
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|r| r.1.trim_start().starts_with('Z'));
        if args.len() > 1 || zombie || std::time::Instant::now() > until {
            return args;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Tandem's own launchers hand the master secret to their children in the
/// environment (readable by the same user and root only), never on a command
/// line, which every local user can read with `ps`. (Not beside the hostile
/// clients of adversary.rs: their floods use up this process's descriptors.)
#[test]
fn no_launcher_puts_the_secret_on_a_command_line() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_tandem"));
    let base = std::env::temp_dir().join(format!("tandem-argv-{}", std::process::id()));
    let ddp = tandem_ddp_lab::procs::DdpCluster::start(exe, "lin-synch", false, &base.join("ddp"))
        .unwrap();
    let heal =
        tandem_ddp_lab::heal::procs::HealCluster::start(exe, "lin-synch", &base.join("heal"))
            .unwrap();
    let pids: Vec<u32> = ddp.pids().into_iter().chain(heal.pids()).collect();
    assert_eq!(
        pids.len(),
        5 + 1 + 5,
        "five DDP nodes, a manager and five HEAL nodes"
    );
    for pid in pids {
        let args = command_line(pid);
        assert!(args.len() > 1, "process {pid} is not running");
        assert!(
            !args
                .iter()
                .any(|a| a == "--secret"
                    || a.len() >= 32 && a.chars().all(|c| c.is_ascii_hexdigit())),
            "a secret on the command line of {pid}: {args:?}"
        );
    }
    drop((ddp, heal));
    let _ = std::fs::remove_dir_all(&base);
}

/// `tandem net echo`: processes all to all, measured by their own counters
/// and clocks; a sweep of windows fits the runtime's cost per message and
/// per syscall (wider windows coalesce more, so the slope is positive).
#[test]
fn the_echo_measures_cpu_and_syscalls_per_message_and_fits_its_cost_line() {
    let dir = std::env::temp_dir().join(format!("tandem-echo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("echo.json");
    let out = tandem()
        .args([
            "net",
            "echo",
            "--nodes",
            "3",
            "--window",
            "10",
            "--seconds",
            "0.5",
        ])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v["messages_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["cpu_ns_per_message"].as_f64().unwrap() > 0.0, "{v}");
    let calls = v["syscalls_per_message"].as_f64().unwrap();
    assert!(calls > 0.0 && calls < 3.0, "{v}");
    let share = v["loop_cpu_share"].as_f64().unwrap();
    assert!(
        share > 0.3 && share <= 1.01,
        "the event loop does the work: {v}"
    );
    let out = tandem()
        .args([
            "net",
            "echo",
            "--nodes",
            "3",
            "--sweep",
            "4,64",
            "--seconds",
            "0.5",
        ])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(m["points"].as_array().unwrap().len(), 2, "{m}");
    assert!(m["per_syscall_ns"].as_f64().unwrap() > 0.0, "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}
