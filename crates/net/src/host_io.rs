//! The streams of a node's event loop (host.rs): accepted streams (peers'
//! messages, client sessions, stats requests), our own stream to each peer
//! and to the configuration manager, reconnects, and flushing the batched
//! writes once per round.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use mio::{Events, Interest, Token};
use serde::Serialize;

use crate::conn::{decode, Conn, ReadEnd};
use crate::host::Host;
use crate::links::Wire;
use crate::protocol::NodeId;
use crate::wire::{frame, ClientReq, FromManager, Hello};

pub(crate) const WAKER: Token = Token(0);
const LISTENER: Token = Token(1);
const MANAGER: Token = Token(2);
/// Our stream to peer `n` is token `PEER + n`; accepted stream `c` is `INBOUND + c`.
const PEER: usize = 1 << 8;
const INBOUND: usize = 1 << 20;

/// How long a link waits between attempts to reach its peer.
const RECONNECT_NS: u64 = 50_000_000;

/// What an accepted stream carries, known from its hello.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Hello,
    Peer(NodeId),
    Client,
    Stats,
}

pub(crate) struct Inbound {
    pub(crate) conn: Conn,
    role: Role,
}

/// A stream this node opens (to a peer or the manager): it reconnects by
/// itself; while it is down, what would be sent on it is dropped, as a
/// lossy network would (the protocols retransmit).
pub(crate) struct Link {
    addr: SocketAddr,
    hello: Vec<u8>,
    conn: Option<Conn>,
    pub(crate) retry_at: u64,
}

impl Link {
    pub(crate) fn new(addr: SocketAddr, hello: Hello) -> Link {
        Link {
            addr,
            hello: frame(&hello),
            conn: None,
            retry_at: 0,
        }
    }
    pub(crate) fn is_up(&self) -> bool {
        self.conn.is_some()
    }
    pub(crate) fn pending(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.pending())
    }
    pub(crate) fn queue<T: Serialize>(&mut self, v: &T) {
        if let Some(c) = &mut self.conn {
            c.queue(v);
        }
    }
    fn down(&mut self, now: u64) {
        self.conn = None;
        self.retry_at = now + RECONNECT_NS;
    }
    /// Try to connect if it is time; true if a stream was opened.
    fn redial(&mut self, now: u64, r: &mio::Registry, t: Token) -> bool {
        if self.conn.is_some() || now < self.retry_at {
            return false;
        }
        match Conn::start_connect(self.addr).and_then(|mut c| c.register(r, t).map(|_| c)) {
            Ok(mut c) => {
                c.queue_bytes(&self.hello);
                self.conn = Some(c);
                true
            }
            Err(_) => {
                self.down(now);
                false
            }
        }
    }
}

/// Decoded frames of one read.
enum Item<P: Wire> {
    Hello,
    /// Peer `n` dialled us: it is up.
    PeerHello(NodeId),
    Peer(NodeId, P::Msg),
    Client(ClientReq<P::Op>),
    StatsAsked,
    Bad(String),
}

impl<P: Wire> Host<P> {
    pub(crate) fn register_listener(&mut self) -> io::Result<()> {
        self.poll
            .registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)
    }

    /// Wait up to `wait` for the streams, then handle what they carry.
    pub(crate) fn poll_once(&mut self, events: &mut Events, wait: Duration) -> io::Result<()> {
        self.redial_links();
        match self.poll.poll(events, Some(wait)) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            r => r?,
        }
        for ev in events.iter() {
            match ev.token() {
                WAKER => {}
                LISTENER => self.accept(),
                MANAGER => self.manager_event(),
                Token(t) if (PEER..INBOUND).contains(&t) => {
                    self.peer_link_event((t - PEER) as NodeId)
                }
                Token(t) => self.inbound_event(t - INBOUND),
            }
        }
        Ok(())
    }

    /// Our link to peer `n`, dialled first if it is down and due.
    pub(crate) fn peer_link(&mut self, n: NodeId) -> Option<&mut Link> {
        let now = self.now();
        let l = self.peers.get_mut(&n)?;
        l.redial(now, self.poll.registry(), Token(PEER + n as usize));
        Some(l)
    }

    fn redial_links(&mut self) {
        let now = self.now();
        let r = self.poll.registry();
        for (&n, l) in self.peers.iter_mut() {
            l.redial(now, r, Token(PEER + n as usize));
        }
        if self
            .manager
            .as_mut()
            .is_some_and(|m| m.redial(now, r, MANAGER))
        {
            self.on_manager_up();
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    let id = self.next_conn;
                    self.next_conn += 1;
                    let mut conn = Conn::new(s);
                    if conn
                        .register(self.poll.registry(), Token(INBOUND + id))
                        .is_ok()
                    {
                        self.inbound.insert(
                            id,
                            Inbound {
                                conn,
                                role: Role::Hello,
                            },
                        );
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("accept: {e}");
                    return;
                }
            }
        }
    }

    /// Our stream to a peer: it only carries our messages, so an event on
    /// it is a completed connect, room to write, or the stream closing.
    fn peer_link_event(&mut self, n: NodeId) {
        let now = self.now();
        let Some(l) = self.peers.get_mut(&n) else {
            return;
        };
        let Some(c) = l.conn.as_mut() else { return };
        let ok = c.connected().is_ok()
            && (c.connecting || c.read_frames(|_| {}).is_ok_and(|e| e == ReadEnd::Open))
            && c.flush().is_ok();
        if !ok {
            l.down(now);
        }
    }

    fn manager_event(&mut self) {
        let now = self.now();
        let Some(l) = self.manager.as_mut() else {
            return;
        };
        let Some(c) = l.conn.as_mut() else { return };
        let mut got = Vec::new();
        let ok = c.connected().is_ok()
            && (c.connecting
                || c.read_frames(|b| got.extend(decode::<FromManager>(b).ok()))
                    .is_ok_and(|e| e == ReadEnd::Open))
            && c.flush().is_ok();
        if !ok {
            l.down(now);
        }
        for m in got {
            self.on_manager(m);
        }
    }

    fn inbound_event(&mut self, id: usize) {
        let secret = self.cfg.secret;
        let Some(ib) = self.inbound.get_mut(&id) else {
            return;
        };
        let mut items: Vec<Item<P>> = Vec::new();
        let role = &mut ib.role;
        let end = ib
            .conn
            .read_frames(|b| items.push(item::<P>(role, secret, b)));
        let role = ib.role;
        let closed = !matches!(end, Ok(ReadEnd::Open)) || ib.conn.flush().is_err();
        for it in items {
            match it {
                Item::Hello => {}
                Item::PeerHello(n) => self.peer_is_up(n),
                Item::Peer(from, msg) => self.on_peer(from, msg),
                Item::Client(r) => self.on_client(id, r.session, r.req, r.op),
                Item::StatsAsked => {
                    let s = self.stats;
                    if let Some(ib) = self.inbound.get_mut(&id) {
                        ib.conn.queue(&s);
                    }
                }
                Item::Bad(why) => {
                    log::debug!("stream {id}: {why}");
                    return self.close(id, role);
                }
            }
        }
        if closed {
            self.close(id, role);
        }
    }

    /// Peer `n` dialled us, so it is (back) up: dial it now rather than at
    /// the link's next retry, or a restarted node's first answers (HEAL's
    /// Recov_start_ACKs) are dropped for up to `RECONNECT_NS`.
    fn peer_is_up(&mut self, n: NodeId) {
        if let Some(l) = self.peers.get_mut(&n).filter(|l| !l.is_up()) {
            l.retry_at = 0;
        }
        self.peer_link(n);
    }

    fn close(&mut self, id: usize, role: Role) {
        if let Some(mut ib) = self.inbound.remove(&id) {
            let _ = self.poll.registry().deregister(&mut ib.conn.stream);
        }
        if role == Role::Client {
            self.on_client_gone(id);
        }
    }

    /// Write every stream's batched frames (one write each, if the socket
    /// takes it); a stream that broke is dropped.
    pub(crate) fn flush_all(&mut self) {
        let now = self.now();
        let mut broken = Vec::new();
        for (&id, ib) in self.inbound.iter_mut() {
            if ib.conn.pending() > 0 && ib.conn.flush().is_err() {
                broken.push((id, ib.role));
            }
        }
        for (id, role) in broken {
            self.close(id, role);
        }
        for l in self.peers.values_mut().chain(self.manager.iter_mut()) {
            let Some(c) = l.conn.as_mut() else { continue };
            if c.pending() > 0 {
                if !c.connecting {
                    self.stats.peer_writes += 1;
                }
                if c.flush().is_err() {
                    l.down(now);
                }
            }
        }
    }
}

/// Decode one frame of an accepted stream; its first frame is the hello.
fn item<P: Wire>(role: &mut Role, secret: u64, b: &[u8]) -> Item<P> {
    match *role {
        Role::Hello => match decode::<Hello>(b) {
            Ok(h) if h.secret() != secret => Item::Bad("wrong cluster secret".into()),
            Ok(Hello::Peer { node, .. }) => {
                *role = Role::Peer(node);
                Item::PeerHello(node)
            }
            Ok(Hello::Client { .. }) => {
                *role = Role::Client;
                Item::Hello
            }
            Ok(Hello::Stats { .. }) => {
                *role = Role::Stats;
                Item::StatsAsked
            }
            Ok(Hello::ToManager { .. }) => Item::Bad("a manager link reached a node".into()),
            Err(e) => Item::Bad(format!("bad hello: {e}")),
        },
        Role::Peer(n) => decode(b).map_or_else(|e| Item::Bad(e.to_string()), |m| Item::Peer(n, m)),
        Role::Client => decode(b).map_or_else(|e| Item::Bad(e.to_string()), Item::Client),
        Role::Stats => Item::Bad("a stats stream sent more than its hello".into()),
    }
}
