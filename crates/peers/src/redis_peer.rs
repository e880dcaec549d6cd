//! Redis with optimistic transactions: `WATCH` every key the transaction
//! reads, `MGET` them, then `MULTI` + `SET`s + `EXEC` in one pipeline; `EXEC`
//! answering nil (a watched key changed) is an abort. A read-only transaction
//! is one `MGET`, which Redis executes atomically. Keys are `s:<id>`,
//! `c:<id>` (SmallBank) and `m:<id>` (micro), values decimal integers.

use std::collections::BTreeMap;

use redis::{Commands, Connection, Value};

use crate::system::{Durability, PeerSystem};
use crate::workload::{Decision, Executed, PeerConn, PeerError, PeerWorkload, Table, TxPlan};

/// Keys per `MSET` / `MGET` while loading and inspecting.
const BATCH: u64 = 1_000;

pub struct RedisSystem {
    port: u16,
}

impl RedisSystem {
    pub fn new(port: u16) -> Self {
        RedisSystem { port }
    }

    fn conn(&self) -> Result<Connection, String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .map_err(|e| e.to_string())?;
        client
            .get_connection_with_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| format!("cannot connect to Redis on 127.0.0.1:{}: {e}", self.port))
    }
}

fn err(e: redis::RedisError) -> String {
    format!("redis: {e}")
}

fn config_get(c: &mut Connection, what: &str) -> Result<String, String> {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(what)
        .query(c)
        .map_err(err)?;
    Ok(v.get(1).cloned().unwrap_or_default())
}

impl PeerSystem for RedisSystem {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn connect(&self, _client: usize) -> Result<Box<dyn PeerConn>, String> {
        Ok(Box::new(RedisConn { conn: self.conn()? }))
    }

    fn load(&self, w: &PeerWorkload) -> Result<(), String> {
        let mut c = self.conn()?;
        // The server is ours (scripts/peers.sh runs it for this comparison only).
        redis::cmd("FLUSHALL").query::<()>(&mut c).map_err(err)?;
        let init = w.initial_value();
        for (t, rows) in w.tables() {
            let mut start = 0;
            while start < rows {
                let end = (start + BATCH).min(rows);
                let pairs: Vec<(String, i64)> = (start..end)
                    .map(|id| (format!("{}:{id}", t.prefix()), init))
                    .collect();
                c.mset::<_, _, ()>(&pairs).map_err(err)?;
                start = end;
            }
        }
        Ok(())
    }

    fn snapshot(&self, table: Table, rows: u64) -> Result<BTreeMap<u64, i64>, String> {
        let mut c = self.conn()?;
        let mut out = BTreeMap::new();
        let mut start = 0;
        while start < rows {
            let end = (start + BATCH).min(rows);
            let keys: Vec<String> = (start..end)
                .map(|id| format!("{}:{id}", table.prefix()))
                .collect();
            let vals: Vec<Option<i64>> =
                redis::cmd("MGET").arg(&keys).query(&mut c).map_err(err)?;
            for (id, v) in (start..end).zip(vals) {
                if let Some(v) = v {
                    out.insert(id, v);
                }
            }
            start = end;
        }
        Ok(out)
    }

    fn durability(&self) -> Result<Durability, String> {
        let mut c = self.conn()?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut c)
            .map_err(err)?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string();
        let aof = config_get(&mut c, "appendonly")?;
        let fsync = config_get(&mut c, "appendfsync")?;
        let save = config_get(&mut c, "save")?;
        let repl: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut c)
            .map_err(err)?;
        let replicas = repl
            .lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .unwrap_or("0")
            .trim()
            .to_string();
        let aof = if aof == "yes" {
            format!("AOF on (appendfsync {fsync})")
        } else {
            "AOF off".into()
        };
        let rdb = if save.trim().is_empty() {
            "RDB snapshots off".to_string()
        } else {
            format!("RDB snapshots '{save}'")
        };
        Ok(Durability {
            version: format!("Redis {version}"),
            persistence: format!("in memory; {aof}; {rdb}"),
            replication: if replicas == "0" {
                "none (one server)".into()
            } else {
                format!("{replicas} asynchronous replicas")
            },
        })
    }
}

struct RedisConn {
    conn: Connection,
}

impl RedisConn {
    fn values(&mut self, keys: &[String]) -> Result<Vec<i64>, PeerError> {
        let vals: Vec<Option<i64>> = redis::cmd("MGET")
            .arg(keys)
            .query(&mut self.conn)
            .map_err(|e| PeerError::Failed(err(e)))?;
        vals.into_iter()
            .zip(keys)
            .map(|(v, k)| v.ok_or_else(|| PeerError::Failed(format!("redis: key {k} missing"))))
            .collect()
    }
}

impl PeerConn for RedisConn {
    fn execute(&mut self, plan: &TxPlan) -> Result<Executed, PeerError> {
        let keys: Vec<String> = plan.reads.iter().map(|k| k.name()).collect();
        if plan.read_only() {
            // One MGET is atomic: a consistent snapshot of the keys, no WATCH needed.
            let values = self.values(&keys)?;
            let decision = plan.decide(&values);
            return Ok(Executed::Committed { values, decision });
        }
        let failed = |e: redis::RedisError| PeerError::Failed(err(e));
        redis::cmd("WATCH")
            .arg(&keys)
            .query::<()>(&mut self.conn)
            .map_err(failed)?;
        let values = self.values(&keys)?;
        let decision = plan.decide(&values);
        let writes = match &decision {
            Decision::Rollback => {
                redis::cmd("UNWATCH")
                    .query::<()>(&mut self.conn)
                    .map_err(failed)?;
                return Ok(Executed::RolledBack);
            }
            Decision::ReadOnly => Vec::new(),
            Decision::Write(w) => w.clone(),
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (k, v) in &writes {
            pipe.cmd("SET").arg(k.name()).arg(*v);
        }
        if writes.is_empty() {
            // Validate the reads all the same: an empty MULTI/EXEC still fails on a changed key.
            pipe.cmd("PING");
        }
        match pipe.query::<Value>(&mut self.conn) {
            Ok(Value::Nil) => Ok(Executed::Aborted),
            Ok(_) => Ok(Executed::Committed { values, decision }),
            Err(e) if e.is_io_error() || e.is_connection_dropped() => Err(PeerError::InDoubt {
                error: err(e),
                values,
                decision,
            }),
            Err(e) => Err(PeerError::Failed(err(e))),
        }
    }
}
