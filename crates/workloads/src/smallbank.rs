//! SmallBank as FORD and Pandora ran it (Pandora §6 "Workloads"; FORD's
//! `workload/smallbank`; docs/DESIGN.md §6): two tables, savings and checking, each
//! holding one balance per account id; six transaction types in FORD's mix
//! (Amalgamate 15, Balance 15, DepositChecking 15, SendPayment 25,
//! TransactSavings 15, WriteCheck 15); 90 % of transactions pick their accounts
//! from a hot set (4 000 of 100 000 accounts by default).
//!
//! Semantics follow FORD (balances are integer cents here, FORD uses floats):
//! Amalgamate moves all of account 0's savings and checking into account 1's
//! checking; DepositChecking adds 1.30; SendPayment moves 5.00 between two
//! checking accounts and rolls back if the sender has less; TransactSavings
//! adds 20.20; WriteCheck takes 5.00 from checking, plus a penalty of 1.00 if
//! savings + checking is below 5.00 (so checking may go negative; savings never).
//! The 16-byte value is `balance: i64` then the account id (FORD's "magic").
//!
//! The check ([`verify`]): every balance equals its initial value plus the
//! deltas of exactly the acknowledged commits (in-doubt ones: some subset, see
//! [`crate::ledger`]); total money equals the initial total plus the known
//! deltas of acknowledged commits plus one subset of the in-doubt ones; no
//! savings balance is negative; every row is present and names its account.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{Coordinator, TableId, TableSpec, TxError};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

use crate::ledger::{commit_effect, settle_early, Cell, EffectLedger};

pub const SAVINGS: TableId = 0;
pub const CHECKING: TableId = 1;
pub const VALUE_BYTES: u32 = 16;

/// FORD's amounts, in cents.
pub const DEPOSIT_CHECKING_CENTS: i64 = 130;
pub const SEND_PAYMENT_CENTS: i64 = 500;
pub const TRANSACT_SAVINGS_CENTS: i64 = 2_020;
pub const WRITE_CHECK_CENTS: i64 = 500;
pub const WRITE_CHECK_PENALTY_CENTS: i64 = 100;

/// Transaction names, in FORD's order, with their mix percentages.
pub const MIX: [(&str, u64); 6] = [
    ("Amalgamate", 15),
    ("Balance", 15),
    ("DepositChecking", 15),
    ("SendPayment", 25),
    ("TransactSavings", 15),
    ("WriteCheck", 15),
];

#[derive(Clone, Debug)]
pub struct SmallBankSpec {
    pub accounts: u64,
    /// Accounts `0..hot_accounts` form the hot set.
    pub hot_accounts: u64,
    /// Percentage of transactions whose accounts come from the hot set.
    pub hot_percent: u64,
    /// Initial balance of every savings and checking account, in cents.
    pub initial_balance_cents: i64,
}

impl Default for SmallBankSpec {
    fn default() -> Self {
        SmallBankSpec {
            accounts: 100_000,
            hot_accounts: 4_000,
            hot_percent: 90,
            initial_balance_cents: 1_000_000,
        }
    }
}

pub fn encode(account: u64, balance: i64) -> [u8; VALUE_BYTES as usize] {
    let mut v = [0u8; VALUE_BYTES as usize];
    v[..8].copy_from_slice(&balance.to_le_bytes());
    v[8..].copy_from_slice(&account.to_le_bytes());
    v
}

/// `(balance, account id)`.
pub fn decode(b: &[u8]) -> (i64, u64) {
    (
        i64::from_le_bytes(b[..8].try_into().expect("16-byte value")),
        u64::from_le_bytes(b[8..16].try_into().expect("16-byte value")),
    )
}

impl SmallBankSpec {
    /// A spec scaled to `accounts`, keeping FORD's hot-set fraction (4 %).
    pub fn scaled(accounts: u64) -> Self {
        SmallBankSpec {
            accounts,
            hot_accounts: (accounts / 25).max(2),
            ..SmallBankSpec::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.accounts < 2 {
            return Err("smallbank needs at least 2 accounts".into());
        }
        if self.hot_accounts < 2 || self.hot_accounts > self.accounts {
            return Err(format!(
                "smallbank hot set must be 2..={} accounts, got {}",
                self.accounts, self.hot_accounts
            ));
        }
        if self.hot_percent > 100 {
            return Err("smallbank hot percentage must be 0..=100".into());
        }
        if self.initial_balance_cents < 0 {
            return Err("smallbank initial balance must not be negative".into());
        }
        Ok(())
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        vec![
            TableSpec {
                id: SAVINGS,
                name: "savings".into(),
                value_size: VALUE_BYTES,
                capacity: self.accounts,
            },
            TableSpec {
                id: CHECKING,
                name: "checking".into(),
                value_size: VALUE_BYTES,
                capacity: self.accounts,
            },
        ]
    }

    pub async fn load<F: Fabric>(&self, loader: &mut Loader<F>) -> Result<(), LoadError> {
        for t in [SAVINGS, CHECKING] {
            for a in 0..self.accounts {
                loader
                    .put(t, a, &encode(a, self.initial_balance_cents))
                    .await?;
            }
        }
        Ok(())
    }

    pub fn initial_total(&self) -> i64 {
        2 * self.accounts as i64 * self.initial_balance_cents
    }

    /// FORD's `get_account`: hot or not is decided per transaction.
    fn account(&self, rng: &mut Rng) -> u64 {
        if rng.below(100) < self.hot_percent {
            rng.below(self.hot_accounts)
        } else {
            rng.below(self.accounts)
        }
    }

    /// FORD's `get_two_accounts`: two distinct accounts from the same set.
    fn two_accounts(&self, rng: &mut Rng) -> (u64, u64) {
        let n = if rng.below(100) < self.hot_percent {
            self.hot_accounts
        } else {
            self.accounts
        };
        let a = rng.below(n);
        let mut b = rng.below(n - 1);
        if b >= a {
            b += 1;
        }
        (a, b)
    }
}

/// A SmallBank client: one per coordinator.
pub struct SmallBankClient {
    spec: SmallBankSpec,
    rng: Rng,
    /// Shared so a harness can read it after a crash dropped the client's task.
    pub ledger: Rc<RefCell<EffectLedger>>,
}

fn sav(a: u64) -> Cell {
    (SAVINGS, a, 0)
}

fn chk(a: u64) -> Cell {
    (CHECKING, a, 0)
}

impl SmallBankClient {
    pub fn new(spec: SmallBankSpec, seed: u64) -> Self {
        SmallBankClient {
            spec,
            rng: Rng::new(seed),
            ledger: Rc::default(),
        }
    }

    /// Run one transaction of FORD's mix. `Ok(true)` committed, `Ok(false)`
    /// aborted by the store or rolled back by the application.
    pub async fn run_one<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        let r = match crate::pick_from_mix(&mut self.rng, &MIX) {
            0 => self.amalgamate(coord).await,
            1 => self.balance(coord).await,
            2 => {
                self.add(coord, CHECKING, DEPOSIT_CHECKING_CENTS, "DepositChecking")
                    .await
            }
            3 => self.send_payment(coord).await,
            4 => {
                self.add(coord, SAVINGS, TRANSACT_SAVINGS_CENTS, "TransactSavings")
                    .await
            }
            _ => self.write_check(coord).await,
        };
        match r {
            Ok(b) => Ok(b),
            Err(e) => settle_early(&self.ledger, e),
        }
    }

    /// Read-for-update one balance; a missing row is an audit violation.
    async fn rmw<F: Fabric>(
        &self,
        tx: &mut tandem_dkvs::Transaction<'_, F>,
        t: TableId,
        a: u64,
    ) -> Result<i64, TxError> {
        let v = tx.read_for_update(t, a).await?;
        Ok(decode(&v).0)
    }

    async fn amalgamate<F: Fabric>(&mut self, coord: &mut Coordinator<F>) -> Result<bool, TxError> {
        let (a0, a1) = self.spec.two_accounts(&mut self.rng);
        let mut tx = coord.begin();
        let s0 = self.rmw(&mut tx, SAVINGS, a0).await?;
        let c0 = self.rmw(&mut tx, CHECKING, a0).await?;
        let c1 = self.rmw(&mut tx, CHECKING, a1).await?;
        tx.write(SAVINGS, a0, &encode(a0, 0)).await?;
        tx.write(CHECKING, a0, &encode(a0, 0)).await?;
        tx.write(CHECKING, a1, &encode(a1, c1 + s0 + c0)).await?;
        commit_effect(
            &self.ledger,
            tx,
            "Amalgamate",
            vec![(sav(a0), -s0), (chk(a0), -c0), (chk(a1), s0 + c0)],
        )
        .await
    }

    async fn balance<F: Fabric>(&mut self, coord: &mut Coordinator<F>) -> Result<bool, TxError> {
        let a = self.spec.account(&mut self.rng);
        let mut tx = coord.begin();
        let s = tx.read(SAVINGS, a).await?;
        let c = tx.read(CHECKING, a).await?;
        let committed = commit_effect(&self.ledger, tx, "Balance", Vec::new()).await?;
        if committed {
            let mut l = self.ledger.borrow_mut();
            match (s, c) {
                (Some(s), Some(_)) if decode(&s).0 < 0 => l
                    .audit_violations
                    .push(format!("Balance saw savings {a} at {}", decode(&s).0)),
                (Some(_), Some(_)) => {}
                _ => l
                    .audit_violations
                    .push(format!("Balance found account {a} missing")),
            }
        }
        Ok(committed)
    }

    /// DepositChecking / TransactSavings: add a fixed amount to one balance.
    async fn add<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
        t: TableId,
        cents: i64,
        kind: &'static str,
    ) -> Result<bool, TxError> {
        let a = self.spec.account(&mut self.rng);
        let mut tx = coord.begin();
        let b = self.rmw(&mut tx, t, a).await?;
        tx.write(t, a, &encode(a, b + cents)).await?;
        commit_effect(&self.ledger, tx, kind, vec![((t, a, 0), cents)]).await
    }

    async fn send_payment<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        let (a0, a1) = self.spec.two_accounts(&mut self.rng);
        let mut tx = coord.begin();
        let c0 = self.rmw(&mut tx, CHECKING, a0).await?;
        let c1 = self.rmw(&mut tx, CHECKING, a1).await?;
        if c0 < SEND_PAYMENT_CENTS {
            // FORD: insufficient funds roll the transaction back.
            let _ = tx.abort().await;
            self.ledger.borrow_mut().rolled_back += 1;
            return Ok(false);
        }
        tx.write(CHECKING, a0, &encode(a0, c0 - SEND_PAYMENT_CENTS))
            .await?;
        tx.write(CHECKING, a1, &encode(a1, c1 + SEND_PAYMENT_CENTS))
            .await?;
        commit_effect(
            &self.ledger,
            tx,
            "SendPayment",
            vec![
                (chk(a0), -SEND_PAYMENT_CENTS),
                (chk(a1), SEND_PAYMENT_CENTS),
            ],
        )
        .await
    }

    async fn write_check<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        let a = self.spec.account(&mut self.rng);
        let mut tx = coord.begin();
        let s = match tx.read(SAVINGS, a).await? {
            Some(v) => decode(&v).0,
            None => {
                let _ = tx.abort().await;
                self.ledger
                    .borrow_mut()
                    .audit_violations
                    .push(format!("WriteCheck found savings {a} missing"));
                return Ok(false);
            }
        };
        let c = self.rmw(&mut tx, CHECKING, a).await?;
        // FORD: overdrawing costs a penalty of 1.00.
        let debit = if s + c < WRITE_CHECK_CENTS {
            WRITE_CHECK_CENTS + WRITE_CHECK_PENALTY_CENTS
        } else {
            WRITE_CHECK_CENTS
        };
        tx.write(CHECKING, a, &encode(a, c - debit)).await?;
        commit_effect(&self.ledger, tx, "WriteCheck", vec![(chk(a), -debit)]).await
    }
}

/// Post-run check of SmallBank (see the module docs). `savings` and
/// `checking` are the live contents of the two tables.
pub fn verify(
    spec: &SmallBankSpec,
    savings: &BTreeMap<u64, Vec<u8>>,
    checking: &BTreeMap<u64, Vec<u8>>,
    ledger: &EffectLedger,
) -> Vec<String> {
    let mut v = ledger.audit_violations.clone();
    let tables = [
        (SAVINGS, "savings", savings),
        (CHECKING, "checking", checking),
    ];
    let mut total = 0i64;
    for (t, name, live) in tables {
        if live.len() as u64 != spec.accounts {
            v.push(format!(
                "{name}: {} rows live, expected {}",
                live.len(),
                spec.accounts
            ));
        }
        for (k, bytes) in live {
            let (bal, id) = decode(bytes);
            if id != *k || *k >= spec.accounts {
                v.push(format!("{name} row {k} names account {id}"));
            }
            if t == SAVINGS && bal < 0 {
                v.push(format!("savings {k} is negative: {bal}"));
            }
            total += bal;
        }
    }
    // Total money: the initial total plus the known deltas of acknowledged
    // commits, plus those of one subset of the in-doubt transactions.
    let acked_total: i64 = ledger.acked.values().sum();
    let mut admissible: BTreeSet<i64> = BTreeSet::from([spec.initial_total() + acked_total]);
    for e in ledger.in_doubt.iter().take(20) {
        let d: i64 = e.iter().map(|(_, d)| d).sum();
        admissible = admissible.iter().flat_map(|t| [*t, t + d]).collect();
    }
    if ledger.in_doubt.len() <= 20 && !admissible.contains(&total) {
        v.push(format!(
            "total money {total} is not among the admissible totals {admissible:?}"
        ));
    }
    let cells = (0..spec.accounts).flat_map(|a| [sav(a), chk(a)]);
    let actual = |c: &Cell| {
        let live = if c.0 == SAVINGS { savings } else { checking };
        live.get(&c.1).map(|b| decode(b).0)
    };
    let name = |c: &Cell| {
        format!(
            "{} {}",
            if c.0 == SAVINGS {
                "savings"
            } else {
                "checking"
            },
            c.1
        )
    };
    v.extend(ledger.check(cells, |_| spec.initial_balance_cents, actual, name));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::run_inline;

    fn clean_run() -> (SmallBankSpec, crate::testkit::Live, EffectLedger) {
        let spec = SmallBankSpec {
            accounts: 50,
            hot_accounts: 5,
            hot_percent: 90,
            initial_balance_cents: 1_000,
        };
        let clients: Vec<SmallBankClient> = (0..3)
            .map(|i| SmallBankClient::new(spec.clone(), i))
            .collect();
        let ledgers: Vec<_> = clients.iter().map(|c| c.ledger.clone()).collect();
        let (live, committed) = run_inline(
            spec.tables(),
            async |l| spec.load(l).await,
            clients,
            100,
            async |c, coord| c.run_one(coord).await,
        );
        let mut ledger = EffectLedger::default();
        for l in &ledgers {
            ledger.merge(&l.borrow());
        }
        assert!(
            committed > 250 && ledger.rolled_back > 0,
            "{committed} commits, {} rollbacks",
            ledger.rolled_back
        );
        (spec, live, ledger)
    }

    #[test]
    fn a_clean_run_passes_and_a_lost_update_or_negative_savings_fails() {
        let (spec, live, ledger) = clean_run();
        assert_eq!(
            verify(&spec, &live[0], &live[1], &ledger),
            Vec::<String>::new()
        );
        // A lost DepositChecking: one checking balance short by its amount.
        let mut checking = live[1].clone();
        let (k, b) = checking
            .iter()
            .next()
            .map(|(k, b)| (*k, decode(b).0))
            .unwrap();
        checking.insert(k, encode(k, b - DEPOSIT_CHECKING_CENTS).to_vec());
        let v = verify(&spec, &live[0], &checking, &ledger);
        assert!(
            v.iter().any(|m| m.contains("total money"))
                && v.iter().any(|m| m.contains(&format!("checking {k}"))),
            "{v:?}"
        );
        // Money moved into a negative savings balance: conserved, but forbidden.
        let (mut savings, mut checking) = (live[0].clone(), live[1].clone());
        let s = decode(&savings[&0]).0;
        savings.insert(0, encode(0, -1).to_vec());
        checking.insert(0, encode(0, decode(&checking[&0]).0 + s + 1).to_vec());
        let v = verify(&spec, &savings, &checking, &ledger);
        assert!(
            v.iter().any(|m| m.contains("savings 0 is negative")),
            "{v:?}"
        );
        assert!(!v.iter().any(|m| m.contains("total money")), "{v:?}");
    }
}
