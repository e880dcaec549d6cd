//! Pandora as separate OS processes (DESIGN.md §4.1): a membership server and
//! compute servers, beside `tandem memory-server` processes, talking over TCP.
//! A crash is `kill -9`.
//!
//! Membership protocol: JSON lines over TCP.
//! - compute → membership, on its join connection:
//!   `{"join":{"node":N,"coordinators":C}}`, and `{"leave":N}` on a clean
//!   shutdown; on a heartbeat connection to every membership replica:
//!   `{"heartbeat":N}` every timeout/5 from a thread of its own;
//! - membership → compute: `{"assign":[ids]}`, `{"reject":"why"}` or, from a
//!   replica that does not lead, `{"notleader":"addr"}`; later
//!   `{"failed":[ids]}` pushes (only after log recovery, DESIGN.md §4.5 step 4);
//! - follower replica → leader: `{"relay":{"replica":R,"nodes":[N...]}}`
//!   every tick: the nodes it heard from since its last relay.
//!
//! Membership replicas (`pandora.txt` §3.2.4, the distributed FD): with
//! `--zookeeper` and several replicas, the one holding ZooKeeper's leader
//! znode runs the [`Membership`] state machine and acts; every replica
//! receives heartbeats, and the leader declares a node failed only when
//! fewer than a majority of replicas heard it ([`Event::Relay`]). When the
//! leader dies, its znode expires with its session and another replica takes
//! over from the state in ZooKeeper.
//!
//! A compute server whose membership connection drops keeps running
//! transactions and rejoins with bounded backoff: the service answers a
//! retried join of a live node with the same ids. If it answers with other ids
//! (it restarted without its state) or refuses, the compute server stops.
//!
//! With `--zookeeper` the membership service keeps its durable state
//! ([`MembershipState`]) in a znode, as Pandora does (`pandora.txt` §3.2.4):
//! every step that changes it is written (compare-and-set on the znode
//! version) before anyone can observe its effect, so a membership process
//! restarted after `kill -9` resumes where the crashed one stopped.
//!
//! A compute server records its acknowledged writes in a ledger file (one
//! 16-byte record per coordinator: committed writes, writes in doubt), updated
//! around every transaction with `pwrite`, so the file survives `kill -9` and
//! the post-run check knows what was acknowledged.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryCoordinator};
use tandem_dkvs::{ComputeNode, FailedIds, Layout, StoreConfig};
use tandem_fabric::tcp::TcpCluster;
use tandem_membership::{Command, Event, Membership, MembershipConfig, NodeStatus};
use crate::zk::{Ack, ZkState};
use tandem_sim::Rng;
use tandem_workloads::micro::{MicroClient, MicroLedger, MicroSpec};

use crate::runner::block_on_local;

/// The node id the membership server joins under for its recovery coordinator.
const MEMBERSHIP_NODE: u16 = u16::MAX - 2;

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "lowercase")]
enum ToMembership {
    Join { node: u16, coordinators: u16 },
    Heartbeat(u16),
    Leave(u16),
    Relay { replica: u8, nodes: Vec<u16> },
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "lowercase")]
enum FromMembership {
    Assign(Vec<u16>),
    Reject(String),
    /// This replica does not lead; the leader it knows of, if any.
    NotLeader(Option<String>),
    Failed(Vec<u16>),
}

fn send_line<T: Serialize>(w: &mut TcpStream, msg: &T) -> std::io::Result<()> {
    let mut s = serde_json::to_string(msg).map_err(std::io::Error::other)?;
    s.push('\n');
    w.write_all(s.as_bytes())
}

pub struct MembershipServerConfig {
    /// This process's replica: it serves the listener from the start.
    pub replica: Arc<Replica>,
    pub memory: TcpCluster,
    pub store: StoreConfig,
    pub heartbeat_timeout: Duration,
    /// Keep the durable state in ZooKeeper (and resume from what it holds).
    pub zookeeper: Option<ZkState>,
    /// After resuming from ZooKeeper: how long compute servers get to
    /// reconnect before their silence counts.
    pub restore_grace: Duration,
}

/// One failure-detector replica: the listener, served from the start. Until
/// it leads, it answers joins with the leader's address, collects the
/// heartbeats it receives and relays them to the leader every tick; once it
/// leads, everything goes to its [`Membership`].
pub struct Replica {
    pub index: u8,
    pub count: u8,
    leader: std::sync::OnceLock<Arc<Shared>>,
    /// The leader's address, as the leader znode says.
    leader_addr: Mutex<Option<String>>,
    /// Nodes heard from since the last relay.
    heard: Mutex<BTreeSet<u16>>,
}

impl Replica {
    /// Serve `listener` as replica `index` of `count`; relay every `tick`.
    pub fn start(listener: TcpListener, index: u8, count: u8, tick: Duration) -> Arc<Replica> {
        let r = Arc::new(Replica { index, count, leader: Default::default(), leader_addr: Mutex::new(None), heard: Mutex::new(BTreeSet::new()) });
        let acceptor = r.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let replica = acceptor.clone();
                std::thread::spawn(move || serve_compute(conn, replica));
            }
        });
        if count > 1 {
            let relay = r.clone();
            std::thread::spawn(move || relay.relay_loop(tick));
        }
        r
    }

    /// Record who leads (what the leader znode holds).
    pub fn set_leader(&self, addr: &str) {
        *self.leader_addr.lock().unwrap() = Some(addr.to_string());
    }

    fn relay_loop(&self, tick: Duration) {
        let mut conn: Option<(String, TcpStream)> = None;
        while self.leader.get().is_none() {
            std::thread::sleep(tick);
            let Some(addr) = self.leader_addr.lock().unwrap().clone() else { continue };
            if conn.as_ref().is_some_and(|(a, _)| *a != addr) {
                conn = None; // a new leader
            }
            if conn.is_none() {
                match addr.parse::<SocketAddr>().map_err(|e| e.to_string()).and_then(|a| TcpStream::connect_timeout(&a, tick).map_err(|e| e.to_string())) {
                    Ok(c) => {
                        let _ = c.set_nodelay(true);
                        conn = Some((addr, c));
                    }
                    Err(e) => {
                        log::debug!("membership replica {}: cannot reach the leader at {addr}: {e}", self.index);
                        continue;
                    }
                }
            }
            // Relaying to the leader is hearing from it: the service's own
            // node (its recovery coordinator) is vouched for by every replica
            // connected to it.
            let mut heard = std::mem::take(&mut *self.heard.lock().unwrap());
            heard.insert(MEMBERSHIP_NODE);
            let nodes: Vec<u16> = heard.into_iter().collect();
            let (_, c) = conn.as_mut().expect("connected above");
            if send_line(c, &ToMembership::Relay { replica: self.index, nodes }).is_err() {
                conn = None;
            }
        }
    }
}

struct Shared {
    m: Mutex<Membership>,
    subscribers: Mutex<Subscribers>,
    base: Instant,
    zookeeper: Option<ZkState>,
    /// The durable epoch last handed to ZooKeeper (read and written under `m`'s lock).
    saved_epoch: AtomicU64,
}

/// Admitted compute servers, and the failed ids announced to them so far
/// (one lock: a joiner's catch-up notice and a broadcast never interleave,
/// and no announcement falls between them).
struct Subscribers {
    conns: Vec<TcpStream>,
    /// Failed ids published (after they were durable), minus recycled ones.
    published: BTreeSet<u16>,
}

impl Shared {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
    /// Announce newly failed ids to every compute server.
    fn publish_failed(&self, ids: &[u16]) {
        let mut subs = self.subscribers.lock().unwrap();
        subs.published.extend(ids.iter().copied());
        let msg = FromMembership::Failed(ids.to_vec());
        subs.conns.retain_mut(|w| send_line(w, &msg).is_ok());
    }
    /// Admit a compute server to the announcements; tell it every failed id
    /// announced so far (later ones reach it by [`Shared::publish_failed`]).
    fn subscribe(&self, mut w: TcpStream) -> std::io::Result<()> {
        let mut subs = self.subscribers.lock().unwrap();
        if !subs.published.is_empty() {
            send_line(&mut w, &FromMembership::Failed(subs.published.iter().copied().collect()))?;
        }
        subs.conns.push(w);
        Ok(())
    }
    /// Called with `m` locked after a step. If the step changed the durable
    /// state, queue the new state for ZooKeeper; else, if `barrier`, queue a
    /// barrier behind the writes already queued (what the caller is about to
    /// act on may come from one of them). Writes are queued in step order
    /// because the lock is held; the caller acts on the step's commands only
    /// once the returned acknowledgement arrives.
    fn save(&self, m: &Membership, barrier: bool) -> Option<Ack> {
        let zk = self.zookeeper.as_ref()?;
        let epoch = m.durable_epoch();
        if self.saved_epoch.swap(epoch, Ordering::Relaxed) != epoch {
            Some(zk.write(Some(&m.snapshot())))
        } else if barrier {
            Some(zk.write(None))
        } else {
            None
        }
    }
    /// A fresh block of recovery-coordinator versions, durable before it is used.
    async fn reserve_version_block(&self) -> Result<u64, String> {
        let (block, ack) = {
            let mut m = self.m.lock().unwrap();
            let block = m.reserve_version_block();
            (block, self.save(&m, true))
        };
        if let Some(ack) = ack {
            ack.await.unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
        }
        if block >= (1u64 << 48) / (1 << 24) {
            return Err("the recovery coordinator ran out of version blocks".into());
        }
        Ok(block)
    }
    /// Step; the commands come back once ZooKeeper holds everything they rest on.
    async fn step_durably(&self, event: Event) -> Result<Vec<Command>, String> {
        let (cmds, ack) = {
            let mut m = self.m.lock().unwrap();
            let cmds = m.step(self.now(), event);
            let ack = self.save(&m, !cmds.is_empty());
            (cmds, ack)
        };
        if let Some(ack) = ack {
            ack.await.unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
        }
        Ok(cmds)
    }
}

fn wait_blocking(ack: Option<Ack>) -> Result<(), String> {
    match ack {
        None => Ok(()),
        Some(ack) => ack.blocking_recv().unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into())),
    }
}

/// Serve forever: admit compute servers, detect failures, recover, notify.
pub fn run_membership_server(cfg: MembershipServerConfig) -> Result<(), String> {
    let layout = Arc::new(Layout::new(&cfg.store)?);
    let mcfg = MembershipConfig {
        heartbeat_timeout_ns: cfg.heartbeat_timeout.as_nanos() as u64,
        id_space: cfg.store.log_slots,
        restore_grace_ns: cfg.restore_grace.as_nanos() as u64,
        fd_replicas: cfg.replica.count,
        self_replica: cfg.replica.index,
        ..MembershipConfig::default()
    };
    let base = Instant::now();
    let (m, reissued) = match cfg.zookeeper.as_ref().and_then(|z| z.restored().cloned()) {
        Some(state) => {
            let mut m = Membership::restore(mcfg, state, 0).map_err(|e| format!("the state in ZooKeeper is unusable: {e}"))?;
            let reissued = m.reissue_after_restore();
            let s = m.snapshot();
            let count = |st: NodeStatus| s.nodes.iter().filter(|(&n, x)| x.status == st && n != MEMBERSHIP_NODE).count();
            eprintln!(
                "membership: resumed from ZooKeeper: {} compute nodes alive, {} being recovered, {} failed ({} failed ids), {} left; {} actions re-issued",
                count(NodeStatus::Alive),
                count(NodeStatus::Revoking) + count(NodeStatus::Recovering),
                count(NodeStatus::Failed),
                s.failed_ids.len(),
                count(NodeStatus::Left),
                reissued.len()
            );
            (m, reissued)
        }
        None => (Membership::new(mcfg), Vec::new()),
    };
    // A resumed service writes its state once at start (the version moves
    // on): a previous incarnation that is still running fails its next write.
    let resumed = cfg.zookeeper.as_ref().is_some_and(|z| z.restored().is_some());
    let saved_epoch = AtomicU64::new(if resumed { u64::MAX } else { m.durable_epoch() });
    // Failed ids in a resumed state are durable: announce them to every joiner
    // (a crash may have cut their broadcast short).
    let subscribers = Subscribers { conns: Vec::new(), published: m.failed_ids().clone() };
    let shared = Arc::new(Shared { m: Mutex::new(m), subscribers: Mutex::new(subscribers), base, zookeeper: cfg.zookeeper, saved_epoch });
    if cfg.replica.leader.set(shared.clone()).is_err() {
        return Err("this membership replica already leads".into());
    }
    block_on_local(detector_loop(shared, cfg.memory, layout, cfg.heartbeat_timeout, reissued))
}

fn serve_compute(conn: TcpStream, replica: Arc<Replica>) {
    let _ = conn.set_nodelay(true);
    let Ok(mut writer) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let msg = serde_json::from_str::<ToMembership>(&line);
        let Some(shared) = replica.leader.get() else {
            // Not leading (yet): collect heartbeats for the leader, send joiners there.
            match msg {
                Ok(ToMembership::Heartbeat(node)) => {
                    replica.heard.lock().unwrap().insert(node);
                }
                Ok(ToMembership::Join { .. }) => {
                    let leader = replica.leader_addr.lock().unwrap().clone();
                    if send_line(&mut writer, &FromMembership::NotLeader(leader)).is_err() {
                        return;
                    }
                }
                Ok(ToMembership::Leave(_) | ToMembership::Relay { .. }) => {}
                Err(e) => {
                    log::warn!("membership: bad message ({e}); closing the connection");
                    return;
                }
            }
            continue;
        };
        match msg {
            Ok(ToMembership::Heartbeat(node)) => {
                // Heartbeats are not durable: they never wait for ZooKeeper.
                shared.m.lock().unwrap().step(shared.now(), Event::Heartbeat { node });
            }
            Ok(ToMembership::Relay { replica, nodes }) => {
                shared.m.lock().unwrap().step(shared.now(), Event::Relay { replica, nodes });
            }
            Ok(ToMembership::Leave(node)) => {
                let ack = {
                    let mut m = shared.m.lock().unwrap();
                    m.step(shared.now(), Event::Leave { node });
                    shared.save(&m, false)
                };
                if let Err(e) = wait_blocking(ack) {
                    eprintln!("membership: cannot record that compute node {node} left: {e}");
                    return;
                }
                eprintln!("membership: compute node {node} left");
            }
            Ok(ToMembership::Join { node, coordinators }) => {
                let (reply, rejoin, ack) = {
                    let mut m = shared.m.lock().unwrap();
                    let rejoin = m.status(node) == Some(NodeStatus::Alive);
                    let cmds = m.step(shared.now(), Event::Join { node, coordinators });
                    (cmds.into_iter().next(), rejoin, shared.save(&m, true))
                };
                // The ids go out only once ZooKeeper holds them (a retried
                // join waits for the first one's write): a restarted service
                // must never hand them to anyone else.
                if let Err(e) = wait_blocking(ack) {
                    eprintln!("membership: cannot record the join of compute node {node}: {e}");
                    return;
                }
                let msg = match reply {
                    Some(Command::AssignIds { ids, .. }) => FromMembership::Assign(ids),
                    Some(Command::Reject { reason, .. }) => FromMembership::Reject(reason),
                    other => FromMembership::Reject(format!("unexpected {other:?}")),
                };
                let admitted = matches!(msg, FromMembership::Assign(_));
                if send_line(&mut writer, &msg).is_err() {
                    return;
                }
                if admitted {
                    if rejoin {
                        eprintln!("membership: compute node {node} rejoined");
                    } else {
                        eprintln!("membership: compute node {node} joined with {coordinators} coordinators");
                    }
                    let Ok(w) = writer.try_clone() else { return };
                    if shared.subscribe(w).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                log::warn!("membership: bad message from a compute server ({e}); closing it");
                return;
            }
        }
    }
}

async fn detector_loop(shared: Arc<Shared>, memory: TcpCluster, layout: Arc<Layout>, timeout: Duration, reissued: Vec<Command>) -> Result<(), String> {
    // Versions the recovery coordinator mints must never repeat: every
    // recovery or retirement takes its own block of the 48-bit counter,
    // reserved in the durable state before use, so a service resumed from
    // ZooKeeper (same recovery-coordinator id) continues after it.
    const RC_VERSION_BLOCK: u64 = 1 << 24;
    // A resumed service gets its own id back (a retried join of a live node).
    let rc_id = match shared.step_durably(Event::Join { node: MEMBERSHIP_NODE, coordinators: 1 }).await?.pop() {
        Some(Command::AssignIds { ids, .. }) => ids[0],
        other => return Err(format!("membership cannot reserve its recovery coordinator id: {other:?}")),
    };
    let keys = memory.register(MEMBERSHIP_NODE).await.map_err(|e| format!("cannot register with the memory servers: {e}"))?;
    let fabric = memory.connect(MEMBERSHIP_NODE, &keys).await.map_err(|e| format!("cannot connect to the memory servers: {e}"))?;
    let failed_ids = FailedIds::new();
    // A resumed service's stray-lock scans cover the ids failed before the restart too.
    for &id in shared.m.lock().unwrap().failed_ids() {
        failed_ids.insert(id);
    }
    let mut detected: BTreeMap<u16, Instant> = BTreeMap::new();
    let tick = (timeout / 20).max(Duration::from_micros(100));
    // Work a previous incarnation left half done goes first.
    let mut restored_revokes: BTreeSet<u16> = reissued.iter().filter_map(|c| if let Command::Revoke { node } = c { Some(*node) } else { None }).collect();
    let mut queue: std::collections::VecDeque<Command> = reissued.into();
    loop {
        while let Some(cmd) = queue.pop_front() {
            let next = match cmd {
                Command::Revoke { node } => {
                    detected.insert(node, Instant::now());
                    if restored_revokes.remove(&node) {
                        eprintln!("membership: compute node {node} was declared failed before the restart; revoking its access again");
                        memory.revoke(node).await.map_err(|e| format!("revocation of node {node} failed: {e}"))?;
                        queue.extend(shared.step_durably(Event::RevokeAcked { node }).await?);
                        continue;
                    }
                    let views = shared.m.lock().unwrap().replica_views(node, shared.now());
                    let views: Vec<String> = views
                        .iter()
                        .enumerate()
                        .map(|(r, v)| match v {
                            (Some(ago), Some(heard)) => format!("replica {r}: reported {} us ago, had heard it {} us before", ago / 1000, heard / 1000),
                            _ => format!("replica {r}: not reporting"),
                        })
                        .collect();
                    eprintln!("membership: compute node {node} missed its heartbeats ({}); revoking its access", views.join("; "));
                    memory.revoke(node).await.map_err(|e| format!("revocation of node {node} failed: {e}"))?;
                    Event::RevokeAcked { node }
                }
                Command::Recover { node, ids, .. } => {
                    let t = Instant::now();
                    let rc_versions = shared.reserve_version_block().await? * RC_VERSION_BLOCK;
                    let report = RecoveryCoordinator::new(&fabric, layout.clone(), rc_id)
                        .with_version_counter(rc_versions)
                        .recover(&ids)
                        .await
                        .map_err(|e| format!("log recovery of node {node} failed: {e}"))?;
                    eprintln!(
                        "membership: recovered node {node} in {} us: {} logs, {} rolled forward, {} rolled back, {} locks released",
                        t.elapsed().as_micros(),
                        report.logs_found,
                        report.rolled_forward,
                        report.rolled_back,
                        report.locks_released
                    );
                    Event::RecoveryDone { node }
                }
                Command::NotifyFailed { ids } => {
                    for &id in &ids {
                        failed_ids.insert(id);
                    }
                    shared.publish_failed(&ids);
                    let owner = shared.m.lock().unwrap().owner_of(ids[0]).unwrap_or(0);
                    match detected.get(&owner) {
                        Some(t) => eprintln!(
                            "membership: failed ids of node {owner} published {} us after detection; stealing may start",
                            t.elapsed().as_micros()
                        ),
                        None => eprintln!("membership: failed ids of node {owner} published (detected before a restart); stealing may start"),
                    }
                    continue;
                }
                Command::ScanStrayLocks { ids } => {
                    let n = sweep_stray_locks(&fabric, &layout, &failed_ids).await.map_err(|e| format!("stray-lock scan failed: {e}"))?;
                    // No version minted by a recycled id may survive its reuse.
                    let rc_versions = shared.reserve_version_block().await? * RC_VERSION_BLOCK;
                    let retired = RecoveryCoordinator::new(&fabric, layout.clone(), rc_id)
                        .with_version_counter(rc_versions)
                        .retire_versions(&ids)
                        .await
                        .map_err(|e| format!("retiring the versions of recycled ids failed: {e}"))?;
                    let Some(retired) = retired else {
                        eprintln!("membership: objects of the failed ids stayed locked; their ids are not recycled yet");
                        continue;
                    };
                    eprintln!("membership: rewrote {retired} versions minted by ids about to be recycled");
                    eprintln!("membership: released {n} stray locks; {} ids can be reused", ids.len());
                    // Joiners must not be told these are failed once they can be handed out again.
                    shared.subscribers.lock().unwrap().published.retain(|id| !ids.contains(id));
                    Event::ScanDone { ids }
                }
                Command::AssignIds { .. } | Command::Reject { .. } => continue,
            };
            // Durable before anything it leads to happens (revocation,
            // recovery, and above all the failed-ids notice).
            queue.extend(shared.step_durably(next).await?);
        }
        if let Some(e) = shared.zookeeper.as_ref().and_then(|z| z.fatal()) {
            return Err(e);
        }
        tokio::time::sleep(tick).await;
        let (cmds, ack) = {
            let mut m = shared.m.lock().unwrap();
            m.step(shared.now(), Event::Heartbeat { node: MEMBERSHIP_NODE });
            let cmds = m.step(shared.now(), Event::Tick);
            let ack = shared.save(&m, !cmds.is_empty());
            (cmds, ack)
        };
        if let Some(ack) = ack {
            ack.await.unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
        }
        queue.extend(cmds);
    }
}

pub struct ComputeServerConfig {
    pub node: u16,
    /// Every membership replica (one without replication).
    pub membership: Vec<SocketAddr>,
    pub memory: TcpCluster,
    pub store: StoreConfig,
    pub micro: MicroSpec,
    pub coordinators: u16,
    pub duration: Duration,
    pub heartbeat_every: Duration,
    pub ledger: Option<PathBuf>,
    pub seed: u64,
}

#[derive(Serialize, Debug)]
pub struct ComputeServerReport {
    pub node: u16,
    pub committed: u64,
    pub aborted: u64,
    pub locks_stolen: u64,
    /// Commits per 100 ms since the start.
    pub timeline_100ms: Vec<u64>,
    pub errors: Vec<String>,
}

/// Join, run the micro workload for `duration`, report.
pub fn run_compute_server(cfg: ComputeServerConfig) -> Result<ComputeServerReport, String> {
    let layout = Arc::new(Layout::new(&cfg.store)?);
    let session = MembershipSession::join(&cfg.membership, cfg.node, cfg.coordinators, cfg.heartbeat_every)?;
    let (ids, failed, link, stop) = (session.ids.clone(), session.failed.clone(), session.link.clone(), session.stop.clone());
    eprintln!("compute node {}: coordinators {:?}", cfg.node, ids);
    if let Some(p) = &cfg.ledger {
        std::fs::write(p.with_extension("ids"), serde_json::to_string(&ids).map_err(|e| e.to_string())?)
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    let ledger = match &cfg.ledger {
        Some(p) => Some(Arc::new(std::fs::File::create(p).map_err(|e| format!("cannot create ledger {}: {e}", p.display()))?)),
        None => None,
    };
    let committed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let result = block_on_local(async {
        let keys = cfg.memory.register(cfg.node).await.map_err(|e| format!("cannot register with memory servers: {e}"))?;
        let fabric = cfg.memory.connect(cfg.node, &keys).await.map_err(|e| format!("cannot connect to memory servers: {e}"))?;
        let node = ComputeNode::new(fabric, &cfg.store, layout.clone(), failed.clone());
        let mut seeds = Rng::new(cfg.seed ^ cfg.node as u64);
        let errors: Rc<RefCell<Vec<String>>> = Rc::default();
        let aborted = Rc::new(RefCell::new(0u64));
        let mut tasks = Vec::new();
        for (k, &id) in ids.iter().enumerate() {
            let mut coord = node.coordinator(id);
            let mut client = MicroClient::new(cfg.micro.clone(), seeds.next_u64());
            let (ledger, committed, errors, aborted, link) = (ledger.clone(), committed.clone(), errors.clone(), aborted.clone(), link.clone());
            let (deadline, ops) = (start + cfg.duration, cfg.micro.ops_per_tx as u64);
            tasks.push(tokio::task::spawn_local(async move {
                let record = |l: &MicroLedger, pending: u64| {
                    if let Some(f) = &ledger {
                        let mut b = [0u8; 16];
                        b[..8].copy_from_slice(&l.writes_committed.to_le_bytes());
                        b[8..].copy_from_slice(&(l.in_doubt + pending).to_le_bytes());
                        let _ = f.write_at(&b, 16 * k as u64);
                    }
                };
                while Instant::now() < deadline {
                    if link.is_lost.load(Ordering::Relaxed) {
                        // The service no longer vouches for our ids: stop.
                        let why = link.lost.lock().unwrap().clone().unwrap_or_default();
                        errors.borrow_mut().push(format!("coordinator {id}: {why}"));
                        return coord.stats.locks_stolen;
                    }
                    // Before: this transaction's writes are in doubt until it answers.
                    record(&client.ledger.borrow(), ops);
                    match client.run_one(&mut coord).await {
                        Ok(true) => {
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => *aborted.borrow_mut() += 1,
                        Err(e) => {
                            errors.borrow_mut().push(format!("coordinator {id}: {e}"));
                            record(&client.ledger.borrow(), 0);
                            return coord.stats.locks_stolen;
                        }
                    }
                    record(&client.ledger.borrow(), 0);
                }
                coord.stats.locks_stolen
            }));
        }
        // Sample the commit count every 100 ms for the timeline.
        let mut timeline = Vec::new();
        let mut last = 0;
        while Instant::now() < start + cfg.duration {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let c = committed.load(Ordering::Relaxed);
            timeline.push(c - last);
            last = c;
        }
        let mut stolen = 0;
        for t in tasks {
            stolen += t.await.map_err(|e| e.to_string())?;
        }
        let aborted = *aborted.borrow();
        let errors = errors.borrow().clone();
        Ok::<_, String>(ComputeServerReport { node: cfg.node, committed: committed.load(Ordering::SeqCst), aborted, locks_stolen: stolen, timeline_100ms: timeline, errors })
    });
    if result.as_ref().is_ok_and(|r| r.errors.is_empty()) {
        session.leave();
    } else {
        stop.store(true, Ordering::SeqCst);
    }
    result
}

/// A compute node's membership: its coordinator ids, the failed ids the
/// service announces, heartbeats to every replica from threads of their own,
/// and rejoining (same ids) when the service goes away. Dropping it without
/// [`MembershipSession::leave`] looks like a crash to the service.
pub struct MembershipSession {
    pub node: u16,
    pub ids: Vec<u16>,
    /// Coordinators whose stray locks may be stolen (PILL).
    pub failed: FailedIds,
    link: Arc<MembershipLink>,
    stop: Arc<AtomicBool>,
}

impl MembershipSession {
    /// Start heartbeats, join through whichever replica leads (retrying for
    /// up to 10 s while the service starts or elects a leader), and follow
    /// its failure notices.
    pub fn join(membership: &[SocketAddr], node: u16, coordinators: u16, heartbeat_every: Duration) -> Result<MembershipSession, String> {
        let stop = Arc::new(AtomicBool::new(false));
        // Heartbeats to every membership replica (`pandora.txt` §3.2.4: to reach
        // a majority), each from a thread of its own on a connection of its own,
        // so a replica that is down or slow delays no other. They start before
        // the join: its answer waits for ZooKeeper, and the detector's clock for
        // this node starts when the join is stepped, not when it is answered.
        for addr in membership.to_vec() {
            let (stop, every) = (stop.clone(), heartbeat_every);
            std::thread::spawn(move || {
                crate::runner::prioritise_current_thread();
                let mut conn: Option<TcpStream> = None;
                while !stop.load(Ordering::Relaxed) {
                    if conn.is_none() {
                        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                            Ok(c) => {
                                let _ = c.set_nodelay(true);
                                conn = Some(c);
                            }
                            Err(e) => {
                                log::debug!("compute node {node}: cannot reach membership replica {addr}: {e}");
                                std::thread::sleep(Duration::from_millis(50));
                                continue;
                            }
                        }
                    }
                    if let Some(c) = conn.as_mut() {
                        if send_line(c, &ToMembership::Heartbeat(node)).is_err() {
                            conn = None;
                        }
                    }
                    std::thread::sleep(every);
                }
            });
        }
        // The service may be starting or electing a leader: retry for a while.
        let give_up = Instant::now() + Duration::from_secs(10);
        let (conn, lines, ids) = loop {
            match join_membership(membership, node, coordinators) {
                Ok(joined) => break joined,
                Err(JoinError::Unreachable(e)) if Instant::now() < give_up => {
                    log::info!("compute node {}: {e}; retrying", node);
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(JoinError::Unreachable(e) | JoinError::Refused(e)) => return Err(e),
            }
        };
        let failed = FailedIds::new();
        let link = Arc::new(MembershipLink { conn: Mutex::new(Some(conn)), lost: Mutex::new(None), is_lost: AtomicBool::new(false) });
        // Failure notices (stray locks of these coordinators may now be stolen),
        // and rejoining when the membership service goes away.
        {
            let (failed, stop, link, ids) = (failed.clone(), stop.clone(), link.clone(), ids.clone());
            let addrs = membership.to_vec();
            std::thread::spawn(move || {
                let mut lines = lines;
                loop {
                    for line in &mut lines {
                        let Ok(line) = line else { break };
                        if let Ok(FromMembership::Failed(ids)) = serde_json::from_str(&line) {
                            for id in ids {
                                failed.insert(id);
                            }
                        }
                    }
                    if let Some(c) = link.conn.lock().unwrap().take() {
                        let _ = c.shutdown(std::net::Shutdown::Both);
                    }
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    eprintln!("compute node {node}: lost the membership service; rejoining");
                    match rejoin_membership(&addrs, node, coordinators, &ids, &stop) {
                        Ok(Some((conn, more))) => {
                            eprintln!("compute node {node}: rejoined the membership service");
                            *link.conn.lock().unwrap() = Some(conn);
                            lines = more;
                        }
                        Ok(None) => return,
                        Err(why) => {
                            eprintln!("compute node {node}: {why}");
                            *link.lost.lock().unwrap() = Some(why);
                            link.is_lost.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            });
        }
        Ok(MembershipSession { node, ids, failed, link, stop })
    }

    /// Why this node must stop, once the service refused it or lost its ids.
    pub fn lost(&self) -> Option<String> {
        if self.link.is_lost.load(Ordering::Relaxed) {
            Some(self.link.lost.lock().unwrap().clone().unwrap_or_default())
        } else {
            None
        }
    }

    /// Every transaction finished: leave, so the silence that follows is not
    /// taken for a crash (waiting a little if a rejoin is under way).
    pub fn leave(self) {
        self.stop.store(true, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(w) = self.link.conn.lock().unwrap().as_mut() {
                let _ = send_line(w, &ToMembership::Leave(self.node));
                break;
            }
            if Instant::now() > until || self.link.is_lost.load(Ordering::SeqCst) {
                eprintln!("compute node {}: not connected to the membership service; it will take this exit for a crash", self.node);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for MembershipSession {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The compute server's side of its membership connection.
struct MembershipLink {
    /// The current connection (writes: heartbeats, leave); `None` while rejoining.
    conn: Mutex<Option<TcpStream>>,
    /// Why this compute server must stop: the service refused it or lost its ids.
    lost: Mutex<Option<String>>,
    is_lost: AtomicBool,
}

enum JoinError {
    /// Worth retrying: the service is down or went away mid-join.
    Unreachable(String),
    /// The service answered, with a no.
    Refused(String),
}

type Lines = std::io::Lines<BufReader<TcpStream>>;

/// Join through whichever replica leads: the connection, its reader
/// positioned after the answer, the ids.
fn join_membership(addrs: &[SocketAddr], node: u16, coordinators: u16) -> Result<(TcpStream, Lines, Vec<u16>), JoinError> {
    let mut why = Vec::new();
    for &addr in addrs {
        match join_one(addr, node, coordinators) {
            Err(JoinError::Unreachable(e)) => why.push(e),
            other => return other,
        }
    }
    Err(JoinError::Unreachable(why.join("; ")))
}

fn join_one(addr: SocketAddr, node: u16, coordinators: u16) -> Result<(TcpStream, Lines, Vec<u16>), JoinError> {
    let unreachable = |e: std::io::Error| JoinError::Unreachable(format!("cannot reach membership at {addr}: {e}"));
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(unreachable)?;
    let _ = conn.set_nodelay(true);
    send_line(&mut conn, &ToMembership::Join { node, coordinators }).map_err(unreachable)?;
    let mut lines = BufReader::new(conn.try_clone().map_err(unreachable)?).lines();
    let first = match lines.next() {
        Some(Ok(l)) => l,
        Some(Err(e)) => return Err(unreachable(e)),
        None => return Err(JoinError::Unreachable(format!("membership at {addr} closed the connection"))),
    };
    match serde_json::from_str::<FromMembership>(&first) {
        Ok(FromMembership::Assign(ids)) => Ok((conn, lines, ids)),
        Ok(FromMembership::Reject(why)) => Err(JoinError::Refused(format!("membership rejected compute node {node}: {why}"))),
        // A replica that does not lead (yet): try the others, and retry.
        Ok(FromMembership::NotLeader(leader)) => Err(JoinError::Unreachable(format!(
            "membership replica {addr} does not lead (leader: {})",
            leader.as_deref().unwrap_or("being elected")
        ))),
        Ok(FromMembership::Failed(_)) => Err(JoinError::Refused("membership answered a join with a failure notice".into())),
        Err(e) => Err(JoinError::Refused(format!("membership answered a join with '{first}': {e}"))),
    }
}

/// Rejoin with bounded exponential backoff until the service answers (or
/// `stop`: `Ok(None)`). A live node's retried join gets the same ids; other
/// ids mean the service lost its state, and a refusal means this node was
/// declared failed: either way this compute server must stop (`Err`).
fn rejoin_membership(addrs: &[SocketAddr], node: u16, coordinators: u16, ids: &[u16], stop: &AtomicBool) -> Result<Option<(TcpStream, Lines)>, String> {
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0u64;
    while !stop.load(Ordering::SeqCst) {
        attempts += 1;
        match join_membership(addrs, node, coordinators) {
            Ok((conn, lines, again)) if again == ids => return Ok(Some((conn, lines))),
            Ok((_, _, other)) => {
                return Err(format!("the membership service answered the rejoin with ids {other:?}, not {ids:?}: it lost its state; stopping"))
            }
            Err(JoinError::Refused(why)) => return Err(format!("{why}; stopping")),
            Err(JoinError::Unreachable(e)) => {
                if attempts == 20 {
                    log::warn!("compute node {node}: still rejoining after 20 attempts: {e}");
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
    }
    Ok(None)
}

/// Coordinator ids a compute server recorded next to its ledger.
pub fn read_ids(ledger: &std::path::Path) -> Result<Vec<u16>, String> {
    let p = ledger.with_extension("ids");
    let s = std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&s).map_err(|e| format!("bad ids file {}: {e}", p.display()))
}

/// Load the micro dataset (before compute servers join).
pub fn load_micro(memory: &TcpCluster, store: &StoreConfig, micro: &MicroSpec) -> Result<u64, String> {
    let layout = Arc::new(Layout::new(store)?);
    block_on_local(async {
        let loader_node = 0;
        let keys = memory.register(loader_node).await.map_err(|e| e.to_string())?;
        let f = memory.connect(loader_node, &keys).await.map_err(|e| e.to_string())?;
        let mut loader = tandem_dkvs::loader::Loader::new(&f, layout);
        micro.load(&mut loader).await.map_err(|e| e.to_string())?;
        loader.finish().await.map_err(|e| e.to_string())
    })
}

/// Read ledger files written by compute servers (alive or killed) into one ledger.
pub fn read_ledgers(paths: &[PathBuf]) -> Result<MicroLedger, String> {
    let mut total = MicroLedger::default();
    for p in paths {
        let bytes = std::fs::read(p).map_err(|e| format!("cannot read ledger {}: {e}", p.display()))?;
        for rec in bytes.chunks_exact(16) {
            total.writes_committed += u64::from_le_bytes(rec[..8].try_into().unwrap());
            total.in_doubt += u64::from_le_bytes(rec[8..].try_into().unwrap());
        }
    }
    Ok(total)
}

/// After the compute servers are gone: release stray locks of failed
/// coordinators, then check replicas, locks and the micro counters.
pub fn check_cluster(memory: &TcpCluster, store: &StoreConfig, micro: &MicroSpec, ledger: &MicroLedger, failed: &[u16]) -> Result<Vec<String>, String> {
    let layout = Arc::new(Layout::new(store)?);
    block_on_local(async {
        let checker = u16::MAX;
        let keys = memory.register(checker).await.map_err(|e| e.to_string())?;
        let f = memory.connect(checker, &keys).await.map_err(|e| e.to_string())?;
        let ids = FailedIds::new();
        for &id in failed {
            ids.insert(id);
        }
        sweep_stray_locks(&f, &layout, &ids).await.map_err(|e| e.to_string())?;
        let snap = tandem_dkvs::check::snapshot(&f, &layout, 0).await.map_err(|e| e.to_string())?;
        let mut v = snap.replica_mismatches();
        v.extend(snap.held_locks().into_iter().map(|(k, w)| format!("key {k}: lock {:#x} still held", w.0)));
        v.extend(tandem_workloads::micro::verify(micro, &snap.live(), ledger));
        Ok(v)
    })
}
