//! Seeded simulations of one model with fault injection, and every check the
//! model promises (labels as in docs/DDP.md, "Check labels"): the durability
//! gates in every step (G1, S-1, RP-1, RP-1', C3, SC-1, G5d), linearizability
//! (Lin; RE with each write ending at its VAL, R3), causal order (C1: no node
//! applies an update before its cauhist; C2: under Causal-Synch and Causal-RE-p
//! no node persists one before its cauhist is durable there; C1': session
//! order), no value from thin air, convergence, and after a whole-cluster crash
//! the persistency promises (S-2, RP-2, SC-2, SC-3, G2, C2 of each NVM). What a
//! model does not promise is measured, not asserted: acknowledged writes lost,
//! reads that vanished. The causal checks are in `simcheck/causal.rs`; the
//! transactional client and checks (G1a, T-1, T-2, serializability, T-3, T-4)
//! in `simcheck/trans.rs`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use tandem_check::{HistOp, OpKind};
use tandem_net::manager::{Manager, ManagerConfig};
use tandem_net::sim::session_index;
use tandem_net::{
    Command, Config, Harness, Input, NetStats, NodeId, Nvm, SessionId, SimNet, SimNetConfig,
};
use tandem_sim::Rng;

use crate::catchup::DdpFactory;
use crate::model::{Consistency, Gate, Model, Persistency};
use crate::node::{Bugs, DdpNode, Params};
use crate::types::{Key, Msg, Op, Record, Reply, ScopeId, Slot, Ts, Value};
use crate::upd::vector::Vector;

mod causal;
mod trans;
use causal::Past;
use trans::Txs;

/// Keys of a HEAL run (`CheckConfig::with_heal`).
pub const HEAL_KEYS: u64 = 40;

/// Which crash a run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    None,
    /// One node crashes, the others go on, it restarts and catches up (F2).
    One,
    /// Every node crashes at once and restarts from its NVM (F1).
    All,
    /// One node crashes; while it recovers another member crashes too
    /// (its Buddy, or another live node; HEAL §VI, Fig. 5, TL4/TL5).
    Buddy,
    /// One node crashes and crashes again while it recovers.
    Again,
    /// A second node crashes while the first is away; both recover (HEAL Fig. 5, TL2).
    Two,
    /// No crash: a node is slow (its links take 20 µs more), the manager
    /// suspects it and removes it while it is alive, and later adds it
    /// back; it catches up without a restart.
    Suspect,
    /// As `Suspect`, but the node is cut off (a partition) rather than
    /// slow: alive, and what it sends meanwhile is lost.
    Isolated,
    /// As `Suspect`, but each node hears the manager's announcements after
    /// its own link delay (up to 5 µs), as processes do, so members
    /// disagree on the epoch for a while.
    SuspectSpread,
    /// One node crashes and its process is restarted at once (a
    /// supervisor), before the manager's lease runs out: the manager never
    /// removes it, and it boots in epoch 0 and learns the current
    /// configuration, whose epoch has not changed.
    Bounce,
    /// Lost messages, then two crashes around a copy: one node crashes
    /// and is away; another (the origin) is cut off from every member but
    /// one (the source), so its updates reach only that member, and
    /// crashes; the first node restarts and copies from the members, and
    /// the source crashes once that node has adopted the copies, before
    /// its anti-entropy resent what the others lack. Both rejoin later.
    CopySource,
    /// A flapping network (seen on real processes first): one node is cut
    /// off and removed while the others write; then it is re-added while
    /// still cut off from them, and the manager, which reaches it alone,
    /// removes the others. It must not serve before it has caught up.
    Flip,
    /// No crash and no reconfiguration (seen on real processes first):
    /// two pairs of nodes cannot reach each other, both reach the fifth
    /// (and the manager, which so removes nobody), for long enough that
    /// each side writes many updates the other lacks; then it heals.
    Bridge,
    /// No crash and no reconfiguration (seen on real processes first): the
    /// messages from one node to another are lost for many of the
    /// engine's timeouts, and clients are impatient: a request not
    /// answered within `CLIENT_PATIENCE_NS` is given up, and its session
    /// goes on at the next node, mid-transaction (as `tandem ddp load`
    /// does). Throughput must come back after the heal.
    OneWay,
    /// Every node crashes at once (F1), and the cluster recovers without
    /// one of them (seen on real processes first): the configuration
    /// manager, which outlived the crash, had removed it for its silence
    /// and re-adds it only later. What the others recover must hold every
    /// completed transaction.
    AllButOne,
}

/// A client's patience under `Crash::OneWay`: 1.25 times the engine's idle
/// timeout (`Params::SIM.idle_ns`), as the nemesis's 250 ms clients stand to
/// the processes' 200 ms.
pub const CLIENT_PATIENCE_NS: u64 = 2_500_000;

/// How soon after the heal of `Crash::OneWay` throughput must be back: 7
/// idle timeouts, as the nemesis's 1.4 s bound stands to 200 ms.
pub const RECOVERY_NS: u64 = 14_000_000;

impl Crash {
    pub fn parse(s: &str) -> Result<Crash, String> {
        match s {
            "none" => Ok(Crash::None),
            "one" => Ok(Crash::One),
            "all" => Ok(Crash::All),
            "buddy" => Ok(Crash::Buddy),
            "again" => Ok(Crash::Again),
            "two" => Ok(Crash::Two),
            "suspect" => Ok(Crash::Suspect),
            "isolated" => Ok(Crash::Isolated),
            "bounce" => Ok(Crash::Bounce),
            "suspect-spread" => Ok(Crash::SuspectSpread),
            "copy-source" => Ok(Crash::CopySource),
            "flip" => Ok(Crash::Flip),
            "bridge" => Ok(Crash::Bridge),
            "one-way" => Ok(Crash::OneWay),
            "all-but-one" => Ok(Crash::AllButOne),
            other => Err(format!(
                "unknown crash '{other}' (none, one, all, buddy, again, two, suspect, isolated, suspect-spread, bounce, copy-source, flip, bridge, one-way, all-but-one)"
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Crash::None => "none",
            Crash::One => "one",
            Crash::All => "all",
            Crash::Buddy => "buddy",
            Crash::Again => "again",
            Crash::Two => "two",
            Crash::Suspect => "suspect",
            Crash::Isolated => "isolated",
            Crash::Bounce => "bounce",
            Crash::SuspectSpread => "suspect-spread",
            Crash::CopySource => "copy-source",
            Crash::Flip => "flip",
            Crash::Bridge => "bridge",
            Crash::OneWay => "one-way",
            Crash::AllButOne => "all-but-one",
        }
    }
}

#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub model: Model,
    pub seed: u64,
    pub nodes: u16,
    pub sessions: u64,
    pub keys: u64,
    /// Operations per session.
    pub ops: u64,
    pub read_ratio: f64,
    /// Chance that a session closes its scope (Scope persistency).
    pub persist_ratio: f64,
    pub crash: Crash,
    /// Drop, duplicate and delay messages.
    pub net_faults: bool,
    /// NVM persist latency (the paper's 400 ns by default).
    pub persist_ns: u64,
    pub bugs: Bugs,
    /// The engine's own invariants (`Params::assertions`): a broken one
    /// panics in the node's step. Off only where a test shows that the
    /// checkers below catch a mutant on their own.
    pub assertions: bool,
    /// Restarted nodes recover with HEAL, so configured (else by full copy).
    pub heal: Option<crate::heal::state::HealOpts>,
    /// Present sessions to the nodes under ids spread over all 64 bits, as
    /// the RESP front end draws them (`tandem_net::sim::wide_session_id`),
    /// instead of 0, 1, 2… (docs/DDP.md lists what they find).
    pub wide_sessions: bool,
}

impl CheckConfig {
    pub fn new(model: Model, seed: u64) -> Self {
        CheckConfig {
            model,
            seed,
            nodes: 5,
            sessions: 10,
            keys: 6,
            ops: 120,
            read_ratio: 0.5,
            persist_ratio: 0.15,
            crash: Crash::None,
            net_faults: true,
            persist_ns: 400,
            bugs: Bugs::default(),
            assertions: true,
            heal: None,
            wide_sessions: false,
        }
    }

    /// A HEAL run: restarted nodes recover with HEAL, over more keys (so
    /// that some keys are written only while a node is away).
    pub fn with_heal(self) -> Self {
        self.with_heal_opts(crate::heal::state::HealOpts::default())
    }

    /// A HEAL run with these options (HEAL-NoShadow: `no_shadow`).
    pub fn with_heal_opts(mut self, opts: crate::heal::state::HealOpts) -> Self {
        self.heal = Some(opts);
        self.keys = HEAL_KEYS;
        self
    }

    pub fn replay(&self) -> String {
        let mut s = format!(
            "tandem ddp check --model {} --seed {} --crash {}",
            self.model,
            self.seed,
            self.crash.name()
        );
        if !self.net_faults {
            s += " --no-net-faults";
        }
        if self.persist_ns != 400 {
            s += &format!(" --persist-ns {}", self.persist_ns);
        }
        match self.heal {
            Some(h) if h.no_shadow => s += " --recovery heal-no-shadow",
            Some(_) => s += " --recovery heal",
            None => {}
        }
        for name in self.bugs.active() {
            s += &format!(" --inject-bug {name}");
        }
        s
    }
}

#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub model: String,
    pub seed: u64,
    pub completed: u64,
    pub violations: Vec<String>,
    /// Acknowledged writes whose version (or a newer one) did not survive the crash.
    pub lost_acked_writes: u64,
    /// Versions returned by reads that did not survive the crash.
    pub vanished_reads: u64,
    pub replay: String,
    pub stats: NetStats,
    pub sim_ns: u64,
    /// Transactional consistency: transactions whose End answered
    /// Committed, squashed ones (Aborted answers), and committed ones whose
    /// client got no answer (the coordinator crashed; settled by members).
    pub tx_committed: u64,
    pub tx_aborted: u64,
    pub tx_unanswered_commits: u64,
    /// Ends answered `OutcomeUnknown` (the coordinator crashed or left).
    pub tx_unknown: u64,
    /// HEAL: recoveries that ended by HEAL's steps, and by the full-copy fallback.
    pub heal_recoveries: u64,
    pub heal_fallbacks: u64,
    /// `CatchUp_req` rounds of those recoveries (one each but under HEAL-NoShadow).
    pub heal_rounds: u64,
    /// Crashes (`buddy`, `again`) that hit while a node was still recovering.
    pub mid_recovery_crashes: u64,
    /// Causal: operations answered `PastLost` (their session's past died
    /// with two crashed nodes).
    pub pasts_lost: u64,
}

/// The client workload and the observer of every step.
struct Rec {
    model: Model,
    cfg: CheckConfig,
    left: Vec<u64>,
    /// Per session: its open scope and the writes invoked in it.
    scope: Vec<(u64, u32)>,
    ops: Vec<HistOp>,
    index: HashMap<(SessionId, u64), usize>,
    /// Persist requests: the scope and how many writes it holds.
    persists: HashMap<(SessionId, u64), (ScopeId, u32)>,
    /// Every write's key, ts (once its INV was seen) and scope.
    writes: HashMap<Value, (Key, Option<Ts>, ScopeId)>,
    acked: Vec<(Key, Ts)>,
    /// Versions reads returned, and the node that returned each.
    reads: Vec<(Key, Ts, NodeId)>,
    scopes_done: Vec<ScopeId>,
    val_time: HashMap<(Key, Ts), u64>,
    configs: Vec<Vec<NodeId>>,
    /// Nodes that were never down: the durability gates are checked on them.
    steady: Vec<bool>,
    violations: Vec<String>,
    past: Vec<Past>,
    /// Each write's direct dependencies (by its unique value).
    deps: HashMap<Value, Vec<(Key, Ts)>>,
    /// Per node, the newest version of each key it applied, as its apply
    /// trace shows; `None` while it is down or catching up.
    seen: Vec<Option<HashMap<Key, Ts>>>,
    /// Transactional consistency: the sessions' transactions (`simcheck/trans.rs`).
    txs: Txs,
    /// Per node: whether it served clients after its last step.
    online: Vec<bool>,
    /// Operations answered `PastLost`.
    pasts_lost: u64,
    /// Each session's name in the history: a session told `PastLost` goes
    /// on as a new one (session order holds only since then).
    alias: Vec<SessionId>,
}

type Shared = Rc<RefCell<Rec>>;

/// Forwards the simulator's calls to the shared recorder.
struct Hook(Shared);

impl Harness<DdpNode> for Hook {
    fn next_op(&mut self, session: SessionId, _now: u64, rng: &mut Rng) -> Option<Op> {
        self.0.borrow_mut().next_op(session, rng)
    }
    fn invoked(&mut self, session: SessionId, req: u64, node: NodeId, op: &Op, now: u64) {
        self.0.borrow_mut().invoked(session, req, node, op, now)
    }
    fn completed(
        &mut self,
        session: SessionId,
        req: u64,
        _node: NodeId,
        r: &Reply,
        now: u64,
        _nvm: &[Nvm<Record>],
    ) {
        self.0.borrow_mut().completed(session, req, r, now)
    }
    fn on_step(
        &mut self,
        node: NodeId,
        now: u64,
        input: &Input<DdpNode>,
        out: &[Command<DdpNode>],
        nvm: &[Nvm<Record>],
    ) {
        self.0.borrow_mut().on_step(node, now, input, out, nvm)
    }
    fn observe(&mut self, node: NodeId, now: u64, p: &DdpNode, nvm: &[Nvm<Record>]) {
        let mut rec = self.0.borrow_mut();
        rec.check_online(node, now, p);
        rec.observe(node, now, p, nvm)
    }
    fn traces(&self) -> bool {
        true
    }
}

fn nvm_ts(nvm: &Nvm<Record>, key: Key) -> Ts {
    match nvm.get(&Slot::Key(key)) {
        Some(Record::Key(v)) => v.ts,
        _ => Ts::ZERO,
    }
}

impl Rec {
    /// The id session `index` has on the wire, and so in the nodes'
    /// replies, records and messages: the checks keep sessions by index,
    /// and name a session's scopes and transactions as the nodes do.
    fn wire(&self, index: SessionId) -> SessionId {
        match self.cfg.wide_sessions {
            true => tandem_net::sim::wide_session_id(index),
            false => index,
        }
    }

    /// A write the session is about to send: `value` (unique) into `key`,
    /// in the session's scope `seq`.
    fn note_write(&mut self, value: Value, key: Key, session: SessionId, seq: u64) {
        let scope = ScopeId {
            session: self.wire(session),
            seq,
        };
        self.writes.insert(value, (key, None, scope));
    }

    /// C11 (docs/HEAL.md, "Checks"), for any catch-up: a node that comes back
    /// online holds every write acknowledged so far (Lin: a write is acked
    /// once every member has it, so one the node missed came by catch-up).
    fn check_online(&mut self, node: NodeId, now: u64, p: &DdpNode) {
        let n = node as usize;
        let (was, is) = (self.online[n], p.is_ready());
        self.online[n] = is;
        if was
            || !is
            || self.model.c != Consistency::Lin
            || matches!(self.cfg.crash, Crash::All | Crash::AllButOne)
        {
            return;
        }
        if self.cfg.heal.is_some() {
            // From here on its durability gates are checked like any node's.
            self.steady[n] = true;
        }
        let snap = p.snapshot();
        let at = |k: &Key| snap.get(k).map_or(Ts::ZERO, |v| v.0);
        if let Some((k, ts)) = self.acked.iter().find(|(k, ts)| at(k) < *ts) {
            self.violations.push(format!("C11: node {node} came back online holding key {k} at {:?}, older than {ts:?} acknowledged before (t={now})", at(k)));
        }
    }

    fn next_op(&mut self, session: SessionId, rng: &mut Rng) -> Option<Op> {
        if self.model.c == Consistency::Trans {
            return self.next_tx_op(session, rng);
        }
        let s = session as usize;
        if self.left[s] == 0 {
            return None;
        }
        self.left[s] -= 1;
        let (seq, writes) = self.scope[s];
        if self.model.p == Persistency::Scope && rng.chance(self.cfg.persist_ratio) {
            self.scope[s] = (seq + 1, 0);
            return Some(Op::Persist { scope: seq, writes });
        }
        let key = rng.below(self.cfg.keys);
        let after = if self.model.c == Consistency::Causal {
            self.past[s].after.clone()
        } else {
            Vector::default()
        };
        if rng.chance(self.cfg.read_ratio) {
            return Some(Op::Read {
                key,
                after,
                tx: None,
            });
        }
        self.scope[s].1 += 1;
        let value = (session + 1) << 32 | self.left[s];
        self.note_write(value, key, session, seq);
        self.deps.insert(value, self.past[s].deps());
        Some(Op::Write {
            key,
            value,
            scope: seq,
            after,
            tx: None,
        })
    }

    fn invoked(&mut self, session: SessionId, req: u64, node: NodeId, op: &Op, now: u64) {
        if let Some(seq) = op.tx() {
            let id = crate::TxId {
                session: self.wire(session),
                seq,
            };
            (self.txs.of_req).insert((session, req), id);
        }
        let kind = match *op {
            Op::Read { key, .. } => OpKind::Read { key, value: None },
            Op::Write { key, value, .. } => OpKind::Write { key, value },
            Op::Persist { scope, writes } => {
                self.persists.insert(
                    (session, req),
                    (
                        ScopeId {
                            session: self.wire(session),
                            seq: scope,
                        },
                        writes,
                    ),
                );
                return;
            }
            Op::Begin { .. } | Op::End { .. } => return,
        };
        self.index.insert((session, req), self.ops.len());
        self.ops.push(HistOp {
            session: self.alias[session as usize],
            node,
            kind,
            invoke_ns: now,
            complete_ns: None,
            ok: true,
        });
    }

    fn completed(&mut self, session: SessionId, req: u64, r: &Reply, now: u64) {
        if self.model.c == Consistency::Trans && self.tx_reply(session, req, r, now) {
            return;
        }
        if let Reply::Persisted { .. } = r {
            let (scope, _) = self.persists[&(session, req)];
            self.scopes_done.push(scope);
            return;
        }
        let Some(&i) = self.index.get(&(session, req)) else {
            return;
        };
        let op = &mut self.ops[i];
        op.complete_ns = Some(now);
        let past = &mut self.past[session as usize];
        match (&mut op.kind, r) {
            (OpKind::Read { key, value }, Reply::Read { value: v, ts, id }) => {
                *value = *v;
                self.reads.push((*key, *ts, op.node));
                if let Some(x) = v.and_then(|x| self.writes.get_mut(&x)) {
                    x.1 = x.1.or(Some(*ts));
                }
                if *ts != Ts::ZERO {
                    past.since.push((*key, *ts, *id));
                }
                if let Some(id) = id {
                    past.after.add(*id);
                }
            }
            (OpKind::Write { key, .. }, Reply::Written { ts, id }) => {
                self.acked.push((*key, *ts));
                past.since = vec![(*key, *ts, *id)];
                if let Some(id) = id {
                    past.after.add(*id);
                }
            }
            (_, Reply::PastLost { upto }) => {
                // Not run; what the session saw of the lost updates is gone.
                op.ok = false;
                past.lose(upto);
                self.pasts_lost += 1;
                self.alias[session as usize] = self.cfg.sessions + self.pasts_lost;
            }
            _ => self.violations.push(format!(
                "session {session} req {req}: reply {r:?} does not answer its request"
            )),
        }
    }
}

impl Rec {
    /// A reply under Transactional consistency; false: a Persist's, handled as for any model.
    fn tx_reply(&mut self, session: SessionId, req: u64, r: &Reply, now: u64) -> bool {
        if let Reply::Error { msg } = r {
            self.violations
                .push(format!("session {session} req {req}: refused: {msg}"));
        }
        let i = self.index.get(&(session, req)).copied();
        let kind = i.map(|i| match self.ops[i].kind {
            OpKind::Read { key, .. } => (key, None, self.ops[i].node),
            OpKind::Write { key, value } => (key, Some(value), self.ops[i].node),
        });
        self.tx_completed(session, r, kind);
        if let Some(op) = i.map(|i| &mut self.ops[i]) {
            op.complete_ns = Some(now);
            match (&mut op.kind, r) {
                (OpKind::Read { value, .. }, Reply::Read { value: v, .. }) => *value = *v,
                (_, Reply::Aborted { .. }) => op.ok = false,
                _ => {}
            }
        }
        !matches!(r, Reply::Persisted { .. } | Reply::ScopeLost { .. })
    }
}

impl Rec {
    /// The durability-gating trace invariants (G1, S-1, RP-1,
    /// SC-1, G5d), checked on the nodes that were never down.
    fn on_step(
        &mut self,
        node: NodeId,
        now: u64,
        input: &Input<DdpNode>,
        out: &[Command<DdpNode>],
        nvm: &[Nvm<Record>],
    ) {
        if let Input::Config(c) = input {
            self.configs[node as usize] = c.members.clone();
        }
        for c in out {
            if self.model.c == Consistency::Trans {
                self.tx_step(node, now, c, nvm);
            }
            match c {
                Command::Send {
                    msg:
                        Msg::Ack {
                            key, ts, p: true, ..
                        },
                    ..
                } if trans::durable_ts(&nvm[node as usize], *key, false) < *ts => {
                    self.violations.push(format!("G1: node {node} sent ACK_p for key {key} {ts:?} before persisting it (t={now})"));
                }
                Command::Broadcast {
                    msg: Msg::Inv { v, .. },
                } => {
                    if let Some(w) = self.writes.get_mut(&v.value) {
                        w.1 = Some(v.ts);
                    }
                }
                Command::Broadcast {
                    msg: Msg::Upd { upds },
                }
                | Command::Send {
                    msg: Msg::Upd { upds },
                    ..
                } => {
                    for u in upds {
                        if let Some(w) = self.writes.get_mut(&u.v.value) {
                            w.1 = Some(u.v.ts);
                        }
                    }
                }
                Command::Persist {
                    record: Record::Key(v),
                    ..
                } if self.closed_nvm() && self.seen[node as usize].is_some() => {
                    if let Some((k, t)) = self.missing_dep(v, &nvm[node as usize]) {
                        self.violations.push(format!("C2: node {node} persisted key {} {:?} before its dependency key {k} {t:?} was durable there (t={now})", v.key, v.ts));
                    }
                }
                Command::Broadcast {
                    msg: Msg::Val { key, ts, p, .. },
                } => {
                    self.val_time.entry((*key, *ts)).or_insert(now);
                    if *p {
                        self.everywhere(node, *key, *ts, nvm, "G5d: VAL_p", now);
                    }
                }
                Command::Reply {
                    session,
                    req,
                    result,
                } => self.check_reply(node, session_index(*session), *req, result, nvm, now),
                _ => {}
            }
        }
    }

    fn check_reply(
        &mut self,
        node: NodeId,
        session: SessionId,
        req: u64,
        r: &Reply,
        nvm: &[Nvm<Record>],
        now: u64,
    ) {
        if self.model.c == Consistency::Trans
            && self.check_tx_reply(node, session, req, r, nvm, now)
        {
            return;
        }
        let rules = self.model.rules();
        match r {
            Reply::Written { ts, .. } if matches!(rules.reply, Gate::P | Gate::CP) => {
                let key = self.ops[self.index[&(session, req)]].key();
                self.everywhere(node, key, *ts, nvm, "S-1: write acknowledged", now);
            }
            Reply::Read { ts, .. }
                if matches!(rules.read, Gate::P | Gate::CP) && *ts != Ts::ZERO =>
            {
                let key = self.ops[self.index[&(session, req)]].key();
                self.everywhere(node, key, *ts, nvm, "RP-1: read returned", now);
            }
            Reply::Read { ts, .. }
                if self.reads_persisted()
                    && nvm_ts(
                        &nvm[node as usize],
                        self.ops[self.index[&(session, req)]].key(),
                    ) < *ts =>
            {
                let key = self.ops[self.index[&(session, req)]].key();
                let what = if self.model.p == Persistency::Re {
                    "RP-1'"
                } else {
                    "C3"
                };
                let have = nvm_ts(&nvm[node as usize], key);
                self.violations.push(format!("{what}: node {node} returned key {key} {ts:?} to a read while it had persisted only {have:?} (t={now})"));
            }
            Reply::Persisted { seq }
                if self.model.p == Persistency::Scope && self.persists[&(session, req)].1 > 0 =>
            {
                let scope = ScopeId {
                    session: self.wire(session),
                    seq: *seq,
                };
                let members = self.configs[node as usize].clone();
                for m in members.into_iter().filter(|&m| self.steady[m as usize]) {
                    if !nvm[m as usize].contains_key(&Slot::Scope(scope)) {
                        self.violations.push(format!("SC-1: scope {scope:?} reported durable by node {node} while node {m} had not persisted it (t={now})"));
                    }
                }
            }
            _ => {}
        }
    }

    /// Every steady member of `node`'s configuration has persisted `key` at `ts` or newer.
    fn everywhere(
        &mut self,
        node: NodeId,
        key: Key,
        ts: Ts,
        nvm: &[Nvm<Record>],
        what: &str,
        now: u64,
    ) {
        for &m in &self.configs[node as usize] {
            let have = trans::durable_ts(&nvm[m as usize], key, false);
            if self.steady[m as usize] && have < ts {
                self.violations.push(format!("{what} key {key} {ts:?} at node {node} while node {m} had persisted only {have:?} (t={now})"));
                return;
            }
        }
    }
}

/// Simulated time a run may take before it counts as stuck (G6).
const LIMIT_NS: u64 = 2_000_000_000;

struct Run {
    cfg: CheckConfig,
    net: SimNet<DdpNode, DdpFactory>,
    rec: Shared,
    epoch: u64,
    rng: Rng,
    report: CheckReport,
}

/// Run one seeded simulation of `cfg.model` and every check it promises.
pub fn run(cfg: &CheckConfig) -> CheckReport {
    let mut r = Run::new(cfg);
    if !cfg.model.implemented() {
        r.report
            .violations
            .push(format!("model {} is not implemented yet", cfg.model));
        return r.report;
    }
    r.net.announce(&Config::new(1, (0..cfg.nodes).collect()));
    r.net.start_clients();
    let target = cfg.sessions * cfg.ops * r.rng.range_inclusive(20, 60) / 100;
    r.run_until_completed(target);
    let mut crash_at = None;
    match cfg.crash {
        Crash::None => {}
        Crash::One => r.crash_one(),
        Crash::All => crash_at = Some(r.crash_all(None)),
        Crash::AllButOne => {
            let late = r.rng.below(cfg.nodes as u64) as NodeId;
            crash_at = Some(r.crash_all(Some(late)));
        }
        Crash::Buddy => r.crash_during_recovery(false),
        Crash::Again => r.crash_during_recovery(true),
        Crash::Two => r.crash_two(),
        Crash::Suspect => r.suspect_one(false, false),
        Crash::Isolated => r.suspect_one(true, false),
        Crash::SuspectSpread => r.suspect_one(false, true),
        Crash::Bounce => r.bounce_one(),
        Crash::CopySource => r.crash_copy_source(),
        Crash::Flip => r.flip_one(),
        Crash::Bridge => r.bridge(),
        Crash::OneWay => r.one_way(),
    }
    r.finish(crash_at);
    r.report
}

impl Run {
    fn new(cfg: &CheckConfig) -> Run {
        let members: Vec<NodeId> = (0..cfg.nodes).collect();
        let rec = Rec {
            model: cfg.model,
            cfg: cfg.clone(),
            left: vec![cfg.ops; cfg.sessions as usize],
            scope: vec![(0, 0); cfg.sessions as usize],
            ops: Vec::new(),
            index: HashMap::new(),
            persists: HashMap::new(),
            writes: HashMap::new(),
            acked: Vec::new(),
            reads: Vec::new(),
            scopes_done: Vec::new(),
            val_time: HashMap::new(),
            configs: vec![members.clone(); cfg.nodes as usize],
            steady: vec![true; cfg.nodes as usize],
            violations: Vec::new(),
            past: vec![Past::default(); cfg.sessions as usize],
            deps: HashMap::new(),
            seen: vec![None; cfg.nodes as usize],
            txs: Txs::new(cfg.sessions as usize),
            online: vec![true; cfg.nodes as usize],
            pasts_lost: 0,
            alias: (0..cfg.sessions).collect(),
        };
        let rec = Rc::new(RefCell::new(rec));
        // One core per node: the checks' histories stay within what the
        // linearizability search decides in its budget (with 20 cores one
        // re-eventual seed in 20 came out undecided, not violated).
        let base = SimNetConfig {
            persist_ns: cfg.persist_ns,
            cores: 1,
            wide_sessions: cfg.wide_sessions,
            ..SimNetConfig::default()
        };
        let base = SimNetConfig {
            patience_ns: if cfg.crash == Crash::OneWay {
                CLIENT_PATIENCE_NS
            } else {
                0
            },
            ..base
        };
        let net_cfg = if cfg.net_faults {
            SimNetConfig {
                drop: 0.01,
                duplicate: 0.01,
                delay: 0.05,
                delay_ns: 5_000,
                ..base
            }
        } else {
            base
        };
        let heal = cfg.heal;
        let params = Params {
            assertions: cfg.assertions,
            ..Params::SIM
        };
        let factory = DdpFactory {
            bugs: cfg.bugs,
            heal,
            ..DdpFactory::new(cfg.model, params)
        };
        let net = SimNet::new(
            cfg.seed,
            net_cfg,
            // Processes boot in epoch 0 (as `tandem node` does); the
            // manager's first announcement (epoch 1) follows at once.
            Config::new(0, members),
            factory,
            Box::new(Hook(rec.clone())),
            cfg.sessions,
        );
        let report = CheckReport {
            model: cfg.model.to_string(),
            seed: cfg.seed,
            replay: cfg.replay(),
            ..CheckReport::default()
        };
        Run {
            cfg: cfg.clone(),
            net,
            rec,
            epoch: 1,
            rng: Rng::new(cfg.seed ^ 0xDD9_C4EC),
            report,
        }
    }

    fn completed(&self) -> u64 {
        self.rec
            .borrow()
            .ops
            .iter()
            .filter(|o| o.complete_ns.is_some())
            .count() as u64
    }

    fn run_until_completed(&self, target: u64) {
        self.net.run_while(LIMIT_NS, |_| self.completed() < target);
    }

    fn config(&mut self, members: Vec<NodeId>) -> Config {
        self.epoch += 1;
        Config::new(self.epoch, members)
    }

    /// F2: one node crashes; the manager drops it, later it restarts,
    /// rejoins and catches up while the others serve.
    fn crash_one(&mut self) {
        let victim = self.rng.below(self.cfg.nodes as u64) as NodeId;
        self.crash_away(&[victim]);
        self.rejoin(&[victim]);
    }

    /// Crash `nodes` (the ones not down yet), let the others notice, and run
    /// the EFN (execution with fewer nodes) for a while.
    fn crash_away(&mut self, nodes: &[NodeId]) {
        for &n in nodes {
            if self.net.is_up(n) {
                self.net.crash(n);
            }
            self.rec.borrow_mut().steady[n as usize] = false;
        }
        self.net.run_for(20_000);
        let members: Vec<NodeId> = (0..self.cfg.nodes).filter(|n| self.net.is_up(*n)).collect();
        let c = self.config(members);
        self.net.announce(&c);
        self.net.run_for(50_000);
    }

    /// How long the manager's announcement takes to reach each node (its
    /// own link): up to 5 µs, ten network delays.
    fn manager_links(&mut self) -> Vec<u64> {
        (0..self.cfg.nodes)
            .map(|_| self.rng.range_inclusive(0, 5_000))
            .collect()
    }

    /// A node crashes and its process restarts within a few microseconds,
    /// well inside its lease. What the configuration manager does then is
    /// decided by its own code (`tandem_net::manager::Manager`): the new
    /// run links with a new boot id, and its first heartbeat follows.
    fn bounce_one(&mut self) {
        let victim = self.rng.below(self.cfg.nodes as u64) as NodeId;
        let members: Vec<NodeId> = (0..self.cfg.nodes).collect();
        let now = self.net.now_ns();
        let mut m = Manager::new(ManagerConfig::default(), &members, now).at_epoch(self.epoch);
        m.linked(victim, 1);
        self.net.crash(victim);
        self.rec.borrow_mut().steady[victim as usize] = false;
        self.net.run_for(self.rng.range_inclusive(1_000, 10_000));
        self.net.restart(victim, &Config::new(0, members));
        let removed = m.linked(victim, 2);
        self.net.inject(victim, Input::Config(m.config()));
        let links = self.manager_links();
        if let Some(c) = removed {
            self.net.announce_delayed(&c, &links);
        }
        self.net.run_for(self.rng.range_inclusive(0, 5_000));
        if let Some(c) = m.heartbeat(self.net.now_ns(), victim) {
            self.net.announce_delayed(&c, &links);
        }
        self.epoch = m.config().epoch;
    }

    /// Restart `nodes` from their NVM, then announce a configuration with
    /// every node. A restarted process knows only its peers until the
    /// manager speaks, so it starts in epoch 0 as `tandem node` does
    /// (crates/net/src/host.rs), not in the epoch that re-adds it.
    fn rejoin(&mut self, nodes: &[NodeId]) {
        let c = self.config((0..self.cfg.nodes).collect());
        let boot = Config::new(0, c.members.clone());
        for &n in nodes {
            self.net.restart(n, &boot);
        }
        self.net.announce(&c);
    }

    /// One node crashes and rejoins; a few microseconds into its recovery a
    /// member crashes (`again`: the recovering node itself); both rejoin.
    fn crash_during_recovery(&mut self, again: bool) {
        let nodes = self.cfg.nodes as u64;
        let victim = self.rng.below(nodes) as NodeId;
        self.crash_away(&[victim]);
        self.rejoin(&[victim]);
        self.net.run_for(self.rng.range_inclusive(0, 6_000));
        let second = if again {
            victim
        } else {
            (victim + 1 + self.rng.below(nodes - 1) as NodeId) % nodes as NodeId
        };
        let recovering = self.net.with_node(victim, |p| {
            p.is_some_and(|p| !p.is_ready() || p.heal().is_some_and(|h| h.rr.is_some()))
        });
        self.report.mid_recovery_crashes += u64::from(recovering);
        self.crash_away(&[second]);
        self.rejoin(&[second]);
    }

    /// False suspicion: a slow node is removed while alive (it stops
    /// serving when told), its links recover, and it is added back and
    /// catches up as it is, with whatever state it kept.
    /// `cut`: its links are cut instead (a partition).
    fn suspect_one(&mut self, cut: bool, spread: bool) {
        let nodes = self.cfg.nodes;
        let victim = self.rng.below(nodes as u64) as NodeId;
        let slow = |net: &SimNet<DdpNode, DdpFactory>, extra| {
            for o in (0..nodes).filter(|&o| o != victim) {
                if cut {
                    net.partition(victim, o, extra > 0);
                } else {
                    net.slow_link(victim, o, extra);
                    net.slow_link(o, victim, extra);
                }
            }
        };
        slow(&self.net, 20_000);
        self.net.run_for(20_000);
        self.rec.borrow_mut().steady[victim as usize] = false;
        let members: Vec<NodeId> = (0..nodes).filter(|&n| n != victim).collect();
        let c = self.config(members);
        let links = if spread {
            self.manager_links()
        } else {
            vec![0; nodes as usize]
        };
        self.net.announce_delayed(&c, &links);
        self.net.run_for(50_000);
        slow(&self.net, 0);
        let c = self.config((0..nodes).collect());
        self.net.announce_delayed(&c, &links);
    }

    /// `Crash::Bridge`: two pairs cut off from each other, both joined
    /// through the fifth node, for 0.5–2 ms (hundreds of anti-entropy
    /// ticks); every node stays a member.
    fn bridge(&mut self) {
        let mut all: Vec<NodeId> = (0..self.cfg.nodes).collect();
        for i in (1..all.len()).rev() {
            all.swap(i, self.rng.below(i as u64 + 1) as usize);
        }
        let half = (all.len() - 1) / 2;
        let (a, b) = (all[..half].to_vec(), all[half..2 * half].to_vec());
        let cut = |net: &SimNet<DdpNode, DdpFactory>, on| {
            for &x in &a {
                b.iter().for_each(|&y| net.partition(x, y, on));
            }
        };
        cut(&self.net, true);
        let held = self.rng.range_inclusive(500_000, 2_000_000);
        self.net.run_for(held);
        cut(&self.net, false);
    }

    /// `Crash::OneWay`: one direction of one link is cut for 5 to 20 ms,
    /// while impatient clients give up and move. Then G7: within
    /// [`RECOVERY_NS`] of the heal, a 1 ms window commits at least half
    /// as many transactions as a millisecond did before the cut (the
    /// nemesis's rule for processes, on the simulator's time scale).
    fn one_way(&mut self) {
        let n = self.cfg.nodes as u64;
        let from = self.rng.below(n) as NodeId;
        let to = ((from as u64 + 1 + self.rng.below(n - 1)) % n) as NodeId;
        // Sessions that outlast the recovery window (a write's value counts
        // down its session's `left`: the extra values come above the rest).
        let left0 = self.rec.borrow().left.clone();
        self.rec
            .borrow_mut()
            .left
            .iter_mut()
            .for_each(|l| *l += 1 << 24);
        let before = self.committed();
        self.net.run_for(5_000_000);
        let per_ms = (self.committed() - before) as f64 / 5.0;
        self.net.cut_one_way(from, to, true);
        let held = self.rng.range_inclusive(5_000_000, 20_000_000);
        self.net.run_for(held);
        self.net.cut_one_way(from, to, false);
        let mut windows = Vec::new();
        while windows.len() < (RECOVERY_NS / 1_000_000) as usize {
            let c = self.committed();
            self.net.run_for(1_000_000);
            windows.push(self.committed() - c);
            if *windows.last().expect("pushed") as f64 >= per_ms / 2.0 {
                break;
            }
        }
        // The rest of the run checks what it always does, on the operations
        // the sessions had left.
        let mut rec = self.rec.borrow_mut();
        rec.left
            .iter_mut()
            .zip(left0)
            .for_each(|(l, l0)| *l = (*l).min(l0));
        drop(rec);
        if windows.iter().any(|&w| w as f64 >= per_ms / 2.0) {
            return;
        }
        self.report.violations.push(format!(
            "G7: {from} -> {to} cut for {} ms; within {} ms of the heal no millisecond completed half of the {per_ms:.0} transactions (operations) one did before (per ms after the heal: {windows:?})",
            held / 1_000_000,
            RECOVERY_NS / 1_000_000
        ));
    }

    /// Transactions committed and answered so far (operations completed,
    /// outside the Transactional models).
    fn committed(&self) -> u64 {
        if self.cfg.model.c != Consistency::Trans {
            return self.completed();
        }
        self.rec.borrow().txs.counts().0
    }

    /// `Crash::Flip`, driven by the real configuration manager on
    /// simulated time: the victim is cut off and the manager, which hears
    /// the others, removes it while they write on; then the network flips
    /// and the manager hears the victim alone (still cut off from the
    /// others, so its copy requests are lost): it re-adds the victim and
    /// would remove the silent others. A node must not serve before it has
    /// caught up, so the manager must keep a caught-up member.
    fn flip_one(&mut self) {
        let nodes = self.cfg.nodes;
        let victim = self.rng.below(nodes as u64) as NodeId;
        let all: Vec<NodeId> = (0..nodes).collect();
        let others: Vec<NodeId> = all.iter().copied().filter(|&n| n != victim).collect();
        let cfg = ManagerConfig {
            lease_ns: 20_000,
            margin_ns: 5_000,
            startup_ns: 0,
        };
        let mut m = Manager::new(cfg, &all, self.net.now_ns()).at_epoch(self.epoch);
        let cut = |net: &SimNet<DdpNode, DdpFactory>, on| {
            for &o in &others {
                net.partition(victim, o, on);
            }
        };
        cut(&self.net, true);
        self.rec.borrow_mut().steady[victim as usize] = false;
        // Cut off, the victim never hears that it was removed.
        self.manager_rounds(&mut m, &others, &others, 60_000);
        // The others' last heartbeats before the flip left them at
        // different times, so they fall silent one by one, and the manager
        // removes all but the last caught-up one.
        for k in 1..=others.len() {
            let heard: Vec<NodeId> = std::iter::once(victim)
                .chain(others[k..].iter().copied())
                .collect();
            self.manager_rounds(&mut m, &heard, &[victim], 10_000);
        }
        self.manager_rounds(&mut m, &[victim], &[victim], 40_000);
        cut(&self.net, false);
        // The others link to the manager again, which sends each its
        // configuration; the members it kept relink last (on processes,
        // their links to it died during the cut and take a while to
        // come back), and the nodes that relinked first may catch up
        // from them and be counted caught up before.
        self.net.announce(&m.config());
        let kept: Vec<NodeId> = m.config().others(victim).collect();
        let first: Vec<NodeId> = all.iter().copied().filter(|n| !kept.contains(n)).collect();
        self.manager_rounds(&mut m, &first, &all, 60_000);
        self.manager_rounds(&mut m, &all, &all, 60_000);
        self.epoch = m.config().epoch;
    }

    /// `ns` of simulated time in 5 µs rounds: the manager hears `hears`
    /// (each as caught up as it is) and ticks; what it announces reaches `to`.
    fn manager_rounds(&mut self, m: &mut Manager, hears: &[NodeId], to: &[NodeId], ns: u64) {
        for _ in 0..ns / 5_000 {
            self.net.run_for(5_000);
            let now = self.net.now_ns();
            let mut announce = Vec::new();
            for &n in hears {
                let (caught_up, epoch) = self.net.with_node(n, |p| {
                    p.map_or((false, 0), |p| {
                        (tandem_net::Protocol::caught_up(p), p.config.epoch)
                    })
                });
                announce.extend(m.heartbeat_from(now, n, caught_up, epoch));
            }
            announce.extend(m.tick(now));
            for c in announce {
                // A node removed comes back by copy: the durability gates
                // no longer count it as never down.
                for n in (0..self.cfg.nodes).filter(|n| !c.members.contains(n)) {
                    self.rec.borrow_mut().steady[n as usize] = false;
                }
                for &n in to {
                    self.net.inject(n, Input::Config(c.clone()));
                }
            }
        }
    }

    /// `Crash::CopySource`. The window is what anti-entropy leaves: the
    /// source resends another origin's update only `3 * retry_ns` after it
    /// applied it, so it crashes once the restarted node has its copies.
    fn crash_copy_source(&mut self) {
        let nodes = self.cfg.nodes as u64;
        let pick = |rng: &mut Rng, not: &[NodeId]| loop {
            let n = rng.below(nodes) as NodeId;
            if !not.contains(&n) {
                break n;
            }
        };
        let away = pick(&mut self.rng, &[]);
        let origin = pick(&mut self.rng, &[away]);
        let source = pick(&mut self.rng, &[away, origin]);
        self.crash_away(&[away]);
        let cut = |net: &SimNet<DdpNode, DdpFactory>, on| {
            for o in (0..self.cfg.nodes).filter(|&o| o != origin && o != source) {
                net.partition(origin, o, on);
            }
        };
        cut(&self.net, true);
        self.net.run_for(self.rng.range_inclusive(2_000, 20_000));
        self.net.crash(origin);
        self.rec.borrow_mut().steady[origin as usize] = false;
        cut(&self.net, false);
        let members = (0..self.cfg.nodes).filter(|&n| n != origin).collect();
        let c = self.config(members);
        self.net.restart(away, &Config::new(0, c.members.clone()));
        self.net.announce(&c);
        let copied = |net: &SimNet<DdpNode, DdpFactory>| {
            net.with_node(away, |p| p.is_some_and(|p| p.is_ready()))
        };
        self.net
            .run_while(self.net.now_ns() + 50_000, |net| !copied(net));
        self.crash_away(&[origin, source]);
        self.rejoin(&[origin, source]);
    }

    /// TL2: a second node crashes during the first one's absence.
    fn crash_two(&mut self) {
        let nodes = self.cfg.nodes as u64;
        let a = self.rng.below(nodes) as NodeId;
        let b = (a + 1 + self.rng.below(nodes - 1) as NodeId) % nodes as NodeId;
        self.crash_away(&[a]);
        self.crash_away(&[a, b]);
        self.rejoin(&[a, b]);
    }

    /// F1: every node crashes at once, restarts from NVM and reconciles.
    /// Returns how many operations had been invoked before the crash.
    /// F1: every node crashes and restarts from its NVM; `late` (if any)
    /// restarts outside the configuration and is added back once the
    /// others have recovered and served a while.
    fn crash_all(&mut self, late: Option<NodeId>) -> usize {
        self.net.stop_clients();
        self.net.crash_all();
        self.mark_durable_commits(late);
        let before = self.rec.borrow().ops.len();
        self.rec
            .borrow_mut()
            .steady
            .iter_mut()
            .for_each(|s| *s = false);
        self.check_closed_nvms();
        // A new causal era: the ids sessions hold died with the volatile state.
        self.rec
            .borrow_mut()
            .past
            .iter_mut()
            .for_each(|p| *p = Past::default());
        self.net.run_for(10_000);
        let members: Vec<NodeId> = (0..self.cfg.nodes).filter(|&n| Some(n) != late).collect();
        let c = self.config(members.clone());
        for n in 0..self.cfg.nodes {
            self.net.restart(n, &c);
        }
        self.net.announce(&c);
        let settled = self.net.run_while(LIMIT_NS, |net| {
            !(members.iter()).all(|&n| net.with_node(n, |p| p.is_some_and(|p| p.is_settled())))
        });
        if !settled {
            self.report
                .violations
                .push("G6: the cluster did not recover from the whole-cluster crash".into());
        }
        let recovered = self
            .net
            .with_node(members[0], |p| p.expect("up").snapshot());
        self.check_recovered(&recovered, late);
        self.net.start_clients();
        if late.is_some() {
            self.net.run_for(50_000);
            let all = self.config((0..self.cfg.nodes).collect());
            self.net.announce(&all);
        }
        before
    }
}

impl Run {
    /// After F1: what must survive did, what did not is counted (S-2, RP-2, SC-2, SC-3).
    /// `late`: the node the recovery went without (`--crash all-but-one`).
    fn check_recovered(
        &mut self,
        recovered: &BTreeMap<Key, (Ts, Option<Value>)>,
        late: Option<NodeId>,
    ) {
        let m = self.cfg.model;
        let (c, p) = (m.c, m.p);
        let trans = c == Consistency::Trans;
        // Trans: "acked" writes are those of completed transactions (T-3).
        let must_keep_acked = p == Persistency::Strict
            || (matches!(c, Consistency::Lin | Consistency::Trans) && p == Persistency::Synch);
        // The UPD family's reads do not wait under Strict, and Eventual-Synch
        // reads may return the session's own unpersisted write (docs/DDP.md open point 5).
        let must_keep_read = match m.rules().upd {
            None => matches!(
                p,
                Persistency::Strict | Persistency::Re | Persistency::Synch
            ),
            Some(_) => {
                p == Persistency::Re || (c == Consistency::Causal && p == Persistency::Synch)
            }
        };
        let at = |k: &Key| recovered.get(k).map_or(Ts::ZERO, |v| v.0);
        let rec = self.rec.borrow();
        let mut v = Vec::new();
        for (k, (_, value)) in recovered {
            if let Some(x) = value {
                if rec.writes.get(x).is_none_or(|w| w.0 != *k) {
                    v.push(format!(
                        "G2: key {k} recovered value {x}, which no write wrote"
                    ));
                }
            }
        }
        let lost: Vec<_> = rec.acked.iter().filter(|(k, ts)| at(k) < *ts).collect();
        // The UPD family's reads wait for the persist at the node that
        // serves them only (docs/DDP.md open point 8): a version read at the
        // node the recovery went without may be gone with it.
        let local_reads = m.rules().upd.is_some();
        let gone: Vec<_> = (rec.reads.iter())
            .filter(|&&(k, ts, _)| at(&k) < ts)
            .collect();
        let vanished: Vec<_> = (gone.iter())
            .filter(|&&&(_, _, n)| !(local_reads && Some(n) == late))
            .map(|&&(k, ts, _)| (k, ts))
            .collect();
        self.report.lost_acked_writes = lost.len() as u64;
        self.report.vanished_reads = gone.len() as u64;
        if let (true, Some((k, ts))) = (must_keep_acked, lost.first()) {
            let what = if trans {
                "T-3: writes of completed transactions"
            } else {
                "S-2: acknowledged writes"
            };
            v.push(format!(
                "{what}: {} lost in the crash, e.g. key {k} {ts:?} (recovered {:?})",
                lost.len(),
                at(k)
            ));
        }
        if let (true, Some((k, ts))) = (must_keep_read, vanished.first()) {
            v.push(format!("RP-2: {} versions that reads returned vanished in the crash, e.g. key {k} {ts:?} (recovered {:?})", vanished.len(), at(k)));
        }
        if p == Persistency::Scope {
            v.extend(scope_violations(&rec, recovered));
        }
        if trans {
            v.extend(trans::tx_recovery_violations(&rec, recovered));
        }
        drop(rec);
        self.report.violations.extend(v);
    }

    /// Let the clients finish, quiesce, and run the end-of-run checks.
    fn finish(&mut self, crash_at: Option<usize>) {
        let done = self.net.run_while(LIMIT_NS, |net| !net.clients_done());
        if !done {
            self.report.violations.push(format!(
                "G6: {} operations still outstanding after {} ms simulated",
                self.net.outstanding(),
                LIMIT_NS / 1_000_000
            ));
        }
        let nodes = self.cfg.nodes;
        let until = self.net.now_ns() + 10_000_000;
        self.net.run_while(until, |net| {
            !(0..nodes).all(|n| net.with_node(n, |p| p.is_none_or(|p| p.is_settled())))
        });
        self.check_settled();
        let traced: Vec<String> = self
            .rec
            .borrow()
            .violations
            .iter()
            .take(20)
            .cloned()
            .collect();
        self.report.violations.splice(0..0, traced);
        self.check_convergence();
        if self.cfg.heal.is_some() {
            self.check_heal();
        }
        self.check_history(crash_at);
        let rec = self.rec.borrow();
        self.report.completed = rec.ops.iter().filter(|o| o.complete_ns.is_some()).count() as u64;
        (
            self.report.tx_committed,
            self.report.tx_aborted,
            self.report.tx_unanswered_commits,
        ) = rec.txs.counts();
        self.report.tx_unknown = rec.txs.unknown;
        self.report.pasts_lost = rec.pasts_lost;
        self.report.stats = self.net.stats();
        self.report.sim_ns = self.net.now_ns();
    }

    /// HEAL after quiescence (C9, docs/HEAL.md): every recovery ended and every
    /// `MissedUpdates` is empty again; count how recoveries ended.
    fn check_heal(&mut self) {
        for n in 0..self.cfg.nodes {
            let state = self.net.with_node(n, |p| {
                p.and_then(|p| {
                    p.heal().map(|h| {
                        (
                            h.rr.as_ref().map(|r| r.phase),
                            h.missed.len(),
                            h.missed.absent.clone(),
                            h.last.clone(),
                        )
                    })
                })
            });
            let Some((recovering, missed, absent, last)) = state else {
                continue;
            };
            if let Some(phase) = recovering {
                self.report.violations.push(format!(
                    "C10: node {n} never finished its recovery (stuck in {phase:?})"
                ));
            }
            if missed > 0 || !absent.is_empty() {
                self.report.violations.push(format!("C9: after every recovery node {n} still holds {missed} missed updates (waiting for {absent:?})"));
            }
            match last {
                Some(t) if t.full_copy => self.report.heal_fallbacks += 1,
                Some(t) => {
                    self.report.heal_recoveries += 1;
                    self.report.heal_rounds += u64::from(t.rounds);
                }
                None => {}
            }
        }
    }

    /// After quiescence every live node is settled: nothing buffered,
    /// waiting or unvalidated, and (UPD family) its log of updates not yet
    /// applied everywhere is empty, so anti-entropy has stopped resending.
    fn check_settled(&mut self) {
        for n in 0..self.cfg.nodes {
            let why = self.net.with_node(n, |p| {
                p.filter(|p| !p.is_settled()).map(|p| p.unsettled_why())
            });
            if let Some(why) = why {
                self.report.violations.push(format!(
                    "G6: node {n} not settled 10 ms after quiescence: {why}"
                ));
            }
        }
    }

    /// G6/G4 after quiescence: every live node holds the same versions.
    fn check_convergence(&mut self) {
        let snaps: Vec<_> = (0..self.cfg.nodes)
            .filter_map(|n| self.net.with_node(n, |p| p.map(|p| (n, p.snapshot()))))
            .collect();
        for (n, s) in &snaps[1..] {
            if let Some((k, a)) = snaps[0].1.iter().find(|(k, a)| s.get(k) != Some(a)) {
                self.report.violations.push(format!(
                    "G6: after quiescence node {} has key {k} at {a:?} but node {n} at {:?}",
                    snaps[0].0,
                    s.get(k)
                ));
                return;
            }
        }
    }

    /// Linearizability (Lin), or R3 (RE: each write ends at its VAL); for
    /// the UPD family no thin air, and session order under Causal (C1').
    fn check_history(&mut self, crash_at: Option<usize>) {
        let m = self.cfg.model;
        if m.rules().upd.is_some() {
            return self.check_upd_history(crash_at);
        }
        if m.c == Consistency::Trans {
            return self.check_tx_history();
        }
        let across_f1 =
            matches!(m.p, Persistency::Strict | Persistency::Synch) && m.c == Consistency::Lin;
        let rec = self.rec.borrow();
        let upto = match crash_at {
            Some(n) if !across_f1 => n,
            _ => rec.ops.len(),
        };
        let mut ops: Vec<HistOp> = rec.ops[..upto].to_vec();
        if m.c == Consistency::Re {
            for o in ops.iter_mut() {
                if let OpKind::Write { key, value } = o.kind {
                    let ts = rec.writes.get(&value).and_then(|w| w.1);
                    o.complete_ns = ts
                        .and_then(|ts| rec.val_time.get(&(key, ts)).copied())
                        .or(o.complete_ns.filter(|_| false));
                }
            }
        }
        drop(rec);
        if let Err(e) = tandem_check::check_linearizable(&ops) {
            let what = if m.c == Consistency::Re {
                "R3 (writes ending at their VAL)"
            } else {
                "linearizability"
            };
            self.report.violations.push(format!("{what}: {e}"));
        }
    }
}

/// SC-2 (every completed scope survives in full, or superseded) and SC-3
/// (no scope survives in part).
fn scope_violations(rec: &Rec, recovered: &BTreeMap<Key, (Ts, Option<Value>)>) -> Vec<String> {
    let at = |k: &Key| recovered.get(k).map_or(Ts::ZERO, |v| v.0);
    let mut by_scope: BTreeMap<ScopeId, Vec<(Key, Ts, Value)>> = BTreeMap::new();
    for (&value, &(k, ts, scope)) in &rec.writes {
        if let (Some(ts), true) = (ts, rec.in_scope(value)) {
            by_scope.entry(scope).or_default().push((k, ts, value));
        }
    }
    let mut v = Vec::new();
    for scope in &rec.scopes_done {
        if let Some((k, ts, _)) = by_scope
            .get(scope)
            .into_iter()
            .flatten()
            .find(|(k, ts, _)| at(k) < *ts)
        {
            v.push(format!(
                "SC-2: completed scope {scope:?} lost its write to key {k} {ts:?} (recovered {:?})",
                at(k)
            ));
        }
    }
    for (scope, writes) in &by_scope {
        let present = writes
            .iter()
            .any(|(k, _, value)| recovered.get(k).and_then(|r| r.1) == Some(*value));
        if let Some((k, ts, _)) = writes.iter().find(|(k, ts, _)| present && at(k) < *ts) {
            v.push(format!("SC-3: scope {scope:?} survived in part: its write to key {k} {ts:?} is missing (recovered {:?})", at(k)));
        }
    }
    v
}
