//! The Wing–Gong linearizability search with Lowe's just-in-time
//! linearization and memoization (as Porcupine's `checkSingle` does), for
//! one read/write register whose initial value is `None`.
//!
//! Operations become call and return entries in one list sorted by time
//! (calls before returns at equal times, so touching intervals count as
//! concurrent). The search walks the list: at a call it tries to linearize
//! that operation now (if the register allows it and the resulting
//! (linearized set, value) was never seen, it lifts the operation's two
//! entries out of the list and restarts from the head); at the return of an
//! operation not yet linearized it backtracks. The history is linearizable
//! iff the list empties.
//!
//! The memo key is canonical and small: operations are numbered by return
//! time, and every operation that returned before the search's frontier is
//! linearized, so the linearized set is `0..prefix` plus the few operations
//! linearized early ("extras", at most the concurrency at the frontier).

use std::collections::HashSet;

/// One operation as the search sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegOp {
    pub call: u64,
    /// `u64::MAX` for a write with no reply: it may take effect any time
    /// after its call (placing it last is the same as never).
    pub ret: u64,
    pub write: bool,
    /// A write's value, or the value a read returned.
    pub value: Option<u64>,
}

/// How the search ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    Linearizable {
        states: u64,
    },
    /// No linearization. `prefix` holds the indices of the operations
    /// called before the furthest return no branch got past: that piece
    /// alone is already not linearizable. `stuck` is the operation whose
    /// return that is.
    Violated {
        states: u64,
        prefix: Vec<usize>,
        stuck: usize,
    },
    Undecided {
        states: u64,
    },
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct MemoKey {
    prefix: u32,
    extras: Box<[u32]>,
    value: Option<u64>,
}

/// The entry list: position 0 is the head, `tail` the end; 1..tail hold
/// the entries sorted by (time, return-after-call).
struct Entries {
    next: Vec<u32>,
    prev: Vec<u32>,
    /// The operation (numbered by return order) of each entry.
    op: Vec<u32>,
    /// For a call entry, its return entry; `NONE` for a return entry.
    partner: Vec<u32>,
    tail: u32,
}

const NONE: u32 = u32::MAX;

impl Entries {
    fn build(ops: &[RegOp]) -> Entries {
        let mut ev: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * ops.len());
        for (i, o) in ops.iter().enumerate() {
            ev.push((o.call, 0, i as u32));
            ev.push((o.ret, 1, i as u32));
        }
        ev.sort_unstable();
        let tail = ev.len() as u32 + 1;
        let mut e = Entries {
            next: (1..=tail + 1).collect(),
            prev: (0..=tail).map(|p| p.wrapping_sub(1)).collect(),
            op: vec![NONE; tail as usize + 1],
            partner: vec![NONE; tail as usize + 1],
            tail,
        };
        let mut call_pos = vec![0u32; ops.len()];
        for (p, &(_, kind, i)) in ev.iter().enumerate() {
            let pos = p as u32 + 1;
            e.op[pos as usize] = i;
            match kind {
                0 => call_pos[i as usize] = pos,
                _ => e.partner[call_pos[i as usize] as usize] = pos,
            }
        }
        e
    }

    fn unlink(&mut self, p: u32) {
        let (a, b) = (self.prev[p as usize], self.next[p as usize]);
        self.next[a as usize] = b;
        self.prev[b as usize] = a;
    }

    fn relink(&mut self, p: u32) {
        let (a, b) = (self.prev[p as usize], self.next[p as usize]);
        self.next[a as usize] = p;
        self.prev[b as usize] = p;
    }

    /// Take a call entry and its return out of the list.
    fn lift(&mut self, call: u32) {
        self.unlink(call);
        self.unlink(self.partner[call as usize]);
    }

    /// Undo [`Entries::lift`] (in reverse order, as dancing links need).
    fn unlift(&mut self, call: u32) {
        self.relink(self.partner[call as usize]);
        self.relink(call);
    }

    fn first(&self) -> u32 {
        self.next[0]
    }
}

/// The set of linearized operations, in canonical form: `0..prefix` plus
/// the sorted `extras` above it (operations numbered by return order).
#[derive(Clone, Default)]
struct Linearized {
    prefix: u32,
    extras: Vec<u32>,
}

impl Linearized {
    /// This set plus `op` (not in it).
    fn with(&self, op: u32) -> Linearized {
        let mut next = self.clone();
        let at = next.extras.binary_search(&op).unwrap_err();
        next.extras.insert(at, op);
        let run = next
            .extras
            .iter()
            .enumerate()
            .take_while(|&(j, &x)| x == next.prefix + j as u32)
            .count();
        next.extras.drain(..run);
        next.prefix += run as u32;
        next
    }

    fn key(&self, value: Option<u64>) -> MemoKey {
        MemoKey {
            prefix: self.prefix,
            extras: self.extras.as_slice().into(),
            value,
        }
    }
}

/// The register's step: the value after `op`, or `None` if `op` cannot
/// happen in state `value`.
fn step(value: Option<u64>, op: &RegOp) -> Option<Option<u64>> {
    match op.write {
        true => Some(op.value),
        false => (op.value == value).then_some(value),
    }
}

/// Decide whether `ops` (one register) is linearizable, exploring at most
/// `max_states` memoized states.
pub(crate) fn search(ops: &[RegOp], max_states: u64) -> Outcome {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (ops[i].ret, ops[i].call));
    let sorted: Vec<RegOp> = order.iter().map(|&i| ops[i]).collect();
    let mut run = Search::new(&sorted);
    match run.run(max_states) {
        Some(true) => Outcome::Linearizable {
            states: run.states(),
        },
        None => Outcome::Undecided {
            states: run.states(),
        },
        Some(false) => {
            let prefix = run
                .prefix_before_stuck()
                .into_iter()
                .map(|i| order[i])
                .collect();
            let stuck = order[run.list.op[run.stuck as usize] as usize];
            Outcome::Violated {
                states: run.states(),
                prefix,
                stuck,
            }
        }
    }
}

struct Search<'a> {
    ops: &'a [RegOp],
    list: Entries,
    lin: Linearized,
    memo: HashSet<MemoKey>,
    /// The furthest return entry at which some branch had to backtrack.
    stuck: u32,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [RegOp]) -> Search<'a> {
        Search {
            ops,
            list: Entries::build(ops),
            lin: Linearized::default(),
            memo: HashSet::new(),
            stuck: 0,
        }
    }

    fn states(&self) -> u64 {
        self.memo.len() as u64
    }

    /// `Some(linearizable?)`, or `None` when the budget ran out.
    fn run(&mut self, max_states: u64) -> Option<bool> {
        let mut value = None;
        let mut calls: Vec<(u32, Option<u64>, Linearized)> = Vec::new();
        let mut entry = self.list.first();
        while self.list.first() != self.list.tail {
            let op = self.list.op[entry as usize];
            if self.list.partner[entry as usize] != NONE {
                if let Some((after, lin)) = self.try_linearize(op, value) {
                    if self.states() > max_states {
                        return None;
                    }
                    calls.push((entry, value, std::mem::replace(&mut self.lin, lin)));
                    value = after;
                    self.list.lift(entry);
                    entry = self.list.first();
                } else {
                    entry = self.list.next[entry as usize];
                }
            } else {
                self.stuck = self.stuck.max(entry);
                let Some((call, before, lin)) = calls.pop() else {
                    return Some(false);
                };
                (value, self.lin) = (before, lin);
                self.list.unlift(call);
                entry = self.list.next[call as usize];
            }
        }
        Some(true)
    }

    /// Linearize `op` now if the register allows it and the state it leads
    /// to is new: the value and linearized set after it.
    fn try_linearize(&mut self, op: u32, value: Option<u64>) -> Option<(Option<u64>, Linearized)> {
        let after = step(value, &self.ops[op as usize])?;
        let lin = self.lin.with(op);
        self.memo.insert(lin.key(after)).then_some((after, lin))
    }

    /// The operations whose call entry precedes the furthest stuck return.
    fn prefix_before_stuck(&self) -> Vec<usize> {
        let mut out: Vec<usize> = (1..self.stuck)
            .filter(|&p| self.list.partner[p as usize] != NONE)
            .map(|p| self.list.op[p as usize] as usize)
            .collect();
        out.sort_unstable();
        out
    }
}
