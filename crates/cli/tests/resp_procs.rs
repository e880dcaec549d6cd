//! Pandora's compute servers behind Redis's protocol, as processes
//! (`tandem pandora compute-server --resp`): clients nobody here wrote
//! (`redis-cli`, redis-py) against two compute servers of one cluster,
//! while one is paused long enough to be fenced (alive and slow: it comes
//! back as a new incarnation) and the other is killed with `kill -9` and
//! started again. Every transaction redis-py saw is checked for strict
//! serializability by `tandem check`.

mod common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{spawn_announcing, Proc};

const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn client_key() -> String {
    let keys = tandem_fabric::auth::Keyring::from_master_hex(SECRET).unwrap();
    tandem_fabric::auth::keys::to_hex(keys.get(tandem_fabric::auth::Role::Client).unwrap().bytes())
}

/// The cluster's shape, the same on every process.
fn shape(memory: &str) -> Vec<String> {
    [
        "--memory",
        memory,
        "--resp-keys",
        "1000",
        "--keys",
        "1000",
        "--secret",
        SECRET,
    ]
    .map(String::from)
    .to_vec()
}

/// A compute server serving RESP on `resp` (`127.0.0.1:0`: any port); its port.
fn compute(node: u16, membership: &str, memory: &str, resp: &str, log: &Path) -> (Proc, u16) {
    let mut args: Vec<String> = [
        "pandora",
        "compute-server",
        "--membership",
        membership,
        "--node",
        &node.to_string(),
        "--resp",
        resp,
    ]
    .map(String::from)
    .to_vec();
    args.extend(shape(memory));
    let (p, lines) = spawn_until(&args, "RESP on", log);
    (p, resp_port(&lines))
}

/// The port of the last line, `... RESP on 127.0.0.1:PORT (...)`.
fn resp_port(lines: &[String]) -> u16 {
    let line = lines.last().map_or("", String::as_str);
    line.split("RESP on 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no RESP port in {line:?}"))
}

/// `scripts/resp_history.py` recording against `ports` into `out`.
fn record(pypath: &Path, ports: &[u16], extra: &[&str], out: &Path) -> std::process::Child {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    Command::new("python3")
        .arg(common::workspace().join("scripts/resp_history.py"))
        .args(["--ports", &ports.join(","), "--password", &client_key()])
        .args(extra)
        .arg("--out")
        .arg(out)
        .env("PYTHONPATH", pypath)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The recorder's summary once it is done (it must have committed plenty).
fn recorded(py: std::process::Child) -> (serde_json::Value, String) {
    let out = py.wait_with_output().unwrap();
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the history client failed: {summary}");
    let s: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    assert!(s["committed"].as_u64().unwrap() > 1000, "{summary}");
    (s, summary)
}

/// `tandem check --model MODEL HISTORY`: whether it passed, and what it said.
fn tandem_check(history: &Path, model: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["check", "--model", model])
        .arg(history)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args([
            "-p",
            &port.to_string(),
            "-a",
            &client_key(),
            "--no-auth-warning",
        ])
        .args(args)
        .output()
        .expect("redis-cli (scripts/peers.sh install redis)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Wait (bounded) until `port` answers commands again.
fn serving(port: u16) -> String {
    for _ in 0..100 {
        let r = redis_cli(port, &["set", "probe", "1"]);
        if r == "OK" {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    redis_cli(port, &["set", "probe", "1"])
}

/// redis-py's directory and Redis's tools, or `None` (skip) where they
/// cannot be installed.
fn pyredis() -> Option<std::path::PathBuf> {
    let dir = common::pyredis_dir()?;
    if Command::new("redis-cli").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-cli missing (scripts/peers.sh install redis)"
        );
        eprintln!("SKIPPED: redis-cli is not installed");
        return None;
    }
    Some(dir)
}

#[test]
fn compute_servers_serve_redis_clients_through_fencing_and_kill_dash_nine() {
    let Some(pypath) = pyredis() else { return };
    let dir = std::env::temp_dir().join(format!("tandem-resp-procs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut mem = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let (p, a) = spawn_announcing(
            &[
                "pandora",
                "memory-server",
                "--listen",
                "127.0.0.1:0",
                "--mem",
                "64M",
                "--secret",
                SECRET,
            ],
            None,
        );
        mem.push(p);
        addrs.push(a);
    }
    let memory = addrs.join(",");
    let mut args = vec!["pandora", "membership", "--listen", "127.0.0.1:0", "--load"];
    let sh = shape(&memory);
    args.extend(sh.iter().map(String::as_str));
    let (_membership, maddr) = spawn_announcing(&args, Some(&dir.join("membership.log")));
    let (c1, p1) = compute(1, &maddr, &memory, "127.0.0.1:0", &dir.join("c1.log"));
    let (c2, p2) = compute(2, &maddr, &memory, "127.0.0.1:0", &dir.join("c2.log"));
    assert_eq!(serving(p1), "OK");
    assert_eq!(serving(p2), "OK");

    // One store behind both ports; MULTI/EXEC is one transaction.
    assert_eq!(redis_cli(p1, &["set", "k", "v"]), "OK");
    assert_eq!(redis_cli(p2, &["get", "k"]), "v");
    assert_eq!(redis_cli(p2, &["incrby", "n", "5"]), "5");
    let info = redis_cli(p1, &["info"]);
    assert!(
        info.contains("tandem_state:up") && info.contains("tandem_node:1"),
        "{info}"
    );

    // A history recorded by redis-py while the faults happen.
    let history = dir.join("history.jsonl");
    let py = record(&pypath, &[p1, p2], &["--seconds", "9"], &history);
    std::thread::sleep(Duration::from_secs(2));
    // Compute server 1 stops answering heartbeats (alive, not dead): fenced.
    let pid1 = c1.0.id().to_string();
    Command::new("kill")
        .args(["-STOP", &pid1])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    Command::new("kill")
        .args(["-CONT", &pid1])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // Compute server 2 crashes and is started again on its port.
    drop(c2);
    std::thread::sleep(Duration::from_millis(500));
    let (_c2b, p2b) = compute(
        2,
        &maddr,
        &memory,
        &format!("127.0.0.1:{p2}"),
        &dir.join("c2b.log"),
    );
    assert_eq!(p2b, p2);
    let (s, summary) = recorded(py);
    // The faults were seen: a fenced or missing node's errors, or lost connections.
    assert!(
        !s["errors"].as_object().unwrap().is_empty(),
        "no client saw a fault: {summary}"
    );

    let (passed, verdict) = tandem_check(&history, "strict-serializable");
    assert!(
        passed && verdict.contains("strictly serializable"),
        "{verdict}\nclient: {summary}"
    );

    // Both serve again: node 1 as a new incarnation, node 2 restarted (also new).
    assert_eq!(serving(p1), "OK");
    assert_eq!(serving(p2), "OK");
    assert_eq!(redis_cli(p1, &["set", "after", "both"]), "OK");
    assert_eq!(redis_cli(p2, &["get", "after"]), "both");
    for p in [p1, p2] {
        let info = redis_cli(p, &["info"]);
        let node: u32 = info
            .lines()
            .find_map(|l| l.strip_prefix("tandem_node:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{info}"));
        assert!(
            node >= tandem_membership::FIRST_INCARNATION_ID as u32,
            "port {p} still serves its first incarnation: {info}"
        );
    }
    eprintln!("client: {summary}; check: {verdict}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/RESP.md's cluster block, run with bash as written.
#[test]
fn the_resp_doc_cluster_block_runs_as_written() {
    if pyredis().is_none() {
        return;
    }
    let ws = common::workspace();
    let doc = std::fs::read_to_string(ws.join("docs/RESP.md")).unwrap();
    let block = doc
        .split("## A cluster of processes behind RESP")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("docs/RESP.md has its cluster block");
    let dir = std::env::temp_dir().join(format!("tandem-resp-doc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_tandem"),
        dir.join("target/release/tandem"),
    )
    .unwrap();
    std::fs::write(dir.join("block.sh"), block).unwrap();
    let out = Command::new("timeout")
        .args(["120", "bash", "-e", "block.sh"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    assert!(
        out.status.success(),
        "the block failed:\n{stdout}\n{stderr}"
    );
    assert!(lines.contains(&"OK"), "{stdout}\n{stderr}");
    assert_eq!(
        lines.iter().filter(|l| **l == "v").count(),
        2,
        "{stdout}\n{stderr}"
    );
    let node: u32 = lines
        .iter()
        .find_map(|l| l.strip_prefix("tandem_node:"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
    assert!(
        node >= tandem_membership::FIRST_INCARNATION_ID as u32,
        "node 1 was not fenced: {stdout}\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Start `tandem ARGS`; its stdout lines until one contains `marker` (that one last).
fn spawn_until(args: &[String], marker: &str, log: &Path) -> (Proc, Vec<String>) {
    // Killed and reaped when dropped, on a panic too.
    let mut child = Proc(
        Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(args)
            .env("TANDEM_SECRET", SECRET)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("{args:?} ended before saying {marker:?}: {lines:?}");
        }
        lines.push(line.trim().to_string());
        if line.contains(marker) {
            return (child, lines);
        }
    }
}

/// Three DDP nodes of `model` with a manager, each serving RESP.
struct DdpNodes {
    dir: std::path::PathBuf,
    model: String,
    peers: String,
    manager: String,
    nodes: Vec<Option<Proc>>,
    resp: Vec<u16>,
    /// More arguments for every node.
    extra: Vec<String>,
    _manager: Proc,
}

impl DdpNodes {
    fn start(model: &str, tag: &str, bug: Option<&str>) -> DdpNodes {
        Self::start_with(model, tag, bug, &[])
    }

    fn start_with(model: &str, tag: &str, bug: Option<&str>, extra: &[&str]) -> DdpNodes {
        let dir =
            std::env::temp_dir().join(format!("tandem-resp-ddp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let peers: Vec<String> = (0..3)
            .map(|_| tandem_net::ports::reserve_loopback().unwrap().to_string())
            .collect();
        let args: Vec<String> = [
            "ddp",
            "manager",
            "--listen",
            "127.0.0.1:0",
            "--nodes",
            "3",
            "--state",
        ]
        .map(String::from)
        .into_iter()
        .chain([dir.join("manager.state").display().to_string()])
        .collect();
        let (manager_proc, lines) = spawn_until(&args, "listening on", &dir.join("manager.log"));
        let manager = lines
            .last()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string();
        let mut c = DdpNodes {
            dir,
            model: model.into(),
            peers: peers.join(","),
            manager,
            nodes: Vec::new(),
            resp: Vec::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            _manager: manager_proc,
        };
        for i in 0..3 {
            let (p, port) = c.node(i, "127.0.0.1:0", bug);
            c.nodes.push(Some(p));
            c.resp.push(port);
        }
        c
    }

    /// Start node `i` (again), serving RESP on `resp`; its RESP port.
    fn node(&self, i: u16, resp: &str, bug: Option<&str>) -> (Proc, u16) {
        let mut args: Vec<String> = [
            "node",
            "--model",
            &self.model,
            "--id",
            &i.to_string(),
            "--peers",
            &self.peers,
            "--manager",
            &self.manager,
            "--resp",
            resp,
            "--nvm",
        ]
        .map(String::from)
        .to_vec();
        args.push(self.dir.join(format!("node{i}.nvm")).display().to_string());
        if let Some(b) = bug {
            args.extend(["--inject-bug".to_string(), b.to_string()]);
        }
        args.extend(self.extra.iter().cloned());
        let (p, lines) = spawn_until(
            &args,
            "RESP on",
            &self
                .dir
                .join(format!("node{i}-{}.log", resp.replace(':', "_"))),
        );
        let port = resp_port(&lines);
        (p, port)
    }
}

impl Drop for DdpNodes {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli` against a DDP node: what each model gives, and what it refuses.
#[test]
fn ddp_nodes_answer_redis_cli_in_their_model() {
    if pyredis().is_none() {
        return;
    }
    let c = DdpNodes::start("lin-synch", "cli", None);
    let (p0, p1) = (c.resp[0], c.resp[1]);
    assert_eq!(serving(p0), "OK");
    assert_eq!(redis_cli(p0, &["set", "k", "42"]), "OK");
    assert_eq!(redis_cli(p1, &["get", "k"]), "42");
    assert_eq!(redis_cli(p1, &["exists", "k"]), "1");
    for (args, refusal) in [
        (&["set", "k", "hello"][..], "stores 64-bit integers"),
        (&["set", "k", "007"][..], "stores 64-bit integers"),
        (&["incr", "k"][..], "needs a transaction"),
        (&["mset", "a", "1", "b", "2"][..], "needs a transaction"),
        (&["del", "k"][..], "cannot be deleted"),
        (&["multi"][..], "MULTI needs a transaction"),
        (&["tandem.persist"][..], "no scopes"),
        (&["set", "k", "1", "nx"][..], "writes are blind"),
    ] {
        let r = redis_cli(p0, args);
        assert!(r.contains(refusal), "{args:?}: {r}");
    }
    assert_eq!(
        redis_cli(p1, &["get", "k"]),
        "42",
        "a refused command changed the key"
    );
    let info = redis_cli(p1, &["info"]);
    assert!(
        info.contains("tandem_model:lin-synch") && info.contains("tandem_node:1"),
        "{info}"
    );
    drop(c);

    let t = DdpNodes::start("trans-synch", "trans", None);
    assert_eq!(serving(t.resp[0]), "OK");
    let script =
        "MULTI\nSET x 1\nINCRBY x 5\nGET x\nMGET x probe\nEXEC\nINCR x\nMSET a 1 b 2\nMGET a b\n";
    let out = Command::new("redis-cli")
        .args([
            "-p",
            &t.resp[1].to_string(),
            "-a",
            &client_key(),
            "--no-auth-warning",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut ch| {
            use std::io::Write;
            ch.stdin.take().unwrap().write_all(script.as_bytes())?;
            ch.wait_with_output()
        })
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED", "OK", "6", "6", "6", "1", "7", "OK", "1",
            "2"
        ],
        "{text}"
    );
}

/// redis-py records single reads and writes against three ⟨Lin, Synch⟩
/// nodes while one is killed with `kill -9` and started again;
/// `tandem check --model linearizable` passes the history, and fails it
/// when the front end answers reads from its own writes (a planted bug).
#[test]
fn an_external_history_against_ddp_is_linearizable_through_kill_dash_nine() {
    let Some(pypath) = pyredis() else { return };
    for bug in [None, Some("resp-cached-reads")] {
        let mut c = DdpNodes::start("lin-synch", if bug.is_some() { "bug" } else { "lin" }, bug);
        for &p in &c.resp {
            assert_eq!(serving(p), "OK");
        }
        let history = c.dir.join("history.jsonl");
        let extra = ["--mode", "register", "--seconds", "6", "--keys", "5"];
        let py = record(&pypath, &c.resp, &extra, &history);
        std::thread::sleep(Duration::from_secs(2));
        c.nodes[2] = None; // kill -9
        std::thread::sleep(Duration::from_millis(1500));
        let again = c.node(2, &format!("127.0.0.1:{}", c.resp[2]), bug);
        c.nodes[2] = Some(again.0);
        let (s, summary) = recorded(py);
        assert!(
            s["errors"]["ConnectionError"].as_u64().unwrap_or(0) > 0,
            "no client saw the kill: {summary}"
        );
        let (passed, verdict) = tandem_check(&history, "linearizable");
        match bug {
            None => assert!(
                passed && verdict.contains("linearizable:"),
                "{verdict}\nclient: {summary}"
            ),
            Some(b) => assert!(
                !passed && verdict.contains("NotLinearizable"),
                "{b} not caught: {verdict}"
            ),
        }
        // Node 2 serves again after its restart.
        assert_eq!(serving(c.resp[2]), "OK");
    }
}

/// A hostile client against a DDP node's RESP port (a thread per
/// connection): answered, bounded, and the node keeps serving.
#[test]
fn a_hostile_client_leaves_a_ddp_node_alive_and_serving_others() {
    let mut c = DdpNodes::start_with("lin-synch", "hostile", None, &["--max-clients", "8"]);
    assert_eq!(serving(c.resp[0]), "OK");
    let port = c.resp[0];
    let node = c.nodes[0].as_mut().unwrap();
    common::resp_attack(port, Some(&client_key()), 8, &mut || {
        node.0.try_wait().unwrap().is_none()
    });
}

/// Three Kite nodes, each serving RESP on a port of its own; node processes
/// are killed when dropped.
fn kite_nodes(system: &str, tag: &str) -> (Vec<Option<Proc>>, Vec<u16>, std::path::PathBuf) {
    let dir =
        std::env::temp_dir().join(format!("tandem-resp-{system}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let peers: Vec<String> = (0..3)
        .map(|_| tandem_net::ports::reserve_loopback().unwrap().to_string())
        .collect();
    let (mut nodes, mut ports) = (Vec::new(), Vec::new());
    for i in 0..3 {
        let mut args: Vec<String> = [
            "node",
            "--system",
            system,
            "--id",
            &i.to_string(),
            "--peers",
            &peers.join(","),
            "--resp",
            "127.0.0.1:0",
            "--nvm",
        ]
        .map(String::from)
        .to_vec();
        args.push(dir.join(format!("node{i}.nvm")).display().to_string());
        let (p, lines) = spawn_until(&args, "RESP on", &dir.join(format!("node{i}.log")));
        ports.push(resp_port(&lines));
        nodes.push(Some(p));
    }
    (nodes, ports, dir)
}

/// Kite over RESP: relaxed GET/SET, acquire and release, INCR as Paxos
/// fetch-and-add (no increment lost among 20 clients on two nodes, nor
/// after a node is killed), compare-and-swap; the ZAB baseline refuses the
/// read-modify-writes it does not have.
#[test]
fn kite_nodes_answer_redis_clients_with_release_consistency_and_rmws() {
    if pyredis().is_none() {
        return;
    }
    let (mut nodes, p, dir) = kite_nodes("kite", "cli");
    assert_eq!(serving(p[0]), "OK");
    assert_eq!(redis_cli(p[0], &["get", "never"]), "");
    assert_eq!(redis_cli(p[0], &["kite.release", "k", "9"]), "OK");
    assert_eq!(redis_cli(p[1], &["kite.acquire", "k"]), "9");
    assert_eq!(redis_cli(p[1], &["incrby", "n", "10"]), "10");
    assert_eq!(redis_cli(p[2], &["decr", "n"]), "9");
    assert_eq!(redis_cli(p[2], &["kite.cas", "n", "9", "100"]), "1");
    assert_eq!(redis_cli(p[0], &["kite.cas", "n", "9", "5"]), "0");
    assert_eq!(redis_cli(p[0], &["kite.acquire", "n"]), "100");
    for (args, refusal) in [
        (&["set", "k", "x"][..], "stores 64-bit integers"),
        (&["multi"][..], "no transactions"),
        (&["mget", "a", "b"][..], "one key at a time"),
        (&["del", "k"][..], "cannot be deleted"),
    ] {
        let r = redis_cli(p[0], args);
        assert!(r.contains(refusal), "{args:?}: {r}");
    }
    // Fetch-and-add from 20 clients on two nodes: no increment lost.
    let bench = |port: u16, n: &str| {
        Command::new("redis-benchmark")
            .args([
                "-p",
                &port.to_string(),
                "-a",
                &client_key(),
                "-n",
                n,
                "-c",
                "10",
                "-q",
                "incr",
                "counter",
            ])
            .output()
            .unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| bench(p[0], "2000"));
        let b = s.spawn(|| bench(p[1], "2000"));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.status.success() && b.status.success(), "{a:?} {b:?}");
    assert_eq!(redis_cli(p[2], &["kite.acquire", "counter"]), "4000");
    // One node killed: the other two still form quorums.
    nodes[2] = None;
    assert_eq!(redis_cli(p[0], &["incr", "counter"]), "4001");
    assert_eq!(redis_cli(p[1], &["kite.acquire", "counter"]), "4001");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);

    let (zab, z, dir) = kite_nodes("zab", "cli");
    assert_eq!(serving(z[1]), "OK");
    assert_eq!(redis_cli(z[1], &["kite.release", "k", "3"]), "OK");
    assert!(redis_cli(z[2], &["incr", "k"]).contains("no read-modify-write"));
    drop(zab);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tandem check` on bad input: the line at fault named, nothing checked;
/// a violating history exits non-zero with the violation.
#[test]
fn tandem_check_names_bad_lines_and_fails_on_violations() {
    let dir = std::env::temp_dir().join(format!("tandem-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |name: &str, text: &str, model: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["check", "--model", model])
            .arg(&path)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ok = r#"{"client":1,"invoke_ns":0,"complete_ns":5,"outcome":"committed","reads":[["x",null]],"writes":[["x","1"]]}"#;
    let (good, err) = run(
        "bad.jsonl",
        &format!("{ok}\n{{\"client\":2,\n"),
        "strict-serializable",
    );
    assert!(!good && err.contains("line 2"), "{err}");
    let stale = format!(
        "{ok}\n{}\n",
        r#"{"client":2,"invoke_ns":9,"complete_ns":12,"outcome":"committed","reads":[["x",null]],"writes":[]}"#
    );
    let (good, err) = run("stale.jsonl", &stale, "strict-serializable");
    assert!(!good && err.contains("not strictly serializable"), "{err}");
    let (good, err) = run("model.jsonl", ok, "sequential");
    assert!(
        !good && err.contains("strict-serializable or linearizable"),
        "{err}"
    );
    let (good, err) = run("dup.jsonl", &format!("{ok}\n{ok}\n"), "strict-serializable");
    assert!(!good && err.contains("values must be unique"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
