//! DDP clusters of real processes for benchmarks and comparisons: five
//! `tandem node` processes (static membership, every key on all five, an
//! NVM file each, optionally `--fsync`) on loopback, their CPU time and
//! their own counters (`Hello::Stats`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tandem_auth::MasterSecret;

use crate::load::{Load, LoadConfig};
use tandem_ddp::ycsb_session::SessionPlan;
use tandem_net::wire::NodeStats;

pub const NODES: usize = 5;
/// How long the cluster may take to serve its first operation.
const START_LIMIT: Duration = Duration::from_secs(30);

/// The five node processes; dropping it kills them.
pub struct DdpCluster {
    pub model: String,
    pub addrs: Vec<SocketAddr>,
    secret: MasterSecret,
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

/// A loopback port free right now.
pub(crate) fn free_addr() -> Result<SocketAddr, String> {
    tandem_net::ports::reserve_loopback().map_err(|e| format!("no free loopback port: {e}"))
}

fn new_secret() -> MasterSecret {
    MasterSecret::generate()
}

impl DdpCluster {
    /// The node processes' ids.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().map(Child::id).collect()
    }

    /// Start five nodes of `model` with NVM files under `dir` (emptied first).
    /// A port taken between choosing it and binding it fails a node at
    /// start-up: then the cluster is started again on new ports (3 attempts).
    pub fn start(exe: &Path, model: &str, fsync: bool, dir: &Path) -> Result<DdpCluster, String> {
        Self::start_system(exe, "ddp", model, fsync, dir)
    }

    /// As [`DdpCluster::start`], with `tandem node --system SYSTEM` (`ddp`,
    /// or `ddp-echo`: [`crate::echo`], loaded as `model` is).
    pub fn start_system(
        exe: &Path,
        system: &str,
        model: &str,
        fsync: bool,
        dir: &Path,
    ) -> Result<DdpCluster, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_once(exe, system, model, fsync, dir) {
                Err(e) if e.contains("cannot listen") => last = e,
                r => return r,
            }
        }
        Err(last)
    }

    fn start_once(
        exe: &Path,
        system: &str,
        model: &str,
        fsync: bool,
        dir: &Path,
    ) -> Result<DdpCluster, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let addrs = (0..NODES)
            .map(|_| free_addr())
            .collect::<Result<Vec<_>, _>>()?;
        let peers = addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut c = DdpCluster {
            model: model.into(),
            addrs,
            secret: new_secret(),
            dir: dir.to_path_buf(),
            nodes: Vec::new(),
        };
        for i in 0..NODES {
            let log = std::fs::File::create(dir.join(format!("node{i}.log")))
                .map_err(|e| e.to_string())?;
            let mut cmd = Command::new(exe);
            cmd.args([
                "node",
                "--system",
                system,
                "--model",
                model,
                "--id",
                &i.to_string(),
                "--peers",
                &peers,
            ]);
            cmd.arg("--nvm")
                .arg(dir.join(format!("node{i}.nvm")))
                .env("TANDEM_SECRET", c.secret.hex());
            if fsync {
                cmd.arg("--fsync");
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
            c.nodes.push(child);
        }
        c.wait_serving()?;
        Ok(c)
    }

    pub fn load_config(
        &self,
        sessions: u64,
        first_session: u64,
        plan: SessionPlan,
        seed: u64,
    ) -> LoadConfig {
        LoadConfig {
            nodes: self.addrs.clone(),
            keys: self.secret.keyring(),
            sessions,
            first_session,
            plan,
            seed,
            timeout: Duration::from_secs(2),
        }
    }

    fn node_logs(&self) -> String {
        (0..NODES)
            .map(|i| {
                std::fs::read_to_string(self.dir.join(format!("node{i}.log"))).unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("")
    }

    fn wait_serving(&mut self) -> Result<(), String> {
        // One reading session, in transactions under Transactional consistency.
        let model = tandem_ddp::Model::parse(&self.model)?;
        let reads = tandem_ycsb::Ycsb::new("ycsb-c", 1, true)?;
        let load = Load::start(
            &self.load_config(1, 1 << 20, SessionPlan::paper(reads, model), 0),
            Instant::now(),
        );
        let until = Instant::now() + START_LIMIT;
        while load.completed.load(Ordering::Relaxed) == 0 {
            if let Some(i) = self
                .nodes
                .iter_mut()
                .position(|c| matches!(c.try_wait(), Ok(Some(_))))
            {
                load.stop();
                return Err(format!(
                    "tandem node {i} ({}) exited at start-up:\n{}",
                    self.model,
                    self.node_logs()
                ));
            }
            if Instant::now() > until {
                load.stop();
                return Err(format!(
                    "the {} cluster served nothing within {START_LIMIT:?}:\n{}",
                    self.model,
                    self.node_logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        load.stop();
        Ok(())
    }

    /// The sum of every node's counters so far.
    pub fn stats(&self) -> Result<NodeStats, String> {
        let mut t = NodeStats::default();
        for a in &self.addrs {
            let s =
                tandem_net::client::node_stats(*a, &self.secret.keyring(), Duration::from_secs(2))
                    .map_err(|e| format!("stats of node at {a}: {e}"))?;
            t += s;
        }
        Ok(t)
    }

    /// CPU seconds (user + system) the node processes have used so far.
    pub fn cpu_seconds(&self) -> f64 {
        self.nodes.iter().map(|c| cpu_seconds(c.id())).sum()
    }
}

pub use tandem_net::procstat::cpu_seconds;
