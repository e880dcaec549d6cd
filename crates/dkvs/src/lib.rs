//! Pandora: a disaggregated-memory transactional key-value store
//! (Dananjaya et al., *Fast, Highly Available, and Recoverable Transactions
//! on Disaggregated Data Stores*, EDBT 2025, §2–3, also ch. 4 of the TANDEM
//! thesis, University of Edinburgh, 2023; docs/DESIGN.md §4), with FORD and
//! traditional-logging modes as baselines. "Pandora paper §x" below refers
//! to that paper.
//!
//! Memory nodes are passive regions reached through [`tandem_fabric`]; compute
//! nodes run [`Coordinator`]s that execute strictly serializable transactions
//! with one-sided verbs. Failure detection and recovery build on the log
//! records defined in [`log`].

pub mod check;
mod compute;
pub mod config;
mod coordinator;
mod error;
mod failed_ids;
pub mod layout;
pub mod loader;
pub mod log;
pub mod recovery;
pub mod repair;
pub mod slot;
mod view;

pub use compute::{ComputeNode, MemoryView};
pub use config::{BugSwitches, Mode, OnStray, StoreConfig, TableId, TableSpec};
pub use coordinator::{Coordinator, CoordinatorStats, Reclaim, Transaction};
pub use error::{AbortReason, TxError};
pub use failed_ids::FailedIds;
pub use layout::Layout;

/// The names the invariant assertions start their panic messages with
/// (`coordinator/invariants.rs`, `recovery/invariants.rs`).
pub const INVARIANTS: [&str; 21] = [
    "locks-before-log",
    "locks-before-validation",
    "validation-unlocked",
    "undo-after-lock",
    "undo-before-write",
    "reclaim-tail",
    "version-fresh",
    "unlock-after-writes",
    "ack-on-live-replicas",
    "unlock-only-held",
    "lock-ownership",
    "steal-only-failed",
    "phantom-guard",
    "rollback-unacknowledged",
    "rollback-all-locked",
    "rollback-ours",
    "quiesced-nothing-superseded",
    "rollback-fresh-version",
    "restore-before-unlock",
    "decide-every-record",
    "invalidate-last",
];
