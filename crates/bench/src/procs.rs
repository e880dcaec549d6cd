//! Pandora as separate OS processes (DESIGN.md §4.1): a membership server and
//! compute servers, beside `tandem memory-server` processes, talking over TCP.
//! A crash is `kill -9`.
//!
//! Membership protocol: JSON lines on one TCP connection per compute server.
//! - compute → membership: `{"join":{"node":N,"coordinators":C}}`, then
//!   `{"heartbeat":N}` every timeout/5 from a thread of its own, and
//!   `{"leave":N}` on a clean shutdown;
//! - membership → compute: `{"assign":[ids]}` or `{"reject":"why"}`, and later
//!   `{"failed":[ids]}` pushes (only after log recovery, DESIGN.md §4.5 step 4).
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
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryCoordinator};
use tandem_dkvs::{ComputeNode, FailedIds, Layout, StoreConfig};
use tandem_fabric::tcp::TcpCluster;
use tandem_membership::{Command, Event, Membership, MembershipConfig, MembershipState, NodeStatus};
use tokio::sync::{mpsc, oneshot};
use zookeeper_client as zk;
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
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "lowercase")]
enum FromMembership {
    Assign(Vec<u16>),
    Reject(String),
    Failed(Vec<u16>),
}

fn send_line<T: Serialize>(w: &mut TcpStream, msg: &T) -> std::io::Result<()> {
    let mut s = serde_json::to_string(msg).map_err(std::io::Error::other)?;
    s.push('\n');
    w.write_all(s.as_bytes())
}

pub struct MembershipServerConfig {
    pub listener: TcpListener,
    pub memory: TcpCluster,
    pub store: StoreConfig,
    pub heartbeat_timeout: Duration,
    /// Keep the durable state in ZooKeeper (and resume from what it holds).
    pub zookeeper: Option<ZkState>,
    /// After resuming from ZooKeeper: how long compute servers get to
    /// reconnect before their silence counts.
    pub restore_grace: Duration,
}

/// ZooKeeper's acknowledgement of one state write.
type Ack = oneshot::Receiver<Result<(), String>>;

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

/// What the znode holds: the membership state, and which cluster it belongs to
/// (a state is never applied to another cluster's memory servers).
#[derive(Serialize, Deserialize)]
struct ZkRecord {
    cluster: String,
    state: MembershipState,
}

struct ZkWrite {
    /// `None`: a barrier, acknowledged once every write before it is.
    data: Option<Vec<u8>>,
    done: oneshot::Sender<Result<(), String>>,
}

/// The membership state in a ZooKeeper znode (`pandora.txt` §3.2.4). A
/// thread of its own runs the client (`zookeeper-client` on a tokio
/// current-thread runtime) and applies writes in the order they were queued,
/// each a compare-and-set on the znode version: a second membership process
/// writing the same znode makes the other's next write fail, and a failed
/// write stops the service that issued it.
pub struct ZkState {
    hosts: String,
    path: String,
    restored: Option<MembershipState>,
    tx: mpsc::UnboundedSender<ZkWrite>,
    cluster: String,
    fatal: Arc<Mutex<Option<String>>>,
}

impl ZkState {
    /// Connect to `hosts` (`host:port[,host:port...]`) and read `path`.
    /// `cluster` names the memory servers; a state stored for another
    /// cluster is refused.
    pub fn open(hosts: &str, path: &str, cluster: &str) -> Result<ZkState, String> {
        if !path.starts_with('/') || path.ends_with('/') {
            return Err(format!("ZooKeeper path '{path}' must start with '/' and not end with it"));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (init_tx, init_rx) = std_mpsc::channel();
        let fatal: Arc<Mutex<Option<String>>> = Arc::default();
        let (h, p, c, f) = (hosts.to_string(), path.to_string(), cluster.to_string(), fatal.clone());
        std::thread::Builder::new()
            .name("zookeeper".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => return drop(init_tx.send(Err(e.to_string()))),
                };
                rt.block_on(zk_writer(h, p, c, init_tx, rx, f));
            })
            .map_err(|e| e.to_string())?;
        let restored = init_rx.recv().map_err(|_| "the ZooKeeper thread died".to_string())??;
        Ok(ZkState { hosts: hosts.to_string(), path: path.to_string(), restored, tx, cluster: cluster.to_string(), fatal })
    }

    /// The state found in ZooKeeper when opened, if any.
    pub fn restored(&self) -> Option<&MembershipState> {
        self.restored.as_ref()
    }

    pub fn describe(&self) -> String {
        format!("{}{}", self.hosts, self.path)
    }

    /// Queue a write of `state` (or, with `None`, a barrier); the receiver
    /// answers once ZooKeeper acknowledged it and every write before it.
    fn write(&self, state: Option<&MembershipState>) -> Ack {
        let (done, ack) = oneshot::channel();
        let data = match state.map(|s| serde_json::to_vec(&ZkRecord { cluster: self.cluster.clone(), state: s.clone() })).transpose() {
            Ok(data) => data,
            Err(e) => {
                let _ = done.send(Err(e.to_string()));
                return ack;
            }
        };
        if let Err(mpsc::error::SendError(w)) = self.tx.send(ZkWrite { data, done }) {
            let _ = w.done.send(Err("the ZooKeeper writer stopped".into()));
        }
        ack
    }

    /// Why writing stopped, once it has.
    fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap().clone()
    }
}

async fn zk_writer(
    hosts: String,
    path: String,
    cluster: String,
    init: std_mpsc::Sender<Result<Option<MembershipState>, String>>,
    mut rx: mpsc::UnboundedReceiver<ZkWrite>,
    fatal: Arc<Mutex<Option<String>>>,
) {
    let connect = zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&hosts);
    let client = match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return drop(init.send(Err(format!("cannot connect to ZooKeeper at {hosts}: {e}")))),
        Err(_) => return drop(init.send(Err(format!("cannot connect to ZooKeeper at {hosts}: timed out")))),
    };
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut version = match client.get_data(&path).await {
        Ok((data, stat)) => match serde_json::from_slice::<ZkRecord>(&data) {
            Ok(r) if r.cluster == cluster => {
                let _ = init.send(Ok(Some(r.state)));
                Some(stat.version)
            }
            Ok(r) => {
                return drop(init.send(Err(format!(
                    "ZooKeeper {hosts}{path} holds the membership state of another cluster (memory servers {}); use another --zk-path",
                    r.cluster
                ))))
            }
            Err(e) => return drop(init.send(Err(format!("ZooKeeper {hosts}{path} holds no membership state: {e}")))),
        },
        Err(zk::Error::NoNode) => {
            // Created with the first write; its parent now.
            let parent = &path[..path.rfind('/').unwrap_or(0)];
            if !parent.is_empty() {
                if let Err(e) = client.mkdir(parent, &options).await {
                    return drop(init.send(Err(format!("cannot create {parent} in ZooKeeper at {hosts}: {e}"))));
                }
            }
            let _ = init.send(Ok(None));
            None
        }
        Err(e) => return drop(init.send(Err(format!("cannot read {path} from ZooKeeper at {hosts}: {e}")))),
    };
    while let Some(first) = rx.recv().await {
        // Writes queued meanwhile carry newer states: the last one covers them all.
        let mut batch = vec![first];
        while let Ok(w) = rx.try_recv() {
            batch.push(w);
        }
        let stopped = fatal.lock().unwrap().clone();
        let result = match (stopped, batch.iter().rev().find_map(|w| w.data.as_ref())) {
            (Some(e), _) => Err(e),
            (None, None) => Ok(()), // barriers only: everything before them is acknowledged
            (None, Some(data)) => {
                let r = zk_put(&client, &path, data, &options, &mut version).await;
                if let Err(e) = &r {
                    eprintln!("membership: {e}; stopping");
                    *fatal.lock().unwrap() = Some(e.clone());
                }
                r
            }
        };
        for w in batch {
            let _ = w.done.send(result.clone());
        }
    }
}

/// One compare-and-set write of the znode (a create if there is none yet).
/// A lost connection leaves the outcome unknown: read back and decide.
async fn zk_put(client: &zk::Client, path: &str, data: &[u8], options: &zk::CreateOptions<'_>, version: &mut Option<i32>) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = match *version {
            None => client.create(path, data, options).await.map(|(stat, _)| stat.version),
            Some(v) => client.set_data(path, data, Some(v)).await.map(|stat| stat.version),
        };
        match r {
            Ok(v) => {
                *version = Some(v);
                return Ok(());
            }
            Err(zk::Error::BadVersion) | Err(zk::Error::NodeExists) => {
                return Err(format!("another membership process wrote {path} in ZooKeeper (CAS on version {version:?} failed)"))
            }
            Err(e @ (zk::Error::ConnectionLoss | zk::Error::Timeout)) if Instant::now() < deadline => {
                log::warn!("membership: ZooKeeper write of {path}: {e}; checking what it holds");
                tokio::time::sleep(Duration::from_millis(50)).await;
                match client.get_data(path).await {
                    // Our write went through before the connection dropped.
                    Ok((held, stat)) if held == data && Some(stat.version) != *version => {
                        *version = Some(stat.version);
                        return Ok(());
                    }
                    Ok((_, stat)) if Some(stat.version) == *version => continue,
                    Err(zk::Error::NoNode) if version.is_none() => continue,
                    Err(zk::Error::ConnectionLoss | zk::Error::Timeout) => continue,
                    Ok(_) => return Err(format!("another membership process wrote {path} in ZooKeeper")),
                    Err(e) => return Err(format!("cannot read {path} back from ZooKeeper: {e}")),
                }
            }
            Err(e) => return Err(format!("cannot write {path} to ZooKeeper: {e}")),
        }
    }
}

/// Serve forever: admit compute servers, detect failures, recover, notify.
pub fn run_membership_server(cfg: MembershipServerConfig) -> Result<(), String> {
    let layout = Arc::new(Layout::new(&cfg.store)?);
    let mcfg = MembershipConfig {
        heartbeat_timeout_ns: cfg.heartbeat_timeout.as_nanos() as u64,
        id_space: cfg.store.log_slots,
        restore_grace_ns: cfg.restore_grace.as_nanos() as u64,
        ..MembershipConfig::default()
    };
    let base = Instant::now();
    let (m, reissued) = match cfg.zookeeper.as_ref().and_then(|z| z.restored.clone()) {
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
    let resumed = cfg.zookeeper.as_ref().is_some_and(|z| z.restored.is_some());
    let saved_epoch = AtomicU64::new(if resumed { u64::MAX } else { m.durable_epoch() });
    // Failed ids in a resumed state are durable: announce them to every joiner
    // (a crash may have cut their broadcast short).
    let subscribers = Subscribers { conns: Vec::new(), published: m.failed_ids().clone() };
    let shared = Arc::new(Shared { m: Mutex::new(m), subscribers: Mutex::new(subscribers), base, zookeeper: cfg.zookeeper, saved_epoch });
    let acceptor = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            for conn in cfg.listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || serve_compute(conn, shared));
            }
        })
    };
    let result = block_on_local(detector_loop(shared, cfg.memory, layout, cfg.heartbeat_timeout, reissued));
    drop(acceptor);
    result
}

fn serve_compute(conn: TcpStream, shared: Arc<Shared>) {
    let _ = conn.set_nodelay(true);
    let Ok(mut writer) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        match serde_json::from_str::<ToMembership>(&line) {
            Ok(ToMembership::Heartbeat(node)) => {
                // Heartbeats are not durable: they never wait for ZooKeeper.
                shared.m.lock().unwrap().step(shared.now(), Event::Heartbeat { node });
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
    let mut queue: std::collections::VecDeque<Command> = reissued.into();
    loop {
        while let Some(cmd) = queue.pop_front() {
            let next = match cmd {
                Command::Revoke { node } => {
                    detected.insert(node, Instant::now());
                    eprintln!("membership: compute node {node} missed its heartbeats; revoking its access");
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
    pub membership: SocketAddr,
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
    let (conn, lines, ids) = join_membership(cfg.membership, cfg.node, cfg.coordinators).map_err(|e| match e {
        JoinError::Unreachable(e) | JoinError::Refused(e) => e,
    })?;
    eprintln!("compute node {}: coordinators {:?}", cfg.node, ids);
    if let Some(p) = &cfg.ledger {
        std::fs::write(p.with_extension("ids"), serde_json::to_string(&ids).map_err(|e| e.to_string())?)
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    let failed = FailedIds::new();
    let stop = Arc::new(AtomicBool::new(false));
    let link = Arc::new(MembershipLink { conn: Mutex::new(Some(conn)), lost: Mutex::new(None), is_lost: AtomicBool::new(false) });
    // Failure notices (stray locks of these coordinators may now be stolen),
    // and rejoining when the membership service goes away.
    {
        let (failed, stop, link, ids) = (failed.clone(), stop.clone(), link.clone(), ids.clone());
        let (addr, node, coordinators) = (cfg.membership, cfg.node, cfg.coordinators);
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
                match rejoin_membership(addr, node, coordinators, &ids, &stop) {
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
    // Heartbeats from a thread of their own, on whichever connection is current.
    {
        let (stop, node, every, link) = (stop.clone(), cfg.node, cfg.heartbeat_every, link.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut conn = link.conn.lock().unwrap();
                if let Some(w) = conn.as_mut() {
                    if send_line(w, &ToMembership::Heartbeat(node)).is_err() {
                        // The reader notices too, and rejoins.
                        let _ = w.shutdown(std::net::Shutdown::Both);
                    }
                }
                drop(conn);
                std::thread::sleep(every);
            }
        });
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
    stop.store(true, Ordering::SeqCst);
    if result.as_ref().is_ok_and(|r| r.errors.is_empty()) {
        // Every transaction finished: leave, so silence is not taken for a
        // crash (waiting a little if a rejoin is under way).
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(w) = link.conn.lock().unwrap().as_mut() {
                let _ = send_line(w, &ToMembership::Leave(cfg.node));
                break;
            }
            if Instant::now() > until || link.is_lost.load(Ordering::SeqCst) {
                eprintln!("compute node {}: not connected to the membership service; it will take this exit for a crash", cfg.node);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    result
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

/// Connect and join: the connection, its reader positioned after the answer, the ids.
fn join_membership(addr: SocketAddr, node: u16, coordinators: u16) -> Result<(TcpStream, Lines, Vec<u16>), JoinError> {
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
        Ok(FromMembership::Failed(_)) => Err(JoinError::Refused("membership answered a join with a failure notice".into())),
        Err(e) => Err(JoinError::Refused(format!("membership answered a join with '{first}': {e}"))),
    }
}

/// Rejoin with bounded exponential backoff until the service answers (or
/// `stop`: `Ok(None)`). A live node's retried join gets the same ids; other
/// ids mean the service lost its state, and a refusal means this node was
/// declared failed: either way this compute server must stop (`Err`).
fn rejoin_membership(addr: SocketAddr, node: u16, coordinators: u16, ids: &[u16], stop: &AtomicBool) -> Result<Option<(TcpStream, Lines)>, String> {
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0u64;
    while !stop.load(Ordering::SeqCst) {
        attempts += 1;
        match join_membership(addr, node, coordinators) {
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
