//! Exhaustive exploration of the real `step` functions (model checking of
//! the engine itself, docs/DESIGN.md §1 principle 3). Hermes checks its protocol in TLA+; here
//! the engine itself is explored: a small cluster, a fixed script of client
//! operations, and every interleaving of invocations, message deliveries,
//! persist completions, timer firings, and (within budgets) message loss,
//! duplication and one node crash followed by a new configuration. States
//! are deduplicated by a fingerprint that ignores clock values. In every
//! state Hermes' invariants are asserted (G4 and G5, docs/DDP.md "Check labels"), and
//! every final history is checked for linearizability.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use tandem_check::{HistOp, OpKind};
use tandem_net::{land, Command, Config, Input, NodeId, Nvm, Protocol, SessionId, Token};

use crate::model::Model;
use crate::node::{Bugs, DdpNode, Params};
use crate::types::{Key, Msg, Op, Record, Reply, Slot, Ts};

#[derive(Clone, Debug)]
pub struct ExploreConfig {
    pub model: Model,
    pub nodes: u16,
    /// The client script: (node, op); each op is its own session.
    pub script: Vec<(NodeId, Op)>,
    /// `after[i] = Some(j)`: op `i` is invoked only once op `j` completed
    /// (the same client, closed loop).
    pub after: Vec<Option<usize>>,
    pub drops: u8,
    pub duplicates: u8,
    pub crashes: u8,
    /// Timer firings in all (each may retransmit or replay).
    pub timers: u8,
    pub max_states: usize,
    pub bugs: Bugs,
    /// The engine's own invariants (`Params::assertions`); off where a
    /// test shows that the explorer's checks catch a mutant on their own.
    pub assertions: bool,
}

impl ExploreConfig {
    /// Three nodes, two concurrent writes to one key and two reads, and one
    /// fault of the given kind ("loss", "duplicate" or "crash") plus one
    /// timer firing (a retransmission or a replay).
    pub fn small(model: Model, fault: &str) -> Self {
        let script = vec![
            (0, Op::write(1, 10, 0)),
            (1, Op::write(1, 20, 0)),
            (2, Op::read(1)),
            (0, Op::read(1)),
        ];
        let (drops, duplicates, crashes) = match fault {
            "loss" => (1, 0, 0),
            "duplicate" => (0, 1, 0),
            "crash" => (0, 0, 1),
            _ => (0, 0, 0),
        };
        // The client at node 0 reads after its own write; a retransmission
        // timer only where a message may be lost.
        let after = vec![None, None, None, Some(0)];
        let timers = u8::from(fault == "loss");
        ExploreConfig {
            model,
            nodes: 3,
            script,
            after,
            drops,
            duplicates,
            crashes,
            timers,
            max_states: 5_000_000,
            bugs: Bugs::default(),
            assertions: true,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct ExploreReport {
    pub states: usize,
    pub transitions: u64,
    pub final_histories: u64,
    pub complete: bool,
    pub violation: Option<String>,
}

/// Something that can happen next.
#[derive(Clone, Copy, Debug)]
enum Action {
    Invoke(usize),
    Deliver(usize),
    Drop(usize),
    Duplicate(usize),
    Land(usize),
    Timer(NodeId),
    Crash(NodeId),
}

/// An in-flight item: a protocol message, or a configuration from the manager.
#[derive(Clone, Debug)]
enum Wire {
    Msg(NodeId, NodeId, Msg),
    Config(NodeId, Config),
}

impl Wire {
    fn link(&self) -> (NodeId, NodeId) {
        match self {
            Wire::Msg(from, to, _) => (*from, *to),
            Wire::Config(to, _) => (NodeId::MAX, *to),
        }
    }
}

#[derive(Clone)]
struct World {
    nodes: Vec<Option<DdpNode>>,
    nvm: Vec<Nvm<Record>>,
    wire: Vec<Wire>,
    persists: Vec<(NodeId, Token, Record)>,
    invoked: Vec<bool>,
    history: Vec<HistOp>,
    budgets: [u8; 4],
    clock: u64,
    tick: u64,
}

/// How far a timer firing moves the clock: past every retry and replay delay.
const TIMER_JUMP: u64 = 1 << 40;

impl World {
    fn new(cfg: &ExploreConfig) -> World {
        let config = Config::new(1, (0..cfg.nodes).collect());
        // Timers jump the clock: no idle squash, nothing forgotten.
        let params = Params {
            tick_ns: 1,
            retry_ns: 1,
            replay_ns: 1,
            lazy_ns: 1,
            idle_ns: u64::MAX,
            forget_ns: u64::MAX,
            bulk_ns: 1,
            assertions: cfg.assertions,
        };
        let nodes = (0..cfg.nodes)
            .map(|n| Some(DdpNode::new(n, cfg.model, params, cfg.bugs, config.clone())))
            .collect();
        World {
            nodes,
            nvm: vec![Nvm::new(); cfg.nodes as usize],
            wire: Vec::new(),
            persists: Vec::new(),
            invoked: vec![false; cfg.script.len()],
            history: Vec::new(),
            budgets: [cfg.drops, cfg.duplicates, cfg.crashes, cfg.timers],
            clock: 1,
            tick: 0,
        }
    }

    fn actions(&self, after: &[Option<usize>]) -> Vec<Action> {
        let done = |j: usize| {
            self.history
                .iter()
                .any(|h| h.session == j as SessionId && h.complete_ns.is_some())
        };
        let ready = |i: usize| !self.invoked[i] && after.get(i).copied().flatten().is_none_or(done);
        let mut a: Vec<Action> = (0..self.invoked.len())
            .filter(|&i| ready(i))
            .map(Action::Invoke)
            .collect();
        for (i, w) in self.wire.iter().enumerate() {
            // Links are FIFO here (the seeded simulator covers reordering):
            // only the oldest item of each link may be delivered.
            if self.wire[..i].iter().any(|x| x.link() == w.link()) {
                continue;
            }
            a.push(Action::Deliver(i));
            if let Wire::Msg(..) = w {
                if self.budgets[0] > 0 {
                    a.push(Action::Drop(i));
                }
                if self.budgets[1] > 0 {
                    a.push(Action::Duplicate(i));
                }
            }
        }
        // A node's persists land in the order it issued them.
        a.extend(
            (0..self.persists.len())
                .filter(|&i| !self.persists[..i].iter().any(|p| p.0 == self.persists[i].0))
                .map(Action::Land),
        );
        for n in 0..self.nodes.len() as NodeId {
            if self.nodes[n as usize].is_some() {
                if self.budgets[3] > 0 {
                    a.push(Action::Timer(n));
                }
                if self.budgets[2] > 0 {
                    a.push(Action::Crash(n));
                }
            }
        }
        a
    }

    /// Carry out `a`; an invariant violation is returned.
    fn apply(&mut self, a: Action, script: &[(NodeId, Op)]) -> Result<(), String> {
        self.tick += 1;
        match a {
            Action::Invoke(i) => {
                self.invoked[i] = true;
                let (node, op) = script[i].clone();
                let kind = match op {
                    Op::Read { key, .. } => OpKind::Read { key, value: None },
                    Op::Write { key, value, .. } => OpKind::Write { key, value },
                    _ => return Err("the explorer's scripts hold reads and writes only".into()),
                };
                self.history.push(HistOp {
                    session: i as SessionId,
                    node,
                    kind,
                    invoke_ns: self.tick,
                    complete_ns: None,
                    ok: true,
                });
                self.step(
                    node,
                    Input::Client {
                        session: i as SessionId,
                        req: 0,
                        op,
                    },
                )
            }
            Action::Deliver(i) => match self.wire.remove(i) {
                Wire::Msg(from, to, msg) => self.step(to, Input::Recv { from, msg }),
                Wire::Config(to, c) => self.step(to, Input::Config(c)),
            },
            Action::Drop(i) => {
                self.budgets[0] -= 1;
                self.wire.remove(i);
                Ok(())
            }
            Action::Duplicate(i) => {
                self.budgets[1] -= 1;
                self.wire.push(self.wire[i].clone());
                Ok(())
            }
            Action::Land(i) => {
                let (n, token, record) = self.persists.remove(i);
                land(&mut self.nvm[n as usize], record);
                self.step(n, Input::PersistDone { token })
            }
            Action::Timer(n) => {
                self.budgets[3] -= 1;
                self.clock += TIMER_JUMP;
                self.step(n, Input::Timer { token: 0 })
            }
            Action::Crash(n) => self.crash(n),
        }
    }

    /// Node `n` loses its volatile state and its persists in flight; the
    /// manager announces a configuration without it.
    fn crash(&mut self, n: NodeId) -> Result<(), String> {
        self.budgets[2] -= 1;
        self.nodes[n as usize] = None;
        self.persists.retain(|p| p.0 != n);
        self.wire
            .retain(|w| !matches!(w, Wire::Msg(_, to, _) | Wire::Config(to, _) if *to == n));
        let alive: Vec<NodeId> = (0..self.nodes.len() as NodeId)
            .filter(|&m| self.nodes[m as usize].is_some())
            .collect();
        let c = Config::new(2, alive.clone());
        self.wire
            .extend(alive.into_iter().map(|m| Wire::Config(m, c.clone())));
        Ok(())
    }

    fn step(&mut self, n: NodeId, input: Input<DdpNode>) -> Result<(), String> {
        let Some(node) = self.nodes[n as usize].as_mut() else {
            return Ok(());
        };
        let mut out = Vec::new();
        node.step(self.clock, input, &mut out);
        let others: Vec<NodeId> = node.config().others(n).collect();
        for c in out {
            match c {
                Command::Send { to, msg } => self.wire.push(Wire::Msg(n, to, msg)),
                Command::Broadcast { msg } => {
                    self.check_val(n, &msg, &others)?;
                    self.wire
                        .extend(others.iter().map(|&to| Wire::Msg(n, to, msg.clone())));
                }
                Command::Persist { token, record } => self.persists.push((n, token, record)),
                Command::Reply {
                    session, result, ..
                } => self.complete(session, result),
                Command::SetTimer { .. } | Command::Note { .. } | Command::InOrder { .. } => {}
            }
        }
        self.check_hermes()
    }

    fn complete(&mut self, session: SessionId, r: Reply) {
        let Some(h) = self.history.iter_mut().find(|h| h.session == session) else {
            return;
        };
        h.complete_ns = Some(self.tick);
        if let (OpKind::Read { value, .. }, Reply::Read { value: v, .. }) = (&mut h.kind, r) {
            *value = v;
        }
    }
}

fn nvm_ts(nvm: &Nvm<Record>, key: Key) -> Ts {
    match nvm.get(&Slot::Key(key)) {
        Some(Record::Key(v)) => v.ts,
        _ => Ts::ZERO,
    }
}

impl World {
    /// G5 (b) and (d): a VAL for consistency finds every member's volatile
    /// ts at least the write's; a VAL for persistence finds it in every
    /// member's NVM.
    fn check_val(&self, n: NodeId, msg: &Msg, others: &[NodeId]) -> Result<(), String> {
        let Msg::Val { key, ts, c, p, .. } = *msg else {
            return Ok(());
        };
        for &o in others {
            let Some(node) = &self.nodes[o as usize] else {
                continue;
            };
            let have = node.keys.get(&key).map_or(Ts::ZERO, |s| s.ts);
            if c && have < ts {
                return Err(format!(
                    "G5b: node {n} sends VAL_c for key {key} {ts:?} while node {o} holds {have:?}"
                ));
            }
            if p && nvm_ts(&self.nvm[o as usize], key) < ts {
                return Err(format!("G5d: node {n} sends VAL_p for key {key} {ts:?} while node {o} persisted only {:?}", nvm_ts(&self.nvm[o as usize], key)));
            }
        }
        Ok(())
    }

    /// G4 (Hermes `HConsistent`): live nodes where a key is valid agree on its ts.
    fn check_hermes(&self) -> Result<(), String> {
        let valid: Vec<(NodeId, std::collections::BTreeMap<Key, Ts>)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(n, x)| {
                x.as_ref()
                    .filter(|x| x.is_ready())
                    .map(|x| (n as NodeId, x.valid_versions()))
            })
            .collect();
        for (a, va) in &valid {
            for (b, vb) in &valid {
                if let Some((k, ta)) = va
                    .iter()
                    .find(|(k, ta)| vb.get(k).is_some_and(|tb| tb != *ta))
                {
                    return Err(format!(
                        "G4: key {k} is valid at node {a} with {ta:?} and at node {b} with {:?}",
                        vb[k]
                    ));
                }
            }
        }
        Ok(())
    }

    /// A hash of everything but clock values.
    fn fingerprint(&self) -> u64 {
        let mut h = DefaultHasher::new();
        for n in &self.nodes {
            node_fingerprint(n.as_ref(), &mut h);
        }
        format!("{:?}", self.nvm).hash(&mut h);
        let mut wire: Vec<String> = self.wire.iter().map(|w| format!("{w:?}")).collect();
        wire.sort();
        wire.hash(&mut h);
        // Tokens are numbered per path; what a persist writes is what counts.
        let mut persists: Vec<String> = self
            .persists
            .iter()
            .map(|p| format!("{:?}{:?}", p.0, p.2))
            .collect();
        persists.sort();
        persists.hash(&mut h);
        (self.invoked.clone(), self.budgets).hash(&mut h);
        for o in &self.history {
            (o.session, o.complete_ns.is_some(), format!("{:?}", o.kind)).hash(&mut h);
        }
        h.finish()
    }
}

fn node_fingerprint(n: Option<&DdpNode>, h: &mut DefaultHasher) {
    let Some(n) = n else { return 0u8.hash(h) };
    (n.ready, n.config.epoch, &n.config.members, &n.unsettled).hash(h);
    let mut keys: Vec<_> = n.keys.iter().collect();
    keys.sort_by_key(|k| *k.0);
    for (k, s) in keys {
        let w = s.write.as_ref().map(|w| {
            (
                w.ts, &w.acks_c, &w.acks_p, w.local_p, w.replied, w.c_sent, w.p_sent, w.client,
            )
        });
        (
            k,
            s.ts,
            s.value,
            s.val_c,
            s.val_p,
            s.nvm,
            w,
            &s.stalled,
            s.deferred.len(),
            &s.owed,
        )
            .hash(h);
    }
    let mut waits: Vec<String> = n.waits.values().map(|w| format!("{w:?}")).collect();
    waits.sort();
    waits.hash(h);
}

/// Explore every interleaving of `cfg` (up to `max_states` distinct states).
pub fn explore(cfg: &ExploreConfig) -> ExploreReport {
    let mut report = ExploreReport::default();
    let mut seen = HashSet::new();
    let mut stack = vec![World::new(cfg)];
    while let Some(w) = stack.pop() {
        if !seen.insert(w.fingerprint()) {
            continue;
        }
        report.states = seen.len();
        if seen.len() >= cfg.max_states {
            return report;
        }
        let actions = w.actions(&cfg.after);
        if actions.is_empty() {
            report.final_histories += 1;
            if let Err(v) = tandem_check::check_linearizable(&w.history) {
                report.violation = Some(format!("final history not linearizable: {v}"));
                return report;
            }
        }
        for a in actions {
            let mut next = w.clone();
            report.transitions += 1;
            if let Err(v) = next.apply(a, &cfg.script) {
                report.violation = Some(format!("{v} (after {} steps, last {a:?})", next.tick));
                return report;
            }
            stack.push(next);
        }
    }
    report.complete = true;
    report
}
