//! A peer system as the comparison sees it: reachable servers that can be
//! reset and loaded with a workload, give out connections, and show their
//! final state for the post-run check.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::workload::{PeerConn, PeerWorkload, Table};

/// What a system promises about a commit it acknowledged, read from the
/// running servers where they tell it.
#[derive(Clone, Debug, Serialize)]
pub struct Durability {
    pub version: String,
    /// Disk: what survives a power loss.
    pub persistence: String,
    /// Copies and how they are kept.
    pub replication: String,
}

pub trait PeerSystem: Send + Sync {
    fn name(&self) -> &'static str;
    /// Where its servers listen (for messages).
    fn endpoint(&self) -> String;
    /// One connection; `client` spreads clients over several servers.
    fn connect(&self, client: usize) -> Result<Box<dyn PeerConn>, String>;
    /// Drop any previous data and load `w`'s initial rows.
    fn load(&self, w: &PeerWorkload) -> Result<(), String>;
    /// Every row of `table` (ids `0..rows` expected), id → value.
    fn snapshot(&self, table: Table, rows: u64) -> Result<BTreeMap<u64, i64>, String>;
    fn durability(&self) -> Result<Durability, String>;
}

/// Loopback ports of the servers `scripts/peers.sh` starts (the same
/// environment variables override both).
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub postgres_port: u16,
    pub redis_port: u16,
    /// Client ports of the three etcd members.
    pub etcd_ports: [u16; 3],
    /// The same for the etcd cluster without WAL fsync (`peers.sh start etcd-nofsync`).
    pub etcd_nofsync_ports: [u16; 3],
    /// The primary of Redis with two replicas (`peers.sh start redis-repl`).
    pub redis_repl_port: u16,
}

impl Endpoints {
    pub fn from_env() -> Result<Endpoints, String> {
        let port = |var: &str, default: u16| -> Result<u16, String> {
            match std::env::var(var) {
                Ok(v) => v
                    .parse()
                    .map_err(|_| format!("${var} must be a port number, got '{v}'")),
                Err(_) => Ok(default),
            }
        };
        let etcd = port("PEERS_ETCD_PORT", 22379)?;
        let nofsync = port("PEERS_ETCD_NOFSYNC_PORT", 22479)?;
        Ok(Endpoints {
            postgres_port: port("PEERS_PG_PORT", 25432)?,
            redis_port: port("PEERS_REDIS_PORT", 26379)?,
            etcd_ports: [etcd, etcd + 10, etcd + 20],
            etcd_nofsync_ports: [nofsync, nofsync + 10, nofsync + 20],
            redis_repl_port: port("PEERS_REDIS_REPL_PORT", 26380)?,
        })
    }
}
