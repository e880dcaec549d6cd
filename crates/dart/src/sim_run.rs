//! One seeded DART run against Tandem on the simulated fabric (DESIGN.md §5:
//! "crash injection after any operation (sim: drop a compute node at a verb
//! boundary)"; `pandora.txt` §5 "we randomly inject crashes after any
//! operation"; recovery as in §3.2 and DESIGN.md §4.5).
//!
//! Several compute nodes, each with several coordinators; every coordinator
//! is one [`Client`] session running litmus and assert transactions. With a
//! crash planned, the harness plays the deployment around the store, as
//! `tandem_bench::sim_bank` does: the membership failure detector ticks in the
//! simulator, the victim's tasks are dropped at a random simulated time (its
//! posted verbs stay in flight), its access is revoked on every memory node,
//! ford/traditional stop the world and drain, the recovery coordinator runs,
//! and only then do the victim's ids enter `failed_ids`. Afterwards stray
//! locks are swept, a fresh session asserts every instance once more, and
//! the history goes through the [`Checker`]. The same seed replays exactly.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryBugs, RecoveryCoordinator};
use tandem_dkvs::{BugSwitches, ComputeNode, FailedIds, Layout, Mode, StoreConfig, TableSpec};
use tandem_fabric::sim::{SimCluster, SimFabricConfig};
use tandem_membership::{Command, Event, Membership, MembershipConfig};
use tandem_sim::{Rng, Sim};

use crate::board::Board;
use crate::client::{Client, ClientSpec};
use crate::gate::Gate;
use crate::report::RunReport;
use crate::recorder::SharedLog;
use crate::suite::Suite;
use crate::tandem_store::{SimPause, TandemStore, LITMUS_TABLE};
use crate::tripwire::{Tripwire, TripwireFabric};
use crate::value::VALUE_BYTES;

/// Task tags (compute node `n` runs under tag `n`).
const HEARTBEAT_TAG: u32 = 20_000;
const DETECTOR_TAG: u32 = 30_000;
const RECOVERY_TAG: u32 = 40_000;
const CHECK_TAG: u32 = u32::MAX - 1;
/// Fabric ids of the helpers.
const LOADER_NODE: u16 = 0;
const RECOVERY_NODE: u16 = 60_000;
const SWEEP_NODE: u16 = u16::MAX - 1;
const CHECK_NODE: u16 = u16::MAX;
const LOG_SLOTS: u32 = 64;

#[derive(Clone, Debug)]
pub struct SimRunConfig {
    pub seed: u64,
    pub mode: Mode,
    pub bugs: BugSwitches,
    pub recovery_bugs: RecoveryBugs,
    pub suite: Arc<Suite>,
    pub compute_nodes: u16,
    pub clients_per_node: u16,
    pub memory_nodes: u16,
    pub replicas: u16,
    pub txs_per_client: u64,
    pub assert_chance: f64,
    /// Crash one compute node in this run (when and which follows from the seed).
    pub crash: bool,
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
            suite,
            compute_nodes: 2,
            clients_per_node: 4,
            memory_nodes: 3,
            replicas: 2,
            txs_per_client: 60,
            assert_chance: 0.2,
            crash: false,
            check_history: true,
            fabric: SimFabricConfig::default(),
        }
    }
}

/// The crash a seed plans: which node, when, and how fast the detector is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPlan {
    pub node: u16,
    pub at_ns: u64,
    pub detect_ns: u64,
    /// Crash right after the victim's first doorbell at or after `at_ns`
    /// (its verbs in flight), rather than exactly at `at_ns`.
    pub after_post: bool,
}

impl CrashPlan {
    /// Somewhere in the busy part of the run (about 30 µs of simulated time
    /// per transaction of a client), at whatever verb boundary that falls on;
    /// a quick or a slow verdict, so revocation races the victim's verbs in flight.
    pub fn for_seed(cfg: &SimRunConfig) -> CrashPlan {
        let mut rng = Rng::new(cfg.seed ^ 0xDA27_C4A5);
        let busy_ns = (cfg.txs_per_client * 30_000).max(4_000);
        let at_ns = rng.range_inclusive(1_000, busy_ns * 3 / 4);
        let detect_ns = if rng.chance(0.5) { 400 + rng.below(1_600) } else { 20_000 };
        CrashPlan { node: rng.below(cfg.compute_nodes as u64) as u16, at_ns, detect_ns, after_post: rng.chance(0.75) }
    }
}

/// Run one seed to completion.
pub fn run(cfg: &SimRunConfig) -> RunReport {
    let table = TableSpec { id: LITMUS_TABLE, name: "litmus".into(), value_size: VALUE_BYTES, capacity: cfg.suite.key_count(cfg.txs_per_client * (cfg.compute_nodes as u64 * cfg.clients_per_node as u64)).max(1) };
    let mut store = StoreConfig::new(cfg.mode, cfg.memory_nodes, cfg.replicas, vec![table]);
    store.partitions_per_table = 4;
    store.log_slots = LOG_SLOTS;
    store.log_slot_bytes = 8 * 1024;
    store.bugs = cfg.bugs;
    let clients = cfg.compute_nodes as u32 * cfg.clients_per_node as u32;
    assert!(clients + 4 < LOG_SLOTS, "too many clients for {LOG_SLOTS} log slots");
    let layout = Arc::new(Layout::new(&store).expect("valid DART store config"));
    let sim = Sim::new(cfg.seed);
    let region = *layout.region_bytes.iter().max().expect("memory nodes");
    let cluster = SimCluster::with_nodes(sim.handle(), cfg.memory_nodes as usize, region, cfg.fabric.clone());
    let mut report = RunReport::default();

    // Load the initial objects of every test.
    let (fab, l, suite) = (cluster.join(LOADER_NODE).expect("a fresh compute-node id"), layout.clone(), cfg.suite.clone());
    sim.spawn(u32::MAX, async move {
        let mut loader = Loader::new(&fab, l);
        for t in &suite.tests {
            for (k, v) in t.initial() {
                loader.put(LITMUS_TABLE, k, &v.encode()).await.expect("load");
            }
        }
        loader.finish().await.expect("load");
    });
    sim.run();

    let plan = cfg.crash.then(|| CrashPlan::for_seed(cfg));
    let fd_timeout_ns = plan.map_or(20_000, |p| p.detect_ns.max(400));
    let membership = Rc::new(RefCell::new(Membership::new(MembershipConfig {
        heartbeat_timeout_ns: fd_timeout_ns,
        id_space: LOG_SLOTS,
        ..MembershipConfig::default()
    })));
    let failed = FailedIds::new();
    let gate = Rc::new(Gate::new(cfg.compute_nodes as usize));
    let running: Rc<RefCell<Vec<u16>>> = Rc::new(RefCell::new(vec![cfg.clients_per_node; cfg.compute_nodes as usize]));
    let board = Board::default();
    let mut logs: Vec<SharedLog> = Vec::new();
    let mut seeds = Rng::new(cfg.seed ^ 0xC11E);
    let h = sim.handle();
    let clock: Rc<dyn Fn() -> u64> = Rc::new(move || h.now_ns());
    let wires: Vec<Tripwire> = (0..cfg.compute_nodes).map(|_| Tripwire::default()).collect();
    for cn in 0..cfg.compute_nodes {
        let fabric = TripwireFabric::new(cluster.join(cn + 1).expect("a fresh compute-node id"), wires[cn as usize].clone());
        let node = ComputeNode::new(fabric, &store, layout.clone(), failed.clone());
        let ids = match membership.borrow_mut().step(sim.now_ns(), Event::Join { node: cn + 1, coordinators: cfg.clients_per_node }).pop() {
            Some(Command::AssignIds { ids, .. }) => ids,
            other => panic!("compute node {} not admitted: {other:?}", cn + 1),
        };
        if let Some(plan) = plan {
            // Heartbeats from a task of the node itself: the crash stops them.
            // They (and the detector's ticks) start shortly before the planned
            // crash: before it there is nothing to detect, and sub-µs
            // heartbeats over the whole run would dominate the simulation.
            let (m, h, running) = (membership.clone(), sim.handle(), running.clone());
            let start_ns = plan.at_ns.saturating_sub(2 * fd_timeout_ns);
            sim.spawn(HEARTBEAT_TAG + cn as u32, async move {
                h.sleep(start_ns).await;
                while running.borrow()[cn as usize] > 0 {
                    m.borrow_mut().step(h.now_ns(), Event::Heartbeat { node: cn + 1 });
                    h.sleep(fd_timeout_ns / 4).await;
                }
                m.borrow_mut().step(h.now_ns(), Event::Leave { node: cn + 1 });
            });
        }
        for (k, &id) in ids.iter().enumerate() {
            let pause = SimPause { gate: gate.clone(), sim: sim.handle(), node: cn as usize, tag: cn as u32 };
            let mut session = TandemStore::with_pause(node.coordinator(id), pause);
            let spec = ClientSpec {
                id: cn as u32 * cfg.clients_per_node as u32 + k as u32,
                seed: seeds.next_u64(),
                assert_chance: cfg.assert_chance,
                record: cfg.check_history,
            };
            let mut client = Client::new(spec, cfg.suite.clone(), board.clone(), clock.clone());
            logs.push(client.log());
            let (n, running) = (cfg.txs_per_client, running.clone());
            sim.spawn(cn as u32, async move {
                client.run(&mut session, n).await;
                session.settle();
                running.borrow_mut()[cn as usize] -= 1;
            });
        }
    }

    if let Some(plan) = plan {
        let ctx = CrashCtx { wire: &wires[plan.node as usize], sim: &sim, cluster: &cluster, layout: &layout, membership: &membership, gate: &gate, failed: &failed, running: &running };
        match crash_and_recover(cfg, plan, fd_timeout_ns, &ctx) {
            Ok(true) => {
                report.crashes = 1;
                report.crash_note = Some(format!("compute node {} crashed at {} ns", plan.node, plan.at_ns));
            }
            Ok(false) => {}
            Err(e) => report.violations.push(("recovery".into(), e)),
        }
    }
    sim.run();
    if report.crashes > 0 {
        // The background scan: NotLogged stray locks nobody touched (DESIGN.md §4.5).
        let (fab, l, f) = (cluster.join(SWEEP_NODE).expect("a fresh compute-node id"), layout.clone(), failed.clone());
        sim.spawn(u32::MAX, async move {
            sweep_stray_locks(&fab, &l, &f).await.expect("sweep");
        });
        sim.run();
    }

    // A fresh session asserts every instance of the quiet, recovered store.
    let checker_node = ComputeNode::new(cluster.join(CHECK_NODE).expect("a fresh compute-node id"), &store, layout.clone(), failed.clone());
    let mut session = TandemStore::new(checker_node.coordinator((LOG_SLOTS - 1) as u16));
    let spec = ClientSpec { id: clients, seed: cfg.seed, assert_chance: 1.0, record: cfg.check_history };
    let mut client = Client::new(spec, cfg.suite.clone(), board.clone(), clock.clone());
    logs.push(client.log());
    let outcome: Rc<RefCell<Option<Result<(), String>>>> = Rc::default();
    let o = outcome.clone();
    sim.spawn(CHECK_TAG, async move {
        let r = client.final_check(&mut session, 20).await;
        session.settle();
        *o.borrow_mut() = Some(r);
    });
    sim.run();
    match outcome.borrow_mut().take() {
        Some(Ok(())) => {}
        Some(Err(e)) => report.violations.push(("final-check".into(), e)),
        None => report.violations.push(("final-check".into(), "the final check never finished (stuck)".into())),
    }

    report.absorb(&logs);
    if cfg.check_history {
        report.check_history(&cfg.suite);
    }
    report.sim_time_ns = sim.now_ns();
    report
}

struct CrashCtx<'a> {
    wire: &'a Tripwire,
    sim: &'a Sim,
    cluster: &'a SimCluster,
    layout: &'a Arc<Layout>,
    membership: &'a Rc<RefCell<Membership>>,
    gate: &'a Rc<Gate>,
    failed: &'a FailedIds,
    running: &'a Rc<RefCell<Vec<u16>>>,
}

/// Crash `plan.node` at `plan.at_ns` and drive detection, link termination,
/// (stop-the-world drain,) recovery and notification. `Ok(false)` if the
/// victim had already finished by then.
fn crash_and_recover(cfg: &SimRunConfig, plan: CrashPlan, fd_timeout_ns: u64, ctx: &CrashCtx<'_>) -> Result<bool, String> {
    let sim = ctx.sim;
    let victim = plan.node;
    let declared: Rc<RefCell<Vec<u16>>> = Rc::default();
    let (m, h, d, running) = (ctx.membership.clone(), sim.handle(), declared.clone(), ctx.running.clone());
    let start_ns = plan.at_ns.saturating_sub(fd_timeout_ns / 2);
    sim.spawn(DETECTOR_TAG, async move {
        h.sleep(start_ns).await;
        // The failure detector ticks until it declares someone, or everyone left.
        while d.borrow().is_empty() && running.borrow().iter().any(|&r| r > 0) {
            h.sleep(fd_timeout_ns / 8).await;
            for c in m.borrow_mut().step(h.now_ns(), Event::Tick) {
                if let Command::Revoke { node } = c {
                    d.borrow_mut().push(node);
                }
            }
        }
    });
    sim.run_until(plan.at_ns);
    if plan.after_post {
        ctx.wire.arm();
        let r = ctx.running.clone();
        // Between two simulator steps the posting task is parked on its verbs.
        sim.run_while(|| !ctx.wire.tripped() && r.borrow()[victim as usize] > 0);
    }
    if ctx.running.borrow()[victim as usize] == 0 {
        return Ok(false);
    }
    sim.crash(HEARTBEAT_TAG + victim as u32);
    sim.crash(victim as u32);
    // (1) detection by heartbeat timeout, (2) active-link termination.
    sim.run_while(|| declared.borrow().is_empty());
    if *declared.borrow() != vec![victim + 1] {
        return Err(format!("the detector declared {:?}, expected compute node {}", declared.borrow(), victim + 1));
    }
    ctx.cluster.revoke(victim + 1);
    let ids: Vec<u16> = match ctx.membership.borrow_mut().step(sim.now_ns(), Event::RevokeAcked { node: victim + 1 }).pop() {
        Some(Command::Recover { ids, .. }) => ids,
        other => return Err(format!("expected a recovery order, got {other:?}")),
    };
    if cfg.mode != Mode::Pandora {
        // Owner-less locks: stop the world and let the survivors drain.
        ctx.gate.paused.set(true);
        let g = ctx.gate.clone();
        sim.run_while(|| g.busy_except(Some(victim as usize)));
    }
    // (3) log recovery on a fresh node, (4) notify: only now may stealing start.
    let done: Rc<RefCell<Option<Result<(), String>>>> = Rc::default();
    let (d, f, l, fab) = (done.clone(), ctx.failed.clone(), ctx.layout.clone(), ctx.cluster.join(RECOVERY_NODE).expect("a fresh compute-node id"));
    let rc_id = (LOG_SLOTS - 2) as u16;
    let (bugs, mode) = (cfg.recovery_bugs, cfg.mode);
    sim.spawn(RECOVERY_TAG, async move {
        let mut rc = RecoveryCoordinator::new(&fab, l, rc_id);
        rc.bugs = bugs;
        let r = match mode {
            Mode::Pandora => rc.recover(&ids).await.map(|_| ()),
            Mode::Ford => rc.recover_ford(&ids).await.map(|_| ()),
            Mode::Traditional => rc.recover_traditional(&ids).await.map(|_| ()),
        };
        if r.is_ok() {
            for id in ids {
                f.insert(id);
            }
        }
        *d.borrow_mut() = Some(r.map_err(|e| format!("recovery failed: {e:?}")));
    });
    sim.run_while(|| done.borrow().is_none());
    let r = done.borrow_mut().take().unwrap_or_else(|| Err("recovery never finished".into()));
    r?;
    ctx.membership.borrow_mut().step(sim.now_ns(), Event::RecoveryDone { node: victim + 1 });
    ctx.gate.paused.set(false);
    Ok(true)
}
