//! A fabric wrapper that lets the harness crash a compute node right after
//! one of its doorbells, with that batch of verbs in flight (DESIGN.md §5:
//! "drop a compute node at a verb boundary"; `pandora.txt` §5 "we randomly
//! inject crashes after any operation"). It only counts posts: the store
//! behind it is untouched, and the simulator still decides when each verb
//! executes, so a crash here races revocation against the verbs in flight.

use std::cell::Cell;
use std::rc::Rc;

use tandem_fabric::{ComputeNodeId, Fabric, MemNodeId, QueuePair, Verb};

/// Shared between the wrapped fabric and the harness.
#[derive(Clone, Default)]
pub struct Tripwire {
    armed: Rc<Cell<bool>>,
    tripped: Rc<Cell<bool>>,
}

impl Tripwire {
    /// Trip on the next post.
    pub fn arm(&self) {
        self.armed.set(true);
    }
    pub fn tripped(&self) -> bool {
        self.tripped.get()
    }
    fn posted(&self) {
        if self.armed.get() {
            self.armed.set(false);
            self.tripped.set(true);
        }
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
        TripwireQp { inner: self.inner.queue_pair(mem), wire: self.wire.clone() }
    }
    fn memory_nodes(&self) -> usize {
        self.inner.memory_nodes()
    }
    fn compute_node(&self) -> ComputeNodeId {
        self.inner.compute_node()
    }
}

impl<Q: QueuePair> QueuePair for TripwireQp<Q> {
    type Pending = Q::Pending;
    fn post(&self, batch: Vec<Verb>) -> Q::Pending {
        let p = self.inner.post(batch);
        self.wire.posted();
        p
    }
    fn memory_node(&self) -> MemNodeId {
        self.inner.memory_node()
    }
}
