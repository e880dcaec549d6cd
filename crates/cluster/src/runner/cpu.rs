//! CPU per committed transaction, and its floor: the compute threads' CPU
//! time over the measured interval, against the CPU time of posting the same
//! transactions' verbs raw on the same fabric ([`tandem_fabric::trace`]).

use std::rc::Rc;
use std::thread::JoinHandle;

use serde::Serialize;
use tandem_fabric::trace::{replay, Trace};
use tandem_sim::cpu::{thread_ns, ThreadClock};

use super::*;

/// Verbs a compute thread records for the floor (during the warm-up).
pub(super) const FLOOR_TRACE_VERBS: usize = 2_000_000;
/// CPU time a floor replay runs for, at least (in whole passes over the trace).
const FLOOR_CPU_NS: u64 = 300_000_000;

/// The floor of one run: the recorded transactions' verbs, posted raw.
#[derive(Clone, Debug, Serialize)]
pub struct Floor {
    /// CPU ns of the replay per transaction the trace committed.
    pub cpu_ns_per_commit: f64,
    /// Verbs per committed transaction in the trace (the run's own
    /// `verbs_per_commit`, but over the recorded stretch, aborts included).
    pub verbs_per_commit: f64,
    pub cpu_ns_per_verb: f64,
    /// Transactions the traces committed, and passes replayed over them.
    pub commits: u64,
    pub passes: u32,
}

/// The compute threads' CPU clocks at the start of the measured interval.
#[derive(Default)]
pub(super) struct CpuWindow {
    start: Vec<(u16, u64)>,
    /// Threads that ended inside the interval: their CPU is unknown.
    lost: bool,
}

impl CpuWindow {
    pub(super) fn open<T>(threads: &[(u16, JoinHandle<T>)]) -> CpuWindow {
        let start = threads
            .iter()
            .map(|(cn, h)| (*cn, ThreadClock::of(h).map_or(0, |c| c.ns())))
            .collect();
        CpuWindow { start, lost: false }
    }

    /// CPU ns the compute threads spent since `open` (threads started
    /// since count whole); `None` if one ended meanwhile.
    pub(super) fn close<T>(&mut self, threads: &[(u16, JoinHandle<T>)]) -> Option<u64> {
        let mut total = 0u64;
        for (i, (_, h)) in threads.iter().enumerate() {
            let now = match ThreadClock::of(h) {
                Some(c) if !h.is_finished() => c.ns(),
                _ => {
                    self.lost = true;
                    continue;
                }
            };
            let before = self.start.get(i).map_or(0, |s| s.1);
            total += now.saturating_sub(before);
        }
        (!self.lost).then_some(total)
    }
}

/// Replay every trace on a thread of its own, all at once as the compute
/// threads ran, each joined under an id of its own, until each replay has
/// used [`FLOOR_CPU_NS`]; `None` if the traces hold no commit. Destroys the
/// store's content: call it last.
pub(super) fn floor(backend: &Backend, traces: Vec<Trace>) -> Result<Option<Floor>, String> {
    let commits: u64 = traces.iter().map(|t| t.commits).sum();
    let verbs: u64 = traces.iter().map(|t| t.verbs()).sum();
    if commits == 0 {
        return Ok(None);
    }
    let threads: Vec<_> = traces
        .into_iter()
        .enumerate()
        .filter(|(_, t)| t.commits > 0)
        .map(|(i, t)| {
            let backend = backend.clone();
            std::thread::Builder::new()
                .name(format!("floor-{i}"))
                .spawn(move || replay_thread(&backend, CHECKER_NODE - 1 - i as u16, t))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let (mut cpu, mut done, mut replayed, mut least) = (0u64, 0u64, 0u64, u32::MAX);
    for t in threads {
        let r = t
            .join()
            .map_err(|_| "a floor replay panicked".to_string())??;
        cpu += r.cpu_ns;
        done += r.commits * r.passes as u64;
        replayed += r.verbs * r.passes as u64;
        least = least.min(r.passes);
    }
    Ok(Some(Floor {
        cpu_ns_per_commit: cpu as f64 / done.max(1) as f64,
        verbs_per_commit: verbs as f64 / commits as f64,
        cpu_ns_per_verb: cpu as f64 / replayed.max(1) as f64,
        commits,
        passes: least,
    }))
}

struct Replayed {
    cpu_ns: u64,
    commits: u64,
    verbs: u64,
    passes: u32,
}

/// One trace's replay, joined as compute node `id`: a pass to warm up,
/// then as many as fill the CPU budget, measured.
fn replay_thread(backend: &Backend, id: u16, trace: Trace) -> Result<Replayed, String> {
    let (commits, verbs) = (trace.commits, trace.verbs());
    block_on_local(async {
        let fabric = backend
            .join(id)
            .await
            .map_err(|e| format!("the floor's replayer cannot join: {e}"))?;
        let (cpu_ns, passes) = match fabric {
            AnyFabric::Inline(f) => replay_timed(&f, trace).await,
            AnyFabric::Tcp(f) => replay_timed(&f, trace).await,
        };
        Ok(Replayed {
            cpu_ns,
            commits,
            verbs,
            passes,
        })
    })
}

async fn replay_timed<F: Fabric>(fabric: &F, trace: Trace) -> (u64, u32) {
    let trace = Rc::new(trace);
    let pass = |n: u32| {
        let trace = trace.clone();
        async move {
            let t0 = thread_ns();
            replay(fabric, trace, n).await;
            thread_ns() - t0
        }
    };
    let first = pass(1).await.max(1);
    let passes = (FLOOR_CPU_NS / first).clamp(1, 1_000) as u32;
    (pass(passes).await, passes)
}
