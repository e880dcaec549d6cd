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
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "pandora",
            "compute-server",
            "--membership",
            membership,
            "--node",
            &node.to_string(),
            "--resp",
            resp,
        ])
        .args(shape(memory))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .split("RESP on 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            panic!("compute server {node} did not say where it serves RESP: {line:?}")
        });
    (Proc(child), port)
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
        let r = redis_cli(port, &["set", "probe", "x"]);
        if r == "OK" {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    redis_cli(port, &["set", "probe", "x"])
}

/// redis-py's directory, or `None` (skip) where it cannot be installed.
fn pyredis() -> Option<String> {
    let ws = common::workspace();
    let out = Command::new("bash")
        .arg(ws.join("scripts/pyredis.sh"))
        .output()
        .unwrap();
    if !out.status.success() || Command::new("redis-cli").arg("--version").output().is_err() {
        let why = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-py or redis-cli missing: {why}"
        );
        eprintln!("SKIPPED: redis-py or redis-cli cannot be installed here: {why}");
        return None;
    }
    Some(
        ws.join(String::from_utf8_lossy(&out.stdout).trim())
            .display()
            .to_string(),
    )
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
    let py = Command::new("python3")
        .arg(common::workspace().join("scripts/resp_history.py"))
        .args([
            "--ports",
            &format!("{p1},{p2}"),
            "--password",
            &client_key(),
            "--seconds",
            "9",
        ])
        .arg("--out")
        .arg(&history)
        .env("PYTHONPATH", &pypath)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
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
    let out = py.wait_with_output().unwrap();
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the history client failed: {summary}");
    let s: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    assert!(s["committed"].as_u64().unwrap() > 1000, "{summary}");
    // The faults were seen: a fenced or missing node's errors, or lost connections.
    assert!(
        !s["errors"].as_object().unwrap().is_empty(),
        "no client saw a fault: {summary}"
    );

    let check = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("check")
        .arg(&history)
        .output()
        .unwrap();
    let verdict = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(
        check.status.success() && verdict.contains("strictly serializable"),
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
