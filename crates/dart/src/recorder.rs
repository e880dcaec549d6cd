//! A transaction wrapper that records every operation into the client's
//! history as it happens (TANDEM thesis §2.5: the history H; docs/DESIGN.md
//! §5, real-time order).
//!
//! Writes are recorded *before* they are issued (a crash may let a posted
//! write land without its response), reads after they return. A write or
//! delete of a key the transaction read names the version read as the one it
//! replaces (its predecessor), so the checker has the `ww` and `rw` edges of
//! read-modify-writes and deletes; blind writes name none. The record
//! lives in the client's shared log, outside the client task, so a crash
//! that drops the task mid-transaction leaves it behind as `unknown`.

use std::cell::RefCell;
use std::rc::Rc;

use crate::history::{Op, TxRecord};
use crate::journal::Journal;
use crate::store::{StoreTx, TxFailure};
use crate::value::{Value, PREV_UNKNOWN};

/// Everything one client observed; shared with the harness.
#[derive(Default)]
pub struct ClientLog {
    pub records: Vec<TxRecord>,
    /// Assertion failures: (test name, description).
    pub violations: Vec<(String, String)>,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Assertion transactions that committed (and so were checked).
    pub asserts_checked: u64,
    /// Also append every event to this journal as it happens (worker
    /// processes that may be killed; see [`crate::journal`]).
    pub journal: Option<std::sync::Arc<Journal>>,
}

pub type SharedLog = Rc<RefCell<ClientLog>>;

/// An open transaction plus the index of its record in the log.
pub struct Rec<T: StoreTx> {
    pub tx: T,
    log: SharedLog,
    idx: usize,
    record: bool,
    /// Per key, the writer of the version this transaction's first access
    /// saw: `None` if it was absent or the first access was a blind write.
    first_seen: Vec<(u64, Option<u64>)>,
}

impl<T: StoreTx> Rec<T> {
    pub fn new(tx: T, log: SharedLog, idx: usize, record: bool) -> Self {
        Rec {
            tx,
            log,
            idx,
            record,
            first_seen: Vec::new(),
        }
    }

    /// The writer of the version of `key` this transaction read before
    /// touching it otherwise ([`PREV_UNKNOWN`] if none).
    fn predecessor(&self, key: u64) -> u64 {
        self.first_seen
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|&(_, w)| w)
            .unwrap_or(PREV_UNKNOWN)
    }

    fn first_access(&mut self, key: u64, writer: Option<u64>) {
        if !self.first_seen.iter().any(|(k, _)| *k == key) {
            self.first_seen.push((key, writer));
        }
    }

    /// The transaction, to end it.
    pub fn into_tx(self) -> T {
        self.tx
    }

    fn push(&self, op: Op) {
        if self.record {
            let mut l = self.log.borrow_mut();
            if let Some(j) = &l.journal {
                j.op(l.records[self.idx].id, &op);
            }
            l.records[self.idx].ops.push(op);
        }
    }

    pub async fn read(&mut self, key: u64) -> Result<Option<Value>, TxFailure> {
        let v = self.tx.read(key).await?;
        self.push(Op::read(key, v));
        self.first_access(key, v.map(|v| v.writer));
        Ok(v)
    }

    /// A write refused with the transaction still open took no effect: un-record it.
    fn settle(&self, r: Result<(), TxFailure>) -> Result<(), TxFailure> {
        if matches!(r, Err(TxFailure::NotFound | TxFailure::AlreadyExists)) && self.record {
            let mut l = self.log.borrow_mut();
            if let Some(j) = &l.journal {
                j.unop(l.records[self.idx].id);
            }
            l.records[self.idx].ops.pop();
        }
        r
    }

    /// Overwrite `key`; `value.prev`, if unknown, becomes the version read.
    pub async fn write(&mut self, key: u64, mut value: Value) -> Result<(), TxFailure> {
        if value.prev == PREV_UNKNOWN {
            value.prev = self.predecessor(key);
        }
        self.first_access(key, None);
        self.push(Op::write(key, Some(value)));
        let r = self.tx.write(key, value).await;
        self.settle(r)
    }

    pub async fn insert(&mut self, key: u64, value: Value) -> Result<(), TxFailure> {
        self.first_access(key, None);
        self.push(Op::write(key, Some(value)));
        let r = self.tx.insert(key, value).await;
        self.settle(r)
    }

    pub async fn delete(&mut self, key: u64) -> Result<(), TxFailure> {
        self.push(Op::delete(key, self.predecessor(key)));
        self.first_access(key, None);
        let r = self.tx.delete(key).await;
        self.settle(r)
    }
}
