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
pub(super) const FLOOR_TRACE_VERBS: usize = 200_000;
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

/// Replay every trace (one after another, on this thread, joined as the
/// checker) until the replay has used [`FLOOR_CPU_NS`]; `None` if the
/// traces hold no commit. Destroys the store's content: call it last.
pub(super) fn floor(backend: &Backend, traces: Vec<Trace>) -> Result<Option<Floor>, String> {
    let commits: u64 = traces.iter().map(|t| t.commits).sum();
    let verbs: u64 = traces.iter().map(|t| t.verbs()).sum();
    if commits == 0 {
        return Ok(None);
    }
    block_on_local(async {
        let fabric = backend
            .join(CHECKER_NODE)
            .await
            .map_err(|e| format!("the floor's replayer cannot join: {e}"))?;
        let (cpu, passes) = match fabric {
            AnyFabric::Inline(f) => replay_all(&f, traces).await,
            AnyFabric::Tcp(f) => replay_all(&f, traces).await,
        };
        let per = (commits * passes as u64) as f64;
        Ok(Some(Floor {
            cpu_ns_per_commit: cpu as f64 / per,
            verbs_per_commit: verbs as f64 / commits as f64,
            cpu_ns_per_verb: cpu as f64 / (verbs * passes as u64).max(1) as f64,
            commits,
            passes,
        }))
    })
}

/// One pass over every trace, then as many more as fill the CPU budget;
/// the CPU ns of the measured passes (all but the first) and their count.
async fn replay_all<F: Fabric>(fabric: &F, traces: Vec<Trace>) -> (u64, u32) {
    let traces: Vec<Rc<Trace>> = traces.into_iter().map(Rc::new).collect();
    let pass = |n: u32| {
        let traces = traces.clone();
        async move {
            let t0 = thread_ns();
            for t in &traces {
                replay(fabric, t.clone(), n).await;
            }
            thread_ns() - t0
        }
    };
    let first = pass(1).await.max(1);
    let passes = (FLOOR_CPU_NS / first).clamp(1, 1_000) as u32;
    (pass(passes).await, passes)
}
