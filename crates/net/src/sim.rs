//! The deterministic simulated network and NVM (DESIGN.md §7.1), on the
//! seeded clock and event queue of `crates/sim`. Same seed, same steps.
//!
//! What it models, in simulated nanoseconds:
//! - a one-way latency per message (`link_ns` plus up to `jitter_ns`, so
//!   messages on one link may overtake each other);
//! - a CPU cost per input at the receiving node (`cpu_ns`): a node handles
//!   one input at a time, so load queues up;
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
use std::rc::{Rc, Weak};

use tandem_sim::{Rng, Sim, SimHandle};

use crate::protocol::{land, Command, Config, Input, NodeFactory, NodeId, Nvm, Protocol, SessionId, Token};

/// Timing and fault knobs of a simulated run.
#[derive(Clone, Debug)]
pub struct SimNetConfig {
    pub link_ns: u64,
    pub jitter_ns: u64,
    pub cpu_ns: u64,
    pub persist_ns: u64,
    pub persist_slots: usize,
    pub drop: f64,
    pub duplicate: f64,
    /// Chance that a message is held back by up to `delay_ns` more.
    pub delay: f64,
    pub delay_ns: u64,
}

impl Default for SimNetConfig {
    /// The DDP paper's parameters (Table 5): 1 µs round trip, NVM persist
    /// 400 ns; a 200 ns per-message CPU cost; no faults.
    fn default() -> Self {
        SimNetConfig {
            link_ns: 500,
            jitter_ns: 50,
            cpu_ns: 200,
            persist_ns: 400,
            persist_slots: 16,
            drop: 0.0,
            duplicate: 0.0,
            delay: 0.0,
            delay_ns: 0,
        }
    }
}

/// The client side of a run and its observer: which operation each session
/// issues next, and what happened to each one.
pub trait Harness<P: Protocol> {
    /// The next operation of `session` (None: the session is done).
    fn next_op(&mut self, session: SessionId, now_ns: u64, rng: &mut Rng) -> Option<P::Op>;
    fn invoked(&mut self, _session: SessionId, _req: u64, _node: NodeId, _op: &P::Op, _now_ns: u64) {}
    /// A reply; `nvm` is every node's NVM at that instant (durability gates).
    fn completed(&mut self, session: SessionId, req: u64, node: NodeId, result: &P::Reply, now_ns: u64, nvm: &[Nvm<P::Record>]);
    /// The node serving `req` crashed before replying: outcome unknown.
    fn lost(&mut self, _session: SessionId, _req: u64, _now_ns: u64) {}
    /// Every step of every node, with its commands (trace invariants);
    /// called only if [`Harness::traces`] says so (it costs a copy per input).
    fn on_step(&mut self, _node: NodeId, _now_ns: u64, _input: &Input<P>, _out: &[Command<P>], _nvm: &[Nvm<P::Record>]) {}
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
    pub crashes: u64,
    pub restarts: u64,
}

struct Node<P: Protocol> {
    proto: Option<P>,
    /// Bumped by every crash: events of an earlier incarnation are void.
    incarnation: u64,
    busy_until: u64,
    config: Config,
    running: BTreeMap<u64, (Token, P::Record)>,
    queued: VecDeque<(Token, P::Record)>,
}

struct Session {
    home: NodeId,
    next_req: u64,
    outstanding: Option<(u64, NodeId)>,
    done: bool,
}

struct World<P: Protocol> {
    me: Weak<RefCell<World<P>>>,
    h: SimHandle,
    cfg: SimNetConfig,
    nodes: Vec<Node<P>>,
    nvm: Vec<Nvm<P::Record>>,
    sessions: Vec<Session>,
    harness: Box<dyn Harness<P>>,
    blocked: BTreeSet<(NodeId, NodeId)>,
    stats: NetStats,
    next_persist: u64,
    rng: Rng,
    clients_stopped: bool,
    /// The commands of the step being carried out (reused).
    out: Vec<Command<P>>,
}

impl<P: Protocol + 'static> World<P> {
    fn schedule(&self, at_ns: u64, f: impl FnOnce(&mut World<P>) + 'static) {
        let w = self.me.clone();
        self.h.schedule_at(at_ns, move || {
            if let Some(w) = w.upgrade() {
                f(&mut w.borrow_mut());
            }
        });
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.chance(p)
    }

    /// An input reaches node `n` and waits for its CPU. `inc` pins it to an
    /// incarnation (timers, persists); messages reach whoever is up.
    fn arrive(&mut self, n: NodeId, inc: Option<u64>, input: Input<P>) {
        let cpu = self.cfg.cpu_ns;
        let now = self.h.now_ns();
        let node = &mut self.nodes[n as usize];
        if node.proto.is_none() || inc.is_some_and(|i| i != node.incarnation) {
            return;
        }
        node.busy_until = now.max(node.busy_until) + cpu;
        let (at, inc) = (node.busy_until, node.incarnation);
        self.schedule(at, move |w| w.process(n, inc, input));
    }

    /// Node `n` handles one input and the host carries out its commands.
    fn process(&mut self, n: NodeId, inc: u64, input: Input<P>) {
        let now = self.h.now_ns();
        let node = &mut self.nodes[n as usize];
        if node.incarnation != inc {
            return;
        }
        let Some(proto) = node.proto.as_mut() else { return };
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
        for c in out.drain(..) {
            self.execute(n, inc, c);
        }
        self.out = out;
    }

    fn execute(&mut self, n: NodeId, inc: u64, c: Command<P>) {
        match c {
            Command::Send { to, msg } => self.send(n, to, msg),
            Command::Broadcast { msg } => {
                let others: Vec<NodeId> = self.nodes[n as usize].config.others(n).collect();
                for to in others {
                    self.send(n, to, msg.clone());
                }
            }
            Command::Persist { token, record } => {
                self.stats.persists += 1;
                self.nodes[n as usize].queued.push_back((token, record));
                self.start_persists(n);
            }
            Command::Reply { session, req, result } => self.reply(n, session, req, result),
            Command::SetTimer { token, at_ns } => self.schedule(at_ns, move |w| w.arrive(n, Some(inc), Input::Timer { token })),
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: P::Msg) {
        self.stats.messages_sent += 1;
        if self.blocked.contains(&(from, to)) || self.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.chance(self.cfg.duplicate) { 2 } else { 1 };
        self.stats.duplicated += copies - 1;
        for _ in 0..copies {
            let mut delay = self.cfg.link_ns + self.rng.below(self.cfg.jitter_ns + 1);
            if self.chance(self.cfg.delay) {
                delay += self.rng.below(self.cfg.delay_ns + 1);
            }
            let msg = msg.clone();
            self.schedule(self.h.now_ns() + delay, move |w| {
                if w.nodes[to as usize].proto.is_some() {
                    w.stats.messages_delivered += 1;
                }
                w.arrive(to, None, Input::Recv { from, msg });
            });
        }
    }

    /// Start queued persists of node `n` while it has free NVM slots.
    fn start_persists(&mut self, n: NodeId) {
        let (slots, at) = (self.cfg.persist_slots, self.h.now_ns() + self.cfg.persist_ns);
        let node = &mut self.nodes[n as usize];
        while node.running.len() < slots {
            let Some(p) = node.queued.pop_front() else { break };
            let (pid, inc) = (self.next_persist, node.incarnation);
            self.next_persist += 1;
            node.running.insert(pid, p);
            let w = self.me.clone();
            self.h.schedule_at(at, move || {
                if let Some(w) = w.upgrade() {
                    w.borrow_mut().persist_landed(n, inc, pid);
                }
            });
        }
    }

    fn persist_landed(&mut self, n: NodeId, inc: u64, pid: u64) {
        if self.nodes[n as usize].incarnation != inc {
            return; // the crash decided this persist's fate
        }
        let Some((token, record)) = self.nodes[n as usize].running.remove(&pid) else { return };
        land(&mut self.nvm[n as usize], record);
        self.arrive(n, Some(inc), Input::PersistDone { token });
        self.start_persists(n);
    }

    fn reply(&mut self, n: NodeId, session: SessionId, req: u64, result: P::Reply) {
        let now = self.h.now_ns();
        let Some(s) = self.sessions.get_mut(session as usize) else { return };
        if s.outstanding.map(|o| o.0) != Some(req) {
            return; // a late or repeated reply: the client no longer waits for it
        }
        s.outstanding = None;
        self.stats.replies += 1;
        self.harness.completed(session, req, n, &result, now, &self.nvm);
        self.issue(session);
    }

    fn live(&self, n: NodeId) -> bool {
        self.nodes[n as usize].proto.is_some()
    }

    /// The session's next operation, at its home node (or the next live one).
    fn issue(&mut self, session: SessionId) {
        let count = self.nodes.len() as NodeId;
        let s = &self.sessions[session as usize];
        if self.clients_stopped || s.done || s.outstanding.is_some() {
            return;
        }
        let Some(home) = (0..count).map(|i| (s.home + i) % count).find(|&m| self.live(m)) else { return };
        let now = self.h.now_ns();
        let Some(op) = self.harness.next_op(session, now, &mut self.rng) else {
            self.sessions[session as usize].done = true;
            return;
        };
        let s = &mut self.sessions[session as usize];
        let req = s.next_req;
        s.next_req += 1;
        s.home = home;
        s.outstanding = Some((req, home));
        self.harness.invoked(session, req, home, &op, now);
        self.arrive(home, None, Input::Client { session, req, op });
    }

    fn crash(&mut self, n: NodeId) {
        let now = self.h.now_ns();
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
            .filter_map(|(i, s)| s.outstanding.filter(|o| o.1 == n).map(|o| (i as SessionId, o.0)))
            .collect();
        for (session, req) in orphans {
            self.sessions[session as usize].outstanding = None;
            self.harness.lost(session, req, now);
            // The client notices the broken connection and moves on.
            self.schedule(now + CLIENT_RETRY_NS, move |w| w.issue(session));
        }
    }
}

/// How long a client whose node crashed takes to reconnect elsewhere.
pub const CLIENT_RETRY_NS: u64 = 5_000;

/// A simulated cluster of `P` nodes with closed-loop client sessions.
pub struct SimNet<P: Protocol, F: NodeFactory<P>> {
    sim: Sim,
    world: Rc<RefCell<World<P>>>,
    factory: F,
}

impl<P: Protocol + 'static, F: NodeFactory<P>> SimNet<P, F> {
    /// `nodes` nodes, all members of `config`, and `sessions` client
    /// sessions bound round robin to a home node.
    pub fn new(seed: u64, cfg: SimNetConfig, config: Config, factory: F, harness: Box<dyn Harness<P>>, sessions: u64) -> Self {
        let sim = Sim::new(seed);
        let count = config.members.iter().max().map_or(0, |&m| m as usize + 1);
        let nodes = (0..count as NodeId)
            .map(|id| Node {
                proto: config.members.contains(&id).then(|| factory.start(id, &config)),
                incarnation: 0,
                busy_until: 0,
                config: config.clone(),
                running: BTreeMap::new(),
                queued: VecDeque::new(),
            })
            .collect();
        let world = Rc::new_cyclic(|me| {
            RefCell::new(World {
                me: me.clone(),
                h: sim.handle(),
                cfg,
                nodes,
                nvm: vec![Nvm::<P::Record>::new(); count],
                sessions: (0..sessions).map(|s| Session { home: (s % count as u64) as NodeId, next_req: 0, outstanding: None, done: false }).collect(),
                harness,
                blocked: BTreeSet::new(),
                stats: NetStats::default(),
                next_persist: 0,
                rng: Rng::new(seed ^ 0x7E7_5EED),
                clients_stopped: false,
                out: Vec::new(),
            })
        });
        SimNet { sim, world, factory }
    }

    pub fn now_ns(&self) -> u64 {
        self.sim.now_ns()
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
        self.world.borrow().sessions.iter().all(|s| s.done && s.outstanding.is_none())
    }

    /// Sessions with an operation outstanding.
    pub fn outstanding(&self) -> usize {
        self.world.borrow().sessions.iter().filter(|s| s.outstanding.is_some()).count()
    }

    pub fn run_for(&self, ns: u64) {
        self.sim.run_until(self.sim.now_ns() + ns);
    }

    /// Run while `keep_going` holds (checked after every event) and
    /// simulated time is below `limit_ns`. True if `keep_going` turned false.
    pub fn run_while(&self, limit_ns: u64, mut keep_going: impl FnMut(&Self) -> bool) -> bool {
        while keep_going(self) {
            if self.sim.now_ns() >= limit_ns || !self.sim.step() {
                return !keep_going(self);
            }
        }
        true
    }

    /// Crash node `n`: volatile state gone, NVM kept, each in-flight persist lands or not.
    pub fn crash(&self, n: NodeId) {
        self.world.borrow_mut().crash(n);
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
        let now = self.sim.now_ns();
        let node = &mut w.nodes[n as usize];
        assert!(node.proto.is_none(), "node {n} restarted while up");
        node.proto = Some(proto);
        node.config = config.clone();
        node.busy_until = now;
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

    pub fn set_faults(&self, f: impl FnOnce(&mut SimNetConfig)) {
        f(&mut self.world.borrow_mut().cfg);
    }

    pub fn is_up(&self, n: NodeId) -> bool {
        self.world.borrow().live(n)
    }

    pub fn stats(&self) -> NetStats {
        self.world.borrow().stats.clone()
    }

    pub fn nvm(&self, n: NodeId) -> Nvm<P::Record> {
        self.world.borrow().nvm[n as usize].clone()
    }

    /// Look at node `n` (None while it is down).
    pub fn with_node<R>(&self, n: NodeId, f: impl FnOnce(Option<&P>) -> R) -> R {
        f(self.world.borrow().nodes[n as usize].proto.as_ref())
    }
}
