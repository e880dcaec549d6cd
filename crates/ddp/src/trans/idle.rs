//! Bounded state for Transactional consistency (`trans/mod.rs`): a transaction
//! whose session began a later one is squashed at once, one whose client
//! vanished is squashed ([`Params::idle_ns`]), a member drops
//! an unprepared transaction it heard nothing about for long, and every
//! node forgets decisions and refusals nobody can ask about any more
//! ([`Params::forget_ns`]).
//!
//! [`Params::idle_ns`]: crate::node::Params
//! [`Params::forget_ns`]: crate::node::Params

use crate::node::{DdpNode, Out};
use crate::trans::state::Squash;
use crate::trans::state::{Phase, TxHere};
use crate::types::{TxHdr, TxId};

impl DdpNode {
    /// Remember `id`'s decision (`Some(commit)`) or this node's refusal
    /// (`None`) until [`Self::forget`]; returns whether the decision was known.
    pub(crate) fn learn(&mut self, id: TxId, decision: Option<bool>) -> bool {
        self.trans.learnt.push_back((self.now, id));
        match decision {
            Some(commit) => self.trans.outcomes.insert(id, commit).is_some(),
            None => !self.trans.refused.insert(id),
        }
    }

    /// A message about `hdr`'s transaction: hold it here (from now on).
    pub(crate) fn hear(&mut self, hdr: TxHdr) -> &mut TxHere {
        let now = self.now;
        let h = self
            .trans
            .here
            .entry(hdr.id)
            .or_insert_with(|| TxHere::new(hdr, now));
        h.heard = now;
        h
    }

    /// `id` began, so its session has left every earlier transaction of
    /// its own (a session runs one at a time; its client restarts with a
    /// new number after an abort, an unknown outcome, or a timeout that
    /// moved it to another node). Squash those this node holds unprepared:
    /// decide the ones it coordinates that have not ended (a waiting
    /// operation of theirs is then answered `Aborted`), refuse the others.
    /// Without this, a session that timed out and moved leaves its old
    /// transaction holding its keys until the idle timeout, younger
    /// transactions wait behind it until their own clients time out, and
    /// after a long stall the cluster can livelock on such leftovers
    /// (`simcheck`'s `Crash::OneWay`).
    pub(crate) fn session_left(&mut self, id: TxId, out: &mut Out) {
        let left: Vec<TxId> = (self.trans.here.values())
            .filter(|h| h.hdr.id.session == id.session && h.hdr.id.seq < id.seq && !h.prepared)
            .map(|h| h.hdr.id)
            .collect();
        let only_active = self.bugs.left_waits;
        for t in left {
            match self.trans.coord.get(&t) {
                Some(c) if c.settling || c.phase == Phase::Ending || c.phase == Phase::Deciding => {
                }
                Some(c) if only_active && c.phase != Phase::Active => {}
                None if only_active => {}
                Some(_) => {
                    self.count_squash(Squash::Left);
                    self.decide(t, false, out);
                }
                None => {
                    self.count_squash(Squash::Left);
                    self.refuse(t, out);
                }
            }
        }
    }

    /// Squash the open transactions whose client sent nothing for
    /// `idle_ns` (coordinator), and the unprepared ones a member heard
    /// nothing about for `forget_ns` (their coordinator forgot them, or a
    /// late message brought back one decided and forgotten here).
    pub(crate) fn squash_idle(&mut self, out: &mut Out) {
        let (now, p) = (self.now, self.params);
        let busy = |s| self.trans.waiting.iter().any(|w| w.0 == s);
        let idle: Vec<TxId> = (self.trans.coord.values())
            .filter(|c| {
                c.phase == Phase::Active
                    && !c.settling
                    && c.client.is_none()
                    && !busy(c.hdr.id.session)
            })
            .filter(|c| now >= c.last_op.saturating_add(p.idle_ns))
            .map(|c| c.hdr.id)
            .collect();
        for id in idle {
            self.count_squash(Squash::Idle);
            self.decide(id, false, out);
        }
        let silent: Vec<TxId> = (self.trans.here.values())
            .filter(|h| {
                !h.prepared
                    && !self.trans.coord.contains_key(&h.hdr.id)
                    && now >= h.heard.saturating_add(p.forget_ns)
            })
            .map(|h| h.hdr.id)
            .collect();
        for id in silent {
            self.count_squash(Squash::Silent);
            self.refuse(id, out);
        }
    }

    /// Forget the decisions and refusals learnt `forget_ns` ago.
    pub(crate) fn forget(&mut self, _out: &mut Out) {
        let horizon = self.now.checked_sub(self.params.forget_ns);
        while let Some(&(at, id)) = self.trans.learnt.front() {
            if horizon.is_none_or(|h| at > h) {
                return;
            }
            self.trans.learnt.pop_front();
            let gone = self.trans.outcomes.remove(&id).is_some() | self.trans.refused.remove(&id);
            self.trans.stats.forgotten += u64::from(gone);
        }
    }
}
