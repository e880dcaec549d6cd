//! DART: black-box litmus testing of transactional stores with recovery
//! (Pandora paper §5, thesis ch. 5; docs/DESIGN.md §5). "Pandora paper" is
//! Dananjaya et al., *Fast, Highly Available, and Recoverable Transactions on
//! Disaggregated Data Stores*, EDBT 2025; "thesis" is M. Dananjaya, *TANDEM:
//! Taming Failures in Next-Generation Datacenters with Emerging Memory*, PhD
//! thesis, University of Edinburgh, 2023.
//!
//! - [`store`]: the [`TransactionalStore`] trait DART tests through, with
//!   adapters for Tandem ([`tandem_store`]) and PostgreSQL ([`pg_store`]).
//! - [`litmus`], [`suite`]: litmus tests 1–3 and extended variants, each with
//!   scalable application-centric assertions.
//! - [`client`], [`recorder`], [`history`]: clients that run litmus and assert
//!   transactions recurrently and record the history.
//! - [`checker`]: Adya's DSG plus real-time edges; G0, G1a, G1b, G1c, G2.
//! - Harnesses: [`sim_run`] (seeded simulation, compute crashes at verb
//!   boundaries weighted toward the protocol's windows ([`plan`],
//!   [`tripwire`]), membership-driven recovery that may crash or run slowly
//!   ([`slow`]), the [`replica_check`]), [`tcp_run`] (memory-server
//!   processes), [`proc_run`] (every compute node a process, `kill -9` of
//!   one, recovery by the membership process; histories in a [`journal`];
//!   the replica check with a real memory-server kill, [`proc_replicas`]),
//!   [`pg_run`] (PostgreSQL); [`campaign`] runs many and reports.

pub mod board;
pub mod campaign;
pub mod checker;
pub mod client;
pub mod gate;
pub mod history;
pub mod journal;
pub mod litmus;
pub mod net_faults;
pub mod pg_run;
pub mod pg_store;
pub mod plan;
pub mod proc_replicas;
pub mod proc_run;
pub mod recorder;
pub mod replica_check;
pub mod report;
pub mod sim_run;
pub mod slow;
pub mod store;
pub mod suite;
pub mod tandem_store;
pub mod tcp_run;
pub mod tripwire;
pub mod value;

pub use checker::{Anomaly, AnomalyKind, Checker};
pub use store::{StoreTx, TransactionalStore, TxFailure};
pub use suite::Suite;
pub use value::Value;
