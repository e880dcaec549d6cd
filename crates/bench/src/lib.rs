//! Harnesses that run workloads against a Tandem store: seeded simulation
//! runs with invariant checks (tests and replays), and benchmarks over the
//! inline (in-process) and tcp (memory-server processes) fabrics.

pub mod compare;
pub mod ddp_bench;
pub mod ddp_procs;
pub mod ddp_tcp;
pub mod echo_bench;
pub mod experiment;
pub mod fabric_bench;
pub mod heal_exp;
pub mod heal_peers;
pub mod heal_procs;
pub mod kite_bench;
pub mod kite_compare;
pub mod kite_exp;
pub mod kite_procs;
pub mod kite_zab;
pub mod lrp_exp;
pub mod memloss_procs;
pub mod plot;
pub mod sim_run;
pub mod sim_suspicion;
pub mod table_soak;
