//! Random-order exploration (a complement to the latency-based simulator):
//! a small cluster whose network is a bag of messages, delivered one at a
//! time in a uniformly random order, some dropped, with time jumping past
//! the time-out at random points. Any message can be overtaken by any
//! number of later ones, which the simulator's latency model makes rare;
//! the interleavings the review found by hand (tests/scenarios.rs) need
//! exactly that. Every history goes through the release-consistency
//! checker, and the run ends with a fault-free drain in which every
//! operation must complete.

use tandem_check::{RcKind, RcOp};
use tandem_net::{Command, Config, Input, NodeId, Protocol, SessionId, Token};
use tandem_sim::Rng;

use crate::node::{KiteConfig, KiteNode, TICK};
use crate::simcheck::{completed, pending};
use crate::types::*;

#[derive(Clone, Copy, Debug)]
pub struct ExploreOpts {
    pub nodes: u16,
    pub sessions: u64,
    pub ops_per_session: usize,
    /// Chance that a delivery drops the message instead (while faults last).
    pub drop: f64,
    /// Chance per step that time jumps past the time-out and a node ticks.
    pub tick: f64,
    /// Chance per step that the cut changes: a random minority whose
    /// messages (both ways) are held back until the next change. Quorums
    /// then form from chosen sides, as the hand-written scenarios force.
    pub recut: f64,
    pub cfg: KiteConfig,
}

impl Default for ExploreOpts {
    fn default() -> Self {
        ExploreOpts {
            nodes: 5,
            sessions: 6,
            ops_per_session: 8,
            drop: 0.02,
            tick: 0.03,
            recut: 0.05,
            cfg: KiteConfig::default(),
        }
    }
}

struct Session {
    node: NodeId,
    left: usize,
    open: Option<usize>,
}

struct World {
    nodes: Vec<KiteNode>,
    now: u64,
    wire: Vec<(NodeId, NodeId, Msg)>,
    timers: Vec<(NodeId, Token, u64)>,
    sessions: Vec<Session>,
    history: Vec<RcOp>,
    next_value: u64,
    /// Nodes cut off from the rest for now (a bit each).
    cut: Mask,
}

const DATA: [Key; 2] = [1, 2];
const FLAG: Key = 10;
const RMW: Key = 20;

impl World {
    fn step(&mut self, n: NodeId, input: Input<KiteNode>) {
        self.now += 10;
        let mut out = Vec::new();
        self.nodes[n as usize].step(self.now, input, &mut out);
        for c in out {
            match c {
                Command::Send { to, msg } => self.wire.push((n, to, msg)),
                Command::SetTimer { token, at_ns } => self.timers.push((n, token, at_ns)),
                Command::Reply {
                    session, result, ..
                } => self.answer(session, &result),
                _ => {}
            }
        }
    }

    fn answer(&mut self, s: SessionId, reply: &Reply) {
        let Some(i) = self.sessions[s as usize].open.take() else {
            return;
        };
        let op = &mut self.history[i];
        let expected = match op.kind {
            RcKind::CasFail { expected, .. } => Some(expected),
            _ => None,
        };
        op.kind = completed(&op.kind, reply);
        if let (Some(e), RcKind::CasFail { expected, .. }) = (expected, &mut op.kind) {
            *expected = e;
        }
        op.complete_ns = Some(self.now);
    }

    fn draw(&mut self, rng: &mut Rng) -> Op {
        self.next_value += 1;
        let v = self.next_value;
        let d = DATA[rng.below(2) as usize];
        match rng.below(10) {
            0..=2 => Op::Write(d, v),
            3..=4 => Op::Read(d),
            5 => Op::Release(FLAG, v),
            6 => Op::Acquire(FLAG),
            7 => Op::Faa(RMW, 1),
            8 => Op::Acquire(RMW),
            _ => Op::Cas {
                key: RMW,
                expected: rng.below(3),
                new: v,
                weak: rng.chance(0.5),
            },
        }
    }

    fn issue(&mut self, s: usize, rng: &mut Rng) {
        let op = self.draw(rng);
        let node = self.sessions[s].node;
        let kind = match op {
            Op::Cas { key, expected, .. } => RcKind::CasFail {
                key,
                expected,
                value: 0,
                version: Version::default(),
                local: false,
            },
            _ => pending(&op),
        };
        self.history.push(RcOp {
            session: s as u64,
            node,
            kind,
            invoke_ns: self.now,
            complete_ns: None,
        });
        let sess = &mut self.sessions[s];
        sess.open = Some(self.history.len() - 1);
        sess.left -= 1;
        self.step(
            node,
            Input::Client {
                session: s as SessionId,
                req: 0,
                op,
            },
        );
    }

    /// Fire `node`'s due timers, after time jumps `by`.
    fn fire(&mut self, node: NodeId, by: u64) {
        self.now += by;
        let now = self.now;
        let due: Vec<(NodeId, Token, u64)> = self
            .timers
            .iter()
            .filter(|t| t.0 == node && t.2 <= now)
            .copied()
            .collect();
        self.timers.retain(|t| !(t.0 == node && t.2 <= now));
        for (n, token, _) in due {
            self.step(n, Input::Timer { token });
        }
    }

    fn idle(&self) -> Vec<usize> {
        (0..self.sessions.len())
            .filter(|&s| self.sessions[s].open.is_none() && self.sessions[s].left > 0)
            .collect()
    }

    /// One random action: issue, deliver (or drop) a random message, or
    /// let time jump and a node tick.
    fn act(&mut self, o: &ExploreOpts, rng: &mut Rng, faults: bool) {
        let idle = self.idle();
        if !idle.is_empty() && (self.wire.is_empty() || rng.chance(0.2)) {
            return self.issue(idle[rng.below(idle.len() as u64) as usize], rng);
        }
        if self.wire.is_empty() || (faults && rng.chance(o.tick)) {
            let n = rng.below(o.nodes as u64) as NodeId;
            return self.fire(n, o.cfg.timeout_ns + 1);
        }
        if faults && rng.chance(o.recut) {
            self.cut = random_minority(o.nodes, rng);
        }
        let cut = if faults { self.cut } else { 0 };
        let side = |n: NodeId| cut & bit(n) != 0;
        let open: Vec<usize> = (0..self.wire.len())
            .filter(|&i| side(self.wire[i].0) == side(self.wire[i].1))
            .collect();
        if open.is_empty() {
            self.cut = 0;
            return;
        }
        let i = open[rng.below(open.len() as u64) as usize];
        let (from, to, msg) = self.wire.swap_remove(i);
        if !(faults && rng.chance(o.drop)) {
            self.step(to, Input::Recv { from, msg });
        }
    }

    fn busy(&self) -> bool {
        self.sessions.iter().any(|s| s.open.is_some() || s.left > 0)
    }
}

/// Up to a minority of the nodes, at random (possibly none).
fn random_minority(nodes: u16, rng: &mut Rng) -> Mask {
    let mut m = 0;
    for _ in 0..rng.below(nodes as u64 / 2 + 1) {
        m |= bit(rng.below(nodes as u64) as NodeId);
    }
    m
}

/// One exploration: `Err` names the violation (or the operations that
/// never completed once faults stopped).
pub fn explore_seed(seed: u64, o: &ExploreOpts) -> Result<usize, String> {
    let mut rng = Rng::new(seed ^ 0xE7_1013E);
    let config = Config::new(1, (0..o.nodes).collect());
    let nodes = (0..o.nodes)
        .map(|i| KiteNode::new(i, &config, o.cfg))
        .collect();
    let sessions = (0..o.sessions)
        .map(|_| Session {
            node: rng.below(o.nodes as u64) as NodeId,
            left: o.ops_per_session,
            open: None,
        })
        .collect();
    let mut w = World {
        nodes,
        now: 1,
        wire: Vec::new(),
        timers: Vec::new(),
        sessions,
        history: Vec::new(),
        next_value: 0,
        cut: 0,
    };
    for n in 0..o.nodes {
        w.step(n, Input::Timer { token: TICK }); // arm nothing, but start the clock
    }
    let mut steps = 0;
    while w.busy() && steps < 20_000 {
        let faults = w.history.len() < (o.sessions as usize * o.ops_per_session) * 3 / 4;
        w.act(o, &mut rng, faults);
        steps += 1;
        if w.wire.is_empty() && w.idle().is_empty() && w.busy() {
            let n = rng.below(o.nodes as u64) as NodeId;
            w.fire(n, o.cfg.retry_ns + 1);
        }
    }
    if w.busy() {
        let stuck: Vec<String> = w
            .history
            .iter()
            .filter(|h| h.complete_ns.is_none())
            .map(|h| h.to_string())
            .collect();
        return Err(format!("operations never completed: {}", stuck.join("; ")));
    }
    tandem_check::check_rc(&w.history).map_err(|v| v.to_string())?;
    Ok(w.history.len())
}
