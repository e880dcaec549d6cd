//! Tandem's side of `tandem compare --system ddp`: a five-node cluster of
//! processes (`crate::procs`) driven by `crate::load`
//! sessions over TCP. The measured figures come from the sessions'
//! history: operations completed inside the measured interval, and their
//! latencies.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::load::Load;
use hdrhistogram::Histogram;
use tandem_check::{HistOp, OpKind};
use tandem_ddp::ycsb_session::SessionPlan;
use tandem_ycsb::Ycsb;

pub use crate::procs::{DdpCluster, NODES};

use tandem_peers::driver::new_hist;
use tandem_peers::kv_driver::Counts;

/// Preloading stops after this long even if not every record was written.
const PRELOAD_LIMIT: Duration = Duration::from_secs(10);

/// One measured run of a cluster.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub clients: u64,
    pub records: u64,
    /// The measured mix and key choice (the preload writes uniformly).
    pub workload: Ycsb,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    pub progress: bool,
}

pub struct TandemRun {
    pub counts: Counts,
    pub elapsed_s: f64,
    pub hist: Histogram<u64>,
    /// Operations whose outcome stayed unknown (no reply) or that failed.
    pub failed: u64,
    /// The whole history (preload included), for the linearizability check.
    pub history: Vec<HistOp>,
}

/// Write records until five writes per record were made (uniform keys:
/// about 99 % of them written), as the peers are loaded before they are
/// measured; the rest read as absent and are counted. Sessions `clients..2*clients`:
/// write values carry the session id, so they stay unique in the history.
fn preload(c: &DdpCluster, clients: u64, records: u64, seed: u64, epoch: Instant) -> Vec<HistOp> {
    let load = Load::start(
        &c.load_config(
            clients,
            clients,
            SessionPlan::uniform(records, 0.0),
            seed ^ 0x5eed,
        ),
        epoch,
    );
    let until = Instant::now() + PRELOAD_LIMIT;
    while load.completed.load(Ordering::Relaxed) < 5 * records && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    load.stop()
}

/// Preload, then `clients` sessions for a warm-up and a measured interval.
pub fn run(c: &DdpCluster, spec: &RunSpec) -> TandemRun {
    let RunSpec {
        clients,
        records,
        duration,
        progress,
        ..
    } = spec.clone();
    let epoch = Instant::now();
    let mut history = preload(c, clients, records, spec.seed, epoch);
    let load = Load::start(
        &c.load_config(
            clients,
            0,
            SessionPlan {
                ycsb: spec.workload.clone(),
                scope_writes: None,
                tx_requests: None,
            },
            spec.seed,
        ),
        epoch,
    );
    std::thread::sleep(spec.warmup);
    let t0 = epoch.elapsed();
    let mut last = (t0, load.completed.load(Ordering::Relaxed));
    while epoch.elapsed() - t0 < duration {
        std::thread::sleep((duration - (epoch.elapsed() - t0)).min(Duration::from_secs(1)));
        let (now, d) = (epoch.elapsed(), load.completed.load(Ordering::Relaxed));
        if progress {
            let rate = (d - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-9);
            eprintln!(
                "  [{:>4.1}s] tandem {:<17} {:>9} ops  {rate:>9.0} ops/s",
                (now - t0).as_secs_f64(),
                c.model,
                d
            );
        }
        last = (now, d);
    }
    let t1 = epoch.elapsed();
    let ops = load.stop();
    let mut run = tally(&ops, t0.as_nanos() as u64, t1.as_nanos() as u64);
    run.elapsed_s = (t1 - t0).as_secs_f64();
    history.extend(ops);
    run.history = history;
    run
}

/// Counts and latencies of the operations completed within `[t0, t1]` ns.
fn tally(ops: &[HistOp], t0: u64, t1: u64) -> TandemRun {
    let mut run = TandemRun {
        counts: Counts::default(),
        elapsed_s: 0.0,
        hist: new_hist(),
        failed: 0,
        history: Vec::new(),
    };
    for o in ops {
        let Some(done) = o.complete_ns else {
            run.failed += u64::from(o.invoke_ns <= t1);
            continue;
        };
        if done < t0 || done > t1 {
            continue;
        }
        if !o.ok {
            run.failed += 1;
            continue;
        }
        let _ = run.hist.record(((done - o.invoke_ns) / 1000).max(1));
        match o.kind {
            OpKind::Read { value, .. } => {
                (run.counts.reads, run.counts.missing) = (
                    run.counts.reads + 1,
                    run.counts.missing + u64::from(value.is_none()),
                )
            }
            _ => run.counts.writes += 1,
        }
    }
    run
}
