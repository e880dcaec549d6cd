//! A SmallBank-style bank whose post-run check is exact, and which is built so
//! that each of FORD's concurrency bugs breaks it (docs/DESIGN.md §4.7).
//!
//! Every customer `c` owns a checking account `2c` and a savings account
//! `2c+1`. Application invariant: a customer's combined balance never goes
//! below zero. A debit of account `a` therefore reads the sibling `a^1`
//! (read-only) and never takes more than `a + sibling`. Two concurrent debits
//! of the two accounts of one customer form the write-skew pattern of
//! Pandora Fig. 5(b): a protocol that ignores locks in validation (covert
//! locks) or validates before its locks are held (relaxed locks) lets both
//! commit and drives the customer negative. Credits are read-modify-writes, so
//! a lock released by somebody else (complicit abort) loses an update and the
//! per-account ledger no longer matches.
//!
//! The check: every account's final balance equals its initial balance plus
//! the deltas of exactly the acknowledged commits (so every committed transfer
//! is reflected and no aborted one is), money is conserved, every customer is
//! non-negative, and the live receipts are exactly those inserted and not
//! deleted by acknowledged commits.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{AbortReason, Coordinator, TableId, TableSpec, TxError};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

pub const ACCOUNTS: TableId = 0;
pub const RECEIPTS: TableId = 1;
const RECEIPT_BYTES: u32 = 24;

#[derive(Clone, Debug)]
pub struct BankSpec {
    pub customers: u64,
    pub initial_balance: i64,
    /// Receipt slots to provision. Deleted receipts leave tombstones that are
    /// not reclaimed, so this bounds the receipts ever inserted.
    pub receipt_capacity: u64,
    /// Probability that a debit drains everything the customer has, which
    /// makes write skew overdraw at once (high for bug hunting, low for benchmarks).
    pub drain_chance: f64,
    /// Probability that a debit also inserts a receipt.
    pub receipt_chance: f64,
    /// How often an aborted transaction is retried with the same arguments.
    pub retries: u32,
}

impl Default for BankSpec {
    fn default() -> Self {
        BankSpec {
            customers: 16,
            initial_balance: 1_000,
            receipt_capacity: 4_096,
            drain_chance: 0.3,
            receipt_chance: 0.1,
            retries: 0,
        }
    }
}

fn encode_balance(v: i64) -> [u8; 8] {
    v.to_le_bytes()
}

pub fn decode_balance(b: &[u8]) -> i64 {
    i64::from_le_bytes(b[..8].try_into().expect("balance is 8 bytes"))
}

impl BankSpec {
    pub fn accounts(&self) -> u64 {
        self.customers * 2
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        vec![
            TableSpec {
                id: ACCOUNTS,
                name: "accounts".into(),
                value_size: 8,
                capacity: self.accounts(),
            },
            TableSpec {
                id: RECEIPTS,
                name: "receipts".into(),
                value_size: RECEIPT_BYTES,
                capacity: self.receipt_capacity,
            },
        ]
    }

    pub async fn load<F: Fabric>(&self, loader: &mut Loader<F>) -> Result<(), LoadError> {
        for a in 0..self.accounts() {
            loader
                .put(ACCOUNTS, a, &encode_balance(self.initial_balance))
                .await?;
        }
        Ok(())
    }

    pub fn total(&self) -> i64 {
        self.initial_balance * self.accounts() as i64
    }
}

/// The effects a transaction has if it committed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxEffect {
    pub deltas: Vec<(u64, i64)>,
    pub receipt_added: Option<u64>,
    pub receipt_removed: Option<u64>,
}

/// What one client (one coordinator) saw acknowledged.
#[derive(Clone, Debug, Default)]
pub struct BankLedger {
    /// The transaction whose commit is under way (set before `commit`).
    pub pending: Option<TxEffect>,
    /// Transactions whose outcome is unknown: the client crashed or lost
    /// access mid-commit. They may or may not have committed; never assumed absent.
    pub in_doubt: Vec<TxEffect>,
    pub deltas: BTreeMap<u64, i64>,
    pub receipts_live: BTreeSet<u64>,
    pub committed: u64,
    pub aborted: u64,
    /// Read-only audits that committed having seen a negative customer.
    pub audit_violations: Vec<String>,
    /// Transactions whose outcome is unknown (fabric error mid-commit).
    pub unknown: u64,
}

impl BankLedger {
    pub fn merge(&mut self, o: &BankLedger) {
        for (a, d) in &o.deltas {
            *self.deltas.entry(*a).or_default() += d;
        }
        self.receipts_live.extend(o.receipts_live.iter().copied());
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.audit_violations
            .extend(o.audit_violations.iter().cloned());
        self.unknown += o.unknown;
        self.in_doubt.extend(o.in_doubt.iter().cloned());
        // A commit that never returned (the client's task was dropped by a crash).
        self.in_doubt.extend(o.pending.iter().cloned());
    }

    fn apply(&mut self, e: &TxEffect) {
        for (a, d) in &e.deltas {
            *self.deltas.entry(*a).or_default() += d;
        }
        if let Some(k) = e.receipt_added {
            self.receipts_live.insert(k);
        }
        if let Some(k) = e.receipt_removed {
            self.receipts_live.remove(&k);
        }
    }
}

/// A bank client: generates transactions and records acknowledged effects.
pub struct BankClient {
    spec: BankSpec,
    client_id: u32,
    rng: Rng,
    next_receipt: u32,
    /// Arguments of an aborted transaction to run again, and retries left.
    retry: Option<(u64, u64, u64, i64)>,
    retries_left: u32,
    /// This client's acknowledged live receipts, for O(1) random choice.
    receipt_pool: Vec<u64>,
    /// `Some((c, p))`: with probability `p` a debit draws from customer `c`,
    /// concentrating write-skew pairs on one customer (bug hunting).
    pub hot_customer: Option<(u64, f64)>,
    /// Shared so a harness can read it after the client's task was dropped by a crash.
    pub ledger: Rc<RefCell<BankLedger>>,
}

enum Outcome {
    Committed,
    /// The application aborted (insufficient funds).
    UserAborted,
}

impl BankClient {
    pub fn new(spec: BankSpec, client_id: u32, seed: u64) -> Self {
        BankClient {
            retry: None,
            retries_left: spec.retries,
            spec,
            client_id,
            rng: Rng::new(seed),
            next_receipt: 0,
            receipt_pool: Vec::new(),
            hot_customer: None,
            ledger: Rc::default(),
        }
    }

    /// Run one randomly chosen transaction to its end. `Err` only for errors
    /// that are not aborts (revocation, unreachable memory).
    pub async fn run_one<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        let n = self.spec.accounts();
        // Applications retry aborted transactions with the same arguments;
        // a retry locks the same objects in the same order.
        let (roll, from, to, amount) = match self.retry.take() {
            Some(args) => args,
            None => {
                let roll = self.rng.below(100);
                let from = match self.hot_customer {
                    Some((c, p)) if self.rng.chance(p) => 2 * c + self.rng.below(2),
                    _ => self.rng.below(n),
                };
                let mut to = self.rng.below(n - 1);
                if to >= from {
                    to += 1;
                }
                (
                    roll,
                    from,
                    to,
                    1 + self.rng.below(self.spec.initial_balance as u64) as i64,
                )
            }
        };
        let result = if roll < 45 {
            self.debit(coord, from, to, amount, false).await
        } else if roll < 75 {
            self.debit(coord, from, to, amount, true).await
        } else if roll < 90 {
            self.audit(coord, from / 2).await
        } else {
            self.delete_receipt(coord).await
        };
        match result {
            Ok(Outcome::Committed) => {
                self.retries_left = self.spec.retries;
                self.ledger.borrow_mut().committed += 1;
                Ok(true)
            }
            Ok(Outcome::UserAborted) => Ok(false),
            Err(TxError::Aborted(_)) => {
                if self.retries_left > 0 {
                    self.retries_left -= 1;
                    self.retry = Some((roll, from, to, amount));
                } else {
                    self.retries_left = self.spec.retries;
                }
                let mut l = self.ledger.borrow_mut();
                l.pending = None;
                l.aborted += 1;
                Ok(false)
            }
            Err(e) => {
                let mut l = self.ledger.borrow_mut();
                if let Some(p) = l.pending.take() {
                    l.in_doubt.push(p);
                }
                l.unknown += 1;
                Err(e)
            }
        }
    }

    /// Move up to `amount` from `from` to `to`, never taking the customer of
    /// `from` below zero. `locked` picks read-for-update over optimistic
    /// reads plus blind (pipelined) writes.
    async fn debit<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
        from: u64,
        to: u64,
        amount: i64,
        locked: bool,
    ) -> Result<Outcome, TxError> {
        let mut tx = coord.begin();
        let sibling = from ^ 1;
        let (a, s, b);
        if locked {
            s = if sibling == to {
                None
            } else {
                Some(bal(tx.read(ACCOUNTS, sibling).await?))
            };
            a = decode_balance(&tx.read_for_update(ACCOUNTS, from).await?);
            b = decode_balance(&tx.read_for_update(ACCOUNTS, to).await?);
        } else {
            s = if sibling == to {
                None
            } else {
                Some(bal(tx.read(ACCOUNTS, sibling).await?))
            };
            a = bal(tx.read(ACCOUNTS, from).await?);
            b = bal(tx.read(ACCOUNTS, to).await?);
        }
        // When `to` is the sibling it was read (and locked) as `b`.
        let available = a + s.unwrap_or(b);
        // Often drain everything available: write skew then overdraws at once.
        let amount = if self.rng.chance(self.spec.drain_chance) {
            available
        } else {
            amount.min(available)
        };
        if available < 0 {
            // The reads saw an overdrawn customer; if they validate, a committed
            // transaction observed a broken invariant.
            tx.commit().await?;
            self.ledger.borrow_mut().audit_violations.push(format!(
                "debit saw customer {} at {a}+{:?} < 0",
                from / 2,
                s
            ));
            return Ok(Outcome::Committed);
        }
        if amount <= 0 {
            let e = tx.abort().await;
            // A node fenced meanwhile finds its unlocks revoked: the
            // transaction wrote nothing either way.
            debug_assert!(
                matches!(e, TxError::Aborted(AbortReason::User) | TxError::Revoked),
                "{e:?}"
            );
            return Ok(Outcome::UserAborted);
        }
        // Either order: whichever write comes last still has its lock in flight at commit.
        let mut writes = [(from, a - amount), (to, b + amount)];
        if self.rng.chance(0.5) {
            writes.swap(0, 1);
        }
        for (k, v) in writes {
            tx.write(ACCOUNTS, k, &encode_balance(v)).await?;
        }
        let receipt = if self.rng.chance(self.spec.receipt_chance) {
            let key = ((self.client_id as u64) << 32) | self.next_receipt as u64;
            self.next_receipt += 1;
            let mut v = [0u8; RECEIPT_BYTES as usize];
            v[..8].copy_from_slice(&from.to_le_bytes());
            v[8..16].copy_from_slice(&to.to_le_bytes());
            v[16..24].copy_from_slice(&amount.to_le_bytes());
            tx.insert(RECEIPTS, key, &v).await?;
            Some(key)
        } else {
            None
        };
        self.commit_effect(
            tx,
            TxEffect {
                deltas: vec![(from, -amount), (to, amount)],
                receipt_added: receipt,
                receipt_removed: None,
            },
        )
        .await?;
        if let Some(k) = receipt {
            self.receipt_pool.push(k);
        }
        Ok(Outcome::Committed)
    }

    /// Read-only: a customer's combined balance must never be negative.
    async fn audit<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
        customer: u64,
    ) -> Result<Outcome, TxError> {
        let mut tx = coord.begin();
        let c = bal(tx.read(ACCOUNTS, 2 * customer).await?);
        let s = bal(tx.read(ACCOUNTS, 2 * customer + 1).await?);
        tx.commit().await?;
        if c + s < 0 {
            self.ledger
                .borrow_mut()
                .audit_violations
                .push(format!("audit saw customer {customer} at {c}+{s} < 0"));
        }
        Ok(Outcome::Committed)
    }

    async fn delete_receipt<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<Outcome, TxError> {
        if self.receipt_pool.is_empty() {
            // Nothing of ours to delete yet: audit instead, so every call runs a transaction.
            let c = self.rng.below(self.spec.customers);
            return self.audit(coord, c).await;
        }
        let idx = self.rng.below(self.receipt_pool.len() as u64) as usize;
        let key = self.receipt_pool[idx];
        let mut tx = coord.begin();
        tx.delete(RECEIPTS, key).await?;
        self.receipt_pool.swap_remove(idx);
        self.commit_effect(
            tx,
            TxEffect {
                deltas: Vec::new(),
                receipt_added: None,
                receipt_removed: Some(key),
            },
        )
        .await?;
        Ok(Outcome::Committed)
    }

    /// Commit, recording the effect as pending first so that a crash or a
    /// lost connection leaves it "in doubt" rather than forgotten.
    async fn commit_effect<F: Fabric>(
        &mut self,
        tx: tandem_dkvs::Transaction<'_, F>,
        effect: TxEffect,
    ) -> Result<(), TxError> {
        self.ledger.borrow_mut().pending = Some(effect);
        tx.commit().await?;
        let mut l = self.ledger.borrow_mut();
        let e = l.pending.take().expect("set above");
        l.apply(&e);
        Ok(())
    }
}

fn bal(v: Option<Vec<u8>>) -> i64 {
    decode_balance(&v.expect("bank accounts are never deleted"))
}

/// Most in-doubt transactions whose every commit/abort combination is tried.
pub const IN_DOUBT_EXACT_MAX: usize = 16;

/// Compare the store's final state with the merged ledgers. Returns violations.
/// In-doubt transactions may have committed or not: the state must match the
/// acknowledged commits plus *some* subset of them (tried exhaustively up to
/// `IN_DOUBT_EXACT_MAX`; beyond that only conservation and the invariant are checked).
pub fn verify(
    spec: &BankSpec,
    accounts: &BTreeMap<u64, Vec<u8>>,
    receipts: &BTreeMap<u64, Vec<u8>>,
    ledger: &BankLedger,
) -> Vec<String> {
    let mut v = ledger.audit_violations.clone();
    let mut total = 0i64;
    for a in 0..spec.accounts() {
        match accounts.get(&a) {
            Some(bytes) => total += decode_balance(bytes),
            None => v.push(format!("account {a} is missing")),
        }
    }
    if total != spec.total() {
        v.push(format!(
            "money not conserved: total {total}, expected {}",
            spec.total()
        ));
    }
    for c in 0..spec.customers {
        let (x, y) = (
            accounts.get(&(2 * c)).map(|b| decode_balance(b)),
            accounts.get(&(2 * c + 1)).map(|b| decode_balance(b)),
        );
        if let (Some(x), Some(y)) = (x, y) {
            if x + y < 0 {
                v.push(format!("customer {c} is overdrawn: {x} + {y} < 0"));
            }
        }
    }
    let doubt = &ledger.in_doubt;
    if doubt.len() > IN_DOUBT_EXACT_MAX {
        return v;
    }
    let live: BTreeSet<u64> = receipts.keys().copied().collect();
    let balance = |a: u64| accounts.get(&a).map(|b| decode_balance(b)).unwrap_or(0);
    let mismatches = |l: &BankLedger| -> Vec<String> {
        let mut m = Vec::new();
        for a in 0..spec.accounts() {
            let want = spec.initial_balance + l.deltas.get(&a).copied().unwrap_or(0);
            if balance(a) != want {
                m.push(format!(
                    "account {a}: balance {}, but acknowledged commits say {want}",
                    balance(a)
                ));
            }
        }
        for k in live.difference(&l.receipts_live) {
            m.push(format!(
                "receipt {k:#x} is live but no acknowledged commit left it so"
            ));
        }
        for k in l.receipts_live.difference(&live) {
            m.push(format!("receipt {k:#x} was acknowledged but is not live"));
        }
        m
    };
    let mut first = None;
    for mask in 0u32..(1u32 << doubt.len()) {
        let mut l = ledger.clone();
        for (i, e) in doubt.iter().enumerate() {
            if mask & (1 << i) != 0 {
                l.apply(e);
            }
        }
        let m = mismatches(&l);
        if m.is_empty() {
            return v;
        }
        first.get_or_insert(m);
    }
    if !doubt.is_empty() {
        v.push(format!(
            "no combination of the {} in-doubt transactions explains the state; with none applied:",
            doubt.len()
        ));
    }
    v.extend(first.unwrap_or_default());
    v
}
