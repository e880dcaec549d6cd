//! The state of Transactional consistency: transactions in flight at
//! their coordinator and at each member, deliveries, and the counters
//! (`TransStats`, `Squash`). Behaviour is in the sibling files.

use crate::types::{Key, Op, Ts, TxHdr, TxId, Version};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use tandem_net::{NodeId, SessionId};

/// Where a transaction this node coordinates (or settles) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// INITX sent; Begin replies once every member ACKed it.
    Init,
    /// Reads and writes.
    Active,
    /// ENDX sent; votes are coming in.
    Ending,
    /// Committed by the votes; the commit record is being persisted.
    Deciding,
}

/// A transaction this node coordinates, or settles for a dead coordinator.
#[derive(Clone, Debug)]
pub(crate) struct CoordTx {
    pub hdr: TxHdr,
    /// The client operation waiting on this transaction (Begin, a Strict
    /// write, End).
    pub client: Option<(SessionId, u64)>,
    /// Settling another coordinator's transaction: no client, and a
    /// decision needs every member's vote.
    pub settling: bool,
    pub phase: Phase,
    /// Members that ACKed INITX, ACK_p'd the Strict write, or voted.
    pub acks: BTreeSet<NodeId>,
    /// The local persist the phase needs has landed.
    pub local: bool,
    /// A Strict write waiting for every ACK_p.
    pub strict: Option<(Key, Ts)>,
    /// Some member voted `Committed` / `Refused` or `Aborted`.
    pub saw_commit: bool,
    pub saw_abort: bool,
    /// A [`Vote::Disowned`] came in.
    pub disowned: bool,
    /// Members that answered [`Vote::Unknown`] in this epoch.
    pub unknown: BTreeSet<NodeId>,
    /// Scope persistency: the scope of each key written.
    pub scopes: BTreeMap<Key, u64>,
    pub sent_at: u64,
    /// When its client's last operation arrived (the idle timeout).
    pub last_op: u64,
    /// Strict, Synch: its commit record landed here (`Then::Decided`).
    pub commit_landed: bool,
}

impl CoordTx {
    pub fn new(hdr: TxHdr, phase: Phase, now: u64) -> Self {
        CoordTx {
            hdr,
            client: None,
            settling: false,
            phase,
            acks: BTreeSet::new(),
            local: true,
            strict: None,
            saw_commit: false,
            saw_abort: false,
            disowned: false,
            unknown: BTreeSet::new(),
            scopes: BTreeMap::new(),
            sent_at: now,
            last_op: now,
            commit_landed: false,
        }
    }
}

/// A transaction known here and not decided here: what it holds here.
#[derive(Clone, Debug)]
pub(crate) struct TxHere {
    pub hdr: TxHdr,
    pub writes: BTreeMap<Key, Version>,
    pub reads: BTreeMap<Key, Ts>,
    /// This node will not squash it: it voted `Prepared`, or coordinates
    /// it and sent ENDX.
    pub prepared: bool,
    /// Strict, Synch: its prepared record landed here.
    pub durable: bool,
    /// Votes owed once the prepared record lands: (to, epoch).
    pub owed: Vec<(NodeId, u64)>,
    /// When this node last heard of it (a member's silence timeout).
    pub heard: u64,
}

impl TxHere {
    pub fn new(hdr: TxHdr, now: u64) -> Self {
        TxHere {
            hdr,
            writes: BTreeMap::new(),
            reads: BTreeMap::new(),
            prepared: false,
            durable: false,
            owed: Vec::new(),
            heard: now,
        }
    }
}

/// A decision being delivered until every member acknowledged it.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    pub hdr: TxHdr,
    pub commit: bool,
    pub writes: Vec<Version>,
    pub acks: BTreeSet<NodeId>,
    /// RE-p: the local committed record landed (VAL_p needs it).
    pub local: bool,
    pub sent_at: u64,
    /// Strict, Synch: End's client, answered `Committed` once every member
    /// has persisted the commit record (`trans/commit.rs`).
    pub client: Option<(SessionId, u64)>,
}

/// An ENDX whose vote waits for an older prepared transaction's decision.
#[derive(Clone, Debug)]
pub(crate) struct EndReq {
    pub from: NodeId,
    pub hdr: TxHdr,
    pub writes: Vec<Version>,
    pub reads: Vec<(Key, Ts)>,
    pub epoch: u64,
}

/// A node's state for Transactional consistency.
#[derive(Clone, Debug, Default)]
pub(crate) struct TransState {
    pub coord: BTreeMap<TxId, CoordTx>,
    pub here: BTreeMap<TxId, TxHere>,
    /// Decisions known here (true: committed).
    pub outcomes: HashMap<TxId, bool>,
    /// Transactions this node squashed: it votes `Refused` for them.
    pub refused: HashSet<TxId>,
    /// When each decision or refusal was learnt, oldest first (to forget them).
    pub learnt: VecDeque<(u64, TxId)>,
    pub deliveries: BTreeMap<TxId, Delivery>,
    /// Client operations waiting behind a prepared transaction (or VAL_p).
    pub waiting: VecDeque<(SessionId, u64, Op)>,
    pub postponed: Vec<EndReq>,
    /// Eventual-p: committed transactions not yet persisted here.
    pub lazy: Vec<(TxId, Vec<Version>)>,
    pub last_lazy: u64,
    pub stats: TransStats,
    /// Lamport clock of transaction ages: the newest `born` seen here.
    pub clock: u64,
    /// Prepared here and kept through this node's removal: settled once it
    /// is a member again.
    pub kept: BTreeSet<TxId>,
    /// This node has been a member, its transaction state intact, in every
    /// epoch from `since` on ([`NOT_MEMBER`]: it is not one now, or it
    /// restarted and has not been added back yet).
    pub since: u64,
}

/// [`TransState::since`] of a node that is not a member now.
pub(crate) const NOT_MEMBER: u64 = u64::MAX;

impl TransState {
    pub fn is_quiet(&self) -> bool {
        self.coord.is_empty()
            && self.here.is_empty()
            && self.deliveries.is_empty()
            && self.waiting.is_empty()
            && self.postponed.is_empty()
            && self.lazy.is_empty()
    }

    /// What `is_quiet` finds in progress (diagnostics).
    pub fn busy(&self) -> String {
        let phases: Vec<String> = (self.coord.iter())
            .map(|(id, c)| {
                format!(
                    "{id:?} {:?}{}",
                    c.phase,
                    if c.settling { " settling" } else { "" }
                )
            })
            .collect();
        let here: Vec<String> = (self.here.iter())
            .map(|(id, h)| format!("{id:?} coord {} prepared {}", h.hdr.coord, h.prepared))
            .collect();
        format!(
            "coordinating [{}], holding [{}], {} deliveries, {} waiting, {} postponed, {} lazy",
            phases.join("; "),
            here.join("; "),
            self.deliveries.len(),
            self.waiting.len(),
            self.postponed.len(),
            self.lazy.len()
        )
    }
}

/// What an access may do after conflict detection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Go,
    Wait,
    Squashed,
}

/// Why a transaction was squashed (counted where it happened).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Squash {
    /// An older transaction's access wounded it (wound-wait).
    Wounded,
    /// At ENDX it met a younger prepared transaction (wait-die), or an
    /// unprepared older one.
    Died,
    /// Its INV brought a version no newer than the installed one.
    StaleInv,
    /// ENDX validation: a key it read or writes changed since.
    StaleEnd,
    /// Its session began another transaction, or went quiet (idle timeout).
    Left,
    Idle,
    /// A member heard nothing about it (unprepared) for long.
    Silent,
    /// Its coordinator left the configuration before it prepared.
    Orphan,
}

/// A node's counters for Transactional consistency.
#[derive(Clone, Debug, Default)]
pub struct TransStats {
    pub begun: u64,
    pub committed: u64,
    pub aborted: u64,
    pub squashes: BTreeMap<Squash, u64>,
    /// Client operations that waited (at least once), ENDX votes postponed.
    pub op_waits: u64,
    pub end_waits: u64,
    /// Messages re-sent by the retransmission timer.
    pub resent: u64,
    /// Protocol messages sent, by kind (a broadcast counts once per peer).
    pub sent: BTreeMap<&'static str, u64>,
    /// Decided transactions forgotten (garbage-collected).
    pub forgotten: u64,
    /// Conflicts met with a transaction of the same session.
    pub same_session: u64,
}

impl TransStats {
    pub fn squashed(&self) -> u64 {
        self.squashes.values().sum()
    }
}
