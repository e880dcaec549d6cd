//! `tandem pandora compute-server` (docs/DESIGN.md §4.1 and §4.5): register with the
//! memory servers first, then join the membership and heartbeat, and run the
//! micro workload. A compute server that is fenced (a verb came back
//! `Revoked`, its ids were published as failed, it was told so, or its
//! rejoin was refused) aborts its in-flight transactions (outcomes in
//! doubt), stops issuing verbs, and comes back as a new incarnation: a node
//! id from the membership, new coordinator ids, new keys (Pandora paper
//! §3.2.2, Fig. 8 "reuse"). It keeps running the workload for the rest of
//! its duration.
//!
//! The ledger (one 16-byte record per coordinator slot: committed writes,
//! writes in doubt, cumulative over incarnations) is updated around every
//! transaction with `pwrite`, so it survives `kill -9`. Next to it, the ids
//! file lists every incarnation: node id, coordinator ids, and why it was
//! fenced; `check-cluster` counts fenced incarnations' ids as failed.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tandem_dkvs::{ComputeNode, Coordinator, Layout, StoreConfig, TxError};
use tandem_fabric::tcp::{is_fenced, TcpCluster, TcpFabric};
use tandem_sim::Rng;
use tandem_workloads::micro::{MicroClient, MicroLedger, MicroSpec};
use tokio::sync::watch;

use super::follow::{follow_memory, overdue_verdict, register_live, Gate, MemoryState};
use super::session::{new_incarnation, JoinError, Joiner, MembershipSession, Stop, StopSignal};
use super::wait::wait_for_listeners;
use crate::resp::{serve, Front, FrontConfig, Keyspace, Live};
use crate::runner::block_on_local;

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
    /// How long to wait for the memory servers and the membership service.
    pub patience: Duration,
    /// How long a memory server the membership has up may stay unreachable
    /// (a commit waits for a verdict on it, or its link is down) before
    /// this incarnation ends and recovery settles its commits
    /// ([`overdue_verdict`]). Longer than the membership's memory timeout.
    pub verdict_patience: Duration,
    /// Serve Redis's protocol here instead of running the micro workload.
    pub resp: Option<RespServing>,
}

/// A compute server's RESP port: clients' commands run as transactions on
/// its coordinators (`crate::resp`), incarnation after incarnation.
pub struct RespServing {
    pub listener: std::net::TcpListener,
    pub front: FrontConfig,
    /// The table the keys live in, and its slot size.
    pub table: tandem_dkvs::TableId,
    pub slot_bytes: u32,
}

#[derive(Serialize, Debug)]
pub struct ComputeServerReport {
    pub node: u16,
    pub committed: u64,
    pub aborted: u64,
    pub locks_stolen: u64,
    /// Commits per 100 ms since the workload started.
    pub timeline_100ms: Vec<u64>,
    pub errors: Vec<String>,
    /// Every incarnation, the first under `node`.
    pub incarnations: Vec<Incarnation>,
    /// How it reached memory: "shm" (the servers' regions mapped here) or "tcp".
    pub links: &'static str,
}

/// One incarnation of a compute node, as the ids file records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Incarnation {
    pub node: u16,
    /// Its coordinator ids (empty if it was fenced before it joined).
    pub ids: Vec<u16>,
    /// Why it was fenced, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced: Option<String>,
}

/// Register, join, run the micro workload for `duration` (as new
/// incarnations after every fencing), leave, report.
pub fn run_compute_server(cfg: ComputeServerConfig) -> Result<ComputeServerReport, String> {
    let mut cfg = cfg;
    let layout = Arc::new(Layout::new(&cfg.store)?);
    let ledger = Ledger::create(cfg.ledger.as_deref())?;
    let mut seeds = Rng::new(cfg.seed ^ cfg.node as u64);
    let resp = cfg.resp.take();
    let clients = match resp {
        Some(_) => Vec::new(),
        None => (0..cfg.coordinators)
            .map(|_| MicroClient::new(cfg.micro.clone(), seeds.next_u64()))
            .collect(),
    };
    let who = format!("compute node {}", cfg.node);
    wait_for_listeners(&who, "memory server", &cfg.memory.addrs, cfg.patience)?;
    let server = Rc::new(Server {
        // A silent data link fails within a second, not the kernel's 15
        // minutes; a memory server behind it that stays up ends the
        // incarnation (`overdue_verdict`).
        memory: Rc::new(MemoryState::new(cfg.memory.clone().bounding_silence())),
        cfg,
        layout,
        ledger,
        tally: Tally::default(),
        front: None,
    });
    block_on_local(async move {
        let server = match resp {
            Some(r) => with_front(server, r)?,
            None => server,
        };
        server.run(clients).await
    })
}

/// `server`, serving RESP on `r`'s listener (commands answer `-CLUSTERDOWN`
/// until an incarnation opens).
fn with_front(server: Rc<Server>, r: RespServing) -> Result<Rc<Server>, String> {
    let mut server = Rc::into_inner(server).expect("not shared yet");
    let ks = Keyspace::new(r.table, r.slot_bytes as usize, server.cfg.node);
    let front = Rc::new(Front::down(r.front, ks, "joining the cluster"));
    r.listener
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::from_std(r.listener).map_err(|e| e.to_string())?;
    tokio::task::spawn_local(serve(listener, front.clone()));
    server.front = Some(front);
    Ok(Rc::new(server))
}

struct Server {
    cfg: ComputeServerConfig,
    /// The memory servers as the newest configuration applied has them.
    memory: Rc<MemoryState>,
    layout: Arc<Layout>,
    ledger: Ledger,
    tally: Tally,
    /// The RESP front end, if this server serves one.
    front: Option<Rc<Front<TcpFabric>>>,
}

/// Totals over every coordinator of every incarnation.
#[derive(Default)]
struct Tally {
    committed: Cell<u64>,
    aborted: Cell<u64>,
    stolen: Cell<u64>,
    errors: RefCell<Vec<String>>,
    links: Cell<&'static str>,
}

/// Why an incarnation could not start.
enum Start {
    Fenced(String),
    Failed(String),
}

/// How an incarnation ended.
enum End {
    /// The run's duration is over.
    Deadline,
    Fenced(String),
    /// Every coordinator stopped on an error (recorded in the tally).
    Stopped,
}

impl Server {
    async fn run(
        self: Rc<Self>,
        mut clients: Vec<MicroClient>,
    ) -> Result<ComputeServerReport, String> {
        let mut node = self.cfg.node;
        let mut incarnations: Vec<Incarnation> = Vec::new();
        let mut timeline = None;
        loop {
            let (session, fabric) = match self.start_incarnation(node).await {
                Ok(started) => started,
                Err(Start::Fenced(why)) => {
                    eprintln!("compute node {node}: fenced before it started ({why}); coming back as a new incarnation");
                    incarnations.push(Incarnation {
                        node,
                        ids: Vec::new(),
                        fenced: Some(why),
                    });
                    self.ledger.write_ids(&incarnations)?;
                    node = self.next_node(node).await?;
                    continue;
                }
                Err(Start::Failed(e)) => return Err(e),
            };
            let sampler = timeline.get_or_insert_with(|| Sampler::start(self.clone()));
            incarnations.push(Incarnation {
                node,
                ids: session.ids.clone(),
                fenced: None,
            });
            self.ledger.write_ids(&incarnations)?;
            eprintln!("compute node {node}: coordinators {:?}", session.ids);
            let end;
            (clients, end) = self
                .clone()
                .run_incarnation(&session, fabric, clients, sampler.deadline)
                .await;
            match end {
                End::Deadline => {
                    tokio::task::spawn_blocking(move || session.leave())
                        .await
                        .map_err(|e| e.to_string())?;
                    break;
                }
                End::Stopped => break,
                End::Fenced(why) => {
                    eprintln!("compute node {node}: fenced ({why}); in-flight transactions aborted (outcomes in doubt); coming back as a new incarnation");
                    incarnations.last_mut().expect("pushed above").fenced = Some(why);
                    self.ledger.write_ids(&incarnations)?;
                    drop(session);
                    if Instant::now() >= sampler.deadline {
                        break;
                    }
                    node = self.next_node(node).await?;
                }
            }
        }
        let timeline_100ms = match timeline {
            Some(s) => s.task.await.map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        let t = &self.tally;
        Ok(ComputeServerReport {
            node: self.cfg.node,
            committed: t.committed.get(),
            aborted: t.aborted.get(),
            locks_stolen: t.stolen.get(),
            timeline_100ms,
            errors: t.errors.borrow().clone(),
            incarnations,
            links: t.links.get(),
        })
    }

    /// Register with the memory servers, connect, then join the membership
    /// (heartbeats start with the join): the detector can judge this node
    /// only once it holds keys that a revocation takes away.
    async fn start_incarnation(&self, node: u16) -> Result<(MembershipSession, TcpFabric), Start> {
        let memory = self.memory.cluster();
        let servers = memory
            .addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",");
        // Servers known to be down, or gone, get no key (the membership's
        // first configuration says which; transactions wait for it).
        let keys = match register_live(&memory, node, &self.memory.down()).await {
            Ok(keys) => keys,
            Err(e) if is_fenced(&e) => {
                return Err(Start::Fenced(format!(
                    "the memory servers refuse compute node {node}: it was fenced"
                )))
            }
            Err(e) => {
                return Err(Start::Failed(format!(
                    "compute node {node} cannot register with the memory servers {servers}: {e}"
                )))
            }
        };
        let fabric = memory.connect_live(node, &keys).await.map_err(|e| {
            Start::Failed(format!(
                "compute node {node} cannot connect to the memory servers {servers}: {e}"
            ))
        })?;
        let shm = tandem_fabric::Fabric::executes_at_post(&fabric);
        self.tally.links.set(if shm { "shm" } else { "tcp" });
        let c = &self.cfg;
        let joiner = Joiner {
            node,
            coordinators: c.coordinators,
            layout: self.layout.digest(),
        };
        let (addrs, every, patience) = (c.membership.clone(), c.heartbeat_every, c.patience);
        let joined = tokio::task::spawn_blocking(move || {
            MembershipSession::join_within(&addrs, joiner, every, patience)
        })
        .await
        .map_err(|e| Start::Failed(e.to_string()))?;
        match joined {
            Ok(session) => Ok((session, fabric)),
            Err(JoinError::Fenced(why)) => Err(Start::Fenced(why)),
            Err(e) => Err(Start::Failed(e.to_string())),
        }
    }

    /// A node id from the membership service to come back under.
    async fn next_node(&self, of: u16) -> Result<u16, String> {
        let (addrs, patience) = (self.cfg.membership.clone(), self.cfg.patience);
        let node = tokio::task::spawn_blocking(move || new_incarnation(&addrs, of, patience))
            .await
            .map_err(|e| e.to_string())??;
        eprintln!("compute node {of}: comes back as compute node {node}");
        Ok(node)
    }

    /// Drive one coordinator per client until the deadline or a stop; the
    /// clients come back (their ledgers go on in the next incarnation).
    async fn run_incarnation(
        self: Rc<Self>,
        session: &MembershipSession,
        fabric: TcpFabric,
        clients: Vec<MicroClient>,
        deadline: Instant,
    ) -> (Vec<MicroClient>, End) {
        let view = self.memory.view();
        let compute = ComputeNode::with_memory_view(
            fabric,
            &self.cfg.store,
            self.layout.clone(),
            session.failed.clone(),
            view,
        );
        let (stop, _) = watch::channel(None);
        let stop = Rc::new(stop);
        let watcher =
            tokio::task::spawn_local(watch_session(session.signal(), stop.clone(), deadline));
        let gate = Rc::new(Gate::default());
        let follower = follow_memory(
            session.node,
            session.memory(),
            compute.clone(),
            gate.clone(),
            self.memory.clone(),
        );
        let stopper = stop.clone();
        let conductor = tokio::task::spawn_local(async move {
            let why = follower.await;
            stop_with(&stopper, why);
        });
        let (stopper, c, patience) = (stop.clone(), compute.clone(), self.cfg.verdict_patience);
        let overdue = tokio::task::spawn_local(async move {
            let (m, why) = overdue_verdict(&c, patience).await;
            let why = format!("memory server {m}, which the membership has up, unreachable for {patience:?} ({why}); its recovery settles the commits in doubt");
            stop_with(&stopper, Stop::Fenced(why));
        });
        if let Some(front) = &self.front {
            lend_until_stopped(front, session, &compute, &gate, &stop, deadline).await;
        }
        let mut tasks = Vec::new();
        for (k, (client, &id)) in clients.into_iter().zip(&session.ids).enumerate() {
            let driver = Driver {
                server: self.clone(),
                slot: k,
                stop: stop.clone(),
                gate: gate.clone(),
                deadline,
            };
            tasks.push(tokio::task::spawn_local(
                driver.drive(compute.coordinator(id), client),
            ));
        }
        let mut back = Vec::new();
        for t in tasks {
            back.push(t.await.expect("a coordinator task panicked"));
        }
        watcher.abort();
        conductor.abort();
        overdue.abort();
        let end = match stop.borrow().clone() {
            Some(Stop::Fenced(why)) => End::Fenced(why),
            Some(Stop::Lost(why)) => {
                self.tally
                    .errors
                    .borrow_mut()
                    .push(format!("compute node {}: {why}", session.node));
                End::Stopped
            }
            None if Instant::now() >= deadline => End::Deadline,
            None => End::Stopped,
        };
        (back, end)
    }
}

/// Lend this incarnation's coordinators to the RESP clients until it ends.
async fn lend_until_stopped(
    front: &Front<TcpFabric>,
    session: &MembershipSession,
    compute: &Rc<ComputeNode<TcpFabric>>,
    gate: &Rc<Gate>,
    stop: &Rc<watch::Sender<Option<Stop>>>,
    deadline: Instant,
) {
    let coords = session
        .ids
        .iter()
        .map(|&id| compute.coordinator(id))
        .collect();
    let live = Live {
        gate: Some(gate.clone()),
        stop: stop.clone(),
    };
    front.lender.open(session.node, coords, live);
    let mut ended = stop.subscribe();
    let until = tokio::time::Instant::from_std(deadline);
    let _ = tokio::time::timeout_at(until, ended.wait_for(|s| s.is_some())).await;
    let why = match &*stop.borrow() {
        Some(why) => why.to_string(),
        None => "the run is over".to_string(),
    };
    front.lender.close(&why);
}

/// Pass the session's verdict (fenced, or lost) on to the coordinators.
async fn watch_session(
    signal: StopSignal,
    stop: Rc<watch::Sender<Option<Stop>>>,
    deadline: Instant,
) {
    while Instant::now() < deadline {
        if let Some(why) = signal.get() {
            stop_with(&stop, why);
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The first reason sticks.
pub(crate) fn stop_with(stop: &watch::Sender<Option<Stop>>, why: Stop) {
    stop.send_if_modified(|s| s.is_none() && s.replace(why).is_none());
}

/// One coordinator's loop.
struct Driver {
    server: Rc<Server>,
    slot: usize,
    stop: Rc<watch::Sender<Option<Stop>>>,
    gate: Rc<Gate>,
    deadline: Instant,
}

impl Driver {
    async fn drive(
        self,
        mut coord: Coordinator<TcpFabric>,
        mut client: MicroClient,
    ) -> MicroClient {
        let (tally, ops) = (&self.server.tally, self.server.cfg.micro.ops_per_tx as u64);
        let mut stop = self.stop.subscribe();
        while Instant::now() < self.deadline && stop.borrow().is_none() {
            // A memory reconfiguration holds new transactions (not past
            // the deadline: a membership that went away never resumes them;
            // nor once fenced: the membership resumes only its live members).
            let entered = self.gate.enter_unless_stopped(self.deadline, &mut stop);
            let Some(_in_flight) = entered.await else {
                break;
            };
            // Before: this transaction's writes are in doubt until it answers.
            self.record(&client, ops);
            // Fenced: abort in flight (as a crash would), stop issuing verbs.
            let fenced = stop.wait_for(|s| matches!(s, Some(Stop::Fenced(_))));
            let outcome = tokio::select! {
                r = client.run_one(&mut coord) => Some(r),
                _ = fenced => None,
            };
            match outcome {
                None => abort_in_flight(&client),
                Some(Ok(true)) => tally.committed.set(tally.committed.get() + 1),
                Some(Ok(false)) => tally.aborted.set(tally.aborted.get() + 1),
                // A memory node was lost under it; its writes are in doubt
                // (the ledger counted them) and the membership reconfigures.
                Some(Err(TxError::Unavailable)) => tally.aborted.set(tally.aborted.get() + 1),
                Some(Err(TxError::Revoked)) => stop_with(
                    &self.stop,
                    Stop::Fenced(format!(
                        "coordinator {}: a verb came back Revoked",
                        coord.id()
                    )),
                ),
                Some(Err(e)) => {
                    tally
                        .errors
                        .borrow_mut()
                        .push(format!("coordinator {}: {e}", coord.id()));
                    self.record(&client, 0);
                    break;
                }
            }
            self.record(&client, 0);
            // Verbs on mapped regions (shm) complete without suspending: give
            // the heartbeats, the follower and the other coordinators a turn.
            tokio::task::yield_now().await;
        }
        tally
            .stolen
            .set(tally.stolen.get() + coord.stats.locks_stolen);
        client
    }

    fn record(&self, client: &MicroClient, pending: u64) {
        self.server
            .ledger
            .record(self.slot, &client.ledger.borrow(), pending);
    }
}

/// A transaction dropped mid-flight: the writes of a commit under way are in doubt.
fn abort_in_flight(client: &MicroClient) {
    let mut l = client.ledger.borrow_mut();
    let pending = std::mem::take(&mut l.pending);
    l.in_doubt += pending;
}

/// Samples the commit count every 100 ms from the first incarnation's start
/// to the deadline.
struct Sampler {
    deadline: Instant,
    task: tokio::task::JoinHandle<Vec<u64>>,
}

impl Sampler {
    fn start(server: Rc<Server>) -> Sampler {
        let deadline = Instant::now() + server.cfg.duration;
        let task = tokio::task::spawn_local(async move {
            let (mut timeline, mut last) = (Vec::new(), 0);
            while Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let c = server.tally.committed.get();
                timeline.push(c - last);
                last = c;
            }
            timeline
        });
        Sampler { deadline, task }
    }
}

/// The ledger file and the ids file next to it.
struct Ledger {
    file: Option<std::fs::File>,
    path: Option<PathBuf>,
}

impl Ledger {
    fn create(path: Option<&Path>) -> Result<Ledger, String> {
        let file = match path {
            Some(p) => Some(
                std::fs::File::create(p)
                    .map_err(|e| format!("cannot create ledger {}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(Ledger {
            file,
            path: path.map(Path::to_path_buf),
        })
    }

    /// Slot `k`'s acknowledged writes, and its writes in doubt plus `pending`.
    fn record(&self, k: usize, l: &MicroLedger, pending: u64) {
        if let Some(f) = &self.file {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&l.writes_committed.to_le_bytes());
            b[8..].copy_from_slice(&(l.in_doubt + pending).to_le_bytes());
            let _ = f.write_at(&b, 16 * k as u64);
        }
    }

    /// Replace the ids file (atomically: a `kill -9` leaves the old or the new one).
    fn write_ids(&self, incarnations: &[Incarnation]) -> Result<(), String> {
        let Some(p) = &self.path else { return Ok(()) };
        let (ids, tmp) = (p.with_extension("ids"), p.with_extension("ids.tmp"));
        let json = serde_json::to_string(incarnations).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, json)
            .and_then(|_| std::fs::rename(&tmp, &ids))
            .map_err(|e| format!("cannot write {}: {e}", ids.display()))
    }
}

/// Every incarnation a compute server recorded next to its ledger (none if
/// it never joined). An ids file written before incarnations existed (a
/// bare list of ids) reads as one incarnation of node 0.
pub fn read_incarnations(ledger: &Path) -> Result<Vec<Incarnation>, String> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IdsFile {
        Incarnations(Vec<Incarnation>),
        Ids(Vec<u16>),
    }
    let p = ledger.with_extension("ids");
    let s = match std::fs::read_to_string(&p) {
        Ok(s) => s,
        // Killed before its first incarnation joined: it held no ids.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && ledger.exists() => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(format!("cannot read {}: {e}", p.display())),
    };
    match serde_json::from_str(&s).map_err(|e| format!("bad ids file {}: {e}", p.display()))? {
        IdsFile::Incarnations(v) => Ok(v),
        IdsFile::Ids(ids) => Ok(vec![Incarnation {
            node: 0,
            ids,
            fenced: None,
        }]),
    }
}

/// Coordinator ids of every incarnation a compute server recorded next to its ledger.
pub fn read_ids(ledger: &Path) -> Result<Vec<u16>, String> {
    Ok(read_incarnations(ledger)?
        .into_iter()
        .flat_map(|i| i.ids)
        .collect())
}

/// Coordinator ids of the fenced incarnations recorded next to a ledger.
pub fn fenced_ids(ledger: &Path) -> Result<Vec<u16>, String> {
    Ok(read_incarnations(ledger)?
        .into_iter()
        .filter(|i| i.fenced.is_some())
        .flat_map(|i| i.ids)
        .collect())
}
