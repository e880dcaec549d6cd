//! Workloads that drive a Tandem store, each with a post-run consistency check
//! computed from application state (DESIGN.md §6).

pub mod bank;
pub mod ledger;
pub mod micro;
pub mod smallbank;
pub mod tatp;
pub mod tpcc;
#[cfg(test)]
mod testkit;
mod zipf;

pub use zipf::Zipf;
