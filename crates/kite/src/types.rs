//! Client operations, replies, messages and ids of Kite (Kite paper §5.1,
//! §3–§4).

use serde::{Deserialize, Serialize};
use tandem_net::{NodeId, SessionId};

pub use tandem_check::Version;

pub type Key = u64;
pub type Value = u64;

/// A set of nodes (ids below 32), one bit each.
pub type Mask = u32;

pub fn bit(n: NodeId) -> Mask {
    1 << n
}

/// What a client asks (Kite paper §5.1). Every call is the sync flavour: a
/// session has one request outstanding (the simulator's and the TCP
/// clients' closed loop); a relaxed write still replies before its acks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Read(Key),
    Write(Key, Value),
    Acquire(Key),
    Release(Key, Value),
    /// Fetch-and-add: acquire and release semantics.
    Faa(Key, Value),
    /// Compare-and-swap. A `weak` one fails on the local replica without
    /// messages when the local value differs (a hint, docs/KITE.md).
    Cas {
        key: Key,
        expected: Value,
        new: Value,
        weak: bool,
    },
}

impl Op {
    pub fn key(&self) -> Key {
        match *self {
            Op::Read(k) | Op::Write(k, _) | Op::Acquire(k) | Op::Release(k, _) | Op::Faa(k, _) => k,
            Op::Cas { key, .. } => key,
        }
    }

    /// Release, acquire or RMW: the session is stalled until it completes.
    pub fn is_sync(&self) -> bool {
        !matches!(self, Op::Read(_) | Op::Write(..))
    }
}

/// What a client gets back: the value and the version of the write it read
/// or made (what the release-consistency checker needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// A read or an acquire.
    Value { value: Value, version: Version },
    /// A write or a release.
    Written { version: Version },
    /// An RMW that took effect: read `old` at `old_version`, wrote `new`.
    Rmw {
        old: Value,
        old_version: Version,
        new: Value,
        version: Version,
    },
    /// A CAS whose comparison failed; `local`: on the local replica only.
    CasFail {
        value: Value,
        version: Version,
        local: bool,
    },
}

/// A Paxos ballot: `(round, node)`, compared lexicographically.
pub type Ballot = (u32, NodeId);

/// An RMW's unique id: its node, session and the session's RMW count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RmwId {
    pub node: NodeId,
    pub session: SessionId,
    pub seq: u64,
}

/// An RMW as Paxos carries it: what it read (its base) and what it writes.
/// Its version is the base's clock with the slot it commits in, so plain
/// writes and RMWs of one key share one version order ("carstamps",
/// docs/KITE.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RmwRec {
    pub id: RmwId,
    pub old: Value,
    pub old_version: Version,
    pub new: Value,
    /// The proposer's DM-set (its release side): every acceptor of this
    /// value marks these machines delinquent, whoever sends the accept.
    pub dm: Mask,
}

impl RmwRec {
    pub fn version(&self, slot: u32) -> Version {
        Version(self.old_version.0, self.old_version.1, slot)
    }
}

/// An acquire's id, recorded by a delinquency bit in state T (Kite paper §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AcqId {
    pub session: SessionId,
    pub seq: u64,
}

/// Kite's messages (Kite paper §3–§4). `rid` names a quorum round of the
/// sender, `wid` a write it tracks until every replica acknowledged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// ES write, release value round, slow relaxed write.
    Write {
        wid: u64,
        key: Key,
        version: Version,
        value: Value,
    },
    /// The Paxos commit; acknowledged like a write.
    Commit {
        wid: u64,
        key: Key,
        slot: u32,
        rec: RmwRec,
    },
    WriteAck {
        wid: u64,
    },
    /// Release round 1, slow relaxed write round 1.
    ReadTs {
        rid: u64,
        key: Key,
    },
    /// Acquire round 1 (`acq` set) or a slow relaxed read (`None`).
    Read {
        rid: u64,
        key: Key,
        acq: Option<AcqId>,
    },
    /// Acquire round 2; the reply reports delinquency too (docs/KITE.md,
    /// "Round 2 reports delinquency").
    WriteBack {
        rid: u64,
        key: Key,
        version: Version,
        value: Value,
        acq: AcqId,
    },
    /// A slow-path release publishes its DM-set before its value round.
    SlowRelease {
        rid: u64,
        dm: Mask,
    },
    /// Best effort, after the acquirer bumped its epoch (Lemma 2.6).
    ResetBit {
        acq: AcqId,
    },
    Propose {
        rid: u64,
        key: Key,
        slot: u32,
        ballot: Ballot,
        id: RmwId,
        acq: AcqId,
    },
    /// The DM-set rides in `rec` (its release side).
    Accept {
        rid: u64,
        key: Key,
        slot: u32,
        ballot: Ballot,
        rec: RmwRec,
    },
    /// Probes a suspected node; its `Pong` brings it back into broadcasts.
    Ping,
    Pong,
    Rep {
        rid: u64,
        rep: Rep,
    },
}

/// A reply to a quorum round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rep {
    Ts {
        version: Version,
    },
    Value {
        version: Version,
        value: Value,
        delinquent: bool,
    },
    Ack {
        delinquent: bool,
    },
    Prop(PaxosRep),
    Acc(PaxosRep),
}

/// An acceptor's answer to a propose or an accept (Kite paper §3.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PaxosRep {
    /// Promised (or accepted); for a propose, the replica's current value.
    Ack {
        version: Version,
        value: Value,
        delinquent: bool,
    },
    /// Promised, but a value is accepted in this slot: help it first.
    Accepted {
        ballot: Ballot,
        rec: RmwRec,
        delinquent: bool,
    },
    /// A higher ballot was promised.
    Nack { promised: Ballot },
    /// The slot is already committed: here is the last committed RMW.
    Committed { slot: u32, rec: RmwRec },
    /// The replica has not committed the slot before this one.
    TooHigh,
}

/// Kite keeps no data durable (durability is out of the paper's scope)
/// and is crash-stop (Kite paper §2.1): a replica that came back with empty state would
/// count in quorums it no longer intersects, and lose acknowledged writes
/// and Paxos decisions. Its one record marks that it ran, so `tandem node
/// --system kite` refuses to start again from the same state file.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum KiteRecord {
    /// This replica ran (persisted at its first step).
    Ran,
}
