//! The tcp backend: memory servers as real processes reached over TCP
//! (docs/DESIGN.md §3, "Backends"): a memory-server process whose polling
//! thread (the "wimpy core") executes batched verbs that clients pipeline,
//! spinning briefly after work and then parking, so an idle server burns no
//! core.
//!
//! - [`wire`]: the frame format (length-prefixed, little-endian, bounded).
//! - [`serve`] / [`MemoryServerHandle`]: the memory server. Connection threads
//!   parse frames; one polling thread executes every verb against the
//!   [`MemoryNode`](crate::MemoryNode), whose key check is the access control
//!   (a connection without a valid region key executes nothing).
//! - [`TcpCluster`]: admin calls (register, revoke, info) and
//!   [`TcpCluster::connect`], which yields a compute thread's [`TcpFabric`]
//!   and its [`TcpQp`] queue pairs (pipelined, in order per connection).
//!
//! Semantics are those of every backend (RDMA reliable connections, see the
//! crate docs); a lost connection completes verbs with `Unavailable`.

mod client;
mod poller;
mod qp;
mod server;
pub mod wire;

pub use client::{is_fenced, TcpCluster, TcpFabric};
pub use poller::default_spin;
pub use qp::{TcpPending, TcpQp};
pub use server::{serve, serve_with, MemoryServerHandle, Polling};
