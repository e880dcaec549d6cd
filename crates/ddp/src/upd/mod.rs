//! The UPD family: Causal and Eventual consistency with the five
//! persistency models (DDP §5.2–5.3, Figs. 2(e)–(h) and 3(c)–(d); the
//! other models as docs/DDP.md describes them; docs/DESIGN.md §7.2). This
//! file is the client side
//! (reads, writes, operations that wait); `upd/apply.rs` receives, applies
//! and persists updates, `upd/sync.rs` keeps replicas in step
//! (anti-entropy) and catches a restarted node up.
//!
//! A write is applied at its coordinator, answered (Strict: after every
//! ACK_p and its own persist) and sent as an UPD carrying its id, its
//! Lamport timestamp (last writer wins, so replicas converge) and, under
//! Causal consistency, its cauhist. Decisions on the open points the paper
//! leaves (numbered as in docs/DDP.md, "Open points"):
//!
//! - **5, Synch reads.** Causal-Synch: the latest *persisted* version, once
//!   the session's causal past is persisted here. So read-your-writes and
//!   monotonic reads hold and reads return only persisted versions (C3): a
//!   read right after the session's own write waits for its persist.
//!   Eventual-Synch: the latest persisted version, or the session's own
//!   newer write to the key at this node (read-your-writes without waiting,
//!   which is why such a read can vanish in a crash, DDP Table 4).
//! - **6, cauhist.** A [`Vector`]: one sequence number per origin (a node
//!   incarnation), meaning all of that origin's updates up to it; it
//!   over-approximates the session's reads and writes. The client carries
//!   its vector in each operation and merges the id of every reply, so a
//!   session can move to another node: its operations wait there until the
//!   node has applied (Synch reads: persisted) that much.
//! - **7, buffering.** A follower applies an origin's updates in order, each
//!   once its cauhist is *persisted* here (Strict, Synch, RE-p, §8.1.2) or
//!   *applied* here (Scope, Eventual-p). The coordinator applies its own
//!   write at once (the session's past is applied here), but under Synch and
//!   RE-p issues its persist only once the write's cauhist is persisted
//!   here, so every node's NVM stays causally closed at every instant (C2).
//! - **8, RE-p.** Local, as the paper's §5.3 protocol: a read waits until the
//!   latest visible version of the key is persisted at this node.
//! - **12, Eventual.** Last writer wins by timestamp. UPDs are sent lazily:
//!   queued and broadcast as one batch per housekeeping tick (10 µs in
//!   simulation), or at once when [`BATCH`] are queued; eagerly under Strict,
//!   whose writes wait for them; `Persist(s)` flushes the queue first.
//! - **22, Causal-Scope.** As §6.1.2 (Table 4 "Rd Opt"): reads and writes do
//!   not stall; only `Persist(s)` waits, until the scope is durable at every
//!   replica. Scopes survive all or nothing (SC-2, SC-3), but the persisted
//!   state need not be causally closed: a completed scope may have read
//!   from a scope that never completed.
//! - **23, monotonic reads.** Per session (with read-your-writes), across
//!   nodes thanks to the session's vector; not system-wide.
//!
//! Links drop and duplicate messages, which the paper does not consider:
//! every node keeps the updates it applied until every member is known to
//! have applied them, and nodes exchange their applied vectors so missing
//! updates are sent again (by their origin, or by anyone if it is slow or
//! gone).

mod apply;
mod lost;
pub(crate) mod state;
mod sync;
pub mod vector;

use crate::model::{UpdRead, UpdRules};
use crate::node::{DdpNode, Out};
use crate::types::{Key, Op, Record, Reply, ScopeId, Ts, Upd, Version};
use crate::upd::state::Seen;
use crate::upd::state::StrictWrite;
use crate::upd::state::BATCH;
use crate::upd::vector::{UpdId, Vector};
use std::collections::BTreeSet;
use tandem_net::{Command, NodeId, SessionId};

impl DdpNode {
    pub(crate) fn upd_rules(&self) -> UpdRules {
        self.rules.upd.expect("a UPD-family model")
    }

    pub(crate) fn upd_client(&mut self, session: SessionId, req: u64, op: Op, out: &mut Out) {
        if self.answer_if_past_lost(session, req, &op, out) {
            return;
        }
        if !self.upd_try(session, req, &op, out) {
            self.upd.waiting.push_back((session, req, op));
        }
    }

    /// Serve `op` if its gates hold; false: it waits.
    fn upd_try(&mut self, session: SessionId, req: u64, op: &Op, out: &mut Out) -> bool {
        match op {
            Op::Read { key, after, .. } => self.upd_read(session, req, *key, after, out),
            Op::Write { after, .. }
                if !self.upd.incarnation_durable || !self.upd.applied.covers(after) =>
            {
                self.persist_incarnation(out);
                false
            }
            Op::Write {
                key,
                value,
                scope,
                after,
                ..
            } => {
                self.upd_write(
                    session,
                    req,
                    Version {
                        key: *key,
                        ts: Ts::ZERO,
                        value: *value,
                    },
                    *scope,
                    after.clone(),
                    out,
                );
                true
            }
            Op::Persist { scope, writes } => {
                self.flush_outbox(out);
                self.persist_scope(session, req, *scope, *writes, out);
                true
            }
            Op::Begin { .. } | Op::End { .. } => unreachable!("answered by step_client"),
        }
    }

    /// Persist this life's incarnation once (writes wait for it).
    fn persist_incarnation(&mut self, out: &mut Out) {
        if self.upd.incarnation_durable || self.upd.incarnation_issued {
            return;
        }
        self.upd.incarnation_issued = true;
        let token = self.token(crate::node::Wait::Incarnation);
        out.push(Command::Persist {
            token,
            record: Record::Incarnation(self.upd.origin.since),
        });
    }

    /// Retry the waiting operations until none more can go.
    pub(crate) fn retry_waiting(&mut self, out: &mut Out) {
        loop {
            let waiting = std::mem::take(&mut self.upd.waiting);
            let before = waiting.len();
            for (session, req, op) in waiting {
                if !self.upd_try(session, req, &op, out) {
                    self.upd.waiting.push_back((session, req, op));
                }
            }
            if self.upd.waiting.len() == before {
                return;
            }
        }
    }

    /// A read: wait until the session's causal past is here (persisted, for
    /// Synch reads), then return what the model's read rule says.
    fn upd_read(
        &mut self,
        session: SessionId,
        req: u64,
        key: Key,
        after: &Vector,
        out: &mut Out,
    ) -> bool {
        let (rule, skip) = (self.upd_rules().read, self.bugs.read_in_invalid);
        let past_here = match rule {
            UpdRead::Persisted => self.upd.persisted_covers(after),
            _ => self.upd.applied.covers(after),
        };
        if !past_here && !skip {
            return false;
        }
        let s = self.key(key);
        let (ts, value, id) = match rule {
            UpdRead::Latest => (s.ts, s.value, s.id),
            UpdRead::LatestPersisted if s.nvm < s.ts && !skip => return false,
            UpdRead::LatestPersisted => (s.ts, s.value, s.id),
            UpdRead::Persisted => self.persisted_read(session, key),
        };
        self.assert_upd_read(key, after, ts);
        out.push(Command::Reply {
            session,
            req,
            result: Reply::Read { value, ts, id },
        });
        true
    }

    /// Synch: the newest version persisted here, or under Eventual the
    /// session's own newer write (read-your-writes, docs/DDP.md open point 5).
    fn persisted_read(&mut self, session: SessionId, key: Key) -> Seen {
        let durable = self
            .key(key)
            .durable
            .map_or((Ts::ZERO, None, None), |(ts, v, id)| (ts, Some(v), id));
        match self.upd.own.get(&(session, key)) {
            Some(&own) if own.0 > durable.0 => own,
            Some(_) => {
                self.upd.own.remove(&(session, key));
                durable
            }
            None => durable,
        }
    }

    /// A client write: apply it here, send its UPD, reply (Strict: later).
    fn upd_write(
        &mut self,
        session: SessionId,
        req: u64,
        mut v: Version,
        scope: u64,
        after: Vector,
        out: &mut Out,
    ) {
        let r = self.upd_rules();
        // Past what the NVM holds too: a node that rejoined dropped the
        // versions only its NVM held (its last life's writes that never
        // left it), and a new write at the same timestamp would be taken
        // for that one (persist skipped, read-your-writes broken).
        let newest = if self.bugs.ts_below_nvm {
            self.key(v.key).ts
        } else {
            let s = self.key(v.key);
            s.ts.max(s.nvm)
        };
        v.ts = Ts {
            version: newest.version + 1,
            node: self.me,
        };
        self.assert_new_ts(v.key, v.ts);
        self.upd.seq += 1;
        let id = UpdId {
            origin: self.upd.origin,
            seq: self.upd.seq,
        };
        let scope = self.scope_of(
            ScopeId {
                session,
                seq: scope,
            },
            v,
        );
        let u = Upd {
            id,
            v,
            deps: if r.causal { after } else { Vector::default() },
            scope,
        };
        if r.strict {
            self.persist_once(v, Some(id), out);
        }
        self.apply_upd(&u, out);
        self.send_upd(u.clone(), out);
        if r.strict {
            let w = StrictWrite {
                client: (session, req),
                upd: u,
                acks: BTreeSet::new(),
                sent_at: self.now,
            };
            self.upd.strict.insert((v.key, v.ts), w);
            self.try_strict(v.key, v.ts, out);
            return;
        }
        if r.read == UpdRead::Persisted && !r.causal {
            self.upd
                .own
                .insert((session, v.key), (v.ts, Some(v.value), Some(id)));
        }
        out.push(Command::Reply {
            session,
            req,
            result: Reply::Written {
                ts: v.ts,
                id: Some(id),
            },
        });
    }

    /// Send an UPD now (Causal, Strict) or queue it (Eventual).
    fn send_upd(&mut self, u: Upd, out: &mut Out) {
        if self.upd_rules().eager {
            out.push(Command::Broadcast {
                msg: crate::types::Msg::Upd { upds: vec![u] },
            });
            return;
        }
        self.upd.outbox.push(u);
        if self.upd.outbox.len() >= BATCH {
            self.flush_outbox(out);
        }
    }

    /// Reply to a Strict write once every member's ACK_p and the local
    /// persist are in (causal-strict, eventual-strict).
    pub(crate) fn try_strict(&mut self, key: Key, ts: Ts, out: &mut Out) {
        let Some(w) = self.upd.strict.get(&(key, ts)) else {
            return;
        };
        let local =
            self.keys.get(&key).is_some_and(|s| s.nvm >= ts) || self.bugs.val_before_persist;
        let missing = self
            .config
            .others(self.me)
            .filter(|o| !w.acks.contains(o))
            .count();
        if local && missing <= usize::from(self.bugs.reply_before_last_ack) {
            self.assert_strict_reply(key, ts, &w.acks);
            let (session, req) = w.client;
            out.push(Command::Reply {
                session,
                req,
                result: Reply::Written {
                    ts,
                    id: Some(w.upd.id),
                },
            });
            self.upd.strict.remove(&(key, ts));
        }
    }

    /// An ACK_p (a `p`-only ACK) for a Strict write this node coordinates.
    pub(crate) fn on_upd_ack(&mut self, from: NodeId, key: Key, ts: Ts, epoch: u64, out: &mut Out) {
        if epoch != self.config.epoch {
            return;
        }
        if let Some(w) = self.upd.strict.get_mut(&(key, ts)) {
            w.acks.insert(from);
            self.try_strict(key, ts, out);
        }
    }

    /// After any step: apply what the buffer allows, issue the persists
    /// that waited, serve the operations that waited.
    pub(crate) fn upd_progress(&mut self, out: &mut Out) {
        self.drain_buffer(out);
        self.release_held(out);
        if self.ready {
            self.retry_waiting(out);
        }
    }
}
