//! Slot reclamation on real threads: a bounded-history TPC-C on tables sized
//! for what it keeps (R orders and payments per district, a backlog near
//! R/2) runs for seconds, far past the rows those tables could hold if every
//! deleted row kept its slot. With reclamation its occupancy stays flat and
//! the check passes; without it, the same run fills its tables (inserts
//! abort "table full") — the test shows both, so it fails if reclamation
//! stops working.

use std::time::Duration;

use tandem_cluster::backend::Backend;
use tandem_cluster::runner::{self, RunConfig, RunResult};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};
use tandem_workloads::tpcc::{TpccSpec, ORDER_LINE};

fn run(reclaim: bool) -> RunResult {
    let spec = TpccSpec {
        retain: Some(60),
        ..TpccSpec::tiny(1)
    };
    let mut cfg = RunConfig::new(Mode::Pandora, WorkloadSpec::Tpcc(spec));
    cfg.duration = Duration::from_secs(3);
    cfg.coordinators = 4;
    cfg.heartbeat_timeout = Duration::from_millis(200);
    cfg.reclaim = reclaim;
    cfg.occupancy_every = Some(Duration::from_millis(500));
    cfg.validate().unwrap();
    let layout = Layout::new(&cfg.store_config()).unwrap();
    let region = layout.region_bytes.iter().copied().max().unwrap();
    runner::run(
        &cfg,
        &Backend::inline(cfg.memory_nodes as usize, region, cfg.seed),
    )
    .unwrap()
}

fn table_full(r: &RunResult) -> u64 {
    r.aborts_by_reason.get("table-full").copied().unwrap_or(0)
}

#[test]
fn bounded_tpcc_runs_in_its_tables_only_with_reclamation() {
    let on = run(true);
    let lines = |r: &RunResult, i: usize| {
        r.occupancy
            .get(i)
            .map_or(0, |o| o.tables[ORDER_LINE as usize].occupied)
    };
    let placed = on.committed_by_type.get("NewOrder").copied().unwrap_or(0);
    let slots = on.occupancy.len();
    eprintln!("with reclamation: {} commits, {placed} NewOrders, {} slots reclaimed, order lines {} → {} → {}", on.committed, on.slots_reclaimed, lines(&on, 0), lines(&on, slots / 2), lines(&on, slots - 1));
    assert_eq!(on.check_passed, Some(true), "{:?}", on.violations);
    assert!(on.errors.is_empty(), "{:?}", on.errors);
    assert_eq!(table_full(&on), 0, "tables filled despite reclamation");
    // Far more orders than the order table was sized for: 4 districts x (30 + 2 x 60).
    assert!(
        placed > 4 * 4 * (30 + 2 * 60),
        "only {placed} NewOrders: too short to show anything"
    );
    let (mid, end) = (lines(&on, slots / 2), lines(&on, slots - 1));
    assert!(
        end <= mid + mid / 10,
        "order-line occupancy still grows: {mid} → {end}"
    );

    let off = run(false);
    eprintln!(
        "without reclamation: {} commits, {} aborted 'table full'",
        off.committed,
        table_full(&off)
    );
    assert!(
        table_full(&off) > 0,
        "the same run without reclamation never filled its tables: the test shows nothing"
    );
}
