//! Seeded simulation of false suspicion as it really happens (docs/DESIGN.md §4.5,
//! "false positives must be safe"). Unlike [`crate::sim_run`], which plays
//! the membership service by hand around one planned fault, here the
//! membership state machine runs as a task and carries out its own commands,
//! and the faults are what a loaded machine really produces:
//! - a suspected node is *slow, not silent*: its heartbeats stall while its
//!   coordinators keep running and posting verbs;
//! - the detector judges at any moment, including between a node's join and
//!   its registration with the memory nodes;
//! - registration and revocation are messages to each memory node, with
//!   their own delays, so they can cross;
//! - several nodes may be suspected in one run, and a crash may coincide
//!   with a false positive.
//!
//! A fenced node stops (it meets `Revoked`, or finds its ids in failed-ids,
//! or is refused registration) and comes back as a new incarnation: a new
//! node id, new coordinator ids, new keys. The run asserts safety (the bank's
//! exact ledger check, identical replicas, no lock left, no commit by a
//! transaction begun after its node's revocation) and liveness (every machine
//! that did not crash finishes its work), not "exactly one node failed".

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryCoordinator};
use tandem_dkvs::{ComputeNode, FailedIds, Layout, Mode, StoreConfig};
use tandem_fabric::sim::{SimCluster, SimFabric, SimFabricConfig};
use tandem_fabric::{Fenced, RegionKey};
use tandem_membership::{Command, Event, Membership, MembershipConfig, NodeStatus};
use tandem_sim::{Rng, Sim, SimHandle};
use tandem_workloads::bank::{BankClient, BankLedger, BankSpec};

/// A heartbeat stall of whatever incarnation runs on machine `slot`.
#[derive(Clone, Debug)]
pub struct Stall {
    pub slot: u16,
    pub at_ns: u64,
    pub for_ns: u64,
}

/// Test-only switches that undo the fencing rules, to show the runs catch them.
#[derive(Clone, Copy, Debug, Default)]
pub struct FencingBugs {
    /// A revoked incarnation may register again (fencing that can be undone).
    pub revocable_fencing: bool,
    /// Coordinators ignore their own ids in failed-ids (keep going when fenced).
    pub ignore_own_failure: bool,
}

#[derive(Clone, Debug)]
pub struct SuspicionConfig {
    pub seed: u64,
    /// Machines; each runs one incarnation at a time.
    pub compute_nodes: u16,
    pub coordinators_per_node: u16,
    pub txs_per_coordinator: u32,
    pub memory_nodes: u16,
    pub replicas: u16,
    pub bank: BankSpec,
    pub fabric: SimFabricConfig,
    pub fd_timeout_ns: u64,
    /// Join the membership first and register `register_gap_ns` later (two
    /// separate messages, as a process may send them): the detector can then
    /// judge a node that holds no keys yet.
    pub join_before_register: bool,
    pub register_gap_ns: u64,
    /// Instead of waiting `register_gap_ns`, register once the membership is
    /// recovering this node: revoked everywhere, its failed-ids not yet
    /// published (the window in which undoing a fence loses commits, however
    /// long recovery takes). Gives up waiting after 20 detector timeouts.
    pub register_during_recovery: bool,
    /// Each registration or revocation message reaches each memory node after
    /// a uniform delay in `0..=message_delay_ns`.
    pub message_delay_ns: u64,
    pub stalls: Vec<Stall>,
    /// Crash machine `.0` at `.1` (its current incarnation's tasks are dropped).
    pub crashes: Vec<(u16, u64)>,
    /// Incarnations per machine, the first included.
    pub max_incarnations: u16,
    pub bugs: FencingBugs,
    /// The coordinators' and the recovery coordinator's invariant
    /// assertions (`StoreConfig::assertions`): `None`, on unless a fencing
    /// bug is planted (its tests show that the run's checks catch it);
    /// `Some(on)` decides.
    pub assertions: Option<bool>,
}

impl SuspicionConfig {
    pub fn new(seed: u64) -> Self {
        SuspicionConfig {
            seed,
            compute_nodes: 2,
            coordinators_per_node: 3,
            txs_per_coordinator: 40,
            memory_nodes: 3,
            replicas: 2,
            bank: BankSpec {
                customers: 6,
                initial_balance: 100,
                receipt_capacity: 2_048,
                ..BankSpec::default()
            },
            fabric: SimFabricConfig::default(),
            fd_timeout_ns: 20_000,
            join_before_register: true,
            register_gap_ns: 0,
            register_during_recovery: false,
            message_delay_ns: 5_000,
            stalls: Vec::new(),
            crashes: Vec::new(),
            max_incarnations: 6,
            bugs: FencingBugs::default(),
            assertions: None,
        }
    }

    /// Random faults from the seed: 1-3 stalls (one may start at the join),
    /// sometimes a crash, random message delays and join/registration order.
    pub fn random(seed: u64) -> Self {
        let mut c = SuspicionConfig::new(seed);
        let mut r = Rng::new(seed ^ 0x5EED_F00D);
        c.join_before_register = r.chance(0.5);
        c.register_gap_ns = r.below(3 * c.fd_timeout_ns);
        c.message_delay_ns = r.below(2 * c.fd_timeout_ns);
        let horizon = 400_000;
        for _ in 0..1 + r.below(3) {
            let at_ns = if r.chance(0.25) { 0 } else { r.below(horizon) };
            c.stalls.push(Stall {
                slot: r.below(c.compute_nodes as u64) as u16,
                at_ns,
                for_ns: c.fd_timeout_ns * (2 + r.below(4)),
            });
        }
        if r.chance(0.4) {
            c.crashes
                .push((r.below(c.compute_nodes as u64) as u16, r.below(horizon)));
        }
        c
    }

    pub fn replay(&self) -> String {
        let mut f = format!(
            "cargo run --release -- pandora sim-suspicion --seed {}",
            self.seed
        );
        if self.bugs.revocable_fencing {
            f += " --inject-bug revocable-fencing";
        }
        if self.bugs.ignore_own_failure {
            f += " --inject-bug ignore-own-failure";
        }
        f
    }
}

#[derive(Debug, Default)]
pub struct SuspicionReport {
    pub committed: u64,
    pub aborted: u64,
    pub in_doubt: usize,
    pub violations: Vec<String>,
    /// Node ids (incarnations) the membership declared failed, in order.
    pub declared: Vec<u16>,
    /// Incarnations started after the first one of each machine.
    pub rejoins: u16,
    /// Commits by transactions begun after their node was revoked everywhere.
    pub fenced_acks: u64,
    pub sim_time_ns: u64,
    pub replay: String,
}

const MEMBERSHIP_TAG: u32 = 1 << 30;
const RC_NODE: u16 = u16::MAX - 2;
const SWEEP_NODE: u16 = u16::MAX - 1;

/// Everything the simulated processes share.
struct World {
    cfg: SuspicionConfig,
    sim: SimHandle,
    cluster: SimCluster,
    store: StoreConfig,
    layout: Arc<Layout>,
    membership: RefCell<Membership>,
    failed: FailedIds,
    /// Transactions left per machine and coordinator slot.
    remaining: RefCell<Vec<Vec<u32>>>,
    /// The incarnation (node id) each machine runs now.
    current: RefCell<Vec<u16>>,
    machine_done: RefCell<Vec<bool>>,
    stalled_until: RefCell<Vec<u64>>,
    /// When each node id's revocation finished everywhere (0: not revoked).
    revoked_at: RefCell<Vec<u64>>,
    next_node: Cell<u16>,
    incarnations: RefCell<Vec<u16>>,
    ledgers: RefCell<Vec<Rc<RefCell<BankLedger>>>>,
    declared: RefCell<Vec<u16>>,
    fenced_acks: Cell<u64>,
    client_seeds: RefCell<Rng>,
    violations: RefCell<Vec<String>>,
}

impl World {
    fn delay(&self) -> u64 {
        let max = self.cfg.message_delay_ns;
        self.sim.with_rng(|r| r.below(max + 1))
    }

    /// Register `node` on each memory node, one message at a time.
    async fn register(&self, node: u16) -> Result<Vec<RegionKey>, Fenced> {
        let mut keys = Vec::new();
        for m in self.cluster.nodes() {
            self.sim.sleep(self.delay()).await;
            keys.push(m.register(node)?);
        }
        Ok(keys)
    }

    fn join(&self, node: u16) -> Option<Vec<u16>> {
        let now = self.sim.now_ns();
        match self
            .membership
            .borrow_mut()
            .step(
                now,
                Event::Join {
                    node,
                    coordinators: self.cfg.coordinators_per_node,
                },
            )
            .pop()
        {
            Some(Command::AssignIds { ids, .. }) => Some(ids),
            _ => None,
        }
    }

    fn alive(&self, node: u16) -> bool {
        self.membership.borrow().status(node) == Some(NodeStatus::Alive)
    }
}

/// Run one seed and check every invariant.
pub fn run(cfg: &SuspicionConfig) -> SuspicionReport {
    let sim = Sim::new(cfg.seed);
    let w = Rc::new(build_world(cfg, &sim));
    load(&w, &sim);
    sim.spawn(MEMBERSHIP_TAG, membership_loop(w.clone()));
    for slot in 0..cfg.compute_nodes {
        sim.spawn(slot as u32 + 1, incarnation(w.clone(), slot, slot + 1));
    }
    inject_faults(&w, &sim);
    run_crashes(&w, &sim);
    // Bounded: a run that cannot finish is a liveness violation, not a hang.
    let deadline = 200_000_000;
    sim.run_while(|| sim.now_ns() < deadline && !w.machine_done.borrow().iter().all(|d| *d));
    if !w.machine_done.borrow().iter().all(|d| *d) {
        w.violations.borrow_mut().push(format!(
            "liveness: machines still working at {deadline} ns: {:?}",
            w.remaining.borrow()
        ));
    }
    // Let revocations and recoveries under way finish.
    sim.run_while(|| sim.now_ns() < deadline * 2 && busy(&w));
    let mut report = finish(&w, &sim);
    report.replay = cfg.replay();
    report
}

fn build_world(cfg: &SuspicionConfig, sim: &Sim) -> World {
    let mut store = StoreConfig::new(
        Mode::Pandora,
        cfg.memory_nodes,
        cfg.replicas,
        cfg.bank.tables(),
    );
    store.partitions_per_table = 12;
    store.log_slots = 128;
    store.log_slot_bytes = 8 * 1024;
    let planted = cfg.bugs.revocable_fencing || cfg.bugs.ignore_own_failure;
    store.assertions = Some(cfg.assertions.unwrap_or(!planted));
    let layout = Arc::new(Layout::new(&store).expect("valid simulation config"));
    let region = *layout.region_bytes.iter().max().unwrap();
    let cluster = SimCluster::with_nodes(
        sim.handle(),
        cfg.memory_nodes as usize,
        region,
        cfg.fabric.clone(),
    );
    for m in cluster.nodes() {
        m.inject_revocable_fencing(cfg.bugs.revocable_fencing);
    }
    let membership = Membership::new(MembershipConfig {
        heartbeat_timeout_ns: cfg.fd_timeout_ns,
        id_space: store.log_slots,
        ..MembershipConfig::default()
    });
    let machines = cfg.compute_nodes as usize;
    World {
        cfg: cfg.clone(),
        sim: sim.handle(),
        cluster,
        store,
        layout,
        membership: RefCell::new(membership),
        failed: FailedIds::new(),
        remaining: RefCell::new(vec![
            vec![
                cfg.txs_per_coordinator;
                cfg.coordinators_per_node as usize
            ];
            machines
        ]),
        current: RefCell::new((1..=cfg.compute_nodes).collect()),
        machine_done: RefCell::new(vec![false; machines]),
        stalled_until: RefCell::new(vec![0; machines]),
        revoked_at: RefCell::new(vec![0; 1 << 16]),
        next_node: Cell::new(cfg.compute_nodes + 1),
        incarnations: RefCell::new(vec![0; machines]),
        ledgers: RefCell::default(),
        declared: RefCell::default(),
        fenced_acks: Cell::new(0),
        client_seeds: RefCell::new(Rng::new(cfg.seed ^ 0xBA4C)),
        violations: RefCell::default(),
    }
}

fn load(w: &Rc<World>, sim: &Sim) {
    let fabric = w.cluster.join(0).expect("the loader's id is fresh");
    let (l, spec) = (w.layout.clone(), w.cfg.bank.clone());
    sim.spawn(u32::MAX, async move {
        let mut loader = Loader::new(&fabric, l);
        spec.load(&mut loader).await.expect("load");
        loader.finish().await.expect("load");
    });
    sim.run();
}

fn inject_faults(w: &Rc<World>, sim: &Sim) {
    for s in w.cfg.stalls.clone() {
        let w2 = w.clone();
        sim.handle().schedule_at(s.at_ns, move || {
            let until = w2.sim.now_ns() + s.for_ns;
            let mut st = w2.stalled_until.borrow_mut();
            st[s.slot as usize] = st[s.slot as usize].max(until);
        });
    }
}

/// Run to each planned crash and drop the machine's current incarnation
/// (every task of it, verbs in flight still landing until revoked).
fn run_crashes(w: &Rc<World>, sim: &Sim) {
    let mut crashes = w.cfg.crashes.clone();
    crashes.sort_by_key(|c| c.1);
    for (slot, at) in crashes {
        sim.run_while(|| sim.now_ns() < at);
        if !w.machine_done.borrow()[slot as usize] {
            let node = w.current.borrow()[slot as usize];
            sim.crash(node as u32);
            w.machine_done.borrow_mut()[slot as usize] = true;
        }
    }
}

/// Whether some incarnation is still to be judged or recovered: every one
/// ends having left cleanly or having been declared failed and recovered.
fn busy(w: &World) -> bool {
    let m = w.membership.borrow();
    (1..w.next_node.get()).any(|n| {
        matches!(
            m.status(n),
            Some(NodeStatus::Alive | NodeStatus::Revoking | NodeStatus::Recovering)
        )
    })
}

/// One incarnation of machine `slot` as node `node`: register and join (in
/// the configured order), heartbeat, run its clients; if fenced, start the
/// next incarnation.
async fn incarnation(w: Rc<World>, slot: u16, node: u16) {
    w.current.borrow_mut()[slot as usize] = node;
    w.incarnations.borrow_mut()[slot as usize] += 1;
    let stopped = Rc::new(Cell::new(false));
    let fabric = if w.cfg.join_before_register {
        let Some(ids) = w.join(node) else {
            return rejoin(w, slot, node);
        };
        w.sim.spawn(
            node as u32,
            heartbeat(w.clone(), slot, node, stopped.clone()),
        );
        match w.cfg.register_during_recovery {
            true => until_recovering(&w, node).await,
            false => w.sim.sleep(w.cfg.register_gap_ns).await,
        }
        match w.register(node).await {
            Ok(keys) => Some((ids, keys)),
            Err(_) => None,
        }
    } else {
        match w.register(node).await {
            Ok(keys) => w.join(node).map(|ids| (ids, keys)),
            Err(_) => None,
        }
        .inspect(|_| {
            w.sim.spawn(
                node as u32,
                heartbeat(w.clone(), slot, node, stopped.clone()),
            );
        })
    };
    let Some((ids, keys)) = fabric else {
        stopped.set(true);
        return rejoin(w, slot, node);
    };
    let compute = ComputeNode::new(
        w.cluster.connect(node, keys),
        &w.store,
        w.layout.clone(),
        w.failed.clone(),
    );
    let running = Rc::new(Cell::new(0u16));
    for (k, &id) in ids.iter().enumerate() {
        running.set(running.get() + 1);
        w.sim.spawn(
            node as u32,
            coordinator(
                w.clone(),
                compute.clone(),
                slot,
                k,
                node,
                id,
                running.clone(),
            ),
        );
    }
    while running.get() > 0 {
        w.sim.sleep(1_000).await;
    }
    stopped.set(true);
    if w.remaining.borrow()[slot as usize].iter().all(|&r| r == 0) {
        w.membership
            .borrow_mut()
            .step(w.sim.now_ns(), Event::Leave { node });
        w.machine_done.borrow_mut()[slot as usize] = true;
    } else {
        rejoin(w, slot, node);
    }
}

/// A fenced incarnation stops; the machine comes back under a new node id.
fn rejoin(w: Rc<World>, slot: u16, old: u16) {
    if w.incarnations.borrow()[slot as usize] >= w.cfg.max_incarnations {
        w.violations.borrow_mut().push(format!(
            "machine {slot}: node {old} fenced and no incarnation left"
        ));
        w.machine_done.borrow_mut()[slot as usize] = true;
        return;
    }
    let node = w.next_node.get();
    w.next_node.set(node + 1);
    w.sim.spawn(node as u32, incarnation(w.clone(), slot, node));
}

/// Heartbeats until the incarnation stops or is no longer alive; a stall of
/// its machine holds them off while everything else keeps running.
async fn heartbeat(w: Rc<World>, slot: u16, node: u16, stopped: Rc<Cell<bool>>) {
    while !stopped.get() && w.alive(node) {
        let until = w.stalled_until.borrow()[slot as usize];
        if until > w.sim.now_ns() {
            w.sim.sleep(until - w.sim.now_ns()).await;
            continue;
        }
        w.membership
            .borrow_mut()
            .step(w.sim.now_ns(), Event::Heartbeat { node });
        w.sim.sleep(w.cfg.fd_timeout_ns / 4).await;
    }
}

/// Wait until the membership is recovering `node` (or 20 detector timeouts).
async fn until_recovering(w: &World, node: u16) {
    let give_up = w.sim.now_ns() + 20 * w.cfg.fd_timeout_ns;
    while w.sim.now_ns() < give_up {
        if w.membership.borrow().status(node) == Some(NodeStatus::Recovering) {
            return;
        }
        w.sim.sleep(100).await;
    }
}

async fn coordinator(
    w: Rc<World>,
    compute: Rc<ComputeNode<SimFabric>>,
    slot: u16,
    k: usize,
    node: u16,
    id: u16,
    running: Rc<Cell<u16>>,
) {
    let mut coord = compute.coordinator(id);
    let seed = w.client_seeds.borrow_mut().next_u64();
    let mut client = BankClient::new(w.cfg.bank.clone(), id as u32, seed);
    w.ledgers.borrow_mut().push(client.ledger.clone());
    while w.remaining.borrow()[slot as usize][k] > 0 {
        if w.failed.contains(id) && !w.cfg.bugs.ignore_own_failure {
            break;
        }
        let began = w.sim.now_ns();
        let r = client.run_one(&mut coord).await;
        w.remaining.borrow_mut()[slot as usize][k] -= 1;
        let revoked = w.revoked_at.borrow()[node as usize];
        if matches!(r, Ok(true)) && revoked != 0 && revoked < began {
            w.fenced_acks.set(w.fenced_acks.get() + 1);
        }
        if r.is_err() {
            break; // revoked: the in-doubt transaction stays in the ledger
        }
    }
    let unlocks = coord.take_unlocks();
    unlocks.await;
    running.set(running.get() - 1);
}

/// The membership service: ticks the detector and carries out its commands.
async fn membership_loop(w: Rc<World>) {
    let rc_id = match w
        .membership
        .borrow_mut()
        .step(
            0,
            Event::Join {
                node: RC_NODE,
                coordinators: 1,
            },
        )
        .pop()
    {
        Some(Command::AssignIds { ids, .. }) => ids[0],
        other => panic!("the recovery coordinator was not admitted: {other:?}"),
    };
    let fabric = w
        .cluster
        .join(RC_NODE)
        .expect("the recovery node's id is fresh");
    loop {
        w.sim.sleep(w.cfg.fd_timeout_ns / 8).await;
        let now = w.sim.now_ns();
        w.membership
            .borrow_mut()
            .step(now, Event::Heartbeat { node: RC_NODE });
        let mut queue: std::collections::VecDeque<Command> =
            w.membership.borrow_mut().step(now, Event::Tick).into();
        while let Some(cmd) = queue.pop_front() {
            if let Some(next) = execute(&w, &fabric, rc_id, cmd).await {
                queue.extend(w.membership.borrow_mut().step(w.sim.now_ns(), next));
            }
        }
    }
}

async fn execute(w: &World, fabric: &SimFabric, rc_id: u16, cmd: Command) -> Option<Event> {
    match cmd {
        Command::TerminateLinks { node } => {
            // One message per memory node, each with its own delay: a
            // registration of the same node may cross them.
            for m in w.cluster.nodes() {
                w.sim.sleep(w.delay()).await;
                m.revoke(node);
            }
            w.revoked_at.borrow_mut()[node as usize] = w.sim.now_ns();
            w.declared.borrow_mut().push(node);
            Some(Event::LinksTerminated { node })
        }
        Command::Recover { node, ids, .. } => {
            let block = w.membership.borrow_mut().reserve_version_block();
            let mut rc = RecoveryCoordinator::new(fabric, w.layout.clone(), rc_id)
                .with_version_counter(block << 24);
            rc.assertions = w.store.assertions;
            rc.recover(&ids)
                .await
                .expect("the recovery node is never revoked");
            Some(Event::RecoveryDone { node })
        }
        Command::NotifyFailed { ids } => {
            for id in ids {
                w.failed.insert(id);
            }
            None
        }
        // Ids stay failed (the id space is large enough for a run).
        Command::ScanStrayLocks { .. } | Command::AssignIds { .. } | Command::Reject { .. } => None,
    }
}

fn finish(w: &Rc<World>, sim: &Sim) -> SuspicionReport {
    // The background scan: stray locks of failed ids nobody stole.
    let sweeper = w.cluster.join(SWEEP_NODE).expect("fresh id");
    let (l, f) = (w.layout.clone(), w.failed.clone());
    sim.spawn(u32::MAX, async move {
        sweep_stray_locks(&sweeper, &l, &f).await.expect("sweep");
    });
    sim.run_while(|| sim.live_tasks_of(u32::MAX) > 0);
    let mut ledger = BankLedger::default();
    for l in w.ledgers.borrow().iter() {
        ledger.merge(&l.borrow());
    }
    let mut violations = w.violations.borrow().clone();
    violations.extend(crate::sim_run::inspect(
        sim,
        &w.cluster,
        &w.layout,
        &tandem_cluster::workload::WorkloadSpec::Bank(w.cfg.bank.clone()),
        &tandem_cluster::workload::Outcome::Bank(ledger.clone()),
    ));
    if w.fenced_acks.get() > 0 {
        violations.push(format!(
            "{} commits acknowledged by transactions begun after their node's revocation",
            w.fenced_acks.get()
        ));
    }
    SuspicionReport {
        committed: ledger.committed,
        aborted: ledger.aborted,
        in_doubt: ledger.in_doubt.len(),
        violations,
        declared: w.declared.borrow().clone(),
        rejoins: w
            .incarnations
            .borrow()
            .iter()
            .map(|n| n.saturating_sub(1))
            .sum(),
        fenced_acks: w.fenced_acks.get(),
        sim_time_ns: sim.now_ns(),
        replay: String::new(),
    }
}
