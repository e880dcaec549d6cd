//! One seeded simulation run of any [`WorkloadSpec`] (tier 2 of the test plan
//! in STYLE.md), with an optional compute-node crash and the recovery path of
//! DESIGN.md §4.5 (`pandora.txt` §3.2): the membership's heartbeat failure
//! detector declares the node failed, its access is revoked on every memory
//! node, a recovery coordinator on a survivor recovers its coordinators (pandora
//! log recovery; ford/traditional stop the world and drain first), and only then
//! do their ids enter `failed_ids`. After the run: the background stray-lock
//! sweep, replica agreement, no lock left held, and the workload's own check.
//!
//! The structure follows `sim_bank.rs`, minus its bank-specific faults
//! (recoverer crash, false positives, memory-node loss).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::check::snapshot;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryBugs, RecoveryCoordinator};
use tandem_dkvs::{BugSwitches, ComputeNode, FailedIds, Layout, Mode, StoreConfig};
use tandem_fabric::sim::{SimCluster, SimFabricConfig};
use tandem_membership::{Command, Event, Membership, MembershipConfig, NodeStatus};
use tandem_sim::{Rng, Sim};

use tandem_cluster::workload::{Outcome, OutcomeHandle, WorkloadSpec};

#[derive(Clone, Debug)]
pub struct SimWorkloadConfig {
    pub seed: u64,
    pub mode: Mode,
    pub bugs: BugSwitches,
    pub compute_nodes: u16,
    pub coordinators_per_node: u16,
    pub memory_nodes: u16,
    pub replicas: u16,
    pub workload: WorkloadSpec,
    pub txs_per_coordinator: u32,
    pub fabric: SimFabricConfig,
    /// Crash compute node `.0` (0-based) `.1` simulated ns after the clients start
    /// (loading takes simulated time too; it is not counted).
    pub crash: Option<(u16, u64)>,
    /// With `crash`: do not crash the node, only stop its heartbeats (a
    /// slow-but-alive node the detector declares failed; DESIGN.md §4.5
    /// "false positives must be safe"). Its verbs fail once it is revoked.
    pub false_positive: bool,
    /// Heartbeat timeout of the failure detector (at least 2 µs).
    pub detect_ns: u64,
    /// Test-only recovery bugs (to prove the crash tests can fail).
    pub recovery_bugs: RecoveryBugs,
    /// Log bytes per coordinator; large transactions (TPC-C) need more than the bank's 8 KiB.
    pub log_slot_bytes: u64,
}

impl SimWorkloadConfig {
    pub fn new(mode: Mode, workload: WorkloadSpec, seed: u64) -> Self {
        SimWorkloadConfig {
            seed,
            mode,
            bugs: BugSwitches::default(),
            compute_nodes: 2,
            coordinators_per_node: 4,
            memory_nodes: 3,
            replicas: 2,
            workload,
            txs_per_coordinator: 40,
            fabric: SimFabricConfig::default(),
            crash: None,
            false_positive: false,
            detect_ns: 20_000,
            recovery_bugs: RecoveryBugs::default(),
            log_slot_bytes: 32 * 1024,
        }
    }

    /// Everything that determines the run, for replaying a failing seed.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "workload {} seed {} mode {} nodes {}x{} txs {}",
            self.workload.name(),
            self.seed,
            self.mode,
            self.compute_nodes,
            self.coordinators_per_node,
            self.txs_per_coordinator
        );
        for b in self.bugs.names() {
            s += &format!(" bug {b}");
        }
        if let Some((n, at)) = self.crash {
            s += &format!(" {} node {n} at {at} ns (detect {} ns)", if self.false_positive { "falsely suspect" } else { "crash" }, self.detect_ns);
        }
        if self.recovery_bugs != RecoveryBugs::default() {
            s += &format!(" {:?}", self.recovery_bugs);
        }
        s
    }
}

#[derive(Debug, Default)]
pub struct SimWorkloadReport {
    /// Transactions `run_one` reported committed.
    pub committed: u64,
    pub violations: Vec<String>,
    pub sim_time_ns: u64,
    /// Simulated time from the clients' start to the end of the last transaction.
    pub clients_ns: u64,
    /// Transactions in doubt at the end (their coordinator crashed mid-commit).
    pub in_doubt: usize,
    pub recovered: bool,
    pub stray_locks_swept: usize,
    /// The merged client outcome (ledger).
    pub outcome: Option<Outcome>,
    /// How to reproduce this run.
    pub replay: String,
}

/// Stop-the-world control for the baselines' recovery: coordinators wait
/// while `paused`; `active` counts transactions in flight per compute node.
struct Gate {
    paused: Cell<bool>,
    active: RefCell<Vec<usize>>,
}

const HEARTBEAT_TAG: u32 = 20_000;
const DETECTOR_TAG: u32 = 30_000;
const RECOVERY_TAG: u32 = 10_000;
const RC_NODE: u16 = 60_000;

/// Run one seed to completion and check every invariant.
pub fn run(cfg: &SimWorkloadConfig) -> SimWorkloadReport {
    let tables = cfg.workload.tables();
    let mut store = StoreConfig::new(cfg.mode, cfg.memory_nodes, cfg.replicas, tables.clone());
    store.partitions_per_table = 12;
    store.log_slots = 64;
    store.log_slot_bytes = cfg.log_slot_bytes;
    store.bugs = cfg.bugs;
    let layout = Arc::new(Layout::new(&store).expect("valid simulation config"));
    let sim = Sim::new(cfg.seed);
    let region = *layout.region_bytes.iter().max().unwrap();
    let cluster = SimCluster::with_nodes(sim.handle(), cfg.memory_nodes as usize, region, cfg.fabric.clone());

    let loader_fabric = cluster.join(0).expect("a fresh compute-node id");
    let (l, spec) = (layout.clone(), cfg.workload.clone());
    sim.spawn(u32::MAX, async move {
        let mut loader = Loader::new(&loader_fabric, l);
        spec.load(&mut loader).await.expect("load");
        loader.finish().await.expect("load");
    });
    sim.run();

    let clients_start_ns = sim.now_ns();
    let handles: Rc<RefCell<Vec<OutcomeHandle>>> = Rc::default();
    let committed = Rc::new(Cell::new(0u64));
    let mut seeds = Rng::new(cfg.seed ^ 0x5EED);
    let failed = FailedIds::new();
    let fd_timeout_ns = cfg.detect_ns.max(2_000);
    let membership = Rc::new(RefCell::new(Membership::new(MembershipConfig {
        heartbeat_timeout_ns: fd_timeout_ns,
        id_space: store.log_slots,
        ..MembershipConfig::default()
    })));
    let running: Rc<RefCell<Vec<u16>>> = Rc::new(RefCell::new(vec![cfg.coordinators_per_node; cfg.compute_nodes as usize]));
    let gate = Rc::new(Gate { paused: Cell::new(false), active: RefCell::new(vec![0; cfg.compute_nodes as usize]) });
    for cn in 0..cfg.compute_nodes {
        let node = ComputeNode::new(cluster.join(cn + 1).expect("a fresh compute-node id"), &store, layout.clone(), failed.clone());
        let ids =
            match membership.borrow_mut().step(sim.now_ns(), Event::Join { node: cn + 1, coordinators: cfg.coordinators_per_node }).pop() {
                Some(Command::AssignIds { ids, .. }) => ids,
                other => panic!("compute node {} not admitted: {other:?}", cn + 1),
            };
        if cfg.crash.is_some() {
            let (m, h, running) = (membership.clone(), sim.handle(), running.clone());
            sim.spawn(HEARTBEAT_TAG + cn as u32, async move {
                while running.borrow()[cn as usize] > 0 {
                    m.borrow_mut().step(h.now_ns(), Event::Heartbeat { node: cn + 1 });
                    h.sleep(fd_timeout_ns / 4).await;
                }
                m.borrow_mut().step(h.now_ns(), Event::Leave { node: cn + 1 });
            });
        }
        for &id in ids.iter().take(cfg.coordinators_per_node as usize) {
            let mut coord = node.coordinator(id);
            let mut client = cfg.workload.client(id as u32, seeds.next_u64());
            handles.borrow_mut().push(client.handle());
            let (n, faulty, committed) = (cfg.txs_per_coordinator, cfg.crash.is_some(), committed.clone());
            let (gate, h, running) = (gate.clone(), sim.handle(), running.clone());
            sim.spawn(cn as u32, async move {
                for _ in 0..n {
                    while gate.paused.get() {
                        h.sleep(1_000).await;
                    }
                    gate.active.borrow_mut()[cn as usize] += 1;
                    let r = client.run_one(&mut coord).await;
                    let (unlocks, g) = (coord.take_unlocks(), gate.clone());
                    h.spawn(cn as u32, async move {
                        unlocks.await;
                        g.active.borrow_mut()[cn as usize] -= 1;
                    });
                    match r {
                        Ok(true) => committed.set(committed.get() + 1),
                        Ok(false) => {}
                        Err(e) => {
                            assert!(faulty, "unexpected error without faults: {e}");
                            break;
                        }
                    }
                }
                running.borrow_mut()[cn as usize] -= 1;
            });
        }
    }
    let mut recovered = false;
    if let Some((victim, at)) = cfg.crash {
        let declared: Rc<RefCell<Vec<u16>>> = Rc::default();
        let (m, h, d) = (membership.clone(), sim.handle(), declared.clone());
        sim.spawn(DETECTOR_TAG, async move {
            // Stop once the victim left cleanly (it finished before the crash).
            while d.borrow().is_empty() && m.borrow().status(victim + 1) != Some(NodeStatus::Left) {
                h.sleep(fd_timeout_ns / 8).await;
                for c in m.borrow_mut().step(h.now_ns(), Event::Tick) {
                    if let Command::Revoke { node } = c {
                        d.borrow_mut().push(node);
                    }
                }
            }
        });
        sim.run_until(clients_start_ns + at);
        if running.borrow()[victim as usize] == 0 {
            panic!("{}: compute node {victim} finished before the crash at {at} ns; crash earlier or run longer", cfg.describe());
        }
        sim.crash(HEARTBEAT_TAG + victim as u32);
        if !cfg.false_positive {
            sim.crash(victim as u32);
        }
        sim.run_while(|| declared.borrow().is_empty());
        assert_eq!(*declared.borrow(), vec![victim + 1], "seed {}: the detector must declare exactly the victim", cfg.seed);
        cluster.revoke(victim + 1);
        let victims: Vec<u16> = match membership.borrow_mut().step(sim.now_ns(), Event::RevokeAcked { node: victim + 1 }).pop() {
            Some(Command::Recover { ids, .. }) => ids,
            other => panic!("expected a recovery order, got {other:?}"),
        };
        if cfg.mode != Mode::Pandora {
            // Locks name no owner: stop the world and let the survivors drain.
            gate.paused.set(true);
            let g = gate.clone();
            sim.run_while(|| g.active.borrow().iter().enumerate().any(|(n, &a)| n != victim as usize && a > 0));
        }
        let done = Rc::new(Cell::new(false));
        let (d, f, l, ids, fab) = (done.clone(), failed.clone(), layout.clone(), victims.clone(), cluster.join(RC_NODE).expect("a fresh compute-node id"));
        let rc_id = 1 + cfg.compute_nodes * cfg.coordinators_per_node;
        let (bugs, mode) = (cfg.recovery_bugs, cfg.mode);
        sim.spawn(RECOVERY_TAG, async move {
            let mut rc = RecoveryCoordinator::new(&fab, l, rc_id);
            rc.bugs = bugs;
            match mode {
                Mode::Pandora => rc.recover(&ids).await.map(|_| ()),
                Mode::Ford => rc.recover_ford(&ids).await.map(|_| ()),
                Mode::Traditional => rc.recover_traditional(&ids).await.map(|_| ()),
            }
            .expect("recovery verbs fail only if the survivor is revoked");
            for id in ids {
                f.insert(id);
            }
            d.set(true);
        });
        sim.run_while(|| !done.get());
        let published = membership.borrow_mut().step(sim.now_ns(), Event::RecoveryDone { node: victim + 1 });
        assert!(published.contains(&Command::NotifyFailed { ids: victims.clone() }), "{published:?}");
        gate.paused.set(false);
        recovered = true;
    }
    sim.run();
    let clients_ns = sim.now_ns() - clients_start_ns;
    let mut swept = 0;
    if cfg.crash.is_some() {
        // The background scan: NotLogged stray locks nobody touched.
        let (fab, l, f, out) = (cluster.join(u16::MAX - 1).expect("a fresh compute-node id"), layout.clone(), failed.clone(), Rc::new(Cell::new(0)));
        let o = out.clone();
        sim.spawn(u32::MAX, async move {
            o.set(sweep_stray_locks(&fab, &l, &f).await.expect("sweep"));
        });
        sim.run();
        swept = out.get();
    }
    let mut outcome = Outcome::empty(&cfg.workload);
    for h in handles.borrow().iter() {
        outcome.merge(&h.outcome());
    }

    // Inspect through verbs, as a separate compute node would.
    let checker = cluster.join(u16::MAX).expect("a fresh compute-node id");
    let out: Rc<RefCell<Vec<String>>> = Rc::default();
    let (o, l, spec, oc, n_tables) = (out.clone(), layout.clone(), cfg.workload.clone(), outcome.clone(), tables.len() as u32);
    sim.spawn(u32::MAX, async move {
        let mut v = Vec::new();
        let mut live = Vec::new();
        for t in 0..n_tables {
            let s = snapshot(&checker, &l, t).await.expect("inspect");
            v.extend(s.replica_mismatches());
            v.extend(s.held_locks().into_iter().map(|(k, w)| format!("table {t} key {k}: lock {:#x} still held", w.0)));
            live.push(s.live());
        }
        v.extend(spec.verify(&live, &oc));
        *o.borrow_mut() = v;
    });
    sim.run();
    let violations = out.borrow().clone();
    SimWorkloadReport {
        committed: committed.get(),
        violations,
        sim_time_ns: sim.now_ns(),
        clients_ns,
        in_doubt: outcome.ledger().map(|l| l.in_doubt.len()).unwrap_or(0),
        recovered,
        stray_locks_swept: swept,
        outcome: Some(outcome),
        replay: format!("tandem_bench::sim_workload::run with {}", cfg.describe()),
    }
}
