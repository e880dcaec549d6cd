//! Pandora's lab: everything that runs the disaggregated store rather than
//! being it. "Pandora §N" in this crate is a section of the paper, *Fast,
//! Highly Available, and Recoverable Transactions on Disaggregated Data
//! Stores* (EDBT 2025).
//!
//! | module | what |
//! |---|---|
//! | [`sim_run`], [`sim_suspicion`] | seeded simulation runs with invariant checks: the tier-2 tests and their replays |
//! | [`alternate`] | several stores on one workload, alternated in rounds, medians and ratios |
//! | [`fabric_bench`], [`echo_bench`] | the fabric's verb rate, beside the same frames echoed over the same sockets |
//! | [`recovery_bench`] | log recovery alone, planted and repeated: wall and CPU time per coordinator and per round |
//! | [`memloss_procs`] | memory-server processes killed and replaced under load |
//! | [`table_soak`] | long insert/delete soaks: slot reclamation in bounded memory |
//! | [`experiment`] | the paper's experiments (Table 2, PILL overhead, MTTF, failover, stalls, FORD's scan) |
//! | [`compare`] | Pandora beside PostgreSQL, Redis and etcd on the same workload |

pub mod alternate;
pub mod compare;
pub mod echo_bench;
pub mod experiment;
pub mod fabric_bench;
pub mod memloss_procs;
pub mod nemesis;
pub mod recovery_bench;
pub mod sim_run;
pub mod sim_suspicion;
pub mod table_soak;
