//! `tandem nemesis --system ddp`: a DDP cluster of real processes under a
//! seeded schedule of real faults — partitions, one-way drops, loss,
//! blackholed connects, a cut-off manager, `SIGSTOP`, `kill -9` of one
//! node or of all five — while client sessions record a history. After the
//! last fault everything heals; the run then checks
//!
//! - safety: the history against what the model promises ([`verdict`]:
//!   linearizability for the Lin models; no thin air and convergence for
//!   the others), written as JSON lines others can check too;
//! - liveness: after each heal, every node is a member again, and the
//!   load's throughput is back to half of what it was before the first
//!   fault, within [`RECOVERY_BOUND`].
//!
//! Every fault is one a real network or machine has: packets vanish at the
//! receiving side (no socket is closed), a stopped process is alive and
//! silent. The process runs in a network namespace of its own
//! ([`tandem_nemesis::enter_fresh_netns`], root needed).

pub mod cluster;
pub mod verdict;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_nemesis::drive::{proxy_for, Drive, ScheduleRun};
use tandem_nemesis::schedule;

use crate::load::{Load, LoadConfig};
use cluster::{Procs, LEASE_MS, SHAPE};
use tandem_check::serial::{TxHist, TxOutcome};

/// After a heal, throughput and membership must be back within
/// this: two leases for the manager to see every node again, one second for
/// links to come back (a connect abandoned after 250 ms, backoff up to
/// 250 ms) and for a restarted node to recover from its NVM.
pub const RECOVERY_BOUND: Duration = Duration::from_millis(2 * LEASE_MS + 1_000);
/// Healthy time between two faults, and before the first.
const SETTLE: Duration = Duration::from_secs(1);
/// Keys the load reads and writes (uniformly): few enough that sessions
/// meet on keys (with 100, four splits missed the planted lease bug),
/// with the checker's search budget raised to match ([`verdict`]).
const KEYS: u64 = 50;
/// Client sessions (spread over the five nodes).
const SESSIONS: u64 = 20;
/// A call without an answer for this long is recorded as unknown, and its
/// session moves to the next node, as a client with a short timeout does:
/// during a fault the sessions visit every node it leaves serving.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(250);

#[derive(Clone, Debug)]
pub struct NemesisConfig {
    /// The `tandem` binary the processes run.
    pub exe: PathBuf,
    pub model: String,
    /// Schedules `seed`, `seed + 1`, ...
    pub seed: u64,
    pub schedules: u64,
    /// Fault classes to draw from (`schedule::CLASSES`).
    pub classes: Vec<String>,
    /// Faults per schedule, and how long each is held.
    pub faults: usize,
    pub fault_time: Duration,
    /// Where each schedule's logs and history go (`<dir>/seed-<n>/`).
    pub dir: PathBuf,
    /// Planted bugs for every node (test-only).
    pub bugs: Vec<String>,
    /// HEAL: restarted nodes recover with HEAL (`tandem node --recovery heal`),
    /// not by a full copy.
    pub heal: bool,
}

impl NemesisConfig {
    pub fn validate(&self) -> Result<(), String> {
        let model = tandem_ddp::Model::parse(&self.model)?;
        if let Some(e) = self.classes.iter().find_map(|c| verdict::refuses(model, c)) {
            return Err(e);
        }
        if self.heal && model.c != tandem_ddp::Consistency::Lin {
            return Err(format!("--system heal: HEAL recovers the Lin models (lin-strict, lin-synch, lin-re, lin-scope, lin-eventual), not {model}"));
        }
        if self.schedules == 0 || self.faults == 0 {
            return Err("--schedules and --faults-per-schedule must be at least 1".into());
        }
        Ok(())
    }

    /// The command that runs schedule `seed` again.
    pub fn replay(&self, seed: u64) -> String {
        let mut c = format!(
            "tandem nemesis --system {} --model {} --seed {seed} --schedules 1 --faults {} --faults-per-schedule {} --fault-ms {}",
            if self.heal { "heal" } else { "ddp" },
            self.model,
            self.classes.join(","),
            self.faults,
            self.fault_time.as_millis()
        );
        for b in &self.bugs {
            c += &format!(" --inject-bug {b}");
        }
        c
    }
}

/// Run every schedule; the process must already be in its own namespace.
pub fn run(cfg: &NemesisConfig, mut progress: impl FnMut(&ScheduleRun)) -> Vec<ScheduleRun> {
    (cfg.seed..cfg.seed + cfg.schedules)
        .map(|seed| {
            let r = run_schedule(cfg, seed).unwrap_or_else(|e| failed(cfg, seed, e));
            progress(&r);
            r
        })
        .collect()
}

fn failed(cfg: &NemesisConfig, seed: u64, why: String) -> ScheduleRun {
    ScheduleRun {
        seed,
        faults: schedule::draw(seed, &cfg.classes, cfg.faults, SHAPE)
            .iter()
            .map(|f| f.to_string())
            .collect(),
        operations: 0,
        unknown: 0,
        violations: vec![format!("the run could not go on: {why}")],
        heals: Vec::new(),
        history: PathBuf::new(),
        replay: cfg.replay(seed),
    }
}

fn run_schedule(cfg: &NemesisConfig, seed: u64) -> Result<ScheduleRun, String> {
    let faults = schedule::draw(seed, &cfg.classes, cfg.faults, SHAPE);
    let dir = cfg.dir.join(format!("seed-{seed}"));
    let mut flags = cfg.bugs.clone();
    if cfg.heal {
        flags.push("recovery=heal".into());
    }
    let addrs: Vec<_> = (0..=SHAPE.nodes).map(tandem_nemesis::addr_of).collect();
    let proxy = proxy_for(&faults, &addrs, seed)?;
    let mut procs = Procs::start(&cfg.exe, &cfg.model, &dir, &flags)?;
    procs.wait_all_members(Duration::from_secs(20))?;
    let load = Load::start(&load_config(&procs, seed)?, Instant::now());
    wait_serving(&load)?;
    let completed = || load.completed.load(Ordering::Relaxed);
    let drive = Drive {
        fault_time: cfg.fault_time,
        settle: SETTLE,
        bound: RECOVERY_BOUND,
        completed: &completed,
        proxy,
    };
    let outcome = drive.run(&mut procs, &faults)?;
    let mut violations = outcome.violations;
    let h = load.stop_all();
    let model = tandem_ddp::Model::parse(&cfg.model)?;
    let history = if model.c == tandem_ddp::Consistency::Trans {
        let path = dir.join("transactions.jsonl");
        write_txs(&path, &h.txs)?;
        path
    } else {
        let path = dir.join("history.jsonl");
        tandem_check::write_jsonl(&path, &h.ops)?;
        path
    };
    let keys = procs.secret.keyring();
    violations.extend(verdict::check(model, &h, &procs.peers, &keys, KEYS));
    let (done, all) = if model.c == tandem_ddp::Consistency::Trans {
        let known = |t: &&TxHist| t.outcome != TxOutcome::Unknown;
        (h.txs.iter().filter(known).count(), h.txs.len())
    } else {
        let done = h.ops.iter().filter(|o| o.complete_ns.is_some()).count();
        (done, h.ops.len())
    };
    Ok(ScheduleRun {
        seed,
        faults: faults.iter().map(|f| f.to_string()).collect(),
        operations: done,
        unknown: all - done,
        violations,
        heals: outcome.heals,
        history,
        replay: cfg.replay(seed),
    })
}

/// One transaction a line (`tandem_check::serial::TxHist`; docs/NEMESIS.md).
fn write_txs(path: &std::path::Path, txs: &[TxHist]) -> Result<(), String> {
    let mut text = String::new();
    for t in txs {
        text += &serde_json::to_string(t).map_err(|e| e.to_string())?;
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Uniform keys, half reads; three requests a transaction under the
/// Transactional models, scopes of ten writes under Scope persistency.
fn load_config(p: &Procs, seed: u64) -> Result<LoadConfig, String> {
    let model = tandem_ddp::Model::parse(&p.model)?;
    let mut plan = tandem_ddp::ycsb_session::SessionPlan::uniform(KEYS, 0.5);
    plan.tx_requests = (model.c == tandem_ddp::Consistency::Trans).then_some(3);
    plan.scope_writes = (model.p == tandem_ddp::Persistency::Scope).then_some(10);
    Ok(LoadConfig {
        nodes: p.peers.clone(),
        keys: p.secret.keyring(),
        sessions: SESSIONS,
        first_session: 0,
        plan,
        seed,
        timeout: CLIENT_TIMEOUT,
    })
}

fn wait_serving(load: &Load) -> Result<(), String> {
    let t = Instant::now();
    while load.completed.load(Ordering::Relaxed) < 200 {
        if t.elapsed() > Duration::from_secs(20) {
            return Err("the cluster served fewer than 200 operations in 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
