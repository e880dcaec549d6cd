//! HEAL in `experiment heal-peers`: a configuration manager and five
//! `tandem node --recovery heal` processes (⟨Lin, Synch⟩, `HealCluster`).
//! Node 2 is the one stopped. It answers once its event loop runs (its
//! NVM file loaded): `node_stats` gets a reply. It has caught up when it
//! goes online, which it logs (`HEAL: recovered in …`): by then it holds
//! every write acknowledged before, from its NVM and its Buddy.
//! `heal-fsync` is the same with `tandem node --fsync`: every persist is
//! flushed to the device before it counts, as ZooKeeper and etcd fsync.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tandem_ddp::{Op, Reply};
use tandem_net::client::{node_stats, Client};

use crate::heal::procs::HealCluster;
use tandem_peers::ensemble::writers::{Connect, Writer};
use tandem_peers::ensemble::{Notes, Peer, Started};

const VICTIM: usize = 2;

pub(crate) struct HealSystem {
    exe: PathBuf,
    dir: PathBuf,
    model: String,
    c: Option<HealCluster>,
    log_from: usize,
    fsync: bool,
}

impl HealSystem {
    pub(crate) fn new(exe: &Path, dir: &Path, model: &str, fsync: bool) -> Self {
        HealSystem {
            exe: exe.into(),
            dir: dir.into(),
            model: model.into(),
            c: None,
            log_from: 0,
            fsync,
        }
    }

    fn cluster(&self) -> &HealCluster {
        self.c.as_ref().expect("started")
    }

    /// The `HEAL:` line node `m` logged since its restart.
    fn heal_line(&self, m: usize) -> Option<String> {
        let log = self.cluster().node_log(m);
        log.get(self.log_from..)?
            .lines()
            .find(|l| l.contains("HEAL:"))
            .map(str::to_string)
    }
}

impl Peer for HealSystem {
    fn name(&self) -> &'static str {
        if self.fsync {
            "heal-fsync"
        } else {
            "heal"
        }
    }

    fn start(&mut self) -> Result<Started, String> {
        self.c = None;
        self.c = Some(HealCluster::start_with(
            &self.exe,
            &self.model,
            &self.dir,
            self.fsync,
        )?);
        Ok(Started::Up)
    }

    fn follower(&mut self) -> Result<usize, String> {
        Ok(VICTIM)
    }

    fn member_name(&self, m: usize) -> String {
        format!("node {m} ({})", self.cluster().addrs[m])
    }

    fn connect(&self, follower: usize) -> Connect {
        let c = self.cluster();
        let up: Vec<SocketAddr> = c
            .addrs
            .iter()
            .enumerate()
            .filter(|&(m, _)| m != follower)
            .map(|(_, a)| *a)
            .collect();
        let keys = c.keys();
        let scoped = self.model.ends_with("-scope");
        Arc::new(move |t| {
            HealWriter::connect(up[t % up.len()], &keys, scoped)
                .map(|w| Box::new(w) as Box<dyn Writer>)
        })
    }

    /// HEAL has no log index: the experiment counts acknowledged writes instead.
    fn follower_index(&self, _m: usize) -> Option<u64> {
        None
    }

    fn leader_index(&self) -> Result<Option<u64>, String> {
        Ok(None)
    }

    fn kill(&mut self, m: usize) -> Result<(), String> {
        self.c.as_mut().expect("started").kill(m);
        Ok(())
    }

    fn restart(&mut self, m: usize) -> Result<(), String> {
        self.log_from = self.cluster().node_log(m).len();
        self.c.as_mut().expect("started").start_node(m)
    }

    fn answers(&self, m: usize) -> bool {
        let c = self.cluster();
        node_stats(c.addrs[m], &c.keys(), Duration::from_millis(200)).is_ok()
    }

    fn caught_up(&self, m: usize, _target: u64) -> bool {
        self.heal_line(m).is_some()
    }

    fn notes(&mut self, m: usize) -> Result<Notes, String> {
        let line = self.heal_line(m).unwrap_or_default();
        let missed = number_before(&line, " missed updates");
        let reported_ms =
            number_after(&line, "recovered in ").or_else(|| number_after(&line, "full copy in "));
        let how = if line.contains("full copy") {
            "full copy (no Buddy: HEAL's fallback)".to_string()
        } else {
            format!(
                "HEAL: {} missed updates from its Buddy",
                missed.map_or("?".into(), |n| n.to_string())
            )
        };
        let phase = |name: &str| number_after(&line, &format!("{name} "));
        let phases = json!({ "start_to_ack_ms": phase("Start_to_ACK"), "catchup_to_resp_ms": phase("CatchUp_to_Resp"), "apply_to_end_ms": phase("Apply_to_end") });
        Ok(Notes {
            how,
            extra: json!({ "heal_line": line.trim(), "missed_updates": missed, "reported_recovery_ms": reported_ms, "phases": phases }),
        })
    }

    fn stop(&mut self) {
        self.c = None;
    }
}

/// The number just after `prefix` in `line`.
fn number_after(line: &str, prefix: &str) -> Option<f64> {
    let rest = &line[line.find(prefix)? + prefix.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The whole number just before `suffix` in `line`.
fn number_before(line: &str, suffix: &str) -> Option<u64> {
    let head = &line[..line.find(suffix)?];
    head.rsplit(' ').next()?.parse().ok()
}

/// Session ids unique in this process (a reconnect is a new session).
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1 << 20);

/// Under Scope persistency a writer closes its scope every this many writes (the DDP paper's 10).
const SCOPE_WRITES: u32 = 10;

struct HealWriter {
    client: Client<Op, Reply>,
    /// Scope persistency: the open scope and the writes in it.
    scope: Option<(u64, u32)>,
}

impl HealWriter {
    fn connect(
        addr: SocketAddr,
        keys: &tandem_auth::Keyring,
        scoped: bool,
    ) -> Result<HealWriter, String> {
        let session = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let client = Client::connect(addr, keys, session, Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        Ok(HealWriter {
            client,
            scope: scoped.then_some((1, 0)),
        })
    }

    fn call(&mut self, op: Op) -> Result<Reply, String> {
        self.client
            .call(op)
            .map_err(|e| format!("node at {}: {e}", self.client.addr()))
    }

    /// Close the scope once it holds `SCOPE_WRITES` writes.
    fn close_scope(&mut self) -> Result<(), String> {
        let Some((seq, writes)) = self.scope.filter(|s| s.1 >= SCOPE_WRITES) else {
            return Ok(());
        };
        self.scope = Some((seq + 1, 0));
        match self.call(Op::Persist { scope: seq, writes })? {
            Reply::Persisted { .. } | Reply::ScopeLost { .. } => Ok(()),
            other => Err(format!(
                "node at {}: persist answered {other:?}",
                self.client.addr()
            )),
        }
    }
}

impl Writer for HealWriter {
    fn put(&mut self, key: u64, value: u64) -> Result<(), String> {
        let scope = self.scope.map_or(0, |s| s.0);
        match self.call(Op::write(key, value, scope))? {
            Reply::Written { .. } => {}
            other => {
                return Err(format!(
                    "node at {}: write answered {other:?}",
                    self.client.addr()
                ))
            }
        }
        if let Some(s) = self.scope.as_mut() {
            s.1 += 1;
        }
        self.close_scope()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heal_line_gives_its_numbers() {
        let line = "node 2: HEAL: recovered in 12.5 ms (Start_to_ACK 0.3, CatchUp_to_Resp 4.0, Apply_to_end 8.2); Buddy 3 sent 3935 missed updates and 2 in flight; 0 Partially_persisted entries, 0 committed";
        assert_eq!(number_after(line, "recovered in "), Some(12.5));
        assert_eq!(number_before(line, " missed updates"), Some(3935));
        assert_eq!(number_before("no such", " missed updates"), None);
    }
}
