//! A slow recovery coordinator (docs/DESIGN.md §5): it is delayed so that
//! live coordinators meet the failed node's locks while recovery is still
//! under way. Every doorbell of the wrapped
//! fabric waits `delay_ns` of simulated time before it is posted, so each
//! step of log recovery (read logs, read locks and versions, restore,
//! unlock, invalidate) takes that much longer, while live coordinators run.
//! Doorbells are posted when first polled; with one delay for all, a queue
//! pair keeps its posting order.

use std::future::Future;
use std::pin::Pin;

use tandem_fabric::{ComputeNodeId, Fabric, MemNodeId, QueuePair};
use tandem_sim::SimHandle;

#[derive(Clone)]
pub struct SlowFabric<F: Fabric> {
    inner: F,
    sim: SimHandle,
    delay_ns: u64,
}

impl<F: Fabric> SlowFabric<F> {
    pub fn new(inner: F, sim: SimHandle, delay_ns: u64) -> Self {
        SlowFabric {
            inner,
            sim,
            delay_ns,
        }
    }
}

#[derive(Clone)]
pub struct SlowQp<Q: QueuePair> {
    inner: Q,
    sim: SimHandle,
    delay_ns: u64,
}

impl<F: Fabric> Fabric for SlowFabric<F> {
    type Qp = SlowQp<F::Qp>;
    fn queue_pair(&self, mem: MemNodeId) -> Self::Qp {
        SlowQp {
            inner: self.inner.queue_pair(mem),
            sim: self.sim.clone(),
            delay_ns: self.delay_ns,
        }
    }
    fn memory_nodes(&self) -> usize {
        self.inner.memory_nodes()
    }
    fn compute_node(&self) -> ComputeNodeId {
        self.inner.compute_node()
    }
}

impl<Q: QueuePair> QueuePair for SlowQp<Q> {
    type Pending = Pin<Box<dyn Future<Output = tandem_fabric::Completions>>>;
    fn post(&self, batch: tandem_fabric::Batch) -> Self::Pending {
        let (qp, sleep) = (self.inner.clone(), self.sim.sleep(self.delay_ns));
        Box::pin(async move {
            sleep.await;
            qp.post(batch).await
        })
    }
    fn memory_node(&self) -> MemNodeId {
        self.inner.memory_node()
    }
}
