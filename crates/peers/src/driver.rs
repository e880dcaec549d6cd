//! Drive one peer system: `clients` threads, one connection each, one
//! transaction at a time, for a warm-up and then a measured interval. An
//! aborted transaction is counted and the client draws its next one, exactly
//! as a Tandem coordinator does in `tandem_cluster::runner`.
//!
//! Timing uses the wall clock: this is a harness, not protocol code.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::system::PeerSystem;
use crate::workload::{PeerLedger, PeerWorkload};

#[derive(Clone, Debug)]
pub struct DriveConfig {
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    /// Print progress to stderr this often.
    pub progress_every: Option<Duration>,
}

pub struct DriveResult {
    pub committed: u64,
    pub aborted: u64,
    pub elapsed_s: f64,
    /// Latency of committed transactions, microseconds.
    pub hist: Histogram<u64>,
    pub ledger: PeerLedger,
    pub errors: Vec<String>,
}

pub fn new_hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// Client `i`'s seed: distinct per client, fixed by the run's seed.
pub fn client_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((i as u64 + 1) << 40)
}

pub fn drive(
    sys: &dyn PeerSystem,
    w: &PeerWorkload,
    cfg: &DriveConfig,
) -> Result<DriveResult, String> {
    assert!(cfg.clients > 0, "at least one client");
    let mut conns = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        conns.push(sys.connect(i)?);
    }
    let stop = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let aborted = AtomicU64::new(0);
    let (stop, measuring, committed, aborted) = (&stop, &measuring, &committed, &aborted);
    std::thread::scope(|s| {
        let workers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                let mut client = w.client(client_seed(cfg.seed, i));
                s.spawn(move || {
                    let mut hist = new_hist();
                    let mut errors = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = Instant::now();
                        let r = client.run_one(conn.as_mut());
                        let m = measuring.load(Ordering::Relaxed);
                        match r {
                            Ok(true) if m => {
                                committed.fetch_add(1, Ordering::Relaxed);
                                let _ = hist.record((t0.elapsed().as_micros() as u64).max(1));
                            }
                            Ok(false) if m => {
                                aborted.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(_) => {}
                            Err(e) => {
                                // The connection is in an unknown state: this client stops.
                                errors.push(format!("client {i}: {e}"));
                                break;
                            }
                        }
                    }
                    (hist, client.ledger, errors)
                })
            })
            .collect();
        std::thread::sleep(cfg.warmup);
        measuring.store(true, Ordering::SeqCst);
        let start = Instant::now();
        let mut last = (start, 0u64);
        while start.elapsed() < cfg.duration {
            let left = cfg.duration.saturating_sub(start.elapsed());
            std::thread::sleep(cfg.progress_every.map_or(left, |p| p.min(left)));
            if cfg.progress_every.is_some() {
                let now = Instant::now();
                let (c, a) = (
                    committed.load(Ordering::Relaxed),
                    aborted.load(Ordering::Relaxed),
                );
                eprintln!(
                    "  [{:>5.1}s] {} {:>10} committed  {:>10.0} tx/s  abort rate {:>5.1}%",
                    start.elapsed().as_secs_f64(),
                    sys.name(),
                    c,
                    (c - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-9),
                    100.0 * a as f64 / (a + c).max(1) as f64
                );
                last = (now, c);
            }
        }
        measuring.store(false, Ordering::SeqCst);
        let elapsed_s = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::SeqCst);
        let mut hist = new_hist();
        let mut ledger = w.empty_ledger();
        let mut errors = Vec::new();
        for h in workers {
            let (hh, l, e) = h
                .join()
                .map_err(|_| format!("a {} client thread panicked", sys.name()))?;
            hist.add(&hh).expect("same histogram bounds");
            ledger.merge(&l);
            errors.extend(e);
        }
        Ok(DriveResult {
            committed: committed.load(Ordering::SeqCst),
            aborted: aborted.load(Ordering::SeqCst),
            elapsed_s,
            hist,
            ledger,
            errors,
        })
    })
}
