//! What a checker returns: [`Stats`] when the history passes, a
//! [`Violation`] (with the smallest failing piece of history it found)
//! when it does not.

use std::fmt;

use crate::history::HistOp;

/// What a passing check looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys checked.
    pub keys: usize,
    /// Operations checked (after dropping those that impose nothing).
    pub ops: usize,
    /// Search states explored (linearizability only; 0 elsewhere).
    pub states: u64,
}

impl Stats {
    pub(crate) fn add(&mut self, other: Stats) {
        self.keys += other.keys;
        self.ops += other.ops;
        self.states += other.states;
    }
}

/// Which property failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// A key's history has no linearization.
    NotLinearizable,
    /// The linearizability search hit its state budget: neither a pass nor
    /// a proof of violation.
    Undecided,
    /// After quiescence, nodes hold different values for a key, or a
    /// value no completed write explains (including a lost write).
    Divergent,
    /// A read (or a final state) returned a value no write wrote.
    ThinAir,
    /// A session read something older than its own last write or its last
    /// read (read-your-writes / monotonic reads).
    Session,
    /// The input is inconsistent with itself (e.g. a value missing from the
    /// version order a session check was given).
    BadInput,
}

/// A failed check: a human message, the key (if one key is at fault) and
/// the smallest piece of history that still shows the failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub kind: ViolationKind,
    pub key: Option<u64>,
    pub message: String,
    /// The failing piece of history, sorted by invocation time (empty for
    /// `Undecided`: nothing failed; the key names what to look at).
    pub ops: Vec<HistOp>,
}

impl Violation {
    pub(crate) fn new(
        kind: ViolationKind,
        key: Option<u64>,
        message: String,
        mut ops: Vec<HistOp>,
    ) -> Violation {
        ops.sort_by_key(|o| (o.invoke_ns, o.session));
        Violation {
            kind,
            key,
            message,
            ops,
        }
    }

    /// The search ran out of budget: the history was not proved wrong.
    pub fn is_undecided(&self) -> bool {
        self.kind == ViolationKind::Undecided
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        if !self.ops.is_empty() {
            write!(f, "\n  failing piece ({} ops):", self.ops.len())?;
        }
        for op in &self.ops {
            write!(f, "\n    {op}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}
