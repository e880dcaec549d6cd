//! The workloads a benchmark can run, behind one interface: tables, loading,
//! one client per coordinator, and the post-run consistency check.

use std::collections::BTreeMap;

use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{Coordinator, TableSpec, TxError};
use tandem_fabric::Fabric;
use tandem_workloads::bank::{self, BankClient, BankLedger, BankSpec};
use tandem_workloads::micro::{self, MicroClient, MicroLedger, MicroSpec};
use std::cell::RefCell;
use std::rc::Rc;

#[derive(Clone, Debug)]
pub enum WorkloadSpec {
    Micro(MicroSpec),
    Bank(BankSpec),
}

impl WorkloadSpec {
    pub fn name(&self) -> &'static str {
        match self {
            WorkloadSpec::Micro(_) => "micro",
            WorkloadSpec::Bank(_) => "bank",
        }
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        match self {
            WorkloadSpec::Micro(m) => m.tables(),
            WorkloadSpec::Bank(b) => b.tables(),
        }
    }

    pub async fn load<F: Fabric>(&self, loader: &mut Loader<F>) -> Result<(), LoadError> {
        match self {
            WorkloadSpec::Micro(m) => m.load(loader).await,
            WorkloadSpec::Bank(b) => b.load(loader).await,
        }
    }

    pub fn client(&self, id: u32, seed: u64) -> Client {
        match self {
            WorkloadSpec::Micro(m) => Client::Micro(MicroClient::new(m.clone(), seed)),
            WorkloadSpec::Bank(b) => Client::Bank(BankClient::new(b.clone(), id, seed)),
        }
    }

    /// Check the final live contents (per table) against the clients' outcomes.
    pub fn verify(&self, live: &[BTreeMap<u64, Vec<u8>>], outcome: &Outcome) -> Vec<String> {
        match (self, outcome) {
            (WorkloadSpec::Micro(m), Outcome::Micro(l)) => micro::verify(m, &live[0], l),
            (WorkloadSpec::Bank(b), Outcome::Bank(ledger)) => bank::verify(b, &live[0], &live[1], ledger),
            _ => vec!["workload and outcome do not match".into()],
        }
    }
}

pub enum Client {
    Micro(MicroClient),
    Bank(BankClient),
}

/// What the clients saw acknowledged, merged across all of them.
#[derive(Clone, Debug)]
pub enum Outcome {
    Micro(MicroLedger),
    Bank(BankLedger),
}

impl Outcome {
    pub fn empty(spec: &WorkloadSpec) -> Outcome {
        match spec {
            WorkloadSpec::Micro(_) => Outcome::Micro(MicroLedger::default()),
            WorkloadSpec::Bank(_) => Outcome::Bank(BankLedger::default()),
        }
    }

    pub fn merge(&mut self, o: &Outcome) {
        match (self, o) {
            (Outcome::Micro(a), Outcome::Micro(b)) => a.merge(b),
            (Outcome::Bank(a), Outcome::Bank(b)) => a.merge(b),
            _ => panic!("merging outcomes of different workloads"),
        }
    }
}

impl Client {
    pub async fn run_one<F: Fabric>(&mut self, coord: &mut Coordinator<F>) -> Result<bool, TxError> {
        match self {
            Client::Micro(c) => c.run_one(coord).await,
            Client::Bank(c) => c.run_one(coord).await,
        }
    }

    /// A handle on the client's ledger that outlives the client (and its task).
    pub fn handle(&self) -> OutcomeHandle {
        match self {
            Client::Micro(c) => OutcomeHandle::Micro(c.ledger.clone()),
            Client::Bank(c) => OutcomeHandle::Bank(c.ledger.clone()),
        }
    }
}

pub enum OutcomeHandle {
    Micro(Rc<RefCell<MicroLedger>>),
    Bank(Rc<RefCell<BankLedger>>),
}

impl OutcomeHandle {
    pub fn outcome(&self) -> Outcome {
        match self {
            OutcomeHandle::Micro(l) => Outcome::Micro(l.borrow().clone()),
            OutcomeHandle::Bank(l) => Outcome::Bank(l.borrow().clone()),
        }
    }
}
