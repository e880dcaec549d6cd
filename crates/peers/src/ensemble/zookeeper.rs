//! The ZooKeeper ensemble of `experiment heal-peers`: three members of
//! Debian's ZooKeeper on loopback (`scripts/zookeeper.sh start-ensemble`),
//! one znode per key under `/hp`. A member's state comes from the
//! four-letter word `srvr` (`Mode:`, and `Zxid:`, its last applied
//! transaction); its log says how it synced with the leader.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use zookeeper_client as zk;

use super::writers::{Connect, Writer};
use super::{log_len, log_since, run_script, spawn_script, wait_script, Notes, Peer, Started};

const SCRIPT: &str = "scripts/zookeeper.sh";
/// Client port of member 1 (member i: +10·(i−1)); clear of 2181, of `scripts/peers.sh`
/// and of the ephemeral ports (32768 and up here) that client sockets draw from.
pub const BASE_PORT: u16 = 24281;
const PARENT: &str = "/hp";

pub struct ZkEnsemble {
    root: PathBuf,
    dir: PathBuf,
    restarting: Option<Child>,
    log_from: u64,
    /// fsync the transaction log before acknowledging (`forceSync`, ZooKeeper's default).
    force_sync: bool,
}

impl ZkEnsemble {
    pub fn new(root: &Path, dir: &Path) -> Self {
        ZkEnsemble {
            root: root.into(),
            dir: dir.into(),
            restarting: None,
            log_from: 0,
            force_sync: true,
        }
    }

    /// An ensemble whose members do not fsync their transaction log (`forceSync=no`).
    pub fn without_fsync(mut self) -> Self {
        self.force_sync = false;
        self
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let sync = if self.force_sync { "yes" } else { "no" };
        vec![
            ("ZK_ENSEMBLE_PORT", BASE_PORT.to_string()),
            ("ZK_ENSEMBLE_DIR", self.dir.display().to_string()),
            ("ZK_FORCE_SYNC", sync.to_string()),
        ]
    }

    fn script(&self, args: &[&str]) -> Result<(), super::ScriptError> {
        run_script(&self.root, SCRIPT, args, &self.env())
    }

    fn log(&self, m: usize) -> PathBuf {
        self.dir.join(format!("m{}", m + 1)).join("zookeeper.log")
    }
}

pub fn port(m: usize) -> u16 {
    BASE_PORT + 10 * m as u16
}

/// The reply to four-letter word `word` from the member on `port` ("" if none).
pub fn four(port: u16, word: &str) -> String {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut out = String::new();
    if s.write_all(word.as_bytes()).is_ok() {
        let _ = s.read_to_string(&mut out);
    }
    out
}

/// `srvr`'s mode and zxid; `None` while the member does not serve.
fn srvr(m: usize) -> Option<(String, u64)> {
    let r = four(port(m), "srvr");
    let field = |name: &str| r.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let zxid = u64::from_str_radix(field("Zxid:")?.trim_start_matches("0x"), 16).ok()?;
    Some((field("Mode:")?.to_string(), zxid))
}

impl Peer for ZkEnsemble {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn start(&mut self) -> Result<Started, String> {
        let _ = self.script(&["stop-ensemble"]);
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Err(e) = self.script(&["start-ensemble"]) {
            return e.started();
        }
        ZkWriter::connect(port(0))?.mkdir(PARENT)?;
        Ok(Started::Up)
    }

    fn follower(&mut self) -> Result<usize, String> {
        (0..3)
            .find(|&m| srvr(m).is_some_and(|s| s.0 == "follower"))
            .ok_or_else(|| "no ZooKeeper member reports Mode: follower".into())
    }

    fn member_name(&self, m: usize) -> String {
        format!("member {} (127.0.0.1:{})", m + 1, port(m))
    }

    fn fmt_index(&self, i: u64) -> String {
        format!("zxid {i:#x}")
    }

    fn connect(&self, follower: usize) -> Connect {
        let up: Vec<usize> = (0..3).filter(|&m| m != follower).collect();
        Arc::new(move |t| {
            ZkWriter::connect(port(up[t % up.len()])).map(|w| Box::new(w) as Box<dyn Writer>)
        })
    }

    fn follower_index(&self, m: usize) -> Option<u64> {
        srvr(m).map(|s| s.1)
    }

    fn leader_index(&self) -> Result<Option<u64>, String> {
        let leader = (0..3).filter_map(srvr).find(|s| s.0 == "leader");
        leader
            .map(|s| Some(s.1))
            .ok_or_else(|| "no ZooKeeper member reports Mode: leader".into())
    }

    fn kill(&mut self, m: usize) -> Result<(), String> {
        self.script(&["kill-member", &(m + 1).to_string()])
            .map_err(String::from)
    }

    fn restart(&mut self, m: usize) -> Result<(), String> {
        self.log_from = log_len(&self.log(m));
        self.restarting = Some(spawn_script(
            &self.root,
            SCRIPT,
            &["start-member", &(m + 1).to_string()],
            &self.env(),
        )?);
        Ok(())
    }

    fn answers(&self, m: usize) -> bool {
        four(port(m), "ruok") == "imok"
    }

    fn caught_up(&self, m: usize, target: u64) -> bool {
        srvr(m).is_some_and(|(mode, zxid)| mode == "follower" && zxid >= target)
    }

    fn notes(&mut self, m: usize) -> Result<Notes, String> {
        wait_script(self.restarting.take())?;
        let log = log_since(&self.log(m), self.log_from);
        let modes: Vec<&str> = log.lines().filter_map(sync_mode).collect();
        let failures = failed_syncs(&log);
        let how = match (modes.last(), failures.len()) {
            (None, _) => "sync mode not in the log".to_string(),
            (Some(mode), 0) => format!("{mode} from the leader"),
            (Some(mode), n) => format!(
                "{mode} from the leader, at attempt {} ({n} failed)",
                modes.len().max(n + 1)
            ),
        };
        Ok(Notes {
            how,
            extra: json!({ "sync": modes.last(), "sync_attempts": modes, "failed_attempts": failures }),
        })
    }

    fn stop(&mut self) {
        let _ = wait_script(self.restarting.take());
        let _ = self.script(&["stop-ensemble"]);
    }
}

/// The sync mode a follower's log line announces (Learner.syncWithLeader).
fn sync_mode(line: &str) -> Option<&'static str> {
    [
        ("Getting a diff from the leader", "DIFF"),
        ("Getting a snapshot from leader", "SNAP"),
        ("Truncating log", "TRUNC"),
    ]
    .iter()
    .find(|(text, _)| line.contains(text))
    .map(|(_, mode)| *mode)
}

/// Why each failed attempt to follow the leader failed: the exception
/// logged after "Exception when following the leader".
fn failed_syncs(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let failed = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("Exception when following the leader"));
    failed
        .map(|(i, _)| lines.get(i + 1).map_or("?", |l| l.trim()).to_string())
        .collect()
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The znode of `key`.
pub fn path(key: u64) -> String {
    format!("{PARENT}/k{key}")
}

/// One ZooKeeper session, on a runtime of its own.
pub struct ZkWriter {
    rt: tokio::runtime::Runtime,
    client: zk::Client,
}

impl ZkWriter {
    pub fn connect(port: u16) -> Result<ZkWriter, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let hosts = format!("127.0.0.1:{port}");
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&hosts);
        let client = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), connect).await })
            .map_err(|_| format!("ZooKeeper on {hosts}: connect timed out"))?
            .map_err(|e| format!("ZooKeeper on {hosts}: {e}"))?;
        Ok(ZkWriter { rt, client })
    }

    fn mkdir(&self, path: &str) -> Result<(), String> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.rt.block_on(self.client.create(path, b"", &options)) {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(format!("ZooKeeper: cannot create {path}: {e}")),
        }
    }
}

impl ZkWriter {
    /// The data of `path` and its version (what a conditional set compares).
    pub fn get(&self, path: &str) -> Result<(Vec<u8>, i32), String> {
        let (data, stat) = self
            .rt
            .block_on(self.client.get_data(path))
            .map_err(|e| format!("ZooKeeper get {path}: {e}"))?;
        Ok((data, stat.version))
    }

    /// `sync`: the member catches up with the leader before this session's next read.
    pub fn sync(&self, path: &str) -> Result<(), String> {
        self.rt
            .block_on(self.client.sync(path))
            .map_err(|e| format!("ZooKeeper sync {path}: {e}"))
    }

    /// Set `path` to `data` if its version is `version` (any version: `None`);
    /// `Ok(false)`: the version did not match.
    pub fn set(&self, path: &str, data: &[u8], version: Option<i32>) -> Result<bool, String> {
        match self.rt.block_on(self.client.set_data(path, data, version)) {
            Ok(_) => Ok(true),
            Err(zk::Error::BadVersion) => Ok(false),
            Err(e) => Err(format!("ZooKeeper set {path}: {e}")),
        }
    }
}

impl Writer for ZkWriter {
    fn put(&mut self, key: u64, value: u64) -> Result<(), String> {
        let path = path(key);
        let data = value.to_le_bytes();
        let r = match self.rt.block_on(self.client.set_data(&path, &data, None)) {
            Err(zk::Error::NoNode) => {
                let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                self.rt
                    .block_on(self.client.create(&path, &data, &options))
                    .map(drop)
            }
            r => r.map(drop),
        };
        r.map_err(|e| format!("ZooKeeper write {path}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_tells_the_sync_mode_and_the_failed_attempts() {
        let log = "9 [QuorumPeer] INFO Learner - Getting a diff from the leader 0x1000069c0\n\
                   10 [QuorumPeer] WARN Learner - Exception when following the leader\n\
                   java.lang.NullPointerException: Cannot read field \"hdr\" because \"pif\" is null\n\
                   \tat org.apache.zookeeper.server.quorum.Learner.syncWithLeader(Learner.java:655)\n\
                   11 [QuorumPeer] INFO Learner - Getting a snapshot from leader 0x100006afb\n";
        let modes: Vec<&str> = log.lines().filter_map(sync_mode).collect();
        assert_eq!(modes, ["DIFF", "SNAP"]);
        assert_eq!(
            failed_syncs(log),
            ["java.lang.NullPointerException: Cannot read field \"hdr\" because \"pif\" is null"]
        );
    }
}
