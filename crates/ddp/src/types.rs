//! Timestamps, client operations, messages and NVM records of DDP.

use serde::{Deserialize, Serialize};
use tandem_net::{Durable, NodeId, SessionId};

use crate::vector::{UpdId, Vector};

pub type Key = u64;
pub type Value = u64;

/// A version: Lamport `(version, node)`, compared lexicographically
/// (spec §14.1, HEAL §II-B). `Ts::ZERO` is the initial, absent value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ts {
    pub version: u64,
    pub node: NodeId,
}

impl Ts {
    pub const ZERO: Ts = Ts { version: 0, node: 0 };
}

/// A scope: ordered within its session only (DESIGN.md §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ScopeId {
    pub session: SessionId,
    pub seq: u64,
}

/// What a client asks. `after` is the session's causal past (Causal
/// consistency; empty otherwise): the client merges into it the update id
/// of every reply, and the serving node waits until it has applied that
/// much (so a session may move to another node).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Read {
        key: Key,
        #[serde(default)]
        after: Vector,
    },
    /// `scope`: the session's open scope (the client numbers its scopes;
    /// ignored unless the model has Scope persistency).
    Write {
        key: Key,
        value: Value,
        scope: u64,
        #[serde(default)]
        after: Vector,
    },
    /// Close scope `scope`, in which the session wrote `writes` times, and
    /// wait until it is durable everywhere (Scope persistency; elsewhere it
    /// returns at once).
    Persist { scope: u64, writes: u32 },
}

/// What a node answers. `id` names the update read or written (UPD
/// family; `None` for the INV family and for versions older than the last
/// whole-cluster restart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Read { value: Option<Value>, ts: Ts, id: Option<UpdId> },
    Written { ts: Ts, id: Option<UpdId> },
    /// The scope `seq` of the session is durable at every replica.
    Persisted { seq: u64 },
    /// The scope's writes are not all known here (its coordinator crashed
    /// and the session moved): it was not persisted, and none of its
    /// writes is made durable as part of it.
    ScopeLost { seq: u64 },
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
    Inv { v: Version, epoch: u64, scope: Option<ScopeId> },
    /// `c`: applied; `p`: persisted (ACK, ACK_c, ACK_p).
    Ack { key: Key, ts: Ts, epoch: u64, c: bool, p: bool },
    /// `c`: every replica applied `ts`; `p`: and persisted it (VAL, VAL_c, VAL_p).
    Val { key: Key, ts: Ts, c: bool, p: bool },
    /// `[PERSIST]s`: persist the writes of `scope`. It lists them, so a
    /// follower needs no buffer and a node that joined mid-scope can too
    /// (a deviation from the paper's count: more bytes, no waiting).
    ScopePersist { scope: ScopeId, versions: Vec<Version>, epoch: u64 },
    /// `[ACK_p]s`.
    ScopeAck { scope: ScopeId, epoch: u64 },
    /// UPD (+cauhist), one or a batch (Eventual sends them lazily, batched).
    /// Its ACK_p (Strict) is an `Ack` with `p` only.
    Upd { upds: Vec<Upd> },
    /// Anti-entropy: the updates the sender applied (for resends and log
    /// garbage collection; not in the paper, which assumes reliable links).
    UpdSync { applied: Vector },
    /// A restarted node asks for a full copy (until HEAL replaces it).
    CopyReq,
    /// Every version the sender holds, and whether it is validated there.
    CopyResp { versions: Vec<(Version, bool)> },
    /// The UPD family's copy: every version the sender applied, with its
    /// update id, the sender's applied vector, and whether it was serving.
    UpdCopy { versions: Vec<(Version, Option<UpdId>)>, applied: Vector, ready: bool },
}

/// What a node persists. A key's slot keeps its newest version; a scope's
/// record holds all of the scope's writes, so a scope lands all or nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    Key(Version),
    Scope { scope: ScopeId, versions: Vec<Version> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    Key(Key),
    Scope(ScopeId),
}

impl Durable for Record {
    type Slot = Slot;
    fn slot(&self) -> Slot {
        match self {
            Record::Key(v) => Slot::Key(v.key),
            Record::Scope { scope, .. } => Slot::Scope(*scope),
        }
    }
    /// A persist of an older version landing after a newer one does not
    /// regress the key (spec §7.3).
    fn land(slot: &mut Self, new: Self) {
        match (&*slot, &new) {
            (Record::Key(old), Record::Key(v)) if old.ts >= v.ts => {}
            _ => *slot = new,
        }
    }
}
