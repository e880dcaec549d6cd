//! Michael–Scott queue (Kite paper §7.3): `head` and `tail` hold node ids, 0
//! being the queue's own dummy; a node's `next` is 0 until linked. The
//! links are acquired and CASed, node fields written and read relaxed.

use super::{field, Api, Lost, ROOTS};
use crate::types::*;

/// The queue's dummy node (its fields) and roots.
pub fn dummy(q: u64) -> Key {
    ROOTS + q * 64
}
pub fn head(q: u64) -> Key {
    dummy(q) + 62
}
pub fn tail(q: u64) -> Key {
    dummy(q) + 63
}

pub async fn enqueue(api: &Api, q: u64, node: u64, meta: Value, fields: u64) -> Result<(), Lost> {
    for f in 1..=fields {
        api.write(field(dummy(q), node, f), meta).await?;
    }
    loop {
        let t = api.acquire(tail(q)).await?;
        let next = api.acquire(field(dummy(q), t, 0)).await?;
        if next != 0 {
            let _ = api.cas(tail(q), t, next).await?; // help a lagging tail
            continue;
        }
        if api.cas(field(dummy(q), t, 0), 0, node).await?.is_ok() {
            let _ = api.cas(tail(q), t, node).await?;
            return Ok(());
        }
    }
}

/// Dequeue: the node and its data fields, or `None` if the queue was empty.
pub async fn dequeue(api: &Api, q: u64, fields: u64) -> Result<Option<(u64, Vec<Value>)>, Lost> {
    loop {
        let h = api.acquire(head(q)).await?;
        let t = api.read(tail(q)).await?;
        let next = api.acquire(field(dummy(q), h, 0)).await?;
        if next == 0 {
            return Ok(None);
        }
        if h == t {
            let _ = api.cas(tail(q), t, next).await?;
            continue;
        }
        let mut data = Vec::with_capacity(fields as usize);
        for f in 1..=fields {
            data.push(api.read(field(dummy(q), next, f)).await?);
        }
        if api.cas(head(q), h, next).await?.is_ok() {
            return Ok(Some((next, data)));
        }
    }
}

/// The node ids in the queue in `state`, oldest first; `Err` on a cycle.
pub fn walk(q: u64, state: &dyn Fn(Key) -> Value, limit: usize) -> Result<Vec<u64>, String> {
    let mut ids = Vec::new();
    let mut n = state(field(dummy(q), state(head(q)), 0));
    while n != 0 {
        if ids.len() > limit {
            return Err(format!("queue {q}: a cycle (more than {limit} nodes)"));
        }
        ids.push(n);
        n = state(field(dummy(q), n, 0));
    }
    Ok(ids)
}
