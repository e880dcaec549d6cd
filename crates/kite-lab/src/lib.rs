//! Kite's lab: its node processes and their load, the benchmark that runs
//! Kite beside ZAB and the other systems of the paper's evaluation, the
//! experiments, and the comparison with ZooKeeper and etcd. "Kite §N" is a
//! section of *Kite: Efficient and Available Release Consistency for the
//! Datacenter* (PPoPP 2020).
//!
//! | module | what |
//! |---|---|
//! | [`bench`] | every system in simulated time, driven by the same clients |
//! | [`procs`] | node processes on loopback and their load over TCP |
//! | [`experiment`] | throughput, sleeping replicas, lock-free data structures, TCP |
//! | [`compare`] | Kite beside a ZooKeeper ensemble and an etcd cluster |

pub mod bench;
pub mod compare;
pub mod experiment;
pub mod nemesis;
pub mod procs;
pub mod resp;
