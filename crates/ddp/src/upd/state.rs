//! The state of the UPD family (Causal and Eventual consistency): what a
//! node keeps per key and per origin, strict writes in flight, copies
//! coming in. Behaviour is in the sibling files.

use crate::fast_hash::FastMap;
use crate::types::{Key, Op, Ts, Upd, Value, Version};
use crate::upd::vector::{Origin, UpdId, Vector};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use tandem_net::{NodeId, SessionId};

/// Eventual consistency flushes its queued UPDs at this many.
pub const BATCH: usize = 16;

/// A Strict write waiting for every ACK_p and its own persist.
#[derive(Clone, Debug)]
pub(crate) struct StrictWrite {
    pub client: (SessionId, u64),
    pub upd: Upd,
    pub acks: BTreeSet<NodeId>,
    pub sent_at: u64,
}

/// A copy a catching-up node received.
#[derive(Clone, Debug)]
pub(crate) struct CopyIn {
    pub versions: Vec<(Version, Option<UpdId>)>,
    pub applied: Vector,
    pub ready: bool,
    pub log: Vec<Upd>,
}

/// What a read returns: timestamp, value, update id.
pub(crate) type Seen = (Ts, Option<Value>, Option<UpdId>);

/// A node's state for the UPD family.
#[derive(Clone, Debug, Default)]
pub(crate) struct UpdState {
    /// This incarnation's origin (`since`: the incarnation, one more than
    /// the last one in NVM) and its last sequence number.
    pub origin: Origin,
    pub seq: u64,
    /// The incarnation record is durable (or this is a first start): the
    /// node may write.
    pub incarnation_durable: bool,
    pub incarnation_issued: bool,
    /// Per origin, the prefix of its updates applied here...
    pub applied: Vector,
    /// ...and those applied beyond it (Eventual applies on arrival).
    pub extra: BTreeMap<Origin, BTreeSet<u64>>,
    /// Applied here, not durable here yet (Causal with a persisted gate).
    pub undurable: BTreeMap<Origin, BTreeMap<u64, (Key, Ts)>>,
    /// The same updates by key (a landing persist finds its own at once).
    pub undurable_keys: FastMap<Key, Vec<(UpdId, Ts)>>,
    /// `persisted_upto` of every origin, until `applied` or `undurable`
    /// changes (operations that wait ask it on every step).
    pub persisted_memo: std::cell::RefCell<Option<Vector>>,
    /// Received, waiting for their turn or their cauhist.
    pub buffer: BTreeMap<UpdId, Upd>,
    /// Applied here, not yet known applied everywhere (resends), with when
    /// each was last sent.
    pub log: BTreeMap<UpdId, (Upd, u64)>,
    /// Each member's applied vector, as it last told.
    pub peers: BTreeMap<NodeId, Vector>,
    /// ...and what each applied beyond it.
    pub peer_extra: BTreeMap<NodeId, BTreeSet<UpdId>>,
    /// What this node last told the others, and when.
    pub gossiped: (Vector, Vec<UpdId>, u64),
    /// Lazily sent UPDs (Eventual).
    pub outbox: Vec<Upd>,
    /// Own writes whose persist waits for their cauhist to be persisted here.
    pub held: Vec<Upd>,
    pub strict: BTreeMap<(Key, Ts), StrictWrite>,
    /// Client operations waiting for this node to catch up with them.
    pub waiting: VecDeque<(SessionId, u64, Op)>,
    /// Newest version whose persist was issued, per key.
    pub issued: HashMap<Key, Ts>,
    /// Eventual-Synch: each session's own writes not yet persisted here.
    pub own: HashMap<(SessionId, Key), Seen>,
    pub copies: Vec<CopyIn>,
    /// While catching up: adopted versions still being persisted.
    pub adopting: Option<usize>,
    /// The versions applied in the current step (the C1 trace).
    pub applied_now: Vec<Version>,
    /// Causal, orphaned updates (`upd/lost.rs`): each node's latest life
    /// heard of; the dead origins given up (what needs them past their
    /// survivors is lost); what waits past a dead origin's survivors, since
    /// when; when that was last looked at.
    pub lives: BTreeMap<NodeId, u64>,
    pub lost: BTreeSet<Origin>,
    pub orphan_watch: Option<(BTreeMap<Origin, u64>, u64)>,
    pub orphan_scan_at: u64,
}

impl UpdState {
    pub fn new(me: NodeId, incarnation: u64) -> Self {
        UpdState {
            origin: Origin {
                node: me,
                since: incarnation,
            },
            incarnation_durable: incarnation == 0,
            ..UpdState::default()
        }
    }

    /// Nothing buffered, unsent, unacknowledged or waiting here.
    pub fn is_quiet(&self) -> bool {
        self.buffer.is_empty()
            && self.log.is_empty()
            && self.outbox.is_empty()
            && self.held.is_empty()
            && self.strict.is_empty()
            && self.waiting.is_empty()
    }

    /// The updates applied here beyond the `applied` prefix, at most `max`
    /// of them, newest origin (incarnation) first and each origin's newest
    /// first: ids past a gap that never fills stay here for good, and those
    /// of long-gone origins were likely dropped from every log already.
    pub fn extra_ids(&self, max: usize) -> Vec<UpdId> {
        let mut origins: Vec<_> = self.extra.iter().collect();
        origins.sort_by_key(|(o, _)| std::cmp::Reverse((o.since, o.node)));
        let ids = origins
            .into_iter()
            .flat_map(|(&origin, seqs)| seqs.iter().rev().map(move |&seq| UpdId { origin, seq }));
        ids.take(max).collect()
    }

    /// Member `p` told it applied `id`.
    pub fn peer_has(&self, p: NodeId, id: UpdId) -> bool {
        self.peers.get(&p).is_some_and(|v| v.contains(id))
            || self.peer_extra.get(&p).is_some_and(|x| x.contains(&id))
    }

    pub fn knows_applied(&self, id: UpdId) -> bool {
        self.applied.contains(id)
            || self
                .extra
                .get(&id.origin)
                .is_some_and(|x| x.contains(&id.seq))
    }

    /// `key` is durable here up to `nvm`: its updates up to it are no
    /// longer undurable.
    pub fn now_durable(&mut self, key: Key, nvm: Ts) {
        let Some(ids) = self.undurable_keys.get_mut(&key) else {
            return;
        };
        *self.persisted_memo.get_mut() = None;
        let undurable = &mut self.undurable;
        ids.retain(|&(id, ts)| {
            if ts > nvm {
                return true;
            }
            if let Some(m) = undurable.get_mut(&id.origin) {
                m.remove(&id.seq);
                if m.is_empty() {
                    undurable.remove(&id.origin);
                }
            }
            false
        });
        if ids.is_empty() {
            self.undurable_keys.remove(&key);
        }
    }

    /// The prefix of `o`'s updates both applied and durable here.
    pub fn persisted_upto(&self, o: Origin) -> u64 {
        let first_missing = self
            .undurable
            .get(&o)
            .and_then(|m| m.keys().next())
            .map_or(u64::MAX, |s| s - 1);
        self.applied.get(o).min(first_missing)
    }

    pub fn persisted_covers(&self, deps: &Vector) -> bool {
        let mut memo = self.persisted_memo.borrow_mut();
        let upto = memo.get_or_insert_with(|| {
            let mut v = Vector::default();
            self.applied
                .iter()
                .for_each(|(o, _)| v.raise(o, self.persisted_upto(o)));
            v
        });
        deps.covered_by(|o| upto.get(o))
    }

    /// `applied` or `undurable` changed.
    pub fn touched(&mut self) {
        *self.persisted_memo.get_mut() = None;
    }
}
