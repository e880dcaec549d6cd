//! Counters of Transactional consistency (`trans/mod.rs`): what a node's
//! transactions cost and why they were squashed. Tests and the simulator
//! read them with [`DdpNode::trans_stats`] (the protocol does no I/O of
//! its own: counters leave a node only through whoever runs it).

use crate::node::{DdpNode, Out};
use crate::trans::state::Squash;
use crate::trans::state::TransStats;
use crate::types::Msg;
use tandem_net::Command;

fn kind(m: &Msg) -> &'static str {
    match m {
        Msg::InitX { .. } => "initx",
        Msg::TxInv { .. } => "txinv",
        Msg::EndX { .. } => "endx",
        Msg::TxAck { .. } => "txack",
        Msg::TxOutcome { .. } => "outcome",
        Msg::TxValP { .. } => "valp",
        Msg::ScopePersist { .. } | Msg::ScopeAck { .. } | Msg::ScopeVal { .. } => "scope",
        _ => "other",
    }
}

impl DdpNode {
    pub fn trans_stats(&self) -> &TransStats {
        &self.trans.stats
    }

    pub(crate) fn count_squash(&mut self, why: Squash) {
        *self.trans.stats.squashes.entry(why).or_default() += 1;
    }

    /// Count the messages of `out` from index `from` on.
    pub(crate) fn count_sent(&mut self, out: &Out, from: usize) {
        let peers = self.config.members.len().saturating_sub(1) as u64;
        for c in &out[from..] {
            let (m, n) = match c {
                Command::Send { msg, .. } => (msg, 1),
                Command::Broadcast { msg } => (msg, peers),
                _ => continue,
            };
            *self.trans.stats.sent.entry(kind(m)).or_default() += n;
        }
    }
}

impl DdpNode {
    /// Transactions and decisions this node holds (bounded on a long run).
    pub fn trans_memory(&self) -> usize {
        let t = &self.trans;
        t.coord.len()
            + t.here.len()
            + t.outcomes.len()
            + t.refused.len()
            + t.learnt.len()
            + t.deliveries.len()
    }
}
