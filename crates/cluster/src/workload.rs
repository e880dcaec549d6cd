//! The workloads a benchmark can run, behind one interface: tables, loading,
//! one client per coordinator, and the post-run consistency check
//! (docs/DESIGN.md §6). [`WorkloadSpec::from_name`] picks one by name for the CLI.

use std::collections::BTreeMap;

use std::cell::RefCell;
use std::rc::Rc;
use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{Coordinator, TableSpec, TxError};
use tandem_fabric::Fabric;
use tandem_workloads::bank::{self, BankClient, BankLedger, BankSpec};
use tandem_workloads::ledger::EffectLedger;
use tandem_workloads::micro::{self, MicroClient, MicroLedger, MicroSpec};
use tandem_workloads::smallbank::{self, SmallBankClient, SmallBankSpec};
use tandem_workloads::tatp::{self, TatpClient, TatpSpec};
use tandem_workloads::tpcc::{self, TpccClient, TpccSpec};

#[derive(Clone, Debug)]
pub enum WorkloadSpec {
    Micro(MicroSpec),
    Bank(BankSpec),
    SmallBank(SmallBankSpec),
    Tatp(TatpSpec),
    Tpcc(TpccSpec),
}

impl WorkloadSpec {
    /// Workload names [`WorkloadSpec::from_name`] accepts.
    pub const NAMES: [&'static str; 6] =
        ["micro", "bank", "smallbank", "tatp", "tpcc", "tpcc-bounded"];

    /// A workload by name with FORD's defaults, scaled by `scale` when given:
    /// micro keys (default 100 000), bank customers (default 16; the
    /// benchmark settings of `tandem pandora bench`: few drains and receipts),
    /// smallbank accounts (100 000, hot set 4 %), tatp subscribers (100 000),
    /// tpcc warehouses (default 1; FORD and Pandora ran 1–4; the other TPC-C
    /// counts stay at [`TpccSpec::default`], about 0.3 GB per warehouse per replica).
    pub fn from_name(name: &str, scale: Option<u64>) -> Result<WorkloadSpec, String> {
        let spec = match name {
            "micro" => WorkloadSpec::Micro(MicroSpec {
                keys: scale.unwrap_or(MicroSpec::default().keys),
                ..MicroSpec::default()
            }),
            "bank" => WorkloadSpec::Bank(BankSpec {
                customers: scale.unwrap_or(BankSpec::default().customers),
                initial_balance: 1_000,
                receipt_capacity: 1_000_000,
                drain_chance: 0.01,
                receipt_chance: 0.02,
                retries: 0,
            }),
            "smallbank" => {
                WorkloadSpec::SmallBank(scale.map(SmallBankSpec::scaled).unwrap_or_default())
            }
            "tatp" => WorkloadSpec::Tatp(TatpSpec {
                subscribers: scale.unwrap_or(TatpSpec::default().subscribers),
                ..TatpSpec::default()
            }),
            "tpcc" => WorkloadSpec::Tpcc(TpccSpec {
                warehouses: scale.unwrap_or(1),
                ..TpccSpec::default()
            }),
            // TPC-C with a bounded history (TpccSpec::retain): runs of any length.
            "tpcc-bounded" => WorkloadSpec::Tpcc(TpccSpec {
                warehouses: scale.unwrap_or(1),
                retain: Some(tandem_workloads::tpcc::DEFAULT_RETAIN),
                ..TpccSpec::default()
            }),
            other => {
                return Err(format!(
                    "unknown workload '{other}' (expected one of {})",
                    Self::NAMES.join(", ")
                ))
            }
        };
        spec.validate()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), String> {
        match self {
            WorkloadSpec::Micro(m) => m.validate(),
            WorkloadSpec::Bank(b) if b.customers < 2 => {
                Err("bank needs at least 2 customers".into())
            }
            WorkloadSpec::Bank(_) => Ok(()),
            WorkloadSpec::SmallBank(s) => s.validate(),
            WorkloadSpec::Tatp(t) => t.validate(),
            WorkloadSpec::Tpcc(t) => t.validate(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            WorkloadSpec::Micro(_) => "micro",
            WorkloadSpec::Bank(_) => "bank",
            WorkloadSpec::SmallBank(_) => "smallbank",
            WorkloadSpec::Tatp(_) => "tatp",
            WorkloadSpec::Tpcc(t) if t.retain.is_some() => "tpcc-bounded",
            WorkloadSpec::Tpcc(_) => "tpcc",
        }
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        match self {
            WorkloadSpec::Micro(m) => m.tables(),
            WorkloadSpec::Bank(b) => b.tables(),
            WorkloadSpec::SmallBank(s) => s.tables(),
            WorkloadSpec::Tatp(t) => t.tables(),
            WorkloadSpec::Tpcc(t) => t.tables(),
        }
    }

    pub async fn load<F: Fabric>(&self, loader: &mut Loader<F>) -> Result<(), LoadError> {
        match self {
            WorkloadSpec::Micro(m) => m.load(loader).await,
            WorkloadSpec::Bank(b) => b.load(loader).await,
            WorkloadSpec::SmallBank(s) => s.load(loader).await,
            WorkloadSpec::Tatp(t) => t.load(loader).await,
            WorkloadSpec::Tpcc(t) => t.load(loader).await,
        }
    }

    pub fn client(&self, id: u32, seed: u64) -> Client {
        match self {
            WorkloadSpec::Micro(m) => Client::Micro(MicroClient::new(m.clone(), seed)),
            WorkloadSpec::Bank(b) => Client::Bank(BankClient::new(b.clone(), id, seed)),
            WorkloadSpec::SmallBank(s) => Client::SmallBank(SmallBankClient::new(s.clone(), seed)),
            WorkloadSpec::Tatp(t) => Client::Tatp(TatpClient::new(t.clone(), seed)),
            WorkloadSpec::Tpcc(t) => Client::Tpcc(TpccClient::new(t.clone(), id, seed)),
        }
    }

    /// Check the final live contents (per table, in `tables()` order) against
    /// the clients' outcomes. Returns violations (empty: consistent).
    pub fn verify(&self, live: &[BTreeMap<u64, Vec<u8>>], outcome: &Outcome) -> Vec<String> {
        if live.len() != self.tables().len() {
            return vec![format!(
                "{}: {} tables, but {} live snapshots",
                self.name(),
                self.tables().len(),
                live.len()
            )];
        }
        match (self, outcome) {
            (WorkloadSpec::SmallBank(s), Outcome::SmallBank(l)) => {
                smallbank::verify(s, &live[0], &live[1], l)
            }
            (WorkloadSpec::Tatp(t), Outcome::Tatp(l)) => tatp::verify(t, live, l),
            (WorkloadSpec::Tpcc(t), Outcome::Tpcc(l)) => tpcc::verify(t, live, l),
            (WorkloadSpec::Micro(m), Outcome::Micro(l)) => micro::verify(m, &live[0], l),
            (WorkloadSpec::Bank(b), Outcome::Bank(ledger)) => {
                bank::verify(b, &live[0], &live[1], ledger)
            }
            _ => vec!["workload and outcome do not match".into()],
        }
    }
}

pub enum Client {
    Micro(MicroClient),
    Bank(BankClient),
    SmallBank(SmallBankClient),
    Tatp(TatpClient),
    Tpcc(TpccClient),
}

/// What the clients saw acknowledged, merged across all of them.
#[derive(Clone, Debug)]
pub enum Outcome {
    Micro(MicroLedger),
    Bank(BankLedger),
    SmallBank(EffectLedger),
    Tatp(EffectLedger),
    Tpcc(EffectLedger),
}

impl Outcome {
    pub fn empty(spec: &WorkloadSpec) -> Outcome {
        match spec {
            WorkloadSpec::Micro(_) => Outcome::Micro(MicroLedger::default()),
            WorkloadSpec::Bank(_) => Outcome::Bank(BankLedger::default()),
            WorkloadSpec::SmallBank(_) => Outcome::SmallBank(EffectLedger::default()),
            WorkloadSpec::Tatp(_) => Outcome::Tatp(EffectLedger::default()),
            WorkloadSpec::Tpcc(_) => Outcome::Tpcc(EffectLedger::default()),
        }
    }

    pub fn merge(&mut self, o: &Outcome) {
        match (self, o) {
            (Outcome::Micro(a), Outcome::Micro(b)) => a.merge(b),
            (Outcome::Bank(a), Outcome::Bank(b)) => a.merge(b),
            (Outcome::SmallBank(a), Outcome::SmallBank(b))
            | (Outcome::Tatp(a), Outcome::Tatp(b))
            | (Outcome::Tpcc(a), Outcome::Tpcc(b)) => a.merge(b),
            _ => panic!("merging outcomes of different workloads"),
        }
    }

    /// The OLTP workloads' ledger (acknowledged commits per transaction type,
    /// rollbacks, in-doubt transactions); `None` for micro and bank.
    pub fn ledger(&self) -> Option<&EffectLedger> {
        match self {
            Outcome::SmallBank(l) | Outcome::Tatp(l) | Outcome::Tpcc(l) => Some(l),
            Outcome::Micro(_) | Outcome::Bank(_) => None,
        }
    }
}

/// Tombstones a coordinator reclaims after each transaction: a few, plus
/// half its backlog, so the queue drains however many rows a transaction
/// deletes (a bounded-history TPC-C Delivery deletes over a hundred).
fn reclaim_budget(backlog: usize) -> usize {
    2 + backlog / 2
}

impl Client {
    pub async fn run_one<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        let r = match self {
            Client::Micro(c) => c.run_one(coord).await,
            Client::Bank(c) => c.run_one(coord).await,
            Client::SmallBank(c) => c.run_one(coord).await,
            Client::Tatp(c) => c.run_one(coord).await,
            Client::Tpcc(c) => c.run_one(coord).await,
        };
        // Slot reclamation: empty the tombstones this coordinator's deletes
        // left. Its failures are not the transaction's: a revoked node finds
        // out on its next transaction, an unreachable memory node's tombstone
        // stays queued.
        let _ = coord
            .reclaim_pending(reclaim_budget(coord.reclaim_backlog()))
            .await;
        r
    }

    /// Record into `ledger`, shared with the other clients of this compute
    /// node (OLTP workloads; others keep their own): one map of acknowledged
    /// deltas per node, not one per client, so a long run's memory stays
    /// bounded by the cells the workload has. Returns whether it shares;
    /// a shared ledger's handle must be counted once.
    pub fn share_ledger(&mut self, ledger: &Rc<RefCell<EffectLedger>>) -> bool {
        match self {
            Client::SmallBank(c) => c.ledger = ledger.clone(),
            Client::Tatp(c) => c.ledger = ledger.clone(),
            Client::Tpcc(c) => c.ledger = ledger.clone(),
            Client::Micro(_) | Client::Bank(_) => return false,
        }
        true
    }

    /// A handle on the client's ledger that outlives the client (and its task).
    pub fn handle(&self) -> OutcomeHandle {
        match self {
            Client::Micro(c) => OutcomeHandle::Micro(c.ledger.clone()),
            Client::Bank(c) => OutcomeHandle::Bank(c.ledger.clone()),
            Client::SmallBank(c) => OutcomeHandle::SmallBank(c.ledger.clone()),
            Client::Tatp(c) => OutcomeHandle::Tatp(c.ledger.clone()),
            Client::Tpcc(c) => OutcomeHandle::Tpcc(c.ledger.clone()),
        }
    }
}

pub enum OutcomeHandle {
    Micro(Rc<RefCell<MicroLedger>>),
    Bank(Rc<RefCell<BankLedger>>),
    SmallBank(Rc<RefCell<EffectLedger>>),
    Tatp(Rc<RefCell<EffectLedger>>),
    Tpcc(Rc<RefCell<EffectLedger>>),
}

impl OutcomeHandle {
    pub fn outcome(&self) -> Outcome {
        match self {
            OutcomeHandle::Micro(l) => Outcome::Micro(l.borrow().clone()),
            OutcomeHandle::Bank(l) => Outcome::Bank(l.borrow().clone()),
            OutcomeHandle::SmallBank(l) => Outcome::SmallBank(l.borrow().clone()),
            OutcomeHandle::Tatp(l) => Outcome::Tatp(l.borrow().clone()),
            OutcomeHandle::Tpcc(l) => Outcome::Tpcc(l.borrow().clone()),
        }
    }
}
