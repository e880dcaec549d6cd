//! Tandem's workloads restated for the peers (docs/DESIGN.md §6): the same key
//! choice, transaction mix and amounts as `tandem_workloads::smallbank` and
//! `tandem_workloads::micro`, drawn from the same seeded `Rng` in the same
//! order, so a peer client does the same logical work as a Tandem coordinator.
//!
//! Every transaction here reads a set of keys known up front, then decides
//! its writes from the values read ([`TxPlan::decide`]): FORD's SmallBank and
//! the micro-benchmark all have that shape, which lets each peer run it in its
//! native optimistic or serializable form. Acknowledged commits go into the
//! same ledgers the Tandem clients keep, and the post-run check is
//! `smallbank::verify` / `micro::verify`, unchanged.

use std::collections::BTreeMap;

use tandem_sim::Rng;
use tandem_workloads::ledger::EffectLedger;
use tandem_workloads::micro::{self, KeyChooser, MicroLedger, MicroSpec};
use tandem_workloads::smallbank::{self, SmallBankSpec};

/// The tables a peer holds. Values are plain integers: a balance in cents,
/// or a micro write counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Savings,
    Checking,
    Micro,
}

impl Table {
    /// Key prefix in Redis and etcd (`s:<id>`, `c:<id>`, `m:<id>`).
    pub fn prefix(self) -> &'static str {
        match self {
            Table::Savings => "s",
            Table::Checking => "c",
            Table::Micro => "m",
        }
    }

    /// SQL table name.
    pub fn sql(self) -> &'static str {
        match self {
            Table::Savings => "savings",
            Table::Checking => "checking",
            Table::Micro => "micro",
        }
    }

    /// Tandem's table id (the ledger's cell names use it).
    pub fn id(self) -> u32 {
        match self {
            Table::Savings => smallbank::SAVINGS,
            Table::Checking => smallbank::CHECKING,
            Table::Micro => micro::TABLE,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub table: Table,
    pub id: u64,
}

impl Key {
    /// The Redis / etcd key.
    pub fn name(&self) -> String {
        format!("{}:{}", self.table.prefix(), self.id)
    }
}

fn sav(id: u64) -> Key {
    Key {
        table: Table::Savings,
        id,
    }
}

fn chk(id: u64) -> Key {
    Key {
        table: Table::Checking,
        id,
    }
}

#[derive(Clone, Debug)]
pub enum PeerWorkload {
    SmallBank(SmallBankSpec),
    Micro(MicroSpec),
}

impl PeerWorkload {
    pub fn name(&self) -> &'static str {
        match self {
            PeerWorkload::SmallBank(_) => "smallbank",
            PeerWorkload::Micro(_) => "micro",
        }
    }

    /// Tables and their row count (ids `0..rows`).
    pub fn tables(&self) -> Vec<(Table, u64)> {
        match self {
            PeerWorkload::SmallBank(s) => {
                vec![(Table::Savings, s.accounts), (Table::Checking, s.accounts)]
            }
            PeerWorkload::Micro(m) => vec![(Table::Micro, m.keys)],
        }
    }

    /// Every row's initial value.
    pub fn initial_value(&self) -> i64 {
        match self {
            PeerWorkload::SmallBank(s) => s.initial_balance_cents,
            PeerWorkload::Micro(_) => 0,
        }
    }

    pub fn client(&self, seed: u64) -> TxClient {
        let ledger = match self {
            PeerWorkload::SmallBank(_) => PeerLedger::SmallBank(EffectLedger::default()),
            PeerWorkload::Micro(_) => PeerLedger::Micro(MicroLedger::default()),
        };
        TxClient {
            workload: self.clone(),
            rng: Rng::new(seed),
            ledger,
        }
    }

    pub fn empty_ledger(&self) -> PeerLedger {
        self.client(0).ledger
    }

    /// The post-run check of the Tandem workload, on a peer's final state
    /// (`live[i]` is table `tables()[i]`, id → value).
    pub fn verify(&self, live: &[BTreeMap<u64, i64>], ledger: &PeerLedger) -> Vec<String> {
        let bytes = |t: usize, enc: &dyn Fn(u64, i64) -> Vec<u8>| -> BTreeMap<u64, Vec<u8>> {
            live[t].iter().map(|(k, v)| (*k, enc(*k, *v))).collect()
        };
        match (self, ledger) {
            (PeerWorkload::SmallBank(s), PeerLedger::SmallBank(l)) => {
                let enc = |k: u64, v: i64| smallbank::encode(k, v).to_vec();
                smallbank::verify(s, &bytes(0, &enc), &bytes(1, &enc), l)
            }
            (PeerWorkload::Micro(m), PeerLedger::Micro(l)) => {
                let mut v = Vec::new();
                if live[0].values().any(|c| *c < 0) {
                    v.push("a micro write counter is negative".into());
                }
                let enc = |k: u64, c: i64| micro::encode_value(k, c.max(0) as u64).to_vec();
                v.extend(micro::verify(m, &bytes(0, &enc), l));
                v
            }
            _ => vec!["workload and ledger do not match".into()],
        }
    }
}

/// What a client saw acknowledged (the Tandem clients' ledger types).
#[derive(Clone, Debug)]
pub enum PeerLedger {
    SmallBank(EffectLedger),
    Micro(MicroLedger),
}

impl PeerLedger {
    pub fn merge(&mut self, o: &PeerLedger) {
        match (self, o) {
            (PeerLedger::SmallBank(a), PeerLedger::SmallBank(b)) => a.merge(b),
            (PeerLedger::Micro(a), PeerLedger::Micro(b)) => a.merge(b),
            _ => panic!("merging ledgers of different workloads"),
        }
    }
}

#[derive(Clone, Debug)]
enum Logic {
    Amalgamate,
    Balance,
    /// DepositChecking / TransactSavings: add to the one key read.
    Add(i64),
    SendPayment,
    WriteCheck,
    /// Increment the counters of the keys flagged `true`.
    Micro(Vec<bool>),
}

/// One transaction: the keys it reads, in order, and how it decides its writes.
#[derive(Clone, Debug)]
pub struct TxPlan {
    pub kind: &'static str,
    pub reads: Vec<Key>,
    logic: Logic,
}

/// What a transaction does after its reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Commit without writes.
    ReadOnly,
    /// Write these values (each key was read first) and commit.
    Write(Vec<(Key, i64)>),
    /// The application rolls back (SendPayment with insufficient funds).
    Rollback,
}

impl TxPlan {
    /// True when the transaction can never write (a peer may then use a
    /// single atomic multi-key read instead of a read-write transaction).
    pub fn read_only(&self) -> bool {
        match &self.logic {
            Logic::Balance => true,
            Logic::Micro(w) => !w.contains(&true),
            _ => false,
        }
    }

    /// FORD's semantics (see `tandem_workloads::smallbank`), on the values
    /// read, in `reads` order.
    pub fn decide(&self, v: &[i64]) -> Decision {
        assert_eq!(v.len(), self.reads.len(), "one value per key read");
        let r = &self.reads;
        match &self.logic {
            Logic::Amalgamate => {
                Decision::Write(vec![(r[0], 0), (r[1], 0), (r[2], v[2] + v[0] + v[1])])
            }
            Logic::Balance => Decision::ReadOnly,
            Logic::Add(cents) => Decision::Write(vec![(r[0], v[0] + cents)]),
            Logic::SendPayment if v[0] < smallbank::SEND_PAYMENT_CENTS => Decision::Rollback,
            Logic::SendPayment => Decision::Write(vec![
                (r[0], v[0] - smallbank::SEND_PAYMENT_CENTS),
                (r[1], v[1] + smallbank::SEND_PAYMENT_CENTS),
            ]),
            Logic::WriteCheck => {
                let (s, c) = (v[0], v[1]);
                let debit = if s + c < smallbank::WRITE_CHECK_CENTS {
                    smallbank::WRITE_CHECK_CENTS + smallbank::WRITE_CHECK_PENALTY_CENTS
                } else {
                    smallbank::WRITE_CHECK_CENTS
                };
                Decision::Write(vec![(r[1], c - debit)])
            }
            Logic::Micro(w) => {
                let writes: Vec<(Key, i64)> = r
                    .iter()
                    .zip(v)
                    .zip(w)
                    .filter(|(_, w)| **w)
                    .map(|((k, v), _)| (*k, v + 1))
                    .collect();
                if writes.is_empty() {
                    Decision::ReadOnly
                } else {
                    Decision::Write(writes)
                }
            }
        }
    }
}

/// How a peer ended one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Executed {
    /// Committed; the values read and the decision taken on them.
    Committed {
        values: Vec<i64>,
        decision: Decision,
    },
    /// The store aborted it (conflict, serialization failure, deadlock).
    Aborted,
    /// The application rolled it back.
    RolledBack,
}

/// A peer failed a transaction outside its abort path.
#[derive(Clone, Debug)]
pub enum PeerError {
    /// The commit was sent but its outcome is unknown (connection lost):
    /// the values read and the decision whose writes may have landed.
    InDoubt {
        error: String,
        values: Vec<i64>,
        decision: Decision,
    },
    /// Nothing was committed (a broken connection before commit, a bad reply).
    Failed(String),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::InDoubt { error, .. } => write!(f, "commit outcome unknown: {error}"),
            PeerError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// One connection to a peer, running one transaction at a time.
pub trait PeerConn: Send {
    fn execute(&mut self, plan: &TxPlan) -> Result<Executed, PeerError>;
}

/// A peer client: draws transactions as the Tandem client does and keeps the ledger.
pub struct TxClient {
    workload: PeerWorkload,
    rng: Rng,
    pub ledger: PeerLedger,
}

impl TxClient {
    /// FORD's `get_account` (`SmallBankSpec::account`, same draws).
    fn account(s: &SmallBankSpec, rng: &mut Rng) -> u64 {
        if rng.below(100) < s.hot_percent {
            rng.below(s.hot_accounts)
        } else {
            rng.below(s.accounts)
        }
    }

    /// FORD's `get_two_accounts` (`SmallBankSpec::two_accounts`, same draws).
    fn two_accounts(s: &SmallBankSpec, rng: &mut Rng) -> (u64, u64) {
        let n = if rng.below(100) < s.hot_percent {
            s.hot_accounts
        } else {
            s.accounts
        };
        let a = rng.below(n);
        let mut b = rng.below(n - 1);
        if b >= a {
            b += 1;
        }
        (a, b)
    }

    fn micro_pick(m: &MicroSpec, rng: &mut Rng) -> u64 {
        match &m.chooser {
            KeyChooser::Uniform => rng.below(m.keys),
            KeyChooser::Hot {
                hot_keys,
                hot_fraction,
            } => {
                if rng.chance(*hot_fraction) {
                    rng.below(*hot_keys)
                } else {
                    rng.below(m.keys)
                }
            }
            KeyChooser::Zipf(z) => z.sample(rng),
        }
    }

    /// The next transaction, drawn exactly as `SmallBankClient::run_one` /
    /// `MicroClient::run_one` draw theirs.
    pub fn next_plan(&mut self) -> TxPlan {
        let rng = &mut self.rng;
        match &self.workload {
            PeerWorkload::SmallBank(s) => {
                let kind = tandem_workloads::pick_from_mix(rng, &smallbank::MIX);
                let name = smallbank::MIX[kind].0;
                let (reads, logic) = match kind {
                    0 => {
                        let (a0, a1) = Self::two_accounts(s, rng);
                        (vec![sav(a0), chk(a0), chk(a1)], Logic::Amalgamate)
                    }
                    1 => {
                        let a = Self::account(s, rng);
                        (vec![sav(a), chk(a)], Logic::Balance)
                    }
                    2 => (
                        vec![chk(Self::account(s, rng))],
                        Logic::Add(smallbank::DEPOSIT_CHECKING_CENTS),
                    ),
                    3 => {
                        let (a0, a1) = Self::two_accounts(s, rng);
                        (vec![chk(a0), chk(a1)], Logic::SendPayment)
                    }
                    4 => (
                        vec![sav(Self::account(s, rng))],
                        Logic::Add(smallbank::TRANSACT_SAVINGS_CENTS),
                    ),
                    _ => {
                        let a = Self::account(s, rng);
                        (vec![sav(a), chk(a)], Logic::WriteCheck)
                    }
                };
                TxPlan {
                    kind: name,
                    reads,
                    logic,
                }
            }
            PeerWorkload::Micro(m) => {
                let mut keys: Vec<u64> = Vec::new();
                while keys.len() < m.ops_per_tx as usize {
                    let k = Self::micro_pick(m, rng);
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                let writes: Vec<bool> = keys.iter().map(|_| rng.chance(m.write_ratio)).collect();
                let reads = keys
                    .into_iter()
                    .map(|id| Key {
                        table: Table::Micro,
                        id,
                    })
                    .collect();
                TxPlan {
                    kind: "micro",
                    reads,
                    logic: Logic::Micro(writes),
                }
            }
        }
    }

    /// Run one transaction on `conn` and settle the ledger. `Ok(true)`
    /// committed, `Ok(false)` aborted by the store or rolled back.
    pub fn run_one(&mut self, conn: &mut dyn PeerConn) -> Result<bool, PeerError> {
        let plan = self.next_plan();
        let effect = |values: &[i64], decision: &Decision| -> Vec<((u32, u64, u8), i64)> {
            // Every write follows a read of the same key: its delta is new - old.
            match decision {
                Decision::Write(w) => w
                    .iter()
                    .map(|(k, new)| {
                        let i = plan
                            .reads
                            .iter()
                            .position(|r| r == k)
                            .expect("written keys were read");
                        ((k.table.id(), k.id, 0), new - values[i])
                    })
                    .collect(),
                _ => Vec::new(),
            }
        };
        let r = conn.execute(&plan);
        match (&mut self.ledger, r) {
            (PeerLedger::SmallBank(l), Ok(Executed::Committed { values, decision })) => {
                l.apply(&effect(&values, &decision));
                l.committed += 1;
                *l.committed_by_type.entry(plan.kind).or_default() += 1;
                if plan.kind == "Balance" && values[0] < 0 {
                    l.audit_violations.push(format!(
                        "Balance saw savings {} at {}",
                        plan.reads[0].id, values[0]
                    ));
                }
                Ok(true)
            }
            (PeerLedger::Micro(l), Ok(Executed::Committed { decision, .. })) => {
                if let Decision::Write(w) = decision {
                    l.writes_committed += w.len() as u64;
                }
                Ok(true)
            }
            (PeerLedger::SmallBank(l), Ok(Executed::Aborted)) => {
                l.aborted += 1;
                Ok(false)
            }
            (PeerLedger::SmallBank(l), Ok(Executed::RolledBack)) => {
                l.rolled_back += 1;
                Ok(false)
            }
            (PeerLedger::Micro(_), Ok(Executed::Aborted | Executed::RolledBack)) => Ok(false),
            (
                ledger,
                Err(PeerError::InDoubt {
                    error,
                    values,
                    decision,
                }),
            ) => {
                // The commit may or may not have happened: the check accepts
                // either (never assumed absent, never assumed present).
                match ledger {
                    PeerLedger::SmallBank(l) => l.in_doubt.push(effect(&values, &decision)),
                    PeerLedger::Micro(l) => {
                        if let Decision::Write(w) = &decision {
                            l.in_doubt += w.len() as u64;
                        }
                    }
                }
                Err(PeerError::InDoubt {
                    error,
                    values,
                    decision,
                })
            }
            (_, Err(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallbank_decisions_follow_ford() {
        let p = TxPlan {
            kind: "SendPayment",
            reads: vec![chk(1), chk(2)],
            logic: Logic::SendPayment,
        };
        assert_eq!(p.decide(&[499, 0]), Decision::Rollback);
        assert_eq!(
            p.decide(&[500, 0]),
            Decision::Write(vec![(chk(1), 0), (chk(2), 500)])
        );
        let w = TxPlan {
            kind: "WriteCheck",
            reads: vec![sav(3), chk(3)],
            logic: Logic::WriteCheck,
        };
        assert_eq!(
            w.decide(&[0, 100]),
            Decision::Write(vec![(chk(3), -500)]),
            "overdraft pays the penalty"
        );
        assert_eq!(
            w.decide(&[1_000, 100]),
            Decision::Write(vec![(chk(3), -400)])
        );
        let a = TxPlan {
            kind: "Amalgamate",
            reads: vec![sav(1), chk(1), chk(2)],
            logic: Logic::Amalgamate,
        };
        assert_eq!(
            a.decide(&[10, 20, 30]),
            Decision::Write(vec![(sav(1), 0), (chk(1), 0), (chk(2), 60)])
        );
    }

    #[test]
    fn the_mix_and_the_hot_set_match_ford() {
        let spec = SmallBankSpec::scaled(10_000);
        let mut c = PeerWorkload::SmallBank(spec.clone()).client(7);
        let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
        let mut hot = 0u64;
        let n = 20_000;
        for _ in 0..n {
            let p = c.next_plan();
            *kinds.entry(p.kind).or_default() += 1;
            hot += p.reads.iter().all(|k| k.id < spec.hot_accounts) as u64;
            assert!(p.reads.iter().all(|k| k.id < spec.accounts));
        }
        for (name, pct) in smallbank::MIX {
            let got = kinds[name] as f64 / n as f64 * 100.0;
            assert!(
                (got - pct as f64).abs() < 1.5,
                "{name}: {got:.1}% of transactions, FORD's mix says {pct}%"
            );
        }
        assert!(
            hot as f64 / n as f64 > 0.88,
            "about 90% of transactions stay in the hot set"
        );
    }

    /// A ledger that missed a commit fails the check: the check can fail.
    #[test]
    fn verify_catches_a_lost_update() {
        let w = PeerWorkload::SmallBank(SmallBankSpec::scaled(10));
        let init = w.initial_value();
        let mut live: Vec<BTreeMap<u64, i64>> = w
            .tables()
            .iter()
            .map(|(_, n)| (0..*n).map(|k| (k, init)).collect())
            .collect();
        let mut ledger = w.empty_ledger();
        assert!(w.verify(&live, &ledger).is_empty());
        if let PeerLedger::SmallBank(l) = &mut ledger {
            l.apply(&[((smallbank::CHECKING, 3, 0), 130)]);
        }
        assert!(
            !w.verify(&live, &ledger).is_empty(),
            "an acknowledged deposit that is missing"
        );
        *live[1].get_mut(&3).unwrap() += 130;
        assert!(w.verify(&live, &ledger).is_empty());
    }
}
