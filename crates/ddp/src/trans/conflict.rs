//! Conflict detection and squashes for Transactional consistency (the
//! rules are in `trans/mod.rs`'s module doc): wound-wait against unprepared
//! transactions, waits (operations) or wait-die (ENDX) against prepared
//! ones, and the validation of a transaction's reads and writes at ENDX.

use tandem_net::Command;

use crate::node::{DdpNode, Out};
use crate::trans::state::Access;
use crate::trans::state::Squash;
use crate::types::{Key, Msg, Ts, TxAck, TxHdr, TxId, Version, Vote};

impl DdpNode {
    /// The other unfinished transactions here that conflict with `id`
    /// reading (`write` false) or writing `key`: those that wrote it, and
    /// for a write those that read it.
    fn holders(&self, id: TxId, key: Key, write: bool) -> Vec<(TxHdr, bool)> {
        let hit = |h: &crate::trans::state::TxHere| {
            h.writes.contains_key(&key) || (write && h.reads.contains_key(&key))
        };
        self.trans
            .here
            .values()
            .filter(|h| h.hdr.id != id && hit(h))
            .map(|h| (h.hdr, h.prepared))
            .collect()
    }

    /// Conflict detection for `id`'s access to `key` here (wound-wait).
    /// An operation (`op`: a client's read or write, an INV) waits for a
    /// prepared holder or an older unprepared one, and wounds (squashes) a
    /// younger unprepared one. An ENDX never waits for an unprepared
    /// holder: the younger of the two is squashed; and it waits for an
    /// older prepared holder, while a younger one squashes it (wait-die).
    /// Waits thus run from younger to older unprepared transactions and
    /// from older to younger prepared ones, never from a prepared one to
    /// an unprepared one: no cycle, no deadlock.
    pub(crate) fn access(
        &mut self,
        id: TxId,
        key: Key,
        write: bool,
        op: bool,
        out: &mut Out,
    ) -> Access {
        if self.bugs.skip_conflict_check {
            return Access::Go;
        }
        let me = self.trans.here[&id].hdr;
        for (other, prepared) in self.holders(id, key, write) {
            let older = me.older_than(&other);
            if other.id.session == id.session {
                self.trans.stats.same_session += 1;
            }
            match (prepared, op, older) {
                (true, true, _) | (true, false, true) | (false, true, false) => {
                    return Access::Wait
                }
                (false, _, true) => {
                    self.count_squash(Squash::Wounded);
                    self.refuse(other.id, out);
                }
                (true, false, false) | (false, false, false) => {
                    self.count_squash(Squash::Died);
                    self.refuse(id, out);
                    return Access::Squashed;
                }
            }
        }
        Access::Go
    }

    /// This node squashes `id`: it drops the transaction's writes here and
    /// will vote `Refused`; the coordinator learns it (or is this node, and
    /// aborts it).
    pub(crate) fn refuse(&mut self, id: TxId, out: &mut Out) {
        let Some(h) = self.trans.here.remove(&id) else {
            return;
        };
        self.learn(id, None);
        match self.trans.coord.get(&id) {
            Some(c) if !c.settling => self.decide(id, false, out),
            _ => {
                let msg = Msg::TxAck {
                    tx: id,
                    ack: TxAck::Vote(Vote::Refused),
                    epoch: self.config.epoch,
                };
                out.push(Command::Send {
                    to: h.hdr.coord,
                    msg,
                });
            }
        }
    }

    /// ENDX at a member: validate `id`'s reads and writes against what is
    /// installed here, then detect conflicts with every one of them.
    pub(crate) fn prepare_check(
        &mut self,
        id: TxId,
        writes: &[Version],
        reads: &[(Key, Ts)],
        out: &mut Out,
    ) -> Access {
        let stale_write = writes.iter().any(|v| self.installed(v.key).0 >= v.ts);
        let stale_read = reads.iter().any(|&(k, ts)| self.installed(k).0 > ts);
        if (stale_write || stale_read) && !self.bugs.skip_conflict_check {
            self.count_squash(Squash::StaleEnd);
            self.refuse(id, out);
            return Access::Squashed;
        }
        let keys = writes
            .iter()
            .map(|v| (v.key, true))
            .chain(reads.iter().map(|&(k, _)| (k, false)));
        for (key, write) in keys.collect::<Vec<_>>() {
            match self.access(id, key, write, false, out) {
                Access::Go => {}
                other => return other,
            }
        }
        Access::Go
    }
}
