//! Workloads that drive a Tandem store, each with a post-run consistency check
//! computed from application state (DESIGN.md §6).

pub mod bank;
pub mod micro;
mod zipf;

pub use zipf::Zipf;
