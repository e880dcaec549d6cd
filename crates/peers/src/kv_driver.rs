//! Drive a key-value peer with YCSB: `clients` threads, one connection
//! each, one operation at a time (closed loop), a warm-up and then a
//! measured interval — the shape of `tandem_ddp_lab::load` sessions.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tandem_sim::Rng;
use tandem_ycsb::{Ycsb, YcsbOp};

use crate::driver::{client_seed, new_hist};
use crate::kv::{key, value, KvConn, KvPeer};

#[derive(Clone, Debug)]
pub struct KvDriveConfig {
    pub clients: usize,
    pub value_size: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    pub progress: bool,
}

/// Counts of the measured interval.
#[derive(Default)]
pub struct Counts {
    pub reads: u64,
    pub writes: u64,
    /// Reads that found no value.
    pub missing: u64,
    /// Writes acknowledged without the peer's promise (a `WAIT` that timed out).
    pub unconfirmed: u64,
}

pub struct KvRun {
    pub counts: Counts,
    pub elapsed_s: f64,
    /// Microseconds per completed operation.
    pub hist: Histogram<u64>,
    pub errors: Vec<String>,
}

struct Shared {
    stop: AtomicBool,
    measuring: AtomicBool,
    done: AtomicU64,
}

fn client(
    conn: &mut dyn KvConn,
    w: &Ycsb,
    seed: u64,
    size: usize,
    sh: &Shared,
) -> (Counts, Histogram<u64>, Option<String>) {
    let mut rng = Rng::new(seed);
    let (mut c, mut hist) = (Counts::default(), new_hist());
    let mut n = seed << 20;
    while !sh.stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let r = match w.next(&mut rng) {
            YcsbOp::Read(k) => conn.read(&key(k)).map(|found| (true, found)),
            YcsbOp::Update(k) => {
                n += 1;
                conn.update(&key(k), &value(n, size)).map(|ok| (false, ok))
            }
        };
        let (read, ok) = match r {
            Ok(x) => x,
            Err(e) => return (c, hist, Some(e)),
        };
        if sh.measuring.load(Ordering::Relaxed) {
            let _ = hist.record((t0.elapsed().as_micros() as u64).max(1));
            sh.done.fetch_add(1, Ordering::Relaxed);
            match (read, ok) {
                (true, found) => {
                    (c.reads, c.missing) = (c.reads + 1, c.missing + u64::from(!found))
                }
                (false, confirmed) => {
                    (c.writes, c.unconfirmed) =
                        (c.writes + 1, c.unconfirmed + u64::from(!confirmed))
                }
            }
        }
    }
    (c, hist, None)
}

/// Sleep through the measured interval, printing ops/s every second.
fn measure(name: &str, cfg: &KvDriveConfig, sh: &Shared) -> f64 {
    sh.measuring.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let mut last = (start, 0u64);
    while start.elapsed() < cfg.duration {
        let left = cfg.duration.saturating_sub(start.elapsed());
        std::thread::sleep(left.min(Duration::from_secs(1)));
        if cfg.progress {
            let (now, d) = (Instant::now(), sh.done.load(Ordering::Relaxed));
            let rate = (d - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-9);
            eprintln!(
                "  [{:>4.1}s] {name:<24} {d:>9} ops  {rate:>9.0} ops/s",
                start.elapsed().as_secs_f64()
            );
            last = (now, d);
        }
    }
    sh.measuring.store(false, Ordering::SeqCst);
    start.elapsed().as_secs_f64()
}

pub fn drive(peer: &dyn KvPeer, w: &Ycsb, cfg: &KvDriveConfig) -> Result<KvRun, String> {
    let conns = (0..cfg.clients)
        .map(|i| peer.connect(i))
        .collect::<Result<Vec<_>, _>>()?;
    let sh = Shared {
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        done: AtomicU64::new(0),
    };
    let sh = &sh;
    std::thread::scope(|s| {
        let workers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                s.spawn(move || {
                    client(
                        conn.as_mut(),
                        w,
                        client_seed(cfg.seed, i),
                        cfg.value_size,
                        sh,
                    )
                })
            })
            .collect();
        std::thread::sleep(cfg.warmup);
        let elapsed_s = measure(peer.id(), cfg, sh);
        sh.stop.store(true, Ordering::SeqCst);
        let mut run = KvRun {
            counts: Counts::default(),
            elapsed_s,
            hist: new_hist(),
            errors: Vec::new(),
        };
        for (i, h) in workers.into_iter().enumerate() {
            let (c, hist, err) = h
                .join()
                .map_err(|_| format!("a {} client thread panicked", peer.id()))?;
            run.hist.add(&hist).expect("same histogram bounds");
            let t = &mut run.counts;
            (t.reads, t.writes, t.missing, t.unconfirmed) = (
                t.reads + c.reads,
                t.writes + c.writes,
                t.missing + c.missing,
                t.unconfirmed + c.unconfirmed,
            );
            run.errors.extend(err.map(|e| format!("client {i}: {e}")));
        }
        Ok(run)
    })
}
