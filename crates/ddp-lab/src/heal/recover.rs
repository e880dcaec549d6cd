//! One recovery, in simulated time (HEAL §VIII): five nodes serve a
//! closed-loop 80/20 workload over a preloaded store; one node crashes,
//! the others run without it for the downtime (the EFN), then it restarts
//! from its NVM and catches up, by HEAL or by a full copy from one member
//! (the paper's State-of-the-art). The same run without the failure is the
//! Baseline. Reported: the recovery time and its phases, the throughput
//! over time, the throughput lost against the Baseline, and the size of
//! `MissedUpdates`.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use tandem_ddp::heal::state::Timeline;
use tandem_ddp::{DdpFactory, DdpNode, HealOpts, Model, Op, Params, Reply};
use tandem_net::{
    Config, Harness, NodeFactory, NodeId, Nvm, Protocol, SessionId, SimNet, SimNetConfig,
};
use tandem_sim::Rng;

use tandem_zab::node::{ZabFactory, ZabNode, ZabParams};
use tandem_zab::sync::SyncStats;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Scheme {
    /// HEAL: Buddy catch-up, ShadowReplica.
    Heal,
    /// Hermes-style full copy from one member (HEAL §III, the paper's State-of-the-art).
    FullCopy,
    /// The leader-based store and its recovery (HEAL §II-C, §IX-D).
    Leader,
}

impl Scheme {
    pub fn parse(s: &str) -> Result<Vec<Scheme>, String> {
        match s {
            "heal" => Ok(vec![Scheme::Heal]),
            "full-copy" => Ok(vec![Scheme::FullCopy]),
            "leader" => Ok(vec![Scheme::Leader]),
            "both" => Ok(vec![Scheme::Heal, Scheme::FullCopy]),
            "all" => Ok(vec![Scheme::Heal, Scheme::FullCopy, Scheme::Leader]),
            other => Err(format!("unknown --scheme '{other}': heal, full-copy, leader, both (heal and full-copy) or all")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Heal => "heal",
            Scheme::FullCopy => "full-copy",
            Scheme::Leader => "leader",
        }
    }
}

#[derive(Clone, Debug)]
pub struct RecoverConfig {
    pub model: Model,
    pub scheme: Scheme,
    /// Records in the store (every node holds all of them).
    pub records: u64,
    /// How long the node stays away (the EFN), simulated ns.
    pub downtime_ns: u64,
    pub clients_per_node: u64,
    pub read_ratio: f64,
    /// Serving before the crash, simulated ns.
    pub before_ns: u64,
    /// Both schemes are measured up to this long after the node rejoins (at
    /// least 400 ns per record, so that a full copy ends inside it).
    pub after_ns: u64,
    /// Throughput is reported per window of this length.
    pub window_ns: u64,
    /// The paper's "modeled 256 GB": every EFN update is a new buffer entry.
    pub distinct: bool,
    /// Worker cores per node (the HEAL paper's servers: 7).
    pub cores: usize,
    /// HEAL's Reactive ablation: the Buddy reads the missed updates back
    /// from NVM when asked, this long per entry (0: from its DRAM buffer).
    pub reactive_read_ns: u64,
    /// HEAL's NoShadow ablation: the node takes no writes until it has
    /// chased its Buddy down in rounds.
    pub no_shadow: bool,
    /// The leader-based scheme's knobs (its Fig. 9 ablations).
    pub leader: ZabParams,
    /// Stop once the node serves again: no horizon after it and no
    /// failure-free Baseline, so no throughput loss (large stores, where
    /// only the recovery time is wanted).
    pub recovery_only: bool,
    pub seed: u64,
}

/// Cores of the HEAL paper's servers (Tab. V: Xeon E5-2450, "7 cores"). A
/// node with one core stalls every write while it applies a bulk message;
/// with the paper's cores the others keep following the writes.
pub const HEAL_PAPER_CORES: usize = 7;

impl RecoverConfig {
    /// The paper's shape (HEAL §VIII), scaled to simulated milliseconds:
    /// 5 nodes, 80 % reads, uniform keys, an EFN much longer than the recovery.
    pub fn new(model: Model, scheme: Scheme, records: u64) -> RecoverConfig {
        RecoverConfig {
            model,
            scheme,
            records,
            downtime_ns: 5_000_000,
            clients_per_node: 20,
            read_ratio: 0.8,
            before_ns: 2_000_000,
            after_ns: 20_000_000,
            window_ns: 250_000,
            distinct: false,
            cores: HEAL_PAPER_CORES,
            reactive_read_ns: 0,
            no_shadow: false,
            leader: ZabParams::default(),
            recovery_only: false,
            seed: 1,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoverReport {
    pub model: String,
    pub scheme: String,
    pub records: u64,
    pub downtime_us: f64,
    /// From the configuration that re-adds the node to the node serving clients.
    pub recovery_us: f64,
    /// HEAL's phases (HEAL §IX-C, Fig. 8); zero for the full copy.
    pub start_to_ack_us: f64,
    pub catchup_to_resp_us: f64,
    pub apply_to_end_us: f64,
    /// Entries the Buddy shipped from `MissedUpdates`, and the largest buffer on any node.
    pub missed_entries: usize,
    pub missed_peak: usize,
    pub partial_entries: usize,
    /// `CatchUp_req` rounds (more than 1 only under NoShadow).
    pub rounds: u32,
    pub fell_back_to_full_copy: bool,
    /// The leader-based scheme: how the leader brought the node back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<SyncStats>,
    /// The buffer kept every update (the Redundant ablation, the paper's "modeled 256 GB").
    pub distinct: bool,
    /// Operations completed, with the failure and in the failure-free Baseline.
    pub ops: u64,
    pub baseline_ops: u64,
    /// 1 − ops / baseline_ops, both counted over the same horizon (HEAL §IX-B
    /// measures this loss and gives no formula).
    pub throughput_lost: f64,
    pub horizon_ms: f64,
    /// Per window: (start, ms of simulated time; ops/s).
    pub throughput: Vec<(f64, f64)>,
    pub crash_ms: f64,
    pub rejoin_ms: f64,
    pub online_ms: f64,
}

/// Closed-loop sessions over uniform keys; counts completed reads and
/// writes per window. Under Scope persistency a session closes its scope
/// every `scope_writes` writes (the DDP paper's 10).
struct Load {
    records: u64,
    read_ratio: f64,
    window_ns: u64,
    next_value: u64,
    scope_writes: Option<u32>,
    /// Per session: its open scope and the writes in it.
    scopes: std::collections::HashMap<SessionId, (u64, u32)>,
    done: Rc<RefCell<Vec<u64>>>,
}

impl<P: Protocol<Op = Op, Reply = Reply>> Harness<P> for Load {
    fn next_op(&mut self, session: SessionId, _now: u64, rng: &mut Rng) -> Option<Op> {
        let (scope, writes) = self.scopes.entry(session).or_insert((1, 0));
        if self.scope_writes.is_some_and(|n| *writes >= n) {
            let op = Op::Persist {
                scope: *scope,
                writes: *writes,
            };
            (*scope, *writes) = (*scope + 1, 0);
            return Some(op);
        }
        let key = rng.below(self.records);
        if rng.chance(self.read_ratio) {
            return Some(Op::read(key));
        }
        *writes += 1;
        self.next_value += 1;
        Some(Op::write(key, self.records + self.next_value, *scope))
    }
    fn completed(
        &mut self,
        _s: SessionId,
        _r: u64,
        _n: NodeId,
        reply: &Reply,
        now: u64,
        _nvm: &[Nvm<P::Record>],
    ) {
        if !matches!(reply, Reply::Read { .. } | Reply::Written { .. }) {
            return;
        }
        let w = (now / self.window_ns) as usize;
        let mut done = self.done.borrow_mut();
        if done.len() <= w {
            done.resize(w + 1, 0);
        }
        done[w] += 1;
    }
}

const NODES: u16 = 5;
/// The node that fails (not 0, the preload's writer and the leader-based
/// scheme's leader).
const VICTIM: NodeId = 2;
/// Writes per scope under Scope persistency (the DDP paper's 10, DDP §7).
const SCOPE_WRITES: u32 = 10;
/// Failure detection before the first reconfiguration (HEAL §V-A, Fig. 2:
/// from (1) to (2)).
const DETECT_NS: u64 = 20_000;

/// A store whose recovery is measured: HEAL's and the full copy's DDP
/// nodes, or the leader-based baseline's.
pub trait Recoverable: Protocol<Op = Op, Reply = Reply> + 'static {
    /// The preloaded store, in DRAM; returns what its NVM holds.
    fn preload(&mut self, records: u64) -> Vec<Self::Record>;
    fn is_ready(&self) -> bool;
    /// Where the node stands, for an error message.
    fn describe(&self) -> String {
        String::new()
    }
}

impl Recoverable for DdpNode {
    fn preload(&mut self, records: u64) -> Vec<Self::Record> {
        DdpNode::preload(self, records)
    }
    fn is_ready(&self) -> bool {
        DdpNode::is_ready(self)
    }
}

impl Recoverable for ZabNode {
    fn preload(&mut self, records: u64) -> Vec<Self::Record> {
        ZabNode::preload(self, records)
    }
    fn is_ready(&self) -> bool {
        ZabNode::is_ready(self)
    }
    fn describe(&self) -> String {
        ZabNode::describe(self)
    }
}

struct Run<P: Recoverable, F: NodeFactory<P>> {
    net: SimNet<P, F>,
    done: Rc<RefCell<Vec<u64>>>,
    epoch: u64,
}

impl<P: Recoverable, F: NodeFactory<P>> Run<P, F> {
    fn new(cfg: &RecoverConfig, factory: F) -> Self {
        let sim = SimNetConfig {
            cores: cfg.cores.max(1),
            ..SimNetConfig::default()
        };
        let done = Rc::new(RefCell::new(Vec::new()));
        let scoped = cfg.model.p == tandem_ddp::Persistency::Scope && cfg.scheme != Scheme::Leader;
        let scope_writes = scoped.then_some(SCOPE_WRITES);
        let load = Load {
            records: cfg.records,
            read_ratio: cfg.read_ratio,
            window_ns: cfg.window_ns,
            next_value: 0,
            scope_writes,
            scopes: Default::default(),
            done: done.clone(),
        };
        let sessions = cfg.clients_per_node * u64::from(NODES);
        let net = SimNet::new(
            cfg.seed,
            sim,
            Config::new(1, (0..NODES).collect()),
            factory,
            Box::new(load),
            sessions,
        );
        for n in 0..NODES {
            let records = net.with_node_mut(n, |p| p.expect("up").preload(cfg.records));
            net.seed_nvm(n, records);
        }
        Run {
            net,
            done,
            epoch: 1,
        }
    }

    fn configure(&mut self, members: Vec<NodeId>, restart: Option<NodeId>) {
        self.epoch += 1;
        let c = Config::new(self.epoch, members);
        if let Some(n) = restart {
            self.net.restart(n, &c);
        }
        self.net.announce(&c);
    }

    /// Operations completed in the windows before `total`.
    fn ops_until(&self, total: u64, window_ns: u64) -> u64 {
        self.done
            .borrow()
            .iter()
            .take((total / window_ns) as usize)
            .sum()
    }
}

/// The DDP engine for HEAL or the full copy.
fn ddp_factory(cfg: &RecoverConfig) -> DdpFactory {
    let heal = (cfg.scheme == Scheme::Heal).then_some(HealOpts {
        distinct: cfg.distinct,
        reactive_read_ns: cfg.reactive_read_ns,
        no_shadow: cfg.no_shadow,
        ..HealOpts::default()
    });
    // Links here lose nothing: resend a catch-up request only after far
    // longer than the largest copy takes.
    let params = Params {
        bulk_ns: 1_000_000_000,
        ..Params::SIM
    };
    DdpFactory {
        heal,
        copy_from_one: cfg.scheme == Scheme::FullCopy,
        ..DdpFactory::new(cfg.model, params)
    }
}

/// When the node crashed, rejoined and came back online, and the horizon.
struct Times {
    crash: u64,
    rejoin: u64,
    online: u64,
    total: u64,
    baseline_ops: u64,
}

/// Run the failure-free Baseline and the failure with `cfg.scheme`.
pub fn run(cfg: &RecoverConfig) -> Result<RecoverReport, String> {
    if cfg.scheme == Scheme::Heal && !HealOpts::supports(cfg.model) {
        return Err(format!("HEAL recovers the Lin models (lin-strict, lin-synch, lin-re, lin-eventual, lin-scope); not {}", cfg.model));
    }
    if cfg.records == 0 || cfg.window_ns == 0 {
        return Err("records and the throughput window must be positive".into());
    }
    if cfg.scheme == Scheme::Leader {
        let factory = || ZabFactory {
            params: cfg.leader.clone(),
        };
        let (r, times) = simulate(cfg, factory)?;
        let stats = r
            .net
            .with_node(0, |p| p.and_then(|p| p.last_sync().cloned()));
        let done = r.done.borrow().clone();
        let mut rep = report(cfg, &done, times, RecoveryDetail::Leader(stats));
        rep.scheme = leader_label(&cfg.leader);
        return Ok(rep);
    }
    let (r, times) = simulate(cfg, || ddp_factory(cfg))?;
    let detail = RecoveryDetail::Ddp(ddp_detail(&r.net));
    let done = r.done.borrow().clone();
    Ok(report(cfg, &done, times, detail))
}

/// Crash `VICTIM`, serve without it for the downtime, re-add it and run
/// until it serves again and past the horizon; then the Baseline.
fn simulate<P: Recoverable, F: NodeFactory<P>>(
    cfg: &RecoverConfig,
    factory: impl Fn() -> F,
) -> Result<(Run<P, F>, Times), String> {
    let mut r = Run::new(cfg, factory());
    r.net.start_clients();
    r.net.run_for(cfg.before_ns);
    let crash = r.net.now_ns();
    r.net.crash(VICTIM);
    r.net.run_for(DETECT_NS);
    r.configure((0..NODES).filter(|&n| n != VICTIM).collect(), None);
    r.net.run_for(cfg.downtime_ns);
    let rejoin = r.net.now_ns();
    r.configure((0..NODES).collect(), Some(VICTIM));
    let limit = rejoin + 20 * (cfg.downtime_ns + cfg.records * 1_000);
    let online = r.net.run_while(limit, |net| {
        net.with_node(VICTIM, |p| !p.is_some_and(|p| p.is_ready()))
    });
    if !online {
        let state: Vec<String> = (0..NODES)
            .filter_map(|n| r.net.with_node(n, |p| p.map(|p| p.describe())))
            .filter(|s| !s.is_empty())
            .collect();
        return Err(format!(
            "node {VICTIM} did not come back online{}",
            state.iter().map(|s| format!("\n  {s}")).collect::<String>()
        ));
    }
    let online = r.net.now_ns();
    if cfg.recovery_only {
        let times = Times {
            crash,
            rejoin,
            online,
            total: online,
            baseline_ops: 0,
        };
        return Ok((r, times));
    }
    // One horizon for every scheme (and the Baseline), so their losses compare.
    let total = (rejoin + cfg.after_ns.max(cfg.records * 400)).max(online + 1_000_000);
    r.net.run_for(total - online);
    let base = Run::new(cfg, factory());
    base.net.start_clients();
    base.net.run_for(total);
    let baseline_ops = base.ops_until(total, cfg.window_ns);
    Ok((
        r,
        Times {
            crash,
            rejoin,
            online,
            total,
            baseline_ops,
        },
    ))
}

/// What each scheme tells about its recovery.
enum RecoveryDetail {
    Ddp((Timeline, usize)),
    Leader(Option<SyncStats>),
}

/// The recovering node's HEAL timeline and the largest `MissedUpdates` on any node.
fn ddp_detail(net: &SimNet<DdpNode, DdpFactory>) -> (Timeline, usize) {
    let t = net
        .with_node(VICTIM, |p| {
            p.and_then(|p| p.heal()).and_then(|h| {
                h.last
                    .clone()
                    .or_else(|| h.rr.as_ref().map(|r| r.timeline.clone()))
            })
        })
        .unwrap_or_default();
    let peak = (0..NODES)
        .filter_map(|n| net.with_node(n, |p| p.and_then(|p| p.heal()).map(|h| h.missed.peak)))
        .max()
        .unwrap_or(0);
    (t, peak)
}

fn report(cfg: &RecoverConfig, done: &[u64], t: Times, detail: RecoveryDetail) -> RecoverReport {
    let us = |ns: u64| ns as f64 / 1000.0;
    let windows = (t.total / cfg.window_ns) as usize;
    let ops: u64 = done.iter().take(windows).sum();
    let per_s = 1e9 / cfg.window_ns as f64;
    let mut r = RecoverReport {
        model: cfg.model.to_string(),
        scheme: cfg.scheme.name().into(),
        records: cfg.records,
        downtime_us: us(cfg.downtime_ns),
        recovery_us: us(t.online - t.rejoin),
        distinct: cfg.distinct,
        ops,
        baseline_ops: t.baseline_ops,
        throughput_lost: match t.baseline_ops {
            0 => f64::NAN, // no Baseline was run (`recovery_only`)
            b => 1.0 - ops as f64 / b as f64,
        },
        horizon_ms: t.total as f64 / 1e6,
        throughput: (0..windows)
            .map(|w| {
                (
                    (w as u64 * cfg.window_ns) as f64 / 1e6,
                    done.get(w).copied().unwrap_or(0) as f64 * per_s,
                )
            })
            .collect(),
        crash_ms: t.crash as f64 / 1e6,
        rejoin_ms: t.rejoin as f64 / 1e6,
        online_ms: t.online as f64 / 1e6,
        ..RecoverReport::default()
    };
    match detail {
        RecoveryDetail::Ddp((tl, peak)) => {
            if cfg.scheme == Scheme::Heal && !tl.full_copy {
                r.start_to_ack_us = us(tl.acks_ns - tl.start_ns);
                r.catchup_to_resp_us = us(tl.resp_ns - tl.req_ns);
                r.apply_to_end_us = us(tl.online_ns - tl.resp_ns);
            }
            (
                r.missed_entries,
                r.missed_peak,
                r.partial_entries,
                r.rounds,
                r.fell_back_to_full_copy,
            ) = (tl.missed, peak, tl.partial, tl.rounds, tl.full_copy);
        }
        RecoveryDetail::Leader(stats) => {
            r.missed_entries = stats.as_ref().map_or(0, |s| s.shipped as usize);
            r.leader = stats;
        }
    }
    r
}

/// "leader", or "leader without" the costs its ablations remove.
pub fn leader_label(p: &ZabParams) -> String {
    let removed: Vec<&str> = [
        (p.dedup, "redundant copies"),
        (p.dram, "NVM scan"),
        (p.shadow, "idle follower"),
    ]
    .iter()
    .filter(|r| r.0)
    .map(|r| r.1)
    .collect();
    if removed.is_empty() {
        "leader".into()
    } else {
        format!("leader without {}", removed.join(", "))
    }
}
