//! One DDP node: the engine shared by every model, driven by [`Rules`].
//! The INV/ACK/VAL write path lives in `inv.rs`, the UPD family in
//! `upd/mod.rs` (client side), `upd/apply.rs` (receipt, apply, persist) and
//! `upd/sync.rs` (anti-entropy, catch-up); scopes in `scope.rs`, catch-up
//! and recovery in `catchup.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use tandem_net::{Command, Config, Input, NodeId, Protocol, SessionId, Token};

use crate::fast_hash::FastMap;
use crate::model::{Gate, Model, PersistIssue, Rules};
use crate::trans::state::{TransState, NOT_MEMBER};
use crate::types::{Key, Msg, Op, Record, Reply, ScopeId, Ts, TxId, Value, Version};
use crate::upd::state::{CopyIn, UpdState};
use crate::upd::vector::UpdId;

/// Timers of the engine (host nanoseconds).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Period of the housekeeping tick.
    pub tick_ns: u64,
    /// A coordinator re-sends an INV (or `[PERSIST]s`) not acknowledged for this long.
    pub retry_ns: u64,
    /// A node replays a key that stayed invalid this long (its VAL was lost
    /// or its coordinator died), with the same timestamp (Hermes).
    pub replay_ns: u64,
    /// Eventual persistency writes dirty keys back this often.
    pub lazy_ns: u64,
    /// Transactional consistency: a coordinator squashes an open
    /// transaction whose client sent nothing for this long (its session
    /// vanished or moved), so it cannot hold its keys forever.
    pub idle_ns: u64,
    /// Transactional consistency: a node forgets a decision or refusal
    /// this long after learning it (no message about the transaction is
    /// still in flight by then), and a member squashes an unprepared
    /// transaction it heard nothing about for this long.
    pub forget_ns: u64,
    /// A catch-up request (full copy, HEAL's `CatchUp_req`) is resent after
    /// this long, then twice as long each time: building and applying a
    /// large answer takes a while, and every request makes the source build
    /// it again.
    pub bulk_ns: u64,
    /// Check the engine's invariants in its handlers (`invariants.rs`):
    /// a broken one panics with the invariant's name. On by default, in
    /// simulation and over TCP alike; off only where a test must show that
    /// the checkers (`simcheck`, `explore`) catch a mutant on their own.
    pub assertions: bool,
}

impl Params {
    /// For the simulator's microsecond-scale network.
    pub const SIM: Params = Params {
        tick_ns: 10_000,
        retry_ns: 40_000,
        replay_ns: 100_000,
        lazy_ns: 20_000,
        idle_ns: 2_000_000,
        forget_ns: 10_000_000,
        bulk_ns: 1_000_000,
        assertions: true,
    };
    /// For processes over TCP on one machine.
    pub const TCP: Params = Params {
        tick_ns: 2_000_000,
        retry_ns: 20_000_000,
        replay_ns: 50_000_000,
        lazy_ns: 5_000_000,
        idle_ns: 200_000_000,
        forget_ns: 2_000_000_000,
        bulk_ns: 2_000_000_000,
        assertions: true,
    };
}

/// Test-only protocol bugs, each breaking one rule (the checkers must catch them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    /// The coordinator replies once all but one ACK are in.
    pub reply_before_last_ack: bool,
    /// VAL (and ACK) that certify persistence go out before the local persist.
    pub val_before_persist: bool,
    /// Reads are served while the key is invalid.
    pub read_in_invalid: bool,
    /// `[ACK_p]s` is sent before the scope's record is persisted.
    pub early_scope_ack: bool,
    /// Causal: a follower applies an UPD on arrival, before its cauhist.
    pub causal_early_apply: bool,
    /// Trans: no conflict detection or validation at all.
    pub skip_conflict_check: bool,
    /// Trans (Strict, Synch): End commits without persisting the decision.
    pub commit_before_persist: bool,
    /// HEAL: `MissedUpdates` is dropped when the away node rejoins, before
    /// its recovery has read it.
    pub heal_trim_early: bool,
    /// HEAL: the Buddy marks every Partially_persisted entry committed.
    pub heal_no_ts_compare: bool,
    /// HEAL: the recovering node goes online before it applied the answer.
    pub heal_online_early: bool,
    /// HEAL: no ShadowReplica: members leave a recovering node out of their
    /// writes until its `Recov_end`, and it takes the Buddy's answer as complete.
    pub heal_no_shadow: bool,
    /// HEAL: the Buddy ships only its buffer, not the versions it holds
    /// unvalidated (O-1 in docs/HEAL.md: a VAL that reaches it after it answered).
    pub heal_no_pending: bool,
    /// UPD family: a node that catches up by a copy does not log the
    /// adopted updates some member lacked (only it may hold them now).
    pub copy_unlogged: bool,
    /// UPD family: `UpdSync` names only the applied prefix, so an update
    /// past a gap is never known applied everywhere and never leaves a log.
    pub gossip_prefix_only: bool,
    /// UPD family: a restarted node takes no new incarnation; its updates
    /// reuse the ids of its last life, which the others have applied.
    pub reuse_origin: bool,
    /// UPD family: a node removed while alive and added back keeps its
    /// applied vector when it adopts the copies' state.
    pub keep_applied: bool,
    /// Trans: End of a transaction not open here answers `Aborted` though
    /// the members that prepared it may commit it.
    pub abort_unknown_end: bool,
    /// Trans: a node removed while alive drops its transactions without
    /// answering their clients.
    pub silent_removal: bool,
    /// Trans: a node re-added does not settle the prepared transactions it
    /// kept while out (the members decided them without it).
    pub kept_unsettled: bool,
    /// Trans: a transaction its session left (the session began a later
    /// one) is squashed at once only by its own coordinator, and only if
    /// it is Active there; elsewhere it waits for the idle timeout.
    pub left_waits: bool,
    /// Trans, Strict and Synch: End answers `Committed` once the decider's
    /// own commit record landed, and members persist none (the old rule).
    pub commit_answered_early: bool,
    /// A member serves a copy asked in an epoch it has not reached.
    pub copy_in_old_epoch: bool,
    /// HEAL: a GDP declared in a configuration not installed here yet is
    /// recorded (or not) by this node's older view of who is away.
    pub heal_gdp_old_view: bool,
    /// Causal: updates that follow one lost with two crashed nodes wait
    /// forever, and so do the sessions whose past holds one.
    pub orphans_kept: bool,
    /// A write's timestamp follows the key's applied version only, not
    /// what this node's NVM holds of its last life.
    pub ts_below_nvm: bool,
    /// A node added back after a removal it never heard of (it was cut off
    /// from the manager too) keeps serving as if it had never left.
    pub unheard_removal: bool,
    /// A node catching up whose copy sources all left before answering
    /// takes its catch-up as done, without asking the members that remain.
    pub source_left_ready: bool,
    /// Trans: a member that may have missed the epoch in which a coordinator
    /// decided still refuses its transaction to a settler (the old rule).
    pub undecisive_refusal: bool,
}

/// Each bug's field and its name (`--inject-bug`), once for parsing and replay.
macro_rules! bug_names {
    ($($field:ident => $name:literal,)*) => {
        impl Bugs {
            /// In the UPD family, `reply-before-last-ack` and `val-before-persist`
            /// break Strict's ACK_p, and `read-in-invalid` lets reads skip their wait.
            /// Under Trans, `reply-before-last-ack` commits (and answers a Strict
            /// write) with one vote (ACK_p) missing, `val-before-persist` ACKs INITX
            /// and votes before persisting, and `read-in-invalid` lets reads return
            /// another transaction's uncommitted write (read-uncommitted).
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            pub fn parse(names: &[String]) -> Result<Bugs, String> {
                let mut b = Bugs::default();
                for n in names {
                    match n.as_str() {
                        $($name => b.$field = true,)*
                        other => {
                            return Err(format!(
                                "unknown DDP bug '{other}' (known: {})",
                                Bugs::NAMES.join(", ")
                            ))
                        }
                    }
                }
                Ok(b)
            }

            /// The names of the bugs switched on.
            pub fn active(&self) -> Vec<&'static str> {
                let mut on = Vec::new();
                $(if self.$field { on.push($name); })*
                on
            }
        }
    };
}

bug_names! {
    reply_before_last_ack => "reply-before-last-ack",
    val_before_persist => "val-before-persist",
    read_in_invalid => "read-in-invalid",
    early_scope_ack => "early-scope-ack",
    causal_early_apply => "causal-early-apply",
    skip_conflict_check => "skip-conflict-check",
    commit_before_persist => "commit-before-persist",
    heal_trim_early => "heal-trim-early",
    heal_no_ts_compare => "heal-no-ts-compare",
    heal_online_early => "heal-online-early",
    heal_no_shadow => "heal-no-shadow",
    heal_no_pending => "heal-no-pending",
    copy_unlogged => "copy-unlogged",
    gossip_prefix_only => "gossip-prefix-only",
    reuse_origin => "reuse-origin",
    keep_applied => "keep-applied",
    abort_unknown_end => "abort-unknown-end",
    silent_removal => "silent-removal",
    kept_unsettled => "kept-unsettled",
    left_waits => "left-waits",
    commit_answered_early => "commit-answered-early",
    copy_in_old_epoch => "copy-in-old-epoch",
    heal_gdp_old_view => "heal-gdp-old-view",
    orphans_kept => "orphans-kept",
    ts_below_nvm => "ts-below-nvm",
    unheard_removal => "unheard-removal",
    source_left_ready => "source-left-ready",
    undecisive_refusal => "undecisive-refusal",
}

/// A write this node coordinates (or replays, without a client).
#[derive(Clone, Debug)]
pub(crate) struct CoordWrite {
    pub client: Option<(SessionId, u64)>,
    pub ts: Ts,
    pub value: Value,
    pub scope: Option<ScopeId>,
    pub acks_c: BTreeSet<NodeId>,
    pub acks_p: BTreeSet<NodeId>,
    pub local_p: bool,
    pub replied: bool,
    pub c_sent: bool,
    pub p_sent: bool,
    pub sent_at: u64,
    /// Members the INV did not go to (HEAL-NoShadow: a node catching up).
    pub skip: Vec<NodeId>,
}

/// A key at one node (docs/DDP.md, "The engine").
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyState {
    pub ts: Ts,
    pub value: Option<Value>,
    /// Newest ts a VAL_c (or VAL) validated here; `val_p` likewise for persistence.
    pub val_c: Ts,
    pub val_p: Ts,
    /// Newest ts persisted here.
    pub nvm: Ts,
    pub write: Option<CoordWrite>,
    /// Reads stalled until the key validates.
    pub stalled: Vec<(SessionId, u64)>,
    /// Client operations waiting for this node's own write on the key.
    pub deferred: VecDeque<(SessionId, u64, Op)>,
    /// ACKs for persistence owed once `nvm` reaches their ts: (to, ts, epoch, c).
    pub owed: Vec<(NodeId, Ts, u64, bool)>,
    pub invalid_since: u64,
    /// UPD family: the id of the version `ts`, and the newest version
    /// persisted here that this node applied (what Synch reads return).
    pub id: Option<UpdId>,
    pub durable: Option<(Ts, Value, Option<UpdId>)>,
}

impl KeyState {
    pub fn c_ok(&self) -> bool {
        self.val_c.max(self.val_p) >= self.ts
    }
    pub fn p_ok(&self) -> bool {
        self.val_p >= self.ts
    }
    pub fn version(&self, key: Key) -> Option<Version> {
        self.value.map(|value| Version {
            key,
            ts: self.ts,
            value,
        })
    }
}

/// What a persist's landing completes.
#[derive(Clone, Debug)]
pub(crate) enum Wait {
    Key {
        key: Key,
        ts: Ts,
    },
    /// A follower's scope record; `[ACK_p]s` goes to `to`.
    Scope {
        scope: ScopeId,
        to: NodeId,
    },
    LocalScope {
        scope: ScopeId,
    },
    /// UPD family: a version (and its id) this node persists.
    Upd {
        v: Version,
        id: Option<UpdId>,
    },
    /// UPD family: this life's incarnation record.
    Incarnation,
    /// UPD family: a version adopted from a copy while catching up.
    Adopt {
        v: Version,
        id: Option<UpdId>,
    },
    /// A transaction's record; `committed`: the versions it makes durable.
    Tx {
        id: TxId,
        committed: Vec<(Key, Ts)>,
        then: Then,
    },
    /// HEAL: a version the recovering node applies from its Buddy's answer.
    HealApply {
        key: Key,
        ts: Ts,
    },
}

/// What the landing of a transaction's record completes (`trans/mod.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Then {
    /// A follower's ACK of INITX, of a Strict write (ACK_p), of an outcome (RE-p: ACK_p).
    AckInit {
        to: NodeId,
        epoch: u64,
    },
    AckWrite {
        to: NodeId,
        key: Key,
        ts: Ts,
        epoch: u64,
    },
    AckDone {
        to: NodeId,
        epoch: u64,
    },
    /// The prepared record: the votes owed, and the decider's own part.
    Prepared,
    /// The coordinator's INITX record; its Strict write.
    LocalInit,
    LocalWrite {
        key: Key,
        ts: Ts,
    },
    /// The commit record (Strict, Synch): decide.
    Decided,
    /// RE-p: the decider's committed record (VAL_p needs it).
    Delivered,
    Lazy,
}

/// A `Persist(s)` this node coordinates.
#[derive(Clone, Debug)]
pub(crate) struct ScopePersist {
    pub client: (SessionId, u64),
    pub versions: Vec<Version>,
    pub acks: BTreeSet<NodeId>,
    pub local: bool,
    pub sent_at: u64,
    /// Members it did not go to (HEAL-NoShadow: a node catching up).
    pub skip: Vec<NodeId>,
}

#[derive(Clone)]
pub struct DdpNode {
    pub(crate) me: NodeId,
    pub(crate) model: Model,
    pub(crate) rules: Rules,
    pub(crate) params: Params,
    pub(crate) bugs: Bugs,
    pub(crate) config: Config,
    pub(crate) keys: FastMap<Key, KeyState>,
    /// Keys with a write in progress here or invalid here.
    pub(crate) unsettled: BTreeSet<Key>,
    pub(crate) next_token: Token,
    pub(crate) waits: FastMap<Token, Wait>,
    /// The versions written here in each open scope.
    pub(crate) open_scopes: HashMap<ScopeId, Vec<Version>>,
    pub(crate) scope_persists: BTreeMap<ScopeId, ScopePersist>,
    /// Scopes whose record landed here (to re-ACK duplicates).
    pub(crate) scopes_done: BTreeSet<ScopeId>,
    pub(crate) dirty: BTreeSet<Key>,
    /// False after a restart until the full copy is in.
    pub(crate) ready: bool,
    pub(crate) copy_from: BTreeSet<NodeId>,
    pub(crate) copy_asked: bool,
    /// A copy came in (with `copy_from_one`: ask another member if the source leaves first).
    pub(crate) copy_got: bool,
    /// When to ask for the copy again, and the wait before that (doubling).
    pub(crate) copy_retry: (u64, u64),
    /// Copy requests of an epoch not reached yet: (from, epoch).
    pub(crate) copy_reqs: Vec<(NodeId, u64)>,
    pub(crate) copy_from_one: bool,
    pub(crate) parked: VecDeque<(SessionId, u64, Op)>,
    pub(crate) tick_armed: bool,
    pub(crate) last_lazy: u64,
    pub(crate) now: u64,
    /// The UPD family's state (unused by the INV family).
    pub(crate) upd: UpdState,
    /// Transactional consistency's state.
    pub(crate) trans: TransState,
    /// HEAL's state (None: a restarted node catches up by full copy).
    pub(crate) heal: Option<Box<crate::heal::state::Heal>>,
    /// Client reads, and those that found their key's newest version here
    /// not yet persisted everywhere (DDP §8.1's reads that "conflict with a
    /// yet-to-persist write"); the INV family only.
    pub reads: ReadCount,
}

/// Client reads of the INV family, counted where they arrive.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadCount {
    pub reads: u64,
    pub unpersisted: u64,
}

pub(crate) type Out = Vec<Command<DdpNode>>;

impl Protocol for DdpNode {
    type Msg = Msg;
    type Op = Op;
    type Reply = Reply;
    type Record = Record;

    /// Ready: not waiting for a copy (or HEAL's catch-up) after being added.
    fn caught_up(&self) -> bool {
        self.ready
    }

    fn weight(msg: &Msg) -> u64 {
        let n = match msg {
            Msg::CopyResp { versions } => versions.len(),
            Msg::UpdCopy { versions, log, .. } => versions.len() + log.len(),
            Msg::CatchUpReq { partial, .. } => partial.len(),
            Msg::CatchUpResp { resp, .. } => {
                resp.marked.len() + resp.unmarked.len() + resp.missed.len() + resp.pending.len()
            }
            Msg::RecovStartAck { inflight, .. } | Msg::ShadowStartAck { inflight, .. } => {
                inflight.len()
            }
            _ => 1,
        };
        n.max(1) as u64
    }

    fn step(&mut self, now: u64, input: Input<Self>, out: &mut Out) {
        self.now = now;
        let first = out.len();
        self.upd.applied_now.clear();
        self.arm_tick(out);
        match input {
            Input::Client { session, req, op } => self.client(session, req, op, out),
            Input::Recv { from, msg } => self.recv(from, msg, out),
            Input::PersistDone { token } => self.persisted(token, out),
            Input::Timer {
                token: crate::heal::state::SCAN_TOKEN,
            } => self.heal_scanned(out),
            Input::Timer { .. } => self.tick(out),
            Input::Config(c) => self.reconfigure(c, out),
        }
        if self.rules.upd.is_some() {
            // Whatever this step applied or persisted may release buffered
            // updates and waiting operations.
            self.upd_progress(out);
        }
        if self.rules.trans.is_some() {
            // ...and a decision may release waiting operations and votes.
            self.trans_progress(out);
            self.count_sent(out, first);
        }
    }
}

impl DdpNode {
    pub fn new(me: NodeId, model: Model, params: Params, bugs: Bugs, config: Config) -> Self {
        let since = if config.members.contains(&me) {
            config.epoch
        } else {
            NOT_MEMBER
        };
        let upd = UpdState::new(me, 0);
        DdpNode {
            me,
            model,
            rules: model.rules(),
            params,
            bugs,
            config,
            keys: FastMap::default(),
            unsettled: BTreeSet::new(),
            next_token: 1,
            waits: FastMap::default(),
            open_scopes: HashMap::new(),
            scope_persists: BTreeMap::new(),
            scopes_done: BTreeSet::new(),
            dirty: BTreeSet::new(),
            ready: true,
            copy_from: BTreeSet::new(),
            copy_asked: false,
            copy_got: false,
            copy_retry: (0, 0),
            copy_reqs: Vec::new(),
            copy_from_one: false,
            parked: VecDeque::new(),
            tick_armed: false,
            last_lazy: 0,
            now: 0,
            upd,
            trans: TransState {
                since,
                ..TransState::default()
            },
            heal: None,
            reads: ReadCount::default(),
        }
    }

    pub fn model(&self) -> Model {
        self.model
    }

    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// HEAL's state on this node (None without HEAL).
    pub fn heal(&self) -> Option<&crate::heal::state::Heal> {
        self.heal.as_deref()
    }

    /// Ready, nothing in progress, every key validated here (UPD family:
    /// every update known applied everywhere, nothing buffered or waiting).
    pub fn is_settled(&self) -> bool {
        self.ready
            && self.unsettled.is_empty()
            && self.scope_persists.is_empty()
            && self.upd.is_quiet()
            && self.trans.is_quiet()
            && self.heal_quiet()
    }

    /// Why [`Self::is_settled`] is false (for a checker's message).
    pub fn unsettled_why(&self) -> String {
        let u = &self.upd;
        let mut why = vec![format!("ready {}", self.ready)];
        let counts = [
            ("unsettled keys", self.unsettled.len()),
            ("scope persists", self.scope_persists.len()),
            ("buffered updates", u.buffer.len()),
            ("logged updates", u.log.len()),
            ("queued updates", u.outbox.len()),
            ("held persists", u.held.len()),
            ("strict writes", u.strict.len()),
            ("waiting operations", u.waiting.len()),
        ];
        why.extend(
            counts
                .iter()
                .filter(|c| c.1 > 0)
                .map(|(n, c)| format!("{c} {n}")),
        );
        if let Some((id, b)) = u.buffer.iter().next() {
            why.push(format!(
                "the first buffered, {id:?}, after {:?} of its origin here, with cauhist {:?} against {:?} applied",
                u.applied.get(id.origin),
                b.deps,
                u.applied
            ));
        }
        if !self.trans.is_quiet() {
            why.push(format!("transactions in progress: {}", self.trans.busy()));
        }
        if !self.heal_quiet() {
            why.push("HEAL in progress".into());
        }
        why.join(", ")
    }

    /// The versions this node applied in its last step, in order (UPD
    /// family, including updates last-writer-wins made no-ops): the trace
    /// the causal checks (C1) read.
    pub fn applied_now(&self) -> &[Version] {
        &self.upd.applied_now
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This node's newest version of every key (volatile state).
    pub fn snapshot(&self) -> BTreeMap<Key, (Ts, Option<Value>)> {
        self.keys
            .iter()
            .map(|(&k, s)| (k, (s.ts, s.value)))
            .collect()
    }

    /// Keys whose newest version is validated here (G4).
    pub fn valid_versions(&self) -> BTreeMap<Key, Ts> {
        self.keys
            .iter()
            .filter(|(_, s)| self.rules.read.holds(s.c_ok(), s.p_ok()))
            .map(|(&k, s)| (k, s.ts))
            .collect()
    }

    pub(crate) fn key(&mut self, key: Key) -> &mut KeyState {
        self.keys.entry(key).or_default()
    }

    pub(crate) fn token(&mut self, wait: Wait) -> Token {
        let t = self.next_token;
        self.next_token += 1;
        self.waits.insert(t, wait);
        t
    }

    fn arm_tick(&mut self, out: &mut Out) {
        if !self.tick_armed {
            self.tick_armed = true;
            out.push(Command::SetTimer {
                token: 0,
                at_ns: self.now + self.params.tick_ns,
            });
        }
    }

    fn client(&mut self, session: SessionId, req: u64, op: Op, out: &mut Out) {
        if !self.ready {
            self.parked.push_back((session, req, op));
            return;
        }
        self.step_client(session, req, op, out);
    }

    pub(crate) fn step_client(&mut self, session: SessionId, req: u64, op: Op, out: &mut Out) {
        if let Op::Begin { .. } | Op::End { .. } = op {
            if self.rules.trans.is_none() {
                let msg = format!(
                    "{} has no transactions (Transactional consistency has)",
                    self.model
                );
                return out.push(Command::Reply {
                    session,
                    req,
                    result: Reply::Error { msg },
                });
            }
        }
        if self.rules.upd.is_some() {
            return self.upd_client(session, req, op, out);
        }
        if self.rules.trans.is_some() {
            return self.trans_client(session, req, op, out);
        }
        match op {
            Op::Read { key, .. } => {
                let unpersisted = !self.key(key).p_ok();
                self.reads.reads += 1;
                self.reads.unpersisted += u64::from(unpersisted);
                self.read(session, req, key, out)
            }
            Op::Write {
                key, value, scope, ..
            } => self.start_write(session, req, key, value, scope, out),
            Op::Persist { scope, writes } => self.persist_scope(session, req, scope, writes, out),
            Op::Begin { .. } | Op::End { .. } => unreachable!("answered above"),
        }
    }

    /// Serve a read now if the model allows it, else stall it on the key.
    pub(crate) fn read(&mut self, session: SessionId, req: u64, key: Key, out: &mut Out) {
        let (read_gate, bug) = (self.rules.read, self.bugs.read_in_invalid);
        let s = self.key(key);
        let busy = s.write.as_ref().is_some_and(|w| w.ts == s.ts);
        if bug || (!busy && read_gate.holds(s.c_ok(), s.p_ok())) {
            self.assert_read_valid(key);
            let s = &self.keys[&key];
            let result = Reply::Read {
                value: s.value,
                ts: s.ts,
                id: None,
            };
            out.push(Command::Reply {
                session,
                req,
                result,
            });
        } else {
            s.stalled.push((session, req));
        }
    }

    /// Serve the reads stalled on `key` if it is readable now.
    pub(crate) fn serve_stalled(&mut self, key: Key, out: &mut Out) {
        let stalled = std::mem::take(&mut self.key(key).stalled);
        for (session, req) in stalled {
            self.read(session, req, key, out);
        }
    }

    fn recv(&mut self, from: NodeId, msg: Msg, out: &mut Out) {
        let upd = self.rules.upd.is_some();
        // A message of the other family (a peer started with another model)
        // is dropped: its handlers assume this node's model takes it.
        if matches!(
            msg,
            Msg::Upd { .. } | Msg::UpdSync { .. } | Msg::UpdCopy { .. }
        ) && !upd
        {
            return;
        }
        match msg {
            Msg::Inv { v, epoch, .. } => self.on_inv(from, v, epoch, out),
            Msg::Ack { key, ts, epoch, .. } if upd => self.on_upd_ack(from, key, ts, epoch, out),
            Msg::Ack {
                key,
                ts,
                epoch,
                c,
                p,
            } => self.on_ack(from, key, ts, epoch, c, p, out),
            Msg::Val {
                key,
                ts,
                c,
                p,
                epoch,
            } => self.on_val(key, ts, (c, p), epoch, out),
            Msg::ScopePersist {
                scope,
                versions,
                epoch,
            } => self.on_scope_persist(from, scope, versions, epoch, out),
            Msg::ScopeAck { scope, epoch } => self.on_scope_ack(from, scope, epoch, out),
            Msg::ScopeVal { versions, epoch } => versions
                .into_iter()
                .for_each(|(key, ts)| self.reached_gdp_in(key, ts, epoch)),
            Msg::Upd { upds } => self.on_upd(upds, out),
            Msg::UpdSync {
                origin,
                applied,
                extra,
            } => {
                self.note_life(origin);
                if self.is_current(origin) {
                    self.on_upd_sync(from, applied, extra)
                }
            }
            Msg::CopyReq { epoch } => self.on_copy_req_in(from, epoch, out),
            Msg::CopyResp { versions } => self.on_copy_resp(from, versions, out),
            Msg::RecovStart { epoch } => self.on_recov_start(from, epoch, out),
            Msg::RecovStartAck {
                epoch,
                online,
                inflight,
            } => self.on_recov_start_ack(from, epoch, online, inflight, out),
            Msg::CatchUpReq {
                epoch,
                partial,
                round,
                after,
            } => self.on_catchup_req(from, epoch, partial, (round, after), out),
            Msg::CatchUpResp { epoch, resp } => self.on_catchup_resp(from, epoch, *resp, out),
            Msg::RecovEnd { epoch } => self.on_recov_end(from, epoch, out),
            Msg::RecovEndAck { epoch } => self.on_recov_end_ack(from, epoch),
            Msg::ShadowStart { epoch } => self.on_shadow_start(from, epoch, out),
            Msg::ShadowStartAck { epoch, inflight } => {
                self.on_shadow_start_ack(from, epoch, inflight, out)
            }
            Msg::UpdCopy {
                versions,
                applied,
                ready,
                log,
            } => self.on_upd_copy(
                from,
                CopyIn {
                    versions,
                    applied,
                    ready,
                    log,
                },
                out,
            ),
            _ if self.rules.trans.is_none() => {}
            // A removed node holds no transaction (it is decided without
            // it); nor does a member take one from an older epoch, which may
            // have been decided without it (senders resend in the new one).
            Msg::InitX { epoch, .. } | Msg::TxInv { epoch, .. } | Msg::EndX { epoch, .. }
                if epoch < self.config.epoch || !self.config.members.contains(&self.me) => {}
            Msg::InitX { tx, epoch } => {
                self.saw_age(&tx);
                self.on_initx(from, tx, epoch, out)
            }
            Msg::TxInv { tx, v, epoch } => self.on_txinv(from, tx, v, epoch, out),
            Msg::EndX {
                tx,
                writes,
                reads,
                epoch,
            } => self.on_endx(from, tx, writes, reads, epoch, out),
            Msg::TxAck { tx, ack, epoch } => self.on_txack(from, tx, ack, epoch, out),
            Msg::TxOutcome {
                tx,
                commit,
                writes,
                epoch,
            } => self.on_outcome(from, tx, commit, writes, epoch, out),
            Msg::TxValP { writes, .. } => self.on_valp(&writes, out),
        }
    }

    fn persisted(&mut self, token: Token, out: &mut Out) {
        match self.waits.remove(&token) {
            Some(Wait::Key { key, ts }) => self.key_persisted(key, ts, out),
            Some(Wait::Scope { scope, to }) => self.scope_record_landed(scope, Some(to), out),
            Some(Wait::LocalScope { scope }) => self.scope_record_landed(scope, None, out),
            Some(Wait::Upd { v, id }) => self.upd_landed(v, id, out),
            Some(Wait::Adopt { v, id }) => self.adopt_landed(v, id, out),
            Some(Wait::Incarnation) => self.upd.incarnation_durable = true,
            Some(Wait::Tx {
                id,
                committed,
                then,
            }) => self.tx_landed(id, committed, then, out),
            Some(Wait::HealApply { key, ts }) => self.heal_apply_landed(key, ts, out),
            None => {}
        }
    }

    /// Housekeeping: retransmit, replay, write back lazily.
    fn tick(&mut self, out: &mut Out) {
        self.tick_armed = false;
        self.arm_tick(out);
        self.retry_writes(out);
        self.retry_scopes(out);
        self.retry_copy(out);
        self.heal_tick(out);
        if self.rules.upd.is_some() {
            self.upd_tick(out);
        }
        if self.rules.trans.is_some() {
            self.trans_tick(out);
        }
        if self.rules.persist == PersistIssue::Lazy
            && self.now >= self.last_lazy + self.params.lazy_ns
        {
            self.last_lazy = self.now;
            self.write_back(out);
        }
    }

    /// Eventual persistency: persist the newest version of every dirty key.
    fn write_back(&mut self, out: &mut Out) {
        for key in std::mem::take(&mut self.dirty) {
            if let Some(v) = self.keys.get(&key).and_then(|s| s.version(key)) {
                self.persist_version(v, out);
            }
        }
    }

    pub(crate) fn persist_version(&mut self, v: Version, out: &mut Out) {
        let wait = match self.rules.upd {
            Some(_) => Wait::Upd {
                v,
                id: self
                    .keys
                    .get(&v.key)
                    .filter(|s| s.ts == v.ts)
                    .and_then(|s| s.id),
            },
            None => Wait::Key {
                key: v.key,
                ts: v.ts,
            },
        };
        let token = self.token(wait);
        out.push(Command::Persist {
            token,
            record: Record::Key(v),
        });
    }

    /// Whether the write gate `g` of the model is a persistence gate.
    pub(crate) fn tracks_p(&self) -> bool {
        self.rules.val_p
            || self.rules.combined_val
            || matches!(self.rules.reply, Gate::P | Gate::CP)
    }
}
