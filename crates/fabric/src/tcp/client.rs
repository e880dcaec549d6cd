//! The compute side of the tcp backend: joining a cluster of memory servers
//! (region keys, revocation) and a compute thread's [`Fabric`] handle onto
//! them (docs/DESIGN.md §3, "Access control" and "tcp").
//!
//! [`TcpCluster`] speaks the admin protocol: it is what the membership service
//! (or an embedded cluster) uses to issue a compute node its region keys and
//! to terminate its links when it is declared failed (Pandora paper §3.2.2,
//! "Active-Link Termination"). [`TcpCluster::connect`] opens the calling
//! thread's data connections with those keys and returns a [`TcpFabric`];
//! each compute thread (a tokio `current_thread` runtime with a `LocalSet`)
//! connects once and shares the handle among all its coordinators, whose
//! batches then pipeline on one connection per memory server.

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

use tandem_auth::{AuthError, ClientHandshake, Keyring, Role, CHALLENGE_BYTES, HANDSHAKE_DEADLINE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::memory::{Fenced, RegionKey};
use crate::tcp::qp::TcpQp;
use crate::tcp::wire::{self, ClientMsg, RejectReason, ServerMsg, FRAME_HEADER_BYTES};
use crate::verb::{ComputeNodeId, MemNodeId};
use crate::Fabric;

/// The memory servers of one cluster, in memory-node order (`addrs[i]` is
/// memory node `i`), and the credentials this process holds: the admin
/// key to register and revoke, the compute key to open data connections.
#[derive(Clone, Debug)]
pub struct TcpCluster {
    pub addrs: Vec<SocketAddr>,
    pub keys: Keyring,
    /// Data connections ask to be served first (see [`TcpCluster::prioritised`]).
    pub priority: bool,
    /// Whether queue pairs map the servers' shared regions instead of
    /// opening data connections; `None`: wherever a loopback server offers
    /// one (see [`TcpCluster::shm`]).
    pub shm: Option<bool>,
    /// Shm queue pairs yield once per batch (see [`TcpCluster::yielding`]).
    pub yield_per_batch: bool,
    /// Data connections end after a second of silence (see
    /// [`TcpCluster::bounding_silence`]).
    pub bound_silence: bool,
}

impl TcpCluster {
    pub fn new(addrs: Vec<SocketAddr>, keys: Keyring) -> Self {
        TcpCluster {
            addrs,
            keys,
            priority: false,
            shm: None,
            yield_per_batch: false,
            bound_silence: false,
        }
    }

    /// With `true`, queue pairs made through this handle map each memory
    /// server's shared region and execute verbs in this process (the shm
    /// backend, [`crate::shm`]): the servers must offer one (`memory-server
    /// --shm`). With `false`, always data connections over TCP. By default,
    /// a server on a loopback address that offers a shared region is mapped,
    /// any other is reached over TCP. Admin calls always go over TCP.
    pub fn shm(mut self, on: bool) -> Self {
        self.shm = Some(on);
        self
    }

    /// Make every batch on a mapped region yield to the executor once before
    /// it completes, so the tasks of a compute thread interleave at verb
    /// boundaries as they do over TCP (where every batch waits for an
    /// answer). For testers (DART) that want those interleavings.
    pub fn yielding(mut self, on: bool) -> Self {
        self.yield_per_batch = on;
        self
    }

    /// Data connections made through this handle end once their memory
    /// server has been silent for about a second with verbs outstanding
    /// ([`tandem_auth::dial::bound_silence`]): behind a partition or a
    /// blackhole their verbs fail with `Unavailable` instead of waiting for
    /// the kernel's 15 minutes of retransmissions. Compute servers opt in:
    /// a commit whose write failed at a memory server the membership has
    /// up waits for its verdict, and the compute server ends its
    /// incarnation when that is overdue (docs/DESIGN.md §4.6).
    pub fn bounding_silence(mut self) -> Self {
        self.bound_silence = true;
        self
    }

    /// Data connections made through this handle are served before the
    /// others in each of a memory server's polling rounds: for the recovery
    /// coordinator, which must not queue behind the survivors' traffic.
    pub fn prioritised(mut self) -> Self {
        self.priority = true;
        self
    }

    /// Issue `compute` a region key on every memory server (keys in memory-node
    /// order). A revoked incarnation is refused: the error wraps [`Fenced`]
    /// (see [`is_fenced`]). Re-registering replaces the old keys, which cuts off every
    /// connection made with them: register once per compute node, then let
    /// each of its threads [`connect`](Self::connect) with the same keys.
    pub async fn register(&self, compute: ComputeNodeId) -> io::Result<Vec<RegionKey>> {
        let calls = (0..self.addrs.len() as MemNodeId).map(|m| self.register_on(m, compute));
        join_all(calls.collect()).await.into_iter().collect()
    }

    /// A region key for `compute` from memory server `mem` alone (a
    /// replacement server, or registering around servers that are down).
    pub async fn register_on(
        &self,
        mem: MemNodeId,
        compute: ComputeNodeId,
    ) -> io::Result<RegionKey> {
        let addr = self.addr(mem)?;
        match admin_call(addr, &self.keys, ClientMsg::Register { compute }).await? {
            ServerMsg::Registered { key } => Ok(key),
            ServerMsg::Reject {
                reason: RejectReason::Fenced,
            } => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                Fenced(compute),
            )),
            other => Err(unexpected(addr, &other)),
        }
    }

    /// Revoke `compute` on the memory servers in `mems` only (the others are
    /// down: a server declared failed serves no one again).
    pub async fn revoke_on(&self, mems: &[MemNodeId], compute: ComputeNodeId) -> io::Result<()> {
        let calls = mems.iter().map(|&m| async move {
            let addr = self.addr(m)?;
            match admin_call(addr, &self.keys, ClientMsg::Revoke { compute }).await? {
                ServerMsg::Revoked => Ok(()),
                other => Err(unexpected(addr, &other)),
            }
        });
        join_all(calls.collect()).await.into_iter().collect()
    }

    fn addr(&self, mem: MemNodeId) -> io::Result<SocketAddr> {
        self.addrs.get(mem as usize).copied().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no memory node {mem} among {} servers", self.addrs.len()),
            )
        })
    }

    /// Connect like [`TcpCluster::connect`], but leave unconnected the memory
    /// nodes whose key is `None` (down) or that do not answer (dying): their
    /// verbs complete with `Unavailable` until [`TcpFabric::reconnect`].
    pub async fn connect_live(
        &self,
        compute: ComputeNodeId,
        keys: &[Option<RegionKey>],
    ) -> io::Result<TcpFabric> {
        if keys.len() != self.addrs.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} region keys for {} memory servers",
                    keys.len(),
                    self.addrs.len()
                ),
            ));
        }
        let handshakes =
            self.addrs
                .iter()
                .zip(keys)
                .enumerate()
                .map(|(i, (&addr, key))| async move {
                    match key {
                        Some(key) => self.link(addr, i, compute, *key).await.map(Some),
                        None => Ok(None),
                    }
                });
        let mut qps = Vec::with_capacity(keys.len());
        for (i, s) in join_all(handshakes.collect()).await.into_iter().enumerate() {
            qps.push(match s {
                Ok(Some(qp)) => qp,
                Ok(None) => TcpQp::unconnected(i as MemNodeId),
                // Gone since it issued the key (it died): down until replaced.
                Err(e) if e.kind() != io::ErrorKind::PermissionDenied => {
                    log::warn!("memory node {i} at {} does not answer: {e}", self.addrs[i]);
                    TcpQp::unconnected(i as MemNodeId)
                }
                Err(e) => return Err(e),
            });
        }
        Ok(TcpFabric {
            compute,
            qps: qps.into(),
            cluster: self.clone(),
        })
    }

    /// Link termination: revoke `compute`'s keys on every memory server, in
    /// parallel. Returns once every server has acknowledged; from then on no
    /// verb of `compute` executes anywhere (its later verbs complete with
    /// `Revoked`). An error means some server may not have revoked yet.
    pub async fn revoke(&self, compute: ComputeNodeId) -> io::Result<()> {
        let calls = self.addrs.iter().map(|&addr| async move {
            match admin_call(addr, &self.keys, ClientMsg::Revoke { compute }).await? {
                ServerMsg::Revoked => Ok(()),
                other => Err(unexpected(addr, &other)),
            }
        });
        join_all(calls.collect()).await.into_iter().collect()
    }

    /// The region size of every memory server, in memory-node order.
    pub async fn info(&self) -> io::Result<Vec<u64>> {
        let calls = self.addrs.iter().map(|&addr| async move {
            match admin_call(addr, &self.keys, ClientMsg::Info).await? {
                ServerMsg::Info { size_bytes } => Ok(size_bytes),
                other => Err(unexpected(addr, &other)),
            }
        });
        join_all(calls.collect()).await.into_iter().collect()
    }

    /// Open the calling thread's data connections, one per memory server,
    /// presenting `keys` (from [`register`](Self::register)). Fails if any
    /// server refuses its key. Must be called inside a tokio `LocalSet`: each
    /// connection's reader and writer run as local tasks of this thread.
    pub async fn connect(
        &self,
        compute: ComputeNodeId,
        keys: &[RegionKey],
    ) -> io::Result<TcpFabric> {
        if keys.len() != self.addrs.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} region keys for {} memory servers",
                    keys.len(),
                    self.addrs.len()
                ),
            ));
        }
        let handshakes = (self.addrs.iter().zip(keys).enumerate())
            .map(|(i, (&addr, &key))| self.link(addr, i, compute, key));
        let mut qps = Vec::with_capacity(keys.len());
        // Every handshake must succeed; the links of the others close on drop.
        for qp in join_all(handshakes.collect()).await {
            qps.push(qp?);
        }
        Ok(TcpFabric {
            compute,
            qps: qps.into(),
            cluster: self.clone(),
        })
    }
}

impl TcpCluster {
    /// A queue pair to memory node `mem` at `addr`: a data connection, or
    /// the server's shared region mapped into this process.
    async fn link(
        &self,
        addr: SocketAddr,
        mem: usize,
        compute: ComputeNodeId,
        key: RegionKey,
    ) -> io::Result<TcpQp> {
        let mem = mem as MemNodeId;
        let attached = match self.shm {
            Some(true) => Some(crate::shm::attach(addr, &self.keys, compute, key)?),
            Some(false) => None,
            None if !addr.ip().is_loopback() => None,
            None => match crate::shm::attach(addr, &self.keys, compute, key) {
                Ok(a) => Some(a),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => None,
                Err(e) => return Err(e),
            },
        };
        if let Some((node, stream)) = attached {
            let link = (node, compute, key, self.yield_per_batch);
            return TcpQp::start_shm(link, stream, mem);
        }
        let stream = hello(addr, &self.keys, compute, key, self.priority).await?;
        if self.bound_silence {
            tandem_auth::dial::bound_silence(&stream);
        }
        Ok(TcpQp::start(stream, mem))
    }
}

/// One compute thread's handle onto every memory server of a cluster. Clones
/// share the thread's connections; a queue pair is a cheap clone of the
/// connection handle.
#[derive(Clone)]
pub struct TcpFabric {
    compute: ComputeNodeId,
    qps: Rc<[TcpQp]>,
    /// How this handle's links were made (priority, shm), for reconnection.
    cluster: TcpCluster,
}

impl TcpFabric {
    /// Whether every connection is still up.
    pub fn is_connected(&self) -> bool {
        self.qps.iter().all(TcpQp::is_connected)
    }

    /// Whether the link to memory node `mem` is up.
    pub fn queue_pair_connected(&self, mem: MemNodeId) -> bool {
        self.qps[mem as usize].is_connected()
    }

    /// Cut this thread's link to memory node `mem` (declared failed): its
    /// pending verbs complete with `Unavailable` now.
    pub fn cut(&self, mem: MemNodeId) {
        self.qps[mem as usize].cut();
    }

    /// Point memory node `mem`'s queue pair, for every handle of this
    /// thread, at a (replacement) server at `addr`, presenting `key`.
    pub async fn reconnect(
        &self,
        mem: MemNodeId,
        addr: SocketAddr,
        key: RegionKey,
    ) -> io::Result<()> {
        let qp = self
            .cluster
            .link(addr, mem as usize, self.compute, key)
            .await?;
        self.qps[mem as usize].replace(qp);
        Ok(())
    }
}

impl std::fmt::Debug for TcpFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpFabric")
            .field("compute", &self.compute)
            .field("qps", &self.qps)
            .finish()
    }
}

impl Fabric for TcpFabric {
    type Qp = TcpQp;

    fn queue_pair(&self, mem: MemNodeId) -> TcpQp {
        self.qps[mem as usize].clone()
    }

    fn memory_nodes(&self) -> usize {
        self.qps.len()
    }

    fn compute_node(&self) -> ComputeNodeId {
        self.compute
    }

    fn executes_at_post(&self) -> bool {
        self.qps.iter().all(TcpQp::is_shm)
    }
}

/// How long a connect to a memory server may take: a server whose SYNs
/// vanish (blackholed, partitioned) fails the connect instead of holding it
/// for the kernel's two minutes of SYN retries. Two seconds let the first
/// SYN retransmission (after 1 s) through: a server whose accept queue was
/// full for a moment (under a connection flood) still answers it.
const CONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Connect to `addr` from this process's own address, if it has one
/// ([`tandem_auth::dial::dial_from`]), within [`CONNECT_PATIENCE`].
async fn dial(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    if let Some(ip) = tandem_auth::dial::dial_from() {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    tokio::time::timeout(CONNECT_PATIENCE, socket.connect(addr))
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connect to {addr}: no answer within {CONNECT_PATIENCE:?}"),
            ))
        })
}

/// The data-connection handshake: `Hello`, then `HelloOk` or a rejection.
async fn hello(
    addr: SocketAddr,
    keys: &Keyring,
    compute: ComputeNodeId,
    key: RegionKey,
    priority: bool,
) -> io::Result<TcpStream> {
    let mut stream = dial(addr).await?;
    stream.set_nodelay(true)?;
    authenticate(&mut stream, addr, keys, Role::Compute, compute as u64).await?;
    let mut buf = Vec::new();
    ClientMsg::Hello {
        compute,
        key,
        priority,
    }
    .encode(&mut buf);
    stream.write_all(&buf).await?;
    match read_msg(&mut stream, &mut buf).await? {
        ServerMsg::HelloOk => Ok(stream),
        other => Err(unexpected(addr, &other)),
    }
}

/// One control request on a fresh admin connection. Control requests are
/// rare (join, failure), so a connection each keeps no state to go stale.
/// How long an admin request (register, revoke, info) may wait for its
/// answer once authenticated. A connection whose reset a lossy network
/// dropped is never closed on this side, and its answer would otherwise be
/// awaited forever: the caller (the membership's revocation) retries.
pub const ADMIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

async fn admin_call(addr: SocketAddr, keys: &Keyring, msg: ClientMsg) -> io::Result<ServerMsg> {
    let mut stream = dial(addr).await?;
    stream.set_nodelay(true)?;
    // Nothing is sent to a server that cannot prove it holds the key. A
    // compute node without the admin key registers itself as itself.
    let (role, id) = match msg {
        ClientMsg::Register { compute } if keys.get(Role::Admin).is_none() => {
            (Role::Compute, compute as u64)
        }
        _ => (Role::Admin, 0),
    };
    authenticate(&mut stream, addr, keys, role, id).await?;
    let exchange = async {
        let mut buf = Vec::new();
        ClientMsg::Admin.encode(&mut buf);
        stream.write_all(&buf).await?;
        // Wait for `AdminOk` before sending the request: a server that rejects
        // closes at once, and unread request bytes would turn its close into a
        // reset that can swallow the `Reject`.
        match read_msg(&mut stream, &mut buf).await? {
            ServerMsg::AdminOk => {}
            other => return Err(unexpected(addr, &other)),
        }
        buf.clear();
        msg.encode(&mut buf);
        stream.write_all(&buf).await?;
        let answer = read_msg(&mut stream, &mut buf).await?;
        let _ = stream.shutdown().await;
        Ok(answer)
    };
    tokio::time::timeout(ADMIN_DEADLINE, exchange)
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "memory server {addr}: no answer to an admin request within {ADMIN_DEADLINE:?}"
                ),
            )
        })?
}

/// The mutual handshake every memory server runs first (`tandem_auth`), as
/// `role` claiming `id`, within [`HANDSHAKE_DEADLINE`].
pub(crate) async fn authenticate(
    stream: &mut TcpStream,
    addr: SocketAddr,
    keys: &Keyring,
    role: Role,
    id: u64,
) -> io::Result<()> {
    let denied = |e: AuthError| io::Error::new(e.io_kind(), format!("memory server {addr}: {e}"));
    let run = async {
        let (hs, hello) = ClientHandshake::start(keys, role, id).map_err(denied)?;
        stream.write_all(&hello).await?;
        let mut challenge = [0u8; CHALLENGE_BYTES];
        stream.read_exact(&mut challenge).await?;
        let proof = hs.challenge(&challenge).map_err(denied)?;
        stream.write_all(&proof).await?;
        let mut verdict = [0u8; 1];
        stream.read_exact(&mut verdict).await?;
        match verdict[0] {
            tandem_auth::VERDICT_ACCEPTED => Ok(()),
            tandem_auth::VERDICT_REFUSED => Err(denied(AuthError::BadProof)),
            _ => Err(denied(AuthError::NotTandem)),
        }
    };
    match tokio::time::timeout(HANDSHAKE_DEADLINE, run).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("memory server {addr}: {}", AuthError::Deadline),
        )),
    }
}

/// Read and decode one server frame.
async fn read_msg(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<ServerMsg> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    stream.read_exact(&mut header).await?;
    let len = wire::frame_len(header)?;
    buf.clear();
    buf.resize(len, 0);
    stream.read_exact(buf).await?;
    Ok(ServerMsg::decode(buf)?)
}

fn unexpected(addr: SocketAddr, msg: &ServerMsg) -> io::Error {
    match msg {
        ServerMsg::Reject { reason } => {
            let kind = match reason {
                RejectReason::BadKey | RejectReason::NotAdmin | RejectReason::Fenced => {
                    io::ErrorKind::PermissionDenied
                }
                RejectReason::Busy => io::ErrorKind::ConnectionRefused,
                RejectReason::Protocol => io::ErrorKind::InvalidData,
            };
            io::Error::new(
                kind,
                format!("memory server {addr} rejected the request: {reason:?}"),
            )
        }
        other => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("memory server {addr} answered {other:?}"),
        ),
    }
}

/// Run futures concurrently on the current task; outputs in input order.
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut all = true;
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outs.into_iter().flatten().collect()
}

/// Whether `e` is a registration refused because the incarnation was revoked.
pub fn is_fenced(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Fenced>())
}
