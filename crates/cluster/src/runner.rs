//! One benchmark run: load a workload, drive it from several compute nodes
//! (one thread each, many coordinator tasks per thread), measure, and check
//! the store afterwards.
//!
//! The embedded membership service (`tandem_membership::Membership`, driven
//! by a thread of its own) hands out coordinator ids, takes heartbeats, and on
//! a timeout revokes the node, runs log recovery and publishes `failed_ids`.
//! A run may crash one compute node mid-way: its thread drops every
//! coordinator task at its current await point and stops heartbeating.
//!
//! Timing uses the wall clock here, in the harness, never in protocol code.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tandem_dkvs::check::snapshot;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryCoordinator};
use tandem_dkvs::{
    BugSwitches, ComputeNode, Coordinator, CoordinatorStats, FailedIds, Layout, MemoryView, Mode,
    OnStray, StoreConfig, TxError,
};
use tandem_fabric::trace::{Recorder, Trace, TraceHandle};
use tandem_fabric::Fabric;
use tandem_membership::{Command, Event, Membership, MembershipConfig, NodeStatus};
use tandem_sim::Rng;

use crate::backend::{AnyFabric, Backend};
use crate::workload::{Client, Outcome, OutcomeHandle, WorkloadSpec};

mod cpu;
pub mod occupancy;
mod steps;

pub use cpu::Floor;
pub use steps::run;

/// Node id under which the membership service itself joins (its recovery
/// coordinator needs a coordinator id and a fabric handle of its own).
const MEMBERSHIP_NODE: u16 = u16::MAX - 2;
/// Node id of the post-run inspection.
const CHECKER_NODE: u16 = u16::MAX;
/// How many falsely suspected nodes a run can bring back as new incarnations.
const REJOIN_SLOTS: usize = 8;

/// Lose one memory node during the measured interval (in-process fabric).
#[derive(Clone, Debug)]
pub struct MemoryFailurePlan {
    pub node: u16,
    /// Time after the measurement started.
    pub after: Duration,
    /// How long to run on the surviving copies before re-replicating.
    pub degraded_for: Duration,
}

/// What happened around a memory-node loss (docs/DESIGN.md §4.6).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemoryFailureTimeline {
    pub failed_node: u16,
    /// New transactions paused while in-flight ones decided and primaries moved.
    pub reconfigure_pause_us: f64,
    /// New transactions paused while the replacement was filled.
    pub rereplicate_pause_us: f64,
    pub slots_copied: u64,
    pub tps_before: f64,
    pub tps_degraded: f64,
    pub tps_after: f64,
    pub aborted_by_failure: u64,
    /// Seconds after the measurement started: the loss, primaries moved,
    /// re-replication started, f+1 copies again.
    #[serde(skip)]
    pub marks: Vec<(f64, String)>,
}

/// Committed transactions per 10 ms bucket over the measured interval, and
/// what happened when (Pandora paper Figs. 8-12: throughput through a failure).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    pub bucket_ms: u64,
    pub committed: Vec<u64>,
    /// (seconds after the measurement started, what happened)
    pub events: Vec<(f64, String)>,
}

impl Timeline {
    /// Throughput per bucket in transactions per second.
    pub fn tps(&self) -> Vec<f64> {
        self.committed
            .iter()
            .map(|&c| c as f64 * 1000.0 / self.bucket_ms as f64)
            .collect()
    }
}

/// Count `committed` every `bucket` while `measuring` holds.
fn sample_timeline(ctl: Arc<Control>, bucket: Duration) -> Vec<u64> {
    let mut out = Vec::new();
    let mut last = ctl.committed.load(Ordering::Relaxed);
    let mut next = Instant::now() + bucket;
    while ctl.measuring.load(Ordering::Relaxed) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += bucket;
        let c = ctl.committed.load(Ordering::Relaxed);
        out.push(c - last);
        last = c;
    }
    out
}

/// Crash one compute node during the measured interval.
#[derive(Clone, Debug)]
pub struct CrashPlan {
    /// 0-based compute node index.
    pub node: u16,
    /// Time after the measurement started.
    pub after: Duration,
}

/// Make a live compute node look failed: its heartbeat thread stalls for
/// `pause` (as a descheduled or SIGSTOPped thread would) while its
/// coordinators keep running and posting verbs. A false positive as it
/// really happens: the node is slow, not silent.
#[derive(Clone, Debug)]
pub struct SuspectPlan {
    /// 0-based compute node index (replacement nodes count on from the initial ones).
    pub node: u16,
    /// Time after the measurement started.
    pub after: Duration,
    pub pause: Duration,
}

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
    pub crash: Option<CrashPlan>,
    /// Further compute crashes after `crash` (the MTTF experiment); the
    /// recovery timeline is reported for `crash` only.
    pub more_crashes: Vec<CrashPlan>,
    /// Once a crashed node is recovered, start a replacement compute node
    /// (fresh node id and coordinator ids) on its resources (Pandora paper
    /// Fig. 8, "reuse": the failed coordinators come back). On by default;
    /// a falsely suspected node always comes back as a new incarnation.
    pub respawn: bool,
    /// False positives to provoke (heartbeat stalls of live nodes).
    pub suspect: Vec<SuspectPlan>,
    pub fail_memory: Option<MemoryFailurePlan>,
    /// Heartbeat timeout of the failure detector (docs/DESIGN.md §4.5: 5 ms).
    pub heartbeat_timeout: Duration,
    /// Abort at once on a lock held by someone else, or stall and retry.
    pub on_stray: OnStray,
    /// Slot reclamation (`StoreConfig::reclaim`).
    pub reclaim: bool,
    /// Sample table occupancy this often (in-process fabric only).
    pub occupancy_every: Option<Duration>,
    /// Measure the floor: record the compute threads' verbs during the
    /// warm-up and, after the check, post them again raw (`RunResult::floor`).
    pub floor: bool,
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
            crash: None,
            more_crashes: Vec::new(),
            respawn: true,
            suspect: Vec::new(),
            fail_memory: None,
            heartbeat_timeout: Duration::from_millis(5),
            on_stray: OnStray::Abort,
            reclaim: true,
            occupancy_every: None,
            floor: false,
        }
    }

    pub fn store_config(&self) -> StoreConfig {
        let mut s = StoreConfig::new(
            self.mode,
            self.memory_nodes,
            self.replicas,
            self.workload.tables(),
        );
        s.partitions_per_table = 64;
        // Coordinator ids are 1..log_slots: one log slot per id. Twice the
        // coordinators, so failed ids need recycling (a stray-lock scan) only
        // after many failures.
        // One rejoin's worth of ids on top; more rejoins recycle failed ids.
        let replacements = if self.respawn {
            self.crash.iter().count() + self.more_crashes.len()
        } else {
            0
        } + 1;
        let coordinators =
            (self.compute_nodes as u32 + replacements as u32) * self.coordinators as u32;
        s.log_slots = (2 * coordinators + 8).max(64);
        s.bugs = self.bugs;
        s.on_stray = self.on_stray;
        s.reclaim = self.reclaim;
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
        if let Some(f) = &self.fail_memory {
            if f.node >= self.memory_nodes || self.replicas < 2 {
                return Err("a memory-node failure needs --replicas 2 or more and a node below --memory-nodes".into());
            }
            if self.crash.is_some() {
                return Err(
                    "inject either a compute crash or a memory-node failure, not both".into(),
                );
            }
        }
        if let Some(c) = &self.crash {
            if c.node >= self.compute_nodes || self.compute_nodes < 2 {
                return Err("a crash needs a surviving compute node: --crash-node must be below --compute-nodes (at least 2)".into());
            }
            if c.after >= self.duration {
                return Err("the crash must happen within the measured duration".into());
            }
        }
        let slots = self.compute_nodes as usize
            + REJOIN_SLOTS
            + if self.respawn {
                self.crash.iter().count() + self.more_crashes.len()
            } else {
                0
            };
        if self.suspect.iter().any(|p| {
            p.node as usize >= slots
                || p.after >= self.duration
                || p.pause <= self.heartbeat_timeout
        }) {
            return Err(format!("a suspicion must name one of the {slots} node slots, happen within the measured duration and stall heartbeats for longer than the timeout"));
        }
        if !self.more_crashes.is_empty() {
            let mut nodes: Vec<u16> = self
                .crash
                .iter()
                .chain(&self.more_crashes)
                .map(|c| c.node)
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            if self.crash.is_none()
                || nodes.len() != 1 + self.more_crashes.len()
                || nodes.len() >= self.compute_nodes as usize
            {
                return Err(
                    "more crashes need a first crash, distinct nodes and at least one survivor"
                        .into(),
                );
            }
            if self
                .more_crashes
                .iter()
                .any(|c| c.node >= self.compute_nodes || c.after >= self.duration)
            {
                return Err(
                    "every crash must name a compute node and happen within the measured duration"
                        .into(),
                );
            }
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

/// What happened between a crash and the end of its recovery (`tandem pandora recovery`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryTimeline {
    pub crashed_node: u16,
    /// Crash to failure declared by the heartbeat timeout.
    pub detect_us: f64,
    /// Revocation on every memory node, until every acknowledgement.
    pub link_termination_us: f64,
    /// Log recovery, including log invalidation.
    pub log_recovery_us: f64,
    /// The recovery thread's CPU time in log recovery (its thread clock),
    /// per failed coordinator, and per round of verbs (pandora; 0 for the
    /// baselines, whose recovery is not counted in rounds).
    pub log_recovery_cpu_us: f64,
    pub cpu_ns_per_coordinator: f64,
    pub rounds: usize,
    pub cpu_us_per_round: f64,
    /// Crash to `failed_ids` published (stealing may start).
    pub total_us: f64,
    pub logs_found: usize,
    pub rolled_forward: usize,
    pub rolled_back: usize,
    /// Stray locks stolen by surviving coordinators (PILL) during the run.
    pub stray_locks_stolen: u64,
    /// Stray locks nobody touched, released by the post-run scan.
    pub stray_locks_swept: usize,
    /// ford/traditional: slots whose lock word recovery read (ford scans the whole store).
    pub slots_scanned: u64,
    /// ford/traditional: how long every live coordinator was paused.
    pub world_stopped_us: f64,
    /// Survivors' committed throughput before the crash and between crash and recovery end.
    pub survivors_tps_before: f64,
    pub survivors_tps_during_recovery: f64,
    pub survivors_commits_during_recovery: u64,
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
    /// CPU time of the compute threads over the measured interval, per
    /// committed transaction (thread CPU clocks; `None` if a compute thread
    /// ended inside the interval).
    pub cpu_ns_per_commit: Option<f64>,
    /// The same transactions' verbs posted raw on the same fabric
    /// (`RunConfig::floor`), and `cpu_ns_per_commit` over it.
    pub floor: Option<Floor>,
    pub protocol_overhead: Option<f64>,
    pub aborts_by_reason: BTreeMap<String, u64>,
    /// SmallBank, TATP, TPC-C: acknowledged commits per transaction type over
    /// the whole run (warm-up included), and application rollbacks.
    pub committed_by_type: BTreeMap<String, u64>,
    pub rolled_back_by_application: u64,
    pub errors: Vec<String>,
    pub check_passed: Option<bool>,
    pub violations: Vec<String>,
    pub recovery: Option<RecoveryTimeline>,
    pub memory_failure: Option<MemoryFailureTimeline>,
    pub timeline: Timeline,
    /// Crashed compute nodes whose recovery finished (1-based).
    pub recovered_nodes: Vec<u16>,
    /// Compute nodes the failure detector declared failed although they had
    /// not crashed: fenced off, recovered, and back as new incarnations.
    pub false_positives: Vec<u16>,
    /// New incarnations started during the run (replacements and rejoins).
    pub incarnations_started: usize,
    /// Commits acknowledged by transactions that began after their node was
    /// revoked everywhere. Anything but 0 is a fencing violation.
    pub fenced_acks: u64,
    /// Tombstones returned to empty slots (slot reclamation).
    pub slots_reclaimed: u64,
    /// Tombstones left unreclaimed: a full queue, or a reclamation that kept aborting.
    pub reclaims_dropped: u64,
    /// Table names, in the order of `occupancy`'s per-table counts.
    pub tables: Vec<String>,
    /// Table occupancy over the run (`RunConfig::occupancy_every`).
    pub occupancy: Vec<occupancy::Occupancy>,
}

struct Control {
    stop: AtomicBool,
    measuring: AtomicBool,
    committed: AtomicU64,
    aborted: AtomicU64,
    /// Measured commits per compute node.
    committed_by_node: Vec<AtomicU64>,
    crash: Vec<AtomicBool>,
    /// Pauses in force (ford/traditional recovery, memory reconfiguration):
    /// no new transaction starts while positive.
    paused: AtomicU64,
    /// Transactions in flight per compute node.
    active: Vec<AtomicU64>,
    /// Each compute node's view of down memory nodes.
    views: Vec<MemoryView>,
    /// Until when each node's heartbeat thread stalls (a provoked false positive).
    stalled_until_ns: Vec<AtomicU64>,
    /// When each node's revocation finished on every memory node (0: never).
    revoked_at_ns: Vec<AtomicU64>,
    /// Commits acknowledged by a transaction that began after its node was
    /// revoked everywhere: a fenced incarnation acting. Must stay 0.
    fenced_acks: AtomicU64,
    base: Instant,
}

impl Control {
    /// Nothing running yet, for `slots` compute nodes (incarnations).
    fn new(slots: usize) -> Control {
        let zeros = || (0..slots).map(|_| AtomicU64::new(0)).collect();
        Control {
            stop: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            committed: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            committed_by_node: zeros(),
            crash: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            paused: AtomicU64::new(0),
            active: zeros(),
            views: (0..slots).map(|_| MemoryView::default()).collect(),
            revoked_at_ns: zeros(),
            stalled_until_ns: zeros(),
            fenced_acks: AtomicU64::new(0),
            base: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    fn ns_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_nanos() as u64
    }
}

struct ThreadResult {
    hist: Histogram<u64>,
    stats: CoordinatorStats,
    outcome: Outcome,
    errors: Vec<String>,
    /// The verbs recorded for the floor (`RunConfig::floor`).
    trace: Option<Trace>,
}

/// Timestamps the membership thread records while handling one node's failure.
#[derive(Default, Clone)]
struct FailureLog {
    detected_ns: u64,
    revoked_ns: u64,
    recovered_ns: u64,
    notified_ns: u64,
    committed_at_notify: Vec<u64>,
    logs_found: usize,
    rolled_forward: usize,
    rolled_back: usize,
    swept: usize,
    slots_scanned: u64,
    world_stopped_ns: u64,
    /// The recovery thread's CPU time in log recovery, and its rounds.
    recovery_cpu_ns: u64,
    recovery_rounds: usize,
    /// Failed coordinators recovered.
    recovered_coordinators: usize,
}

/// Give way once to the other tasks of this thread's `LocalSet`. Unlike
/// `tokio::task::yield_now`, which defers the task until the runtime next
/// polls its I/O driver (an `epoll_wait` per yield), this requeues it at once.
pub fn yield_to_siblings() -> impl std::future::Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
}

/// Run a future on a fresh single-threaded runtime with a `LocalSet`.
pub fn block_on_local<T>(fut: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, fut)
}

/// Load the workload's dataset through compute node 0.
pub fn load(backend: &Backend, layout: &Arc<Layout>, spec: &WorkloadSpec) -> Result<u64, String> {
    block_on_local(async {
        let fabric = backend
            .join(0)
            .await
            .map_err(|e| format!("loader cannot join: {e}"))?;
        match fabric {
            AnyFabric::Inline(f) => load_with(&f, layout, spec).await,
            AnyFabric::Tcp(f) => load_with(&f, layout, spec).await,
        }
    })
}

async fn load_with<F: Fabric>(
    f: &F,
    layout: &Arc<Layout>,
    spec: &WorkloadSpec,
) -> Result<u64, String> {
    let mut loader = Loader::new(f, layout.clone());
    spec.load(&mut loader).await.map_err(|e| e.to_string())?;
    loader.finish().await.map_err(|e| e.to_string())
}

/// Inspect the store: replica agreement, stray locks, and the workload check.
pub fn check(
    backend: &Backend,
    layout: &Arc<Layout>,
    spec: &WorkloadSpec,
    outcome: &Outcome,
) -> Result<Vec<String>, String> {
    block_on_local(async {
        let fabric = backend
            .join(CHECKER_NODE)
            .await
            .map_err(|e| format!("checker cannot join: {e}"))?;
        match fabric {
            AnyFabric::Inline(f) => check_with(&f, layout, spec, outcome).await,
            AnyFabric::Tcp(f) => check_with(&f, layout, spec, outcome).await,
        }
    })
}

async fn check_with<F: Fabric>(
    f: &F,
    layout: &Layout,
    spec: &WorkloadSpec,
    outcome: &Outcome,
) -> Result<Vec<String>, String> {
    let mut v = Vec::new();
    let mut live = Vec::new();
    for t in 0..layout.tables.len() as u32 {
        let snap = snapshot(f, layout, t)
            .await
            .map_err(|e| format!("inspection failed: {e}"))?;
        v.extend(snap.replica_mismatches());
        v.extend(snap.structure_violations(layout.table(t)));
        v.extend(
            snap.held_locks()
                .into_iter()
                .map(|(k, w)| format!("table {t} key {k}: lock {:#x} still held", w.0)),
        );
        live.push(snap.live());
    }
    v.extend(spec.verify(&live, outcome));
    Ok(v)
}

/// Give the calling thread (a heartbeat sender or the failure detector)
/// real-time priority where the OS allows it, as a deployment would pin or
/// prioritise them: on two shared cores a normal thread can wait longer than
/// a 5 ms timeout to be scheduled, which is a false positive. Both threads
/// sleep almost all the time. Without the privilege this is a no-op.
pub(crate) fn prioritise_current_thread() -> bool {
    tandem_fabric::raise_priority()
}

fn new_hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

#[allow(clippy::too_many_arguments)]
async fn drive<F: Fabric>(
    fabric: F,
    store: StoreConfig,
    layout: Arc<Layout>,
    ctl: Arc<Control>,
    spec: WorkloadSpec,
    cn: u16,
    ids: Vec<u16>,
    seed: u64,
    failed: FailedIds,
    record: bool,
) -> ThreadResult {
    let at_post = fabric.executes_at_post();
    let (fabric, trace) = Recorder::new(fabric, cpu::FLOOR_TRACE_VERBS);
    if record {
        trace.start();
    }
    let node = ComputeNode::with_memory_view(
        fabric,
        &store,
        layout,
        failed.clone(),
        ctl.views[cn as usize].clone(),
    );
    let mut seeds = Rng::new(seed ^ ((cn as u64) << 40));
    let errors: Rc<RefCell<Vec<String>>> = Rc::default();
    let mut outcomes: Vec<OutcomeHandle> = Vec::new();
    let mut handles = Vec::new();
    // Unlocks still landing; awaited before the node stops, so no lock is
    // left behind and `active` drains to zero (a stop-the-world drain waits for it).
    let unlocking: Rc<RefCell<Vec<tokio::task::JoinHandle<()>>>> = Rc::default();
    let shared = Rc::new(RefCell::new(
        tandem_workloads::ledger::EffectLedger::default(),
    ));
    for (k, &id) in ids.iter().enumerate() {
        let coord = node.coordinator(id);
        let mut client = spec.client(id as u32, seeds.next_u64());
        if !client.share_ledger(&shared) || k == 0 {
            outcomes.push(client.handle());
        }
        let task = CoordinatorTask {
            ctl: ctl.clone(),
            errors: errors.clone(),
            unlocking: unlocking.clone(),
            failed: failed.clone(),
            trace: trace.clone(),
            cn,
            id,
            at_post,
        };
        handles.push(tokio::task::spawn_local(task.run(coord, client)));
    }
    let work = join_coordinators(handles, &unlocking);
    let crashed = async {
        while !ctl.crash[cn as usize].load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    };
    // A crash returns here at once; the caller then drops the LocalSet, and with
    // it every coordinator task wherever it is (mid-transaction included).
    let (hist, stats) = tokio::select! {
        r = work => r,
        _ = crashed => (new_hist(), CoordinatorStats::default()),
    };
    let mut outcome = Outcome::empty(&spec);
    for h in &outcomes {
        outcome.merge(&h.outcome());
    }
    let errors = errors.borrow().clone();
    ThreadResult {
        hist,
        stats,
        outcome,
        errors,
        trace: record.then(|| trace.take()),
    }
}

/// Await every coordinator task, then the unlocks still landing; the
/// tasks' latencies and stats merged.
async fn join_coordinators(
    handles: Vec<tokio::task::JoinHandle<(Histogram<u64>, CoordinatorStats)>>,
    unlocking: &RefCell<Vec<tokio::task::JoinHandle<()>>>,
) -> (Histogram<u64>, CoordinatorStats) {
    let mut hist = new_hist();
    let mut stats = CoordinatorStats::default();
    for h in handles {
        let (hh, st) = h.await.expect("coordinator task panicked");
        hist.add(&hh).expect("same histogram bounds");
        stats.merge(&st);
    }
    let pending: Vec<_> = unlocking.borrow_mut().drain(..).collect();
    for h in pending {
        let _ = h.await;
    }
    (hist, stats)
}

/// One coordinator task of a compute thread, and what it shares with the
/// thread's other tasks.
struct CoordinatorTask {
    ctl: Arc<Control>,
    errors: Rc<RefCell<Vec<String>>>,
    unlocking: Rc<RefCell<Vec<tokio::task::JoinHandle<()>>>>,
    failed: FailedIds,
    /// Counts the commits made while the floor's trace records.
    trace: TraceHandle,
    /// Its compute node (0-based) and coordinator id.
    cn: u16,
    id: u16,
    /// The fabric executes verbs at post time.
    at_post: bool,
}

impl CoordinatorTask {
    /// Run `client`'s transactions on `coord` until the run stops, the node
    /// is fenced or a transaction fails; the measured commits' latencies
    /// and the coordinator's stats.
    async fn run<F: Fabric>(
        self,
        mut coord: Coordinator<F>,
        mut client: Client,
    ) -> (Histogram<u64>, CoordinatorStats) {
        let (ctl, cn) = (&self.ctl, self.cn as usize);
        let mut hist = new_hist();
        while !ctl.stop.load(Ordering::Relaxed) {
            // A fenced node stops: once its ids are in failed-ids, others
            // steal its locks, so it must not start anything more.
            if self.failed.contains(self.id) {
                break;
            }
            // Announce first, then check: a drainer that saw no activity
            // can then be sure nobody starts behind its back.
            ctl.active[cn].fetch_add(1, Ordering::SeqCst);
            if ctl.paused.load(Ordering::SeqCst) > 0 {
                ctl.active[cn].fetch_sub(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(100)).await;
                continue;
            }
            let t0 = Instant::now();
            let began_ns = ctl.ns_at(t0);
            let r = client.run_one(&mut coord).await;
            let revoked_ns = ctl.revoked_at_ns[cn].load(Ordering::SeqCst);
            if matches!(r, Ok(true)) && revoked_ns != 0 && revoked_ns < began_ns {
                ctl.fenced_acks.fetch_add(1, Ordering::SeqCst);
            }
            self.settle_unlocks(&mut coord);
            if !self.tally(r, t0, &mut hist) {
                break;
            }
            // Let the other coordinators of this thread run (the inline
            // fabric completes verbs at once, so nothing else would yield).
            if self.at_post {
                yield_to_siblings().await;
            } else {
                // Lets the I/O driver poll too: 7 % more micro tx/s over tcp.
                tokio::task::yield_now().await;
            }
        }
        (hist, coord.stats.clone())
    }

    /// Drained means quiet: the transaction counts as active until its
    /// unlocks land, without holding up the next one.
    fn settle_unlocks<F: Fabric>(&self, coord: &mut Coordinator<F>) {
        let cn = self.cn as usize;
        if coord.unlocks_landed() {
            // Landed already (the inline fabric executes at post time).
            self.ctl.active[cn].fetch_sub(1, Ordering::SeqCst);
        } else {
            let unlocks = coord.take_unlocks();
            let c2 = self.ctl.clone();
            let h = tokio::task::spawn_local(async move {
                unlocks.await;
                c2.active[cn].fetch_sub(1, Ordering::SeqCst);
            });
            let mut u = self.unlocking.borrow_mut();
            u.retain(|h| !h.is_finished());
            u.push(h);
        }
    }

    /// Count a transaction begun at `t0` that ended with `r` (while
    /// measuring); false if it failed, which ends the task.
    fn tally(&self, r: Result<bool, TxError>, t0: Instant, hist: &mut Histogram<u64>) -> bool {
        let (ctl, cn) = (&self.ctl, self.cn as usize);
        let measuring = ctl.measuring.load(Ordering::Relaxed);
        if measuring {
            self.trace.stop();
        } else if matches!(r, Ok(true)) {
            self.trace.commit();
        }
        match r {
            Ok(true) if measuring => {
                ctl.committed.fetch_add(1, Ordering::Relaxed);
                ctl.committed_by_node[cn].fetch_add(1, Ordering::Relaxed);
                let _ = hist.record((t0.elapsed().as_micros() as u64).max(1));
            }
            Ok(false) if measuring => {
                ctl.aborted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => {
                self.errors
                    .borrow_mut()
                    .push(format!("coordinator {}: {e}", self.id));
                return false;
            }
        }
        true
    }
}

/// The membership service's thread: ticks the failure detector and carries
/// out its commands (revoke, recover, notify, scan).
#[allow(clippy::too_many_arguments)]
async fn membership_loop(
    mode: Mode,
    backend: Backend,
    layout: Arc<Layout>,
    ctl: Arc<Control>,
    membership: Arc<Mutex<Membership>>,
    failed: FailedIds,
    logs: Arc<Mutex<BTreeMap<u16, FailureLog>>>,
) -> Result<(), String> {
    let (rc_id, fabric) = join_as_service(&backend, &ctl, &membership).await?;
    let mut service = MembershipService {
        mode,
        backend,
        layout,
        ctl,
        membership,
        failed,
        logs,
        fabric,
        rc_id,
        rc_versions: 0,
        swept_total: 0,
    };
    let tick = Duration::from_micros(100);
    while !service.ctl.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(tick).await;
        service.tick().await?;
    }
    service.finish().await
}

/// `$body` with `$f` bound to the fabric inside `$fabric` (an [`AnyFabric`]),
/// whichever kind it is.
macro_rules! on_fabric {
    ($fabric:expr, $f:ident => $body:expr) => {
        match $fabric {
            AnyFabric::Inline($f) => $body,
            AnyFabric::Tcp($f) => $body,
        }
    };
}

/// Versions the membership's recovery coordinator mints must never repeat:
/// every recovery gets its own block of the 48-bit counter.
const RC_VERSION_BLOCK: u64 = 1 << 24;

/// What the embedded membership service acts on, and its own recovery
/// coordinator: id, fabric handle, the versions it minted, the stray locks
/// it swept.
struct MembershipService {
    mode: Mode,
    backend: Backend,
    layout: Arc<Layout>,
    ctl: Arc<Control>,
    membership: Arc<Mutex<Membership>>,
    failed: FailedIds,
    logs: Arc<Mutex<BTreeMap<u16, FailureLog>>>,
    fabric: AnyFabric,
    rc_id: u16,
    rc_versions: u64,
    swept_total: usize,
}

/// What one recovery found and did, and how long it stopped the world.
struct RecoveryTally {
    found: usize,
    fwd: usize,
    back: usize,
    scanned: u64,
    stopped_ns: u64,
    rounds: usize,
}

/// The membership service joins as a node of its own: a coordinator id
/// and a fabric handle for its recovery coordinator.
async fn join_as_service(
    backend: &Backend,
    ctl: &Control,
    membership: &Mutex<Membership>,
) -> Result<(u16, AnyFabric), String> {
    let rc_id = {
        let mut m = membership.lock().expect("membership lock");
        let event = Event::Join {
            node: MEMBERSHIP_NODE,
            coordinators: 1,
        };
        match m.step(ctl.now_ns(), event).pop() {
            Some(Command::AssignIds { ids, .. }) => ids[0],
            other => {
                return Err(format!(
                    "membership cannot get its own coordinator id: {other:?}"
                ))
            }
        }
    };
    let fabric = backend
        .prioritised()
        .join(MEMBERSHIP_NODE)
        .await
        .map_err(|e| format!("membership cannot join: {e}"))?;
    Ok((rc_id, fabric))
}

impl MembershipService {
    /// Heartbeat for itself, tick the detector, and carry out the commands
    /// that follow, each one's outcome stepping the membership again.
    async fn tick(&mut self) -> Result<(), String> {
        let mut queue: std::collections::VecDeque<Command> = {
            let mut m = self.membership.lock().expect("membership lock");
            // The membership node itself runs here: it never times out.
            m.step(
                self.ctl.now_ns(),
                Event::Heartbeat {
                    node: MEMBERSHIP_NODE,
                },
            );
            m.step(self.ctl.now_ns(), Event::Tick).into()
        };
        // In order: NotifyFailed must not wait behind a stray-lock scan.
        while let Some(cmd) = queue.pop_front() {
            let Some(next) = self.carry_out(cmd).await? else {
                continue;
            };
            let more = self
                .membership
                .lock()
                .expect("membership lock")
                .step(self.ctl.now_ns(), next);
            queue.extend(more);
        }
        Ok(())
    }

    /// One command; the event that reports it done, if any.
    async fn carry_out(&mut self, cmd: Command) -> Result<Option<Event>, String> {
        Ok(match cmd {
            Command::TerminateLinks { node } => Some(self.terminate_links(node).await?),
            Command::Recover { node, ids, .. } => Some(self.recover(node, &ids).await?),
            Command::NotifyFailed { ids } => {
                self.notify_failed(&ids);
                None
            }
            Command::ScanStrayLocks { ids } => self.scan_stray_locks(ids).await?,
            Command::AssignIds { .. } | Command::Reject { .. } => None,
        })
    }

    /// Revoke `node` on every memory node.
    async fn terminate_links(&mut self, node: u16) -> Result<Event, String> {
        let ctl = &self.ctl;
        self.logs
            .lock()
            .unwrap()
            .entry(node)
            .or_default()
            .detected_ns = ctl.now_ns();
        self.backend
            .revoke(node)
            .await
            .map_err(|e| format!("revocation of node {node} failed: {e}"))?;
        let now = ctl.now_ns();
        self.logs
            .lock()
            .unwrap()
            .entry(node)
            .or_default()
            .revoked_ns = now;
        if let Some(at) = ctl.revoked_at_ns.get(node as usize - 1) {
            at.store(now, Ordering::SeqCst);
        }
        Ok(Event::LinksTerminated { node })
    }

    /// Recover the coordinators `ids` of `node`: the embedded service runs
    /// the recovery coordinator itself.
    async fn recover(&mut self, node: u16, ids: &[u16]) -> Result<Event, String> {
        self.rc_versions += RC_VERSION_BLOCK;
        let cpu0 = tandem_sim::cpu::thread_ns();
        let t = match self.mode {
            Mode::Pandora => self.recover_pandora(node, ids).await?,
            Mode::Ford | Mode::Traditional => self.stop_world_and_recover(node, ids).await?,
        };
        let cpu_ns = tandem_sim::cpu::thread_ns() - cpu0;
        let mut ls = self.logs.lock().unwrap();
        let l = ls.entry(node).or_default();
        l.recovered_ns = self.ctl.now_ns();
        l.logs_found += t.found;
        l.rolled_forward += t.fwd;
        l.rolled_back += t.back;
        l.slots_scanned += t.scanned;
        l.world_stopped_ns += t.stopped_ns;
        l.recovery_cpu_ns += cpu_ns;
        l.recovery_rounds += t.rounds;
        l.recovered_coordinators += ids.len();
        Ok(Event::RecoveryDone { node })
    }

    async fn recover_pandora(&self, node: u16, ids: &[u16]) -> Result<RecoveryTally, String> {
        let (layout, rc_id, versions) = (&self.layout, self.rc_id, self.rc_versions);
        let r = on_fabric!(&self.fabric, f => {
            RecoveryCoordinator::new(f, layout.clone(), rc_id)
                .with_version_counter(versions)
                .recover(ids)
                .await
        })
        .map_err(|e| format!("log recovery of node {node} failed: {e}"))?;
        Ok(RecoveryTally {
            found: r.logs_found,
            fwd: r.rolled_forward,
            back: r.rolled_back,
            scanned: 0,
            stopped_ns: 0,
            rounds: r.rounds,
        })
    }

    /// Locks name no owner: stop the world, let every live coordinator's
    /// transaction finish, then recover.
    async fn stop_world_and_recover(
        &self,
        node: u16,
        ids: &[u16],
    ) -> Result<RecoveryTally, String> {
        let (mode, ctl) = (self.mode, &self.ctl);
        let stop_at = ctl.now_ns();
        ctl.paused.fetch_add(1, Ordering::SeqCst);
        self.drain_live(node).await?;
        let (layout, rc_id, versions) = (&self.layout, self.rc_id, self.rc_versions);
        let r = on_fabric!(&self.fabric, f => {
            let mut rc = RecoveryCoordinator::new(f, layout.clone(), rc_id)
                .with_version_counter(versions);
            if mode == Mode::Ford {
                rc.recover_ford(ids).await
            } else {
                rc.recover_traditional(ids).await
            }
        })
        .map_err(|e| format!("{mode} recovery of node {node} failed: {e}"))?;
        ctl.paused.fetch_sub(1, Ordering::SeqCst);
        Ok(RecoveryTally {
            found: r.locks_found,
            fwd: r.rolled_forward,
            back: r.rolled_back,
            scanned: r.slots_scanned,
            stopped_ns: ctl.now_ns() - stop_at,
            rounds: 0,
        })
    }

    /// Wait (30 s at most) until no live node has a transaction in flight.
    async fn drain_live(&self, node: u16) -> Result<(), String> {
        let (mode, ctl) = (self.mode, &self.ctl);
        // Only live nodes drain: a crashed node's transactions never finish
        // (and a falsely suspected one is revoked: its verbs no longer land).
        // The end of the run does not cut the drain short: recovering
        // owner-less locks beside a live transaction would release its locks.
        let alive = |n: usize| {
            self.membership
                .lock()
                .expect("membership lock")
                .status(n as u16 + 1)
                == Some(NodeStatus::Alive)
        };
        let give_up = Instant::now() + Duration::from_secs(30);
        while ctl
            .active
            .iter()
            .enumerate()
            .any(|(n, a)| a.load(Ordering::SeqCst) > 0 && alive(n))
        {
            if Instant::now() > give_up {
                return Err(format!(
                    "{mode} recovery of node {node}: live transactions did not drain in 30 s"
                ));
            }
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
        Ok(())
    }

    /// Publish `ids` in failed-ids, noting when and what every node had
    /// committed by then.
    fn notify_failed(&self, ids: &[u16]) {
        for &id in ids {
            self.failed.insert(id);
        }
        let now = self.ctl.now_ns();
        let counts: Vec<u64> = self
            .ctl
            .committed_by_node
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect();
        let owner = self
            .membership
            .lock()
            .expect("membership lock")
            .owner_of(ids[0]);
        if let Some(node) = owner {
            let mut ls = self.logs.lock().unwrap();
            let l = ls.entry(node).or_default();
            l.notified_ns = now;
            l.committed_at_notify = counts;
        }
    }

    /// Sweep the stray locks of failed ids, then retire the versions of
    /// `ids` before they are reused; `None` if that did not finish (the
    /// ids stay failed; a later scan may retry).
    async fn scan_stray_locks(&mut self, ids: Vec<u16>) -> Result<Option<Event>, String> {
        self.sweep().await?;
        // No version minted by a recycled id may survive its reuse.
        self.rc_versions += RC_VERSION_BLOCK;
        let (layout, rc_id, versions) = (&self.layout, self.rc_id, self.rc_versions);
        let retired = on_fabric!(&self.fabric, f => {
            RecoveryCoordinator::new(f, layout.clone(), rc_id)
                .with_version_counter(versions)
                .retire_versions(&ids)
                .await
        })
        .map_err(|e| format!("retiring the versions of recycled ids failed: {e}"))?;
        Ok(retired.map(|_| Event::ScanDone { ids }))
    }

    /// Sweep the stray locks of failed ids, adding them to the total.
    async fn sweep(&mut self) -> Result<(), String> {
        let (layout, failed) = (&self.layout, &self.failed);
        let swept = on_fabric!(&self.fabric, f => sweep_stray_locks(f, layout, failed).await)
            .map_err(|e| format!("stray-lock scan failed: {e}"))?;
        self.swept_total += swept;
        Ok(())
    }

    /// Stray locks nobody touched (NotLogged transactions of the failed
    /// node) are swept at the end; every failure log learns the total.
    async fn finish(mut self) -> Result<(), String> {
        if self.failed.count() > 0 {
            self.sweep().await?;
        }
        for l in self.logs.lock().unwrap().values_mut() {
            l.swept = self.swept_total;
        }
        Ok(())
    }
}

/// Before the run stops: let the detector declare and recover every crashed
/// node, and finish recoveries under way (bounded: 10 s). On a loaded machine
/// the detector may be paused often; a run must not end with a crashed
/// node's locks neither recovered nor swept.
fn await_recoveries(ctl: &Control, membership: &Mutex<Membership>, nodes: u16) {
    let pending = || {
        let m = membership.lock().expect("membership lock");
        (1..=nodes).any(|n| match m.status(n) {
            Some(NodeStatus::Revoking | NodeStatus::Recovering) => true,
            Some(NodeStatus::Alive) => ctl.crash[n as usize - 1].load(Ordering::SeqCst),
            _ => false,
        })
    };
    let give_up = Instant::now() + Duration::from_secs(10);
    while pending() && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A compute node's heartbeat thread. Heartbeats come from a thread of their
/// own, as in a real compute server: on two shared cores a busy worker can be
/// descheduled for longer than the timeout, while a sleeping thread is woken
/// promptly. It joins the membership once the node registered (`registered`),
/// so the detector's clock starts only once heartbeats can flow, and stops
/// when the node crashes or is no longer alive in the membership's eyes.
fn spawn_heartbeat(
    node: u16,
    ctl: Arc<Control>,
    m: Arc<Mutex<Membership>>,
    coordinators: u16,
    every: Duration,
    registered: std::sync::mpsc::Receiver<bool>,
    joined: std::sync::mpsc::Sender<Vec<Command>>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let body = move || {
        prioritise_current_thread();
        if registered.recv() != Ok(true) {
            return;
        }
        let cmds = m
            .lock()
            .expect("membership lock")
            .step(ctl.now_ns(), Event::Join { node, coordinators });
        let admitted = matches!(cmds.last(), Some(Command::AssignIds { .. }));
        let _ = joined.send(cmds);
        let alive = || m.lock().expect("membership lock").status(node) == Some(NodeStatus::Alive);
        while admitted
            && !ctl.stop.load(Ordering::Relaxed)
            && !ctl.crash[node as usize - 1].load(Ordering::Relaxed)
            && alive()
        {
            std::thread::sleep(every);
            let stalled = ctl.stalled_until_ns[node as usize - 1].load(Ordering::SeqCst);
            if stalled > ctl.now_ns() {
                std::thread::sleep(Duration::from_nanos(stalled - ctl.now_ns().min(stalled)));
            }
            m.lock()
                .expect("membership lock")
                .step(ctl.now_ns(), Event::Heartbeat { node });
        }
    };
    std::thread::Builder::new()
        .name(format!("heartbeat-{node}"))
        .spawn(body)
        .map_err(|e| e.to_string())
}

/// Pause new transactions and wait until every node's in-flight ones ended.
fn pause_and_drain(ctl: &Control) {
    ctl.paused.fetch_add(1, Ordering::SeqCst);
    while ctl.active.iter().any(|a| a.load(Ordering::SeqCst) > 0) {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// docs/DESIGN.md §4.6 on real threads: lose memory node `f.node`; in-flight
/// transactions decide (commit on live replicas, or abort); new ones wait
/// while every compute node moves its primaries; run degraded; then pause
/// again and re-replicate onto a replacement, restoring f+1.
fn fail_memory_node(
    cfg: &RunConfig,
    f: &MemoryFailurePlan,
    backend: &Backend,
    layout: &Arc<Layout>,
    ctl: &Control,
    start: Instant,
) -> Result<MemoryFailureTimeline, String> {
    let Backend::Inline(cluster) = backend else {
        return Err(
            "memory-node failure injection needs the in-process fabric (--fabric sim)".into(),
        );
    };
    let committed = || ctl.committed.load(Ordering::SeqCst);
    let tps_before = committed() as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let mut marks = vec![(
        start.elapsed().as_secs_f64(),
        format!("memory node {} lost", f.node),
    )];
    cluster.nodes()[f.node as usize].fail();
    let t = Instant::now();
    // Declared failed: commits that missed a write there may go on.
    for v in &ctl.views {
        v.declare_failed(f.node);
    }
    pause_and_drain(ctl);
    for v in &ctl.views {
        v.set_down(f.node, true);
    }
    ctl.paused.fetch_sub(1, Ordering::SeqCst);
    let reconfigure_pause_us = t.elapsed().as_secs_f64() * 1e6;
    marks.push((start.elapsed().as_secs_f64(), "primaries moved".into()));
    let c0 = committed();
    let t_degraded = Instant::now();
    std::thread::sleep(f.degraded_for);
    let tps_degraded = (committed() - c0) as f64 / t_degraded.elapsed().as_secs_f64();
    let t = Instant::now();
    marks.push((start.elapsed().as_secs_f64(), "re-replication".into()));
    pause_and_drain(ctl);
    cluster.nodes()[f.node as usize].replace_with_empty();
    let view = ctl.views[0].clone();
    let copied = block_on_local(async {
        let fabric = cluster
            .join(MEMBERSHIP_NODE - 1)
            .map_err(|e| e.to_string())?;
        tandem_dkvs::repair::rereplicate(&fabric, layout, f.node, &view)
            .await
            .map_err(|e| e.to_string())
    })
    .map_err(|e| format!("re-replication failed: {e}"))?;
    for v in &ctl.views {
        v.set_down(f.node, false);
    }
    ctl.paused.fetch_sub(1, Ordering::SeqCst);
    let rereplicate_pause_us = t.elapsed().as_secs_f64() * 1e6;
    marks.push((start.elapsed().as_secs_f64(), "f+1 copies again".into()));
    let c1 = committed();
    let t_after = Instant::now();
    std::thread::sleep(
        cfg.duration
            .saturating_sub(start.elapsed())
            .min(Duration::from_millis(300)),
    );
    let tps_after = (committed() - c1) as f64 / t_after.elapsed().as_secs_f64().max(1e-9);
    Ok(MemoryFailureTimeline {
        failed_node: f.node,
        reconfigure_pause_us,
        rereplicate_pause_us,
        slots_copied: copied,
        tps_before,
        tps_degraded,
        tps_after,
        aborted_by_failure: 0,
        marks,
    })
}
