//! HEAL for ⟨Lin, Event⟩ (a gap the HEAL paper leaves, O-2 in docs/HEAL.md):
//! Eventual persistency writes back lazily and has no Global Durability Point,
//! so a write can commit (VAL_c, client answered) and never be persisted at a
//! node that then crashes; neither its NVM nor any `MissedUpdates` would hold
//! it.
//!
//! Decision: under HEAL, Event gets a *lazy* GDP, off the client's path.
//! A node whose write-back lands tells the version's coordinator (ACK_p);
//! once every member and the coordinator itself hold it, the coordinator
//! sends VAL_p, the GDP. A write not yet at its GDP when a node drops out
//! reaches it during the EFN, without that node (the coordinator stops
//! waiting for non-members), so it lands in every `MissedUpdates`. One
//! whose coordinator is the node that crashed stays short of its GDP at
//! the others, who ship it back in `Recov_start_ACK` (`inflight`).
//! Followers resend their ACK_p for persisted versions still short of
//! their GDP (lost messages); a coordinator forgets a version superseded here.

use crate::heal::state::LazyWrite;
use crate::model::PersistIssue;
use crate::node::{DdpNode, Out};
use crate::types::{Key, Msg, Ts};
use std::collections::BTreeSet;
use tandem_net::{Command, NodeId};

impl DdpNode {
    /// HEAL under Eventual persistency (the INV family).
    pub(crate) fn heal_lazy(&self) -> bool {
        self.heal.is_some()
            && self.rules.persist == PersistIssue::Lazy
            && self.rules.upd.is_none()
            && self.rules.trans.is_none()
    }

    /// CGVP of a write this node coordinates: track its lazy GDP.
    pub(crate) fn lazy_track(&mut self, key: Key, ts: Ts, skip: Vec<NodeId>) {
        if !self.heal_lazy() {
            return;
        }
        let local = self.keys.get(&key).is_some_and(|s| s.nvm >= ts);
        let h = self.heal.as_mut().expect("HEAL");
        h.lazy.insert(
            key,
            LazyWrite {
                ts,
                acks: BTreeSet::new(),
                local,
                skip,
            },
        );
    }

    /// A version landed here: count it (coordinator) or say so (ACK_p).
    pub(crate) fn lazy_persisted(&mut self, key: Key, ts: Ts, out: &mut Out) {
        if !self.heal_lazy() {
            return;
        }
        if let Some(w) = self
            .heal
            .as_mut()
            .and_then(|h| h.lazy.get_mut(&key))
            .filter(|w| w.ts <= ts)
        {
            w.local = true;
            return self.lazy_check(key, out);
        }
        if ts.node != self.me && self.keys.get(&key).is_some_and(|s| s.ts == ts) {
            out.push(Command::Send {
                to: ts.node,
                msg: Msg::Ack {
                    key,
                    ts,
                    epoch: self.config.epoch,
                    c: false,
                    p: true,
                },
            });
        }
    }

    /// A member's ACK_p for a version coordinated here (true: it was one).
    pub(crate) fn lazy_ack(&mut self, from: NodeId, key: Key, ts: Ts, out: &mut Out) -> bool {
        let Some(w) = self
            .heal
            .as_mut()
            .and_then(|h| h.lazy.get_mut(&key))
            .filter(|w| w.ts == ts)
        else {
            return false;
        };
        w.acks.insert(from);
        self.lazy_check(key, out);
        true
    }

    /// Every member and this node hold it: VAL_p, the GDP. A version
    /// superseded here is dropped (the newer one gets its own GDP).
    pub(crate) fn lazy_check(&mut self, key: Key, out: &mut Out) {
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let cur = self.keys.get(&key).map_or(Ts::ZERO, |s| s.ts);
        let h = self.heal.as_mut().expect("HEAL");
        let Some(w) = h.lazy.get(&key) else { return };
        if cur > w.ts {
            h.lazy.remove(&key);
            return;
        }
        if w.local
            && others
                .iter()
                .all(|o| w.acks.contains(o) || w.skip.contains(o))
        {
            let ts = w.ts;
            h.lazy.remove(&key);
            out.push(Command::Broadcast {
                msg: Msg::Val {
                    key,
                    ts,
                    c: false,
                    p: true,
                    epoch: self.config.epoch,
                },
            });
            let s = self.key(key);
            s.val_p = s.val_p.max(ts);
            self.reached_gdp(key, ts);
        }
    }

    /// After a configuration change (members left) and on the tick: finish
    /// what can finish; resend ACK_p for persisted versions short of their GDP.
    pub(crate) fn lazy_tick(&mut self, out: &mut Out) {
        if !self.heal_lazy() {
            return;
        }
        let mut keys: Vec<Key> = self
            .heal
            .as_ref()
            .expect("HEAL")
            .lazy
            .keys()
            .copied()
            .collect();
        keys.sort_unstable();
        for key in keys {
            self.lazy_check(key, out);
        }
        let mut waiting: Vec<Key> = self.heal.as_ref().expect("HEAL").ungdp_keys().collect();
        waiting.sort_unstable();
        for key in waiting {
            let Some(&s) = self.keys.get(&key).map(|s| (s.ts, s.nvm)).as_ref() else {
                continue;
            };
            if s.1 >= s.0 && s.0.node != self.me {
                out.push(Command::Send {
                    to: s.0.node,
                    msg: Msg::Ack {
                        key,
                        ts: s.0,
                        epoch: self.config.epoch,
                        c: false,
                        p: true,
                    },
                });
            }
        }
    }
}
