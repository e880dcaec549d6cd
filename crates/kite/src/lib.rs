//! Kite (Gavrielatos, Katsarakis, Nagarajan, Grot, Joshi, *Kite: Efficient
//! and Available Release Consistency for the Datacenter*, PPoPP 2020, cited
//! below as "Kite paper"; docs/KITE.md has the decisions): release
//! consistency over a leaderless replicated key-value store.
//!
//! - relaxed reads and writes on the Eventual Store ([`relaxed`]);
//! - releases and acquires on multi-writer ABD ([`sync`]);
//! - RMWs on leaderless per-key Paxos ([`paxos`]);
//! - the fast/slow path: delinquency bits, epochs, slow releases and
//!   slow relaxed accesses, so the common case costs what ES costs and a
//!   slow or sleeping node blocks nobody beyond one time-out.
//!
//! [`node::KiteNode`] is a sans-IO [`tandem_net::Protocol`]; [`simcheck`]
//! runs it in the seeded simulator under faults and checks the history.

pub mod explore;
pub mod inflight;
mod invariants;
pub mod lfd;
pub mod node;
pub mod paxos;
pub mod relaxed;
pub mod replica;
pub mod simcheck;
pub mod sync;
pub mod types;

pub use node::{KiteConfig, KiteNode, KiteStats, Mutant};
pub use types::{Msg, Op, Reply};

/// The names the node's invariant assertions start their panic messages
/// with (`invariants.rs`).
pub const INVARIANTS: [&str; 13] = [
    "release-barrier",
    "delinquent-acquire",
    "own-bit",
    "paxos-promise",
    "paxos-commit-agreement",
    "paxos-helper-value",
    "rmw-commit-majority",
    "acquire-majority",
    "fast-path-epoch",
    "reset-bit-targets",
    "dm-cover",
    "version-monotonic",
    "write-version-fresh",
];
