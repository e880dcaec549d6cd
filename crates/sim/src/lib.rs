//! Deterministic simulation substrate (docs/DESIGN.md §1, principle 1).
//!
//! Protocol code in Tandem never reads a wall clock, never draws from a global
//! RNG and never touches a socket. Under test it runs on this crate instead: a
//! seeded, single-threaded executor with a simulated nanosecond clock and an
//! event queue ordered by `(time, sequence)`. Two runs with the same seed take
//! exactly the same steps, so any failing seed replays bit for bit.
//!
//! A *crash* of a node is the executor dropping that node's tasks at their
//! current `await` point; events the node had already scheduled (verbs in
//! flight on the fabric) stay in the queue, exactly as posted RDMA work
//! requests outlive the process that posted them.

pub mod cpu;
mod executor;
mod oneshot;
mod queue;
mod rng;

pub use executor::{NodeTag, Sim, SimHandle, Sleep, TaskId};
pub use oneshot::{oneshot, OneshotReceiver, OneshotSender};
pub use queue::TimedQueue;
pub use rng::Rng;
