//! The raw verb ceiling of a fabric on this machine: `threads` compute threads,
//! each keeping `depth` single-verb reads in flight, for `duration`. A
//! transactional run is judged against this number at the same depth.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tandem_fabric::{Fabric, QueuePair, Verb};
use tandem_sim::Rng;

use tandem_cluster::backend::{AnyFabric, Backend};
use tandem_cluster::runner::{block_on_local, yield_to_siblings};

#[derive(Clone, Debug, Serialize)]
pub struct FabricBenchResult {
    pub fabric: String,
    pub depth: u32,
    pub threads: u32,
    pub read_bytes: u32,
    pub verbs: u64,
    pub duration_s: f64,
    pub verbs_per_s: f64,
}

async fn pump<F: Fabric>(
    f: F,
    depth: u32,
    read_bytes: u32,
    region_bytes: u64,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> Result<u64, String> {
    let count = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    let mems = f.memory_nodes() as u64;
    for d in 0..depth {
        let (f, stop, count) = (f.clone(), stop.clone(), count.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let mut rng = Rng::new(seed ^ d as u64);
            let qps: Vec<F::Qp> = (0..mems).map(|m| f.queue_pair(m as u16)).collect();
            let slots = (region_bytes / read_bytes as u64).max(1);
            while !stop.load(Ordering::Relaxed) {
                let qp = &qps[rng.below(mems) as usize];
                let addr = rng.below(slots) * read_bytes as u64;
                let r = qp
                    .post(tandem_fabric::batch![Verb::read(addr, read_bytes)])
                    .await;
                if let Some(Err(e)) = r.into_iter().next() {
                    return Err(format!("verb failed: {e}"));
                }
                count.set(count.get() + 1);
                yield_to_siblings().await;
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(count.get())
}

/// Measure. `region_bytes` bounds the addresses read (the smallest region).
pub fn run(
    backend: &Backend,
    threads: u32,
    depth: u32,
    read_bytes: u32,
    region_bytes: u64,
    duration: Duration,
) -> Result<FabricBenchResult, String> {
    if depth == 0 || threads == 0 || read_bytes == 0 || read_bytes as u64 > region_bytes {
        return Err("depth, threads and read size must be positive and fit the region".into());
    }
    let shape = Shape {
        fabric: backend.name().into(),
        threads,
        depth,
        read_bytes,
    };
    measure(shape, duration, |t, stop| {
        let backend = backend.clone();
        std::thread::spawn(move || {
            block_on_local(async move {
                match backend
                    .join(1 + t as u16)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    AnyFabric::Inline(f) => {
                        pump(f, depth, read_bytes, region_bytes, stop, t as u64).await
                    }
                    AnyFabric::Tcp(f) => {
                        pump(f, depth, read_bytes, region_bytes, stop, t as u64).await
                    }
                }
            })
        })
    })
}

/// What a fabric-bench run measures, beside its result.
pub(crate) struct Shape {
    pub fabric: String,
    pub threads: u32,
    pub depth: u32,
    pub read_bytes: u32,
}

/// Start `shape.threads` threads (`spawn(t, stop)`, each returning the verbs
/// it completed), let them run for `duration`, stop them and count.
pub(crate) fn measure(
    shape: Shape,
    duration: Duration,
    spawn: impl Fn(u32, Arc<AtomicBool>) -> std::thread::JoinHandle<Result<u64, String>>,
) -> Result<FabricBenchResult, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..shape.threads).map(|t| spawn(t, stop.clone())).collect();
    let start = Instant::now();
    std::thread::sleep(duration);
    stop.store(true, Ordering::SeqCst);
    let mut verbs = 0;
    for h in handles {
        verbs += h
            .join()
            .map_err(|_| format!("{} bench thread panicked", shape.fabric))??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(FabricBenchResult {
        fabric: shape.fabric,
        depth: shape.depth,
        threads: shape.threads,
        read_bytes: shape.read_bytes,
        verbs,
        duration_s: elapsed,
        verbs_per_s: verbs as f64 / elapsed,
    })
}
