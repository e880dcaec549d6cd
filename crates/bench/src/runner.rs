//! One benchmark run: load a workload, drive it from several compute nodes
//! (one thread each, many coordinator tasks per thread), measure, and check
//! the store afterwards.
//!
//! Timing uses the wall clock here, in the harness, never in protocol code.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tandem_dkvs::check::snapshot;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::{BugSwitches, ComputeNode, CoordinatorStats, FailedIds, Layout, Mode, StoreConfig};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

use crate::cluster::{AnyFabric, Backend};
use crate::workload::{Outcome, WorkloadSpec};

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub mode: Mode,
    pub bugs: BugSwitches,
    pub workload: WorkloadSpec,
    pub memory_nodes: u16,
    pub replicas: u16,
    pub compute_nodes: u16,
    /// Coordinators per compute node.
    pub coordinators: u16,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    /// Print live progress to stderr every `progress_every`.
    pub progress: bool,
    pub progress_every: Duration,
    /// Inspect the whole store afterwards (replicas, locks, workload check).
    pub check: bool,
}

impl RunConfig {
    pub fn new(mode: Mode, workload: WorkloadSpec) -> Self {
        RunConfig {
            mode,
            bugs: BugSwitches::default(),
            workload,
            memory_nodes: 3,
            replicas: 2,
            compute_nodes: 2,
            coordinators: 16,
            warmup: Duration::from_millis(300),
            duration: Duration::from_secs(3),
            seed: 1,
            progress: false,
            progress_every: Duration::from_secs(1),
            check: true,
        }
    }

    pub fn store_config(&self) -> StoreConfig {
        let mut s = StoreConfig::new(self.mode, self.memory_nodes, self.replicas, self.workload.tables());
        s.partitions_per_table = 64;
        let coordinators = self.compute_nodes as u32 * self.coordinators as u32;
        s.log_slots = (coordinators + 1).max(64);
        s.bugs = self.bugs;
        s
    }

    pub fn validate(&self) -> Result<(), String> {
        self.store_config().validate()?;
        if self.compute_nodes == 0 || self.coordinators == 0 {
            return Err("need at least one compute node and one coordinator".into());
        }
        if self.compute_nodes as u32 * self.coordinators as u32 > 60_000 {
            return Err("at most 60000 coordinators in total (16-bit coordinator ids)".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub mean: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub store: String,
    pub workload: String,
    pub fabric: String,
    pub compute_nodes: u16,
    pub coordinators_per_node: u16,
    pub committed: u64,
    pub aborted: u64,
    pub abort_rate: f64,
    pub duration_s: f64,
    pub throughput_tps: f64,
    pub latency_us: Latency,
    pub verbs_per_commit: f64,
    pub aborts_by_reason: BTreeMap<String, u64>,
    pub errors: Vec<String>,
    pub check_passed: Option<bool>,
    pub violations: Vec<String>,
}

struct Control {
    stop: AtomicBool,
    measuring: AtomicBool,
    committed: AtomicU64,
    aborted: AtomicU64,
}

struct ThreadResult {
    hist: Histogram<u64>,
    stats: CoordinatorStats,
    outcome: Outcome,
    errors: Vec<String>,
}

/// Run a future on a fresh single-threaded runtime with a `LocalSet`.
pub fn block_on_local<T>(fut: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, fut)
}

/// Load the workload's dataset through compute node 0.
pub fn load(backend: &Backend, layout: &Arc<Layout>, spec: &WorkloadSpec) -> Result<u64, String> {
    block_on_local(async {
        let fabric = backend.join(0).await.map_err(|e| format!("loader cannot join: {e}"))?;
        match fabric {
            AnyFabric::Inline(f) => load_with(&f, layout, spec).await,
            AnyFabric::Tcp(f) => load_with(&f, layout, spec).await,
        }
    })
}

async fn load_with<F: Fabric>(f: &F, layout: &Arc<Layout>, spec: &WorkloadSpec) -> Result<u64, String> {
    let mut loader = Loader::new(f, layout.clone());
    spec.load(&mut loader).await.map_err(|e| e.to_string())?;
    loader.finish().await.map_err(|e| e.to_string())
}

/// Inspect the store: replica agreement, stray locks, and the workload check.
pub fn check(backend: &Backend, layout: &Arc<Layout>, spec: &WorkloadSpec, outcome: &Outcome) -> Result<Vec<String>, String> {
    block_on_local(async {
        let fabric = backend.join(u16::MAX).await.map_err(|e| format!("checker cannot join: {e}"))?;
        match fabric {
            AnyFabric::Inline(f) => check_with(&f, layout, spec, outcome).await,
            AnyFabric::Tcp(f) => check_with(&f, layout, spec, outcome).await,
        }
    })
}

async fn check_with<F: Fabric>(f: &F, layout: &Layout, spec: &WorkloadSpec, outcome: &Outcome) -> Result<Vec<String>, String> {
    let mut v = Vec::new();
    let mut live = Vec::new();
    for t in 0..layout.tables.len() as u32 {
        let snap = snapshot(f, layout, t).await.map_err(|e| format!("inspection failed: {e}"))?;
        v.extend(snap.replica_mismatches());
        v.extend(snap.held_locks().into_iter().map(|(k, w)| format!("table {t} key {k}: lock {:#x} still held", w.0)));
        live.push(snap.live());
    }
    v.extend(spec.verify(&live, outcome));
    Ok(v)
}

async fn drive<F: Fabric>(
    fabric: F,
    store: StoreConfig,
    layout: Arc<Layout>,
    ctl: Arc<Control>,
    spec: WorkloadSpec,
    cn: u16,
    coordinators: u16,
    seed: u64,
) -> ThreadResult {
    let node = ComputeNode::new(fabric, &store, layout, FailedIds::new());
    let mut seeds = Rng::new(seed ^ ((cn as u64) << 40));
    let errors: Rc<RefCell<Vec<String>>> = Rc::default();
    let mut handles = Vec::new();
    for k in 0..coordinators {
        let id = 1 + cn * coordinators + k;
        let mut coord = node.coordinator(id);
        let mut client = spec.client(id as u32, seeds.next_u64());
        let (ctl, errors) = (ctl.clone(), errors.clone());
        handles.push(tokio::task::spawn_local(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
            while !ctl.stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r = client.run_one(&mut coord).await;
                let measuring = ctl.measuring.load(Ordering::Relaxed);
                match r {
                    Ok(true) if measuring => {
                        ctl.committed.fetch_add(1, Ordering::Relaxed);
                        let _ = hist.record((t0.elapsed().as_micros() as u64).max(1));
                    }
                    Ok(false) if measuring => {
                        ctl.aborted.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        errors.borrow_mut().push(format!("coordinator {id}: {e}"));
                        break;
                    }
                }
                // Let the other coordinators of this thread run (the inline
                // fabric completes verbs at once, so nothing else would yield).
                tokio::task::yield_now().await;
            }
            (hist, coord.stats.clone(), client.outcome())
        }));
    }
    let mut out = ThreadResult {
        hist: Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        stats: CoordinatorStats::default(),
        outcome: Outcome::empty(&spec),
        errors: Vec::new(),
    };
    for h in handles {
        let (hist, stats, outcome) = h.await.expect("coordinator task panicked");
        out.hist.add(&hist).expect("same histogram bounds");
        out.stats.merge(&stats);
        out.outcome.merge(&outcome);
    }
    out.errors = errors.borrow().clone();
    out
}

/// Load, run and (optionally) check. The backend must be fresh (empty).
pub fn run(cfg: &RunConfig, backend: &Backend) -> Result<RunResult, String> {
    cfg.validate()?;
    let store = cfg.store_config();
    let layout = Arc::new(Layout::new(&store)?);
    load(backend, &layout, &cfg.workload)?;

    let ctl = Arc::new(Control {
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        committed: AtomicU64::new(0),
        aborted: AtomicU64::new(0),
    });
    let mut threads = Vec::new();
    for cn in 0..cfg.compute_nodes {
        let (backend, store, layout, ctl, spec) = (backend.clone(), store.clone(), layout.clone(), ctl.clone(), cfg.workload.clone());
        let (coords, seed) = (cfg.coordinators, cfg.seed);
        threads.push(
            std::thread::Builder::new()
                .name(format!("compute-{}", cn + 1))
                .spawn(move || {
                    block_on_local(async move {
                        match backend.join(cn + 1).await {
                            Ok(AnyFabric::Inline(f)) => Ok(drive(f, store, layout, ctl, spec, cn, coords, seed).await),
                            Ok(AnyFabric::Tcp(f)) => Ok(drive(f, store, layout, ctl, spec, cn, coords, seed).await),
                            Err(e) => Err(format!("compute node {} cannot join: {e}", cn + 1)),
                        }
                    })
                })
                .map_err(|e| e.to_string())?,
        );
    }

    std::thread::sleep(cfg.warmup);
    ctl.measuring.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let mut last = (start, 0u64);
    while start.elapsed() < cfg.duration {
        let left = cfg.duration.saturating_sub(start.elapsed());
        std::thread::sleep(left.min(if cfg.progress { cfg.progress_every } else { left }));
        if cfg.progress {
            let now = Instant::now();
            let c = ctl.committed.load(Ordering::Relaxed);
            let a = ctl.aborted.load(Ordering::Relaxed);
            let rate = (c - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            eprintln!(
                "  [{:>5.1}s] {} {:>10} committed  {:>10.0} tx/s  abort rate {:>5.1}%",
                start.elapsed().as_secs_f64(),
                cfg.mode,
                c,
                rate,
                100.0 * a as f64 / (a + c).max(1) as f64
            );
            last = (now, c);
        }
    }
    ctl.measuring.store(false, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    ctl.stop.store(true, Ordering::SeqCst);

    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut stats = CoordinatorStats::default();
    let mut outcome = Outcome::empty(&cfg.workload);
    let mut errors = Vec::new();
    for t in threads {
        let r = t.join().map_err(|_| "a compute thread panicked".to_string())??;
        hist.add(&r.hist).expect("same bounds");
        stats.merge(&r.stats);
        outcome.merge(&r.outcome);
        errors.extend(r.errors);
    }
    let committed = ctl.committed.load(Ordering::SeqCst);
    let aborted = ctl.aborted.load(Ordering::SeqCst);
    let (check_passed, violations) = if cfg.check {
        let v = check(backend, &layout, &cfg.workload, &outcome)?;
        (Some(v.is_empty()), v)
    } else {
        (None, Vec::new())
    };
    Ok(RunResult {
        store: cfg.mode.to_string(),
        workload: cfg.workload.name().to_string(),
        fabric: backend.name().to_string(),
        compute_nodes: cfg.compute_nodes,
        coordinators_per_node: cfg.coordinators,
        committed,
        aborted,
        abort_rate: aborted as f64 / (committed + aborted).max(1) as f64,
        duration_s: elapsed,
        throughput_tps: committed as f64 / elapsed,
        latency_us: Latency {
            p50: hist.value_at_quantile(0.5),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            mean: hist.mean(),
        },
        verbs_per_commit: stats.verbs as f64 / stats.committed.max(1) as f64,
        aborts_by_reason: stats.aborts_by_reason.iter().map(|(r, n)| (r.name().to_string(), *n)).collect(),
        errors,
        check_passed,
        violations,
    })
}
