//! The machine's memory operations, the simulated threads' handle on it
//! ([`SimMem`]), and the seeded scheduler that interleaves them.
//!
//! Threads are `async` bodies written against [`PMem`]; every access is an
//! await point. The scheduler always runs the thread whose clock is
//! earliest (ties by thread index), so the machine executes accesses in
//! time order; seeded jitter on costs and latencies (and an occasional slow
//! core) makes each seed a different interleaving and persist order.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::machine::{writer_of, Config, Core, Persist, INITIAL, LINE_WORDS};
use crate::pmem::{noop_waker, PMem};
use crate::policy::{Barrier, Eager, Epochs, Nop, Policy};
use crate::trace::{EventId, Kind, Sync};
use crate::PolicyKind;

fn acquire(s: Sync) -> bool {
    matches!(s, Sync::Acquire | Sync::AcqRel)
}

fn release(s: Sync) -> bool {
    matches!(s, Sync::Release | Sync::AcqRel)
}

pub fn policy(kind: PolicyKind, threads: usize) -> Box<dyn Policy> {
    match kind {
        PolicyKind::Nop => Box::new(Nop),
        PolicyKind::Eager => Box::new(Eager),
        PolicyKind::Sb => Box::new(Epochs::new(Barrier::Sb, threads)),
        PolicyKind::Bb => Box::new(Epochs::new(Barrier::Bb, threads)),
        PolicyKind::Arp => Box::new(Epochs::new(Barrier::Arp, threads)),
        PolicyKind::Lrp => Box::new(crate::lrp_policy::Lrp::new(threads)),
    }
}

/// When one step (one scheduling of a thread) ended: a crash point.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub time: u64,
}

/// A core plus the policy that runs it.
pub struct Machine {
    pub core: Core,
    pub policy: Box<dyn Policy>,
    kind: PolicyKind,
    /// Every persist issued (recorded runs only), in issue order.
    pub log: Vec<Persist>,
    pub steps: Vec<Step>,
    arena: Vec<(u64, u64)>,
    next_free: u64,
    last: Vec<Option<EventId>>,
}

const CHUNK: u64 = 64;

impl Machine {
    pub fn new(cfg: Config, kind: PolicyKind) -> Machine {
        let threads = cfg.threads;
        Machine {
            policy: policy(kind, threads),
            kind,
            core: Core::new(cfg),
            log: Vec::new(),
            steps: Vec::new(),
            arena: vec![(0, 0); threads],
            next_free: LINE_WORDS,
            last: vec![None; threads],
        }
    }

    fn begin(&mut self, t: usize) {
        let now = self.core.clock[t];
        self.core.advance(now);
        self.core.stalled = false;
    }

    fn end(&mut self) {
        if self.core.cfg.record {
            let fresh = self.core.stats.persists as usize - self.log.len();
            let start = self.core.inflight.len() - fresh.min(self.core.inflight.len());
            self.log.extend(self.core.inflight[start..].iter().cloned());
        }
    }

    /// End an access attempt. An access takes effect when its core stops
    /// waiting: if getting the line stalled the core, the attempt returns
    /// None and is retried at the core's new time (others run in between),
    /// so no core sees a value before it is written.
    fn finish<T>(&mut self, r: Option<T>) -> Option<T> {
        self.end();
        r
    }

    /// A load, or None if the core stalled first (retry it).
    pub fn load(&mut self, t: usize, addr: u64, sync: Sync) -> Option<u64> {
        self.begin(t);
        let line = addr / LINE_WORDS;
        let (c, p) = (&mut self.core, &mut *self.policy);
        if acquire(sync) {
            p.before_acquire(c, t);
        }
        p.on_access(c, t, line);
        // A core waiting at a barrier issues no request (docs/LRP.md, "SB on the queue").
        if c.stalled {
            return self.finish(None);
        }
        c.access(p, t, line, false);
        if c.stalled {
            return self.finish(None);
        }
        let v = c.mem[addr as usize];
        let from = c.source(addr);
        c.record(t, addr, Kind::Read { from }, sync);
        if acquire(sync) {
            p.after_acquire(c, t, line, false);
        }
        self.finish(Some(v))
    }

    /// A store, or None if the core stalled first (retry it).
    pub fn store(&mut self, t: usize, addr: u64, val: u64, sync: Sync) -> Option<()> {
        self.begin(t);
        let r = self.write(t, addr, sync, false, |_| Some(val));
        self.finish(r.map(|_| ()))
    }

    /// Compare-and-swap, or None if the core stalled first (retry it).
    pub fn cas(
        &mut self,
        t: usize,
        addr: u64,
        old: u64,
        new: u64,
        sync: Sync,
    ) -> Option<Result<u64, u64>> {
        self.begin(t);
        let r = self.write(t, addr, sync, true, |cur| (cur == old).then_some(new));
        self.finish(r.map(|(cur, wrote)| if wrote { Ok(cur) } else { Err(cur) }))
    }

    /// Get `addr`'s line exclusive and write `f(current)` if it is Some (a
    /// store, or a CAS that succeeds; a failed CAS is a read). None if the
    /// core stalled before the write could happen.
    fn write(
        &mut self,
        t: usize,
        addr: u64,
        sync: Sync,
        rmw: bool,
        f: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<(u64, bool)> {
        let line = addr / LINE_WORDS;
        let acq = rmw && acquire(sync);
        let (c, p) = (&mut self.core, &mut *self.policy);
        if release(sync) {
            p.before_release(c, t);
        }
        if acq {
            p.before_acquire(c, t);
        }
        p.on_access(c, t, line);
        // As in `load`: the request waits for the barrier.
        if c.stalled {
            return None;
        }
        let way = c.access(p, t, line, true);
        if c.stalled {
            return None;
        }
        let cur = c.mem[addr as usize];
        let from = c.source(addr);
        let Some(val) = f(cur) else {
            c.record(t, addr, Kind::Read { from }, sync);
            if acq {
                p.after_acquire(c, t, line, false);
            }
            return Some((cur, false));
        };
        p.on_write(c, t, way, release(sync));
        if c.stalled {
            return None;
        }
        c.mem[addr as usize] = val;
        let e = c.record(
            t,
            addr,
            if rmw { Kind::Rmw { from } } else { Kind::Write },
            sync,
        );
        c.writer[addr as usize] = e.map(writer_of).unwrap_or(INITIAL);
        c.dirty_way(t, way);
        self.last[t] = e;
        if release(sync) {
            p.after_release(c, t, line);
        }
        if acq {
            p.after_acquire(c, t, line, true);
        }
        Some((cur, true))
    }

    /// A block from `t`'s arena (per-thread chunks, as a real allocator has).
    pub fn alloc(&mut self, t: usize, words: u64) -> u64 {
        let (next, end) = &mut self.arena[t];
        if *next + words > *end {
            let size = CHUNK.max(words.next_multiple_of(LINE_WORDS));
            *next = self.next_free;
            *end = *next + size;
            self.next_free += size;
            assert!(
                self.next_free <= self.core.cfg.words,
                "simulated heap of {} words exhausted; raise its size",
                self.core.cfg.words
            );
        }
        let at = *next;
        *next += words;
        at
    }

    /// Everything written so far becomes the durable initial state: the
    /// prefilled structure, before the measured or checked run starts.
    pub fn settle(&mut self) {
        let c = &mut self.core;
        for (w, m) in c.writer.iter_mut().zip(&c.mem) {
            if *w != 0 || *m != 0 {
                *w = INITIAL;
            }
        }
        let cfg = c.cfg.clone();
        let mem = std::mem::take(&mut c.mem);
        let writer = std::mem::take(&mut c.writer);
        let mut fresh = Core::new(cfg);
        fresh.nvm.clone_from(&mem);
        fresh.nvm_writer.clone_from(&writer);
        fresh.mem = mem;
        fresh.writer = writer;
        self.core = fresh;
        self.policy = policy(self.kind, self.core.cfg.threads);
        self.log.clear();
        self.steps.clear();
        self.last.fill(None);
        self.arena.fill((0, 0));
    }
}

/// A simulated thread's handle on the shared machine.
#[derive(Clone)]
pub struct SimMem {
    pub m: Rc<RefCell<Machine>>,
    pub t: usize,
}

/// Pending once, then ready: hands control back to the scheduler.
struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

impl PMem for SimMem {
    async fn load(&self, addr: u64, sync: Sync) -> u64 {
        loop {
            Yield(false).await;
            if let Some(v) = self.m.borrow_mut().load(self.t, addr, sync) {
                return v;
            }
        }
    }
    async fn store(&self, addr: u64, val: u64, sync: Sync) {
        loop {
            Yield(false).await;
            if let Some(v) = self.m.borrow_mut().store(self.t, addr, val, sync) {
                return v;
            }
        }
    }
    async fn cas(&self, addr: u64, old: u64, new: u64, sync: Sync) -> Result<u64, u64> {
        loop {
            Yield(false).await;
            if let Some(v) = self.m.borrow_mut().cas(self.t, addr, old, new, sync) {
                return v;
            }
        }
    }
    fn alloc(&self, words: u64) -> u64 {
        self.m.borrow_mut().alloc(self.t, words)
    }
    fn last_write(&self) -> Option<EventId> {
        self.m.borrow().last[self.t]
    }
}

pub type Body = Pin<Box<dyn Future<Output = ()>>>;

/// Run the thread bodies to completion, earliest clock first, one access
/// per step; `record` keeps a [`Step`] after each.
pub fn run(m: &Rc<RefCell<Machine>>, mut bodies: Vec<Option<Body>>) {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let done = Cell::new(0);
    while done.get() < bodies.len() {
        let t = {
            let mb = m.borrow();
            (0..bodies.len())
                .filter(|&t| bodies[t].is_some())
                .min_by_key(|&t| mb.core.clock[t])
                .unwrap()
        };
        if bodies[t]
            .as_mut()
            .unwrap()
            .as_mut()
            .poll(&mut cx)
            .is_ready()
        {
            bodies[t] = None;
            done.set(done.get() + 1);
        }
        let mut mb = m.borrow_mut();
        if mb.core.cfg.record {
            let running = (0..bodies.len()).filter(|&t| bodies[t].is_some());
            let step = Step {
                time: running
                    .map(|t| mb.core.clock[t])
                    .min()
                    .unwrap_or(mb.core.clock[t]),
            };
            mb.steps.push(step);
        }
    }
    let mut mb = m.borrow_mut();
    let end = mb.core.clock.iter().copied().max().unwrap_or(0);
    mb.core.advance(end);
}
