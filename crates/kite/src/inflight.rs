//! Operations in flight: what a session does that takes more than one
//! round, held in `node::Active` while it runs. A relaxed access on the
//! slow path, a release and an acquire (ABD rounds and the delinquency
//! check), an RMW on per-key Paxos. Behaviour is in `relaxed.rs`,
//! `sync.rs` and `paxos.rs`.

use crate::types::*;

#[derive(Clone, Copy, Debug)]
pub enum RmwKind {
    Faa(Value),
    Cas { expected: Value, new: Value },
}

#[derive(Debug)]
pub struct Rmw {
    pub key: Key,
    pub kind: RmwKind,
    pub id: RmwId,
    pub acq: AcqId,
    pub round: u32,
    pub attempt: u32,
    /// The stamp of the DM-set its accept carries.
    pub dm_stamp: u64,
    pub stage: Stage,
}

#[derive(Debug)]
pub enum Stage {
    /// Waiting for this node's earlier RMW on the key.
    Queued,
    Backoff,
    Propose(Gather),
    /// Promised; waiting for the session's earlier writes.
    Barrier {
        slot: u32,
        ballot: Ballot,
        rec: RmwRec,
        help: bool,
    },
    Accept {
        g: Gather,
        rec: RmwRec,
        help: bool,
    },
    Commit {
        wid: u64,
        slot: u32,
        rec: RmwRec,
        help: bool,
    },
}

/// What a majority of acceptors answered.
#[derive(Debug)]
pub struct Gather {
    pub rid: u64,
    pub slot: u32,
    pub ballot: Ballot,
    pub base: (Version, Value),
    pub accepted: Option<(Ballot, RmwRec)>,
    pub nack: Option<Ballot>,
    pub committed: Option<(u32, RmwRec)>,
    /// This RMW is already committed, in this slot.
    pub mine: Option<(u32, RmwRec)>,
    pub too_high: bool,
    /// Acceptors whose counted replies said this machine is delinquent.
    pub flagged: Mask,
}

#[derive(Debug)]
pub struct Release {
    pub key: Key,
    pub value: Value,
    /// Round 1 (versions) and whether a majority answered it.
    pub r1: u64,
    pub r1_done: bool,
    pub max: Version,
    pub stage: RelStage,
    /// The DM-set being published and its stamp.
    pub dm: (Mask, u64),
}

#[derive(Debug, PartialEq, Eq)]
pub enum RelStage {
    /// Round 1 and the barrier.
    Wait,
    /// Publishing the DM-set.
    Slow { rid: u64 },
    /// The value round.
    Value { wid: u64, version: Version },
}

#[derive(Debug)]
pub struct Acquire {
    pub key: Key,
    pub acq: AcqId,
    pub rid: u64,
    pub write_back: bool,
    pub best: (Version, Value),
    pub n_best: u32,
    /// Replicas whose counted replies said this machine is delinquent.
    pub flagged: Mask,
    /// A strong CAS whose comparison failed ends as this acquire.
    pub cas_fail: bool,
}

/// A relaxed access on the slow path: one quorum round, then done.
#[derive(Debug)]
pub struct SlowOp {
    pub key: Key,
    /// The machine epoch when the access started: the key returns to it.
    pub e0: u64,
    pub rid: u64,
    /// `Some(v)`: a write of `v` (round 1 reads versions); `None`: a read.
    pub write: Option<Value>,
    /// The newest version seen (and its value, for a read).
    pub best: (Version, Value),
}
