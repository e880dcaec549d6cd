//! The engine's invariants, asserted in its handlers (TigerBeetle-style):
//! what must hold before or after a state transition that a checker
//! (`simcheck`, `explore`; docs/DDP.md "Check labels") relies on later.
//! One helper per invariant; a broken one panics with a message that
//! starts with the invariant's name (and the check label it backs), then
//! says what broke, with the key and timestamp.
//!
//! The helpers read the node's state only, never [`crate::Bugs`]: a
//! mutant trips one because of what it did, not because it is on. Each
//! costs O(1) or O(members, or the keys of one transaction), allocates
//! nothing unless it fails (or, once per catch-up, a vector of origins),
//! and returns at once when [`crate::Params::assertions`] is off (the
//! tests that show the checkers catch each mutant on their own).
//!
//! Which mutant each one catches, and which no local assertion can:
//! `tests/assertions.rs`.

use std::collections::BTreeSet;

use tandem_net::NodeId;

use crate::model::{DepGate, Gate, UpdRead};
use crate::node::{CoordWrite, DdpNode};
use crate::trans::state::CoordTx;
use crate::types::{CatchUpResp, Key, ScopeId, Ts, TxId, Upd, Value, Version};
use crate::upd::state::CopyIn;
use crate::upd::vector::{UpdId, Vector};

/// An optional value in a failure message: its `Debug`, or "-".
struct Shown<T>(Option<T>);

impl<T: std::fmt::Debug> std::fmt::Display for Shown<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(x) => write!(f, "{x:?}"),
            None => f.write_str("-"),
        }
    }
}

/// The member a gate still waits for, in a failure message.
struct Who(Option<NodeId>);

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "node {n}"),
            None => f.write_str("no member"),
        }
    }
}

impl DdpNode {
    /// Whether the invariants are checked (`Params::assertions`).
    #[inline]
    pub(crate) fn checks(&self) -> bool {
        self.params.assertions
    }

    /// A member (but this node and `skip`) missing from `acks`.
    fn unacked(&self, acks: &BTreeSet<NodeId>, skip: &[NodeId]) -> Option<NodeId> {
        self.config
            .others(self.me)
            .find(|o| !acks.contains(o) && !skip.contains(o))
    }

    /// The newest version of `key` this node knows it persisted.
    fn nvm_of(&self, key: Key) -> Ts {
        self.keys.get(&key).map_or(Ts::ZERO, |s| s.nvm)
    }

    // ---- Every family -------------------------------------------------

    /// `new-ts` (G4, C1'): a node's new write of `key` takes a timestamp
    /// past the key's version here and past what its NVM holds (a last
    /// life's write that never left it), so no two writes share one.
    pub(crate) fn assert_new_ts(&self, key: Key, ts: Ts) {
        if !self.checks() {
            return;
        }
        let (cur, nvm) = self
            .keys
            .get(&key)
            .map_or((Ts::ZERO, Ts::ZERO), |s| (s.ts, s.nvm));
        assert!(
            ts > cur && ts > nvm,
            "new-ts: node {} writes key {key} at {ts:?}, not past its version {cur:?} and its NVM's {nvm:?}",
            self.me
        );
    }

    /// `ts-forward` (G4): a write or replay never takes a key's version
    /// back (a replay keeps it, a new write moves it on).
    pub(crate) fn assert_ts_forward(&self, key: Key, ts: Ts) {
        if !self.checks() {
            return;
        }
        let cur = self.keys.get(&key).map_or(Ts::ZERO, |s| s.ts);
        assert!(
            ts >= cur,
            "ts-forward: node {} sets key {key} back from {cur:?} to {ts:?}",
            self.me
        );
    }

    /// `ack-p-durable` (G1): an ACK_p of `key@ts` goes out only once this
    /// node's NVM holds `ts` or newer.
    pub(crate) fn assert_ack_p(&self, key: Key, ts: Ts) {
        if !self.checks() {
            return;
        }
        let nvm = self.nvm_of(key);
        assert!(
            nvm >= ts,
            "ack-p-durable (G1): node {} ACK_p's key {key} {ts:?} with only {nvm:?} persisted",
            self.me
        );
    }

    // ---- INV/ACK/VAL (Lin, RE), scopes ---------------------------------

    /// `write-certified` (G5b, G5d; through the reply S-1, R3 and
    /// linearizability): a coordinator certifies its write `w` of `key`
    /// for consistency (VAL_c, a reply gated on C) only once every member
    /// it went to ACKed applying it, and for persistence (VAL_p, a reply
    /// gated on P) only once every such member ACK_p'd it and its own NVM
    /// holds it. `what`: the VAL or reply being sent.
    pub(crate) fn assert_certified(&self, key: Key, w: &CoordWrite, gate: Gate, what: &str) {
        if !self.checks() {
            return;
        }
        let (c, p) = match gate {
            Gate::Immediate => return,
            Gate::C => (true, false),
            Gate::P => (false, true),
            Gate::CP => (true, true),
        };
        if c {
            let missing = self.unacked(&w.acks_c, &w.skip);
            assert!(
                missing.is_none(),
                "write-certified (G5b): node {} sends {what} for key {key} {:?} before node {} ACKed it",
                self.me,
                w.ts,
                Shown(missing)
            );
        }
        if p {
            let (missing, nvm) = (self.unacked(&w.acks_p, &w.skip), self.nvm_of(key));
            assert!(
                missing.is_none() && nvm >= w.ts,
                "write-certified (G5d): node {} sends {what} for key {key} {:?} with {} short of its ACK_p and {nvm:?} persisted here",
                self.me,
                w.ts,
                Who(missing)
            );
        }
    }

    /// `read-valid` (linearizability, R3, RP-1): a read is served only
    /// from a version validated as the model's read rule asks (VAL_c,
    /// VAL_p or both) that no write of this node is still changing.
    pub(crate) fn assert_read_valid(&self, key: Key) {
        if !self.checks() {
            return;
        }
        let Some(s) = self.keys.get(&key) else { return };
        let busy = s.write.as_ref().is_some_and(|w| w.ts == s.ts);
        assert!(
            !busy && self.rules.read.holds(s.c_ok(), s.p_ok()),
            "read-valid: node {} serves key {key} at {:?} validated only to c {:?} p {:?} (own write in progress: {busy})",
            self.me,
            s.ts,
            s.val_c,
            s.val_p
        );
    }

    /// `scope-ack-durable` (SC-1): a member ACKs `[PERSIST]s` only once
    /// the scope's record landed here.
    pub(crate) fn assert_scope_durable(&self, scope: ScopeId) {
        if !self.checks() {
            return;
        }
        assert!(
            self.scopes_done.contains(&scope),
            "scope-ack-durable (SC-1): node {} ACKs scope {scope:?} before its record landed",
            self.me
        );
    }

    /// `heal-shadow` (C11): without HEAL-NoShadow a recovering node is a
    /// ShadowReplica, so no write or scope persist leaves a member out.
    pub(crate) fn assert_shadow(&self, skip: &[NodeId], what: &str) {
        if !self.checks() || skip.is_empty() {
            return;
        }
        let no_shadow = self.heal.as_ref().is_some_and(|h| h.opts.no_shadow);
        assert!(
            no_shadow,
            "heal-shadow (C11): node {} sends {what} without members {skip:?} though HEAL runs with ShadowReplicas",
            self.me
        );
    }

    // ---- UPD family (Causal, Eventual) ----------------------------------

    /// `strict-reply` (S-1): a Strict write of `key@ts` replies only once
    /// every member ACK_p'd it and this node's NVM holds it.
    pub(crate) fn assert_strict_reply(&self, key: Key, ts: Ts, acks: &BTreeSet<NodeId>) {
        if !self.checks() {
            return;
        }
        let (missing, nvm) = (self.unacked(acks, &[]), self.nvm_of(key));
        assert!(
            missing.is_none() && nvm >= ts,
            "strict-reply (S-1): node {} answers its write of key {key} {ts:?} with {} short of its ACK_p and {nvm:?} persisted here",
            self.me,
            Who(missing)
        );
    }

    /// `causal-apply` (C1, C2): under Causal a node applies an update only
    /// once its cauhist is applied here (persisted here, under Strict,
    /// Synch and RE-p, for another node's), and another origin's updates
    /// in their order.
    pub(crate) fn assert_causal_apply(&self, u: &Upd) {
        if !self.checks() {
            return;
        }
        let Some(r) = self.rules.upd.filter(|r| r.causal) else {
            return;
        };
        let mine = u.id.origin == self.upd.origin;
        let next = self.upd.applied.get(u.id.origin) + 1;
        let past = match r.gate {
            DepGate::Persisted if !mine => self.upd.persisted_covers(&u.deps),
            _ => self.upd.applied.covers(&u.deps),
        };
        assert!(
            past && (mine || u.id.seq == next),
            "causal-apply (C1): node {} applies {:?} (key {} {:?}), its origin's next being {next}, with cauhist {:?} not {} here (applied {:?})",
            self.me,
            u.id,
            u.v.key,
            u.v.ts,
            u.deps,
            if r.gate == DepGate::Persisted { "persisted" } else { "applied" },
            self.upd.applied
        );
    }

    /// `upd-read` (C1', C3, RP-1'): a read is served only once the
    /// session's causal past is applied here (persisted, for Synch reads);
    /// Synch and RE-p reads return a version persisted here.
    pub(crate) fn assert_upd_read(&self, key: Key, after: &Vector, ts: Ts) {
        if !self.checks() {
            return;
        }
        let r = self.upd_rules();
        let past = match r.read {
            UpdRead::Persisted => self.upd.persisted_covers(after),
            _ => self.upd.applied.covers(after),
        };
        // Eventual-Synch returns the session's own newer write (open point 5).
        let durable = match r.read {
            UpdRead::Latest => true,
            UpdRead::Persisted => !r.causal || self.nvm_of(key) >= ts,
            UpdRead::LatestPersisted => self.nvm_of(key) >= ts,
        };
        assert!(
            past && durable,
            "upd-read (C1', RP-1'): node {} returns key {key} {ts:?} with the session's past {after:?} {} here (applied {:?}) and {:?} persisted",
            self.me,
            if past { "in" } else { "not" },
            self.upd.applied,
            self.nvm_of(key)
        );
    }

    /// `sync-extra` (G6): an `UpdSync` names every update applied here
    /// past the applied prefix, up to its cap (else an update past a gap
    /// is never known applied everywhere and never leaves a log).
    pub(crate) fn assert_sync_extra(&self, extra: &[UpdId], cap: usize) {
        if !self.checks() {
            return;
        }
        let beyond: usize = self.upd.extra.values().map(|s| s.len()).sum();
        assert!(
            extra.len() == beyond.min(cap),
            "sync-extra (G6): node {} tells {} of the {beyond} updates it applied past its prefix",
            self.me,
            extra.len()
        );
    }

    /// `copy-logged` (G6): a node that adopted copies logs every update
    /// their logs held: it may be the last node that holds one.
    pub(crate) fn assert_copy_logged(&self, used: &[CopyIn]) {
        if !self.checks() {
            return;
        }
        let lost = used
            .iter()
            .flat_map(|c| &c.log)
            .find(|u| !self.upd.log.contains_key(&u.id));
        assert!(
            lost.is_none(),
            "copy-logged (G6): node {} adopted copies but does not log {}",
            self.me,
            Shown(lost.map(|u| u.id))
        );
    }

    /// `copy-claims` (G6): a node that rejoins by the serving members'
    /// copies claims applied exactly what they applied, nothing it kept.
    pub(crate) fn assert_copy_claims(&self, used: &[CopyIn]) {
        if !self.checks() {
            return;
        }
        let mut theirs = Vector::default();
        used.iter().for_each(|c| theirs.merge(&c.applied));
        assert!(
            self.upd.applied == theirs && self.upd.extra.is_empty(),
            "copy-claims (G6): node {} rejoins claiming {:?} (and {} beyond) where its copies applied {theirs:?}",
            self.me,
            self.upd.applied,
            self.upd.extra.len()
        );
    }

    /// `copy-epoch` (C11): a member serves a copy only once it reached the
    /// epoch the copy was asked in.
    pub(crate) fn assert_copy_epoch(&self, to: NodeId, epoch: u64) {
        if !self.checks() {
            return;
        }
        assert!(
            epoch <= self.config.epoch,
            "copy-epoch (C11): node {} in epoch {} serves node {to} a copy asked in epoch {epoch}",
            self.me,
            self.config.epoch
        );
    }

    /// `rejoin-unheard` (C11): a node added back after a removal it never
    /// heard of (`missed`) does not serve until it copies, unless no other
    /// member is left to copy from.
    pub(crate) fn assert_rejoin_unheard(&self, missed: bool) {
        if !self.checks() || !missed {
            return;
        }
        assert!(
            !self.ready || self.copy_got || self.config.others(self.me).next().is_none(),
            "rejoin-unheard (C11): node {} serves in epoch {}, added back in epoch {} after a removal it never heard of, with nothing copied",
            self.me,
            self.config.epoch,
            self.config.joined_at(self.me)
        );
    }

    /// `refusal-vouches` (T-5): a node refuses a transaction to a settler
    /// only if it has been a member, its state intact, since the
    /// transaction began: only then was its vote needed in whichever epoch
    /// the coordinator decided (Strict and Synch: `decisive`).
    pub(crate) fn assert_refusal_vouches(&self, hdr: &crate::types::TxHdr) {
        if !self.checks() {
            return;
        }
        assert!(
            self.trans.since <= hdr.epoch || !self.trans_rules().durable,
            "refusal-vouches (T-5): node {} refuses {:?} (begun in epoch {}) to a settler, a member only since epoch {}",
            self.me,
            hdr.id,
            hdr.epoch,
            self.trans.since
        );
    }

    /// `copy-answered` (C11): a node that caught up by copy got at least
    /// one answer, unless no other member was left to ask.
    pub(crate) fn assert_copy_answered(&self) {
        if !self.checks() {
            return;
        }
        assert!(
            self.copy_got || self.config.others(self.me).next().is_none(),
            "copy-answered (C11): node {} takes its catch-up as done in epoch {} with no copy answered",
            self.me,
            self.config.epoch
        );
    }

    // ---- Transactions ---------------------------------------------------

    /// `tx-votes` (T-2): a transaction commits by the votes only once every
    /// member voted, and under Strict and Synch its prepared record landed
    /// here too.
    pub(crate) fn assert_votes_in(&self, id: TxId) {
        if !self.checks() {
            return;
        }
        let Some(c) = self.trans.coord.get(&id) else {
            return;
        };
        let missing = self.unacked(&c.acks, &[]);
        let here = self.trans.here.get(&id).is_some_and(|h| h.durable);
        assert!(
            missing.is_none() && (here || !self.trans_rules().durable),
            "tx-votes (T-2): node {} commits {id:?} with {} short of its vote (prepared record landed here: {here})",
            self.me,
            Who(missing)
        );
    }

    /// `tx-strict-write` (S-1): a Strict transactional write replies only
    /// once every member ACK_p'd it and its record landed here.
    pub(crate) fn assert_tx_write_durable(&self, id: TxId, key: Key) {
        if !self.checks() {
            return;
        }
        let Some(c) = self.trans.coord.get(&id) else {
            return;
        };
        let missing = self.unacked(&c.acks, &[]);
        assert!(
            missing.is_none() && c.local,
            "tx-strict-write (S-1): node {} answers {id:?}'s write of key {key} with {} short of its ACK_p (landed here: {})",
            self.me,
            Who(missing),
            c.local
        );
    }

    /// `tx-vote-durable` (G1, T-2): under Strict and Synch a member votes
    /// Prepared only once the transaction's prepared record landed here.
    pub(crate) fn assert_vote_durable(&self, id: TxId) {
        if !self.checks() || !self.trans_rules().durable {
            return;
        }
        let landed = self.trans.here.get(&id).is_some_and(|h| h.durable);
        assert!(
            landed,
            "tx-vote-durable (G1): node {} votes Prepared for {id:?} before its prepared record landed",
            self.me
        );
    }

    /// `tx-validated` (serializability): a member prepares a transaction
    /// only if the versions it read are still the installed ones here, its
    /// writes are newer than them, and no other transaction prepared here
    /// writes what it reads or writes, or reads what it writes.
    pub(crate) fn assert_validated(&self, id: TxId, writes: &[Version], reads: &[(Key, Ts)]) {
        if !self.checks() {
            return;
        }
        let stale_write = writes.iter().find(|v| self.installed(v.key).0 >= v.ts);
        let stale_read = reads.iter().find(|&&(k, ts)| self.installed(k).0 > ts);
        assert!(
            stale_write.is_none() && stale_read.is_none(),
            "tx-validated (serializability): node {} prepares {id:?} with stale write {stale_write:?} or read {stale_read:?}",
            self.me
        );
        for h in self.trans.here.values() {
            if !h.prepared || h.hdr.id == id {
                continue;
            }
            let clash = (writes.iter())
                .map(|v| v.key)
                .find(|k| h.writes.contains_key(k) || h.reads.contains_key(k))
                .or_else(|| reads.iter().map(|r| r.0).find(|k| h.writes.contains_key(k)));
            assert!(
                clash.is_none(),
                "tx-validated (serializability): node {} prepares {id:?} while {:?}, prepared here, conflicts with it on key {}",
                self.me,
                h.hdr.id,
                Shown(clash)
            );
        }
    }

    /// `tx-read-committed` (G1a, RP-1): a read outside the transaction's
    /// own writes returns the installed (committed) version of the key;
    /// under RE-p one persisted everywhere (VAL_p).
    pub(crate) fn assert_read_committed(&self, key: Key, ts: Ts, value: Option<Value>) {
        if !self.checks() {
            return;
        }
        let (installed, p_ok) = self
            .keys
            .get(&key)
            .map_or(((Ts::ZERO, None), true), |s| ((s.ts, s.value), s.p_ok()));
        assert!(
            (ts, value) == installed && (p_ok || !self.trans_rules().read_persisted),
            "tx-read-committed (G1a): node {} returns key {key} {ts:?} value {value:?}, the installed version being {installed:?} (VAL_p: {p_ok})",
            self.me
        );
    }

    /// `tx-commit-durable` (T-3): under Strict and Synch a transaction that
    /// wrote is answered committed by its own decider only once the commit
    /// record landed here.
    pub(crate) fn assert_commit_durable(&self, id: TxId, c: &CoordTx, writes: &[Version]) {
        if !self.checks() || !self.trans_rules().durable || writes.is_empty() || c.saw_commit {
            return;
        }
        assert!(
            c.commit_landed,
            "tx-commit-durable (T-3): node {} commits {id:?} ({} writes) before its commit record landed",
            self.me,
            writes.len()
        );
    }

    /// `tx-aborted-decided` (T-4): End is answered `Aborted` only for a
    /// transaction decided aborted here.
    pub(crate) fn assert_decided_aborted(&self, id: TxId) {
        if !self.checks() {
            return;
        }
        let known = self.trans.outcomes.get(&id);
        assert!(
            known == Some(&false),
            "tx-aborted-decided (T-4): node {} answers End of {id:?} Aborted, its decision here being {known:?}",
            self.me
        );
    }

    /// `tx-removed-answers` (G6): a coordinator removed from the
    /// configuration answers every client its dropped transactions held.
    pub(crate) fn assert_removed_answered(&self, held: usize, answered: usize) {
        if !self.checks() {
            return;
        }
        assert!(
            answered == held,
            "tx-removed-answers (G6): node {}, removed, drops transactions holding {held} clients and answers {answered}",
            self.me
        );
    }

    /// `tx-commit-everywhere` (T-3): under Strict and Synch, End answers
    /// `Committed` only once every member acknowledged the decision, each
    /// after persisting the commit record (`delivered`), so that any
    /// members that recover from a whole-cluster crash hold it.
    pub(crate) fn assert_commit_everywhere(&self, id: TxId, delivered: bool) {
        if !self.checks() || !self.trans_rules().durable || self.bugs.commit_before_persist {
            return;
        }
        assert!(
            delivered,
            "tx-commit-everywhere (T-3): node {} answers the commit of {id:?} before every member persisted it",
            self.me
        );
    }

    /// `tx-session-left` (G7): once a node knows transaction `id` began,
    /// it holds no earlier transaction of the same session unprepared,
    /// unless it coordinates that one and it has ended (sent ENDX).
    pub(crate) fn assert_session_left(&self, id: TxId) {
        if !self.checks() {
            return;
        }
        let ended = |t: &TxId| {
            self.trans.coord.get(t).is_some_and(|c| {
                c.settling
                    || c.phase != crate::trans::state::Phase::Active
                        && c.phase != crate::trans::state::Phase::Init
            })
        };
        let stale = self.trans.here.values().find(|h| {
            h.hdr.id.session == id.session
                && h.hdr.id.seq < id.seq
                && !h.prepared
                && !ended(&h.hdr.id)
        });
        assert!(
            stale.is_none(),
            "tx-session-left (G7): node {} knows {id:?} began and still holds {:?} of the same session unprepared",
            self.me,
            stale.map(|h| h.hdr.id)
        );
    }

    /// `tx-kept-settled` (G6): the transactions a node kept prepared through
    /// its removal are settled (a settler runs for each) once it looks at them.
    pub(crate) fn assert_kept_settled(&self, kept: &BTreeSet<TxId>) {
        if !self.checks() {
            return;
        }
        let open = kept
            .iter()
            .find(|id| self.trans.here.contains_key(id) && !self.trans.coord.contains_key(id));
        assert!(
            open.is_none(),
            "tx-kept-settled (G6): node {} keeps {}, prepared through its removal, with nobody settling it",
            self.me,
            Shown(open)
        );
    }

    // ---- HEAL --------------------------------------------------------

    /// `heal-marked` (O-7): the Buddy marks a Partially_persisted entry
    /// committed only if it holds the key at that very timestamp.
    pub(crate) fn assert_marked(&self, resp: &CatchUpResp) {
        if !self.checks() {
            return;
        }
        for &(key, t_in, _) in &resp.marked {
            let have = self.keys.get(&key).map(|s| s.ts);
            assert!(
                have == Some(t_in),
                "heal-marked (O-7): Buddy {} marks key {key} {t_in:?} committed while it holds {have:?}",
                self.me
            );
        }
    }

    /// `heal-pending` (O-1): the Buddy's answer carries every version it
    /// holds short of its GDP (a VAL may reach it after it answered).
    pub(crate) fn assert_pending(&self, resp: &CatchUpResp) {
        if !self.checks() {
            return;
        }
        let Some(h) = self.heal.as_ref() else { return };
        let held = (h.ungdp.iter())
            .filter(|k| self.keys.get(k).is_some_and(|s| s.value.is_some()))
            .count();
        assert!(
            resp.pending.len() == held,
            "heal-pending (O-1): Buddy {} ships {} of the {held} versions it holds short of their GDP",
            self.me,
            resp.pending.len()
        );
    }

    /// `heal-online` (C11): a recovering node goes online only once its
    /// Buddy's answer is applied: its Partially_persisted list resolved
    /// and every apply landed.
    pub(crate) fn assert_rr_applied(&self) {
        if !self.checks() {
            return;
        }
        let Some(rr) = self.heal.as_ref().and_then(|h| h.rr.as_ref()) else {
            return;
        };
        assert!(
            rr.phase == crate::heal::state::Phase::Applying
                && rr.applying == 0
                && rr.partial.is_empty(),
            "heal-online (C11): node {} goes online in phase {:?} with {} applies in flight and {} Partially_persisted entries unresolved",
            self.me,
            rr.phase,
            rr.applying,
            rr.partial.len()
        );
    }

    /// `heal-gdp-epoch` (O-1): a GDP a coordinator declared over
    /// configuration `epoch` enters `MissedUpdates` only once that
    /// configuration is installed here (it may leave out a node this one
    /// still counts as a member).
    pub(crate) fn assert_gdp_epoch(&self, key: Key, ts: Ts, epoch: u64) {
        if !self.checks() {
            return;
        }
        assert!(
            epoch <= self.config.epoch,
            "heal-gdp-epoch (O-1): node {} in epoch {} records key {key} {ts:?}, past its GDP in epoch {epoch}",
            self.me,
            self.config.epoch
        );
    }
}
