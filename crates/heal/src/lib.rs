//! HEAL (`heal.txt`, DESIGN.md §7.3): online incremental recovery of a
//! crashed replica of the leaderless store.
//!
//! The protocol itself lives in the DDP engine it extends
//! (`tandem_ddp::heal` for the live nodes and the Buddy,
//! `tandem_ddp::heal_rr` for the recovering node): its GDP points and
//! per-key states are the engine's. This crate runs recoveries and
//! measures them against the baselines:
//! - [`recover`]: one recovery in simulated time, HEAL or the full copy,
//!   beside the failure-free Baseline;
//! - [`leader`] and [`leader_sync`]: the leader-based baseline (heal.txt
//!   §II-C), a ZooKeeper-style store on the same runtime, and its recovery.

pub mod leader;
pub mod leader_sync;
pub mod recover;

pub use leader::{LeaderFactory, LeaderNode, LeaderParams};
pub use recover::{RecoverConfig, RecoverReport, Scheme};
