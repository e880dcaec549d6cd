//! One DART run against PostgreSQL (docs/DESIGN.md §5): a fresh table, one
//! thread and connection per client running the same litmus scripts as on
//! Tandem, real-time from one monotonic clock, then a final assert of every
//! instance and the history checker. No crash injection (the server is a
//! black box we do not kill); the control is the isolation level.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::board::Board;
use crate::client::{Client, ClientSpec};
use crate::pg_store::{connect, Isolation, PgStore};
use crate::recorder::ClientLog;
use crate::report::RunReport;
use crate::suite::Suite;

#[derive(Clone, Debug)]
pub struct PgRunConfig {
    pub url: String,
    pub isolation: Isolation,
    pub suite: Arc<Suite>,
    pub seed: u64,
    pub clients: u32,
    pub txs_per_client: u64,
    pub assert_chance: f64,
    pub check_history: bool,
}

static TABLES: AtomicU64 = AtomicU64::new(0);

pub fn run(cfg: &PgRunConfig) -> Result<RunReport, String> {
    let mut admin = connect(&cfg.url)?;
    let table = format!(
        "dart_litmus_{}_{}",
        std::process::id(),
        TABLES.fetch_add(1, Ordering::Relaxed)
    );
    let rows: Vec<_> = cfg.suite.tests.iter().flat_map(|t| t.initial()).collect();
    PgStore::create_table(&mut admin, &table, &rows)?;
    let board = Board::default();
    let start = Instant::now();
    let mut seeds = tandem_sim::Rng::new(cfg.seed ^ 0x9E5);
    let handles: Vec<_> = (0..cfg.clients)
        .map(|id| {
            let (cfg, table, board, seed) =
                (cfg.clone(), table.clone(), board.clone(), seeds.next_u64());
            std::thread::spawn(move || -> Result<ClientLog, String> {
                let mut store = PgStore::new(connect(&cfg.url)?, cfg.isolation, &table);
                let spec = ClientSpec {
                    id,
                    seed,
                    assert_chance: cfg.assert_chance,
                    record: cfg.check_history,
                };
                let clock: Rc<dyn Fn() -> u64> = Rc::new(move || start.elapsed().as_nanos() as u64);
                let mut client = Client::new(spec, cfg.suite.clone(), board, clock);
                let log = client.log();
                futures::executor::block_on(client.run(&mut store, cfg.txs_per_client));
                drop(client);
                Ok(Rc::try_unwrap(log)
                    .map(RefCell::into_inner)
                    .unwrap_or_default())
            })
        })
        .collect();
    let mut logs = Vec::new();
    for h in handles {
        logs.push(Rc::new(RefCell::new(
            h.join()
                .map_err(|_| "a client thread panicked".to_string())??,
        )));
    }
    // Every instance once more, in a quiet database.
    let mut store = PgStore::new(connect(&cfg.url)?, cfg.isolation, &table);
    let spec = ClientSpec {
        id: cfg.clients,
        seed: cfg.seed,
        assert_chance: 1.0,
        record: cfg.check_history,
    };
    let clock: Rc<dyn Fn() -> u64> = Rc::new(move || start.elapsed().as_nanos() as u64);
    let mut client = Client::new(spec, cfg.suite.clone(), board, clock);
    logs.push(client.log());
    let mut report = RunReport::default();
    if let Err(e) = futures::executor::block_on(client.final_check(&mut store, 20)) {
        report.violations.push(("final-check".into(), e));
    }
    drop(store);
    PgStore::drop_table(&mut admin, &table);
    report.absorb(&logs);
    if cfg.check_history {
        report.check_history(&cfg.suite);
    }
    Ok(report)
}
