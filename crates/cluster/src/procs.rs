//! Pandora as separate OS processes (docs/DESIGN.md §4.1): a membership server and
//! compute servers, beside `tandem pandora memory-server` processes, talking over TCP.
//! A crash is `kill -9`.
//!
//! Membership protocol: JSON lines over TCP.
//! - compute → membership, on its join connection:
//!   `{"join":{"node":N,"coordinators":C}}`, and `{"leave":N}` on a clean
//!   shutdown; on a heartbeat connection to every membership replica:
//!   `{"heartbeat":N}` every few ms from a thread of its own; a fenced node
//!   asks for a node id to come back under with `{"incarnation":{"of":N}}`;
//! - membership → compute: `{"assign":[ids]}`, `{"reject":"why"}`,
//!   `{"fenced":"why"}` (this node was declared failed: come back as a new
//!   incarnation), `{"node":M}` (the new incarnation's node id) or, from a
//!   replica that does not lead, `{"notleader":"addr"}`; later
//!   `{"failed":[ids]}` pushes (only after log recovery, docs/DESIGN.md §4.5 step
//!   4), and `{"fenced":"why"}` to a connected node once its access is revoked;
//! - follower replica → leader: `{"relay":{"replica":R,"nodes":[N...]}}`
//!   every tick: the nodes it heard from since its last relay.
//!
//! Membership replicas (Pandora paper §3.2.4, the distributed FD): with
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
//! (it restarted without its state), the compute server stops; if it says the
//! node was declared failed, the node comes back as a new incarnation
//! ([`compute`]; docs/PANDORA.md, "Fenced compute servers come back").
//!
//! With `--zookeeper` the membership service keeps its durable state
//! ([`MembershipState`](tandem_membership::MembershipState)) in a znode, as
//! Pandora does (Pandora paper §3.2.4): every step that changes it is written
//! (compare-and-set on the znode version) before anyone can observe its
//! effect, so a membership process restarted after `kill -9` resumes where
//! the crashed one stopped.
//!
//! Node ids: operators choose `1..FIRST_INCARNATION_ID` for compute servers;
//! the membership hands out `FIRST_INCARNATION_ID..=LAST_INCARNATION_ID` to
//! new incarnations; `0` loads, `u16::MAX - 2` is the membership's recovery
//! coordinator, `u16::MAX` is `check-cluster`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tandem_dkvs::recovery::{sweep_stray_locks_live, RecoveryBugs, RecoveryCoordinator};
use tandem_dkvs::{FailedIds, Layout, MemoryView, StoreConfig};
use tandem_fabric::auth::gate::Ticket;
use tandem_fabric::auth::Gate;
use tandem_fabric::tcp::TcpCluster;
use tandem_membership::{
    Command, Event, Fleet, FleetEvent, Membership, MembershipConfig, MemoryConfig, NodeStatus,
};

use crate::runner::block_on_local;
use crate::zk::{Ack, ZkState};

mod check;
pub(crate) mod compute;
mod fleet;
pub mod follow;
#[cfg(test)]
mod fuzz;
mod outbox;
pub(crate) mod session;
mod trust;
pub mod wait;

pub use trust::set_credentials;

pub use check::{check_cluster, classify_locks, load_micro, read_ledgers, ClusterCheck};
pub use compute::{
    fenced_ids, read_ids, read_incarnations, run_compute_server, ComputeServerConfig,
    ComputeServerReport, Incarnation, RespServing,
};
pub use session::{
    announce_replacement, new_incarnation, JoinError, Joiner, MembershipSession, MemorySignal,
    Stop, StopSignal,
};

/// Connections still in their handshake; a new one evicts the oldest.
const PENDING_MAX: usize = 32;
/// Authenticated connections (each compute node holds a join connection and
/// a heartbeat connection per replica).
const AUTHENTICATED_MAX: usize = 4096;

/// The node id the membership server joins under for its recovery coordinator.
const MEMBERSHIP_NODE: u16 = u16::MAX - 2;

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "lowercase")]
enum ToMembership {
    /// `layout`: the joiner's [`Layout::digest`] (0: not given, not checked).
    Join {
        node: u16,
        coordinators: u16,
        #[serde(default)]
        layout: u64,
    },
    Heartbeat(u16),
    Leave(u16),
    Relay {
        replica: u8,
        nodes: Vec<u16>,
    },
    /// A fenced compute node asks for a node id to come back under.
    Incarnation {
        of: u16,
    },
    /// A compute node applied memory configuration `epoch` and drained.
    Applied {
        node: u16,
        epoch: u64,
    },
    /// A replacement memory server for memory node `node` listens at `addr`.
    Replacement {
        node: u16,
        addr: String,
    },
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "lowercase")]
enum FromMembership {
    Assign(Vec<u16>),
    Reject(String),
    /// This replica does not lead; the leader it knows of, if any.
    NotLeader(Option<String>),
    Failed(Vec<u16>),
    /// This node was declared failed (a join of a failed node is answered
    /// with it, and a node connected when its revocation completes is told).
    Fenced(String),
    /// The node id for a new incarnation.
    Node(u16),
    /// The memory servers' configuration: hold new transactions, cut links to
    /// the down ones, drain, apply, answer `applied` (docs/DESIGN.md §4.6).
    Memory(MemoryConfig),
    /// Transactions may run again under memory configuration `epoch`.
    Resume(u64),
    /// A replacement memory server was accepted; it is filled and admitted
    /// once everyone holds.
    Replacing(String),
    /// The memory node to be replaced is not declared failed (yet).
    NotDown(String),
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
    /// Test-only: recovery bugs the log recovery re-injects (`tandem
    /// membership --inject-bug`, DART's process runs); default none.
    pub recovery_bugs: RecoveryBugs,
    /// Test-only planted bug (`--inject-bug publish-before-recovery`):
    /// publish a failed node's ids as soon as it is declared failed, not once
    /// its log recovery has finished, so live coordinators may steal its
    /// locks while its logged writes are still to be rolled forward or back.
    pub publish_before_recovery: bool,
    /// A memory server that answers no probe for this long is declared failed.
    pub memory_timeout: Duration,
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
    /// How regularly each node's heartbeats arrived here.
    gaps: Mutex<BTreeMap<u16, Gaps>>,
    /// Open heartbeat connections (by connection number): the detector looks
    /// for heartbeats waiting in them before a verdict.
    heartbeat_conns: Mutex<BTreeMap<u64, (u16, TcpStream)>>,
    next_conn: AtomicU64,
    /// Connections in their handshake, and how many are past it.
    gate: Gate,
    authenticated: std::sync::atomic::AtomicUsize,
}

impl Replica {
    /// Serve `listener` as replica `index` of `count`; relay every `tick`.
    /// Connections authenticate with this process's credentials
    /// ([`set_credentials`]); without them, every connection is refused.
    pub fn start(listener: TcpListener, index: u8, count: u8, tick: Duration) -> Arc<Replica> {
        let r = Arc::new(Replica {
            index,
            count,
            leader: Default::default(),
            leader_addr: Mutex::new(None),
            heard: Mutex::new(BTreeSet::new()),
            gaps: Mutex::default(),
            heartbeat_conns: Mutex::default(),
            next_conn: AtomicU64::new(0),
            gate: Gate::new(PENDING_MAX),
            authenticated: Default::default(),
        });
        let acceptor = r.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else {
                    // Typically out of descriptors: back off instead of spinning.
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                acceptor.admit(conn);
            }
        });
        if count > 1 {
            let relay = r.clone();
            std::thread::spawn(move || relay.relay_loop(tick));
        }
        r
    }

    /// Take a new connection into its handshake, evicting the oldest one in
    /// its handshake if there are too many: trickling sockets never crowd
    /// out the compute nodes.
    fn admit(self: &Arc<Self>, conn: TcpStream) {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        // No write to a connection waits for ever (a peer that stopped reading).
        let _ = conn.set_write_timeout(Some(outbox::WRITE_TIMEOUT));
        let Ok(ticket) = self.gate.admit(&conn) else {
            return;
        };
        let replica = self.clone();
        let spawned = std::thread::Builder::new()
            .name("membership-conn".into())
            .stack_size(256 << 10)
            .spawn(move || replica.authenticate_and_serve(id, conn, ticket));
        if let Err(e) = spawned {
            log::warn!("membership: cannot serve a connection: {e}");
        }
    }

    fn authenticate_and_serve(self: Arc<Self>, id: u64, mut conn: TcpStream, ticket: Ticket) {
        let deadline = Instant::now() + tandem_fabric::auth::HANDSHAKE_DEADLINE;
        let who = trust::credentials()
            .map_err(|e| e.to_string())
            .and_then(|keys| {
                (self.gate)
                    .authenticate(ticket, &mut conn, &keys, &trust::MEMBERSHIP_ROLES, deadline)
                    .map_err(|e| e.to_string())
            });
        let who = match who {
            Ok(who) => who,
            Err(e) => {
                log::warn!(
                    "membership: connection from {:?} refused: {e}",
                    conn.peer_addr().ok()
                );
                return;
            }
        };
        let n = self.authenticated.fetch_add(1, Ordering::SeqCst);
        if n < AUTHENTICATED_MAX {
            serve_compute(conn, &self, id, who);
        } else {
            log::warn!(
                "membership: {n} connections: refusing {} {}",
                who.role,
                who.id
            );
        }
        self.authenticated.fetch_sub(1, Ordering::SeqCst);
    }

    /// Nodes whose heartbeats arrived here but wait unread in the kernel (a
    /// reader thread not scheduled yet, on a loaded machine): they count as
    /// heard now, so the detector judges senders, not its own readers.
    pub fn unread_heartbeats(&self) -> BTreeSet<u16> {
        let conns = self.heartbeat_conns.lock().unwrap();
        conns
            .values()
            .filter(|(_, c)| tandem_fabric::auth::gate::bytes_waiting(c) > 0)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Record who leads (what the leader znode holds).
    pub fn set_leader(&self, addr: &str) {
        *self.leader_addr.lock().unwrap() = Some(addr.to_string());
    }

    fn relay_loop(&self, tick: Duration) {
        let mut conn: Option<(String, TcpStream)> = None;
        while self.leader.get().is_none() {
            std::thread::sleep(tick);
            let Some(addr) = self.leader_addr.lock().unwrap().clone() else {
                continue;
            };
            if conn.as_ref().is_some_and(|(a, _)| *a != addr) {
                conn = None; // a new leader
            }
            if conn.is_none() {
                let me = ToMembership::Relay {
                    replica: self.index,
                    nodes: Vec::new(),
                };
                match addr
                    .parse::<SocketAddr>()
                    .map_err(|e| e.to_string())
                    .and_then(|a| trust::dial(a, tick, &me).map_err(|e| e.to_string()))
                {
                    Ok(c) => {
                        let _ = c.set_nodelay(true);
                        conn = Some((addr, c));
                    }
                    Err(e) => {
                        log::debug!(
                            "membership replica {}: cannot reach the leader at {addr}: {e}",
                            self.index
                        );
                        continue;
                    }
                }
            }
            // Relaying to the leader is hearing from it: the service's own
            // node (its recovery coordinator) is vouched for by every replica
            // connected to it.
            let mut heard = std::mem::take(&mut *self.heard.lock().unwrap());
            heard.extend(self.unread_heartbeats());
            heard.insert(MEMBERSHIP_NODE);
            let nodes: Vec<u16> = heard.into_iter().collect();
            let (_, c) = conn.as_mut().expect("connected above");
            if send_line(
                c,
                &ToMembership::Relay {
                    replica: self.index,
                    nodes,
                },
            )
            .is_err()
            {
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
    /// Memory-server events from connection threads, for the detector loop.
    fleet_events: Mutex<Vec<FleetEvent>>,
    /// The store's [`Layout::digest`]: joiners must lay it out the same.
    layout: u64,
}

/// Admitted compute servers, and the failed ids announced to them so far
/// (one lock: a joiner's catch-up notice and a broadcast never interleave,
/// and no announcement falls between them).
struct Subscribers {
    /// Each admitted compute node's announcements (never blocking).
    conns: outbox::Outboxes,
    /// Failed ids published (after they were durable), minus recycled ones.
    published: BTreeSet<u16>,
    /// The memory configuration last broadcast, and the epoch last resumed.
    memory: Option<(MemoryConfig, Option<u64>)>,
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
        subs.conns.send_all(&[outbox::line(&msg)]);
    }
    /// Tell `node`, if it is still connected, that it was declared failed
    /// and fenced off: it stops and comes back as a new incarnation.
    fn tell_fenced(&self, node: u16) {
        let msg = FromMembership::Fenced(format!(
            "compute node {node} was declared failed and its access revoked"
        ));
        let mut subs = self.subscribers.lock().unwrap();
        subs.conns.send_last(node, outbox::line(&msg));
    }
    /// Tell every compute server a new memory configuration, or that
    /// transactions resume under `resume`.
    fn broadcast_memory(&self, config: Option<MemoryConfig>, resume: Option<u64>) {
        let mut subs = self.subscribers.lock().unwrap();
        let mut msgs = Vec::new();
        if let Some(c) = config {
            msgs.push(FromMembership::Memory(c.clone()));
            subs.memory = Some((c, None));
        }
        if let Some(e) = resume {
            msgs.push(FromMembership::Resume(e));
            if let Some((_, r)) = subs.memory.as_mut() {
                *r = Some(e);
            }
        }
        let lines: Vec<_> = msgs.iter().map(outbox::line).collect();
        subs.conns.send_all(&lines);
    }
    /// Admit a compute server to the announcements; tell it every failed id
    /// announced so far (later ones reach it by [`Shared::publish_failed`])
    /// and the memory configuration.
    fn subscribe(&self, node: u16, w: TcpStream) -> std::io::Result<()> {
        let mut subs = self.subscribers.lock().unwrap();
        let mut first = Vec::new();
        if !subs.published.is_empty() {
            let ids = subs.published.iter().copied().collect();
            first.push(outbox::line(&FromMembership::Failed(ids)));
        }
        if let Some((config, resumed)) = &subs.memory {
            let msgs = fleet::on_subscribe(config, *resumed);
            first.extend(msgs.iter().map(outbox::line));
        }
        subs.conns.add(node, w, first)
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
            ack.await
                .unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
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
            ack.await
                .unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
        }
        Ok(cmds)
    }
}

fn wait_blocking(ack: Option<Ack>) -> Result<(), String> {
    match ack {
        None => Ok(()),
        Some(ack) => ack
            .blocking_recv()
            .unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into())),
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
    let (mut m, reissued) = match cfg.zookeeper.as_ref().and_then(|z| z.restored().cloned()) {
        Some(state) => {
            let mut m = Membership::restore(mcfg, state, 0)
                .map_err(|e| format!("the state in ZooKeeper is unusable: {e}"))?;
            let reissued = m.reissue_after_restore();
            let s = m.snapshot();
            let count = |st: NodeStatus| {
                s.nodes
                    .iter()
                    .filter(|(&n, x)| x.status == st && n != MEMBERSHIP_NODE)
                    .count()
            };
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
    let stored_memory = cfg
        .zookeeper
        .as_ref()
        .and_then(|z| z.restored())
        .and_then(|s| s.memory.clone());
    let memory_timeout_ns = cfg.memory_timeout.as_nanos() as u64;
    let fleet = match stored_memory {
        Some(config) => Fleet::restore(config, memory_timeout_ns),
        None => Fleet::new(
            cfg.memory.addrs.iter().map(|a| a.to_string()).collect(),
            memory_timeout_ns,
        ),
    };
    // One fewer memory node down at once than there are copies of each partition.
    m.attach_fleet(fleet.tolerating(cfg.store.replicas.saturating_sub(1) as usize));
    // A resumed service writes its state once at start (the version moves
    // on): a previous incarnation that is still running fails its next write.
    let resumed = cfg
        .zookeeper
        .as_ref()
        .is_some_and(|z| z.restored().is_some());
    let saved_epoch = AtomicU64::new(if resumed { u64::MAX } else { m.durable_epoch() });
    // Failed ids in a resumed state are durable: announce them to every joiner
    // (a crash may have cut their broadcast short).
    let subscribers = Subscribers {
        conns: outbox::Outboxes::default(),
        published: m.failed_ids().clone(),
        memory: m.fleet().map(|f| (f.config().clone(), f.resumed_epoch())),
    };
    let shared = Arc::new(Shared {
        m: Mutex::new(m),
        subscribers: Mutex::new(subscribers),
        base,
        zookeeper: cfg.zookeeper,
        saved_epoch,
        fleet_events: Mutex::default(),
        layout: layout.digest(),
    });
    if cfg.replica.leader.set(shared.clone()).is_err() {
        return Err("this membership replica already leads".into());
    }
    let recovery = Recovery {
        layout,
        bugs: cfg.recovery_bugs,
        publish_early: cfg.publish_before_recovery,
    };
    block_on_local(detector_loop(
        shared,
        cfg.replica,
        cfg.memory,
        recovery,
        (cfg.heartbeat_timeout, cfg.memory_timeout),
        reissued,
    ))
}

/// Forgets a heartbeat connection when its reader thread ends.
struct HeartbeatConn<'a>(&'a Replica, u64);

impl Drop for HeartbeatConn<'_> {
    fn drop(&mut self) {
        self.0.heartbeat_conns.lock().unwrap().remove(&self.1);
    }
}

/// One authenticated connection: lines of at most [`trust::line_max`]
/// bytes, each speaking only for `who` ([`ToMembership::allowed_from`]).
fn serve_compute(conn: TcpStream, replica: &Replica, id: u64, who: tandem_fabric::auth::Peer) {
    let _ = conn.set_nodelay(true);
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    let _forget = HeartbeatConn(replica, id);
    let (mut reader, mut buf) = (BufReader::with_capacity(8 << 10, conn), Vec::new());
    let max = trust::line_max(who.role);
    loop {
        let line = match trust::next_line(&mut reader, &mut buf, max) {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                log::warn!("membership: {} {}: {e}; closing it", who.role, who.id);
                return;
            }
        };
        let msg = match serde_json::from_str::<ToMembership>(&line) {
            Ok(msg) if msg.allowed_from(who) => msg,
            Ok(msg) => {
                log::warn!(
                    "membership: {} {} spoke for {:?}; closing it",
                    who.role,
                    who.id,
                    msg.speaker()
                );
                return;
            }
            Err(e) => {
                log::warn!(
                    "membership: bad message from {} {} ({e}); closing it",
                    who.role,
                    who.id
                );
                return;
            }
        };
        if let ToMembership::Heartbeat(node) = msg {
            replica
                .gaps
                .lock()
                .unwrap()
                .entry(node)
                .or_default()
                .heard();
            if let std::collections::btree_map::Entry::Vacant(e) =
                replica.heartbeat_conns.lock().unwrap().entry(id)
            {
                if let Ok(c) = writer.try_clone() {
                    e.insert((node, c));
                }
            }
        }
        let keep = match replica.leader.get() {
            None => serve_as_follower(replica, &mut writer, msg),
            Some(shared) => serve_as_leader(shared, replica, &mut writer, msg),
        };
        if !keep {
            return;
        }
    }
}

/// Not leading (yet): collect heartbeats for the leader, send joiners there.
/// `false`: close the connection.
fn serve_as_follower(replica: &Replica, writer: &mut TcpStream, msg: ToMembership) -> bool {
    match msg {
        ToMembership::Heartbeat(node) => {
            replica.heard.lock().unwrap().insert(node);
            true
        }
        ToMembership::Join { .. }
        | ToMembership::Incarnation { .. }
        | ToMembership::Replacement { .. } => {
            let leader = replica.leader_addr.lock().unwrap().clone();
            send_line(writer, &FromMembership::NotLeader(leader)).is_ok()
        }
        ToMembership::Leave(_) | ToMembership::Relay { .. } | ToMembership::Applied { .. } => true,
    }
}

/// `false`: close the connection.
fn serve_as_leader(
    shared: &Shared,
    replica: &Replica,
    writer: &mut TcpStream,
    msg: ToMembership,
) -> bool {
    match msg {
        ToMembership::Heartbeat(node) => {
            // Heartbeats are not durable: they never wait for ZooKeeper.
            shared
                .m
                .lock()
                .unwrap()
                .step(shared.now(), Event::Heartbeat { node });
        }
        ToMembership::Relay { replica, nodes } => {
            shared
                .m
                .lock()
                .unwrap()
                .step(shared.now(), Event::Relay { replica, nodes });
        }
        ToMembership::Leave(node) => {
            let ack = {
                let mut m = shared.m.lock().unwrap();
                m.step(shared.now(), Event::Leave { node });
                shared.save(&m, false)
            };
            if let Err(e) = wait_blocking(ack) {
                eprintln!("membership: cannot record that compute node {node} left: {e}");
                return false;
            }
            let gaps = replica
                .gaps
                .lock()
                .unwrap()
                .remove(&node)
                .unwrap_or_default();
            eprintln!("membership: compute node {node} left ({gaps})");
        }
        ToMembership::Join {
            node,
            coordinators: _,
            layout,
        } if layout != 0 && layout != shared.layout => {
            let why = format!("compute node {node} lays the store out otherwise than this membership service (digest {layout:016x}, here {:016x}): every process of a cluster needs the same store flags (--memory, --replicas, --keys, --log-slots, --resp-keys, --slot-bytes)", shared.layout);
            eprintln!("membership: refused {why}");
            return send_line(writer, &FromMembership::Reject(why)).is_ok();
        }
        ToMembership::Join {
            node, coordinators, ..
        } => return answer_join(shared, writer, node, coordinators),
        ToMembership::Incarnation { of } => return answer_incarnation(shared, writer, of),
        ToMembership::Applied { node, epoch } => {
            shared
                .fleet_events
                .lock()
                .unwrap()
                .push(FleetEvent::Applied {
                    compute: node,
                    epoch,
                })
        }
        ToMembership::Replacement { node, addr } => {
            return answer_replacement(shared, writer, node, addr)
        }
    }
    true
}

/// Take a replacement memory server for a down memory node (the detector
/// loop fills and admits it); refuse one for a node that is up.
fn answer_replacement(shared: &Shared, writer: &mut TcpStream, node: u16, addr: String) -> bool {
    let down = shared
        .m
        .lock()
        .unwrap()
        .fleet()
        .is_some_and(|f| f.config().down.contains(&node));
    let msg = if down {
        eprintln!("membership: a replacement for memory node {node} listens at {addr}");
        shared
            .fleet_events
            .lock()
            .unwrap()
            .push(FleetEvent::Replacement { node, addr });
        FromMembership::Replacing(format!("memory node {node} will be filled and admitted"))
    } else {
        FromMembership::NotDown(format!("memory node {node} is not declared failed"))
    };
    send_line(writer, &msg).is_ok()
}

/// Step a join; answer with the ids once they are durable, and admit the
/// node to the failure notices. A node known as failed (or gone) is told it
/// is fenced: it must come back under a new node id.
fn answer_join(shared: &Shared, writer: &mut TcpStream, node: u16, coordinators: u16) -> bool {
    let (reply, known, ack) = {
        let mut m = shared.m.lock().unwrap();
        let known = m.status(node);
        let cmds = m.step(shared.now(), Event::Join { node, coordinators });
        (cmds.into_iter().next(), known, shared.save(&m, true))
    };
    // The ids go out only once ZooKeeper holds them (a retried join waits
    // for the first one's write): a restarted service must never hand them
    // to anyone else.
    if let Err(e) = wait_blocking(ack) {
        eprintln!("membership: cannot record the join of compute node {node}: {e}");
        return false;
    }
    let msg = match reply {
        Some(Command::AssignIds { ids, .. }) => FromMembership::Assign(ids),
        Some(Command::Reject { reason, .. }) if known.is_some_and(|s| s != NodeStatus::Alive) => {
            FromMembership::Fenced(reason)
        }
        Some(Command::Reject { reason, .. }) => FromMembership::Reject(reason),
        other => FromMembership::Reject(format!("unexpected {other:?}")),
    };
    let admitted = matches!(msg, FromMembership::Assign(_));
    if send_line(writer, &msg).is_err() {
        return false;
    }
    if !admitted {
        return true;
    }
    if known == Some(NodeStatus::Alive) {
        eprintln!("membership: compute node {node} rejoined");
    } else {
        eprintln!("membership: compute node {node} joined with {coordinators} coordinators");
    }
    writer
        .try_clone()
        .and_then(|w| shared.subscribe(node, w))
        .is_ok()
}

/// A fenced node asks for a node id to come back under (durable first).
fn answer_incarnation(shared: &Shared, writer: &mut TcpStream, of: u16) -> bool {
    let (id, ack) = {
        let mut m = shared.m.lock().unwrap();
        let id = m.new_incarnation();
        (id, shared.save(&m, true))
    };
    if let Err(e) = wait_blocking(ack) {
        eprintln!("membership: cannot record a new incarnation of compute node {of}: {e}");
        return false;
    }
    let msg = match id {
        Some(id) => {
            eprintln!("membership: compute node {of} comes back as compute node {id}");
            FromMembership::Node(id)
        }
        None => FromMembership::Reject("no node ids are left for new incarnations".into()),
    };
    send_line(writer, &msg).is_ok()
}

/// Heartbeats of one compute node as this replica received them: how
/// regular they were (to choose a detector timeout from; docs/PANDORA.md,
/// "Failure detector for processes").
#[derive(Default)]
struct Gaps {
    last: Option<Instant>,
    count: u64,
    largest: Duration,
}

impl Gaps {
    fn heard(&mut self) {
        let now = Instant::now();
        if let Some(t) = self.last {
            self.largest = self.largest.max(now - t);
        }
        self.last = Some(now);
        self.count += 1;
    }
}

impl std::fmt::Display for Gaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} heartbeats here, largest gap {:.1} ms",
            self.count,
            self.largest.as_secs_f64() * 1e3
        )
    }
}

/// What log recovery works from: the layout, and the test-only bug switches.
struct Recovery {
    layout: Arc<Layout>,
    bugs: RecoveryBugs,
    /// The planted `publish-before-recovery`.
    publish_early: bool,
}

async fn detector_loop(
    shared: Arc<Shared>,
    replica: Arc<Replica>,
    memory: TcpCluster,
    recovery: Recovery,
    (timeout, memory_timeout): (Duration, Duration),
    reissued: Vec<Command>,
) -> Result<(), String> {
    // A resumed service gets its own id back (a retried join of a live node).
    let rc_id = match shared
        .step_durably(Event::Join {
            node: MEMBERSHIP_NODE,
            coordinators: 1,
        })
        .await?
        .pop()
    {
        Some(Command::AssignIds { ids, .. }) => ids[0],
        other => {
            return Err(format!(
                "membership cannot reserve its recovery coordinator id: {other:?}"
            ))
        }
    };
    let config = shared
        .m
        .lock()
        .unwrap()
        .fleet()
        .expect("attached at start")
        .config()
        .clone();
    let links = Rc::new(fleet::MemoryLinks::connect(memory, &config).await?);
    let tick = (timeout / 20).max(Duration::from_micros(100));
    links.start_probes(tick);
    let mut d = Detector {
        shared: shared.clone(),
        links: links.clone(),
        recovery,
        rc_id,
        failed_ids: FailedIds::new(),
        detected: BTreeMap::new(),
        swept: BTreeSet::new(),
        restored_revokes: BTreeSet::new(),
        retries: BTreeMap::new(),
        patience: (memory_timeout * 4).max(Duration::from_secs(1)),
    };
    // A resumed service's stray-lock scans cover the ids failed before the restart too.
    for &id in shared.m.lock().unwrap().failed_ids() {
        d.failed_ids.insert(id);
    }
    // Work a previous incarnation left half done goes first.
    d.restored_revokes = reissued
        .iter()
        .filter_map(|c| match c {
            Command::TerminateLinks { node } => Some(*node),
            _ => None,
        })
        .collect();
    let mut queue: VecDeque<Command> = reissued.into();
    loop {
        let mut later = VecDeque::new();
        while let Some(cmd) = queue.pop_front() {
            if d.must_wait(&cmd) {
                later.push_back(cmd);
                continue;
            }
            // A memory server that hangs (not dead, not answering) must not
            // stall the loop that declares it failed.
            let done = tokio::time::timeout(d.patience, d.execute(cmd.clone())).await;
            let done =
                done.unwrap_or_else(|_| Err(format!("{cmd:?} took longer than {:?}", d.patience)));
            match done {
                Ok(Some(next)) => queue.extend(shared.step_durably(next).await?),
                Ok(None) => {}
                Err(e) => {
                    d.retry_later(&cmd, &e)?;
                    later.push_back(cmd);
                }
            }
        }
        queue.append(&mut later);
        if let Some(e) = shared.zookeeper.as_ref().and_then(|z| z.fatal()) {
            return Err(e);
        }
        fleet::tick(&shared, &links, &d.recovery.layout, d.recovery.bugs).await?;
        if !d.holding() {
            let view = links.view.clone();
            let swept = &mut d.swept;
            let sweep = sweep_when_idle(&shared, &links.fabric, &d.recovery.layout, &view, swept);
            match tokio::time::timeout(d.patience, sweep).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::warn!("membership: {e}; the next idle tick tries again"),
                Err(_) => log::warn!(
                    "membership: the idle sweep took too long; the next idle tick tries again"
                ),
            }
        }
        tokio::time::sleep(tick).await;
        queue.extend(compute_tick(&shared, &replica).await?);
    }
}

/// Heartbeats waiting unread count; then a tick of the compute detector.
async fn compute_tick(shared: &Shared, replica: &Replica) -> Result<Vec<Command>, String> {
    let (cmds, ack) = {
        let unread = replica.unread_heartbeats();
        let mut m = shared.m.lock().unwrap();
        for node in unread.into_iter().chain([MEMBERSHIP_NODE]) {
            m.step(shared.now(), Event::Heartbeat { node });
        }
        let cmds = m.step(shared.now(), Event::Tick);
        let ack = shared.save(&m, !cmds.is_empty());
        (cmds, ack)
    };
    if let Some(ack) = ack {
        ack.await
            .unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
    }
    Ok(cmds)
}

/// Versions the recovery coordinator mints must never repeat: every
/// recovery or retirement takes its own block of the 48-bit counter,
/// reserved in the durable state before use, so a service resumed from
/// ZooKeeper (same recovery-coordinator id) continues after it.
const RC_VERSION_BLOCK: u64 = 1 << 24;

/// How often a command may fail on the memory servers before the service gives up.
const MAX_RETRIES: u32 = 10_000;

/// The detector loop's state: what it acts through and what it remembers.
struct Detector {
    shared: Arc<Shared>,
    links: Rc<fleet::MemoryLinks>,
    recovery: Recovery,
    rc_id: u16,
    failed_ids: FailedIds,
    /// When each compute node was declared failed.
    detected: BTreeMap<u16, Instant>,
    /// Failed ids whose stray locks the last idle sweep released.
    swept: BTreeSet<u16>,
    /// Revocations a previous incarnation of the service had started.
    restored_revokes: BTreeSet<u16>,
    /// Failures of each command on the memory servers so far.
    retries: BTreeMap<String, u32>,
    /// How long one command may take before it counts as failed.
    patience: Duration,
}

impl Detector {
    fn holding(&self) -> bool {
        let m = self.shared.m.lock().unwrap();
        m.fleet().is_some_and(|f| f.holding())
    }

    fn quiesced(&self) -> bool {
        self.shared
            .m
            .lock()
            .unwrap()
            .fleet_quiesced(MEMBERSHIP_NODE)
    }

    /// While memory servers are reconfigured, log recovery waits until no
    /// transaction runs anywhere (its records may name a lost primary), and
    /// scans wait for the new primaries.
    fn must_wait(&self, cmd: &Command) -> bool {
        match cmd {
            Command::Recover { .. } => self.holding() && !self.quiesced(),
            Command::ScanStrayLocks { .. } => self.holding(),
            _ => false,
        }
    }

    /// A command failed on the memory servers (one may have just died): it
    /// runs again once the fleet has caught up.
    fn retry_later(&mut self, cmd: &Command, e: &str) -> Result<(), String> {
        let n = self.retries.entry(format!("{cmd:?}")).or_default();
        *n += 1;
        if *n == 1 {
            eprintln!("membership: {e}; retrying once the memory servers are sorted out");
        }
        if *n > MAX_RETRIES {
            return Err(format!("{e} (gave up after {MAX_RETRIES} attempts)"));
        }
        Ok(())
    }

    /// Carry out one command; the event that reports it done, if any.
    async fn execute(&mut self, cmd: Command) -> Result<Option<Event>, String> {
        match cmd {
            Command::TerminateLinks { node } => self.revoke(node).await.map(Some),
            Command::Recover { node, ids, .. } => self.recover(node, &ids).await.map(Some),
            Command::NotifyFailed { ids } => {
                self.notify_failed(&ids);
                Ok(None)
            }
            Command::ScanStrayLocks { ids } => self.scan(ids).await,
            Command::AssignIds { .. } | Command::Reject { .. } => Ok(None),
        }
    }

    async fn revoke(&mut self, node: u16) -> Result<Event, String> {
        let first = !self.detected.contains_key(&node);
        if first && self.recovery.publish_early {
            self.publish_early(node);
        }
        self.detected.entry(node).or_insert_with(Instant::now);
        if self.restored_revokes.remove(&node) {
            eprintln!("membership: compute node {node} was declared failed before the restart; revoking its access again");
        } else if first {
            let views = self
                .shared
                .m
                .lock()
                .unwrap()
                .replica_views(node, self.shared.now());
            let views: Vec<String> = views
                .iter()
                .enumerate()
                .map(|(r, v)| match v {
                    (Some(ago), Some(heard)) => format!(
                        "replica {r}: reported {} us ago, had heard it {} us before",
                        ago / 1000,
                        heard / 1000
                    ),
                    _ => format!("replica {r}: not reporting"),
                })
                .collect();
            eprintln!(
                "membership: compute node {node} missed its heartbeats ({}); revoking its access",
                views.join("; ")
            );
        }
        let live = self.links.live();
        let memory = self.links.memory.borrow().clone();
        memory
            .revoke_on(&live, node)
            .await
            .map_err(|e| format!("revocation of node {node} failed: {e}"))?;
        self.shared.tell_fenced(node);
        Ok(Event::LinksTerminated { node })
    }

    /// The planted `publish-before-recovery`: `node`'s ids go out as failed
    /// as soon as it is declared, before its revocation and log recovery.
    fn publish_early(&self, node: u16) {
        let ids = self.shared.m.lock().unwrap().ids_of(node).to_vec();
        eprintln!("membership: (planted bug) publishing the failed ids of node {node} before its revocation and log recovery");
        self.shared.publish_failed(&ids);
    }

    async fn recover(&mut self, node: u16, ids: &[u16]) -> Result<Event, String> {
        let t = Instant::now();
        let quiesced = self.quiesced();
        let rc_versions = self.shared.reserve_version_block().await? * RC_VERSION_BLOCK;
        let mut rc =
            RecoveryCoordinator::new(&self.links.fabric, self.recovery.layout.clone(), self.rc_id)
                .with_version_counter(rc_versions)
                .with_view(self.links.view.clone(), quiesced);
        rc.bugs = self.recovery.bugs;
        let report = rc
            .recover(ids)
            .await
            .map_err(|e| format!("log recovery of node {node} failed: {e}"))?;
        eprintln!(
            "membership: recovered node {node} in {} us{}: {} logs, {} rolled forward, {} rolled back, {} locks released",
            t.elapsed().as_micros(),
            if quiesced { " (while every compute node held)" } else { "" },
            report.logs_found,
            report.rolled_forward,
            report.rolled_back,
            report.locks_released
        );
        Ok(Event::RecoveryDone { node })
    }

    fn notify_failed(&mut self, ids: &[u16]) {
        for &id in ids {
            self.failed_ids.insert(id);
        }
        self.shared.publish_failed(ids);
        let owner = self.shared.m.lock().unwrap().owner_of(ids[0]).unwrap_or(0);
        match self.detected.get(&owner) {
            Some(t) => eprintln!(
                "membership: failed ids of node {owner} published {} us after detection; stealing may start (ids {ids:?})",
                t.elapsed().as_micros()
            ),
            None => eprintln!("membership: failed ids of node {owner} published (detected before a restart); stealing may start (ids {ids:?})"),
        }
    }

    async fn scan(&mut self, ids: Vec<u16>) -> Result<Option<Event>, String> {
        let (fabric, layout, view) = (&self.links.fabric, &self.recovery.layout, &self.links.view);
        let n = sweep_stray_locks_live(fabric, layout, &self.failed_ids, view)
            .await
            .map_err(|e| format!("stray-lock scan failed: {e}"))?;
        // No version minted by a recycled id may survive its reuse.
        let rc_versions = self.shared.reserve_version_block().await? * RC_VERSION_BLOCK;
        let retired = RecoveryCoordinator::new(fabric, layout.clone(), self.rc_id)
            .with_version_counter(rc_versions)
            .with_view(view.clone(), false)
            .retire_versions(&ids)
            .await
            .map_err(|e| format!("retiring the versions of recycled ids failed: {e}"))?;
        let Some(retired) = retired else {
            eprintln!("membership: objects of the failed ids stayed locked; their ids are not recycled yet");
            return Ok(None);
        };
        eprintln!("membership: rewrote {retired} versions minted by ids about to be recycled");
        eprintln!(
            "membership: released {n} stray locks; {} ids can be reused",
            ids.len()
        );
        // Joiners must not be told these are failed once they can be handed out again.
        self.shared
            .subscribers
            .lock()
            .unwrap()
            .published
            .retain(|id| !ids.contains(id));
        // Nor may a later scan release the locks of their next owners.
        for &id in &ids {
            self.failed_ids.remove(id);
        }
        Ok(Some(Event::ScanDone { ids }))
    }
}

/// The failed ids to sweep now, if no compute node is left to steal their
/// stray locks (none alive, none being declared failed) and some failed
/// since the last sweep (`swept`).
fn idle_sweep_due(m: &Membership, swept: &BTreeSet<u16>) -> Option<BTreeSet<u16>> {
    let busy = |s: NodeStatus| {
        matches!(
            s,
            NodeStatus::Alive | NodeStatus::Revoking | NodeStatus::Recovering
        )
    };
    let idle = !m.nodes().any(|(n, s)| n != MEMBERSHIP_NODE && busy(s));
    (idle && !m.failed_ids().is_subset(swept)).then(|| m.failed_ids().clone())
}

/// When no compute node is left, nobody steals the stray locks of failed
/// coordinators (legitimate until stolen or swept, docs/DESIGN.md §4.5): release
/// them, as the background scan does, once per new set of failed ids.
async fn sweep_when_idle<F: tandem_fabric::Fabric>(
    shared: &Shared,
    fabric: &F,
    layout: &Layout,
    view: &MemoryView,
    swept: &mut BTreeSet<u16>,
) -> Result<(), String> {
    let Some(ids) = idle_sweep_due(&shared.m.lock().unwrap(), swept) else {
        return Ok(());
    };
    let failed = FailedIds::new();
    for &id in &ids {
        failed.insert(id);
    }
    let n = sweep_stray_locks_live(fabric, layout, &failed, view)
        .await
        .map_err(|e| format!("stray-lock scan failed: {e}"))?;
    eprintln!(
        "membership: no compute node is left; released {n} stray locks of {} failed coordinators",
        ids.len()
    );
    *swept = ids;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heartbeat that reached the kernel counts before a reader thread
    /// got to it (a loaded machine): the detector judges the sender.
    #[test]
    fn heartbeats_waiting_unread_count_as_heard() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let replica = Replica::start(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            0,
            1,
            Duration::from_millis(10),
        );
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (received, _) = listener.accept().unwrap();
        replica
            .heartbeat_conns
            .lock()
            .unwrap()
            .insert(1, (4, received));
        assert!(replica.unread_heartbeats().is_empty(), "nothing sent yet");
        send_line(&mut sender, &ToMembership::Heartbeat(4)).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while replica.unread_heartbeats().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(replica.unread_heartbeats(), BTreeSet::from([4]));
    }

    /// The membership sweeps stray locks only when no compute node is left
    /// to steal them, and once per new set of failed ids.
    #[test]
    fn stray_locks_are_swept_when_no_compute_node_is_left() {
        let mut m = Membership::new(MembershipConfig {
            heartbeat_timeout_ns: 100,
            ..MembershipConfig::default()
        });
        m.step(
            0,
            Event::Join {
                node: MEMBERSHIP_NODE,
                coordinators: 1,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 2,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 2,
            },
        );
        let none = BTreeSet::new();
        assert_eq!(idle_sweep_due(&m, &none), None, "nothing failed");
        // Node 1 fails and is recovered while node 2 lives: node 2 steals.
        for t in (10..=200).step_by(10) {
            m.step(t, Event::Heartbeat { node: 2 });
            m.step(
                t,
                Event::Heartbeat {
                    node: MEMBERSHIP_NODE,
                },
            );
            m.step(t, Event::Tick);
        }
        m.step(201, Event::LinksTerminated { node: 1 });
        m.step(202, Event::RecoveryDone { node: 1 });
        assert_eq!(m.failed_ids().len(), 2);
        assert_eq!(idle_sweep_due(&m, &none), None, "node 2 is alive");
        // Node 2 leaves: the membership's own node does not count.
        m.step(203, Event::Leave { node: 2 });
        let due = idle_sweep_due(&m, &none).expect("nobody is left");
        assert_eq!(&due, m.failed_ids());
        assert_eq!(idle_sweep_due(&m, &due), None, "swept already");
    }
}
