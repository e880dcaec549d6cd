//! RMWs (FAA, CAS) on leaderless per-key Paxos (Kite paper §3.4), with
//! acquire semantics on the propose and release semantics on the accept
//! (Kite §4): classic Paxos over a sequence of slots per key, keeping
//! only the open slot and the last committed one.
//!
//! The propose reads the replicas' values too, so the RMW's base is the
//! newest value a majority knows; its version is the base's clock with
//! its slot, so plain writes and RMWs share one order. The accept waits
//! for the session's earlier writes (the barrier) and carries its DM-set.
//! The commit is tracked until every replica has it, like a write.

use tandem_net::{NodeId, SessionId};

use crate::inflight::*;
use crate::node::{Active, KiteNode, Mutant, Out};
use crate::types::*;

impl Gather {
    fn new(rid: u64, slot: u32, ballot: Ballot) -> Gather {
        let base = (Version::default(), 0);
        Gather {
            rid,
            slot,
            ballot,
            base,
            accepted: None,
            nack: None,
            committed: None,
            mine: None,
            too_high: false,
            flagged: 0,
        }
    }

    fn absorb(&mut self, from: NodeId, rep: PaxosRep, me: RmwId) {
        let flag = |d: bool| if d { bit(from) } else { 0 };
        match rep {
            PaxosRep::Ack {
                version,
                value,
                delinquent,
            } => {
                self.flagged |= flag(delinquent);
                if version > self.base.0 {
                    self.base = (version, value);
                }
            }
            PaxosRep::Accepted {
                ballot,
                rec,
                delinquent,
            } => {
                self.flagged |= flag(delinquent);
                if !self.accepted.is_some_and(|(b, _)| ballot <= b) {
                    self.accepted = Some((ballot, rec));
                }
            }
            PaxosRep::Nack { promised } => self.nack = self.nack.max(Some(promised)),
            PaxosRep::Committed { slot, rec } if rec.id == me => self.mine = Some((slot, rec)),
            PaxosRep::Committed { slot, rec } => {
                if !self.committed.is_some_and(|(s, _)| slot <= s) {
                    self.committed = Some((slot, rec));
                }
            }
            PaxosRep::TooHigh => self.too_high = true,
        }
    }
}

impl KiteNode {
    pub fn rmw(&mut self, now: u64, s: SessionId, op: Op, out: &mut Out) {
        let (key, kind) = match op {
            Op::Faa(k, d) => (k, RmwKind::Faa(d)),
            Op::Cas {
                key,
                expected,
                new,
                weak,
            } => {
                let ks = self.key(key);
                if weak && ks.value != expected {
                    let result = Reply::CasFail {
                        value: ks.value,
                        version: ks.version,
                        local: true,
                    };
                    return self.reply(s, result, out);
                }
                (key, RmwKind::Cas { expected, new })
            }
            _ => unreachable!("not an RMW: {op:?}"),
        };
        if self.own_bit() {
            self.bump_epoch();
        }
        let me = self.me;
        let sess = self.sess(s);
        (sess.rmw_seq, sess.acq_seq) = (sess.rmw_seq + 1, sess.acq_seq + 1);
        let (id, acq) = (
            RmwId {
                node: me,
                session: s,
                seq: sess.rmw_seq,
            },
            AcqId {
                session: s,
                seq: sess.acq_seq,
            },
        );
        let r = Rmw {
            key,
            kind,
            id,
            acq,
            dm_stamp: 0,
            round: 1,
            attempt: 0,
            stage: Stage::Queued,
        };
        let queue = self.rmw_queue.entry(key).or_default();
        queue.push_back(s);
        if queue.len() == 1 {
            self.propose(now, s, Box::new(r), out);
        } else {
            self.sess(s).op = Some(Active::Rmw(Box::new(r)));
        }
    }

    fn propose(&mut self, now: u64, s: SessionId, mut r: Box<Rmw>, out: &mut Out) {
        // Each attempt is a new acquire: an old attempt's reset-bit must
        // not match a bit this one set.
        let sess = self.sess(s);
        sess.acq_seq += 1;
        r.acq = AcqId {
            session: s,
            seq: sess.acq_seq,
        };
        let slot = self.key(r.key).last_committed + 1;
        let (rid, ballot) = (self.fresh_id(), (r.round, self.me));
        let msg = Msg::Propose {
            rid,
            key: r.key,
            slot,
            ballot,
            id: r.id,
            acq: r.acq,
        };
        r.stage = Stage::Propose(Gather::new(rid, slot, ballot));
        self.sess(s).op = Some(Active::Rmw(r));
        self.start_round(now, s, rid, msg, out);
    }

    pub fn backoff_over(&mut self, now: u64, s: SessionId, out: &mut Out) {
        match self.sess(s).op.take() {
            Some(Active::Rmw(r)) if matches!(r.stage, Stage::Backoff) => {
                self.propose(now, s, r, out)
            }
            other => self.sess(s).op = other,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rmw_rep(
        &mut self,
        now: u64,
        s: SessionId,
        mut r: Box<Rmw>,
        rid: u64,
        from: NodeId,
        rep: Rep,
        done: bool,
        out: &mut Out,
    ) {
        let id = r.id;
        match (&mut r.stage, rep) {
            (Stage::Propose(g), Rep::Prop(p)) if g.rid == rid => {
                g.absorb(from, p, id);
                if done {
                    return self.after_propose(now, s, r, out);
                }
            }
            (Stage::Accept { g, .. }, Rep::Acc(p)) if g.rid == rid => {
                g.absorb(from, p, id);
                if done {
                    return self.after_accept(now, s, r, out);
                }
            }
            (
                &mut Stage::Commit {
                    wid,
                    slot,
                    rec,
                    help,
                },
                _,
            ) if wid == rid && done => {
                return self.after_commit(now, s, r, slot, rec, help, out);
            }
            _ => {}
        }
        self.sess(s).op = Some(Active::Rmw(r));
    }

    /// The gather settled the attempt (already committed, lost the ballot,
    /// or replicas lag behind): act on it; false if the attempt goes on.
    fn settled(&mut self, now: u64, s: SessionId, r: &mut Option<Box<Rmw>>, out: &mut Out) -> bool {
        let rm = r.as_mut().expect("an rmw");
        let (Stage::Propose(g) | Stage::Accept { g, .. }) = &rm.stage else {
            return false;
        };
        let (key, mine, committed, nack, too_high) =
            (rm.key, g.mine, g.committed, g.nack, g.too_high);
        if let Some((slot, rec)) = mine.filter(|_| self.mutant(Mutant::CompleteOnMine)) {
            self.apply_commit(key, slot, rec);
            self.rmw_complete(now, s, r.take().expect("an rmw"), slot, rec, out);
            return true;
        }
        if let Some((slot, rec)) = mine {
            // Committed by a helper, maybe at a minority so far: commit it
            // again and complete once a majority has it.
            self.commit(now, s, r.take().expect("an rmw"), slot, rec, false, out);
            return true;
        }
        if let Some((slot, rec)) = committed {
            self.apply_commit(key, slot, rec); // catch up, then try the next slot
        } else if nack.is_some() || too_high {
            self.stats.paxos_retries += 1;
            if too_high {
                self.help_laggards(key, out);
            }
            rm.round = rm.round.max(nack.map_or(0, |b| b.0)) + 1;
            rm.attempt += 1;
            rm.stage = Stage::Backoff;
            let attempt = rm.attempt;
            self.sess(s).op = Some(Active::Rmw(r.take().expect("an rmw")));
            self.set_backoff(now, s, attempt, out);
            return true;
        } else {
            return false;
        }
        self.propose(now, s, r.take().expect("an rmw"), out);
        true
    }

    /// Replicas that have not committed the slot before ours: send them
    /// the last commit this node knows.
    fn help_laggards(&mut self, key: Key, out: &mut Out) {
        let ks = self.key(key);
        if let Some(rec) = ks.last_rec {
            let msg = Msg::Commit {
                wid: 0,
                key,
                slot: ks.last_committed,
                rec,
            };
            let others = self.others();
            self.send_to(others, &msg, out);
        }
    }

    fn after_propose(&mut self, now: u64, s: SessionId, r: Box<Rmw>, out: &mut Out) {
        let mut r = Some(r);
        let rm = r.as_mut().expect("an rmw");
        if let Stage::Propose(g) = &mut rm.stage {
            // The propose is the RMW's acquire: a slow release naming this
            // node may have reached it only during the propose, and be
            // known to no replica of the quorum but this one.
            let own = !self.mutant(Mutant::NoOwnBitAfterPropose) && self.own_bit();
            let e0 = self.epoch;
            if own || g.flagged != 0 {
                self.on_delinquent(rm.acq, g.flagged, out);
            }
            self.check_delinquency_handled(own || g.flagged != 0, e0, "an RMW's propose");
        }
        if self.settled(now, s, &mut r, out) {
            return;
        }
        let mut rm = r.expect("an rmw");
        let Stage::Propose(g) = &rm.stage else {
            unreachable!()
        };
        let (slot, ballot) = (g.slot, g.ballot);
        match g.accepted {
            Some((_, rec)) if rec.id == rm.id => {
                rm.stage = Stage::Barrier {
                    slot,
                    ballot,
                    rec,
                    help: false,
                }
            }
            Some((_, rec)) => {
                self.stats.paxos_helps += 1;
                rm.stage = Stage::Barrier {
                    slot,
                    ballot,
                    rec,
                    help: true,
                };
            }
            None => {
                let (version, old) = g.base;
                let new = match rm.kind {
                    RmwKind::Faa(d) => old.wrapping_add(d),
                    RmwKind::Cas { expected, new } if expected == old => new,
                    RmwKind::Cas { .. } => return self.cas_failed(now, s, rm, out),
                };
                let rec = RmwRec {
                    id: rm.id,
                    old,
                    old_version: version,
                    new,
                    dm: 0,
                };
                rm.stage = Stage::Barrier {
                    slot,
                    ballot,
                    rec,
                    help: false,
                };
            }
        }
        self.rmw_advance(now, s, rm, out);
    }

    /// A strong CAS whose comparison failed against the majority's newest
    /// value: it ends as an acquire of that value (write-back round
    /// included, so what it returns is a majority's).
    fn cas_failed(&mut self, now: u64, s: SessionId, r: Box<Rmw>, out: &mut Out) {
        let Stage::Propose(g) = &r.stage else {
            unreachable!()
        };
        let a = Acquire {
            key: r.key,
            acq: r.acq,
            rid: 0,
            write_back: false,
            best: g.base,
            n_best: 0,
            flagged: 0,
            cas_fail: true,
        };
        self.next_rmw(now, r.key, out);
        self.write_back(now, s, a, out);
    }

    /// Accept once the session's earlier writes are done (release side).
    pub fn rmw_advance(&mut self, now: u64, s: SessionId, mut r: Box<Rmw>, out: &mut Out) {
        let Stage::Barrier {
            slot,
            ballot,
            rec,
            help,
        } = r.stage
        else {
            self.sess(s).op = Some(Active::Rmw(r));
            return;
        };
        let clear = self.sess(s).live.is_empty() || self.mutant(Mutant::NoReleaseBarrier);
        if !help && !clear {
            self.sess(s).op = Some(Active::Rmw(r));
            return;
        }
        let (adopted, mut rec) = (rec, rec);
        if help && self.mutant(Mutant::HelperDropsDm) {
            rec.dm = 0;
        }
        if help {
            self.check_helper_value(r.key, &adopted, &rec);
        } else {
            self.check_barrier(s, "an RMW's accept");
            // The DM-set rides in the value, so a helper carries it too.
            rec.dm = self.dm_to_publish(s);
            r.dm_stamp = self.dm_stamp();
            self.stats.slow_releases += (rec.dm != 0) as u64;
        }
        let rid = self.fresh_id();
        r.stage = Stage::Accept {
            g: Gather::new(rid, slot, ballot),
            rec,
            help,
        };
        let msg = Msg::Accept {
            rid,
            key: r.key,
            slot,
            ballot,
            rec,
        };
        self.sess(s).op = Some(Active::Rmw(r));
        self.start_round(now, s, rid, msg, out);
    }

    fn after_accept(&mut self, now: u64, s: SessionId, r: Box<Rmw>, out: &mut Out) {
        let mut r = Some(r);
        if self.settled(now, s, &mut r, out) {
            return;
        }
        let rm = r.expect("an rmw");
        let Stage::Accept { ref g, rec, help } = rm.stage else {
            unreachable!()
        };
        let slot = g.slot;
        if !help {
            self.dm_published(rec.dm, rm.dm_stamp);
            self.sess(s).missing = 0; // the DM-set reached a majority
        }
        self.commit(now, s, rm, slot, rec, help, out);
    }

    /// Apply the commit here and send it to every replica, tracked; the
    /// RMW goes on once a majority has it.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        now: u64,
        s: SessionId,
        mut rm: Box<Rmw>,
        slot: u32,
        rec: RmwRec,
        help: bool,
        out: &mut Out,
    ) {
        self.apply_commit(rm.key, slot, rec);
        let wid = self.fresh_id();
        let msg = Msg::Commit {
            wid,
            key: rm.key,
            slot,
            rec,
        };
        rm.stage = Stage::Commit {
            wid,
            slot,
            rec,
            help,
        };
        self.sess(s).op = Some(Active::Rmw(rm));
        self.send_tracked(now, s, wid, msg, true, out);
    }

    #[allow(clippy::too_many_arguments)]
    fn after_commit(
        &mut self,
        now: u64,
        s: SessionId,
        mut r: Box<Rmw>,
        slot: u32,
        rec: RmwRec,
        help: bool,
        out: &mut Out,
    ) {
        if help {
            r.round = 1; // a new slot: its own ballots
            return self.propose(now, s, r, out);
        }
        self.rmw_complete(now, s, r, slot, rec, out);
    }

    fn rmw_complete(
        &mut self,
        now: u64,
        s: SessionId,
        r: Box<Rmw>,
        slot: u32,
        rec: RmwRec,
        out: &mut Out,
    ) {
        self.check_rmw_committed(&r);
        let result = Reply::Rmw {
            old: rec.old,
            old_version: rec.old_version,
            new: rec.new,
            version: rec.version(slot),
        };
        self.reply(s, result, out);
        self.next_rmw(now, r.key, out);
    }

    /// This node's RMW on `key` is over: start the next queued one.
    fn next_rmw(&mut self, now: u64, key: Key, out: &mut Out) {
        let Some(queue) = self.rmw_queue.get_mut(&key) else {
            return;
        };
        queue.pop_front();
        let Some(&next) = queue.front() else {
            self.rmw_queue.remove(&key);
            return;
        };
        if let Some(Active::Rmw(r)) = self.sess(next).op.take() {
            self.propose(now, next, r, out);
        }
    }
}
