//! The membership service of Pandora (Dananjaya et al., *Fast, Highly
//! Available, and Recoverable Transactions on Disaggregated Data Stores*,
//! EDBT 2025, §3.1.2 and §3.2.2 steps 1, 2 and 4, cited below as "Pandora
//! paper"; docs/DESIGN.md §4.5): it hands out coordinator ids, detects failed compute
//! nodes by heartbeat timeout, drives active-link termination and recovery,
//! and publishes `failed_ids` only after recovery finished.
//!
//! It is a sans-IO state machine, `step(now, event) -> commands`, in the style
//! of raft-rs and openraft's engine: time comes in as an argument and every
//! effect (revoking, recovering, notifying) goes out as a [`Command`] for a
//! runtime to execute. The same code runs under the simulator and in the
//! `tandem pandora membership` process.

mod fleet;
mod ids;
mod membership;

pub use fleet::{Fleet, FleetCommand, FleetEvent, MemNode, MemoryConfig};

pub use membership::{
    Command, Event, Membership, MembershipConfig, MembershipState, NodeState, NodeStatus,
    FIRST_INCARNATION_ID, LAST_INCARNATION_ID, MAX_FD_REPLICAS,
};
