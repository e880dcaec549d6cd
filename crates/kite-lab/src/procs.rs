//! Kite over real processes: N `tandem node --system kite` processes on
//! loopback, closed-loop client sessions over [`Mux`] streams, and faults a
//! real deployment has: `kill -9` of a node and a node stopped (`SIGSTOP`)
//! for a while, then continued.
//!
//! Two loads:
//! - [`Gen::Checked`]: the simulator's random mix of every operation
//!   ([`RandomMix`]), recorded as an [`RcOp`] history exactly as
//!   `tandem_kite::simcheck`'s hook records it (wall-clock ns since the run
//!   started), then checked with [`tandem_check::check_rc`];
//! - [`Gen::Bench`]: the paper's request mix of [`crate::bench`] (uniform keys,
//!   5 % writes, 5 % sync), mapped to Kite or to ES (every op relaxed), for
//!   throughput and latency.
//!
//! A session whose node dies (its stream closes, or a call outlives the
//! client time-out) records its call as pending (unknown outcome) and
//! continues on the next node as a new session, under a new name both on
//! the wire and in the history (Kite's per-session order holds only on one
//! node; `simcheck`'s `Recorder::name`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tandem_auth::MasterSecret;

use serde::Serialize;
use tandem_check::{RcKind, RcOp, Version};
use tandem_kite::simcheck::{completed, pending, Mix, RandomMix, Workload};
use tandem_kite::{Op, Reply};
use tandem_net::client::{Mux, MuxEvent};
use tandem_net::wire::NodeStats;
use tandem_sim::Rng;

use crate::bench::{draw_class, kite_op, Latency, System, SystemResult};

/// How long the cluster may take to serve its first operation.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How long a session waits before calling a node it could not reach again.
const RETRY_NS: u64 = 20_000_000;

/// Kite node processes; dropping it kills the ones still running.
pub struct KiteCluster {
    pub addrs: Vec<SocketAddr>,
    secret: MasterSecret,
    dir: PathBuf,
    nodes: Vec<Option<Child>>,
    /// Stopped with SIGSTOP and not continued yet.
    stopped: Vec<bool>,
    /// `kite` or `zab`.
    system: &'static str,
}

impl Drop for KiteCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            if self.stopped[i] {
                self.cont(i);
            }
            if let Some(mut c) = self.nodes[i].take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// How the node processes run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeOpts {
    /// Kite's write time-out (`--timeout-ms`); `None`: the paper's 1 ms.
    pub timeout_ms: Option<f64>,
    /// A deliberate bug (`--mutant`), for showing the checks can fail.
    pub mutant: Option<String>,
    /// Run the ZAB baseline (`--system zab`, [`tandem_zab::kite_api`]) instead of
    /// Kite; the two options above are Kite's.
    pub zab: bool,
    /// Listen on these (one per node) instead of free loopback ports.
    #[serde(skip)]
    pub addrs: Option<Vec<SocketAddr>>,
}

fn new_secret() -> MasterSecret {
    MasterSecret::generate()
}

impl KiteCluster {
    /// Start `n` nodes of `exe` (`tandem`) with their logs and NVM files
    /// under `dir` (emptied first); retried on new ports if one was taken.
    pub fn start(exe: &Path, n: usize, opts: &NodeOpts, dir: &Path) -> Result<KiteCluster, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_once(exe, n, opts, dir) {
                Err(e) if e.contains("cannot listen") => last = e,
                r => return r,
            }
        }
        Err(last)
    }

    fn start_once(
        exe: &Path,
        n: usize,
        opts: &NodeOpts,
        dir: &Path,
    ) -> Result<KiteCluster, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let addrs = match &opts.addrs {
            Some(a) if a.len() == n => a.clone(),
            Some(a) => return Err(format!("{} addresses for {n} nodes", a.len())),
            None => (0..n).map(|_| free_addr()).collect::<Result<Vec<_>, _>>()?,
        };
        let peers = addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut c = KiteCluster {
            addrs,
            secret: new_secret(),
            dir: dir.to_path_buf(),
            nodes: Vec::new(),
            stopped: vec![false; n],
            system: if opts.zab { "zab" } else { "kite" },
        };
        for i in 0..n {
            let log = std::fs::File::create(dir.join(format!("node{i}.log")))
                .map_err(|e| e.to_string())?;
            let mut cmd = Command::new(exe);
            cmd.args([
                "node",
                "--system",
                if opts.zab { "zab" } else { "kite" },
                "--id",
                &i.to_string(),
                "--peers",
                &peers,
            ]);
            cmd.arg("--nvm")
                .arg(dir.join(format!("node{i}.nvm")))
                .args(["--nvm-size", "64K"])
                .env("TANDEM_SECRET", c.secret.hex());
            if let Some(t) = opts.timeout_ms.filter(|_| !opts.zab) {
                cmd.args(["--timeout-ms", &t.to_string()]);
            }
            if let Some(m) = &opts.mutant {
                cmd.args(["--mutant", m]);
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
            c.nodes.push(Some(child));
        }
        c.wait_serving()?;
        Ok(c)
    }

    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    pub fn node_logs(&self) -> String {
        (0..self.len())
            .map(|i| {
                std::fs::read_to_string(self.dir.join(format!("node{i}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("")
    }

    /// Every node answers a release (each node: Kite reads are local, so
    /// one node serving says nothing about the others). ZAB first answers
    /// a local read on every node, then waits out the hosts' redial period
    /// before its first write: its followers do not resync while live, so
    /// a proposal sent on a link not yet up would stall one for good.
    fn wait_serving(&mut self) -> Result<(), String> {
        if self.system == "zab" {
            self.wait_answer(Op::Read(u64::MAX))?;
            std::thread::sleep(Duration::from_millis(200));
        }
        self.wait_answer(Op::Release(u64::MAX, 0))
    }

    fn wait_answer(&mut self, op: Op) -> Result<(), String> {
        let mut mux: Mux<Op, Reply> = Mux::new(
            self.addrs.clone(),
            self.secret.keyring(),
            Duration::from_secs(1),
        )
        .map_err(|e| e.to_string())?;
        let until = Instant::now() + START_LIMIT;
        let mut todo: Vec<usize> = (0..self.len()).collect();
        let mut events = Vec::new();
        let mut session = 1u64 << 40;
        while !todo.is_empty() {
            if let Some(i) = self.nodes.iter_mut().position(|c| {
                c.as_mut()
                    .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
            }) {
                return Err(format!(
                    "tandem node {i} ({}) exited at start-up:\n{}",
                    self.system,
                    self.node_logs()
                ));
            }
            if Instant::now() > until {
                return Err(format!("the {} cluster did not serve within {START_LIMIT:?} (nodes {todo:?} silent):\n{}", self.system, self.node_logs()));
            }
            for &n in &todo {
                session += 1;
                let _ = mux.send(n, session, 0, op);
            }
            events.clear();
            let _ = mux.poll(Duration::from_millis(50), &mut events);
            for e in &events {
                if let MuxEvent::Reply { node, .. } = e {
                    todo.retain(|n| n != node);
                }
            }
            if !todo.is_empty() {
                // Refused before the node listens: the next send connects again.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Each node's process id (for a nemesis that signals them while a
    /// load runs); `None` for a node killed through [`Self::kill9`].
    pub fn pids(&self) -> Vec<Option<i32>> {
        (0..self.len()).map(|i| self.pid(i)).collect()
    }

    pub fn secret(&self) -> &MasterSecret {
        &self.secret
    }

    fn pid(&self, i: usize) -> Option<i32> {
        self.nodes[i].as_ref().map(|c| c.id() as i32)
    }

    /// `kill -9` node `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stopped[i] = false;
    }

    /// SIGSTOP node `i`: it keeps its sockets, and everything sent to it waits.
    pub fn stop(&mut self, i: usize) {
        if let Some(pid) = self.pid(i) {
            // SAFETY: a signal to our own child, which we have not reaped.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            self.stopped[i] = true;
        }
    }

    /// SIGCONT node `i`.
    pub fn cont(&mut self, i: usize) {
        if let Some(pid) = self.pid(i) {
            // SAFETY: as in `stop`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        self.stopped[i] = false;
    }

    pub fn alive(&self, i: usize) -> bool {
        self.nodes[i].is_some()
    }

    /// The sum of the live, running nodes' counters.
    pub fn stats(&self) -> NodeStats {
        let mut t = NodeStats::default();
        for i in (0..self.len()).filter(|&i| self.alive(i) && !self.stopped[i]) {
            if let Ok(s) = tandem_net::client::node_stats(
                self.addrs[i],
                &self.secret.keyring(),
                Duration::from_secs(2),
            ) {
                t += s;
            }
        }
        t
    }

    pub fn cpu_seconds(&self) -> f64 {
        self.nodes
            .iter()
            .flatten()
            .map(|c| tandem_net::procstat::cpu_seconds(c.id()))
            .sum()
    }
}

/// A fault of a run, at seconds since the load started.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// SIGSTOP `node` at `from_s`, SIGCONT it `for_s` later.
    Sleep {
        node: usize,
        from_s: f64,
        for_s: f64,
    },
    /// `kill -9` `node` at `at_s`.
    Kill { node: usize, at_s: f64 },
}

impl Fault {
    /// `NODE:FROM_S:FOR_S`.
    pub fn parse_sleep(s: &str) -> Result<Fault, String> {
        let f: Vec<&str> = s.split(':').collect();
        let bad = || format!("--sleep {s}: expected NODE:FROM_S:FOR_S");
        if f.len() != 3 {
            return Err(bad());
        }
        let node = f[0].parse().map_err(|_| bad())?;
        let (from_s, for_s) = (
            f[1].parse().map_err(|_| bad())?,
            f[2].parse().map_err(|_| bad())?,
        );
        Ok(Fault::Sleep {
            node,
            from_s,
            for_s,
        })
    }

    /// `NODE:AT_S`.
    pub fn parse_kill(s: &str) -> Result<Fault, String> {
        let bad = || format!("--kill {s}: expected NODE:AT_S");
        let (n, at) = s.split_once(':').ok_or_else(bad)?;
        Ok(Fault::Kill {
            node: n.parse().map_err(|_| bad())?,
            at_s: at.parse().map_err(|_| bad())?,
        })
    }

    fn node(&self) -> usize {
        match *self {
            Fault::Sleep { node, .. } | Fault::Kill { node, .. } => node,
        }
    }
}

/// The bench mix of [`crate::bench`].
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BenchMix {
    pub system: System,
    pub keys: u64,
    pub write_ratio: f64,
    pub sync_ratio: f64,
    pub rmw_ratio: f64,
}

impl BenchMix {
    /// Kite runs every class as itself, ES every op relaxed, ABD every op
    /// as a release or acquire, Paxos its writes as RMWs, ZAB its reads
    /// local and its writes through the leader ([`crate::bench`]'s mapping).
    fn op(&self, rng: &mut Rng, value: u64) -> Op {
        let (c, key) = (
            draw_class(self.write_ratio, self.sync_ratio, self.rmw_ratio, rng),
            rng.below(self.keys),
        );
        kite_op(self.system, c, key, value)
    }
}

/// What the sessions ask.
pub enum Gen {
    /// The simulator's random mix of every operation, recorded and checked.
    Checked(Mix),
    /// Any workload (e.g. data-structure programs), recorded and checked.
    Work(Box<dyn Workload>),
    /// The benchmark mix, not recorded.
    Bench(BenchMix),
}

#[derive(Clone, Debug, Serialize)]
pub struct LoadOpts {
    pub sessions_per_node: u64,
    /// Not measured (latencies and throughput count after it).
    pub warmup_s: f64,
    pub duration_s: f64,
    /// A call unanswered this long counts as unknown; the session moves on.
    pub client_timeout_s: f64,
    pub faults: Vec<Fault>,
    pub seed: u64,
    /// Print a line per second on stderr under this name (long runs).
    pub progress: Option<String>,
    /// Shared with another thread while the run goes on: replies so far,
    /// and a flag that ends the run early.
    #[serde(skip)]
    pub live: Option<std::sync::Arc<Live>>,
    /// A session that moved goes back to its first node after this long
    /// (`None`: it stays where it moved).
    pub return_home_s: Option<f64>,
}

/// What another thread sees of a run in progress, and how it ends it.
#[derive(Debug, Default)]
pub struct Live {
    pub completed: std::sync::atomic::AtomicU64,
    pub stop: std::sync::atomic::AtomicBool,
}

impl Default for LoadOpts {
    fn default() -> Self {
        LoadOpts {
            sessions_per_node: 40,
            warmup_s: 0.0,
            duration_s: 5.0,
            client_timeout_s: 3.0,
            faults: Vec::new(),
            seed: 1,
            progress: None,
            live: None,
            return_home_s: None,
        }
    }
}

/// One logical client session.
struct Session {
    node: usize,
    /// Its name on the wire and in the history; a new one per node it moves to.
    name: u64,
    next_req: u64,
    /// The call in flight: request, its history entry, invoked at.
    call: Option<(u64, Option<usize>, u64)>,
    wake_at: u64,
    completed: u64,
    last_done_ns: u64,
    /// When it last moved to another node.
    moved_at: u64,
}

/// What a run measured (and, for the checked mix, found).
#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    pub system: &'static str,
    pub nodes: usize,
    pub sessions: u64,
    pub faults: Vec<Fault>,
    /// Replies per second over the measured interval.
    pub throughput_ops: f64,
    pub latency_us: Latency,
    pub completed: u64,
    /// History operations (checked mix), and those without an outcome.
    pub ops: usize,
    pub pending_ops: usize,
    /// Sessions that moved to another node (their node died or stalled past the client time-out).
    pub moves: u64,
    pub violation_count: u64,
    pub violation: Option<String>,
    /// Completions per 100 ms, per node the session was on.
    pub timeline_per_node: Vec<Vec<u64>>,
    /// Per logical session: its node at the end, completions, the last completion (s since the start).
    pub sessions_end: Vec<(usize, u64, f64)>,
    /// Live (not killed) nodes at the end.
    pub alive: Vec<bool>,
    pub messages_per_op: f64,
    pub node_cpu_us_per_op: f64,
    /// The nodes' CPU per message they handled (peer messages received and
    /// client requests taken), in ns, and their system calls per message
    /// (reads, writes, poller waits, as their runtime counts them).
    pub node_cpu_ns_per_message: f64,
    pub node_syscalls_per_message: f64,
    /// The share of the nodes' CPU their event loops' threads used.
    pub node_loop_cpu_share: f64,
    pub seconds: f64,
    #[serde(skip)]
    pub history: Vec<RcOp>,
}

const BUCKET_NS: u64 = 100_000_000;

/// The run's history, in chunks of a fixed size: a `Vec` doubling its
/// hundreds of megabytes stalled the one client thread (every node's
/// throughput dipped at once when the history passed 2^18 and 2^19
/// entries in `demo kite`); chunks are never copied until the end.
#[derive(Default)]
struct History {
    chunks: Vec<Vec<RcOp>>,
}

const CHUNK: usize = 1 << 14;

impl History {
    /// Append `op`; its index.
    fn push(&mut self, op: RcOp) -> usize {
        if self.chunks.last().map_or(true, |c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks.last_mut().expect("pushed above").push(op);
        (self.chunks.len() - 1) * CHUNK + self.chunks.last().map_or(0, Vec::len) - 1
    }

    fn into_vec(self) -> Vec<RcOp> {
        self.chunks.concat()
    }
}

impl std::ops::Index<usize> for History {
    type Output = RcOp;
    fn index(&self, i: usize) -> &RcOp {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl std::ops::IndexMut<usize> for History {
    fn index_mut(&mut self, i: usize) -> &mut RcOp {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

/// Run `gen` with `o`'s sessions on `cluster`, injecting `o.faults`:
/// set up, then loop (faults due, time-outs, issue, poll, replies) until
/// the end and the drain, then check and report.
pub fn run_load(cluster: &mut KiteCluster, gen: Gen, o: &LoadOpts) -> Result<LoadReport, String> {
    let n = cluster.len();
    if let Some(f) = o.faults.iter().find(|f| f.node() >= n) {
        return Err(format!("fault {f:?}: there are {n} nodes"));
    }
    let mut l = Load::new(cluster, gen, o)?;
    let mut events = Vec::new();
    while !l.drained() {
        l.faults_due();
        l.sweep();
        l.progress();
        l.issue();
        events.clear();
        if l.mux.poll(Duration::from_millis(1), &mut events).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let now = l.now();
        for ev in events.drain(..) {
            match ev {
                MuxEvent::Reply {
                    session,
                    req,
                    result,
                    ..
                } => l.on_reply(session, req, result, now),
                MuxEvent::Lost { node } => l.on_lost(node, now),
            }
        }
    }
    Ok(l.finish())
}

/// A fault due at a time: stop, continue, or kill a node.
#[derive(Clone, Copy)]
enum Act {
    Stop,
    Cont,
    Kill,
}

/// One load run in progress.
struct Load<'a> {
    cluster: &'a mut KiteCluster,
    o: &'a LoadOpts,
    n: usize,
    total: u64,
    system: &'static str,
    mux: Mux<Op, Reply>,
    mix: Option<Box<dyn Workload>>,
    bench: Option<BenchMix>,
    rng: Rng,
    sess: Vec<Session>,
    by_name: HashMap<u64, usize>,
    hist: History,
    lat: Vec<u64>,
    timeline: Vec<Vec<u64>>,
    measured: u64,
    moves: u64,
    next_value: u64,
    plan: std::iter::Peekable<std::vec::IntoIter<(u64, usize, Act)>>,
    warm_ns: u64,
    end_ns: u64,
    timeout_ns: u64,
    start: Instant,
    stopping_at: Option<u64>,
    next_sweep: u64,
    stats0: (NodeStats, f64),
    stats_warm: Option<(NodeStats, f64)>,
    /// Replies so far, and (next progress line at, replies then).
    replies: u64,
    last_progress: (u64, u64),
}

impl<'a> Load<'a> {
    fn new(cluster: &'a mut KiteCluster, gen: Gen, o: &'a LoadOpts) -> Result<Load<'a>, String> {
        let n = cluster.len();
        let total = o.sessions_per_node * n as u64;
        let (warm_ns, end_ns) = (
            (o.warmup_s * 1e9) as u64,
            ((o.warmup_s + o.duration_s) * 1e9) as u64,
        );
        // A connect (and its handshake) blocks this one thread: never
        // longer than a call may take.
        let connect = Duration::from_secs_f64(o.client_timeout_s.min(1.0));
        let mux = Mux::new(cluster.addrs.clone(), cluster.secret.keyring(), connect)
            .map_err(|e| e.to_string())?;
        let (mix, system, bench) = match gen {
            Gen::Checked(m) => (
                Some(Box::new(RandomMix::new(m, total)) as Box<dyn Workload>),
                "kite",
                None,
            ),
            Gen::Work(w) => (Some(w), "kite", None),
            Gen::Bench(b) => (None, b.system.name(), Some(b)),
        };
        let sess = (0..total)
            .map(|i| Session {
                node: i as usize % n,
                name: i,
                next_req: 0,
                call: None,
                wake_at: 0,
                completed: 0,
                last_done_ns: 0,
                moved_at: 0,
            })
            .collect();
        let stats0 = (cluster.stats(), cluster.cpu_seconds());
        Ok(Load {
            n,
            total,
            system,
            mux,
            mix,
            bench,
            rng: Rng::new(o.seed ^ 0x6B17E),
            sess,
            by_name: (0..total).map(|i| (i, i as usize)).collect(),
            hist: History::default(),
            lat: Vec::new(),
            timeline: vec![vec![0; n]; (end_ns / BUCKET_NS) as usize + 1],
            measured: 0,
            moves: 0,
            next_value: 0,
            plan: fault_plan(&o.faults, warm_ns).into_iter().peekable(),
            warm_ns,
            end_ns,
            timeout_ns: (o.client_timeout_s * 1e9) as u64,
            start: Instant::now(),
            stopping_at: None,
            next_sweep: 0,
            stats0,
            stats_warm: None,
            replies: 0,
            last_progress: (1_000_000_000, 0),
            cluster,
            o,
        })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Carry out the faults due; note the warm-up's end and the run's.
    fn faults_due(&mut self) {
        let now = self.now();
        while self.plan.peek().is_some_and(|p| p.0 <= now) {
            match self.plan.next().expect("peeked") {
                (_, node, Act::Stop) => self.cluster.stop(node),
                (_, node, Act::Cont) => self.cluster.cont(node),
                (_, node, Act::Kill) => self.cluster.kill9(node),
            }
        }
        if self.stats_warm.is_none() && now >= self.warm_ns {
            self.stats_warm = Some((self.cluster.stats(), self.cluster.cpu_seconds()));
        }
        let stop = self.o.live.as_ref().is_some_and(|l| l.stop.load(Relaxed));
        if self.stopping_at.is_none() && (now >= self.end_ns || stop) {
            self.stopping_at = Some(now);
            if let Some(m) = self.mix.as_mut() {
                m.stop();
            }
        }
    }

    /// With `progress`: a line per second, replies so far and their rate.
    fn progress(&mut self) {
        let Some(name) = &self.o.progress else { return };
        let now = self.now();
        if now < self.last_progress.0 || self.stopping_at.is_some() {
            return;
        }
        let rate = (self.replies - self.last_progress.1) as f64;
        eprintln!(
            "  [{:>4.1}s] {name:<20} {:>9} ops  {rate:>9.0} ops/s",
            now as f64 / 1e9,
            self.replies
        );
        self.last_progress = (self.last_progress.0 + 1_000_000_000, self.replies);
    }

    /// Past the end, every call answered or the client time-out passed.
    fn drained(&self) -> bool {
        self.stopping_at.is_some_and(|t| {
            self.sess.iter().all(|s| s.call.is_none()) || self.now() >= t + self.timeout_ns
        })
    }

    /// Calls unanswered past the client time-out have unknown outcomes.
    fn sweep(&mut self) {
        let now = self.now();
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + 5_000_000;
        for i in 0..self.sess.len() {
            if self.sess[i]
                .call
                .as_ref()
                .is_some_and(|c| c.2 + self.timeout_ns <= now)
            {
                self.give_up(i, now);
            }
        }
    }

    /// Session `i`'s call has an unknown outcome: pending in the history,
    /// and the session moves to the next node under a new name.
    fn give_up(&mut self, i: usize, now: u64) {
        if let Some((_, h, _)) = self.sess[i].call.take() {
            if let Some(h) = h {
                unknown_outcome(&mut self.hist[h]);
            }
            if let Some(m) = self.mix.as_mut() {
                m.lost(i as u64, now);
            }
        }
        let next = (self.sess[i].node + 1) % self.n;
        self.move_to(i, next, now);
    }

    /// Session `i` goes on at `node`, under a new name.
    fn move_to(&mut self, i: usize, node: usize, now: u64) {
        let s = &mut self.sess[i];
        self.by_name.remove(&s.name);
        s.name += self.total;
        self.by_name.insert(s.name, i);
        s.node = node;
        s.next_req = 0;
        s.moved_at = now;
        self.moves += 1;
    }

    /// With `return_home_s`: an idle session away from its first node for
    /// that long goes back, as a client that prefers its nearest replica.
    fn go_home(&mut self, i: usize, now: u64) {
        let Some(after) = self.o.return_home_s else {
            return;
        };
        let s = &self.sess[i];
        let home = i % self.n;
        if s.node != home && now >= s.moved_at + (after * 1e9) as u64 {
            self.move_to(i, home, now);
        }
    }

    /// Every idle session calls its node (until the run ends).
    fn issue(&mut self) {
        let now = self.now();
        if self.stopping_at.is_some() {
            return;
        }
        for i in 0..self.sess.len() {
            if self.sess[i].call.is_none() && self.sess[i].wake_at <= now {
                self.go_home(i, now);
                self.issue_one(i, now);
            }
        }
    }

    fn issue_one(&mut self, i: usize, now: u64) {
        let op = match (&mut self.mix, &self.bench) {
            (Some(m), _) => match m.next(i as u64, now, &mut self.rng) {
                Some(op) => op,
                None => return,
            },
            (None, Some(b)) => {
                self.next_value += 1;
                b.op(&mut self.rng, self.next_value)
            }
            (None, None) => unreachable!("one generator"),
        };
        let s = &mut self.sess[i];
        let req = s.next_req;
        s.next_req += 1;
        if self.mux.send(s.node, s.name, req, op).is_err() {
            // Never sent: no effect. The workload forgets it too.
            if let Some(m) = self.mix.as_mut() {
                m.lost(i as u64, now);
            }
            self.give_up(i, now);
            self.sess[i].wake_at = now + RETRY_NS;
            return;
        }
        let h = self.mix.is_some().then(|| {
            self.hist.push(RcOp {
                session: s.name,
                node: s.node as u16,
                kind: invoked(&op),
                invoke_ns: now,
                complete_ns: None,
            })
        });
        s.call = Some((req, h, now));
    }

    fn on_reply(&mut self, session: u64, req: u64, result: Reply, now: u64) {
        let Some(&i) = self.by_name.get(&session) else {
            return;
        };
        if !matches!(self.sess[i].call, Some((r, ..)) if r == req) {
            return;
        }
        let (_, h, invoked) = self.sess[i].call.take().expect("checked");
        if let Some(h) = h {
            answered(&mut self.hist[h], &result, now);
        }
        if let Some(m) = self.mix.as_mut() {
            m.done(i as u64, &result, now);
        }
        self.replies += 1;
        if let Some(l) = &self.o.live {
            l.completed.fetch_add(1, Relaxed);
        }
        let s = &mut self.sess[i];
        s.completed += 1;
        s.last_done_ns = now;
        if let Some(row) = self.timeline.get_mut((now / BUCKET_NS) as usize) {
            row[s.node] += 1;
        }
        if (self.warm_ns..self.end_ns).contains(&invoked) && now <= self.end_ns {
            self.measured += 1;
            self.lat.push(now - invoked);
        }
    }

    fn on_lost(&mut self, node: usize, now: u64) {
        for i in 0..self.sess.len() {
            if self.sess[i].node == node {
                self.give_up(i, now);
            }
        }
    }

    /// Close open calls (unknown outcomes), continue stopped nodes, check
    /// the history and report.
    fn finish(mut self) -> LoadReport {
        let now = self.now();
        for s in &mut self.sess {
            if let Some((_, Some(h), _)) = s.call.take() {
                unknown_outcome(&mut self.hist[h]);
            }
        }
        for (_, node, act) in self.plan.by_ref() {
            if matches!(act, Act::Cont) {
                self.cluster.cont(node); // a sleep that outlasted the run
            }
        }
        let (stats1, cpu1) = (self.cluster.stats(), self.cluster.cpu_seconds());
        let (s0, c0) = self.stats_warm.take().unwrap_or(self.stats0);
        self.lat.sort_unstable();
        let lat = &self.lat;
        let pct = |q: f64| {
            lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1)))
                .map_or(0.0, |&v| v as f64 / 1e3)
        };
        let latency_us = Latency {
            p50: pct(0.5),
            p99: pct(0.99),
            p999: pct(0.999),
        };
        let checked = self.mix.is_some();
        let hist = std::mem::take(&mut self.hist).into_vec();
        let violation = if checked {
            tandem_check::check_rc(&hist).err().map(|v| v.to_string())
        } else {
            None
        };
        let pending_ops = hist.iter().filter(|h| h.complete_ns.is_none()).count();
        let replies = stats1.replies.saturating_sub(s0.replies).max(1) as f64;
        let handled =
            ((stats1.received + stats1.requests) - (s0.received + s0.requests)).max(1) as f64;
        LoadReport {
            system: self.system,
            nodes: self.n,
            sessions: self.total,
            faults: self.o.faults.clone(),
            throughput_ops: self.measured as f64 / self.o.duration_s,
            latency_us,
            completed: self.sess.iter().map(|s| s.completed).sum(),
            ops: hist.len(),
            pending_ops,
            moves: self.moves,
            violation_count: violation.is_some() as u64,
            violation,
            timeline_per_node: self.timeline,
            sessions_end: self
                .sess
                .iter()
                .map(|s| (s.node, s.completed, s.last_done_ns as f64 / 1e9))
                .collect(),
            alive: (0..self.n).map(|i| self.cluster.alive(i)).collect(),
            messages_per_op: stats1.sent.saturating_sub(s0.sent) as f64 / replies,
            node_cpu_us_per_op: 1e6 * (cpu1 - c0).max(0.0) / replies,
            node_cpu_ns_per_message: 1e9 * (cpu1 - c0).max(0.0) / handled,
            node_syscalls_per_message: stats1.syscalls.saturating_sub(s0.syscalls) as f64 / handled,
            node_loop_cpu_share: stats1.loop_cpu_ns.saturating_sub(s0.loop_cpu_ns) as f64
                / stats1.cpu_ns.saturating_sub(s0.cpu_ns).max(1) as f64,
            seconds: now as f64 / 1e9,
            history: hist,
        }
    }
}

/// The faults as a schedule of (ns since the start, node, act).
fn fault_plan(faults: &[Fault], warm_ns: u64) -> Vec<(u64, usize, Act)> {
    let mut plan = Vec::new();
    for f in faults {
        match *f {
            Fault::Sleep {
                node,
                from_s,
                for_s,
            } => {
                plan.push(((from_s * 1e9) as u64 + warm_ns, node, Act::Stop));
                plan.push((((from_s + for_s) * 1e9) as u64 + warm_ns, node, Act::Cont));
            }
            Fault::Kill { node, at_s } => {
                plan.push(((at_s * 1e9) as u64 + warm_ns, node, Act::Kill))
            }
        }
    }
    plan.sort_by_key(|p| p.0);
    plan
}

/// The history entry of `op` before its reply (a CAS as a failed-CAS
/// placeholder that keeps its expected value, as `simcheck` records it).
fn invoked(op: &Op) -> RcKind {
    match *op {
        Op::Cas { key, expected, .. } => RcKind::CasFail {
            key,
            expected,
            value: 0,
            version: Version::default(),
            local: false,
        },
        _ => pending(op),
    }
}

fn answered(h: &mut RcOp, result: &Reply, now: u64) {
    let kind = h.kind;
    let mut done = completed(&kind, result);
    if let (RcKind::CasFail { expected, .. }, RcKind::CasFail { expected: e, .. }) =
        (kind, &mut done)
    {
        *e = expected;
    }
    h.kind = done;
    h.complete_ns = Some(now);
}

/// No reply will come: the operation may or may not have taken effect.
fn unknown_outcome(h: &mut RcOp) {
    if let RcKind::CasFail { key, .. } = h.kind {
        h.kind = pending(&Op::Faa(key, 0));
    }
}

/// `tandem kite bench --net tcp`: one cluster per system, the bench mix.
pub fn bench_tcp(
    exe: &Path,
    dir: &Path,
    nodes: usize,
    node: &NodeOpts,
    mix: BenchMix,
    o: &LoadOpts,
) -> Result<(SystemResult, LoadReport), String> {
    let d = dir.join(mix.system.name());
    let node = &NodeOpts {
        zab: mix.system == System::Zab,
        ..node.clone()
    };
    let mut cluster = KiteCluster::start(exe, nodes, node, &d)?;
    let r = run_load(&mut cluster, Gen::Bench(mix), o)?;
    drop(cluster);
    let _ = std::fs::remove_dir_all(&d);
    let s = SystemResult {
        system: mix.system.name(),
        write_ratio: mix.write_ratio,
        sync_ratio: mix.sync_ratio,
        rmw_ratio: mix.rmw_ratio,
        throughput_ops: r.throughput_ops,
        latency_us: r.latency_us,
        messages_per_op: r.messages_per_op,
        kite: None,
    };
    Ok((s, r))
}

/// `tandem kite load`: the checked random mix with faults.
pub fn checked_load(
    exe: &Path,
    dir: &Path,
    nodes: usize,
    node: &NodeOpts,
    o: &LoadOpts,
) -> Result<LoadReport, String> {
    let mut cluster = KiteCluster::start(exe, nodes, node, dir)?;
    let r = run_load(&mut cluster, Gen::Checked(Mix::default()), o);
    let logs = cluster.node_logs();
    drop(cluster);
    let r = r?;
    if r.violation.is_none() {
        let _ = std::fs::remove_dir_all(dir);
    } else {
        let _ = std::fs::write(dir.join("nodes.log"), logs);
    }
    Ok(r)
}

/// A loopback port free right now.
fn free_addr() -> Result<SocketAddr, String> {
    tandem_net::ports::reserve_loopback().map_err(|e| format!("no free loopback port: {e}"))
}
