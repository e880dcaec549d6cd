//! `tandem nemesis --system kite|zab`: five Kite (or ZAB) node processes
//! under a seeded schedule of real faults — partitions, one-way drops,
//! loss, blackholed connects, `SIGSTOP`, `kill -9` — while the checked
//! random mix of every Kite operation records a history. Then
//!
//! - safety: Kite's history against release consistency
//!   ([`tandem_check::check_rc`]); ZAB's, whose reads are local (sequential
//!   consistency, not release consistency's linearizable synchronisation),
//!   against sequential consistency in zxid order
//!   ([`tandem_check::check_zxid_sc`]); both written as JSON lines
//!   ([`tandem_check::rc_to_jsonl`]);
//! - liveness: after each heal, throughput is back to half of its healthy
//!   level, and every node still up answers a release, within
//!   [`RECOVERY_BOUND`].
//!
//! Kite is crash-stop (its paper's §2.1): a killed replica stays down, so a
//! schedule kills at most two of the five ([`tandem_nemesis::schedule`]).
//! ZAB has no RMW, so its mix has none (CAS and FAA become releases).
//! ZAB's leader (node 0) is never replaced (no leader election is
//! modelled), so faults that cut it off stop writes until they heal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_kite::simcheck::Mix;
use tandem_kite::{Op, Reply};
use tandem_nemesis::addr_of;
use tandem_nemesis::drive::{proxy_for, Drive, ScheduleRun, Target};
use tandem_nemesis::schedule::{self, Shape};
use tandem_net::client::{Mux, MuxEvent};

use crate::procs::{run_load, Gen, KiteCluster, Live, LoadOpts, LoadReport, NodeOpts};

/// Five replicas, no manager; a killed replica stays down.
pub const SHAPE: Shape = Shape {
    nodes: 5,
    manager: false,
    restarts: false,
};
/// After a heal, throughput must be back, and every node still up must
/// answer a release, within this: a link cut for longer than its 1 s
/// silence bound is dialled again after at most 250 ms of backoff and a
/// 250 ms connect, and a session that gave up on a node comes back after
/// its 250 ms client time-out.
pub const RECOVERY_BOUND: Duration = Duration::from_millis(1_500);
const SETTLE: Duration = Duration::from_secs(1);
const PORT: u16 = 7100;
/// Four sessions per node: twenty in all, as in DDP's nemesis.
const SESSIONS_PER_NODE: u64 = 4;
const CLIENT_TIMEOUT_S: f64 = 0.25;
/// A session that moved off its node comes back after this: a healed
/// replica serves its clients again, so what it kept through the fault is
/// read.
const RETURN_HOME_S: f64 = 0.5;
/// Kite's write time-out, after which a replica that has not acknowledged
/// is marked delinquent. The paper's 1 ms fires all the time on a loaded
/// two-core host, so every run would exercise delinquency whatever the
/// faults; at 100 ms, replicas fall behind when a fault cuts them off or
/// stops them, which is what the nemesis is for.
const WRITE_TIMEOUT_MS: f64 = 100.0;

#[derive(Clone, Debug)]
pub struct KiteNemesis {
    pub exe: PathBuf,
    /// The ZAB baseline instead of Kite.
    pub zab: bool,
    pub seed: u64,
    pub schedules: u64,
    pub classes: Vec<String>,
    pub faults: usize,
    pub fault_time: Duration,
    pub dir: PathBuf,
    /// A Kite mutant every node runs (test-only).
    pub mutant: Option<String>,
}

impl KiteNemesis {
    pub fn system(&self) -> &'static str {
        if self.zab {
            "zab"
        } else {
            "kite"
        }
    }

    /// The command that runs schedule `seed` again.
    pub fn replay(&self, seed: u64) -> String {
        let mut c = format!(
            "tandem nemesis --system {} --seed {seed} --schedules 1 --faults {} --faults-per-schedule {} --fault-ms {}",
            self.system(),
            self.classes.join(","),
            self.faults,
            self.fault_time.as_millis()
        );
        if let Some(m) = &self.mutant {
            c += &format!(" --inject-bug {m}");
        }
        c
    }

    /// Run every schedule; the process must already be in its own namespace.
    pub fn run(&self, mut progress: impl FnMut(&ScheduleRun)) -> Vec<ScheduleRun> {
        (self.seed..self.seed + self.schedules)
            .map(|seed| {
                let r = self
                    .run_schedule(seed)
                    .unwrap_or_else(|e| self.failed(seed, e));
                progress(&r);
                r
            })
            .collect()
    }

    fn failed(&self, seed: u64, why: String) -> ScheduleRun {
        ScheduleRun {
            seed,
            faults: self.draw(seed).iter().map(|f| f.to_string()).collect(),
            operations: 0,
            unknown: 0,
            violations: vec![format!("the run could not go on: {why}")],
            heals: Vec::new(),
            history: PathBuf::new(),
            replay: self.replay(seed),
        }
    }

    fn draw(&self, seed: u64) -> Vec<schedule::Fault> {
        schedule::draw(seed, &self.classes, self.faults, SHAPE)
    }

    fn run_schedule(&self, seed: u64) -> Result<ScheduleRun, String> {
        let faults = self.draw(seed);
        let dir = self.dir.join(format!("seed-{seed}"));
        let node = NodeOpts {
            zab: self.zab,
            mutant: self.mutant.clone(),
            addrs: Some(addrs()),
            timeout_ms: (!self.zab).then_some(WRITE_TIMEOUT_MS),
        };
        let ips: Vec<_> = (0..SHAPE.nodes).map(addr_of).collect();
        let proxy = proxy_for(&faults, &ips, seed)?;
        let mut cluster = KiteCluster::start(&self.exe, SHAPE.nodes, &node, &dir)?;
        let mut target = Procs::new(&cluster)?;
        let live = Arc::new(Live::default());
        let o = LoadOpts {
            sessions_per_node: SESSIONS_PER_NODE,
            duration_s: 3600.0,
            client_timeout_s: CLIENT_TIMEOUT_S,
            seed,
            live: Some(live.clone()),
            return_home_s: Some(RETURN_HOME_S),
            ..LoadOpts::default()
        };
        let completed = || live.completed.load(Relaxed);
        let drive = Drive {
            fault_time: self.fault_time,
            settle: SETTLE,
            bound: RECOVERY_BOUND,
            completed: &completed,
            proxy,
        };
        let (report, outcome) = std::thread::scope(|s| {
            let mix = Mix {
                rmws: !self.zab,
                ..Mix::default()
            };
            let (c, o) = (&mut cluster, &o);
            let load = s.spawn(move || run_load(c, Gen::Checked(mix), o));
            let outcome = wait_serving(&live).and_then(|_| drive.run(&mut target, &faults));
            live.stop.store(true, Relaxed);
            let report = load
                .join()
                .map_err(|_| "the load thread panicked".to_string());
            (report, outcome)
        });
        let (report, outcome) = (report??, outcome?);
        let history = dir.join("history.jsonl");
        std::fs::write(&history, tandem_check::rc_to_jsonl(&report.history))
            .map_err(|e| format!("{}: {e}", history.display()))?;
        let mut violations = outcome.violations;
        violations.extend(self.check(&report));
        Ok(ScheduleRun {
            seed,
            faults: faults.iter().map(|f| f.to_string()).collect(),
            operations: report.ops - report.pending_ops,
            unknown: report.pending_ops,
            violations,
            heals: outcome.heals,
            history,
            replay: self.replay(seed),
        })
    }
}

impl KiteNemesis {
    /// Kite against release consistency (the load checked it); ZAB, whose
    /// reads are local, against sequential consistency in zxid order.
    fn check(&self, report: &LoadReport) -> Option<String> {
        if !self.zab {
            let v = report.violation.as_ref()?;
            return Some(format!("not release consistent: {v}"));
        }
        let v = tandem_check::check_zxid_sc(&report.history).err()?;
        Some(format!("not sequentially consistent in zxid order: {v}"))
    }
}

fn addrs() -> Vec<SocketAddr> {
    (0..SHAPE.nodes)
        .map(|i| SocketAddr::from((addr_of(i), PORT)))
        .collect()
}

fn wait_serving(live: &Live) -> Result<(), String> {
    let t = Instant::now();
    while live.completed.load(Relaxed) < 200 {
        if t.elapsed() > Duration::from_secs(20) {
            return Err("the cluster served fewer than 200 operations in 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The node processes as the nemesis sees them, by pid (the load thread
/// owns the cluster), and a client of their own that probes each node.
struct Procs {
    pids: Vec<i32>,
    killed: Vec<bool>,
    probe: Mux<Op, Reply>,
    session: u64,
}

impl Procs {
    fn new(c: &KiteCluster) -> Result<Procs, String> {
        let pids = c
            .pids()
            .into_iter()
            .map(|p| p.expect("just started"))
            .collect();
        let keys = c.secret().keyring();
        let probe = Mux::new(c.addrs.clone(), keys, Duration::from_millis(200))
            .map_err(|e| e.to_string())?;
        Ok(Procs {
            pids,
            killed: vec![false; SHAPE.nodes],
            probe,
            session: 1 << 41,
        })
    }

    fn send(&mut self, n: usize, sig: i32) {
        // SAFETY: a signal to a child of this process, not reaped before
        // the cluster is dropped.
        unsafe { libc::kill(self.pids[n], sig) };
    }

    /// Whether every node still up answered a release within `limit`.
    fn probe_all(&mut self, limit: Duration) -> bool {
        let mut todo: Vec<(usize, u64)> = Vec::new();
        for n in (0..SHAPE.nodes).filter(|&n| !self.killed[n]) {
            self.session += 1;
            if self
                .probe
                .send(n, self.session, 0, Op::Release(u64::MAX, 0))
                .is_err()
            {
                return false;
            }
            todo.push((n, self.session));
        }
        let until = Instant::now() + limit;
        let mut events = Vec::new();
        while !todo.is_empty() && Instant::now() < until {
            events.clear();
            let _ = self.probe.poll(Duration::from_millis(10), &mut events);
            for e in &events {
                if let MuxEvent::Reply { session, .. } = e {
                    todo.retain(|t| t.1 != *session);
                }
            }
        }
        todo.is_empty()
    }
}

/// A zombie: the process ended and nobody has reaped it yet.
fn ended(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next();
    matches!(state, Some("Z") | Some("X") | None)
}

impl Target for Procs {
    fn shape(&self) -> Shape {
        SHAPE
    }
    fn signal(&mut self, n: usize, stop: bool) {
        self.send(n, if stop { libc::SIGSTOP } else { libc::SIGCONT });
    }
    fn kill(&mut self, n: usize) {
        self.send(n, libc::SIGKILL);
        self.killed[n] = true;
    }
    fn restart(&mut self, n: usize) -> Result<(), String> {
        Err(format!("node {n}: Kite's replicas are crash-stop"))
    }
    fn down(&self) -> Vec<usize> {
        (0..SHAPE.nodes).filter(|&n| self.killed[n]).collect()
    }
    fn exited(&mut self) -> Option<usize> {
        (0..SHAPE.nodes).find(|&n| !self.killed[n] && ended(self.pids[n]))
    }
    fn whole(&mut self) -> bool {
        self.probe_all(Duration::from_millis(200))
    }
    fn configuration(&self) -> String {
        format!("nodes killed (crash-stop): {:?}", self.down())
    }
}
