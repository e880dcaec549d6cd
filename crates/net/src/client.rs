//! The Rust client library: one closed-loop session over TCP to any node
//! (the stores are leaderless). The CLI uses the same wire protocol.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tandem_auth::{Keyring, Role};

use crate::protocol::SessionId;
use crate::wire::{frame, ClientReq, ClientResp, Frames, Hello};

pub struct Client<Op, R> {
    w: TcpStream,
    frames: Frames<TcpStream>,
    session: SessionId,
    next_req: u64,
    addr: SocketAddr,
    _types: std::marker::PhantomData<(Op, R)>,
}

impl<Op: Serialize, R: DeserializeOwned> Client<Op, R> {
    /// Connect session `session` (unique in the cluster) to the node at `addr`.
    pub fn connect(
        addr: SocketAddr,
        keys: &Keyring,
        session: SessionId,
        timeout: Duration,
    ) -> io::Result<Self> {
        let mut w = TcpStream::connect_timeout(&addr, timeout)
            .and_then(|w| crate::conn::not_to_itself(&w).map(|_| w))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot reach node at {addr}: {e}")))?;
        crate::conn::authenticate(&mut w, addr, keys, Role::Client, 0)?;
        w.set_nodelay(true)?;
        w.set_read_timeout(Some(timeout))?;
        let mut c = Client {
            frames: Frames::new(w.try_clone()?),
            w,
            session,
            next_req: 0,
            addr,
            _types: std::marker::PhantomData,
        };
        c.w.write_all(&frame(&Hello::Client))?;
        Ok(c)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Send `op` and wait for its reply (a timeout is an error: outcome unknown).
    pub fn call(&mut self, op: Op) -> io::Result<R> {
        let req = self.next_req;
        self.next_req += 1;
        self.w.write_all(&frame(&ClientReq {
            session: self.session,
            req,
            op,
        }))?;
        loop {
            let r: ClientResp<R> = self.frames.next()?.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("node at {} closed the session", self.addr),
                )
            })?;
            if r.req == req && r.session == self.session {
                return Ok(r.result);
            }
        }
    }
}

/// A session id no other session of the cluster uses: random, top bit set
/// (the load generator numbers its sessions from 0).
pub fn fresh_session_id() -> SessionId {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = N.fetch_add(1, Ordering::Relaxed);
    tandem_sim::Rng::new(t ^ (std::process::id() as u64) << 32 ^ n.rotate_left(48)).next_u64()
        | 1 << 63
}

/// What [`Mux::poll`] found.
#[derive(Debug)]
pub enum MuxEvent<R> {
    Reply {
        node: usize,
        session: SessionId,
        req: u64,
        result: R,
    },
    /// The stream to node `node` closed: its sessions' calls have unknown outcomes.
    Lost { node: usize },
}

/// Many closed-loop sessions driven by one thread over one stream per node
/// (the load generator): requests queued between two polls leave in one
/// write per node, and replies are matched to sessions by the caller.
pub struct Mux<Op, R> {
    poll: mio::Poll,
    events: mio::Events,
    nodes: Vec<SocketAddr>,
    keys: Keyring,
    timeout: Duration,
    conns: Vec<Option<crate::conn::Conn>>,
    _types: std::marker::PhantomData<(Op, R)>,
}

impl<Op: Serialize, R: DeserializeOwned> Mux<Op, R> {
    pub fn new(nodes: Vec<SocketAddr>, keys: Keyring, timeout: Duration) -> io::Result<Self> {
        let conns = nodes.iter().map(|_| None).collect();
        Ok(Mux {
            poll: mio::Poll::new()?,
            events: mio::Events::with_capacity(256),
            nodes,
            keys,
            timeout,
            conns,
            _types: std::marker::PhantomData,
        })
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Queue a request to `node`, connecting first if needed (Err: the
    /// node cannot be reached).
    pub fn send(&mut self, node: usize, session: SessionId, req: u64, op: Op) -> io::Result<()> {
        if self.conns[node].is_none() {
            let addr = self.nodes[node];
            let conn =
                crate::conn::Conn::connect_as(addr, self.timeout, &self.keys, Role::Client, 0);
            let mut c = conn.map_err(|e| {
                io::Error::new(e.kind(), format!("cannot reach node at {addr}: {e}"))
            })?;
            c.register(self.poll.registry(), mio::Token(node))?;
            c.queue(&Hello::Client);
            self.conns[node] = Some(c);
        }
        self.conns[node]
            .as_mut()
            .expect("connected above")
            .queue(&ClientReq { session, req, op });
        Ok(())
    }

    /// Write what is queued, wait up to `wait` for replies, and append
    /// them (and streams lost) to `out`.
    pub fn poll(&mut self, wait: Duration, out: &mut Vec<MuxEvent<R>>) -> io::Result<()> {
        for node in 0..self.conns.len() {
            if self.conns[node]
                .as_mut()
                .is_some_and(|c| c.flush().is_err())
            {
                self.lose(node, out);
            }
        }
        match self.poll.poll(&mut self.events, Some(wait)) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            r => r?,
        }
        let ready: Vec<usize> = self.events.iter().map(|e| e.token().0).collect();
        for node in ready {
            let Some(c) = self.conns[node].as_mut() else {
                continue;
            };
            let mut bad = false;
            let end = c.read_frames(|b| match crate::conn::decode::<ClientResp<R>>(b) {
                Ok(r) => out.push(MuxEvent::Reply {
                    node,
                    session: r.session,
                    req: r.req,
                    result: r.result,
                }),
                Err(_) => bad = true,
            });
            if bad || !matches!(end, Ok(crate::conn::ReadEnd::Open)) || c.flush().is_err() {
                self.lose(node, out);
            }
        }
        Ok(())
    }

    fn lose(&mut self, node: usize, out: &mut Vec<MuxEvent<R>>) {
        if let Some(mut c) = self.conns[node].take() {
            let _ = self.poll.registry().deregister(&mut c.stream);
            out.push(MuxEvent::Lost { node });
        }
    }
}

/// Ask the node at `addr` what it has done so far (messages, requests, persists).
pub fn node_stats(
    addr: SocketAddr,
    keys: &Keyring,
    timeout: Duration,
) -> io::Result<crate::wire::NodeStats> {
    let mut w = TcpStream::connect_timeout(&addr, timeout)?;
    crate::conn::not_to_itself(&w)?;
    crate::conn::authenticate(&mut w, addr, keys, Role::Client, 0)?;
    w.set_read_timeout(Some(timeout))?;
    w.write_all(&frame(&Hello::Stats))?;
    Frames::new(w).next()?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("node at {addr} closed before its stats"),
        )
    })
}
