//! A node as an OS process (DESIGN.md §7.1): one event loop owns the
//! protocol and carries out its commands over TCP and a memory-mapped NVM
//! file. Messages to one peer that one batch of inputs produces leave in
//! one write (coalescing). Persists are appended to the NVM file before
//! their `PersistDone` is handed back, so `kill -9` loses exactly what was
//! not persisted.
//!
//! With a configuration manager, the node serves clients only while it
//! holds a lease (see `manager.rs`); configurations come from the manager.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::cmp::Reverse;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::links::{self, Event, Wire};
use crate::nvm_file::NvmFile;
use crate::protocol::{Command, Config, Input, NodeFactory, NodeId, SessionId, Token};
use crate::wire::{put, ClientResp, FromManager};

#[derive(Clone, Debug)]
pub struct HostConfig {
    pub id: NodeId,
    /// Every node's address, this one's included.
    pub peers: Vec<(NodeId, SocketAddr)>,
    pub manager: Option<SocketAddr>,
    pub secret: u64,
    pub nvm: PathBuf,
    pub nvm_bytes: u64,
    /// Flush the NVM file to the device after every batch (machine crashes).
    pub fsync: bool,
    pub heartbeat: Duration,
    /// Must equal the manager's lease.
    pub lease: Duration,
}

/// A handle to stop a node running in this process (tests).
#[derive(Clone)]
pub struct NodeHandle<P: Wire> {
    tx: Sender<Event<P>>,
}

impl<P: Wire> NodeHandle<P> {
    pub fn stop(&self) {
        let _ = self.tx.send(Event::Stop);
    }
}

/// Recover the node from its NVM file (or start it fresh) and serve on
/// `listener`, in the calling thread, until the process ends.
pub fn run<P: Wire, F: NodeFactory<P>>(cfg: HostConfig, listener: TcpListener, factory: F) -> io::Result<()> {
    let (tx, rx) = channel();
    serve(cfg, listener, factory, tx, rx)
}

/// Run a node on a thread of this process; the handle stops it.
pub fn spawn<P: Wire, F: NodeFactory<P> + Send + 'static>(cfg: HostConfig, listener: TcpListener, factory: F) -> NodeHandle<P>
where
    P::Msg: 'static,
{
    let (tx, rx) = channel();
    let t = tx.clone();
    std::thread::Builder::new()
        .name(format!("node-{}", cfg.id))
        .spawn(move || {
            if let Err(e) = serve(cfg, listener, factory, t, rx) {
                eprintln!("node: {e}");
            }
        })
        .expect("spawn a node");
    NodeHandle { tx }
}

fn serve<P: Wire, F: NodeFactory<P>>(cfg: HostConfig, listener: TcpListener, factory: F, tx: Sender<Event<P>>, rx: Receiver<Event<P>>) -> io::Result<()> {
    let (nvm, image) = NvmFile::<P::Record>::open(&cfg.nvm, cfg.nvm_bytes)?;
    let config = Config::new(0, cfg.peers.iter().map(|p| p.0).collect());
    let proto = if image.is_empty() { factory.start(cfg.id, &config) } else { factory.recover(cfg.id, &config, &image) };
    eprintln!("node {}: {} from {} ({} slots)", cfg.id, if image.is_empty() { "started" } else { "recovered" }, cfg.nvm.display(), image.len());
    links::spawn_acceptor::<P>(listener, cfg.secret, tx.clone());
    if let Some(m) = cfg.manager {
        links::spawn_manager_link::<P>(cfg.id, m, cfg.secret, tx.clone());
    }
    let peers = cfg.peers.iter().filter(|p| p.0 != cfg.id).map(|&(n, a)| (n, (links::spawn_peer_writer(cfg.id, n, a, cfg.secret), Vec::new()))).collect();
    let mut host = Host { cfg, proto, nvm, rx, config, peers, clients: HashMap::new(), sessions: HashMap::new(), timers: BinaryHeap::new(), local: VecDeque::new(), start: Instant::now(), lease_until: 0, beats: VecDeque::new(), next_beat: 0, manager: None, parked: VecDeque::new(), unsynced: Vec::new() };
    if host.cfg.manager.is_none() {
        let c = host.config.clone();
        host.step(Input::Config(c));
    }
    host.run()
}

struct Host<P: Wire> {
    cfg: HostConfig,
    proto: P,
    nvm: NvmFile<P::Record>,
    rx: Receiver<Event<P>>,
    config: Config,
    /// Per peer: its writer and the frames batched for it.
    peers: HashMap<NodeId, (Sender<Vec<u8>>, Vec<u8>)>,
    clients: HashMap<u64, (Sender<Vec<u8>>, Vec<u8>)>,
    sessions: HashMap<SessionId, u64>,
    timers: BinaryHeap<Reverse<(u64, Token)>>,
    /// Inputs the node owes itself (persists that completed in this batch).
    local: VecDeque<Input<P>>,
    start: Instant,
    lease_until: u64,
    /// Heartbeats sent and not yet answered: (seq, sent at).
    beats: VecDeque<(u64, u64)>,
    next_beat: u64,
    manager: Option<Sender<Vec<u8>>>,
    /// Client requests waiting for a lease.
    parked: VecDeque<Input<P>>,
    /// With `fsync`: persists appended but not yet flushed to the device.
    unsynced: Vec<Token>,
}

/// Inputs handled per batch before the loop flushes its writes.
const BATCH: usize = 4096;

impl<P: Wire> Host<P> {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn run(&mut self) -> io::Result<()> {
        loop {
            let wait = self.next_deadline().saturating_sub(self.now());
            match self.rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Ok(ev) => self.handle(ev),
                Err(RecvTimeoutError::Timeout) => {}
            }
            for _ in 0..BATCH {
                match self.rx.try_recv() {
                    Ok(Event::Stop) => return Ok(()),
                    Ok(ev) => self.handle(ev),
                    Err(_) => break,
                }
            }
            self.fire_timers();
            self.heartbeat();
            self.flush()?;
        }
    }

    fn next_deadline(&self) -> u64 {
        let timer = self.timers.peek().map_or(u64::MAX, |t| t.0 .0);
        let beat = if self.manager.is_some() { self.next_beat } else { u64::MAX };
        timer.min(beat).min(self.now() + 100_000_000)
    }

    fn handle(&mut self, ev: Event<P>) {
        match ev {
            Event::Peer(from, msg) => self.step(Input::Recv { from, msg }),
            Event::Client(conn, r) => {
                self.sessions.insert(r.session, conn);
                let input = Input::Client { session: r.session, req: r.req, op: r.op };
                if self.leased() {
                    self.step(input);
                } else {
                    self.parked.push_back(input);
                }
            }
            Event::ClientConn(conn, w) => {
                self.clients.insert(conn, (w, Vec::new()));
            }
            Event::ClientGone(conn) => {
                self.clients.remove(&conn);
                self.sessions.retain(|_, c| *c != conn);
            }
            Event::Manager(m) => self.from_manager(m),
            Event::ManagerConn(w) => {
                self.manager = Some(w);
                self.beats.clear();
            }
            Event::Stop => {}
        }
    }

    /// Without a manager, a node always serves; with one, only under a lease.
    fn leased(&self) -> bool {
        self.cfg.manager.is_none() || self.now() < self.lease_until
    }

    fn from_manager(&mut self, m: FromManager) {
        match m {
            FromManager::Lease { seq } => {
                while let Some(&(s, at)) = self.beats.front() {
                    if s > seq {
                        break;
                    }
                    self.beats.pop_front();
                    if s == seq {
                        self.lease_until = self.lease_until.max(at + self.cfg.lease.as_nanos() as u64);
                    }
                }
                while self.leased() {
                    let Some(input) = self.parked.pop_front() else { break };
                    self.step(input);
                }
            }
            FromManager::Config(c) if c.epoch > self.config.epoch => {
                self.config = c.clone();
                self.step(Input::Config(c));
            }
            FromManager::Config(_) => {}
        }
    }

    fn heartbeat(&mut self) {
        let now = self.now();
        let Some(m) = &self.manager else { return };
        if now < self.next_beat {
            return;
        }
        self.next_beat = now + self.cfg.heartbeat.as_nanos() as u64;
        let seq = self.beats.back().map_or(1, |b| b.0 + 1);
        if m.send(links::heartbeat(seq)).is_ok() {
            self.beats.push_back((seq, now));
        }
        while self.beats.len() > 1024 {
            self.beats.pop_front();
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now();
        while self.timers.peek().is_some_and(|t| t.0 .0 <= now) {
            let Reverse((_, token)) = self.timers.pop().expect("peeked");
            self.step(Input::Timer { token });
        }
    }

    /// One input, then every input it makes the node owe itself.
    fn step(&mut self, input: Input<P>) {
        self.local.push_back(input);
        while let Some(input) = self.local.pop_front() {
            let mut out = Vec::new();
            let now = self.now();
            self.proto.step(now, input, &mut out);
            for c in out {
                self.execute(c);
            }
        }
    }

    fn execute(&mut self, c: Command<P>) {
        match c {
            Command::Send { to, msg } => self.send(to, &msg),
            Command::Broadcast { msg } => {
                let others: Vec<NodeId> = self.config.others(self.cfg.id).collect();
                for to in others {
                    self.send(to, &msg);
                }
            }
            Command::Persist { token, record } => {
                if let Err(e) = self.nvm.append(&record) {
                    eprintln!("node {}: cannot persist to {}: {e}", self.cfg.id, self.cfg.nvm.display());
                    std::process::exit(2);
                }
                if self.cfg.fsync {
                    self.unsynced.push(token); // done once flushed to the device
                } else {
                    self.local.push_back(Input::PersistDone { token });
                }
            }
            Command::Reply { session, req, result } => {
                let Some(conn) = self.sessions.get(&session) else { return };
                if let Some((_, buf)) = self.clients.get_mut(conn) {
                    put(buf, &ClientResp { session, req, result });
                }
            }
            Command::SetTimer { token, at_ns } => self.timers.push(Reverse((at_ns, token))),
        }
    }

    fn send(&mut self, to: NodeId, msg: &P::Msg) {
        if let Some((_, buf)) = self.peers.get_mut(&to) {
            put(buf, msg);
        }
    }

    /// Hand every batched write to its writer thread.
    fn flush(&mut self) -> io::Result<()> {
        while !self.unsynced.is_empty() {
            self.nvm.flush()?;
            for token in std::mem::take(&mut self.unsynced) {
                self.step(Input::PersistDone { token });
            }
        }
        for (w, buf) in self.peers.values_mut().chain(self.clients.values_mut()) {
            if !buf.is_empty() {
                let _ = w.send(std::mem::take(buf));
            }
        }
        Ok(())
    }
}
