//! A round of log recovery: every post of the round gathered into one
//! doorbell batch per memory node (a post's verbs stay together, in posting
//! order), all posted at once, awaited together. Batches, completions and
//! read buffers come from the recovery coordinator's [`VerbArena`] and go
//! back to it, so a warm recovery allocates per record, not per verb.

use tandem_fabric::{Batch, Completions, MemNodeId, Verb, VerbArena, VerbOutput};

/// The posts of one round, by memory node.
pub(super) struct Round {
    batches: Vec<Batch>,
    /// Per post: its node, and where its verbs start in that node's batch.
    posts: Vec<(MemNodeId, u32)>,
}

impl Round {
    pub(super) fn new(arena: &mut VerbArena, nodes: usize) -> Round {
        Round {
            batches: (0..nodes).map(|_| arena.batch()).collect(),
            posts: Vec::new(),
        }
    }

    /// Add a post of `verbs` to node `n`; its index in the round.
    pub(super) fn post<const N: usize>(&mut self, n: MemNodeId, verbs: [Verb; N]) -> usize {
        let b = &mut self.batches[n as usize];
        self.posts.push((n, b.len() as u32));
        b.extend(verbs);
        self.posts.len() - 1
    }

    pub(super) fn is_empty(&self) -> bool {
        self.posts.is_empty()
    }

    /// The batches (one per node, some empty) and the posts' places.
    pub(super) fn into_parts(self) -> (Vec<Batch>, Vec<(MemNodeId, u32)>) {
        (self.batches, self.posts)
    }
}

/// A round's completions, by memory node, and where each post's are.
pub(super) struct Done {
    pub(super) by_node: Vec<Completions>,
    pub(super) posts: Vec<(MemNodeId, u32)>,
}

impl Done {
    /// The bytes read by post `p`'s first verb, a read. A round whose verbs
    /// failed is never handed out, so every completion here succeeded.
    pub(super) fn bytes(&self, p: usize) -> &[u8] {
        let (n, start) = self.posts[p];
        match &self.by_node[n as usize][start as usize] {
            Ok(VerbOutput::Read(b)) => b,
            other => panic!("post {p} of a round: expected a read, got {other:?}"),
        }
    }

    /// The node post `p` went to.
    pub(super) fn node(&self, p: usize) -> MemNodeId {
        self.posts[p].0
    }

    pub(super) fn recycle(self, arena: &mut VerbArena) {
        for c in self.by_node {
            arena.give(c);
        }
    }
}
