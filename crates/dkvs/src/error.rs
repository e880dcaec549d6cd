//! Typed transaction errors (docs/DESIGN.md §4.3).

use std::fmt;

use tandem_fabric::VerbError;

/// Why a transaction aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortReason {
    /// A write-set lock was held by a live coordinator.
    LockConflict,
    /// A read found the object locked by a live coordinator.
    ReadLocked,
    /// Validation found a read-set object changed or locked.
    ValidationFailed,
    /// An object read earlier had changed by the time it was locked.
    StaleRead,
    /// Another transaction claimed the slot this insert targeted.
    InsertRace,
    /// The transaction's log record does not fit its log slot.
    LogFull,
    /// No free slot within the probe bound for an insert.
    TableFull,
    /// The application asked to abort.
    User,
    /// A memory node failed under the transaction before it could commit.
    MemoryNodeFailed,
}

impl AbortReason {
    pub fn name(self) -> &'static str {
        match self {
            AbortReason::LockConflict => "lock-conflict",
            AbortReason::ReadLocked => "read-locked",
            AbortReason::ValidationFailed => "validation-failed",
            AbortReason::StaleRead => "stale-read",
            AbortReason::InsertRace => "insert-race",
            AbortReason::LogFull => "log-full",
            AbortReason::TableFull => "table-full",
            AbortReason::User => "user",
            AbortReason::MemoryNodeFailed => "memory-node-failed",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxError {
    /// The key does not exist (read of an absent key is not an error: it returns `None`).
    NotFound,
    /// Insert of a key that exists.
    AlreadyExists,
    /// The transaction aborted; its effects are invisible and its locks released.
    Aborted(AbortReason),
    /// This compute node's access was revoked: it has been declared failed.
    Revoked,
    /// A memory node could not be reached.
    Unavailable,
    /// The transaction was already finished (committed or aborted).
    Finished,
}

impl From<VerbError> for TxError {
    fn from(e: VerbError) -> Self {
        match e {
            VerbError::Revoked => TxError::Revoked,
            _ => TxError::Unavailable,
        }
    }
}

impl fmt::Display for TxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxError::NotFound => f.write_str("key not found"),
            TxError::AlreadyExists => f.write_str("key already exists"),
            TxError::Aborted(r) => write!(f, "aborted ({})", r.name()),
            TxError::Revoked => {
                f.write_str("access revoked: this compute node was declared failed")
            }
            TxError::Unavailable => f.write_str("memory node unavailable"),
            TxError::Finished => f.write_str("transaction already finished"),
        }
    }
}

impl std::error::Error for TxError {}
