//! The in-process backend without simulated time: every verb executes on the
//! posting thread at post time, against shared [`MemoryNode`]s. Many threads
//! may share the memory nodes, so reads can tear for real. Used by the demo and
//! to measure pure protocol cost (docs/DESIGN.md §3, "Backends": the sim
//! backend's memory with its delays and faults off).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::memory::{Fenced, MemoryNode, RegionKey};
use crate::verb::{Batch, Completions, ComputeNodeId, MemNodeId, VerbArena};
use crate::{Fabric, QueuePair};

/// The memory nodes of an in-process cluster.
#[derive(Clone)]
pub struct InlineCluster {
    nodes: Arc<Vec<Arc<MemoryNode>>>,
    yield_per_batch: bool,
}

impl InlineCluster {
    pub fn new(nodes: Vec<Arc<MemoryNode>>) -> Self {
        InlineCluster {
            nodes: Arc::new(nodes),
            yield_per_batch: false,
        }
    }

    /// Make every batch's completion yield to the executor once, so tasks
    /// interleave at every verb boundary (and a crash can land mid-transaction)
    /// although verbs still execute at post time.
    pub fn yielding(mut self, on: bool) -> Self {
        self.yield_per_batch = on;
        self
    }

    /// `_seed` once salted region keys, which now come from the OS.
    pub fn with_nodes(count: usize, size_bytes: u64, _seed: u64) -> Self {
        Self::new(
            (0..count)
                .map(|_| Arc::new(MemoryNode::new(size_bytes)))
                .collect(),
        )
    }

    pub fn nodes(&self) -> &[Arc<MemoryNode>] {
        &self.nodes
    }

    /// Register `compute` on every memory node and hand out its fabric handle.
    /// A revoked incarnation is refused ([`Fenced`]) on every node.
    pub fn join(&self, compute: ComputeNodeId) -> Result<InlineFabric, Fenced> {
        let keys = self
            .nodes
            .iter()
            .map(|n| n.register(compute))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(InlineFabric {
            nodes: self.nodes.clone(),
            compute,
            keys: Arc::new(keys),
            yield_per_batch: self.yield_per_batch,
        })
    }

    /// Active-link termination of `compute` on every memory node.
    pub fn revoke(&self, compute: ComputeNodeId) {
        for n in self.nodes.iter() {
            n.revoke(compute);
        }
    }
}

#[derive(Clone)]
pub struct InlineFabric {
    nodes: Arc<Vec<Arc<MemoryNode>>>,
    compute: ComputeNodeId,
    keys: Arc<Vec<RegionKey>>,
    yield_per_batch: bool,
}

#[derive(Clone)]
pub struct InlineQp {
    node: Arc<MemoryNode>,
    mem: MemNodeId,
    compute: ComputeNodeId,
    key: RegionKey,
    yield_per_batch: bool,
}

impl Fabric for InlineFabric {
    type Qp = InlineQp;
    fn queue_pair(&self, mem: MemNodeId) -> InlineQp {
        InlineQp {
            node: self.nodes[mem as usize].clone(),
            mem,
            compute: self.compute,
            key: self.keys[mem as usize],
            yield_per_batch: self.yield_per_batch,
        }
    }
    fn memory_nodes(&self) -> usize {
        self.nodes.len()
    }
    fn compute_node(&self) -> ComputeNodeId {
        self.compute
    }
    fn executes_at_post(&self) -> bool {
        true
    }
}

impl QueuePair for InlineQp {
    type Pending = InlinePending;
    fn post(&self, batch: Batch) -> Self::Pending {
        let mut done = Completions::with_capacity(batch.len());
        self.node
            .execute_batch(self.compute, self.key, &batch, |c| done.push(c));
        InlinePending {
            done: Some(done),
            yield_first: self.yield_per_batch,
        }
    }
    fn post_in(&self, batch: Batch, arena: &mut VerbArena) -> Self::Pending {
        let mut done = arena.completions();
        let verbs = &batch;
        (self.node).execute_batch_with(
            self.compute,
            self.key,
            verbs,
            |n| arena.zeroed(n),
            |c| done.push(c),
        );
        arena.give_batch(batch);
        InlinePending {
            done: Some(done),
            yield_first: self.yield_per_batch,
        }
    }
    fn memory_node(&self) -> MemNodeId {
        self.mem
    }
}

/// Completions of a batch that already executed; optionally yields once first.
pub struct InlinePending {
    done: Option<Completions>,
    yield_first: bool,
}

impl Future for InlinePending {
    type Output = Completions;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completions> {
        if self.yield_first {
            self.yield_first = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.done.take().expect("polled after completion"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VerbError;
    use crate::{batch, Verb};

    #[test]
    fn a_revoked_incarnation_cannot_register_again() {
        let c = InlineCluster::with_nodes(3, 64, 1);
        c.revoke(2);
        assert!(
            matches!(c.join(2), Err(Fenced(2))),
            "revoked before it registered"
        );
        let f = c.join(3).unwrap();
        let qp = f.queue_pair(1);
        c.revoke(3);
        assert!(
            matches!(c.join(3), Err(Fenced(3))),
            "revoked after it registered"
        );
        let done = ready_now(qp.post(batch![Verb::write_u64(0, 1)]));
        assert_eq!(done.as_slice(), [Err(VerbError::Revoked)]);
        assert_eq!(c.nodes()[1].load_u64(0), 0);
    }

    /// The inline fabric's futures are ready at once (without yielding).
    fn ready_now<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let waker = std::task::Waker::noop();
        match f.as_mut().poll(&mut Context::from_waker(waker)) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("inline verbs complete at once"),
        }
    }
}
