//! Pandora as a deployment (docs/DESIGN.md §2, `cluster/`; the store is that
//! of Dananjaya et al., *Fast, Highly Available, and Recoverable Transactions
//! on Disaggregated Data Stores*, EDBT 2025, cited below as "Pandora
//! paper"): what runs a store on
//! real threads and processes, as opposed to the experiments that measure
//! it (`tandem-bench`).
//!
//! - [`runner`]: compute threads with their coordinators against memory
//!   nodes, with the membership, crash and false-suspicion injection, and
//!   the end-of-run checks (`tandem pandora bench`, `tandem pandora soak`);
//! - [`backend`]: the memory side, in-process nodes or `tandem
//!   memory-server` processes over TCP;
//! - [`procs`]: the process roles of a multi-process deployment
//!   (membership replicas, compute servers, their sessions, the checker);
//! - [`zk`]: the membership state in ZooKeeper;
//! - [`workload`]: the workloads a runner drives and the outcome each
//!   transaction leaves for the checks.

pub mod backend;
pub mod procs;
pub mod resp;
pub mod runner;
pub mod workload;
pub mod zk;
