//! No value from thin air (G2, docs/DDP.md "Check labels"): every value a read returned
//! was written by some client write (or is the initial value).

use std::collections::HashMap;

use crate::history::{HistOp, OpKind};
use crate::verdict::{Stats, Violation, ViolationKind};

/// Check that every successful read of `Some(v)` from key `k` is explained
/// by a write of `v` to `k` that did not fail and was invoked no later than
/// the read completed. Reads of `None` (the initial value) always pass.
pub fn check_no_thin_air(ops: &[HistOp]) -> Result<Stats, Violation> {
    let mut first_invoke: HashMap<(u64, u64), u64> = HashMap::new();
    for op in ops.iter().filter(|o| !o.is_failed()) {
        if let OpKind::Write { key, value } = op.kind {
            let t = first_invoke.entry((key, value)).or_insert(op.invoke_ns);
            *t = (*t).min(op.invoke_ns);
        }
    }
    let mut reads = 0;
    for op in ops.iter().filter(|o| o.is_ok()) {
        let OpKind::Read {
            key,
            value: Some(v),
        } = op.kind
        else {
            continue;
        };
        reads += 1;
        let done = op.complete_ns.unwrap_or(u64::MAX);
        let explained = matches!(first_invoke.get(&(key, v)), Some(&t) if t <= done);
        if !explained {
            return Err(thin_air(op, key, v, ops));
        }
    }
    let keys = ops
        .iter()
        .map(|o| o.key())
        .collect::<std::collections::HashSet<_>>()
        .len();
    Ok(Stats {
        keys,
        ops: reads,
        states: 0,
    })
}

/// The violation for a read of `v` from `key`, with every write of `v`
/// (to any key) as the evidence.
fn thin_air(read: &HistOp, key: u64, v: u64, ops: &[HistOp]) -> Violation {
    let writes: Vec<HistOp> = ops
        .iter()
        .filter(|o| matches!(o.kind, OpKind::Write { value, .. } if value == v))
        .cloned()
        .collect();
    let why = if writes.is_empty() {
        "no write wrote that value"
    } else if !writes.iter().any(|w| w.key() == key) {
        "only a write to another key wrote that value"
    } else if writes.iter().all(|w| w.key() != key || w.is_failed()) {
        "the write of that value failed"
    } else {
        "the write of that value was invoked after the read completed"
    };
    let message = format!("key {key}: a read returned {v}, but {why}: {read}");
    let mut piece = writes;
    piece.push(read.clone());
    Violation::new(ViolationKind::ThinAir, Some(key), message, piece)
}
