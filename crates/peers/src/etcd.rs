//! The etcd client every comparison uses: one member of a cluster, spoken
//! to through etcd's v3 JSON gateway (`/v3/kv/range`, `put`, `txn`,
//! `deleterange`, `/v3/maintenance/status`) over HTTP/1.1 keep-alive. Keys
//! and values travel base64-encoded and 64-bit integers as JSON strings, as
//! the gateway defines them. The gRPC crate would need `protoc` to build;
//! the gateway's JSON↔protobuf translation is etcd's own HTTP front end,
//! and the comparisons say so beside their figures.
//!
//! Callers: [`crate::etcd_peer`] (transactions), [`crate::kv`] (YCSB),
//! [`crate::ensemble::etcd`] (kill-and-restart runs) and Kite's comparison.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

/// One member, on loopback.
pub struct Etcd {
    agent: ureq::Agent,
    base: String,
}

/// A key's value and the revision that last modified it.
pub struct Versioned {
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

impl Etcd {
    /// Member on `127.0.0.1:port`; each request gives up after `timeout`.
    pub fn member(port: u16, timeout: Duration) -> Etcd {
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .max_idle_connections_per_host(4)
            .build();
        Etcd {
            agent,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// `http://127.0.0.1:PORT` of this member.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// POST a JSON body to the gateway; errors name the path.
    pub fn call(&self, path: &str, body: &Value) -> Result<Value, String> {
        let r = self
            .agent
            .post(&format!("{}{path}", self.base))
            .send_json(body)
            .map_err(|e| format!("etcd {path} on {}: {e}", self.base))?;
        r.into_json::<Value>()
            .map_err(|e| format!("etcd {path} on {}: {e}", self.base))
    }

    /// GET a path as text (`/version`, `/metrics`).
    pub fn get_text(&self, path: &str) -> Result<String, String> {
        self.agent
            .get(&format!("{}{path}", self.base))
            .call()
            .map_err(|e| format!("etcd {path} on {}: {e}", self.base))?
            .into_string()
            .map_err(|e| format!("etcd {path} on {}: {e}", self.base))
    }

    /// The server's version, e.g. `3.4.30`.
    pub fn version(&self) -> Result<String, String> {
        let v: Value = serde_json::from_str(&self.get_text("/version")?)
            .map_err(|e| format!("etcd /version: {e}"))?;
        Ok(v["etcdserver"].as_str().unwrap_or("?").to_string())
    }

    /// Members in the cluster, as this member lists them.
    pub fn member_count(&self) -> Result<usize, String> {
        let r = self.call("/v3/cluster/member/list", &json!({}))?;
        Ok(r["members"].as_array().map_or(0, |m| m.len()))
    }

    /// `/v3/maintenance/status`: leader, member id, Raft indexes.
    pub fn status(&self) -> Result<Value, String> {
        self.call("/v3/maintenance/status", &json!({}))
    }

    /// A key's value; `serializable`: answered by this member from its own
    /// state, else a linearizable read through Raft's read index.
    pub fn range(&self, key: &[u8], serializable: bool) -> Result<Option<Versioned>, String> {
        let r = self.call(
            "/v3/kv/range",
            &json!({ "key": B64.encode(key), "serializable": serializable }),
        )?;
        let kv = &r["kvs"][0];
        if kv.is_null() {
            return Ok(None);
        }
        Ok(Some(Versioned {
            value: unb64(&kv["value"])?,
            mod_revision: int(&kv["mod_revision"]),
        }))
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.call(
            "/v3/kv/put",
            &json!({ "key": B64.encode(key), "value": B64.encode(value) }),
        )
        .map(drop)
    }

    /// One `Txn`: if every compare holds, the `success` requests, atomically.
    /// Returns the gateway's answer (`succeeded`, `responses`).
    pub fn txn(&self, compares: Vec<Value>, success: Vec<Value>) -> Result<Value, String> {
        self.call(
            "/v3/kv/txn",
            &json!({ "compare": compares, "success": success }),
        )
    }

    /// Delete every key under `prefix`, then compact the history up to that
    /// revision so it does not grow run over run.
    pub fn clear_prefix(&self, prefix: &str) -> Result<(), String> {
        let r = self.call(
            "/v3/kv/deleterange",
            &json!({"key": b64(prefix), "range_end": b64(&prefix_end(prefix))}),
        )?;
        let rev = int(&r["header"]["revision"]);
        if rev > 1 {
            // Best effort: an already compacted revision is not an error here.
            let _ = self.call(
                "/v3/kv/compaction",
                &json!({"revision": rev.to_string(), "physical": true}),
            );
        }
        Ok(())
    }

    /// Up to `limit` keys from `from` (inclusive) below `end`, and whether there are more.
    pub fn range_page(
        &self,
        from: &str,
        end: &str,
        limit: u64,
    ) -> Result<(Vec<(String, String)>, bool), String> {
        let r = self.call(
            "/v3/kv/range",
            &json!({"key": b64(from), "range_end": b64(end), "limit": limit.to_string()}),
        )?;
        let kvs = r["kvs"].as_array().cloned().unwrap_or_default();
        let text =
            |v: &Value| String::from_utf8(unb64(v)?).map_err(|e| format!("etcd: not utf-8: {e}"));
        let page = kvs
            .iter()
            .map(|kv| Ok((text(&kv["key"])?, text(&kv["value"])?)))
            .collect::<Result<Vec<_>, String>>()?;
        Ok((page, r["more"].as_bool().unwrap_or(false)))
    }

    /// WAL fsyncs so far and their mean duration in µs, from `/metrics`.
    pub fn wal_fsyncs(&self) -> Option<(u64, f64)> {
        let text = self.get_text("/metrics").ok()?;
        let metric = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        };
        let sum = metric("etcd_disk_wal_fsync_duration_seconds_sum")?;
        let count = metric("etcd_disk_wal_fsync_duration_seconds_count")?;
        let mean_us = if count > 0.0 { sum / count * 1e6 } else { 0.0 };
        Some((count as u64, mean_us))
    }
}

/// A put inside a `Txn`.
pub fn op_put(key: &[u8], value: &[u8]) -> Value {
    json!({"request_put": {"key": B64.encode(key), "value": B64.encode(value)}})
}

/// A single-key range inside a `Txn`.
pub fn op_range(key: &[u8]) -> Value {
    json!({"request_range": {"key": B64.encode(key)}})
}

/// A `Txn` compare: `key` was last modified at revision `rev`.
pub fn same_revision(key: &[u8], rev: i64) -> Value {
    json!({"key": B64.encode(key), "result": "EQUAL", "target": "MOD", "mod_revision": rev.to_string()})
}

pub fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

pub fn unb64(v: &Value) -> Result<Vec<u8>, String> {
    let s = v.as_str().unwrap_or("");
    B64.decode(s)
        .map_err(|e| format!("etcd: bad base64 {s:?}: {e}"))
}

/// A base64 field as UTF-8 text.
pub fn unb64_text(v: &Value) -> Result<String, String> {
    String::from_utf8(unb64(v)?).map_err(|e| format!("etcd: bad utf-8: {e}"))
}

/// The key after every key starting with `prefix` (etcd's prefix range end).
pub fn prefix_end(prefix: &str) -> String {
    let mut b = prefix.as_bytes().to_vec();
    *b.last_mut().expect("non-empty prefix") += 1;
    String::from_utf8(b).expect("ascii prefix")
}

/// int64 fields come back as JSON strings; absent means 0.
pub fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_exactly_the_prefix() {
        assert_eq!(prefix_end("y:"), "y;");
        assert!("y:99" < prefix_end("y:").as_str() && "y;" >= prefix_end("y:").as_str());
    }

    #[test]
    fn gateway_integers_and_bytes_decode() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
        assert_eq!(unb64(&json!(b64("k1"))).unwrap(), b"k1");
        assert!(unb64(&json!("%%")).is_err());
    }
}
