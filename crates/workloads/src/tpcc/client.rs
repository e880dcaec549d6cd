//! The five TPC-C transactions (TPC-C §2.4–2.8) over a Tandem store, with the
//! acknowledged-effects ledger of [`crate::ledger`].
//!
//! Delivery runs each district's delivery as its own database transaction, as
//! TPC-C §2.7.4 allows (FORD and Pandora's 32 KiB log slot would not hold ten
//! districts' writes). Read-only transactions (OrderStatus, StockLevel) record
//! what they saw wrong — an order missing, an order line missing, a last-order
//! index naming another customer's order — as audit violations, but only once
//! their reads validated (the transaction committed).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use tandem_dkvs::{Coordinator, Transaction, TxError};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

use super::*;
use crate::ledger::{commit_effect, settle_early, Cell, Effect, EffectLedger, PRESENCE};

/// Ledger fields (the `u8` of a [`Cell`]).
pub const F_YTD: u8 = 0;
pub const F_NEXT_O_ID: u8 = 1;
pub const F_NEXT_H_ID: u8 = 2;
pub const F_BALANCE: u8 = 3;
pub const F_YTD_PAYMENT: u8 = 4;
pub const F_PAYMENT_CNT: u8 = 5;
pub const F_DELIVERY_CNT: u8 = 6;
pub const F_ORDER_CNT: u8 = 7;
pub const F_REMOTE_CNT: u8 = 8;
pub const F_HEAD: u8 = 9;
/// Bounded history: a customer's archived delivered and paid amounts, a
/// district's archived paid amount.
pub const F_ARCH_DELIVERED: u8 = 10;
pub const F_ARCH_PAID: u8 = 11;
/// Bounded history: the rows of a growing table in one district (keyed by
/// the district), counted instead of tracking each row's presence.
pub const F_ROWS: u8 = 12;

/// Bounded history: extra deliveries a district gets in one Delivery when
/// its backlog exceeds R/2 (a district sees 4.5 NewOrders per Delivery with
/// TPC-C's 10 districts, more with fewer).
const CATCH_UP_DELIVERIES: usize = 4;

/// How a transaction body ended short of its commit.
enum Early {
    /// The application rolls back (TPC-C's invalid item).
    Rollback,
    /// A district's capacity budget is used up.
    Refused,
    /// A row the transaction relies on is missing or duplicated.
    Broken(String),
    Tx(TxError),
}

impl From<TxError> for Early {
    fn from(e: TxError) -> Self {
        Early::Tx(e)
    }
}

type Body = Result<Effect, Early>;

/// A TPC-C client: one per coordinator, with a home warehouse.
pub struct TpccClient {
    spec: TpccSpec,
    rng: Rng,
    home_w: u64,
    /// Logical clock for entry and delivery dates (no wall clock).
    clock: u64,
    /// Shared so a harness can read it after a crash dropped the client's task.
    pub ledger: Rc<RefCell<EffectLedger>>,
}

async fn must<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    t: TableId,
    k: u64,
) -> Result<Vec<u8>, Early> {
    tx.read(t, k).await?.ok_or_else(|| {
        Early::Broken(format!(
            "{} {:?} is missing",
            TABLE_NAMES[t as usize],
            unkey(k)
        ))
    })
}

async fn must_rfu<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    t: TableId,
    k: u64,
) -> Result<Vec<u8>, Early> {
    match tx.read_for_update(t, k).await {
        Ok(v) => Ok(v),
        Err(TxError::NotFound) => Err(Early::Broken(format!(
            "{} {:?} is missing",
            TABLE_NAMES[t as usize],
            unkey(k)
        ))),
        Err(e) => Err(e.into()),
    }
}

async fn must_insert<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    t: TableId,
    k: u64,
    v: &[u8],
) -> Result<(), Early> {
    match tx.insert(t, k, v).await {
        Ok(()) => Ok(()),
        Err(TxError::AlreadyExists) => Err(Early::Broken(format!(
            "{} {:?} already exists",
            TABLE_NAMES[t as usize],
            unkey(k)
        ))),
        Err(e) => Err(e.into()),
    }
}

impl TpccClient {
    pub fn new(spec: TpccSpec, client_id: u32, seed: u64) -> Self {
        let home_w = 1 + client_id as u64 % spec.warehouses;
        TpccClient {
            spec,
            rng: Rng::new(seed),
            home_w,
            clock: 1,
            ledger: Rc::default(),
        }
    }

    /// Run one transaction of the TPC-C mix. `Ok(true)` committed, `Ok(false)`
    /// aborted by the store, rolled back (invalid item) or refused (capacity).
    pub async fn run_one<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        self.clock += 1;
        let kind = crate::pick_from_mix(&mut self.rng, &MIX);
        if kind == 3 {
            return self.delivery(coord).await;
        }
        let mut tx = coord.begin();
        let mut audits = Vec::new();
        let body = match kind {
            0 => self.new_order(&mut tx).await,
            1 => self.payment(&mut tx).await,
            2 => self.order_status(&mut tx, &mut audits).await,
            _ => self.stock_level(&mut tx, &mut audits).await,
        };
        let r = self.finish(tx, MIX[kind].0, body).await;
        if r == Ok(true) {
            self.ledger.borrow_mut().audit_violations.extend(audits);
        }
        r
    }

    /// Commit a body's effect, or end the transaction the way the body ended.
    async fn finish<F: Fabric>(
        &mut self,
        tx: Transaction<'_, F>,
        kind: &'static str,
        body: Body,
    ) -> Result<bool, TxError> {
        match body {
            Ok(effect) => commit_effect(&self.ledger, tx, kind, effect).await,
            Err(Early::Tx(e @ (TxError::NotFound | TxError::AlreadyExists))) => {
                let _ = tx.abort().await;
                self.ledger
                    .borrow_mut()
                    .audit_violations
                    .push(format!("{kind}: unexpected '{e}'"));
                Ok(false)
            }
            Err(Early::Tx(e)) => settle_early(&self.ledger, e),
            Err(early) => {
                let _ = tx.abort().await;
                let mut l = self.ledger.borrow_mut();
                match early {
                    Early::Rollback => l.rolled_back += 1,
                    Early::Refused => l.capacity_refusals += 1,
                    Early::Broken(what) => l.audit_violations.push(format!("{kind}: {what}")),
                    Early::Tx(_) => unreachable!(),
                }
                Ok(false)
            }
        }
    }

    /// The ledger cell an insert or delete of row `k` of a growing table
    /// changes: its presence, or (bounded history) its district's row count.
    fn row_cell(&self, table: TableId, k: u64) -> Cell {
        let (w, d, _, _) = unkey(k);
        match self.spec.retain {
            Some(_) => (table, key(w, d, 0, 0), F_ROWS),
            None => (table, k, PRESENCE),
        }
    }

    fn district(&mut self) -> u64 {
        1 + self.rng.below(self.spec.districts_per_warehouse)
    }

    fn other_warehouse(&mut self, w: u64) -> u64 {
        let o = 1 + self.rng.below(self.spec.warehouses - 1);
        if o >= w {
            o + 1
        } else {
            o
        }
    }

    fn customer_id(&mut self) -> u64 {
        nurand(
            &mut self.rng,
            1_023,
            C_ID,
            1,
            self.spec.customers_per_district,
        )
    }

    /// 60 % by last name through `customer_by_last` (the middle one in
    /// first-name order, TPC-C §2.5.2.2), else by NURand id.
    async fn pick_customer<F: Fabric>(
        &mut self,
        tx: &mut Transaction<'_, F>,
        w: u64,
        d: u64,
    ) -> Result<u64, Early> {
        if self.rng.below(100) >= 60 {
            return Ok(self.customer_id());
        }
        let last = nurand(&mut self.rng, 255, C_LAST, 0, self.spec.last_names() - 1);
        let v = must(tx, CUSTOMER_BY_LAST, key(w, d, last, 0)).await?;
        let n = get_u32(&v, 0) as usize;
        if n == 0 || 4 + 4 * n > v.len() {
            return Err(Early::Broken(format!(
                "customer_by_last {w}/{d}/{last} holds {n} ids"
            )));
        }
        Ok(get_u32(&v, 4 + 4 * (n.div_ceil(2) - 1)) as u64)
    }

    /// TPC-C §2.4: enter an order of 5–15 lines.
    async fn new_order<F: Fabric>(&mut self, tx: &mut Transaction<'_, F>) -> Body {
        let (w, d, c) = (self.home_w, self.district(), self.customer_id());
        let ol_cnt = self.rng.range_inclusive(5, MAX_OL_CNT);
        let rollback = self.rng.below(100) == 0;
        let mut lines: Vec<(u64, u64, u32)> = Vec::new();
        while (lines.len() as u64) < ol_cnt {
            let i = nurand(&mut self.rng, 8_191, C_OL_I_ID, 1, self.spec.items);
            if lines.iter().any(|l| l.0 == i) {
                continue;
            }
            let supply = if self.spec.warehouses > 1 && self.rng.below(100) == 0 {
                self.other_warehouse(w)
            } else {
                w
            };
            lines.push((i, supply, self.rng.range_inclusive(1, 10) as u32));
        }
        if rollback {
            // An unused item number: the order is rolled back when it is met.
            lines.last_mut().expect("5+ lines").0 = self.spec.items + 1;
        }
        let all_local = lines.iter().all(|l| l.1 == w);
        must(tx, WAREHOUSE, key(w, 0, 0, 0)).await?;
        let mut dist = District::decode(&must_rfu(tx, DISTRICT, key(w, d, 0, 0)).await?);
        let o = dist.next_o_id as u64;
        let budget = self.spec.customers_per_district + self.spec.new_orders_per_district_max;
        if self.spec.retain.is_none() && o > budget {
            return Err(Early::Refused);
        }
        must(tx, CUSTOMER, key(w, d, c, 0)).await?;
        dist.next_o_id += 1;
        tx.write(DISTRICT, key(w, d, 0, 0), &dist.encode()).await?;
        let ord = Order {
            c_id: c as u32,
            ol_cnt: ol_cnt as u32,
            all_local,
            carrier: 0,
            entry_d: self.clock,
        };
        must_insert(tx, ORDER, key(w, d, o, 0), &ord.encode()).await?;
        must_insert(tx, NEW_ORDER, key(w, d, o, 0), &id_value(o as u32)).await?;
        must_rfu(tx, LAST_ORDER, key(w, d, c, 0)).await?;
        tx.write(LAST_ORDER, key(w, d, c, 0), &id_value(o as u32))
            .await?;
        let mut effect: Effect = vec![
            ((DISTRICT, key(w, d, 0, 0), F_NEXT_O_ID), 1),
            (self.row_cell(ORDER, key(w, d, o, 0)), 1),
            (self.row_cell(NEW_ORDER, key(w, d, o, 0)), 1),
        ];
        for (n, &(i, supply, qty)) in lines.iter().enumerate() {
            let item = match tx.read(ITEM, key(0, 0, i, 0)).await? {
                Some(v) => v,
                None if i > self.spec.items => return Err(Early::Rollback),
                None => return Err(Early::Broken(format!("item {i} is missing"))),
            };
            let sk = key(supply, 0, i, 0);
            let mut s = Stock::decode(&must_rfu(tx, STOCK, sk).await?);
            s.quantity = if s.quantity >= qty + 10 {
                s.quantity - qty
            } else {
                s.quantity + 91 - qty
            };
            s.ytd += qty as i64;
            s.order_cnt += 1;
            let remote = (supply != w) as u32;
            s.remote_cnt += remote;
            tx.write(STOCK, sk, &s.encode()).await?;
            effect.extend([
                ((STOCK, sk, F_YTD), qty as i64),
                ((STOCK, sk, F_ORDER_CNT), 1),
                ((STOCK, sk, F_REMOTE_CNT), remote as i64),
            ]);
            let line = OrderLine {
                i_id: i as u32,
                supply_w: supply as u32,
                quantity: qty,
                amount: qty as i64 * get_u32(&item, 0) as i64,
                delivery_d: 0,
            };
            must_insert(tx, ORDER_LINE, key(w, d, o, n as u64 + 1), &line.encode()).await?;
        }
        Ok(effect)
    }

    /// TPC-C §2.5: a customer pays; 15 % through a remote warehouse.
    async fn payment<F: Fabric>(&mut self, tx: &mut Transaction<'_, F>) -> Body {
        let (w, d) = (self.home_w, self.district());
        let amount = self.rng.range_inclusive(100, 500_000) as i64;
        let (c_w, c_d) = if self.spec.warehouses > 1 && self.rng.below(100) < 15 {
            (self.other_warehouse(w), self.district())
        } else {
            (w, d)
        };
        let mut wh = Warehouse::decode(&must_rfu(tx, WAREHOUSE, key(w, 0, 0, 0)).await?);
        let mut dist = District::decode(&must_rfu(tx, DISTRICT, key(w, d, 0, 0)).await?);
        let h = dist.next_h_id as u64;
        let budget = self.spec.customers_per_district + self.spec.payments_per_district_max;
        if self.spec.retain.is_none() && h > budget {
            return Err(Early::Refused);
        }
        wh.ytd += amount;
        dist.ytd += amount;
        dist.next_h_id += 1;
        tx.write(WAREHOUSE, key(w, 0, 0, 0), &wh.encode()).await?;
        tx.write(DISTRICT, key(w, d, 0, 0), &dist.encode()).await?;
        let c = self.pick_customer(tx, c_w, c_d).await?;
        let ck = key(c_w, c_d, c, 0);
        let mut cust = Customer::decode(&must_rfu(tx, CUSTOMER, ck).await?);
        cust.balance -= amount;
        cust.ytd_payment += amount;
        cust.payment_cnt += 1;
        tx.write(CUSTOMER, ck, &cust.encode()).await?;
        let hist = History {
            amount,
            c_w: c_w as u32,
            c_d: c_d as u32,
            c_id: c as u32,
        };
        must_insert(tx, HISTORY, key(w, d, h, 0), &hist.encode()).await?;
        let mut effect = vec![
            ((WAREHOUSE, key(w, 0, 0, 0), F_YTD), amount),
            ((DISTRICT, key(w, d, 0, 0), F_YTD), amount),
            ((DISTRICT, key(w, d, 0, 0), F_NEXT_H_ID), 1),
            ((CUSTOMER, ck, F_BALANCE), -amount),
            ((CUSTOMER, ck, F_YTD_PAYMENT), amount),
            ((CUSTOMER, ck, F_PAYMENT_CNT), 1),
            (self.row_cell(HISTORY, key(w, d, h, 0)), 1),
        ];
        if let Some(r) = self.spec.retain.filter(|&r| h > r) {
            effect.extend(
                self.archive_payment(tx, &mut dist, key(w, d, h - r, 0))
                    .await?,
            );
            tx.write(DISTRICT, key(w, d, 0, 0), &dist.encode()).await?;
        }
        Ok(effect)
    }

    /// Bounded history: archive the district's history row `hk` (delete it,
    /// add its amount to the district's and its customer's archived sums).
    /// `dist` is the district row this transaction writes.
    async fn archive_payment<F: Fabric>(
        &mut self,
        tx: &mut Transaction<'_, F>,
        dist: &mut District,
        hk: u64,
    ) -> Body {
        let Some(row) = tx.read(HISTORY, hk).await? else {
            return Err(Early::Broken(format!(
                "history {:?} to archive is missing",
                unkey(hk)
            )));
        };
        let h = History::decode(&row);
        tx.delete(HISTORY, hk).await?;
        dist.archived_paid += h.amount;
        let pk = key(h.c_w as u64, h.c_d as u64, h.c_id as u64, 0);
        let mut cust = Customer::decode(&must_rfu(tx, CUSTOMER, pk).await?);
        cust.archived_paid += h.amount;
        tx.write(CUSTOMER, pk, &cust.encode()).await?;
        let (w, d, _, _) = unkey(hk);
        Ok(vec![
            (self.row_cell(HISTORY, hk), -1),
            ((DISTRICT, key(w, d, 0, 0), F_ARCH_PAID), h.amount),
            ((CUSTOMER, pk, F_ARCH_PAID), h.amount),
        ])
    }

    /// TPC-C §2.6 (read-only): a customer's last order and its lines.
    async fn order_status<F: Fabric>(
        &mut self,
        tx: &mut Transaction<'_, F>,
        audits: &mut Vec<String>,
    ) -> Body {
        let (w, d) = (self.home_w, self.district());
        let c = self.pick_customer(tx, w, d).await?;
        must(tx, CUSTOMER, key(w, d, c, 0)).await?;
        let o = get_u32(&must(tx, LAST_ORDER, key(w, d, c, 0)).await?, 0) as u64;
        let Some(ord) = tx.read(ORDER, key(w, d, o, 0)).await? else {
            if !self.archived(tx, w, d, o).await? {
                audits.push(format!(
                    "OrderStatus: last order {o} of customer {w}/{d}/{c} is missing"
                ));
            }
            return Ok(Vec::new());
        };
        let ord = Order::decode(&ord);
        if ord.c_id as u64 != c {
            audits.push(format!(
                "OrderStatus: last order {o} of customer {w}/{d}/{c} belongs to customer {}",
                ord.c_id
            ));
        }
        for ol in 1..=ord.ol_cnt as u64 {
            if tx.read(ORDER_LINE, key(w, d, o, ol)).await?.is_none() {
                audits.push(format!(
                    "OrderStatus: order line {w}/{d}/{o}/{ol} is missing"
                ));
            }
        }
        Ok(Vec::new())
    }

    /// Bounded history: whether order `o` of `(w, d)` is old enough to have
    /// been archived (`R` orders or more behind the oldest undelivered one).
    async fn archived<F: Fabric>(
        &self,
        tx: &mut Transaction<'_, F>,
        w: u64,
        d: u64,
        o: u64,
    ) -> Result<bool, Early> {
        let Some(r) = self.spec.retain else {
            return Ok(false);
        };
        let head = get_u32(&must(tx, NEW_ORDER_HEAD, key(w, d, 0, 0)).await?, 0) as u64;
        Ok(o + r < head)
    }

    /// TPC-C §2.8 (read-only): distinct items of the district's last 20
    /// orders whose home stock is below a threshold.
    async fn stock_level<F: Fabric>(
        &mut self,
        tx: &mut Transaction<'_, F>,
        audits: &mut Vec<String>,
    ) -> Body {
        let (w, d) = (self.home_w, self.district());
        let threshold = self.rng.range_inclusive(10, 20) as u32;
        let next = District::decode(&must(tx, DISTRICT, key(w, d, 0, 0)).await?).next_o_id as u64;
        let mut items = BTreeSet::new();
        for o in next.saturating_sub(20).max(1)..next {
            let Some(ord) = tx.read(ORDER, key(w, d, o, 0)).await? else {
                audits.push(format!(
                    "StockLevel: order {w}/{d}/{o} below D_NEXT_O_ID {next} is missing"
                ));
                continue;
            };
            for ol in 1..=Order::decode(&ord).ol_cnt as u64 {
                match tx.read(ORDER_LINE, key(w, d, o, ol)).await? {
                    Some(l) => {
                        items.insert(OrderLine::decode(&l).i_id as u64);
                    }
                    None => audits.push(format!(
                        "StockLevel: order line {w}/{d}/{o}/{ol} is missing"
                    )),
                }
            }
        }
        let mut low = 0;
        for i in items {
            if Stock::decode(&must(tx, STOCK, key(w, 0, i, 0)).await?).quantity < threshold {
                low += 1;
            }
        }
        let _ = low;
        Ok(Vec::new())
    }

    /// TPC-C §2.7: deliver the oldest undelivered order of every district of
    /// the home warehouse, one database transaction per district.
    async fn delivery<F: Fabric>(&mut self, coord: &mut Coordinator<F>) -> Result<bool, TxError> {
        let w = self.home_w;
        let carrier = self.rng.range_inclusive(1, 10) as u32;
        let mut all = true;
        for d in 1..=self.spec.districts_per_warehouse {
            let (mut ok, mut backlog) = self.deliver_district(coord, w, d, carrier).await?;
            // Bounded history: more deliveries bring the backlog back to R/2.
            for _ in 0..CATCH_UP_DELIVERIES {
                if !self.spec.retain.is_some_and(|r| backlog > r / 2) {
                    break;
                }
                let (more, b) = self.deliver_district(coord, w, d, carrier).await?;
                (ok, backlog) = (ok && more, b);
            }
            all &= ok;
        }
        Ok(all)
    }

    /// One district's delivery, a database transaction of its own: whether
    /// it committed, and the district's undelivered backlog it saw.
    async fn deliver_district<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
        w: u64,
        d: u64,
        carrier: u32,
    ) -> Result<(bool, u64), TxError> {
        let mut tx = coord.begin();
        let mut backlog = 0;
        let ok = match self.deliver_one(&mut tx, w, d, carrier, &mut backlog).await {
            // Nothing to deliver in this district: a read-only transaction.
            Ok(None) => {
                let _ = tx.abort().await;
                true
            }
            Ok(Some(effect)) => commit_effect(&self.ledger, tx, "Delivery", effect).await?,
            Err(early) => self.finish(tx, "Delivery", Err(early)).await?,
        };
        Ok((ok, backlog))
    }

    async fn deliver_one<F: Fabric>(
        &mut self,
        tx: &mut Transaction<'_, F>,
        w: u64,
        d: u64,
        carrier: u32,
        backlog: &mut u64,
    ) -> Result<Option<Effect>, Early> {
        let hk = key(w, d, 0, 0);
        let o = get_u32(&must_rfu(tx, NEW_ORDER_HEAD, hk).await?, 0) as u64;
        let nk = key(w, d, o, 0);
        if tx.read(NEW_ORDER, nk).await?.is_none() {
            return Ok(None);
        }
        if self.spec.retain.is_some() {
            let next = District::decode(&must(tx, DISTRICT, hk).await?).next_o_id as u64;
            *backlog = next.saturating_sub(o + 1);
        }
        tx.delete(NEW_ORDER, nk).await?;
        tx.write(NEW_ORDER_HEAD, hk, &id_value(o as u32 + 1))
            .await?;
        let mut ord = Order::decode(&must_rfu(tx, ORDER, nk).await?);
        ord.carrier = carrier;
        tx.write(ORDER, nk, &ord.encode()).await?;
        let mut total = 0;
        for ol in 1..=ord.ol_cnt as u64 {
            let lk = key(w, d, o, ol);
            let mut line = OrderLine::decode(&must_rfu(tx, ORDER_LINE, lk).await?);
            total += line.amount;
            line.delivery_d = self.clock;
            tx.write(ORDER_LINE, lk, &line.encode()).await?;
        }
        let ck = key(w, d, ord.c_id as u64, 0);
        let mut cust = Customer::decode(&must_rfu(tx, CUSTOMER, ck).await?);
        cust.balance += total;
        cust.delivery_cnt += 1;
        tx.write(CUSTOMER, ck, &cust.encode()).await?;
        let mut effect = vec![
            ((NEW_ORDER_HEAD, hk, F_HEAD), 1),
            (self.row_cell(NEW_ORDER, nk), -1),
            ((CUSTOMER, ck, F_BALANCE), total),
            ((CUSTOMER, ck, F_DELIVERY_CNT), 1),
        ];
        if let Some(r) = self.spec.retain.filter(|&r| o > r) {
            effect.extend(self.archive_order(tx, key(w, d, o - r, 0)).await?);
        }
        Ok(Some(effect))
    }

    /// Bounded history: archive delivered order `ok` (delete it and its
    /// lines, add their amount to its customer's archived delivered sum).
    async fn archive_order<F: Fabric>(&mut self, tx: &mut Transaction<'_, F>, ok: u64) -> Body {
        let (w, d, o, _) = unkey(ok);
        let ord = Order::decode(&must(tx, ORDER, ok).await?);
        if ord.carrier == 0 {
            return Err(Early::Broken(format!(
                "order {w}/{d}/{o} to archive is undelivered"
            )));
        }
        let mut total = 0;
        for ol in 1..=ord.ol_cnt as u64 {
            let lk = key(w, d, o, ol);
            total += OrderLine::decode(&must(tx, ORDER_LINE, lk).await?).amount;
            tx.delete(ORDER_LINE, lk).await?;
        }
        tx.delete(ORDER, ok).await?;
        let ck = key(w, d, ord.c_id as u64, 0);
        let mut cust = Customer::decode(&must_rfu(tx, CUSTOMER, ck).await?);
        cust.archived_delivered += total;
        tx.write(CUSTOMER, ck, &cust.encode()).await?;
        Ok(vec![
            (self.row_cell(ORDER, ok), -1),
            ((CUSTOMER, ck, F_ARCH_DELIVERED), total),
        ])
    }
}

/// The cells the ledger tracks, for the check's naming.
pub(crate) fn field_name(c: &Cell) -> &'static str {
    match c.2 {
        PRESENCE => "presence",
        F_YTD => "ytd",
        F_NEXT_O_ID => "next_o_id",
        F_NEXT_H_ID => "next_h_id",
        F_BALANCE => "balance",
        F_YTD_PAYMENT => "ytd_payment",
        F_PAYMENT_CNT => "payment_cnt",
        F_DELIVERY_CNT => "delivery_cnt",
        F_ORDER_CNT => "order_cnt",
        F_REMOTE_CNT => "remote_cnt",
        F_HEAD => "oldest undelivered order",
        F_ARCH_DELIVERED => "archived delivered amount",
        F_ARCH_PAID => "archived paid amount",
        F_ROWS => "rows",
        _ => "?",
    }
}
