//! Transactional consistency with the five persistency models (DDP §2.1,
//! §5.4, Fig. 4; docs/DESIGN.md §7.2). This file
//! is the client side and the state; `trans/conflict.rs` detects conflicts
//! and squashes, `trans/commit.rs` ends, decides and delivers transactions,
//! `trans/follow.rs` is the follower side, retries and failures.
//!
//! A transaction runs at one coordinator: the node that takes its
//! `Begin`. `Begin` broadcasts INITX; each write is applied to the
//! transaction's write set, broadcast as an INV and answered at once; reads
//! return the latest *committed* version (or the transaction's own write)
//! at once; `End` broadcasts ENDX, collects one vote per member, decides,
//! answers, and delivers the decision (TxOutcome) until every member has it.
//! Decisions on what the paper leaves open (docs/DDP.md open point 9):
//!
//! - **API.** `Op::Begin { tx }`, `Op::Read`/`Op::Write` with `tx:
//!   Some(tx)`, `Op::End { tx }`; `tx` is the session's number for the
//!   transaction, so an operation names its transaction and a node that
//!   does not know it (its coordinator crashed, the session moved) answers
//!   `Reply::Aborted`. The other families answer `Begin` and `End` with
//!   `Reply::Error` and ignore `tx`.
//! - **Coordinator.** The node that took `Begin`; every operation of the
//!   transaction goes there (the session's home node).
//! - **INITX.** Registers the transaction at every member (so a member can
//!   settle it if the coordinator dies). Under Strict and Synch it persists a
//!   `Tx { phase: Begun }` record first (T-1: Init replies once it is
//!   persisted everywhere); under RE-p, Scope and Eventual-p Init waits for
//!   the volatile ACKs only (trans-re, trans-scope, trans-eventual).
//! - **INV per write.** A write is held by its transaction (at every node,
//!   invisible to reads: the "LLC" keeps it aside) until the decision, so a
//!   squash rolls back by dropping it and no read ever returns a write of an
//!   active or squashed transaction. Strict: a follower persists it in the
//!   transaction's record on receipt and ACK_p's it; the write replies after
//!   every ACK_p and its own persist (trans-strict).
//! - **ENDX lists** the transaction's final writes (one version per key)
//!   and the versions it read, instead of a count: a follower needs no
//!   buffer or FIFO, a node that missed INVs or joined since can vote, and
//!   every member can check the reads (below). Each member answers with a
//!   vote: `Prepared` (it holds every write, persisted under Strict and
//!   Synch, and will not squash the transaction), `Refused`, or the
//!   decision if it knows it.
//! - **Conflicts** (DDP §5.4: at every read and write, at the coordinator
//!   and at followers, against all reads and writes of unfinished
//!   transactions; read-read is no conflict). The coordinator sees its
//!   transactions' reads and writes, every node sees every write (INV,
//!   ENDX) and, at ENDX, the transaction's reads. A conflict with an
//!   *unprepared* transaction squashes the younger of the two (wound-wait,
//!   ages from a Lamport clock ticked at `Begin`, advanced by INITX); with a *prepared* one,
//!   the access waits for its decision (an operation), or at ENDX the
//!   older waits and the younger is squashed (wait-die), so waits run from
//!   older to younger prepared transactions and cannot deadlock. ENDX also
//!   validates: a member that installed a newer version of a key the
//!   transaction read, or one at least as new as a key it writes, refuses.
//!   Hence committed transactions serialize in commit order.
//! - **Squash, not stall**, for unprepared conflicts; the squashed
//!   transaction's coordinator decides abort, delivers it (followers drop its
//!   writes) and answers `Aborted` to the waiting or next operation.
//! - **Restart** is the client's: it runs the transaction again with a new
//!   number (its reads may see new values); the paper's "a request will not
//!   be satisfied until the transaction restarts and completes".
//! - **Commit decision.** Every member votes `Prepared` (and, Strict and
//!   Synch, the coordinator's own prepared record landed): commit. Strict
//!   and Synch then persist a `Tx { phase: Committed }` record at the
//!   decider, deliver the decision, and answer End only once every member
//!   has persisted the record too (one persist and one round trip more
//!   than the paper, the price of atomic recovery); a node installs the
//!   writes when it learns the decision. A `Refused` vote aborts. Only the coordinator decides
//!   while it is a member; if it leaves the configuration, a member that
//!   prepared the transaction settles it: it collects every member's vote,
//!   and commits if any says `Committed` or all say `Prepared`, else
//!   aborts (a member that had not prepared it refuses it then). Votes are
//!   stable, so concurrent settlers agree.
//! - **Recovery (undo/redo).** A transaction's writes are persisted as ONE
//!   record per node (like scopes): `Prepared` records are ignored at
//!   recovery (undo is free), `Committed` ones are installed whole (redo).
//!   Strict and Synch: every member's committed record is durable before
//!   End replies, so a completed transaction survives a whole-cluster
//!   crash in full (T-3), whichever members the cluster recovers with; RE-p: every node persists the committed record at once and
//!   ACK_p's it, and the decider sends VAL_p; Eventual-p: lazily; Scope:
//!   `Persist(s)` persists the writes of the session's committed
//!   transactions in scope s as one record (clients close scopes between
//!   transactions). Either way a transaction recovers all or nothing; one
//!   whose End was not answered when the crash hit may go either way.
//! - **Reads.** No stall (as the paper's ⟨Trans, Synch⟩), except behind a
//!   prepared writer of the key (a few microseconds: its decision is on the
//!   way), and under RE-p until the latest committed version is persisted
//!   everywhere (VAL_p; after a crash, the INV family's replay validates it).
//! - **Non-transactional requests.** A plain read returns the latest
//!   committed version (with the same waits); a plain write is refused with
//!   `Reply::Error` (a write must belong to a transaction).
//!
//! Bounded state (`trans/idle.rs`): every node squashes the unprepared
//! transactions of a session that began a later one (`session_left`); a
//! coordinator squashes a transaction whose client went quiet
//! (`Params::idle_ns`); decisions and refusals are
//! forgotten `Params::forget_ns` after they were learnt, and a member drops
//! an unprepared transaction it heard nothing about for as long. NVM still
//! holds a record per transaction (like a scope's), not collected.

mod commit;
mod conflict;
mod follow;
mod idle;
pub(crate) mod state;
mod stats;

use crate::model::TransRules;
use crate::node::{DdpNode, Out, Then};
use crate::trans::state::Access;
use crate::trans::state::CoordTx;
use crate::trans::state::Phase;
use crate::trans::state::TxHere;
use crate::types::{Key, Msg, Op, Reply, Ts, TxHdr, TxId, TxPhase, Value, Version};
use std::collections::BTreeSet;
use tandem_net::{Command, NodeId, SessionId};

impl DdpNode {
    pub(crate) fn trans_rules(&self) -> TransRules {
        self.rules.trans.expect("a Transactional model")
    }

    pub(crate) fn answer(out: &mut Out, session: SessionId, req: u64, result: Reply) {
        out.push(Command::Reply {
            session,
            req,
            result,
        });
    }

    pub(crate) fn trans_client(&mut self, session: SessionId, req: u64, op: Op, out: &mut Out) {
        if !self.trans_try(session, req, &op, out) {
            self.trans.stats.op_waits += 1;
            self.trans.waiting.push_back((session, req, op));
        }
    }

    /// Serve `op`, or false: it waits.
    fn trans_try(&mut self, session: SessionId, req: u64, op: &Op, out: &mut Out) -> bool {
        let id = |seq| TxId { session, seq };
        match *op {
            Op::Begin { tx } => self.tx_begin(id(tx), req, out),
            Op::Read { key, tx: None, .. } => self.plain_read(session, req, key, out),
            Op::Read {
                key, tx: Some(tx), ..
            } => self.tx_read(id(tx), req, key, out),
            Op::Write {
                key,
                value,
                scope,
                tx: Some(tx),
                ..
            } => self.tx_write(
                id(tx),
                req,
                Version {
                    key,
                    ts: Ts::ZERO,
                    value,
                },
                scope,
                out,
            ),
            Op::Write { tx: None, .. } => {
                let msg = "under Transactional consistency a write belongs to a transaction (Begin, Write with tx, End)".to_string();
                Self::answer(out, session, req, Reply::Error { msg });
                true
            }
            Op::End { tx } => self.tx_end(id(tx), req, out),
            Op::Persist { scope, writes } => {
                self.persist_scope(session, req, scope, writes, out);
                true
            }
        }
    }

    /// Retry the waiting operations and ENDX votes until none more can go.
    pub(crate) fn trans_progress(&mut self, out: &mut Out) {
        loop {
            let before = self.trans.waiting.len() + self.trans.postponed.len();
            if self.ready {
                for (session, req, op) in std::mem::take(&mut self.trans.waiting) {
                    if !self.trans_try(session, req, &op, out) {
                        self.trans.waiting.push_back((session, req, op));
                    }
                }
            }
            for e in std::mem::take(&mut self.trans.postponed) {
                self.end_request(e, out);
            }
            if self.trans.waiting.len() + self.trans.postponed.len() == before {
                return;
            }
        }
    }

    /// Its client is still there (the idle timeout starts over).
    fn touch(&mut self, id: TxId) {
        let now = self.now;
        if let Some(c) = self.trans.coord.get_mut(&id) {
            c.last_op = now;
        }
    }

    /// The transaction is open here, in its read/write phase.
    fn tx_open(&self, id: TxId) -> bool {
        self.trans
            .coord
            .get(&id)
            .is_some_and(|c| c.phase == Phase::Active && !c.settling)
    }

    /// Init Xaction: register the transaction everywhere (INITX).
    fn tx_begin(&mut self, id: TxId, req: u64, out: &mut Out) -> bool {
        self.session_left(id, out);
        self.trans.stats.begun += 1;
        let (r, now, epoch) = (self.trans_rules(), self.now, self.config.epoch);
        let hdr = TxHdr {
            id,
            coord: self.me,
            born: self.age(),
            epoch,
        };
        self.trans.here.insert(id, TxHere::new(hdr, now));
        let mut c = CoordTx::new(hdr, Phase::Init, now);
        (c.client, c.local) = (Some((id.session, req)), !r.durable);
        self.trans.coord.insert(id, c);
        if r.durable {
            self.persist_tx(id, TxPhase::Begun, Vec::new(), Then::LocalInit, out);
        }
        out.push(Command::Broadcast {
            msg: Msg::InitX { tx: hdr, epoch },
        });
        self.try_init(id, out);
        true
    }

    /// A new transaction's age: the next tick of the Lamport clock, so
    /// ages compare across nodes whose clocks do not (processes' do not).
    /// A restart is young again: keeping its age (no starvation) squashed
    /// more in the simulated bench (96% of attempts instead of 93%).
    fn age(&mut self) -> u64 {
        self.trans.clock += 1;
        self.trans.clock
    }

    /// Another node's transaction: its age advances the clock.
    pub(crate) fn saw_age(&mut self, hdr: &TxHdr) {
        self.trans.clock = self.trans.clock.max(hdr.born);
    }

    /// Begin replies once every member ACKed INITX (and it landed here).
    pub(crate) fn try_init(&mut self, id: TxId, out: &mut Out) {
        let Some(c) = self.trans.coord.get(&id) else {
            return;
        };
        if c.phase != Phase::Init || !c.local || self.missing(&c.acks) > 0 {
            return;
        }
        let c = self.trans.coord.get_mut(&id).expect("checked");
        c.phase = Phase::Active;
        if let Some((session, req)) = c.client.take() {
            Self::answer(out, session, req, Reply::Begun { tx: id.seq });
        }
    }

    /// Members of the configuration (but this node) not in `acks`.
    pub(crate) fn missing(&self, acks: &BTreeSet<NodeId>) -> usize {
        self.config
            .others(self.me)
            .filter(|o| !acks.contains(o))
            .count()
    }

    /// A read outside transactions: the latest committed version.
    fn plain_read(&mut self, session: SessionId, req: u64, key: Key, out: &mut Out) -> bool {
        if self.prepared_writer(key) && !self.bugs.read_in_invalid {
            return false;
        }
        self.serve_read(session, req, key, out)
    }

    /// Reply with the latest committed version of `key` if the model lets
    /// it be read now (RE-p: persisted everywhere).
    fn serve_read(&mut self, session: SessionId, req: u64, key: Key, out: &mut Out) -> bool {
        let (rp, bug) = (self.trans_rules().read_persisted, self.bugs.read_in_invalid);
        let (ts, value) = match self.uncommitted(key).filter(|_| bug) {
            Some(v) => (v.ts, Some(v.value)),
            None => {
                let s = self.key(key);
                if rp && !s.p_ok() {
                    return false;
                }
                (s.ts, s.value)
            }
        };
        self.assert_read_committed(key, ts, value);
        let result = Reply::Read {
            value,
            ts,
            id: None,
        };
        Self::answer(out, session, req, result);
        true
    }

    /// Test-only: another transaction's write of `key` held here.
    fn uncommitted(&self, key: Key) -> Option<Version> {
        self.trans
            .here
            .values()
            .find_map(|h| h.writes.get(&key).copied())
    }

    fn tx_read(&mut self, id: TxId, req: u64, key: Key, out: &mut Out) -> bool {
        if !self.tx_open(id) {
            return self.aborted(id, req, out);
        }
        self.touch(id);
        if let Some(v) = self
            .trans
            .here
            .get(&id)
            .and_then(|h| h.writes.get(&key))
            .copied()
        {
            Self::answer(
                out,
                id.session,
                req,
                Reply::Read {
                    value: Some(v.value),
                    ts: v.ts,
                    id: None,
                },
            );
            return true;
        }
        let access = if self.bugs.read_in_invalid {
            Access::Go
        } else {
            self.access(id, key, false, true, out)
        };
        match access {
            Access::Wait => return false,
            Access::Squashed => return self.aborted(id, req, out),
            Access::Go => {}
        }
        if !self.serve_read(id.session, req, key, out) {
            return false;
        }
        let ts = self.key(key).ts;
        self.trans
            .here
            .get_mut(&id)
            .expect("open")
            .reads
            .entry(key)
            .or_insert(ts);
        true
    }

    fn tx_write(&mut self, id: TxId, req: u64, mut v: Version, scope: u64, out: &mut Out) -> bool {
        if !self.tx_open(id) {
            return self.aborted(id, req, out);
        }
        self.touch(id);
        match self.access(id, v.key, true, true, out) {
            Access::Wait => return false,
            Access::Squashed => return self.aborted(id, req, out),
            Access::Go => {}
        }
        let base = self.key(v.key).ts;
        let h = self.trans.here.get_mut(&id).expect("open");
        let prev = h.writes.get(&v.key).map_or(base, |w| w.ts);
        v.ts = Ts {
            version: prev.version + 1,
            node: self.me,
        };
        h.writes.insert(v.key, v);
        let (hdr, epoch, strict) = (h.hdr, self.config.epoch, self.trans_rules().strict);
        let c = self.trans.coord.get_mut(&id).expect("open");
        c.scopes.insert(v.key, scope);
        out.push(Command::Broadcast {
            msg: Msg::TxInv { tx: hdr, v, epoch },
        });
        if !strict {
            Self::answer(out, id.session, req, Reply::Written { ts: v.ts, id: None });
            return true;
        }
        (c.client, c.strict, c.local, c.sent_at) = (
            Some((id.session, req)),
            Some((v.key, v.ts)),
            false,
            self.now,
        );
        c.acks.clear();
        self.persist_tx(
            id,
            TxPhase::Prepared,
            vec![v],
            Then::LocalWrite {
                key: v.key,
                ts: v.ts,
            },
            out,
        );
        true
    }

    /// Strict: the write replies once every member ACK_p'd it and it landed here.
    pub(crate) fn try_strict_write(&mut self, id: TxId, out: &mut Out) {
        let slack = usize::from(self.bugs.reply_before_last_ack);
        let Some(c) = self.trans.coord.get(&id) else {
            return;
        };
        let (Some((_, ts)), true) = (c.strict, c.local || self.bugs.val_before_persist) else {
            return;
        };
        if self.missing(&c.acks) > slack {
            return;
        }
        self.assert_tx_write_durable(id, c.strict.map_or(0, |s| s.0));
        let c = self.trans.coord.get_mut(&id).expect("checked");
        c.strict = None;
        if let Some((session, req)) = c.client.take() {
            Self::answer(out, session, req, Reply::Written { ts, id: None });
        }
    }

    /// The operation's transaction is squashed, or not open here. A read
    /// or write: the client has not sent End, so no member prepared the
    /// transaction and it cannot commit.
    fn aborted(&mut self, id: TxId, req: u64, out: &mut Out) -> bool {
        Self::answer(out, id.session, req, Reply::Aborted { tx: id.seq });
        true
    }

    /// End of a transaction not open here (its coordinator crashed or left,
    /// and the session moved): answer the decision if known (a commit
    /// under Strict and Synch only by its decider, below), wait for it if
    /// this node settles the transaction, else the outcome is unknown.
    fn end_elsewhere(&mut self, id: TxId, req: u64, out: &mut Out) -> bool {
        let tx = id.seq;
        // Strict, Synch: a commit is answered only where its record is known
        // durable at every member (its decider's delivery), not here.
        let durable = self.trans_rules().durable;
        let result = match self.trans.outcomes.get(&id) {
            Some(true) if durable => Reply::OutcomeUnknown { tx },
            Some(true) => Reply::Committed { tx },
            Some(false) => Reply::Aborted { tx },
            None => match self.trans.coord.get_mut(&id) {
                Some(c) if c.settling && c.client.is_none() => {
                    c.client = Some((id.session, req));
                    return true;
                }
                _ if self.bugs.abort_unknown_end => Reply::Aborted { tx },
                _ => Reply::OutcomeUnknown { tx },
            },
        };
        if let Reply::Aborted { .. } = result {
            self.assert_decided_aborted(id);
        }
        Self::answer(out, id.session, req, result);
        true
    }

    /// End Xaction: vote (ENDX), or commit at once a transaction that wrote nothing.
    fn tx_end(&mut self, id: TxId, req: u64, out: &mut Out) -> bool {
        if !self.tx_open(id) {
            return self.end_elsewhere(id, req, out);
        }
        let h = self.trans.here.get_mut(&id).expect("open");
        h.prepared = true;
        let (hdr, writes): (TxHdr, Vec<Version>) = (h.hdr, h.writes.values().copied().collect());
        let reads: Vec<(Key, Ts)> = h.reads.iter().map(|(&k, &t)| (k, t)).collect();
        let durable = self.trans_rules().durable;
        let c = self.trans.coord.get_mut(&id).expect("open");
        (c.client, c.phase, c.local, c.sent_at) =
            (Some((id.session, req)), Phase::Ending, !durable, self.now);
        c.acks.clear();
        if writes.is_empty() {
            self.decide(id, true, out); // its reads are protected here
            return true;
        }
        if durable {
            self.persist_tx(id, TxPhase::Prepared, writes.clone(), Then::Prepared, out);
        }
        out.push(Command::Broadcast {
            msg: Msg::EndX {
                tx: hdr,
                writes,
                reads,
                epoch: self.config.epoch,
            },
        });
        self.try_end(id, out);
        true
    }

    /// A version of `key` held by a prepared transaction here.
    pub(crate) fn prepared_writer(&self, key: Key) -> bool {
        self.trans
            .here
            .values()
            .any(|h| h.prepared && h.writes.contains_key(&key))
    }

    /// The installed (committed) value of `key` here.
    pub(crate) fn installed(&self, key: Key) -> (Ts, Option<Value>) {
        self.keys
            .get(&key)
            .map_or((Ts::ZERO, None), |s| (s.ts, s.value))
    }
}
