//! Pandora as processes for the nemesis: three `compute-server`s, three
//! `memory-server`s and the membership, each on an address of its own
//! inside the run's network namespace, and dialling from it
//! (`TANDEM_DIAL_FROM`): compute server i on 127.0.0.(i+2), memory server
//! j on 127.0.0.(j+5), the membership on 127.0.0.8.
//!
//! Fault targets are numbered as [`SHAPE`] has them: nodes 0..3 are the
//! compute servers, 3..6 the memory servers. A killed compute server comes
//! back as a new process with a fresh node id and a ledger of its own; a
//! memory server that was killed, or that the membership declared failed
//! (isolated, paused), is replaced (`memory-server --replaces j`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tandem_cluster::procs;
use tandem_fabric::auth::MasterSecret;
use tandem_fabric::tcp::TcpCluster;
use tandem_nemesis::addr_of;
use tandem_nemesis::drive::Target;
use tandem_nemesis::schedule::Shape;

/// Compute servers, then memory servers; the membership is the manager.
pub const COMPUTE: usize = 3;
pub const MEMORY: usize = 3;
pub const SHAPE: Shape = Shape {
    nodes: COMPUTE + MEMORY,
    manager: true,
    restarts: true,
};
/// Copies of every partition (one memory server may fail at a time).
pub const REPLICAS: u16 = 2;
/// Keys of the micro store: few, so coordinators meet on keys (a lock a
/// failed coordinator left is soon found by a live one).
pub const KEYS: u64 = 200;
/// Coordinators per compute server.
const COORDINATORS: u16 = 8;
/// The membership's heartbeat and memory-probe timeouts (its defaults).
pub const TIMEOUT_MS: u64 = 250;
pub const MEMORY_TIMEOUT_MS: u64 = 500;
const MEMBERSHIP_PORT: u16 = 7300;
const MEMORY_PORT: u16 = 7400;

/// The membership's address.
pub fn membership_ip() -> Ipv4Addr {
    tandem_nemesis::drive::manager_ip(SHAPE)
}

/// A process killed and reaped when dropped.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One compute-server slot: its process (if running) and every ledger a
/// process of it wrote.
struct ComputeSlot {
    kid: Option<Kid>,
    ledgers: Vec<PathBuf>,
}

pub struct Procs {
    exe: PathBuf,
    pub dir: PathBuf,
    pub secret: MasterSecret,
    /// The memory servers' current addresses (a replacement takes a new port).
    pub memory: Vec<SocketAddr>,
    memory_kids: Vec<Option<Kid>>,
    /// Memory servers started as replacements and not yet admitted, and
    /// whether the membership has had them down since.
    replacing: BTreeMap<usize, bool>,
    compute: Vec<ComputeSlot>,
    membership: Option<Kid>,
    /// Compute node ids handed out so far (a restarted slot takes the next).
    next_node: u16,
    pub watch: Arc<LedgerWatch>,
    /// Each memory server's memory: the largest region of the layout.
    mem_bytes: u64,
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.watch.stop.store(true, Ordering::Relaxed);
    }
}

impl Procs {
    /// Start the memory servers, the membership (it loads the store) and the
    /// compute servers; `bugs` go to the membership (`--inject-bug`).
    pub fn start(
        exe: &Path,
        dir: &Path,
        bugs: &[String],
        store: &tandem_dkvs::StoreConfig,
    ) -> Result<Procs, String> {
        let layout = tandem_dkvs::Layout::new(store)?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut p = Procs {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            secret: MasterSecret::generate(),
            memory: Vec::new(),
            memory_kids: Vec::new(),
            replacing: BTreeMap::new(),
            compute: Vec::new(),
            membership: None,
            next_node: 1,
            watch: LedgerWatch::start(COMPUTE),
            mem_bytes: *layout.region_bytes.iter().max().expect("memory nodes"),
        };
        for j in 0..MEMORY {
            let (kid, addr) = p.spawn_memory(j, None)?;
            p.memory_kids.push(Some(kid));
            p.memory.push(addr);
        }
        p.membership = Some(p.spawn_membership(bugs)?);
        for _ in 0..COMPUTE {
            p.compute.push(ComputeSlot {
                kid: None,
                ledgers: Vec::new(),
            });
        }
        for i in 0..COMPUTE {
            p.start_compute(i)?;
        }
        Ok(p)
    }

    fn log(&self, name: &str) -> Result<std::fs::File, String> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("{name}.log: {e}"))
    }

    fn command(&self, from: Ipv4Addr) -> Command {
        let mut c = Command::new(&self.exe);
        c.env("TANDEM_SECRET", self.secret.hex())
            .env(tandem_fabric::auth::dial::DIAL_FROM_ENV, from.to_string())
            .stdin(Stdio::null());
        c
    }

    /// The flags every role shares: they compute the same layout from them.
    fn cluster_flags(&self) -> Vec<String> {
        let memory: Vec<String> = self.memory.iter().map(|a| a.to_string()).collect();
        vec![
            "--memory".into(),
            memory.join(","),
            "--keys".into(),
            KEYS.to_string(),
            "--replicas".into(),
            REPLICAS.to_string(),
        ]
    }

    /// Memory server `j` (a replacement if `membership` is given); its
    /// process and the address it announced.
    fn spawn_memory(
        &self,
        j: usize,
        membership: Option<SocketAddr>,
    ) -> Result<(Kid, SocketAddr), String> {
        let ip = addr_of(COMPUTE + j);
        let port = if membership.is_some() { 0 } else { MEMORY_PORT };
        let mut c = self.command(ip);
        c.args(["pandora", "memory-server", "--listen"])
            .arg(SocketAddr::from((ip, port)).to_string())
            .args(["--mem", &self.mem_bytes.to_string()]);
        if let Some(m) = membership {
            c.args(["--replaces", &j.to_string(), "--membership", &m.to_string()]);
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(self.log(&format!("memory{j}"))?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        let out = child.stdout.take().expect("piped");
        let kid = Kid(child);
        let addr = announced(out, &format!("memory server {j}"))?;
        Ok((kid, addr))
    }

    pub fn membership_addr() -> SocketAddr {
        SocketAddr::from((membership_ip(), MEMBERSHIP_PORT))
    }

    fn spawn_membership(&self, bugs: &[String]) -> Result<Kid, String> {
        let mut c = self.command(membership_ip());
        c.args(["pandora", "membership", "--listen"])
            .arg(Self::membership_addr().to_string())
            .args(self.cluster_flags())
            .args(["--load", "--timeout-ms", &TIMEOUT_MS.to_string()])
            .args(["--memory-timeout-ms", &MEMORY_TIMEOUT_MS.to_string()]);
        for b in bugs {
            c.args(["--inject-bug", b]);
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(self.log("membership")?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        let out = child.stdout.take().expect("piped");
        let kid = Kid(child);
        announced(out, "the membership")?;
        Ok(kid)
    }

    /// Start compute slot `i` (again: a new process, a fresh node id, a
    /// ledger of its own).
    pub fn start_compute(&mut self, i: usize) -> Result<(), String> {
        let node = self.next_node;
        self.next_node += 1;
        let ledger = self.dir.join(format!("compute-{node}.ledger"));
        let mut c = self.command(addr_of(i));
        c.args(["pandora", "compute-server", "--membership"])
            .arg(Self::membership_addr().to_string())
            .args(self.cluster_flags())
            .args(["--node", &node.to_string()])
            .args(["--coordinators", &COORDINATORS.to_string()])
            .args(["--duration", "86400", "--seed", &node.to_string()])
            .arg("--ledger")
            .arg(&ledger);
        let child = c
            .stdout(Stdio::null())
            .stderr(self.log(&format!("compute-{node}"))?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        self.compute[i].kid = Some(Kid(child));
        self.compute[i].ledgers.push(ledger.clone());
        self.watch.set_ledger(i, ledger);
        Ok(())
    }

    /// Every ledger any compute process wrote.
    pub fn ledgers(&self) -> Vec<PathBuf> {
        self.compute
            .iter()
            .flat_map(|c| c.ledgers.clone())
            .collect()
    }

    /// `kill -9` every compute server (the run's end).
    pub fn kill_compute(&mut self) {
        for c in &mut self.compute {
            c.kid = None;
        }
    }

    pub fn membership_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("membership.log")).unwrap_or_default()
    }

    /// The memory nodes the membership's latest configuration has down.
    fn memory_down(&self) -> BTreeSet<usize> {
        let log = self.membership_log();
        let Some(l) = log.lines().rfind(|l| is_memory_configuration(l)) else {
            return BTreeSet::new();
        };
        let Some(rest) = l.split("memory nodes {").nth(1) else {
            return BTreeSet::new();
        };
        let list = rest.split('}').next().unwrap_or("");
        list.split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect()
    }

    /// Replace every memory server the membership declared down for which
    /// no replacement runs yet; forget replacements that were admitted.
    fn replace_declared(&mut self) -> Result<BTreeSet<usize>, String> {
        let down = self.memory_down();
        for (j, seen) in self.replacing.iter_mut() {
            *seen |= down.contains(j);
        }
        self.replacing.retain(|j, seen| !*seen || down.contains(j));
        for &j in &down {
            if !self.replacing.contains_key(&j) {
                self.replace_memory(j)?;
            }
        }
        Ok(down)
    }

    /// Kill memory server `j` if it still runs, and start its replacement.
    fn replace_memory(&mut self, j: usize) -> Result<(), String> {
        self.memory_kids[j] = None;
        let (kid, addr) = self.spawn_memory(j, Some(Self::membership_addr()))?;
        self.memory_kids[j] = Some(kid);
        self.memory[j] = addr;
        self.replacing.insert(j, false);
        Ok(())
    }

    pub fn cluster(&self) -> TcpCluster {
        TcpCluster::new(self.memory.clone(), self.secret.keyring())
    }

    fn kid(&mut self, n: usize) -> &mut Option<Kid> {
        match n < COMPUTE {
            true => &mut self.compute[n].kid,
            false => &mut self.memory_kids[n - COMPUTE],
        }
    }
}

/// A line of the membership's log that announces a memory configuration
/// (not one that says a configuration was applied).
fn is_memory_configuration(l: &str) -> bool {
    l.contains("memory configuration")
        && (l.contains(": memory nodes {") || l.contains("every memory node up"))
}

/// The address a process printed as "listening on ADDR" on stdout; its
/// stdout is drained afterwards.
fn announced(out: std::process::ChildStdout, who: &str) -> Result<SocketAddr, String> {
    use std::io::BufRead;
    let mut r = std::io::BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| format!("{who}: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("{who} did not announce its address (said {line:?})"))?;
    std::thread::spawn(move || for _ in r.lines() {});
    Ok(addr)
}

impl Target for Procs {
    fn shape(&self) -> Shape {
        SHAPE
    }
    fn signal(&mut self, n: usize, stop: bool) {
        if let Some(k) = self.kid(n) {
            let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(k.0.id() as libc::pid_t, sig) };
        }
    }
    fn kill(&mut self, n: usize) {
        *self.kid(n) = None;
    }
    /// Every compute server at once (the memory servers keep the data).
    fn kill_all(&mut self) {
        self.kill_compute();
    }
    fn restart(&mut self, n: usize) -> Result<(), String> {
        match n < COMPUTE {
            true => self.start_compute(n),
            // A killed memory server is replaced once the membership has
            // declared it failed (the replacement waits for that).
            false => self.replace_memory(n - COMPUTE),
        }
    }
    fn down(&self) -> Vec<usize> {
        let compute = (0..COMPUTE).filter(|&i| self.compute[i].kid.is_none());
        let memory = (0..MEMORY)
            .filter(|&j| self.memory_kids[j].is_none())
            .map(|j| j + COMPUTE);
        compute.chain(memory).collect()
    }
    fn exited(&mut self) -> Option<usize> {
        (0..SHAPE.nodes).find(|&n| {
            self.kid(n)
                .as_mut()
                .is_some_and(|k| matches!(k.0.try_wait(), Ok(Some(_))))
        })
    }
    /// Every memory node up in the membership's configuration (a declared
    /// failure is replaced here), and every compute server committing.
    fn whole(&mut self) -> bool {
        match self.replace_declared() {
            Ok(down) if down.is_empty() => self.watch.all_committing(Duration::from_millis(300)),
            Ok(_) => false,
            Err(e) => {
                log::warn!("nemesis: {e}");
                false
            }
        }
    }
    fn configuration(&self) -> String {
        let log = self.membership_log();
        let memory = log
            .lines()
            .rfind(|l| is_memory_configuration(l))
            .unwrap_or("no memory configuration yet")
            .trim_start_matches("membership: ");
        format!(
            "{memory}; compute servers committing: {:?}",
            self.watch.committing(Duration::from_millis(300))
        )
    }
}

/// Watches the compute servers' ledgers (committed writes, rewritten in
/// place as transactions commit): the load's progress, and when each
/// compute slot last committed.
pub struct LedgerWatch {
    /// Committed writes over every ledger ever watched.
    pub total: AtomicU64,
    slots: Mutex<Vec<Watched>>,
    stop: AtomicBool,
}

#[derive(Default)]
struct Watched {
    /// Finished ledgers of the slot (processes killed), their last totals.
    done: u64,
    ledger: Option<PathBuf>,
    last: u64,
    grew: Option<Instant>,
}

impl LedgerWatch {
    fn start(slots: usize) -> Arc<LedgerWatch> {
        let w = Arc::new(LedgerWatch {
            total: AtomicU64::new(0),
            slots: Mutex::new((0..slots).map(|_| Watched::default()).collect()),
            stop: AtomicBool::new(false),
        });
        let t = w.clone();
        std::thread::spawn(move || {
            while !t.stop.load(Ordering::Relaxed) {
                t.sample();
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        w
    }

    fn set_ledger(&self, slot: usize, ledger: PathBuf) {
        let mut s = self.slots.lock().unwrap();
        let w = &mut s[slot];
        w.done += w.last;
        (w.ledger, w.last) = (Some(ledger), 0);
    }

    fn sample(&self) {
        let mut s = self.slots.lock().unwrap();
        let mut total = 0;
        for w in s.iter_mut() {
            let now = w
                .ledger
                .as_ref()
                .and_then(|l| procs::read_ledgers(std::slice::from_ref(l)).ok())
                .map_or(w.last, |l| l.writes_committed);
            if now > w.last {
                (w.last, w.grew) = (now, Some(Instant::now()));
            }
            total += w.done + w.last;
        }
        self.total.store(total, Ordering::Relaxed);
    }

    /// Which slots committed within `within`.
    pub fn committing(&self, within: Duration) -> Vec<bool> {
        let s = self.slots.lock().unwrap();
        s.iter()
            .map(|w| w.grew.is_some_and(|t| t.elapsed() <= within))
            .collect()
    }

    fn all_committing(&self, within: Duration) -> bool {
        self.committing(within).iter().all(|&c| c)
    }
}
