//! DDP's lab, and HEAL's: what runs the leaderless store's nodes as
//! processes, loads them, measures them and compares them. "DDP §N" is a
//! section of *Distributed Data Persistency* (MICRO 2021), "HEAL §N" one of
//! *HEAL: Online Incremental Recovery for Leaderless Distributed Systems
//! Across Persistency Models* (arXiv 2602.08257, 2026).
//!
//! | module | what |
//! |---|---|
//! | [`procs`] | a cluster of `tandem node` processes on loopback |
//! | [`load`] | closed-loop client sessions over TCP, one thread per connection |
//! | [`tcp`] | a measured run of that load against those processes |
//! | [`echo`] | the runtime's ceiling like for like: a node carrying ⟨Lin, Synch⟩'s messages and nothing else |
//! | [`nemesis`] | those processes under real network and process faults, checked |
//! | [`bench`] | the models in simulated time: heat map and sweeps |
//! | [`machine`] | the paper's machine: an application cost fitted on one figure, the others predicted |
//! | [`robustness`] | those verdicts over seeds, and under NVM pressure from larger records |
//! | [`cluster`], [`compare`] | DDP beside etcd and Redis on YCSB |
//! | [`heal`] | HEAL's recovery in simulated time and over processes, and beside ZooKeeper and etcd |

pub mod bench;
pub mod cluster;
pub mod compare;
pub mod echo;
pub mod heal;
pub mod load;
pub mod machine;
pub mod nemesis;
pub mod procs;
pub mod resp;
pub mod robustness;
pub mod tcp;
