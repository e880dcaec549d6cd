//! The UPD family's receiving side (DDP §5.2–5.3, the followers of Figs.
//! 2(f), 2(h), 3(d); docs/DDP.md for the other models): an UPD
//! is persisted on receipt and ACK_p'd (Strict), buffered until its turn
//! (its origin's earlier updates, then its cauhist: applied or persisted
//! here, docs/DDP.md open point 7), applied by last writer wins, and persisted as the
//! persistency model says. Persist landings advance what counts as durable.

use tandem_net::Command;

use crate::model::{DepGate, PersistIssue};
use crate::node::{DdpNode, Out, Wait};
use crate::types::{Msg, Record, Upd, Version};
use crate::upd::vector::UpdId;

impl DdpNode {
    /// UPDs (first sends, resends or relays; possibly duplicates).
    pub(crate) fn on_upd(&mut self, upds: Vec<Upd>, out: &mut Out) {
        let strict = self.upd_rules().strict;
        for u in upds {
            self.note_life(u.id.origin);
            if self.is_orphan(&u) {
                continue; // never applies anywhere: not persisted either
            }
            if strict {
                // Strict: the DP precedes the VP, even while buffered (§9.4).
                self.persist_once(u.v, Some(u.id), out);
                self.ack_p(u.v, out);
            }
            if !self.upd.knows_applied(u.id) {
                self.upd.buffer.entry(u.id).or_insert(u);
            }
        }
    }

    /// ACK_p to the write's coordinator once `v` (or newer) is durable here.
    fn ack_p(&mut self, v: Version, out: &mut Out) {
        let (to, epoch, early) = (v.ts.node, self.config.epoch, self.bugs.val_before_persist);
        if to == self.me {
            return;
        }
        let s = self.key(v.key);
        if s.nvm >= v.ts || early {
            self.assert_ack_p(v.key, v.ts);
            out.push(Command::Send {
                to,
                msg: Msg::Ack {
                    key: v.key,
                    ts: v.ts,
                    epoch,
                    c: false,
                    p: true,
                },
            });
        } else {
            s.owed.push((to, v.ts, epoch, false));
        }
    }

    /// Apply every buffered update whose turn has come, to a fixpoint.
    pub(crate) fn drain_buffer(&mut self, out: &mut Out) {
        if !self.ready {
            return;
        }
        while let Some(id) = self.next_applicable() {
            let u = self.upd.buffer.remove(&id).expect("found");
            if !self.upd.knows_applied(id) {
                self.apply_upd(&u, out);
            }
        }
    }

    /// The first buffered update (in id order) that may apply now. Under
    /// Causal an origin's updates apply in order, so past its applied
    /// prefix only the next one can (or one already applied out of order):
    /// one look per origin instead of a scan of the whole buffer.
    fn next_applicable(&self) -> Option<UpdId> {
        let scan_all = !self.upd_rules().causal || self.bugs.causal_early_apply;
        let mut from = self.upd.buffer.keys().next().copied()?;
        loop {
            let o = from.origin;
            let head = UpdId {
                origin: o,
                seq: self.upd.applied.get(o) + 1,
            };
            let mut of_origin = self
                .upd
                .buffer
                .range(from..)
                .take_while(|(id, _)| id.origin == o);
            let found = if scan_all || self.upd.extra.contains_key(&o) {
                of_origin.find(|(_, u)| self.may_apply(u))
            } else {
                of_origin
                    .take_while(|(id, _)| id.seq <= head.seq)
                    .find(|(_, u)| self.may_apply(u))
            };
            if let Some((&id, _)) = found {
                return Some(id);
            }
            let next_origin = UpdId {
                origin: o,
                seq: u64::MAX,
            };
            from = *self
                .upd
                .buffer
                .range((
                    std::ops::Bound::Excluded(next_origin),
                    std::ops::Bound::Unbounded,
                ))
                .next()?
                .0;
        }
    }

    /// Causal: the origin's previous update is applied and the cauhist is
    /// applied or persisted here (docs/DDP.md open point 7). Eventual: on arrival.
    fn may_apply(&self, u: &Upd) -> bool {
        let r = self.upd_rules();
        if self.upd.knows_applied(u.id) || !r.causal || self.bugs.causal_early_apply {
            return true;
        }
        let in_order = self.upd.applied.get(u.id.origin) + 1 == u.id.seq;
        in_order
            && match r.gate {
                DepGate::Persisted => self.upd.persisted_covers(&u.deps),
                DepGate::Applied | DepGate::None => self.upd.applied.covers(&u.deps),
            }
    }

    /// Apply `u` here (last writer wins) and persist it as the model says.
    pub(crate) fn apply_upd(&mut self, u: &Upd, out: &mut Out) {
        self.assert_causal_apply(u);
        let (r, now, mine) = (self.upd_rules(), self.now, u.id.origin == self.upd.origin);
        let s = self.key(u.v.key);
        if u.v.ts > s.ts {
            (s.ts, s.value, s.id) = (u.v.ts, Some(u.v.value), Some(u.id));
        }
        let durable = s.nvm >= u.v.ts;
        let back = self.upd.log.contains_key(&u.id);
        let s = self.key(u.v.key);
        if back && s.nvm == u.v.ts && s.ts == u.v.ts && s.durable.is_none_or(|d| d.0 < u.v.ts) {
            // This very update is in NVM already: a node added back took
            // the copies' (older) state and now gets its own update back
            // (it is still in its log). Synch reads return the durable
            // version, so it must be this one.
            s.durable = Some((u.v.ts, u.v.value, Some(u.id)));
        }
        self.mark_applied(u.id);
        self.upd.applied_now.push(u.v);
        self.upd.log.insert(u.id, (u.clone(), now));
        if r.gate == DepGate::Persisted && !durable {
            self.upd
                .undurable
                .entry(u.id.origin)
                .or_default()
                .insert(u.id.seq, (u.v.key, u.v.ts));
            self.upd
                .undurable_keys
                .entry(u.v.key)
                .or_default()
                .push((u.id, u.v.ts));
            self.upd.touched();
        }
        match self.rules.persist {
            // Strict persisted it on receipt (or at the write).
            PersistIssue::OnReceipt | PersistIssue::AtScope => {}
            PersistIssue::Lazy => {
                self.dirty.insert(u.v.key);
            }
            // Own writes persist once their cauhist is persisted here (C2).
            PersistIssue::AtApply if mine && !self.upd.persisted_covers(&u.deps) => {
                self.upd.held.push(u.clone())
            }
            PersistIssue::AtApply => self.persist_once(u.v, Some(u.id), out),
        }
    }

    /// Add `id` to the applied prefix (or beyond it).
    fn mark_applied(&mut self, id: UpdId) {
        let (o, upd) = (id.origin, &mut self.upd);
        let prefix = upd.applied.get(o);
        if id.seq != prefix + 1 {
            if id.seq > prefix {
                upd.extra.entry(o).or_default().insert(id.seq);
            }
            return;
        }
        let mut upto = id.seq;
        if let Some(extra) = upd.extra.get_mut(&o) {
            while extra.remove(&(upto + 1)) {
                upto += 1;
            }
            if extra.is_empty() {
                upd.extra.remove(&o);
            }
        }
        upd.applied.raise(o, upto);
        upd.touched();
    }

    /// Persist `v` unless this or a newer version of its key is persisted
    /// or being persisted here.
    pub(crate) fn persist_once(&mut self, v: Version, id: Option<UpdId>, out: &mut Out) {
        let issued = self.upd.issued.get(&v.key).copied().unwrap_or_default();
        let nvm = self.keys.get(&v.key).map_or(Default::default(), |s| s.nvm);
        if v.ts > issued.max(nvm) {
            self.upd.issued.insert(v.key, v.ts);
            let token = self.token(Wait::Upd { v, id });
            out.push(Command::Persist {
                token,
                record: Record::Key(v),
            });
        }
    }

    /// Issue the persists of own writes whose cauhist is now persisted here.
    pub(crate) fn release_held(&mut self, out: &mut Out) {
        if self.upd.held.is_empty() {
            return;
        }
        for u in std::mem::take(&mut self.upd.held) {
            if self.upd.persisted_covers(&u.deps) {
                self.persist_once(u.v, Some(u.id), out);
            } else {
                self.upd.held.push(u);
            }
        }
    }

    /// `v` landed in this node's NVM.
    pub(crate) fn upd_landed(&mut self, v: Version, id: Option<UpdId>, out: &mut Out) {
        let s = self.key(v.key);
        s.nvm = s.nvm.max(v.ts);
        if s.durable.is_none_or(|d| d.0 < v.ts) {
            s.durable = Some((v.ts, v.value, id));
        }
        let nvm = s.nvm;
        let (due, still): (Vec<_>, Vec<_>) = std::mem::take(&mut s.owed)
            .into_iter()
            .partition(|o| o.1 <= nvm);
        s.owed = still;
        for (to, ts, epoch, _) in due {
            out.push(Command::Send {
                to,
                msg: Msg::Ack {
                    key: v.key,
                    ts,
                    epoch,
                    c: false,
                    p: true,
                },
            });
        }
        self.upd.now_durable(v.key, nvm);
        let strict: Vec<_> = self
            .upd
            .strict
            .keys()
            .filter(|(k, ts)| *k == v.key && *ts <= nvm)
            .copied()
            .collect();
        for (k, ts) in strict {
            self.try_strict(k, ts, out);
        }
    }
}
