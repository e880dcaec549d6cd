//! [`run`] as the steps a reader can follow: set up (load, the control
//! block, the membership thread), start the compute nodes, run (the
//! measured interval, injecting the planned faults as they fall due and
//! bringing recovered nodes back), drain (stop and join every thread),
//! then report and check.

use std::collections::{BTreeSet, HashMap};
use std::thread::JoinHandle;

use super::*;

/// A compute node's threads: its coordinators, its heartbeat.
type NodeThreads = (JoinHandle<Result<ThreadResult, String>>, JoinHandle<()>);

/// Width of a timeline bucket.
const BUCKET: Duration = Duration::from_millis(10);

/// Load, run and (optionally) check. The backend must be fresh (empty).
pub fn run(cfg: &RunConfig, backend: &Backend) -> Result<RunResult, String> {
    cfg.validate()?;
    let mut r = Run::set_up(cfg, backend)?;
    for cn in 0..cfg.compute_nodes {
        r.start_node(cn)?;
    }
    std::thread::sleep(cfg.warmup);
    let measured = r.measure()?;
    let drained = r.drain()?;
    r.report(measured, drained)
}

/// The planned faults, and what became of them.
#[derive(Default)]
struct Faults {
    /// Crashed nodes waiting for a replacement (`respawn`).
    to_replace: Vec<u16>,
    /// Nodes already brought back (or given up on).
    replaced: BTreeSet<u16>,
    /// Which incarnation replaced which node (1-based).
    successor: HashMap<u16, u16>,
    /// The planned crash of `cfg.crash`: its target, and when it struck
    /// (ns, commits per node then, seconds into the run).
    crash_target: Option<u16>,
    crash_at: Option<(u64, Vec<u64>, f64)>,
    /// Every node crashed on purpose.
    crashed: Vec<u16>,
    pending_crashes: Vec<CrashPlan>,
    pending_suspects: Vec<SuspectPlan>,
    /// Timeline marks of the crashes, stalls and rejoins.
    events: Vec<(f64, String)>,
}

impl Faults {
    /// Node `n`'s current incarnation: a planned crash hits it, even if a
    /// false suspicion replaced `n`.
    fn current(&self, mut n: u16) -> u16 {
        while let Some(&s) = self.successor.get(&n) {
            n = s;
        }
        n
    }
}

/// What the measured interval gave: its length, the timeline and the
/// memory-node failure, if one was injected.
struct Measured {
    elapsed: f64,
    timeline_counts: Vec<u64>,
    memory_failure: Option<MemoryFailureTimeline>,
    occupancy: Vec<occupancy::Occupancy>,
    /// The compute threads' CPU ns over the interval.
    cpu_ns: Option<u64>,
}

/// What the compute threads left.
struct Drained {
    hist: Histogram<u64>,
    stats: CoordinatorStats,
    outcome: Outcome,
    errors: Vec<String>,
    traces: Vec<Trace>,
}

/// One run in progress.
struct Run<'a> {
    cfg: &'a RunConfig,
    backend: &'a Backend,
    store: StoreConfig,
    layout: Arc<Layout>,
    ctl: Arc<Control>,
    membership: Arc<Mutex<Membership>>,
    failed: FailedIds,
    failure_logs: Arc<Mutex<BTreeMap<u16, FailureLog>>>,
    heartbeat_every: Duration,
    membership_thread: Option<JoinHandle<Result<(), String>>>,
    /// Node slots: the initial nodes, then replacements of crashed ones
    /// (`respawn`) and of falsely suspected ones (always).
    slots: usize,
    next_slot: u16,
    threads: Vec<(u16, JoinHandle<Result<ThreadResult, String>>)>,
    heartbeats: Vec<JoinHandle<()>>,
    faults: Faults,
    start: Instant,
    start_ns: u64,
}

impl<'a> Run<'a> {
    /// Load the workload, build the control block and start the membership thread.
    fn set_up(cfg: &'a RunConfig, backend: &'a Backend) -> Result<Run<'a>, String> {
        let store = cfg.store_config();
        let layout = Arc::new(Layout::new(&store)?);
        load(backend, &layout, &cfg.workload)?;
        let planned_crashes = cfg.crash.iter().count() + cfg.more_crashes.len();
        let slots = cfg.compute_nodes as usize
            + if cfg.respawn { planned_crashes } else { 0 }
            + REJOIN_SLOTS;
        let membership = Arc::new(Mutex::new(Membership::new(MembershipConfig {
            heartbeat_timeout_ns: cfg.heartbeat_timeout.as_nanos() as u64,
            id_space: store.log_slots,
            ..MembershipConfig::default()
        })));
        let mut faults = Faults {
            pending_crashes: cfg.more_crashes.clone(),
            pending_suspects: cfg.suspect.clone(),
            ..Faults::default()
        };
        faults.pending_crashes.sort_by_key(|c| c.after);
        faults.pending_suspects.sort_by_key(|p| p.after);
        let mut r = Run {
            cfg,
            backend,
            store,
            layout,
            ctl: Arc::new(Control::new(slots)),
            membership,
            failed: FailedIds::new(),
            failure_logs: Arc::default(),
            heartbeat_every: (cfg.heartbeat_timeout / 5).max(Duration::from_micros(100)),
            membership_thread: None,
            slots,
            next_slot: cfg.compute_nodes,
            threads: Vec::new(),
            heartbeats: Vec::new(),
            faults,
            start: Instant::now(),
            start_ns: 0,
        };
        r.membership_thread = Some(r.spawn_membership()?);
        Ok(r)
    }

    fn spawn_membership(&self) -> Result<JoinHandle<Result<(), String>>, String> {
        let mode = self.cfg.mode;
        let (backend, layout, ctl) = (self.backend.clone(), self.layout.clone(), self.ctl.clone());
        let (m, failed, log) = (
            self.membership.clone(),
            self.failed.clone(),
            self.failure_logs.clone(),
        );
        std::thread::Builder::new()
            .name("membership".into())
            .spawn(move || {
                prioritise_current_thread();
                block_on_local(membership_loop(mode, backend, layout, ctl, m, failed, log))
            })
            .map_err(|e| e.to_string())
    }

    /// Start compute node `cn` (0-based; its node id, i.e. its incarnation,
    /// is cn + 1): it registers with the memory nodes, then joins the
    /// membership and heartbeats, then runs one client per coordinator.
    /// Registering first means the detector never judges a node that has
    /// no keys yet; and a verdict that still crosses a registration is
    /// safe, since a revoked incarnation can never register again.
    fn spawn_node(&self, cn: u16) -> Result<NodeThreads, String> {
        let node = cn + 1;
        let (reg_tx, reg_rx) = std::sync::mpsc::channel::<bool>();
        let (joined_tx, joined_rx) = std::sync::mpsc::channel::<Vec<Command>>();
        let (ids_tx, ids_rx) = std::sync::mpsc::channel::<Vec<u16>>();
        let heartbeat = spawn_heartbeat(
            node,
            self.ctl.clone(),
            self.membership.clone(),
            self.cfg.coordinators,
            self.heartbeat_every,
            reg_rx,
            joined_tx,
        )?;
        let (backend, store, layout) = (
            self.backend.clone(),
            self.store.clone(),
            self.layout.clone(),
        );
        let (ctl, spec) = (self.ctl.clone(), self.cfg.workload.clone());
        let (failed, seed) = (self.failed.clone(), self.cfg.seed);
        let record = self.cfg.floor;
        let compute = std::thread::Builder::new()
            .name(format!("compute-{node}"))
            .spawn(move || {
                block_on_local(async move {
                    let fabric = backend.join(node).await;
                    let _ = reg_tx.send(fabric.is_ok());
                    let fabric =
                        fabric.map_err(|e| format!("compute node {node} cannot register: {e}"))?;
                    let ids = ids_rx
                        .recv()
                        .map_err(|_| format!("compute node {node} was not admitted"))?;
                    Ok(match fabric {
                        AnyFabric::Inline(f) => {
                            drive(f, store, layout, ctl, spec, cn, ids, seed, failed, record).await
                        }
                        AnyFabric::Tcp(f) => {
                            drive(f, store, layout, ctl, spec, cn, ids, seed, failed, record).await
                        }
                    })
                })
            })
            .map_err(|e| e.to_string())?;
        match joined_rx.recv().ok().and_then(|mut c| c.pop()) {
            Some(Command::AssignIds { ids, .. }) => {
                let _ = ids_tx.send(ids);
                Ok((compute, heartbeat))
            }
            None => Err(compute
                .join()
                .map_err(|_| "a compute thread panicked".to_string())?
                .err()
                .unwrap_or_default()),
            other => Err(format!("compute node {node} was not admitted: {other:?}")),
        }
    }

    fn start_node(&mut self, cn: u16) -> Result<(), String> {
        let (compute, heartbeat) = self.spawn_node(cn)?;
        self.threads.push((cn, compute));
        self.heartbeats.push(heartbeat);
        Ok(())
    }

    fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn say(&self, what: &str) {
        if self.cfg.progress {
            eprintln!("  [{:>5.1}s] {what}", self.secs());
        }
    }

    /// The measured interval: inject the faults as they fall due, bring
    /// recovered nodes back, print progress; then wait for recoveries
    /// under way and stop the clients.
    fn measure(&mut self) -> Result<Measured, String> {
        let mut cpu = cpu::CpuWindow::open(&self.threads);
        self.ctl.measuring.store(true, Ordering::SeqCst);
        self.start = Instant::now();
        self.start_ns = self.ctl.now_ns();
        let sampler = {
            let ctl = self.ctl.clone();
            std::thread::Builder::new()
                .name("timeline".into())
                .spawn(move || sample_timeline(ctl, BUCKET))
                .map_err(|e| e.to_string())?
        };
        let occupancy = self.spawn_occupancy()?;
        let mut memory_failure = None;
        if let Some(f) = &self.cfg.fail_memory {
            // Runs the whole reconfiguration from this thread, as the
            // membership service would, while compute threads keep running.
            std::thread::sleep(f.after);
            memory_failure = Some(fail_memory_node(
                self.cfg,
                f,
                self.backend,
                &self.layout,
                &self.ctl,
                self.start,
            )?);
        }
        let mut last = (self.start, 0u64);
        while self.start.elapsed() < self.cfg.duration {
            std::thread::sleep(self.nap());
            self.planned_crash();
            self.bring_back();
            self.stalls_due();
            self.crashes_due();
            if self.cfg.progress && last.0.elapsed() >= self.cfg.progress_every.mul_f64(0.99) {
                last = self.progress(last);
            }
        }
        self.ctl.measuring.store(false, Ordering::SeqCst);
        let cpu_ns = cpu.close(&self.threads);
        let elapsed = self.secs();
        let timeline_counts = sampler
            .join()
            .map_err(|_| "the timeline sampler panicked".to_string())?;
        let occupancy = match occupancy {
            Some(t) => t
                .join()
                .map_err(|_| "the occupancy sampler panicked".to_string())?,
            None => Vec::new(),
        };
        await_recoveries(&self.ctl, &self.membership, self.next_slot);
        self.ctl.stop.store(true, Ordering::SeqCst);
        Ok(Measured {
            elapsed,
            timeline_counts,
            memory_failure,
            occupancy,
            cpu_ns,
        })
    }

    /// The occupancy sampler, if the run asks for one.
    fn spawn_occupancy(&self) -> Result<Option<JoinHandle<Vec<occupancy::Occupancy>>>, String> {
        let Some(every) = self.cfg.occupancy_every else {
            return Ok(None);
        };
        let Backend::Inline(cluster) = self.backend else {
            return Err(
                "table occupancy is sampled from in-process memory nodes (--fabric sim)".into(),
            );
        };
        let (ctl, cluster, layout, progress) = (
            self.ctl.clone(),
            cluster.clone(),
            self.layout.clone(),
            self.cfg.progress,
        );
        let t = std::thread::Builder::new()
            .name("occupancy".into())
            .spawn(move || occupancy::sample(ctl, cluster, layout, every, progress));
        t.map(Some).map_err(|e| e.to_string())
    }

    /// How long to sleep: until the next progress line or fault, and at
    /// most 1 ms, to bring nodes back early (a suspected node's share of
    /// the cluster is idle until its new incarnation runs).
    fn nap(&self) -> Duration {
        let (cfg, f) = (self.cfg, &self.faults);
        let left = cfg.duration.saturating_sub(self.start.elapsed());
        let mut nap = left.min(if cfg.progress {
            cfg.progress_every
        } else {
            left
        });
        let until = |after: Duration| after.saturating_sub(self.start.elapsed());
        if let (Some(c), None) = (&cfg.crash, &f.crash_at) {
            nap = nap.min(until(c.after));
        }
        if let Some(c) = f.pending_crashes.first() {
            nap = nap.min(until(c.after));
        }
        if let Some(p) = f.pending_suspects.first() {
            nap = nap.min(until(p.after));
        }
        nap.min(Duration::from_millis(1))
    }

    /// `cfg.crash`, once due: the crash whose recovery the run times.
    fn planned_crash(&mut self) {
        let Some(c) = &self.cfg.crash else { return };
        if self.faults.crash_at.is_some() || self.start.elapsed() < c.after {
            return;
        }
        let counts: Vec<u64> = self
            .ctl
            .committed_by_node
            .iter()
            .map(|x| x.load(Ordering::SeqCst))
            .collect();
        let target = self.faults.current(c.node + 1);
        self.ctl.crash[target as usize - 1].store(true, Ordering::SeqCst);
        let f = &mut self.faults;
        f.crash_at = Some((
            self.ctl.now_ns(),
            counts,
            self.start.elapsed().as_secs_f64(),
        ));
        f.crash_target = Some(target);
        f.to_replace.push(target);
        f.crashed.push(target);
        let was = if target != c.node + 1 {
            format!(", the incarnation that replaced node {}", c.node + 1)
        } else {
            String::new()
        };
        self.say(&format!(
            "CRASH compute node {target}{was} (its coordinators stop mid-transaction)"
        ));
    }

    /// A recovered node comes back as a new incarnation (fresh node id,
    /// coordinator ids and keys): a crashed one if `respawn`, a falsely
    /// suspected one always (it is alive, fenced, and has stopped).
    fn bring_back(&mut self) {
        let recovered: Vec<u16> = {
            let logs = self.failure_logs.lock().unwrap();
            logs.iter()
                .filter(|(n, l)| {
                    l.notified_ns > 0 && **n <= self.next_slot && !self.faults.replaced.contains(*n)
                })
                .map(|(n, _)| *n)
                .collect()
        };
        for dead in recovered {
            let crashed = self.faults.to_replace.contains(&dead);
            if crashed && !self.cfg.respawn {
                continue;
            }
            if self.next_slot as usize >= self.slots {
                eprintln!("  [{:>5.1}s] node {dead} cannot come back: all {REJOIN_SLOTS} rejoin slots are used", self.secs());
                self.faults.replaced.insert(dead);
                continue;
            }
            if let Err(e) = self.start_node(self.next_slot) {
                // Out of coordinator ids until a stray-lock scan recycles some: try again later.
                eprintln!(
                    "  [{:>5.1}s] node {dead} cannot come back yet: {e}",
                    self.secs()
                );
                continue;
            }
            let (new, why) = (
                self.next_slot + 1,
                if crashed {
                    "replaces crashed"
                } else {
                    "rejoins for suspected"
                },
            );
            let f = &mut self.faults;
            f.replaced.insert(dead);
            f.successor.insert(dead, new);
            f.to_replace.retain(|&x| x != dead);
            f.events.push((
                self.start.elapsed().as_secs_f64(),
                format!("node {new} {why} node {dead}"),
            ));
            self.say(&format!("compute node {new} {why} node {dead} (new incarnation: node id, coordinator ids, keys)"));
            self.next_slot += 1;
        }
    }

    /// Stall the heartbeats of the nodes whose false suspicion is due.
    fn stalls_due(&mut self) {
        while self
            .faults
            .pending_suspects
            .first()
            .is_some_and(|p| self.start.elapsed() >= p.after)
        {
            let p = self.faults.pending_suspects.remove(0);
            let Some(at) = self.ctl.stalled_until_ns.get(p.node as usize) else {
                continue;
            };
            at.store(
                self.ctl.now_ns() + p.pause.as_nanos() as u64,
                Ordering::SeqCst,
            );
            self.faults.events.push((
                self.secs(),
                format!("node {} stalls (heartbeats paused)", p.node + 1),
            ));
            self.say(&format!("compute node {}'s heartbeat thread stalls for {:.0} ms (alive and committing, but silent)", p.node + 1, p.pause.as_secs_f64() * 1e3));
        }
    }

    /// Crash the nodes of `cfg.more_crashes` that are due.
    fn crashes_due(&mut self) {
        while self
            .faults
            .pending_crashes
            .first()
            .is_some_and(|c| self.start.elapsed() >= c.after)
        {
            let c = self.faults.pending_crashes.remove(0);
            let target = self.faults.current(c.node + 1);
            self.ctl.crash[target as usize - 1].store(true, Ordering::SeqCst);
            self.faults.to_replace.push(target);
            self.faults.crashed.push(target);
            self.faults
                .events
                .push((self.secs(), format!("compute node {target} crashes")));
            self.say(&format!("CRASH compute node {target}"));
        }
    }

    /// One progress line; the new `(when, committed)` mark.
    fn progress(&self, last: (Instant, u64)) -> (Instant, u64) {
        let now = Instant::now();
        let c = self.ctl.committed.load(Ordering::Relaxed);
        let a = self.ctl.aborted.load(Ordering::Relaxed);
        let rate = (c - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
        let abort = 100.0 * a as f64 / (a + c).max(1) as f64;
        self.say(&format!(
            "{} {c:>10} committed  {rate:>10.0} tx/s  abort rate {abort:>5.1}%",
            self.cfg.mode
        ));
        (now, c)
    }

    /// Join every thread and gather what the compute threads measured. A
    /// node the failure detector declared failed may end in errors, as
    /// expected of a crashed node, and of a false positive too: it is
    /// fenced off (its verbs fail with "access revoked") and recovered like
    /// a crashed one, which is the point of active-link termination (Cor1).
    fn drain(&mut self) -> Result<Drained, String> {
        let mut d = Drained {
            hist: new_hist(),
            stats: CoordinatorStats::default(),
            outcome: Outcome::empty(&self.cfg.workload),
            errors: Vec::new(),
            traces: Vec::new(),
        };
        let declared: Vec<u16> = self.failure_logs.lock().unwrap().keys().copied().collect();
        for (cn, t) in self.threads.drain(..) {
            let r = t
                .join()
                .map_err(|_| "a compute thread panicked".to_string())??;
            d.hist.add(&r.hist).expect("same bounds");
            d.stats.merge(&r.stats);
            d.outcome.merge(&r.outcome);
            d.traces.extend(r.trace);
            if !declared.contains(&(cn + 1)) {
                d.errors.extend(r.errors);
            }
        }
        for h in self.heartbeats.drain(..) {
            h.join()
                .map_err(|_| "a heartbeat thread panicked".to_string())?;
        }
        if let Some(m) = self.membership_thread.take() {
            m.join()
                .map_err(|_| "the membership thread panicked".to_string())??;
        }
        Ok(d)
    }

    /// The planned crash's recovery, timed from the crash (`None` if there
    /// was none, or the node had been suspected and replaced before it).
    fn recovery(
        &self,
        fl: &FailureLog,
        stats: &CoordinatorStats,
        errors: &mut Vec<String>,
    ) -> Option<RecoveryTimeline> {
        let (Some(target), Some((crash_ns, before, crash_s))) =
            (self.faults.crash_target, &self.faults.crash_at)
        else {
            return None;
        };
        if fl.notified_ns == 0 {
            errors.push(format!(
                "compute node {target} crashed but recovery did not finish before the run ended"
            ));
            return None;
        }
        if fl.detected_ns < *crash_ns {
            // Suspected (and fenced, recovered, replaced) before the planned
            // crash: the crash hit a node that had already stopped. Safe,
            // but there is no crash timeline to report.
            return None;
        }
        let survivors = |v: &[u64]| -> u64 {
            v.iter()
                .enumerate()
                .filter(|(i, _)| *i + 1 != target as usize)
                .map(|(_, x)| x)
                .sum()
        };
        let during = survivors(&fl.committed_at_notify).saturating_sub(survivors(before));
        let window_s = (fl.notified_ns - crash_ns) as f64 / 1e9;
        Some(RecoveryTimeline {
            crashed_node: target,
            detect_us: (fl.detected_ns.saturating_sub(*crash_ns)) as f64 / 1e3,
            link_termination_us: (fl.revoked_ns - fl.detected_ns) as f64 / 1e3,
            log_recovery_us: (fl.recovered_ns - fl.revoked_ns) as f64 / 1e3,
            log_recovery_cpu_us: fl.recovery_cpu_ns as f64 / 1e3,
            cpu_ns_per_coordinator: fl.recovery_cpu_ns as f64
                / fl.recovered_coordinators.max(1) as f64,
            rounds: fl.recovery_rounds,
            cpu_us_per_round: fl.recovery_cpu_ns as f64 / 1e3 / fl.recovery_rounds.max(1) as f64,
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

    /// The timeline's marks: the planned crash and its recovery, false
    /// positives, the memory-node failure, the other crashes and rejoins.
    fn events(
        &mut self,
        logs: &BTreeMap<u16, FailureLog>,
        fl: &FailureLog,
        false_positives: &[u16],
        memory: Option<&MemoryFailureTimeline>,
    ) -> Vec<(f64, String)> {
        let start_ns = self.start_ns;
        let at = |ns: u64| ns.saturating_sub(start_ns) as f64 / 1e9;
        let mut events = Vec::new();
        if let (Some(target), Some((_, _, crash_s))) =
            (self.faults.crash_target, &self.faults.crash_at)
        {
            events.push((*crash_s, format!("compute node {target} crashes")));
            if fl.detected_ns > 0 {
                events.push((at(fl.detected_ns), "failure detected".to_string()));
            }
            if fl.notified_ns > 0 {
                events.push((at(fl.notified_ns), "recovered".to_string()));
            }
        }
        for n in false_positives {
            if let Some(l) = logs.get(n) {
                events.push((
                    at(l.detected_ns),
                    format!("node {n} suspected (false positive)"),
                ));
            }
        }
        events.extend(memory.iter().flat_map(|m| m.marks.iter().cloned()));
        events.append(&mut self.faults.events);
        events
    }

    /// Everything the run measured, checked if asked.
    fn report(mut self, m: Measured, mut d: Drained) -> Result<RunResult, String> {
        let cfg = self.cfg;
        let mut memory_failure = m.memory_failure;
        if let Some(mf) = memory_failure.as_mut() {
            mf.aborted_by_failure = d
                .stats
                .aborts_by_reason
                .get(&tandem_dkvs::AbortReason::MemoryNodeFailed)
                .copied()
                .unwrap_or(0);
        }
        let (committed, aborted) = (
            self.ctl.committed.load(Ordering::SeqCst),
            self.ctl.aborted.load(Ordering::SeqCst),
        );
        let fenced_acks = self.ctl.fenced_acks.load(Ordering::SeqCst);
        if fenced_acks > 0 {
            d.errors.push(format!("{fenced_acks} commits acknowledged by fenced incarnations (transactions begun after their node's revocation)"));
        }
        let logs = self.failure_logs.lock().unwrap().clone();
        let crashed = &self.faults.crashed;
        let false_positives: Vec<u16> = logs
            .keys()
            .copied()
            .filter(|n| !crashed.contains(n))
            .collect();
        let recovered_nodes: Vec<u16> = crashed
            .iter()
            .copied()
            .filter(|n| logs.get(n).is_some_and(|l| l.notified_ns > 0))
            .collect();
        let fl = self
            .faults
            .crash_target
            .and_then(|n| logs.get(&n).cloned())
            .unwrap_or_default();
        let recovery = self.recovery(&fl, &d.stats, &mut d.errors);
        let events = self.events(&logs, &fl, &false_positives, memory_failure.as_ref());
        let timeline = Timeline {
            bucket_ms: BUCKET.as_millis() as u64,
            committed: m.timeline_counts,
            events,
        };
        let (check_passed, violations) = if cfg.check {
            let v = check(self.backend, &self.layout, &cfg.workload, &d.outcome)?;
            (Some(v.is_empty()), v)
        } else {
            (None, Vec::new())
        };
        let floor = cpu::floor(self.backend, std::mem::take(&mut d.traces))?;
        let cpu_ns_per_commit = m.cpu_ns.map(|ns| ns as f64 / committed.max(1) as f64);
        let protocol_overhead = match (cpu_ns_per_commit, &floor) {
            (Some(c), Some(f)) => Some(c / f.cpu_ns_per_commit),
            _ => None,
        };
        let ledger = d.outcome.ledger();
        Ok(RunResult {
            store: cfg.mode.to_string(),
            workload: cfg.workload.name().to_string(),
            fabric: self.backend.name().to_string(),
            compute_nodes: cfg.compute_nodes,
            coordinators_per_node: cfg.coordinators,
            committed,
            aborted,
            abort_rate: aborted as f64 / (committed + aborted).max(1) as f64,
            duration_s: m.elapsed,
            throughput_tps: committed as f64 / m.elapsed,
            latency_us: Latency {
                p50: d.hist.value_at_quantile(0.5),
                p99: d.hist.value_at_quantile(0.99),
                p999: d.hist.value_at_quantile(0.999),
                mean: d.hist.mean(),
            },
            verbs_per_commit: d.stats.verbs as f64 / d.stats.committed.max(1) as f64,
            cpu_ns_per_commit,
            floor,
            protocol_overhead,
            aborts_by_reason: d
                .stats
                .aborts_by_reason
                .iter()
                .map(|(r, n)| (r.name().to_string(), *n))
                .collect(),
            committed_by_type: ledger
                .map(|l| {
                    l.committed_by_type
                        .iter()
                        .map(|(k, v)| (k.to_string(), *v))
                        .collect()
                })
                .unwrap_or_default(),
            rolled_back_by_application: ledger.map(|l| l.rolled_back).unwrap_or(0),
            errors: d.errors,
            check_passed,
            violations,
            recovery,
            memory_failure,
            timeline,
            recovered_nodes,
            false_positives,
            incarnations_started: (self.next_slot - cfg.compute_nodes) as usize,
            fenced_acks,
            slots_reclaimed: d.stats.slots_reclaimed,
            reclaims_dropped: d.stats.reclaims_dropped,
            tables: self
                .layout
                .tables
                .iter()
                .map(|t| t.spec.name.clone())
                .collect(),
            occupancy: m.occupancy,
        })
    }
}
