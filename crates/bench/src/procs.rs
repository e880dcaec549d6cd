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
//! A compute server records its acknowledged writes in a ledger file (one
//! 16-byte record per coordinator: committed writes, writes in doubt), updated
//! around every transaction with `pwrite`, so the file survives `kill -9` and
//! the post-run check knows what was acknowledged.

use std::cell::RefCell;
use std::collections::BTreeMap;
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
use tandem_membership::{Command, Event, Membership, MembershipConfig};
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
}

struct Shared {
    m: Mutex<Membership>,
    subscribers: Mutex<Vec<TcpStream>>,
    base: Instant,
}

impl Shared {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
    fn broadcast(&self, msg: &FromMembership) {
        self.subscribers.lock().unwrap().retain_mut(|w| send_line(w, msg).is_ok());
    }
}

/// Serve forever: admit compute servers, detect failures, recover, notify.
pub fn run_membership_server(cfg: MembershipServerConfig) -> Result<(), String> {
    let layout = Arc::new(Layout::new(&cfg.store)?);
    let shared = Arc::new(Shared {
        m: Mutex::new(Membership::new(MembershipConfig {
            heartbeat_timeout_ns: cfg.heartbeat_timeout.as_nanos() as u64,
            id_space: cfg.store.log_slots,
            ..MembershipConfig::default()
        })),
        subscribers: Mutex::new(Vec::new()),
        base: Instant::now(),
    });
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
    let result = block_on_local(detector_loop(shared, cfg.memory, layout, cfg.heartbeat_timeout));
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
                shared.m.lock().unwrap().step(shared.now(), Event::Heartbeat { node });
            }
            Ok(ToMembership::Leave(node)) => {
                shared.m.lock().unwrap().step(shared.now(), Event::Leave { node });
                eprintln!("membership: compute node {node} left");
            }
            Ok(ToMembership::Join { node, coordinators }) => {
                let (reply, failed) = {
                    let mut m = shared.m.lock().unwrap();
                    let cmds = m.step(shared.now(), Event::Join { node, coordinators });
                    let failed: Vec<u16> = m.failed_ids().iter().copied().collect();
                    (cmds.into_iter().next(), failed)
                };
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
                    eprintln!("membership: compute node {node} joined with {coordinators} coordinators");
                    if !failed.is_empty() && send_line(&mut writer, &FromMembership::Failed(failed)).is_err() {
                        return;
                    }
                    if let Ok(w) = writer.try_clone() {
                        shared.subscribers.lock().unwrap().push(w);
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

async fn detector_loop(shared: Arc<Shared>, memory: TcpCluster, layout: Arc<Layout>, timeout: Duration) -> Result<(), String> {
    let rc_id = match shared.m.lock().unwrap().step(shared.now(), Event::Join { node: MEMBERSHIP_NODE, coordinators: 1 }).pop() {
        Some(Command::AssignIds { ids, .. }) => ids[0],
        other => return Err(format!("membership cannot reserve its recovery coordinator id: {other:?}")),
    };
    let keys = memory.register(MEMBERSHIP_NODE).await.map_err(|e| format!("cannot register with the memory servers: {e}"))?;
    let fabric = memory.connect(MEMBERSHIP_NODE, &keys).await.map_err(|e| format!("cannot connect to the memory servers: {e}"))?;
    let failed_ids = FailedIds::new();
    let mut detected: BTreeMap<u16, Instant> = BTreeMap::new();
    let tick = (timeout / 20).max(Duration::from_micros(100));
    loop {
        tokio::time::sleep(tick).await;
        let mut queue: std::collections::VecDeque<Command> = {
            let mut m = shared.m.lock().unwrap();
            m.step(shared.now(), Event::Heartbeat { node: MEMBERSHIP_NODE });
            m.step(shared.now(), Event::Tick).into()
        };
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
                    let report = RecoveryCoordinator::new(&fabric, layout.clone(), rc_id)
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
                    shared.broadcast(&FromMembership::Failed(ids.clone()));
                    let owner = shared.m.lock().unwrap().owner_of(ids[0]);
                    if let Some(t) = owner.and_then(|n| detected.get(&n)) {
                        eprintln!(
                            "membership: failed ids of node {} published {} us after detection; stealing may start",
                            owner.unwrap_or(0),
                            t.elapsed().as_micros()
                        );
                    }
                    continue;
                }
                Command::ScanStrayLocks { ids } => {
                    let n = sweep_stray_locks(&fabric, &layout, &failed_ids).await.map_err(|e| format!("stray-lock scan failed: {e}"))?;
                    eprintln!("membership: released {n} stray locks; {} ids can be reused", ids.len());
                    Event::ScanDone { ids }
                }
                Command::AssignIds { .. } | Command::Reject { .. } => continue,
            };
            let more = shared.m.lock().unwrap().step(shared.now(), next);
            queue.extend(more);
        }
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
    let mut conn = TcpStream::connect(cfg.membership).map_err(|e| format!("cannot reach membership at {}: {e}", cfg.membership))?;
    let _ = conn.set_nodelay(true);
    send_line(&mut conn, &ToMembership::Join { node: cfg.node, coordinators: cfg.coordinators }).map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?).lines();
    let first = lines.next().ok_or("membership closed the connection")?.map_err(|e| e.to_string())?;
    let ids = match serde_json::from_str::<FromMembership>(&first).map_err(|e| e.to_string())? {
        FromMembership::Assign(ids) => ids,
        FromMembership::Reject(why) => return Err(format!("membership rejected compute node {}: {why}", cfg.node)),
        FromMembership::Failed(_) => return Err("membership answered a join with a failure notice".into()),
    };
    eprintln!("compute node {}: coordinators {:?}", cfg.node, ids);
    if let Some(p) = &cfg.ledger {
        std::fs::write(p.with_extension("ids"), serde_json::to_string(&ids).map_err(|e| e.to_string())?)
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    let failed = FailedIds::new();
    let stop = Arc::new(AtomicBool::new(false));
    // Failure notices: stray locks of these coordinators may now be stolen.
    {
        let failed = failed.clone();
        std::thread::spawn(move || {
            for line in lines {
                let Ok(line) = line else { return };
                if let Ok(FromMembership::Failed(ids)) = serde_json::from_str(&line) {
                    for id in ids {
                        failed.insert(id);
                    }
                }
            }
        });
    }
    // Heartbeats from a thread of their own.
    {
        let (stop, node, every) = (stop.clone(), cfg.node, cfg.heartbeat_every);
        let mut w = conn.try_clone().map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if send_line(&mut w, &ToMembership::Heartbeat(node)).is_err() {
                    return;
                }
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
            let (ledger, committed, errors, aborted) = (ledger.clone(), committed.clone(), errors.clone(), aborted.clone());
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
        // Every transaction finished: leave, so silence is not taken for a crash.
        let _ = send_line(&mut conn, &ToMembership::Leave(cfg.node));
    }
    result
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
