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

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

use crate::system::{Durability, PeerSystem};
use crate::workload::{Decision, Executed, PeerConn, PeerError, PeerWorkload, Table, TxPlan};

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;
/// Rows per page when inspecting.
const PAGE: u64 = 5_000;

pub struct EtcdSystem {
    ports: [u16; 3],
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .max_idle_connections_per_host(4)
        .build()
}

pub(crate) fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn unb64(v: &Value) -> Result<String, String> {
    let s = v.as_str().unwrap_or("");
    let b = B64
        .decode(s)
        .map_err(|e| format!("etcd: bad base64 {s:?}: {e}"))?;
    String::from_utf8(b).map_err(|e| format!("etcd: bad utf-8: {e}"))
}

/// The key after every key starting with `prefix` (etcd's prefix range end).
pub(crate) fn prefix_end(prefix: &str) -> String {
    let mut b = prefix.as_bytes().to_vec();
    *b.last_mut().expect("non-empty prefix") += 1;
    String::from_utf8(b).expect("ascii prefix")
}

/// int64 fields come back as JSON strings; absent means 0.
pub(crate) fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

pub(crate) fn post(agent: &ureq::Agent, url: &str, body: &Value) -> Result<Value, String> {
    let r = agent.post(url).send_json(body).map_err(|e| e.to_string())?;
    r.into_json::<Value>().map_err(|e| e.to_string())
}

impl EtcdSystem {
    pub fn new(ports: [u16; 3]) -> Self {
        EtcdSystem { ports }
    }

    fn url(&self, member: usize, path: &str) -> String {
        format!(
            "http://127.0.0.1:{}{path}",
            self.ports[member % self.ports.len()]
        )
    }

    fn call(&self, path: &str, body: &Value) -> Result<Value, String> {
        post(&agent(), &self.url(0, path), body).map_err(|e| format!("etcd {path}: {e}"))
    }

    fn delete_prefix(&self, prefix: &str) -> Result<i64, String> {
        let r = self.call(
            "/v3/kv/deleterange",
            &json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix))}),
        )?;
        Ok(int(&r["header"]["revision"]))
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
        // Clients spread over the members, as etcd's own client balances them.
        let url = self.url(client, "/v3/kv/txn");
        let agent = agent();
        agent
            .get(&self.url(client, "/version"))
            .call()
            .map_err(|e| format!("cannot reach etcd on {}: {e}", self.url(client, "")))?;
        Ok(Box::new(EtcdConn { agent, url }))
    }

    fn load(&self, w: &PeerWorkload) -> Result<(), String> {
        let mut rev = 0;
        for t in [Table::Savings, Table::Checking, Table::Micro] {
            rev = rev.max(self.delete_prefix(&format!("{}:", t.prefix()))?);
        }
        // Keep the keyspace history from growing run over run.
        if rev > 1 {
            let _ = self.call(
                "/v3/kv/compaction",
                &json!({"revision": rev.to_string(), "physical": true}),
            );
        }
        let init = w.initial_value().to_string();
        let mut batches: Vec<Vec<String>> = Vec::new();
        for (t, rows) in w.tables() {
            let keys: Vec<String> = (0..rows).map(|id| format!("{}:{id}", t.prefix())).collect();
            batches.extend(keys.chunks(MAX_TXN_OPS).map(|c| c.to_vec()));
        }
        // Eight loaders in parallel, one Txn of puts per batch.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let batches = &batches;
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..8)
                .map(|w| {
                    let (next, init) = (&next, &init);
                    s.spawn(move || -> Result<(), String> {
                        let agent = agent();
                        let url = self.url(w, "/v3/kv/txn");
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(batch) = batches.get(i) else {
                                return Ok(());
                            };
                            let puts: Vec<Value> = batch
                                .iter()
                                .map(
                                    |k| json!({"request_put": {"key": b64(k), "value": b64(init)}}),
                                )
                                .collect();
                            post(&agent, &url, &json!({"success": puts}))
                                .map_err(|e| format!("etcd load: {e}"))?;
                        }
                    })
                })
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
        let end = b64(&prefix_end(&prefix));
        let mut out = BTreeMap::new();
        let mut from = prefix.clone();
        loop {
            let r = self.call(
                "/v3/kv/range",
                &json!({"key": b64(&from), "range_end": end, "limit": PAGE.to_string()}),
            )?;
            let kvs = r["kvs"].as_array().cloned().unwrap_or_default();
            for kv in &kvs {
                let k = unb64(&kv["key"])?;
                let v = unb64(&kv["value"])?;
                let id = k
                    .strip_prefix(&prefix)
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| format!("etcd: unexpected key {k}"))?;
                out.insert(
                    id,
                    v.parse::<i64>()
                        .map_err(|_| format!("etcd: key {k} holds {v:?}"))?,
                );
            }
            match (r["more"].as_bool().unwrap_or(false), kvs.last()) {
                (true, Some(last)) => from = unb64(&last["key"])? + "\0",
                _ => return Ok(out),
            }
        }
    }

    fn durability(&self) -> Result<Durability, String> {
        let version = agent()
            .get(&self.url(0, "/version"))
            .call()
            .map_err(|e| format!("etcd /version: {e}"))?
            .into_json::<Value>()
            .map_err(|e| e.to_string())?;
        let members = self.call("/v3/cluster/member/list", &json!({}))?;
        let n = members["members"].as_array().map(|m| m.len()).unwrap_or(0);
        Ok(Durability {
            version: format!("etcd {}", version["etcdserver"].as_str().unwrap_or("?")),
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

struct EtcdConn {
    agent: ureq::Agent,
    url: String,
}

impl PeerConn for EtcdConn {
    fn execute(&mut self, plan: &TxPlan) -> Result<Executed, PeerError> {
        let names: Vec<String> = plan.reads.iter().map(|k| k.name()).collect();
        let ranges: Vec<Value> = names
            .iter()
            .map(|k| json!({"request_range": {"key": b64(k)}}))
            .collect();
        let r = post(&self.agent, &self.url, &json!({"success": ranges}))
            .map_err(|e| PeerError::Failed(format!("etcd read: {e}")))?;
        let mut values = Vec::with_capacity(names.len());
        let mut revs = Vec::with_capacity(names.len());
        let responses = r["responses"].as_array().cloned().unwrap_or_default();
        for (i, k) in names.iter().enumerate() {
            let kv = &responses
                .get(i)
                .map(|x| x["response_range"]["kvs"][0].clone())
                .unwrap_or(Value::Null);
            if kv.is_null() {
                return Err(PeerError::Failed(format!("etcd: key {k} missing")));
            }
            let v = unb64(&kv["value"]).map_err(PeerError::Failed)?;
            values.push(
                v.parse::<i64>()
                    .map_err(|_| PeerError::Failed(format!("etcd: key {k} holds {v:?}")))?,
            );
            revs.push(int(&kv["mod_revision"]));
        }
        let decision = plan.decide(&values);
        let writes = match &decision {
            // The read Txn was one linearizable snapshot: nothing to validate.
            Decision::ReadOnly => return Ok(Executed::Committed { values, decision }),
            Decision::Rollback => return Ok(Executed::RolledBack),
            Decision::Write(w) => w,
        };
        let compares: Vec<Value> = names
            .iter()
            .zip(&revs)
            .map(|(k, rev)| json!({"key": b64(k), "result": "EQUAL", "target": "MOD", "mod_revision": rev.to_string()}))
            .collect();
        let puts: Vec<Value> = writes.iter().map(|(k, v)| json!({"request_put": {"key": b64(&k.name()), "value": b64(&v.to_string())}})).collect();
        match post(
            &self.agent,
            &self.url,
            &json!({"compare": compares, "success": puts}),
        ) {
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
