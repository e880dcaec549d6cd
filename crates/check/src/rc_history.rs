//! Histories of a release-consistent store (Kite paper §2.2–2.3; the checks
//! are in [`crate::rc`]): one [`RcOp`] per client operation, as JSON lines like
//! [`crate::history`], with what the release-consistency checker needs on
//! top of a register history: the operation's class (relaxed, release,
//! acquire, RMW) and the per-key [`Version`] of the value it wrote or read.
//!
//! ```text
//! {"session":1,"node":0,"op":"write","key":7,"value":42,"version":[3,0,0],"invoke_ns":100,"complete_ns":250}
//! {"session":1,"node":0,"op":"release","key":1,"value":43,"version":[1,0,0],"invoke_ns":260,"complete_ns":900}
//! {"session":2,"node":1,"op":"acquire","key":1,"value":43,"version":[1,0,0],"invoke_ns":950,"complete_ns":1700}
//! {"session":2,"node":1,"op":"read","key":7,"value":42,"version":[3,0,0],"invoke_ns":1710,"complete_ns":1720}
//! {"session":3,"node":2,"op":"rmw","key":9,"old":0,"old_version":[0,0,0],"new":1,"version":[0,0,1],"invoke_ns":5,"complete_ns":80}
//! {"session":4,"node":3,"op":"cas_fail","key":9,"expected":5,"value":1,"version":[0,0,1],"local":true,"invoke_ns":90,"complete_ns":91}
//! ```
//!
//! A write's identity is `(key, version)`: versions are unique per key
//! across the whole history (values need not be: a counter's FAA writes may
//! repeat a value). Every key starts at value 0, version `[0,0,0]`.
//! `complete_ns: null` means no reply came (the serving node crashed): the
//! operation may or may not have taken effect, and its reply fields (the
//! version, an RMW's `old`) are meaningless.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A per-key version in the store's one write order: a Lamport clock
/// `(v, node)` then a Paxos slot `log` (0 for a plain write; an RMW's
/// version is its base's clock with its own slot). Ordered
/// lexicographically; serialized as `[v, node, log]`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Version(pub u32, pub u16, pub u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// One client operation of a release-consistent store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RcOp {
    pub session: u64,
    /// The node that served it.
    pub node: u16,
    #[serde(flatten)]
    pub kind: RcKind,
    pub invoke_ns: u64,
    /// `None`: no reply; the outcome is unknown.
    #[serde(default)]
    pub complete_ns: Option<u64>,
}

/// What an operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RcKind {
    /// Relaxed read: returned `value`, written at `version`.
    Read {
        key: u64,
        value: u64,
        version: Version,
    },
    /// Relaxed write of `value`, given `version`.
    Write {
        key: u64,
        value: u64,
        version: Version,
    },
    /// Acquire-read.
    Acquire {
        key: u64,
        value: u64,
        version: Version,
    },
    /// Release-write.
    Release {
        key: u64,
        value: u64,
        version: Version,
    },
    /// An RMW (FAA, or a CAS that succeeded) that took effect: it read
    /// `old` at `old_version` and wrote `new` at `version`. Acquire and
    /// release semantics both.
    Rmw {
        key: u64,
        old: u64,
        old_version: Version,
        new: u64,
        version: Version,
    },
    /// A CAS whose comparison failed: it read `value` at `version` and
    /// wrote nothing. `local`: a weak CAS that failed on the serving
    /// node's own replica, with no messages, hence no synchronization (a
    /// relaxed read); otherwise it ran through consensus (an acquire).
    CasFail {
        key: u64,
        expected: u64,
        value: u64,
        version: Version,
        local: bool,
    },
}

/// The synchronization class of an operation (Kite paper §2.3, Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    Relaxed,
    Release,
    Acquire,
    /// Acquire and release both.
    Rmw,
}

impl RcKind {
    pub fn key(&self) -> u64 {
        match *self {
            RcKind::Read { key, .. }
            | RcKind::Write { key, .. }
            | RcKind::Acquire { key, .. }
            | RcKind::Release { key, .. }
            | RcKind::Rmw { key, .. }
            | RcKind::CasFail { key, .. } => key,
        }
    }

    pub fn class(&self) -> Class {
        match *self {
            RcKind::Read { .. } | RcKind::Write { .. } => Class::Relaxed,
            RcKind::CasFail { local: true, .. } => Class::Relaxed,
            RcKind::Acquire { .. } | RcKind::CasFail { local: false, .. } => Class::Acquire,
            RcKind::Release { .. } => Class::Release,
            RcKind::Rmw { .. } => Class::Rmw,
        }
    }

    /// The write this operation made, as `(version, value)`, if any.
    pub fn written(&self) -> Option<(Version, u64)> {
        match *self {
            RcKind::Write { value, version, .. } | RcKind::Release { value, version, .. } => {
                Some((version, value))
            }
            RcKind::Rmw { new, version, .. } => Some((version, new)),
            _ => None,
        }
    }

    /// The write this operation read, as `(version, value)`, if any.
    pub fn read(&self) -> Option<(Version, u64)> {
        match *self {
            RcKind::Read { value, version, .. } | RcKind::Acquire { value, version, .. } => {
                Some((version, value))
            }
            RcKind::CasFail { value, version, .. } => Some((version, value)),
            RcKind::Rmw {
                old, old_version, ..
            } => Some((old_version, old)),
            _ => None,
        }
    }
}

impl RcOp {
    pub fn key(&self) -> u64 {
        self.kind.key()
    }

    pub fn is_pending(&self) -> bool {
        self.complete_ns.is_none()
    }
}

impl fmt::Display for RcOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session {} @node {}: ", self.session, self.node)?;
        match self.kind {
            RcKind::Read {
                key,
                value,
                version,
            } => write!(f, "read k{key} -> {value} @{version}")?,
            RcKind::Write {
                key,
                value,
                version,
            } => write!(f, "write k{key} := {value} @{version}")?,
            RcKind::Acquire {
                key,
                value,
                version,
            } => write!(f, "acquire k{key} -> {value} @{version}")?,
            RcKind::Release {
                key,
                value,
                version,
            } => write!(f, "release k{key} := {value} @{version}")?,
            RcKind::Rmw {
                key,
                old,
                old_version,
                new,
                version,
            } => write!(f, "rmw k{key}: {old} @{old_version} -> {new} @{version}")?,
            RcKind::CasFail {
                key,
                expected,
                value,
                version,
                local,
            } => {
                let how = if local { " (local)" } else { "" };
                write!(
                    f,
                    "cas k{key} expected {expected}, failed{how}: saw {value} @{version}"
                )?
            }
        }
        match self.complete_ns {
            None => write!(f, "  [{}, ?) no reply", self.invoke_ns),
            Some(c) => write!(f, "  [{}, {}]", self.invoke_ns, c),
        }
    }
}

/// Parse JSON lines of [`RcOp`]; an error names the (1-based) line.
pub fn parse_rc_jsonl(reader: impl std::io::BufRead) -> Result<Vec<RcOp>, String> {
    let mut ops = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        ops.push(serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(ops)
}

/// Serialize to JSON lines, one operation per line.
pub fn rc_to_jsonl(ops: &[RcOp]) -> String {
    ops.iter()
        .map(|o| serde_json::to_string(o).expect("an RcOp always serializes") + "\n")
        .collect()
}
