//! TPC-C as FORD and Pandora ran it (Pandora §6 "Workloads"; the TPC-C
//! specification, rev. 5.11; docs/DESIGN.md §6): nine tables, 1–4 warehouses, the
//! mix NewOrder 45 / Payment 43 / OrderStatus 4 / Delivery 4 / StockLevel 4,
//! NURand-skewed customers and items, 1 % of NewOrders rolled back by an
//! invalid item, remote order lines (1 %) and remote payments (15 %) when
//! there is more than one warehouse. As in FORD and Pandora, clients run back
//! to back: keying and think times are skipped, and there are no terminals
//! beyond "each client has a home warehouse" (`client id % warehouses`).
//!
//! This module holds the schema, key packing, value layouts and the loader;
//! [`client`] runs the transactions and [`check`] verifies the TPC-C
//! consistency conditions plus an exact ledger of acknowledged effects.
//!
//! **Keys.** Every key is `w << 48 | d << 40 | id << 8 | sub` ([`key`]): 16
//! bits of warehouse, 8 of district, 32 of a per-table id (customer, order,
//! history, item or last-name id), 8 of order-line number. Ids are 1-based as
//! in TPC-C; unused parts are zero.
//!
//! **Tables** (`tables()` order): warehouse, district, customer, history,
//! new_order, order, order_line, item, stock, then three index tables built in
//! the KV store for the secondary access paths: `customer_by_last` ((w, d,
//! last-name id) → customer ids sorted by first name), `new_order_head` ((w,
//! d) → the oldest undelivered order id, which Delivery advances), and
//! `last_order` ((w, d, c) → the customer's newest order id, for OrderStatus).
//! Values hold the columns the transactions and checks touch (money in integer
//! cents, rates in basis points); text columns are left out.
//!
//! **Scale.** Counts default to TPC-C's (10 districts, 3 000 customers and
//! initial orders per district, 100 000 items) and can be reduced
//! ([`TpccSpec::tiny`] for tests); initial `W_YTD`/`D_YTD` are scaled with the
//! customer count so that conditions 8–9 hold at any scale. **Capacity:** dkvs
//! tables are sized at creation and deleted rows keep their slots, so the
//! tables that grow (order, new_order, order_line, history) are provisioned for
//! `new_orders_per_district_max` NewOrders and `payments_per_district_max`
//! Payments per district (default 10 000 each, i.e. 100 000 per warehouse:
//! about 2 M order-line slots). A transaction that would exceed its district's
//! budget is refused and counted in `EffectLedger::capacity_refusals`, which
//! [`check::verify`] reports as an error: raise the budget for longer runs.
//!
//! **Bounded history** ([`TpccSpec::retain`], workload `tpcc-bounded`): a
//! deviation from TPC-C for runs of any length in bounded memory. TPC-C's
//! order, order-line and history tables grow by design, and so does its
//! undelivered backlog (45 NewOrders per 4 Deliveries of 10 orders). With
//! `retain = R`: delivering order `o` archives order `o − R` (its order and
//! order-line rows are deleted, their delivered amount added to the
//! customer's `archived_delivered`); a Payment archives the district's
//! history row `h − R` (deleted, its amount added to the district's and the
//! customer's `archived_paid`); and a district whose backlog exceeds `R / 2`
//! gets a second delivery. Conditions 8–10 and 12 then count archived sums
//! with the live rows; OrderStatus accepts a last order older than the
//! retained window as archived; the ledger counts the growing tables' rows
//! per district instead of tracking each row.

pub mod check;
pub mod client;

use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{TableId, TableSpec};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

pub use check::verify;
pub use client::TpccClient;

pub const WAREHOUSE: TableId = 0;
pub const DISTRICT: TableId = 1;
pub const CUSTOMER: TableId = 2;
pub const HISTORY: TableId = 3;
pub const NEW_ORDER: TableId = 4;
pub const ORDER: TableId = 5;
pub const ORDER_LINE: TableId = 6;
pub const ITEM: TableId = 7;
pub const STOCK: TableId = 8;
pub const CUSTOMER_BY_LAST: TableId = 9;
pub const NEW_ORDER_HEAD: TableId = 10;
pub const LAST_ORDER: TableId = 11;

pub const TABLE_NAMES: [&str; 12] = [
    "warehouse",
    "district",
    "customer",
    "history",
    "new_order",
    "order",
    "order_line",
    "item",
    "stock",
    "customer_by_last",
    "new_order_head",
    "last_order",
];

pub const MIX: [(&str, u64); 5] = [
    ("NewOrder", 45),
    ("Payment", 43),
    ("OrderStatus", 4),
    ("Delivery", 4),
    ("StockLevel", 4),
];

/// Most order lines per order (TPC-C: 5..=15).
pub const MAX_OL_CNT: u64 = 15;
/// Initial `C_BALANCE`, `C_YTD_PAYMENT` and `H_AMOUNT` (cents): −10.00, 10.00, 10.00.
pub const INITIAL_BALANCE: i64 = -1_000;
pub const INITIAL_YTD_PAYMENT: i64 = 1_000;
pub const INITIAL_H_AMOUNT: i64 = 1_000;

/// NURand run-time constants C (TPC-C §2.1.6; fixed here, loader and clients alike).
pub const C_LAST: u64 = 223;
pub const C_ID: u64 = 259;
pub const C_OL_I_ID: u64 = 7_911;

#[derive(Clone, Debug)]
pub struct TpccSpec {
    pub warehouses: u64,
    pub districts_per_warehouse: u64,
    /// Customers per district, also the initial orders per district.
    pub customers_per_district: u64,
    pub items: u64,
    /// NewOrders each district can take during a run (capacity of the growing tables).
    pub new_orders_per_district_max: u64,
    /// Payments (history rows) each district can take during a run.
    pub payments_per_district_max: u64,
    /// Seed of the deterministic initial population (the check regenerates parts of it).
    pub load_seed: u64,
    /// Bounded history: orders and payments kept per district (see the
    /// module docs); `None` is TPC-C's unbounded growth.
    pub retain: Option<u64>,
}

impl Default for TpccSpec {
    fn default() -> Self {
        TpccSpec {
            warehouses: 1,
            districts_per_warehouse: 10,
            customers_per_district: 3_000,
            items: 100_000,
            new_orders_per_district_max: 10_000,
            payments_per_district_max: 10_000,
            load_seed: 0x7BCC,
            retain: None,
        }
    }
}

/// Orders and payments a bounded-history district keeps by default.
pub const DEFAULT_RETAIN: u64 = 3_000;

/// Pack `(w, d, id, sub)` into a key (see the module docs for the layout).
pub fn key(w: u64, d: u64, id: u64, sub: u64) -> u64 {
    debug_assert!(
        w < 1 << 16 && d < 1 << 8 && id < 1 << 32 && sub < 1 << 8,
        "key part out of range: {w} {d} {id} {sub}"
    );
    w << 48 | d << 40 | id << 8 | sub
}

/// Unpack a key into `(w, d, id, sub)`.
pub fn unkey(k: u64) -> (u64, u64, u64, u64) {
    (k >> 48, (k >> 40) & 0xFF, (k >> 8) & 0xFFFF_FFFF, k & 0xFF)
}

/// TPC-C's NURand(A, x, y) (§2.1.6) with run-time constant `c`.
pub fn nurand(rng: &mut Rng, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((rng.range_inclusive(0, a) | rng.range_inclusive(x, y)) + c) % (y - x + 1)) + x
}

pub(crate) fn get_u32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

pub(crate) fn get_i64(b: &[u8], i: usize) -> i64 {
    i64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

pub(crate) fn get_u64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

pub(crate) fn put_u32(b: &mut [u8], i: usize, v: u32) {
    b[i..i + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_i64(b: &mut [u8], i: usize, v: i64) {
    b[i..i + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], i: usize, v: u64) {
    b[i..i + 8].copy_from_slice(&v.to_le_bytes());
}

/// `WAREHOUSE`: `W_YTD` (i64 @0), `W_TAX` (u32 bp @8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warehouse {
    pub ytd: i64,
    pub tax: u32,
}

impl Warehouse {
    pub const BYTES: u32 = 16;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_i64(&mut b, 0, self.ytd);
        put_u32(&mut b, 8, self.tax);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        Warehouse {
            ytd: get_i64(b, 0),
            tax: get_u32(b, 8),
        }
    }
}

/// `DISTRICT`: `D_YTD` (i64 @0), `D_TAX` (u32 @8), `D_NEXT_O_ID` (u32 @12),
/// the next history id of the district (u32 @16; history rows are keyed by
/// it), and the amounts of its archived history rows (i64 @24, bounded history).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct District {
    pub ytd: i64,
    pub tax: u32,
    pub next_o_id: u32,
    pub next_h_id: u32,
    pub archived_paid: i64,
}

impl District {
    pub const BYTES: u32 = 32;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_i64(&mut b, 0, self.ytd);
        put_u32(&mut b, 8, self.tax);
        put_u32(&mut b, 12, self.next_o_id);
        put_u32(&mut b, 16, self.next_h_id);
        put_i64(&mut b, 24, self.archived_paid);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        District {
            ytd: get_i64(b, 0),
            tax: get_u32(b, 8),
            next_o_id: get_u32(b, 12),
            next_h_id: get_u32(b, 16),
            archived_paid: get_i64(b, 24),
        }
    }
}

/// `CUSTOMER`: balance, YTD payment, payment and delivery counts, discount
/// (bp), credit (1 = "BC"), last-name id (0..1000), first-name sort key; and
/// the delivered and paid amounts of its archived orders and history rows
/// (bounded history).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Customer {
    pub balance: i64,
    pub ytd_payment: i64,
    pub payment_cnt: u32,
    pub delivery_cnt: u32,
    pub discount: u32,
    pub bad_credit: bool,
    pub last: u32,
    pub first: u32,
    pub archived_delivered: i64,
    pub archived_paid: i64,
}

impl Customer {
    pub const BYTES: u32 = 56;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_i64(&mut b, 0, self.balance);
        put_i64(&mut b, 8, self.ytd_payment);
        put_u32(&mut b, 16, self.payment_cnt);
        put_u32(&mut b, 20, self.delivery_cnt);
        put_u32(&mut b, 24, self.discount);
        put_u32(&mut b, 28, self.bad_credit as u32);
        put_u32(&mut b, 32, self.last);
        put_u32(&mut b, 36, self.first);
        put_i64(&mut b, 40, self.archived_delivered);
        put_i64(&mut b, 48, self.archived_paid);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        Customer {
            balance: get_i64(b, 0),
            ytd_payment: get_i64(b, 8),
            payment_cnt: get_u32(b, 16),
            delivery_cnt: get_u32(b, 20),
            discount: get_u32(b, 24),
            bad_credit: get_u32(b, 28) != 0,
            last: get_u32(b, 32),
            first: get_u32(b, 36),
            archived_delivered: get_i64(b, 40),
            archived_paid: get_i64(b, 48),
        }
    }
}

/// `HISTORY` (key `(w, d, h_id)`: the paying district): `H_AMOUNT` and the
/// paying customer `(c_w, c_d, c_id)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct History {
    pub amount: i64,
    pub c_w: u32,
    pub c_d: u32,
    pub c_id: u32,
}

impl History {
    pub const BYTES: u32 = 24;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_i64(&mut b, 0, self.amount);
        put_u32(&mut b, 8, self.c_w);
        put_u32(&mut b, 12, self.c_d);
        put_u32(&mut b, 16, self.c_id);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        History {
            amount: get_i64(b, 0),
            c_w: get_u32(b, 8),
            c_d: get_u32(b, 12),
            c_id: get_u32(b, 16),
        }
    }
}

/// `ORDER`: `O_C_ID`, `O_OL_CNT`, `O_ALL_LOCAL`, `O_CARRIER_ID` (0 = null), `O_ENTRY_D`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Order {
    pub c_id: u32,
    pub ol_cnt: u32,
    pub all_local: bool,
    pub carrier: u32,
    pub entry_d: u64,
}

impl Order {
    pub const BYTES: u32 = 24;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_u32(&mut b, 0, self.c_id);
        put_u32(&mut b, 4, self.ol_cnt);
        put_u32(&mut b, 8, self.all_local as u32);
        put_u32(&mut b, 12, self.carrier);
        put_u64(&mut b, 16, self.entry_d);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        Order {
            c_id: get_u32(b, 0),
            ol_cnt: get_u32(b, 4),
            all_local: get_u32(b, 8) != 0,
            carrier: get_u32(b, 12),
            entry_d: get_u64(b, 16),
        }
    }
}

/// `ORDER_LINE`: item, supplying warehouse, quantity, amount, delivery date (0 = null).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderLine {
    pub i_id: u32,
    pub supply_w: u32,
    pub quantity: u32,
    pub amount: i64,
    pub delivery_d: u64,
}

impl OrderLine {
    pub const BYTES: u32 = 32;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_u32(&mut b, 0, self.i_id);
        put_u32(&mut b, 4, self.supply_w);
        put_u32(&mut b, 8, self.quantity);
        put_i64(&mut b, 16, self.amount);
        put_u64(&mut b, 24, self.delivery_d);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        OrderLine {
            i_id: get_u32(b, 0),
            supply_w: get_u32(b, 4),
            quantity: get_u32(b, 8),
            amount: get_i64(b, 16),
            delivery_d: get_u64(b, 24),
        }
    }
}

/// `STOCK`: `S_QUANTITY`, `S_YTD`, `S_ORDER_CNT`, `S_REMOTE_CNT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stock {
    pub quantity: u32,
    pub ytd: i64,
    pub order_cnt: u32,
    pub remote_cnt: u32,
}

impl Stock {
    pub const BYTES: u32 = 24;
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0; Self::BYTES as usize];
        put_u32(&mut b, 0, self.quantity);
        put_u32(&mut b, 4, self.order_cnt);
        put_u32(&mut b, 8, self.remote_cnt);
        put_i64(&mut b, 16, self.ytd);
        b
    }
    pub fn decode(b: &[u8]) -> Self {
        Stock {
            quantity: get_u32(b, 0),
            order_cnt: get_u32(b, 4),
            remote_cnt: get_u32(b, 8),
            ytd: get_i64(b, 16),
        }
    }
}

/// `ITEM`: `I_PRICE` (cents) @0, `I_IM_ID` @4.
const ITEM_BYTES: u32 = 8;
/// `NEW_ORDER`, `NEW_ORDER_HEAD`, `LAST_ORDER`: one order id (u32 @0).
const ID_BYTES: u32 = 8;

pub(crate) fn id_value(id: u32) -> Vec<u8> {
    let mut b = vec![0; ID_BYTES as usize];
    put_u32(&mut b, 0, id);
    b
}

/// One district's customers as loaded: `(last-name id, first-name key)` per
/// customer `1..=C` (index `c - 1`).
pub type Names = Vec<(u32, u32)>;

impl TpccSpec {
    /// A tiny TPC-C for simulation tests: 4 districts of 30 customers, 200 items.
    pub fn tiny(warehouses: u64) -> Self {
        TpccSpec {
            warehouses,
            districts_per_warehouse: 4,
            customers_per_district: 30,
            items: 200,
            new_orders_per_district_max: 400,
            payments_per_district_max: 400,
            ..TpccSpec::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.retain.is_some_and(|r| r < 20) {
            return Err("tpcc bounded history must retain at least 20 orders per district (StockLevel reads the last 20)".into());
        }
        if self.warehouses == 0 || self.warehouses >= 1 << 16 {
            return Err(format!(
                "tpcc warehouses must be 1..65535, got {}",
                self.warehouses
            ));
        }
        if self.districts_per_warehouse == 0 || self.districts_per_warehouse > 255 {
            return Err("tpcc districts per warehouse must be 1..=255".into());
        }
        if self.customers_per_district < 3 || self.items < MAX_OL_CNT + 1 {
            return Err(format!(
                "tpcc needs at least 3 customers per district and {} items",
                MAX_OL_CNT + 1
            ));
        }
        if self.customers_per_district
            + self
                .new_orders_per_district_max
                .max(self.payments_per_district_max)
            >= 1 << 31
            || self.items >= 1 << 31
        {
            return Err("tpcc ids must fit 31 bits".into());
        }
        Ok(())
    }

    pub fn districts(&self) -> u64 {
        self.warehouses * self.districts_per_warehouse
    }

    /// Distinct last names: TPC-C's 1 000, fewer at small scale so that
    /// several customers share a name (the by-name lookup then has to choose).
    pub fn last_names(&self) -> u64 {
        (self.customers_per_district / 3).clamp(1, 1_000)
    }

    /// Orders of the initial population that are still undelivered (TPC-C:
    /// the last 900 of 3 000); the first of them.
    pub fn first_new_order(&self) -> u64 {
        self.customers_per_district - self.customers_per_district * 3 / 10 + 1
    }

    /// Bounded history: the oldest initial order loaded. Delivering order
    /// `o` archives `o − R`, so older initial orders load as archived.
    pub fn first_loaded_order(&self) -> u64 {
        self.retain
            .map_or(1, |r| self.first_new_order().saturating_sub(r).max(1))
    }

    /// Bounded history: the oldest initial history row loaded (the first
    /// Payment, id C + 1, archives C + 1 − R); older ones load as archived.
    pub fn first_loaded_history(&self) -> u64 {
        self.retain.map_or(1, |r| {
            (self.customers_per_district + 1).saturating_sub(r).max(1)
        })
    }

    /// Initial `W_YTD` and `D_YTD`: the sum of the initial history amounts,
    /// so that consistency conditions 8 and 9 hold at any scale.
    pub fn initial_w_ytd(&self) -> i64 {
        self.districts_per_warehouse as i64 * self.initial_d_ytd()
    }

    pub fn initial_d_ytd(&self) -> i64 {
        self.customers_per_district as i64 * INITIAL_H_AMOUNT
    }

    /// Customer last names of district `(w, d)`: the first `last_names()`
    /// customers take each name once, the rest NURand(255) (TPC-C §4.3.3.1).
    pub fn names(&self, w: u64, d: u64) -> Names {
        let mut rng = Rng::new(self.load_seed ^ key(w, d, 0, 1));
        let l = self.last_names();
        (1..=self.customers_per_district)
            .map(|c| {
                let last = if c <= l {
                    c - 1
                } else {
                    nurand(&mut rng, 255, C_LAST, 0, l - 1)
                };
                (last as u32, rng.next_u64() as u32)
            })
            .collect()
    }

    /// The `customer_by_last` index of one district: last-name id → customer
    /// ids sorted by first name (then id).
    pub fn by_last(&self, names: &Names) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); self.last_names() as usize];
        for (i, (last, _)) in names.iter().enumerate() {
            out[*last as usize].push(i as u32 + 1);
        }
        for ids in &mut out {
            ids.sort_by_key(|c| (names[*c as usize - 1].1, *c));
        }
        out
    }

    /// Customers sharing the most common last name (sizes the index values).
    fn max_same_last(&self) -> u64 {
        let mut m = 1;
        for w in 1..=self.warehouses {
            for d in 1..=self.districts_per_warehouse {
                m = self
                    .by_last(&self.names(w, d))
                    .iter()
                    .map(|v| v.len() as u64)
                    .max()
                    .unwrap_or(1)
                    .max(m);
            }
        }
        m
    }

    pub fn by_last_bytes(&self) -> u32 {
        4 + 4 * self.max_same_last() as u32
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        let dists = self.districts();
        let c_n = self.customers_per_district;
        // Bounded history keeps R orders behind the delivered one plus a
        // backlog held near R/2 (twice R, for slack), and R payments.
        let (orders, new_orders, history) = match self.retain {
            Some(r) => (dists * (c_n + 2 * r), dists * (c_n + r), dists * (c_n + r)),
            None => {
                let orders = dists * (c_n + self.new_orders_per_district_max);
                (
                    orders,
                    orders,
                    dists * (c_n + self.payments_per_district_max),
                )
            }
        };
        let t = |id: TableId, value_size: u32, capacity: u64| TableSpec {
            id,
            name: TABLE_NAMES[id as usize].into(),
            value_size,
            capacity,
        };
        vec![
            t(WAREHOUSE, Warehouse::BYTES, self.warehouses),
            t(DISTRICT, District::BYTES, dists),
            t(
                CUSTOMER,
                Customer::BYTES,
                dists * self.customers_per_district,
            ),
            t(HISTORY, History::BYTES, history),
            t(NEW_ORDER, ID_BYTES, new_orders),
            t(ORDER, Order::BYTES, orders),
            t(ORDER_LINE, OrderLine::BYTES, orders * MAX_OL_CNT),
            t(ITEM, ITEM_BYTES, self.items),
            t(STOCK, Stock::BYTES, self.warehouses * self.items),
            t(
                CUSTOMER_BY_LAST,
                self.by_last_bytes(),
                dists * self.last_names(),
            ),
            t(NEW_ORDER_HEAD, ID_BYTES, dists),
            t(LAST_ORDER, ID_BYTES, dists * self.customers_per_district),
        ]
    }

    /// Populate every table (TPC-C §4.3.3.1, scaled).
    pub async fn load<F: Fabric>(&self, loader: &mut Loader<F>) -> Result<(), LoadError> {
        let mut rng = Rng::new(self.load_seed);
        for i in 1..=self.items {
            let mut v = vec![0; ITEM_BYTES as usize];
            put_u32(&mut v, 0, rng.range_inclusive(100, 10_000) as u32);
            put_u32(&mut v, 4, rng.range_inclusive(1, 10_000) as u32);
            loader.put(ITEM, key(0, 0, i, 0), &v).await?;
        }
        for w in 1..=self.warehouses {
            self.load_warehouse(loader, &mut rng, w).await?;
        }
        Ok(())
    }

    /// Warehouse `w`, its stock and its districts.
    async fn load_warehouse<F: Fabric>(
        &self,
        loader: &mut Loader<F>,
        rng: &mut Rng,
        w: u64,
    ) -> Result<(), LoadError> {
        let tax = rng.range_inclusive(0, 2_000) as u32;
        loader
            .put(
                WAREHOUSE,
                key(w, 0, 0, 0),
                &Warehouse {
                    ytd: self.initial_w_ytd(),
                    tax,
                }
                .encode(),
            )
            .await?;
        for i in 1..=self.items {
            let s = Stock {
                quantity: rng.range_inclusive(10, 100) as u32,
                ytd: 0,
                order_cnt: 0,
                remote_cnt: 0,
            };
            loader.put(STOCK, key(w, 0, i, 0), &s.encode()).await?;
        }
        for d in 1..=self.districts_per_warehouse {
            self.load_district(loader, rng, w, d).await?;
        }
        Ok(())
    }

    /// District `w`/`d`: its row, customers, history, customer_by_last
    /// index and initial orders.
    async fn load_district<F: Fabric>(
        &self,
        loader: &mut Loader<F>,
        rng: &mut Rng,
        w: u64,
        d: u64,
    ) -> Result<(), LoadError> {
        let next = self.customers_per_district as u32 + 1;
        let dist = District {
            ytd: self.initial_d_ytd(),
            tax: rng.range_inclusive(0, 2_000) as u32,
            next_o_id: next,
            next_h_id: next,
            archived_paid: (self.first_loaded_history() - 1) as i64 * INITIAL_H_AMOUNT,
        };
        loader
            .put(DISTRICT, key(w, d, 0, 0), &dist.encode())
            .await?;
        let names = self.names(w, d);
        self.load_customers(loader, rng, w, d, &names).await?;
        let by_last_bytes = self.by_last_bytes() as usize;
        for (l, ids) in self.by_last(&names).iter().enumerate() {
            let mut v = vec![0; by_last_bytes];
            put_u32(&mut v, 0, ids.len() as u32);
            for (j, c) in ids.iter().enumerate() {
                put_u32(&mut v, 4 + 4 * j, *c);
            }
            loader
                .put(CUSTOMER_BY_LAST, key(w, d, l as u64, 0), &v)
                .await?;
        }
        self.load_orders(loader, rng, w, d).await
    }

    /// The customers of district `w`/`d` named `names`, each with its
    /// initial payment in HISTORY unless archived.
    async fn load_customers<F: Fabric>(
        &self,
        loader: &mut Loader<F>,
        rng: &mut Rng,
        w: u64,
        d: u64,
        names: &[(u32, u32)],
    ) -> Result<(), LoadError> {
        for (i, (last, first)) in names.iter().enumerate() {
            let c = i as u64 + 1;
            let cust = Customer {
                balance: INITIAL_BALANCE,
                ytd_payment: INITIAL_YTD_PAYMENT,
                payment_cnt: 1,
                delivery_cnt: 0,
                discount: rng.range_inclusive(0, 5_000) as u32,
                bad_credit: rng.below(10) == 0,
                last: *last,
                first: *first,
                archived_delivered: 0,
                archived_paid: if c < self.first_loaded_history() {
                    INITIAL_H_AMOUNT
                } else {
                    0
                },
            };
            loader
                .put(CUSTOMER, key(w, d, c, 0), &cust.encode())
                .await?;
            let h = History {
                amount: INITIAL_H_AMOUNT,
                c_w: w as u32,
                c_d: d as u32,
                c_id: c as u32,
            };
            if c >= self.first_loaded_history() {
                loader.put(HISTORY, key(w, d, c, 0), &h.encode()).await?;
            }
        }
        Ok(())
    }

    /// Orders 1..=C of district `w`/`d`, placed by a random permutation of
    /// the customers, with their lines; the newest undelivered ones in
    /// NEW_ORDER.
    async fn load_orders<F: Fabric>(
        &self,
        loader: &mut Loader<F>,
        rng: &mut Rng,
        w: u64,
        d: u64,
    ) -> Result<(), LoadError> {
        let c_n = self.customers_per_district;
        let mut perm: Vec<u64> = (1..=c_n).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let first_new = self.first_new_order();
        for o in 1..=c_n {
            let c = perm[o as usize - 1];
            let delivered = o < first_new;
            let ol_cnt = rng.range_inclusive(5, MAX_OL_CNT);
            let ord = Order {
                c_id: c as u32,
                ol_cnt: ol_cnt as u32,
                all_local: true,
                carrier: if delivered {
                    rng.range_inclusive(1, 10) as u32
                } else {
                    0
                },
                entry_d: 1,
            };
            loader
                .put(LAST_ORDER, key(w, d, c, 0), &id_value(o as u32))
                .await?;
            if o < self.first_loaded_order() {
                // Archived already (bounded history): delivered, amount 0.
                continue;
            }
            loader.put(ORDER, key(w, d, o, 0), &ord.encode()).await?;
            for ol in 1..=ol_cnt {
                let line = OrderLine {
                    i_id: rng.range_inclusive(1, self.items) as u32,
                    supply_w: w as u32,
                    quantity: 5,
                    amount: if delivered {
                        0
                    } else {
                        rng.range_inclusive(1, 999_999) as i64
                    },
                    delivery_d: if delivered { 1 } else { 0 },
                };
                loader
                    .put(ORDER_LINE, key(w, d, o, ol), &line.encode())
                    .await?;
            }
            if !delivered {
                loader
                    .put(NEW_ORDER, key(w, d, o, 0), &id_value(o as u32))
                    .await?;
            }
        }
        loader
            .put(NEW_ORDER_HEAD, key(w, d, 0, 0), &id_value(first_new as u32))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::EffectLedger;
    use crate::testkit::run_inline;

    #[test]
    fn keys_pack_and_unpack() {
        let k = key(3, 10, 2_999, 15);
        assert_eq!(unkey(k), (3, 10, 2_999, 15));
        assert!(
            key(1, 1, 1, 1) < key(1, 1, 2, 0) && key(1, 1, u32::MAX as u64, 255) < key(1, 2, 0, 0)
        );
    }

    #[test]
    fn a_clean_run_passes_and_each_condition_can_fail() {
        let spec = TpccSpec::tiny(2);
        let clients: Vec<TpccClient> = (0..3)
            .map(|i| TpccClient::new(spec.clone(), i, i as u64))
            .collect();
        let ledgers: Vec<_> = clients.iter().map(|c| c.ledger.clone()).collect();
        let (live, committed) = run_inline(
            spec.tables(),
            async |l| spec.load(l).await,
            clients,
            150,
            async |c, coord| c.run_one(coord).await,
        );
        let mut ledger = EffectLedger::default();
        for l in &ledgers {
            ledger.merge(&l.borrow());
        }
        let by = |k: &str| ledger.committed_by_type.get(k).copied().unwrap_or(0);
        assert!(
            committed > 400 && MIX.iter().all(|(k, _)| by(k) > 0) && ledger.rolled_back > 0,
            "{committed}: {:?}, {} rolled back",
            ledger.committed_by_type,
            ledger.rolled_back
        );
        assert_eq!(verify(&spec, &live, &ledger), Vec::<String>::new());
        let fails = |what: &str, f: &dyn Fn(&mut crate::testkit::Live)| {
            let mut broken = live.clone();
            f(&mut broken);
            let v = verify(&spec, &broken, &ledger);
            assert!(
                v.iter().any(|m| m.contains(what)),
                "expected '{what}' in {v:?}"
            );
        };
        fails("condition 1", &|l| {
            let mut w = Warehouse::decode(&l[WAREHOUSE as usize][&key(1, 0, 0, 0)]);
            w.ytd += 1;
            l[WAREHOUSE as usize].insert(key(1, 0, 0, 0), w.encode());
        });
        fails("condition 2", &|l| {
            let mut d = District::decode(&l[DISTRICT as usize][&key(1, 1, 0, 0)]);
            d.next_o_id += 1;
            l[DISTRICT as usize].insert(key(1, 1, 0, 0), d.encode());
        });
        fails("condition 3", &|l| {
            let first = *l[NEW_ORDER as usize]
                .range(key(1, 2, 0, 0)..key(1, 3, 0, 0))
                .nth(1)
                .unwrap()
                .0;
            l[NEW_ORDER as usize].remove(&first);
        });
        fails("condition 4", &|l| {
            let k = *l[ORDER_LINE as usize]
                .range(key(2, 1, 0, 0)..)
                .next()
                .unwrap()
                .0;
            l[ORDER_LINE as usize].remove(&k);
        });
        fails("condition 12", &|l| {
            let k = key(1, 1, 1, 0);
            let mut c = Customer::decode(&l[CUSTOMER as usize][&k]);
            c.ytd_payment += 5;
            l[CUSTOMER as usize].insert(k, c.encode());
        });
    }
}

#[cfg(test)]
mod bounded {
    use super::*;
    use crate::ledger::EffectLedger;
    use crate::testkit::run_inline;

    /// Bounded history archives old orders and payments, keeps the backlog
    /// near R/2, and its check holds; a wrong archived sum fails it.
    #[test]
    fn bounded_history_archives_and_its_check_holds() {
        let spec = TpccSpec {
            retain: Some(20),
            ..TpccSpec::tiny(1)
        };
        let clients: Vec<TpccClient> = (0..3)
            .map(|i| TpccClient::new(spec.clone(), i, 7 + i as u64))
            .collect();
        let ledgers: Vec<_> = clients.iter().map(|c| c.ledger.clone()).collect();
        let (live, _) = run_inline(
            spec.tables(),
            async |l| spec.load(l).await,
            clients,
            400,
            async |c, coord| c.run_one(coord).await,
        );
        let mut ledger = EffectLedger::default();
        for l in &ledgers {
            ledger.merge(&l.borrow());
        }
        assert_eq!(verify(&spec, &live, &ledger), Vec::<String>::new());
        let placed = ledger
            .committed_by_type
            .get("NewOrder")
            .copied()
            .unwrap_or(0);
        let orders = live[ORDER as usize].len() as u64;
        let dists = spec.districts();
        // Without archiving every order would still be live.
        assert!(
            orders < dists * spec.customers_per_district + placed,
            "{orders} orders live after {placed} placed"
        );
        assert!(
            orders <= dists * (2 * 20 + 20),
            "{orders} orders live: more than R + backlog per district"
        );
        assert!(
            (live[HISTORY as usize].len() as u64) <= dists * 20,
            "history not archived"
        );
        let archived: i64 = live[CUSTOMER as usize]
            .values()
            .map(|b| Customer::decode(b).archived_delivered)
            .sum();
        assert!(archived > 0, "no delivered amount archived");
        let mut broken = live.clone();
        let k = *live[CUSTOMER as usize]
            .iter()
            .find(|(_, b)| Customer::decode(b).archived_paid != 0)
            .expect("an archived payment")
            .0;
        let mut c = Customer::decode(&broken[CUSTOMER as usize][&k]);
        c.archived_paid += 1;
        broken[CUSTOMER as usize].insert(k, c.encode());
        let v = verify(&spec, &broken, &ledger);
        assert!(v.iter().any(|m| m.contains("condition 10")), "{v:?}");
    }
}

#[cfg(test)]
mod default_scale {
    use super::*;
    use crate::ledger::EffectLedger;
    use crate::testkit::run_inline;

    /// TPC-C's full default scale loads, runs and passes its check (slow:
    /// `cargo test --release -p tandem-workloads -- --ignored`).
    #[test]
    #[ignore = "full default scale (seconds of loading); .ci/run runs it with -- --ignored"]
    fn default_scale_loads_runs_and_checks() {
        let spec = TpccSpec::default();
        let t = std::time::Instant::now();
        let clients: Vec<TpccClient> = (0..4)
            .map(|i| TpccClient::new(spec.clone(), i, i as u64))
            .collect();
        let ledgers: Vec<_> = clients.iter().map(|c| c.ledger.clone()).collect();
        let (live, committed) = run_inline(
            spec.tables(),
            async |l| spec.load(l).await,
            clients,
            250,
            async |c, coord| c.run_one(coord).await,
        );
        let mut ledger = EffectLedger::default();
        for l in &ledgers {
            ledger.merge(&l.borrow());
        }
        assert_eq!(verify(&spec, &live, &ledger), Vec::<String>::new());
        eprintln!(
            "default TPC-C: {committed} commits {:?}, {:?} with load and check",
            ledger.committed_by_type,
            t.elapsed()
        );
    }
}
