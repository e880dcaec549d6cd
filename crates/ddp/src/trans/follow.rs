//! The member side of a transaction (`trans/mod.rs`): INITX, INV, ENDX and its
//! vote; retransmissions; and what a new configuration does: votes and
//! deliveries start over, and the transactions of a coordinator that left
//! are settled by the members that prepared them (or refused by those that
//! had not).

use std::collections::BTreeSet;

use tandem_net::{Command, NodeId};

use crate::node::{DdpNode, Out, Then};
use crate::trans::state::{Access, CoordTx, EndReq, Phase};
use crate::trans::state::{Squash, NOT_MEMBER};
use crate::types::{Key, Msg, Record, Reply, Ts, TxAck, TxHdr, TxId, TxPhase, Version, Vote};

impl DdpNode {
    /// The decision or refusal this node knows for `id`, as a vote.
    fn known_vote(&self, id: TxId) -> Option<Vote> {
        match self.trans.outcomes.get(&id) {
            Some(true) => Some(Vote::Committed),
            Some(false) => Some(Vote::Aborted),
            None => self.trans.refused.contains(&id).then_some(Vote::Refused),
        }
    }

    /// Whether this node can vouch that `hdr`'s coordinator never had its
    /// Prepared vote: only if it has been a member, its state intact, since
    /// the transaction began. The coordinator decides with the votes of
    /// every member of its epoch, so such a node's vote was needed in
    /// whichever epoch it decided. A node added (or restarted) since may
    /// have missed an epoch in which the coordinator committed without it:
    /// its refusal would tell a settler nothing, and a settler that took it
    /// aborted what the coordinator had committed (T-5 under `--crash
    /// flip`; mutant `undecisive-refusal`).
    ///
    /// Strict and Synch only. Under the other models a coordinator's commit
    /// lives in its memory until the lazy persist, so one that restarted
    /// cannot say whether it committed, and a restarted member that cannot
    /// vouch could keep a settler waiting for good: there the old rule
    /// stands, and with it the T-5 above (docs/DDP.md).
    pub(crate) fn decisive(&self, hdr: &TxHdr) -> bool {
        self.trans.since <= hdr.epoch || self.bugs.undecisive_refusal || !self.trans_rules().durable
    }

    fn tx_ack(&self, to: NodeId, id: TxId, ack: TxAck, epoch: u64, out: &mut Out) {
        out.push(Command::Send {
            to,
            msg: Msg::TxAck { tx: id, ack, epoch },
        });
    }

    /// INITX: know the transaction (and, Strict and Synch, persist that first).
    pub(crate) fn on_initx(&mut self, from: NodeId, hdr: TxHdr, epoch: u64, out: &mut Out) {
        let id = hdr.id;
        if self.known_vote(id).is_some() {
            return self.tx_ack(from, id, TxAck::Init, epoch, out);
        }
        if !self.bugs.left_waits {
            self.session_left(id, out);
        }
        self.assert_session_left(id);
        self.hear(hdr);
        if self.trans_rules().durable && !self.bugs.val_before_persist {
            return self.persist_tx(
                id,
                TxPhase::Begun,
                Vec::new(),
                Then::AckInit { to: from, epoch },
                out,
            );
        }
        self.tx_ack(from, id, TxAck::Init, epoch, out);
    }

    /// A transactional INV: hold the write here unless it conflicts
    /// (Strict: persist it in the transaction's record, then ACK_p).
    pub(crate) fn on_txinv(
        &mut self,
        from: NodeId,
        hdr: TxHdr,
        v: Version,
        epoch: u64,
        out: &mut Out,
    ) {
        let (id, ack) = (
            hdr.id,
            TxAck::Write {
                key: v.key,
                ts: v.ts,
            },
        );
        match self.known_vote(id) {
            Some(Vote::Committed) => return,
            Some(vote) => return self.tx_ack(from, id, TxAck::Vote(vote), epoch, out),
            None => {}
        }
        let h = self.hear(hdr);
        if !h.prepared && self.hold_write(id, v, out) == Access::Squashed {
            return; // the coordinator has the refusal
        }
        if self.trans_rules().strict && !self.bugs.val_before_persist {
            let then = Then::AckWrite {
                to: from,
                key: v.key,
                ts: v.ts,
                epoch,
            };
            return self.persist_tx(id, TxPhase::Prepared, vec![v], then, out);
        }
        self.tx_ack(from, id, ack, epoch, out);
    }

    /// Conflict detection for a write an INV brings; it is held unless
    /// squashed, or behind a prepared holder (ENDX will check it again).
    fn hold_write(&mut self, id: TxId, v: Version, out: &mut Out) -> Access {
        if self.installed(v.key).0 >= v.ts && !self.bugs.skip_conflict_check {
            self.count_squash(Squash::StaleInv);
            self.refuse(id, out);
            return Access::Squashed;
        }
        let a = self.access(id, v.key, true, true, out);
        if a == Access::Go {
            let h = self.trans.here.get_mut(&id).expect("held");
            if h.writes.get(&v.key).is_none_or(|w| w.ts < v.ts) {
                h.writes.insert(v.key, v);
            }
        }
        a
    }

    pub(crate) fn on_endx(
        &mut self,
        from: NodeId,
        hdr: TxHdr,
        writes: Vec<Version>,
        reads: Vec<(Key, Ts)>,
        epoch: u64,
        out: &mut Out,
    ) {
        self.end_request(
            EndReq {
                from,
                hdr,
                writes,
                reads,
                epoch,
            },
            out,
        );
    }

    /// Answer ENDX `e` with `vote`.
    fn vote_to(&self, e: &EndReq, vote: Vote, out: &mut Out) {
        let settler = e.from != e.hdr.coord;
        if vote == Vote::Refused && settler {
            self.assert_refusal_vouches(&e.hdr);
        }
        self.tx_ack(e.from, e.hdr.id, TxAck::Vote(vote), e.epoch, out);
    }

    /// A settler's ENDX (any not from the coordinator) that this node could
    /// answer only with a refusal that is not [`Self::decisive`]: it knows
    /// no outcome and holds no Prepared vote. It answers `Unknown`; the
    /// coordinator itself, restarted or added back, `Disowned`: it commits
    /// only once its own commit record is durable, so without one it knows
    /// it never committed (a settler in an epoch without it still may have).
    fn cannot_vouch(&self, e: &EndReq) -> bool {
        let id = e.hdr.id;
        e.from != e.hdr.coord
            && !self.trans.outcomes.contains_key(&id)
            && !self.trans.here.get(&id).is_some_and(|h| h.prepared)
            && !self.decisive(&e.hdr)
    }

    /// ENDX: vote, prepare (Strict, Synch: persist the writes, then vote),
    /// or postpone behind an older prepared transaction.
    pub(crate) fn end_request(&mut self, e: EndReq, out: &mut Out) {
        let id = e.hdr.id;
        if self.cannot_vouch(&e) {
            let vote = if e.hdr.coord == self.me {
                Vote::Disowned
            } else {
                Vote::Unknown
            };
            return self.vote_to(&e, vote, out);
        }
        if let Some(vote) = self.known_vote(id) {
            return self.vote_to(&e, vote, out);
        }
        let durable = self.trans_rules().durable && !self.bugs.val_before_persist;
        let h = self.hear(e.hdr);
        if h.prepared {
            if h.durable || !durable {
                self.assert_vote_durable(id);
                return self.tx_ack(e.from, id, TxAck::Vote(Vote::Prepared), e.epoch, out);
            }
            return h.owed.push((e.from, e.epoch));
        }
        match self.prepare_check(id, &e.writes, &e.reads, out) {
            Access::Wait => {
                self.trans.stats.end_waits += 1;
                self.trans
                    .postponed
                    .retain(|p| (p.hdr.id, p.from) != (id, e.from)); // a re-sent ENDX
                return self.trans.postponed.push(e);
            }
            Access::Squashed => return self.vote_to(&e, Vote::Refused, out),
            Access::Go => {}
        }
        self.assert_validated(id, &e.writes, &e.reads);
        let h = self.trans.here.get_mut(&id).expect("checked");
        h.writes = e.writes.iter().map(|v| (v.key, *v)).collect();
        h.reads = e.reads.iter().copied().collect();
        h.prepared = true;
        if !durable {
            self.assert_vote_durable(id);
            return self.tx_ack(e.from, id, TxAck::Vote(Vote::Prepared), e.epoch, out);
        }
        h.owed.push((e.from, e.epoch));
        self.persist_tx(id, TxPhase::Prepared, e.writes, Then::Prepared, out);
    }

    pub(crate) fn on_txack(
        &mut self,
        from: NodeId,
        id: TxId,
        ack: TxAck,
        epoch: u64,
        out: &mut Out,
    ) {
        if epoch != self.config.epoch {
            return;
        }
        match ack {
            TxAck::Init => {
                if let Some(c) = self
                    .trans
                    .coord
                    .get_mut(&id)
                    .filter(|c| c.phase == Phase::Init)
                {
                    c.acks.insert(from);
                }
                self.try_init(id, out);
            }
            TxAck::Write { key, ts } => {
                if let Some(c) = self
                    .trans
                    .coord
                    .get_mut(&id)
                    .filter(|c| c.strict == Some((key, ts)))
                {
                    c.acks.insert(from);
                }
                self.try_strict_write(id, out);
            }
            TxAck::Vote(v) => self.on_vote(from, id, v, out),
            TxAck::Done => {
                if let Some(d) = self.trans.deliveries.get_mut(&id) {
                    d.acks.insert(from);
                }
                self.try_delivery(id, out);
            }
        }
    }

    /// What a coordinator (or settler) sends for its transaction's phase.
    fn phase_msg(&self, c: &CoordTx) -> Option<Msg> {
        let epoch = self.config.epoch;
        let h = self.trans.here.get(&c.hdr.id);
        match (c.phase, c.strict) {
            (Phase::Init, _) => Some(Msg::InitX { tx: c.hdr, epoch }),
            (Phase::Active, Some((key, _))) => {
                h.and_then(|h| h.writes.get(&key)).map(|&v| Msg::TxInv {
                    tx: c.hdr,
                    v,
                    epoch,
                })
            }
            (Phase::Ending, _) => h.map(|h| Msg::EndX {
                tx: c.hdr,
                writes: h.writes.values().copied().collect(),
                reads: h.reads.iter().map(|(&k, &t)| (k, t)).collect(),
                epoch,
            }),
            _ => None,
        }
    }

    /// Re-send what members have not acknowledged (all of it: `force`).
    pub(crate) fn trans_retry(&mut self, force: bool, out: &mut Out) {
        let (now, retry) = (self.now, self.params.retry_ns);
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let due = |at: u64| force || now >= at + retry;
        for id in self.trans.coord.keys().copied().collect::<Vec<_>>() {
            let c = &self.trans.coord[&id];
            let msg = self.phase_msg(c).filter(|_| due(c.sent_at));
            let Some(msg) = msg else { continue };
            let c = self.trans.coord.get_mut(&id).expect("listed");
            c.sent_at = now;
            for &o in others.iter().filter(|o| !c.acks.contains(o)) {
                out.push(Command::Send {
                    to: o,
                    msg: msg.clone(),
                });
                self.trans.stats.resent += 1;
            }
        }
        let epoch = self.config.epoch;
        for d in self
            .trans
            .deliveries
            .values_mut()
            .filter(|d| due(d.sent_at))
        {
            d.sent_at = now;
            let msg = Msg::TxOutcome {
                tx: d.hdr,
                commit: d.commit,
                writes: d.writes.clone(),
                epoch,
            };
            for &o in others.iter().filter(|o| !d.acks.contains(o)) {
                out.push(Command::Send {
                    to: o,
                    msg: msg.clone(),
                });
                self.trans.stats.resent += 1;
            }
        }
    }

    /// Housekeeping: retransmit, settle orphans, persist lazily.
    pub(crate) fn trans_tick(&mut self, out: &mut Out) {
        self.squash_idle(out);
        self.forget(out);
        self.trans_retry(false, out);
        self.settle_orphans(out);
        if self.trans_rules().lazy && self.now >= self.trans.last_lazy + self.params.lazy_ns {
            self.trans.last_lazy = self.now;
            for (id, versions) in std::mem::take(&mut self.trans.lazy) {
                self.persist_tx(id, TxPhase::Committed, versions, Then::Lazy, out);
            }
        }
    }

    /// A new configuration: acknowledgements start over and everything
    /// unacknowledged goes out again; orphans are settled.
    pub(crate) fn trans_reconfigure(&mut self, new_epoch: bool, out: &mut Out) {
        if !self.config.members.contains(&self.me) {
            self.trans.since = NOT_MEMBER;
            self.trans_removed(out);
            return;
        }
        if self.trans.since == NOT_MEMBER {
            self.trans.since = self.config.epoch;
        }
        if new_epoch {
            self.trans.coord.values_mut().for_each(|c| {
                c.acks.clear();
                c.unknown.clear();
            });
            self.trans
                .deliveries
                .values_mut()
                .for_each(|d| d.acks.clear());
            self.trans_retry(true, out);
            for id in self.trans.coord.keys().copied().collect::<Vec<_>>() {
                self.try_init(id, out);
                self.try_strict_write(id, out);
                self.try_end(id, out);
            }
            for id in self.trans.deliveries.keys().copied().collect::<Vec<_>>() {
                self.try_delivery(id, out);
            }
        }
        self.settle_orphans(out);
    }

    /// Removed while alive (suspected): as after a crash, the members
    /// settle this node's transactions and decide the others without it
    /// (and never tell it). It forgets those it had not prepared; it keeps
    /// those it voted Prepared on (votes are stable: a settler may still
    /// count this one) and settles them once re-added, to learn how they
    /// ended. Its own: one that sent no ENDX is aborted (no member
    /// prepared it); after ENDX the members may commit it, so its End's
    /// outcome is unknown here. A decided one (its commit record
    /// persisting) stays.
    fn trans_removed(&mut self, out: &mut Out) {
        let gone: Vec<TxId> = (self.trans.coord.iter())
            .filter(|(_, c)| c.phase != Phase::Deciding)
            .map(|(&id, _)| id)
            .collect();
        let held = (gone.iter())
            .filter(|id| self.trans.coord[id].client.is_some())
            .count();
        let before = out.len();
        for id in gone {
            let c = self.trans.coord.remove(&id).expect("listed");
            let ended = c.phase == Phase::Ending || c.settling;
            if !ended {
                self.learn(id, Some(false));
            }
            if let Some((session, req)) = c.client.filter(|_| !self.bugs.silent_removal) {
                let tx = id.seq;
                let r = if ended {
                    Reply::OutcomeUnknown { tx }
                } else {
                    Reply::Aborted { tx }
                };
                Self::answer(out, session, req, r);
            }
        }
        self.assert_removed_answered(held, out.len() - before);
        // Commits whose record is not known durable at every member yet.
        for d in self.trans.deliveries.values_mut() {
            if let Some((session, req)) = d.client.take() {
                let tx = d.hdr.id.seq;
                Self::answer(out, session, req, Reply::OutcomeUnknown { tx });
            }
        }
        let coord = &self.trans.coord;
        self.trans
            .here
            .retain(|id, h| coord.contains_key(id) || h.prepared);
        let kept = self.trans.here.keys().filter(|id| !coord.contains_key(id));
        self.trans.kept = kept.copied().collect();
        self.trans.postponed.clear();
    }

    /// Transactions whose coordinator left the configuration, and those
    /// this node kept prepared while it was out: a member that prepared one
    /// settles it (collects every vote and decides); one that had not
    /// refuses it.
    fn settle_orphans(&mut self, out: &mut Out) {
        let members = &self.config.members;
        let kept_all = std::mem::take(&mut self.trans.kept);
        let none = BTreeSet::new();
        let kept = if self.bugs.kept_unsettled {
            &none
        } else {
            &kept_all
        };
        let orphans: Vec<(TxHdr, bool)> = (self.trans.here.values())
            .filter(|h| {
                (!members.contains(&h.hdr.coord) || kept.contains(&h.hdr.id))
                    && !self.trans.coord.contains_key(&h.hdr.id)
            })
            .map(|h| (h.hdr, h.prepared))
            .collect();
        for (hdr, prepared) in orphans {
            let id = hdr.id;
            if !prepared && !self.decisive(&hdr) {
                self.trans.here.remove(&id); // nothing to vouch for
                continue;
            }
            if !prepared {
                self.count_squash(Squash::Orphan);
                self.refuse(id, out);
                continue;
            }
            let h = &self.trans.here[&id];
            let mut c = CoordTx::new(h.hdr, Phase::Ending, self.now);
            (c.settling, c.local) = (true, h.durable || !self.trans_rules().durable);
            let msg = Msg::EndX {
                tx: h.hdr,
                writes: h.writes.values().copied().collect(),
                reads: h.reads.iter().map(|(&k, &t)| (k, t)).collect(),
                epoch: self.config.epoch,
            };
            self.trans.coord.insert(id, c);
            out.push(Command::Broadcast { msg });
            self.try_end(id, out);
        }
        self.assert_kept_settled(&kept_all);
    }

    /// Recovery: a committed transaction's record is installed whole.
    pub(crate) fn load_tx(&mut self, r: &Record) -> Vec<Version> {
        match r {
            Record::Tx {
                tx,
                phase: TxPhase::Committed,
                versions,
            } => {
                self.learn(*tx, Some(true));
                versions.clone()
            }
            _ => Vec::new(),
        }
    }
}
