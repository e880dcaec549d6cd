//! The replica check (docs/DESIGN.md §5): a black-box run
//! reads only primaries, so a recovery that restores one replica and not
//! another passes every litmus test until a memory node fails. On a quiet
//! store, this check fails each memory node in turn, logically (the checking
//! session's own view marks it down, docs/DESIGN.md §4.6: the primary becomes the
//! first live replica), re-reads every key from the replica that takes over,
//! and demands the value it read with every node up.
//!
//! [`crate::sim_run`] runs it after every run (and mid-run); over processes,
//! [`crate::proc_replicas`] runs it after [`crate::proc_run`]'s final check
//! and then makes one failure real: `kill -9` of a memory-server process,
//! and every key re-read from the replicas that take over.

use crate::board::Board;
use crate::store::{StoreTx, TransactionalStore, TxFailure};
use crate::suite::Suite;
use crate::value::Value;

/// Every key of the suite that exists or may exist now.
pub fn keys_now(suite: &Suite, board: &Board) -> Vec<u64> {
    suite
        .tests
        .iter()
        .flat_map(|t| {
            (0..t.instances_now(board)).flat_map(move |i| (0..t.vars).map(move |v| t.key(i, v)))
        })
        .collect()
}

/// Fail each of `memory_nodes` in turn with `fail(node, down)`, re-read
/// every key through the replica that takes over, and compare.
pub async fn fail_each_memory_node<S: TransactionalStore>(
    store: &mut S,
    fail: &dyn Fn(u16, bool),
    suite: &Suite,
    keys: &[u64],
    memory_nodes: u16,
) -> Result<(), String> {
    let up = read_all(store, keys).await?;
    fail_each_against(store, fail, suite, keys, &up, memory_nodes).await
}

/// [`fail_each_memory_node`] against `up`, a read of `keys` taken with
/// every node up (the process run reuses it after a real kill).
pub async fn fail_each_against<S: TransactionalStore>(
    store: &mut S,
    fail: &dyn Fn(u16, bool),
    suite: &Suite,
    keys: &[u64],
    up: &[Option<Value>],
    memory_nodes: u16,
) -> Result<(), String> {
    for m in 0..memory_nodes {
        fail(m, true);
        let failover = read_all(store, keys).await;
        fail(m, false);
        compare(suite, keys, up, &failover?, m)?;
    }
    Ok(())
}

/// Read `keys` in one read-only transaction, retrying aborts.
pub async fn read_all<S: TransactionalStore>(
    store: &mut S,
    keys: &[u64],
) -> Result<Vec<Option<Value>>, String> {
    let mut last = String::new();
    for _ in 0..20 {
        match try_read_all(store, keys).await {
            Ok(v) => return Ok(v),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!(
        "the replica check could not read {} keys in a quiet store: {last}",
        keys.len()
    ))
}

async fn try_read_all<S: TransactionalStore>(
    store: &mut S,
    keys: &[u64],
) -> Result<Vec<Option<Value>>, TxFailure> {
    let mut tx = store.begin().await?;
    let mut out = Vec::with_capacity(keys.len());
    for &k in keys {
        match tx.read(k).await {
            Ok(v) => out.push(v),
            Err(e) if e.finishes() => return Err(e),
            Err(e) => {
                tx.abort().await;
                return Err(e);
            }
        }
    }
    tx.commit().await?;
    Ok(out)
}

/// Compare a failover read with the read with every node up.
pub fn compare(
    suite: &Suite,
    keys: &[u64],
    up: &[Option<Value>],
    failover: &[Option<Value>],
    down: u16,
) -> Result<(), String> {
    let show = |v: &Option<Value>| {
        v.map_or("absent".into(), |v| {
            format!("{}(by {})", v.payload, crate::checker::fmt_tx(v.writer))
        })
    };
    for (k, (a, b)) in keys.iter().zip(up.iter().zip(failover)) {
        if a != b {
            let test = suite.test_of_key(*k).unwrap_or("?");
            return Err(format!(
                "replicas diverge: {test} key {k} reads {} with every memory node up but {} with memory node {down} down",
                show(a),
                show(b)
            ));
        }
    }
    Ok(())
}
