//! Eventual convergence after quiescence (G6, and Eventual consistency:
//! replicas converge once writes stop; G2: no value from thin air; labels as
//! in docs/DDP.md, "Check labels").

use std::collections::{BTreeSet, HashMap};

use crate::history::{HistOp, OpKind};
use crate::verdict::{Stats, Violation, ViolationKind};

/// Each node's final value of every key, read after quiescence. A key a
/// node's map lacks counts as `None` (absent).
pub type FinalStates = HashMap<u16, HashMap<u64, Option<u64>>>;

/// Check that, for every key any node or write mentions, all nodes hold
/// the same final value, and that the value is explained by the history:
/// `Some(v)` only if some write to that key wrote `v` (and did not fail),
/// `None` only if no write to that key completed successfully (a write
/// with no reply, or one that failed, may never have taken effect).
pub fn check_convergence(finals: &FinalStates, ops: &[HistOp]) -> Result<Stats, Violation> {
    let keys: BTreeSet<u64> = finals
        .values()
        .flat_map(|m| m.keys().copied())
        .chain(ops.iter().map(|o| o.key()))
        .collect();
    for &key in &keys {
        let agreed = agreed_value(finals, key, ops)?;
        explained(key, agreed, ops)?;
    }
    Ok(Stats {
        keys: keys.len(),
        ops: ops.len(),
        states: 0,
    })
}

/// The value every node holds for `key`, or a `Divergent` violation.
fn agreed_value(finals: &FinalStates, key: u64, ops: &[HistOp]) -> Result<Option<u64>, Violation> {
    let mut nodes: Vec<(u16, Option<u64>)> = finals
        .iter()
        .map(|(&n, m)| (n, m.get(&key).copied().flatten()))
        .collect();
    nodes.sort_unstable();
    let Some(&(_, first)) = nodes.first() else {
        return Ok(None);
    };
    if nodes.iter().all(|&(_, v)| v == first) {
        return Ok(first);
    }
    let shown: Vec<String> = nodes
        .iter()
        .map(|(n, v)| format!("node {n}: {}", show(*v)))
        .collect();
    let message = format!(
        "key {key}: nodes did not converge after quiescence ({})",
        shown.join(", ")
    );
    Err(Violation::new(
        ViolationKind::Divergent,
        Some(key),
        message,
        writes_of(key, ops),
    ))
}

/// Whether the agreed final value of `key` is one the history explains.
fn explained(key: u64, value: Option<u64>, ops: &[HistOp]) -> Result<(), Violation> {
    let writes = writes_of(key, ops);
    let ok = match value {
        Some(v) => writes
            .iter()
            .any(|w| !w.is_failed() && w.kind == OpKind::Write { key, value: v }),
        None => !writes.iter().any(HistOp::is_ok),
    };
    if ok {
        return Ok(());
    }
    let (kind, why) = match value {
        Some(_) => (
            ViolationKind::ThinAir,
            "no write that did not fail wrote it",
        ),
        None => (
            ViolationKind::Divergent,
            "a write to it completed, yet it is absent everywhere",
        ),
    };
    let message = format!(
        "key {key}: every node holds {} after quiescence, but {why}",
        show(value)
    );
    Err(Violation::new(kind, Some(key), message, writes))
}

fn writes_of(key: u64, ops: &[HistOp]) -> Vec<HistOp> {
    ops.iter()
        .filter(|o| o.key() == key && matches!(o.kind, OpKind::Write { .. }))
        .cloned()
        .collect()
}

fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "none".to_string(), |v| v.to_string())
}
