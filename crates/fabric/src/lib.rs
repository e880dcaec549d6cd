//! One-sided verbs over queue pairs: the only way compute reaches memory
//! (docs/DESIGN.md §3; "RDMA Primitives" in §2.1 of the Pandora paper:
//! Dananjaya et al., *Fast, Highly Available, and Recoverable Transactions
//! on Disaggregated Data Stores*, EDBT 2025).
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
pub mod trace;

mod verb;

pub use memory::{Fenced, MemoryNode, RegionKey};
pub use tandem_auth as auth;
pub use verb::{
    Batch, Bytes, Completion, Completions, ComputeNodeId, MemNodeId, Verb, VerbArena, VerbError,
    VerbOutput, VerbRef,
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
    type Pending: Future<Output = Completions> + Unpin + 'static;
    fn post(&self, batch: Batch) -> Self::Pending;
    /// [`QueuePair::post`], taking the completion vector and read buffers
    /// from `arena` and giving the batch back to it, where the backend can
    /// (those that execute in process: inline and shm). The caller gives
    /// the completions back with [`VerbArena::give`] once it is done.
    fn post_in(&self, batch: Batch, arena: &mut VerbArena) -> Self::Pending {
        let _ = arena;
        self.post(batch)
    }
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

/// The CPUs this process may run on (at least 1).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The `i`-th CPU (modulo their number) this process may run on (Linux).
pub fn nth_cpu(i: usize) -> Option<usize> {
    #[cfg(target_os = "linux")]
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return None;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &allowed))
            .collect();
        (!cpus.is_empty()).then(|| cpus[i % cpus.len()])
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = i;
        None
    }
}

/// Pin the calling thread to `cpu` (Linux; elsewhere a no-op). Returns
/// whether it took effect.
pub fn pin_to_cpu(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        false
    }
}

/// The CPU that last processed packets of `stream` (`SO_INCOMING_CPU`;
/// on loopback, the CPU its peer sent them from). Linux only.
pub fn incoming_cpu(stream: &std::net::TcpStream) -> Option<usize> {
    incoming_cpu_fd(std::os::fd::AsRawFd::as_raw_fd(stream))
}

/// [`incoming_cpu`] of a socket by descriptor.
pub fn incoming_cpu_fd(fd: std::os::fd::RawFd) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        let mut cpu: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let out = (&mut cpu as *mut libc::c_int).cast();
        // SAFETY: an int-sized out parameter; a bad descriptor only fails.
        let r =
            unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_INCOMING_CPU, out, &mut len) };
        (r == 0 && cpu >= 0).then_some(cpu as usize)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        None
    }
}

/// Give the calling thread real-time priority (SCHED_FIFO 10) where the OS
/// allows it (it needs CAP_SYS_NICE). Returns whether it took effect.
pub fn raise_priority() -> bool {
    #[cfg(target_os = "linux")]
    unsafe {
        let param = libc::sched_param { sched_priority: 10 };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}

