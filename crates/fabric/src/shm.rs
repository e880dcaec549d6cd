//! The shm backend: memory nodes as memfd regions that compute processes on
//! the same host map and access with atomic loads, stores, CAS and FAA, the
//! CXL-style disaggregated memory of one machine (docs/DESIGN.md §3 for the
//! semantics every backend shares, and §8: the host is the trust boundary).
//!
//! A memory server started with a shared region ([`MemoryNode::shared`])
//! keeps serving its TCP endpoint (admin calls, tcp data connections) and
//! also listens on an abstract Unix socket named after its port. A compute
//! thread's [`TcpCluster`](crate::tcp::TcpCluster) made
//! [`shm`](crate::tcp::TcpCluster::shm) attaches there instead of opening a
//! TCP data connection:
//!
//! 1. it sends the same `Hello { compute, key }` frame;
//! 2. the server records the peer process (a pidfd taken from the socket,
//!    `SO_PEERPIDFD`), then checks the key, and answers `HelloOk` with the
//!    region's memfd (`SCM_RIGHTS`) or a `Reject`;
//! 3. the compute thread maps the region and from then on executes each
//!    doorbell batch itself, through the same [`MemoryNode::execute_batch`]
//!    as every other backend: announce the batch, check the key in the
//!    shared key table, execute, retire;
//! 4. the socket stays open as the liveness link: when the server dies, the
//!    compute side sees it close and completes later verbs `Unavailable`.
//!
//! Revocation clears the key in the shared table, so a running process's
//! next batch completes `Revoked`, and waits for batches in flight. A process
//! that does not drain within a grace period (stopped, descheduled or dead
//! in the middle of a batch) is killed through its pidfd and waited for
//! before `revoke` returns: a falsely suspected process is fenced, and no
//! verb lands after revocation.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use tandem_auth::{Keyring, Role};

use crate::memory::MemoryNode;
use crate::tcp::wire::{self, ClientMsg, RejectReason, ServerMsg, FRAME_HEADER_BYTES};
use crate::verb::ComputeNodeId;

/// A handshake must complete within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `revoke` waits for a killed process to exit before it gives up
/// with an error in the log (a process in uninterruptible sleep).
const EXIT_WAIT: Duration = Duration::from_secs(10);
/// `SO_PEERPIDFD` (Linux 6.5): a pidfd of the socket's peer, race-free.
const SO_PEERPIDFD: i32 = 77;

/// The abstract Unix socket of the memory server on TCP port `port`.
pub fn socket_name(port: u16) -> String {
    format!("tandem-mem-{port}")
}

fn unix_addr(port: u16) -> io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(socket_name(port))
}

/// A process that mapped a shared region, held by a pidfd (which, unlike a
/// pid, cannot come to name another process).
pub(crate) struct Process {
    pid: i32,
    fd: OwnedFd,
}

impl Process {
    /// The process at the other end of `sock`.
    fn of_peer(sock: &UnixStream) -> io::Result<Process> {
        let pid = rustix::net::sockopt::socket_peercred(sock)?
            .pid
            .as_raw_nonzero()
            .get();
        let mut raw: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a plain getsockopt into an int of the right size.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&raw mut raw).cast(),
                &mut len,
            )
        };
        let fd = if r == 0 && raw >= 0 {
            // SAFETY: the kernel just gave us this descriptor.
            unsafe { OwnedFd::from_raw_fd(raw) }
        } else {
            // Older kernels: open it by pid (the peer is still connected).
            let p = rustix::process::Pid::from_raw(pid)
                .ok_or_else(|| io::Error::other("peer pid 0"))?;
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())?
        };
        Ok(Process { pid, fd })
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the process has exited (a pidfd polls readable then).
    pub(crate) fn has_exited(&self) -> bool {
        self.wait_exit(Some(Duration::ZERO))
    }

    fn wait_exit(&self, timeout: Option<Duration>) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let ts = timeout.map(|t| rustix::event::Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: t.subsec_nanos() as i64,
        });
        loop {
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(n) => return n > 0,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return true,
            }
        }
    }

    /// `kill -9` through the pidfd, then wait until the process is gone.
    pub(crate) fn kill_and_wait(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.fd, rustix::process::Signal::KILL);
        if !self.wait_exit(Some(EXIT_WAIT)) {
            log::error!(
                "shm: process {} did not exit within {EXIT_WAIT:?} of SIGKILL",
                self.pid
            );
        }
    }
}

/// The liveness sockets of attached compute threads, by connection number.
type Links = Mutex<std::collections::HashMap<u64, UnixStream>>;

/// The shm endpoint of one memory server: an acceptor thread and one thread
/// per attached compute thread, which holds its liveness socket.
pub(crate) struct ShmEndpoint {
    port: u16,
    stopping: Arc<AtomicBool>,
    links: Arc<Links>,
    acceptor: Option<JoinHandle<()>>,
}

impl ShmEndpoint {
    /// Listen for compute processes of the memory server on TCP port `port`.
    pub(crate) fn start(
        node: Arc<MemoryNode>,
        keys: Keyring,
        port: u16,
    ) -> io::Result<ShmEndpoint> {
        let listener = UnixListener::bind_addr(&unix_addr(port)?)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let links = Arc::new(Links::default());
        let (s, l) = (stopping.clone(), links.clone());
        let acceptor = thread::Builder::new()
            .name(format!("shmaccept-{port}"))
            .spawn(move || accept_loop(&listener, &node, &keys, &s, &l))?;
        Ok(ShmEndpoint {
            port,
            stopping,
            links,
            acceptor: Some(acceptor),
        })
    }

    /// Stop accepting and close every liveness socket: attached compute
    /// threads see the server gone.
    pub(crate) fn stop(&mut self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(addr) = unix_addr(self.port) {
            if UnixStream::connect_addr(&addr).is_ok() {
                if let Some(a) = self.acceptor.take() {
                    let _ = a.join();
                }
            }
        }
        for (_, s) in self.links.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Attached compute threads at most, and connections in their handshake at
/// most: beyond either, a new connection is closed at once. (This socket is
/// on the host, inside its trust boundary; the caps keep a buggy process
/// from exhausting threads.)
const LINKS_MAX: usize = 4096;
const HANDSHAKING_MAX: usize = 64;

fn accept_loop(
    listener: &UnixListener,
    node: &Arc<MemoryNode>,
    keys: &Keyring,
    stopping: &AtomicBool,
    links: &Arc<Links>,
) {
    let mut next = 0u64;
    let handshaking = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let accepted = listener.accept();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                log::warn!("shm: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let full = links.lock().unwrap_or_else(|e| e.into_inner()).len() >= LINKS_MAX;
        if full || handshaking.load(Ordering::SeqCst) >= HANDSHAKING_MAX {
            log::warn!("shm: at the connection limit; closing a new connection");
            continue;
        }
        next += 1;
        let id = next;
        // Registered here, before the handshake: `stop` joins this thread
        // before it closes the links, so no link it admits is missed.
        match stream.try_clone() {
            Ok(s) => drop(
                links
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, s),
            ),
            Err(e) => {
                log::warn!("shm: cannot keep a connection: {e}");
                continue;
            }
        }
        let (node, links, keys) = (node.clone(), links.clone(), keys.clone());
        handshaking.fetch_add(1, Ordering::SeqCst);
        let counted = handshaking.clone();
        let spawned = thread::Builder::new()
            .name("shmlink".into())
            .stack_size(128 << 10)
            .spawn(move || serve_link(&node, &keys, stream, id, &links, &counted));
        if let Err(e) = spawned {
            handshaking.fetch_sub(1, Ordering::SeqCst);
            log::warn!("shm: cannot serve a connection: {e}");
        }
    }
}

/// One attached compute thread: the handshake, then wait for its close.
fn serve_link(
    node: &MemoryNode,
    keys: &Keyring,
    mut stream: UnixStream,
    id: u64,
    links: &Links,
    handshaking: &std::sync::atomic::AtomicUsize,
) {
    let shook = handshake(node, keys, &mut stream);
    handshaking.fetch_sub(1, Ordering::SeqCst);
    match shook {
        Ok(()) => {
            // Nothing more is expected: any byte is a protocol violation.
            let _ = stream.set_read_timeout(None);
            let mut b = [0u8; 1];
            let _ = stream.read(&mut b);
        }
        Err(e) => log::warn!("shm: connection not admitted: {e}"),
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    links.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
}

fn handshake(node: &MemoryNode, keys: &Keyring, stream: &mut UnixStream) -> io::Result<()> {
    let deadline = std::time::Instant::now() + tandem_auth::HANDSHAKE_DEADLINE;
    let peer = tandem_auth::accept(stream, keys, &[Role::Compute], deadline)
        .map_err(|e| io::Error::other(e.to_string()))?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut body = Vec::new();
    let msg = match wire::read_frame(stream, &mut body) {
        Ok(true) => ClientMsg::decode(&body).map_err(io::Error::other)?,
        Ok(false) => return Err(io::Error::other("closed before its hello")),
        Err(e) => return Err(io::Error::other(format!("{e:?}"))),
    };
    let ClientMsg::Hello { compute, key, .. } = msg.clone() else {
        send(
            stream,
            &ServerMsg::Reject {
                reason: RejectReason::Protocol,
            },
            None,
        )?;
        return Err(io::Error::other(format!(
            "first frame is not a hello: {msg:?}"
        )));
    };
    if peer.id != compute as u64 {
        send(
            stream,
            &ServerMsg::Reject {
                reason: RejectReason::BadKey,
            },
            None,
        )?;
        return Err(io::Error::other(format!(
            "authenticated as compute node {} but said hello as {compute}",
            peer.id
        )));
    }
    // Record the process before the key check (see `MemoryNode::add_mapper`).
    node.add_mapper(compute, Process::of_peer(stream)?);
    if !node.is_authorized(compute, key) {
        let reason = if node.is_fenced(compute) {
            RejectReason::Fenced
        } else {
            RejectReason::BadKey
        };
        send(stream, &ServerMsg::Reject { reason }, None)?;
        return Err(io::Error::other(format!(
            "compute node {compute}: {reason:?}"
        )));
    }
    let fd = node
        .shared_fd()
        .ok_or_else(|| io::Error::other("region not shared"))?;
    send(stream, &ServerMsg::HelloOk, Some(fd))
}

/// Send one frame, with `fd` attached if given.
fn send(
    stream: &UnixStream,
    msg: &ServerMsg,
    fd: Option<std::os::fd::BorrowedFd<'_>>,
) -> io::Result<()> {
    let mut buf = Vec::new();
    msg.encode(&mut buf);
    let fds = fd.into_iter().collect::<Vec<_>>();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    let n = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(&buf)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    // The descriptor travels with the first byte; the rest may follow plainly.
    (&*stream).write_all(&buf[n..])
}

/// Attach compute node `compute`, holding `key`, to the shared region of the
/// memory server at `addr` (its TCP address; the socket is named after the
/// port). Returns the mapped node and the liveness socket.
pub(crate) fn attach(
    addr: SocketAddr,
    keys: &Keyring,
    compute: ComputeNodeId,
    key: crate::RegionKey,
) -> io::Result<(MemoryNode, UnixStream)> {
    let mut stream = UnixStream::connect_addr(&unix_addr(addr.port())?).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("memory server {addr} has no shm endpoint (start it with --shm): {e}"),
        )
    })?;
    let deadline = std::time::Instant::now() + tandem_auth::HANDSHAKE_DEADLINE;
    tandem_auth::connect(&mut stream, keys, Role::Compute, compute as u64, deadline)
        .map_err(|e| io::Error::new(e.io_kind(), format!("memory server {addr}: {e}")))?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut buf = Vec::new();
    ClientMsg::Hello {
        compute,
        key,
        priority: false,
    }
    .encode(&mut buf);
    stream.write_all(&buf)?;
    let (msg, fd) = receive(&stream)?;
    match (msg, fd) {
        (ServerMsg::HelloOk, Some(fd)) => {
            stream.set_read_timeout(None)?;
            Ok((MemoryNode::attached(fd)?, stream))
        }
        (ServerMsg::Reject { reason }, _) => {
            let kind = match reason {
                RejectReason::Protocol => io::ErrorKind::InvalidData,
                _ => io::ErrorKind::PermissionDenied,
            };
            Err(io::Error::new(
                kind,
                format!("memory server {addr} rejected the shm hello: {reason:?}"),
            ))
        }
        (other, _) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("memory server {addr} answered the shm hello with {other:?}"),
        )),
    }
}

/// Read one server frame and the descriptor that came with it, if any.
fn receive(stream: &UnixStream) -> io::Result<(ServerMsg, Option<OwnedFd>)> {
    let mut head = [0u8; 64];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        stream.as_fd(),
        &mut [IoSliceMut::new(&mut head)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?
    .bytes;
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    if got < FRAME_HEADER_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short shm answer",
        ));
    }
    let len = wire::frame_len(head[..FRAME_HEADER_BYTES].try_into().unwrap())?;
    let mut body = head[FRAME_HEADER_BYTES..got.min(FRAME_HEADER_BYTES + len)].to_vec();
    if body.len() < len {
        let have = body.len();
        body.resize(len, 0);
        (&*stream).read_exact(&mut body[have..])?;
    }
    Ok((ServerMsg::decode(&body)?, fd))
}
