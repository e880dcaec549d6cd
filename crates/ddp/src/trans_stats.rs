//! Counters of Transactional consistency (`trans.rs`): what a node's
//! transactions cost and why they were squashed. Tests and the simulator
//! read them with [`DdpNode::trans_stats`] (the protocol does no I/O of
//! its own: counters leave a node only through whoever runs it).

use std::collections::BTreeMap;

use tandem_net::Command;

use crate::node::{DdpNode, Out};
use crate::types::Msg;

/// Why a transaction was squashed (counted where it happened).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Squash {
    /// An older transaction's access wounded it (wound-wait).
    Wounded,
    /// At ENDX it met a younger prepared transaction (wait-die), or an
    /// unprepared older one.
    Died,
    /// Its INV brought a version no newer than the installed one.
    StaleInv,
    /// ENDX validation: a key it read or writes changed since.
    StaleEnd,
    /// Its session began another transaction, or went quiet (idle timeout).
    Left,
    Idle,
    /// A member heard nothing about it (unprepared) for long.
    Silent,
    /// Its coordinator left the configuration before it prepared.
    Orphan,
}

/// A node's counters for Transactional consistency.
#[derive(Clone, Debug, Default)]
pub struct TransStats {
    pub begun: u64,
    pub committed: u64,
    pub aborted: u64,
    pub squashes: BTreeMap<Squash, u64>,
    /// Client operations that waited (at least once), ENDX votes postponed.
    pub op_waits: u64,
    pub end_waits: u64,
    /// Messages re-sent by the retransmission timer.
    pub resent: u64,
    /// Protocol messages sent, by kind (a broadcast counts once per peer).
    pub sent: BTreeMap<&'static str, u64>,
    /// Decided transactions forgotten (garbage-collected).
    pub forgotten: u64,
    /// Conflicts met with a transaction of the same session.
    pub same_session: u64,
}

impl TransStats {
    pub fn squashed(&self) -> u64 {
        self.squashes.values().sum()
    }
}

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
