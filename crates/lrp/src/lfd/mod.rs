//! The log-free data structures of thesis §3.6.1, written once
//! against [`PMem`] with the release/acquire annotations of docs/LRP.md decision 2:
//! node fields are plain writes, the publishing CAS is a release, and
//! traversals load links with acquire. Each reads its recovered image back
//! with `recover` (null recovery: the ordinary read-only traversal) and
//! reports what is wrong if the image is not a well-formed structure.

use std::collections::{BTreeSet, VecDeque};

use crate::machine::UNWRITTEN;
use crate::trace::EventId;
use crate::{Mutant, PMem};

pub mod bst;
pub mod hash;
pub mod list;
pub mod queue;
pub mod skiplist;

/// An update (Synchrobench: 1:1 inserts and deletes; for the queue, enqueue and dequeue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Op {
    Insert(u64),
    Delete(u64),
}

/// What an operation returned, and the write that linearized it (its
/// successful publishing or deleting CAS) if it changed the structure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    /// The dequeued value.
    pub value: u64,
    pub lin: Option<EventId>,
}

impl Outcome {
    pub fn fail() -> Outcome {
        Outcome::default()
    }

    pub fn done<M: PMem>(m: &M, value: u64) -> Outcome {
        Outcome {
            ok: true,
            value,
            lin: m.last_write(),
        }
    }
}

/// A crash image read as memory: the words in NVM and who wrote them.
pub struct Image<'a> {
    pub words: &'a [u64],
    pub writers: &'a [u32],
}

impl Image<'_> {
    /// A word the recovering traversal reads; an error if it is outside the
    /// heap or no write ever stored it (a reachable uninitialised field).
    pub fn get(&self, addr: u64) -> Result<u64, String> {
        match self.writers.get(addr as usize) {
            None => Err(format!("a link points outside the heap (word {addr})")),
            Some(&UNWRITTEN) => Err(format!(
                "word {addr} is reachable but was never written (an uninitialised node)"
            )),
            Some(_) => Ok(self.words[addr as usize]),
        }
    }

    /// A bound on any traversal: more nodes than words means a cycle.
    pub fn bound(&self) -> usize {
        self.words.len()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LfdKind {
    List,
    Hash,
    Bst,
    Skiplist,
    Queue,
}

impl LfdKind {
    pub const ALL: [LfdKind; 5] = [
        LfdKind::List,
        LfdKind::Hash,
        LfdKind::Bst,
        LfdKind::Skiplist,
        LfdKind::Queue,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LfdKind::List => "list",
            LfdKind::Hash => "hash",
            LfdKind::Bst => "bst",
            LfdKind::Skiplist => "skiplist",
            LfdKind::Queue => "queue",
        }
    }

    pub fn parse(s: &str) -> Result<LfdKind, String> {
        LfdKind::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                format!("unknown data structure {s:?}; one of list, hash, bst, skiplist, queue")
            })
    }
}

/// A log-free data structure: its roots are plain addresses, so a copy is
/// a handle every thread can use.
#[allow(async_fn_in_trait)]
pub trait Lfd: Copy + 'static {
    const KIND: LfdKind;
    /// Lay out the empty structure (before the run: part of the initial image).
    async fn create<M: PMem>(m: &M, mutant: Option<Mutant>) -> Self;
    /// The same, for a structure meant to hold about `size` keys (the hash
    /// set sizes its bucket array by it).
    async fn create_sized<M: PMem>(m: &M, mutant: Option<Mutant>, _size: usize) -> Self {
        Self::create(m, mutant).await
    }
    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome;
    /// Null recovery: the abstract state of a crash image (sorted keys, or
    /// the queue front to back), or why the image is not well-formed.
    fn recover(&self, img: &Image) -> Result<Vec<u64>, String>;
}

/// The sequential specification: apply `ops` in order from `initial`,
/// checking each outcome; the final abstract state.
pub fn replay(
    kind: LfdKind,
    initial: &[u64],
    ops: impl Iterator<Item = (Op, Outcome)>,
) -> Result<Vec<u64>, String> {
    if kind == LfdKind::Queue {
        let mut q: VecDeque<u64> = initial.iter().copied().collect();
        for (op, out) in ops {
            match op {
                Op::Insert(v) => q.push_back(v),
                Op::Delete(_) => match q.pop_front() {
                    Some(v) if out.ok && out.value == v => {}
                    front => {
                        return Err(format!(
                            "dequeue returned {:?} but the front was {front:?}",
                            out.ok.then_some(out.value)
                        ))
                    }
                },
            }
        }
        return Ok(q.into());
    }
    let mut s: BTreeSet<u64> = initial.iter().copied().collect();
    for (op, out) in ops {
        let changed = match op {
            Op::Insert(k) => s.insert(k),
            Op::Delete(k) => s.remove(&k),
        };
        if changed != out.ok {
            return Err(format!(
                "{op:?} returned {} but the set {} the key",
                out.ok,
                if changed == matches!(op, Op::Insert(_)) {
                    "lacked"
                } else {
                    "held"
                }
            ));
        }
    }
    Ok(s.into_iter().collect())
}

pub(crate) const MARK: u64 = 1;

pub(crate) fn marked(p: u64) -> bool {
    p & MARK != 0
}

pub(crate) fn unmarked(p: u64) -> u64 {
    p & !MARK
}
