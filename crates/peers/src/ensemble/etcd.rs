//! The etcd cluster of `experiment heal-peers`: three members of Debian's
//! etcd on loopback (`scripts/peers.sh start etcd`, on ports and a data
//! directory of its own), written through the v3 JSON gateway
//! (`/v3/kv/put`). A member's progress is its `raftAppliedIndex` from
//! `/v3/maintenance/status`; the leader's is its `raftIndex`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::etcd::Etcd;

use super::writers::{Connect, Writer};
use super::{log_len, log_since, run_script, spawn_script, wait_script, Notes, Peer, Started};

const SCRIPT: &str = "scripts/peers.sh";
/// Client port of member 1 (member i: +10·(i−1), its peer port +1); clear of
/// the clusters `tandem compare` uses (22379, 22479) and below the ephemeral
/// ports (32768 and up here): a client socket once took a member's peer port.
pub const BASE_PORT: u16 = 24579;
/// A probe of a member's state gives up after this.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// A client's write gives up after this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct EtcdCluster {
    /// `etcd` (WAL fsync'd, etcd's default) or `etcd-nofsync`, as `scripts/peers.sh` names them.
    cluster: &'static str,
    root: PathBuf,
    dir: PathBuf,
    /// Each member, with a short timeout: a probe must not wait for a dead one.
    probes: Vec<Etcd>,
    restarting: Option<Child>,
    log_from: u64,
}

impl EtcdCluster {
    pub fn new(root: &Path, dir: &Path) -> Self {
        let probes = (0..3)
            .map(|m| Etcd::member(client_port(m), PROBE_TIMEOUT))
            .collect();
        EtcdCluster {
            cluster: "etcd",
            root: root.into(),
            dir: dir.into(),
            probes,
            restarting: None,
            log_from: 0,
        }
    }

    /// The cluster without WAL fsync (`scripts/peers.sh`'s `etcd-nofsync`), on the same ports.
    pub fn without_fsync(mut self) -> Self {
        self.cluster = "etcd-nofsync";
        self
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let port = if self.cluster == "etcd" {
            "PEERS_ETCD_PORT"
        } else {
            "PEERS_ETCD_NOFSYNC_PORT"
        };
        vec![
            ("PEERS_DIR", self.dir.display().to_string()),
            (port, BASE_PORT.to_string()),
        ]
    }

    fn script(&self, args: &[&str]) -> Result<(), super::ScriptError> {
        run_script(&self.root, SCRIPT, args, &self.env())
    }

    fn log(&self, m: usize) -> PathBuf {
        self.dir.join(self.cluster).join(format!("m{}.log", m + 1))
    }

    /// `/v3/maintenance/status` of member `m` (`None` if it does not answer).
    fn status(&self, m: usize) -> Option<Value> {
        self.probes[m].status().ok()
    }

    /// The leader's member id, as every member that answers sees it.
    fn leader_id(&self) -> Option<String> {
        (0..3)
            .filter_map(|m| self.status(m))
            .map(|s| s["leader"].as_str().unwrap_or("").to_string())
            .find(|l| !l.is_empty() && l != "0")
    }
}

pub fn client_port(m: usize) -> u16 {
    BASE_PORT + 10 * m as u16
}

/// etcd's JSON gateway sends 64-bit integers as strings.
fn int(v: &Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
}

impl Peer for EtcdCluster {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn start(&mut self) -> Result<Started, String> {
        let _ = self.script(&["stop", self.cluster]);
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Err(e) = self.script(&["start", self.cluster]) {
            return e.started();
        }
        Ok(Started::Up)
    }

    fn follower(&mut self) -> Result<usize, String> {
        let leader = self.leader_id().ok_or("no etcd member names a leader")?;
        (0..3)
            .find(|&m| {
                self.status(m).is_some_and(|s| {
                    s["header"]["member_id"]
                        .as_str()
                        .is_some_and(|id| id != leader)
                })
            })
            .ok_or_else(|| "no etcd member is a follower".into())
    }

    fn member_name(&self, m: usize) -> String {
        format!("m{} (127.0.0.1:{})", m + 1, client_port(m))
    }

    fn connect(&self, follower: usize) -> Connect {
        let up: Vec<usize> = (0..3).filter(|&m| m != follower).collect();
        Arc::new(move |t| {
            let etcd = Etcd::member(client_port(up[t % up.len()]), WRITE_TIMEOUT);
            Ok(Box::new(EtcdWriter { etcd }) as Box<dyn Writer>)
        })
    }

    fn follower_index(&self, m: usize) -> Option<u64> {
        int(&self.status(m)?["raftAppliedIndex"])
    }

    fn leader_index(&self) -> Result<Option<u64>, String> {
        let leader = self.leader_id().ok_or("no etcd member names a leader")?;
        let status = (0..3)
            .filter_map(|m| self.status(m))
            .find(|s| s["header"]["member_id"].as_str() == Some(&leader));
        status
            .and_then(|s| int(&s["raftIndex"]))
            .map(Some)
            .ok_or_else(|| "the etcd leader does not answer".into())
    }

    fn kill(&mut self, m: usize) -> Result<(), String> {
        self.script(&["kill-member", self.cluster, &(m + 1).to_string()])
            .map_err(String::from)
    }

    fn restart(&mut self, m: usize) -> Result<(), String> {
        self.log_from = log_len(&self.log(m));
        self.restarting = Some(spawn_script(
            &self.root,
            SCRIPT,
            &["start-member", self.cluster, &(m + 1).to_string()],
            &self.env(),
        )?);
        Ok(())
    }

    /// Its peer listener answers (etcd serves clients only once it has
    /// published itself through Raft, which needs it caught up).
    fn answers(&self, m: usize) -> bool {
        Etcd::member(client_port(m) + 1, PROBE_TIMEOUT)
            .get_text("/version")
            .is_ok()
    }

    fn caught_up(&self, m: usize, target: u64) -> bool {
        self.follower_index(m).is_some_and(|i| i >= target)
    }

    fn notes(&mut self, m: usize) -> Result<Notes, String> {
        wait_script(self.restarting.take())?;
        let log = log_since(&self.log(m), self.log_from);
        let snapshot = log
            .lines()
            .any(|l| l.contains("snapshot") && (l.contains("receiv") || l.contains("applied")));
        let how = if snapshot {
            "a snapshot from the leader"
        } else {
            "Raft log entries from the leader"
        };
        Ok(Notes {
            how: how.into(),
            extra: json!({ "snapshot": snapshot }),
        })
    }

    fn stop(&mut self) {
        let _ = wait_script(self.restarting.take());
        let _ = self.script(&["stop", self.cluster]);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The etcd key of `key`.
pub fn etcd_key(key: u64) -> String {
    format!("hp/k{key}")
}

struct EtcdWriter {
    etcd: Etcd,
}

impl Writer for EtcdWriter {
    fn put(&mut self, key: u64, value: u64) -> Result<(), String> {
        self.etcd
            .put(etcd_key(key).as_bytes(), &value.to_le_bytes())
    }
}
