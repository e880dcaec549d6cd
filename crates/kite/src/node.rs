//! A Kite node: one replica of the whole key-value store plus the sessions
//! homed on it, as a sans-IO state machine on `tandem-net`
//! (Kite paper §5.2 for the state, docs/DESIGN.md §7.4).
//!
//! The plumbing lives here: quorum rounds (a message to the others, the
//! local replica answering too, done at a majority), tracked writes (done
//! when every replica acknowledged, or at the time-out once a majority
//! did, recording who missed them), retransmission and the periodic tick.
//! The protocols are in `relaxed.rs` (ES and the slow path), `sync.rs`
//! (ABD and the delinquency bits), `paxos.rs` (RMWs) and `replica.rs`
//! (what a replica does with each message).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tandem_net::{Command, Config, Input, NodeId, Protocol, SessionId, Token};
use tandem_sim::Rng;

use crate::inflight::{Acquire, Release, Rmw, SlowOp};
use crate::types::*;

/// Knobs of a node. The defaults are the paper's: a ~1 ms time-out
/// (Kite paper §7.4).
#[derive(Clone, Copy, Debug)]
pub struct KiteConfig {
    /// How long a write waits for every replica's ack before the replicas
    /// that missed it are called delinquent.
    pub timeout_ns: u64,
    /// Retransmission period of unanswered rounds and unacknowledged writes.
    pub retry_ns: u64,
    /// First Paxos back-off after a lost ballot (doubles, with jitter).
    pub backoff_ns: u64,
    pub mutant: Option<Mutant>,
    /// The node's invariant assertions (`invariants.rs`): `None`, the
    /// default, runs them unless a bug is planted (`mutant`), whose tests
    /// show that a checker catches it; `Some(on)` decides.
    pub assertions: Option<bool>,
}

impl Default for KiteConfig {
    fn default() -> Self {
        KiteConfig {
            timeout_ns: 1_000_000,
            retry_ns: 500_000,
            backoff_ns: 2_000,
            mutant: None,
            assertions: None,
        }
    }
}

/// Deliberate bugs the checkers must catch (`tests/mutants.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// A release does not wait for the session's earlier writes.
    NoReleaseBarrier,
    /// An acquire ignores being told it is delinquent.
    SkipDelinquencyCheck,
    /// An acceptor promises and accepts lower ballots.
    AcceptLowerBallot,
    /// An acquire returns without the write-back round.
    NoWriteBack,
    /// An out-of-epoch relaxed access is served locally.
    NoSlowPathRefresh,
    // Regressions of bugs a review found (tests/scenarios.rs reproduces
    // each by hand; these ask whether the seeded simulations would have).
    /// A helper's accept drops the proposer's DM-set.
    HelperDropsDm,
    /// An RMW checks its own delinquency bit only when it is issued.
    NoOwnBitAfterPropose,
    /// An RMW told "committed (yours)" completes at once.
    CompleteOnMine,
    /// A reset-bit goes to every replica.
    ResetAll,
    /// A DM-set counts as published if any earlier one named the machine,
    /// even one sent before the write was done.
    StaleCover,
}

impl Mutant {
    pub const ALL: [Mutant; 10] = [
        Mutant::NoReleaseBarrier,
        Mutant::SkipDelinquencyCheck,
        Mutant::AcceptLowerBallot,
        Mutant::NoWriteBack,
        Mutant::NoSlowPathRefresh,
        Mutant::HelperDropsDm,
        Mutant::NoOwnBitAfterPropose,
        Mutant::CompleteOnMine,
        Mutant::ResetAll,
        Mutant::StaleCover,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Mutant::NoReleaseBarrier => "no-release-barrier",
            Mutant::SkipDelinquencyCheck => "skip-delinquency-check",
            Mutant::AcceptLowerBallot => "accept-lower-ballot",
            Mutant::NoWriteBack => "no-write-back",
            Mutant::NoSlowPathRefresh => "no-slow-path-refresh",
            Mutant::HelperDropsDm => "helper-drops-dm",
            Mutant::NoOwnBitAfterPropose => "no-own-bit-after-propose",
            Mutant::CompleteOnMine => "complete-on-mine",
            Mutant::ResetAll => "reset-all",
            Mutant::StaleCover => "stale-cover",
        }
    }

    pub fn parse(s: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// One key at one replica (Kite paper §5.2; `mica_op_t` in Kite's public code).
#[derive(Clone, Debug, Default)]
pub struct KeyState {
    pub value: Value,
    pub version: Version,
    /// Key epoch: the key is in-epoch (fast path) iff it equals the
    /// machine epoch.
    pub epoch: u64,
    /// Paxos: the highest ballot promised and the value accepted in slot
    /// `last_committed + 1`.
    pub promised: Ballot,
    pub accepted: Option<(Ballot, RmwRec)>,
    pub last_committed: u32,
    pub last_rec: Option<RmwRec>,
}

/// The replica's keys: hash maps in 256 shards, each growing on its own.
/// One ordered map cost a quarter of a node's CPU in lookups over TCP; one
/// hash map, doubling past a million keys, stalled its node for tens of ms,
/// past the time-out, and sent every replica down the slow path. A shard
/// resizes a 256th of the keys.
#[derive(Debug)]
pub struct KeyStore {
    shards: Vec<tandem_net::fast_hash::FastMap<Key, KeyState>>,
}

impl Default for KeyStore {
    fn default() -> Self {
        KeyStore {
            shards: (0..256).map(|_| Default::default()).collect(),
        }
    }
}

impl KeyStore {
    /// A shard by the key's top bits after a multiply (the maps hash with Fx, a different mix).
    fn shard(k: Key) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
    }

    pub fn get(&self, k: &Key) -> Option<&KeyState> {
        self.shards[Self::shard(*k)].get(k)
    }

    pub fn get_or_default(&mut self, k: Key) -> &mut KeyState {
        self.shards[Self::shard(k)].entry(k).or_default()
    }
}

/// A delinquency bit about one remote machine (Kite paper §4): 0, 1, or T
/// with the ids of the acquires (one per remote session) it told.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Delinquency {
    #[default]
    Zero,
    One,
    T(BTreeMap<SessionId, u64>),
}

/// What a session is doing that takes more than one step.
#[derive(Debug)]
pub enum Active {
    Slow(SlowOp),
    Release(Release),
    Acquire(Acquire),
    Rmw(Box<Rmw>),
}

#[derive(Debug, Default)]
pub struct Session {
    pub req: u64,
    pub op: Option<Active>,
    /// Tracked writes (relaxed writes, releases, commits) not yet acked by
    /// every replica nor timed out: the next release waits for them.
    pub live: BTreeSet<u64>,
    /// Machines that missed one of the session's writes: the DM-set of its
    /// next release.
    pub missing: Mask,
    /// Per machine: the node's stamp when it last joined `missing`.
    pub missing_at: [u64; 32],
    pub acq_seq: u64,
    pub rmw_seq: u64,
}

/// A quorum round in flight.
#[derive(Debug)]
pub struct Round {
    pub session: SessionId,
    pub msg: Msg,
    pub replied: Mask,
    pub sent_ns: u64,
}

/// A write waiting for every replica's ack.
#[derive(Debug)]
pub struct Track {
    pub session: SessionId,
    pub msg: Msg,
    pub acked: Mask,
    /// Every replica that was not suspected when it was sent.
    pub expected: Mask,
    pub born_ns: u64,
    pub sent_ns: u64,
    /// Retransmissions so far: each waits twice as long as the one before
    /// (up to 16 retry periods), so acks that are late, not lost, on a
    /// loaded host are not answered with ever more copies.
    pub resends: u32,
    /// Tell the session when a majority has it (release, commit).
    pub notify: bool,
    /// Replicas it was not sent to (suspected at the time).
    pub skipped: Mask,
}

/// Counters of what the fast/slow path and Paxos did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct KiteStats {
    pub slow_releases: u64,
    pub slow_reads: u64,
    pub slow_writes: u64,
    pub epoch_bumps: u64,
    pub write_timeouts: u64,
    pub retransmits: u64,
    pub paxos_retries: u64,
    pub paxos_helps: u64,
    pub write_backs: u64,
}

pub const TICK: Token = 0;
const BACKOFF: Token = 1 << 62;

pub struct KiteNode {
    pub me: NodeId,
    /// The record that this replica ran was issued (`types::KiteRecord`).
    marked: bool,
    pub members: Vec<NodeId>,
    pub cfg: KiteConfig,
    pub keys: KeyStore,
    /// The machine epoch-id.
    pub epoch: u64,
    /// Delinquency bits, one per machine (its own too: docs/KITE.md).
    pub dv: Vec<Delinquency>,
    /// Exactly once: per (node, session), its last committed RMW.
    pub committed: BTreeMap<(NodeId, SessionId), (u32, RmwRec)>,
    pub sessions: BTreeMap<SessionId, Session>,
    pub rounds: BTreeMap<u64, Round>,
    pub writes: BTreeMap<u64, Track>,
    /// Replicas that missed a write's time-out: left out of broadcasts
    /// (recorded as missing at once) until they answer a ping.
    pub suspected: Mask,
    /// One local RMW per key at a time; the others queue (docs/KITE.md).
    pub rmw_queue: BTreeMap<Key, VecDeque<SessionId>>,
    pub next_id: u64,
    /// Orders "a write became done without machine m" against "a DM-set
    /// naming m reached a majority" (see [`KiteNode::dm_to_publish`]).
    pub stamp: u64,
    /// Per machine: the stamp at which the last DM-set naming it that
    /// reached a majority was sent.
    pub published: [u64; 32],
    pub tick_armed: bool,
    /// Backoff timers armed, by token: the session each one resumes. A
    /// token is a count, never the session id itself: clients choose
    /// session ids, and any 64 bits may be one.
    pub backoffs: BTreeMap<Token, SessionId>,
    next_backoff: Token,
    pub rng: Rng,
    pub stats: KiteStats,
    /// The first white-box invariant this node broke.
    pub invariant: Option<String>,
    /// Whether the invariant assertions run (`KiteConfig::assertions`).
    pub asserts: bool,
}

/// Out-commands of a step.
pub type Out = Vec<Command<KiteNode>>;

impl KiteNode {
    pub fn new(me: NodeId, config: &Config, cfg: KiteConfig) -> Self {
        let width = config.members.iter().max().map_or(1, |&m| m as usize + 1);
        KiteNode {
            me,
            marked: false,
            members: config.members.clone(),
            cfg,
            keys: KeyStore::default(),
            epoch: 0,
            dv: vec![Delinquency::Zero; width.max(me as usize + 1)],
            committed: BTreeMap::new(),
            sessions: BTreeMap::new(),
            rounds: BTreeMap::new(),
            writes: BTreeMap::new(),
            suspected: 0,
            rmw_queue: BTreeMap::new(),
            next_id: 1,
            stamp: 0,
            published: [0; 32],
            tick_armed: false,
            backoffs: BTreeMap::new(),
            next_backoff: 0,
            rng: Rng::new(0x4B17E ^ me as u64),
            stats: KiteStats::default(),
            invariant: None,
            asserts: cfg.assertions.unwrap_or(cfg.mutant.is_none()),
        }
    }

    pub fn mutant(&self, m: Mutant) -> bool {
        self.cfg.mutant == Some(m)
    }

    /// A majority of the members, the local replica included.
    pub fn quorum(&self) -> u32 {
        self.members.len() as u32 / 2 + 1
    }

    pub fn others(&self) -> Mask {
        self.members
            .iter()
            .filter(|&&m| m != self.me)
            .fold(0, |a, &m| a | bit(m))
    }

    pub fn key(&mut self, k: Key) -> &mut KeyState {
        self.keys.get_or_default(k)
    }

    pub fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn sess(&mut self, s: SessionId) -> &mut Session {
        self.sessions.entry(s).or_default()
    }

    pub fn reply(&mut self, s: SessionId, result: Reply, out: &mut Out) {
        let sess = self.sess(s);
        sess.op = None;
        let req = sess.req;
        out.push(Command::Reply {
            session: s,
            req,
            result,
        });
    }

    /// Apply a write if it is newer than what the replica holds.
    pub fn apply(&mut self, k: Key, version: Version, value: Value) {
        let ks = self.key(k);
        let before = (ks.version, ks.value);
        if version > ks.version {
            ks.version = version;
            ks.value = value;
        }
        self.check_apply(k, before, version, value);
    }

    /// Replicas a broadcast goes to: the unsuspected others, or every other
    /// one when too few of them are left to make a majority.
    fn targets(&self) -> Mask {
        let live = self.others() & !self.suspected;
        if live.count_ones() + 1 >= self.quorum() {
            live
        } else {
            self.others()
        }
    }

    pub fn send_to(&self, to: Mask, msg: &Msg, out: &mut Out) {
        for &m in self.members.iter().filter(|&&m| to & bit(m) != 0) {
            out.push(Command::Send {
                to: m,
                msg: msg.clone(),
            });
        }
    }

    /// Start a quorum round for session `s`: send `msg` to the others and
    /// let the local replica answer too.
    /// `rid` comes from [`KiteNode::fresh_id`], stored by the caller first.
    pub fn start_round(&mut self, now: u64, s: SessionId, rid: u64, msg: Msg, out: &mut Out) {
        self.send_to(self.targets(), &msg, out);
        self.rounds.insert(
            rid,
            Round {
                session: s,
                msg: msg.clone(),
                replied: 0,
                sent_ns: now,
            },
        );
        self.arm_tick(now, out);
        if let Some(Msg::Rep { rep, .. }) = self.serve(now, self.me, msg, out) {
            self.on_rep(now, self.me, rid, rep, out);
        }
    }

    /// A reply to round `rid` from `from`: counted once per replica.
    fn on_rep(&mut self, now: u64, from: NodeId, rid: u64, rep: Rep, out: &mut Out) {
        let q = self.quorum();
        let Some(round) = self.rounds.get_mut(&rid) else {
            return;
        };
        if round.replied & bit(from) != 0 {
            return;
        }
        round.replied |= bit(from);
        let (count, s) = (round.replied.count_ones(), round.session);
        if count >= q {
            self.rounds.remove(&rid);
        }
        self.on_session_rep(now, s, rid, from, rep, count >= q, out);
    }

    /// Route a round's reply to the session's operation; `done`: this reply
    /// completes a majority.
    #[allow(clippy::too_many_arguments)]
    fn on_session_rep(
        &mut self,
        now: u64,
        s: SessionId,
        rid: u64,
        from: NodeId,
        rep: Rep,
        done: bool,
        out: &mut Out,
    ) {
        let Some(op) = self.sess(s).op.take() else {
            return;
        };
        match op {
            Active::Slow(o) => self.slow_rep(now, s, o, rid, rep, done, out),
            Active::Release(r) => self.release_rep(now, s, r, rid, rep, done, out),
            Active::Acquire(a) => self.acquire_rep(now, s, a, rid, from, rep, done, out),
            Active::Rmw(r) => self.rmw_rep(now, s, r, rid, from, rep, done, out),
        }
    }

    /// Send a write every replica must acknowledge, tracked as `wid` (from
    /// [`KiteNode::fresh_id`]) for session `s`: the next release waits for
    /// it. Replicas suspected now are recorded as missing it at once.
    pub fn send_tracked(
        &mut self,
        now: u64,
        s: SessionId,
        wid: u64,
        msg: Msg,
        notify: bool,
        out: &mut Out,
    ) {
        let expected = self.others() & !self.suspected;
        let skipped = self.others() & self.suspected;
        self.send_to(self.targets(), &msg, out);
        self.sess(s).live.insert(wid);
        let track = Track {
            session: s,
            msg,
            acked: bit(self.me),
            expected,
            born_ns: now,
            sent_ns: now,
            resends: 0,
            notify,
            skipped,
        };
        self.writes.insert(wid, track);
        self.arm_tick(now, out);
        if notify && self.quorum() == 1 {
            self.on_session_rep(
                now,
                s,
                wid,
                self.me,
                Rep::Ack { delinquent: false },
                true,
                out,
            );
        }
        if expected == 0 {
            self.write_done(now, wid, out);
        }
    }

    fn on_ack(&mut self, now: u64, from: NodeId, wid: u64, out: &mut Out) {
        let q = self.quorum();
        let Some(t) = self.writes.get_mut(&wid) else {
            return;
        };
        if t.acked & bit(from) != 0 {
            return;
        }
        t.acked |= bit(from);
        if t.notify && t.acked.count_ones() == q {
            let s = t.session;
            self.on_session_rep(
                now,
                s,
                wid,
                self.me,
                Rep::Ack { delinquent: false },
                true,
                out,
            );
        }
        let t = &self.writes[&wid];
        if t.acked & t.expected == t.expected {
            self.write_done(now, wid, out);
        }
    }

    /// Every expected replica has the write: it no longer holds up a
    /// release, if a majority has it (with many replicas suspected, the
    /// expected ones may be fewer: it waits on, retransmitted to all).
    fn write_done(&mut self, now: u64, wid: u64, out: &mut Out) {
        let Some(t) = self.writes.remove(&wid) else {
            return;
        };
        if t.acked.count_ones() < self.quorum() {
            self.writes.insert(wid, t);
            return;
        }
        self.record_missing(t.session, t.skipped);
        self.unlive(now, t.session, wid, out);
    }

    fn unlive(&mut self, now: u64, s: SessionId, wid: u64, out: &mut Out) {
        let sess = self.sess(s);
        sess.live.remove(&wid);
        if sess.live.is_empty() {
            self.barrier_cleared(now, s, out);
        }
    }

    /// The session's earlier writes are all done: a waiting release or RMW
    /// may go on.
    fn barrier_cleared(&mut self, now: u64, s: SessionId, out: &mut Out) {
        match self.sess(s).op.take() {
            Some(Active::Release(r)) => self.release_advance(now, s, r, out),
            Some(Active::Rmw(r)) => self.rmw_advance(now, s, r, out),
            other => self.sess(s).op = other,
        }
    }

    pub fn arm_tick(&mut self, now: u64, out: &mut Out) {
        if !self.tick_armed {
            self.tick_armed = true;
            out.push(Command::SetTimer {
                token: TICK,
                at_ns: now + self.cfg.retry_ns / 4,
            });
        }
    }

    pub fn set_backoff(&mut self, now: u64, s: SessionId, attempt: u32, out: &mut Out) {
        let base = self.cfg.backoff_ns << attempt.min(8);
        let at_ns = now + base / 2 + self.rng.below(base + 1);
        self.next_backoff += 1;
        let token = BACKOFF | self.next_backoff;
        self.backoffs.insert(token, s);
        out.push(Command::SetTimer { token, at_ns });
    }

    /// Retransmit, time writes out, probe suspected replicas.
    fn tick(&mut self, now: u64, out: &mut Out) {
        self.tick_armed = false;
        self.retransmit_rounds(now, out);
        self.age_writes(now, out);
        if self.suspected != 0 {
            self.send_to(self.suspected, &Msg::Ping, out);
        }
        if !self.rounds.is_empty() || !self.writes.is_empty() || self.suspected != 0 {
            self.arm_tick(now, out);
        }
    }

    fn retransmit_rounds(&mut self, now: u64, out: &mut Out) {
        let targets = self.targets();
        let retry = self.cfg.retry_ns;
        let mut resend = Vec::new();
        for r in self
            .rounds
            .values_mut()
            .filter(|r| now >= r.sent_ns + retry)
        {
            r.sent_ns = now;
            resend.push((targets & !r.replied, r.msg.clone()));
        }
        for (to, msg) in resend {
            self.stats.retransmits += 1;
            self.send_to(to, &msg, out);
        }
    }

    fn age_writes(&mut self, now: u64, out: &mut Out) {
        let (q, timeout, retry, all) = (
            self.quorum(),
            self.cfg.timeout_ns,
            self.cfg.retry_ns,
            self.others(),
        );
        let mut expired = Vec::new();
        let mut resend = Vec::new();
        for (&wid, t) in self.writes.iter_mut() {
            if t.acked.count_ones() >= q && now >= t.born_ns + timeout {
                expired.push(wid);
            } else if now >= t.sent_ns + (retry << t.resends.min(4)) {
                (t.sent_ns, t.resends) = (now, t.resends + 1);
                let to = if t.acked.count_ones() >= q {
                    t.expected
                } else {
                    all
                };
                resend.push((to & !t.acked, t.msg.clone()));
            }
        }
        for (to, msg) in resend {
            self.stats.retransmits += 1;
            self.send_to(to, &msg, out);
        }
        for wid in expired {
            self.time_out(now, wid, out);
        }
    }

    /// A write a majority acknowledged, but not every replica, in time: the
    /// ones that missed it are delinquent for the session's next release.
    fn time_out(&mut self, now: u64, wid: u64, out: &mut Out) {
        let Some(t) = self.writes.remove(&wid) else {
            return;
        };
        let missed = t.expected & !t.acked;
        self.stats.write_timeouts += 1;
        self.suspected |= missed;
        self.record_missing(t.session, missed | t.skipped);
        self.unlive(now, t.session, wid, out);
    }

    /// A write of session `s` is done (at a majority) without `missed`.
    fn record_missing(&mut self, s: SessionId, missed: Mask) {
        if missed == 0 {
            return;
        }
        self.stamp += 1;
        let stamp = self.stamp;
        let sess = self.sess(s);
        sess.missing |= missed;
        for m in (0..32).filter(|m| missed & (1 << m) != 0) {
            sess.missing_at[m] = stamp;
        }
    }

    /// The DM-set session `s`'s release must publish: the machines it
    /// recorded as missing, less those a DM-set of another session of this
    /// node already brought to a majority after the write was done. Safe
    /// (docs/KITE.md): the bit such a DM-set set stays until that machine
    /// acquires, bumps its epoch and resets it, and a key it refreshes
    /// after that bump reads a majority that has the write.
    pub fn dm_to_publish(&mut self, s: SessionId) -> Mask {
        let published = self.published;
        let stale = self.mutant(Mutant::StaleCover);
        let sess = self.sess(s);
        let missing = sess.missing;
        for m in (0..32).filter(|&m| missing & (1 << m) != 0) {
            if published[m] > sess.missing_at[m] || (stale && published[m] > 0) {
                sess.missing &= !(1 << m);
            }
        }
        let left = sess.missing;
        self.check_cover(s, missing & !left);
        left
    }

    /// A DM-set sent at `stamp` reached a majority.
    pub fn dm_published(&mut self, dm: Mask, stamp: u64) {
        for m in (0..32).filter(|m| dm & (1 << m) != 0) {
            self.published[m] = self.published[m].max(stamp);
        }
    }

    /// A stamp for a DM-set about to be sent.
    pub fn dm_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }

    fn on_client(&mut self, now: u64, s: SessionId, req: u64, op: Op, out: &mut Out) {
        self.sess(s).req = req;
        match op {
            Op::Read(k) => self.relaxed_read(now, s, k, out),
            Op::Write(k, v) => self.relaxed_write(now, s, k, v, out),
            Op::Release(k, v) => self.release(now, s, k, v, out),
            Op::Acquire(k) => self.acquire(now, s, k, out),
            Op::Faa(..) | Op::Cas { .. } => self.rmw(now, s, op, out),
        }
    }

    fn on_recv(&mut self, now: u64, from: NodeId, msg: Msg, out: &mut Out) {
        self.suspected &= !bit(from);
        match msg {
            Msg::Rep { rid, rep } => self.on_rep(now, from, rid, rep, out),
            Msg::WriteAck { wid } => self.on_ack(now, from, wid, out),
            msg => {
                if let Some(reply) = self.serve(now, from, msg, out) {
                    out.push(Command::Send {
                        to: from,
                        msg: reply,
                    });
                }
            }
        }
    }

    /// White-box invariants (13 of `tandem_check::rc`): a key epoch never exceeds
    /// the machine epoch (checked where a key's epoch is set, so this is
    /// O(1) per step).
    pub fn check_invariants(&self) -> Result<(), String> {
        match &self.invariant {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Protocol for KiteNode {
    type Msg = Msg;
    type Op = Op;
    type Reply = Reply;
    type Record = crate::types::KiteRecord;

    fn step(&mut self, now: u64, input: Input<Self>, out: &mut Out) {
        if !self.marked {
            self.marked = true;
            let record = crate::types::KiteRecord::Ran;
            out.push(Command::Persist { token: 0, record });
        }
        match input {
            Input::Client { session, req, op } => self.on_client(now, session, req, op, out),
            Input::Recv { from, msg } => self.on_recv(now, from, msg, out),
            Input::Timer { token: TICK } => self.tick(now, out),
            Input::Timer { token } => {
                if let Some(s) = self.backoffs.remove(&token) {
                    self.backoff_over(now, s, out)
                }
            }
            Input::PersistDone { .. } => {}
            Input::Config(c) => self.members = c.members,
        }
    }
}
