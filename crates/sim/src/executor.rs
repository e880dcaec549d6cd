//! The seeded single-threaded executor and simulated clock.

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use crate::rng::Rng;

/// Which simulated node a task belongs to; crashing a node drops its tasks.
pub type NodeTag = u32;
pub type TaskId = usize;

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

struct Event {
    time_ns: u64,
    seq: u64,
    action: Box<dyn FnOnce()>,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.time_ns == other.time_ns && self.seq == other.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // BinaryHeap is a max-heap; invert so the earliest (time, seq) pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time_ns, other.seq).cmp(&(self.time_ns, self.seq))
    }
}

struct Task {
    node: NodeTag,
    future: Option<LocalFuture>,
}

struct TaskWaker {
    id: TaskId,
    ready: Arc<Mutex<VecDeque<TaskId>>>,
    /// Set after every push to `ready`: lets the executor skip the lock
    /// when nothing was woken (most events wake no task).
    woken: Arc<AtomicBool>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().unwrap().push_back(self.id);
        self.woken.store(true, AtomicOrdering::Release);
    }
}

struct Inner {
    now_ns: Cell<u64>,
    next_seq: Cell<u64>,
    events: RefCell<BinaryHeap<Event>>,
    rng: RefCell<Rng>,
    ready: Arc<Mutex<VecDeque<TaskId>>>,
    woken: Arc<AtomicBool>,
    tasks: RefCell<Vec<Option<Task>>>,
    free_ids: RefCell<Vec<TaskId>>,
    steps: Cell<u64>,
}

/// A cloneable handle that protocol adapters (fabric, timers) use from inside
/// tasks: the clock, the event queue and the seeded RNG.
#[derive(Clone)]
pub struct SimHandle {
    inner: Rc<Inner>,
}

/// The simulation: owns the tasks and drives them and the event queue.
pub struct Sim {
    handle: SimHandle,
}

impl Sim {
    pub fn new(seed: u64) -> Self {
        let inner = Rc::new(Inner {
            now_ns: Cell::new(0),
            next_seq: Cell::new(0),
            events: RefCell::new(BinaryHeap::new()),
            rng: RefCell::new(Rng::new(seed)),
            ready: Arc::new(Mutex::new(VecDeque::new())),
            woken: Arc::new(AtomicBool::new(false)),
            tasks: RefCell::new(Vec::new()),
            free_ids: RefCell::new(Vec::new()),
            steps: Cell::new(0),
        });
        Sim {
            handle: SimHandle { inner },
        }
    }

    pub fn handle(&self) -> SimHandle {
        self.handle.clone()
    }

    pub fn now_ns(&self) -> u64 {
        self.handle.now_ns()
    }

    /// Spawn a task owned by `node`.
    pub fn spawn(&self, node: NodeTag, fut: impl Future<Output = ()> + 'static) -> TaskId {
        self.handle.spawn(node, fut)
    }

    /// Crash `node`: drop every task it owns at its current await point.
    /// Events it already scheduled (e.g. posted verbs) are *not* cancelled.
    pub fn crash(&self, node: NodeTag) -> usize {
        let mut dropped = Vec::new();
        {
            let mut tasks = self.handle.inner.tasks.borrow_mut();
            for (id, slot) in tasks.iter_mut().enumerate() {
                if slot.as_ref().map(|t| t.node == node).unwrap_or(false) {
                    dropped.push(slot.take().unwrap());
                    self.handle.inner.free_ids.borrow_mut().push(id);
                }
            }
        }
        let n = dropped.len();
        // Futures are dropped outside the borrow: their destructors may schedule.
        drop(dropped);
        n
    }

    /// Number of live tasks.
    pub fn live_tasks(&self) -> usize {
        self.handle
            .inner
            .tasks
            .borrow()
            .iter()
            .filter(|t| t.is_some())
            .count()
    }

    /// Number of live tasks owned by `node`.
    pub fn live_tasks_of(&self, node: NodeTag) -> usize {
        self.handle
            .inner
            .tasks
            .borrow()
            .iter()
            .filter(|t| t.as_ref().map(|t| t.node == node).unwrap_or(false))
            .count()
    }

    /// Poll every ready task until none is ready.
    fn drain_ready(&self) {
        if !self.handle.inner.woken.swap(false, AtomicOrdering::Acquire) {
            return;
        }
        loop {
            let next = self.handle.inner.ready.lock().unwrap().pop_front();
            let Some(id) = next else { return };
            let fut = {
                let mut tasks = self.handle.inner.tasks.borrow_mut();
                match tasks.get_mut(id).and_then(|t| t.as_mut()) {
                    Some(task) => task.future.take(),
                    None => None,
                }
            };
            let Some(mut fut) = fut else { continue };
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                ready: self.handle.inner.ready.clone(),
                woken: self.handle.inner.woken.clone(),
            }));
            let mut cx = Context::from_waker(&waker);
            self.handle
                .inner
                .steps
                .set(self.handle.inner.steps.get() + 1);
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(()) => {
                    let mut tasks = self.handle.inner.tasks.borrow_mut();
                    if tasks.get(id).map(|t| t.is_some()).unwrap_or(false) {
                        tasks[id] = None;
                        self.handle.inner.free_ids.borrow_mut().push(id);
                    }
                }
                Poll::Pending => {
                    let mut tasks = self.handle.inner.tasks.borrow_mut();
                    match tasks.get_mut(id).and_then(|t| t.as_mut()) {
                        Some(task) if task.future.is_none() => task.future = Some(fut),
                        // The task was crashed while it ran: drop it after the borrow.
                        _ => {
                            drop(tasks);
                            drop(fut);
                        }
                    }
                }
            }
        }
    }

    /// Run one event (after draining ready tasks). Returns false when idle.
    pub fn step(&self) -> bool {
        self.drain_ready();
        let ev = self.handle.inner.events.borrow_mut().pop();
        match ev {
            Some(ev) => {
                debug_assert!(ev.time_ns >= self.handle.inner.now_ns.get());
                self.handle.inner.now_ns.set(ev.time_ns);
                (ev.action)();
                self.drain_ready();
                true
            }
            None => false,
        }
    }

    /// Run until no task is ready and no event is pending.
    pub fn run(&self) {
        while self.step() {}
    }

    /// Run until simulated time reaches `deadline_ns` or the simulation idles.
    /// Returns true if it stopped because of the deadline.
    pub fn run_until(&self, deadline_ns: u64) -> bool {
        loop {
            self.drain_ready();
            let next = self.handle.inner.events.borrow().peek().map(|e| e.time_ns);
            match next {
                Some(t) if t <= deadline_ns => {
                    self.step();
                }
                Some(_) => {
                    self.handle.inner.now_ns.set(deadline_ns);
                    return true;
                }
                None => return false,
            }
        }
    }

    /// Run until `done()` holds, checking after every event; false if idle first.
    pub fn run_while(&self, mut keep_going: impl FnMut() -> bool) -> bool {
        loop {
            if !keep_going() {
                return true;
            }
            if !self.step() {
                return !keep_going();
            }
        }
    }

    /// Task polls so far (a measure of simulated work).
    pub fn steps(&self) -> u64 {
        self.handle.inner.steps.get()
    }
}

impl SimHandle {
    pub fn now_ns(&self) -> u64 {
        self.inner.now_ns.get()
    }

    pub fn spawn(&self, node: NodeTag, fut: impl Future<Output = ()> + 'static) -> TaskId {
        let task = Task {
            node,
            future: Some(Box::pin(fut)),
        };
        let id = {
            let mut tasks = self.inner.tasks.borrow_mut();
            match self.inner.free_ids.borrow_mut().pop() {
                Some(id) => {
                    tasks[id] = Some(task);
                    id
                }
                None => {
                    tasks.push(Some(task));
                    tasks.len() - 1
                }
            }
        };
        self.inner.ready.lock().unwrap().push_back(id);
        self.inner.woken.store(true, AtomicOrdering::Release);
        id
    }

    /// Schedule `action` to run at simulated time `time_ns` (not before now).
    pub fn schedule_at(&self, time_ns: u64, action: impl FnOnce() + 'static) {
        let seq = self.inner.next_seq.get();
        self.inner.next_seq.set(seq + 1);
        let time_ns = time_ns.max(self.now_ns());
        self.inner.events.borrow_mut().push(Event {
            time_ns,
            seq,
            action: Box::new(action),
        });
    }

    pub fn schedule_after(&self, delay_ns: u64, action: impl FnOnce() + 'static) {
        self.schedule_at(self.now_ns().saturating_add(delay_ns), action);
    }

    /// Draw from the simulation's seeded RNG.
    pub fn with_rng<R>(&self, f: impl FnOnce(&mut Rng) -> R) -> R {
        f(&mut self.inner.rng.borrow_mut())
    }

    /// A future that completes `delay_ns` of simulated time from now.
    pub fn sleep(&self, delay_ns: u64) -> Sleep {
        let (tx, rx) = crate::oneshot::oneshot();
        self.schedule_after(delay_ns, move || tx.send(()));
        Sleep { rx }
    }
}

pub struct Sleep {
    rx: crate::oneshot::OneshotReceiver<()>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.rx).poll(cx).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_run_in_time_order_and_tasks_sleep() {
        let sim = Sim::new(1);
        let log = Rc::new(RefCell::new(Vec::new()));
        for (node, d) in [(0u32, 30u64), (1, 10), (2, 20)] {
            let h = sim.handle();
            let log = log.clone();
            sim.spawn(node, async move {
                h.sleep(d).await;
                log.borrow_mut().push((node, h.now_ns()));
            });
        }
        sim.run();
        assert_eq!(*log.borrow(), vec![(1, 10), (2, 20), (0, 30)]);
        assert_eq!(sim.live_tasks(), 0);
    }

    #[test]
    fn crash_drops_tasks_but_keeps_their_scheduled_events() {
        let sim = Sim::new(1);
        let fired = Rc::new(Cell::new(false));
        let after_sleep = Rc::new(Cell::new(false));
        let h = sim.handle();
        let (f, a) = (fired.clone(), after_sleep.clone());
        sim.spawn(7, async move {
            h.schedule_after(100, move || f.set(true));
            h.sleep(50).await;
            a.set(true);
        });
        sim.run_until(10);
        assert_eq!(sim.crash(7), 1);
        sim.run();
        assert!(fired.get(), "an event posted before the crash still fires");
        assert!(!after_sleep.get(), "the crashed task never resumes");
    }

    #[test]
    fn same_seed_replays_identically() {
        fn trace(seed: u64) -> Vec<u64> {
            let sim = Sim::new(seed);
            let out = Rc::new(RefCell::new(Vec::new()));
            for n in 0..4 {
                let h = sim.handle();
                let out = out.clone();
                sim.spawn(n, async move {
                    for _ in 0..5 {
                        let d = h.with_rng(|r| r.below(100));
                        h.sleep(d).await;
                        out.borrow_mut().push(h.now_ns() * 10 + n as u64);
                    }
                });
            }
            sim.run();
            let v = out.borrow().clone();
            v
        }
        assert_eq!(trace(42), trace(42));
        assert_ne!(trace(42), trace(43));
    }
}
