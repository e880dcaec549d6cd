//! Ending a transaction (`trans/mod.rs`): votes, the decision, its delivery to
//! every member, installing committed writes, persisting them as the
//! persistency model says, and VAL_p under RE persistency.

use tandem_net::{Command, NodeId, SessionId};

use crate::node::{DdpNode, Out, Then, Wait};
use crate::trans::state::{Delivery, Phase};
use crate::types::{
    Key, Msg, Record, Reply, ScopeId, Ts, TxAck, TxHdr, TxId, TxPhase, Version, Vote,
};

impl DdpNode {
    /// Persist `id`'s record (merged with what its slot holds); `then` says
    /// what its landing completes.
    pub(crate) fn persist_tx(
        &mut self,
        id: TxId,
        phase: TxPhase,
        versions: Vec<Version>,
        then: Then,
        out: &mut Out,
    ) {
        let committed = if phase == TxPhase::Committed {
            versions.iter().map(|v| (v.key, v.ts)).collect()
        } else {
            Vec::new()
        };
        let token = self.token(Wait::Tx {
            id,
            committed,
            then,
        });
        out.push(Command::Persist {
            token,
            record: Record::Tx {
                tx: id,
                phase,
                versions,
            },
        });
    }

    /// A transaction record landed here.
    pub(crate) fn tx_landed(
        &mut self,
        id: TxId,
        committed: Vec<(Key, Ts)>,
        then: Then,
        out: &mut Out,
    ) {
        for (key, ts) in committed {
            self.key_persisted(key, ts, out); // the INV family's replay may wait on it
        }
        let ack = |to, ack, epoch| Command::Send {
            to,
            msg: Msg::TxAck { tx: id, ack, epoch },
        };
        match then {
            Then::AckInit { to, epoch } => out.push(ack(to, TxAck::Init, epoch)),
            Then::AckWrite { to, key, ts, epoch } => {
                out.push(ack(to, TxAck::Write { key, ts }, epoch))
            }
            Then::AckDone { to, epoch } => out.push(ack(to, TxAck::Done, epoch)),
            Then::Prepared => self.prepared_landed(id, out),
            Then::LocalInit => {
                if let Some(c) = self
                    .trans
                    .coord
                    .get_mut(&id)
                    .filter(|c| c.phase == Phase::Init)
                {
                    c.local = true;
                }
                self.try_init(id, out);
            }
            Then::LocalWrite { key, ts } => {
                if let Some(c) = self
                    .trans
                    .coord
                    .get_mut(&id)
                    .filter(|c| c.strict == Some((key, ts)))
                {
                    c.local = true;
                }
                self.try_strict_write(id, out);
            }
            Then::Decided => {
                let deciding = self.trans.coord.get_mut(&id);
                if let Some(c) = deciding.filter(|c| c.phase == Phase::Deciding) {
                    c.commit_landed = true;
                    self.decide(id, true, out);
                }
            }
            Then::Delivered => {
                if let Some(d) = self.trans.deliveries.get_mut(&id) {
                    d.local = true;
                }
                self.try_delivery(id, out);
            }
            Then::Lazy => {}
        }
    }

    /// The prepared record landed: vote as promised, and count it for the
    /// transaction if this node decides it.
    fn prepared_landed(&mut self, id: TxId, out: &mut Out) {
        if let Some(h) = self.trans.here.get_mut(&id) {
            h.durable = true;
            for (to, epoch) in std::mem::take(&mut h.owed) {
                out.push(Command::Send {
                    to,
                    msg: Msg::TxAck {
                        tx: id,
                        ack: TxAck::Vote(Vote::Prepared),
                        epoch,
                    },
                });
            }
        }
        if let Some(c) = self
            .trans
            .coord
            .get_mut(&id)
            .filter(|c| c.phase == Phase::Ending)
        {
            c.local = true;
            self.try_end(id, out);
        }
    }

    /// A vote for a transaction this node decides.
    pub(crate) fn on_vote(&mut self, from: NodeId, id: TxId, vote: Vote, out: &mut Out) {
        let old_rule = self.bugs.undecisive_refusal || !self.trans_rules().durable;
        let Some(c) = self.trans.coord.get_mut(&id) else {
            return;
        };
        match vote {
            Vote::Prepared if c.phase == Phase::Ending => {}
            Vote::Prepared => return,
            Vote::Committed => c.saw_commit = true,
            Vote::Refused | Vote::Aborted => c.saw_abort = true,
            Vote::Disowned => c.disowned = true,
            Vote::Unknown => {
                c.unknown.insert(from);
            }
        }
        c.acks.insert(from);
        // The coordinator decides alone, at once. A settler may too: only a
        // member that can vouch for it refuses (`decisive`), so a refusal
        // means the coordinator never committed; the silent ones would
        // keep it waiting for every vote.
        let settler_waits = c.settling && old_rule;
        if c.saw_abort && !settler_waits && c.phase != Phase::Deciding {
            return self.decide(id, false, out);
        }
        self.try_end(id, out);
    }

    /// Decide once the votes allow it: a settler needs every member's vote.
    pub(crate) fn try_end(&mut self, id: TxId, out: &mut Out) {
        let slack = usize::from(self.bugs.reply_before_last_ack);
        let Some(c) = self
            .trans
            .coord
            .get(&id)
            .filter(|c| c.phase == Phase::Ending)
        else {
            return;
        };
        let all = self.missing(&c.acks) <= if c.settling { 0 } else { slack };
        let durable = self.trans_rules().durable && !self.bugs.commit_before_persist;
        if c.saw_commit && !durable {
            return self.decide(id, true, out);
        }
        if !c.saw_commit {
            if !all || !(c.local || self.bugs.val_before_persist) {
                return;
            }
            if c.saw_abort || c.disowned {
                return self.decide(id, false, out);
            }
            if !c.unknown.is_empty() {
                // Nobody here can tell: wait for a configuration that
                // brings back the coordinator or a member that knows.
                return;
            }
            self.assert_votes_in(id);
        }
        if !durable {
            return self.decide(id, true, out);
        }
        self.trans.coord.get_mut(&id).expect("checked").phase = Phase::Deciding;
        let writes = self.tx_writes(id);
        self.persist_tx(id, TxPhase::Committed, writes, Then::Decided, out);
    }

    /// The writes a transaction holds here.
    fn tx_writes(&self, id: TxId) -> Vec<Version> {
        self.trans
            .here
            .get(&id)
            .map(|h| h.writes.values().copied().collect())
            .unwrap_or_default()
    }

    /// Decide `id` here: answer its client, install a commit, deliver.
    pub(crate) fn decide(&mut self, id: TxId, commit: bool, out: &mut Out) {
        let writes = self.tx_writes(id);
        self.trans.here.remove(&id);
        let Some(c) = self.trans.coord.remove(&id) else {
            return;
        };
        if commit {
            self.assert_commit_durable(id, &c, &writes);
        }
        self.learn(id, Some(commit));
        *if commit {
            &mut self.trans.stats.committed
        } else {
            &mut self.trans.stats.aborted
        } += 1;
        // Strict, Synch: a commit is answered once its record is durable at
        // every member (`try_delivery`), so that whichever members recover
        // from a whole-cluster crash hold it (T-3).
        let wait = commit
            && self.trans_rules().durable
            && !self.bugs.commit_before_persist
            && !self.bugs.commit_answered_early;
        let mut client = c.client;
        if let Some((session, req)) = client.filter(|_| !wait) {
            let result = if commit {
                self.assert_commit_everywhere(id, false);
                Reply::Committed { tx: id.seq }
            } else {
                Reply::Aborted { tx: id.seq }
            };
            Self::answer(out, session, req, result);
            client = None;
        }
        if commit {
            for v in &writes {
                if let Some(&scope) = c.scopes.get(&v.key) {
                    self.scope_of(
                        ScopeId {
                            session: id.session,
                            seq: scope,
                        },
                        *v,
                    );
                }
            }
            self.install(id, &writes, None, out);
        }
        self.deliver(c.hdr, commit, writes, client, out);
    }

    /// Make committed writes visible here and durable as the model says;
    /// `ack`: the decider, told once that is done.
    pub(crate) fn install(
        &mut self,
        id: TxId,
        writes: &[Version],
        ack: Option<(NodeId, u64)>,
        out: &mut Out,
    ) {
        let (r, now) = (self.trans_rules(), self.now);
        for v in writes {
            let s = self.key(v.key);
            if v.ts > s.ts {
                (s.ts, s.value, s.invalid_since) = (v.ts, Some(v.value), now);
                if r.read_persisted {
                    self.unsettled.insert(v.key);
                }
            }
        }
        let then = match ack {
            Some((to, epoch)) => Then::AckDone { to, epoch },
            None => Then::Delivered,
        };
        // RE-p persists every commit here; Strict and Synch a member's
        // (the decider's landed before it decided).
        let member = r.durable && ack.is_some() && !self.bugs.commit_answered_early;
        let persist = r.read_persisted || member;
        if persist && !writes.is_empty() {
            return self.persist_tx(id, TxPhase::Committed, writes.to_vec(), then, out);
        }
        if r.lazy && !writes.is_empty() {
            self.trans.lazy.push((id, writes.to_vec()));
        }
        if let Some((to, epoch)) = ack {
            out.push(Command::Send {
                to,
                msg: Msg::TxAck {
                    tx: id,
                    ack: TxAck::Done,
                    epoch,
                },
            });
        }
    }

    /// Tell every member the decision, until each acknowledged it.
    fn deliver(
        &mut self,
        hdr: TxHdr,
        commit: bool,
        writes: Vec<Version>,
        client: Option<(SessionId, u64)>,
        out: &mut Out,
    ) {
        let local = !(commit && self.trans_rules().read_persisted && !writes.is_empty());
        let writes = if commit { writes } else { Vec::new() };
        let msg = Msg::TxOutcome {
            tx: hdr,
            commit,
            writes: writes.clone(),
            epoch: self.config.epoch,
        };
        out.push(Command::Broadcast { msg });
        let d = Delivery {
            hdr,
            commit,
            writes,
            acks: Default::default(),
            local,
            sent_at: self.now,
            client,
        };
        self.trans.deliveries.insert(hdr.id, d);
        self.try_delivery(hdr.id, out);
    }

    /// Every member has the decision (RE-p: persisted it; then VAL_p).
    pub(crate) fn try_delivery(&mut self, id: TxId, out: &mut Out) {
        let Some(d) = self.trans.deliveries.get(&id) else {
            return;
        };
        if !d.local || self.missing(&d.acks) > 0 {
            return;
        }
        let d = self.trans.deliveries.remove(&id).expect("checked");
        if let Some((session, req)) = d.client {
            self.assert_commit_everywhere(id, true);
            Self::answer(out, session, req, Reply::Committed { tx: id.seq });
        }
        if d.commit && self.trans_rules().read_persisted {
            let writes: Vec<(Key, Ts)> = d.writes.iter().map(|v| (v.key, v.ts)).collect();
            out.push(Command::Broadcast {
                msg: Msg::TxValP {
                    tx: id,
                    writes: writes.clone(),
                },
            });
            self.on_valp(&writes, out);
        }
    }

    /// VAL_p: these versions are durable at every replica.
    pub(crate) fn on_valp(&mut self, writes: &[(Key, Ts)], out: &mut Out) {
        for &(key, ts) in writes {
            let s = self.key(key);
            s.val_p = s.val_p.max(ts);
            self.settle(key, out);
        }
    }

    /// A decision reached this node.
    pub(crate) fn on_outcome(
        &mut self,
        from: NodeId,
        hdr: TxHdr,
        commit: bool,
        writes: Vec<Version>,
        epoch: u64,
        out: &mut Out,
    ) {
        let id = hdr.id;
        let known = self.learn(id, Some(commit));
        self.trans.here.remove(&id);
        if let Some(c) = self.trans.coord.remove(&id) {
            if let Some((session, req)) = c.client {
                let result = if commit {
                    Reply::Committed { tx: id.seq }
                } else {
                    Reply::Aborted { tx: id.seq }
                };
                Self::answer(out, session, req, result);
            }
        }
        let r = self.trans_rules();
        if commit && (!known || r.read_persisted || r.durable) {
            return self.install(id, &writes, Some((from, epoch)), out);
        }
        out.push(Command::Send {
            to: from,
            msg: Msg::TxAck {
                tx: id,
                ack: TxAck::Done,
                epoch,
            },
        });
    }
}
