//! One DART client: recurrently runs litmus transactions and assert
//! transactions against a [`TransactionalStore`] session, records the history
//! and checks each committed assert (thesis §5.2.1: "assert transactions ...
//! at regular intervals"; §5.4: "non-assert transactions ... execute
//! recurrently").
//!
//! The client is generic over the store, so the same scripts run on Tandem
//! (sim or tcp fabric) and PostgreSQL. It knows nothing of crashes: a harness
//! that drops the client's task mid-transaction leaves the transaction's
//! record `unknown` in the shared log.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tandem_sim::Rng;

use crate::board::Board;
use crate::history::{Outcome, TxRecord};
use crate::litmus::End;
use crate::recorder::{ClientLog, Rec, SharedLog};
use crate::store::{StoreTx, TransactionalStore, TxFailure};
use crate::suite::Suite;

/// Knobs of one client.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    /// Unique in the run; transaction ids are `(id + 1) << 32 | seq`.
    pub id: u32,
    pub seed: u64,
    /// Probability that a transaction is an assert.
    pub assert_chance: f64,
    /// Record the history (the checker needs it; pure assertion runs do not).
    pub record: bool,
}

/// Whether the client may go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Continue,
    /// The session is gone (outcome unknown, access revoked, connection lost).
    Stop,
}

pub struct Client {
    spec: ClientSpec,
    rng: Rng,
    suite: Arc<Suite>,
    log: SharedLog,
    board: Board,
    clock: Rc<dyn Fn() -> u64>,
    seq: u64,
}

impl Client {
    pub fn new(
        spec: ClientSpec,
        suite: Arc<Suite>,
        board: Board,
        clock: Rc<dyn Fn() -> u64>,
    ) -> Client {
        let rng = Rng::new(spec.seed);
        Client {
            spec,
            rng,
            suite,
            log: Rc::new(RefCell::new(ClientLog::default())),
            board,
            clock,
            seq: 0,
        }
    }

    /// Journal every event to `j` as well (a worker process that may be
    /// killed; needs `record`).
    pub fn with_journal(self, j: Arc<crate::journal::Journal>) -> Client {
        assert!(self.spec.record, "a journal needs a recorded history");
        self.log.borrow_mut().journal = Some(j);
        self
    }

    /// The log the harness keeps (it outlives a crashed client task).
    pub fn log(&self) -> SharedLog {
        self.log.clone()
    }

    /// Run up to `txs` transactions; stops early if the session dies.
    pub async fn run<S: TransactionalStore>(&mut self, store: &mut S, txs: u64) -> Step {
        for _ in 0..txs {
            if self.step(store).await == Step::Stop {
                return Step::Stop;
            }
        }
        Step::Continue
    }

    /// One transaction: an assert with probability `assert_chance`, else a
    /// litmus transaction, on a random test and instance.
    pub async fn step<S: TransactionalStore>(&mut self, store: &mut S) -> Step {
        let t = self.rng.below(self.suite.tests.len() as u64) as usize;
        let assert = self.rng.chance(self.spec.assert_chance);
        let test = &self.suite.tests[t];
        let (assert, inst) = match test.pick_instance(&mut self.rng, &self.board, assert) {
            Some(i) => (assert, i),
            // Nothing to assert on yet: run a litmus transaction instead.
            None => (
                false,
                test.pick_instance(&mut self.rng, &self.board, false)
                    .expect("a litmus transaction always finds an instance"),
            ),
        };
        self.transact(store, t, inst, assert).await.0
    }

    /// After the run (and any recovery): one committed assert per test
    /// instance, retrying aborts up to `retries` times each.
    pub async fn final_check<S: TransactionalStore>(
        &mut self,
        store: &mut S,
        retries: u32,
    ) -> Result<(), String> {
        let suite = self.suite.clone();
        for (t, test) in suite.tests.iter().enumerate() {
            for inst in 0..test.instances_now(&self.board) {
                let mut ok = false;
                for _ in 0..=retries {
                    let (step, committed) = self.transact(store, t, inst, true).await;
                    if step == Step::Stop {
                        return Err(format!(
                            "the final check's session died on {} instance {inst}",
                            test.name
                        ));
                    }
                    if committed {
                        ok = true;
                        break;
                    }
                }
                if !ok {
                    return Err(format!(
                        "{} instance {inst}: the final assert aborted {} times in a quiet store",
                        test.name,
                        retries + 1
                    ));
                }
            }
        }
        Ok(())
    }

    /// Run one transaction to its end; returns whether it committed.
    pub async fn transact<S: TransactionalStore>(
        &mut self,
        store: &mut S,
        t: usize,
        inst: u32,
        assert: bool,
    ) -> (Step, bool) {
        let suite = self.suite.clone();
        let test = &suite.tests[t];
        self.seq += 1;
        let me = ((self.spec.id as u64 + 1) << 32) | self.seq;
        let invoke = (self.clock)();
        let floor = if assert && test.tracks_floor() {
            self.board.floor(t as u32, inst)
        } else {
            0
        };
        let record = self.spec.record;
        let idx = {
            let mut l = self.log.borrow_mut();
            // Unknown until it completes: a crash that drops this task leaves it so.
            l.unknown += 1;
            if record {
                if let Some(j) = &l.journal {
                    j.invoke(me, self.spec.id, invoke);
                }
                l.records.push(TxRecord::new(me, self.spec.id, invoke));
            }
            l.records.len().wrapping_sub(1)
        };
        enum Result_ {
            Committed(Option<i64>, Option<Vec<Option<crate::value::Value>>>),
            Aborted,
            Failed(TxFailure),
        }
        let result = match store.begin().await {
            Err(f) => Result_::Failed(f),
            Ok(tx) => {
                let mut rec = Rec::new(tx, self.log.clone(), idx, record);
                let body = if assert {
                    test.assert_reads(&mut rec, inst)
                        .await
                        .map(|s| (End::Commit, None, Some(s)))
                } else {
                    test.run(&mut rec, inst, me, &mut self.rng)
                        .await
                        .map(|(e, x)| (e, x, None))
                };
                match body {
                    Ok((End::Commit, x, seen)) => match rec.into_tx().commit().await {
                        Ok(()) => Result_::Committed(x, seen),
                        Err(f) => Result_::Failed(f),
                    },
                    Ok((End::Abort, ..)) => {
                        rec.into_tx().abort().await;
                        Result_::Aborted
                    }
                    Err(f) if f.finishes() => Result_::Failed(f),
                    Err(_) => {
                        rec.into_tx().abort().await;
                        Result_::Aborted
                    }
                }
            }
        };
        let complete = (self.clock)();
        let outcome = match &result {
            Result_::Committed(..) => Outcome::Committed,
            Result_::Aborted | Result_::Failed(TxFailure::Aborted(_)) => Outcome::Aborted,
            Result_::Failed(_) => Outcome::Unknown,
        };
        let mut l = self.log.borrow_mut();
        if record {
            let r = &mut l.records[idx];
            r.outcome = outcome;
            r.complete_ns = (outcome != Outcome::Unknown).then_some(complete);
            if let Some(j) = &l.journal {
                j.complete(&l.records[idx]);
            }
        }
        match outcome {
            Outcome::Committed => l.committed += 1,
            Outcome::Aborted => l.aborted += 1,
            Outcome::Unknown => l.unknown += 1,
        }
        l.unknown -= 1;
        if let Result_::Committed(x, seen) = result {
            if let Some(x) = x {
                self.board.raise_floor(t as u32, inst, x);
            }
            if let Some(seen) = seen {
                l.asserts_checked += 1;
                if let Some(j) = &l.journal {
                    j.checked(me);
                }
                if let Some(why) = test.verdict(inst, &seen, floor) {
                    let what = format!(
                        "{why} (assert {} invoked at {invoke} ns)",
                        crate::checker::fmt_tx(me)
                    );
                    if let Some(j) = &l.journal {
                        j.violation(&test.name, &what);
                    }
                    l.violations.push((test.name.clone(), what));
                }
            }
            return (Step::Continue, true);
        }
        (
            if outcome == Outcome::Unknown {
                Step::Stop
            } else {
                Step::Continue
            },
            false,
        )
    }
}
