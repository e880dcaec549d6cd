//! HEAL's state: what the live nodes keep (`Heal`, `MissedUpdates`) and what
//! the recovering node keeps (`RecoveringReplica`, its phases and timeline,
//! a lazy write, a NoShadow chase). No behaviour here: `DdpNode`'s methods
//! are in the sibling files.

use crate::fast_hash::FastMap;
use crate::types::{Key, Msg, Ts, Version};
use std::collections::{BTreeMap, BTreeSet};
use tandem_net::NodeId;

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
    /// The NoShadow ablation (`heal/noshadow.rs`): the recovering
    /// node takes no part in writes until it has chased its Buddy's buffer
    /// down in rounds; only the last round runs with it as a ShadowReplica.
    pub no_shadow: bool,
}

/// The timer a Reactive Buddy's NVM scan ends on (the tick's is 0).
pub(crate) const SCAN_TOKEN: tandem_net::Token = 1;

impl HealOpts {
    /// The models HEAL recovers: ⟨Lin, X⟩ for all five persistency models
    /// (Event with a lazy GDP, `heal/lazy.rs`; Scope's GDP at the scope's
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

    pub(crate) fn record(&mut self, v: Version, opts: &HealOpts) {
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

    pub(crate) fn clear(&mut self) {
        self.map = FastMap::default();
        self.log = Vec::new();
    }

    /// Drop the buffer: every node it recorded for has ended its recovery
    /// (`check`: assert it, `heal-trim`; C9, C11: a recovery still under
    /// way reads the buffer).
    pub(crate) fn trim(&mut self, check: bool) {
        if check {
            assert!(
                self.absent.is_empty(),
                "heal-trim (C11): MissedUpdates trimmed while {:?} have not sent their Recov_end",
                self.absent
            );
        }
        self.clear();
    }

    /// The entries recorded after the `after`-th update.
    pub(crate) fn snapshot(&self, after: u64) -> Vec<Version> {
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
    pub(crate) universe: BTreeSet<NodeId>,
    /// GDP flags not yet written (written on the tick).
    pub(crate) flags: BTreeMap<Key, Ts>,
    /// Away nodes this node recorded for since they left (it can be their Buddy).
    pub(crate) covers: BTreeSet<NodeId>,
    /// The configuration that last dropped each away node (older `Recov_end`s are stale).
    pub(crate) dropped_at: BTreeMap<NodeId, u64>,
    /// The members of the last configuration seen.
    pub(crate) members: BTreeSet<NodeId>,
    /// Keys whose newest version here has not reached its GDP yet.
    pub(crate) ungdp: std::collections::HashSet<Key>,
    /// ⟨Lin, Event⟩: versions coordinated here waiting for their lazy GDP (`heal/lazy.rs`).
    pub(crate) lazy: FastMap<Key, LazyWrite>,
    /// HEAL-NoShadow: recovering nodes left out of writes, with the
    /// configuration of their `Recov_start` (until their `ShadowStart`).
    pub(crate) excluded: BTreeMap<NodeId, u64>,
    /// The latest configuration whose `ShadowStart` or `Recov_end` each
    /// node sent: a `Recov_start` of it or older (resent, duplicated) must
    /// not leave the node out again.
    pub(crate) included_from: BTreeMap<NodeId, u64>,
    /// `Recov_start`s from configurations not installed here yet.
    pub(crate) early_starts: Vec<(NodeId, u64)>,
    /// Versions whose GDP a coordinator declared in a configuration not
    /// installed here yet: recorded in `missed` once it is, since that
    /// configuration may leave out a node this one still counts as a member.
    pub(crate) early_gdps: Vec<(Version, u64)>,
    /// The recovering node's state (while this node recovers).
    pub rr: Option<RecoveringReplica>,
    /// What the last recovery of this node took (for the experiments).
    pub last: Option<Timeline>,
    /// Reactive ablation: answers waiting for their NVM scan (due, to whom, what).
    pub(crate) scans: Vec<(u64, NodeId, Msg)>,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Restarted, not in the configuration yet.
    Restored,
    /// `Recov_start` sent; waiting for every `Recov_start_ACK`.
    Starting,
    /// `CatchUp_req` sent to the Buddy.
    CatchingUp,
    /// Applying the answer to NVM (the critical path).
    Applying,
    /// HEAL-NoShadow: `ShadowStart` sent, waiting for every member's ACK.
    Handoff,
    /// Recovering by a full copy instead.
    FullCopy,
    /// Online; `Recov_end` sent, waiting for its ACKs.
    Ending,
}

/// When each step of the last recovery happened (simulated or host ns) and
/// what it moved (HEAL Fig. 8: Start_to_ACK, CatchUp_to_Resp, Apply_to_end).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The configuration that re-added the node (the recovery starts).
    pub start_ns: u64,
    pub acks_ns: u64,
    pub req_ns: u64,
    pub resp_ns: u64,
    pub online_ns: u64,
    pub partial: usize,
    pub marked: usize,
    pub missed: usize,
    pub pending: usize,
    /// `CatchUp_req` rounds (1 but under HEAL-NoShadow).
    pub rounds: u32,
    /// Restarts of the steps (configuration changes during recovery).
    pub attempts: u32,
    pub full_copy: bool,
}

#[derive(Clone, Debug)]
pub struct RecoveringReplica {
    pub phase: Phase,
    pub(crate) epoch: u64,
    pub(crate) partial: BTreeMap<Key, Version>,
    pub(crate) acks: BTreeMap<NodeId, bool>,
    pub(crate) buddy: Option<NodeId>,
    pub(crate) applying: usize,
    pub(crate) end_acks: BTreeSet<NodeId>,
    pub(crate) sent_at: u64,
    /// Wait before resending (doubles: the Buddy's answer may be large).
    pub(crate) wait: u64,
    pub timeline: Timeline,
    pub(crate) chase: Chase,
}

impl RecoveringReplica {
    pub(crate) fn new(partial: BTreeMap<Key, Version>) -> RecoveringReplica {
        let timeline = Timeline {
            partial: partial.len(),
            ..Timeline::default()
        };
        RecoveringReplica {
            phase: Phase::Restored,
            epoch: 0,
            partial,
            acks: BTreeMap::new(),
            buddy: None,
            applying: 0,
            end_acks: BTreeSet::new(),
            sent_at: 0,
            wait: 0,
            timeline,
            chase: Default::default(),
        }
    }

    /// The `CatchUp_req` of the current round.
    pub(crate) fn catchup_req(&self) -> Msg {
        let partial = self.partial.values().map(|v| (v.key, v.ts)).collect();
        Msg::CatchUpReq {
            epoch: self.epoch,
            partial,
            round: self.chase.round,
            after: self.chase.after,
        }
    }
}

/// A version this node coordinated, waiting for its lazy GDP.
#[derive(Clone, Debug)]
pub(crate) struct LazyWrite {
    pub ts: Ts,
    pub acks: BTreeSet<NodeId>,
    pub local: bool,
    /// Members its INV did not go to (HEAL-NoShadow).
    pub skip: Vec<NodeId>,
}

/// Rounds before the RR hands over however the chase goes.
pub(crate) const MAX_ROUNDS: u32 = 16;

/// The RR's chase of its Buddy (rounds of `CatchUp_req`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Chase {
    pub round: u32,
    /// The Buddy's record count at its last answer.
    pub after: u64,
    /// Entries the last answer and the one before shipped.
    pub(crate) shipped: usize,
    pub(crate) before: usize,
    /// The handoff is done: this round's answer completes the recovery.
    pub last_round: bool,
    /// No member could be the Buddy: after the handoff, the full copy.
    pub then_copy: bool,
    pub shadow_acks: BTreeSet<NodeId>,
}

impl Chase {
    pub fn first() -> Chase {
        Chase {
            round: 1,
            ..Chase::default()
        }
    }

    pub fn answered(&mut self, seq: u64, shipped: usize) {
        (self.after, self.before, self.shipped) = (seq, self.shipped, shipped);
    }

    /// Stop chasing: the last answer shipped nothing, did not halve the
    /// one before, or the rounds ran out.
    pub(crate) fn handoff_due(&self) -> bool {
        self.shipped == 0
            || (self.round >= 2 && 2 * self.shipped > self.before)
            || self.round >= MAX_ROUNDS
    }
}
