//! Treiber stack (Kite paper §7.3): `top` holds the top node's id (0: empty);
//! node ids are never reused, so there is no ABA. A push writes its
//! fields and its `next` relaxed and links with a CAS (release: the fields
//! are visible before the node is); a pop acquires `top`, reads the node
//! relaxed and unlinks with a CAS, re-acquiring after a local failure.

use super::{field, Api, CasErr, Lost, ROOTS};
use crate::types::*;

pub fn top(st: u64) -> Key {
    ROOTS + st * 64
}

/// Push node `node` with every data field set to `meta`.
pub async fn push(api: &Api, st: u64, node: u64, meta: Value, fields: u64) -> Result<(), Lost> {
    for f in 1..=fields {
        api.write(field(top(st), node, f), meta).await?;
    }
    let mut t = api.read(top(st)).await?; // a hint: the CAS validates it
    loop {
        api.write(field(top(st), node, 0), t).await?;
        match api.cas(top(st), t, node).await? {
            Ok(()) => return Ok(()),
            Err(CasErr::Remote(v) | CasErr::Local(v)) => t = v,
        }
    }
}

/// Pop: the node and its data fields, or `None` if the stack was empty.
pub async fn pop(api: &Api, st: u64, fields: u64) -> Result<Option<(u64, Vec<Value>)>, Lost> {
    let mut t = api.acquire(top(st)).await?;
    loop {
        if t == 0 {
            return Ok(None);
        }
        let next = api.read(field(top(st), t, 0)).await?;
        let mut data = Vec::with_capacity(fields as usize);
        for f in 1..=fields {
            data.push(api.read(field(top(st), t, f)).await?);
        }
        match api.cas(top(st), t, next).await? {
            Ok(()) => return Ok(Some((t, data))),
            Err(CasErr::Remote(v)) => t = v,
            Err(CasErr::Local(_)) => t = api.acquire(top(st)).await?,
        }
    }
}

/// The node ids on the stack in `state` (top first); `Err` on a cycle.
pub fn walk(st: u64, state: &dyn Fn(Key) -> Value, limit: usize) -> Result<Vec<u64>, String> {
    let mut ids = Vec::new();
    let mut t = state(top(st));
    while t != 0 {
        if ids.len() > limit {
            return Err(format!("stack {st}: a cycle (more than {limit} nodes)"));
        }
        ids.push(t);
        t = state(field(top(st), t, 0));
    }
    Ok(ids)
}
