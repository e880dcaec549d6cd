//! Session guarantees: read-your-writes and monotonic reads (C1' under
//! Causal consistency, and monotonic reads where a persistency model
//! promises them; docs/DDP.md, "Check labels").
//!
//! Values alone are unordered, so the caller passes each key's version
//! order (e.g. from the store's timestamps, or from a linearization). The
//! initial value (`None`) precedes every written value.

use std::collections::{BTreeSet, HashMap};

use crate::history::{HistOp, OpKind};
use crate::verdict::{Stats, Violation, ViolationKind};

/// `(key, value) -> position` in that key's version order (larger is newer).
pub type VersionOrder = HashMap<(u64, u64), u64>;

/// Check [`check_session`] for every session in `ops`, in session order.
pub fn check_sessions(ops: &[HistOp], order: &VersionOrder) -> Result<Stats, Violation> {
    let sessions: BTreeSet<u64> = ops.iter().map(|o| o.session).collect();
    let mut stats = Stats::default();
    for s in sessions {
        stats.add(check_session(ops, s, order)?);
    }
    Ok(stats)
}

/// Check that no successful read of `session` returns a version older than
/// the session's own last successful write to that key (read-your-writes)
/// or the last version it read of that key (monotonic reads). Operations
/// run in invocation order (one outstanding operation per session); those
/// without a reply, or that failed, are skipped.
pub fn check_session(
    ops: &[HistOp],
    session: u64,
    order: &VersionOrder,
) -> Result<Stats, Violation> {
    let mut mine: Vec<&HistOp> = ops
        .iter()
        .filter(|o| o.session == session && o.is_ok())
        .collect();
    mine.sort_by_key(|o| o.invoke_ns);
    let mut floors: HashMap<u64, Floors> = HashMap::new();
    for op in &mine {
        let rank = rank(op, order)?;
        let floor = floors.entry(op.key()).or_default();
        match op.kind {
            OpKind::Write { .. } => floor.write = Some(((*op).clone(), rank)),
            OpKind::Read { .. } => {
                floor.admit(op, rank)?;
                floor.read = Some(((*op).clone(), rank));
            }
        }
    }
    let keys = floors.len();
    Ok(Stats {
        keys,
        ops: mine.len(),
        states: 0,
    })
}

/// A version's position: `None` (initial) precedes every `Some`.
type Rank = Option<u64>;

/// The session's last write and last read of one key, with their ranks.
#[derive(Default)]
struct Floors {
    write: Option<(HistOp, Rank)>,
    read: Option<(HistOp, Rank)>,
}

impl Floors {
    /// Whether a read of rank `rank` may follow what the session did.
    fn admit(&self, read: &HistOp, rank: Rank) -> Result<(), Violation> {
        for (what, floor) in [
            ("its own write", &self.write),
            ("its earlier read", &self.read),
        ] {
            if let Some((prev, prev_rank)) = floor {
                if rank < *prev_rank {
                    let message = format!(
                        "session {}, key {}: read a version older than {what} (read-your-writes / monotonic reads)",
                        read.session,
                        read.key()
                    );
                    return Err(Violation::new(
                        ViolationKind::Session,
                        Some(read.key()),
                        message,
                        vec![prev.clone(), read.clone()],
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The rank of the version `op` wrote or read.
fn rank(op: &HistOp, order: &VersionOrder) -> Result<Rank, Violation> {
    let (key, value) = match op.kind {
        OpKind::Read { key, value } => (key, value),
        OpKind::Write { key, value } => (key, Some(value)),
    };
    let Some(v) = value else { return Ok(None) };
    match order.get(&(key, v)) {
        Some(&r) => Ok(Some(r)),
        None => Err(Violation::new(
            ViolationKind::BadInput,
            Some(key),
            format!("key {key}: value {v} has no place in the version order given"),
            vec![op.clone()],
        )),
    }
}

/// A version order from each key's versions listed oldest first.
pub fn version_order(versions: &HashMap<u64, Vec<u64>>) -> VersionOrder {
    let mut order = VersionOrder::new();
    for (&key, values) in versions {
        for (i, &v) in values.iter().enumerate() {
            order.insert((key, v), i as u64);
        }
    }
    order
}
