//! Timestamps, client operations, messages and NVM records of DDP.

use serde::{Deserialize, Serialize};
use tandem_net::{Durable, NodeId, SessionId};

use crate::upd::vector::{Origin, UpdId, Vector};

pub type Key = u64;
pub type Value = u64;

/// A version: Lamport `(version, node)`, compared lexicographically
/// (docs/DDP.md open point 1, HEAL §II-B). `Ts::ZERO` is the initial, absent value.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ts {
    pub version: u64,
    pub node: NodeId,
}

impl Ts {
    pub const ZERO: Ts = Ts {
        version: 0,
        node: 0,
    };
}

/// A scope: ordered within its session only (docs/DESIGN.md §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ScopeId {
    pub session: SessionId,
    pub seq: u64,
}

/// A transaction: its session and the session's number for it (a restart
/// after a squash is a new transaction, with a new number).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct TxId {
    pub session: SessionId,
    pub seq: u64,
}

/// What every transactional message carries about its transaction: its
/// coordinator (to vote to, and to notice it is gone) and its age (older
/// transactions win conflicts, `trans/mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TxHdr {
    pub id: TxId,
    pub coord: NodeId,
    pub born: u64,
    /// The coordinator's epoch when the transaction began: a member can
    /// vouch that the coordinator never had its vote only if it has been a
    /// member since then (`trans/follow.rs`, "decisive").
    pub epoch: u64,
}

impl TxHdr {
    pub fn older_than(&self, o: &TxHdr) -> bool {
        (self.born, self.id) < (o.born, o.id)
    }
}

/// What a client asks. `after` is the session's causal past (Causal
/// consistency; empty otherwise): the client merges into it the update id
/// of every reply, and the serving node waits until it has applied that
/// much (so a session may move to another node). `tx` names the session's
/// open transaction (Transactional consistency; the other families ignore it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Read {
        key: Key,
        #[serde(default)]
        after: Vector,
        #[serde(default)]
        tx: Option<u64>,
    },
    /// `scope`: the session's open scope (the client numbers its scopes;
    /// ignored unless the model has Scope persistency).
    Write {
        key: Key,
        value: Value,
        scope: u64,
        #[serde(default)]
        after: Vector,
        #[serde(default)]
        tx: Option<u64>,
    },
    /// Close scope `scope`, in which the session wrote `writes` times, and
    /// wait until it is durable everywhere (Scope persistency; elsewhere it
    /// returns at once).
    Persist { scope: u64, writes: u32 },
    /// Init Xaction: open transaction `tx` of the session at this node.
    Begin { tx: u64 },
    /// End Xaction: commit transaction `tx`.
    End { tx: u64 },
}

impl Op {
    pub fn read(key: Key) -> Op {
        Op::Read {
            key,
            after: Vector::default(),
            tx: None,
        }
    }
    pub fn write(key: Key, value: Value, scope: u64) -> Op {
        Op::Write {
            key,
            value,
            scope,
            after: Vector::default(),
            tx: None,
        }
    }

    /// The session's transaction this operation belongs to, if any.
    pub fn tx(&self) -> Option<u64> {
        match *self {
            Op::Read { tx, .. } | Op::Write { tx, .. } => tx,
            Op::Begin { tx } | Op::End { tx } => Some(tx),
            Op::Persist { .. } => None,
        }
    }
}

/// What a node answers. `id` names the update read or written (UPD
/// family; `None` for the INV family and for versions older than the last
/// whole-cluster restart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Read {
        value: Option<Value>,
        ts: Ts,
        id: Option<UpdId>,
    },
    Written {
        ts: Ts,
        id: Option<UpdId>,
    },
    /// The scope `seq` of the session is durable at every replica.
    Persisted {
        seq: u64,
    },
    /// The scope's writes are not all known here (its coordinator crashed
    /// and the session moved): it was not persisted, and none of its
    /// writes is made durable as part of it.
    ScopeLost {
        seq: u64,
    },
    /// Transaction `tx` is open here (Init Xaction).
    Begun {
        tx: u64,
    },
    /// Transaction `tx` committed (End Xaction).
    Committed {
        tx: u64,
    },
    /// Transaction `tx` was squashed (a conflict, or its coordinator
    /// crashed): none of its writes takes effect; the client restarts it.
    Aborted {
        tx: u64,
    },
    /// End of transaction `tx` reached a node that cannot tell its
    /// outcome: its coordinator crashed or left the configuration after
    /// ENDX, and the members that prepared it may still commit it. The
    /// client must assume neither (it may read its keys to find out).
    OutcomeUnknown {
        tx: u64,
    },
    /// Causal: part of the session's causal past is lost for good: both
    /// nodes that held some updates it saw crashed before any member
    /// applied them. The operation did not run. The session lowers its
    /// vector to `upto` on those origins (what survives of them) and goes
    /// on; what it read or wrote of the lost updates is gone.
    PastLost {
        upto: Vector,
    },
    /// The model does not take this operation (Begin or End outside
    /// Transactional consistency, a plain write under it).
    Error {
        msg: String,
    },
}

/// A version of a key as messages and records carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub key: Key,
    pub ts: Ts,
    pub value: Value,
}

/// An update of the UPD family: a version, its id and, under Causal
/// consistency, its cauhist as a vector (`deps`); `scope` under Scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upd {
    pub id: UpdId,
    pub v: Version,
    pub deps: Vector,
    pub scope: Option<ScopeId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Invalidate `key` and apply `v` (INV + data).
    Inv {
        v: Version,
        epoch: u64,
        scope: Option<ScopeId>,
    },
    /// `c`: applied; `p`: persisted (ACK, ACK_c, ACK_p).
    Ack {
        key: Key,
        ts: Ts,
        epoch: u64,
        c: bool,
        p: bool,
    },
    /// `c`: every replica applied `ts`; `p`: and persisted it (VAL, VAL_c, VAL_p).
    Val {
        key: Key,
        ts: Ts,
        c: bool,
        p: bool,
        /// The coordinator's configuration when it sent it: a GDP it
        /// certifies holds over that configuration's members (HEAL).
        epoch: u64,
    },
    /// `[PERSIST]s`: persist the writes of `scope`. It lists them, so a
    /// follower needs no buffer and a node that joined mid-scope can too
    /// (a deviation from the paper's count: more bytes, no waiting).
    ScopePersist {
        scope: ScopeId,
        versions: Vec<Version>,
        epoch: u64,
    },
    /// `[ACK_p]s`.
    ScopeAck {
        scope: ScopeId,
        epoch: u64,
    },
    /// HEAL under Scope (`[VAL_P]sc`): every member persisted the scope, so
    /// its writes are past their GDP (the followers' FGDP).
    ScopeVal {
        versions: Vec<(Key, Ts)>,
        epoch: u64,
    },
    /// UPD (+cauhist), one or a batch (Eventual sends them lazily, batched).
    /// Its ACK_p (Strict) is an `Ack` with `p` only.
    Upd {
        upds: Vec<Upd>,
    },
    /// Anti-entropy: the updates the sender applied (for resends and log
    /// garbage collection; not in the paper, which assumes reliable links).
    UpdSync {
        /// The sender's life: a member that hears of a later one knows the
        /// earlier lives are over (their unspread updates are lost).
        origin: Origin,
        applied: Vector,
        /// Applied beyond that prefix (a gap a crashed origin left, or
        /// updates that overtook others), at most `EXTRA_MAX` of them.
        extra: Vec<UpdId>,
    },
    /// A restarted (or re-added) node asks for a full copy, in `epoch`,
    /// a configuration that holds it (until HEAL replaces the copy).
    CopyReq {
        epoch: u64,
    },
    /// Every version the sender holds, and whether it is validated there.
    CopyResp {
        versions: Vec<(Version, bool)>,
    },
    /// The UPD family's copy: every version the sender applied, with its
    /// update id, the sender's applied vector, whether it was serving, and
    /// its log (the updates it applied that some member may still lack,
    /// each whole: the copier sends them on if the sender crashes).
    UpdCopy {
        versions: Vec<(Version, Option<UpdId>)>,
        applied: Vector,
        ready: bool,
        log: Vec<Upd>,
    },
    /// INITX: a transaction begins at its coordinator.
    InitX {
        tx: TxHdr,
        epoch: u64,
    },
    /// INV of a transactional write (held by the transaction, not visible).
    TxInv {
        tx: TxHdr,
        v: Version,
        epoch: u64,
    },
    /// ENDX: the transaction's final writes and the versions it read, from
    /// its coordinator or from a node settling it after the coordinator died.
    EndX {
        tx: TxHdr,
        writes: Vec<Version>,
        reads: Vec<(Key, Ts)>,
        epoch: u64,
    },
    /// The answer to INITX, TxInv, EndX (a vote) and TxOutcome.
    TxAck {
        tx: TxId,
        ack: TxAck,
        epoch: u64,
    },
    /// The decision; a commit carries the writes (so a node that missed the
    /// INVs, or joined since, installs them).
    TxOutcome {
        tx: TxHdr,
        commit: bool,
        writes: Vec<Version>,
        epoch: u64,
    },
    /// VAL_p (RE persistency): the transaction's writes are durable everywhere.
    TxValP {
        tx: TxId,
        writes: Vec<(Key, Ts)>,
    },
    /// HEAL `Recov_start`: the recovering node (a ShadowReplica since
    /// configuration `epoch`) starts its recovery.
    RecovStart {
        epoch: u64,
    },
    /// HEAL `Recov_start_ACK`; `online`: the sender serves clients and has
    /// recorded every update since the recovering node left (it can be the
    /// Buddy); `inflight`: versions the recovering node coordinated that the
    /// sender holds short of their GDP (they may still commit by a replay,
    /// so the recovering node must not issue their timestamps again).
    RecovStartAck {
        epoch: u64,
        online: bool,
        inflight: Vec<(Version, Validity)>,
    },
    /// HEAL `CatchUp_req` to the Buddy: the Partially_persisted list.
    /// HEAL-NoShadow asks in rounds: `round` counts them, `after` is the
    /// Buddy's record count its last answer reached (0: everything).
    CatchUpReq {
        epoch: u64,
        partial: Vec<(Key, Ts)>,
        round: u32,
        after: u64,
    },
    /// HEAL `CatchUp_resp`: the marked list and the Buddy's Missed_updates.
    CatchUpResp {
        epoch: u64,
        resp: Box<CatchUpResp>,
    },
    /// HEAL `Recov_end` of the recovery that ran in configuration `epoch`;
    /// acknowledged (`RecovEndAck`) so that no buffer leaks. A member ignores
    /// one older than the configuration that last dropped the sender.
    RecovEnd {
        epoch: u64,
    },
    RecovEndAck {
        epoch: u64,
    },
    /// HEAL-NoShadow: the recovering node has chased its Buddy until the
    /// rounds stopped shrinking; from now on the receiver sends it its writes.
    ShadowStart {
        epoch: u64,
    },
    /// The receiver includes the recovering node in writes from now on;
    /// `inflight`: the writes it coordinates that went out without it.
    ShadowStartAck {
        epoch: u64,
        inflight: Vec<(Version, Validity)>,
    },
}

/// A node's vote on a transaction at ENDX.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Vote {
    /// It holds every write (persisted, under Strict and Synch) and will not squash it.
    Prepared,
    /// It squashed the transaction (a conflict, a stale read or write).
    Refused,
    /// It knows the decision.
    Committed,
    Aborted,
    /// The coordinator, restarted, never committed it (it holds no commit
    /// record), but a settler in an epoch without it may have: counts as a
    /// refusal only once every vote is in.
    Disowned,
    /// It knows nothing of the transaction and cannot vouch that the
    /// coordinator never had its vote (it joined, or restarted, since the
    /// transaction began): an answer, but one that decides nothing.
    Unknown,
}

/// What a `TxAck` acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TxAck {
    /// INITX (persisted, under Strict and Synch).
    Init,
    /// A TxInv; under Strict, once persisted (ACK_p).
    Write {
        key: Key,
        ts: Ts,
    },
    Vote(Vote),
    /// The outcome (installed; under RE persistency, persisted: ACK_p).
    Done,
}

/// How far a transaction's record got at a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TxPhase {
    /// INITX persisted.
    Begun,
    /// Writes held, not decided: recovery ignores them (undo is free).
    Prepared,
    /// Decided: recovery installs every write (redo), all or nothing.
    Committed,
}

/// What a node persists. A key's slot keeps its newest version; a scope's
/// record holds all of the scope's writes, so a scope lands all or nothing;
/// a transaction's record likewise holds all of its writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    Key(Version),
    Scope {
        scope: ScopeId,
        versions: Vec<Version>,
    },
    Tx {
        tx: TxId,
        phase: TxPhase,
        versions: Vec<Version>,
    },
    /// HEAL's GDP flag: version `ts` of `key` (or a newer one) reached
    /// the Global Durability Point as this node saw it.
    Gdp {
        key: Key,
        ts: Ts,
    },
    /// HEAL: the key's slot held `over`, an update that never committed;
    /// it now holds `to` (None: no version). Lands only over `over` or older.
    Rollback {
        key: Key,
        to: Option<Version>,
        over: Ts,
    },
    /// UPD family: this node's incarnation, which names the origin of its
    /// updates. A restart takes the next one, and writes nothing until it
    /// is durable, so no two lives of a node share update ids.
    Incarnation(u64),
}

impl Record {
    /// The newest version of `key` this record makes durable as committed
    /// data (`prepared`: also a transaction's undecided writes).
    pub fn ts_of(&self, key: Key, prepared: bool) -> Option<Ts> {
        let vs = match self {
            Record::Key(v) => return (v.key == key).then_some(v.ts),
            Record::Rollback { to, .. } => return to.filter(|v| v.key == key).map(|v| v.ts),
            Record::Gdp { .. } | Record::Incarnation(_) => return None,
            Record::Scope { versions, .. } => versions,
            Record::Tx {
                phase, versions, ..
            } if *phase == TxPhase::Committed || prepared => versions,
            Record::Tx { .. } => return None,
        };
        vs.iter().filter(|v| v.key == key).map(|v| v.ts).max()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    Key(Key),
    Scope(ScopeId),
    Tx(TxId),
    Gdp(Key),
    Incarnation,
}

impl Durable for Record {
    type Slot = Slot;
    fn slot(&self) -> Slot {
        match self {
            Record::Key(v) => Slot::Key(v.key),
            Record::Rollback { key, .. } => Slot::Key(*key),
            Record::Gdp { key, .. } => Slot::Gdp(*key),
            Record::Scope { scope, .. } => Slot::Scope(*scope),
            Record::Tx { tx, .. } => Slot::Tx(*tx),
            Record::Incarnation(_) => Slot::Incarnation,
        }
    }
    /// A persist of an older version landing after a newer one does not
    /// regress the key (docs/DDP.md open point 13); a transaction's records merge (the
    /// furthest phase, the newest version of each key).
    fn land(slot: &mut Self, new: Self) {
        match (&mut *slot, new) {
            (Record::Key(old), Record::Key(v)) if old.ts >= v.ts => {}
            (Record::Gdp { ts, .. }, Record::Gdp { ts: new, .. }) if *ts >= new => {}
            (Record::Incarnation(i), Record::Incarnation(new)) if *i >= new => {}
            (Record::Key(old), Record::Rollback { over, to, .. })
                if old.ts > over && to.is_none_or(|v| v.ts <= old.ts) => {}
            (s, Record::Rollback { to: Some(v), .. }) => *s = Record::Key(v),
            (
                Record::Tx {
                    phase, versions, ..
                },
                Record::Tx {
                    phase: p,
                    versions: vs,
                    ..
                },
            ) => {
                *phase = (*phase).max(p);
                for v in vs {
                    match versions.iter_mut().find(|o| o.key == v.key) {
                        Some(o) if o.ts >= v.ts => {}
                        Some(o) => *o = v,
                        None => versions.push(v),
                    }
                }
            }
            (s, new) => *s = new,
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
