//! ZAB, ZooKeeper's atomic broadcast (Junqueira, Reed and Serafini,
//! "Zab: High-performance broadcast for primary-backup systems", DSN 2011),
//! as the baseline of two papers: the leader-based recovery HEAL is compared
//! with (HEAL §II-C, §IX-D; *HEAL: Online Incremental Recovery for Leaderless
//! Distributed Systems Across Persistency Models*, arXiv 2602.08257, 2026),
//! and the ZAB row of Kite's evaluation (Kite §6; *Kite: Efficient and
//! Available Release Consistency for the Datacenter*, PPoPP 2020).
//!
//! - [`node`]: [`ZabNode`], a sans-IO protocol on `tandem-net`: the leader
//!   orders every write by `zxid`, logs it, proposes it to the followers and
//!   commits at a quorum of acknowledgements, in `zxid` order; reads are local;
//! - [`sync`]: how a restarted follower is brought back by the leader's log;
//! - [`stall`]: what a lost message costs, and how the follower resyncs or
//!   the leader proposes again;
//! - [`kite_api`]: the same node behind Kite's client API, so Kite's
//!   benchmark drives every system with the same clients.

pub mod kite_api;
pub mod node;
pub mod stall;
pub mod sync;

pub use kite_api::{KiteZabFactory, KiteZabNode};
pub use node::{ZabFactory, ZabMsg, ZabNode, ZabParams, ZabRecord};
