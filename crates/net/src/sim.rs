//! The deterministic simulated network and NVM (docs/DESIGN.md §7.1), on a
//! seeded RNG and a typed `(time, sequence)` event queue of `crates/sim`.
//! Same seed, same steps.
//!
//! What it models, in simulated nanoseconds:
//! - a one-way latency per message (`link_ns` plus up to `jitter_ns`, so
//!   messages on one link may overtake each other);
//! - a CPU cost per input at the receiving node (`cpu_ns`) on one of the
//!   node's `cores` worker cores: an input waits for the first free core,
//!   so up to `cores` inputs of a node are handled at once and load beyond
//!   that queues up (every input costs the same, so a node still finishes
//!   its inputs in arrival order);
//! - a CPU cost per message sent (`send_ns`, per destination: a broadcast
//!   to four costs four): a step's sends are done one after another on the
//!   node's cores, queued behind the inputs already waiting, and each
//!   message leaves when its send is done;
//! - an application cost per client request (`app_ns`), on top of it;
//! - one ordered lane per node (`lane_ns` per write): a step that applies
//!   writes of a total order ([`Command::InOrder`]) has them applied one
//!   after another, after the lane's earlier writes, and what the step
//!   does after them (replies, sends) waits until the lane is through;
//! - NVM persists that take `persist_ns` with at most `persist_slots` in
//!   flight per node (NVM pressure queues persists);
//! - faults: drop, duplicate, extra delay (reorder), partitions between
//!   pairs of nodes, the crash of one node or of all of them (volatile state
//!   lost, NVM kept, every in-flight persist independently lands or not),
//!   and restart from NVM through [`NodeFactory::recover`].
//!
//! A crashed node is silent because it is dead; messages it sent before the
//! crash are still on the wire and arrive.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tandem_sim::{Rng, TimedQueue};

use crate::protocol::{
    land, Command, Config, Input, NodeFactory, NodeId, Nvm, Protocol, SessionId, Token,
};

/// Timing and fault knobs of a simulated run.
#[derive(Clone, Copy, Debug)]
pub struct SimNetConfig {
    pub link_ns: u64,
    pub jitter_ns: u64,
    pub cpu_ns: u64,
    /// Worker cores per node, each handling one input at a time.
    pub cores: usize,
    /// CPU per message sent, per destination, at the sender (0: sends are free).
    pub send_ns: u64,
    /// The ordered lane's hand-off per write applied in a total order (0: no lane).
    pub lane_ns: u64,
    /// Application CPU per client request, on top of `cpu_ns` (the work a
    /// real application does around each request; 0: none).
    pub app_ns: u64,
    pub persist_ns: u64,
    pub persist_slots: usize,
    /// Line writes per persist (1: a persist takes one of `persist_slots`
    /// slots for `persist_ns`). Above 1 the slots are NVM banks: each line
    /// takes the first free bank for `persist_ns`, and a persist lands when
    /// its last line is written, so large records load the NVM.
    pub persist_lines: u32,
    pub drop: f64,
    pub duplicate: f64,
    /// Chance that a message is held back by up to `delay_ns` more.
    pub delay: f64,
    pub delay_ns: u64,
    /// A client gives up on a reply that has not come this long after its
    /// request (0: it waits for ever): the outcome is unknown, and the
    /// session issues its next operation at the next node, as `tandem ddp
    /// load` does on its timeout. The request stays where it was sent.
    pub patience_ns: u64,
    /// Present sessions to the nodes under ids spread over all 64 bits, as
    /// real clients may choose them (`tandem node --resp` draws random
    /// ones), instead of 0, 1, 2…: a protocol that packs a session id into
    /// a few bits of something else is caught here, not in production.
    pub wide_sessions: bool,
}

/// The id session `index` has on the wire under `wide_sessions`: the top
/// two bits set, the index in the low 32, a hash of it between.
pub fn wide_session_id(index: SessionId) -> SessionId {
    3 << 62 | (index.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0x3FFF_FFFF_0000_0000) | index
}

/// The session index behind a wire id (either kind).
pub fn session_index(wire: SessionId) -> SessionId {
    wire & 0xFFFF_FFFF
}

impl SimNetConfig {
    /// The defaults with a round trip of `rtt_ns`: half of it one way, and
    /// up to a tenth of that one way as jitter.
    pub fn round_trip(rtt_ns: u64) -> SimNetConfig {
        SimNetConfig {
            link_ns: rtt_ns / 2,
            jitter_ns: rtt_ns / 20,
            ..SimNetConfig::default()
        }
    }
}

/// Worker cores per server in the DDP paper's simulated machines (§7,
/// Table 5: "20 out-of-order cores" per server).
pub const PAPER_CORES: usize = 20;

impl Default for SimNetConfig {
    /// The DDP paper's parameters (Table 5): 1 µs round trip, NVM persist
    /// 400 ns with 16 NVM banks (2 channels x 8); a 200 ns CPU cost per
    /// input on one core per node (docs/DESIGN.md §7.1; the paper's servers have
    /// [`PAPER_CORES`], a sensitivity docs/DDP.md reports); no faults.
    fn default() -> Self {
        SimNetConfig {
            link_ns: 500,
            jitter_ns: 50,
            cpu_ns: 200,
            cores: 1,
            send_ns: 0,
            lane_ns: 0,
            app_ns: 0,
            persist_ns: 400,
            persist_slots: 16,
            persist_lines: 1,
            drop: 0.0,
            duplicate: 0.0,
            delay: 0.0,
            delay_ns: 0,
            patience_ns: 0,
            wide_sessions: false,
        }
    }
}

/// The client side of a run and its observer: which operation each session
/// issues next, and what happened to each one.
pub trait Harness<P: Protocol> {
    /// The next operation of `session` (None: the session is done).
    fn next_op(&mut self, session: SessionId, now_ns: u64, rng: &mut Rng) -> Option<P::Op>;
    fn invoked(
        &mut self,
        _session: SessionId,
        _req: u64,
        _node: NodeId,
        _op: &P::Op,
        _now_ns: u64,
    ) {
    }
    /// A reply; `nvm` is every node's NVM at that instant (durability gates).
    fn completed(
        &mut self,
        session: SessionId,
        req: u64,
        node: NodeId,
        result: &P::Reply,
        now_ns: u64,
        nvm: &[Nvm<P::Record>],
    );
    /// The node serving `req` crashed before replying: outcome unknown.
    fn lost(&mut self, _session: SessionId, _req: u64, _now_ns: u64) {}
    /// Every step of every node, with its commands (trace invariants);
    /// called only if [`Harness::traces`] says so (it costs a copy per input).
    fn on_step(
        &mut self,
        _node: NodeId,
        _now_ns: u64,
        _input: &Input<P>,
        _out: &[Command<P>],
        _nvm: &[Nvm<P::Record>],
    ) {
    }
    /// After every step of every node (and its `on_step`): the node itself,
    /// for invariants over its state or what it records about the step;
    /// called only if [`Harness::traces`] says so.
    fn observe(&mut self, _node: NodeId, _now_ns: u64, _proto: &P, _nvm: &[Nvm<P::Record>]) {}
    fn traces(&self) -> bool {
        false
    }
}

/// Counters of a run.
#[derive(Clone, Debug, Default)]
pub struct NetStats {
    pub messages_sent: u64,
    pub messages_delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub persists: u64,
    pub persists_lost: u64,
    pub steps: u64,
    pub replies: u64,
    /// Requests whose client lost patience (`SimNetConfig::patience_ns`).
    pub given_up: u64,
    pub crashes: u64,
    pub restarts: u64,
}

struct Node<P: Protocol> {
    proto: Option<P>,
    /// Bumped by every crash: events of an earlier incarnation are void.
    incarnation: u64,
    /// When each worker core is free again.
    cores: Vec<u64>,
    /// When the ordered lane is free again.
    lane: u64,
    /// When each NVM bank is free again (`SimNetConfig::persist_lines` > 1).
    banks: Vec<u64>,
    config: Config,
    running: BTreeMap<u64, (Token, P::Record)>,
    queued: VecDeque<(Token, P::Record)>,
}

impl<P: Protocol> Node<P> {
    /// Take the first free core from `now` for `cpu` ns; when it is done.
    fn occupy(&mut self, now: u64, cpu: u64) -> u64 {
        let core = (0..self.cores.len())
            .min_by_key(|&c| self.cores[c])
            .expect("a node has a core");
        self.cores[core] = now.max(self.cores[core]) + cpu;
        self.cores[core]
    }
}

struct Session {
    home: NodeId,
    next_req: u64,
    outstanding: Option<(u64, NodeId)>,
    done: bool,
}

/// What the simulator has scheduled.
enum Event<P: Protocol> {
    /// A message reaches `to`.
    Deliver {
        from: NodeId,
        to: NodeId,
        msg: P::Msg,
    },
    /// Node `n` (incarnation `inc`) has spent its CPU on `input`: step.
    Step {
        n: NodeId,
        inc: u64,
        input: Input<P>,
    },
    Timer {
        n: NodeId,
        inc: u64,
        token: Token,
    },
    /// Persist `pid` of node `n` lands.
    Landed {
        n: NodeId,
        inc: u64,
        pid: u64,
    },
    /// A session whose node crashed issues again.
    Issue {
        session: SessionId,
    },
    /// The client's patience with request `req` ends (`patience_ns`).
    Patience {
        session: SessionId,
        req: u64,
    },
    /// The configuration manager's announcement reaches node `n`.
    Announce {
        n: NodeId,
        config: Config,
    },
    /// Commands of a step of node `n` that waited for its ordered lane.
    Deferred {
        n: NodeId,
        inc: u64,
        commands: Vec<Command<P>>,
    },
}

struct World<P: Protocol> {
    now: u64,
    queue: TimedQueue<Event<P>>,
    cfg: SimNetConfig,
    nodes: Vec<Node<P>>,
    nvm: Vec<Nvm<P::Record>>,
    sessions: Vec<Session>,
    harness: Box<dyn Harness<P>>,
    blocked: BTreeSet<(NodeId, NodeId)>,
    /// Extra one-way latency of slow directed links.
    slow: BTreeMap<(NodeId, NodeId), u64>,
    stats: NetStats,
    next_persist: u64,
    rng: Rng,
    clients_stopped: bool,
    /// The commands of the step being carried out (reused).
    out: Vec<Command<P>>,
    /// When the current step's last send is done (`send_ns`).
    sent_at: u64,
}

impl<P: Protocol> World<P> {
    fn schedule(&mut self, at_ns: u64, ev: Event<P>) {
        self.queue.push(at_ns.max(self.now), ev);
    }

    /// Run the earliest event; false if none is due by `deadline`.
    fn run_next(&mut self, deadline: u64) -> bool {
        match self.queue.peek_time() {
            Some(t) if t <= deadline => {}
            _ => return false,
        }
        let (t, ev) = self.queue.pop().expect("peeked");
        self.now = t;
        match ev {
            Event::Deliver { from, to, msg } => self.deliver(from, to, msg),
            Event::Step { n, inc, input } => self.process(n, inc, input),
            Event::Timer { n, inc, token } => self.arrive(n, Some(inc), Input::Timer { token }),
            Event::Landed { n, inc, pid } => self.persist_landed(n, inc, pid),
            Event::Issue { session } => self.issue(session),
            Event::Patience { session, req } => self.give_up(session, req),
            Event::Announce { n, config } => self.arrive(n, None, Input::Config(config)),
            Event::Deferred { n, inc, commands } => self.resume(n, inc, commands),
        }
        true
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.chance(p)
    }

    /// An input reaches node `n` and waits for a core. `inc` pins it to an
    /// incarnation (timers, persists); messages reach whoever is up.
    fn arrive(&mut self, n: NodeId, inc: Option<u64>, input: Input<P>) {
        let (weight, app) = match &input {
            Input::Recv { msg, .. } => (P::weight(msg), 0),
            Input::Client { .. } => (1, self.cfg.app_ns),
            _ => (1, 0),
        };
        let (cpu, now) = (self.cfg.cpu_ns * weight.max(1) + app, self.now);
        let node = &mut self.nodes[n as usize];
        if node.proto.is_none() || inc.is_some_and(|i| i != node.incarnation) {
            return;
        }
        let (at, inc) = (node.occupy(now, cpu), node.incarnation);
        self.schedule(at, Event::Step { n, inc, input });
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, msg: P::Msg) {
        if self.live(to) {
            self.stats.messages_delivered += 1;
        }
        self.arrive(to, None, Input::Recv { from, msg });
    }

    /// Node `n` handles one input and the host carries out its commands.
    fn process(&mut self, n: NodeId, inc: u64, input: Input<P>) {
        let now = self.now;
        let node = &mut self.nodes[n as usize];
        if node.incarnation != inc {
            return;
        }
        let Some(proto) = node.proto.as_mut() else {
            return;
        };
        if let Input::Config(c) = &input {
            node.config = c.clone();
        }
        let mut out = std::mem::take(&mut self.out);
        if self.harness.traces() {
            proto.step(now, input.clone(), &mut out);
            self.harness.on_step(n, now, &input, &out, &self.nvm);
            self.harness.observe(n, now, proto, &self.nvm);
        } else {
            proto.step(now, input, &mut out);
        }
        self.stats.steps += 1;
        self.carry_out(n, inc, out.drain(..));
        self.out = out;
    }

    /// `writes` go through node `n`'s ordered lane after its earlier ones:
    /// when it is through (None if the lane costs nothing).
    fn through_lane(&mut self, n: NodeId, writes: u32) -> Option<u64> {
        if self.cfg.lane_ns == 0 || writes == 0 {
            return None;
        }
        let node = &mut self.nodes[n as usize];
        node.lane = node.lane.max(self.now) + self.cfg.lane_ns * writes as u64;
        Some(node.lane)
    }

    /// Carry out a step's commands from now on; at an `InOrder` that the
    /// lane delays, the rest wait for it (`Event::Deferred`).
    fn carry_out(&mut self, n: NodeId, inc: u64, commands: impl Iterator<Item = Command<P>>) {
        self.sent_at = self.now;
        let mut commands = commands;
        while let Some(c) = commands.next() {
            if let Command::InOrder { writes } = c {
                if let Some(at) = self.through_lane(n, writes) {
                    let commands = commands.collect();
                    return self.schedule(at, Event::Deferred { n, inc, commands });
                }
                continue;
            }
            self.execute(n, inc, c);
        }
    }

    /// The commands a step left waiting for the lane, unless the node
    /// crashed meanwhile.
    fn resume(&mut self, n: NodeId, inc: u64, commands: Vec<Command<P>>) {
        if self.nodes[n as usize].incarnation == inc && self.live(n) {
            self.carry_out(n, inc, commands.into_iter());
        }
    }

    fn execute(&mut self, n: NodeId, inc: u64, c: Command<P>) {
        match c {
            Command::Send { to, msg } => self.send(n, to, msg),
            Command::Broadcast { msg } => self.broadcast(n, msg),
            Command::Persist { token, record } => {
                self.stats.persists += 1;
                self.nodes[n as usize].queued.push_back((token, record));
                self.start_persists(n);
            }
            Command::Reply {
                session,
                req,
                result,
            } => self.reply(n, session, req, result),
            Command::SetTimer { token, at_ns } => {
                self.schedule(at_ns, Event::Timer { n, inc, token })
            }
            Command::Note { .. } | Command::InOrder { .. } => {}
        }
    }

    /// To every other member of `n`'s configuration (the last one gets `msg` itself).
    fn broadcast(&mut self, n: NodeId, msg: P::Msg) {
        let members = self.nodes[n as usize].config.members.len();
        let last = (0..members)
            .rev()
            .find(|&i| self.nodes[n as usize].config.members[i] != n);
        let Some(last) = last else { return };
        for i in 0..last {
            let to = self.nodes[n as usize].config.members[i];
            if to != n {
                self.send(n, to, msg.clone());
            }
        }
        let to = self.nodes[n as usize].config.members[last];
        self.send(n, to, msg);
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: P::Msg) {
        self.stats.messages_sent += 1;
        let weight = P::weight(&msg);
        if weight > 1 {
            // Building a bulk message takes the sender's CPU too.
            let (cpu, now) = (self.cfg.cpu_ns, self.now);
            self.nodes[from as usize].occupy(now, cpu * (weight - 1));
        }
        let leaves = match self.cfg.send_ns {
            0 => self.now,
            ns => {
                // After the step's earlier sends, on the first core free then.
                self.sent_at = self.nodes[from as usize].occupy(self.sent_at, ns);
                self.sent_at
            }
        };
        if self.blocked.contains(&(from, to)) || self.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        if self.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            self.put_on_wire(from, to, msg.clone(), leaves);
        }
        self.put_on_wire(from, to, msg, leaves);
    }

    fn put_on_wire(&mut self, from: NodeId, to: NodeId, msg: P::Msg, leaves: u64) {
        let mut delay = self.cfg.link_ns
            + self.rng.below(self.cfg.jitter_ns + 1)
            + self.slow.get(&(from, to)).copied().unwrap_or(0);
        if self.chance(self.cfg.delay) {
            delay += self.rng.below(self.cfg.delay_ns + 1);
        }
        self.schedule(leaves + delay, Event::Deliver { from, to, msg });
    }

    /// Start queued persists of node `n` while it has free NVM slots.
    fn start_persists(&mut self, n: NodeId) {
        if self.cfg.persist_lines > 1 {
            return self.reserve_banks(n);
        }
        let (slots, at) = (self.cfg.persist_slots, self.now + self.cfg.persist_ns);
        loop {
            let node = &mut self.nodes[n as usize];
            if node.running.len() >= slots {
                return;
            }
            let Some(p) = node.queued.pop_front() else {
                return;
            };
            let (pid, inc) = (self.next_persist, node.incarnation);
            self.next_persist += 1;
            node.running.insert(pid, p);
            self.schedule(at, Event::Landed { n, inc, pid });
        }
    }

    /// Start every queued persist of node `n` on its NVM banks: each of its
    /// lines on the first free bank, landing when the last is written.
    fn reserve_banks(&mut self, n: NodeId) {
        while let Some(p) = self.nodes[n as usize].queued.pop_front() {
            let lands = self.write_lines(n);
            let pid = self.next_persist;
            self.next_persist += 1;
            let node = &mut self.nodes[n as usize];
            node.running.insert(pid, p);
            let inc = node.incarnation;
            self.schedule(lands, Event::Landed { n, inc, pid });
        }
    }

    /// Book one persist's lines on node `n`'s banks; when the last is written.
    fn write_lines(&mut self, n: NodeId) -> u64 {
        let (lines, ns, now) = (self.cfg.persist_lines, self.cfg.persist_ns, self.now);
        let banks = &mut self.nodes[n as usize].banks;
        let mut lands = now;
        for _ in 0..lines {
            let bank = (0..banks.len())
                .min_by_key(|&b| banks[b])
                .expect("an NVM has a bank");
            banks[bank] = banks[bank].max(now) + ns;
            lands = lands.max(banks[bank]);
        }
        lands
    }

    fn persist_landed(&mut self, n: NodeId, inc: u64, pid: u64) {
        if self.nodes[n as usize].incarnation != inc {
            return; // the crash decided this persist's fate
        }
        let Some((token, record)) = self.nodes[n as usize].running.remove(&pid) else {
            return;
        };
        land(&mut self.nvm[n as usize], record);
        if token != crate::protocol::NO_ANSWER {
            self.arrive(n, Some(inc), Input::PersistDone { token });
        }
        self.start_persists(n);
    }

    fn reply(&mut self, n: NodeId, wire: SessionId, req: u64, result: P::Reply) {
        let session = session_index(wire);
        let now = self.now;
        let Some(s) = self.sessions.get_mut(session as usize) else {
            return;
        };
        if s.outstanding.map(|o| o.0) != Some(req) {
            return; // a late or repeated reply: the client no longer waits for it
        }
        s.outstanding = None;
        self.stats.replies += 1;
        self.harness
            .completed(session, req, n, &result, now, &self.nvm);
        self.issue(session);
    }

    fn live(&self, n: NodeId) -> bool {
        self.nodes[n as usize].proto.is_some()
    }

    /// The session's next operation, at its home node, or the next live
    /// one while it is down: a client goes back to its own node once that
    /// node is up again, as `tandem ddp load` reconnects to it.
    fn issue(&mut self, session: SessionId) {
        let count = self.nodes.len() as NodeId;
        let s = &self.sessions[session as usize];
        if self.clients_stopped || s.done || s.outstanding.is_some() {
            return;
        }
        let Some(home) = (0..count)
            .map(|i| (s.home + i) % count)
            .find(|&m| self.live(m))
        else {
            return;
        };
        let now = self.now;
        let Some(op) = self.harness.next_op(session, now, &mut self.rng) else {
            self.sessions[session as usize].done = true;
            return;
        };
        let s = &mut self.sessions[session as usize];
        let req = s.next_req;
        s.next_req += 1;
        s.outstanding = Some((req, home));
        self.harness.invoked(session, req, home, &op, now);
        let wire = match self.cfg.wide_sessions {
            true => wide_session_id(session),
            false => session,
        };
        self.arrive(
            home,
            None,
            Input::Client {
                session: wire,
                req,
                op,
            },
        );
        if self.cfg.patience_ns > 0 {
            let at = now + self.cfg.patience_ns;
            self.schedule(at, Event::Patience { session, req });
        }
    }

    /// The client stops waiting for `req` (if it still does): its outcome is
    /// unknown and the session moves on to the next node.
    fn give_up(&mut self, session: SessionId, req: u64) {
        let count = self.nodes.len() as NodeId;
        let s = &mut self.sessions[session as usize];
        let Some((_, at)) = s.outstanding.filter(|o| o.0 == req) else {
            return;
        };
        (s.outstanding, s.home) = (None, (at + 1) % count);
        self.stats.given_up += 1;
        self.harness.lost(session, req, self.now);
        self.issue(session);
    }

    fn crash(&mut self, n: NodeId) {
        let now = self.now;
        let node = &mut self.nodes[n as usize];
        if node.proto.take().is_none() {
            return;
        }
        node.incarnation += 1;
        node.queued.clear();
        let running = std::mem::take(&mut node.running);
        self.stats.crashes += 1;
        for (_, (_, record)) in running {
            if self.rng.chance(0.5) {
                land(&mut self.nvm[n as usize], record);
            } else {
                self.stats.persists_lost += 1;
            }
        }
        let orphans: Vec<(SessionId, u64)> = (self.sessions.iter().enumerate())
            .filter_map(|(i, s)| {
                s.outstanding
                    .filter(|o| o.1 == n)
                    .map(|o| (i as SessionId, o.0))
            })
            .collect();
        for (session, req) in orphans {
            self.sessions[session as usize].outstanding = None;
            self.harness.lost(session, req, now);
            // The client notices the broken connection and moves on.
            self.schedule(now + CLIENT_RETRY_NS, Event::Issue { session });
        }
    }
}

/// How long a client whose node crashed takes to reconnect elsewhere.
pub const CLIENT_RETRY_NS: u64 = 5_000;

/// A simulated cluster of `P` nodes with closed-loop client sessions.
pub struct SimNet<P: Protocol, F: NodeFactory<P>> {
    world: RefCell<World<P>>,
    factory: F,
}

impl<P: Protocol, F: NodeFactory<P>> SimNet<P, F> {
    /// `nodes` nodes, all members of `config`, and `sessions` client
    /// sessions bound round robin to a home node.
    pub fn new(
        seed: u64,
        cfg: SimNetConfig,
        config: Config,
        factory: F,
        harness: Box<dyn Harness<P>>,
        sessions: u64,
    ) -> Self {
        let count = config.members.iter().max().map_or(0, |&m| m as usize + 1);
        let nodes = (0..count as NodeId)
            .map(|id| Node {
                proto: config
                    .members
                    .contains(&id)
                    .then(|| factory.start(id, &config)),
                incarnation: 0,
                cores: vec![0; cfg.cores.max(1)],
                lane: 0,
                banks: vec![0; cfg.persist_slots.max(1)],
                config: config.clone(),
                running: BTreeMap::new(),
                queued: VecDeque::new(),
            })
            .collect();
        let world = RefCell::new(World {
            now: 0,
            queue: TimedQueue::default(),
            cfg,
            nodes,
            nvm: vec![Nvm::<P::Record>::new(); count],
            sessions: (0..sessions)
                .map(|s| Session {
                    home: (s % count as u64) as NodeId,
                    next_req: 0,
                    outstanding: None,
                    done: false,
                })
                .collect(),
            harness,
            blocked: BTreeSet::new(),
            slow: BTreeMap::new(),
            stats: NetStats::default(),
            next_persist: 0,
            rng: Rng::new(seed ^ 0x7E7_5EED),
            clients_stopped: false,
            out: Vec::new(),
            sent_at: 0,
        });
        SimNet { world, factory }
    }

    pub fn now_ns(&self) -> u64 {
        self.world.borrow().now
    }

    /// Every session issues its first operation.
    pub fn start_clients(&self) {
        let mut w = self.world.borrow_mut();
        w.clients_stopped = false;
        for s in 0..w.sessions.len() as SessionId {
            w.issue(s);
        }
    }

    /// Sessions issue nothing more; outstanding operations still finish.
    pub fn stop_clients(&self) {
        self.world.borrow_mut().clients_stopped = true;
    }

    /// Every session has issued its last operation and had it answered.
    pub fn clients_done(&self) -> bool {
        self.world
            .borrow()
            .sessions
            .iter()
            .all(|s| s.done && s.outstanding.is_none())
    }

    /// Sessions with an operation outstanding.
    pub fn outstanding(&self) -> usize {
        self.world
            .borrow()
            .sessions
            .iter()
            .filter(|s| s.outstanding.is_some())
            .count()
    }

    /// Run every event due in the next `ns`; the clock then stands at the
    /// end (or at the last event, if nothing more is scheduled).
    pub fn run_for(&self, ns: u64) {
        let mut w = self.world.borrow_mut();
        let deadline = w.now + ns;
        while w.run_next(deadline) {}
        if !w.queue.is_empty() {
            w.now = deadline;
        }
    }

    /// Run while `keep_going` holds (checked after every event) and
    /// simulated time is below `limit_ns`. True if `keep_going` turned false.
    pub fn run_while(&self, limit_ns: u64, mut keep_going: impl FnMut(&Self) -> bool) -> bool {
        while keep_going(self) {
            if self.now_ns() >= limit_ns || !self.world.borrow_mut().run_next(u64::MAX) {
                return !keep_going(self);
            }
        }
        true
    }

    /// Crash node `n`: volatile state gone, NVM kept, each in-flight persist lands or not.
    pub fn crash(&self, n: NodeId) {
        self.world.borrow_mut().crash(n);
    }

    /// Node `n` stops, as under SIGSTOP, until `until_ns`: alive, with its
    /// state, but it handles no input before then; what arrives meanwhile
    /// (messages, timers, persists) queues and is handled after it wakes,
    /// in arrival order. Its peers see a slow node, not a silent one.
    pub fn pause(&self, n: NodeId, until_ns: u64) {
        let mut w = self.world.borrow_mut();
        for core in w.nodes[n as usize].cores.iter_mut() {
            *core = (*core).max(until_ns);
        }
    }

    /// Crash every node at the same instant (a power failure).
    pub fn crash_all(&self) {
        let count = self.world.borrow().nodes.len() as NodeId;
        for n in 0..count {
            self.crash(n);
        }
    }

    /// Rebuild node `n` from its NVM, in `config`.
    pub fn restart(&self, n: NodeId, config: &Config) {
        let mut w = self.world.borrow_mut();
        let proto = self.factory.recover(n, config, &w.nvm[n as usize]);
        let now = w.now;
        let node = &mut w.nodes[n as usize];
        assert!(node.proto.is_none(), "node {n} restarted while up");
        node.proto = Some(proto);
        node.config = config.clone();
        node.cores.iter_mut().for_each(|c| *c = now);
        node.banks.iter_mut().for_each(|b| *b = now);
        node.lane = now;
        w.stats.restarts += 1;
        // Sessions parked while no node was up take their next step.
        for s in 0..w.sessions.len() as SessionId {
            w.issue(s);
        }
    }

    /// The configuration manager announces `config` to every live node.
    pub fn announce(&self, config: &Config) {
        let mut w = self.world.borrow_mut();
        for n in 0..w.nodes.len() as NodeId {
            w.arrive(n, None, Input::Config(config.clone()));
        }
    }

    /// Announce `config` as a manager does over one link per node: node
    /// `n` hears it `delays[n]` ns from now (with the same delays for every
    /// announcement, each link stays FIFO), so for a while members
    /// disagree on the epoch.
    pub fn announce_delayed(&self, config: &Config, delays: &[u64]) {
        let mut w = self.world.borrow_mut();
        for (n, &d) in delays.iter().enumerate() {
            let (at, config) = (w.now + d, config.clone());
            w.schedule(
                at,
                Event::Announce {
                    n: n as NodeId,
                    config,
                },
            );
        }
    }

    /// Hand node `n` an input directly (tests).
    pub fn inject(&self, n: NodeId, input: Input<P>) {
        self.world.borrow_mut().arrive(n, None, input);
    }

    /// Cut (or restore) both directions between `a` and `b`.
    pub fn partition(&self, a: NodeId, b: NodeId, cut: bool) {
        let mut w = self.world.borrow_mut();
        for pair in [(a, b), (b, a)] {
            if cut {
                w.blocked.insert(pair);
            } else {
                w.blocked.remove(&pair);
            }
        }
    }

    /// Cut (or restore) the direction from `from` to `to` only: its
    /// messages are lost, the other direction's arrive.
    pub fn cut_one_way(&self, from: NodeId, to: NodeId, cut: bool) {
        let mut w = self.world.borrow_mut();
        if cut {
            w.blocked.insert((from, to));
        } else {
            w.blocked.remove(&(from, to));
        }
    }

    /// Messages from `from` to `to` take `extra_ns` longer (0: back to normal):
    /// a slow link, whose messages arrive late rather than never.
    pub fn slow_link(&self, from: NodeId, to: NodeId, extra_ns: u64) {
        self.world.borrow_mut().slow.insert((from, to), extra_ns);
    }

    pub fn set_faults(&self, f: impl FnOnce(&mut SimNetConfig)) {
        f(&mut self.world.borrow_mut().cfg);
    }

    pub fn is_up(&self, n: NodeId) -> bool {
        self.world.borrow().live(n)
    }

    pub fn stats(&self) -> NetStats {
        self.world.borrow().stats.clone()
    }

    /// Land `records` in node `n`'s NVM (a store that exists before the run).
    pub fn seed_nvm(&self, n: NodeId, records: impl IntoIterator<Item = P::Record>) {
        let mut w = self.world.borrow_mut();
        for r in records {
            land(&mut w.nvm[n as usize], r);
        }
    }

    /// Change node `n` itself (preloading its store before the run).
    pub fn with_node_mut<R>(&self, n: NodeId, f: impl FnOnce(Option<&mut P>) -> R) -> R {
        f(self.world.borrow_mut().nodes[n as usize].proto.as_mut())
    }

    pub fn nvm(&self, n: NodeId) -> Nvm<P::Record> {
        self.world.borrow().nvm[n as usize].clone()
    }

    /// Look at node `n` (None while it is down).
    pub fn with_node<R>(&self, n: NodeId, f: impl FnOnce(Option<&P>) -> R) -> R {
        f(self.world.borrow().nodes[n as usize].proto.as_ref())
    }
}
