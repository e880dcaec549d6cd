//! Per-key linearizability of a read/write register store (what Lin
//! consistency promises: the per-key history is linearizable).
//!
//! A register store's history is linearizable iff each key's history is
//! (P-compositionality, as Porcupine uses it), so each key is checked on its
//! own by the [`crate::wgl`] search, with initial value `None`.
//!
//! What goes in, per key:
//! - failed operations (`ok = false` with a reply) are dropped: they did
//!   not take effect;
//! - a read with no reply is dropped: it imposes nothing;
//! - a write with no reply may take effect at any point after its
//!   invocation, or never.
//!
//! An interval that ends exactly where another begins counts as
//! overlapping (timestamps are not trusted to order equal instants).

use std::collections::{BTreeMap, HashSet};

use crate::history::{HistOp, OpKind};
use crate::verdict::{Stats, Violation, ViolationKind};
use crate::wgl::{search, Outcome, RegOp};
use crate::zones;

/// Bounds on the search.
#[derive(Clone, Copy, Debug)]
pub struct LinConfig {
    /// Memoized states explored per key before the key is reported
    /// [`ViolationKind::Undecided`] (about 100 bytes each: the default
    /// bounds the memo near 100 MB).
    pub max_states: u64,
    /// A failing piece at most this long is shrunk further, one operation
    /// at a time.
    pub shrink_limit: usize,
    /// Run the O(n log n) zone pre-check before the search (see
    /// `zones.rs`). Off, the search alone decides (slower on violations).
    pub zone_precheck: bool,
}

impl Default for LinConfig {
    fn default() -> LinConfig {
        LinConfig {
            max_states: 1_000_000,
            shrink_limit: 200,
            zone_precheck: true,
        }
    }
}

/// Check every key with [`LinConfig::default`]. See [`check_linearizable_with`].
pub fn check_linearizable(ops: &[HistOp]) -> Result<Stats, Violation> {
    check_linearizable_with(ops, &LinConfig::default())
}

/// Check that every key's history is linearizable. Passes with what was
/// explored; fails with the first key (in key order) that has no
/// linearization and a trimmed piece of its history that has none either.
/// If no key fails but some key ran out of budget, fails `Undecided`.
pub fn check_linearizable_with(ops: &[HistOp], cfg: &LinConfig) -> Result<Stats, Violation> {
    let mut by_key: BTreeMap<u64, Vec<HistOp>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key()).or_default().push(op.clone());
    }
    let mut stats = Stats::default();
    let mut undecided = None;
    for (key, key_ops) in by_key {
        match check_key(key, &key_ops, cfg) {
            Ok(s) => stats.add(s),
            Err(v) if v.is_undecided() => undecided = undecided.or(Some(v)),
            Err(v) => return Err(v),
        }
    }
    undecided.map_or(Ok(stats), Err)
}

/// Check one key's operations (all must be on `key`). The zone pre-check
/// runs first; a conflict it finds is confirmed by the search on the
/// conflict's few operations. Otherwise the full search decides.
pub fn check_key(key: u64, ops: &[HistOp], cfg: &LinConfig) -> Result<Stats, Violation> {
    let observed: HashSet<u64> = ops
        .iter()
        .filter(|o| !o.is_pending() && !o.is_failed())
        .filter_map(|o| match o.kind {
            OpKind::Read { value, .. } => value,
            OpKind::Write { .. } => None,
        })
        .collect();
    let kept: Vec<HistOp> = ops
        .iter()
        .filter(|o| matters(o) && !unobserved_pending_write(o, &observed))
        .cloned()
        .collect();
    let reg: Vec<RegOp> = kept.iter().map(reg_op).collect();
    if let Some(piece) = zone_witness(&kept, &reg, cfg) {
        return Err(not_linearizable(
            key,
            piece,
            kept.len(),
            "two values whose writes and reads cannot be ordered".into(),
        ));
    }
    match search(&reg, cfg.max_states) {
        Outcome::Linearizable { states } => Ok(Stats {
            keys: 1,
            ops: kept.len(),
            states,
        }),
        Outcome::Undecided { states } => {
            let message = format!(
                "key {key}: undecided after {states} search states over {} operations{}",
                kept.len(),
                if cfg.zone_precheck {
                    " (the zone pre-check found no conflict)"
                } else {
                    ""
                }
            );
            Err(Violation::new(
                ViolationKind::Undecided,
                Some(key),
                message,
                Vec::new(),
            ))
        }
        Outcome::Violated {
            prefix,
            stuck,
            states,
        } => {
            let piece: Vec<HistOp> = prefix.iter().map(|&i| kept[i].clone()).collect();
            let piece = shrink(narrow(piece, &kept, cfg), cfg);
            let detail = format!(
                "{states} search states; every attempt failed by the return of: {}",
                kept[stuck]
            );
            Err(not_linearizable(key, piece, kept.len(), detail))
        }
    }
}

fn not_linearizable(key: u64, piece: Vec<HistOp>, total: usize, detail: String) -> Violation {
    let message = format!(
        "key {key}: not linearizable: no order of the {} operations below (of {total} on the key) explains them ({detail})",
        piece.len()
    );
    Violation::new(ViolationKind::NotLinearizable, Some(key), message, piece)
}

/// The zone pre-check's witness, confirmed by the search and shrunk.
fn zone_witness(kept: &[HistOp], reg: &[RegOp], cfg: &LinConfig) -> Option<Vec<HistOp>> {
    let witness = cfg
        .zone_precheck
        .then(|| zones::find_conflict(reg))
        .flatten()?;
    let piece: Vec<HistOp> = witness.iter().map(|&i| kept[i].clone()).collect();
    violated(&piece, cfg).then(|| shrink(piece, cfg))
}

/// A write that never completed and whose value no read returned: it may
/// take effect after everything else, where it changes nothing any read
/// saw, so it constrains nothing. Left in, it
/// can be placed anywhere after its call, and a few of them blow up the
/// search.
fn unobserved_pending_write(op: &HistOp, observed: &HashSet<u64>) -> bool {
    match op.kind {
        OpKind::Write { value, .. } => op.is_pending() && !observed.contains(&value),
        OpKind::Read { .. } => false,
    }
}

/// Whether an operation constrains the register at all.
fn matters(op: &HistOp) -> bool {
    match op.kind {
        _ if op.is_failed() => false,
        OpKind::Read { .. } => !op.is_pending(),
        OpKind::Write { .. } => true,
    }
}

fn reg_op(op: &HistOp) -> RegOp {
    let ret = op.complete_ns.unwrap_or(u64::MAX);
    match op.kind {
        OpKind::Read { value, .. } => RegOp {
            call: op.invoke_ns,
            ret,
            write: false,
            value,
        },
        OpKind::Write { value, .. } => RegOp {
            call: op.invoke_ns,
            ret,
            write: true,
            value: Some(value),
        },
    }
}

fn violated(ops: &[HistOp], cfg: &LinConfig) -> bool {
    let reg: Vec<RegOp> = ops.iter().map(reg_op).collect();
    matches!(search(&reg, cfg.max_states), Outcome::Violated { .. })
}

/// The smallest window of `piece` that still fails, trying the 2, 4, 8, …
/// operations that completed last (those with no reply first), each with
/// the writes (in `all`) its reads observed. Any such subset that is not
/// linearizable proves the whole is not either.
fn narrow(piece: Vec<HistOp>, all: &[HistOp], cfg: &LinConfig) -> Vec<HistOp> {
    let mut latest = piece;
    latest.sort_by_key(|o| std::cmp::Reverse(o.complete_ns.unwrap_or(u64::MAX)));
    let mut k = 2;
    while k < latest.len() {
        let window = with_observed_writes(&latest[..k], all);
        if violated(&window, cfg) {
            return window;
        }
        k *= 2;
    }
    latest
}

/// `ops` plus, for every read among them, the write in `all` it observed.
fn with_observed_writes(ops: &[HistOp], all: &[HistOp]) -> Vec<HistOp> {
    let mut out = ops.to_vec();
    for op in ops {
        let OpKind::Read {
            key,
            value: Some(v),
        } = op.kind
        else {
            continue;
        };
        let write = OpKind::Write { key, value: v };
        if !out.iter().any(|o| o.kind == write) {
            out.extend(all.iter().find(|o| o.kind == write).cloned());
        }
    }
    out
}

/// Drop operations one at a time (latest first) while what is left is
/// still not linearizable. A write some remaining read observed is kept,
/// so the piece never gains a value from thin air.
fn shrink(mut piece: Vec<HistOp>, cfg: &LinConfig) -> Vec<HistOp> {
    if piece.len() > cfg.shrink_limit {
        return piece;
    }
    piece.sort_by_key(|o| (o.invoke_ns, o.session));
    for i in (0..piece.len()).rev() {
        if observed(&piece, i) {
            continue;
        }
        let mut candidate = piece.clone();
        candidate.remove(i);
        if violated(&candidate, cfg) {
            piece = candidate;
        }
    }
    piece
}

/// Whether `piece[i]` is a write whose value some read in `piece` returned.
fn observed(piece: &[HistOp], i: usize) -> bool {
    let OpKind::Write { value, .. } = piece[i].kind else {
        return false;
    };
    piece.iter().any(|o| {
        o.kind
            == OpKind::Read {
                key: piece[i].key(),
                value: Some(value),
            }
    })
}
