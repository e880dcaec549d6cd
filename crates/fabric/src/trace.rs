//! The floor under a protocol's CPU cost: record the verbs a compute thread
//! posts, then post the same verbs again, raw, on the same fabric. The
//! replay does no protocol work (no decoding, no decisions, no harness), so
//! its CPU time per transaction is what the verbs alone cost on that fabric,
//! and CPU per committed transaction over it is the protocol's overhead.
//!
//! [`Recorder`] wraps a fabric: while its [`TraceHandle`] is on, every batch
//! posted is copied into the trace, tagged with its lane (the queue pairs one
//! coordinator opened: a fabric's users open one queue pair per memory node,
//! in order). Batches a lane posted with no completion seen in between form
//! a group (a coordinator's reads to several memory nodes at once, say).
//! [`replay`] posts each lane's groups again, one lane per task, a group's
//! batches together and awaited together before the next group, as the
//! coordinator did.
//!
//! A replay writes and swaps words of the store: run it only once the store's
//! content no longer matters (after a run's end-of-run check).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::verb::{Batch, Completions, ComputeNodeId, MemNodeId, Verb, VerbArena};
use crate::{Fabric, QueuePair};

/// The batches one compute thread posted while recording, per lane, and the
/// transactions it committed meanwhile.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub lanes: Vec<Lane>,
    pub commits: u64,
}

/// One lane's batches, stored flat (a replay streams them in order, as a
/// poster reads its own work queue, with no pointer to chase per verb).
#[derive(Clone, Debug, Default)]
pub struct Lane {
    pub batches: Vec<Posted>,
    verbs: Vec<Recorded>,
    /// The bytes of every write, back to back.
    data: Vec<u8>,
}

/// One recorded batch: where it went, whether it began a group, and its
/// verbs (`verbs[first..first + count]` of its lane).
#[derive(Clone, Copy, Debug)]
pub struct Posted {
    pub mem: MemNodeId,
    pub opens_group: bool,
    first: u32,
    count: u32,
}

/// A verb, its write's bytes kept in the lane's `data`.
#[derive(Clone, Copy, Debug)]
enum Recorded {
    Read { addr: u64, len: u32 },
    Write { addr: u64, at: u32, len: u32 },
    Cas { addr: u64, expected: u64, new: u64 },
    Faa { addr: u64, add: u64 },
}

impl Lane {
    fn push(&mut self, mem: MemNodeId, opens_group: bool, batch: &Batch) {
        let first = self.verbs.len() as u32;
        for v in batch {
            let r = match v {
                Verb::Read { addr, len } => Recorded::Read {
                    addr: *addr,
                    len: *len,
                },
                Verb::Write { addr, data } => {
                    let at = self.data.len() as u32;
                    self.data.extend_from_slice(data);
                    Recorded::Write {
                        addr: *addr,
                        at,
                        len: data.len() as u32,
                    }
                }
                Verb::Cas {
                    addr,
                    expected,
                    new,
                } => Recorded::Cas {
                    addr: *addr,
                    expected: *expected,
                    new: *new,
                },
                Verb::Faa { addr, add } => Recorded::Faa {
                    addr: *addr,
                    add: *add,
                },
            };
            self.verbs.push(r);
        }
        self.batches.push(Posted {
            mem,
            opens_group,
            first,
            count: batch.len() as u32,
        });
    }

    /// Batch `b` again, built in the arena (its writes' bytes copied).
    fn rebuild(&self, b: &Posted, arena: &mut VerbArena) -> Batch {
        let mut batch = arena.batch();
        let verbs = &self.verbs[b.first as usize..(b.first + b.count) as usize];
        for v in verbs {
            batch.push(match *v {
                Recorded::Read { addr, len } => Verb::Read { addr, len },
                Recorded::Write { addr, at, len } => {
                    arena.write(addr, &self.data[at as usize..(at + len) as usize])
                }
                Recorded::Cas {
                    addr,
                    expected,
                    new,
                } => Verb::Cas {
                    addr,
                    expected,
                    new,
                },
                Recorded::Faa { addr, add } => Verb::Faa { addr, add },
            });
        }
        batch
    }
}

impl Trace {
    pub fn verbs(&self) -> u64 {
        self.lanes.iter().map(|l| l.verbs.len() as u64).sum()
    }
    pub fn batches(&self) -> u64 {
        self.lanes.iter().map(|l| l.batches.len() as u64).sum()
    }
}

struct Recording {
    on: Cell<bool>,
    verbs: Cell<usize>,
    cap_verbs: usize,
    trace: RefCell<Trace>,
    /// Per lane: a completion arrived since its last post.
    completed: RefCell<Vec<bool>>,
}

/// Turns a [`Recorder`]'s recording on and off, counts the commits made
/// while it is on, and hands the trace over.
#[derive(Clone)]
pub struct TraceHandle(Rc<Recording>);

impl TraceHandle {
    /// Record from now until [`TraceHandle::stop`] or until `cap_verbs` verbs.
    pub fn start(&self) {
        self.0.on.set(self.0.verbs.get() < self.0.cap_verbs);
    }
    pub fn stop(&self) {
        self.0.on.set(false);
    }
    pub fn is_on(&self) -> bool {
        self.0.on.get()
    }
    /// A transaction committed: counted if recording.
    pub fn commit(&self) {
        if self.is_on() {
            self.0.trace.borrow_mut().commits += 1;
        }
    }
    /// The trace so far (recording stops).
    pub fn take(&self) -> Trace {
        self.stop();
        std::mem::take(&mut *self.0.trace.borrow_mut())
    }

    fn record(&self, lane: usize, mem: MemNodeId, batch: &Batch) {
        let r = &self.0;
        let mut t = r.trace.borrow_mut();
        let mut completed = r.completed.borrow_mut();
        if t.lanes.len() <= lane {
            t.lanes.resize_with(lane + 1, Lane::default);
            completed.resize(lane + 1, true);
        }
        let opens_group = std::mem::replace(&mut completed[lane], false);
        t.lanes[lane].push(mem, opens_group, batch);
        r.verbs.set(r.verbs.get() + batch.len());
        if r.verbs.get() >= r.cap_verbs {
            r.on.set(false);
        }
    }
}

/// A fabric whose queue pairs copy what they post into a trace while its
/// handle is on (and only check a flag while it is off).
#[derive(Clone)]
pub struct Recorder<F: Fabric> {
    inner: F,
    handle: TraceHandle,
    opened: Rc<Cell<usize>>,
}

impl<F: Fabric> Recorder<F> {
    /// Wrap `inner`; the trace keeps at most about `cap_verbs` verbs.
    pub fn new(inner: F, cap_verbs: usize) -> (Recorder<F>, TraceHandle) {
        let handle = TraceHandle(Rc::new(Recording {
            on: Cell::new(false),
            verbs: Cell::new(0),
            cap_verbs,
            trace: RefCell::default(),
            completed: RefCell::default(),
        }));
        let r = Recorder {
            inner,
            handle: handle.clone(),
            opened: Rc::default(),
        };
        (r, handle)
    }
    pub fn inner(&self) -> &F {
        &self.inner
    }
}

#[derive(Clone)]
pub struct RecorderQp<Q: QueuePair> {
    inner: Q,
    lane: usize,
    handle: TraceHandle,
}

impl<F: Fabric> Fabric for Recorder<F> {
    type Qp = RecorderQp<F::Qp>;
    fn queue_pair(&self, mem: MemNodeId) -> Self::Qp {
        let n = self.opened.get();
        self.opened.set(n + 1);
        RecorderQp {
            inner: self.inner.queue_pair(mem),
            lane: n / self.inner.memory_nodes().max(1),
            handle: self.handle.clone(),
        }
    }
    fn memory_nodes(&self) -> usize {
        self.inner.memory_nodes()
    }
    fn compute_node(&self) -> ComputeNodeId {
        self.inner.compute_node()
    }
    fn executes_at_post(&self) -> bool {
        self.inner.executes_at_post()
    }
}

impl<Q: QueuePair> QueuePair for RecorderQp<Q> {
    type Pending = RecorderPending<Q::Pending>;
    fn post(&self, batch: Batch) -> Self::Pending {
        if self.handle.is_on() {
            self.handle.record(self.lane, self.memory_node(), &batch);
        }
        self.pending(self.inner.post(batch))
    }
    fn post_in(&self, batch: Batch, arena: &mut VerbArena) -> Self::Pending {
        if self.handle.is_on() {
            self.handle.record(self.lane, self.memory_node(), &batch);
        }
        self.pending(self.inner.post_in(batch, arena))
    }
    fn memory_node(&self) -> MemNodeId {
        self.inner.memory_node()
    }
}

impl<Q: QueuePair> RecorderQp<Q> {
    fn pending(&self, inner: Q::Pending) -> RecorderPending<Q::Pending> {
        RecorderPending {
            inner,
            lane: self.lane,
            handle: self.handle.clone(),
        }
    }
}

/// A batch's completions; marks its lane's group closed when they arrive.
pub struct RecorderPending<P> {
    inner: P,
    lane: usize,
    handle: TraceHandle,
}

impl<P: Future<Output = Completions> + Unpin> Future for RecorderPending<P> {
    type Output = Completions;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completions> {
        let done = Pin::new(&mut self.inner).poll(cx);
        if done.is_ready() && self.handle.is_on() {
            if let Some(c) = self.handle.0.completed.borrow_mut().get_mut(self.lane) {
                *c = true;
            }
        }
        done
    }
}

/// Post every lane of `trace` `passes` times on `fabric`, a task per lane,
/// each batch built in an arena (its writes' bytes copied, as a poster
/// must), a group's batches posted together and awaited before the next. Must run inside a tokio `LocalSet`.
/// Returns the verbs posted.
pub async fn replay<F: Fabric>(fabric: &F, trace: Rc<Trace>, passes: u32) -> u64 {
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..trace.lanes.len() {
        let qps: Vec<F::Qp> = (0..fabric.memory_nodes())
            .map(|m| fabric.queue_pair(m as MemNodeId))
            .collect();
        let trace = trace.clone();
        tasks.spawn_local(async move {
            let mut arena = VerbArena::default();
            let mut verbs = 0u64;
            let mut group = Vec::new();
            for _ in 0..passes {
                let l = &trace.lanes[lane];
                let posts = &l.batches;
                let mut i = 0;
                while i < posts.len() {
                    let end = (i + 1..posts.len())
                        .find(|&j| posts[j].opens_group)
                        .unwrap_or(posts.len());
                    for p in &posts[i..end] {
                        let raw = l.rebuild(p, &mut arena);
                        verbs += raw.len() as u64;
                        group.push(qps[p.mem as usize].post_in(raw, &mut arena));
                    }
                    for pending in group.drain(..) {
                        arena.give(pending.await);
                    }
                    i = end;
                }
            }
            verbs
        });
    }
    let mut verbs = 0;
    while let Some(r) = tasks.join_next().await {
        verbs += r.expect("a replay lane panicked");
    }
    verbs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch;
    use crate::inline::InlineCluster;

    /// Poll an inline batch's completions (ready at once).
    fn now<P: Future<Output = Completions> + Unpin>(mut p: P) -> Completions {
        let waker = std::task::Waker::noop();
        match Pin::new(&mut p).poll(&mut Context::from_waker(waker)) {
            Poll::Ready(c) => c,
            Poll::Pending => panic!("inline verbs complete at once"),
        }
    }

    #[test]
    fn a_replay_posts_what_was_recorded_lane_by_lane_and_group_by_group() {
        let c = InlineCluster::with_nodes(2, 4096, 1);
        let (f, h) = Recorder::new(c.join(1).unwrap(), 1_000);
        let lane0: Vec<_> = (0..2).map(|m| f.queue_pair(m)).collect();
        let lane1: Vec<_> = (0..2).map(|m| f.queue_pair(m)).collect();
        now(lane0[1].post(batch![Verb::write_u64(8, 5)]));
        h.start();
        let a = lane0[1].post(batch![Verb::write_u64(8, 7), Verb::read(0, 16)]);
        let b = lane0[0].post(batch![Verb::read(0, 8)]);
        now(a);
        now(b);
        now(lane0[0].post(batch![Verb::read(8, 8)]));
        now(lane1[0].post(batch![Verb::faa(16, 3)]));
        h.commit();
        h.stop();
        h.commit();
        now(lane1[0].post(batch![Verb::faa(16, 100)]));
        let t = h.take();
        assert_eq!(
            (t.lanes.len(), t.verbs(), t.batches(), t.commits),
            (2, 5, 4, 1)
        );
        assert_eq!(
            t.lanes[0].batches[0].mem, 1,
            "lane 0 posted to memory node 1 first"
        );
        let groups: Vec<bool> = t.lanes[0].batches.iter().map(|p| p.opens_group).collect();
        assert_eq!(
            groups,
            [true, false, true],
            "two batches posted together, then one"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let replayer = c.join(2).unwrap();
        let verbs = tokio::task::LocalSet::new().block_on(&rt, replay(&replayer, Rc::new(t), 2));
        assert_eq!(verbs, 10);
        assert_eq!(c.nodes()[1].load_u64(8), 7);
        assert_eq!(
            c.nodes()[0].load_u64(16),
            3 + 100 + 3 + 3,
            "two passes of the recorded FAA"
        );
    }

    #[test]
    fn recording_stops_at_its_cap() {
        let c = InlineCluster::with_nodes(1, 4096, 1);
        let (f, h) = Recorder::new(c.join(1).unwrap(), 3);
        let qp = f.queue_pair(0);
        h.start();
        for _ in 0..5 {
            now(qp.post(batch![Verb::read(0, 8), Verb::read(8, 8)]));
        }
        assert!(!h.is_on());
        assert_eq!(h.take().verbs(), 4);
    }
}
