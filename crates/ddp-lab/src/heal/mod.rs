//! HEAL's measurements (the protocol itself is `tandem_ddp::heal`):
//!
//! - [`recover`]: one recovery in simulated time, HEAL or a full copy or
//!   ZAB's leader-based sync, beside the failure-free baseline;
//! - [`experiment`]: the recovery experiment built on it;
//! - [`extend`]: its sweep carried to larger stores by laws fitted on it;
//! - [`procs`]: a HEAL cluster of node processes, one of them killed and
//!   restarted;
//! - [`peers`], [`system`]: a stopped follower's catch-up in HEAL, in a
//!   ZooKeeper ensemble and in an etcd cluster, after the same downtime.

pub mod experiment;
pub mod extend;
pub mod peers;
pub mod procs;
pub mod recover;
pub mod system;

pub use recover::{RecoverConfig, RecoverReport, Scheme};
