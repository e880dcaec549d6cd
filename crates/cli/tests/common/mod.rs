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
