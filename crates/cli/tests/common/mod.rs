//! Helpers shared by the CLI tests that run `tandem` and read its output.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run `tandem args` from the workspace root.
pub fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("run tandem")
}

/// `tandem args` must fail, saying `message`.
pub fn fails_with(args: &[&str], message: &str) {
    let out = tandem(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        stderr.contains(message),
        "{args:?}: expected '{message}' in:\n{stderr}"
    );
}

/// A standalone ZooKeeper from `scripts/zookeeper.sh` on a free loopback
/// port with a fresh data directory, stopped when dropped.
pub struct ZooKeeper {
    pub port: u16,
    dir: std::path::PathBuf,
}

impl ZooKeeper {
    fn script() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/zookeeper.sh")
    }

    /// `Err` only when ZooKeeper cannot be installed here (the script's exit 3).
    fn start(tag: &str) -> Result<ZooKeeper, String> {
        let port = tandem_net::ports::reserve_loopback().unwrap().port();
        let dir = std::env::temp_dir().join(format!("tandem-zk-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let zk = ZooKeeper { port, dir };
        let out = std::process::Command::new("bash")
            .arg(Self::script())
            .arg("start")
            .env("ZK_PORT", port.to_string())
            .env("ZK_DIR", &zk.dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        match out.status.code() {
            Some(0) => Ok(zk),
            Some(3) => Err(err),
            _ => panic!("scripts/zookeeper.sh start failed:\n{err}"),
        }
    }
}

impl ZooKeeper {
    /// Start one, or (only outside CI, where ZooKeeper cannot be installed)
    /// print why the test is skipped. CI must exercise the ZooKeeper path.
    pub fn start_or_skip(tag: &str) -> Option<ZooKeeper> {
        match ZooKeeper::start(tag) {
            Ok(zk) => Some(zk),
            Err(why) if std::env::var_os("CI").is_none() => {
                eprintln!("SKIPPED: ZooKeeper cannot be installed here: {why}");
                None
            }
            Err(why) => panic!(
                "CI must exercise the ZooKeeper path, but ZooKeeper cannot be installed: {why}"
            ),
        }
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(Self::script())
            .arg("stop")
            .env("ZK_PORT", self.port.to_string())
            .env("ZK_DIR", &self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Commits per 100 ms of a compute server's JSON report.
pub fn read_timeline(json: &std::path::Path) -> Vec<u64> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    v["timeline_100ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// A child process killed when the test ends, however it ends.
pub struct Proc(pub std::process::Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `tandem args`; the address of its `listening on ADDR` line.
pub fn spawn_announcing(args: &[&str], stderr_to: Option<&std::path::Path>) -> (Proc, String) {
    let stderr = match stderr_to {
        Some(p) => std::process::Stdio::from(std::fs::File::create(p).unwrap()),
        None => std::process::Stdio::null(),
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{args:?} did not announce: {line}"))
        .to_string();
    (Proc(child), addr)
}

/// Wait (bounded) until the file holds every needle; its text.
pub fn wait_for_log(path: &std::path::Path, what: &[&str], timeout: std::time::Duration) -> String {
    let until = std::time::Instant::now() + timeout;
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if what.iter().all(|w| log.contains(w)) || std::time::Instant::now() > until {
            return log;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Send `wire`, read what comes back until 300 ms pass without more (10 s
/// at most for the first byte).
pub fn call(c: &mut std::net::TcpStream, wire: &[u8]) -> String {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    c.write_all(wire).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) if !out.is_empty() => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                continue
            }
            Err(e) => panic!(
                "no answer to {:?}: {e}",
                String::from_utf8_lossy(&wire[..wire.len().min(60)])
            ),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a hostile client tries against a RESP port serving at most
/// `max_clients` (`auth`: the password its connections must give first):
/// garbage, huge lengths, deep nesting, endless blank lines, a request a
/// byte at a time, a pipeline never read, one connection too many. The
/// server must answer, stay bounded and keep serving a well-behaved
/// client; `alive` says whether its process still runs.
pub fn resp_attack(
    port: u16,
    auth: Option<&str>,
    max_clients: usize,
    alive: &mut dyn FnMut() -> bool,
) {
    use std::io::Write;
    use std::net::TcpStream;
    use std::time::Duration;
    let hello = auth.map_or(String::new(), |pw| format!("AUTH {pw}\r\n"));
    let ok = if auth.is_some() { "+OK\r\n" } else { "" };
    let connect = || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        if !hello.is_empty() {
            assert_eq!(call(&mut c, hello.as_bytes()), ok);
        }
        c
    };
    let mut good = connect();
    let refused = |wire: &[u8], want: &str| {
        let mut c = connect();
        let out = call(&mut c, wire);
        assert!(out.contains(want), "{want}: {out}");
    };
    refused(b"*x\r\n", "Protocol error: invalid multibulk length");
    refused(
        b"*1\r\n$99999999999\r\n",
        "Protocol error: invalid bulk length",
    );
    refused(
        b"*99999999999\r\n",
        "Protocol error: invalid multibulk length",
    );
    refused(
        &b"*1\r\n".repeat(100_000),
        "Protocol error: expected '$', got '*'",
    );
    refused(&[b'a'; 100_000], "Protocol error: too big inline request");
    refused(
        &[&[0xffu8; 64][..], b"\r\n"].concat(),
        "-ERR unknown command",
    );
    // A million empty lines cost nothing but reading them.
    let mut blank = connect();
    let mut wire = b"\r\n".repeat(1_000_000);
    wire.extend_from_slice(b"PING\r\n");
    assert_eq!(call(&mut blank, &wire), "+PONG\r\n");
    // A request a byte at a time, while another client is served.
    let mut slow = connect();
    for &b in b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$1\r\n1\r\n".iter() {
        slow.write_all(&[b]).unwrap();
        assert_eq!(call(&mut good, b"PING\r\n"), "+PONG\r\n");
    }
    assert_eq!(call(&mut slow, b""), "+OK\r\n");
    // A pipeline written and never read: the server stops reading it.
    let mut flood = connect();
    flood
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let burst = b"PING\r\n".repeat(10_000);
    let mut sent = 0;
    while sent < 200 && flood.write_all(&burst).is_ok() {
        sent += 1;
    }
    assert!(
        sent < 200,
        "the server read 2,000,000 requests whose answers nobody read"
    );
    assert_eq!(call(&mut good, b"GET slow\r\n"), "$1\r\n1\r\n");
    // Past the connection limit: told, and closed. Connections still
    // closing count for a moment, so the ones over the limit are opened
    // until one is refused.
    let mut extra = Vec::new();
    let over = loop {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let out = call(&mut c, b"PING\r\n");
        if out.contains("max number of clients reached") {
            break out;
        }
        extra.push(c);
        assert!(
            extra.len() <= max_clients,
            "connections served past a limit of {max_clients}"
        );
    };
    assert!(over.contains("max number of clients"), "{over}");
    drop(extra);
    drop(flood);
    assert!(alive(), "the server died");
    assert_eq!(call(&mut good, b"PING\r\n"), "+PONG\r\n");
}

/// Python's Redis client (redis-py, installed by `scripts/pyredis.sh`): the
/// directory to put on PYTHONPATH, or `None` (the test skips) where it
/// cannot be installed; under CI (`CI` set) that fails the test instead.
pub fn pyredis_dir() -> Option<PathBuf> {
    let ws = workspace();
    let out = Command::new("bash")
        .arg(ws.join("scripts/pyredis.sh"))
        .output()
        .unwrap();
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-py cannot be installed: {why}"
        );
        eprintln!("SKIPPED: redis-py cannot be installed here: {why}");
        return None;
    }
    Some(ws.join(String::from_utf8_lossy(&out.stdout).trim()))
}
