//! Harnesses that run workloads against a Tandem store: seeded simulation
//! runs with invariant checks (tests and replays), and benchmarks.

pub mod sim_bank;
