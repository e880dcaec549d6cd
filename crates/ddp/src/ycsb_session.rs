//! What one closed-loop YCSB session asks a DDP cluster next, as the
//! DDP paper's clients do (§7, Table 5), the same in simulated time
//! (`tandem ddp bench --net sim`) and over processes (`load.rs`):
//! - plain reads and writes, carrying the session's causal past;
//! - under Scope persistency, a `Persist` closing the scope every
//!   `scope_writes` writes (the paper's 10);
//! - under Transactional consistency, transactions of `tx_requests`
//!   requests (the paper's 5): Begin, the requests, End. A squashed
//!   transaction restarts with the same requests, so they count as done
//!   only when it commits; under Trans-Scope the scope closes every second
//!   committed transaction.

use std::collections::BTreeSet;

use tandem_sim::Rng;
use tandem_ycsb::{Ycsb, YcsbOp};

use crate::model::{Consistency, Model, Persistency};
use crate::types::{Op, Reply, Value};
use crate::upd::vector::Vector;

/// What every session of one run does.
#[derive(Clone, Debug)]
pub struct SessionPlan {
    pub ycsb: Ycsb,
    /// Scope persistency: writes per scope.
    pub scope_writes: Option<u32>,
    /// Transactional consistency: requests per transaction.
    pub tx_requests: Option<usize>,
}

impl SessionPlan {
    /// The paper's clients for `model`: scopes of 10 writes, transactions of 5 requests.
    pub fn paper(ycsb: Ycsb, model: Model) -> SessionPlan {
        SessionPlan {
            ycsb,
            scope_writes: (model.p == Persistency::Scope).then_some(10),
            tx_requests: (model.c == Consistency::Trans).then_some(5),
        }
    }
}

impl SessionPlan {
    /// Plain reads (`read_ratio` of them) and writes over `keys` uniform keys.
    pub fn uniform(keys: u64, read_ratio: f64) -> SessionPlan {
        let mut ycsb = Ycsb::new("ycsb-a", keys.max(1), true).expect("a known workload with a key");
        (ycsb.name, ycsb.read_ratio) = ("uniform".into(), read_ratio);
        SessionPlan {
            ycsb,
            scope_writes: None,
            tx_requests: None,
        }
    }
}

/// A transaction in progress.
#[derive(Clone, Debug, Default)]
struct TxPlan {
    seq: u64,
    plan: Vec<YcsbOp>,
    pos: usize,
    begun: bool,
    /// Keys written, and transactions committed, in the open scope.
    scope_keys: u32,
    scope_txs: u32,
}

/// One session's state between its operations.
#[derive(Clone, Debug, Default)]
pub struct YcsbSession {
    /// The open scope and the writes in it.
    scope: u64,
    scope_writes: u32,
    /// The session's causal past (Causal models carry it in every op).
    past: Vector,
    tx: TxPlan,
}

impl YcsbSession {
    /// The next operation; `value` is what a write would write.
    pub fn next_op(&mut self, plan: &SessionPlan, rng: &mut Rng, value: Value) -> Op {
        if let Some(n) = plan.tx_requests {
            return self.next_tx_op(plan, n, rng, value);
        }
        if plan.scope_writes.is_some_and(|w| self.scope_writes >= w) {
            let op = Op::Persist {
                scope: self.scope,
                writes: self.scope_writes,
            };
            (self.scope, self.scope_writes) = (self.scope + 1, 0);
            return op;
        }
        match plan.ycsb.next(rng) {
            YcsbOp::Read(key) => Op::Read {
                key,
                after: self.past.clone(),
                tx: None,
            },
            YcsbOp::Update(key) => {
                self.scope_writes += 1;
                Op::Write {
                    key,
                    value,
                    scope: self.scope,
                    after: self.past.clone(),
                    tx: None,
                }
            }
        }
    }

    /// Begin, the transaction's next request, or End; a Persist every
    /// second committed transaction under Scope.
    fn next_tx_op(&mut self, plan: &SessionPlan, n: usize, rng: &mut Rng, value: Value) -> Op {
        let t = &mut self.tx;
        if t.plan.is_empty() {
            if plan.scope_writes.is_some() && t.scope_txs >= 2 {
                let op = Op::Persist {
                    scope: self.scope,
                    writes: t.scope_keys,
                };
                (self.scope, t.scope_keys, t.scope_txs) = (self.scope + 1, 0, 0);
                return op;
            }
            t.plan = (0..n).map(|_| plan.ycsb.next(rng)).collect();
            (t.pos, t.begun) = (0, false);
        }
        if !t.begun {
            t.begun = true;
            return Op::Begin { tx: t.seq };
        }
        let Some(&op) = t.plan.get(t.pos) else {
            return Op::End { tx: t.seq };
        };
        t.pos += 1;
        match op {
            YcsbOp::Read(key) => Op::Read {
                key,
                after: Vector::default(),
                tx: Some(t.seq),
            },
            YcsbOp::Update(key) => Op::Write {
                key,
                value,
                scope: self.scope,
                after: Vector::default(),
                tx: Some(t.seq),
            },
        }
    }

    /// Take the reply to the last operation; returns how many YCSB requests
    /// it completes (a read or write: 1; a commit: the transaction's
    /// requests; a Persist, Begin or squash: 0).
    pub fn on_reply(&mut self, plan: &SessionPlan, r: &Reply) -> u64 {
        match r {
            Reply::Read { id: Some(id), .. } | Reply::Written { id: Some(id), .. } => {
                self.past.add(*id)
            }
            Reply::PastLost { upto } => self.past.clamp(upto),
            _ => {}
        }
        match (plan.tx_requests, r) {
            (Some(n), Reply::Committed { .. }) => {
                let t = &mut self.tx;
                let keys: BTreeSet<u64> = t
                    .plan
                    .iter()
                    .filter_map(|o| {
                        if let YcsbOp::Update(k) = o {
                            Some(*k)
                        } else {
                            None
                        }
                    })
                    .collect();
                (t.scope_keys, t.scope_txs) = (t.scope_keys + keys.len() as u32, t.scope_txs + 1);
                t.plan.clear();
                (t.seq, t.pos, t.begun) = (t.seq + 1, 0, false);
                n as u64
            }
            (Some(_), Reply::Aborted { .. } | Reply::OutcomeUnknown { .. }) => {
                let t = &mut self.tx;
                (t.seq, t.pos, t.begun) = (t.seq + 1, 0, false);
                0
            }
            (Some(_), _) => 0,
            (
                None,
                Reply::Persisted { .. }
                | Reply::ScopeLost { .. }
                | Reply::Error { .. }
                | Reply::PastLost { .. },
            ) => 0,
            (None, _) => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Ts;

    fn model(s: &str) -> Model {
        Model::parse(s).unwrap()
    }

    #[test]
    fn scope_sessions_close_a_scope_every_ten_writes() {
        let plan = SessionPlan::paper(Ycsb::new("ycsb-w", 100, true).unwrap(), model("lin-scope"));
        let (mut s, mut rng) = (YcsbSession::default(), Rng::new(1));
        let ops: Vec<Op> = (0..200).map(|v| s.next_op(&plan, &mut rng, v)).collect();
        let persists: Vec<&Op> = ops
            .iter()
            .filter(|o| matches!(o, Op::Persist { .. }))
            .collect();
        assert!(
            persists.len() >= 15,
            "{} persists in 200 ops",
            persists.len()
        );
        assert!(persists
            .iter()
            .all(|o| matches!(o, Op::Persist { writes: 10, .. })));
    }

    #[test]
    fn transactions_count_their_requests_only_when_they_commit() {
        let plan = SessionPlan::paper(
            Ycsb::new("ycsb-a", 100, true).unwrap(),
            model("trans-synch"),
        );
        let (mut s, mut rng) = (YcsbSession::default(), Rng::new(1));
        assert!(matches!(s.next_op(&plan, &mut rng, 1), Op::Begin { tx: 0 }));
        assert_eq!(s.on_reply(&plan, &Reply::Begun { tx: 0 }), 0);
        for _ in 0..5 {
            assert!(matches!(
                s.next_op(&plan, &mut rng, 1),
                Op::Read { tx: Some(0), .. } | Op::Write { tx: Some(0), .. }
            ));
            assert_eq!(
                s.on_reply(
                    &plan,
                    &Reply::Written {
                        ts: Ts::ZERO,
                        id: None
                    }
                ),
                0
            );
        }
        assert!(matches!(s.next_op(&plan, &mut rng, 1), Op::End { tx: 0 }));
        assert_eq!(
            s.on_reply(&plan, &Reply::Aborted { tx: 0 }),
            0,
            "a squash completes nothing"
        );
        assert!(
            matches!(s.next_op(&plan, &mut rng, 1), Op::Begin { tx: 1 }),
            "the restart is a new transaction"
        );
        s.on_reply(&plan, &Reply::Begun { tx: 1 });
        (0..5).for_each(|_| drop(s.next_op(&plan, &mut rng, 1)));
        assert!(matches!(s.next_op(&plan, &mut rng, 1), Op::End { tx: 1 }));
        assert_eq!(s.on_reply(&plan, &Reply::Committed { tx: 1 }), 5);
    }
}
