//! A DDP cluster for the nemesis: five `tandem node` processes and their
//! configuration manager, each on an address of its own inside the run's
//! network namespace (node i on 127.0.0.(i+2), the manager on 127.0.0.7;
//! the load dials from 127.0.0.1), so that rules can cut any of them off.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tandem_auth::MasterSecret;
use tandem_nemesis::addr_of;
use tandem_nemesis::drive::Target;
use tandem_nemesis::schedule::Shape;

/// Five nodes and a manager; a killed node restarts from its NVM file.
pub const SHAPE: Shape = Shape {
    nodes: 5,
    manager: true,
    restarts: true,
};
const NODES: usize = SHAPE.nodes;

const NODE_PORT: u16 = 7100;
const MANAGER_PORT: u16 = 7000;
/// The manager's lease (and the nodes'), ms.
pub const LEASE_MS: u64 = 200;

pub struct Procs {
    exe: PathBuf,
    pub dir: PathBuf,
    pub model: String,
    pub secret: MasterSecret,
    pub peers: Vec<SocketAddr>,
    pub manager: SocketAddr,
    /// Planted bugs every node gets (`--inject-bug`).
    bugs: Vec<String>,
    nodes: Vec<Option<Child>>,
    manager_proc: Option<Child>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.nodes.iter_mut().chain([&mut self.manager_proc]) {
            if let Some(mut c) = c.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn manager_ip() -> Ipv4Addr {
    tandem_nemesis::drive::manager_ip(SHAPE)
}

impl Procs {
    /// Node flags beyond the cluster's own: planted bugs (`--inject-bug`)
    /// and the recovery (`--recovery heal`), as the command line gives them.
    pub fn start(exe: &Path, model: &str, dir: &Path, bugs: &[String]) -> Result<Procs, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut p = Procs {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            model: model.into(),
            secret: MasterSecret::generate(),
            peers: (0..NODES)
                .map(|i| SocketAddr::from((addr_of(i), NODE_PORT)))
                .collect(),
            manager: SocketAddr::from((manager_ip(), MANAGER_PORT)),
            bugs: bugs.to_vec(),
            nodes: (0..NODES).map(|_| None).collect(),
            manager_proc: None,
        };
        p.manager_proc = Some(p.spawn_manager()?);
        for i in 0..NODES {
            p.start_node(i)?;
        }
        Ok(p)
    }

    fn log(&self, name: &str) -> Result<std::fs::File, String> {
        tandem_nemesis::log_file(&self.dir, name)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.env("TANDEM_SECRET", self.secret.hex())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    fn spawn_manager(&self) -> Result<Child, String> {
        let state = self.dir.join("manager.state");
        self.command()
            .args(["ddp", "manager", "--listen", &self.manager.to_string()])
            .args(["--lease-ms", &LEASE_MS.to_string(), "--state"])
            .arg(state)
            .stderr(self.log("manager")?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))
    }

    /// Start node `i` (again: it recovers from its NVM file).
    pub fn start_node(&mut self, i: usize) -> Result<(), String> {
        let peers: Vec<String> = self.peers.iter().map(|p| p.to_string()).collect();
        let mut cmd = self.command();
        cmd.args(["node", "--model", &self.model, "--id", &i.to_string()])
            .args(["--peers", &peers.join(","), "--manager"])
            .arg(self.manager.to_string())
            .arg("--nvm")
            .arg(self.dir.join(format!("node{i}.nvm")))
            .args(["--nvm-size", "16M", "--lease-ms", &LEASE_MS.to_string()]);
        for b in &self.bugs {
            match b.strip_prefix("recovery=") {
                Some(r) => cmd.args(["--recovery", r]),
                None => cmd.args(["--inject-bug", b]),
            };
        }
        let child = cmd
            .stderr(self.log(&format!("node{i}"))?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        self.nodes[i] = Some(child);
        Ok(())
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].is_some()
    }

    /// `SIGSTOP` (`stop` true) or `SIGCONT` node `i`.
    pub fn signal(&self, i: usize, stop: bool) {
        if let Some(c) = &self.nodes[i] {
            let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    /// A node process that exited by itself (not one we killed).
    pub fn exited(&mut self) -> Option<usize> {
        self.nodes.iter_mut().position(|c| {
            c.as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
        })
    }

    pub fn manager_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default()
    }

    /// The manager's latest configuration line.
    pub fn last_configuration(&self) -> String {
        let log = self.manager_log();
        let last = log.lines().rfind(|l| l.contains("members ["));
        last.unwrap_or("none yet")
            .trim_start_matches("manager: ")
            .to_string()
    }

    /// Whether the manager's latest configuration has every node.
    pub fn all_members(&self) -> bool {
        let log = self.manager_log();
        let last = log.lines().rfind(|l| l.contains("members ["));
        last.is_some_and(|l| l.ends_with("members [0, 1, 2, 3, 4]"))
    }

    /// Wait up to `limit` for every node to be a member again.
    pub fn wait_all_members(&self, limit: Duration) -> Result<Duration, String> {
        let t = std::time::Instant::now();
        while !self.all_members() {
            if t.elapsed() > limit {
                let last = self.manager_log().lines().last().unwrap_or("").to_string();
                return Err(format!(
                    "not every node rejoined within {limit:?} (manager: {last})"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(t.elapsed())
    }
}

impl Target for Procs {
    fn shape(&self) -> Shape {
        SHAPE
    }
    fn signal(&mut self, n: usize, stop: bool) {
        Procs::signal(self, n, stop)
    }
    fn kill(&mut self, n: usize) {
        Procs::kill(self, n)
    }
    fn restart(&mut self, n: usize) -> Result<(), String> {
        self.start_node(n)
    }
    fn down(&self) -> Vec<usize> {
        (0..NODES).filter(|&n| !self.is_running(n)).collect()
    }
    fn exited(&mut self) -> Option<usize> {
        Procs::exited(self)
    }
    fn whole(&mut self) -> bool {
        self.all_members()
    }
    fn configuration(&self) -> String {
        self.last_configuration()
    }
}
