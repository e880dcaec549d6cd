//! Causal consistency: orphaned updates, and sessions whose causal past is
//! lost (not in the paper, whose nodes do not crash two at a time).
//!
//! An update reaches the members through its origin, or through anyone
//! that applied it (anti-entropy, and the logs a catching-up node copies).
//! If every node that held some of an origin's updates crashes before any
//! member applied them (`Crash::CopySource`: the origin, cut off from all
//! but one member, and then that member), those updates are gone. The
//! models allow losing them: a Causal write is acknowledged before it
//! spreads. What they do not allow is waiting for them forever, and two
//! things would: the updates that follow them (buffered at every member,
//! since Causal applies each origin's updates in order, each after its
//! cauhist), and the sessions whose past holds one (their operations wait
//! at any node until it applied that past).
//!
//! So a member gives up on them:
//! - an origin is **dead** once a later life of its node is heard of (its
//!   `UpdSync`, or an update of that life). A removed node may come back
//!   alive with everything it held, so removal alone is not death;
//! - a dead origin's **survivors** are the longest prefix of its updates
//!   some live member applied (this node's applied vector and the
//!   members' latest `UpdSync`); anything past them is held by no live
//!   member, or only buffered behind something that is;
//! - when something here (a buffered update, an unclaimed log entry or a
//!   waiting operation) needs a dead origin past its survivors, and the
//!   survivors have not moved for [`LOST_AFTER_RETRIES`] retry periods
//!   (anti-entropy resends a missing update within three), the origin is
//!   **given up** here: what needs it past its survivors is dropped (and
//!   refused on arrival, not persisted), and the operations answered
//!   [`Reply::PastLost`].
//!
//! The decision is local and soft: "past its survivors" is reckoned as
//! they stand at each look. If a member applies more of the origin after
//! all (it was buffered there behind a live origin's late update), its
//! `UpdSync` raises the survivors here, and the updates it logged and
//! resends are taken. A member that restarted counts only once its new
//! life reports (`note_life` forgets what the old life told).
//!
//! An origin whose node never comes back is never dead here (a removed
//! node may be alive, holding what it had), so what only it held keeps
//! its dependents waiting; `tandem ddp check` restarts every crashed node.

use tandem_net::{Command, SessionId};

use crate::node::{DdpNode, Out};
use crate::types::{Op, Reply, Upd};
use crate::upd::vector::{Origin, UpdId, Vector};

/// Retry periods a dead origin's survivors must stay put before what needs
/// more of it is given up.
pub const LOST_AFTER_RETRIES: u64 = 10;

/// Per dead origin, its survivors (`Vector` entries: origin, prefix).
type Horizon = std::collections::BTreeMap<Origin, u64>;

impl DdpNode {
    /// Node `o.node` runs life `o.since` (or a later one). What it told
    /// in an earlier life no longer counts.
    pub(crate) fn note_life(&mut self, o: Origin) {
        if self.upd.lives.get(&o.node).is_none_or(|&l| l < o.since) {
            self.upd.lives.insert(o.node, o.since);
            self.upd.peers.remove(&o.node);
            self.upd.peer_extra.remove(&o.node);
        }
    }

    /// `o` is the latest life heard of its node.
    pub(crate) fn is_current(&self, o: Origin) -> bool {
        self.upd.lives.get(&o.node).is_none_or(|&l| l <= o.since)
    }

    /// An earlier life of a node that runs a later one.
    fn is_dead(&self, o: Origin) -> bool {
        let latest = if o.node == self.me {
            self.upd.origin.since
        } else {
            self.upd.lives.get(&o.node).copied().unwrap_or(0)
        };
        o.since < latest
    }

    /// The longest prefix of `o`'s updates that a live member applied.
    fn survivors(&self, o: Origin) -> u64 {
        let members = self.config.others(self.me);
        let theirs = members.filter_map(|p| self.upd.peers.get(&p).map(|v| v.get(o)));
        theirs.fold(self.upd.applied.get(o), u64::max)
    }

    /// How much of given-up origin `o` this node can still count on: its
    /// survivors as they stand now (more, if a member applies more after
    /// all; less, once a member that claimed more is gone).
    fn kept(&self, o: Origin) -> Option<u64> {
        self.upd.lost.contains(&o).then(|| self.survivors(o))
    }

    /// `u` is, or follows, an update lost with a dead origin.
    pub(crate) fn is_orphan(&self, u: &Upd) -> bool {
        if self.upd.lost.is_empty() {
            return false;
        }
        let past = |o: Origin, n: u64| self.kept(o).is_some_and(|k| n > k);
        past(u.id.origin, u.id.seq) || u.deps.iter().any(|(o, n)| past(o, n))
    }

    /// The part of `after` that is lost here, as the vector to lower it to.
    fn lost_past(&self, after: &Vector) -> Option<Vector> {
        if self.upd.lost.is_empty() {
            return None; // every client operation asks: answer at once
        }
        let mut upto = Vector::default();
        for (o, n) in after.iter() {
            match self.kept(o) {
                Some(k) if n > k => upto.raise(o, k),
                _ => {}
            }
        }
        (upto != Vector::default()).then_some(upto)
    }

    /// Answer `op` at once if the session's past is lost here.
    pub(crate) fn answer_if_past_lost(
        &mut self,
        session: SessionId,
        req: u64,
        op: &Op,
        out: &mut Out,
    ) -> bool {
        let upto = after_of(op).and_then(|a| self.lost_past(a));
        let Some(upto) = upto else { return false };
        out.push(Command::Reply {
            session,
            req,
            result: Reply::PastLost { upto },
        });
        true
    }

    /// Housekeeping (Causal): give up on what waits past a dead origin's
    /// survivors once they stayed put long enough.
    pub(crate) fn give_up_orphans(&mut self, out: &mut Out) {
        let retry = self.params.retry_ns;
        let causal = self.upd_rules().causal;
        if !causal || !self.ready || self.bugs.orphans_kept {
            return;
        }
        if self.now < self.upd.orphan_scan_at + retry {
            return;
        }
        self.upd.orphan_scan_at = self.now;
        let horizon = self.orphan_horizon();
        let since = match &self.upd.orphan_watch {
            Some((h, since)) if *h == horizon => *since,
            _ => {
                self.upd.orphan_watch = (!horizon.is_empty()).then(|| (horizon, self.now));
                return;
            }
        };
        if self.now < since + LOST_AFTER_RETRIES * retry {
            return;
        }
        self.upd.orphan_watch = None;
        self.upd.lost.extend(horizon.into_keys());
        self.drop_orphans();
        self.answer_lost_pasts(out);
    }

    /// Per dead origin that something here needs past its survivors: the
    /// survivors.
    fn orphan_horizon(&self) -> Horizon {
        let mut needed = Horizon::new();
        let mut need = |o: Origin, n: u64| {
            if self.is_dead(o) {
                let e = needed.entry(o).or_default();
                *e = (*e).max(n);
            }
        };
        let unclaimed = (self.upd.log.iter())
            .filter(|(id, _)| !self.upd.knows_applied(**id))
            .map(|(_, (u, _))| u);
        for u in self.upd.buffer.values().chain(unclaimed) {
            need(u.id.origin, u.id.seq);
            u.deps.iter().for_each(|(o, n)| need(o, n));
        }
        for (_, _, op) in &self.upd.waiting {
            after_of(op)
                .into_iter()
                .flat_map(|a| a.iter())
                .for_each(|(o, n)| need(o, n));
        }
        let beyond = needed.into_iter().map(|(o, n)| (o, n, self.survivors(o)));
        beyond
            .filter(|(_, n, s)| n > s)
            .map(|(o, _, s)| (o, s))
            .collect()
    }

    /// Drop the buffered updates, and the logged ones this node never
    /// applied, that can no longer apply anywhere.
    fn drop_orphans(&mut self) {
        let buffered = self.upd.buffer.values();
        let orphans: Vec<UpdId> = buffered
            .filter(|u| self.is_orphan(u))
            .map(|u| u.id)
            .collect();
        for id in orphans {
            self.upd.buffer.remove(&id);
        }
        let logged = self.upd.log.iter();
        let orphans: Vec<UpdId> = logged
            .filter(|(id, (u, _))| !self.upd.knows_applied(**id) && self.is_orphan(u))
            .map(|(id, _)| *id)
            .collect();
        for id in orphans {
            self.upd.log.remove(&id);
        }
    }

    /// Answer the waiting operations whose past is lost here.
    fn answer_lost_pasts(&mut self, out: &mut Out) {
        for (session, req, op) in std::mem::take(&mut self.upd.waiting) {
            if !self.answer_if_past_lost(session, req, &op, out) {
                self.upd.waiting.push_back((session, req, op));
            }
        }
    }
}

/// The causal past an operation carries.
fn after_of(op: &Op) -> Option<&Vector> {
    match op {
        Op::Read { after, .. } | Op::Write { after, .. } => Some(after),
        _ => None,
    }
}
