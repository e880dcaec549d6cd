//! The memory server's "wimpy core": the one polling thread that executes
//! every batched verb of every data connection (DESIGN.md §3, "tcp": "a
//! memory-server process whose one polling thread executes batched verbs ...
//! adaptive spin-then-park polling so idle servers do not burn a core").
//!
//! Connection threads parse frames and push [`Work`] into one bounded
//! [`WorkQueue`]. The poller drains the whole queue at once, executes each
//! batch through [`MemoryNode::execute`] (which does the access check per
//! verb, so a revoked compute node gets `Revoked` and nothing executes),
//! appends the `Done` frame to that connection's output buffer, and writes all
//! buffered answers only when the queue is empty: under load many answers
//! leave in one `write`. One thread executing in queue order is what gives a
//! connection's verbs their posting order.
//!
//! When the queue stays empty the poller spins a bounded number of rounds
//! (cheap pause instructions, then `yield_now`, at most [`SPIN_TIME_MAX`] in
//! all) to catch the next request of a pipelining client without a wake-up,
//! and then parks. Producers unpark it
//! only when it has announced that it sleeps, so a busy server pays no
//! syscalls for wake-ups.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crate::memory::{MemoryNode, RegionKey};
use crate::tcp::wire;
use crate::verb::{ComputeNodeId, Verb};

/// Bytes of parsed frames the queue may hold before connection threads block
/// (and TCP flow control pushes back on clients). At least one frame always
/// fits, so the largest legal frame can never wedge a connection.
const QUEUE_BYTES_MAX: usize = 64 << 20;
/// A connection's buffered answers are written out early once they reach
/// this size, bounding the poller's memory per connection.
const OUTPUT_FLUSH_BYTES: usize = 256 << 10;
/// Spin rounds with exponentially more pause instructions (2^0 .. 2^6).
const SPIN_ROUNDS_MAX: u32 = 7;
/// Then up to this many `yield_now` rounds, which let clients on the same core run.
const YIELD_ROUNDS_MAX: u32 = 64;
/// ... but no longer than this: on a busy core one `yield_now` can last a
/// whole time slice, and an iteration bound alone would then keep an idle
/// poller runnable for a long time.
const SPIN_TIME_MAX: Duration = Duration::from_micros(100);

/// What connection threads hand to the poller. The queue keeps each
/// producer's order, so a connection's `Open` precedes its batches and its
/// `Close` follows them.
pub(crate) enum Work {
    /// A data connection passed its `Hello`; `stream` is its write side.
    Open {
        conn: u64,
        compute: ComputeNodeId,
        key: RegionKey,
        stream: TcpStream,
    },
    Batch {
        conn: u64,
        req_id: u64,
        verbs: Vec<Verb>,
    },
    /// The connection ended (end of stream or framing error): answer what
    /// came before, then close it.
    Close { conn: u64 },
}

struct QueueState {
    items: Vec<Work>,
    bytes: usize,
    poller_sleeping: bool,
    producers_waiting: usize,
    stopped: bool,
}

/// The multi-producer, single-consumer queue between connection threads and the poller.
pub(crate) struct WorkQueue {
    state: Mutex<QueueState>,
    not_full: Condvar,
    /// Items in the queue, readable without the lock while the poller spins.
    len_hint: AtomicUsize,
    poller: OnceLock<Thread>,
}

impl WorkQueue {
    pub(crate) fn new() -> Self {
        WorkQueue {
            state: Mutex::new(QueueState {
                items: Vec::new(),
                bytes: 0,
                poller_sleeping: false,
                producers_waiting: 0,
                stopped: false,
            }),
            not_full: Condvar::new(),
            len_hint: AtomicUsize::new(0),
            poller: OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic elsewhere must not take the server down with it: the queue
        // state stays consistent under every operation, so use it anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_poller(&self, t: Thread) {
        let _ = self.poller.set(t);
    }

    /// Queue `work` that arrived as `bytes` frame bytes; blocks while the
    /// queue is full. Returns false once the server is stopping.
    pub(crate) fn push(&self, work: Work, bytes: usize) -> bool {
        let mut s = self.lock();
        while !s.stopped && s.bytes > 0 && s.bytes + bytes > QUEUE_BYTES_MAX {
            s.producers_waiting += 1;
            s = self.not_full.wait(s).unwrap_or_else(|e| e.into_inner());
            s.producers_waiting -= 1;
        }
        if s.stopped {
            return false;
        }
        s.items.push(work);
        s.bytes += bytes;
        self.len_hint.store(s.items.len(), Ordering::Release);
        // Deciding under the lock closes the race with the poller going to
        // sleep: either it sees this item, or we see it sleeping.
        let wake = std::mem::replace(&mut s.poller_sleeping, false);
        drop(s);
        if wake {
            if let Some(t) = self.poller.get() {
                t.unpark();
            }
        }
        true
    }

    /// Move everything queued into `out` (which must be empty). Returns false once stopped.
    fn take_all(&self, out: &mut Vec<Work>) -> bool {
        debug_assert!(out.is_empty());
        let mut s = self.lock();
        std::mem::swap(&mut s.items, out);
        s.bytes = 0;
        s.poller_sleeping = false;
        self.len_hint.store(0, Ordering::Release);
        let stopped = s.stopped;
        let waiting = s.producers_waiting > 0;
        drop(s);
        if waiting {
            self.not_full.notify_all();
        }
        !stopped
    }

    fn looks_nonempty(&self) -> bool {
        self.len_hint.load(Ordering::Acquire) > 0
    }

    /// Park the poller unless work arrived or the server stopped meanwhile.
    fn park_if_idle(&self) {
        {
            let mut s = self.lock();
            if !s.items.is_empty() || s.stopped {
                return;
            }
            s.poller_sleeping = true;
        }
        // A wake-up between the unlock and here leaves a token: park returns at once.
        thread::park();
    }

    /// Stop the poller and release every blocked producer.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.not_full.notify_all();
        if let Some(t) = self.poller.get() {
            t.unpark();
        }
    }
}

/// The poller's view of one data connection.
struct ConnOut {
    compute: ComputeNodeId,
    key: RegionKey,
    stream: TcpStream,
    /// Encoded `Done` frames not yet written.
    out: Vec<u8>,
    dirty: bool,
}

/// Run the polling loop until the queue is stopped.
pub(crate) fn run(queue: Arc<WorkQueue>, node: Arc<MemoryNode>) {
    let mut conns: HashMap<u64, ConnOut> = HashMap::new();
    let mut dirty: Vec<u64> = Vec::new();
    let mut work: Vec<Work> = Vec::new();
    loop {
        if !queue.take_all(&mut work) {
            break;
        }
        if !work.is_empty() {
            for w in work.drain(..) {
                handle(&node, &mut conns, &mut dirty, w);
            }
            continue;
        }
        // The queue is empty: every answer computed so far leaves now, in as
        // few writes as there are connections with answers.
        flush_dirty(&mut conns, &mut dirty);
        if spin_for_work(&queue) {
            continue;
        }
        queue.park_if_idle();
    }
    // Stopping: close every connection so clients see the server go away.
    for (_, c) in conns.drain() {
        let _ = c.stream.shutdown(Shutdown::Both);
    }
}

/// Bounded wait for work before parking; returns whether work showed up.
fn spin_for_work(queue: &WorkQueue) -> bool {
    let start = Instant::now();
    for round in 0..SPIN_ROUNDS_MAX {
        for _ in 0..(1u32 << round) {
            std::hint::spin_loop();
        }
        if queue.looks_nonempty() {
            return true;
        }
    }
    for _ in 0..YIELD_ROUNDS_MAX {
        thread::yield_now();
        if queue.looks_nonempty() {
            return true;
        }
        if start.elapsed() > SPIN_TIME_MAX {
            break;
        }
    }
    false
}

fn handle(node: &MemoryNode, conns: &mut HashMap<u64, ConnOut>, dirty: &mut Vec<u64>, w: Work) {
    match w {
        Work::Open {
            conn,
            compute,
            key,
            stream,
        } => {
            conns.insert(
                conn,
                ConnOut {
                    compute,
                    key,
                    stream,
                    out: Vec::new(),
                    dirty: false,
                },
            );
        }
        Work::Batch {
            conn,
            req_id,
            verbs,
        } => {
            // A connection whose writes failed is gone; its later batches are dropped.
            let Some(c) = conns.get_mut(&conn) else {
                return;
            };
            let start = wire::begin_done(&mut c.out, req_id, verbs.len());
            let out = &mut c.out;
            node.execute_batch(c.compute, c.key, &verbs, |done| {
                wire::encode_completion(out, &done)
            });
            wire::end_frame(&mut c.out, start);
            if c.out.len() >= OUTPUT_FLUSH_BYTES {
                if !flush(conn, c) {
                    conns.remove(&conn);
                }
            } else if !c.dirty {
                c.dirty = true;
                dirty.push(conn);
            }
        }
        Work::Close { conn } => {
            if let Some(mut c) = conns.remove(&conn) {
                flush(conn, &mut c);
                let _ = c.stream.shutdown(Shutdown::Both);
            }
        }
    }
}

fn flush_dirty(conns: &mut HashMap<u64, ConnOut>, dirty: &mut Vec<u64>) {
    for conn in dirty.drain(..) {
        let Some(c) = conns.get_mut(&conn) else {
            continue;
        };
        c.dirty = false;
        if !flush(conn, c) {
            conns.remove(&conn);
        }
    }
}

/// Write a connection's buffered answers. On failure the connection is shut
/// down (its reader thread then ends too) and false is returned.
fn flush(conn: u64, c: &mut ConnOut) -> bool {
    if c.out.is_empty() {
        return true;
    }
    let r = c.stream.write_all(&c.out);
    c.out.clear();
    if c.out.capacity() > OUTPUT_FLUSH_BYTES * 4 {
        // One burst must not pin a large buffer for the connection's lifetime.
        c.out.shrink_to(OUTPUT_FLUSH_BYTES);
    }
    match r {
        Ok(()) => true,
        Err(e) => {
            log::warn!(
                "memory server: connection {conn} (compute {}): write failed, closing: {e}",
                c.compute
            );
            let _ = c.stream.shutdown(Shutdown::Both);
            false
        }
    }
}
