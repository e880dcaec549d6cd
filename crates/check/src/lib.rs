//! History checkers for Tandem's message-passing stores (DDP, HEAL, Kite):
//! docs/DESIGN.md §7.6 ("Checkers"), for what the DDP models promise in
//! crash-free runs, per consistency model, and the generic G2 (no thin air)
//! and G6 (convergence); the labels are defined in docs/DDP.md ("Check
//! labels"). [`rc`] checks Kite's release consistency.
//!
//! - [`history`]: [`HistOp`], one client operation; histories are JSON
//!   lines ([`read_jsonl`], [`write_jsonl`]) so other tools can read them.
//! - [`linearizable`]: per-key linearizability of a read/write register
//!   (Wing–Gong search with Lowe's just-in-time linearization and
//!   memoization, P-compositional, as Porcupine does), with a state budget
//!   that reports `Undecided` rather than hang (Lin consistency); an
//!   O(n log n) zone pre-check finds most violations first, with tiny
//!   witnesses the search then confirms.
//! - [`convergence`]: after quiescence every node holds the same value of
//!   every key, and it is a written value (G6, "Eventual", G2).
//! - [`session`]: read-your-writes and monotonic reads per session, against
//!   a version order the caller supplies (Causal consistency, C1').
//! - [`serial`]: serializability of transactions from what their clients
//!   saw (Adya's serialization graph; the Transactional models).
//! - [`strict`]: strict serializability of transactions recorded by a
//!   client outside the store, from values alone (unique writes, each
//!   preceded by a read of its key): a Redis client's `MULTI`/`EXEC`.
//! - [`thin_air`]: every value read was written, by a write invoked before
//!   the read completed (G2).
//! - [`zxid_sc`]: sequential consistency in zxid order for a leader-based
//!   store (the ZAB baseline), over [`RcOp`] histories.
//!
//! Every checker returns `Result<Stats, Violation>`; a [`Violation`] names
//! the key at fault and carries the smallest failing piece of history the
//! checker found. Printing the seed that replays it is the caller's job.

pub mod convergence;
pub mod history;
pub mod linearizable;
pub mod rc;
mod rc_hb;
pub mod rc_history;
pub mod serial;
pub mod session;
pub mod strict;
pub mod thin_air;
pub mod verdict;
mod wgl;
mod zones;
pub mod zxid_sc;

pub use convergence::{check_convergence, FinalStates};
pub use history::{parse_jsonl, read_jsonl, to_jsonl, write_jsonl, HistOp, OpKind};
pub use linearizable::{check_key, check_linearizable, check_linearizable_with, LinConfig};
pub use rc::{check_rc, RcReport, RcViolation, RcViolationKind};
pub use rc_history::{parse_rc_jsonl, rc_to_jsonl, Class, RcKind, RcOp, Version};
pub use session::{check_session, check_sessions, version_order, VersionOrder};
pub use strict::{check_strict_serializable, ClientTx, StrictStats};
pub use thin_air::check_no_thin_air;
pub use verdict::{Stats, Violation, ViolationKind};
pub use zxid_sc::{check_zxid_sc, ZxidStats, ZxidViolation, ZxidViolationKind};
