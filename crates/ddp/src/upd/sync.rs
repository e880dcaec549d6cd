//! Keeping the UPD family's replicas in step, and catching a node up.
//!
//! - **Anti-entropy** (not in the paper, whose links are reliable): each
//!   node tells the others its applied vector when it changes (and every
//!   `retry_ns` anyway); updates a member lacks are sent again, by their
//!   origin after `retry_ns`, by anyone after three times that (the origin
//!   may be gone); an update leaves a node's log once every member has it.
//! - **Catch-up** (as `catchup.rs` for the INV family): a restarted node
//!   asks every member for a copy of its applied state and vector. If some
//!   member was serving (one node restarted, F2), the node keeps only the
//!   serving members' state and drops what its NVM alone held (writes that
//!   never left it: the models allow losing them, Strict's acknowledged
//!   writes are on every member). Each copy carries its sender's log too:
//!   whole updates some member may still lack, which the copier sends on.
//!   After a whole-cluster crash (F1) nobody serves: the state is the
//!   union of every NVM, newest version per key, and a new causal era starts (the ids of the old one died with the
//!   volatile state; sessions start over with an empty past). Under Synch
//!   and RE-p each NVM is causally closed, so their union is too. The node
//!   serves once every adopted version is persisted here.

use std::collections::BTreeSet;

use tandem_net::{Command, NodeId};

use crate::model::PersistIssue;
use crate::node::{DdpNode, Out, Wait};
use crate::types::{Key, Msg, Record, Ts, Upd, Version};
use crate::upd::state::CopyIn;
use crate::upd::vector::{UpdId, Vector};

/// At most this many ids beyond the applied prefix go in one `UpdSync`.
const EXTRA_MAX: usize = 256;

/// At most this many updates of one origin go to one member in one resend.
const RESEND_MAX: usize = 64;

impl DdpNode {
    pub(crate) fn upd_tick(&mut self, out: &mut Out) {
        self.flush_outbox(out);
        self.gossip(out);
        self.resend_log(out);
        self.retry_strict(out);
        self.give_up_orphans(out);
    }

    /// Eventual: broadcast the queued UPDs as one batch.
    pub(crate) fn flush_outbox(&mut self, out: &mut Out) {
        if !self.upd.outbox.is_empty() {
            out.push(Command::Broadcast {
                msg: Msg::Upd {
                    upds: std::mem::take(&mut self.upd.outbox),
                },
            });
        }
    }

    fn gossip(&mut self, out: &mut Out) {
        let extra = if self.bugs.gossip_prefix_only {
            Vec::new()
        } else {
            self.upd.extra_ids(EXTRA_MAX)
        };
        let (last, last_extra, at) = &self.upd.gossiped;
        let same = *last == self.upd.applied && *last_extra == extra;
        if !self.ready || (same && self.now < at + self.params.retry_ns) {
            return;
        }
        self.assert_sync_extra(&extra, EXTRA_MAX);
        self.upd.gossiped = (self.upd.applied.clone(), extra.clone(), self.now);
        out.push(Command::Broadcast {
            msg: Msg::UpdSync {
                origin: self.upd.origin,
                applied: self.upd.applied.clone(),
                extra,
            },
        });
    }

    pub(crate) fn on_upd_sync(&mut self, from: NodeId, applied: Vector, extra: Vec<UpdId>) {
        self.upd.peers.insert(from, applied);
        self.upd
            .peer_extra
            .insert(from, extra.into_iter().collect());
        self.gc_log();
    }

    /// Forget the updates every other member has applied: per origin a
    /// prefix of the log (vectors name prefixes), then those every member
    /// applied beyond its prefix (past a gap that may never fill: the
    /// origin crashed before any member received one of its updates).
    fn gc_log(&mut self) {
        self.gc_log_prefixes();
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let upd = &self.upd;
        let candidates: BTreeSet<UpdId> = others
            .iter()
            .filter_map(|p| upd.peer_extra.get(p))
            .flatten()
            .filter(|id| upd.log.contains_key(id))
            .copied()
            .collect();
        for id in candidates {
            if others.iter().all(|&p| self.upd.peer_has(p, id)) {
                self.upd.log.remove(&id);
            }
        }
    }

    fn gc_log_prefixes(&mut self) {
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let peers = &self.upd.peers;
        let everywhere = |o| {
            others
                .iter()
                .map(|p| peers.get(p).map_or(0, |v| v.get(o)))
                .min()
                .unwrap_or(u64::MAX)
        };
        let mut next = self.upd.log.keys().next().copied();
        while let Some(first) = next {
            let upto = UpdId {
                origin: first.origin,
                seq: everywhere(first.origin),
            };
            let gone: Vec<UpdId> = if upto < first {
                Vec::new()
            } else {
                self.upd
                    .log
                    .range(first..=upto)
                    .map(|(&id, _)| id)
                    .collect()
            };
            for id in gone {
                self.upd.log.remove(&id);
            }
            let after = UpdId {
                origin: first.origin,
                seq: u64::MAX,
            };
            next = self
                .upd
                .log
                .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
                .next()
                .map(|(&id, _)| id);
        }
    }

    /// Send each member the logged updates it lacks and that waited long enough.
    fn resend_log(&mut self, out: &mut Out) {
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let mut resent = Vec::new();
        for o in others {
            let upds = self.lacking(o);
            if !upds.is_empty() {
                resent.extend(upds.iter().map(|u| u.id));
                out.push(Command::Send {
                    to: o,
                    msg: Msg::Upd { upds },
                });
            }
        }
        for id in resent {
            if let Some(e) = self.upd.log.get_mut(&id) {
                e.1 = self.now;
            }
        }
    }

    /// What member `o` lacks and is due again: per origin, at most
    /// [`RESEND_MAX`] updates from the first one `o` has not applied. A
    /// Causal member applies an origin's updates in order and holds later
    /// ones until the gap closes, so the gap's head goes first; taken in id
    /// order over the whole log instead, the updates `o` holds waiting
    /// behind one origin's gap (thousands after a partition) would fill
    /// every resend, and the gap would never close. An update is due
    /// `retry_ns` after it was last sent by its origin, three times that by
    /// anyone else (the origin may be gone).
    fn lacking(&self, o: NodeId) -> Vec<Upd> {
        let (upd, now, retry) = (&self.upd, self.now, self.params.retry_ns);
        let applied = |origin| upd.peers.get(&o).map_or(0, |v| v.get(origin));
        let mut found = Vec::new();
        let mut next = upd.log.keys().next().copied();
        while let Some(first) = next {
            let origin = first.origin;
            let wait = if origin.node == self.me {
                retry
            } else {
                3 * retry
            };
            let gap = UpdId {
                origin,
                seq: applied(origin) + 1,
            };
            let last = UpdId {
                origin,
                seq: u64::MAX,
            };
            found.extend(
                upd.log
                    .range(gap.max(first)..=last)
                    .filter(|(id, (_, at))| !upd.peer_has(o, **id) && now >= at + wait)
                    .take(RESEND_MAX)
                    .map(|(_, (u, _))| u.clone()),
            );
            next = upd
                .log
                .range((std::ops::Bound::Excluded(last), std::ops::Bound::Unbounded))
                .next()
                .map(|(&id, _)| id);
        }
        found
    }

    /// Strict: send the UPD again to members whose ACK_p has not come.
    fn retry_strict(&mut self, out: &mut Out) {
        let (now, retry) = (self.now, self.params.retry_ns);
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        for w in self
            .upd
            .strict
            .values_mut()
            .filter(|w| now >= w.sent_at + retry)
        {
            w.sent_at = now;
            for &o in others.iter().filter(|o| !w.acks.contains(o)) {
                out.push(Command::Send {
                    to: o,
                    msg: Msg::Upd {
                        upds: vec![w.upd.clone()],
                    },
                });
            }
        }
    }

    /// A new configuration: ACK_ps of the old epoch no longer count (asked
    /// again), and what departed members applied no longer matters.
    pub(crate) fn upd_reconfigure(&mut self, new_epoch: bool, out: &mut Out) {
        let members = self.config.members.clone();
        self.upd.peers.retain(|p, _| members.contains(p));
        self.upd.peer_extra.retain(|p, _| members.contains(p));
        self.gc_log();
        if !new_epoch {
            return;
        }
        for w in self.upd.strict.values_mut() {
            w.acks.clear();
            w.sent_at = 0;
        }
        self.retry_strict(out);
        for (k, ts) in self.upd.strict.keys().copied().collect::<Vec<_>>() {
            self.try_strict(k, ts, out);
        }
    }

    pub(crate) fn on_upd_copy_req(&mut self, from: NodeId, out: &mut Out) {
        let mut versions: Vec<_> = self
            .keys
            .iter()
            .filter_map(|(&k, s)| s.version(k).map(|v| (v, s.id)))
            .collect();
        versions.sort_unstable_by_key(|(v, _)| v.key);
        let msg = Msg::UpdCopy {
            versions,
            applied: self.upd.applied.clone(),
            ready: self.ready,
            // The whole log: a filter by what the other members hold would
            // race with a member that restarts and claims less than before.
            log: self.upd.log.values().map(|(u, _)| u.clone()).collect(),
        };
        out.push(Command::Send { to: from, msg });
    }

    pub(crate) fn on_upd_copy(&mut self, from: NodeId, copy: CopyIn, out: &mut Out) {
        if self.ready || !self.copy_from.remove(&from) {
            return;
        }
        self.upd.copies.push(copy);
        self.upd_check_ready(out);
    }

    /// Once every copy is in, adopt them; serve once they are persisted.
    pub(crate) fn upd_check_ready(&mut self, out: &mut Out) {
        if self.ready
            || !self.copy_from.is_empty()
            || !self.copy_asked
            || self.upd.adopting.is_some()
        {
            return;
        }
        self.adopt_copies(out);
        self.finish_adopting(out);
    }

    fn adopt_copies(&mut self, out: &mut Out) {
        let copies = std::mem::take(&mut self.upd.copies);
        let rejoin = copies.iter().any(|c| c.ready);
        if rejoin {
            for s in self.keys.values_mut() {
                (s.ts, s.value, s.id, s.durable) = (Ts::ZERO, None, None, None);
            }
            // A node removed while alive kept what it applied; it now holds
            // the copies' state, so it claims only what they applied. Its
            // log still sends on what only it had (and it gets it back).
            if !self.bugs.keep_applied {
                self.upd.applied = Vector::default();
                self.upd.extra.clear();
                self.upd.touched();
            }
        }
        let used: Vec<CopyIn> = copies.into_iter().filter(|c| c.ready || !rejoin).collect();
        for c in &used {
            self.upd.applied.merge(&c.applied);
            self.upd.touched();
            for &(v, id) in &c.versions {
                let s = self.key(v.key);
                if v.ts > s.ts {
                    (s.ts, s.value, s.id) = (v.ts, Some(v.value), id);
                }
            }
        }
        if rejoin {
            self.assert_copy_claims(&used);
        }
        if !self.bugs.copy_unlogged {
            self.adopt_logs(&used);
        }
        self.assert_copy_logged(&used);
        self.upd.adopting = Some(0);
        // In key order: the order of persists is part of a seeded run.
        let mut keys: Vec<Key> = self.keys.keys().copied().collect();
        keys.sort_unstable();
        for k in keys {
            self.make_durable(k, out);
        }
    }

    /// Take the copies' logs as this node's own: an update a copy's
    /// member applied and some other member lacks may now live only here,
    /// since its origin and that member can crash before anti-entropy
    /// spreads it (`Crash::CopySource`). Logged here, it goes on to whoever
    /// lacks it, as an update this node applied itself would. Each entry
    /// is the whole update with its cauhist, and a member's log holds every
    /// update it applied that is not yet everywhere, the earlier ones of
    /// the same origin included, so a Causal member that lacks one gets
    /// what it must apply first as well. (An entry made from a copied
    /// version, as this once was for Eventual, would not do for Causal: a
    /// copy holds the newest version per key, not every update.)
    ///
    /// This node claims applied only what the copies' applied vectors say
    /// (merged above), never an entry for being logged: a node added back
    /// after a removal keeps in its log updates it no longer claims or
    /// holds (what only it had), and so may an Eventual sender past a gap.
    /// Those are logged unclaimed: they are sent on, and come back here
    /// from the members that apply them.
    fn adopt_logs(&mut self, used: &[CopyIn]) {
        for u in used.iter().flat_map(|c| &c.log) {
            self.upd
                .log
                .entry(u.id)
                .or_insert_with(|| (u.clone(), self.now));
        }
    }

    /// Persist the adopted version of `k` unless it is durable already.
    fn make_durable(&mut self, k: Key, out: &mut Out) {
        let scoped = self.rules.persist == PersistIssue::AtScope;
        let s = self.key(k);
        let Some(v) = s.version(k) else { return };
        if s.nvm >= v.ts {
            if s.durable.is_none_or(|d| d.0 < v.ts) {
                s.durable = Some((v.ts, v.value, s.id));
            }
        } else if !scoped {
            let id = s.id;
            let token = self.token(Wait::Adopt { v, id });
            out.push(Command::Persist {
                token,
                record: Record::Key(v),
            });
            *self.upd.adopting.as_mut().expect("adopting") += 1;
        }
    }

    pub(crate) fn adopt_landed(&mut self, v: Version, id: Option<UpdId>, out: &mut Out) {
        self.upd_landed(v, id, out);
        if let Some(n) = self.upd.adopting.as_mut() {
            *n -= 1;
        }
        self.finish_adopting(out);
    }

    fn finish_adopting(&mut self, out: &mut Out) {
        if self.upd.adopting != Some(0) {
            return;
        }
        self.upd.adopting = None;
        self.ready = true;
        for (session, req, op) in std::mem::take(&mut self.parked) {
            self.step_client(session, req, op, out);
        }
    }

    /// After `load`: the NVM's versions are this era's base state, durable,
    /// with no update ids; nothing is unsettled in the INV family's sense.
    pub(crate) fn upd_loaded(&mut self) {
        // A restart is a new life: a later incarnation than any in NVM (the
        // first life, which persisted none, was 0), durable before it writes.
        if !self.bugs.reuse_origin {
            self.upd.origin.since = self.upd.origin.since.max(1);
            self.upd.incarnation_durable = false;
        }
        self.unsettled.clear();
        for s in self.keys.values_mut() {
            s.durable = s.value.filter(|_| s.nvm >= s.ts).map(|v| (s.ts, v, None));
        }
    }
}
