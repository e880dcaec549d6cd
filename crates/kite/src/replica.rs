//! What a replica does with each request: apply writes if newer, answer reads
//! with its value, keep the delinquency bits, and be a Paxos acceptor.

use tandem_net::{Durable, NodeId};

use crate::node::{Delinquency, KiteNode, Mutant, Out};
use crate::types::*;

impl Durable for KiteRecord {
    type Slot = ();
    fn slot(&self) {}
}

impl KiteNode {
    /// Handle a request from `from` (possibly this node itself); the reply
    /// to send back, if any.
    pub fn serve(&mut self, _now: u64, from: NodeId, msg: Msg, _out: &mut Out) -> Option<Msg> {
        let rep = |rid, rep| Some(Msg::Rep { rid, rep });
        match msg {
            Msg::Write {
                wid,
                key,
                version,
                value,
            } => {
                self.apply(key, version, value);
                Some(Msg::WriteAck { wid })
            }
            Msg::Commit {
                wid,
                key,
                slot,
                rec,
            } => {
                self.apply_commit(key, slot, rec);
                Some(Msg::WriteAck { wid })
            }
            Msg::ReadTs { rid, key } => rep(
                rid,
                Rep::Ts {
                    version: self.key(key).version,
                },
            ),
            Msg::Read { rid, key, acq } => {
                let delinquent = acq.is_some_and(|a| self.tell_delinquent(from, a));
                let ks = self.key(key);
                rep(
                    rid,
                    Rep::Value {
                        version: ks.version,
                        value: ks.value,
                        delinquent,
                    },
                )
            }
            Msg::WriteBack {
                rid,
                key,
                version,
                value,
                acq,
            } => {
                self.apply(key, version, value);
                rep(
                    rid,
                    Rep::Ack {
                        delinquent: self.tell_delinquent(from, acq),
                    },
                )
            }
            Msg::SlowRelease { rid, dm } => {
                self.mark_delinquent(dm);
                rep(rid, Rep::Ack { delinquent: false })
            }
            Msg::ResetBit { acq } => {
                self.reset_bit(from, acq);
                None
            }
            Msg::Propose {
                rid,
                key,
                slot,
                ballot,
                id,
                acq,
            } => {
                let delinquent = self.tell_delinquent(from, acq);
                rep(
                    rid,
                    Rep::Prop(self.on_propose(key, slot, ballot, id, delinquent)),
                )
            }
            Msg::Accept {
                rid,
                key,
                slot,
                ballot,
                rec,
            } => {
                self.mark_delinquent(rec.dm);
                rep(rid, Rep::Acc(self.on_accept(key, slot, ballot, rec)))
            }
            Msg::Ping => Some(Msg::Pong),
            Msg::Pong | Msg::Rep { .. } | Msg::WriteAck { .. } => None,
        }
    }

    /// A slow release (or an accept) names the machines in `dm` delinquent:
    /// their bits go to 1 unconditionally, voiding pending resets.
    pub fn mark_delinquent(&mut self, dm: Mask) {
        for m in 0..self.dv.len() {
            if dm & bit(m as NodeId) != 0 {
                self.dv[m] = Delinquency::One;
            }
        }
    }

    /// An acquire from machine `from`: if its bit is set, tell it and move
    /// the bit to T, recording the acquire (one slot per remote session).
    fn tell_delinquent(&mut self, from: NodeId, acq: AcqId) -> bool {
        if from == self.me {
            return false; // the acquirer checks its own bit itself
        }
        match &mut self.dv[from as usize] {
            Delinquency::Zero => false,
            b @ Delinquency::One => {
                *b = Delinquency::T([(acq.session, acq.seq)].into());
                true
            }
            Delinquency::T(ids) => {
                ids.insert(acq.session, acq.seq);
                true
            }
        }
    }

    /// Reset `from`'s bit iff it is in T and recorded this acquire.
    fn reset_bit(&mut self, from: NodeId, acq: AcqId) {
        let b = &mut self.dv[from as usize];
        if matches!(b, Delinquency::T(ids) if ids.get(&acq.session) == Some(&acq.seq)) {
            *b = Delinquency::Zero;
        }
    }

    fn on_propose(
        &mut self,
        key: Key,
        slot: u32,
        ballot: Ballot,
        id: RmwId,
        delinquent: bool,
    ) -> PaxosRep {
        if let Some(done) = self.slot_settled(key, slot, id) {
            return done;
        }
        let lower_ok = self.mutant(Mutant::AcceptLowerBallot);
        let ks = self.key(key);
        if ballot < ks.promised && !lower_ok {
            return PaxosRep::Nack {
                promised: ks.promised,
            };
        }
        let before = ks.promised;
        ks.promised = ks.promised.max(ballot);
        if lower_ok {
            ks.promised = ballot;
        }
        let (after, accepted, version, value) = (ks.promised, ks.accepted, ks.version, ks.value);
        self.check_promise(key, before, ballot, after, false);
        match accepted {
            Some((ballot, rec)) => PaxosRep::Accepted {
                ballot,
                rec,
                delinquent,
            },
            None => PaxosRep::Ack {
                version,
                value,
                delinquent,
            },
        }
    }

    fn on_accept(&mut self, key: Key, slot: u32, ballot: Ballot, rec: RmwRec) -> PaxosRep {
        if let Some(done) = self.slot_settled(key, slot, rec.id) {
            return done;
        }
        let lower_ok = self.mutant(Mutant::AcceptLowerBallot);
        let ks = self.key(key);
        if ballot < ks.promised && !lower_ok {
            return PaxosRep::Nack {
                promised: ks.promised,
            };
        }
        let before = ks.promised;
        ks.promised = ballot;
        ks.accepted = Some((ballot, rec));
        let (version, value) = (ks.version, ks.value);
        self.check_promise(key, before, ballot, ballot, true);
        PaxosRep::Ack {
            version,
            value,
            delinquent: false,
        }
    }

    /// The answer when `slot` is not open for `id` at this replica: the RMW
    /// already committed, the slot is committed, or an earlier one is not.
    fn slot_settled(&mut self, key: Key, slot: u32, id: RmwId) -> Option<PaxosRep> {
        if let Some(&(s, rec)) = self
            .committed
            .get(&(id.node, id.session))
            .filter(|(_, r)| r.id == id)
        {
            return Some(PaxosRep::Committed { slot: s, rec });
        }
        let ks = self.key(key);
        if slot <= ks.last_committed {
            // Slots start at 1: a proposal for slot 0 of a key with nothing
            // committed comes from no correct proposer. Refuse it.
            let Some(rec) = ks.last_rec else {
                return Some(PaxosRep::Nack {
                    promised: ks.promised,
                });
            };
            return Some(PaxosRep::Committed {
                slot: ks.last_committed,
                rec,
            });
        }
        (slot > ks.last_committed + 1).then_some(PaxosRep::TooHigh)
    }

    /// A committed RMW (Kite paper §3.4): close the slot,
    /// apply the value if its version is newer, remember the id.
    pub fn apply_commit(&mut self, key: Key, slot: u32, rec: RmwRec) {
        self.check_commit_agreement(key, slot, &rec);
        let e = self
            .committed
            .entry((rec.id.node, rec.id.session))
            .or_insert((slot, rec));
        if e.1.id.seq <= rec.id.seq {
            *e = (slot, rec);
        }
        let ks = self.key(key);
        if slot > ks.last_committed {
            ks.last_committed = slot;
            ks.last_rec = Some(rec);
            ks.promised = (0, 0);
            ks.accepted = None;
        }
        self.apply(key, rec.version(slot), rec.new);
    }
}
