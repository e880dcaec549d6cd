//! HEAL (Psistakis, Ocalan, Chaix, Alagappan, Torrellas, *HEAL: Online
//! Incremental Recovery for Leaderless Distributed Systems Across
//! Persistency Models*, arXiv:2602.08257, 2026, §V; cited as "HEAL" below):
//! online incremental recovery of a
//! crashed node for ⟨Lin, X⟩, on the INV/ACK/VAL engine. This file is the
//! live nodes' side: GDP flags in NVM, the `MissedUpdates` buffer, and the
//! answers to `Recov_start`, `CatchUp_req` and `Recov_end`. The recovering
//! node (ShadowReplica, Partially_persisted list, Buddy) is `heal_rr.rs`.
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

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tandem_net::{Command, NodeId, NO_ANSWER};

use crate::fast_hash::FastMap;
use crate::node::{DdpNode, Out};
use crate::types::{Key, Msg, Record, Ts, Version};

/// How HEAL is configured on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealOpts {
    /// Entries `MissedUpdates` may hold before it is discarded (O-3).
    pub missed_cap: usize,
    /// The paper's "modeled 256 GB" mode (§IX-A): every update is a fresh
    /// entry, as if every EFN update touched a distinct key.
    pub distinct: bool,
    /// The Reactive ablation (HEAL §II-C, Fig. 9): the Buddy reads what the node
    /// missed back from its NVM log when asked, this long per entry, instead
    /// of answering from the buffer it prepared in DRAM. 0: HEAL's way.
    pub reactive_read_ns: u64,
    /// The NoShadow ablation (`heal_noshadow.rs`): the recovering
    /// node takes no part in writes until it has chased its Buddy's buffer
    /// down in rounds; only the last round runs with it as a ShadowReplica.
    pub no_shadow: bool,
}

/// The timer a Reactive Buddy's NVM scan ends on (the tick's is 0).
pub(crate) const SCAN_TOKEN: tandem_net::Token = 1;

impl HealOpts {
    /// The models HEAL recovers: ⟨Lin, X⟩ for all five persistency models
    /// (Event with a lazy GDP, `heal_lazy.rs`; Scope's GDP at the scope's
    /// persist, `scope.rs`).
    pub fn supports(m: crate::Model) -> bool {
        m.c == crate::Consistency::Lin
    }
}

impl Default for HealOpts {
    fn default() -> Self {
        HealOpts {
            missed_cap: 1 << 20,
            distinct: false,
            reactive_read_ns: 0,
            no_shadow: false,
        }
    }
}

/// How far a version got at the Buddy: validated for consistency (VAL_c),
/// and past its GDP (so valid for every read rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validity {
    pub c: bool,
    pub gdp: bool,
}

/// The Buddy's answer (`CatchUp_resp`, HEAL §V-C).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatchUpResp {
    /// Partially_persisted entries the Buddy holds at the same ts: committed
    /// (or, still in flight there, certain to be, O-36).
    pub marked: Vec<(Key, Ts, Validity)>,
    /// The other entries, with the Buddy's own version of the key (None: it has none).
    pub unmarked: Vec<(Key, Ts, Option<(Version, Validity)>)>,
    /// The Buddy's `MissedUpdates`.
    pub missed: Vec<Version>,
    /// Versions the Buddy applied that have not reached their GDP there (O-1).
    pub pending: Vec<(Version, Validity)>,
    /// The buffer overflowed: recover by a full copy.
    pub overflowed: bool,
    /// The round it answers, and how many updates the Buddy had recorded
    /// when it answered (the next round's `after`).
    pub round: u32,
    pub seq: u64,
}

/// `MissedUpdates` (HEAL §V-B4): the latest committed update per key, kept
/// while some node is away (from the configuration that drops it to its
/// `Recov_end`). Each entry carries the count of updates recorded when it
/// was (HEAL-NoShadow's rounds ask for what came after their last answer).
#[derive(Clone, Debug, Default)]
pub struct MissedUpdates {
    pub map: FastMap<Key, (Version, u64)>,
    /// The distinct-keys mode's entries.
    pub log: Vec<(Version, u64)>,
    /// Updates recorded so far (never reset).
    pub seq: u64,
    /// Nodes dropped from the configuration whose `Recov_end` has not come.
    pub absent: BTreeSet<NodeId>,
    pub overflowed: bool,
    /// Most entries held at once (the paper's Table VI, in entries).
    pub peak: usize,
}

impl MissedUpdates {
    pub fn len(&self) -> usize {
        self.map.len() + self.log.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn record(&mut self, v: Version, opts: &HealOpts) {
        if self.absent.is_empty() || self.overflowed {
            return;
        }
        self.seq += 1;
        if opts.distinct {
            self.log.push((v, self.seq));
        } else if self.map.get(&v.key).is_none_or(|o| o.0.ts < v.ts) {
            self.map.insert(v.key, (v, self.seq));
        }
        if self.len() > opts.missed_cap {
            self.clear();
            self.overflowed = true;
        }
        self.peak = self.peak.max(self.len());
    }

    fn clear(&mut self) {
        self.map = FastMap::default();
        self.log = Vec::new();
    }

    /// The entries recorded after the `after`-th update.
    fn snapshot(&self, after: u64) -> Vec<Version> {
        let mut v: Vec<Version> = self
            .map
            .values()
            .chain(self.log.iter())
            .filter(|e| e.1 > after)
            .map(|e| e.0)
            .collect();
        v.sort_by_key(|v| (v.key, v.ts));
        v
    }
}

/// A node's HEAL state (both roles).
#[derive(Clone, Debug)]
pub struct Heal {
    pub opts: HealOpts,
    pub missed: MissedUpdates,
    /// Every node ever configured.
    universe: BTreeSet<NodeId>,
    /// GDP flags not yet written (written on the tick).
    flags: BTreeMap<Key, Ts>,
    /// Away nodes this node recorded for since they left (it can be their Buddy).
    covers: BTreeSet<NodeId>,
    /// The configuration that last dropped each away node (older `Recov_end`s are stale).
    dropped_at: BTreeMap<NodeId, u64>,
    /// The members of the last configuration seen.
    members: BTreeSet<NodeId>,
    /// Keys whose newest version here has not reached its GDP yet.
    ungdp: std::collections::HashSet<Key>,
    /// ⟨Lin, Event⟩: versions coordinated here waiting for their lazy GDP (`heal_lazy.rs`).
    pub(crate) lazy: FastMap<Key, crate::heal_lazy::LazyWrite>,
    /// HEAL-NoShadow: recovering nodes left out of writes, with the
    /// configuration of their `Recov_start` (until their `ShadowStart`).
    pub(crate) excluded: BTreeMap<NodeId, u64>,
    /// The latest configuration whose `ShadowStart` or `Recov_end` each
    /// node sent: a `Recov_start` of it or older (resent, duplicated) must
    /// not leave the node out again.
    pub(crate) included_from: BTreeMap<NodeId, u64>,
    /// `Recov_start`s from configurations not installed here yet.
    early_starts: Vec<(NodeId, u64)>,
    /// Versions whose GDP a coordinator declared in a configuration not
    /// installed here yet: recorded in `missed` once it is, since that
    /// configuration may leave out a node this one still counts as a member.
    early_gdps: Vec<(Version, u64)>,
    /// The recovering node's state (while this node recovers).
    pub rr: Option<crate::heal_rr::RecoveringReplica>,
    /// What the last recovery of this node took (for the experiments).
    pub last: Option<crate::heal_rr::Timeline>,
    /// Reactive ablation: answers waiting for their NVM scan (due, to whom, what).
    scans: Vec<(u64, NodeId, Msg)>,
}

impl Heal {
    pub fn new(opts: HealOpts, members: &[NodeId]) -> Heal {
        Heal {
            opts,
            missed: MissedUpdates::default(),
            universe: members.iter().copied().collect(),
            covers: BTreeSet::new(),
            dropped_at: BTreeMap::new(),
            members: members.iter().copied().collect(),
            excluded: BTreeMap::new(),
            included_from: BTreeMap::new(),
            ungdp: Default::default(),
            lazy: FastMap::default(),
            flags: BTreeMap::new(),
            early_starts: Vec::new(),
            early_gdps: Vec::new(),
            rr: None,
            last: None,
            scans: Vec::new(),
        }
    }
}

impl Heal {
    pub(crate) fn ungdp_keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.ungdp.iter().copied()
    }

    /// `rr` takes part in writes from configuration `epoch` on.
    pub(crate) fn include(&mut self, rr: NodeId, epoch: u64) {
        self.excluded.remove(&rr);
        let i = self.included_from.entry(rr).or_insert(epoch);
        *i = (*i).max(epoch);
    }

    /// Flag `key@ts` as globally durable (written on the next tick).
    pub(crate) fn flag(&mut self, key: Key, ts: Ts) {
        let f = self.flags.entry(key).or_insert(ts);
        *f = (*f).max(ts);
    }
}

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
        let Some(h) = self.heal_mut() else { return };
        h.ungdp.remove(&key);
        h.flag(key, ts);
        let (opts, v) = (h.opts, Version { key, ts, value });
        match epoch > mine && !old_view {
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
        let (me, members, epoch, trim_early) = (
            self.me,
            self.config.members.clone(),
            self.config.epoch,
            self.bugs.heal_trim_early,
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
            h.missed.clear();
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
        let Some(h) = self.heal_mut() else { return };
        if h.dropped_at.get(&rr).is_some_and(|&d| epoch < d) {
            return; // from a recovery before the node's last absence
        }
        h.missed.absent.remove(&rr);
        h.covers.remove(&rr);
        h.include(rr, epoch);
        if h.missed.absent.is_empty() {
            h.missed.clear();
            h.missed.overflowed = false;
        }
        out.push(Command::Send {
            to: rr,
            msg: Msg::RecovEndAck { epoch },
        });
    }
}
