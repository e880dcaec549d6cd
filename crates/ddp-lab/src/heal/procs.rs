//! A HEAL deployment of real processes: a configuration manager and five
//! `tandem node --recovery heal` processes on loopback, each with its NVM
//! file; a node can be `kill -9`ed and restarted from its file. Used by
//! `tandem demo heal`.

use std::net::SocketAddr;
use tandem_auth::MasterSecret;

use crate::procs::free_addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::load::LoadConfig;
use tandem_ddp::ycsb_session::SessionPlan;

pub const NODES: usize = 5;

pub struct HealCluster {
    pub model: String,
    pub addrs: Vec<SocketAddr>,
    exe: PathBuf,
    manager: SocketAddr,
    secret: MasterSecret,
    pub dir: PathBuf,
    nodes: Vec<Option<Child>>,
    manager_proc: Child,
    /// Nodes run with `--fsync`: a persist is on the device before it counts.
    fsync: bool,
}

impl Drop for HealCluster {
    fn drop(&mut self) {
        for c in self
            .nodes
            .iter_mut()
            .flatten()
            .chain(std::iter::once(&mut self.manager_proc))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl HealCluster {
    /// The processes' ids: the manager's, then the running nodes'.
    pub fn pids(&self) -> Vec<u32> {
        let nodes = self.nodes.iter().flatten().map(Child::id);
        std::iter::once(self.manager_proc.id())
            .chain(nodes)
            .collect()
    }

    /// Start the manager and five nodes of `model` (NVM files under `dir`, emptied first).
    pub fn start(exe: &Path, model: &str, dir: &Path) -> Result<HealCluster, String> {
        Self::start_with(exe, model, dir, false)
    }

    /// [`HealCluster::start`], with every node's persists flushed to the
    /// device (`tandem node --fsync`) if `fsync`.
    pub fn start_with(
        exe: &Path,
        model: &str,
        dir: &Path,
        fsync: bool,
    ) -> Result<HealCluster, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let secret = MasterSecret::generate();
        let manager = free_addr()?;
        let log = std::fs::File::create(dir.join("manager.log")).map_err(|e| e.to_string())?;
        let manager_proc = Command::new(exe)
            .args([
                "ddp",
                "manager",
                "--listen",
                &manager.to_string(),
                "--nodes",
                &NODES.to_string(),
                "--state",
                &dir.join("manager.state").display().to_string(),
            ])
            .env("TANDEM_SECRET", secret.hex())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let addrs = (0..NODES)
            .map(|_| free_addr())
            .collect::<Result<Vec<_>, _>>()?;
        let mut c = HealCluster {
            model: model.into(),
            addrs,
            exe: exe.into(),
            manager,
            secret,
            dir: dir.into(),
            nodes: (0..NODES).map(|_| None).collect(),
            manager_proc,
            fsync,
        };
        for i in 0..NODES {
            c.start_node(i)?;
        }
        Ok(c)
    }

    /// Start (or restart, from its NVM file) node `i`.
    pub fn start_node(&mut self, i: usize) -> Result<(), String> {
        let peers = self
            .addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .map_err(|e| e.to_string())?;
        let child = Command::new(&self.exe)
            .args([
                "node",
                "--model",
                &self.model,
                "--id",
                &i.to_string(),
                "--peers",
                &peers,
                "--manager",
                &self.manager.to_string(),
                "--recovery",
                "heal",
            ])
            .arg("--nvm")
            .arg(self.dir.join(format!("node{i}.nvm")))
            .env("TANDEM_SECRET", self.secret.hex())
            .args(self.fsync.then_some("--fsync"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start node {i}: {e}"))?;
        self.nodes[i] = Some(child);
        Ok(())
    }

    /// What the operating system says of node `i`'s process: its state
    /// letter and CPU seconds from /proc, or that it is not running.
    pub fn node_status(&mut self, i: usize) -> String {
        let Some(c) = self.nodes[i].as_mut() else {
            return "not started".into();
        };
        if let Ok(Some(status)) = c.try_wait() {
            return format!("exited ({status})");
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", c.id())).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|r| r.1.split_whitespace().next())
            .unwrap_or("?");
        format!(
            "pid {} running (state {state}, {:.2} s of CPU)",
            c.id(),
            tandem_net::procstat::cpu_seconds(c.id())
        )
    }

    /// `kill -9` node `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{i}.log"))
    }

    pub fn node_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
    }

    pub fn manager_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default()
    }

    /// The cluster's keys (clients and `node_stats` need them).
    pub fn keys(&self) -> tandem_auth::Keyring {
        self.secret.keyring()
    }

    pub fn load_config(&self, sessions: u64, plan: SessionPlan, seed: u64) -> LoadConfig {
        LoadConfig {
            nodes: self.addrs.clone(),
            keys: self.secret.keyring(),
            sessions,
            first_session: 0,
            plan,
            seed,
            timeout: Duration::from_secs(2),
        }
    }

    /// Wait until `f` holds, at most `limit`.
    pub fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&Self) -> bool,
    ) -> Result<(), String> {
        let until = Instant::now() + limit;
        while !f(self) {
            if Instant::now() > until {
                return Err(format!(
                    "timed out waiting for {what} (logs in {})",
                    self.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}
