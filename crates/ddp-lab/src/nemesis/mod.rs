//! `tandem nemesis --system ddp`: a DDP cluster of real processes under a
//! seeded schedule of real faults — partitions, one-way drops, loss,
//! blackholed connects, a cut-off manager, `SIGSTOP`, `kill -9` of one
//! node or of all five — while client sessions record a history. After the
//! last fault everything heals; the run then checks
//!
//! - safety: the history against the model's checker (linearizability for
//!   the Lin models), written as JSON lines others can check too;
//! - liveness: after each heal, every node is a member again, and the
//!   load's throughput is back to half of what it was before the first
//!   fault, within [`RECOVERY_BOUND`].
//!
//! Every fault is one a real network or machine has: packets vanish at the
//! receiving side (no socket is closed), a stopped process is alive and
//! silent. The process runs in a network namespace of its own
//! ([`tandem_nemesis::enter_fresh_netns`], root needed).

pub mod cluster;
pub mod schedule;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;
use tandem_nemesis::{addr_of, Firewall};

use crate::load::{Load, LoadConfig};
use cluster::{manager_ip, Procs, LEASE_MS};
use schedule::{Fault, NODES};

/// After a heal, throughput and membership must be back within
/// this: two leases for the manager to see every node again, one second for
/// links to come back (a connect abandoned after 250 ms, backoff up to
/// 250 ms) and for a restarted node to recover from its NVM.
pub const RECOVERY_BOUND: Duration = Duration::from_millis(2 * LEASE_MS + 1_000);
/// Healthy time between two faults, and before the first.
const SETTLE: Duration = Duration::from_secs(1);
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
}

/// One fault's heal, and how long the cluster took to be whole again.
#[derive(Clone, Debug, Serialize)]
pub struct Heal {
    pub fault: String,
    pub class: String,
    pub recover_ms: Option<f64>,
    pub rejoin_ms: Option<f64>,
    /// Operations per second before the first fault, and in each 100 ms
    /// window after this heal until throughput was back.
    pub baseline: f64,
    pub rates: Vec<f64>,
    /// The manager's configuration when the fault healed.
    pub members_at_heal: String,
}

/// What one schedule did and found.
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleRun {
    pub seed: u64,
    pub faults: Vec<String>,
    pub operations: usize,
    pub unknown: usize,
    /// Broken promises of the model (must be none), and liveness failures.
    pub violations: Vec<String>,
    /// After each fault healed: until throughput was back to half of its
    /// level before the first fault, and until every node was a member again.
    pub heals: Vec<Heal>,
    pub history: PathBuf,
    pub replay: String,
}

impl NemesisConfig {
    pub fn validate(&self) -> Result<(), String> {
        let model = tandem_ddp::Model::parse(&self.model)?;
        if !self.model.starts_with("lin-") {
            return Err(format!(
                "the nemesis checks DDP's Lin models (lin-strict, lin-synch, lin-re, lin-scope, lin-eventual) by linearizability; {model} has no process-history checker here yet"
            ));
        }
        if self.schedules == 0 || self.faults == 0 {
            return Err("--schedules and --faults-per-schedule must be at least 1".into());
        }
        Ok(())
    }

    /// The command that runs schedule `seed` again.
    pub fn replay(&self, seed: u64) -> String {
        let mut c = format!(
            "tandem nemesis --system ddp --model {} --seed {seed} --schedules 1 --faults {} --faults-per-schedule {} --fault-ms {}",
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
        faults: schedule::draw(seed, &cfg.classes, cfg.faults)
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
    let faults = schedule::draw(seed, &cfg.classes, cfg.faults);
    let dir = cfg.dir.join(format!("seed-{seed}"));
    let mut procs = Procs::start(&cfg.exe, &cfg.model, &dir, &cfg.bugs)?;
    procs.wait_all_members(Duration::from_secs(20))?;
    let mut fw = Firewall::new().map_err(|e| e.to_string())?;
    let load = Load::start(&load_config(&procs, seed), Instant::now());
    wait_serving(&load)?;
    std::thread::sleep(SETTLE);
    let baseline = rate(&load, Duration::from_millis(500));
    let mut violations = Vec::new();
    let mut heals = Vec::new();
    for f in &faults {
        hold(&mut fw, &mut procs, f, cfg.fault_time)?;
        heal(&mut fw, &mut procs, f)?;
        let h = after_heal(&load, &procs, baseline, f);
        liveness(&mut violations, &h);
        if let Some(i) = procs.exited() {
            violations.push(format!("node {i} exited by itself during `{f}`"));
        }
        heals.push(h);
        std::thread::sleep(SETTLE);
    }
    let ops = load.stop();
    let history = dir.join("history.jsonl");
    tandem_check::write_jsonl(&history, &ops)?;
    if let Err(v) = tandem_check::check_linearizable(&ops) {
        violations.push(format!("not linearizable: {v}"));
    }
    let done = ops.iter().filter(|o| o.complete_ns.is_some()).count();
    Ok(ScheduleRun {
        seed,
        faults: faults.iter().map(|f| f.to_string()).collect(),
        operations: done,
        unknown: ops.len() - done,
        violations,
        heals,
        history,
        replay: cfg.replay(seed),
    })
}

/// Right after `f` healed: how long until throughput and membership are back.
fn after_heal(load: &Load, procs: &Procs, baseline: f64, f: &Fault) -> Heal {
    let healed = Instant::now();
    let members_at_heal = procs.last_configuration();
    let mut rates = Vec::new();
    let recover_ms = recovered(load, baseline, healed, RECOVERY_BOUND * 4, &mut rates);
    let rejoin = procs.wait_all_members(RECOVERY_BOUND * 4);
    Heal {
        fault: f.to_string(),
        class: f.class().into(),
        recover_ms,
        rejoin_ms: rejoin.ok().map(|_| healed.elapsed().as_secs_f64() * 1e3),
        baseline,
        rates,
        members_at_heal,
    }
}

/// Liveness failures after a heal, as violations.
fn liveness(v: &mut Vec<String>, h: &Heal) {
    let bound_ms = RECOVERY_BOUND.as_secs_f64() * 1e3;
    let f = &h.fault;
    match h.recover_ms {
        Some(ms) if ms <= bound_ms => {}
        Some(ms) => v.push(format!(
            "after `{f}`: throughput came back {ms:.0} ms after the heal (bound {bound_ms:.0} ms; ops/s before the faults {:.0}, per 100 ms after the heal {:.0?}; manager at the heal: {})",
            h.baseline, h.rates, h.members_at_heal
        )),
        None => v.push(format!("after `{f}`: throughput did not come back")),
    }
    match h.rejoin_ms {
        Some(ms) if ms <= bound_ms => {}
        Some(ms) => v.push(format!(
            "after `{f}`: every node was a member again only {ms:.0} ms after the heal (bound {bound_ms:.0} ms)"
        )),
        None => v.push(format!("after `{f}`: not every node rejoined")),
    }
}

fn load_config(p: &Procs, seed: u64) -> LoadConfig {
    LoadConfig {
        nodes: p.peers.clone(),
        keys: p.secret.keyring(),
        sessions: SESSIONS,
        first_session: 0,
        plan: tandem_ddp::ycsb_session::SessionPlan::uniform(50, 0.5),
        seed,
        timeout: CLIENT_TIMEOUT,
    }
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

/// Operations per second completed over `window`.
fn rate(load: &Load, window: Duration) -> f64 {
    let before = load.completed.load(Ordering::Relaxed);
    std::thread::sleep(window);
    let after = load.completed.load(Ordering::Relaxed);
    (after - before) as f64 / window.as_secs_f64()
}

/// Milliseconds from `healed` until a 100 ms window ran at half of
/// `baseline` (to the window's end), if within `limit`.
/// Each window's rate goes to `rates` (what a liveness failure shows).
fn recovered(
    load: &Load,
    baseline: f64,
    healed: Instant,
    limit: Duration,
    rates: &mut Vec<f64>,
) -> Option<f64> {
    while healed.elapsed() < limit {
        rates.push(rate(load, Duration::from_millis(100)));
        if rates.last().is_some_and(|&r| r >= baseline / 2.0) {
            return Some(healed.elapsed().as_secs_f64() * 1e3);
        }
    }
    None
}

fn ips(nodes: &[usize]) -> Vec<std::net::Ipv4Addr> {
    nodes.iter().map(|&n| addr_of(n)).collect()
}

/// Inject `f` and keep it for `time` (a flip changes shape half-way).
fn hold(fw: &mut Firewall, p: &mut Procs, f: &Fault, time: Duration) -> Result<(), String> {
    let Fault::Flip(n) = *f else {
        apply(fw, p, f)?;
        std::thread::sleep(time);
        return Ok(());
    };
    let e = |e: std::io::Error| e.to_string();
    fw.isolate(addr_of(n)).map_err(e)?;
    std::thread::sleep(time / 2);
    fw.heal().map_err(e)?;
    let others: Vec<usize> = (0..NODES).filter(|&o| o != n).collect();
    fw.split(&ips(&others), &[addr_of(n), manager_ip()])
        .map_err(e)?;
    std::thread::sleep(time / 2);
    Ok(())
}

fn apply(fw: &mut Firewall, p: &mut Procs, f: &Fault) -> Result<(), String> {
    let e = |e: std::io::Error| e.to_string();
    match f {
        Fault::Isolate(n) => fw.isolate(addr_of(*n)).map_err(e),
        Fault::Split(g) => {
            let rest: Vec<usize> = (0..NODES).filter(|n| !g.contains(n)).collect();
            fw.split(&ips(g), &ips(&rest)).map_err(e)?;
            // The minority loses the manager too; clients still reach it.
            fw.split(&ips(g), &[manager_ip()]).map_err(e)
        }
        Fault::Bridge { a, b } => fw.split(&ips(a), &ips(b)).map_err(e),
        Fault::OneWay { from, to } => {
            let l = tandem_nemesis::Link {
                from: addr_of(*from),
                to: addr_of(*to),
            };
            fw.drop_one_way(l).map_err(e)
        }
        Fault::Loss(pct) => loss(fw, *pct).map_err(e),
        Fault::BlackholeConnects(n) => fw.blackhole_connects(addr_of(*n)).map_err(e),
        Fault::IsolateManager => fw.isolate(manager_ip()).map_err(e),
        Fault::Pause(n) => {
            p.signal(*n, true);
            Ok(())
        }
        Fault::Kill(n) => {
            p.kill(*n);
            Ok(())
        }
        Fault::KillAll => {
            (0..NODES).for_each(|n| p.kill(n));
            Ok(())
        }
        Fault::Flip(_) => unreachable!("held by `hold`"),
    }
}

/// Loss on every link between two nodes, both ways.
fn loss(fw: &mut Firewall, pct: u32) -> std::io::Result<()> {
    for a in 0..NODES {
        for b in (0..NODES).filter(|&b| b != a) {
            let l = tandem_nemesis::Link {
                from: addr_of(a),
                to: addr_of(b),
            };
            fw.loss(l, pct)?;
        }
    }
    Ok(())
}

fn heal(fw: &mut Firewall, p: &mut Procs, f: &Fault) -> Result<(), String> {
    fw.heal().map_err(|e| e.to_string())?;
    match f {
        Fault::Pause(n) => p.signal(*n, false),
        Fault::Kill(_) | Fault::KillAll => {
            let down: Vec<usize> = (0..NODES).filter(|&n| !p.is_running(n)).collect();
            for n in down {
                p.start_node(n)?;
            }
        }
        _ => {}
    }
    Ok(())
}
