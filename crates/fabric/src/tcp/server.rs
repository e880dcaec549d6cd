//! A memory server: accepts connections for one [`MemoryNode`] and serves its
//! one-sided verbs over TCP (DESIGN.md §3, "tcp" and "Access control").
//!
//! Threads: the acceptor (the caller of [`serve`]), one short-lived thread
//! per connection for its handshake, and the single polling thread of
//! [`poller`](super::poller) that reads, executes and answers verbs. A
//! connection's first frame decides what it is:
//! - `Hello { compute, key }` opens a data connection if
//!   [`MemoryNode::is_authorized`] accepts the key; it is then handed to the
//!   poller and its thread ends.
//! - `Admin { secret }` opens a control connection for `Register`, `Revoke`
//!   and `Info`, answered by its own thread: they are rare and touch only
//!   the node's key table, so they need not queue behind verbs.
//!
//! A wrong key or secret gets a `Reject` and the connection is closed, before
//! anything executes. Garbage, oversized or truncated frames close that one
//! connection with a `log::warn!`; nothing a peer sends can stop the server
//! or disturb another connection. A memory server holds raw memory, so it
//! binds only the address it is given (callers default to loopback).

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::memory::MemoryNode;
use crate::shm::ShmEndpoint;
use crate::tcp::poller::{self, Handover, WorkQueue};
use crate::tcp::wire::{self, ClientMsg, RejectReason, ServerMsg};

/// Connections served at once; more are refused with `Reject { Busy }`.
const CONNECTIONS_MAX: usize = 1024;
/// A connection must complete its handshake within this time, so idle
/// unauthenticated sockets cannot pin reader threads.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connection threads parse a handshake or control frames; a small stack suffices.
const READER_STACK_BYTES: usize = 256 << 10;
const READ_BUFFER_BYTES: usize = 64 << 10;

/// State shared by the acceptor, the connection threads and the poller.
struct Shared {
    node: Arc<MemoryNode>,
    secret: u64,
    queue: Arc<WorkQueue>,
    stopping: AtomicBool,
    next_conn: AtomicU64,
    /// Open connections, so shutdown can close them and the acceptor can bound them.
    conns: Mutex<HashMap<u64, TcpStream>>,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Serve `node` on `listener` forever (the memory-server process's main loop).
/// Admin connections must present `secret`. Returns only if the polling
/// thread cannot be started.
pub fn serve(listener: TcpListener, node: Arc<MemoryNode>, secret: u64) -> io::Result<()> {
    serve_spinning(listener, node, secret, poller::default_spin())
}

/// [`serve`], with the polling thread spinning for `spin` after it served
/// before it blocks (zero: block at once).
pub fn serve_spinning(
    listener: TcpListener,
    node: Arc<MemoryNode>,
    secret: u64,
    spin: Duration,
) -> io::Result<()> {
    let port = listener.local_addr()?.port();
    let _shm = shm_endpoint(&node, port)?;
    let (shared, _poller) = start(node, secret, port, spin)?;
    accept_loop(&listener, &shared);
    Ok(())
}

/// A memory server running on background threads (for tests and in-process
/// clusters). Dropping it shuts the server down.
pub struct MemoryServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    poller: Option<JoinHandle<()>>,
    shm: Option<ShmEndpoint>,
}

impl MemoryServerHandle {
    /// Serve `node` on `listener` from background threads.
    pub fn spawn(listener: TcpListener, node: Arc<MemoryNode>, secret: u64) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let shm = shm_endpoint(&node, addr.port())?;
        let (shared, poller) = start(node, secret, addr.port(), poller::default_spin())?;
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name(format!("memaccept-{}", addr.port()))
            .spawn(move || accept_loop(&listener, &s));
        let acceptor = match acceptor {
            Ok(a) => a,
            Err(e) => {
                shared.queue.stop();
                let _ = poller.join();
                return Err(e);
            }
        };
        Ok(MemoryServerHandle {
            addr,
            shared,
            acceptor: Some(acceptor),
            poller: Some(poller),
            shm,
        })
    }

    /// Bind `addr` (e.g. `127.0.0.1:0`) and serve `node` from background threads.
    pub fn bind(addr: SocketAddr, node: Arc<MemoryNode>, secret: u64) -> io::Result<Self> {
        Self::spawn(TcpListener::bind(addr)?, node, secret)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn node(&self) -> &Arc<MemoryNode> {
        &self.shared.node
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
        self.shared.queue.stop();
        if let Some(p) = self.poller.take() {
            let _ = p.join();
        }
    }
}

impl Drop for MemoryServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shm endpoint of a memory server whose region is shared.
fn shm_endpoint(node: &Arc<MemoryNode>, port: u16) -> io::Result<Option<ShmEndpoint>> {
    if !node.is_shared() {
        return Ok(None);
    }
    ShmEndpoint::start(node.clone(), port).map(Some)
}

/// Thread names stay within Linux's 15 visible characters and carry the
/// port, so an operator (or a test) can find a given server's poller.
fn start(
    node: Arc<MemoryNode>,
    secret: u64,
    port: u16,
    spin: Duration,
) -> io::Result<(Arc<Shared>, JoinHandle<()>)> {
    let queue = Arc::new(WorkQueue::new());
    let poll = poller::open(&queue)?;
    let shared = Arc::new(Shared {
        node,
        secret,
        queue,
        stopping: AtomicBool::new(false),
        next_conn: AtomicU64::new(1),
        conns: Mutex::new(HashMap::new()),
    });
    let s = shared.clone();
    let poller = thread::Builder::new()
        .name(format!("mempoll-{port}"))
        .spawn(move || {
            let release = |conn| drop(s.conns().remove(&conn));
            poller::run(s.queue.clone(), s.node.clone(), poll, spin, release)
        })?;
    Ok((shared, poller))
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
    {
        let mut conns = shared.conns();
        if conns.len() >= CONNECTIONS_MAX {
            drop(conns);
            reject(&stream, RejectReason::Busy);
            return Err(io::Error::other("connection limit reached"));
        }
        conns.insert(conn, stream.try_clone()?);
    }
    let s = shared.clone();
    let spawned = thread::Builder::new()
        .name(format!("memconn-{conn}"))
        .stack_size(READER_STACK_BYTES)
        .spawn(move || {
            if !serve_connection(&s, conn, stream, peer) {
                s.conns().remove(&conn);
            }
        });
    if let Err(e) = spawned {
        if let Some(s) = shared.conns().remove(&conn) {
            let _ = s.shutdown(Shutdown::Both);
        }
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
fn serve_connection(shared: &Shared, conn: u64, stream: TcpStream, peer: SocketAddr) -> bool {
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
        }) => {
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
            return shared.queue.push(Handover {
                conn,
                compute,
                key,
                priority,
                stream,
                early,
            });
        }
        Ok(ClientMsg::Admin { secret }) => {
            if secret != shared.secret {
                log::warn!("memory server: connection {conn} from {peer}: wrong admin secret");
                reject(&stream, RejectReason::BadSecret);
                return false;
            }
            admin_loop(shared, conn, peer, &stream, &mut rd, &mut body);
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

/// Answer control requests of an authenticated admin connection.
fn admin_loop(
    shared: &Shared,
    conn: u64,
    peer: SocketAddr,
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
        let answer = match ClientMsg::decode(body) {
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
