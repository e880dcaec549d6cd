//! The commit path: logging and validation in one round, then the commit
//! writes, then the unlocks (docs/DESIGN.md §4.4 steps 2, 3 and 5).
//!
//! Every batch of a round is posted before any is awaited, so the round
//! costs one round trip whatever the number of batches; the batches in
//! flight are kept in the coordinator's `inflight` buffer and the log record
//! is encoded straight from the write set, so a commit builds no
//! intermediate collections.

use tandem_fabric::{Batch, Completion, Fabric, MemNodeId, Verb, VerbArena, VerbError, VerbOutput};

use super::{first_error, primary_of, Pending, Transaction};
use crate::config::Mode;
use crate::error::{AbortReason, TxError};
use crate::log::{begin_record, entry_len, finish_record, OpKind, HEADER_BYTES};
use crate::slot::{encode_body_into, LockWord, FLAG_LIVE, KEY_OFF, LOCK_OFF, VERSION_OFF};

/// What a batch in flight on the commit path is for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Purpose {
    /// A log record (pandora) or an undo entry (ford, traditional).
    Log,
    /// A validation read; the slot must be at this version and unlocked.
    Validate(u64),
    /// The commit writes of write entry `i` to replica memory node `.1`.
    Write(usize, MemNodeId),
}

impl Purpose {
    /// This purpose for a batch posted to memory node `m`.
    fn at(self, m: MemNodeId) -> Purpose {
        match self {
            Purpose::Write(i, _) => Purpose::Write(i, m),
            p => p,
        }
    }
}

pub(super) type Inflight<F> = Vec<(Purpose, Pending<F>)>;

/// A round's verdict: `Err(Ok(reason))` aborts, `Err(Err(e))` fails.
type Verdict = Result<(), Result<AbortReason, VerbError>>;

impl<'c, F: Fabric> Transaction<'c, F> {
    /// Commit. `Ok(())` is the commit-ack: every replica holds the new values.
    pub async fn commit(mut self) -> Result<(), TxError> {
        if self.finished {
            return Err(TxError::Finished);
        }
        let mut inflight = std::mem::take(&mut self.c.inflight);
        inflight.clear();
        // Relaxed-locks bug: validation reads go out before the locks are known held.
        if self.c.node.bugs.relaxed_locks {
            self.post_validation(&mut inflight);
        }
        let r = self.commit_rounds(&mut inflight).await;
        inflight.clear();
        self.c.inflight = inflight;
        self.give_back_sets();
        r
    }

    async fn commit_rounds(&mut self, inflight: &mut Inflight<F>) -> Result<(), TxError> {
        for i in 0..self.writes.len() {
            self.resolve_lock(i).await?;
        }
        if self.log_full {
            return Err(self.abort_with(AbortReason::LogFull).await);
        }
        if self
            .writes
            .iter()
            .any(|w| w.found_deleted && w.new_value.is_some() && !w.final_live)
        {
            // A pipelined blind write met a key deleted since it was cached.
            return Err(self.abort_with(AbortReason::StaleRead).await);
        }
        let dirty = self.choose_versions();
        // Logging (pandora) and validation share one round, after all locks are held.
        if self.c.node.mode == Mode::Pandora && dirty > 0 && !self.post_log(dirty, inflight) {
            return Err(self.abort_with(AbortReason::LogFull).await);
        }
        if !self.c.node.bugs.relaxed_locks {
            self.post_validation(inflight);
        }
        inflight.extend(self.undo_pending.drain(..).map(|p| (Purpose::Log, p)));
        match self.await_round(inflight).await {
            Ok(()) => {}
            Err(Ok(reason)) => return Err(self.abort_with(reason).await),
            Err(Err(e)) => return Err(self.fail(e).await),
        }
        self.check_before_commit_writes();
        self.post_commit_writes(inflight);
        if let Some(e) = self.await_writes(inflight).await {
            return Err(match e {
                VerbError::Unavailable => {
                    self.finished = true;
                    TxError::Unavailable
                }
                e => self.fail(e).await,
            });
        }
        self.after_commit();
        self.check_writes_landed();
        // Acknowledged; unlock in the background (the next batch on each queue
        // pair is ordered behind it). `Coordinator::take_unlocks` hands them out.
        let mut unlocks = std::mem::take(&mut self.c.unlocks_in_flight);
        unlocks.clear();
        self.release_locks(false, &mut unlocks);
        self.c.unlocks_in_flight = unlocks;
        self.c.unlock_word = self.lock_word;
        self.finished = true;
        self.c.stats.committed += 1;
        Ok(())
    }

    /// Mark the entries the commit writes and give each its new version.
    /// A locked entry that turned into a no-op (insert then delete, a key
    /// found deleted) still gets its new version in ford/traditional modes:
    /// its undo entry announced it, and recovery's "every replica has the
    /// new version" test must hold once the transaction is acknowledged.
    fn choose_versions(&mut self) -> usize {
        let mut dirty = 0;
        for i in 0..self.writes.len() {
            let w = &self.writes[i];
            let is_dirty = w.op().is_some() || (w.new_version != 0 && w.image.is_some());
            self.writes[i].dirty = is_dirty;
            if !is_dirty {
                continue;
            }
            dirty += 1;
            let w = &self.writes[i];
            if w.reclaim {
                self.writes[i].new_version = 0;
            } else if w.new_version == 0 {
                self.writes[i].new_version = self.c.next_version();
            }
        }
        dirty
    }

    /// Post this transaction's log record to each live log node. False if
    /// the record does not fit the log slot.
    fn post_log(&mut self, dirty: usize, inflight: &mut Inflight<F>) -> bool {
        self.check_locks_held("locks-before-log", "logs");
        let len = HEADER_BYTES
            + self
                .writes
                .iter()
                .filter(|w| w.dirty)
                .map(|w| {
                    entry_len(self.table(w.table).replicas[w.part as usize].len(), {
                        w.image.as_ref().map_or(0, |im| im.value.len())
                    })
                })
                .sum::<usize>();
        if len as u64 > self.c.node.layout.log_slot_bytes / 2 {
            return false;
        }
        let mut rec = self.c.arena.empty_bytes();
        rec.reserve(len);
        begin_record(&mut rec);
        for w in self.writes.iter().filter(|w| w.dirty) {
            let op = w.op();
            let op = op.expect("a pandora write that changes nothing is not dirty");
            self.encode_write_entry(&mut rec, w, op);
        }
        finish_record(&mut rec, self.c.id, dirty, self.seq);
        let addr = self.c.node.layout.log_addr(self.c.id);
        let nodes = self.c.log_nodes.clone();
        let live = self.live_mask(&nodes);
        let write = |a: &mut VerbArena, _, data| a.batch_of([Verb::write(addr, data)]);
        self.post_to_each(&nodes, live, rec, write, Purpose::Log, inflight);
        true
    }

    /// Bit r set: node `nodes[r]` is not known to be down.
    fn live_mask(&self, nodes: &[MemNodeId]) -> u64 {
        nodes
            .iter()
            .enumerate()
            .filter(|&(_, &n)| !self.c.node.memory.is_down(n))
            .fold(0, |m, (r, _)| m | 1 << r)
    }

    /// Post to each `nodes[r]` with bit r in `mask` the batch `make(r, a
    /// copy of data)`; the last one takes `data` itself.
    fn post_to_each(
        &mut self,
        nodes: &[MemNodeId],
        mask: u64,
        mut data: Vec<u8>,
        make: impl Fn(&mut VerbArena, usize, Vec<u8>) -> Batch,
        purpose: Purpose,
        inflight: &mut Inflight<F>,
    ) {
        let mut left = mask;
        while left != 0 {
            let r = left.trailing_zeros() as usize;
            left &= left - 1;
            let d = match left {
                0 => std::mem::take(&mut data),
                _ => self.c.arena.copy(&data),
            };
            let batch = make(&mut self.c.arena, r, d);
            let p = self.c.post(nodes[r], batch);
            inflight.push((purpose.at(nodes[r]), p));
        }
    }

    /// Post one validation read per slot this transaction depends on but
    /// does not hold locked: its reads (but of keys it writes: their locks
    /// checked them) and its absent keys' guards.
    pub(super) fn post_validation(&mut self, inflight: &mut Inflight<F>) {
        self.check_locks_held("locks-before-validation", "validates");
        let Transaction {
            c,
            reads,
            guards,
            writes,
            ..
        } = self;
        let node = c.node.clone();
        let held = |t, p, s| {
            writes
                .iter()
                .any(|w| w.table == t && w.part == p && w.slot == s)
        };
        let reads = reads
            .iter()
            .filter(|r| !writes.iter().any(|w| w.table == r.table && w.key == r.key))
            .map(|r| (r.table, r.part, r.slot, r.version));
        let guards = guards.iter().map(|g| (g.table, g.part, g.slot, g.version));
        for (t, part, slot, version) in reads.chain(guards) {
            if held(t, part, slot) {
                continue;
            }
            let (mem, addr) = primary_of(&node, t, part, slot);
            let p = c.post_verbs(mem, [Verb::read(addr + LOCK_OFF, 16)]);
            inflight.push((Purpose::Validate(version), p));
        }
    }

    /// Await every batch of the round (whatever fails), then judge it: a
    /// failed log or undo write first, then a read locked under another key
    /// that changed, then validation in posting order.
    async fn await_round(&mut self, inflight: &mut Inflight<F>) -> Verdict {
        let mut log_error = None;
        let mut verdict = Ok(());
        for (purpose, p) in inflight.drain(..) {
            let r = p.await;
            match purpose {
                Purpose::Log => log_error = log_error.or(first_error(&r)),
                Purpose::Validate(version) if verdict.is_ok() => {
                    verdict = self.judge_validation(&r, version);
                }
                Purpose::Validate(_) => {}
                Purpose::Write(..) => unreachable!("commit writes go out after validation"),
            }
            self.c.arena.give(r);
        }
        if let Some(e) = log_error {
            return Err(Err(e));
        }
        if self.self_locked_reads_changed() {
            return Err(Ok(AbortReason::ValidationFailed));
        }
        verdict
    }

    fn judge_validation(&self, r: &[Completion], version: u64) -> Verdict {
        if let Some(e) = first_error(r) {
            return Err(Err(e));
        }
        let Ok(VerbOutput::Read(b)) = &r[0] else {
            panic!("a validation read completes with bytes");
        };
        let lock = LockWord(u64::from_le_bytes(b[0..8].try_into().unwrap()));
        let seen = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let blocked = self.blocks(lock);
        let locked = !self.c.node.bugs.covert_locks && blocked;
        if seen != version || locked {
            return Err(Ok(AbortReason::ValidationFailed));
        }
        self.check_validated(lock, blocked, seen, version);
        Ok(())
    }

    /// Contents then version, on every live replica of every dirty entry.
    fn post_commit_writes(&mut self, inflight: &mut Inflight<F>) {
        let node = self.c.node.clone();
        for i in 0..self.writes.len() {
            if !self.writes[i].dirty {
                continue;
            }
            self.writes[i].landed = false;
            let w = &self.writes[i];
            let tl = node.layout.table(w.table);
            let image = w.image.as_ref().unwrap();
            let value = w.new_value.as_deref().unwrap_or(&image.value);
            let flags = if w.final_live { FLAG_LIVE } else { 0 };
            let mut body = self.c.arena.empty_bytes();
            encode_body_into(&mut body, w.key, flags, value, tl.value_bytes);
            let (part, slot, version) = (w.part, w.slot, w.new_version);
            let reps = &tl.replicas[part as usize];
            let write = |a: &mut VerbArena, r, data| {
                let addr = tl.slot_addr(part, r, slot);
                let version = a.write_u64(addr + VERSION_OFF, version);
                a.batch_of([Verb::write(addr + KEY_OFF, data), version])
            };
            let live = self.live_mask(reps);
            self.post_to_each(reps, live, body, write, Purpose::Write(i, 0), inflight);
        }
    }

    /// Keep the address cache and the reclamation queue in step with what committed.
    fn after_commit(&mut self) {
        for i in 0..self.writes.len() {
            let w = &self.writes[i];
            if !w.dirty {
                continue;
            }
            let (t, key, part, slot) = (w.table, w.key, w.part, w.slot);
            match w.op() {
                // The slot now belongs to this key, until it is reclaimed.
                Some(OpKind::Insert) => self.c.node.cache_slot(t, key, slot),
                Some(OpKind::Delete) => {
                    self.c.node.evict_slot(t, key);
                    self.c.retire(t, part, slot);
                }
                Some(OpKind::Reclaim) => self.c.node.evict_slot(t, key),
                _ => {}
            }
        }
    }

    /// Await the commit writes. A replica that did not take its write is
    /// live no more only once the membership declares it failed
    /// (docs/DESIGN.md §4.6); until then the commit waits for that verdict,
    /// since recovery rolls back a transaction whose new version a live
    /// replica lacks, and nothing would repair that replica. An object none
    /// of whose replicas took its write is lost with them: `Unavailable`.
    async fn await_writes(&mut self, inflight: &mut Inflight<F>) -> Option<VerbError> {
        let (mut fatal, mut missed) = (None, 0u64);
        for (purpose, p) in inflight.drain(..) {
            let r = p.await;
            let Purpose::Write(i, m) = purpose else {
                unreachable!("only commit writes are in flight")
            };
            match first_error(&r) {
                None => self.writes[i].landed = true,
                Some(VerbError::Unavailable) => missed |= 1 << m,
                Some(e) => fatal = fatal.or(Some(e)),
            }
            self.c.arena.give(r);
        }
        if fatal.is_some() {
            return fatal;
        }
        self.await_verdicts(missed).await;
        let lost = self.writes.iter().any(|w| w.dirty && !w.landed);
        lost.then_some(VerbError::Unavailable)
    }

    /// Wait until every memory node in `missed` is declared failed (a bug
    /// switch skips the wait, as the commit did before).
    async fn await_verdicts(&mut self, missed: u64) {
        let skip = self.c.node.bugs.ack_missed_replica;
        let mut left = if skip { 0 } else { missed };
        while left != 0 {
            let m = left.trailing_zeros() as MemNodeId;
            left &= left - 1;
            self.c.node.memory.verdict(m).await;
        }
        self.check_missed_declared(missed);
    }
}
