//! The acknowledged-effects ledger shared by the OLTP workloads (SmallBank,
//! TATP, TPC-C; docs/DESIGN.md §6): every transaction's effect is a list of
//! additive deltas on integer *cells* (a field of a row, or a row's presence),
//! recorded only when its commit is acknowledged.
//!
//! Under strict serializability a cell's final value is its initial value plus
//! the deltas of exactly the committed transactions that touched it, so the
//! post-run check is exact: a lost update, a phantom commit or a rolled-back
//! acknowledged commit all leave some cell off by its delta. A transaction whose
//! commit never returned (its compute node crashed, or lost access, mid-commit)
//! is *in doubt* ("unknown", never assumed to have failed): it may or may not have
//! committed, so the check accepts the state if *some* subset of the in-doubt
//! transactions, applied atomically, explains every cell they touch.

use std::collections::{BTreeMap, BTreeSet};

use tandem_dkvs::TableId;

/// One integer field of one row: `(table, key, field)`. Workloads number
/// their fields; [`PRESENCE`] is the row's existence (1 live, 0 absent).
pub type Cell = (TableId, u64, u8);

/// The field number that stands for "the row exists" (inserts +1, deletes −1).
pub const PRESENCE: u8 = u8::MAX;

/// The deltas one transaction applies if it commits.
pub type Effect = Vec<(Cell, i64)>;

/// Most in-doubt transactions whose every commit/abort combination is tried;
/// beyond that each cell is checked on its own (subset sums per cell).
pub const IN_DOUBT_EXACT_MAX: usize = 16;

/// What one client (or, merged, all clients) saw acknowledged.
#[derive(Clone, Debug, Default)]
pub struct EffectLedger {
    /// Sum of the deltas of acknowledged commits, per cell.
    pub acked: BTreeMap<Cell, i64>,
    /// Transactions whose commit is under way (set just before `commit`),
    /// by a token of their own: clients of one compute node may share a ledger.
    pub pending: Vec<(u64, Effect)>,
    pub next_token: u64,
    /// Transactions whose outcome is unknown; never assumed absent or present.
    pub in_doubt: Vec<Effect>,
    /// Acknowledged commits, per transaction type.
    pub committed_by_type: BTreeMap<&'static str, u64>,
    pub committed: u64,
    /// Transactions the store aborted (conflicts), not counting application rollbacks.
    pub aborted: u64,
    /// Application-requested rollbacks (TPC-C invalid items, TATP missing rows, ...).
    pub rolled_back: u64,
    /// Committed transactions that observed a broken invariant (read-only audits).
    pub audit_violations: Vec<String>,
    /// Transactions refused because a table's provisioned capacity ran out.
    pub capacity_refusals: u64,
}

impl EffectLedger {
    /// Add the acknowledged commits of `o`; its pending commit (the client's
    /// task was dropped by a crash before it returned) becomes in doubt.
    pub fn merge(&mut self, o: &EffectLedger) {
        for (c, d) in &o.acked {
            *self.acked.entry(*c).or_default() += d;
        }
        self.in_doubt.extend(o.in_doubt.iter().cloned());
        self.in_doubt
            .extend(o.pending.iter().map(|(_, e)| e.clone()));
        for (k, n) in &o.committed_by_type {
            *self.committed_by_type.entry(k).or_default() += n;
        }
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.rolled_back += o.rolled_back;
        self.audit_violations
            .extend(o.audit_violations.iter().cloned());
        self.capacity_refusals += o.capacity_refusals;
    }

    /// Record an acknowledged commit.
    pub fn apply(&mut self, e: &[(Cell, i64)]) {
        for (c, d) in e {
            *self.acked.entry(*c).or_default() += d;
        }
    }

    /// The acknowledged delta of one cell.
    pub fn acked(&self, c: &Cell) -> i64 {
        self.acked.get(c).copied().unwrap_or(0)
    }

    /// In-doubt transactions touching `c`, as a list of their deltas on it.
    fn doubt_deltas(&self, c: &Cell) -> Vec<i64> {
        self.in_doubt
            .iter()
            .map(|e| {
                e.iter()
                    .filter(|(x, _)| x == c)
                    .map(|(_, d)| d)
                    .sum::<i64>()
            })
            .filter(|d| *d != 0)
            .collect()
    }

    /// Every cell the ledger mentions (acknowledged or in doubt).
    pub fn cells(&self) -> BTreeSet<Cell> {
        let mut s: BTreeSet<Cell> = self.acked.keys().copied().collect();
        for e in &self.in_doubt {
            s.extend(e.iter().map(|(c, _)| *c));
        }
        s
    }

    /// Check `cells` (plus every cell the ledger mentions): the actual value
    /// must be `initial + acked` plus the deltas of one subset of the in-doubt
    /// transactions (the same subset for all cells, when there are at most
    /// [`IN_DOUBT_EXACT_MAX`] of them). `actual` returns `None` for a missing row.
    pub fn check(
        &self,
        cells: impl IntoIterator<Item = Cell>,
        initial: impl Fn(&Cell) -> i64,
        actual: impl Fn(&Cell) -> Option<i64>,
        name: impl Fn(&Cell) -> String,
    ) -> Vec<String> {
        let mut all: BTreeSet<Cell> = cells.into_iter().collect();
        all.extend(self.cells());
        let touched: BTreeSet<Cell> = self
            .in_doubt
            .iter()
            .flat_map(|e| e.iter().map(|(c, _)| *c))
            .collect();
        let mut v = Vec::new();
        let expect = |c: &Cell| initial(c) + self.acked(c);
        for c in all.iter().filter(|c| !touched.contains(c)) {
            match actual(c) {
                Some(a) if a == expect(c) => {}
                Some(a) => v.push(format!(
                    "{}: {a}, but acknowledged commits say {}",
                    name(c),
                    expect(c)
                )),
                None => v.push(format!(
                    "{}: row missing (acknowledged commits say {})",
                    name(c),
                    expect(c)
                )),
            }
        }
        if touched.is_empty() {
            return v;
        }
        let actuals: Vec<(Cell, Option<i64>)> = touched.iter().map(|c| (*c, actual(c))).collect();
        if self.in_doubt.len() <= IN_DOUBT_EXACT_MAX {
            let mut first = None;
            for mask in 0u32..(1u32 << self.in_doubt.len()) {
                let mut want: BTreeMap<Cell, i64> =
                    touched.iter().map(|c| (*c, expect(c))).collect();
                for (i, e) in self.in_doubt.iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        for (c, d) in e {
                            *want.get_mut(c).expect("touched") += d;
                        }
                    }
                }
                let m: Vec<String> = actuals
                    .iter()
                    .filter(|(c, a)| *a != Some(want[c]))
                    .map(|(c, a)| {
                        format!(
                            "{}: {a:?}, but acknowledged commits say {}",
                            name(c),
                            want[c]
                        )
                    })
                    .collect();
                if m.is_empty() {
                    return v;
                }
                first.get_or_insert(m);
            }
            v.push(format!("no combination of the {} in-doubt transactions explains the state; with none applied:", self.in_doubt.len()));
            v.extend(first.unwrap_or_default());
            return v;
        }
        // Too many to combine: each cell on its own must be explained by some
        // subset of the in-doubt deltas on it.
        for (c, a) in &actuals {
            let ds = self.doubt_deltas(c);
            let mut sums: BTreeSet<i64> = BTreeSet::from([0]);
            for d in ds.iter().take(20) {
                sums = sums.iter().flat_map(|s| [*s, s + d]).collect();
            }
            let ok = ds.len() > 20 || a.is_some_and(|a| sums.contains(&(a - expect(c))));
            if !ok {
                v.push(format!("{}: {a:?}, not acknowledged value {} plus any subset of in-doubt deltas {ds:?}", name(c), expect(c)));
            }
        }
        v
    }
}

/// Record `effect` as pending, commit, and settle the ledger by the outcome:
/// acknowledged → applied; aborted → dropped; any other error → in doubt.
pub async fn commit_effect<F: tandem_fabric::Fabric>(
    ledger: &std::cell::RefCell<EffectLedger>,
    tx: tandem_dkvs::Transaction<'_, F>,
    kind: &'static str,
    effect: Effect,
) -> Result<bool, tandem_dkvs::TxError> {
    let token = {
        let mut l = ledger.borrow_mut();
        l.next_token += 1;
        let token = l.next_token;
        l.pending.push((token, effect));
        token
    };
    let r = tx.commit().await;
    let mut l = ledger.borrow_mut();
    let at = l
        .pending
        .iter()
        .position(|(t, _)| *t == token)
        .expect("pushed above");
    let e = l.pending.swap_remove(at).1;
    match r {
        Ok(()) => {
            l.apply(&e);
            l.committed += 1;
            *l.committed_by_type.entry(kind).or_default() += 1;
            Ok(true)
        }
        Err(tandem_dkvs::TxError::Aborted(_)) => {
            l.aborted += 1;
            Ok(false)
        }
        Err(err) => {
            l.in_doubt.push(e);
            Err(err)
        }
    }
}

/// Settle a transaction that ended before its commit: store aborts count as
/// aborted (`Ok(false)`); a row the transaction relied on being missing or
/// duplicated (`NotFound`, `AlreadyExists` where the workload never expects
/// them) is an audit violation; other errors propagate (nothing was committed).
pub fn settle_early(
    ledger: &std::cell::RefCell<EffectLedger>,
    e: tandem_dkvs::TxError,
) -> Result<bool, tandem_dkvs::TxError> {
    use tandem_dkvs::TxError;
    match e {
        TxError::Aborted(_) => {
            ledger.borrow_mut().aborted += 1;
            Ok(false)
        }
        TxError::NotFound | TxError::AlreadyExists => {
            ledger
                .borrow_mut()
                .audit_violations
                .push(format!("a transaction met an unexpected '{e}'"));
            Ok(false)
        }
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match_and_in_doubt_subsets() {
        let mut l = EffectLedger::default();
        l.apply(&[((0, 1, 0), 5), ((0, 2, 0), -5)]);
        l.in_doubt.push(vec![((0, 1, 0), 3), ((0, 3, 0), -3)]);
        let name = |c: &Cell| format!("{c:?}");
        let state = |a1: i64, a3: i64| {
            move |c: &Cell| {
                Some(match c.1 {
                    1 => a1,
                    2 => -5,
                    3 => a3,
                    _ => 0,
                })
            }
        };
        assert!(
            l.check([(0, 4, 0)], |_| 0, state(5, 0), name).is_empty(),
            "in-doubt not applied"
        );
        assert!(
            l.check([], |_| 0, state(8, -3), name).is_empty(),
            "in-doubt applied"
        );
        assert!(
            !l.check([], |_| 0, state(8, 0), name).is_empty(),
            "half an in-doubt transaction"
        );
        assert!(
            !l.check([], |_| 0, state(4, 0), name).is_empty(),
            "a lost update"
        );
    }
}
