//! The memory server's "wimpy core": a polling thread that reads, executes
//! and answers every batched verb of its data connections (docs/DESIGN.md §3,
//! the tcp backend: one polling thread executes the batched verbs, spinning
//! briefly after work and then parking, so an idle server burns no core).
//!
//! `tandem pandora memory-server --pollers cpus` (what the benchmarks run) departs
//! from "one": it runs one poller per CPU, pinned, and a poller hands a
//! connection to the poller on the CPU its packets come from (`SO_INCOMING_CPU`, checked every
//! [`STEER_EVERY_READS`] reads, acted on when seen twice), as a NIC steers
//! flows to the cores their consumers run on. With one poller, every request
//! of a client on the other CPU paid a cross-CPU wake-up: on two cores this
//! doubled depth-1 verbs/s (docs/RESULTS.md). A connection moves between
//! rounds only: the answers its old poller did not get out yet and the bytes
//! it read but did not execute go with it, so a queue pair's verbs keep
//! their order.
//!
//! Connection threads do the handshake only; an admitted data connection is
//! handed over as a [`Handover`] and from then on belongs to this thread,
//! which waits on every such socket at once (`epoll` through `mio`). A
//! readable connection is read until a read comes back short (the kernel
//! had nothing more; epoll is edge-triggered, so no read to see it empty); each whole
//! `Batch` frame in it executes at once through [`MemoryNode::execute_batch`]
//! (one access check per batch, no syscall per verb) and its `Done` frame
//! joins the connection's output, which leaves in one `write` when the round
//! ends. There is no hand-off between threads on the path of a verb, and one
//! thread executing each connection's frames in arrival order is what gives
//! a queue pair's verbs their posting order.
//!
//! Writes never block: a client that is slow, stopped or buggy must cost the
//! other connections nothing. What a socket does not take stays in the
//! connection's output queue and goes out when `epoll` reports the socket
//! writable again (every connection is registered for `WRITABLE` as well as
//! `READABLE`; edge-triggered, so that costs no events until a write has
//! found the socket full). The queue is bounded by backpressure: while
//! [`OUTPUT_QUEUE_BYTES`] or more of a connection's answers are unwritten,
//! the poller executes none of its batches and reads none of its requests
//! (they wait in its socket, then in its client's), so a connection holds at
//! most that bound plus one answer ([`FRAME_BYTES_MAX`](wire::FRAME_BYTES_MAX)).
//! A connection whose socket has taken nothing of its pending answers for
//! [`WRITE_STALL_MAX`] is cut off, with a warning; the verbs it had executed
//! stay executed, as a failed RDMA queue pair's may have.
//!
//! Adaptive polling: after a round that served anything, the poller keeps
//! polling without blocking (yielding the core between polls) for a spin
//! budget ([`default_spin`], or `memory-server --poll-spin-us`), to catch the
//! next request of a client at low depth without a wake-up; then it blocks
//! in `epoll_wait`, so an idle server sleeps. Connection threads wake it (through a `mio::Waker`) only when it
//! has announced that it sleeps.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};

use crate::memory::{MemoryNode, RegionKey};
use crate::tcp::wire::{self, ClientMsg, FRAME_HEADER_BYTES};
use crate::verb::{ComputeNodeId, VerbOutput};

/// A connection's answers are written out early (within its turn) once
/// this many are unwritten.
const OUTPUT_FLUSH_BYTES: usize = 256 << 10;
/// While this many bytes of a connection's answers are unwritten, it
/// executes no more batches and none of its requests are read. One answer
/// may be up to a frame, so a connection holds at most this plus
/// [`FRAME_BYTES_MAX`](wire::FRAME_BYTES_MAX) (8 MiB) of answers; on
/// loopback the sockets hold several MiB more, so a client that reads keeps
/// its large reads streaming.
const OUTPUT_QUEUE_BYTES: usize = 4 << 20;
/// Bytes a connection reads per turn.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// How long the poller keeps polling without blocking after it last served,
/// on a machine with cores to spare (see [`default_spin`]).
const SPIN_WITH_SPARE_CORES: Duration = Duration::from_micros(50);
/// A pinned poller checks which CPU a connection's packets arrive on once
/// every this many reads (a `getsockopt`).
const STEER_EVERY_READS: u32 = 64;
/// A connection with answers pending whose socket takes none of them for
/// this long is closed: its client stopped reading (stopped, hung or
/// buggy), and holds its output queue and its socket's buffers.
const WRITE_STALL_MAX: Duration = Duration::from_secs(2);
const WAKER: Token = Token(usize::MAX);

/// What a connection thread hands to the poller: a data connection that
/// passed its `Hello`, which the poller reads, executes and answers from
/// then on. `early` holds bytes the handshake read past the `Hello` frame.
pub(crate) struct Handover {
    pub conn: u64,
    pub compute: ComputeNodeId,
    pub key: RegionKey,
    pub priority: bool,
    pub stream: TcpStream,
    pub early: Vec<u8>,
    /// Answers a poller executed and did not get out yet: they leave before
    /// any the next poller appends.
    pub output: Output,
}

/// A connection's unwritten answers: encoded `Done` frames, the first
/// `sent` bytes of which are written.
#[derive(Default)]
pub(crate) struct Output {
    buf: Vec<u8>,
    sent: usize,
    /// Since the socket last took any of them, if the last write found it
    /// full (it is then registered to report when it has room).
    stalled_since: Option<Instant>,
}

impl Output {
    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }

    /// Over its bound: the connection executes nothing more for now.
    fn full(&self) -> bool {
        self.pending() >= OUTPUT_QUEUE_BYTES
    }

    /// Write what the socket takes now, without blocking. What it does not
    /// take waits for its next `WRITABLE` event. An error: the connection is
    /// broken.
    fn write_to(&mut self, stream: &mut mio::net::TcpStream) -> io::Result<()> {
        let mut progressed = false;
        while self.sent < self.buf.len() {
            match stream.write(&self.buf[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    progressed = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if progressed || self.stalled_since.is_none() {
                        self.stalled_since = Some(Instant::now());
                    }
                    // Moving the rest to the front when at least as much was
                    // written keeps the copying to one byte per byte sent.
                    if self.sent >= self.pending() {
                        self.buf.drain(..self.sent);
                        self.sent = 0;
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        self.clear();
        Ok(())
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.sent = 0;
        self.stalled_since = None;
        if self.buf.capacity() > OUTPUT_FLUSH_BYTES * 4 {
            // One burst must not pin a large buffer for the connection's lifetime.
            self.buf.shrink_to(OUTPUT_FLUSH_BYTES);
        }
    }
}

struct QueueState {
    items: Vec<Handover>,
    poller_sleeping: bool,
    stopped: bool,
}

/// Connection threads' way into the poller: new connections and the stop.
pub(crate) struct WorkQueue {
    state: Mutex<QueueState>,
    waker: OnceLock<Waker>,
}

impl WorkQueue {
    pub(crate) fn new() -> Self {
        WorkQueue {
            state: Mutex::new(QueueState {
                items: Vec::new(),
                poller_sleeping: false,
                stopped: false,
            }),
            waker: OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic elsewhere must not take the server down with it: the queue
        // state stays consistent under every operation, so use it anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `work`; returns false once the server is stopping.
    pub(crate) fn push(&self, work: Handover) -> bool {
        let mut s = self.lock();
        if s.stopped {
            return false;
        }
        s.items.push(work);
        // Deciding under the lock closes the race with the poller going to
        // sleep: either it sees this item, or we see it sleeping.
        let wake = std::mem::replace(&mut s.poller_sleeping, false);
        drop(s);
        if wake {
            self.wake();
        }
        true
    }

    fn wake(&self) {
        if let Some(w) = self.waker.get() {
            if let Err(e) = w.wake() {
                log::warn!("memory server: cannot wake the poller: {e}");
            }
        }
    }

    /// Move everything queued into `out`. Returns false once stopped.
    fn take_all(&self, out: &mut Vec<Handover>) -> bool {
        let mut s = self.lock();
        out.append(&mut s.items);
        s.poller_sleeping = false;
        !s.stopped
    }

    /// Announce that the poller is about to block, unless work is queued.
    fn may_sleep(&self) -> bool {
        let mut s = self.lock();
        if !s.items.is_empty() || s.stopped {
            return false;
        }
        s.poller_sleeping = true;
        true
    }

    /// Stop the poller.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.wake();
    }
}

/// The poller's view of one data connection.
struct Conn {
    compute: ComputeNodeId,
    key: RegionKey,
    /// Served first in every round (a recovery coordinator's connection).
    priority: bool,
    stream: mio::net::TcpStream,
    /// Bytes read but not yet executed (at most one partial frame after a
    /// round, unless the output is full).
    input: Vec<u8>,
    /// Answers not yet written.
    out: Output,
    /// End of stream or a bad frame: read and execute nothing more, close
    /// once the answers are out (a failed write discards them).
    closing: bool,
    /// Reads since the last steering check.
    reads: u32,
    /// The foreign CPU its packets arrived on at the last check.
    seen_on: Option<usize>,
    /// Hand it to the poller pinned on this CPU after this round.
    moving_to: Option<usize>,
}

/// Where a poller sits among the server's pollers.
pub(crate) struct Lane<'a> {
    /// The CPU this poller is pinned to.
    pub cpu: Option<usize>,
    /// The CPUs other pollers are pinned to.
    pub others: Vec<usize>,
    /// Runs when a connection closes.
    pub release: &'a dyn Fn(u64),
    /// Hands a connection to the poller pinned on a CPU; false if it is stopping.
    pub steer: &'a dyn Fn(usize, Handover) -> bool,
}

impl Lane<'_> {
    /// The other poller's CPU if `c`'s packets keep arriving there (seen at
    /// two checks in a row): its client runs on that CPU, and serving it
    /// from there saves a wake-up across CPUs on every request.
    fn steer_to(&self, c: &mut Conn) -> Option<usize> {
        self.cpu?;
        c.reads += 1;
        if c.reads < STEER_EVERY_READS {
            return None;
        }
        c.reads = 0;
        let cpu = crate::incoming_cpu_fd(std::os::fd::AsRawFd::as_raw_fd(&c.stream));
        let foreign = cpu.filter(|x| Some(*x) != self.cpu && self.others.contains(x));
        let again = foreign.is_some() && foreign == c.seen_on;
        c.seen_on = foreign;
        again.then_some(foreign).flatten()
    }
}

/// The poller's `epoll` instance, created before its thread so that
/// connection threads can wake it from the start.
pub(crate) fn open(queue: &WorkQueue) -> io::Result<Poll> {
    let poll = Poll::new()?;
    let waker = Waker::new(poll.registry(), WAKER)?;
    let _ = queue.waker.set(waker);
    Ok(poll)
}

/// The default spin budget: [`SPIN_WITH_SPARE_CORES`] on a machine with more
/// than two cores, none on one with two or fewer. Measured on two cores with
/// two client threads and three servers (`fabric-bench --fabric tcp`): a
/// 50 µs spin gained nothing at depth 1 (60 k verbs/s either way) and cost a
/// quarter at depth 16 and 64 (301 k and 908 k against 394 k and 1.08 M),
/// because a spinning poller takes the core its clients need.
pub fn default_spin() -> Duration {
    match thread::available_parallelism() {
        Ok(n) if n.get() > 2 => SPIN_WITH_SPARE_CORES,
        _ => Duration::ZERO,
    }
}

/// Run the polling loop until the queue is stopped, polling without
/// blocking for `spin` after each round that served.
pub(crate) fn run(
    queue: Arc<WorkQueue>,
    node: Arc<MemoryNode>,
    mut poll: Poll,
    spin: Duration,
    lane: Lane<'_>,
) {
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut work = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    // Connections with input to serve; a connection is in here at most once.
    let mut ready: Vec<u64> = Vec::new();
    // Connections whose last write found their socket full (as of the last
    // round), watched for their deadline.
    let mut stalled: Vec<u64> = Vec::new();
    let mut last_served = Instant::now();
    loop {
        if !queue.take_all(&mut work) {
            break;
        }
        for h in work.drain(..) {
            let conn = h.conn;
            if let Some(c) = open_conn(&poll, h) {
                conns.insert(conn, c);
                // Data may have come before the registration: read at once.
                ready.push(conn);
            }
        }
        let spinning = last_served.elapsed() < spin;
        let timeout = if !ready.is_empty() || spinning || !queue.may_sleep() {
            Some(Duration::ZERO)
        } else {
            // Sleep, but wake for the first stalled connection's deadline.
            (stalled.iter())
                .filter_map(|conn| conns.get(conn)?.out.stalled_since)
                .min()
                .map(|since| (since + WRITE_STALL_MAX).saturating_duration_since(Instant::now()))
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                log::warn!("memory server: poll failed: {e}");
                thread::sleep(Duration::from_millis(1));
            }
            continue;
        }
        for conn in events.iter().filter(|e| e.token() != WAKER) {
            let conn = conn.token().0 as u64;
            if !ready.contains(&conn) {
                ready.push(conn);
            }
        }
        if ready.is_empty() {
            if spinning {
                thread::yield_now();
            }
        } else {
            serve_round(&node, &mut conns, &mut ready, &mut chunk, &lane);
            last_served = Instant::now();
            // Every answer of the round leaves now, one write per connection,
            // as far as its socket takes it; a socket found full before
            // waits for its `WRITABLE` event.
            stalled.clear();
            conns.retain(|&conn, c| {
                if c.out.stalled_since.is_none() {
                    flush(conn, c);
                }
                if c.closing && c.out.pending() == 0 {
                    close(&poll, c);
                    (lane.release)(conn);
                    return false;
                }
                if c.out.stalled_since.is_some() {
                    stalled.push(conn);
                }
                true
            });
            let moving: Vec<u64> = (conns.iter())
                .filter_map(|(&conn, c)| c.moving_to.map(|_| conn))
                .collect();
            for conn in moving {
                move_away(&poll, &lane, conn, conns.remove(&conn).expect("listed"));
            }
        }
        if !stalled.is_empty() {
            cut_off_stalled(&poll, &lane, &mut conns, &mut stalled);
        }
    }
    // Stopping: close every connection so clients see the server go away
    // (with what their sockets take at once of their answers).
    for (conn, mut c) in conns.drain() {
        flush(conn, &mut c);
        close(&poll, &mut c);
        (lane.release)(conn);
    }
}

/// Close the connections whose sockets took none of their pending answers
/// for [`WRITE_STALL_MAX`]: their clients stopped reading. What they had
/// executed stays executed; their answers and unexecuted requests are
/// dropped, and the connection is reset rather than left for the kernel to
/// drain into a client that does not read.
fn cut_off_stalled(
    poll: &Poll,
    lane: &Lane<'_>,
    conns: &mut HashMap<u64, Conn>,
    stalled: &mut Vec<u64>,
) {
    let now = Instant::now();
    stalled.retain(|conn| {
        let Some(since) = conns.get(conn).and_then(|c| c.out.stalled_since) else {
            return false;
        };
        if now.duration_since(since) < WRITE_STALL_MAX {
            return true;
        }
        let mut c = conns.remove(conn).expect("looked up");
        log::warn!(
            "memory server: connection {conn} (compute {}): cut off: its client took none of \
             {} bytes of answers for {:?} ({} bytes of requests not executed)",
            c.compute,
            c.out.pending(),
            now.duration_since(since),
            c.input.len(),
        );
        let _ = rustix::net::sockopt::set_socket_linger(&c.stream, Some(Duration::ZERO));
        close(poll, &mut c);
        (lane.release)(*conn);
        false
    });
}

/// Hand `c` (its unwritten answers and its unexecuted input with it) to the
/// poller pinned on the CPU it is moving to. Its frames keep their order:
/// those executed here are answered first, the rest execute there.
fn move_away(poll: &Poll, lane: &Lane<'_>, conn: u64, mut c: Conn) {
    let Some(cpu) = c.moving_to else { return };
    if let Err(e) = poll.registry().deregister(&mut c.stream) {
        log::warn!("memory server: connection {conn}: cannot move it: {e}");
        (lane.release)(conn);
        return;
    }
    let h = Handover {
        conn,
        compute: c.compute,
        key: c.key,
        priority: c.priority,
        stream: std::os::fd::OwnedFd::from(c.stream).into(),
        early: c.input,
        output: c.out,
    };
    if !(lane.steer)(cpu, h) {
        (lane.release)(conn);
    }
}

/// One round: every ready connection gets one turn, priority connections
/// first; those that may have more input stay in `ready` for the next round,
/// so one busy connection cannot hold a recovery coordinator's back for long.
fn serve_round(
    node: &MemoryNode,
    conns: &mut HashMap<u64, Conn>,
    ready: &mut Vec<u64>,
    chunk: &mut [u8],
    lane: &Lane<'_>,
) {
    let prio = |conn: &u64| conns.get(conn).is_some_and(|c| c.priority);
    ready.sort_by_key(|conn| !prio(conn));
    let round = std::mem::take(ready);
    for conn in round {
        if let Some(c) = conns.get_mut(&conn) {
            if serve_turn(node, conn, c, chunk, lane) {
                ready.push(conn);
            }
        }
    }
}

fn open_conn(poll: &Poll, h: Handover) -> Option<Conn> {
    let Handover {
        conn,
        compute,
        key,
        priority,
        stream,
        early,
        output,
    } = h;
    // Registered for both for good: edge-triggered, `WRITABLE` raises an
    // event only after a write found the socket full, which is when the
    // poller waits for it.
    let interest = Interest::READABLE | Interest::WRITABLE;
    let registered = stream.set_nonblocking(true).and_then(|()| {
        let mut s = mio::net::TcpStream::from_std(stream);
        poll.registry()
            .register(&mut s, Token(conn as usize), interest)
            .map(|()| s)
    });
    match registered {
        Ok(stream) => Some(Conn {
            compute,
            key,
            priority,
            stream,
            input: early,
            out: output,
            closing: false,
            reads: 0,
            seen_on: None,
            moving_to: None,
        }),
        Err(e) => {
            log::warn!("memory server: connection {conn} (compute {compute}): cannot poll it: {e}");
            None
        }
    }
}

fn close(poll: &Poll, c: &mut Conn) {
    let _ = poll.registry().deregister(&mut c.stream);
    let _ = c.stream.shutdown(Shutdown::Both);
}

/// One turn of a connection: write what its socket takes of its answers,
/// execute the whole frames it has, then read once more and execute those.
/// With [`OUTPUT_QUEUE_BYTES`] of its answers unwritten it stops, before the
/// next frame or read, until its socket reports room. Returns whether it may
/// have more input (the read filled the chunk), to be served again next round.
fn serve_turn(
    node: &MemoryNode,
    conn: u64,
    c: &mut Conn,
    chunk: &mut [u8],
    lane: &Lane<'_>,
) -> bool {
    // Answers first: how many still wait decides whether it may run more.
    flush(conn, c);
    if c.closing {
        return false;
    }
    execute_frames(node, conn, c);
    while !c.closing && !c.out.full() {
        match c.stream.read(chunk) {
            Ok(0) => {
                if !c.input.is_empty() {
                    log::warn!(
                        "memory server: connection {conn} (compute {}): stream ended inside a frame",
                        c.compute
                    );
                }
                c.closing = true;
            }
            Ok(n) => {
                c.input.extend_from_slice(&chunk[..n]);
                if let Some(cpu) = lane.steer_to(c) {
                    // Unexecuted: the poller on `cpu` executes it.
                    c.moving_to = Some(cpu);
                    return false;
                }
                execute_frames(node, conn, c);
                // A read that did not fill the chunk emptied the socket: what
                // arrives from now on raises a new (edge-triggered) event, so
                // no second read just to see `WouldBlock`. A full output
                // resumes on its `WRITABLE` event instead.
                return !c.closing && n == chunk.len() && !c.out.full();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!(
                    "memory server: connection {conn} (compute {}): read failed: {e}",
                    c.compute
                );
                c.closing = true;
            }
        }
    }
    false
}

/// Execute the whole `Batch` frames in `c.input`, appending the answers,
/// until the output is full: the rest wait in `c.input`.
fn execute_frames(node: &MemoryNode, conn: u64, c: &mut Conn) {
    let mut pos = 0;
    while c.input.len() - pos >= FRAME_HEADER_BYTES {
        if c.out.pending() >= OUTPUT_FLUSH_BYTES && c.out.stalled_since.is_none() {
            flush(conn, c);
        }
        // Full: a write just found the socket full (or did before), so a
        // `WRITABLE` event brings it back here.
        if c.closing || c.out.full() {
            break;
        }
        let header: [u8; FRAME_HEADER_BYTES] =
            c.input[pos..pos + FRAME_HEADER_BYTES].try_into().unwrap();
        let len = match wire::frame_len(header) {
            Ok(len) => len,
            Err(e) => return bad_frame(conn, c, &e),
        };
        let body_at = pos + FRAME_HEADER_BYTES;
        if c.input.len() - body_at < len {
            break;
        }
        let body = &c.input[body_at..body_at + len];
        if !wire::is_batch(body) {
            let why = match ClientMsg::decode(body) {
                Ok(other) => format!("unexpected {}", other.name()),
                Err(e) => e.to_string(),
            };
            return bad_frame(conn, c, &why);
        }
        match wire::parse_batch(body) {
            Ok(batch) => execute_batch(node, (c.compute, c.key), batch, &mut c.out.buf),
            Err(e) => return bad_frame(conn, c, &e),
        }
        pos = body_at + len;
    }
    c.input.drain(..pos);
    if c.input.capacity() > 4 * READ_CHUNK_BYTES && c.input.len() < READ_CHUNK_BYTES {
        // One burst must not pin a large buffer for the connection's lifetime.
        c.input.shrink_to(READ_CHUNK_BYTES);
    }
}

/// Execute a checked batch where it lies in the input and append its `Done`
/// frame to `out`. Reads land in one buffer, reused from verb to verb.
fn execute_batch(
    node: &MemoryNode,
    (compute, key): (ComputeNodeId, RegionKey),
    batch: wire::BatchRef<'_>,
    out: &mut Vec<u8>,
) {
    let start = wire::begin_done(out, batch.req_id, batch.len());
    let spare = std::cell::Cell::new(Vec::new());
    let buffer = |n| {
        let mut b = spare.take();
        b.clear();
        b.resize(n, 0);
        b
    };
    node.execute_refs(compute, key, batch.verbs(), buffer, |done| {
        wire::encode_completion(out, &done);
        if let Ok(VerbOutput::Read(b)) = done {
            spare.set(b);
        }
    });
    wire::end_frame(out, start);
}

fn bad_frame(conn: u64, c: &mut Conn, why: &dyn std::fmt::Display) {
    log::warn!(
        "memory server: connection {conn} (compute {}): closing: {why}",
        c.compute
    );
    c.input.clear();
    c.closing = true;
}

/// Write what the socket takes of a connection's answers, without blocking;
/// a failure discards them and closes it.
fn flush(conn: u64, c: &mut Conn) {
    if c.out.pending() == 0 {
        return;
    }
    if let Err(e) = c.out.write_to(&mut c.stream) {
        log::warn!(
            "memory server: connection {conn} (compute {}): write failed, closing: {e}",
            c.compute
        );
        c.out.clear();
        c.closing = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::wire::ServerMsg;
    use crate::verb::{Completion, Verb, VerbError, VerbOutput};

    fn done(out: &mut Vec<u8>, req_id: u64, completions: &[Completion]) {
        let start = wire::begin_done(out, req_id, completions.len());
        completions
            .iter()
            .for_each(|c| wire::encode_completion(out, c));
        wire::end_frame(out, start);
    }

    fn batch(req_id: u64, verbs: Vec<Verb>) -> Vec<u8> {
        let mut b = Vec::new();
        ClientMsg::Batch { req_id, verbs }.encode(&mut b);
        b
    }

    /// A batch executed where it lies in the frame answers exactly what the
    /// same verbs answer decoded and executed one by one, errors included,
    /// and reads landing in one reused buffer keep their own bytes.
    #[test]
    fn a_batch_executed_in_its_frame_answers_as_the_decoded_verbs_do() {
        let verbs = vec![
            Verb::write(8, vec![1, 2, 3, 4, 5, 6, 7, 8, 9]),
            Verb::read(8, 9),
            Verb::cas(16, 9, 10),
            Verb::read(0, 24),
            Verb::faa(24, 5),
            Verb::read(4000, 200),
            Verb::cas(3, 0, 1),
            Verb::read(16, 3),
        ];
        let (a, b) = (MemoryNode::new(4096), MemoryNode::new(4096));
        let (ka, kb) = (a.register(2).unwrap(), b.register(2).unwrap());
        let mut want = Vec::new();
        let mut completions = Vec::new();
        b.execute_batch(2, kb, &verbs, |c| completions.push(c));
        done(&mut want, 7, &completions);
        let frame = batch(7, verbs);
        let parsed = wire::parse_batch(&frame[FRAME_HEADER_BYTES..]).unwrap();
        let mut got = Vec::new();
        execute_batch(&a, (2, ka), parsed, &mut got);
        assert_eq!(got, want);
        let mut revoked = Vec::new();
        execute_batch(&a, (2, ka ^ 1), parsed, &mut revoked);
        let body = &revoked[FRAME_HEADER_BYTES..];
        let Ok(ServerMsg::Done { completions, .. }) = ServerMsg::decode(body) else {
            panic!("not a Done frame");
        };
        assert!(completions.iter().all(|c| *c == Err(VerbError::Revoked)));
    }

    /// A connection handed over with answers its previous poller did not
    /// get out (here more than the output bound, behind a client that reads
    /// nothing yet) and a batch it read but did not execute: the answers
    /// leave first, the batch executes only once they are below the bound,
    /// and what the client sends next comes after it.
    #[test]
    fn a_moved_connection_sends_the_answers_it_brings_before_any_new_ones() {
        const MIB: usize = 1 << 20;
        let node = Arc::new(MemoryNode::new(4096));
        let key = node.register(1).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut output = Output::default();
        for req_id in 0..3u8 {
            let read = Ok(VerbOutput::Read(vec![req_id; 3 * MIB].into()));
            done(&mut output.buf, req_id as u64, &[read]);
        }
        output.stalled_since = Some(Instant::now());
        let queue = Arc::new(WorkQueue::new());
        let poll = open(&queue).unwrap();
        queue.push(Handover {
            conn: 1,
            compute: 1,
            key,
            priority: false,
            stream,
            early: batch(3, vec![Verb::faa(0, 1)]),
            output,
        });
        let poller = {
            let (queue, node) = (queue.clone(), node.clone());
            thread::spawn(move || {
                let (release, steer) = (|_| {}, |_, _| false);
                let lane = Lane {
                    cpu: None,
                    others: Vec::new(),
                    release: &release,
                    steer: &steer,
                };
                run(queue, node, poll, Duration::ZERO, lane)
            })
        };
        thread::sleep(Duration::from_millis(200));
        assert_eq!(
            node.load_u64(0),
            0,
            "executed behind 9 MiB of unread answers"
        );
        client.write_all(&batch(4, vec![Verb::faa(0, 1)])).unwrap();
        let mut body = Vec::new();
        let mut got = Vec::new();
        while got.len() < 5 {
            assert!(wire::read_frame(&mut client, &mut body).unwrap());
            match ServerMsg::decode(&body).unwrap() {
                ServerMsg::Done {
                    req_id,
                    completions,
                } => got.push((req_id, completions)),
                other => panic!("unexpected {other:?}"),
            }
        }
        let ids: Vec<u64> = got.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        for (id, c) in &got[..3] {
            let bytes = c[0].clone().unwrap().into_bytes();
            assert!(bytes.len() == 3 * MIB && bytes.iter().all(|b| *b as u64 == *id));
        }
        assert_eq!(got[3].1, vec![Ok(VerbOutput::Faa(0))]);
        assert_eq!(got[4].1, vec![Ok(VerbOutput::Faa(1))]);
        queue.stop();
        poller.join().unwrap();
    }
}
