//! HEAL (Psistakis, Ocalan, Chaix, Alagappan, Torrellas, *HEAL: Online
//! Incremental Recovery for Leaderless Distributed Systems Across
//! Persistency Models*, arXiv:2602.08257, 2026, §V; cited as "HEAL" below):
//! online incremental recovery of a
//! crashed node for ⟨Lin, X⟩, on the INV/ACK/VAL engine. This file is the
//! live nodes' side: GDP flags in NVM, the `MissedUpdates` buffer, and the
//! answers to `Recov_start`, `CatchUp_req` and `Recov_end`. The recovering
//! node (ShadowReplica, Partially_persisted list, Buddy) is `heal/recovering.rs`.
//!
//! Open points settled (numbered as in docs/HEAL.md):
//! - O-1: every live node keeps recording from the configuration that drops
//!   a node until that node's `Recov_end`. A follower takes no INV of a
//!   configuration it has not installed yet, so an update of the EFN
//!   reaches its GDP only where recording is on. `Recov_start_ACK` goes out
//!   only from the recovering node's configuration on (every older write
//!   was completed or replayed to it by then), and the Buddy ships the
//!   versions it holds unvalidated beside its buffer (`pending`): a write
//!   whose VAL reaches the Buddy after it answered is already at the
//!   recovering node.
//! - O-3: the cap counts entries; on overflow the buffer is dropped and the
//!   recovering node falls back to a full copy.
//! - O-8: `CatchUp_req` carries `(key, ts)` only; the Buddy answers an
//!   unmarked entry with its own version of the key, so the recovering node
//!   never needs an older version its NVM slot overwrote.
//! - O-9: `Recov_end` is acknowledged and resent until every member has it.
//! - GDP flags are written lazily, on the tick: a clear flag only costs a
//!   check at the Buddy, a flag set early would lose data, so flags are
//!   never written before the GDP and may lag it.

mod lazy;
mod noshadow;
mod recovering;
pub mod state;

use crate::heal::state::Heal;
use crate::heal::state::SCAN_TOKEN;
use crate::node::{DdpNode, Out};
use crate::types::CatchUpResp;
use crate::types::Validity;
use crate::types::{Key, Msg, Record, Ts, Version};
use tandem_net::{Command, NodeId, NO_ANSWER};

impl DdpNode {
    /// A store that exists before the run: keys `0..records` at version 1
    /// of node 0, committed and persisted everywhere. Returns the NVM
    /// records that go with it (with GDP flags under HEAL).
    pub fn preload(&mut self, records: u64) -> Vec<Record> {
        let ts = Ts {
            version: 1,
            node: 0,
        };
        let heal = self.heal.is_some();
        let mut nvm = Vec::with_capacity(records as usize * if heal { 2 } else { 1 });
        self.keys.reserve(records as usize);
        for key in 0..records {
            let s = self.key(key);
            (s.ts, s.value, s.val_c, s.val_p, s.nvm) = (ts, Some(key), ts, ts, ts);
            nvm.push(Record::Key(Version {
                key,
                ts,
                value: key,
            }));
            if heal {
                nvm.push(Record::Gdp { key, ts });
            }
        }
        nvm
    }

    fn heal_mut(&mut self) -> Option<&mut Heal> {
        self.heal.as_deref_mut()
    }

    /// The update `key@ts` reached this node's GDP (CGDP at its coordinator,
    /// FGDP at a follower): flag it and record it while a node is away.
    pub(crate) fn reached_gdp(&mut self, key: Key, ts: Ts) {
        self.reached_gdp_in(key, ts, 0)
    }

    /// The same, for a GDP a coordinator declared over the members of
    /// configuration `epoch`. If this node has not installed it yet, the
    /// version is recorded when it does: that configuration may drop a
    /// node this one has not heard left (staggered announcements).
    pub(crate) fn reached_gdp_in(&mut self, key: Key, ts: Ts, epoch: u64) {
        let (mine, old_view) = (self.config.epoch, self.bugs.heal_gdp_old_view);
        let Some(value) = self
            .keys
            .get(&key)
            .filter(|s| s.ts == ts)
            .and_then(|s| s.value)
        else {
            return;
        };
        let later = epoch > mine && !old_view;
        if !later && self.heal.is_some() {
            self.assert_gdp_epoch(key, ts, epoch);
        }
        let Some(h) = self.heal_mut() else { return };
        h.ungdp.remove(&key);
        h.flag(key, ts);
        let (opts, v) = (h.opts, Version { key, ts, value });
        match later {
            true => h.early_gdps.push((v, epoch)),
            false => h.missed.record(v, &opts),
        }
    }

    /// Write the GDP flags gathered since the last tick.
    pub(crate) fn heal_tick(&mut self, out: &mut Out) {
        let Some(h) = self.heal_mut() else { return };
        let flags = std::mem::take(&mut h.flags);
        for (key, ts) in flags {
            out.push(Command::Persist {
                token: NO_ANSWER,
                record: Record::Gdp { key, ts },
            });
        }
        self.rr_tick(out);
        self.lazy_tick(out);
    }

    /// A configuration: nodes it drops are away until their `Recov_end`.
    pub(crate) fn heal_reconfigure(&mut self, out: &mut Out) {
        let (me, members, epoch, trim_early, checks) = (
            self.me,
            self.config.members.clone(),
            self.config.epoch,
            self.bugs.heal_trim_early,
            self.checks(),
        );
        let online = self.heal_online();
        let Some(h) = self.heal_mut() else { return };
        h.universe.extend(members.iter().copied());
        let away: Vec<NodeId> = h
            .universe
            .iter()
            .copied()
            .filter(|n| !members.contains(n) && !h.missed.absent.contains(n) && *n != me)
            .collect();
        if online && !h.missed.overflowed {
            h.covers.extend(away.iter().copied());
        }
        let dropped: Vec<NodeId> = h
            .universe
            .iter()
            .copied()
            .filter(|n| {
                !members.contains(n) && (h.members.contains(n) || !h.dropped_at.contains_key(n))
            })
            .collect();
        for n in dropped {
            h.dropped_at.insert(n, epoch);
        }
        h.members = members.iter().copied().collect();
        h.missed.absent.extend(away);
        let (due, later) = std::mem::take(&mut h.early_gdps)
            .into_iter()
            .partition::<Vec<_>, _>(|g| g.1 <= epoch);
        h.early_gdps = later;
        let opts = h.opts;
        due.into_iter().for_each(|g| h.missed.record(g.0, &opts));
        if trim_early && h.missed.absent.iter().all(|n| members.contains(n)) {
            // Mutant: the buffer is dropped when the node rejoins, before
            // its recovery has read it.
            h.missed.trim(checks);
        }
        let due: Vec<NodeId> = h
            .early_starts
            .iter()
            .filter(|s| s.1 <= epoch)
            .map(|s| s.0)
            .collect();
        h.early_starts.retain(|s| s.1 > epoch);
        for rr in due {
            self.on_recov_start(rr, epoch, out);
        }
        self.rr_reconfigure(out);
    }

    /// No recovery under way that involves this node: its own is over, and
    /// every member it records for has ended its recovery.
    pub(crate) fn heal_quiet(&self) -> bool {
        self.heal.as_ref().is_none_or(|h| {
            h.rr.is_none()
                && h.missed
                    .absent
                    .iter()
                    .all(|n| !self.config.members.contains(n))
        })
    }

    /// Serving clients, not recovering itself.
    pub(crate) fn heal_online(&self) -> bool {
        self.ready && self.heal.as_ref().is_some_and(|h| h.rr.is_none())
    }

    pub(crate) fn on_recov_start(&mut self, rr: NodeId, epoch: u64, out: &mut Out) {
        let (mine, online, exclude) = (
            self.config.epoch,
            self.heal_online(),
            self.bugs.heal_no_shadow,
        );
        let Some(h) = self.heal_mut() else { return };
        if epoch > mine {
            // Answer from that configuration on (O-1).
            h.early_starts.push((rr, epoch));
            return;
        }
        if (h.opts.no_shadow || exclude) && h.included_from.get(&rr).is_none_or(|&i| i < epoch) {
            // NoShadow (or its mutant, which never hands over): writes go without it.
            let e = h.excluded.entry(rr).or_insert(epoch);
            *e = (*e).max(epoch);
        }
        let buddy = online && h.covers.contains(&rr) && !h.missed.overflowed;
        let inflight = self.inflight_of(rr);
        out.push(Command::Send {
            to: rr,
            msg: Msg::RecovStartAck {
                epoch,
                online: buddy,
                inflight,
            },
        });
    }

    /// Versions `rr` coordinated that this node holds short of their GDP.
    fn inflight_of(&self, rr: NodeId) -> Vec<(Version, Validity)> {
        let h = self.heal.as_ref().expect("HEAL");
        let mut keys: Vec<Key> = h
            .ungdp
            .iter()
            .copied()
            .filter(|k| self.keys.get(k).is_some_and(|s| s.ts.node == rr))
            .collect();
        keys.sort_unstable();
        keys.into_iter().filter_map(|k| self.known(k)).collect()
    }

    /// The Buddy's three-way comparison (HEAL §V-C, Table II), plus what it
    /// holds unvalidated and its buffer.
    pub(crate) fn on_catchup_req(
        &mut self,
        rr: NodeId,
        epoch: u64,
        partial: Vec<(Key, Ts)>,
        (round, after): (u32, u64),
        out: &mut Out,
    ) {
        if self.heal.is_none() {
            return;
        }
        let mut resp = CatchUpResp {
            round,
            ..CatchUpResp::default()
        };
        for (key, t_in) in partial {
            match self.known(key) {
                Some((v, at)) if v.ts == t_in => resp.marked.push((key, t_in, at)),
                _ if self.bugs.heal_no_ts_compare => {
                    resp.marked
                        .push((key, t_in, Validity { c: true, gdp: true }))
                }
                cur => resp.unmarked.push((key, t_in, cur)),
            }
        }
        if !self.bugs.heal_no_pending {
            resp.pending = self.unvalidated();
        }
        self.assert_marked(&resp);
        self.assert_pending(&resp);
        let h = self.heal.as_mut().expect("checked");
        (resp.missed, resp.overflowed, resp.seq) =
            (h.missed.snapshot(after), h.missed.overflowed, h.missed.seq);
        let msg = Msg::CatchUpResp {
            epoch,
            resp: Box::new(resp),
        };
        match h.opts.reactive_read_ns {
            0 => out.push(Command::Send { to: rr, msg }),
            ns => {
                let due = self.now + ns * <DdpNode as tandem_net::Protocol>::weight(&msg);
                h.scans.push((due, rr, msg));
                out.push(Command::SetTimer {
                    token: SCAN_TOKEN,
                    at_ns: due,
                });
            }
        }
    }

    /// Reactive ablation: send the answers whose NVM scan is over.
    pub(crate) fn heal_scanned(&mut self, out: &mut Out) {
        let now = self.now;
        let Some(h) = self.heal.as_mut() else { return };
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut h.scans)
            .into_iter()
            .partition(|s| s.0 <= now);
        h.scans = later;
        out.extend(
            due.into_iter()
                .map(|(_, to, msg)| Command::Send { to, msg }),
        );
    }

    /// A version of `key` was applied here: it has not reached its GDP.
    pub(crate) fn heal_applied(&mut self, key: Key) {
        if let Some(h) = self.heal_mut() {
            h.ungdp.insert(key);
        }
    }

    /// This node's version of `key` and how far it got here.
    pub(crate) fn known(&self, key: Key) -> Option<(Version, Validity)> {
        let gdp = self.heal.as_ref().is_some_and(|h| !h.ungdp.contains(&key));
        self.keys
            .get(&key)
            .and_then(|s| s.version(key).map(|v| (v, Validity { c: s.c_ok(), gdp })))
    }

    /// Versions applied here that have not reached their GDP here, in key order.
    fn unvalidated(&self) -> Vec<(Version, Validity)> {
        let h = self.heal.as_ref().expect("HEAL");
        let mut keys: Vec<Key> = h.ungdp.iter().copied().collect();
        keys.sort_unstable();
        keys.into_iter().filter_map(|k| self.known(k)).collect()
    }

    pub(crate) fn on_recov_end(&mut self, rr: NodeId, epoch: u64, out: &mut Out) {
        let checks = self.checks();
        let Some(h) = self.heal_mut() else { return };
        if h.dropped_at.get(&rr).is_some_and(|&d| epoch < d) {
            return; // from a recovery before the node's last absence
        }
        h.missed.absent.remove(&rr);
        h.covers.remove(&rr);
        h.include(rr, epoch);
        if h.missed.absent.is_empty() {
            h.missed.trim(checks);
            h.missed.overflowed = false;
        }
        out.push(Command::Send {
            to: rr,
            msg: Msg::RecovEndAck { epoch },
        });
    }
}
