//! A compute thread's queue pair to one memory server over TCP: pipelined
//! doorbell batches on one connection (docs/DESIGN.md §3, the tcp
//! backend; the Pandora paper, EDBT 2025, §2.1 on queue pairs and doorbell
//! batching).
//!
//! Compute threads are tokio `current_thread` runtimes with a `LocalSet`, so
//! everything here is `Rc`/`RefCell` and not `Send`. Per connection:
//! - [`TcpQp::post`] assigns the next `req_id`, encodes the batch straight
//!   into the connection's output buffer and returns a [`TcpPending`];
//! - a writer task swaps that buffer out and writes everything queued since
//!   its last write in one `write_all`, so the frames of many coordinators
//!   leave in one segment while the previous write is in flight;
//! - a reader task parses `Done` frames and completes the waiting request.
//!
//! The server answers one connection's batches in arrival order, and TCP
//! keeps the order of frames, which is what makes verbs on one queue pair
//! execute in posting order. If the connection dies (or the server breaks
//! the protocol), every pending and every later post completes with
//! [`VerbError::Unavailable`] for each verb: posts never hang on a dead link.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::memory::{MemoryNode, RegionKey};
use crate::tcp::wire::{self, ServerMsg, FRAME_HEADER_BYTES};
use crate::verb::{Batch, Completions, ComputeNodeId, MemNodeId, Verb, VerbArena, VerbError};
use crate::QueuePair;

/// Initial size of the reader's buffer; it grows to hold the largest frame seen.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// A request's place in the connection's window of outstanding requests.
enum Slot {
    Waiting {
        verbs: usize,
        waker: Option<Waker>,
    },
    Ready(Completions),
    /// Its future was dropped before the answer came; the answer is still
    /// due (the verbs execute all the same) and will be discarded.
    Abandoned {
        verbs: usize,
    },
    /// Answered and consumed (or discarded): the slot can be released.
    Gone,
}

struct Inner {
    /// Encoded frames the writer has not taken yet.
    out: Vec<u8>,
    writer_waker: Option<Waker>,
    next_req_id: u64,
    /// `slots[i]` belongs to request `front_req_id + i`.
    front_req_id: u64,
    slots: VecDeque<Slot>,
    /// The connection is lost: nothing more will be sent or answered.
    dead: bool,
    /// Every handle is dropped: the writer sends what is queued, then closes.
    closed: bool,
}

impl Inner {
    fn slot_mut(&mut self, req_id: u64) -> Option<&mut Slot> {
        let i = req_id.checked_sub(self.front_req_id)?;
        self.slots.get_mut(usize::try_from(i).ok()?)
    }

    fn pop_gone(&mut self) {
        while matches!(self.slots.front(), Some(Slot::Gone)) {
            self.slots.pop_front();
            self.front_req_id += 1;
        }
    }
}

/// A queue pair of the shm backend: the memory server's region mapped
/// here, and the key this compute node presents to it.
struct ShmLink {
    node: MemoryNode,
    compute: ComputeNodeId,
    key: RegionKey,
    /// Completions yield once first ([`TcpCluster::yielding`](crate::tcp::TcpCluster::yielding)).
    yield_per_batch: bool,
}

/// The connection state shared by handles, pending futures and the two tasks.
struct Conn {
    mem: MemNodeId,
    /// Set for the shm backend: verbs execute at post, on the mapped region;
    /// the socket (watched by one task) only tells whether the server lives.
    shm: Option<ShmLink>,
    inner: RefCell<Inner>,
    /// Signalled when the connection is killed: the reader stops waiting
    /// for a server that may never answer (a cut link, docs/DESIGN.md §4.6).
    killed: tokio::sync::Notify,
}

impl Conn {
    /// Complete every waiting request with `Unavailable` and stop both tasks.
    fn kill(&self, why: &dyn std::fmt::Display) {
        let mut wakers = Vec::new();
        {
            let mut i = self.inner.borrow_mut();
            if i.dead {
                return;
            }
            if !i.closed {
                log::warn!(
                    "tcp fabric: connection to memory node {} lost: {why}",
                    self.mem
                );
            }
            i.dead = true;
            i.out = Vec::new();
            for s in i.slots.iter_mut() {
                match s {
                    Slot::Waiting { verbs, waker } => {
                        wakers.extend(waker.take());
                        *s = Slot::Ready(vec![Err(VerbError::Unavailable); *verbs]);
                    }
                    Slot::Abandoned { .. } => *s = Slot::Gone,
                    Slot::Ready(_) | Slot::Gone => {}
                }
            }
            i.pop_gone();
            wakers.extend(i.writer_waker.take());
        }
        self.killed.notify_one();
        // Wake outside the borrow: a waker may run code that touches this connection.
        for w in wakers {
            w.wake();
        }
    }

    /// Deliver one `Done` frame. An answer the window does not expect is a
    /// protocol violation and kills the connection.
    fn complete(&self, req_id: u64, completions: Completions) -> Result<(), String> {
        let waker;
        {
            let mut i = self.inner.borrow_mut();
            let Some(slot) = i.slot_mut(req_id) else {
                return Err(format!("answer to unknown request {req_id}"));
            };
            match slot {
                Slot::Waiting { verbs, waker: w } => {
                    if *verbs != completions.len() {
                        return Err(format!(
                            "{} completions for a batch of {verbs}",
                            completions.len()
                        ));
                    }
                    waker = w.take();
                    *slot = Slot::Ready(completions);
                }
                // The poster lost interest; the verbs executed all the same.
                Slot::Abandoned { verbs } => {
                    if *verbs != completions.len() {
                        return Err(format!(
                            "{} completions for a batch of {verbs}",
                            completions.len()
                        ));
                    }
                    waker = None;
                    *slot = Slot::Gone;
                    i.pop_gone();
                }
                Slot::Ready(_) | Slot::Gone => {
                    return Err(format!("second answer to request {req_id}"))
                }
            }
        }
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

/// Marks the connection closed when the last [`TcpQp`] clone is dropped, so
/// the writer task ends and the socket is released.
struct Link(Rc<Conn>);

impl Drop for Link {
    fn drop(&mut self) {
        let w = {
            let mut i = self.0.inner.borrow_mut();
            i.closed = true;
            i.writer_waker.take()
        };
        if self.0.shm.is_some() {
            self.0.killed.notify_one();
        }
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// A queue pair to one memory server: a cheap handle onto the calling
/// thread's connection. Verbs posted on it execute in posting order.
///
/// Clones share one link, which [`TcpQp::replace`] swaps for a connection to
/// a replacement memory server: coordinators keep their handles across a
/// memory-node replacement (docs/DESIGN.md §4.6).
#[derive(Clone)]
pub struct TcpQp {
    link: Rc<RefCell<Rc<Link>>>,
}

impl TcpQp {
    /// Start the reader and writer tasks of an established data connection
    /// (handshake done). Must run inside a `LocalSet`.
    pub(crate) fn start(stream: TcpStream, mem: MemNodeId) -> TcpQp {
        let qp = TcpQp::with_conn(mem, false, None);
        let conn = qp.conn();
        let (rd, wr) = stream.into_split();
        tokio::task::spawn_local(reader_task(conn.clone(), rd));
        tokio::task::spawn_local(writer_task(conn, wr));
        qp
    }

    /// A queue pair onto a memory server's shared region, mapped here
    /// (`node`); `socket` is the server's liveness link. Must run inside a
    /// `LocalSet`.
    pub(crate) fn start_shm(
        (node, compute, key, yield_per_batch): (MemoryNode, ComputeNodeId, RegionKey, bool),
        socket: std::os::unix::net::UnixStream,
        mem: MemNodeId,
    ) -> std::io::Result<TcpQp> {
        socket.set_nonblocking(true)?;
        let socket = tokio::net::UnixStream::from_std(socket)?;
        let link = ShmLink {
            node,
            compute,
            key,
            yield_per_batch,
        };
        let qp = TcpQp::with_conn(mem, false, Some(link));
        tokio::task::spawn_local(watch_task(qp.conn(), socket));
        Ok(qp)
    }

    /// A queue pair on a fresh connection state (`dead`: one never up).
    fn with_conn(mem: MemNodeId, dead: bool, shm: Option<ShmLink>) -> TcpQp {
        let conn = Rc::new(Conn {
            mem,
            shm,
            killed: tokio::sync::Notify::new(),
            inner: RefCell::new(Inner {
                out: Vec::new(),
                writer_waker: None,
                next_req_id: 0,
                front_req_id: 0,
                slots: VecDeque::new(),
                dead,
                closed: dead,
            }),
        });
        TcpQp {
            link: Rc::new(RefCell::new(Rc::new(Link(conn)))),
        }
    }

    /// A queue pair with no connection (its memory server is down): every
    /// post completes with `Unavailable` until [`TcpQp::replace`].
    pub(crate) fn unconnected(mem: MemNodeId) -> TcpQp {
        TcpQp::with_conn(mem, true, None)
    }

    fn conn(&self) -> Rc<Conn> {
        self.link.borrow().0.clone()
    }

    /// Whether this queue pair maps its memory server's region (shm backend).
    pub fn is_shm(&self) -> bool {
        self.conn().shm.is_some()
    }

    /// Whether the connection is still up (false is final until [`TcpQp::replace`]).
    pub fn is_connected(&self) -> bool {
        !self.conn().inner.borrow().dead
    }

    /// Cut the link (the memory server was declared failed): every pending
    /// request and every later post completes with `Unavailable` at once,
    /// whether or not the server would ever have answered.
    pub fn cut(&self) {
        self.conn()
            .kill(&"cut: the memory server was declared failed");
    }

    /// From now on, every clone of this queue pair posts on `other`'s
    /// connection (to a replacement memory server); the old one is cut.
    pub fn replace(&self, other: TcpQp) {
        self.cut();
        let new = other.link.borrow().clone();
        *self.link.borrow_mut() = new;
    }

    /// Requests posted and not yet consumed or dropped.
    pub fn outstanding(&self) -> usize {
        self.conn()
            .inner
            .borrow()
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Waiting { .. } | Slot::Ready(_)))
            .count()
    }
}

impl std::fmt::Debug for TcpQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpQp")
            .field("mem", &self.conn().mem)
            .field("connected", &self.is_connected())
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

impl QueuePair for TcpQp {
    type Pending = TcpPending;

    fn post(&self, batch: Batch) -> TcpPending {
        self.post_verbs(&batch, None)
    }

    /// The batch is encoded (tcp) or executed (shm) at once, so it goes
    /// back to the arena at once.
    fn post_in(&self, batch: Batch, arena: &mut VerbArena) -> TcpPending {
        let p = self.post_verbs(&batch, Some(&mut *arena));
        arena.give_batch(batch);
        p
    }

    fn memory_node(&self) -> MemNodeId {
        self.conn().mem
    }
}

impl TcpQp {
    fn post_verbs(&self, batch: &[Verb], arena: Option<&mut VerbArena>) -> TcpPending {
        let link = self.link.borrow();
        let conn = &link.0;
        let n = batch.len();
        if n == 0 {
            return TcpPending::ready(Completions::new());
        }
        if let Some(shm) = &conn.shm {
            let done = shm.post(conn, batch, arena);
            return match shm.yield_per_batch {
                true => TcpPending {
                    state: PendingState::YieldFirst(done),
                },
                false => TcpPending::ready(done),
            };
        }
        if !wire::batch_fits(batch) {
            // The batch or its answer would exceed one frame; the server would
            // drop the connection for it, so refuse it here, per verb.
            return TcpPending::ready(vec![Err(VerbError::OutOfRange); n]);
        }
        let (req_id, writer) = {
            let mut i = conn.inner.borrow_mut();
            if i.dead {
                return TcpPending::ready(vec![Err(VerbError::Unavailable); n]);
            }
            let req_id = i.next_req_id;
            i.next_req_id += 1;
            wire::encode_batch(&mut i.out, req_id, batch);
            i.slots.push_back(Slot::Waiting {
                verbs: n,
                waker: None,
            });
            (req_id, i.writer_waker.take())
        };
        if let Some(w) = writer {
            w.wake();
        }
        TcpPending {
            state: PendingState::Waiting {
                conn: conn.clone(),
                req_id,
            },
        }
    }
}

impl ShmLink {
    /// Execute a batch on the mapped region, unless the link is down.
    fn post(&self, conn: &Conn, batch: &[Verb], arena: Option<&mut VerbArena>) -> Completions {
        if conn.inner.borrow().dead {
            return vec![Err(VerbError::Unavailable); batch.len()];
        }
        let (compute, key) = (self.compute, self.key);
        let Some(arena) = arena else {
            let mut done = Completions::with_capacity(batch.len());
            (self.node).execute_batch(compute, key, batch, |c| done.push(c));
            return done;
        };
        let mut done = arena.completions();
        let buffer = |n| arena.zeroed(n);
        (self.node).execute_batch_with(compute, key, batch, buffer, |c| done.push(c));
        done
    }
}

/// The shm backend's liveness link: the server never writes to it, so
/// anything but a cut or the last handle going away means it is gone.
async fn watch_task(conn: Rc<Conn>, mut socket: tokio::net::UnixStream) {
    let mut b = [0u8; 1];
    tokio::select! {
        r = socket.read(&mut b) => {
            let why = match r {
                Ok(0) => "the memory server closed its shm link".to_string(),
                Ok(_) => "the memory server broke the shm protocol".to_string(),
                Err(e) => e.to_string(),
            };
            conn.kill(&why);
        }
        _ = conn.killed.notified() => {}
    }
}

enum PendingState {
    Ready(Completions),
    /// Executed already; completes at the second poll.
    YieldFirst(Completions),
    Waiting {
        conn: Rc<Conn>,
        req_id: u64,
    },
    Done,
}

/// The completions of one posted batch: one per verb, in order.
pub struct TcpPending {
    state: PendingState,
}

impl TcpPending {
    fn ready(c: Completions) -> Self {
        TcpPending {
            state: PendingState::Ready(c),
        }
    }
}

impl Future for TcpPending {
    type Output = Completions;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completions> {
        let this = &mut *self;
        let done = match &mut this.state {
            PendingState::Ready(c) => std::mem::take(c),
            PendingState::YieldFirst(c) => {
                this.state = PendingState::Ready(std::mem::take(c));
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            PendingState::Waiting { conn, req_id } => {
                let mut i = conn.inner.borrow_mut();
                match i.slot_mut(*req_id) {
                    Some(Slot::Waiting { waker, .. }) => {
                        match waker {
                            Some(w) if w.will_wake(cx.waker()) => {}
                            _ => *waker = Some(cx.waker().clone()),
                        }
                        return Poll::Pending;
                    }
                    Some(Slot::Ready(c)) => {
                        let c = std::mem::take(c);
                        if let Some(slot) = i.slot_mut(*req_id) {
                            *slot = Slot::Gone;
                        }
                        i.pop_gone();
                        c
                    }
                    // Only this future releases its slot, so this cannot
                    // happen; answer rather than hang if it ever does.
                    Some(Slot::Abandoned { .. } | Slot::Gone) | None => Completions::new(),
                }
            }
            PendingState::Done => panic!("TcpPending polled after it completed"),
        };
        this.state = PendingState::Done;
        Poll::Ready(done)
    }
}

impl Drop for TcpPending {
    fn drop(&mut self) {
        // A dropped request keeps its slot until its answer arrives (the verbs
        // may still execute); only the result is discarded.
        if let PendingState::Waiting { conn, req_id } = &self.state {
            let mut i = conn.inner.borrow_mut();
            if let Some(slot) = i.slot_mut(*req_id) {
                match slot {
                    Slot::Waiting { verbs, .. } => *slot = Slot::Abandoned { verbs: *verbs },
                    Slot::Ready(_) => *slot = Slot::Gone,
                    Slot::Abandoned { .. } | Slot::Gone => {}
                }
                i.pop_gone();
            }
        }
    }
}

enum WriterStep {
    Write,
    Stop,
}

async fn writer_task(conn: Rc<Conn>, mut wr: OwnedWriteHalf) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let step = poll_fn(|cx| {
            let mut i = conn.inner.borrow_mut();
            if i.dead {
                return Poll::Ready(WriterStep::Stop);
            }
            if !i.out.is_empty() {
                // Everything posted since the last write leaves together;
                // the two buffers alternate, so steady state allocates nothing.
                std::mem::swap(&mut i.out, &mut buf);
                return Poll::Ready(WriterStep::Write);
            }
            if i.closed {
                return Poll::Ready(WriterStep::Stop);
            }
            match &i.writer_waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => i.writer_waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await;
        match step {
            WriterStep::Stop => break,
            WriterStep::Write => {
                if let Err(e) = wr.write_all(&buf).await {
                    conn.kill(&e);
                    break;
                }
                buf.clear();
            }
        }
    }
    // A FIN tells the server we are done; it answers what it has, then closes,
    // which ends the reader task.
    let _ = wr.shutdown().await;
}

async fn reader_task(conn: Rc<Conn>, mut rd: OwnedReadHalf) {
    tokio::select! {
        why = read_loop(&conn, &mut rd) => conn.kill(&why),
        _ = conn.killed.notified() => {}
    }
}

/// Parse `Done` frames until the connection fails; returns why it ended.
async fn read_loop(conn: &Conn, rd: &mut OwnedReadHalf) -> String {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let (mut start, mut end) = (0usize, 0usize);
    loop {
        // Deliver every complete frame in the buffer.
        let mut need = FRAME_HEADER_BYTES;
        while end - start >= FRAME_HEADER_BYTES {
            let mut header = [0u8; FRAME_HEADER_BYTES];
            header.copy_from_slice(&buf[start..start + FRAME_HEADER_BYTES]);
            let len = match wire::frame_len(header) {
                Ok(l) => l,
                Err(e) => return e.to_string(),
            };
            if end - start < FRAME_HEADER_BYTES + len {
                need = FRAME_HEADER_BYTES + len;
                break;
            }
            let body = &buf[start + FRAME_HEADER_BYTES..start + FRAME_HEADER_BYTES + len];
            start += FRAME_HEADER_BYTES + len;
            match ServerMsg::decode(body) {
                Ok(ServerMsg::Done {
                    req_id,
                    completions,
                }) => {
                    if let Err(why) = conn.complete(req_id, completions) {
                        return why;
                    }
                }
                Ok(ServerMsg::Reject { reason }) => {
                    return format!("server rejected the connection: {reason:?}")
                }
                Ok(other) => return format!("unexpected {other:?}"),
                Err(e) => return e.to_string(),
            }
        }
        // Make room for at least the rest of the current frame, compacting
        // so the buffer does not creep forward into ever smaller reads.
        if start == end {
            start = 0;
            end = 0;
            if buf.len() > READ_BUFFER_BYTES * 4 {
                // One large answer must not pin a large buffer forever.
                buf.truncate(READ_BUFFER_BYTES);
                buf.shrink_to_fit();
            }
        } else if start > 0 && (buf.len() - start < need || start >= buf.len() / 2) {
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
        }
        if buf.len() - start < need {
            buf.resize(start + need, 0);
        }
        debug_assert!(
            end < buf.len(),
            "an incomplete frame always leaves room to read"
        );
        match rd.read(&mut buf[end..]).await {
            Ok(0) => {
                return "server closed the connection".to_string();
            }
            Ok(n) => end += n,
            Err(e) => return e.to_string(),
        }
    }
}
