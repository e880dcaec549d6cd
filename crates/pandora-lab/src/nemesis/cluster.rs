//! Pandora as processes for the nemesis: three `compute-server`s, three
//! `memory-server`s and the membership, each on an address of its own
//! inside the run's network namespace, and dialling from it
//! (`TANDEM_DIAL_FROM`): compute server i on 127.0.0.(i+2), memory server
//! j on 127.0.0.(j+5), the membership on 127.0.0.8. With a replicated
//! failure detector ([`Membership::Replicated`]), three membership replicas
//! on 127.0.0.8–10 keep their state in a ZooKeeper on 127.0.0.11
//! (`scripts/zookeeper.sh`, started inside the run's namespace), each
//! through a relay on its own address ([`Relay`]).
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
/// A compute server ends its incarnation when a memory server the
/// membership has up stays unreachable this long: thrice the time in which
/// a dead one is declared failed.
pub const VERDICT_PATIENCE_MS: u64 = 3 * MEMORY_TIMEOUT_MS;
const MEMBERSHIP_PORT: u16 = 7300;
const MEMORY_PORT: u16 = 7400;

/// The (first) membership replica's address.
pub fn membership_ip() -> Ipv4Addr {
    tandem_nemesis::drive::manager_ip(SHAPE)
}

/// Replicas of a replicated failure detector, and its ZooKeeper.
pub const FD_REPLICAS: usize = 3;
const ZK_PORT: u16 = 2181;
/// A dead leader's ZooKeeper session expires after this (ms).
pub const ZK_SESSION_MS: u64 = 4_000;

/// ZooKeeper's address (after the membership replicas').
pub fn zookeeper_ip() -> Ipv4Addr {
    addr_of(SHAPE.nodes + FD_REPLICAS)
}

/// Every address of the run's own processes (not ZooKeeper's): the links
/// a delay may slow.
pub fn addrs() -> Vec<Ipv4Addr> {
    let nodes = (0..SHAPE.nodes).map(addr_of);
    nodes.chain((0..FD_REPLICAS).map(replica_ip)).collect()
}

/// Membership replica `r`'s address.
pub fn replica_ip(r: usize) -> Ipv4Addr {
    addr_of(SHAPE.nodes + r)
}

/// How the membership runs.
#[derive(Clone, Debug)]
pub enum Membership {
    /// One process, its state in memory.
    Single,
    /// [`FD_REPLICAS`] replicas over a ZooKeeper that `scripts/zookeeper.sh`
    /// (in the checkout at `repo`) starts.
    Replicated { repo: PathBuf },
}

/// A standalone ZooKeeper started by `scripts/zookeeper.sh`, stopped on drop.
struct ZooKeeper {
    repo: PathBuf,
    dir: PathBuf,
}

impl ZooKeeper {
    fn script(&self, verb: &str) -> Result<(), String> {
        zookeeper_sh(&self.repo, &self.dir, verb)
    }
}

/// `scripts/zookeeper.sh VERB` of the checkout at `repo`, for the run's
/// ZooKeeper (its address, port and directory `dir`). `install` needs the
/// host's network: call it before entering the run's namespace.
pub fn zookeeper_sh(repo: &Path, dir: &Path, verb: &str) -> Result<(), String> {
    let out = Command::new("bash")
        .arg(repo.join("scripts/zookeeper.sh"))
        .arg(verb)
        .env("ZK_ADDR", zookeeper_ip().to_string())
        .env("ZK_PORT", ZK_PORT.to_string())
        .env("ZK_DIR", dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run scripts/zookeeper.sh: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "scripts/zookeeper.sh {verb}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// A relay on a membership replica's own address to ZooKeeper, dialling
/// from that address: the ZooKeeper client library cannot choose its source
/// address, and without one of its own a replica's ZooKeeper traffic would
/// escape the rules that cut that replica off.
struct Relay {
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(listen: SocketAddr, to: SocketAddr, from: Ipv4Addr) -> Result<Relay, String> {
        let l = std::net::TcpListener::bind(listen).map_err(|e| format!("relay {listen}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((down, _)) => {
                        let _ = down.set_nonblocking(false);
                        std::thread::spawn(move || pipe(down, to, from));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Relay { stop })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Carry `down` to `to` (dialled from `from`) and back until either side ends.
fn pipe(down: std::net::TcpStream, to: SocketAddr, from: Ipv4Addr) {
    let dial = tandem_fabric::auth::dial::connect_timeout_from(
        to,
        Duration::from_secs(1),
        Some(from.into()),
    );
    let Ok(up) = dial else {
        return;
    };
    let (Ok(mut down2), Ok(mut up2)) = (down.try_clone(), up.try_clone()) else {
        return;
    };
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up2, &mut down2);
        let _ = down2.shutdown(std::net::Shutdown::Both);
    });
    let (mut down, mut up) = (down, up);
    let _ = std::io::copy(&mut down, &mut up);
    let _ = up.shutdown(std::net::Shutdown::Both);
    let _ = back.join();
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
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
    memberships: Vec<Kid>,
    mode: Membership,
    /// Planted bugs of the membership replicas.
    bugs: Vec<String>,
    /// Dropped after the processes that use them.
    relays: Vec<Relay>,
    zookeeper: Option<ZooKeeper>,
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

/// A planted bug of the coordinators (compute servers), not the membership's.
fn store_bug(name: &str) -> bool {
    tandem_dkvs::BugSwitches::parse(name).is_ok()
}

impl Procs {
    /// Start the memory servers, the membership (it loads the store) and the
    /// compute servers; `bugs` go to the membership (`--inject-bug`), but
    /// the store's (`BugSwitches`), which go to the compute servers.
    pub fn start(
        exe: &Path,
        dir: &Path,
        bugs: &[String],
        store: &tandem_dkvs::StoreConfig,
        mode: Membership,
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
            memberships: Vec::new(),
            mode: mode.clone(),
            bugs: bugs.to_vec(),
            relays: Vec::new(),
            zookeeper: None,
            next_node: 1,
            watch: LedgerWatch::start(COMPUTE),
            mem_bytes: *layout.region_bytes.iter().max().expect("memory nodes"),
        };
        for j in 0..MEMORY {
            let (kid, addr) = p.spawn_memory(j, None)?;
            p.memory_kids.push(Some(kid));
            p.memory.push(addr);
        }
        if let Membership::Replicated { repo } = &mode {
            let zk = ZooKeeper {
                repo: repo.clone(),
                dir: dir.join("zookeeper"),
            };
            zk.script("start")?;
            p.zookeeper = Some(zk);
            let to = SocketAddr::from((zookeeper_ip(), ZK_PORT));
            for r in 0..FD_REPLICAS {
                let at = SocketAddr::from((replica_ip(r), ZK_PORT));
                p.relays.push(Relay::start(at, to, replica_ip(r))?);
            }
        }
        for r in 0..p.membership_addrs().len() {
            let kid = p.spawn_membership(r, bugs)?;
            p.memberships.push(kid);
            if r == 0 && p.zookeeper.is_some() {
                // Replica 0 leads at first: `manager` faults hit the leader.
                p.wait_log("membership0", "leads", Duration::from_secs(30))?;
            }
        }
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
        tandem_nemesis::log_file(&self.dir, name)
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
        membership: Option<String>,
    ) -> Result<(Kid, SocketAddr), String> {
        let ip = addr_of(COMPUTE + j);
        let port = if membership.is_some() { 0 } else { MEMORY_PORT };
        let mut c = self.command(ip);
        c.args(["pandora", "memory-server", "--listen"])
            .arg(SocketAddr::from((ip, port)).to_string())
            .args(["--mem", &self.mem_bytes.to_string()]);
        if let Some(m) = membership {
            c.args(["--replaces", &j.to_string(), "--membership", &m]);
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

    /// Every membership replica's address (one without replication).
    pub fn membership_addrs(&self) -> Vec<SocketAddr> {
        let n = match self.mode {
            Membership::Single => 1,
            Membership::Replicated { .. } => FD_REPLICAS,
        };
        (0..n)
            .map(|r| SocketAddr::from((replica_ip(r), MEMBERSHIP_PORT)))
            .collect()
    }

    /// `--membership`: every replica, comma-separated.
    fn membership_flag(&self) -> String {
        let a: Vec<String> = self
            .membership_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect();
        a.join(",")
    }

    fn spawn_membership(&self, r: usize, bugs: &[String]) -> Result<Kid, String> {
        let listen = self.membership_addrs()[r];
        let mut c = self.command(replica_ip(r));
        c.args(["pandora", "membership", "--listen"])
            .arg(listen.to_string())
            .args(self.cluster_flags())
            .args(["--load", "--timeout-ms", &TIMEOUT_MS.to_string()])
            .args(["--memory-timeout-ms", &MEMORY_TIMEOUT_MS.to_string()]);
        if let Membership::Replicated { .. } = self.mode {
            // Through the relay on its own address (`Relay`).
            let zk = SocketAddr::from((replica_ip(r), ZK_PORT));
            c.args(["--fd-replicas", &self.membership_flag()])
                .args(["--zookeeper", &zk.to_string()])
                .args(["--zk-session-ms", &ZK_SESSION_MS.to_string()]);
        }
        for b in bugs.iter().filter(|b| !store_bug(b)) {
            c.args(["--inject-bug", b]);
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(self.log(&format!("membership{r}"))?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        let out = child.stdout.take().expect("piped");
        let kid = Kid(child);
        announced(out, &format!("membership replica {r}"))?;
        Ok(kid)
    }

    /// Start compute slot `i` (again: a new process, a fresh node id, a
    /// ledger of its own).
    pub fn start_compute(&mut self, i: usize) -> Result<(), String> {
        let node = self.next_node;
        self.next_node += 1;
        let ledger = self.dir.join(format!("compute-{node}.ledger"));
        let mut c = self.command(addr_of(i));
        // The compute servers are the load and busy-poll: at a lower
        // priority they leave the membership, the memory servers (and
        // anything else on a two-core machine) the CPU they need, so a
        // suspicion comes from the faults, not from a starved detector.
        // SAFETY: setpriority only changes the child's own priority.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                libc::setpriority(libc::PRIO_PROCESS, 0, 10);
                Ok(())
            });
        }
        c.args(["pandora", "compute-server", "--membership"])
            .arg(self.membership_flag())
            .args(self.cluster_flags())
            .args(["--node", &node.to_string()])
            .args(["--coordinators", &COORDINATORS.to_string()])
            .args(["--duration", "86400", "--seed", &node.to_string()])
            .args(["--verdict-patience-ms", &VERDICT_PATIENCE_MS.to_string()])
            .arg("--ledger")
            .arg(&ledger);
        for b in self.bugs.iter().filter(|b| store_bug(b)) {
            c.args(["--inject-bug", b]);
        }
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

    /// Wait until `<name>.log` contains `needle`.
    fn wait_log(&self, name: &str, needle: &str, within: Duration) -> Result<(), String> {
        let path = self.dir.join(format!("{name}.log"));
        let t = Instant::now();
        while !std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains(needle)
        {
            if t.elapsed() > within {
                return Err(format!("{} never said '{needle}'", path.display()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Every membership replica's log, one after the other.
    pub fn membership_log(&self) -> String {
        (0..self.memberships.len())
            .map(|r| {
                std::fs::read_to_string(self.dir.join(format!("membership{r}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The newest memory configuration any replica announced.
    fn last_memory_configuration(&self) -> Option<String> {
        let log = self.membership_log();
        let epoch = |l: &str| -> u64 {
            let rest = l.split("memory configuration ").nth(1).unwrap_or("");
            rest.split(':')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        log.lines()
            .filter(|l| is_memory_configuration(l))
            .max_by_key(|l| epoch(l))
            .map(str::to_string)
    }

    /// The memory nodes the membership's latest configuration has down.
    fn memory_down(&self) -> BTreeSet<usize> {
        let Some(l) = self.last_memory_configuration() else {
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

    /// Start again every membership replica that exited: a leader whose
    /// ZooKeeper session expired stops (it may have been replaced), and a
    /// supervisor starts it again as a follower.
    fn restart_replicas(&mut self) -> Result<(), String> {
        for r in 0..self.memberships.len() {
            if matches!(self.memberships[r].0.try_wait(), Ok(Some(_))) {
                self.memberships[r] = self.spawn_membership(r, &self.bugs.clone())?;
            }
        }
        Ok(())
    }

    /// Kill memory server `j` if it still runs, and start its replacement.
    fn replace_memory(&mut self, j: usize) -> Result<(), String> {
        self.memory_kids[j] = None;
        let (kid, addr) = self.spawn_memory(j, Some(self.membership_flag()))?;
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
        if let Err(e) = self.restart_replicas() {
            log::warn!("nemesis: {e}");
            return false;
        }
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
        let last = self.last_memory_configuration();
        let memory = last
            .as_deref()
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
