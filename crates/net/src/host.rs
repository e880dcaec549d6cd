//! A node as an OS process (docs/DESIGN.md §7.1): one thread runs an event loop
//! (`mio`) that owns the protocol, every TCP stream and the memory-mapped
//! NVM file. Messages to one peer that one round of the loop produces
//! leave in one write (coalescing). Persists are appended to the NVM file
//! before their `PersistDone` is handed back, so `kill -9` loses exactly
//! what was not persisted.
//!
//! With a configuration manager, the node serves clients only while it
//! holds a lease (see `manager.rs`); configurations come from the manager.
//! The streams themselves are handled in `host_io.rs`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Poll, Waker};

use crate::host_io::{Inbound, Link, WAKER};
use crate::links::Wire;
use crate::nvm_file::{self, NvmFile, OnCorrupt};
use crate::protocol::{Command, Config, Input, NodeFactory, NodeId, SessionId, Token};
use crate::syncer::Syncer;
use crate::wire::{ClientResp, FromManager, Hello, NodeStats};

#[derive(Clone, Debug)]
pub struct HostConfig {
    pub id: NodeId,
    /// Every node's address, this one's included.
    pub peers: Vec<(NodeId, SocketAddr)>,
    pub manager: Option<SocketAddr>,
    /// This node's credentials: the peer key (for peers and the manager)
    /// and the client key (to accept client sessions).
    pub keys: tandem_auth::Keyring,
    pub nvm: PathBuf,
    pub nvm_bytes: u64,
    /// What to do if the NVM file is corrupt (not just torn at its tail):
    /// stop with an error naming the file and offset (the default), or
    /// move it aside and restart with an empty NVM. The node is then
    /// recovered (`NodeFactory::recover`) from an empty image, like a
    /// restart that lost its NVM, not started as a fresh member, so a
    /// protocol that catches up by a copy does so before serving.
    pub nvm_corrupt: OnCorrupt,
    /// A persist completes only once the NVM file is flushed to the device
    /// (machine crashes); a syncer thread does it, one batch at a time.
    pub fsync: bool,
    pub heartbeat: Duration,
    /// Must equal the manager's lease.
    pub lease: Duration,
    /// Test-only planted bug: serve clients without a lease (a node cut off
    /// from the manager keeps serving); the nemesis must catch it.
    pub ignore_lease: bool,
    /// Test-only planted bug: count a lease from when it arrived, not from
    /// when the heartbeat that earned it left: a node whose links are slow
    /// keeps serving after the manager counted its lease out.
    pub lease_from_receipt: bool,
}

/// The address this node dials from: its own listening address, if that
/// names one interface (not `0.0.0.0`).
fn dial_from(cfg: &HostConfig) -> Option<std::net::IpAddr> {
    let (_, own) = cfg.peers.iter().find(|p| p.0 == cfg.id)?;
    (!own.ip().is_unspecified()).then_some(own.ip())
}

/// Names this run of a node (one per host started): the manager treats a
/// member that links with a new one as crashed and restarted.
fn boot_id() -> u64 {
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    t ^ u64::from(std::process::id()) << 40 ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A handle to stop a node running in this process (tests, benchmarks).
#[derive(Clone)]
pub struct NodeHandle {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl NodeHandle {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
    }
}

/// Recover the node from its NVM file (or start it fresh) and serve on
/// `listener`, in the calling thread, until the process ends.
pub fn run<P: Wire, F: NodeFactory<P>>(
    cfg: HostConfig,
    listener: TcpListener,
    factory: F,
) -> io::Result<()> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let stop = Arc::new(AtomicBool::new(false));
    Host::open(cfg, listener, &factory, poll, waker, stop)?.run()
}

/// Run a node on a thread of this process; the handle stops it.
pub fn spawn<P: Wire, F: NodeFactory<P> + Send + 'static>(
    cfg: HostConfig,
    listener: TcpListener,
    factory: F,
) -> io::Result<NodeHandle> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let stop = Arc::new(AtomicBool::new(false));
    let (s, w) = (stop.clone(), waker.clone());
    std::thread::Builder::new()
        .name(format!("node-{}", cfg.id))
        .spawn(move || {
            if let Err(e) =
                Host::open(cfg, listener, &factory, poll, w, s).and_then(|mut h| h.run())
            {
                eprintln!("node: {e}");
            }
        })?;
    Ok(NodeHandle { stop, waker })
}

pub(crate) struct Host<P: Wire> {
    pub(crate) cfg: HostConfig,
    proto: P,
    nvm: NvmFile<P::Record>,
    config: Config,
    pub(crate) poll: Poll,
    pub(crate) listener: mio::net::TcpListener,
    pub(crate) stop: Arc<AtomicBool>,
    /// Accepted streams, by connection number.
    pub(crate) inbound: HashMap<usize, Inbound>,
    /// Those of `inbound` still in their handshake, oldest first.
    pub(crate) handshaking: VecDeque<usize>,
    pub(crate) next_conn: usize,
    /// Our stream to each peer, and to the manager.
    pub(crate) peers: HashMap<NodeId, Link>,
    pub(crate) manager: Option<Link>,
    /// Which accepted stream each client session last spoke on.
    sessions: HashMap<SessionId, usize>,
    timers: BinaryHeap<Reverse<(u64, Token)>>,
    /// Inputs the node owes itself (persists that completed in this round).
    local: VecDeque<Input<P>>,
    out: Vec<Command<P>>,
    start: Instant,
    clock: u64,
    lease_until: u64,
    /// Heartbeats sent and not yet answered: (seq, sent at).
    beats: VecDeque<(u64, u64)>,
    next_beat: u64,
    /// Client requests waiting for a lease.
    parked: VecDeque<Input<P>>,
    /// With `fsync`: persists appended in this round, not yet in a sync;
    /// the batches a sync is flushing (numbered from 1); the file's
    /// compaction count the syncer flushes.
    unsynced: Vec<Token>,
    syncing: VecDeque<(u64, Vec<Token>)>,
    next_batch: u64,
    syncer: Option<(Syncer, u64)>,
    pub(crate) stats: NodeStats,
}

/// Batched bytes a slow peer may hold before further messages to it are
/// dropped (as a full network queue would; the protocols retransmit).
const PEER_BACKLOG: usize = 64 << 20;
/// Replies a client stream may leave unread before it is closed.
const CLIENT_BACKLOG: usize = 16 << 20;

impl<P: Wire> Host<P> {
    fn open<F: NodeFactory<P>>(
        cfg: HostConfig,
        listener: TcpListener,
        factory: &F,
        poll: Poll,
        waker: Arc<Waker>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        let opened = Instant::now();
        let (mut nvm, image, lost) = match NvmFile::<P::Record>::open(&cfg.nvm, cfg.nvm_bytes) {
            Ok((nvm, image)) => (nvm, image, false),
            Err(e) if cfg.nvm_corrupt == OnCorrupt::MoveAside => {
                let Some(c) = nvm_file::corruption(&e) else {
                    return Err(e); // I/O errors and a bad magic stop regardless
                };
                let aside = nvm_file::move_aside(&cfg.nvm)?;
                eprintln!(
                    "node {}: {e}\nnode {}: --nvm-corrupt move-aside: moved {} (corrupt at byte offset {}) to {}; starting with an empty NVM (the local NVM is treated as lost)",
                    cfg.id,
                    cfg.id,
                    cfg.nvm.display(),
                    c.offset,
                    aside.display()
                );
                let (nvm, image) = NvmFile::<P::Record>::open(&cfg.nvm, cfg.nvm_bytes)?;
                (nvm, image, true)
            }
            Err(e) => return Err(e),
        };
        let load_ms = opened.elapsed().as_secs_f64() * 1e3;
        let syncer = if cfg.fsync {
            nvm.sync_appended()?;
            Some((
                Syncer::spawn(nvm.file_handle()?, waker, format!("node {}", cfg.id)),
                nvm.compactions(),
            ))
        } else {
            None
        };
        let config = Config::new(0, cfg.peers.iter().map(|p| p.0).collect());
        let proto = if image.is_empty() && !lost {
            factory.start(cfg.id, &config)
        } else {
            factory.recover(cfg.id, &config, &image)
        };
        let how = if lost {
            "recovered with an empty NVM (its corrupt one moved aside)"
        } else if image.is_empty() {
            "started"
        } else {
            "recovered"
        };
        let ready_ms = opened.elapsed().as_secs_f64() * 1e3;
        eprintln!("node {}: {how} from {} ({} slots; file read in {load_ms:.1} ms, state rebuilt by {ready_ms:.1} ms)", cfg.id, cfg.nvm.display(), image.len());
        listener.set_nonblocking(true)?;
        let listener = mio::net::TcpListener::from_std(listener);
        let from = dial_from(&cfg);
        let peers = cfg
            .peers
            .iter()
            .filter(|p| p.0 != cfg.id)
            .map(|&(n, a)| {
                let hello = Hello::Peer { node: cfg.id };
                (n, Link::new(a, from, hello, &cfg.keys))
            })
            .collect();
        let manager = cfg.manager.map(|a| {
            let hello = Hello::ToManager {
                node: cfg.id,
                boot: boot_id(),
            };
            Link::new(a, from, hello, &cfg.keys)
        });
        let mut h = Host {
            cfg,
            proto,
            nvm,
            config,
            poll,
            listener,
            stop,
            inbound: HashMap::new(),
            handshaking: VecDeque::new(),
            next_conn: 0,
            peers,
            manager,
            sessions: HashMap::new(),
            timers: BinaryHeap::new(),
            local: VecDeque::new(),
            out: Vec::new(),
            start: Instant::now(),
            clock: 0,
            lease_until: 0,
            beats: VecDeque::new(),
            next_beat: 0,
            parked: VecDeque::new(),
            unsynced: Vec::new(),
            syncing: VecDeque::new(),
            next_batch: 1,
            syncer,
            stats: NodeStats::default(),
        };
        h.register_listener()?;
        if h.cfg.manager.is_none() {
            let c = h.config.clone();
            h.step(Input::Config(c));
        }
        Ok(h)
    }

    /// The host's time, read afresh before every step (decoding a bulk
    /// message, such as a catch-up answer, takes milliseconds of the round).
    pub(crate) fn now(&self) -> u64 {
        self.clock
    }

    fn tick(&mut self) {
        self.clock = self.start.elapsed().as_nanos() as u64;
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = mio::Events::with_capacity(1024);
        while !self.stop.load(Ordering::Relaxed) {
            self.tick();
            let wait = self.next_deadline().saturating_sub(self.now());
            self.poll_once(&mut events, Duration::from_nanos(wait))?;
            self.tick();
            self.fire_timers();
            self.heartbeat();
            self.sync_nvm()?;
            self.flush_all();
        }
        Ok(())
    }

    fn next_deadline(&self) -> u64 {
        let timer = self.timers.peek().map_or(u64::MAX, |t| t.0 .0);
        let beat = if self.manager.as_ref().is_some_and(|m| m.is_up()) {
            self.next_beat
        } else {
            u64::MAX
        };
        let retry = self
            .peers
            .values()
            .chain(self.manager.iter())
            .filter(|l| !l.is_up())
            .map(|l| l.due())
            .min()
            .unwrap_or(u64::MAX);
        timer.min(beat).min(retry).min(self.now() + 100_000_000)
    }

    /// A protocol message from peer `from`.
    pub(crate) fn on_peer(&mut self, from: NodeId, msg: P::Msg) {
        self.stats.received += 1;
        self.step(Input::Recv { from, msg });
    }

    /// A client request that arrived on accepted stream `conn`.
    pub(crate) fn on_client(&mut self, conn: usize, session: SessionId, req: u64, op: P::Op) {
        self.stats.requests += 1;
        self.sessions.insert(session, conn);
        let input = Input::Client { session, req, op };
        if self.leased() {
            self.step(input);
        } else {
            self.parked.push_back(input);
        }
    }

    pub(crate) fn on_client_gone(&mut self, conn: usize) {
        self.sessions.retain(|_, c| *c != conn);
    }

    /// Without a manager, a node always serves; with one, only under a lease.
    fn leased(&self) -> bool {
        self.cfg.manager.is_none() || self.now() < self.lease_until || self.cfg.ignore_lease
    }

    pub(crate) fn on_manager(&mut self, m: FromManager) {
        match m {
            FromManager::Lease { seq } => {
                while let Some(&(s, at)) = self.beats.front() {
                    if s > seq {
                        break;
                    }
                    self.beats.pop_front();
                    if s == seq {
                        let from = if self.cfg.lease_from_receipt {
                            self.now()
                        } else {
                            at
                        };
                        self.lease_until = self
                            .lease_until
                            .max(from + self.cfg.lease.as_nanos() as u64);
                    }
                }
                while self.leased() {
                    let Some(input) = self.parked.pop_front() else {
                        break;
                    };
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

    /// The manager link came up (again): heartbeats start over.
    pub(crate) fn on_manager_up(&mut self) {
        self.beats.clear();
        self.next_beat = 0;
    }

    fn heartbeat(&mut self) {
        let now = self.now();
        let Some(m) = self.manager.as_mut().filter(|m| m.is_up()) else {
            return;
        };
        if now < self.next_beat {
            return;
        }
        self.next_beat = now + self.cfg.heartbeat.as_nanos() as u64;
        let seq = self.beats.back().map_or(1, |b| b.0 + 1);
        let caught_up = self.proto.caught_up();
        m.queue(&crate::wire::Heartbeat {
            seq,
            caught_up,
            epoch: self.config.epoch,
        });
        self.beats.push_back((seq, now));
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
        let mut out = std::mem::take(&mut self.out);
        while let Some(input) = self.local.pop_front() {
            self.tick();
            let now = self.now();
            self.proto.step(now, input, &mut out);
            for c in out.drain(..) {
                self.execute(c);
            }
        }
        self.out = out;
    }

    fn execute(&mut self, c: Command<P>) {
        match c {
            Command::Send { to, msg } => self.send(to, &msg),
            Command::Broadcast { msg } => {
                for i in 0..self.config.members.len() {
                    let to = self.config.members[i];
                    if to != self.cfg.id {
                        self.send(to, &msg);
                    }
                }
            }
            Command::Persist { token, record } => self.persist(token, &record),
            Command::Reply {
                session,
                req,
                result,
            } => {
                let Some(&conn) = self.sessions.get(&session) else {
                    return;
                };
                // A client that sends and never reads its replies is cut off
                // rather than buffered without bound.
                if self
                    .inbound
                    .get(&conn)
                    .is_some_and(|c| c.conn.pending() > CLIENT_BACKLOG)
                {
                    log::warn!("node {}: a client stream left {CLIENT_BACKLOG} bytes of replies unread; closing it", self.cfg.id);
                    return self.close(conn, crate::host_io::Role::Client);
                }
                if let Some(c) = self.inbound.get_mut(&conn) {
                    self.stats.replies += 1;
                    c.conn.queue(&ClientResp {
                        session,
                        req,
                        result,
                    });
                }
            }
            Command::SetTimer { token, at_ns } => self.timers.push(Reverse((at_ns, token))),
            Command::Note { text } => eprintln!("node {}: {text}", self.cfg.id),
            Command::InOrder { .. } => {}
        }
    }

    fn persist(&mut self, token: Token, record: &P::Record) {
        if let Err(e) = self.nvm.append(record) {
            eprintln!(
                "node {}: cannot persist to {}: {e}",
                self.cfg.id,
                self.cfg.nvm.display()
            );
            std::process::exit(2);
        }
        self.stats.persists += 1;
        if self.cfg.fsync {
            self.unsynced.push(token); // done once flushed to the device
        } else if token != crate::protocol::NO_ANSWER {
            self.local.push_back(Input::PersistDone { token });
        }
    }

    fn send(&mut self, to: NodeId, msg: &P::Msg) {
        let Some(l) = self.peer_link(to) else { return };
        if l.is_up() && l.pending() < PEER_BACKLOG {
            l.queue(msg);
            self.stats.sent += 1;
        }
    }

    /// With `fsync`: complete the batches the syncer made durable, then
    /// hand it the persists since if no sync is in flight (group commit).
    /// A failed flush stops the node and is never retried: here (after a
    /// compaction) the error ends `run`; in the syncer thread it exits the
    /// process before the batch counts as done; and a failed msync in
    /// `append` exits in `persist`. (`NvmFile` also refuses every write
    /// after one failed flush.)
    fn sync_nvm(&mut self) -> io::Result<()> {
        if self.syncer.is_none() {
            return Ok(());
        }
        for token in self
            .synced()?
            .into_iter()
            .filter(|&t| t != crate::protocol::NO_ANSWER)
        {
            self.step(Input::PersistDone { token });
        }
        let Some((syncer, _)) = &self.syncer else {
            return Ok(());
        };
        if self.syncing.is_empty() && !self.unsynced.is_empty() {
            syncer.request(self.next_batch);
            self.syncing
                .push_back((self.next_batch, std::mem::take(&mut self.unsynced)));
            self.next_batch += 1;
        }
        Ok(())
    }

    /// The persists now durable.
    fn synced(&mut self) -> io::Result<Vec<Token>> {
        let Some((syncer, file)) = &mut self.syncer else {
            return Ok(Vec::new());
        };
        if self.nvm.compactions() != *file {
            // A compaction wrote a new file: flush it (and its directory)
            // here, which covers every persist so far.
            self.nvm.sync_appended()?;
            syncer.use_file(self.nvm.file_handle()?);
            *file = self.nvm.compactions();
            return Ok(self
                .syncing
                .drain(..)
                .flat_map(|b| b.1)
                .chain(self.unsynced.drain(..))
                .collect());
        }
        let done = syncer.done();
        let mut ready = Vec::new();
        while self.syncing.front().is_some_and(|b| b.0 <= done) {
            ready.extend(self.syncing.pop_front().expect("checked").1);
        }
        Ok(ready)
    }
}

/// Three nodes of `factory`'s protocol in this process, one thread each,
/// over loopback TCP, their NVM files under `dir` (emptied first): the
/// embedded stores of `tandem serve`. With `managed`, a configuration
/// manager runs too (a thread of its own). Returns each node's client
/// address and the threads (they run until the process ends).
pub fn embedded<P: Wire + 'static, F: NodeFactory<P> + Clone + Send + 'static>(
    factory: F,
    keys: tandem_auth::Keyring,
    dir: &std::path::Path,
    managed: bool,
) -> io::Result<(Vec<SocketAddr>, Vec<std::thread::JoinHandle<()>>)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let listeners = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    let addrs = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<io::Result<Vec<_>>>()?;
    let mut threads = Vec::new();
    let manager = if managed {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let at = l.local_addr()?;
        let k = keys.clone();
        threads.push(std::thread::spawn(move || {
            let cfg = crate::manager::ManagerConfig::default();
            if let Err(e) = crate::manager::serve(l, k, &[0, 1, 2], cfg, None) {
                eprintln!("manager: {e}");
            }
        }));
        Some(at)
    } else {
        None
    };
    let lease = Duration::from_nanos(crate::manager::ManagerConfig::default().lease_ns);
    for (i, listener) in listeners.into_iter().enumerate() {
        let cfg = HostConfig {
            id: i as NodeId,
            peers: addrs
                .iter()
                .enumerate()
                .map(|(j, &a)| (j as NodeId, a))
                .collect(),
            manager,
            keys: keys.clone(),
            nvm: dir.join(format!("node{i}.nvm")),
            nvm_bytes: 64 << 20,
            nvm_corrupt: OnCorrupt::Stop,
            fsync: false,
            heartbeat: Duration::from_millis(5),
            lease,
            ignore_lease: false,
            lease_from_receipt: false,
        };
        let f = factory.clone();
        threads.push(std::thread::spawn(move || {
            if let Err(e) = run(cfg, listener, f) {
                eprintln!("node {i}: {e}");
            }
        }));
    }
    Ok((addrs, threads))
}
