//! The memory side of a benchmark: in-process memory nodes (inline fabric) or
//! memory-server processes reached over TCP.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_fabric::auth::MasterSecret;
use tandem_fabric::inline::{InlineCluster, InlineFabric};
use tandem_fabric::tcp::{TcpCluster, TcpFabric};
use tandem_fabric::{ComputeNodeId, MemoryNode};

/// Where the memory nodes are.
#[derive(Clone)]
pub enum Backend {
    Inline(InlineCluster),
    Tcp(TcpCluster),
}

/// A compute thread's fabric handle, whichever the backend.
pub enum AnyFabric {
    Inline(InlineFabric),
    Tcp(TcpFabric),
}

impl Backend {
    pub fn inline(memory_nodes: usize, region_bytes: u64, _seed: u64) -> Backend {
        let nodes = (0..memory_nodes)
            .map(|_| Arc::new(MemoryNode::new(region_bytes)))
            .collect();
        Backend::Inline(InlineCluster::new(nodes))
    }

    /// In-process memory nodes whose batches yield once, so coordinators
    /// interleave at verb boundaries and a crash can cut a transaction.
    pub fn inline_yielding(memory_nodes: usize, region_bytes: u64, seed: u64) -> Backend {
        match Self::inline(memory_nodes, region_bytes, seed) {
            Backend::Inline(c) => Backend::Inline(c.yielding(true)),
            tcp => tcp,
        }
    }

    /// The same memory nodes, joined through data connections the memory
    /// servers serve first (the membership's: recovery must not queue behind
    /// the survivors' verbs).
    pub fn prioritised(&self) -> Backend {
        match self {
            Backend::Tcp(c) => Backend::Tcp(c.clone().prioritised()),
            inline => inline.clone(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Inline(_) => "sim",
            Backend::Tcp(c) if c.shm == Some(true) => "shm",
            Backend::Tcp(_) => "tcp",
        }
    }

    /// Active-link termination of `compute` on every memory node; returns once
    /// every memory node acknowledged (Pandora paper §3.2.2 step 2, Cor1).
    pub async fn revoke(&self, compute: ComputeNodeId) -> std::io::Result<()> {
        match self {
            Backend::Inline(c) => {
                c.revoke(compute);
                Ok(())
            }
            Backend::Tcp(c) => c.revoke(compute).await,
        }
    }

    /// Join as compute node `compute` (registering it) from the calling thread.
    /// Over TCP this must run inside a tokio `LocalSet`.
    pub async fn join(&self, compute: ComputeNodeId) -> std::io::Result<AnyFabric> {
        match self {
            Backend::Inline(c) => {
                Ok(AnyFabric::Inline(c.join(compute).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::PermissionDenied, e)
                })?))
            }
            Backend::Tcp(c) => {
                let keys = c.register(compute).await?;
                Ok(AnyFabric::Tcp(c.connect(compute, &keys).await?))
            }
        }
    }
}

/// Memory servers started as child processes; killed on drop.
pub struct MemoryServers {
    children: Vec<Child>,
    pub addrs: Vec<SocketAddr>,
    pub secret: MasterSecret,
    /// The servers keep their regions in memfds (`memory-server --shm`).
    pub shm: bool,
    /// The servers run a pinned poller per CPU (`memory-server --pollers cpus`).
    pub pinned: bool,
}

impl MemoryServers {
    /// Start `count` `tandem pandora memory-server` processes on loopback ports chosen
    /// by the OS, each with `mem_bytes` of memory, sharing a master secret.
    pub fn spawn(
        exe: &Path,
        count: usize,
        mem_bytes: u64,
        secret: MasterSecret,
    ) -> std::io::Result<MemoryServers> {
        Self::spawn_on(exe, count, mem_bytes, secret, false)
    }

    /// [`MemoryServers::spawn`], with shared regions if `shm` (the shm
    /// fabric: [`MemoryServers::cluster`] then maps them).
    pub fn spawn_on(
        exe: &Path,
        count: usize,
        mem_bytes: u64,
        secret: MasterSecret,
        shm: bool,
    ) -> std::io::Result<MemoryServers> {
        Self::start(exe, count, mem_bytes, secret, (shm, false))
    }

    /// [`MemoryServers::spawn_on`] for a machine the caller has to itself
    /// (benchmarks): each server runs a pinned poller per CPU (`memory-server
    /// --pollers cpus`), which steers each connection to its client's CPU.
    pub fn spawn_pinned(
        exe: &Path,
        count: usize,
        mem_bytes: u64,
        secret: MasterSecret,
        shm: bool,
    ) -> std::io::Result<MemoryServers> {
        Self::start(exe, count, mem_bytes, secret, (shm, true))
    }

    fn start(
        exe: &Path,
        count: usize,
        mem_bytes: u64,
        secret: MasterSecret,
        (shm, pinned): (bool, bool),
    ) -> std::io::Result<MemoryServers> {
        let mut servers = MemoryServers {
            children: Vec::new(),
            addrs: Vec::new(),
            secret,
            shm,
            pinned,
        };
        for _ in 0..count {
            let (child, addr) =
                spawn_memory_server(exe, mem_bytes, &servers.secret, &servers.flags())?;
            servers.children.push(child);
            servers.addrs.push(addr);
        }
        Ok(servers)
    }

    /// Compute threads' handle: data connections over TCP, or the mapped
    /// regions of shm servers.
    pub fn cluster(&self) -> TcpCluster {
        TcpCluster::new(self.addrs.clone(), self.secret.keyring()).shm(self.shm)
    }

    fn flags(&self) -> Vec<&'static str> {
        let shm = self.shm.then_some("--shm");
        let pinned = self.pinned.then_some(["--pollers", "cpus"]);
        shm.into_iter()
            .chain(pinned.into_iter().flatten())
            .collect()
    }

    /// Start a replacement for memory server `i` (killed, and declared failed
    /// by the membership service at `membership`): it announces itself there
    /// (`memory-server --replaces i`), is filled and admitted. `addrs[i]` is
    /// its address from now on.
    pub fn replace(
        &mut self,
        exe: &Path,
        i: usize,
        mem_bytes: u64,
        membership: SocketAddr,
    ) -> std::io::Result<SocketAddr> {
        let (n, m) = (i.to_string(), membership.to_string());
        let mut args = vec!["--replaces", n.as_str(), "--membership", m.as_str()];
        args.extend(self.flags());
        let (child, addr) = spawn_memory_server(exe, mem_bytes, &self.secret, &args)?;
        let mut old = std::mem::replace(&mut self.children[i], child);
        let _ = old.kill();
        let _ = old.wait();
        self.addrs[i] = addr;
        Ok(addr)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    /// `kill -9` memory server `i` and reap it: a real memory-node failure
    /// (its clients' connections break and their verbs complete with
    /// `Unavailable`). The others keep running until drop.
    pub fn kill(&mut self, i: usize) -> std::io::Result<()> {
        let n = self.children.len();
        let child = self.children.get_mut(i).ok_or_else(|| {
            std::io::Error::other(format!("no memory server {i} (there are {n})"))
        })?;
        child.kill()?;
        child.wait().map(|_| ())
    }
}

/// One `tandem pandora memory-server` process on a loopback port the OS picks, with
/// `extra` arguments; its address once it accepts connections.
fn spawn_memory_server(
    exe: &Path,
    mem_bytes: u64,
    secret: &MasterSecret,
    extra: &[&str],
) -> std::io::Result<(Child, SocketAddr)> {
    let mut child = Command::new(exe)
        .args([
            "pandora",
            "memory-server",
            "--listen",
            "127.0.0.1:0",
            "--mem",
            &mem_bytes.to_string(),
        ])
        .args(extra)
        .env("TANDEM_SECRET", secret.hex())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped stdout");
    // The server prints "listening on ADDR" once it accepts connections.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut line = String::new();
    let mut reader = BufReader::new(stdout);
    let addr = loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || Instant::now() > deadline {
            let _ = child.kill();
            return Err(std::io::Error::other(
                "memory server exited before announcing its address",
            ));
        }
        if let Some(rest) = line.trim().strip_prefix("listening on ") {
            break rest.parse::<SocketAddr>().map_err(std::io::Error::other)?;
        }
    };
    // Keep draining its stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in reader.lines() {});
    Ok((child, addr))
}

impl Drop for MemoryServers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
