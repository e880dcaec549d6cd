//! One-sided verbs over queue pairs: the only way compute reaches memory
//! (DESIGN.md §3; Pandora `pandora.txt` §2.1 "RDMA Primitives").
//!
//! Every backend shares RDMA reliable-connection semantics:
//! - verbs are `read`, `write`, `cas`, `faa`; atomics are 8-byte and 8-byte aligned;
//! - verbs posted on one queue pair execute in posting order, verbs on different
//!   queue pairs are unordered; a batch is posted with one call (a doorbell) and
//!   completes as one future (completion polling);
//! - reads longer than 8 bytes are not atomic: concurrent writes may tear them at
//!   8-byte granularity;
//! - a compute node executes verbs only with the region key it was issued; once
//!   revoked, every later verb completes with [`VerbError::Revoked`] and does
//!   nothing. Bad addresses complete with an error and never hurt the memory node.
//!
//! Backends: [`inline`] (in-process, executes on the posting thread; for demos and
//! protocol-cost benchmarks), [`sim`] (in-process under the seeded simulator,
//! with verb delays, torn reads and verbs in flight past a crash), [`tcp`]
//! (a real memory-server process) and [`shm`] (the same process, its region a
//! memfd that compute processes on the host map and access themselves).

pub mod inline;
mod memory;
mod region;
pub mod shm;
pub mod sim;
pub mod tcp;

mod verb;

pub use memory::{Fenced, MemoryNode, RegionKey};
pub use verb::{
    Batch, Bytes, Completion, Completions, ComputeNodeId, MemNodeId, Verb, VerbError, VerbOutput,
};

use std::future::Future;

/// A compute node's handle onto the memory nodes of one cluster.
pub trait Fabric: Clone + 'static {
    type Qp: QueuePair;
    /// Open a queue pair from this compute node to memory node `mem`.
    /// Verbs on one queue pair execute in posting order.
    fn queue_pair(&self, mem: MemNodeId) -> Self::Qp;
    /// Number of memory nodes reachable through this fabric.
    fn memory_nodes(&self) -> usize;
    /// The compute node this handle speaks for.
    fn compute_node(&self) -> ComputeNodeId;
    /// Whether verbs execute when posted, with no I/O to wait for (the
    /// inline backend): a runtime then need not poll for I/O between tasks.
    fn executes_at_post(&self) -> bool {
        false
    }
}

/// One queue pair: post a doorbell batch, await its completions (one per verb, in order).
pub trait QueuePair: Clone + 'static {
    type Pending: Future<Output = Completions> + 'static;
    fn post(&self, batch: Batch) -> Self::Pending;
    fn memory_node(&self) -> MemNodeId;
}

/// Make each test `fn NAME(shm: bool)` run on both backends that reach
/// memory-server processes: `NAME::tcp` (verbs over TCP) and `NAME::shm`
/// (the servers' regions mapped). For test files: `on_tcp_and_shm!(a, b);`.
#[macro_export]
macro_rules! on_tcp_and_shm {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn tcp() {
                super::$name(false)
            }
            #[test]
            fn shm() {
                super::$name(true)
            }
        }
    )*};
}
