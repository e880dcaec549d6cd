//! A fabric wrapper that lets the harness crash a node at a chosen verb
//! boundary (docs/DESIGN.md §5, crash injection; the Pandora paper §5: "we
//! randomly inject crashes after any operation").
//!
//! Armed with a [`Window`], the wire trips at the first doorbell of that
//! [`Shape`]: after posting it (the batch is in flight), or instead of it
//! (`BeforeUnlock`). From then on the node is dead: later doorbells, even
//! those its task posts in the same step, are swallowed and never complete.
//! So a crash "between the replica writes of one commit" really leaves the
//! other replicas unwritten. The wire looks only at verb shapes; the store
//! behind it is untouched, and the simulator still decides when each posted
//! verb executes, so a crash here races revocation against verbs in flight.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tandem_fabric::{ComputeNodeId, Fabric, MemNodeId, QueuePair, Verb};
use tandem_sim::Rng;

/// What a doorbell batch looks like, from its verbs alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Contents then version of one replica of one object: a commit write,
    /// or a recovery restore.
    ReplicaWrite,
    /// A lock CAS and the read behind it.
    Lock,
    /// A lock release (CAS to 0, or a plain 8-byte write of 0).
    Unlock,
    /// One record to a log (pandora's log record, an undo entry, a lock log).
    Log,
    Other,
}

impl Shape {
    pub fn of(batch: &[Verb]) -> Shape {
        match batch {
            [Verb::Write { data: body, .. }, Verb::Write { data: version, .. }]
                if body.len() > 8 && version.len() == 8 =>
            {
                Shape::ReplicaWrite
            }
            [Verb::Cas { new, .. }, Verb::Read { .. }] if *new != 0 => Shape::Lock,
            [Verb::Cas { new: 0, .. }] => Shape::Unlock,
            [Verb::Write { data, .. }] if data.len() == 8 && data.iter().all(|&b| b == 0) => {
                Shape::Unlock
            }
            [Verb::Write { data, .. }] if data.len() > 8 => Shape::Log,
            _ => Shape::Other,
        }
    }
}

/// Where a crash lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// After any doorbell (uniform over verbs).
    AnyVerb,
    /// After one replica write of a commit or restore, before the next (each
    /// such doorbell trips with probability 1/2, so later gaps are reached too).
    BetweenReplicaWrites,
    /// Instead of a lock release: every lock still held, every write posted.
    BeforeUnlock,
    /// After a log or undo record, before what it announces.
    AfterLog,
    /// After a lock CAS, before anything it protects (undo entries included).
    AfterLock,
    /// Instead of the first doorbell of the n-th round since arming (a round:
    /// the doorbells posted at one instant, e.g. one step of log recovery),
    /// so every earlier step has completed and none of this one began.
    BeforeRound(u32),
}

impl Window {
    /// Whether a doorbell of `shape` trips the wire; `round` starts at 1 and
    /// `new_round` says whether the doorbell opens it.
    fn trips(self, shape: Shape, round: u32, new_round: bool, rng: &mut Rng) -> bool {
        match self {
            Window::AnyVerb => true,
            Window::BetweenReplicaWrites => shape == Shape::ReplicaWrite && rng.chance(0.5),
            Window::BeforeUnlock => shape == Shape::Unlock,
            Window::AfterLog => shape == Shape::Log,
            Window::AfterLock => shape == Shape::Lock,
            Window::BeforeRound(k) => new_round && round == k,
        }
    }

    fn before(self) -> bool {
        matches!(self, Window::BeforeUnlock | Window::BeforeRound(_))
    }
}

struct State {
    armed: Option<(Window, Rng)>,
    clock: Rc<dyn Fn() -> u64>,
    /// Rounds since arming, and when the last doorbell was posted.
    rounds: u32,
    last_post_ns: Option<u64>,
    tripped: Cell<bool>,
}

/// Shared between the wrapped fabric and the harness.
#[derive(Clone)]
pub struct Tripwire(Rc<RefCell<State>>);

impl Tripwire {
    /// A wire that tells rounds apart by `clock` (the simulator's).
    pub fn new(clock: Rc<dyn Fn() -> u64>) -> Tripwire {
        Tripwire(Rc::new(RefCell::new(State {
            armed: None,
            clock,
            rounds: 0,
            last_post_ns: None,
            tripped: Cell::new(false),
        })))
    }

    /// Trip at the next doorbell in `window` (draws from `seed`).
    pub fn arm(&self, window: Window, seed: u64) {
        let mut s = self.0.borrow_mut();
        s.armed = Some((window, Rng::new(seed)));
        s.rounds = 0;
        s.last_post_ns = None;
    }
    pub fn disarm(&self) {
        self.0.borrow_mut().armed = None;
    }
    pub fn tripped(&self) -> bool {
        self.0.borrow().tripped.get()
    }
    /// Whether `batch` may be posted (the node is alive when it posts).
    fn before_post(&self, batch: &[Verb]) -> bool {
        let mut s = self.0.borrow_mut();
        if s.tripped.get() {
            return false;
        }
        let shape = Shape::of(batch);
        let now = (s.clock)();
        let new_round = s.last_post_ns != Some(now);
        s.last_post_ns = Some(now);
        s.rounds += new_round as u32;
        let round = s.rounds;
        let Some((window, rng)) = s.armed.as_mut() else {
            return true;
        };
        if window.trips(shape, round, new_round, rng) {
            let before = window.before();
            s.armed = None;
            s.tripped.set(true);
            return !before;
        }
        true
    }
}

#[derive(Clone)]
pub struct TripwireFabric<F: Fabric> {
    inner: F,
    wire: Tripwire,
}

impl<F: Fabric> TripwireFabric<F> {
    pub fn new(inner: F, wire: Tripwire) -> Self {
        TripwireFabric { inner, wire }
    }
}

#[derive(Clone)]
pub struct TripwireQp<Q: QueuePair> {
    inner: Q,
    wire: Tripwire,
}

impl<F: Fabric> Fabric for TripwireFabric<F> {
    type Qp = TripwireQp<F::Qp>;
    fn queue_pair(&self, mem: MemNodeId) -> Self::Qp {
        TripwireQp {
            inner: self.inner.queue_pair(mem),
            wire: self.wire.clone(),
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

/// A posted batch, or one a dead node never posted (it never completes).
pub enum TripwirePending<P> {
    Posted(Pin<Box<P>>),
    Swallowed,
}

impl<P: Future<Output = tandem_fabric::Completions>> Future for TripwirePending<P> {
    type Output = tandem_fabric::Completions;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<tandem_fabric::Completions> {
        match self.get_mut() {
            TripwirePending::Posted(p) => p.as_mut().poll(cx),
            TripwirePending::Swallowed => Poll::Pending,
        }
    }
}

impl<Q: QueuePair> QueuePair for TripwireQp<Q> {
    type Pending = TripwirePending<Q::Pending>;
    fn post(&self, batch: tandem_fabric::Batch) -> Self::Pending {
        if self.wire.before_post(&batch) {
            TripwirePending::Posted(Box::pin(self.inner.post(batch)))
        } else {
            TripwirePending::Swallowed
        }
    }
    fn memory_node(&self) -> MemNodeId {
        self.inner.memory_node()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_follow_the_verbs() {
        assert_eq!(
            Shape::of(&[Verb::write(8, vec![1; 40]), Verb::write_u64(16, 5)]),
            Shape::ReplicaWrite
        );
        assert_eq!(
            Shape::of(&[Verb::cas(0, 0, 9), Verb::read(0, 64)]),
            Shape::Lock
        );
        assert_eq!(Shape::of(&[Verb::cas(0, 9, 0)]), Shape::Unlock);
        assert_eq!(Shape::of(&[Verb::write_u64(0, 0)]), Shape::Unlock);
        assert_eq!(Shape::of(&[Verb::write(0, vec![1; 100])]), Shape::Log);
        assert_eq!(Shape::of(&[Verb::read(0, 16)]), Shape::Other);
    }

    fn wire() -> (Tripwire, Rc<Cell<u64>>) {
        let t = Rc::new(Cell::new(0));
        let c = t.clone();
        (Tripwire::new(Rc::new(move || c.get())), t)
    }

    #[test]
    fn a_tripped_wire_swallows_every_later_doorbell() {
        let (w, _) = wire();
        assert!(w.before_post(&[Verb::cas(0, 9, 0)]));
        w.arm(Window::BeforeUnlock, 1);
        assert!(w.before_post(&[Verb::read(0, 8)]) && !w.tripped());
        assert!(!w.before_post(&[Verb::cas(0, 9, 0)]) && w.tripped());
        assert!(!w.before_post(&[Verb::read(0, 8)]));
        let (w, _) = wire();
        w.arm(Window::AfterLog, 1);
        assert!(w.before_post(&[Verb::write(0, vec![1; 100])]) && w.tripped());
        // Rounds are the doorbells of one instant.
        let (w, t) = wire();
        w.arm(Window::BeforeRound(2), 1);
        assert!(
            w.before_post(&[Verb::read(0, 8)])
                && w.before_post(&[Verb::read(8, 8)])
                && !w.tripped()
        );
        t.set(5);
        assert!(!w.before_post(&[Verb::read(0, 8)]) && w.tripped());
    }
}
