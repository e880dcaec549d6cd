//! Counters of Transactional consistency (`trans.rs`): what a node's
//! transactions cost and why they were squashed. Tests and the simulator
//! read them with [`DdpNode::trans_stats`]; a `tandem node` process writes
//! them every second to `$TANDEM_DDP_STATS/node<id>.stats` when that
//! variable names a directory (a debugging aid for `ddp bench --net tcp`).

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
        Msg::ScopePersist { .. } | Msg::ScopeAck { .. } => "scope",
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

    /// Every second, when `TANDEM_DDP_STATS` names a directory: write the
    /// counters there (one file per node, overwritten).
    pub(crate) fn dump_stats(&mut self) {
        if self.now < self.trans.last_dump + 1_000_000_000 {
            return;
        }
        self.trans.last_dump = self.now;
        let Some(dir) = std::env::var_os("TANDEM_DDP_STATS") else { return };
        let path = std::path::Path::new(&dir).join(format!("node{}.stats", self.me));
        let s = &self.trans.stats;
        let held = (self.trans.here.len(), self.trans.outcomes.len(), self.trans.refused.len());
        let mut coord: Vec<_> = self.trans.coord.values().map(|c| (c.hdr.born, c.hdr.id, c.phase, c.client, self.now - c.sent_at)).collect();
        coord.sort_by_key(|c| (c.0, c.1));
        coord.truncate(5);
        let waiting: Vec<_> = self.trans.waiting.iter().take(5).collect();
        let _ = std::fs::write(path, format!("{s:?}\nheld (here, outcomes, refused): {held:?} clock {}\noldest coord: {coord:?}\nwaiting: {waiting:?}\npostponed {}\n", self.trans.clock, self.trans.postponed.len()));
    }
}

impl DdpNode {
    /// Transactions and decisions this node holds (bounded on a long run).
    pub fn trans_memory(&self) -> usize {
        let t = &self.trans;
        t.coord.len() + t.here.len() + t.outcomes.len() + t.refused.len() + t.learnt.len() + t.deliveries.len()
    }
}
