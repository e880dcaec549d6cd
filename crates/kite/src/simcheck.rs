//! Seeded checks of Kite in the simulator (docs/DESIGN.md §7.4): five
//! nodes, closed-loop sessions running a mix of every operation, faults
//! from a plan drawn from the seed (drop, duplicate, reorder, a partition,
//! a sleeping node, a crashed node), then the faults stop and every
//! request must complete. The history goes through the release-consistency
//! checker (`tandem_check::rc`), and every step through the white-box
//! epoch invariant.

use std::cell::RefCell;
use std::rc::Rc;

use tandem_check::{RcKind, RcOp};
use tandem_net::{Config, NodeFactory, NodeId, Nvm, SessionId, SimNet, SimNetConfig};
use tandem_sim::Rng;

use crate::node::{KiteConfig, KiteNode, KiteStats, Mutant};
use crate::types::KiteRecord;
use crate::types::*;

/// Builds Kite nodes. Kite has no recovery (Kite paper §2.1: crash-stop), so
/// a restarted node would start empty; the checks never restart one.
#[derive(Clone)]
pub struct KiteFactory(pub KiteConfig);

impl NodeFactory<KiteNode> for KiteFactory {
    fn start(&self, id: NodeId, config: &Config) -> KiteNode {
        KiteNode::new(id, config, self.0)
    }
    fn recover(&self, id: NodeId, config: &Config, _nvm: &Nvm<KiteRecord>) -> KiteNode {
        KiteNode::new(id, config, self.0)
    }
}

/// The keys of a check run, by class, so each checker's rule is exact:
/// data keys see relaxed reads and writes, flags releases and acquires,
/// CAS keys CASes, acquires and some releases (one version order for
/// plain writes and RMWs), counters FAA by 1 only.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub data: u64,
    pub flags: u64,
    pub cas: u64,
    pub counters: u64,
    /// Whether the mix has RMWs (CAS, FAA). Without: a store with reads
    /// and writes only (the ZAB baseline) — those rolls become releases.
    pub rmws: bool,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            data: 100,
            flags: 3,
            cas: 2,
            counters: 2,
            rmws: true,
        }
    }
}

const FLAG0: u64 = 1_000;
const CAS0: u64 = 2_000;
const CTR0: u64 = 3_000;

/// Which faults a run injects (drawn from the seed unless set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    pub lossy: bool,
    pub partition: bool,
    pub sleep: bool,
    pub crash: bool,
    /// One node's outgoing links get slow (tens of µs, below the time-out)
    /// to all but one other node: an asymmetric, congested path.
    pub slow: bool,
    /// A few messages arrive very late (up to three time-outs): a
    /// straggler from a lost-and-retransmitted packet or a stalled queue,
    /// overtaken by whole rounds sent after it.
    pub straggle: bool,
}

impl Faults {
    pub fn from_seed(seed: u64) -> Faults {
        let mut rng = Rng::new(seed ^ 0xFA17);
        let (lossy, partition, sleep, crash) = (
            rng.chance(0.5),
            rng.chance(0.4),
            rng.chance(0.5),
            rng.chance(0.3),
        );
        let (slow, straggle) = (rng.chance(0.4), rng.chance(0.5));
        Faults {
            lossy,
            partition,
            sleep,
            crash,
            slow,
            straggle,
        }
    }

    pub fn describe(&self) -> String {
        let names = [
            (self.lossy, "drop+dup+reorder"),
            (self.partition, "partition"),
            (self.sleep, "sleep"),
            (self.crash, "crash"),
            (self.slow, "slow"),
            (self.straggle, "straggle"),
        ];
        let on: Vec<&str> = names.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct CheckOpts {
    pub nodes: u16,
    pub sessions: u64,
    pub mix: Mix,
    /// Simulated time with clients running.
    pub run_ns: u64,
    pub faults: Option<Faults>,
    pub cfg: KiteConfig,
    /// The simulated machine (cores, CPU per input and per send).
    pub net: SimNetConfig,
}

impl Default for CheckOpts {
    fn default() -> Self {
        let cfg = KiteConfig {
            timeout_ns: 200_000,
            retry_ns: 20_000,
            ..KiteConfig::default()
        };
        CheckOpts {
            nodes: 5,
            sessions: 20,
            mix: Mix::default(),
            run_ns: 3_000_000,
            faults: None,
            cfg,
            // Clients choose their session ids: any 64 bits.
            net: SimNetConfig {
                wide_sessions: true,
                ..SimNetConfig::default()
            },
        }
    }
}

/// What one seeded run found.
#[derive(Debug)]
pub struct RunReport {
    pub seed: u64,
    pub faults: Faults,
    pub ops: usize,
    pub history: Vec<RcOp>,
    pub violation: Option<String>,
    pub stats: KiteStats,
}

/// The client side of a check run: which operation each session issues
/// next and what it learns from the answers.
pub trait Workload {
    /// `None`: the session is done.
    fn next(&mut self, s: SessionId, now: u64, rng: &mut Rng) -> Option<Op>;
    fn done(&mut self, _s: SessionId, _reply: &Reply, _now: u64) {}
    /// The session's node crashed: the answer will never come.
    fn lost(&mut self, _s: SessionId, _now: u64) {}
    /// Sessions stop at their next clean point.
    fn stop(&mut self);
    /// After the run, with `state(key)` the newest value a replica holds:
    /// the workload's own invariants (a summary line, or what failed).
    fn verify(&self, _state: &dyn Fn(Key) -> Value) -> Result<String, String> {
        Ok(String::new())
    }
}

/// A random mix of every operation (see [`Mix`]).
pub struct RandomMix {
    mix: Mix,
    /// Per session: the last value it saw on each CAS key.
    seen: Vec<std::collections::BTreeMap<Key, Value>>,
    /// Per session: the key of its outstanding operation.
    last: Vec<Key>,
    next_value: u64,
    stopped: bool,
}

impl RandomMix {
    pub fn new(mix: Mix, sessions: u64) -> RandomMix {
        let n = sessions as usize;
        RandomMix {
            mix,
            seen: vec![Default::default(); n],
            last: vec![0; n],
            next_value: 0,
            stopped: false,
        }
    }
}

struct Recorder {
    work: Box<dyn Workload>,
    ops: Vec<RcOp>,
    /// Per session: index of its outstanding op in `ops`.
    open: Vec<Option<usize>>,
    /// Per simulated session: its name in the history. A session whose
    /// node crashed reconnects elsewhere as a new session (Kite binds a
    /// session to one worker; its per-key order holds only there).
    name: Vec<u64>,
    invariant: Option<String>,
}

impl Workload for RandomMix {
    fn stop(&mut self) {
        self.stopped = true;
    }

    fn done(&mut self, s: SessionId, reply: &Reply, _now: u64) {
        if let Reply::CasFail { value, .. } | Reply::Rmw { new: value, .. } = reply {
            let key = self.last[s as usize];
            self.seen[s as usize].insert(key, *value);
        }
    }

    fn next(&mut self, s: SessionId, _now: u64, rng: &mut Rng) -> Option<Op> {
        if self.stopped {
            return None;
        }
        let op = self.pick(s, rng);
        self.last[s as usize] = op.key();
        Some(op)
    }
}

impl RandomMix {
    fn pick(&mut self, s: SessionId, rng: &mut Rng) -> Op {
        let m = self.mix;
        self.next_value += 1;
        let v = self.next_value;
        let roll = rng.below(100);
        match roll {
            0..=34 => Op::Write(rng.below(m.data), v),
            35..=59 => Op::Read(rng.below(m.data)),
            60..=69 => Op::Release(FLAG0 + rng.below(m.flags), v),
            70..=79 => Op::Acquire(FLAG0 + rng.below(m.flags)),
            80..=87 | 92.. if !m.rmws => Op::Release(CAS0 + rng.below(m.cas), v),
            80..=87 => {
                let key = CAS0 + rng.below(m.cas);
                let expected = self.seen[s as usize].get(&key).copied().unwrap_or(0);
                Op::Cas {
                    key,
                    expected,
                    new: v,
                    weak: rng.chance(0.5),
                }
            }
            88..=90 => Op::Acquire(CAS0 + rng.below(m.cas)),
            91 => Op::Release(CAS0 + rng.below(m.cas), v),
            _ => Op::Faa(CTR0 + rng.below(m.counters), 1),
        }
    }
}

/// The history entry of `op` before its reply (versions unknown).
pub fn pending(op: &Op) -> RcKind {
    let z = Version::default();
    match *op {
        Op::Read(key) => RcKind::Read {
            key,
            value: 0,
            version: z,
        },
        Op::Write(key, value) => RcKind::Write {
            key,
            value,
            version: z,
        },
        Op::Acquire(key) => RcKind::Acquire {
            key,
            value: 0,
            version: z,
        },
        Op::Release(key, value) => RcKind::Release {
            key,
            value,
            version: z,
        },
        Op::Faa(key, _) | Op::Cas { key, .. } => RcKind::Rmw {
            key,
            old: 0,
            old_version: z,
            new: 0,
            version: z,
        },
    }
}

/// The history entry of `op` answered with `reply`.
pub fn completed(op: &RcKind, reply: &Reply) -> RcKind {
    let key = op.key();
    match (*op, *reply) {
        (RcKind::Read { .. }, Reply::Value { value, version }) => RcKind::Read {
            key,
            value,
            version,
        },
        (RcKind::Acquire { .. }, Reply::Value { value, version }) => RcKind::Acquire {
            key,
            value,
            version,
        },
        (RcKind::Write { value, .. }, Reply::Written { version }) => RcKind::Write {
            key,
            value,
            version,
        },
        (RcKind::Release { value, .. }, Reply::Written { version }) => RcKind::Release {
            key,
            value,
            version,
        },
        (
            _,
            Reply::Rmw {
                old,
                old_version,
                new,
                version,
            },
        ) => RcKind::Rmw {
            key,
            old,
            old_version,
            new,
            version,
        },
        (
            _,
            Reply::CasFail {
                value,
                version,
                local,
            },
        ) => RcKind::CasFail {
            key,
            expected: 0,
            value,
            version,
            local,
        },
        (op, reply) => panic!("reply {reply:?} does not answer {op:?}"),
    }
}

struct Hook(Rc<RefCell<Recorder>>);

impl tandem_net::Harness<KiteNode> for Hook {
    fn next_op(&mut self, s: SessionId, now: u64, rng: &mut Rng) -> Option<Op> {
        self.0.borrow_mut().work.next(s, now, rng)
    }

    fn invoked(&mut self, s: SessionId, _req: u64, node: NodeId, op: &Op, now: u64) {
        let mut r = self.0.borrow_mut();
        let kind = match *op {
            Op::Cas { expected, .. } => RcKind::CasFail {
                key: op.key(),
                expected,
                value: 0,
                version: Version::default(),
                local: false,
            },
            _ => pending(op),
        };
        let i = r.ops.len();
        let session = r.name[s as usize];
        r.ops.push(RcOp {
            session,
            node,
            kind,
            invoke_ns: now,
            complete_ns: None,
        });
        r.open[s as usize] = Some(i);
    }

    fn completed(
        &mut self,
        s: SessionId,
        _req: u64,
        _node: NodeId,
        reply: &Reply,
        now: u64,
        _nvm: &[Nvm<KiteRecord>],
    ) {
        let mut r = self.0.borrow_mut();
        let Some(i) = r.open[s as usize].take() else {
            return;
        };
        let kind = r.ops[i].kind;
        let mut done = completed(&kind, reply);
        if let (RcKind::CasFail { expected, .. }, RcKind::CasFail { expected: e, .. }) =
            (kind, &mut done)
        {
            *e = expected;
        }
        r.ops[i].kind = done;
        r.ops[i].complete_ns = Some(now);
        r.work.done(s, reply, now);
    }

    fn lost(&mut self, s: SessionId, _req: u64, now: u64) {
        let mut r = self.0.borrow_mut();
        r.work.lost(s, now);
        let sessions = r.open.len() as u64;
        r.name[s as usize] += sessions;
        if let Some(i) = r.open[s as usize].take() {
            if let RcKind::CasFail { key, .. } = r.ops[i].kind {
                r.ops[i].kind = pending(&Op::Faa(key, 0));
            }
        }
    }

    fn observe(&mut self, _node: NodeId, _now: u64, proto: &KiteNode, _nvm: &[Nvm<KiteRecord>]) {
        if let Err(e) = proto.check_invariants() {
            self.0.borrow_mut().invariant.get_or_insert(e);
        }
    }

    fn traces(&self) -> bool {
        true
    }
}

/// Run one seeded check of the random mix.
pub fn run_seed(seed: u64, opts: &CheckOpts) -> RunReport {
    run_with(
        seed,
        opts,
        Box::new(RandomMix::new(opts.mix, opts.sessions)),
    )
}

/// Run one seeded check of `work`: faults during the middle of the run,
/// then none; every request must complete, the history must be release
/// consistent and the workload's own invariants must hold.
pub fn run_with(seed: u64, opts: &CheckOpts, work: Box<dyn Workload>) -> RunReport {
    let faults = opts.faults.unwrap_or_else(|| Faults::from_seed(seed));
    let n = opts.sessions as usize;
    let rec = Recorder {
        work,
        ops: Vec::new(),
        open: vec![None; n],
        name: (0..opts.sessions).collect(),
        invariant: None,
    };
    let rec = Rc::new(RefCell::new(rec));
    let config = Config::new(1, (0..opts.nodes).collect());
    let net = SimNet::new(
        seed,
        opts.net,
        config,
        KiteFactory(opts.cfg),
        Box::new(Hook(rec.clone())),
        opts.sessions,
    );
    net.start_clients();
    inject(&net, seed, faults, opts);
    rec.borrow_mut().work.stop();
    let drained = net.run_while(opts.run_ns * 20, |n| n.outstanding() > 0);
    net.run_for(opts.cfg.timeout_ns * 2); // let acknowledgements settle
    let stats = sum_stats(&net, opts.nodes);
    let r = rec.borrow();
    let mut violation = r.invariant.clone();
    if !drained {
        let stuck = stuck_ops(&net, opts.nodes);
        violation.get_or_insert(format!(
            "{} requests never completed after the faults stopped: {stuck}",
            net.outstanding()
        ));
    }
    if violation.is_none() {
        violation = tandem_check::check_rc(&r.ops).err().map(|v| v.to_string());
    }
    if violation.is_none() {
        violation = r.work.verify(&|k| newest(&net, opts.nodes, k)).err();
    }
    RunReport {
        seed,
        faults,
        ops: r.ops.len(),
        history: r.ops.clone(),
        violation,
        stats,
    }
}

/// The newest value of `k` on any live replica.
fn newest(net: &Net, nodes: u16, k: Key) -> Value {
    let mut best = (Version::default(), 0);
    for n in 0..nodes {
        net.with_node(n, |p| {
            if let Some(ks) = p.and_then(|p| p.keys.get(&k)) {
                best = best.max((ks.version, ks.value));
            }
        });
    }
    best.1
}

type Net = SimNet<KiteNode, KiteFactory>;

/// Faults in the middle 60 % of the run, drawn from the seed.
fn inject(net: &Net, seed: u64, f: Faults, opts: &CheckOpts) {
    let mut rng = Rng::new(seed ^ 0x1AB);
    let (run, n) = (opts.run_ns, opts.nodes as u64);
    net.run_for(run / 5);
    let victim = rng.below(n) as NodeId;
    let (a, b) = (rng.below(n) as NodeId, rng.below(n) as NodeId);
    if f.lossy {
        net.set_faults(|c| (c.drop, c.duplicate, c.delay, c.delay_ns) = (0.01, 0.01, 0.05, 20_000));
    }
    if f.straggle {
        let late = 3 * opts.cfg.timeout_ns;
        net.set_faults(|c| (c.delay, c.delay_ns) = (0.03, late));
    }
    if f.partition && a != b {
        net.partition(a, b, true);
    }
    let slow = (victim + 1) % n as NodeId;
    let fast = (slow + 1) % n as NodeId;
    let slow_to: Vec<NodeId> = (0..n as NodeId)
        .filter(|&to| to != slow && to != fast)
        .collect();
    if f.slow {
        slow_links(net, slow, &slow_to, opts.cfg.timeout_ns / 2);
    }
    if f.sleep {
        net.pause(
            victim,
            net.now_ns() + 2 * opts.cfg.timeout_ns + rng.below(opts.cfg.timeout_ns),
        );
    }
    if f.crash {
        let dead = (victim + 1 + rng.below(n - 1) as NodeId) % n as NodeId;
        net.run_for(run / 10);
        net.crash(dead);
    }
    net.run_for(run / 2);
    net.set_faults(|c| (c.drop, c.duplicate, c.delay) = (0.0, 0.0, 0.0));
    if f.partition && a != b {
        net.partition(a, b, false);
    }
    if f.slow {
        slow_links(net, slow, &slow_to, 0);
    }
    net.run_for(run - net.now_ns().min(run));
}

/// What the sessions that never finished are waiting for.
fn stuck_ops(net: &Net, nodes: u16) -> String {
    let mut v = Vec::new();
    for n in 0..nodes {
        net.with_node(n, |p| {
            for (s, sess) in p.iter().flat_map(|p| p.sessions.iter()) {
                if let Some(op) = &sess.op {
                    v.push(format!("node {n} session {s} live {:?}: {op:?}", sess.live));
                }
            }
        });
    }
    for n in 0..nodes {
        net.with_node(n, |p| {
            if let Some(p) = p {
                v.push(format!(
                    "node {n}: rounds {:?} tick {} suspected {:b} epoch {}",
                    p.rounds.keys().collect::<Vec<_>>(),
                    p.tick_armed,
                    p.suspected,
                    p.epoch
                ));
            }
        });
    }
    v.truncate(12);
    v.join("; ")
}

/// Every message `from` sends to `to` takes `extra_ns` longer.
fn slow_links(net: &Net, from: NodeId, to: &[NodeId], extra_ns: u64) {
    for &t in to {
        net.slow_link(from, t, extra_ns);
    }
}

fn sum_stats(net: &Net, nodes: u16) -> KiteStats {
    let mut t = KiteStats::default();
    for n in 0..nodes {
        net.with_node(n, |p| p.map(|p| add_stats(&mut t, &p.stats)));
    }
    t
}

/// Add `s` to `t`.
pub fn add_stats(t: &mut KiteStats, s: &KiteStats) {
    t.slow_releases += s.slow_releases;
    t.slow_reads += s.slow_reads;
    t.slow_writes += s.slow_writes;
    t.epoch_bumps += s.epoch_bumps;
    t.write_timeouts += s.write_timeouts;
    t.retransmits += s.retransmits;
    t.paxos_retries += s.paxos_retries;
    t.paxos_helps += s.paxos_helps;
    t.write_backs += s.write_backs;
}

/// The command that replays `seed` (printed with every violation).
pub fn replay_command(seed: u64, mutant: Option<Mutant>) -> String {
    let m = mutant
        .map(|m| format!(" --mutant {}", m.name()))
        .unwrap_or_default();
    format!("tandem kite check --seed {seed}{m}")
}

/// A violation found by [`check`], with the command that replays it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Found {
    pub seed: u64,
    pub faults: String,
    pub detail: String,
    pub replay: String,
}

/// What `tandem kite check` reports (docs/DESIGN.md §6.1 field names).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub system: &'static str,
    pub workload: &'static str,
    pub mutant: Option<&'static str>,
    pub seeds: u64,
    pub ops: u64,
    pub violation_count: u64,
    pub violations: Vec<Found>,
    pub stats: KiteStats,
}

/// Run seeds `first..first + seeds` of the random mix; `progress` after each.
pub fn check(
    opts: &CheckOpts,
    first: u64,
    seeds: u64,
    progress: impl FnMut(&RunReport),
) -> Summary {
    check_with(
        opts,
        first,
        seeds,
        |_| Box::new(RandomMix::new(opts.mix, opts.sessions)),
        progress,
    )
}

/// Run seeds of the workload `work(seed)` builds.
pub fn check_with(
    opts: &CheckOpts,
    first: u64,
    seeds: u64,
    work: impl Fn(u64) -> Box<dyn Workload>,
    mut progress: impl FnMut(&RunReport),
) -> Summary {
    let mutant = opts.cfg.mutant;
    let mut s = Summary {
        system: "kite",
        workload: "mix",
        mutant: mutant.map(|m| m.name()),
        seeds,
        ops: 0,
        violation_count: 0,
        violations: Vec::new(),
        stats: Default::default(),
    };
    for seed in first..first + seeds {
        let r = run_with(seed, opts, work(seed));
        s.ops += r.ops as u64;
        add_stats(&mut s.stats, &r.stats);
        if let Some(detail) = &r.violation {
            s.violation_count += 1;
            let (faults, replay) = (r.faults.describe(), replay_command(seed, mutant));
            s.violations.push(Found {
                seed,
                faults,
                detail: detail.clone(),
                replay,
            });
        }
        progress(&r);
    }
    s
}
