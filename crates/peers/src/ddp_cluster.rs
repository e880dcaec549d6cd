//! Tandem's side of `tandem compare --system ddp`: five `tandem node`
//! processes (static membership, every key on all five, an NVM file each,
//! optionally `--fsync`) driven by `tandem_ddp::load` sessions over TCP. The
//! measured figures come from the sessions' history: operations completed
//! inside the measured interval, and their latencies.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tandem_check::{HistOp, OpKind};
use tandem_ddp::load::{Load, LoadConfig};

use crate::driver::new_hist;
use crate::kv_driver::Counts;

pub const NODES: usize = 5;
/// How long the cluster may take to serve its first operation.
const START_LIMIT: Duration = Duration::from_secs(30);
/// Preloading stops after this long even if not every record was written.
const PRELOAD_LIMIT: Duration = Duration::from_secs(10);

/// The five node processes; dropping it kills them.
pub struct DdpCluster {
    pub model: String,
    pub addrs: Vec<SocketAddr>,
    secret: u64,
    dir: PathBuf,
    nodes: Vec<Child>,
}

impl Drop for DdpCluster {
    fn drop(&mut self) {
        for c in &mut self.nodes {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_addr() -> Result<SocketAddr, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    l.local_addr().map_err(|e| e.to_string())
}

fn new_secret() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

/// One measured run of a cluster.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub clients: u64,
    pub records: u64,
    pub read_ratio: f64,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    pub progress: bool,
}

pub struct TandemRun {
    pub counts: Counts,
    pub elapsed_s: f64,
    pub hist: Histogram<u64>,
    /// Operations whose outcome stayed unknown (no reply) or that failed.
    pub failed: u64,
    /// The whole history (preload included), for the linearizability check.
    pub history: Vec<HistOp>,
}

impl DdpCluster {
    /// Start five nodes of `model` with NVM files under `dir` (emptied first).
    /// A port taken between choosing it and binding it fails a node at
    /// start-up: then the cluster is started again on new ports (3 attempts).
    pub fn start(exe: &Path, model: &str, fsync: bool, dir: &Path) -> Result<DdpCluster, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_once(exe, model, fsync, dir) {
                Err(e) if e.contains("cannot listen") => last = e,
                r => return r,
            }
        }
        Err(last)
    }

    fn start_once(exe: &Path, model: &str, fsync: bool, dir: &Path) -> Result<DdpCluster, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let addrs = (0..NODES).map(|_| free_addr()).collect::<Result<Vec<_>, _>>()?;
        let peers = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
        let mut c = DdpCluster { model: model.into(), addrs, secret: new_secret(), dir: dir.to_path_buf(), nodes: Vec::new() };
        for i in 0..NODES {
            let log = std::fs::File::create(dir.join(format!("node{i}.log"))).map_err(|e| e.to_string())?;
            let mut cmd = Command::new(exe);
            cmd.args(["node", "--system", "ddp", "--model", model, "--id", &i.to_string(), "--peers", &peers]);
            cmd.arg("--nvm").arg(dir.join(format!("node{i}.nvm"))).args(["--secret", &format!("{:x}", c.secret)]);
            if fsync {
                cmd.arg("--fsync");
            }
            let child = cmd.stdout(Stdio::null()).stderr(log).spawn().map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
            c.nodes.push(child);
        }
        c.wait_serving()?;
        Ok(c)
    }

    fn load_config(&self, sessions: u64, first_session: u64, records: u64, read_ratio: f64, seed: u64) -> LoadConfig {
        LoadConfig { nodes: self.addrs.clone(), secret: self.secret, sessions, first_session, keys: records, read_ratio, seed, timeout: Duration::from_secs(2) }
    }

    fn node_logs(&self) -> String {
        (0..NODES).map(|i| std::fs::read_to_string(self.dir.join(format!("node{i}.log"))).unwrap_or_default()).collect::<Vec<_>>().join("")
    }

    fn wait_serving(&mut self) -> Result<(), String> {
        let load = Load::start(&self.load_config(1, 1 << 20, 1, 1.0, 0), Instant::now());
        let until = Instant::now() + START_LIMIT;
        while load.completed.load(Ordering::Relaxed) == 0 {
            if let Some(i) = self.nodes.iter_mut().position(|c| matches!(c.try_wait(), Ok(Some(_)))) {
                load.stop();
                return Err(format!("tandem node {i} ({}) exited at start-up:\n{}", self.model, self.node_logs()));
            }
            if Instant::now() > until {
                load.stop();
                return Err(format!("the {} cluster served nothing within {START_LIMIT:?}:\n{}", self.model, self.node_logs()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        load.stop();
        Ok(())
    }

    /// Write records until five writes per record were made (uniform keys:
    /// about 99 % of them written), as the peers are loaded before they are
    /// measured; the rest read as absent and are counted. Sessions `clients..2*clients`:
    /// write values carry the session id, so they stay unique in the history.
    fn preload(&self, clients: u64, records: u64, seed: u64, epoch: Instant) -> Vec<HistOp> {
        let load = Load::start(&self.load_config(clients, clients, records, 0.0, seed ^ 0x5eed), epoch);
        let until = Instant::now() + PRELOAD_LIMIT;
        while load.completed.load(Ordering::Relaxed) < 5 * records && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        load.stop()
    }

    /// Preload, then `clients` sessions for a warm-up and a measured interval.
    pub fn run(&self, spec: &RunSpec) -> TandemRun {
        let RunSpec { clients, records, duration, progress, .. } = *spec;
        let epoch = Instant::now();
        let mut history = self.preload(clients, records, spec.seed, epoch);
        let load = Load::start(&self.load_config(clients, 0, records, spec.read_ratio, spec.seed), epoch);
        std::thread::sleep(spec.warmup);
        let t0 = epoch.elapsed();
        let mut last = (t0, load.completed.load(Ordering::Relaxed));
        while epoch.elapsed() - t0 < duration {
            std::thread::sleep((duration - (epoch.elapsed() - t0)).min(Duration::from_secs(1)));
            let (now, d) = (epoch.elapsed(), load.completed.load(Ordering::Relaxed));
            if progress {
                let rate = (d - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-9);
                eprintln!("  [{:>4.1}s] tandem {:<17} {:>9} ops  {rate:>9.0} ops/s", (now - t0).as_secs_f64(), self.model, d);
            }
            last = (now, d);
        }
        let t1 = epoch.elapsed();
        let ops = load.stop();
        let mut run = tally(&ops, t0.as_nanos() as u64, t1.as_nanos() as u64);
        run.elapsed_s = (t1 - t0).as_secs_f64();
        history.extend(ops);
        run.history = history;
        run
    }
}

/// Counts and latencies of the operations completed within `[t0, t1]` ns.
fn tally(ops: &[HistOp], t0: u64, t1: u64) -> TandemRun {
    let mut run = TandemRun { counts: Counts::default(), elapsed_s: 0.0, hist: new_hist(), failed: 0, history: Vec::new() };
    for o in ops {
        let Some(done) = o.complete_ns else {
            run.failed += u64::from(o.invoke_ns <= t1);
            continue;
        };
        if done < t0 || done > t1 {
            continue;
        }
        if !o.ok {
            run.failed += 1;
            continue;
        }
        let _ = run.hist.record(((done - o.invoke_ns) / 1000).max(1));
        match o.kind {
            OpKind::Read { value, .. } => (run.counts.reads, run.counts.missing) = (run.counts.reads + 1, run.counts.missing + u64::from(value.is_none())),
            _ => run.counts.writes += 1,
        }
    }
    run
}
