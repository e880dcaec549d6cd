//! A DART campaign: many runs (seeds, or as many as fit in a duration)
//! against one store, aggregated into the report docs/DESIGN.md §5 asks for —
//! runs, transactions, crashes, violations, each with the command that
//! replays it — plus the throughput of checked litmus transactions.
//!
//! Simulated runs are independent and single-threaded, so `jobs` worker
//! threads run seeds side by side; results are ordered by seed, so the
//! report does not depend on the thread count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tandem_dkvs::recovery::RecoveryBugs;
use tandem_dkvs::{BugSwitches, Mode, OnStray};
use tandem_sim::Rng;

use crate::history::TxRecord;
use crate::pg_store::Isolation;
use crate::plan::CrashPoints;
use crate::report::RunReport;
use crate::sim_run::DeploymentBugs;
use crate::suite::Suite;

#[derive(Clone, Debug)]
pub enum StoreKind {
    Tandem(Mode),
    Postgres { url: String, isolation: Isolation },
}

impl StoreKind {
    pub fn name(&self) -> String {
        match self {
            StoreKind::Tandem(m) => m.to_string(),
            StoreKind::Postgres { .. } => "postgres".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricKind {
    Sim,
    Tcp,
}

/// Test-only bugs by name: the store's ([`BugSwitches::parse`]), the
/// recovery coordinator's, and the deployment's (the harness plays the
/// membership service).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedBugs {
    pub store: BugSwitches,
    pub recovery: RecoveryBugs,
    pub deployment: DeploymentBugs,
}

pub const RECOVERY_BUG_NAMES: [&str; 7] = [
    "always-roll-back",
    "skip-log-recovery",
    "lost-decision",
    "trust-undo-images",
    "restore-one-replica",
    "invalidate-logs-first",
    "skip-rereplication",
];

fn recovery_bug(rec: &mut RecoveryBugs, name: &str) -> bool {
    let flag = match name {
        "always-roll-back" => &mut rec.always_roll_back,
        "skip-log-recovery" => &mut rec.skip_log_recovery,
        "lost-decision" => &mut rec.lost_decision,
        "trust-undo-images" => &mut rec.trust_undo_images,
        "restore-one-replica" => &mut rec.restore_one_replica,
        "invalidate-logs-first" => &mut rec.invalidate_logs_first,
        "skip-rereplication" => &mut rec.skip_rereplication,
        _ => return false,
    };
    *flag = true;
    true
}

pub fn parse_bugs(names: &[String]) -> Result<InjectedBugs, String> {
    let mut b = InjectedBugs::default();
    for n in names {
        if recovery_bug(&mut b.recovery, n) {
            continue;
        }
        if n == "publish-before-recovery" {
            b.deployment.publish_before_recovery = true;
            continue;
        }
        let one = BugSwitches::parse(n).map_err(|e| {
            format!(
                "{e}, or a recovery bug: {}, or a deployment bug: publish-before-recovery",
                RECOVERY_BUG_NAMES.join(", ")
            )
        })?;
        b.store = b.store.union(one);
    }
    Ok(b)
}

/// `--on-stray stall` in simulated runs: wait out a recovery of ~1 ms.
pub const STALL: OnStray = OnStray::Stall { max_retries: 2_000 };

/// The default `--tests`: see [`CampaignConfig::run_tests`].
pub const MIX: &str = "mix";

/// Fraction of simulated runs that crash a compute node, by default.
pub const DEFAULT_CRASH_RATE: f64 = 0.8;

#[derive(Clone)]
pub struct CampaignConfig {
    pub store: StoreKind,
    pub fabric: FabricKind,
    /// With `FabricKind::Tcp`: the memory servers' regions are memfds that
    /// the compute side maps (the shm fabric); reported as "shm".
    pub shm: bool,
    /// The `--tests` selector and instances per test.
    pub tests: String,
    pub instances: u32,
    pub first_seed: u64,
    /// Number of runs; with `duration`, the cap (if any) on runs.
    pub seeds: Option<u64>,
    pub duration: Option<Duration>,
    /// Fraction of runs that crash a compute node (sim, or tcp with `procs`).
    pub crash_rate: f64,
    /// Over processes: fraction of runs that also `kill -9` a memory server
    /// mid-run and replace it (docs/DESIGN.md §4.6).
    pub memory_kill_rate: f64,
    /// Where simulated crashes land (uniform over verbs, or weighted toward
    /// the protocol's windows).
    pub crash_points: CrashPoints,
    /// Slow every simulated recovery coordinator by this much per doorbell.
    pub slow_recovery_ns: Option<u64>,
    /// After each simulated or process run: fail each memory node in turn and
    /// compare replicas (over processes also a real `kill -9` of one).
    pub replica_check: bool,
    /// Simulated runs: abort or stall on locks of other coordinators; `None`
    /// mixes (a quarter of the pandora runs stall).
    pub on_stray: Option<OnStray>,
    pub bug_names: Vec<String>,
    pub compute_nodes: u16,
    pub clients_per_node: u16,
    pub txs_per_client: u64,
    pub assert_chance: f64,
    pub check_history: bool,
    /// Worker threads for simulated runs.
    pub jobs: usize,
    /// Print a progress line to stderr every this often (None: quiet).
    pub progress: Option<Duration>,
    /// Stop at the first violating run.
    pub stop_at_first: bool,
    /// Starts fresh memory servers for each `--fabric tcp` run.
    pub tcp: Option<crate::tcp_run::TcpServers>,
    /// `--fabric tcp` with every compute node a process (`kill -9` on the
    /// runs `crash_rate` picks): [`crate::proc_run`]. Pandora only.
    pub procs: Option<crate::proc_run::ProcSetup>,
}

impl CampaignConfig {
    /// Whether run `seed` kills a memory server mid-run (over processes).
    pub fn kills_memory(&self, seed: u64) -> bool {
        self.procs.is_some() && Rng::new(seed ^ 0x3E3).chance(self.memory_kill_rate)
    }

    pub fn new(store: StoreKind) -> Self {
        CampaignConfig {
            store,
            fabric: FabricKind::Sim,
            shm: false,
            tests: MIX.into(),
            instances: 2,
            first_seed: 0,
            seeds: Some(10),
            duration: None,
            crash_rate: DEFAULT_CRASH_RATE,
            memory_kill_rate: 0.0,
            crash_points: CrashPoints::default(),
            slow_recovery_ns: None,
            replica_check: true,
            on_stray: None,
            bug_names: Vec::new(),
            compute_nodes: 2,
            clients_per_node: 4,
            txs_per_client: 60,
            assert_chance: 0.2,
            check_history: true,
            jobs: 1,
            progress: None,
            stop_at_first: false,
            tcp: None,
            procs: None,
        }
    }

    /// The tests (selector, instances) run `seed` runs. `--tests mix` (the
    /// default) alternates broad runs (every test, `instances` each) with
    /// targeted ones: a single test on one hot instance, where conflicts,
    /// aborts and crashes meet on the same objects (the paper's targeted
    /// tests, the Pandora paper §5.1). Off the simulator (tcp, processes,
    /// PostgreSQL), where crashes are rare or absent, mix means all.
    pub fn run_tests(&self, seed: u64) -> (String, u32) {
        if self.tests != MIX {
            return (self.tests.clone(), self.instances);
        }
        let mut rng = Rng::new(seed ^ 0x7E57_5E1E);
        let sim = matches!(self.store, StoreKind::Tandem(_)) && self.fabric == FabricKind::Sim;
        if !sim || rng.chance(0.5) {
            return ("all".into(), self.instances);
        }
        let names = Suite::names();
        (names[rng.below(names.len() as u64) as usize].to_string(), 1)
    }

    /// What run `seed`'s transactions do on another coordinator's lock.
    /// Only pandora stalls: ford and traditional recovery stop the world and
    /// wait for in-flight transactions, which would wait for recovery.
    pub fn run_on_stray(&self, seed: u64) -> OnStray {
        match (self.on_stray, &self.store) {
            (Some(o), _) => o,
            (None, StoreKind::Tandem(Mode::Pandora)) if Rng::new(seed ^ 0x57A1).chance(0.25) => {
                STALL
            }
            _ => OnStray::Abort,
        }
    }

    /// Whether run `seed` crashes a compute node (decided by the seed alone).
    pub fn crashes(&self, seed: u64) -> bool {
        self.injects_crashes() && Rng::new(seed ^ 0xC7A5).chance(self.crash_rate)
    }

    /// Whether runs may crash a compute node: simulated ones, and tcp runs
    /// with compute-node processes.
    pub fn injects_crashes(&self) -> bool {
        matches!(self.store, StoreKind::Tandem(_))
            && (self.fabric == FabricKind::Sim || self.procs.is_some())
    }

    /// The command that replays run `seed` exactly (sim) or re-runs it (tcp, postgres).
    pub fn replay(&self, seed: u64) -> String {
        let mut c = format!("cargo run --release -- dart --store {}", self.store.name());
        match &self.store {
            StoreKind::Postgres { url, isolation } => {
                c += &format!(" --isolation {isolation} --postgres {url}")
            }
            StoreKind::Tandem(_) => {
                c += match (self.fabric, self.shm) {
                    (FabricKind::Sim, _) => " --fabric sim",
                    (FabricKind::Tcp, false) => " --fabric tcp",
                    (FabricKind::Tcp, true) => " --fabric shm",
                }
            }
        }
        let (tests, instances) = self.run_tests(seed);
        c += &format!(" --tests {tests} --instances {instances} --seed {seed} --seeds 1");
        if self.injects_crashes() {
            c += &format!(" --crash-rate {}", if self.crashes(seed) { 1 } else { 0 });
        }
        if self.kills_memory(seed) {
            c += " --memory-kill-rate 1";
        }
        let d = CampaignConfig::new(self.store.clone());
        if self.compute_nodes != d.compute_nodes {
            c += &format!(" --compute-nodes {}", self.compute_nodes);
        }
        if self.clients_per_node != d.clients_per_node {
            c += &format!(" --clients {}", self.clients_per_node);
        }
        if self.txs_per_client != d.txs_per_client {
            c += &format!(" --txs {}", self.txs_per_client);
        }
        if self.crash_points != d.crash_points {
            c += &format!(" --crash-points {}", self.crash_points);
        }
        if let Some(ns) = self.slow_recovery_ns {
            c += &format!(" --slow-recovery-ns {ns}");
        }
        if !self.replica_check {
            c += " --no-replica-check";
        }
        if self.run_on_stray(seed) != OnStray::Abort {
            c += " --on-stray stall";
        }
        for b in &self.bug_names {
            c += &format!(" --inject-bug {b}");
        }
        if let Some(n) = self.procs.as_ref().and_then(|p| p.net_faults.as_ref()) {
            let ms = n.fault_time.as_millis();
            c += &format!(" --net-faults {} --fault-ms {ms}", n.classes.join(","));
        }
        c
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ViolationReport {
    pub test: String,
    pub seed: u64,
    pub description: String,
    pub replay: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CampaignReport {
    pub store: String,
    pub fabric: String,
    pub isolation: Option<String>,
    pub tests: String,
    pub injected_bugs: Vec<String>,
    pub runs: u64,
    pub transactions: u64,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    pub asserts_checked: u64,
    pub crashes: u64,
    pub violation_count: usize,
    pub violations: Vec<ViolationReport>,
    pub elapsed_s: f64,
    /// Litmus and assert transactions run and checked (assertions and, when
    /// on, the history checker) per second of wall time.
    pub transactions_per_s: f64,
    #[serde(skip)]
    pub first_violating_history: Option<Vec<TxRecord>>,
    #[serde(skip)]
    pub first_history: Option<Vec<TxRecord>>,
}

/// Run one seed with whichever harness the config names.
pub fn run_one(cfg: &CampaignConfig, suite: &Arc<Suite>, seed: u64) -> Result<RunReport, String> {
    let (tests, instances) = cfg.run_tests(seed);
    let mixed;
    let suite = if cfg.tests == MIX {
        mixed = Arc::new(Suite::parse(&tests, instances)?);
        &mixed
    } else {
        suite
    };
    let injected = parse_bugs(&cfg.bug_names)?;
    let (bugs, recovery_bugs) = (injected.store, injected.recovery);
    match (&cfg.store, cfg.fabric) {
        (StoreKind::Tandem(mode), FabricKind::Sim) => {
            let mut c = crate::sim_run::SimRunConfig::new(*mode, suite.clone(), seed);
            c.bugs = bugs;
            c.recovery_bugs = recovery_bugs;
            c.deployment_bugs = injected.deployment;
            c.crash_points = cfg.crash_points;
            c.slow_recovery_ns = cfg.slow_recovery_ns;
            c.replica_check = cfg.replica_check;
            c.on_stray = cfg.run_on_stray(seed);
            c.compute_nodes = cfg.compute_nodes;
            c.clients_per_node = cfg.clients_per_node;
            c.txs_per_client = cfg.txs_per_client;
            c.assert_chance = cfg.assert_chance;
            c.check_history = cfg.check_history;
            c.crash = cfg.crashes(seed);
            Ok(crate::sim_run::run(&c))
        }
        (StoreKind::Tandem(mode), FabricKind::Tcp) if cfg.procs.is_some() => {
            if *mode != Mode::Pandora {
                return Err(format!("{mode}: crashes over processes need pandora (the membership process runs pandora's log recovery)"));
            }
            let c = crate::proc_run::ProcRunConfig {
                setup: cfg.procs.clone().expect("checked"),
                bug_names: cfg.bug_names.clone(),
                suite: suite.clone(),
                tests,
                instances,
                seed,
                workers: cfg.compute_nodes,
                clients_per_worker: cfg.clients_per_node,
                txs_per_client: cfg.txs_per_client,
                assert_chance: cfg.assert_chance,
                check_history: cfg.check_history,
                kill: cfg.crashes(seed),
                replica_check: cfg.replica_check,
                kill_memory: cfg.kills_memory(seed),
                corrupt_one_backup: false,
            };
            crate::proc_run::run(&c)
        }
        (StoreKind::Tandem(mode), FabricKind::Tcp) => {
            let servers = cfg
                .tcp
                .clone()
                .ok_or("--fabric tcp needs a way to start memory servers")?;
            let c = crate::tcp_run::TcpRunConfig {
                mode: *mode,
                bugs,
                suite: suite.clone(),
                seed,
                compute_nodes: cfg.compute_nodes,
                clients_per_node: cfg.clients_per_node,
                txs_per_client: cfg.txs_per_client,
                assert_chance: cfg.assert_chance,
                check_history: cfg.check_history,
            };
            crate::tcp_run::run(&c, &servers)
        }
        (StoreKind::Postgres { url, isolation }, _) => {
            let c = crate::pg_run::PgRunConfig {
                url: url.clone(),
                isolation: *isolation,
                suite: suite.clone(),
                seed,
                clients: cfg.compute_nodes as u32 * cfg.clients_per_node as u32,
                txs_per_client: cfg.txs_per_client,
                assert_chance: cfg.assert_chance,
                check_history: cfg.check_history,
            };
            crate::pg_run::run(&c)
        }
    }
}

/// Run the campaign.
pub fn run(cfg: &CampaignConfig) -> Result<CampaignReport, String> {
    let selector = if cfg.tests == MIX {
        "all"
    } else {
        cfg.tests.as_str()
    };
    let suite = Arc::new(Suite::parse(selector, cfg.instances)?);
    parse_bugs(&cfg.bug_names)?;
    if cfg.on_stray.is_some_and(|o| o != OnStray::Abort)
        && !matches!(cfg.store, StoreKind::Tandem(Mode::Pandora))
    {
        return Err("--on-stray stall needs pandora (ford and traditional recovery wait for in-flight transactions)".into());
    }
    if !(0.0..=1.0).contains(&cfg.crash_rate) {
        return Err("--crash-rate must be in [0, 1]".into());
    }
    if cfg.seeds.is_none() && cfg.duration.is_none() {
        return Err("give --seeds or --duration".into());
    }
    let start = Instant::now();
    let next = AtomicU64::new(cfg.first_seed);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<(u64, Result<RunReport, String>)>> = Mutex::default();
    let done_tx = AtomicU64::new(0);
    let done_runs = AtomicU64::new(0);
    let last_progress = Mutex::new(Instant::now());
    // Only simulated runs are independent of each other and of the machine.
    let jobs = if cfg.fabric == FabricKind::Sim && matches!(cfg.store, StoreKind::Tandem(_)) {
        cfg.jobs.max(1)
    } else {
        1
    };
    let end_seed = cfg.seeds.map(|n| cfg.first_seed.saturating_add(n));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                if stop.load(Ordering::Relaxed)
                    || cfg.duration.is_some_and(|d| start.elapsed() >= d)
                {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if end_seed.is_some_and(|e| seed >= e) {
                    return;
                }
                let r = run_one(cfg, &suite, seed);
                let bad = r.as_ref().map(|r| !r.violations.is_empty()).unwrap_or(true);
                if bad && cfg.stop_at_first || r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                done_tx.fetch_add(
                    r.as_ref().map(|r| r.transactions()).unwrap_or(0),
                    Ordering::Relaxed,
                );
                done_runs.fetch_add(1, Ordering::Relaxed);
                results.lock().expect("results").push((seed, r));
                if let Some(every) = cfg.progress {
                    let mut last = last_progress.lock().expect("progress");
                    if last.elapsed() >= every {
                        *last = Instant::now();
                        let bad = results
                            .lock()
                            .expect("results")
                            .iter()
                            .filter(|(_, r)| r.as_ref().map_or(true, |r| !r.violations.is_empty()))
                            .count();
                        eprintln!(
                            "litmus: {} runs, {} transactions, {bad} violating runs, {:.0} tx/s",
                            done_runs.load(Ordering::Relaxed),
                            done_tx.load(Ordering::Relaxed),
                            done_tx.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
                        );
                    }
                }
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(s, _)| *s);
    let mut rep = CampaignReport {
        store: cfg.store.name(),
        fabric: match (&cfg.store, cfg.fabric) {
            (StoreKind::Postgres { .. }, _) => "postgres".into(),
            (_, FabricKind::Sim) => "sim".into(),
            (_, FabricKind::Tcp) if cfg.shm => "shm".into(),
            (_, FabricKind::Tcp) => "tcp".into(),
        },
        isolation: match &cfg.store {
            StoreKind::Postgres { isolation, .. } => Some(isolation.to_string()),
            _ => None,
        },
        tests: cfg.tests.clone(),
        injected_bugs: cfg.bug_names.clone(),
        ..CampaignReport::default()
    };
    for (seed, r) in results {
        let mut r = r.map_err(|e| format!("run {seed}: {e}"))?;
        rep.runs += 1;
        rep.transactions += r.transactions();
        rep.committed += r.committed;
        rep.aborted += r.aborted;
        rep.unknown += r.unknown;
        rep.asserts_checked += r.asserts_checked;
        rep.crashes += r.crashes as u64;
        let replay = cfg.replay(seed);
        if !r.violations.is_empty() && rep.first_violating_history.is_none() {
            rep.first_violating_history = Some(r.history.clone());
        }
        for (test, description) in r.violations.drain(..) {
            rep.violations.push(ViolationReport {
                test,
                seed,
                description,
                replay: replay.clone(),
            });
        }
        if rep.first_history.is_none() {
            rep.first_history = Some(std::mem::take(&mut r.history));
        }
    }
    rep.violation_count = rep.violations.len();
    rep.elapsed_s = start.elapsed().as_secs_f64();
    rep.transactions_per_s = rep.transactions as f64 / rep.elapsed_s.max(1e-9);
    Ok(rep)
}
