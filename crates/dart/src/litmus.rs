//! The litmus tests and their application-centric assertions (Pandora paper
//! §5 and Fig. 5; thesis §5.2–5.4, Figs. 5.1–5.3).
//!
//! Each test covers one kind of dependency cycle of Adya's DSG (thesis §2.5)
//! with the fewest operations, and owns `instances` independent copies of its
//! objects. Every transaction of a test keeps an invariant that a strictly
//! serializable store preserves *at any instance count and any concurrency*
//! (the "scalable" asserts of thesis Fig. 5.2); read-only assert transactions
//! check it recurrently while the litmus transactions run.
//!
//! | test | pattern (paper) | litmus transactions | assertion |
//! |---|---|---|---|
//! | 1 | direct-write cycles, Fig. 5(a) | write `v` to X and Y (blind) | X = Y |
//! | 1 insert/delete | Fig. 5(a), "replacing writes with inserts and deletes" | on a fresh or existing pair: insert both if absent, else delete (or overwrite) both | both absent, or both present and equal |
//! | 2 | read-write cycles / write skew, Fig. 5(b) | `S_i`: if every other X_j is 0, set X_i = 1; reset all to 0 | Σ X ≤ 1 |
//! | 3 | indirect-write cycles, Fig. 5(c) | `T_j`: X += 1, Y_j = X | Y_j ≤ X, and X ≥ every X acknowledged before the assert began (real time) |
//!
//! Extended variants (thesis Fig. 5.3) stretch each with more variables: test
//! 1 over 4 objects, test 2 as a ring of 3, test 3 with 3 derived objects.

use tandem_sim::Rng;

use crate::board::{Board, MAX_PAIRS};
use crate::recorder::Rec;
use crate::store::{StoreTx, TxFailure};
use crate::value::{Value, PREV_UNKNOWN};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Litmus 1: direct-write (ww) cycles.
    DirectWrite,
    /// Litmus 1 with inserts and deletes.
    InsertDelete,
    /// Litmus 2: read-write (rw) cycles, write skew.
    WriteSkew,
    /// Litmus 3: indirect-write cycles.
    IndirectWrite,
}

/// How a litmus transaction wants to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Commit,
    /// The script saw nothing to do that keeps the invariant (e.g. an
    /// insert found the key live): abort on purpose.
    Abort,
}

/// One litmus test: a pattern, its variable count, and its instances.
#[derive(Clone, Debug)]
pub struct Litmus {
    pub name: String,
    pub pattern: Pattern,
    pub vars: u32,
    pub instances: u32,
    /// Position in the suite: the high bits of every key.
    pub index: u32,
}

const INSTANCE_SHIFT: u32 = 8;
const TEST_SHIFT: u32 = 24;

impl Litmus {
    pub fn key(&self, instance: u32, var: u32) -> u64 {
        debug_assert!(var < 1 << INSTANCE_SHIFT && instance < 1 << (TEST_SHIFT - INSTANCE_SHIFT));
        ((self.index as u64 + 1) << TEST_SHIFT) | ((instance as u64) << INSTANCE_SHIFT) | var as u64
    }

    /// The suite index a key belongs to (inverse of [`Litmus::key`]).
    pub fn index_of_key(key: u64) -> Option<u32> {
        (key >> TEST_SHIFT).checked_sub(1).map(|i| i as u32)
    }

    /// The instance a key belongs to (inverse of [`Litmus::key`]).
    pub fn instance_of_key(key: u64) -> u32 {
        ((key >> INSTANCE_SHIFT) & ((1 << (TEST_SHIFT - INSTANCE_SHIFT)) - 1)) as u32
    }

    pub fn keys(&self) -> Vec<u64> {
        (0..self.instances)
            .flat_map(|i| (0..self.vars).map(move |v| (i, v)))
            .map(|(i, v)| self.key(i, v))
            .collect()
    }

    /// Objects loaded before the run (the insert/delete test starts empty).
    pub fn initial(&self) -> Vec<(u64, Value)> {
        match self.pattern {
            Pattern::InsertDelete => Vec::new(),
            _ => self
                .keys()
                .into_iter()
                .map(|k| (k, Value::initial(0)))
                .collect(),
        }
    }

    /// Instances that exist now (insert/delete pairs appear as the run goes).
    pub fn instances_now(&self, board: &Board) -> u32 {
        match self.pattern {
            Pattern::InsertDelete => board.pairs(self.index),
            _ => self.instances,
        }
    }

    /// The instance a transaction works on. An insert/delete litmus
    /// transaction makes a fresh pair half of the time (`instances` of them
    /// at most in flight per client); an assert needs an existing one (`None`
    /// before the first).
    pub fn pick_instance(&self, rng: &mut Rng, board: &Board, assert: bool) -> Option<u32> {
        match self.pattern {
            Pattern::InsertDelete => {
                let n = board.pairs(self.index);
                if assert && n == 0 {
                    None
                } else if !assert && (n == 0 || rng.chance(0.5)) {
                    Some(board.new_pair(self.index))
                } else {
                    Some(board.pair(rng.below(n as u64) as u32))
                }
            }
            _ => Some(rng.below(self.instances as u64) as u32),
        }
    }

    /// Keys this test may ever use, given how many pairs the run may create.
    pub fn key_count(&self, max_new_pairs: u64) -> u64 {
        match self.pattern {
            Pattern::InsertDelete => self.vars as u64 * max_new_pairs.min(MAX_PAIRS as u64),
            _ => self.vars as u64 * self.instances as u64,
        }
    }

    /// Whether the test's litmus-3 real-time floor applies.
    pub fn tracks_floor(&self) -> bool {
        self.pattern == Pattern::IndirectWrite
    }

    /// Run one litmus transaction of this test on `instance`. Returns how it
    /// wants to end and, for litmus 3, the X it wrote (the real-time floor).
    pub async fn run<T: StoreTx>(
        &self,
        tx: &mut Rec<T>,
        instance: u32,
        me: u64,
        rng: &mut Rng,
    ) -> Result<(End, Option<i64>), TxFailure> {
        let key = |v: u32| self.key(instance, v);
        let n = self.vars;
        match self.pattern {
            Pattern::DirectWrite => {
                // Blind writes in a random rotation, so instances meet in both orders.
                let first = rng.below(n as u64) as u32;
                for i in 0..n {
                    tx.write(
                        key((first + i) % n),
                        Value {
                            payload: me as i64,
                            writer: me,
                            prev: PREV_UNKNOWN,
                        },
                    )
                    .await?;
                }
                Ok((End::Commit, None))
            }
            Pattern::InsertDelete => {
                let mut seen = Vec::with_capacity(n as usize);
                for v in 0..n {
                    seen.push(tx.read(key(v)).await?);
                }
                let mine = |prev: u64| Value {
                    payload: me as i64,
                    writer: me,
                    prev,
                };
                if seen.iter().all(|s| s.is_none()) {
                    for v in 0..n {
                        match tx.insert(key(v), mine(PREV_UNKNOWN)).await {
                            Err(TxFailure::AlreadyExists) => return Ok((End::Abort, None)),
                            r => r?,
                        }
                    }
                } else if seen.iter().all(|s| s.is_some()) {
                    let delete = rng.chance(0.5);
                    for v in 0..n {
                        let r = if delete {
                            tx.delete(key(v)).await
                        } else {
                            tx.write(key(v), mine(seen[v as usize].expect("present").writer))
                                .await
                        };
                        match r {
                            Err(TxFailure::NotFound) => return Ok((End::Abort, None)),
                            r => r?,
                        }
                    }
                }
                // Mixed: nothing keeps the invariant; commit read-only (the
                // assertions report the state if the store really holds it).
                Ok((End::Commit, None))
            }
            Pattern::WriteSkew => {
                let reset = rng.chance(0.25);
                let target = rng.below(n as u64) as u32;
                let mut seen = vec![None; n as usize];
                for i in 1..=n {
                    // The target last: it is the one written.
                    let v = (target + i) % n;
                    seen[v as usize] = Some(present(tx.read(key(v)).await?, self, key(v))?);
                }
                let seen: Vec<Value> = seen.into_iter().map(|s| s.expect("read")).collect();
                if reset {
                    for v in 0..n {
                        if seen[v as usize].payload != 0 {
                            tx.write(
                                key(v),
                                Value {
                                    payload: 0,
                                    writer: me,
                                    prev: seen[v as usize].writer,
                                },
                            )
                            .await?;
                        }
                    }
                } else if seen.iter().all(|s| s.payload == 0) {
                    tx.write(
                        key(target),
                        Value {
                            payload: 1,
                            writer: me,
                            prev: seen[target as usize].writer,
                        },
                    )
                    .await?;
                }
                Ok((End::Commit, None))
            }
            Pattern::IndirectWrite => {
                let j = 1 + rng.below(n as u64 - 1) as u32;
                let x = present(tx.read(key(0)).await?, self, key(0))?;
                let y = present(tx.read(key(j)).await?, self, key(j))?;
                let next = x.payload + 1;
                tx.write(
                    key(0),
                    Value {
                        payload: next,
                        writer: me,
                        prev: x.writer,
                    },
                )
                .await?;
                tx.write(
                    key(j),
                    Value {
                        payload: next,
                        writer: me,
                        prev: y.writer,
                    },
                )
                .await?;
                Ok((End::Commit, Some(next)))
            }
        }
    }

    /// The assert transaction's reads: every object of `instance`.
    pub async fn assert_reads<T: StoreTx>(
        &self,
        tx: &mut Rec<T>,
        instance: u32,
    ) -> Result<Vec<Option<Value>>, TxFailure> {
        let mut seen = Vec::with_capacity(self.vars as usize);
        for v in 0..self.vars {
            seen.push(tx.read(self.key(instance, v)).await?);
        }
        Ok(seen)
    }

    /// The assertion over what a committed assert transaction read; `floor`
    /// is the largest litmus-3 X acknowledged before it began. `None` if it holds.
    pub fn verdict(&self, instance: u32, seen: &[Option<Value>], floor: i64) -> Option<String> {
        let show = || {
            seen.iter()
                .map(|s| match s {
                    Some(v) => format!("{}(by {})", v.payload, crate::checker::fmt_tx(v.writer)),
                    None => "absent".into(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let fail = |why: &str| {
            Some(format!(
                "{} instance {instance}: {why}; read [{}]",
                self.name,
                show()
            ))
        };
        let all_present = seen.iter().all(|s| s.is_some());
        match self.pattern {
            Pattern::DirectWrite | Pattern::InsertDelete => {
                if self.pattern == Pattern::InsertDelete && seen.iter().all(|s| s.is_none()) {
                    return None;
                }
                if !all_present {
                    return fail("objects written together are not all present");
                }
                let w = seen[0].expect("present").writer;
                if seen.iter().any(|s| s.expect("present").writer != w) {
                    return fail("objects written together hold different transactions' values (direct-write cycle)");
                }
                None
            }
            Pattern::WriteSkew => {
                if !all_present {
                    return fail("an object vanished");
                }
                let sum: i64 = seen.iter().map(|s| s.expect("present").payload).sum();
                if sum > 1 {
                    return fail("more than one object is set (write skew: read-write cycle)");
                }
                None
            }
            Pattern::IndirectWrite => {
                if !all_present {
                    return fail("an object vanished");
                }
                let x = seen[0].expect("present").payload;
                if seen[1..].iter().any(|s| s.expect("present").payload > x) {
                    return fail("a derived object is ahead of X (indirect-write cycle)");
                }
                if x < floor {
                    return fail(&format!("X went back below {floor}, a value acknowledged before this read began (real-time order)"));
                }
                None
            }
        }
    }
}

/// A litmus object must exist (only the insert/delete test ever removes one).
fn present(v: Option<Value>, t: &Litmus, key: u64) -> Result<Value, TxFailure> {
    // A vanished object cannot keep the invariant: the client aborts the
    // (still open) transaction, and the assertions report the state.
    let _ = (t, key);
    v.ok_or(TxFailure::NotFound)
}
