//! The post-run check of TPC-C: the consistency conditions of TPC-C §3.3.2
//! computed from the live tables, the invariants of the index tables, and the
//! exact ledger of acknowledged effects ([`crate::ledger`]).
//!
//! | condition (§3.3.2) | checked as |
//! |---|---|
//! | 1 | `W_YTD = Σ D_YTD` per warehouse |
//! | 2 | `D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID)` per district |
//! | 3 | `count(NEW_ORDER) = max(NO_O_ID) − min(NO_O_ID) + 1` per district |
//! | 4 | `Σ O_OL_CNT = count(ORDER_LINE)` per district |
//! | 5 | `O_CARRIER_ID` is null iff the order has a NEW_ORDER row |
//! | 6 | each order's lines are numbered exactly `1..=O_OL_CNT` |
//! | 7 | `O_CARRIER_ID` set iff every line's `OL_DELIVERY_D` is set |
//! | 8, 9 | `W_YTD` / `D_YTD` = Σ `H_AMOUNT` of the warehouse's / district's payments |
//! | 10 | `C_BALANCE = Σ delivered OL_AMOUNT − Σ H_AMOUNT` per customer |
//! | 12 | `C_BALANCE + C_YTD_PAYMENT = Σ delivered OL_AMOUNT` per customer |
//!
//! Index tables: `new_order_head` is the smallest NEW_ORDER id (or
//! `D_NEXT_O_ID` when none is left), `last_order` names each customer's newest
//! order, `customer_by_last` is as loaded. Ledger: every warehouse, district,
//! customer and stock counter the transactions change, and the presence of
//! every order, new-order and history row they insert or delete, equals its
//! initial value plus the acknowledged deltas (some subset of the in-doubt ones).

use std::collections::BTreeMap;

use super::client::*;
use super::*;
use crate::ledger::{Cell, EffectLedger, PRESENCE};

type Live = BTreeMap<u64, Vec<u8>>;

/// The rows of `t` under warehouse `w` and district `d`, in key order.
fn district_rows(
    live: &Live,
    w: u64,
    d: u64,
) -> std::collections::btree_map::Range<'_, u64, Vec<u8>> {
    live.range(key(w, d, 0, 0)..key(w, d + 1, 0, 0))
}

/// Post-run check of TPC-C. `live` holds one map per table, in `tables()` order.
pub fn verify(spec: &TpccSpec, live: &[Live], ledger: &EffectLedger) -> Vec<String> {
    let mut v = ledger.audit_violations.clone();
    if ledger.capacity_refusals > 0 {
        v.push(format!(
            "{} transactions were refused: a district used up its NewOrder or Payment budget \
             (TpccSpec::new_orders_per_district_max / payments_per_district_max); raise it for runs this long",
            ledger.capacity_refusals
        ));
    }
    if live.len() != TABLE_NAMES.len() {
        v.push(format!(
            "tpcc has {} tables, got {} snapshots",
            TABLE_NAMES.len(),
            live.len()
        ));
        return v;
    }
    let mut sums = Sums::of_history(&live[HISTORY as usize]);
    for w in 1..=spec.warehouses {
        check_warehouse(spec, live, w, &mut sums, &mut v);
    }
    check_customers(spec, live, &sums, &mut v);
    check_stock(spec, live, &mut v);
    v.extend(check_ledger(spec, live, ledger));
    v
}

/// Σ delivered OL_AMOUNT and Σ H_AMOUNT per customer key (conditions 10,
/// 12), and Σ H_AMOUNT per warehouse and per district (conditions 8, 9).
#[derive(Default)]
struct Sums {
    delivered: BTreeMap<u64, i64>,
    paid: BTreeMap<u64, i64>,
    paid_w: BTreeMap<u64, i64>,
    paid_d: BTreeMap<u64, i64>,
}

impl Sums {
    /// The payments of the live HISTORY rows (nothing delivered yet).
    fn of_history(history: &Live) -> Sums {
        let mut s = Sums::default();
        for (k, b) in history {
            let (w, d, _, _) = unkey(*k);
            let h = History::decode(b);
            *s.paid
                .entry(key(h.c_w as u64, h.c_d as u64, h.c_id as u64, 0))
                .or_default() += h.amount;
            *s.paid_w.entry(w).or_default() += h.amount;
            *s.paid_d.entry(key(w, d, 0, 0)).or_default() += h.amount;
        }
        s
    }
}

/// Conditions 1, 8 and 9 of warehouse `w`, and every district's own.
fn check_warehouse(spec: &TpccSpec, live: &[Live], w: u64, sums: &mut Sums, v: &mut Vec<String>) {
    let t = |id: TableId| &live[id as usize];
    let Some(wb) = t(WAREHOUSE).get(&key(w, 0, 0, 0)) else {
        v.push(format!("warehouse {w} is missing"));
        return;
    };
    let w_ytd = Warehouse::decode(wb).ytd;
    let mut d_sum = 0;
    for d in 1..=spec.districts_per_warehouse {
        let Some(db) = t(DISTRICT).get(&key(w, d, 0, 0)) else {
            v.push(format!("district {w}/{d} is missing"));
            continue;
        };
        let dist = District::decode(db);
        d_sum += dist.ytd;
        // Bounded history: archived rows count with the live ones.
        *sums.paid_d.entry(key(w, d, 0, 0)).or_default() += dist.archived_paid;
        *sums.paid_w.entry(w).or_default() += dist.archived_paid;
        if dist.ytd != sums.paid_d.get(&key(w, d, 0, 0)).copied().unwrap_or(0) {
            v.push(format!(
                "condition 9: D_YTD of {w}/{d} is {}, Σ H_AMOUNT {}",
                dist.ytd,
                sums.paid_d.get(&key(w, d, 0, 0)).copied().unwrap_or(0)
            ));
        }
        check_district(spec, live, w, d, &dist, &mut sums.delivered, v);
    }
    if w_ytd != d_sum {
        v.push(format!(
            "condition 1: W_YTD of {w} is {w_ytd}, Σ D_YTD {d_sum}"
        ));
    }
    if w_ytd != sums.paid_w.get(&w).copied().unwrap_or(0) {
        v.push(format!(
            "condition 8: W_YTD of {w} is {w_ytd}, Σ H_AMOUNT {}",
            sums.paid_w.get(&w).copied().unwrap_or(0)
        ));
    }
}

/// Customers: conditions 10 and 12, and every loaded customer live.
fn check_customers(spec: &TpccSpec, live: &[Live], sums: &Sums, v: &mut Vec<String>) {
    let customers = &live[CUSTOMER as usize];
    for (k, b) in customers {
        let c = Customer::decode(b);
        let (del, pay) = (
            sums.delivered.get(k).copied().unwrap_or(0) + c.archived_delivered,
            sums.paid.get(k).copied().unwrap_or(0) + c.archived_paid,
        );
        if c.balance != del - pay {
            v.push(format!(
                "condition 10: C_BALANCE of {:?} is {}, Σ delivered OL_AMOUNT − Σ H_AMOUNT = {}",
                unkey(*k),
                c.balance,
                del - pay
            ));
        }
        if c.balance + c.ytd_payment != del {
            v.push(format!(
                "condition 12: C_BALANCE + C_YTD_PAYMENT of {:?} is {}, Σ delivered OL_AMOUNT {del}",
                unkey(*k),
                c.balance + c.ytd_payment
            ));
        }
    }
    if customers.len() as u64 != spec.districts() * spec.customers_per_district {
        v.push(format!(
            "{} customers live, loaded {}",
            customers.len(),
            spec.districts() * spec.customers_per_district
        ));
    }
}

/// Stock quantities stay within TPC-C's 10..=100 (the refill rule keeps
/// them there), and every loaded stock row and item is live.
fn check_stock(spec: &TpccSpec, live: &[Live], v: &mut Vec<String>) {
    let t = |id: TableId| &live[id as usize];
    for (k, b) in t(STOCK) {
        let s = Stock::decode(b);
        if !(10..=100).contains(&s.quantity) {
            v.push(format!(
                "stock {:?}: S_QUANTITY {} outside 10..=100",
                unkey(*k),
                s.quantity
            ));
        }
    }
    if t(STOCK).len() as u64 != spec.warehouses * spec.items || t(ITEM).len() as u64 != spec.items {
        v.push(format!(
            "{} stock rows and {} items live, loaded {} and {}",
            t(STOCK).len(),
            t(ITEM).len(),
            spec.warehouses * spec.items,
            spec.items
        ));
    }
}

/// Conditions 2–7 and the index tables of one district.
fn check_district(
    spec: &TpccSpec,
    live: &[Live],
    w: u64,
    d: u64,
    dist: &District,
    delivered: &mut BTreeMap<u64, i64>,
    v: &mut Vec<String>,
) {
    let t = |id: TableId| &live[id as usize];
    let c = DistrictCheck {
        spec,
        live,
        w,
        d,
        next: dist.next_o_id as u64,
        orders: district_rows(t(ORDER), w, d)
            .map(|(k, b)| (unkey(*k).2, Order::decode(b)))
            .collect(),
        new_orders: district_rows(t(NEW_ORDER), w, d)
            .map(|(k, _)| unkey(*k).2)
            .collect(),
    };
    let min_o = c.check_order_ids(v);
    let last_order = c.check_orders(delivered, v);
    c.check_last_order(min_o, &last_order, v);
    c.check_customer_by_last(v);
}

/// One district's orders and new orders, for the checks of [`check_district`].
struct DistrictCheck<'a> {
    spec: &'a TpccSpec,
    live: &'a [Live],
    w: u64,
    d: u64,
    /// D_NEXT_O_ID.
    next: u64,
    /// Live orders by id, in id order.
    orders: Vec<(u64, Order)>,
    /// Ids of the live NEW_ORDER rows, in order.
    new_orders: Vec<u64>,
}

impl DistrictCheck<'_> {
    fn table(&self, id: TableId) -> &Live {
        &self.live[id as usize]
    }

    /// Conditions 2 and 3, the run of live order ids and new_order_head;
    /// the smallest live order id.
    fn check_order_ids(&self, v: &mut Vec<String>) -> u64 {
        let (w, d, next) = (self.w, self.d, self.next);
        let max_o = self.orders.iter().map(|(o, _)| *o).max().unwrap_or(0);
        if next - 1 != max_o {
            v.push(format!(
                "condition 2: {w}/{d}: D_NEXT_O_ID − 1 = {}, max(O_ID) = {max_o}",
                next - 1
            ));
        }
        // Bounded history archives the oldest orders: the live ones are a run.
        let min_o = if self.spec.retain.is_some() {
            self.orders.iter().map(|(o, _)| *o).min().unwrap_or(1)
        } else {
            1
        };
        if self.orders.len() as u64 != max_o + 1 - min_o {
            v.push(format!(
                "{w}/{d}: {} orders live, but order ids run {min_o}..={max_o}",
                self.orders.len()
            ));
        }
        if let (Some(&lo), Some(&hi)) = (self.new_orders.first(), self.new_orders.last()) {
            if hi != next - 1 {
                v.push(format!(
                    "condition 2: {w}/{d}: D_NEXT_O_ID − 1 = {}, max(NO_O_ID) = {hi}",
                    next - 1
                ));
            }
            if self.new_orders.len() as u64 != hi - lo + 1 {
                v.push(format!(
                    "condition 3: {w}/{d}: {} NEW_ORDER rows, ids {lo}..={hi}",
                    self.new_orders.len()
                ));
            }
        }
        let head = self
            .table(NEW_ORDER_HEAD)
            .get(&key(w, d, 0, 0))
            .map(|b| get_u32(b, 0) as u64);
        let want_head = self.new_orders.first().copied().unwrap_or(next);
        if head != Some(want_head) {
            v.push(format!(
                "{w}/{d}: new_order_head is {head:?}, oldest undelivered order {want_head}"
            ));
        }
        min_o
    }

    /// Conditions 4–7 over the orders and their lines, adding each
    /// delivered order's amount to its customer in `delivered`; each
    /// customer's newest order.
    fn check_orders(
        &self,
        delivered: &mut BTreeMap<u64, i64>,
        v: &mut Vec<String>,
    ) -> BTreeMap<u64, u64> {
        let (w, d) = (self.w, self.d);
        // Order lines, grouped by order.
        let mut lines: BTreeMap<u64, Vec<(u64, OrderLine)>> = BTreeMap::new();
        for (k, b) in district_rows(self.table(ORDER_LINE), w, d) {
            let (_, _, o, ol) = unkey(*k);
            lines.entry(o).or_default().push((ol, OrderLine::decode(b)));
        }
        let ol_sum: u64 = self.orders.iter().map(|(_, o)| o.ol_cnt as u64).sum();
        let ol_rows: u64 = lines.values().map(|l| l.len() as u64).sum();
        if ol_sum != ol_rows {
            v.push(format!(
                "condition 4: {w}/{d}: Σ O_OL_CNT = {ol_sum}, ORDER_LINE rows = {ol_rows}"
            ));
        }
        let mut last_order: BTreeMap<u64, u64> = BTreeMap::new();
        for (o, ord) in &self.orders {
            let ls = lines.get(o).map(|l| l.as_slice()).unwrap_or(&[]);
            self.check_order(*o, ord, ls, v);
            let ck = key(w, d, ord.c_id as u64, 0);
            if ord.carrier != 0 {
                *delivered.entry(ck).or_default() += ls.iter().map(|(_, l)| l.amount).sum::<i64>();
            }
            let e = last_order.entry(ord.c_id as u64).or_default();
            *e = (*e).max(*o);
        }
        last_order
    }

    /// Conditions 5–7 of order `o` with its lines `ls`.
    fn check_order(&self, o: u64, ord: &Order, ls: &[(u64, OrderLine)], v: &mut Vec<String>) {
        let (w, d) = (self.w, self.d);
        let numbers: Vec<u64> = ls.iter().map(|(ol, _)| *ol).collect();
        if numbers != (1..=ord.ol_cnt as u64).collect::<Vec<_>>() {
            v.push(format!(
                "condition 6: order {w}/{d}/{o} has lines {numbers:?}, O_OL_CNT {}",
                ord.ol_cnt
            ));
        }
        let has_no = self.new_orders.binary_search(&o).is_ok();
        if (ord.carrier == 0) != has_no {
            v.push(format!(
                "condition 5: order {w}/{d}/{o}: carrier {}, NEW_ORDER row {has_no}",
                ord.carrier
            ));
        }
        if (ord.carrier != 0) != ls.iter().all(|(_, l)| l.delivery_d != 0)
            || ls
                .iter()
                .any(|(_, l)| (l.delivery_d != 0) != (ord.carrier != 0))
        {
            v.push(format!(
                "condition 7: order {w}/{d}/{o}: carrier {} but delivery dates {:?}",
                ord.carrier,
                ls.iter().map(|(_, l)| l.delivery_d).collect::<Vec<_>>()
            ));
        }
    }

    /// The last_order index against each customer's newest order
    /// (`last_order`); with bounded history, against archived ones too.
    fn check_last_order(&self, min_o: u64, last_order: &BTreeMap<u64, u64>, v: &mut Vec<String>) {
        let (spec, w, d) = (self.spec, self.w, self.d);
        let index = self.table(LAST_ORDER);
        for (c, o) in last_order {
            let idx = index.get(&key(w, d, *c, 0)).map(|b| get_u32(b, 0) as u64);
            if idx != Some(*o) {
                v.push(format!(
                    "{w}/{d}: last_order of customer {c} is {idx:?}, newest order {o}"
                ));
            }
        }
        if spec.retain.is_some() {
            // Every customer keeps an index row; one naming no live order names an archived one.
            for (k, b) in district_rows(index, w, d) {
                let (c, o) = (unkey(*k).2, get_u32(b, 0) as u64);
                if !last_order.contains_key(&c) && o >= min_o {
                    v.push(format!("{w}/{d}: last_order of customer {c} is {o}, which is neither live nor archived"));
                }
            }
            if district_rows(index, w, d).count() as u64 != spec.customers_per_district {
                v.push(format!(
                    "{w}/{d}: {} last_order rows for {} customers",
                    district_rows(index, w, d).count(),
                    spec.customers_per_district
                ));
            }
        } else if district_rows(index, w, d).count() != last_order.len() {
            v.push(format!(
                "{w}/{d}: {} last_order rows for {} customers with orders",
                district_rows(index, w, d).count(),
                last_order.len()
            ));
        }
    }

    /// customer_by_last is static: as loaded.
    fn check_customer_by_last(&self, v: &mut Vec<String>) {
        let (spec, w, d) = (self.spec, self.w, self.d);
        for (l, ids) in spec.by_last(&spec.names(w, d)).iter().enumerate() {
            let got = self
                .table(CUSTOMER_BY_LAST)
                .get(&key(w, d, l as u64, 0))
                .map(|b| {
                    let n = get_u32(b, 0) as usize;
                    (0..n.min((b.len() - 4) / 4))
                        .map(|j| get_u32(b, 4 + 4 * j))
                        .collect::<Vec<u32>>()
                });
            if got.as_ref() != Some(ids) {
                v.push(format!(
                    "customer_by_last {w}/{d}/{l} is {got:?}, loaded {ids:?}"
                ));
            }
        }
    }
}

/// The ledger part: counters and presences against acknowledged deltas.
fn check_ledger(spec: &TpccSpec, live: &[Live], ledger: &EffectLedger) -> Vec<String> {
    let name = |c: &Cell| {
        format!(
            "{} {:?} {}",
            TABLE_NAMES[c.0 as usize],
            unkey(c.1),
            field_name(c)
        )
    };
    ledger.check(
        ledger_cells(spec, live),
        |c| initial_value(spec, c),
        |c| actual_value(live, c),
        name,
    )
}

/// Every counter the transactions change, and the presence of every row
/// beyond the loaded ones in the growing tables.
fn ledger_cells(spec: &TpccSpec, live: &[Live]) -> Vec<Cell> {
    let c_n = spec.customers_per_district;
    let mut cells: Vec<Cell> = Vec::new();
    for w in 1..=spec.warehouses {
        cells.push((WAREHOUSE, key(w, 0, 0, 0), F_YTD));
        for d in 1..=spec.districts_per_warehouse {
            district_cells(spec, key(w, d, 0, 0), &mut cells);
            for c in 1..=c_n {
                let ck = key(w, d, c, 0);
                cells.extend([
                    (CUSTOMER, ck, F_BALANCE),
                    (CUSTOMER, ck, F_YTD_PAYMENT),
                    (CUSTOMER, ck, F_PAYMENT_CNT),
                    (CUSTOMER, ck, F_DELIVERY_CNT),
                ]);
                if spec.retain.is_some() {
                    cells.extend([
                        (CUSTOMER, ck, F_ARCH_DELIVERED),
                        (CUSTOMER, ck, F_ARCH_PAID),
                    ]);
                }
            }
        }
        for i in 1..=spec.items {
            let sk = key(w, 0, i, 0);
            cells.extend([
                (STOCK, sk, F_YTD),
                (STOCK, sk, F_ORDER_CNT),
                (STOCK, sk, F_REMOTE_CNT),
            ]);
        }
    }
    // Every row beyond the loaded ids in the growing tables must come from
    // an acknowledged insert (bounded history: counted per district above).
    for table in [ORDER, NEW_ORDER, HISTORY]
        .into_iter()
        .filter(|_| spec.retain.is_none())
    {
        cells.extend(
            live[table as usize]
                .keys()
                .filter(|k| unkey(**k).2 > c_n)
                .map(|k| (table, *k, PRESENCE)),
        );
    }
    cells
}

/// The counters of district `dk` (with bounded history, its row counts too).
fn district_cells(spec: &TpccSpec, dk: u64, cells: &mut Vec<Cell>) {
    cells.extend([
        (DISTRICT, dk, F_YTD),
        (DISTRICT, dk, F_NEXT_O_ID),
        (DISTRICT, dk, F_NEXT_H_ID),
        (NEW_ORDER_HEAD, dk, F_HEAD),
    ]);
    if spec.retain.is_some() {
        cells.extend([
            (DISTRICT, dk, F_ARCH_PAID),
            (ORDER, dk, F_ROWS),
            (NEW_ORDER, dk, F_ROWS),
            (HISTORY, dk, F_ROWS),
        ]);
    }
}

/// A ledger cell's value as loaded.
fn initial_value(spec: &TpccSpec, c: &Cell) -> i64 {
    let c_n = spec.customers_per_district;
    let (_, _, id, _) = unkey(c.1);
    match (c.0, c.2) {
        (WAREHOUSE, _) => spec.initial_w_ytd(),
        (DISTRICT, F_YTD) => spec.initial_d_ytd(),
        (DISTRICT, F_ARCH_PAID) => (spec.first_loaded_history() - 1) as i64 * INITIAL_H_AMOUNT,
        (DISTRICT, _) => c_n as i64 + 1,
        (NEW_ORDER_HEAD, _) => spec.first_new_order() as i64,
        (ORDER, F_ROWS) => (c_n + 1 - spec.first_loaded_order()) as i64,
        (HISTORY, F_ROWS) => (c_n + 1 - spec.first_loaded_history()) as i64,
        (NEW_ORDER, F_ROWS) => (c_n + 1 - spec.first_new_order()) as i64,
        (CUSTOMER, F_ARCH_PAID) => {
            if id < spec.first_loaded_history() {
                INITIAL_H_AMOUNT
            } else {
                0
            }
        }
        (_, F_ARCH_DELIVERED) => 0,
        (CUSTOMER, F_BALANCE) => INITIAL_BALANCE,
        (CUSTOMER, F_YTD_PAYMENT) => INITIAL_YTD_PAYMENT,
        (CUSTOMER, F_PAYMENT_CNT) => 1,
        (ORDER, _) | (HISTORY, _) => (id <= c_n) as i64,
        (NEW_ORDER, _) => (id <= c_n && id >= spec.first_new_order()) as i64,
        _ => 0,
    }
}

/// A ledger cell's value in the live tables (`None`: its row is gone).
fn actual_value(live: &[Live], c: &Cell) -> Option<i64> {
    let row = live[c.0 as usize].get(&c.1);
    if c.2 == PRESENCE {
        return Some(row.is_some() as i64);
    }
    if c.2 == F_ROWS {
        let (w, d, _, _) = unkey(c.1);
        return Some(district_rows(&live[c.0 as usize], w, d).count() as i64);
    }
    let b = row?;
    Some(match (c.0, c.2) {
        (DISTRICT, F_ARCH_PAID) => District::decode(b).archived_paid,
        (CUSTOMER, F_ARCH_DELIVERED) => Customer::decode(b).archived_delivered,
        (CUSTOMER, F_ARCH_PAID) => Customer::decode(b).archived_paid,
        (WAREHOUSE, _) => Warehouse::decode(b).ytd,
        (DISTRICT, F_YTD) => District::decode(b).ytd,
        (DISTRICT, F_NEXT_O_ID) => District::decode(b).next_o_id as i64,
        (DISTRICT, _) => District::decode(b).next_h_id as i64,
        (NEW_ORDER_HEAD, _) => get_u32(b, 0) as i64,
        (CUSTOMER, F_BALANCE) => Customer::decode(b).balance,
        (CUSTOMER, F_YTD_PAYMENT) => Customer::decode(b).ytd_payment,
        (CUSTOMER, F_PAYMENT_CNT) => Customer::decode(b).payment_cnt as i64,
        (CUSTOMER, _) => Customer::decode(b).delivery_cnt as i64,
        (STOCK, F_YTD) => Stock::decode(b).ytd,
        (STOCK, F_ORDER_CNT) => Stock::decode(b).order_cnt as i64,
        (STOCK, _) => Stock::decode(b).remote_cnt as i64,
        _ => return None,
    })
}
