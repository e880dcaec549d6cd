//! One seeded simulation run of any workload (the tier of tests between
//! unit tests and killed processes): ≥2 compute nodes with several
//! coordinators each, ≥3 memory nodes, replicas 2, random verb delays and
//! torn reads, the faults of [`Faults`] (a compute crash or a false
//! suspicion, the recovery of docs/DESIGN.md §4.5 with a recovery
//! coordinator that may crash too, a memory node lost and re-replicated),
//! then every end-of-run invariant: the background stray-lock sweep,
//! replica agreement, no lock left held, and the workload's own check. The
//! same seed always takes the same steps; a failing seed is replayed with
//! the command in [`SimReport::replay`]
//! (`tandem pandora sim --workload W ...`). [`preset`] names the
//! simulation's workload sizes, for the tests and the command alike.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use tandem_cluster::workload::{Client, Outcome, OutcomeHandle, WorkloadSpec};
use tandem_dkvs::check::snapshot;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryBugs, RecoveryCoordinator, RecoveryReport};
use tandem_dkvs::{
    BugSwitches, ComputeNode, Coordinator, CoordinatorStats, FailedIds, Layout, Mode, StoreConfig,
};
use tandem_fabric::sim::{SimCluster, SimFabric, SimFabricConfig};
use tandem_membership::{Command, Event, Membership, MembershipConfig};
use tandem_sim::{Rng, Sim};
use tandem_workloads::bank::{BankSpec, ACCOUNTS};
use tandem_workloads::smallbank::SmallBankSpec;
use tandem_workloads::tatp::TatpSpec;
use tandem_workloads::tpcc::TpccSpec;

/// The simulation's workloads by name ([`preset`]).
pub const PRESETS: [&str; 7] = [
    "bank",
    "smallbank",
    "tatp",
    "tatp-hot",
    "tpcc",
    "tpcc-2",
    "tpcc-bounded",
];

/// The workload sizes of the simulation tests, by name (also `sim-bank
/// --workload`): small enough for hundreds of seeds, busy enough to
/// conflict. `tatp-hot` has 8 subscribers, so updates of one row collide;
/// `tpcc-2` has two warehouses (remote order lines and payments).
pub fn preset(name: &str) -> Result<WorkloadSpec, String> {
    Ok(match name {
        "bank" => WorkloadSpec::Bank(BankSpec {
            customers: 6,
            initial_balance: 100,
            receipt_capacity: 2_048,
            ..BankSpec::default()
        }),
        // 1 000 accounts, FORD's 4 % hot set, balances small enough that
        // SendPayment rollbacks and WriteCheck penalties happen.
        "smallbank" => WorkloadSpec::SmallBank(SmallBankSpec {
            initial_balance_cents: 1_000,
            ..SmallBankSpec::scaled(1_000)
        }),
        "tatp" => WorkloadSpec::Tatp(TatpSpec {
            subscribers: 1_000,
            ..TatpSpec::default()
        }),
        "tatp-hot" => WorkloadSpec::Tatp(TatpSpec {
            subscribers: 8,
            ..TatpSpec::default()
        }),
        "tpcc" => WorkloadSpec::Tpcc(TpccSpec::tiny(1)),
        // Retains 20 orders and payments of 30 per district: archiving starts at once.
        "tpcc-bounded" => WorkloadSpec::Tpcc(TpccSpec {
            retain: Some(20),
            ..TpccSpec::tiny(1)
        }),
        "tpcc-2" => WorkloadSpec::Tpcc(TpccSpec::tiny(2)),
        other => {
            return Err(format!(
                "unknown simulation workload '{other}' ({})",
                PRESETS.join(", ")
            ))
        }
    })
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub mode: Mode,
    pub bugs: BugSwitches,
    pub compute_nodes: u16,
    pub coordinators_per_node: u16,
    pub memory_nodes: u16,
    pub replicas: u16,
    /// The [`preset`] the workload came from (named in the replay command).
    pub preset: &'static str,
    /// Only the bank's may be changed after [`SimConfig::new`] (its flags replay it).
    pub workload: WorkloadSpec,
    pub txs_per_coordinator: u32,
    pub fabric: SimFabricConfig,
    /// Bank only: concentrate debits on one customer whose two accounts
    /// have different primaries (a same-primary pair is ordered by the
    /// queue pair, which hides validation races). Used to hunt the
    /// relaxed-locks bug.
    pub hot_sibling_pair: bool,
    pub faults: Faults,
    /// Log bytes per coordinator (TPC-C's large transactions need more than the bank's).
    pub log_slot_bytes: u64,
    /// The coordinators' invariant assertions (`StoreConfig::assertions`),
    /// and the recovery coordinators' unless `recovery_assertions` says
    /// (`RecoveryCoordinator::assertions`): `None`, each runs them unless a
    /// bug is planted in it; `Some(on)` decides.
    pub assertions: Option<bool>,
    /// The recovery coordinators' assertions, if not as `assertions` says.
    pub recovery_assertions: Option<bool>,
}

/// Compute-side faults injected into one run (docs/DESIGN.md §4.5). The harness
/// plays the membership service: it detects after `detect_ns`, revokes the
/// node on every memory node, runs log recovery on a survivor, and only then
/// adds the node's coordinators to `failed_ids`.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Crash compute node `.0` (0-based) at simulated time `.1`, counted from
    /// the start of the simulation, loading included (see
    /// [`SimReport::clients_start_ns`]; a time before the clients start
    /// means at their start), verbs in flight or not.
    /// Detection is the membership service's heartbeat failure detector,
    /// running in the simulator with a timeout of `detect_ns` (at least 2 µs).
    pub crash: Option<(u16, u64)>,
    /// Do not actually crash it: only its heartbeats stop (a slow-but-alive
    /// node), and the failure detector declares it failed anyway.
    pub false_positive: bool,
    /// Crash the first recovery coordinator this long after it starts, then
    /// re-run recovery from the start on another node.
    pub crash_recovery_after_ns: Option<u64>,
    pub detect_ns: u64,
    /// Test-only recovery bugs (to prove the crash tests can fail).
    pub recovery_bugs: RecoveryBugs,
    /// Lose memory node `.0` at simulated time `.1` (docs/DESIGN.md §4.6).
    pub memory_failure: Option<(u16, u64)>,
    /// When the crash happens, also stall the heartbeats of this compute node
    /// (0-based): a slow node whose clients keep running, suspected alongside.
    pub suspect_too: Option<u16>,
    /// Pandora: crash this compute node (0-based) just before the memory
    /// node of `memory_failure` fails; it is recovered while every other
    /// compute node holds, from the live replicas only (docs/DESIGN.md §4.6).
    pub crash_in_memory_loss: Option<u16>,
    /// Cut the link between compute node `.0` (0-based) and memory node
    /// `.1` at `.2`, both alive, as a reset connection or a silence bound
    /// ends it: the compute node's verbs there fail with `Unavailable`
    /// while the membership has the memory node up. The compute node plays
    /// its watchdog: `VERDICT_PATIENCE_NS` later it ends its incarnation
    /// (stops, heartbeats too) and the membership recovers it.
    pub cut_link: Option<(u16, u16, u64)>,
}

impl Faults {
    fn flags(&self) -> String {
        let mut f = String::new();
        if let Some((n, at)) = self.crash {
            f += &format!(
                " --crash-node {n} --crash-at-ns {at} --detect-ns {}",
                self.detect_ns
            );
        }
        if self.false_positive {
            f += " --false-positive";
        }
        if let Some(x) = self.crash_recovery_after_ns {
            f += &format!(" --crash-recovery-after-ns {x}");
        }
        if self.recovery_bugs.always_roll_back {
            f += " --inject-bug always-roll-back";
        }
        if self.recovery_bugs.skip_log_recovery {
            f += " --inject-bug skip-log-recovery";
        }
        if self.recovery_bugs.lost_decision {
            f += " --inject-bug lost-decision";
        }
        if self.recovery_bugs.trust_undo_images {
            f += " --inject-bug trust-undo-images";
        }
        if let Some((m, at)) = self.memory_failure {
            f += &format!(" --fail-memory-node {m} --fail-memory-at-ns {at}");
        }
        if let Some(n) = self.suspect_too {
            f += &format!(" --suspect-too {n}");
        }
        if let Some(n) = self.crash_in_memory_loss {
            f += &format!(" --crash-in-memory-loss {n}");
        }
        if let Some((n, m, at)) = self.cut_link {
            f += &format!(
                " --cut-link {n}:{m} --cut-at-ns {at} --detect-ns {}",
                self.detect_ns
            );
        }
        if self.recovery_bugs.ignore_lost_primaries {
            f += " --inject-bug ignore-lost-primaries";
        }
        f
    }
}

impl SimConfig {
    /// The [`preset`] named `name` on the default cluster: 2 compute nodes
    /// × 4 coordinators, 3 memory nodes, 2 replicas, 40 transactions per
    /// coordinator, no faults.
    pub fn new(mode: Mode, name: &str, seed: u64) -> Result<Self, String> {
        let preset_name = PRESETS.into_iter().find(|p| *p == name);
        let workload = preset(name)?;
        let log_slot_bytes = if matches!(workload, WorkloadSpec::Bank(_)) {
            8 * 1024
        } else {
            32 * 1024
        };
        Ok(SimConfig {
            seed,
            mode,
            bugs: BugSwitches::default(),
            compute_nodes: 2,
            coordinators_per_node: 4,
            memory_nodes: 3,
            replicas: 2,
            preset: preset_name.expect("every preset is in PRESETS"),
            workload,
            txs_per_coordinator: 40,
            fabric: SimFabricConfig::default(),
            hot_sibling_pair: false,
            faults: Faults::default(),
            log_slot_bytes,
            assertions: None,
            recovery_assertions: None,
        })
    }

    /// The bank preset.
    pub fn bank(mode: Mode, seed: u64) -> Self {
        Self::new(mode, "bank", seed).expect("a preset")
    }

    /// The bank's spec, to adjust (panics for another workload).
    pub fn bank_mut(&mut self) -> &mut BankSpec {
        match &mut self.workload {
            WorkloadSpec::Bank(b) => b,
            other => panic!("bank_mut on a {} run", other.name()),
        }
    }

    /// The flags of `tandem pandora sim` that replay this run.
    fn flags(&self) -> String {
        let mut flags = format!(
            " --workload {} --txs {}",
            self.preset, self.txs_per_coordinator
        );
        flags += &self
            .bugs
            .names()
            .iter()
            .map(|n| format!(" --inject-bug {n}"))
            .collect::<String>();
        if self.compute_nodes != 2 {
            flags.push_str(&format!(" --compute-nodes {}", self.compute_nodes));
        }
        if self.hot_sibling_pair {
            flags.push_str(" --hot-sibling-pair");
        }
        if let WorkloadSpec::Bank(b) = &self.workload {
            let defaults = BankSpec::default();
            flags.push_str(&format!(" --customers {}", b.customers));
            if b.retries != defaults.retries {
                flags.push_str(&format!(" --retries {}", b.retries));
            }
            if b.receipt_chance != defaults.receipt_chance {
                flags.push_str(&format!(" --receipt-chance {}", b.receipt_chance));
            }
        }
        flags + &self.faults.flags()
    }
}

/// Compute-node ids of recovery-coordinator attempts.
const RC_NODE_BASE: u16 = 60_000;

/// How long a compute node waits for the membership's verdict on a memory
/// node it cannot reach before it ends its incarnation (the watchdog of
/// `tandem compute-server`, scaled to simulated transactions of ~10 µs).
pub const VERDICT_PATIENCE_NS: u64 = 30_000;

/// Task tags: heartbeat senders and the failure detector.
const HEARTBEAT_TAG: u32 = 20_000;
const DETECTOR_TAG: u32 = 30_000;

/// Stop-the-world control for the baselines' recovery: coordinators wait
/// while `paused`; `active` counts transactions in flight per compute node.
struct Gate {
    paused: Cell<bool>,
    active: RefCell<Vec<usize>>,
}

impl Gate {
    fn new(compute_nodes: u16) -> Self {
        Gate {
            paused: Cell::new(false),
            active: RefCell::new(vec![0; compute_nodes as usize]),
        }
    }
}

#[derive(Debug, Default)]
pub struct SimReport {
    /// Transactions the clients saw commit.
    pub committed: u64,
    /// Transactions that ended without committing (aborts and the application's rollbacks).
    pub aborted: u64,
    pub violations: Vec<String>,
    pub sim_time_ns: u64,
    pub stats: CoordinatorStats,
    pub replay: String,
    /// Recovery reports, one per recovery attempt that finished.
    pub recoveries: Vec<RecoveryReport>,
    /// Commits acknowledged to survivors between the crash and the end of recovery.
    pub survivor_commits_during_recovery: u64,
    /// Simulated time from the crash to the end of recovery (notify included).
    pub recovery_window_ns: u64,
    pub stray_locks_swept: usize,
    pub in_doubt: usize,
    /// Slots copied onto the replacement memory node.
    pub slots_rereplicated: u64,
    /// Commits acknowledged while the failed memory node's partitions ran on one copy.
    pub commits_while_degraded: u64,
    /// When the load finished and the clients started (a seed's load does
    /// not depend on its faults, so a run without them tells where to put them).
    pub clients_start_ns: u64,
    /// Simulated time from the clients' start to the end of the last transaction.
    pub clients_ns: u64,
    /// Per compute node: simulated time from the clients' start until its
    /// last client finished (0 if it never did: crashed or fenced).
    pub node_done_ns: Vec<u64>,
    /// The merged client outcome (ledger).
    pub outcome: Option<Outcome>,
}

/// Run one seed to completion and check every invariant.
pub fn run(cfg: &SimConfig) -> SimReport {
    let store = store_config(cfg);
    let layout = Arc::new(Layout::new(&store).expect("valid simulation config"));
    let sim = Sim::new(cfg.seed);
    let region = *layout.region_bytes.iter().max().unwrap();
    let cluster = SimCluster::with_nodes(
        sim.handle(),
        cfg.memory_nodes as usize,
        region,
        cfg.fabric.clone(),
    );
    load(&sim, &cluster, &layout, &cfg.workload);

    // Run the clients: every coordinator is a task owned by its compute node.
    let clients_start_ns = sim.now_ns();
    let fd_timeout_ns = cfg.faults.detect_ns.max(2_000);
    let w = World::new(
        cfg,
        &sim,
        &cluster,
        layout.clone(),
        fd_timeout_ns,
        store.log_slots,
    );
    let tallies = Rc::new(Tallies::new(cfg));
    let nodes = w.start_clients(&store, &tallies, fd_timeout_ns);
    let mut faults = FaultTally::default();
    if let Some((victim, at)) = cfg.faults.crash {
        w.crash_and_recover(victim, at, fd_timeout_ns, &tallies, &mut faults);
    }
    if let Some((m, at)) = cfg.faults.memory_failure {
        w.lose_memory_node(m, at, &nodes, &tallies, &mut faults);
    }
    if let Some((n, m, at)) = cfg.faults.cut_link {
        w.cut_link(n, m, at, fd_timeout_ns, &tallies, &mut faults);
    }
    sim.run();
    let clients_ns = sim.now_ns() - clients_start_ns;
    let node_done_ns = tallies.node_done_ns(clients_start_ns);
    let f = &cfg.faults;
    if f.crash.is_some() || f.crash_in_memory_loss.is_some() || f.cut_link.is_some() {
        faults.swept = w.sweep_untouched_strays();
    }
    let outcome = tallies.outcome(&cfg.workload);
    let violations = inspect(&sim, &cluster, &layout, &cfg.workload, &outcome);
    let stats = tallies.stats.borrow().clone();
    SimReport {
        recoveries: faults.recoveries,
        survivor_commits_during_recovery: faults.window_commits,
        recovery_window_ns: faults.window_ns,
        stray_locks_swept: faults.swept,
        slots_rereplicated: faults.rereplicated,
        commits_while_degraded: faults.degraded_commits,
        in_doubt: in_doubt(&outcome),
        committed: tallies.committed(),
        aborted: tallies.aborted.get(),
        violations,
        sim_time_ns: sim.now_ns(),
        stats,
        replay: format!(
            "cargo run --release -- pandora sim --store {} --seed {}{}",
            cfg.mode,
            cfg.seed,
            cfg.flags()
        ),
        clients_start_ns,
        clients_ns,
        node_done_ns,
        outcome: Some(outcome),
    }
}

/// The store of a simulation run: 12 partitions per table, 64 log slots.
fn store_config(cfg: &SimConfig) -> StoreConfig {
    let mut store = StoreConfig::new(
        cfg.mode,
        cfg.memory_nodes,
        cfg.replicas,
        cfg.workload.tables(),
    );
    store.partitions_per_table = 12;
    store.log_slots = 64;
    store.log_slot_bytes = cfg.log_slot_bytes;
    store.bugs = cfg.bugs;
    store.assertions = cfg.assertions;
    store
}

/// Load the workload's tables from compute node 0, to completion.
fn load(sim: &Sim, cluster: &SimCluster, layout: &Arc<Layout>, spec: &WorkloadSpec) {
    let loader_fabric = cluster.join(0).expect("a fresh compute-node id");
    let (l, spec) = (layout.clone(), spec.clone());
    sim.spawn(u32::MAX, async move {
        let mut loader = Loader::new(&loader_fabric, l);
        spec.load(&mut loader).await.expect("load");
        loader.finish().await.expect("load");
    });
    sim.run();
}

/// What the client tasks share, each compute node's share at its index.
struct Tallies {
    handles: RefCell<Vec<OutcomeHandle>>,
    /// Commits per compute node (for the survivors' share during a recovery).
    commits: RefCell<Vec<u64>>,
    aborted: Cell<u64>,
    stats: RefCell<CoordinatorStats>,
    /// Client tasks still running per compute node: a node leaves when they end.
    running: RefCell<Vec<u16>>,
    /// When each node's last client finished.
    done: RefCell<Vec<u64>>,
}

impl Tallies {
    fn new(cfg: &SimConfig) -> Self {
        let nodes = cfg.compute_nodes as usize;
        Tallies {
            handles: RefCell::default(),
            commits: RefCell::new(vec![0; nodes]),
            aborted: Cell::new(0),
            stats: RefCell::default(),
            running: RefCell::new(vec![cfg.coordinators_per_node; nodes]),
            done: RefCell::new(vec![0; nodes]),
        }
    }

    fn any_running(&self) -> bool {
        self.running.borrow().iter().any(|&r| r > 0)
    }

    fn committed(&self) -> u64 {
        self.commits.borrow().iter().sum()
    }

    /// Commits of the compute nodes (1-based) not in `expected`.
    fn survivors_committed(&self, expected: &[u16]) -> u64 {
        self.commits
            .borrow()
            .iter()
            .enumerate()
            .filter(|(cn, _)| !expected.contains(&(*cn as u16 + 1)))
            .map(|(_, c)| c)
            .sum()
    }

    /// Per compute node: when its last client finished, counted from `start_ns`.
    fn node_done_ns(&self, start_ns: u64) -> Vec<u64> {
        self.done
            .borrow()
            .iter()
            .map(|&t| t.saturating_sub(start_ns))
            .collect()
    }

    /// The clients' outcomes merged.
    fn outcome(&self, spec: &WorkloadSpec) -> Outcome {
        let mut outcome = Outcome::empty(spec);
        for h in self.handles.borrow().iter() {
            outcome.merge(&h.outcome());
        }
        outcome
    }
}

/// Each compute node's memory view and coordinator ids, as the clients started.
struct Nodes {
    views: Vec<tandem_dkvs::MemoryView>,
    ids: Vec<Vec<u16>>,
}

/// What the injected faults did, for the [`SimReport`].
#[derive(Default)]
struct FaultTally {
    recoveries: Vec<RecoveryReport>,
    window_commits: u64,
    window_ns: u64,
    swept: usize,
    rereplicated: u64,
    degraded_commits: u64,
}

/// Bank with `hot_sibling_pair`: the customer whose two accounts have different primaries.
fn hot_customer(cfg: &SimConfig, layout: &Layout) -> Option<(u64, f64)> {
    let WorkloadSpec::Bank(bank) = &cfg.workload else {
        return None;
    };
    cfg.hot_sibling_pair.then(|| {
        let t = layout.table(ACCOUNTS);
        let primary = |a: u64| t.replicas[t.home(a).0 as usize][0];
        let c = (0..bank.customers)
            .find(|&c| primary(2 * c) != primary(2 * c + 1))
            .unwrap_or(0);
        (c, 0.5)
    })
}

/// Transactions in doubt at the end (their coordinator crashed mid-commit).
fn in_doubt(o: &Outcome) -> usize {
    match o {
        Outcome::Bank(l) => l.in_doubt.len(),
        _ => o.ledger().map_or(0, |l| l.in_doubt.len()),
    }
}

/// The end-of-run inspection, through verbs as a separate compute node
/// (`u16::MAX`) would: identical replicas and no lock held in every table,
/// then the workload's own check against the clients' outcome (the bank's
/// is exact). Runs the simulation until the inspection finished (other
/// tasks may still be live).
pub(crate) fn inspect(
    sim: &Sim,
    cluster: &SimCluster,
    layout: &Arc<Layout>,
    spec: &WorkloadSpec,
    outcome: &Outcome,
) -> Vec<String> {
    let checker = cluster.join(u16::MAX).expect("the checker's id is fresh");
    let out: Rc<RefCell<Option<Vec<String>>>> = Rc::default();
    let (o, l, spec, oc, tables) = (
        out.clone(),
        layout.clone(),
        spec.clone(),
        outcome.clone(),
        spec.tables().len() as u32,
    );
    sim.spawn(u32::MAX, async move {
        let mut v = Vec::new();
        let mut live = Vec::new();
        for t in 0..tables {
            let s = snapshot(&checker, &l, t).await.expect("inspect");
            v.extend(s.replica_mismatches());
            v.extend(s.structure_violations(l.table(t)));
            v.extend(
                s.held_locks()
                    .into_iter()
                    .map(|(k, w)| format!("table {} key {k}: lock {:#x} still held", s.table, w.0)),
            );
            live.push(s.live());
        }
        v.extend(spec.verify(&live, &oc));
        *o.borrow_mut() = Some(v);
    });
    sim.run_while(|| out.borrow().is_none());
    let v = out.borrow_mut().take().expect("the inspection finished");
    v
}

/// What the membership's detect → revoke → recover → notify pipeline touches.
struct World<'a> {
    cfg: &'a SimConfig,
    sim: &'a Sim,
    cluster: &'a SimCluster,
    membership: Rc<RefCell<Membership>>,
    gate: Rc<Gate>,
    failed: FailedIds,
    layout: Arc<Layout>,
    /// Recovery-coordinator attempts so far (each is a compute node of its own).
    next_rc: Cell<u16>,
}

impl<'a> World<'a> {
    /// The membership service (heartbeat timeout `fd_timeout_ns`, `id_space`
    /// coordinator ids), the gate open, no id failed yet.
    fn new(
        cfg: &'a SimConfig,
        sim: &'a Sim,
        cluster: &'a SimCluster,
        layout: Arc<Layout>,
        fd_timeout_ns: u64,
        id_space: u32,
    ) -> Self {
        World {
            cfg,
            sim,
            cluster,
            membership: Rc::new(RefCell::new(Membership::new(MembershipConfig {
                heartbeat_timeout_ns: fd_timeout_ns,
                id_space,
                ..MembershipConfig::default()
            }))),
            gate: Rc::new(Gate::new(cfg.compute_nodes)),
            failed: FailedIds::new(),
            layout,
            next_rc: Cell::new(0),
        }
    }

    /// Admit every compute node to the membership and start its clients
    /// (and, with a crash to detect, its heartbeats).
    fn start_clients(
        &self,
        store: &StoreConfig,
        tallies: &Rc<Tallies>,
        fd_timeout_ns: u64,
    ) -> Nodes {
        let cfg = self.cfg;
        let mut seeds = Rng::new(cfg.seed ^ 0xBA4C);
        let hot = hot_customer(cfg, &self.layout);
        let mut nodes = Nodes {
            views: Vec::new(),
            ids: Vec::new(),
        };
        for cn in 0..cfg.compute_nodes {
            let node = ComputeNode::new(
                self.cluster.join(cn + 1).expect("a fresh compute-node id"),
                store,
                self.layout.clone(),
                self.failed.clone(),
            );
            nodes.views.push(node.memory_view().clone());
            let ids = self.admit(cn);
            nodes.ids.push(ids.clone());
            if cfg.faults.crash.is_some() || cfg.faults.cut_link.is_some() {
                self.spawn_heartbeats(cn, fd_timeout_ns, tallies);
            }
            for k in 0..cfg.coordinators_per_node {
                let id = ids[k as usize];
                let coord = node.coordinator(id);
                let mut client = cfg.workload.client(id as u32, seeds.next_u64());
                if let Client::Bank(b) = &mut client {
                    b.hot_customer = hot;
                }
                tallies.handles.borrow_mut().push(client.handle());
                self.spawn_client(cn, coord, client, tallies);
            }
        }
        nodes
    }

    /// Compute node `cn` (0-based) joins the membership; its coordinator ids.
    fn admit(&self, cn: u16) -> Vec<u16> {
        let event = Event::Join {
            node: cn + 1,
            coordinators: self.cfg.coordinators_per_node,
        };
        match self
            .membership
            .borrow_mut()
            .step(self.sim.now_ns(), event)
            .pop()
        {
            Some(Command::AssignIds { ids, .. }) => ids,
            other => panic!("compute node {} not admitted: {other:?}", cn + 1),
        }
    }

    /// Heartbeats from a task of the node's own (tag HEARTBEAT_TAG + cn):
    /// crashing the node stops them; stopping only them is a slow node.
    fn spawn_heartbeats(&self, cn: u16, fd_timeout_ns: u64, tallies: &Rc<Tallies>) {
        let (m, h, t) = (self.membership.clone(), self.sim.handle(), tallies.clone());
        self.sim.spawn(HEARTBEAT_TAG + cn as u32, async move {
            while t.running.borrow()[cn as usize] > 0 {
                m.borrow_mut()
                    .step(h.now_ns(), Event::Heartbeat { node: cn + 1 });
                h.sleep(fd_timeout_ns / 4).await;
            }
            m.borrow_mut()
                .step(h.now_ns(), Event::Leave { node: cn + 1 });
        });
    }

    /// A coordinator of compute node `cn` runs `txs_per_coordinator`
    /// transactions of `client`, as a task the node owns.
    fn spawn_client(
        &self,
        cn: u16,
        mut coord: Coordinator<SimFabric>,
        mut client: Client,
        tallies: &Rc<Tallies>,
    ) {
        let f = &self.cfg.faults;
        let faulty = f.crash.is_some() || f.memory_failure.is_some() || f.cut_link.is_some();
        let n = self.cfg.txs_per_coordinator;
        let (t, gate, h) = (tallies.clone(), self.gate.clone(), self.sim.handle());
        self.sim.spawn(cn as u32, async move {
            for _ in 0..n {
                // FORD-style recovery stops the world: wait while paused.
                while gate.paused.get() {
                    h.sleep(1_000).await;
                }
                gate.active.borrow_mut()[cn as usize] += 1;
                let r = client.run_one(&mut coord).await;
                // Drained means quiet: the transaction counts as active
                // until its unlocks land, without holding up the next one.
                let (unlocks, g) = (coord.take_unlocks(), gate.clone());
                h.spawn(cn as u32, async move {
                    unlocks.await;
                    g.active.borrow_mut()[cn as usize] -= 1;
                });
                match r {
                    Ok(true) => t.commits.borrow_mut()[cn as usize] += 1,
                    Ok(false) => t.aborted.set(t.aborted.get() + 1),
                    Err(e) => {
                        // Only a node declared failed loses access; the
                        // ledger keeps the in-doubt transaction.
                        assert!(faulty, "unexpected error without faults: {e}");
                        break;
                    }
                }
            }
            t.stats.borrow_mut().merge(&coord.stats);
            t.running.borrow_mut()[cn as usize] -= 1;
            if t.running.borrow()[cn as usize] == 0 {
                t.done.borrow_mut()[cn as usize] = h.now_ns();
            }
        });
    }

    /// Crash compute node `victim` (0-based) at `at` (or only its heartbeats,
    /// for a false suspicion; and those of `suspect_too`), then let the
    /// membership detect, fence and recover every node it declares.
    fn crash_and_recover(
        &self,
        victim: u16,
        at: u64,
        fd_timeout_ns: u64,
        tallies: &Rc<Tallies>,
        faults: &mut FaultTally,
    ) {
        let (cfg, sim) = (self.cfg, self.sim);
        let expected: Vec<u16> = std::iter::once(victim)
            .chain(cfg.faults.suspect_too)
            .map(|n| n + 1)
            .collect();
        let declared = self.spawn_detector(fd_timeout_ns, expected.clone(), tallies.clone());
        sim.run_until(at.max(sim.now_ns())); // a time before the clients started: at their start
        let crash_ns = sim.now_ns();
        sim.crash(HEARTBEAT_TAG + victim as u32);
        if !cfg.faults.false_positive {
            sim.crash(victim as u32);
        }
        if let Some(slow) = cfg.faults.suspect_too {
            // Alive and slow: only its heartbeats stall, its clients run on.
            sim.crash(HEARTBEAT_TAG + slow as u32);
        }
        let before = tallies.survivors_committed(&expected);
        // (1) detection by heartbeat timeout: whoever the detector declares is
        // fenced and recovered, one after the other, until every silent node is.
        sim.run_while(|| {
            !expected.iter().all(|n| declared.borrow().contains(n)) && tallies.any_running()
        });
        let all: Vec<u16> = declared.borrow().clone();
        for n in &expected {
            assert!(
                all.contains(n),
                "seed {}: the detector never declared silent node {n}",
                cfg.seed
            );
        }
        for &node in &all {
            faults.recoveries.push(self.fence_and_recover(node, &all));
        }
        faults.window_commits = tallies.survivors_committed(&expected) - before;
        faults.window_ns = sim.now_ns() - crash_ns;
    }

    /// Cut compute node `n`'s link to memory node `m` at `at`, both alive.
    /// Its commits that miss a write there wait for a verdict that never
    /// comes; `VERDICT_PATIENCE_NS` later it ends its incarnation, and the
    /// membership detects, fences and recovers it as after a crash.
    fn cut_link(
        &self,
        n: u16,
        m: u16,
        at: u64,
        fd_timeout_ns: u64,
        tallies: &Rc<Tallies>,
        faults: &mut FaultTally,
    ) {
        self.sim.run_until(at.max(self.sim.now_ns()));
        self.cluster.cut_link(n + 1, m);
        let end = self.sim.now_ns() + VERDICT_PATIENCE_NS;
        self.crash_and_recover(n, end, fd_timeout_ns, tallies, faults);
    }

    /// Lose memory node `m` at `at`, run degraded for 60 µs, then
    /// re-replicate onto a replacement.
    fn lose_memory_node(
        &self,
        m: u16,
        at: u64,
        nodes: &Nodes,
        tallies: &Tallies,
        faults: &mut FaultTally,
    ) {
        let loss = MemoryLoss {
            cfg: self.cfg,
            sim: self.sim,
            cluster: self.cluster,
            layout: &self.layout,
            gate: &self.gate,
            views: &nodes.views,
            failed: &self.failed,
            node_ids: &nodes.ids,
        };
        faults.recoveries.extend(loss.fail(m, at));
        let before = tallies.committed();
        self.sim.run_until(self.sim.now_ns() + 60_000);
        faults.degraded_commits = tallies.committed() - before;
        faults.rereplicated = loss.replace(m);
    }

    /// The background scan: NotLogged stray locks nobody touched. How many
    /// it swept.
    fn sweep_untouched_strays(&self) -> usize {
        let (fab, l, f, out) = (
            self.cluster
                .join(u16::MAX - 1)
                .expect("a fresh compute-node id"),
            self.layout.clone(),
            self.failed.clone(),
            Rc::new(RefCell::new(0)),
        );
        let o = out.clone();
        self.sim.spawn(u32::MAX, async move {
            *o.borrow_mut() = sweep_stray_locks(&fab, &l, &f).await.expect("sweep");
        });
        self.sim.run();
        let swept = *out.borrow();
        swept
    }

    /// The failure detector ticks the membership state machine until every
    /// node in `expected` is declared (or the clients are done); it records
    /// every node it declares, expected or not.
    fn spawn_detector(
        &self,
        fd_timeout_ns: u64,
        expected: Vec<u16>,
        tallies: Rc<Tallies>,
    ) -> Rc<RefCell<Vec<u16>>> {
        let declared: Rc<RefCell<Vec<u16>>> = Rc::default();
        let (m, h, d) = (self.membership.clone(), self.sim.handle(), declared.clone());
        self.sim.spawn(DETECTOR_TAG, async move {
            while !expected.iter().all(|n| d.borrow().contains(n)) && tallies.any_running() {
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

    /// (2) revoke `node` on every memory node, (3) run log recovery on a
    /// survivor (re-run from scratch if its coordinator crashes), (4) only
    /// then publish its ids in failed_ids. `declared` nodes are not drained.
    fn fence_and_recover(&self, node: u16, declared: &[u16]) -> RecoveryReport {
        let (cfg, sim) = (self.cfg, self.sim);
        self.cluster.revoke(node);
        let victims: Vec<u16> = match self
            .membership
            .borrow_mut()
            .step(sim.now_ns(), Event::LinksTerminated { node })
            .pop()
        {
            Some(Command::Recover { ids, .. }) => ids,
            other => panic!("expected a recovery order for node {node}, got {other:?}"),
        };
        if cfg.mode != Mode::Pandora {
            // Locks name no owner: stop the world and let the others drain.
            self.gate.paused.set(true);
            let g = self.gate.clone();
            sim.run_while(|| {
                g.active
                    .borrow()
                    .iter()
                    .enumerate()
                    .any(|(n, &a)| !declared.contains(&(n as u16 + 1)) && a > 0)
            });
        }
        let report = self.recover_ids(&victims);
        let published = self
            .membership
            .borrow_mut()
            .step(sim.now_ns(), Event::RecoveryDone { node });
        assert!(
            published.contains(&Command::NotifyFailed {
                ids: victims.clone()
            }),
            "{published:?}"
        );
        self.gate.paused.set(false);
        report
    }

    /// Recover `ids`; the run's first recovery coordinator may crash
    /// (`crash_recovery_after_ns`), and then another one starts over.
    fn recover_ids(&self, victims: &[u16]) -> RecoveryReport {
        let (cfg, sim) = (self.cfg, self.sim);
        let first_rc_id = 1 + cfg.compute_nodes * cfg.coordinators_per_node;
        loop {
            let done: Rc<RefCell<Option<RecoveryReport>>> = Rc::default();
            // Each attempt joins as its own compute node, so a crashed attempt
            // can be fenced off like any failed node before the next one runs.
            let rc_node = RC_NODE_BASE + self.next_rc.get();
            self.next_rc.set(self.next_rc.get() + 1);
            let fab = self.cluster.join(rc_node).expect("a fresh compute-node id");
            let (d, f, l, ids) = (
                done.clone(),
                self.failed.clone(),
                self.layout.clone(),
                victims.to_vec(),
            );
            let rc_id = first_rc_id + rc_node - RC_NODE_BASE;
            let rc_tag = 10_000 + (rc_node - RC_NODE_BASE) as u32;
            let (bugs, mode) = (cfg.faults.recovery_bugs, cfg.mode);
            let assertions = cfg.recovery_assertions.or(cfg.assertions);
            sim.spawn(rc_tag, async move {
                let mut rc = RecoveryCoordinator::new(&fab, l, rc_id);
                rc.bugs = bugs;
                rc.assertions = assertions;
                let report = match mode {
                    Mode::Pandora => rc.recover(&ids).await,
                    Mode::Ford => rc.recover_ford(&ids).await.map(baseline_report),
                    Mode::Traditional => rc.recover_traditional(&ids).await.map(baseline_report),
                }
                .expect("recovery verbs fail only if the survivor is revoked");
                for id in ids {
                    f.insert(id);
                }
                *d.borrow_mut() = Some(report);
            });
            if let (RC_NODE_BASE, Some(after)) = (rc_node, cfg.faults.crash_recovery_after_ns) {
                sim.run_until(sim.now_ns() + after);
                if done.borrow().is_none() {
                    sim.crash(rc_tag);
                    self.cluster.revoke(rc_node);
                    continue;
                }
            }
            sim.run_while(|| done.borrow().is_none());
            return done.borrow_mut().take().expect("recovery finished");
        }
    }
}

/// What a memory-node loss (docs/DESIGN.md §4.6) acts on; the harness plays the
/// membership service, as for compute crashes.
struct MemoryLoss<'a> {
    cfg: &'a SimConfig,
    sim: &'a Sim,
    cluster: &'a SimCluster,
    layout: &'a Arc<Layout>,
    gate: &'a Rc<Gate>,
    views: &'a [tandem_dkvs::MemoryView],
    failed: &'a FailedIds,
    /// Each compute node's coordinator ids.
    node_ids: &'a [Vec<u16>],
}

impl MemoryLoss<'_> {
    /// Hold new transactions and wait for those in flight, but a crashed
    /// node's: they never finish.
    fn drain(&self) {
        let victim = self.cfg.faults.crash_in_memory_loss;
        self.gate.paused.set(true);
        let g = self.gate.clone();
        self.sim.run_while(|| {
            g.active
                .borrow()
                .iter()
                .enumerate()
                .any(|(n, &a)| a > 0 && victim != Some(n as u16))
        });
    }

    /// Lose memory node `m` at `at` (and crash the compute node of
    /// `crash_in_memory_loss` just before): in-flight transactions decide for
    /// themselves, primaries move, the crashed node is recovered while
    /// everyone holds. Its recovery report, if one ran.
    fn fail(&self, m: u16, at: u64) -> Option<RecoveryReport> {
        let (sim, victim) = (self.sim, self.cfg.faults.crash_in_memory_loss);
        sim.run_until(at.max(sim.now_ns())); // a time before the clients started: at their start
        if let Some(v) = victim {
            // Fenced at once: of the verbs it had in flight, those not yet
            // executed never will (a commit may land on some replicas only).
            sim.crash(v as u32);
            self.cluster.revoke(v + 1);
        }
        self.cluster.nodes()[m as usize].fail();
        // The membership service notices, declares it failed, pauses new
        // transactions and lets in-flight ones decide for themselves (commit
        // on live replicas or abort); a commit that missed a write there
        // waits for the declaration.
        sim.run_until(sim.now_ns() + 5_000);
        for v in self.views {
            v.declare_failed(m);
        }
        self.drain();
        // Compute nodes recompute primaries and run on the surviving copies.
        for v in self.views {
            v.set_down(m, true);
        }
        let report = victim.map(|v| {
            // Everyone holds: recover the crashed node from the live replicas.
            let ids = self.node_ids[v as usize].clone();
            let (cluster, layout, view) = (self.cluster, self.layout, &self.views[0]);
            let r = recover_while_held(sim, cluster, layout, self.cfg, v, &ids, view);
            for id in ids {
                self.failed.insert(id);
            }
            r
        });
        self.gate.paused.set(false);
        report
    }

    /// Re-replicate onto a replacement for `m`, with the world paused; the
    /// slots copied.
    fn replace(&self, m: u16) -> u64 {
        self.drain();
        self.cluster.nodes()[m as usize].replace_with_empty();
        let (fab, l, v, out) = (
            self.cluster
                .join(u16::MAX - 3)
                .expect("a fresh compute-node id"),
            self.layout.clone(),
            self.views[0].clone(),
            Rc::new(RefCell::new(None)),
        );
        let o = out.clone();
        self.sim.spawn(u32::MAX - 1, async move {
            *o.borrow_mut() = Some(
                tandem_dkvs::repair::rereplicate(&fab, &l, m, &v)
                    .await
                    .expect("re-replication"),
            );
        });
        self.sim.run_while(|| out.borrow().is_none());
        let copied = out.borrow().expect("done");
        for v in self.views {
            v.set_down(m, false);
        }
        self.gate.paused.set(false);
        copied
    }
}

/// Fence compute node `victim` (0-based) and recover its coordinators `ids`
/// while every other compute node holds and memory nodes `view` marks down
/// are gone: the live replicas decide (`RecoveryCoordinator::decide_quiesced`).
fn recover_while_held(
    sim: &Sim,
    cluster: &SimCluster,
    layout: &Arc<Layout>,
    cfg: &SimConfig,
    victim: u16,
    ids: &[u16],
    view: &tandem_dkvs::MemoryView,
) -> RecoveryReport {
    assert_eq!(
        cfg.mode,
        Mode::Pandora,
        "log recovery of a crash in a memory loss is Pandora's"
    );
    cluster.revoke(victim + 1);
    let fab = cluster
        .join(RC_NODE_BASE + 500)
        .expect("a fresh compute-node id");
    let rc_id = 1 + cfg.compute_nodes * cfg.coordinators_per_node;
    let (l, v, ids, bugs, assertions) = (
        layout.clone(),
        view.clone(),
        ids.to_vec(),
        cfg.faults.recovery_bugs,
        cfg.recovery_assertions.or(cfg.assertions),
    );
    let done: Rc<RefCell<Option<RecoveryReport>>> = Rc::default();
    let d = done.clone();
    sim.spawn(20_000, async move {
        let mut rc = RecoveryCoordinator::new(&fab, l, rc_id).with_view(v, true);
        rc.bugs = bugs;
        rc.assertions = assertions;
        *d.borrow_mut() = Some(rc.recover(&ids).await.expect("live replicas answer"));
    });
    sim.run_while(|| done.borrow().is_none());
    let report = done.borrow_mut().take();
    report.expect("recovery finished")
}

/// Baseline recovery reported in the same shape as pandora's.
fn baseline_report(b: tandem_dkvs::recovery::BaselineReport) -> RecoveryReport {
    RecoveryReport {
        coordinators: 0,
        logs_found: b.locks_found,
        rolled_forward: b.rolled_forward,
        rolled_back: b.rolled_back,
        already_done: 0,
        locks_released: b.locks_released,
        replicas_restored: b.replicas_restored,
        rounds: 0,
    }
}
