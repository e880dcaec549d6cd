//! One seeded DART run against Tandem on the simulated fabric (Pandora paper
//! §5 "we randomly inject crashes after any operation"; recovery as in §3.2
//! and docs/DESIGN.md §4.5).
//!
//! Several compute nodes, each with several coordinators; every coordinator
//! is one [`Client`] session running litmus and assert transactions. With a
//! crash planned ([`CrashPlan`]), the harness plays the deployment around the
//! store, as `tandem_pandora_lab::sim_run` does: the membership failure detector
//! ticks in the simulator, the victim's tasks are dropped at the planned verb
//! boundary (its posted verbs stay in flight), its access is revoked on every
//! memory node, ford/traditional stop the world and drain, the recovery
//! coordinator runs (perhaps slowly, perhaps crashing once and re-run from
//! scratch on a fresh, fenced node), and only then do the victim's ids enter
//! `failed_ids`. Afterwards stray locks are swept, the [`replica_check`]
//! fails each memory node in turn (also right after recovery, or mid-run
//! when nothing crashes), a fresh session asserts every instance once more,
//! and the history goes through the [`Checker`](crate::Checker). The same
//! seed replays exactly.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryBugs, RecoveryCoordinator};
use tandem_dkvs::{
    BugSwitches, ComputeNode, FailedIds, Layout, MemoryView, Mode, OnStray, StoreConfig, TableSpec,
};
use tandem_fabric::sim::{SimCluster, SimFabric, SimFabricConfig};
use tandem_membership::{Command, Event, Membership, MembershipConfig};
use tandem_sim::{Rng, Sim};

use crate::board::Board;
use crate::client::{Client, ClientSpec};
use crate::gate::Gate;
use crate::plan::{plans_for_seed, CrashPlan, CrashPoints, RecovererCrash, MAX_CRASHES};
use crate::recorder::SharedLog;
use crate::replica_check;
use crate::report::RunReport;
use crate::slow::SlowFabric;
use crate::suite::Suite;
use crate::tandem_store::{SimPause, TandemStore, LITMUS_TABLE};
use crate::tripwire::{Tripwire, TripwireFabric, Window};
use crate::value::VALUE_BYTES;

/// Task tags (compute node `n`, 0-based, runs under tag `n`).
const DETECTOR_TAG: u32 = 30_000;
const RECOVERY_TAG: u32 = 40_000;
const CHECK_TAG: u32 = u32::MAX - 1;
/// Fabric ids of the helpers (the run's `k`-th recovery attempt joins as
/// `RECOVERY_NODE + k`: a fenced attempt's id never registers again).
const LOADER_NODE: u16 = 0;
const RECOVERY_NODE: u16 = 60_000;
const REPLICA_CHECK_NODE: u16 = u16::MAX - 2;
const SWEEP_NODE: u16 = u16::MAX - 1;
const CHECK_NODE: u16 = u16::MAX;
const LOG_SLOTS: u32 = 64;
/// Client id of the final check (above every node's clients).
const CHECK_CLIENT: u32 = 1 << 20;
/// Coordinator ids of the helpers, above the clients'.
const CHECK_ID: u16 = (LOG_SLOTS - 1) as u16;
const REPLICA_CHECK_ID: u16 = (LOG_SLOTS - 2) as u16;
/// The run's `k`-th recovery attempt uses coordinator id `RECOVERY_ID - k`
/// (each attempt mints versions of its own).
const RECOVERY_ID: u16 = (LOG_SLOTS - 3) as u16;
/// Attempts per recovery, and in a run.
const RECOVERY_ATTEMPTS: u16 = 3;
const RUN_ATTEMPTS: u16 = RECOVERY_ATTEMPTS * MAX_CRASHES as u16;

/// Test-only bugs of the deployment around the store (the membership
/// service's side of recovery, which this harness plays).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeploymentBugs {
    /// Publish the failed ids when recovery starts instead of when it ends,
    /// so PILL stealing overlaps log recovery (pandora).
    pub publish_before_recovery: bool,
}

#[derive(Clone, Debug)]
pub struct SimRunConfig {
    pub seed: u64,
    pub mode: Mode,
    pub bugs: BugSwitches,
    pub recovery_bugs: RecoveryBugs,
    pub deployment_bugs: DeploymentBugs,
    pub suite: Arc<Suite>,
    pub compute_nodes: u16,
    pub clients_per_node: u16,
    pub memory_nodes: u16,
    pub replicas: u16,
    pub txs_per_client: u64,
    pub assert_chance: f64,
    /// Crash compute nodes in this run (how many, which, when and where
    /// follow from the seed and `crash_points`).
    pub crash: bool,
    pub crash_points: CrashPoints,
    /// Slow every crash run's recovery coordinator by this much per doorbell.
    pub slow_recovery_ns: Option<u64>,
    /// Run the replica check (after the run, and during it: right after
    /// each recovery, or once at a random point of a run without crashes).
    pub replica_check: bool,
    /// What live transactions do on a lock of another coordinator: abort,
    /// or stall (pandora: they then wait out a recovery under way).
    pub on_stray: OnStray,
    /// Run the history checker (the assertions run regardless).
    pub check_history: bool,
    pub fabric: SimFabricConfig,
}

impl SimRunConfig {
    pub fn new(mode: Mode, suite: Arc<Suite>, seed: u64) -> Self {
        SimRunConfig {
            seed,
            mode,
            bugs: BugSwitches::default(),
            recovery_bugs: RecoveryBugs::default(),
            deployment_bugs: DeploymentBugs::default(),
            suite,
            compute_nodes: 2,
            clients_per_node: 4,
            memory_nodes: 3,
            replicas: 2,
            txs_per_client: 60,
            assert_chance: 0.2,
            crash: false,
            crash_points: CrashPoints::default(),
            slow_recovery_ns: None,
            replica_check: true,
            on_stray: OnStray::Abort,
            check_history: true,
            fabric: SimFabricConfig::default(),
        }
    }

    /// The crashes of this run, in time order (none without `crash`).
    pub fn plans(&self) -> Vec<CrashPlan> {
        if !self.crash {
            return Vec::new();
        }
        plans_for_seed(
            self.seed,
            self.txs_per_client,
            self.crash_points,
            self.slow_recovery_ns,
        )
    }
}

/// The compute nodes of a run (original and replacements), by 0-based index.
#[derive(Default)]
struct Nodes {
    /// Clients still running.
    running: Vec<u16>,
    crashed: Vec<bool>,
    /// Finished and told the membership so.
    left: Vec<bool>,
    /// Crashed and declared failed.
    declared: Vec<bool>,
}

impl Nodes {
    /// Nodes with clients running (not crashed).
    fn live(&self) -> Vec<usize> {
        (0..self.running.len())
            .filter(|&n| self.running[n] > 0 && !self.crashed[n])
            .collect()
    }

    /// Whether the detector has anything left to watch: a running node, or
    /// a crashed one not declared yet.
    fn watched(&self) -> bool {
        (0..self.running.len()).any(|n| {
            if self.crashed[n] {
                !self.declared[n]
            } else {
                self.running[n] > 0
            }
        })
    }
}

/// What the replica check's task hands back: its verdict and its session.
type CheckOutcome = (Result<(), String>, TandemStore<SimFabric>);

/// Everything the harness shares with the tasks it spawns.
struct Harness<'c> {
    cfg: &'c SimRunConfig,
    sim: Sim,
    cluster: SimCluster,
    store: StoreConfig,
    layout: Arc<Layout>,
    membership: Rc<RefCell<Membership>>,
    failed: FailedIds,
    gate: Rc<Gate>,
    nodes: Rc<RefCell<Nodes>>,
    board: Board,
    logs: Vec<SharedLog>,
    clock: Rc<dyn Fn() -> u64>,
    wires: Vec<Tripwire>,
    /// The replica check's session and the memory view it fails nodes in.
    replicas: Option<(TandemStore<SimFabric>, MemoryView)>,
    /// Seeds the clients of every node.
    client_seeds: Rng,
    /// Recovery attempts so far in the run.
    attempts: u16,
    report: RunReport,
}

/// Run one seed to completion.
pub fn run(cfg: &SimRunConfig) -> RunReport {
    let plans = cfg.plans();
    let fd_timeout_ns = plans.first().map_or(20_000, |p| p.detect_ns.max(400));
    let mut h = Harness::new(cfg, fd_timeout_ns);
    h.load();
    for _ in 0..cfg.compute_nodes {
        h.spawn_node(cfg.txs_per_client);
    }
    if plans.is_empty() {
        h.quiet_run();
    }
    for plan in plans {
        if !h.crash_run(plan, fd_timeout_ns) {
            break;
        }
    }
    h.sim.run();
    if h.report.crashes > 0 {
        h.sweep();
    }
    h.check_replicas("after the run");
    h.final_check();
    let mut report = std::mem::take(&mut h.report);
    report.absorb(&h.logs);
    if cfg.check_history {
        report.check_history(&cfg.suite);
    }
    report.sim_time_ns = h.sim.now_ns();
    report
}

impl<'c> Harness<'c> {
    fn new(cfg: &'c SimRunConfig, fd_timeout_ns: u64) -> Self {
        let clients = (cfg.compute_nodes as u32 + MAX_CRASHES as u32) * cfg.clients_per_node as u32;
        let capacity = cfg
            .suite
            .key_count(cfg.txs_per_client * clients as u64)
            .max(1);
        let table = TableSpec {
            id: LITMUS_TABLE,
            name: "litmus".into(),
            value_size: VALUE_BYTES,
            capacity,
        };
        let mut store = StoreConfig::new(cfg.mode, cfg.memory_nodes, cfg.replicas, vec![table]);
        store.partitions_per_table = 4;
        store.log_slots = LOG_SLOTS;
        store.log_slot_bytes = 8 * 1024;
        store.bugs = cfg.bugs;
        store.on_stray = cfg.on_stray;
        assert!(
            clients < (RECOVERY_ID - RUN_ATTEMPTS) as u32,
            "too many clients for {LOG_SLOTS} log slots"
        );
        let layout = Arc::new(Layout::new(&store).expect("valid DART store config"));
        let sim = Sim::new(cfg.seed);
        let region = *layout.region_bytes.iter().max().expect("memory nodes");
        let cluster = SimCluster::with_nodes(
            sim.handle(),
            cfg.memory_nodes as usize,
            region,
            cfg.fabric.clone(),
        );
        let membership = Membership::new(MembershipConfig {
            heartbeat_timeout_ns: fd_timeout_ns,
            id_space: LOG_SLOTS,
            ..MembershipConfig::default()
        });
        let sh = sim.handle();
        let clock: Rc<dyn Fn() -> u64> = Rc::new(move || sh.now_ns());
        Harness {
            cfg,
            cluster,
            store,
            layout,
            membership: Rc::new(RefCell::new(membership)),
            failed: FailedIds::new(),
            gate: Rc::new(Gate::new(0)),
            nodes: Rc::default(),
            board: Board::default(),
            logs: Vec::new(),
            clock: clock.clone(),
            wires: Vec::new(),
            replicas: None,
            client_seeds: Rng::new(cfg.seed ^ 0xC11E),
            attempts: 0,
            report: RunReport::default(),
            sim,
        }
    }

    /// Load the initial objects of every test.
    fn load(&self) {
        let (fab, l, suite) = (
            self.cluster
                .join(LOADER_NODE)
                .expect("a fresh compute-node id"),
            self.layout.clone(),
            self.cfg.suite.clone(),
        );
        self.sim.spawn(u32::MAX, async move {
            let mut loader = Loader::new(&fab, l);
            for t in &suite.tests {
                for (k, v) in t.initial() {
                    loader
                        .put(LITMUS_TABLE, k, &v.encode())
                        .await
                        .expect("load");
                }
            }
            loader.finish().await.expect("load");
        });
        self.sim.run();
    }

    /// A compute node joins (the next index) and its clients run `txs` each.
    fn spawn_node(&mut self, txs: u64) {
        let cn = self.nodes.borrow().running.len();
        let clients = self.cfg.clients_per_node;
        let wire = Tripwire::new(self.clock.clone());
        let fabric = TripwireFabric::new(
            self.cluster
                .join(cn as u16 + 1)
                .expect("a fresh compute-node id"),
            wire.clone(),
        );
        self.wires.push(wire);
        let node = ComputeNode::new(
            fabric,
            &self.store,
            self.layout.clone(),
            self.failed.clone(),
        );
        let join = Event::Join {
            node: cn as u16 + 1,
            coordinators: clients,
        };
        let ids = match self
            .membership
            .borrow_mut()
            .step(self.sim.now_ns(), join)
            .pop()
        {
            Some(Command::AssignIds { ids, .. }) => ids,
            other => panic!("compute node {} not admitted: {other:?}", cn + 1),
        };
        {
            let mut n = self.nodes.borrow_mut();
            n.running.push(clients);
            n.crashed.push(false);
            n.left.push(false);
            n.declared.push(false);
        }
        self.gate.add_node();
        for (k, &id) in ids.iter().enumerate() {
            let pause = SimPause {
                gate: self.gate.clone(),
                sim: self.sim.handle(),
                node: cn,
                tag: cn as u32,
            };
            let mut session = TandemStore::with_pause(node.coordinator(id), pause);
            let spec = ClientSpec {
                id: cn as u32 * clients as u32 + k as u32,
                seed: self.client_seeds.next_u64(),
                assert_chance: self.cfg.assert_chance,
                record: self.cfg.check_history,
            };
            let mut client = Client::new(
                spec,
                self.cfg.suite.clone(),
                self.board.clone(),
                self.clock.clone(),
            );
            self.logs.push(client.log());
            let nodes = self.nodes.clone();
            self.sim.spawn(cn as u32, async move {
                client.run(&mut session, txs).await;
                session.settle();
                nodes.borrow_mut().running[cn] -= 1;
            });
        }
    }

    /// No crash: one replica check at a random point of the busy run.
    fn quiet_run(&mut self) {
        let busy_ns = self.cfg.txs_per_client * 30_000;
        let at = Rng::new(self.cfg.seed ^ 0x4E91).range_inclusive(busy_ns / 4, busy_ns * 3 / 4);
        self.sim.run_until(at);
        self.check_replicas(&format!("at {at} ns"));
    }

    /// One planned crash and its recovery; then a replacement node joins
    /// (weighted crash points). False if the run is over for crashes.
    fn crash_run(&mut self, plan: CrashPlan, fd_timeout_ns: u64) -> bool {
        match self.crash_and_recover(plan, fd_timeout_ns) {
            Ok(true) => {
                self.report.crashes += 1;
                let note = self
                    .report
                    .crash_note
                    .take()
                    .map_or(String::new(), |n| n + "; then ");
                self.report.crash_note = Some(note + &plan.describe());
                // Right after recovery: every replica must be whole again.
                self.check_replicas("right after recovery");
                if self.cfg.crash_points == CrashPoints::Weighted {
                    self.spawn_node(self.cfg.txs_per_client / 2);
                }
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.report
                    .violations
                    .push(("recovery".into(), format!("{e} ({})", plan.describe())));
                false
            }
        }
    }

    /// Pause every session, let in-flight transactions finish, and wait for
    /// their unlocks (a crashed node's are recovery's business).
    fn drain(&self) {
        self.gate.paused.set(true);
        let g = self.gate.clone();
        self.sim.run_while(|| g.busy());
    }

    /// On a quiet store: fail each memory node in turn, logically, and re-read
    /// every key from the replica that takes over.
    fn check_replicas(&mut self, when: &str) {
        if !self.cfg.replica_check {
            return;
        }
        let was_paused = self.gate.paused.get();
        self.drain();
        let (mut store, view) = self
            .replicas
            .take()
            .unwrap_or_else(|| self.replica_session());
        let keys = replica_check::keys_now(&self.cfg.suite, &self.board);
        let (suite, nodes, v) = (self.cfg.suite.clone(), self.cfg.memory_nodes, view.clone());
        let out: Rc<RefCell<Option<CheckOutcome>>> = Rc::default();
        let o = out.clone();
        self.sim.spawn(CHECK_TAG, async move {
            let fail = |m: u16, down: bool| v.set_down(m, down);
            let r =
                replica_check::fail_each_memory_node(&mut store, &fail, &suite, &keys, nodes).await;
            *o.borrow_mut() = Some((r, store));
        });
        self.sim.run_while(|| out.borrow().is_none());
        self.gate.paused.set(was_paused);
        let outcome = out.borrow_mut().take();
        let r = match outcome {
            Some((r, store)) => {
                self.replicas = Some((store, view));
                r
            }
            None => Err("the replica check never finished".into()),
        };
        if let Err(e) = r {
            self.report
                .violations
                .push(("replica-check".into(), format!("{e} ({when})")));
        }
    }

    /// A session whose own memory view can mark memory nodes down.
    fn replica_session(&self) -> (TandemStore<SimFabric>, MemoryView) {
        let view = MemoryView::default();
        let fab = self
            .cluster
            .join(REPLICA_CHECK_NODE)
            .expect("a fresh compute-node id");
        let node = ComputeNode::with_memory_view(
            fab,
            &self.store,
            self.layout.clone(),
            self.failed.clone(),
            view.clone(),
        );
        (TandemStore::new(node.coordinator(REPLICA_CHECK_ID)), view)
    }

    /// The background scan: NotLogged stray locks nobody touched (docs/DESIGN.md §4.5).
    fn sweep(&self) {
        let (fab, l, f) = (
            self.cluster
                .join(SWEEP_NODE)
                .expect("a fresh compute-node id"),
            self.layout.clone(),
            self.failed.clone(),
        );
        self.sim.spawn(u32::MAX, async move {
            sweep_stray_locks(&fab, &l, &f).await.expect("sweep");
        });
        self.sim.run();
    }

    /// A fresh session asserts every instance of the quiet, recovered store.
    fn final_check(&mut self) {
        let node = ComputeNode::new(
            self.cluster
                .join(CHECK_NODE)
                .expect("a fresh compute-node id"),
            &self.store,
            self.layout.clone(),
            self.failed.clone(),
        );
        let mut session = TandemStore::new(node.coordinator(CHECK_ID));
        let spec = ClientSpec {
            id: CHECK_CLIENT,
            seed: self.cfg.seed,
            assert_chance: 1.0,
            record: self.cfg.check_history,
        };
        let mut client = Client::new(
            spec,
            self.cfg.suite.clone(),
            self.board.clone(),
            self.clock.clone(),
        );
        self.logs.push(client.log());
        let outcome: Rc<RefCell<Option<Result<(), String>>>> = Rc::default();
        let o = outcome.clone();
        self.sim.spawn(CHECK_TAG, async move {
            let r = client.final_check(&mut session, 20).await;
            session.settle();
            *o.borrow_mut() = Some(r);
        });
        self.sim.run();
        let outcome = outcome.borrow_mut().take();
        match outcome {
            Some(Ok(())) => {}
            Some(Err(e)) => self.report.violations.push(("final-check".into(), e)),
            None => self.report.violations.push((
                "final-check".into(),
                "the final check never finished (stuck)".into(),
            )),
        }
    }
}

impl Harness<'_> {
    /// Crash the victim as planned and drive detection, link termination,
    /// recovery and notification. `Ok(false)` if the victim had already
    /// finished by then.
    fn crash_and_recover(&mut self, plan: CrashPlan, fd_timeout_ns: u64) -> Result<bool, String> {
        let declared =
            self.spawn_detector(plan.at_ns.saturating_sub(fd_timeout_ns / 2), fd_timeout_ns);
        let Some(victim) = self.crash_victim(plan) else {
            return Ok(false);
        };
        let victim = victim as u16;
        // (1) detection by heartbeat timeout, (2) active-link termination.
        self.sim.run_while(|| declared.borrow().is_empty());
        if *declared.borrow() != vec![victim + 1] {
            return Err(format!(
                "the detector declared {:?}, expected compute node {}",
                declared.borrow(),
                victim + 1
            ));
        }
        self.cluster.revoke(victim + 1);
        self.nodes.borrow_mut().declared[victim as usize] = true;
        let ids: Vec<u16> = match self
            .membership
            .borrow_mut()
            .step(
                self.sim.now_ns(),
                Event::LinksTerminated { node: victim + 1 },
            )
            .pop()
        {
            Some(Command::Recover { ids, .. }) => ids,
            other => return Err(format!("expected a recovery order, got {other:?}")),
        };
        if self.cfg.deployment_bugs.publish_before_recovery {
            self.publish(&ids);
        }
        // (3) log recovery, (4) notify: only now may stealing start.
        self.recover(plan, &ids)?;
        self.membership
            .borrow_mut()
            .step(self.sim.now_ns(), Event::RecoveryDone { node: victim + 1 });
        Ok(true)
    }

    /// The failure detector ticks until it declares someone, or everyone
    /// left. Before each tick, every running node heartbeats (a crashed one
    /// cannot) and every finished one leaves. It starts shortly before the
    /// crash: before it there is nothing to detect, and sub-µs heartbeats
    /// over the whole run would dominate the simulation (the membership
    /// discounts the detector's own pause between two crashes).
    fn spawn_detector(&self, start_ns: u64, fd_timeout_ns: u64) -> Rc<RefCell<Vec<u16>>> {
        let declared: Rc<RefCell<Vec<u16>>> = Rc::default();
        let (m, h, d, nodes) = (
            self.membership.clone(),
            self.sim.handle(),
            declared.clone(),
            self.nodes.clone(),
        );
        self.sim.spawn(DETECTOR_TAG, async move {
            h.sleep(start_ns.saturating_sub(h.now_ns())).await;
            while d.borrow().is_empty() && nodes.borrow().watched() {
                heartbeats(&mut m.borrow_mut(), &mut nodes.borrow_mut(), h.now_ns());
                h.sleep(fd_timeout_ns / 8).await;
                for c in m.borrow_mut().step(h.now_ns(), Event::Tick) {
                    if let Command::TerminateLinks { node } = c {
                        d.borrow_mut().push(node);
                    }
                }
            }
        });
        declared
    }

    /// Drop the victim's tasks at the planned point; `None` if no node was
    /// running by then. Returns the victim's index.
    fn crash_victim(&mut self, plan: CrashPlan) -> Option<usize> {
        self.sim.run_until(plan.at_ns);
        let live = self.nodes.borrow().live();
        let v = *live.get(plan.node as usize % live.len().max(1))?;
        let wire = &self.wires[v];
        if let Some(window) = plan.window {
            wire.arm(window, plan.wire_seed);
            let n = self.nodes.clone();
            // Between two simulator steps the posting task is parked on its verbs.
            self.sim
                .run_while(|| !wire.tripped() && n.borrow().running[v] > 0);
        }
        // A tripped wire swallowed a doorbell: the node is dead even if its
        // clients finished in the same step.
        if !wire.tripped() && self.nodes.borrow().running[v] == 0 {
            wire.disarm();
            return None;
        }
        self.nodes.borrow_mut().crashed[v] = true;
        self.gate.crashed(v);
        self.sim.crash(v as u32);
        Some(v)
    }

    fn publish(&self, ids: &[u16]) {
        for &id in ids {
            self.failed.insert(id);
        }
    }

    /// Log recovery until one attempt completes and its ids are published.
    /// The planned crash of the recovery coordinator hits the first attempt;
    /// the membership then fences that attempt's node and re-issues recovery.
    fn recover(&mut self, plan: CrashPlan, ids: &[u16]) -> Result<(), String> {
        let mut crash = plan.recoverer;
        for _ in 0..RECOVERY_ATTEMPTS {
            let attempt = self.attempts;
            self.attempts += 1;
            let this = crash.take();
            if self.cfg.mode != Mode::Pandora {
                // Owner-less locks: stop the world and let the survivors drain.
                self.drain();
            }
            let during = match this {
                Some(RecovererCrash::During(w)) => Some(w),
                _ => None,
            };
            let finished = self.recovery_attempt(attempt, ids, during, plan)?;
            if !finished || this == Some(RecovererCrash::BeforePublication) {
                self.fence_recoverer(attempt, plan);
                continue;
            }
            self.publish(ids);
            self.gate.paused.set(false);
            if this == Some(RecovererCrash::AfterPublication) {
                // Survivors steal stray locks until the membership notices.
                self.fence_recoverer(attempt, plan);
                continue;
            }
            return Ok(());
        }
        Err("recovery never finished".into())
    }

    /// The membership notices a crashed recovery coordinator after its
    /// detection timeout (its verbs in flight land meanwhile), fences its
    /// node, and re-issues recovery.
    fn fence_recoverer(&self, attempt: u16, plan: CrashPlan) {
        self.sim
            .run_until(self.sim.now_ns() + plan.detect_ns.max(400));
        self.cluster.revoke(RECOVERY_NODE + attempt);
    }

    /// One recovery coordinator on a node of its own, slowed and crashed as
    /// planned. `Ok(false)` if it crashed before finishing.
    fn recovery_attempt(
        &self,
        attempt: u16,
        ids: &[u16],
        crash: Option<Window>,
        plan: CrashPlan,
    ) -> Result<bool, String> {
        let wire = Tripwire::new(self.clock.clone());
        if let Some(w) = crash {
            wire.arm(w, plan.wire_seed ^ 0x5EC0);
        }
        let slow = SlowFabric::new(
            self.cluster
                .join(RECOVERY_NODE + attempt)
                .expect("a fresh compute-node id"),
            self.sim.handle(),
            plan.slow_recovery_ns,
        );
        let fab = TripwireFabric::new(slow, wire.clone());
        let done: Rc<RefCell<Option<Result<(), String>>>> = Rc::default();
        let (d, l, ids) = (done.clone(), self.layout.clone(), ids.to_vec());
        let (bugs, mode, id, tag) = (
            self.cfg.recovery_bugs,
            self.cfg.mode,
            RECOVERY_ID - attempt,
            RECOVERY_TAG + attempt as u32,
        );
        self.sim.spawn(tag, async move {
            let mut rc = RecoveryCoordinator::new(&fab, l, id);
            rc.bugs = bugs;
            let r = match mode {
                Mode::Pandora => rc.recover(&ids).await.map(|_| ()),
                Mode::Ford => rc.recover_ford(&ids).await.map(|_| ()),
                Mode::Traditional => rc.recover_traditional(&ids).await.map(|_| ()),
            };
            *d.borrow_mut() = Some(r.map_err(|e| format!("recovery failed: {e:?}")));
        });
        self.sim
            .run_while(|| done.borrow().is_none() && !wire.tripped());
        if done.borrow().is_none() {
            if wire.tripped() {
                self.sim.crash(tag);
                return Ok(false);
            }
            return Err("recovery never finished".into());
        }
        let r = done.borrow_mut().take().expect("checked");
        r.map(|()| true)
    }
}

/// Heartbeats of the running nodes, and the leave of the finished ones.
fn heartbeats(m: &mut Membership, nodes: &mut Nodes, now_ns: u64) {
    for n in 0..nodes.running.len() {
        let node = n as u16 + 1;
        if nodes.crashed[n] || nodes.left[n] {
            continue;
        }
        if nodes.running[n] > 0 {
            m.step(now_ns, Event::Heartbeat { node });
        } else {
            nodes.left[n] = true;
            m.step(now_ns, Event::Leave { node });
        }
    }
}
