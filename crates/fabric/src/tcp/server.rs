//! A memory server: accepts connections for one [`MemoryNode`] and serves its
//! one-sided verbs over TCP (docs/DESIGN.md §3, "tcp" and "Access control").
//!
//! Threads: the acceptor (the caller of [`serve`]), one short-lived thread
//! per connection for its handshake, and the polling threads of
//! [`poller`](super::poller) that read, execute and answer verbs (one by
//! default; see [`Polling`]).
//!
//! Every connection first runs the mutual handshake of `tandem_auth` within
//! one deadline, reading nothing but its fixed-size messages: as the admin
//! role or as the compute role. At most [`PENDING_MAX`] connections may be
//! unauthenticated at once; a new one evicts the oldest, so sockets that
//! trickle bytes can never crowd out the membership's Register and Revoke.
//! Only authenticated connections count toward [`CONNECTIONS_MAX`]. Then
//! the connection's first frame decides what it is:
//! - `Hello { compute, key }` opens a data connection if
//!   [`MemoryNode::is_authorized`] accepts the key; it is then handed to the
//!   poller and its thread ends.
//! - `Admin` (on an admin-authenticated connection) opens a control connection for `Register`, `Revoke`
//!   and `Info`, answered by its own thread: they are rare and touch only
//!   the node's key table, so they need not queue behind verbs.
//!
//! A wrong key or role gets a `Reject` and the connection is closed, before
//! anything executes. Garbage, oversized or truncated frames close that one
//! connection with a `log::warn!`; nothing a peer sends can stop the server
//! or disturb another connection. A memory server holds raw memory, so it
//! binds only the address it is given (callers default to loopback).

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tandem_auth::{Keyring, Role};

use crate::memory::MemoryNode;
use crate::shm::ShmEndpoint;
use crate::tcp::poller::{self, Handover, WorkQueue};
use crate::tcp::wire::{self, ClientMsg, RejectReason, ServerMsg};

/// Authenticated connections served at once; more are refused with `Reject { Busy }`.
pub const CONNECTIONS_MAX: usize = 1024;
/// Connections still in their handshake; a new one evicts the oldest.
pub const PENDING_MAX: usize = 64;
/// A connection must complete its handshake within this time, so idle
/// unauthenticated sockets cannot pin reader threads.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connection threads parse a handshake or control frames; a small stack suffices.
const READER_STACK_BYTES: usize = 256 << 10;
const READ_BUFFER_BYTES: usize = 64 << 10;

/// How a memory server polls its data connections.
#[derive(Clone, Copy, Debug)]
pub struct Polling {
    /// How long a polling thread keeps polling after it served before it
    /// blocks (zero: block at once).
    pub spin: Duration,
    /// Polling threads. Each data connection belongs to one of them, which
    /// executes its batches in arrival order.
    pub threads: usize,
    /// Pin polling thread `i` to the `i`-th CPU this process may use, and
    /// steer each data connection to the poller on the CPU its packets
    /// arrive on (`SO_INCOMING_CPU`: on loopback, the CPU its client ran
    /// on), as NICs steer flows to cores. Without it, a connection goes to
    /// the poller with the fewest.
    pub pin: bool,
    /// One more polling thread, at real-time priority where the OS allows
    /// it, for the priority connections alone (a recovery coordinator's,
    /// [`TcpCluster::prioritised`](crate::tcp::TcpCluster::prioritised)): it
    /// sleeps until one of them sends, then runs ahead of the pollers busy
    /// with the survivors' traffic.
    pub urgent: bool,
}

impl Default for Polling {
    /// One polling thread (docs/DESIGN.md §3's "wimpy core"), spinning for
    /// [`poller::default_spin`]: what in-process servers run.
    fn default() -> Self {
        Polling {
            spin: poller::default_spin(),
            threads: 1,
            pin: false,
            urgent: false,
        }
    }
}

impl Polling {
    /// One unpinned polling thread for data connections, and the urgent one
    /// for priority connections: what `tandem pandora memory-server` runs by default.
    pub fn single() -> Self {
        Polling {
            urgent: true,
            ..Polling::default()
        }
    }

    /// One pinned polling thread per CPU this process may use, each serving
    /// the connections whose clients run on its CPU, and the urgent one
    /// (`memory-server --pollers cpus`). On this 2-core machine it doubled
    /// depth-1 verbs/s against one poller, whose every request woke it
    /// across CPUs (docs/RESULTS.md, "Fabric ceiling").
    pub fn per_cpu() -> Self {
        Polling {
            threads: crate::cpu_count(),
            pin: true,
            ..Polling::single()
        }
    }
}

/// One polling thread's way in, and how many connections it serves.
struct PollerSlot {
    queue: Arc<WorkQueue>,
    conns: std::sync::atomic::AtomicUsize,
    /// The CPU it is pinned to.
    cpu: Option<usize>,
    /// It serves the priority connections, and only those.
    urgent: bool,
}

/// State shared by the acceptor, the connection threads and the pollers.
struct Shared {
    node: Arc<MemoryNode>,
    keys: Keyring,
    pollers: Vec<PollerSlot>,
    /// Data connections moved from one poller to another.
    moves: AtomicU64,
    stopping: AtomicBool,
    next_conn: AtomicU64,
    /// Open connections, so shutdown can close them and the acceptor can bound them.
    conns: Mutex<HashMap<u64, TcpStream>>,
    /// Those of `conns` still in their handshake, oldest first, and whether
    /// their whole hello is in (locked after `conns`).
    pending: Mutex<VecDeque<(u64, Arc<AtomicBool>)>>,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<AtomicBool>)>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connection `conn` authenticated: it leaves the pending ones. False if
    /// it was evicted meanwhile, or the authenticated ones are at their cap.
    fn authenticated(&self, conn: u64) -> bool {
        let conns = self.conns();
        let mut pending = self.pending();
        pending.retain(|(c, _)| *c != conn);
        conns.contains_key(&conn) && conns.len() - pending.len() <= CONNECTIONS_MAX
    }

    fn forget(&self, conn: u64) {
        let mut conns = self.conns();
        conns.remove(&conn);
        self.pending().retain(|(c, _)| *c != conn);
    }

    /// Hand a new data connection to the poller with the fewest
    /// connections (a pinned poller moves it later to the poller on its
    /// client's CPU).
    fn hand_over(&self, h: Handover) -> bool {
        let urgent = h.priority && self.pollers.iter().any(|p| p.urgent);
        let p = (self.pollers.iter())
            .filter(|p| p.urgent == urgent)
            .min_by_key(|p| p.conns.load(Ordering::Relaxed))
            .expect("at least one poller");
        Self::push(p, h)
    }

    /// Hand a data connection to the poller pinned on `cpu`.
    fn hand_over_to(&self, cpu: usize, h: Handover) -> bool {
        match self.pollers.iter().find(|p| p.cpu == Some(cpu)) {
            Some(p) => Self::push(p, h),
            None => self.hand_over(h),
        }
    }

    fn push(p: &PollerSlot, h: Handover) -> bool {
        p.conns.fetch_add(1, Ordering::Relaxed);
        let taken = p.queue.push(h);
        if !taken {
            p.conns.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }

    fn stop_pollers(&self) {
        self.pollers.iter().for_each(|p| p.queue.stop());
    }
}

/// Serve `node` on `listener` forever (the memory-server process's main loop).
/// Connections authenticate with the admin or compute key of `keys`.
/// Returns only if the polling thread cannot be started.
pub fn serve(listener: TcpListener, node: Arc<MemoryNode>, keys: Keyring) -> io::Result<()> {
    serve_with(listener, node, keys, Polling::default())
}

/// [`serve`], polling as `polling` says.
pub fn serve_with(
    listener: TcpListener,
    node: Arc<MemoryNode>,
    keys: Keyring,
    polling: Polling,
) -> io::Result<()> {
    let port = listener.local_addr()?.port();
    let _shm = shm_endpoint(&node, &keys, port)?;
    let (shared, _pollers) = start(node, keys, port, polling)?;
    accept_loop(&listener, &shared);
    Ok(())
}

/// A memory server running on background threads (for tests and in-process
/// clusters). Dropping it shuts the server down.
pub struct MemoryServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    pollers: Vec<JoinHandle<()>>,
    shm: Option<ShmEndpoint>,
}

impl MemoryServerHandle {
    /// Serve `node` on `listener` from background threads.
    pub fn spawn(listener: TcpListener, node: Arc<MemoryNode>, keys: Keyring) -> io::Result<Self> {
        Self::spawn_with(listener, node, keys, Polling::default())
    }

    /// [`spawn`](Self::spawn), polling as `polling` says.
    pub fn spawn_with(
        listener: TcpListener,
        node: Arc<MemoryNode>,
        keys: Keyring,
        polling: Polling,
    ) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let shm = shm_endpoint(&node, &keys, addr.port())?;
        let (shared, pollers) = start(node, keys, addr.port(), polling)?;
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name(format!("memaccept-{}", addr.port()))
            .spawn(move || accept_loop(&listener, &s));
        let acceptor = match acceptor {
            Ok(a) => a,
            Err(e) => {
                shared.stop_pollers();
                pollers.into_iter().for_each(|p| drop(p.join()));
                return Err(e);
            }
        };
        Ok(MemoryServerHandle {
            addr,
            shared,
            acceptor: Some(acceptor),
            pollers,
            shm,
        })
    }

    /// Bind `addr` (e.g. `127.0.0.1:0`) and serve `node` from background threads.
    pub fn bind(addr: SocketAddr, node: Arc<MemoryNode>, keys: Keyring) -> io::Result<Self> {
        Self::spawn(TcpListener::bind(addr)?, node, keys)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn node(&self) -> &Arc<MemoryNode> {
        &self.shared.node
    }

    /// How many times a data connection moved to the poller on its
    /// client's CPU (pinned pollers only).
    pub fn connection_moves(&self) -> u64 {
        self.shared.moves.load(Ordering::Relaxed)
    }

    /// Stop accepting, close every connection (clients see `Unavailable`)
    /// and join the acceptor and the poller.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(mut shm) = self.shm.take() {
            shm.stop();
        }
        // The acceptor is blocked in accept(): a connection of our own wakes it.
        let wake = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => {
                SocketAddr::from((Ipv4Addr::LOCALHOST, a.port()))
            }
            SocketAddr::V6(a) if a.ip().is_unspecified() => {
                SocketAddr::from((Ipv6Addr::LOCALHOST, a.port()))
            }
            a => a,
        };
        match TcpStream::connect_timeout(&wake, Duration::from_secs(1)) {
            Ok(_) => {
                if let Some(a) = self.acceptor.take() {
                    let _ = a.join();
                }
            }
            // Joining would hang; the acceptor exits at its next accept.
            Err(e) => log::warn!(
                "memory server {}: could not wake the acceptor: {e}",
                self.addr
            ),
        }
        for (_, s) in self.shared.conns().drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.shared.stop_pollers();
        self.pollers.drain(..).for_each(|p| drop(p.join()));
    }
}

impl Drop for MemoryServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shm endpoint of a memory server whose region is shared.
fn shm_endpoint(
    node: &Arc<MemoryNode>,
    keys: &Keyring,
    port: u16,
) -> io::Result<Option<ShmEndpoint>> {
    if !node.is_shared() {
        return Ok(None);
    }
    ShmEndpoint::start(node.clone(), keys.clone(), port).map(Some)
}

/// Thread names stay within Linux's 15 visible characters and carry the
/// port, so an operator (or a test) can find a given server's pollers:
/// `mempoll-PORT`, then `mempoll-PORT.1`, `.2`, ...
fn start(
    node: Arc<MemoryNode>,
    keys: Keyring,
    port: u16,
    polling: Polling,
) -> io::Result<(Arc<Shared>, Vec<JoinHandle<()>>)> {
    let mut polls = Vec::new();
    let mut pollers = Vec::new();
    for i in 0..polling.threads.max(1) {
        let queue = Arc::new(WorkQueue::new());
        polls.push(poller::open(&queue)?);
        let conns = Default::default();
        let cpu = polling.pin.then(|| crate::nth_cpu(i)).flatten();
        let urgent = false;
        pollers.push(PollerSlot {
            queue,
            conns,
            cpu,
            urgent,
        });
    }
    if polling.urgent {
        let queue = Arc::new(WorkQueue::new());
        polls.push(poller::open(&queue)?);
        let (conns, cpu, urgent) = (Default::default(), None, true);
        pollers.push(PollerSlot {
            queue,
            conns,
            cpu,
            urgent,
        });
    }
    let shared = Arc::new(Shared {
        node,
        keys,
        pollers,
        moves: AtomicU64::new(0),
        stopping: AtomicBool::new(false),
        next_conn: AtomicU64::new(1),
        conns: Mutex::new(HashMap::new()),
        pending: Mutex::new(VecDeque::new()),
    });
    let mut handles = Vec::new();
    for (i, poll) in polls.into_iter().enumerate() {
        let s = shared.clone();
        let name = match (i, shared.pollers[i].urgent) {
            (_, true) => format!("mempoll-{port}.u"),
            (0, _) => format!("mempoll-{port}"),
            (i, _) => format!("mempoll-{port}.{i}"),
        };
        let spawned = thread::Builder::new().name(name).spawn(move || {
            let p = &s.pollers[i];
            if let Some(cpu) = p.cpu {
                crate::pin_to_cpu(cpu);
            }
            if p.urgent && !crate::raise_priority() {
                log::info!(
                    "memory server: the urgent poller runs at normal priority (no CAP_SYS_NICE)"
                );
            }
            let release = |conn| {
                p.conns.fetch_sub(1, Ordering::Relaxed);
                drop(s.conns().remove(&conn))
            };
            let steer = |cpu, h| {
                p.conns.fetch_sub(1, Ordering::Relaxed);
                s.moves.fetch_add(1, Ordering::Relaxed);
                s.hand_over_to(cpu, h)
            };
            let others = (s.pollers.iter().enumerate())
                .filter_map(|(j, q)| q.cpu.filter(|_| j != i))
                .collect();
            let lane = poller::Lane {
                cpu: p.cpu,
                others,
                release: &release,
                steer: &steer,
            };
            poller::run(p.queue.clone(), s.node.clone(), poll, polling.spin, lane)
        });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                shared.stop_pollers();
                handles.into_iter().for_each(|h| drop(h.join()));
                return Err(e);
            }
        }
    }
    Ok((shared, handles))
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Typically out of file descriptors: back off instead of spinning.
                log::warn!("memory server: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = admit(shared, conn, stream, peer) {
            log::warn!("memory server: connection {conn} from {peer}: not admitted: {e}");
        }
    }
}

fn admit(shared: &Arc<Shared>, conn: u64, stream: TcpStream, peer: SocketAddr) -> io::Result<()> {
    let hello = Arc::new(AtomicBool::new(false));
    {
        let mut conns = shared.conns();
        let mut pending = shared.pending();
        if pending.len() >= PENDING_MAX {
            // Shed the oldest that is still trickling its hello (a real
            // dialer sends it at once), else the oldest.
            // (Its hello may wait unread in the kernel while its thread is
            // not scheduled yet: bytes waiting count as heard.)
            let heard = |(c, h): &(u64, Arc<AtomicBool>)| {
                h.load(Ordering::Relaxed)
                    || conns.get(c).is_some_and(|s| {
                        tandem_auth::gate::bytes_waiting(s) >= tandem_auth::HELLO_BYTES
                    })
            };
            let i = pending.iter().position(|p| !heard(p)).unwrap_or(0);
            let old = pending.remove(i).map(|(c, _)| c);
            if let Some(s) = old.and_then(|old| conns.remove(&old)) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        pending.push_back((conn, hello.clone()));
        conns.insert(conn, stream.try_clone()?);
    }
    let s = shared.clone();
    let spawned = thread::Builder::new()
        .name(format!("memconn-{conn}"))
        .stack_size(READER_STACK_BYTES)
        .spawn(move || {
            if !serve_connection(&s, conn, stream, peer, &hello) {
                s.forget(conn);
            }
        });
    if let Err(e) = spawned {
        if let Some(s) = shared.conns().remove(&conn) {
            let _ = s.shutdown(Shutdown::Both);
        }
        shared.forget(conn);
        return Err(e);
    }
    Ok(())
}

/// Send a best-effort `Reject` and close.
fn reject(stream: &TcpStream, reason: RejectReason) {
    let mut buf = Vec::new();
    ServerMsg::Reject { reason }.encode(&mut buf);
    let mut w = stream;
    let _ = w.write_all(&buf);
    let _ = stream.shutdown(Shutdown::Both);
}

fn reply(stream: &TcpStream, msg: &ServerMsg, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    msg.encode(buf);
    let mut w = stream;
    w.write_all(buf)
}

/// One connection's thread: the handshake, then control frames, or the hand-over
/// of a data connection to the poller. Returns whether the poller took it.
fn serve_connection(
    shared: &Shared,
    conn: u64,
    mut stream: TcpStream,
    peer: SocketAddr,
    hello: &AtomicBool,
) -> bool {
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + tandem_auth::HANDSHAKE_DEADLINE;
    let roles = [Role::Admin, Role::Compute];
    let heard = || hello.store(true, Ordering::Relaxed);
    let who = match tandem_auth::accept_then(&mut stream, &shared.keys, &roles, deadline, heard) {
        Ok(who) => who,
        Err(e) => {
            log::warn!("memory server: connection {conn} from {peer}: {e}");
            let _ = stream.shutdown(Shutdown::Both);
            return false;
        }
    };
    if !shared.authenticated(conn) {
        log::warn!("memory server: connection {conn} from {peer}: at the connection limit");
        reject(&stream, RejectReason::Busy);
        return false;
    }
    let setup = stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)))
        .and_then(|()| stream.try_clone());
    let read_half = match setup {
        Ok(s) => s,
        Err(e) => {
            log::warn!("memory server: connection {conn} from {peer}: setup failed: {e}");
            let _ = stream.shutdown(Shutdown::Both);
            return false;
        }
    };
    let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, read_half);
    let mut body = Vec::new();
    let first = match wire::read_frame(&mut rd, &mut body) {
        Ok(true) => ClientMsg::decode(&body),
        Ok(false) => {
            let _ = stream.shutdown(Shutdown::Both);
            return false;
        }
        Err(e) => {
            log::warn!("memory server: connection {conn} from {peer}: bad handshake: {e}");
            let _ = stream.shutdown(Shutdown::Both);
            return false;
        }
    };
    match first {
        Ok(ClientMsg::Hello {
            compute,
            key,
            priority,
        }) if who.role == Role::Compute && who.id == compute as u64 => {
            if !shared.node.is_authorized(compute, key) {
                log::warn!("memory server: connection {conn} from {peer}: wrong or revoked key for compute {compute}");
                reject(&stream, RejectReason::BadKey);
                return false;
            }
            let mut buf = Vec::new();
            let opened = reply(&stream, &ServerMsg::HelloOk, &mut buf)
                .and_then(|()| stream.set_read_timeout(None));
            if let Err(e) = opened {
                log::warn!("memory server: connection {conn} from {peer}: handshake failed: {e}");
                let _ = stream.shutdown(Shutdown::Both);
                return false;
            }
            // From here on the poller reads, executes and answers this connection.
            let early = rd.buffer().to_vec();
            return shared.hand_over(Handover {
                conn,
                compute,
                key,
                priority,
                stream,
                early,
                output: Default::default(),
            });
        }
        Ok(ClientMsg::Hello { compute, .. }) => {
            log::warn!(
                "memory server: connection {conn} from {peer}: authenticated as {} {} but said hello as compute node {compute}",
                who.role,
                who.id
            );
            reject(&stream, RejectReason::BadKey);
        }
        Ok(ClientMsg::Admin) => {
            admin_loop(shared, (conn, peer, who), &stream, &mut rd, &mut body);
            let _ = stream.shutdown(Shutdown::Both);
        }
        Ok(other) => {
            log::warn!(
                "memory server: connection {conn} from {peer}: {} before handshake",
                other.name()
            );
            reject(&stream, RejectReason::Protocol);
        }
        Err(e) => {
            log::warn!("memory server: connection {conn} from {peer}: bad handshake: {e}");
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
    false
}

/// Whether `who` may make control request `m`: the admin role anything; a
/// compute node only its own registration (a fresh key for itself, which
/// cuts its own older connections) and `Info`. Never a revocation.
fn control_allowed(who: tandem_auth::Peer, m: &ClientMsg) -> bool {
    match (who.role, m) {
        (Role::Admin, _) => true,
        (Role::Compute, ClientMsg::Register { compute }) => who.id == *compute as u64,
        (Role::Compute, ClientMsg::Info) => true,
        _ => false,
    }
}

/// Answer the control requests of an authenticated connection.
fn admin_loop(
    shared: &Shared,
    (conn, peer, who): (u64, SocketAddr, tandem_auth::Peer),
    stream: &TcpStream,
    rd: &mut BufReader<TcpStream>,
    body: &mut Vec<u8>,
) {
    let mut buf = Vec::new();
    if reply(stream, &ServerMsg::AdminOk, &mut buf).is_err() {
        return;
    }
    loop {
        match wire::read_frame(rd, body) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                log::warn!("memory server: admin connection {conn} from {peer}: closing: {e}");
                return;
            }
        }
        let msg = ClientMsg::decode(body);
        if let Ok(m) = &msg {
            if !control_allowed(who, m) {
                log::warn!(
                    "memory server: connection {conn} from {peer}: {} from {} {}",
                    m.name(),
                    who.role,
                    who.id
                );
                reject(stream, RejectReason::NotAdmin);
                return;
            }
        }
        let answer = match msg {
            Ok(ClientMsg::Register { compute }) => match shared.node.register(compute) {
                Ok(key) => {
                    log::info!("memory server: registered compute node {compute}");
                    ServerMsg::Registered { key }
                }
                Err(e) => {
                    log::warn!("memory server: refused registration: {e}");
                    ServerMsg::Reject {
                        reason: RejectReason::Fenced,
                    }
                }
            },
            Ok(ClientMsg::Revoke { compute }) => {
                // The ack leaves only after the key is dead: every verb the
                // poller executes from now on fails with `Revoked`.
                shared.node.revoke(compute);
                log::info!("memory server: revoked compute node {compute}");
                ServerMsg::Revoked
            }
            Ok(ClientMsg::Info) => ServerMsg::Info {
                size_bytes: shared.node.size_bytes(),
            },
            Ok(other) => {
                log::warn!(
                    "memory server: admin connection {conn} from {peer}: closing: unexpected {}",
                    other.name()
                );
                reject(stream, RejectReason::Protocol);
                return;
            }
            Err(e) => {
                log::warn!("memory server: admin connection {conn} from {peer}: closing: {e}");
                return;
            }
        };
        if reply(stream, &answer, &mut buf).is_err() {
            return;
        }
    }
}
