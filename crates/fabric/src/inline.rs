//! The in-process backend without simulated time: every verb executes on the
//! posting thread at post time, against shared [`MemoryNode`]s. Many threads
//! may share the memory nodes, so reads can tear for real. Used by the demo and
//! to measure pure protocol cost (DESIGN.md §3, "sim ... the default for the
//! single-process demo"; delays and faults off).

use std::future::{ready, Ready};
use std::sync::Arc;

use crate::memory::{MemoryNode, RegionKey};
use crate::verb::{Completion, ComputeNodeId, MemNodeId, Verb};
use crate::{Fabric, QueuePair};

/// The memory nodes of an in-process cluster.
#[derive(Clone)]
pub struct InlineCluster {
    nodes: Arc<Vec<Arc<MemoryNode>>>,
}

impl InlineCluster {
    pub fn new(nodes: Vec<Arc<MemoryNode>>) -> Self {
        InlineCluster { nodes: Arc::new(nodes) }
    }

    pub fn with_nodes(count: usize, size_bytes: u64, seed: u64) -> Self {
        Self::new((0..count).map(|i| Arc::new(MemoryNode::new(size_bytes, seed ^ (i as u64) << 32))).collect())
    }

    pub fn nodes(&self) -> &[Arc<MemoryNode>] {
        &self.nodes
    }

    /// Register `compute` on every memory node and hand out its fabric handle.
    pub fn join(&self, compute: ComputeNodeId) -> InlineFabric {
        let keys = self.nodes.iter().map(|n| n.register(compute)).collect();
        InlineFabric { nodes: self.nodes.clone(), compute, keys: Arc::new(keys) }
    }
}

#[derive(Clone)]
pub struct InlineFabric {
    nodes: Arc<Vec<Arc<MemoryNode>>>,
    compute: ComputeNodeId,
    keys: Arc<Vec<RegionKey>>,
}

#[derive(Clone)]
pub struct InlineQp {
    node: Arc<MemoryNode>,
    mem: MemNodeId,
    compute: ComputeNodeId,
    key: RegionKey,
}

impl Fabric for InlineFabric {
    type Qp = InlineQp;
    fn queue_pair(&self, mem: MemNodeId) -> InlineQp {
        InlineQp { node: self.nodes[mem as usize].clone(), mem, compute: self.compute, key: self.keys[mem as usize] }
    }
    fn memory_nodes(&self) -> usize {
        self.nodes.len()
    }
    fn compute_node(&self) -> ComputeNodeId {
        self.compute
    }
}

impl QueuePair for InlineQp {
    type Pending = Ready<Vec<Completion>>;
    fn post(&self, batch: Vec<Verb>) -> Self::Pending {
        ready(batch.iter().map(|v| self.node.execute(self.compute, self.key, v)).collect())
    }
    fn memory_node(&self) -> MemNodeId {
        self.mem
    }
}
