//! The black-box interface DART tests through (docs/DESIGN.md §5, thesis §5.1:
//! "DART incurs zero integration cost as it requires no changes to the
//! application programming interface").
//!
//! A [`TransactionalStore`] is one client session: `begin` opens a
//! [`StoreTx`] that reads, writes, inserts and deletes litmus [`Value`]s by
//! key and ends in `commit` or `abort`. DART sees nothing else of the store:
//! crash injection and recovery belong to the harness that built the store
//! (`sim_run`, `tcp_run`, `pg_run`), never to this trait.
//!
//! Methods are `async` so one litmus script runs on the simulator, on tokio
//! and, for synchronous stores such as PostgreSQL, under a trivial
//! `block_on` (their futures are always ready).

use std::fmt;

use crate::value::Value;

/// Why an operation did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxFailure {
    /// The transaction aborted (conflict, serialization failure, deadlock);
    /// none of its effects exist. The transaction is finished.
    Aborted(String),
    /// `write`/`delete` of an absent key. The transaction stays open.
    NotFound,
    /// `insert` of a live key. The transaction stays open.
    AlreadyExists,
    /// The outcome may be either (crash, lost connection, revoked access
    /// mid-commit). Never assumed absent. The transaction is finished.
    Unknown(String),
}

impl TxFailure {
    /// Whether the transaction is over after this failure.
    pub fn finishes(&self) -> bool {
        matches!(self, TxFailure::Aborted(_) | TxFailure::Unknown(_))
    }
}

impl fmt::Display for TxFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxFailure::Aborted(r) => write!(f, "aborted ({r})"),
            TxFailure::NotFound => f.write_str("not found"),
            TxFailure::AlreadyExists => f.write_str("already exists"),
            TxFailure::Unknown(r) => write!(f, "outcome unknown ({r})"),
        }
    }
}

/// One client session of a transactional key-value store.
#[allow(async_fn_in_trait)]
pub trait TransactionalStore {
    type Tx<'a>: StoreTx
    where
        Self: 'a;

    /// Start a transaction. `Err` only if the session itself is broken
    /// (e.g. the database connection is gone).
    async fn begin(&mut self) -> Result<Self::Tx<'_>, TxFailure>;
}

/// One open transaction. It must end with `commit` or `abort` unless an
/// operation returned a failure that [`TxFailure::finishes`] it.
#[allow(async_fn_in_trait)]
pub trait StoreTx {
    async fn read(&mut self, key: u64) -> Result<Option<Value>, TxFailure>;
    /// Overwrite an existing key.
    async fn write(&mut self, key: u64, value: Value) -> Result<(), TxFailure>;
    async fn insert(&mut self, key: u64, value: Value) -> Result<(), TxFailure>;
    async fn delete(&mut self, key: u64) -> Result<(), TxFailure>;
    async fn commit(self) -> Result<(), TxFailure>;
    async fn abort(self);
}
