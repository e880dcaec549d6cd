//! The streams of a node's event loop (host.rs): accepted streams (peers'
//! messages, client sessions, stats requests), our own stream to each peer
//! and to the configuration manager, reconnects, and flushing the batched
//! writes once per round.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use mio::{Events, Interest, Token};
use serde::Serialize;

use tandem_auth::{Keyring, Peer};

use crate::conn::{decode, Conn, ReadEnd};
use crate::host::Host;
use crate::links::Wire;
use crate::protocol::NodeId;
use crate::shake::{Dialing, Listening};
use crate::wire::{ClientReq, FromManager, Hello};

pub(crate) const WAKER: Token = Token(0);
const LISTENER: Token = Token(1);
const MANAGER: Token = Token(2);
/// Our stream to peer `n` is token `PEER + n`; accepted stream `c` is `INBOUND + c`.
const PEER: usize = 1 << 8;
const INBOUND: usize = 1 << 20;

/// How long a link waits before its next attempt to reach its peer: this
/// after its first failure, doubling with each failure in a row, at most
/// `RECONNECT_MAX_NS`. A link that comes up starts again from the least.
const RECONNECT_MIN_NS: u64 = 20_000_000;
const RECONNECT_MAX_NS: u64 = 250_000_000;
/// How long a connect may go unanswered (its SYN dropped: a blackholed or
/// partitioned peer) before the attempt is abandoned and the next one
/// scheduled. The kernel would retransmit the SYN only after 1 s, then 3 s:
/// a fresh attempt soon after the network heals is what brings a link back
/// within a second.
const CONNECT_NS: u64 = 250_000_000;
/// Accepted streams still in their handshake; a new one sheds the oldest
/// that has not sent its whole hello (else the oldest).
const HANDSHAKING_MAX: usize = 64;
/// Accepted streams past their handshake (peers and client streams).
const INBOUND_MAX: usize = 4096;

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
    /// Until the peer proved its role: the handshake.
    shake: Option<Listening>,
    /// Who it proved to be.
    who: Option<Peer>,
}

/// A stream this node opens (to a peer or the manager): it reconnects by
/// itself; while it is down, what would be sent on it is dropped, as a
/// lossy network would (the protocols retransmit).
/// A stream this node opens, once connected, runs the role handshake as
/// the peer role (claiming this node's id); it is up only once the other
/// side accepted it, and then says its [`Hello`].
pub(crate) struct Link {
    addr: SocketAddr,
    /// The address this node dials from (its own), so that a firewall can
    /// tell its streams from other nodes' on a shared host.
    from: Option<IpAddr>,
    hello: Hello,
    keys: Keyring,
    conn: Option<Conn>,
    shake: Option<Dialing>,
    /// When the current connect gives up if it is still unanswered.
    connect_by: u64,
    pub(crate) retry_at: u64,
    /// Attempts that failed since the link was last up.
    failures: u32,
    /// Times the link was up and went down (a broken or silent stream).
    pub(crate) lost: u64,
}

impl Link {
    pub(crate) fn new(
        addr: SocketAddr,
        from: Option<IpAddr>,
        hello: Hello,
        keys: &Keyring,
    ) -> Link {
        Link {
            addr,
            from,
            hello,
            keys: keys.clone(),
            conn: None,
            shake: None,
            connect_by: 0,
            retry_at: 0,
            failures: 0,
            lost: 0,
        }
    }
    /// When the event loop must look at this link next (not up): its
    /// next attempt, or the deadline of the attempt under way.
    pub(crate) fn due(&self) -> u64 {
        match (&self.conn, &self.shake) {
            (None, _) => self.retry_at,
            (Some(c), _) if c.connecting => self.connect_by,
            (Some(_), Some(d)) => d.deadline,
            (Some(_), None) => u64::MAX,
        }
    }
    pub(crate) fn is_up(&self) -> bool {
        self.conn.is_some() && self.shake.is_none()
    }
    pub(crate) fn pending(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.pending())
    }
    pub(crate) fn queue<T: Serialize>(&mut self, v: &T) {
        if self.is_up() {
            self.conn.as_mut().expect("up").queue(v);
        }
    }
    fn down(&mut self, now: u64) {
        self.lost += u64::from(self.is_up());
        self.conn = None;
        self.shake = None;
        let backoff = RECONNECT_MIN_NS << self.failures.min(8);
        self.retry_at = now + backoff.min(RECONNECT_MAX_NS);
        self.failures += 1;
    }
    /// Try to connect if it is time (and give up a connect or a handshake
    /// past its deadline).
    fn redial(&mut self, now: u64, r: &mio::Registry, t: Token) {
        let connecting = self.conn.as_ref().is_some_and(|c| c.connecting);
        if (connecting && now > self.connect_by)
            || self.shake.as_ref().is_some_and(|d| now > d.deadline)
        {
            self.down(now);
        }
        if self.conn.is_some() || now < self.retry_at {
            return;
        }
        self.connect_by = now + CONNECT_NS;
        let (role, id) = self.hello.speaker();
        let opened = Conn::start_connect_from(self.addr, self.from)
            .and_then(|mut c| c.register(r, t).map(|_| c))
            .and_then(|mut c| Dialing::start(&self.keys, role, id, &mut c, now).map(|d| (c, d)));
        match opened {
            Ok((c, d)) => {
                self.conn = Some(c);
                self.shake = Some(d);
            }
            Err(e) => {
                log::debug!("link to {}: {e}", self.addr);
                self.down(now);
            }
        }
    }
    /// An event on our stream: a completed connect, the handshake's next
    /// message, frames, or room to write. `Ok(true)`: it just came up.
    fn on_event(&mut self, f: impl FnMut(&[u8])) -> io::Result<bool> {
        let Some(c) = self.conn.as_mut() else {
            return Ok(false);
        };
        if !c.connected()? {
            return Ok(false);
        }
        c.flush()?;
        let mut came_up = false;
        if let Some(d) = self.shake.as_mut() {
            if !d.advance(c)? {
                return Ok(false);
            }
            self.shake = None;
            self.failures = 0;
            c.queue(&self.hello);
            came_up = true;
        }
        if c.read_frames(f)? != ReadEnd::Open {
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        c.flush()?;
        Ok(came_up)
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
        crate::conn::count_syscall();
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
        if let Some(m) = self.manager.as_mut() {
            m.redial(now, r, MANAGER);
        }
        self.expire_handshakes(now);
    }

    /// Close accepted streams whose handshake ran past its deadline.
    fn expire_handshakes(&mut self, now: u64) {
        while let Some(&id) = self.handshaking.front() {
            let due = self
                .inbound
                .get(&id)
                .and_then(|ib| ib.shake.as_ref())
                .map(|l| l.deadline);
            match due {
                Some(d) if now <= d => return,
                Some(_) => self.close(id, Role::Hello),
                None => {}
            }
            self.handshaking.pop_front();
        }
    }

    /// Make room for one more handshake: shed the oldest stream that has
    /// not sent its whole hello, else the oldest.
    fn shed_handshake(&mut self) {
        self.handshaking
            .retain(|id| self.inbound.get(id).is_some_and(|ib| ib.shake.is_some()));
        if self.handshaking.len() < HANDSHAKING_MAX {
            return;
        }
        // A hello waiting unread (the loop has not got to it) counts as heard.
        let heard = |id: &usize| {
            self.inbound.get(id).is_some_and(|ib| {
                ib.shake.as_ref().is_some_and(|l| l.heard)
                    || tandem_auth::gate::bytes_waiting(&ib.conn.stream) >= tandem_auth::HELLO_BYTES
            })
        };
        let i = self
            .handshaking
            .iter()
            .position(|id| !heard(id))
            .unwrap_or(0);
        if let Some(id) = self.handshaking.remove(i) {
            self.close(id, Role::Hello);
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if self.inbound.len() >= INBOUND_MAX + HANDSHAKING_MAX {
                        continue; // dropped: the stream closes
                    }
                    crate::conn::bound_silence(&s);
                    self.shed_handshake();
                    let id = self.next_conn;
                    self.next_conn += 1;
                    let mut conn = Conn::new(s);
                    if conn
                        .register(self.poll.registry(), Token(INBOUND + id))
                        .is_ok()
                    {
                        let roles = [tandem_auth::Role::Peer, tandem_auth::Role::Client];
                        let shake = Some(Listening::new(&self.cfg.keys, &roles, self.now()));
                        let (role, who) = (Role::Hello, None);
                        self.inbound.insert(
                            id,
                            Inbound {
                                conn,
                                role,
                                shake,
                                who,
                            },
                        );
                        self.handshaking.push_back(id);
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
        if let Err(e) = l.on_event(|_| {}) {
            log::debug!("link to node {n}: {e}");
            l.down(now);
        }
    }

    fn manager_event(&mut self) {
        let now = self.now();
        let Some(l) = self.manager.as_mut() else {
            return;
        };
        let mut got = Vec::new();
        match l.on_event(|b| got.extend(decode::<FromManager>(b).ok())) {
            Ok(true) => self.on_manager_up(),
            Ok(false) => {}
            Err(e) => {
                log::debug!("link to the manager: {e}");
                l.down(now);
            }
        }
        for m in got {
            self.on_manager(m);
        }
    }

    fn inbound_event(&mut self, id: usize) {
        let Some(ib) = self.inbound.get_mut(&id) else {
            return;
        };
        if let Some(l) = ib.shake.as_mut() {
            match l.advance(&mut ib.conn) {
                Ok(Some(peer)) => {
                    ib.who = Some(peer);
                    ib.shake = None;
                }
                Ok(None) if ib.conn.flush().is_ok() => return,
                Ok(None) => return self.close(id, Role::Hello),
                Err(e) => {
                    log::debug!("stream {id}: {e}");
                    return self.close(id, Role::Hello);
                }
            }
        }
        let who = ib.who.expect("authenticated above");
        let mut items: Vec<Item<P>> = Vec::new();
        let role = &mut ib.role;
        let end = ib.conn.read_frames(|b| items.push(item::<P>(role, who, b)));
        let role = ib.role;
        let closed = !matches!(end, Ok(ReadEnd::Open)) || ib.conn.flush().is_err();
        for it in items {
            match it {
                Item::Hello => {}
                Item::PeerHello(n) if n == self.cfg.id || !self.peers.contains_key(&n) => {
                    log::debug!(
                        "stream {id}: node {n} is not a peer of node {}",
                        self.cfg.id
                    );
                    return self.close(id, role);
                }
                Item::PeerHello(n) => self.peer_is_up(n),
                Item::Peer(from, msg) => self.on_peer(from, msg),
                Item::Client(r) => self.on_client(id, r.session, r.req, r.op),
                Item::StatsAsked => {
                    let mut s = self.stats;
                    s.links_lost = self.peers.values().map(|l| l.lost).sum();
                    s.syscalls = crate::conn::SYSCALLS.load(std::sync::atomic::Ordering::Relaxed);
                    // Answered on the event loop's own thread.
                    (s.cpu_ns, s.loop_cpu_ns) =
                        (tandem_sim::cpu::process_ns(), tandem_sim::cpu::thread_ns());
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

    pub(crate) fn close(&mut self, id: usize, role: Role) {
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

/// Decode one frame of an accepted stream; its first frame is the hello,
/// which must speak for the role and id the stream authenticated as.
fn item<P: Wire>(role: &mut Role, who: Peer, b: &[u8]) -> Item<P> {
    match *role {
        Role::Hello => match decode::<Hello>(b) {
            Ok(h) if h.speaker() != (who.role, who.id) => Item::Bad(format!(
                "{h:?} from a stream authenticated as {} {}",
                who.role, who.id
            )),
            Ok(Hello::Peer { node }) => {
                *role = Role::Peer(node);
                Item::PeerHello(node)
            }
            Ok(Hello::Client) => {
                *role = Role::Client;
                Item::Hello
            }
            Ok(Hello::Stats) => {
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
