//! Plain key-value peers for YCSB (`tandem compare --system ddp`): etcd
//! (linearizable range reads and puts over its JSON gateway, three Raft
//! members, with or without WAL fsync) and Redis (GET/SET on a primary with
//! two asynchronous replicas, optionally `WAIT 2` after every SET). Keys are
//! `y:<record>`, values ASCII strings of the run's value size.

use std::time::Duration;

use crate::etcd::{op_put, Etcd};

/// Key prefix of the YCSB records.
const PREFIX: &str = "y:";
/// Puts per etcd `Txn` while loading (etcd's default `--max-txn-ops`).
const ETCD_BATCH: usize = 128;
/// How long one etcd request may take before the client gives up.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Keys per `MSET` while loading Redis.
const REDIS_BATCH: u64 = 1_000;

pub fn key(record: u64) -> String {
    format!("{PREFIX}{record}")
}

/// A value of exactly `size` ASCII digits (`n` zero-padded, or its low digits).
pub fn value(n: u64, size: usize) -> String {
    let s = format!("{n:0size$}");
    s[s.len() - size..].to_string()
}

/// One client's connection.
pub trait KvConn: Send {
    /// `Ok(false)`: the key was absent.
    fn read(&mut self, key: &str) -> Result<bool, String>;
    /// `Ok(false)`: written, but not with the promise the peer makes (a `WAIT` that timed out).
    fn update(&mut self, key: &str, value: &str) -> Result<bool, String>;
}

pub trait KvPeer: Send + Sync {
    /// Row id in the report, e.g. `etcd-fsync`.
    fn id(&self) -> &str;
    fn endpoint(&self) -> String;
    fn connect(&self, client: usize) -> Result<Box<dyn KvConn>, String>;
    /// Drop previous YCSB records, then write `records` values of `size` bytes.
    fn load(&self, records: u64, size: usize) -> Result<(), String>;
    /// The running servers' version and durability, in words.
    fn durability(&self) -> Result<String, String>;
}

// ---------------------------------------------------------------------- etcd

pub struct EtcdKv {
    id: &'static str,
    ports: [u16; 3],
    fsync: bool,
}

impl EtcdKv {
    /// `fsync`: the cluster fsyncs its WAL (etcd's default); else it is the
    /// `etcd-nofsync` cluster of `scripts/peers.sh`.
    pub fn new(ports: [u16; 3], fsync: bool) -> Self {
        EtcdKv {
            id: if fsync { "etcd-fsync" } else { "etcd-nofsync" },
            ports,
            fsync,
        }
    }

    /// Clients spread over the members, as etcd's own client balances them.
    fn member(&self, i: usize) -> Etcd {
        Etcd::member(self.ports[i % self.ports.len()], TIMEOUT)
    }

    fn no_fsync_method() -> String {
        let help = std::process::Command::new("etcd")
            .arg("--help")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default();
        if help.contains("--unsafe-no-fsync") {
            "--unsafe-no-fsync (no WAL fsync)".into()
        } else {
            "WAL on tmpfs (this etcd has no --unsafe-no-fsync; fsync there reaches no device)"
                .into()
        }
    }
}

impl KvPeer for EtcdKv {
    fn id(&self) -> &str {
        self.id
    }

    fn endpoint(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn connect(&self, client: usize) -> Result<Box<dyn KvConn>, String> {
        let etcd = self.member(client);
        etcd.version()
            .map_err(|e| format!("cannot reach {} on {}: {e}", self.id, etcd.base()))?;
        Ok(Box::new(EtcdKvConn { etcd }))
    }

    fn load(&self, records: u64, size: usize) -> Result<(), String> {
        let etcd = self.member(0);
        etcd.clear_prefix(PREFIX)?;
        let ids: Vec<u64> = (0..records).collect();
        for batch in ids.chunks(ETCD_BATCH) {
            let puts = batch
                .iter()
                .map(|&r| op_put(key(r).as_bytes(), value(r, size).as_bytes()))
                .collect();
            etcd.txn(vec![], puts)
                .map_err(|e| format!("{} load: {e}", self.id))?;
        }
        Ok(())
    }

    fn durability(&self) -> Result<String, String> {
        let etcd = self.member(0);
        let version = etcd.version().map_err(|e| format!("{}: {e}", self.id))?;
        let n = etcd.member_count()?;
        let disk = if self.fsync {
            "WAL fsync'd before a commit is acknowledged (etcd's default)".to_string()
        } else {
            Self::no_fsync_method()
        };
        let fsyncs = match etcd.wal_fsyncs() {
            Some((c, us)) => format!("; member 1 reports {c} WAL fsyncs, mean {us:.1} µs"),
            None => String::new(),
        };
        Ok(format!(
            "etcd {version}: Raft, {n} members (quorum {}), linearizable reads; {disk}{fsyncs}",
            n / 2 + 1
        ))
    }
}

struct EtcdKvConn {
    etcd: Etcd,
}

impl KvConn for EtcdKvConn {
    fn read(&mut self, key: &str) -> Result<bool, String> {
        // Not serializable: a linearizable read, through Raft's read index.
        Ok(self.etcd.range(key.as_bytes(), false)?.is_some())
    }

    fn update(&mut self, key: &str, value: &str) -> Result<bool, String> {
        self.etcd.put(key.as_bytes(), value.as_bytes())?;
        Ok(true)
    }
}

// --------------------------------------------------------------------- Redis

pub struct RedisKv {
    id: &'static str,
    port: u16,
    /// `WAIT replicas timeout_ms` after every SET.
    wait: Option<(u32, u64)>,
}

/// How long a `WAIT` may block before the write counts as unconfirmed.
pub const WAIT_TIMEOUT_MS: u64 = 1_000;

impl RedisKv {
    /// The primary of `scripts/peers.sh`'s `redis-repl`; `wait`: SET then `WAIT 2`.
    pub fn new(port: u16, wait: bool) -> Self {
        RedisKv {
            id: if wait { "redis-wait2" } else { "redis-async" },
            port,
            wait: wait.then_some((2, WAIT_TIMEOUT_MS)),
        }
    }

    fn conn(&self) -> Result<redis::Connection, String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .map_err(|e| e.to_string())?;
        client
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(|e| format!("cannot connect to Redis on 127.0.0.1:{}: {e}", self.port))
    }
}

fn rerr(e: redis::RedisError) -> String {
    format!("redis: {e}")
}

fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or("?")
        .trim()
        .to_string()
}

impl KvPeer for RedisKv {
    fn id(&self) -> &str {
        self.id
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn connect(&self, _client: usize) -> Result<Box<dyn KvConn>, String> {
        Ok(Box::new(RedisKvConn {
            conn: self.conn()?,
            wait: self.wait,
        }))
    }

    fn load(&self, records: u64, size: usize) -> Result<(), String> {
        let mut c = self.conn()?;
        redis::cmd("FLUSHALL").query::<()>(&mut c).map_err(rerr)?;
        let mut start = 0;
        while start < records {
            let end = (start + REDIS_BATCH).min(records);
            let mut cmd = redis::cmd("MSET");
            for r in start..end {
                cmd.arg(key(r)).arg(value(r, size));
            }
            cmd.query::<()>(&mut c).map_err(rerr)?;
            start = end;
        }
        // Both variants start with the replicas caught up.
        let n: i64 = redis::cmd("WAIT")
            .arg(2)
            .arg(10_000)
            .query(&mut c)
            .map_err(rerr)?;
        if n < 2 {
            return Err(format!("Redis on 127.0.0.1:{} has {n} replicas caught up, not 2 (start them with `bash scripts/peers.sh start redis-repl`)", self.port));
        }
        Ok(())
    }

    fn durability(&self) -> Result<String, String> {
        let mut c = self.conn()?;
        let server: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut c)
            .map_err(rerr)?;
        let repl: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut c)
            .map_err(rerr)?;
        let persistence: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut c)
            .map_err(rerr)?;
        let replicas = info_field(&repl, "connected_slaves");
        let aof = if info_field(&persistence, "aof_enabled") == "1" {
            "AOF on"
        } else {
            "no AOF"
        };
        let promise = match self.wait {
            None => "a SET is acknowledged by the primary alone; replication is asynchronous, so an acknowledged write is lost if the primary crashes before sending it".to_string(),
            Some((n, t)) => format!("SET then WAIT {n} {t}: acknowledged once {n} replicas hold it, i.e. in 3 processes' memory, no disk (a machine power loss loses it; WAIT does not make failover lossless)"),
        };
        Ok(format!(
            "Redis {}: primary + {replicas} replicas, {aof}, no RDB; {promise}",
            info_field(&server, "redis_version")
        ))
    }
}

struct RedisKvConn {
    conn: redis::Connection,
    wait: Option<(u32, u64)>,
}

impl KvConn for RedisKvConn {
    fn read(&mut self, key: &str) -> Result<bool, String> {
        let v: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key)
            .query(&mut self.conn)
            .map_err(rerr)?;
        Ok(v.is_some())
    }

    fn update(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let Some((n, timeout)) = self.wait else {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query::<()>(&mut self.conn)
                .map_err(rerr)?;
            return Ok(true);
        };
        // One round trip: SET and WAIT pipelined.
        let (acked,): (i64,) = redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg(value)
            .ignore()
            .cmd("WAIT")
            .arg(n)
            .arg(timeout)
            .query(&mut self.conn)
            .map_err(rerr)?;
        Ok(acked >= i64::from(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_asked_size() {
        assert_eq!(value(42, 8), "00000042");
        assert_eq!(value(123_456, 3), "456");
        assert_eq!(value(7, 100).len(), 100);
    }
}
