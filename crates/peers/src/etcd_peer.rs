//! etcd (3 members, Raft) with compare-and-swap transactions: one `Txn` of
//! range requests reads every key at one revision (a linearizable read);
//! the writes go in a second `Txn` whose compares require each key's
//! `mod_revision` to be the one read, so a conflicting commit makes it fail
//! (an abort). A read-only transaction is the first `Txn` alone.
//!
//! It speaks etcd's v3 JSON gateway (`/v3/kv/txn`, base64 keys and values)
//! over HTTP/1.1 keep-alive: the gRPC crate would need `protoc` to build. The
//! gateway adds a JSON↔protobuf translation inside etcd per request; that
//! cost is etcd's own HTTP front end, reported with the results.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::etcd::{int, op_put, op_range, prefix_end, same_revision, unb64_text, Etcd};
use crate::system::{Durability, PeerSystem};
use crate::workload::{Decision, Executed, PeerConn, PeerError, PeerWorkload, Table, TxPlan};

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;
/// Rows per page when inspecting.
const PAGE: u64 = 5_000;
/// How long one request may take before the client gives up.
const TIMEOUT: Duration = Duration::from_secs(20);

pub struct EtcdSystem {
    ports: [u16; 3],
}

impl EtcdSystem {
    pub fn new(ports: [u16; 3]) -> Self {
        EtcdSystem { ports }
    }

    /// Clients spread over the members, as etcd's own client balances them.
    fn member(&self, i: usize) -> Etcd {
        Etcd::member(self.ports[i % self.ports.len()], TIMEOUT)
    }
}

impl PeerSystem for EtcdSystem {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn endpoint(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn connect(&self, client: usize) -> Result<Box<dyn PeerConn>, String> {
        let etcd = self.member(client);
        etcd.version()
            .map_err(|e| format!("cannot reach etcd on {}: {e}", etcd.base()))?;
        Ok(Box::new(EtcdConn { etcd }))
    }

    fn load(&self, w: &PeerWorkload) -> Result<(), String> {
        for t in [Table::Savings, Table::Checking, Table::Micro] {
            self.member(0).clear_prefix(&format!("{}:", t.prefix()))?;
        }
        let init = w.initial_value().to_string();
        let mut batches: Vec<Vec<String>> = Vec::new();
        for (t, rows) in w.tables() {
            let keys: Vec<String> = (0..rows).map(|id| format!("{}:{id}", t.prefix())).collect();
            batches.extend(keys.chunks(MAX_TXN_OPS).map(|c| c.to_vec()));
        }
        // Eight loaders in parallel, one Txn of puts per batch.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (batches, next, init) = (&batches, &next, &init);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..8)
                .map(|w| s.spawn(move || self.load_batches(w, batches, next, init)))
                .collect();
            workers
                .into_iter()
                .map(|h| h.join().expect("loader thread"))
                .collect::<Result<Vec<()>, String>>()
        })?;
        Ok(())
    }

    fn snapshot(&self, table: Table, _rows: u64) -> Result<BTreeMap<u64, i64>, String> {
        let prefix = format!("{}:", table.prefix());
        let end = prefix_end(&prefix);
        let etcd = self.member(0);
        let mut out = BTreeMap::new();
        let mut from = prefix.clone();
        loop {
            let (page, more) = etcd.range_page(&from, &end, PAGE)?;
            for (k, v) in &page {
                let id = k
                    .strip_prefix(&prefix)
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| format!("etcd: unexpected key {k}"))?;
                let v = v
                    .parse::<i64>()
                    .map_err(|_| format!("etcd: key {k} holds {v:?}"))?;
                out.insert(id, v);
            }
            match (more, page.last()) {
                (true, Some((last, _))) => from = last.clone() + "\0",
                _ => return Ok(out),
            }
        }
    }

    fn durability(&self) -> Result<Durability, String> {
        let etcd = self.member(0);
        let n = etcd.member_count()?;
        Ok(Durability {
            version: format!("etcd {}", etcd.version()?),
            persistence:
                "Raft WAL on local disk, fsync before every commit is acknowledged (etcd default)"
                    .into(),
            replication: format!(
                "Raft over {n} members on loopback (quorum {}), JSON gateway over HTTP/1.1",
                n / 2 + 1
            ),
        })
    }
}

impl EtcdSystem {
    /// One loader: takes batches until none is left, one `Txn` of puts each.
    fn load_batches(
        &self,
        w: usize,
        batches: &[Vec<String>],
        next: &std::sync::atomic::AtomicUsize,
        init: &str,
    ) -> Result<(), String> {
        let etcd = self.member(w);
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(batch) = batches.get(i) else {
                return Ok(());
            };
            let puts = batch
                .iter()
                .map(|k| op_put(k.as_bytes(), init.as_bytes()))
                .collect();
            etcd.txn(vec![], puts)
                .map_err(|e| format!("etcd load: {e}"))?;
        }
    }
}

struct EtcdConn {
    etcd: Etcd,
}

impl EtcdConn {
    /// Every key's value and `mod_revision`, in one `Txn` (one revision).
    fn read(&self, names: &[String]) -> Result<(Vec<i64>, Vec<i64>), String> {
        let ranges = names.iter().map(|k| op_range(k.as_bytes())).collect();
        let r = self.etcd.txn(vec![], ranges)?;
        let responses = r["responses"].as_array().cloned().unwrap_or_default();
        let mut values = Vec::with_capacity(names.len());
        let mut revs = Vec::with_capacity(names.len());
        for (i, k) in names.iter().enumerate() {
            let kv = responses
                .get(i)
                .map(|x| x["response_range"]["kvs"][0].clone())
                .unwrap_or(Value::Null);
            if kv.is_null() {
                return Err(format!("etcd: key {k} missing"));
            }
            let v = unb64_text(&kv["value"])?;
            values.push(
                v.parse::<i64>()
                    .map_err(|_| format!("etcd: key {k} holds {v:?}"))?,
            );
            revs.push(int(&kv["mod_revision"]));
        }
        Ok((values, revs))
    }
}

impl PeerConn for EtcdConn {
    fn execute(&mut self, plan: &TxPlan) -> Result<Executed, PeerError> {
        let names: Vec<String> = plan.reads.iter().map(|k| k.name()).collect();
        let (values, revs) = self
            .read(&names)
            .map_err(|e| PeerError::Failed(format!("etcd read: {e}")))?;
        let decision = plan.decide(&values);
        let writes = match &decision {
            // The read Txn was one linearizable snapshot: nothing to validate.
            Decision::ReadOnly => return Ok(Executed::Committed { values, decision }),
            Decision::Rollback => return Ok(Executed::RolledBack),
            Decision::Write(w) => w,
        };
        let compares = names
            .iter()
            .zip(&revs)
            .map(|(k, &rev)| same_revision(k.as_bytes(), rev))
            .collect();
        let puts = writes
            .iter()
            .map(|(k, v)| op_put(k.name().as_bytes(), v.to_string().as_bytes()))
            .collect();
        match self.etcd.txn(compares, puts) {
            Ok(r) if r["succeeded"].as_bool().unwrap_or(false) => {
                Ok(Executed::Committed { values, decision })
            }
            Ok(_) => Ok(Executed::Aborted),
            // Sent, but no answer: it may have committed.
            Err(e) => Err(PeerError::InDoubt {
                error: format!("etcd txn: {e}"),
                values,
                decision,
            }),
        }
    }
}
