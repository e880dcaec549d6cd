//! Harris–Michael sorted list (Kite paper §7.3): a node's field 0 is its `next`
//! pointer `id << 1 | mark`, field 1 its element, fields 2.. its data; id
//! 0 is the list's head sentinel. Search acquires the links and reads the
//! elements relaxed, unlinking marked nodes on the way; insert links with
//! a CAS; delete marks with a CAS, then unlinks.

use super::{field, Api, Lost, ROOTS};
use crate::types::*;

pub fn head(l: u64) -> Key {
    ROOTS + l * 64
}

fn next(l: u64, id: u64) -> Key {
    field(head(l), id, 0)
}

fn elem(l: u64, id: u64) -> Key {
    field(head(l), id, 1)
}

/// The first node whose element is ≥ `k` (0: none), its element and its
/// predecessor.
async fn search(api: &Api, l: u64, k: Value) -> Result<(u64, u64, Value), Lost> {
    'retry: loop {
        let mut prev = 0;
        let mut curr = api.acquire(next(l, 0)).await? >> 1;
        loop {
            if curr == 0 {
                return Ok((prev, 0, 0));
            }
            let succ = api.acquire(next(l, curr)).await?;
            if succ & 1 == 1 {
                // curr is deleted: unlink it, or start over.
                if api.cas(next(l, prev), curr << 1, succ & !1).await?.is_err() {
                    continue 'retry;
                }
                curr = succ >> 1;
                continue;
            }
            let e = api.read(elem(l, curr)).await?;
            if e >= k {
                return Ok((prev, curr, e));
            }
            (prev, curr) = (curr, succ >> 1);
        }
    }
}

/// Insert `k` as node `node` (data fields set to `meta`); false if present.
pub async fn insert(
    api: &Api,
    l: u64,
    k: Value,
    node: u64,
    meta: Value,
    fields: u64,
) -> Result<bool, Lost> {
    api.write(elem(l, node), k).await?;
    for f in 2..=fields + 1 {
        api.write(field(head(l), node, f), meta).await?;
    }
    loop {
        let (prev, curr, e) = search(api, l, k).await?;
        if curr != 0 && e == k {
            return Ok(false);
        }
        api.write(next(l, node), curr << 1).await?;
        if api.cas(next(l, prev), curr << 1, node << 1).await?.is_ok() {
            return Ok(true);
        }
    }
}

/// Delete `k`; false if absent.
pub async fn delete(api: &Api, l: u64, k: Value) -> Result<bool, Lost> {
    loop {
        let (prev, curr, e) = search(api, l, k).await?;
        if curr == 0 || e != k {
            return Ok(false);
        }
        let succ = api.acquire(next(l, curr)).await?;
        if succ & 1 == 1 {
            continue;
        }
        if api.cas(next(l, curr), succ, succ | 1).await?.is_err() {
            continue;
        }
        let _ = api.cas(next(l, prev), curr << 1, succ).await?; // best effort
        return Ok(true);
    }
}

/// The elements present (unmarked) in `state`, in list order; `Err` on
/// a cycle.
pub fn walk(l: u64, state: &dyn Fn(Key) -> Value, limit: usize) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let (mut curr, mut steps) = (state(next(l, 0)) >> 1, 0);
    while curr != 0 {
        steps += 1;
        if steps > limit {
            return Err(format!("list {l}: a cycle (more than {limit} nodes)"));
        }
        let succ = state(next(l, curr));
        if succ & 1 == 0 {
            out.push(state(elem(l, curr)));
        }
        curr = succ >> 1;
    }
    Ok(out)
}

/// A deliberate bug for the checks (the classic one Harris's marking
/// prevents): delete by unlinking without marking first, so an insert
/// right after the deleted node is lost with it.
pub async fn delete_unmarked(api: &Api, l: u64, k: Value) -> Result<bool, Lost> {
    loop {
        let (prev, curr, e) = search(api, l, k).await?;
        if curr == 0 || e != k {
            return Ok(false);
        }
        let succ = api.acquire(next(l, curr)).await?;
        if api.cas(next(l, prev), curr << 1, succ & !1).await?.is_ok() {
            return Ok(true);
        }
    }
}
