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
use tandem_dkvs::{BugSwitches, ComputeNode, CoordinatorStats, FailedIds, Layout, MemoryView, Mode, OnStray, StoreConfig};
use tandem_membership::{Command, Event, Membership, MembershipConfig, NodeStatus};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

use crate::backend::{AnyFabric, Backend};
use crate::workload::{Outcome, OutcomeHandle, WorkloadSpec};

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

/// What happened around a memory-node loss (DESIGN.md §4.6).
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
/// what happened when (`pandora.txt` Figs. 8-12: throughput through a failure).
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
        self.committed.iter().map(|&c| c as f64 * 1000.0 / self.bucket_ms as f64).collect()
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
    /// (fresh node id and coordinator ids) on its resources (`pandora.txt`
    /// Fig. 8, "reuse": the failed coordinators come back). On by default;
    /// a falsely suspected node always comes back as a new incarnation.
    pub respawn: bool,
    /// False positives to provoke (heartbeat stalls of live nodes).
    pub suspect: Vec<SuspectPlan>,
    pub fail_memory: Option<MemoryFailurePlan>,
    /// Heartbeat timeout of the failure detector (DESIGN.md §4.5: 5 ms).
    pub heartbeat_timeout: Duration,
    /// Abort at once on a lock held by someone else, or stall and retry.
    pub on_stray: OnStray,
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
        }
    }

    pub fn store_config(&self) -> StoreConfig {
        let mut s = StoreConfig::new(self.mode, self.memory_nodes, self.replicas, self.workload.tables());
        s.partitions_per_table = 64;
        // Coordinator ids are 1..log_slots: one log slot per id. Twice the
        // coordinators, so failed ids need recycling (a stray-lock scan) only
        // after many failures.
        // One rejoin's worth of ids on top; more rejoins recycle failed ids.
        let replacements = if self.respawn { self.crash.iter().count() + self.more_crashes.len() } else { 0 } + 1;
        let coordinators = (self.compute_nodes as u32 + replacements as u32) * self.coordinators as u32;
        s.log_slots = (2 * coordinators + 8).max(64);
        s.bugs = self.bugs;
        s.on_stray = self.on_stray;
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
                return Err("inject either a compute crash or a memory-node failure, not both".into());
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
        let slots = self.compute_nodes as usize + REJOIN_SLOTS + if self.respawn { self.crash.iter().count() + self.more_crashes.len() } else { 0 };
        if self.suspect.iter().any(|p| p.node as usize >= slots || p.after >= self.duration || p.pause <= self.heartbeat_timeout) {
            return Err(format!("a suspicion must name one of the {slots} node slots, happen within the measured duration and stall heartbeats for longer than the timeout"));
        }
        if !self.more_crashes.is_empty() {
            let mut nodes: Vec<u16> = self.crash.iter().chain(&self.more_crashes).map(|c| c.node).collect();
            nodes.sort_unstable();
            nodes.dedup();
            if self.crash.is_none() || nodes.len() != 1 + self.more_crashes.len() || nodes.len() >= self.compute_nodes as usize {
                return Err("more crashes need a first crash, distinct nodes and at least one survivor".into());
            }
            if self.more_crashes.iter().any(|c| c.node >= self.compute_nodes || c.after >= self.duration) {
                return Err("every crash must name a compute node and happen within the measured duration".into());
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

/// What happened between a crash and the end of its recovery (`tandem recovery`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryTimeline {
    pub crashed_node: u16,
    /// Crash to failure declared by the heartbeat timeout.
    pub detect_us: f64,
    /// Revocation on every memory node, until every acknowledgement.
    pub link_termination_us: f64,
    /// Log recovery, including log invalidation.
    pub log_recovery_us: f64,
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
    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
}

struct ThreadResult {
    hist: Histogram<u64>,
    stats: CoordinatorStats,
    outcome: Outcome,
    errors: Vec<String>,
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
        let fabric = backend.join(CHECKER_NODE).await.map_err(|e| format!("checker cannot join: {e}"))?;
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


/// Give the calling thread (a heartbeat sender or the failure detector)
/// real-time priority where the OS allows it, as a deployment would pin or
/// prioritise them: on two shared cores a normal thread can wait longer than
/// a 5 ms timeout to be scheduled, which is a false positive. Both threads
/// sleep almost all the time. Without the privilege this is a no-op.
pub(crate) fn prioritise_current_thread() -> bool {
    #[cfg(target_os = "linux")]
    unsafe {
        let param = libc::sched_param { sched_priority: 10 };
        libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
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
) -> ThreadResult {
    let node = ComputeNode::with_memory_view(fabric, &store, layout, failed.clone(), ctl.views[cn as usize].clone());
    let mut seeds = Rng::new(seed ^ ((cn as u64) << 40));
    let errors: Rc<RefCell<Vec<String>>> = Rc::default();
    let mut outcomes: Vec<OutcomeHandle> = Vec::new();
    let mut handles = Vec::new();
    // Unlocks still landing; awaited before the node stops, so no lock is
    // left behind and `active` drains to zero (a stop-the-world drain waits for it).
    let unlocking: Rc<RefCell<Vec<tokio::task::JoinHandle<()>>>> = Rc::default();
    for &id in &ids {
        let mut coord = node.coordinator(id);
        let mut client = spec.client(id as u32, seeds.next_u64());
        outcomes.push(client.handle());
        let (ctl, errors, unlocking, failed) = (ctl.clone(), errors.clone(), unlocking.clone(), failed.clone());
        handles.push(tokio::task::spawn_local(async move {
            let mut hist = new_hist();
            while !ctl.stop.load(Ordering::Relaxed) {
                // A fenced node stops: once its ids are in failed-ids, others
                // steal its locks, so it must not start anything more.
                if failed.contains(id) {
                    break;
                }
                // Announce first, then check: a drainer that saw no activity
                // can then be sure nobody starts behind its back.
                ctl.active[cn as usize].fetch_add(1, Ordering::SeqCst);
                if ctl.paused.load(Ordering::SeqCst) > 0 {
                    ctl.active[cn as usize].fetch_sub(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_micros(100)).await;
                    continue;
                }
                let t0 = Instant::now();
                let began_ns = ctl.now_ns();
                let r = client.run_one(&mut coord).await;
                let revoked_ns = ctl.revoked_at_ns[cn as usize].load(Ordering::SeqCst);
                if matches!(r, Ok(true)) && revoked_ns != 0 && revoked_ns < began_ns {
                    ctl.fenced_acks.fetch_add(1, Ordering::SeqCst);
                }
                // Drained means quiet: the transaction counts as active until
                // its unlocks land, without holding up the next one.
                let unlocks = coord.take_unlocks();
                let c2 = ctl.clone();
                let h = tokio::task::spawn_local(async move {
                    unlocks.await;
                    c2.active[cn as usize].fetch_sub(1, Ordering::SeqCst);
                });
                {
                    let mut u = unlocking.borrow_mut();
                    u.retain(|h| !h.is_finished());
                    u.push(h);
                }
                let measuring = ctl.measuring.load(Ordering::Relaxed);
                match r {
                    Ok(true) if measuring => {
                        ctl.committed.fetch_add(1, Ordering::Relaxed);
                        ctl.committed_by_node[cn as usize].fetch_add(1, Ordering::Relaxed);
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
            (hist, coord.stats.clone())
        }));
    }
    let work = async {
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
    };
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
    ThreadResult { hist, stats, outcome, errors }
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
    let mut swept_total = 0;
    // Versions the membership's recovery coordinator mints must never repeat:
    // every recovery gets its own block of the 48-bit counter.
    const RC_VERSION_BLOCK: u64 = 1 << 24;
    let mut rc_versions = 0u64;
    let rc_id = {
        let mut m = membership.lock().expect("membership lock");
        match m.step(ctl.now_ns(), Event::Join { node: MEMBERSHIP_NODE, coordinators: 1 }).pop() {
            Some(Command::AssignIds { ids, .. }) => ids[0],
            other => return Err(format!("membership cannot get its own coordinator id: {other:?}")),
        }
    };
    let fabric = backend.join(MEMBERSHIP_NODE).await.map_err(|e| format!("membership cannot join: {e}"))?;
    let tick = Duration::from_micros(100);
    while !ctl.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(tick).await;
        let mut queue: std::collections::VecDeque<Command> = {
            let mut m = membership.lock().expect("membership lock");
            // The membership node itself runs here: it never times out.
            m.step(ctl.now_ns(), Event::Heartbeat { node: MEMBERSHIP_NODE });
            m.step(ctl.now_ns(), Event::Tick).into()
        };
        // In order: NotifyFailed must not wait behind a stray-lock scan.
        while let Some(cmd) = queue.pop_front() {
            let next = match cmd {
                Command::Revoke { node } => {
                    logs.lock().unwrap().entry(node).or_default().detected_ns = ctl.now_ns();
                    backend.revoke(node).await.map_err(|e| format!("revocation of node {node} failed: {e}"))?;
                    let now = ctl.now_ns();
                    logs.lock().unwrap().entry(node).or_default().revoked_ns = now;
                    if let Some(at) = ctl.revoked_at_ns.get(node as usize - 1) {
                        at.store(now, Ordering::SeqCst);
                    }
                    Event::RevokeAcked { node }
                }
                Command::Recover { node, ids, .. } => {
                    rc_versions += RC_VERSION_BLOCK;
                    // The embedded service runs the recovery coordinator itself.
                    let (found, fwd, back, scanned, stopped_ns) = match mode {
                        Mode::Pandora => {
                            let r = match &fabric {
                                AnyFabric::Inline(f) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).recover(&ids).await,
                                AnyFabric::Tcp(f) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).recover(&ids).await,
                            }
                            .map_err(|e| format!("log recovery of node {node} failed: {e}"))?;
                            (r.logs_found, r.rolled_forward, r.rolled_back, 0, 0)
                        }
                        Mode::Ford | Mode::Traditional => {
                            // Locks name no owner: stop the world, let every live
                            // coordinator's transaction finish, then recover.
                            let stop_at = ctl.now_ns();
                            ctl.paused.fetch_add(1, Ordering::SeqCst);
                            // Only live nodes drain: a crashed node's transactions never finish
                            // (and a falsely suspected one is revoked: its verbs no longer land).
                            // The end of the run does not cut the drain short: recovering
                            // owner-less locks beside a live transaction would release its locks.
                            let alive = |n: usize| membership.lock().expect("membership lock").status(n as u16 + 1) == Some(NodeStatus::Alive);
                            let give_up = Instant::now() + Duration::from_secs(30);
                            while ctl.active.iter().enumerate().any(|(n, a)| a.load(Ordering::SeqCst) > 0 && alive(n)) {
                                if Instant::now() > give_up {
                                    return Err(format!("{mode} recovery of node {node}: live transactions did not drain in 30 s"));
                                }
                                tokio::time::sleep(Duration::from_micros(50)).await;
                            }
                            let r = match (&fabric, mode) {
                                (AnyFabric::Inline(f), Mode::Ford) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).recover_ford(&ids).await,
                                (AnyFabric::Tcp(f), Mode::Ford) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).recover_ford(&ids).await,
                                (AnyFabric::Inline(f), _) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).recover_traditional(&ids).await,
                                (AnyFabric::Tcp(f), _) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).recover_traditional(&ids).await,
                            }
                            .map_err(|e| format!("{mode} recovery of node {node} failed: {e}"))?;
                            ctl.paused.fetch_sub(1, Ordering::SeqCst);
                            (r.locks_found, r.rolled_forward, r.rolled_back, r.slots_scanned, ctl.now_ns() - stop_at)
                        }
                    };
                    let mut ls = logs.lock().unwrap();
                    let l = ls.entry(node).or_default();
                    l.recovered_ns = ctl.now_ns();
                    l.logs_found += found;
                    l.rolled_forward += fwd;
                    l.rolled_back += back;
                    l.slots_scanned += scanned;
                    l.world_stopped_ns += stopped_ns;
                    Event::RecoveryDone { node }
                }
                Command::NotifyFailed { ids } => {
                    for &id in &ids {
                        failed.insert(id);
                    }
                    let now = ctl.now_ns();
                    let counts: Vec<u64> = ctl.committed_by_node.iter().map(|c| c.load(Ordering::SeqCst)).collect();
                    let owner = membership.lock().expect("membership lock").owner_of(ids[0]);
                    if let Some(node) = owner {
                        let mut ls = logs.lock().unwrap();
                        let l = ls.entry(node).or_default();
                        l.notified_ns = now;
                        l.committed_at_notify = counts;
                    }
                    continue;
                }
                Command::ScanStrayLocks { ids } => {
                    let swept = match &fabric {
                        AnyFabric::Inline(f) => sweep_stray_locks(f, &layout, &failed).await,
                        AnyFabric::Tcp(f) => sweep_stray_locks(f, &layout, &failed).await,
                    }
                    .map_err(|e| format!("stray-lock scan failed: {e}"))?;
                    swept_total += swept;
                    // No version minted by a recycled id may survive its reuse.
                    rc_versions += RC_VERSION_BLOCK;
                    let retired = match &fabric {
                        AnyFabric::Inline(f) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).retire_versions(&ids).await,
                        AnyFabric::Tcp(f) => RecoveryCoordinator::new(f, layout.clone(), rc_id).with_version_counter(rc_versions).retire_versions(&ids).await,
                    }
                    .map_err(|e| format!("retiring the versions of recycled ids failed: {e}"))?;
                    if retired.is_none() {
                        continue; // ids stay failed; a later scan may retry
                    }
                    Event::ScanDone { ids }
                }
                Command::AssignIds { .. } | Command::Reject { .. } => continue,
            };
            let more = membership.lock().expect("membership lock").step(ctl.now_ns(), next);
            queue.extend(more);
        }
    }
    // Stray locks nobody touched (NotLogged transactions of the failed node).
    if failed.count() > 0 {
        let swept = match &fabric {
            AnyFabric::Inline(f) => sweep_stray_locks(f, &layout, &failed).await,
            AnyFabric::Tcp(f) => sweep_stray_locks(f, &layout, &failed).await,
        }
        .map_err(|e| format!("stray-lock scan failed: {e}"))?;
        swept_total += swept;
    }
    for l in logs.lock().unwrap().values_mut() {
        l.swept = swept_total;
    }
    Ok(())
}

/// Load, run and (optionally) check. The backend must be fresh (empty).
pub fn run(cfg: &RunConfig, backend: &Backend) -> Result<RunResult, String> {
    cfg.validate()?;
    let store = cfg.store_config();
    let layout = Arc::new(Layout::new(&store)?);
    load(backend, &layout, &cfg.workload)?;

    // Slots for new incarnations after the initial nodes: replacements of
    // crashed nodes (`respawn`) and of falsely suspected ones (always).
    let planned_crashes = cfg.crash.iter().count() + cfg.more_crashes.len();
    let n = cfg.compute_nodes as usize + if cfg.respawn { planned_crashes } else { 0 } + REJOIN_SLOTS;
    let ctl = Arc::new(Control {
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        committed: AtomicU64::new(0),
        aborted: AtomicU64::new(0),
        committed_by_node: (0..n).map(|_| AtomicU64::new(0)).collect(),
        crash: (0..n).map(|_| AtomicBool::new(false)).collect(),
        paused: AtomicU64::new(0),
        active: (0..n).map(|_| AtomicU64::new(0)).collect(),
        views: (0..n).map(|_| MemoryView::default()).collect(),
        revoked_at_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
        stalled_until_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
        fenced_acks: AtomicU64::new(0),
        base: Instant::now(),
    });
    let membership = Arc::new(Mutex::new(Membership::new(MembershipConfig {
        heartbeat_timeout_ns: cfg.heartbeat_timeout.as_nanos() as u64,
        id_space: store.log_slots,
        ..MembershipConfig::default()
    })));
    let failed = FailedIds::new();
    let failure_logs: Arc<Mutex<BTreeMap<u16, FailureLog>>> = Arc::default();
    let heartbeat_every = (cfg.heartbeat_timeout / 5).max(Duration::from_micros(100));

    let membership_thread = {
        let mode = cfg.mode;
        let (backend, layout, ctl, m, failed, log) =
            (backend.clone(), layout.clone(), ctl.clone(), membership.clone(), failed.clone(), failure_logs.clone());
        std::thread::Builder::new()
            .name("membership".into())
            .spawn(move || {
                prioritise_current_thread();
                block_on_local(membership_loop(mode, backend, layout, ctl, m, failed, log))
            })
            .map_err(|e| e.to_string())?
    };

    type NodeThreads = (std::thread::JoinHandle<Result<ThreadResult, String>>, std::thread::JoinHandle<()>);
    // Start compute node `cn` (0-based; its node id, i.e. its incarnation, is
    // cn + 1): it registers with the memory nodes, then joins the membership
    // and heartbeats, then runs one client per coordinator. Registering first
    // means the detector never judges a node that has no keys yet; and a
    // verdict that still crosses a registration is safe, since a revoked
    // incarnation can never register again.
    let spawn_node = |cn: u16| -> Result<NodeThreads, String> {
        let node = cn + 1;
        let (reg_tx, reg_rx) = std::sync::mpsc::channel::<bool>();
        let (joined_tx, joined_rx) = std::sync::mpsc::channel::<Vec<Command>>();
        let (ids_tx, ids_rx) = std::sync::mpsc::channel::<Vec<u16>>();
        let heartbeat = spawn_heartbeat(node, ctl.clone(), membership.clone(), cfg.coordinators, heartbeat_every, reg_rx, joined_tx)?;
        let (backend, store, layout) = (backend.clone(), store.clone(), layout.clone());
        let (ctl, spec) = (ctl.clone(), cfg.workload.clone());
        let (failed, seed) = (failed.clone(), cfg.seed);
        let compute =
            std::thread::Builder::new()
                .name(format!("compute-{node}"))
                .spawn(move || {
                    block_on_local(async move {
                        let fabric = backend.join(node).await;
                        let _ = reg_tx.send(fabric.is_ok());
                        let fabric = fabric.map_err(|e| format!("compute node {node} cannot register: {e}"))?;
                        let ids = ids_rx.recv().map_err(|_| format!("compute node {node} was not admitted"))?;
                        Ok(match fabric {
                            AnyFabric::Inline(f) => drive(f, store, layout, ctl, spec, cn, ids, seed, failed).await,
                            AnyFabric::Tcp(f) => drive(f, store, layout, ctl, spec, cn, ids, seed, failed).await,
                        })
                    })
                })
                .map_err(|e| e.to_string())?;
        match joined_rx.recv().ok().and_then(|mut c| c.pop()) {
            Some(Command::AssignIds { ids, .. }) => {
                let _ = ids_tx.send(ids);
                Ok((compute, heartbeat))
            }
            None => Err(compute.join().map_err(|_| "a compute thread panicked".to_string())?.err().unwrap_or_default()),
            other => Err(format!("compute node {node} was not admitted: {other:?}")),
        }
    };
    let mut threads = Vec::new();
    let mut heartbeats = Vec::new();
    for cn in 0..cfg.compute_nodes {
        let (compute, heartbeat) = spawn_node(cn)?;
        threads.push((cn, compute));
        heartbeats.push(heartbeat);
    }
    // Crashed nodes waiting for a replacement (respawn), and the next free slot.
    let mut to_replace: Vec<u16> = Vec::new();
    let mut replaced: std::collections::BTreeSet<u16> = std::collections::BTreeSet::new();
    let mut next_slot = cfg.compute_nodes;
    // Which incarnation replaced which node (1-based): a planned crash hits
    // the node's current incarnation, even if a false suspicion replaced it.
    let mut successor: std::collections::HashMap<u16, u16> = std::collections::HashMap::new();
    let current = |successor: &std::collections::HashMap<u16, u16>, mut n: u16| {
        while let Some(&s) = successor.get(&n) {
            n = s;
        }
        n
    };
    let mut crash_target: Option<u16> = None;
    let mut crashed_targets: Vec<u16> = Vec::new();
    std::thread::sleep(cfg.warmup);
    ctl.measuring.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let start_ns = ctl.now_ns();
    const BUCKET: Duration = Duration::from_millis(10);
    let sampler = {
        let ctl = ctl.clone();
        std::thread::Builder::new().name("timeline".into()).spawn(move || sample_timeline(ctl, BUCKET)).map_err(|e| e.to_string())?
    };
    let mut last = (start, 0u64);
    let mut crash_at: Option<(u64, Vec<u64>, f64)> = None;
    let mut pending_crashes: Vec<CrashPlan> = cfg.more_crashes.clone();
    pending_crashes.sort_by_key(|c| c.after);
    let mut pending_suspects: Vec<SuspectPlan> = cfg.suspect.clone();
    pending_suspects.sort_by_key(|p| p.after);
    let mut more_crash_events: Vec<(f64, String)> = Vec::new();
    let mut memory_timeline: Option<MemoryFailureTimeline> = None;
    if let Some(f) = &cfg.fail_memory {
        // Runs the whole reconfiguration from this thread, as the membership
        // service would, while compute threads keep running.
        std::thread::sleep(f.after);
        memory_timeline = Some(fail_memory_node(cfg, f, backend, &layout, &ctl, start)?);
    }
    while start.elapsed() < cfg.duration {
        let left = cfg.duration.saturating_sub(start.elapsed());
        let mut nap = left.min(if cfg.progress { cfg.progress_every } else { left });
        if let (Some(c), None) = (&cfg.crash, &crash_at) {
            nap = nap.min(c.after.saturating_sub(start.elapsed()));
        }
        if let Some(c) = pending_crashes.first() {
            nap = nap.min(c.after.saturating_sub(start.elapsed()));
        }
        if let Some(p) = pending_suspects.first() {
            nap = nap.min(p.after.saturating_sub(start.elapsed()));
        }
        // Look for nodes to bring back often: a suspected node's share of
        // the cluster is idle until its new incarnation runs.
        nap = nap.min(Duration::from_millis(1));
        std::thread::sleep(nap);
        if let (Some(c), None) = (&cfg.crash, &crash_at) {
            if start.elapsed() >= c.after {
                let counts: Vec<u64> = ctl.committed_by_node.iter().map(|x| x.load(Ordering::SeqCst)).collect();
                let target = current(&successor, c.node + 1);
                ctl.crash[target as usize - 1].store(true, Ordering::SeqCst);
                crash_at = Some((ctl.now_ns(), counts, start.elapsed().as_secs_f64()));
                crash_target = Some(target);
                to_replace.push(target);
                crashed_targets.push(target);
                if cfg.progress {
                    let was = if target != c.node + 1 { format!(", the incarnation that replaced node {}", c.node + 1) } else { String::new() };
                    eprintln!("  [{:>5.1}s] CRASH compute node {target}{was} (its coordinators stop mid-transaction)", start.elapsed().as_secs_f64());
                }
            }
        }
        // A recovered node comes back as a new incarnation (fresh node id,
        // coordinator ids and keys): a crashed one if `respawn`, a falsely
        // suspected one always (it is alive, fenced, and has stopped).
        let recovered: Vec<u16> = {
            let logs = failure_logs.lock().unwrap();
            logs.iter().filter(|(n, l)| l.notified_ns > 0 && **n <= next_slot && !replaced.contains(*n)).map(|(n, _)| *n).collect()
        };
        for dead in recovered {
            let crashed = to_replace.contains(&dead);
            if crashed && !cfg.respawn {
                continue;
            }
            if next_slot as usize >= n {
                eprintln!("  [{:>5.1}s] node {dead} cannot come back: all {REJOIN_SLOTS} rejoin slots are used", start.elapsed().as_secs_f64());
                replaced.insert(dead);
                continue;
            }
            let (compute, heartbeat) = match spawn_node(next_slot) {
                Ok(t) => t,
                Err(e) => {
                    // Out of coordinator ids until a stray-lock scan recycles some: try again later.
                    eprintln!("  [{:>5.1}s] node {dead} cannot come back yet: {e}", start.elapsed().as_secs_f64());
                    continue;
                }
            };
            replaced.insert(dead);
            successor.insert(dead, next_slot + 1);
            to_replace.retain(|&x| x != dead);
            threads.push((next_slot, compute));
            heartbeats.push(heartbeat);
            let why = if crashed { "replaces crashed" } else { "rejoins for suspected" };
            more_crash_events.push((start.elapsed().as_secs_f64(), format!("node {} {why} node {dead}", next_slot + 1)));
            if cfg.progress {
                eprintln!("  [{:>5.1}s] compute node {} {why} node {dead} (new incarnation: node id, coordinator ids, keys)", start.elapsed().as_secs_f64(), next_slot + 1);
            }
            next_slot += 1;
        }
        while pending_suspects.first().is_some_and(|p| start.elapsed() >= p.after) {
            let p = pending_suspects.remove(0);
            if let Some(at) = ctl.stalled_until_ns.get(p.node as usize) {
                at.store(ctl.now_ns() + p.pause.as_nanos() as u64, Ordering::SeqCst);
                more_crash_events.push((start.elapsed().as_secs_f64(), format!("node {} stalls (heartbeats paused)", p.node + 1)));
                if cfg.progress {
                    eprintln!(
                        "  [{:>5.1}s] compute node {}'s heartbeat thread stalls for {:.0} ms (alive and committing, but silent)",
                        start.elapsed().as_secs_f64(),
                        p.node + 1,
                        p.pause.as_secs_f64() * 1e3
                    );
                }
            }
        }
        while pending_crashes.first().is_some_and(|c| start.elapsed() >= c.after) {
            let c = pending_crashes.remove(0);
            let target = current(&successor, c.node + 1);
            ctl.crash[target as usize - 1].store(true, Ordering::SeqCst);
            to_replace.push(target);
            crashed_targets.push(target);
            more_crash_events.push((start.elapsed().as_secs_f64(), format!("compute node {target} crashes")));
            if cfg.progress {
                eprintln!("  [{:>5.1}s] CRASH compute node {target}", start.elapsed().as_secs_f64());
            }
        }
        if cfg.progress && last.0.elapsed() >= cfg.progress_every.mul_f64(0.99) {
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
    let timeline_counts = sampler.join().map_err(|_| "the timeline sampler panicked".to_string())?;
    await_recoveries(&ctl, &membership, next_slot);
    ctl.stop.store(true, Ordering::SeqCst);
    let mut memory_failure = memory_timeline;

    let mut hist = new_hist();
    let mut stats = CoordinatorStats::default();
    let mut outcome = Outcome::empty(&cfg.workload);
    let mut errors = Vec::new();
    // Nodes the failure detector declared failed. A crashed node's errors are
    // expected; so are those of a false positive: the node is fenced off
    // (its verbs fail with "access revoked") and recovered like a crashed
    // one, which is the point of active-link termination (Cor1).
    let declared: Vec<u16> = failure_logs.lock().unwrap().keys().copied().collect();
    for (cn, t) in threads {
        let r = t.join().map_err(|_| "a compute thread panicked".to_string())??;
        hist.add(&r.hist).expect("same bounds");
        stats.merge(&r.stats);
        outcome.merge(&r.outcome);
        if !declared.contains(&(cn as u16 + 1)) {
            errors.extend(r.errors);
        }
    }
    for h in heartbeats {
        h.join().map_err(|_| "a heartbeat thread panicked".to_string())?;
    }
    membership_thread.join().map_err(|_| "the membership thread panicked".to_string())??;
    if let Some(m) = memory_failure.as_mut() {
        m.aborted_by_failure = stats.aborts_by_reason.get(&tandem_dkvs::AbortReason::MemoryNodeFailed).copied().unwrap_or(0);
    }
    let committed = ctl.committed.load(Ordering::SeqCst);
    let aborted = ctl.aborted.load(Ordering::SeqCst);
    let fenced_acks = ctl.fenced_acks.load(Ordering::SeqCst);
    if fenced_acks > 0 {
        errors.push(format!("{fenced_acks} commits acknowledged by fenced incarnations (transactions begun after their node's revocation)"));
    }
    let logs = failure_logs.lock().unwrap().clone();
    let crashed_node = crash_target;
    let crashed: Vec<u16> = crashed_targets.clone();
    let false_positives: Vec<u16> = logs.keys().copied().filter(|n| !crashed.contains(n)).collect();
    let recovered_nodes: Vec<u16> = crashed.iter().copied().filter(|n| logs.get(n).is_some_and(|l| l.notified_ns > 0)).collect();
    let fl = crashed_node.and_then(|n| logs.get(&n).cloned()).unwrap_or_default();
    let recovery = match (crash_target, &crash_at) {
        (Some(target), Some((crash_ns, before, crash_s))) => {
            if fl.notified_ns == 0 {
                errors.push(format!("compute node {target} crashed but recovery did not finish before the run ended"));
                None
            } else if fl.detected_ns < *crash_ns {
                // Suspected (and fenced, recovered, replaced) before the planned
                // crash: the crash hit a node that had already stopped. Safe,
                // but there is no crash timeline to report.
                None
            } else {
                let survivors = |v: &[u64]| -> u64 { v.iter().enumerate().filter(|(i, _)| *i + 1 != target as usize).map(|(_, x)| x).sum() };
                let during = survivors(&fl.committed_at_notify).saturating_sub(survivors(before));
                let window_s = (fl.notified_ns - crash_ns) as f64 / 1e9;
                Some(RecoveryTimeline {
                    crashed_node: target,
                    detect_us: (fl.detected_ns.saturating_sub(*crash_ns)) as f64 / 1e3,
                    link_termination_us: (fl.revoked_ns - fl.detected_ns) as f64 / 1e3,
                    log_recovery_us: (fl.recovered_ns - fl.revoked_ns) as f64 / 1e3,
                    total_us: window_s * 1e6,
                    logs_found: fl.logs_found,
                    rolled_forward: fl.rolled_forward,
                    rolled_back: fl.rolled_back,
                    stray_locks_stolen: stats.locks_stolen,
                    stray_locks_swept: fl.swept,
                    slots_scanned: fl.slots_scanned,
                    world_stopped_us: fl.world_stopped_ns as f64 / 1e3,
                    survivors_tps_before: survivors(before) as f64 / crash_s.max(1e-9),
                    survivors_tps_during_recovery: during as f64 / window_s.max(1e-9),
                    survivors_commits_during_recovery: during,
                })
            }
        }
        _ => None,
    };
    let at = |ns: u64| ns.saturating_sub(start_ns) as f64 / 1e9;
    let mut events = Vec::new();
    if let (Some(target), Some((_, _, crash_s))) = (crash_target, &crash_at) {
        events.push((*crash_s, format!("compute node {target} crashes")));
        if fl.detected_ns > 0 {
            events.push((at(fl.detected_ns), "failure detected".to_string()));
        }
        if fl.notified_ns > 0 {
            events.push((at(fl.notified_ns), "recovered".to_string()));
        }
    }
    for n in &false_positives {
        if let Some(l) = logs.get(n) {
            events.push((at(l.detected_ns), format!("node {n} suspected (false positive)")));
        }
    }
    if let Some(m) = &memory_failure {
        events.extend(m.marks.iter().cloned());
    }
    events.extend(more_crash_events);
    let timeline = Timeline { bucket_ms: BUCKET.as_millis() as u64, committed: timeline_counts, events };
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
        committed_by_type: outcome.ledger().map(|l| l.committed_by_type.iter().map(|(k, v)| (k.to_string(), *v)).collect()).unwrap_or_default(),
        rolled_back_by_application: outcome.ledger().map(|l| l.rolled_back).unwrap_or(0),
        errors,
        check_passed,
        violations,
        recovery,
        memory_failure,
        timeline,
        recovered_nodes,
        false_positives,
        incarnations_started: (next_slot - cfg.compute_nodes) as usize,
        fenced_acks,
    })
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
        let cmds = m.lock().expect("membership lock").step(ctl.now_ns(), Event::Join { node, coordinators });
        let admitted = matches!(cmds.last(), Some(Command::AssignIds { .. }));
        let _ = joined.send(cmds);
        let alive = || m.lock().expect("membership lock").status(node) == Some(NodeStatus::Alive);
        while admitted && !ctl.stop.load(Ordering::Relaxed) && !ctl.crash[node as usize - 1].load(Ordering::Relaxed) && alive() {
            std::thread::sleep(every);
            let stalled = ctl.stalled_until_ns[node as usize - 1].load(Ordering::SeqCst);
            if stalled > ctl.now_ns() {
                std::thread::sleep(Duration::from_nanos(stalled - ctl.now_ns().min(stalled)));
            }
            m.lock().expect("membership lock").step(ctl.now_ns(), Event::Heartbeat { node });
        }
    };
    std::thread::Builder::new().name(format!("heartbeat-{node}")).spawn(body).map_err(|e| e.to_string())
}

/// Pause new transactions and wait until every node's in-flight ones ended.
fn pause_and_drain(ctl: &Control) {
    ctl.paused.fetch_add(1, Ordering::SeqCst);
    while ctl.active.iter().any(|a| a.load(Ordering::SeqCst) > 0) {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// DESIGN.md §4.6 on real threads: lose memory node `f.node`; in-flight
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
        return Err("memory-node failure injection needs the in-process fabric (--fabric sim)".into());
    };
    let committed = || ctl.committed.load(Ordering::SeqCst);
    let tps_before = committed() as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let mut marks = vec![(start.elapsed().as_secs_f64(), format!("memory node {} lost", f.node))];
    cluster.nodes()[f.node as usize].fail();
    let t = Instant::now();
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
        let fabric = cluster.join(MEMBERSHIP_NODE - 1).map_err(|e| e.to_string())?;
        tandem_dkvs::repair::rereplicate(&fabric, layout, f.node, &view).await.map_err(|e| e.to_string())
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
    std::thread::sleep(cfg.duration.saturating_sub(start.elapsed()).min(Duration::from_millis(300)));
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
