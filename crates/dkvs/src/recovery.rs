//! The recovery coordinator's log recovery (Pandora paper §3.2.2 step 3,
//! §3.2.3; docs/DESIGN.md §4.5 steps 3–4). Runs on any live compute node after the
//! failed node's access has been revoked on every memory node (Cor1).
//!
//! For each failed coordinator `c`: read its log slot on its f+1 log nodes and
//! take the newest valid record `(c, s)`; let `W = word(c, s)`. Read the
//! primary lock word of every logged object and the version on every replica.
//! - no primary lock is `W`: the transaction finished (it unlocks only after
//!   every replica is written) or aborted (it invalidates its log before
//!   unlocking) → nothing to do;
//! - some but not all are `W`: it was unlocking after commit → roll forward
//!   (release the rest);
//! - all are `W`: if every replica of every object carries the new version it
//!   may have acknowledged → roll forward; otherwise no commit-ack was possible
//!   → roll back every replica from the undo image, then release.
//!
//! Roll-back writes the undo image with a *fresh* version minted by the
//! recovery coordinator, never the old one: a reader whose torn read saw the
//! old version next to the crashed writer's new bytes must fail validation.
//! An insert rolls back to a tombstone nobody owns, so the slot stays occupied.
//! Every replica is restored before any lock is released, and logs are
//! invalidated last, so re-running the whole procedure after a crash of the
//! recovery coordinator at any point is correct (idempotence, §3.2.3).
//! Locks of `c` not covered by a logged transaction are NotLogged stray locks;
//! they are left for PILL stealing once `c` is in `failed_ids` (Cor4).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::future::join_all;
use std::cell::RefCell;

use tandem_fabric::{batch, Batch, Completions, VerbArena};
use tandem_fabric::{Completion, Fabric, MemNodeId, QueuePair, Verb, VerbError};

use crate::compute::MemoryView;
use crate::layout::Layout;
use crate::log::{entry_len, invalid_state_word, LogEntry, LogRecord, OpKind, HEADER_BYTES};
use crate::slot::{
    encode_body, encode_body_into, make_version, LockWord, StrayLock, KEY_OFF, LOCK_OFF, NO_KEY,
    VERSION_OFF,
};

mod invariants;
mod round;
use invariants::Phase;
use round::{Done, Round};

/// Each copy's record as the first round read it, decoded once: every
/// first copy, and every other copy its first copy does not settle (a
/// record may be as short as a header).
fn decode_first_round(owner: &[usize], first: &Done) -> Vec<Option<LogRecord>> {
    let is_lead = |k: usize| lead_of(owner, k) == k;
    let mut whole: Vec<Option<LogRecord>> = vec![None; owner.len()];
    for k in (0..owner.len()).filter(|&k| is_lead(k)) {
        whole[k] = LogRecord::decode(first.bytes(k));
    }
    for k in (0..owner.len()).filter(|&k| !is_lead(k)) {
        if !settled_by_lead(owner, first, &whole, k) {
            whole[k] = LogRecord::decode(first.bytes(k));
        }
    }
    whole
}

/// Whether copy `k`, read as a header only, is its coordinator's first
/// copy's record: the same header (state, magic, length, owner, sequence and
/// checksum), and that copy decoded whole from the first round.
fn settled_by_lead(owner: &[usize], first: &Done, whole: &[Option<LogRecord>], k: usize) -> bool {
    let lead = lead_of(owner, k);
    let (b, l) = (first.bytes(k), first.bytes(lead));
    lead != k && whole[lead].is_some() && l.get(..HEADER_BYTES) == b.get(..HEADER_BYTES)
}

/// The first of `owner[k]`'s slots (they are consecutive).
fn lead_of(owner: &[usize], k: usize) -> usize {
    let mut j = k;
    while j > 0 && owner[j - 1] == owner[k] {
        j -= 1;
    }
    j
}

/// The `key|flags|value` an undo restores. An insert rolls back to a
/// tombstone nobody owns ([`NO_KEY`]): the slot stays occupied, so keys
/// placed behind it while it looked taken stay reachable, and the inserted
/// key keeps one slot at most (it may have been inserted elsewhere since).
fn undo_body(e: &LogEntry, value_bytes: u32) -> Vec<u8> {
    match e.op {
        OpKind::Insert => encode_body(NO_KEY, 0, &[], value_bytes),
        _ => encode_body(e.key, e.old_flags, &e.old_value, value_bytes),
    }
}

/// [`undo_body`], appended to `out`.
fn undo_body_into(out: &mut Vec<u8>, e: &LogEntry, value_bytes: u32) {
    match e.op {
        OpKind::Insert => encode_body_into(out, NO_KEY, 0, &[], value_bytes),
        _ => encode_body_into(out, e.key, e.old_flags, &e.old_value, value_bytes),
    }
}

/// What log recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub coordinators: usize,
    /// Valid log records found (one per coordinator at most).
    pub logs_found: usize,
    pub rolled_forward: usize,
    pub rolled_back: usize,
    /// Logged transactions that had already finished.
    pub already_done: usize,
    pub locks_released: usize,
    pub replicas_restored: usize,
    /// Rounds of verbs posted (each a doorbell batch per memory node, awaited together).
    pub rounds: usize,
}

/// Decision for one logged transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    RollForward,
    RollBack,
}

/// Test-only switches that re-inject recovery-side bugs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryBugs {
    /// Roll back with the old version instead of a fresh one.
    pub reuse_old_version: bool,
    /// Roll back every logged transaction still holding a lock, even one
    /// that updated every replica and may have acknowledged (violates Cor3).
    pub always_roll_back: bool,
    /// Skip log recovery and go straight to invalidation and notification, so
    /// logged transactions' locks get stolen (violates Cor2 and Cor4).
    pub skip_log_recovery: bool,
    /// Traditional mode: decide from the newest undo entries instead of the
    /// lock log's current transaction, and trust them (FORD's C2 "lost decision").
    pub lost_decision: bool,
    /// ford/traditional: treat a locked object as the undo entry's without
    /// checking that its version is that entry's old or new one (FORD's
    /// recovery trusts its undo images).
    pub trust_undo_images: bool,
    /// Roll back only the primary replica of each object (replicas diverge;
    /// invisible until a memory node fails).
    pub restore_one_replica: bool,
    /// Pandora: invalidate the logs before restoring and unlocking, so a
    /// recovery coordinator that crashes in between leaves a re-run nothing
    /// to recover from (breaks idempotence, §3.2.3).
    pub invalidate_logs_first: bool,
    /// While every compute node holds, decide records that touch a down
    /// memory node by the primary-lock rule anyway: their locks on the lost
    /// primary are gone, so a half-committed transaction looks finished.
    pub ignore_lost_primaries: bool,
    /// The membership admits a replacement memory server without copying
    /// the lost node's partitions onto it (f+1 copies only in name).
    pub skip_rereplication: bool,
}

pub struct RecoveryCoordinator<F: Fabric> {
    layout: Arc<Layout>,
    qps: Vec<F::Qp>,
    /// The recovery coordinator's own coordinator id: fresh versions carry it.
    id: u16,
    version_counter: u64,
    pub bugs: RecoveryBugs,
    /// Memory nodes known to be down: never read or written.
    view: MemoryView,
    /// No transaction runs anywhere while this recovery does (a memory
    /// reconfiguration holds every compute node): records that touch a down
    /// node are decided by [`RecoveryCoordinator::decide_quiesced`].
    quiesced: bool,
    /// Its invariant assertions (`recovery/invariants.rs`): `None`, the
    /// default, runs them unless `bugs` plants a bug, whose tests show that
    /// a checker catches it; `Some(on)` decides.
    pub assertions: Option<bool>,
    /// How far the current `recover` got (`invalidate-last`).
    phase: Phase,
    /// Rounds posted so far.
    rounds: std::cell::Cell<usize>,
    /// Buffers of its rounds, reused from one to the next.
    arena: RefCell<VerbArena>,
}

/// Buffers of each kind its arena keeps: a round reads or writes once per
/// log copy or replica, so thousands at 512 coordinators.
const ROUND_BUFFERS: usize = 8192;

/// Bytes per read when scanning whole partitions.
const SCAN_READ_BYTES: u64 = 64 * 1024;

fn first_error(rs: &[Completion]) -> Option<VerbError> {
    rs.iter().find_map(|r| r.as_ref().err().copied())
}

/// Whether every replica read carries its entry's new version.
fn all_new(rec: &LogRecord, versions: &[Vec<u64>]) -> bool {
    rec.entries
        .iter()
        .zip(versions)
        .all(|(e, vs)| vs.iter().all(|&v| v == e.new_version))
}

fn word_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl<F: Fabric> RecoveryCoordinator<F> {
    /// `id` must be a coordinator id of its own (unique, never reused), so the
    /// versions it mints collide with no one's.
    pub fn new(fabric: &F, layout: Arc<Layout>, id: u16) -> Self {
        let qps = (0..fabric.memory_nodes())
            .map(|m| fabric.queue_pair(m as MemNodeId))
            .collect();
        RecoveryCoordinator {
            layout,
            qps,
            id,
            version_counter: 0,
            bugs: RecoveryBugs::default(),
            view: MemoryView::default(),
            quiesced: false,
            assertions: None,
            phase: Phase::Idle,
            rounds: Default::default(),
            arena: RefCell::new(VerbArena::keeping(ROUND_BUFFERS)),
        }
    }

    /// Read and write only memory nodes `view` does not mark down;
    /// `quiesced`: every compute node holds (see the field).
    pub fn with_view(mut self, view: MemoryView, quiesced: bool) -> Self {
        self.view = view;
        self.quiesced = quiesced;
        self
    }

    /// Post a round as one doorbell batch per memory node (verbs bound for one
    /// node keep their order) and hand back each post's completions.
    async fn round(&self, posts: Vec<(MemNodeId, Batch)>) -> Result<Vec<Completions>, VerbError> {
        self.rounds.set(self.rounds.get() + 1);
        let mut batches: Vec<Batch> = vec![Vec::new(); self.qps.len()];
        let mut spans = Vec::with_capacity(posts.len());
        for (n, b) in posts {
            let batch = &mut batches[n as usize];
            spans.push((n as usize, b.len()));
            batch.extend(b);
        }
        let pending = batches
            .into_iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(n, b)| {
                let p = self.qps[n].post(b);
                async move { (n, p.await) }
            });
        let mut by_node: Vec<std::vec::IntoIter<Completion>> =
            vec![Vec::new().into_iter(); self.qps.len()];
        for (n, done) in join_all(pending).await {
            if let Some(e) = first_error(&done) {
                return Err(e);
            }
            by_node[n] = done.into_iter();
        }
        // Each node's posts sit in its batch in posting order: hand each post
        // its completions by moving them out, in that order.
        Ok(spans
            .into_iter()
            .map(|(n, len)| by_node[n].by_ref().take(len).collect())
            .collect())
    }

    /// How much of a log slot the first round reads: a record of two
    /// objects of the widest table, between 256 B and 1 KiB. At 512
    /// coordinators the first round moves f+1 copies of it per coordinator,
    /// so reading 1 KiB for a 264-byte micro record tripled its bytes.
    fn log_probe_bytes(&self) -> u32 {
        let widest = self.layout.tables.iter().map(|t| t.value_bytes).max();
        let entry = entry_len(self.layout.replicas as usize, widest.unwrap_or(0) as usize);
        let two = (HEADER_BYTES + 2 * entry) as u32;
        two.clamp(256, 1024)
            .min((self.layout.log_slot_bytes / 2) as u32)
    }

    /// Read the newest valid log record of each coordinator: its first live
    /// copy's first [`Self::log_probe_bytes`] (enough for typical records)
    /// and only the header of its other copies, then a second read for what
    /// that did not settle: a record longer than the probe, and any other
    /// copy that may hold another record (its header differs from the first
    /// copy's, or the first copy does not decode).
    pub async fn read_logs(&self, failed: &[u16]) -> Result<Vec<Option<LogRecord>>, VerbError> {
        let slots = self.log_slots(failed)?;
        self.read_logs_at(failed, &slots).await
    }

    /// Each failed coordinator's log nodes not known to be down (at least
    /// one each), as (coordinator's index, node) pairs in order.
    fn log_slots(&self, failed: &[u16]) -> Result<Vec<(usize, MemNodeId)>, VerbError> {
        let mut slots = Vec::with_capacity(failed.len() * self.layout.replicas as usize);
        for (i, &c) in failed.iter().enumerate() {
            slots.extend(self.live_log_nodes(c)?.into_iter().map(|n| (i, n)));
        }
        Ok(slots)
    }

    /// [`Self::read_logs`] on the slots [`Self::log_slots`] gave.
    async fn read_logs_at(
        &self,
        failed: &[u16],
        slots: &[(usize, MemNodeId)],
    ) -> Result<Vec<Option<LogRecord>>, VerbError> {
        let probe = self.log_probe_bytes();
        let mut round = self.new_round();
        let owner: Vec<usize> = slots.iter().map(|s| s.0).collect();
        for (k, &(i, n)) in slots.iter().enumerate() {
            let len = match lead_of(&owner, k) == k {
                true => probe,
                false => probe.min(HEADER_BYTES as u32),
            };
            round.post(n, [Verb::read(self.layout.log_addr(failed[i]), len)]);
        }
        let first = self.run(round).await?;
        let mut whole = decode_first_round(&owner, &first);
        let (long, long_of) = self.read_long_logs(failed, &owner, &first, &whole).await?;
        let mut out: Vec<Option<LogRecord>> = vec![None; failed.len()];
        for (k, &i) in owner.iter().enumerate() {
            let rec = match long_of[k] {
                Some(p) => LogRecord::decode(long.bytes(p)),
                // What the first round held whole: a first copy, or another
                // copy's record as short as a header; nothing for a copy
                // whose header equals its first copy's (the same record).
                None => whole[k].take(),
            };
            if let Some(rec) = rec {
                // A record in c's slot is c's; anything else is garbage from a
                // previous owner of the slot index and is ignored.
                if rec.coordinator == failed[i]
                    && out[i].as_ref().is_none_or(|o| rec.tx_seq > o.tx_seq)
                {
                    out[i] = Some(rec);
                }
            }
        }
        self.recycle(first);
        self.recycle(long);
        Ok(out)
    }

    /// Whole reads of what the first round did not settle: a round, and for
    /// each first read the post in it that completes it.
    async fn read_long_logs(
        &self,
        failed: &[u16],
        owner: &[usize],
        first: &Done,
        whole: &[Option<LogRecord>],
    ) -> Result<(Done, Vec<Option<usize>>), VerbError> {
        let half = (self.layout.log_slot_bytes / 2) as usize;
        let mut round = self.new_round();
        let long_of = (0..owner.len())
            .map(|k| {
                let b = first.bytes(k);
                let len = u32::from_le_bytes(b[12..16].try_into().expect("header")) as usize;
                let plausible = LogRecord::header_plausible(b) && len > b.len() && len <= half;
                (plausible && !settled_by_lead(owner, first, whole, k)).then(|| {
                    let addr = self.layout.log_addr(failed[owner[k]]);
                    round.post(first.node(k), [Verb::read(addr, len as u32)])
                })
            })
            .collect();
        Ok((self.run(round).await?, long_of))
    }

    /// An empty round, its batches from the arena.
    fn new_round(&self) -> Round {
        Round::new(&mut self.arena.borrow_mut(), self.qps.len())
    }

    /// Post `round` (one batch per memory node it uses) and await it all;
    /// the first failed verb fails the round.
    async fn run(&self, round: Round) -> Result<Done, VerbError> {
        if !round.is_empty() {
            self.rounds.set(self.rounds.get() + 1);
        }
        let (batches, posts) = round.into_parts();
        let pending: Vec<_> = {
            let mut arena = self.arena.borrow_mut();
            let arena = &mut *arena;
            batches
                .into_iter()
                .enumerate()
                .map(|(n, b)| match b.is_empty() {
                    true => {
                        arena.give_batch(b);
                        None
                    }
                    false => Some(self.qps[n].post_in(b, arena)),
                })
                .collect()
        };
        let mut by_node = Vec::with_capacity(pending.len());
        for p in pending {
            by_node.push(match p {
                Some(p) => p.await,
                None => self.arena.borrow_mut().completions(),
            });
        }
        let failed = by_node.iter().find_map(|d| first_error(d));
        let done = Done { by_node, posts };
        match failed {
            Some(e) => {
                self.recycle(done);
                Err(e)
            }
            None => Ok(done),
        }
    }

    fn recycle(&self, done: Done) {
        done.recycle(&mut self.arena.borrow_mut());
    }

    /// Decide one record from its primaries' lock words and replicas' versions.
    pub fn decide(rec: &LogRecord, primary_locks: &[u64], versions: &[Vec<u64>]) -> Decision {
        let w = LockWord::owned(rec.coordinator, rec.tx_seq).0;
        let held = primary_locks.iter().filter(|&&l| l == w).count();
        if held == 0 {
            Decision::Nothing
        } else if held < primary_locks.len() || all_new(rec, versions) {
            Decision::RollForward
        } else {
            Decision::RollBack
        }
    }

    /// Recover every failed coordinator: decide, roll forward or back, then
    /// invalidate their logs. The caller notifies `failed_ids` afterwards.
    pub async fn recover(&mut self, failed: &[u16]) -> Result<RecoveryReport, VerbError> {
        let mut report = RecoveryReport {
            coordinators: failed.len(),
            ..Default::default()
        };
        self.phase = Phase::Recovering;
        let slots = self.log_slots(failed)?;
        let mut records: Vec<LogRecord> = self
            .read_logs_at(failed, &slots)
            .await?
            .into_iter()
            .flatten()
            .collect();
        let found = records.len();
        if self.bugs.skip_log_recovery {
            records.clear();
        }
        if self.bugs.invalidate_logs_first {
            self.invalidate_logs(failed, &slots).await?;
        }
        report.logs_found = records.len();
        let (words, first) = self.read_words(&records).await?;
        let decisions = self.decide_all(&records, &words, &first);
        self.restore(&records, &decisions, &mut report).await?;
        self.unlock(&records, &decisions, (&words, &first), &mut report)
            .await?;
        self.recycle(words);
        self.check_all_decided(found, decisions.len());
        self.phase = Phase::Unlocked;

        // Invalidate last: until here, re-running finds the same records.
        self.invalidate_logs(failed, &slots).await?;
        self.phase = Phase::Idle;
        report.rounds = self.rounds.take();
        Ok(report)
    }

    /// One round: the lock word and version of every live replica of every
    /// record's objects (a post each); and per record, its first post.
    async fn read_words(&self, records: &[LogRecord]) -> Result<(Done, Vec<usize>), VerbError> {
        let mut round = self.new_round();
        let mut first = Vec::with_capacity(records.len());
        let mut posts = 0;
        for rec in records {
            first.push(posts);
            for e in &rec.entries {
                let before = posts;
                for (n, addr) in self.live_iter(e) {
                    posts = round.post(n, [Verb::read(addr + LOCK_OFF, 16)]) + 1;
                }
                if posts == before {
                    // Every replica is down: f+1 failures, nothing to recover from.
                    return Err(VerbError::Unavailable);
                }
            }
        }
        Ok((self.run(round).await?, first))
    }

    /// Decide every record from its words (its posts in `words` from `first[i]`).
    fn decide_all(&self, records: &[LogRecord], words: &Done, first: &[usize]) -> Vec<Decision> {
        let mut versions: Vec<Vec<u64>> = Vec::new();
        let mut primary_locks = Vec::new();
        records
            .iter()
            .zip(first)
            .map(|(rec, &p)| {
                self.words_of(rec, words, p, &mut versions, &mut primary_locks);
                self.decide_one(rec, &versions, &primary_locks)
            })
            .collect()
    }

    /// `rec`'s versions (per entry, per live replica) and its primaries'
    /// lock words, from its posts in `words` starting at `p`.
    fn words_of(
        &self,
        rec: &LogRecord,
        words: &Done,
        mut p: usize,
        versions: &mut Vec<Vec<u64>>,
        primary_locks: &mut Vec<u64>,
    ) {
        versions.resize_with(rec.entries.len(), Vec::new);
        versions.truncate(rec.entries.len());
        primary_locks.clear();
        for (e, vs) in rec.entries.iter().zip(versions.iter_mut()) {
            vs.clear();
            for k in 0..self.live_iter(e).count() {
                let b = words.bytes(p);
                p += 1;
                // The primary is the first live replica (docs/DESIGN.md §4.6).
                if k == 0 {
                    primary_locks.push(word_at(b, 0));
                }
                vs.push(word_at(b, 8));
            }
        }
    }

    /// The decision for `rec`, checked against the rules it must keep.
    fn decide_one(
        &self,
        rec: &LogRecord,
        versions: &[Vec<u64>],
        primary_locks: &[u64],
    ) -> Decision {
        let degraded = rec
            .entries
            .iter()
            .any(|e| self.live_iter(e).count() < e.replicas.len());
        let by_versions = degraded && self.quiesced && !self.bugs.ignore_lost_primaries;
        let mut d = if by_versions {
            Self::decide_quiesced(rec, versions)
        } else {
            Self::decide(rec, primary_locks, versions)
        };
        if self.bugs.always_roll_back && d == Decision::RollForward {
            d = Decision::RollBack;
        }
        let locks_used = (!by_versions).then_some(primary_locks);
        self.check_decision(rec, d, versions, locks_used, degraded && self.quiesced);
        d
    }

    /// Restore every replica of every rolled-back object (one round), before any unlock.
    async fn restore(
        &mut self,
        records: &[LogRecord],
        decisions: &[Decision],
        report: &mut RecoveryReport,
    ) -> Result<(), VerbError> {
        let mut round = self.new_round();
        let mut restored = Vec::new();
        let mut body = Vec::new();
        let rolled_back = || {
            records
                .iter()
                .zip(decisions)
                .filter(|(_, d)| **d == Decision::RollBack)
                .flat_map(|(rec, _)| &rec.entries)
        };
        for e in rolled_back() {
            self.version_counter += 1;
            let version = if self.bugs.reuse_old_version {
                e.old_version
            } else {
                make_version(self.id, self.version_counter)
            };
            self.check_fresh_rollback(e, version);
            body.clear();
            undo_body_into(&mut body, e, self.layout.table(e.table).value_bytes);
            let mut arena = self.arena.borrow_mut();
            for (n, addr) in self.restored(e) {
                restored.push((n, addr));
                let verbs = [
                    arena.write(addr + KEY_OFF, &body),
                    arena.write_u64(addr + VERSION_OFF, version),
                ];
                round.post(n, verbs);
                report.replicas_restored += 1;
            }
        }
        let done = self.run(round).await?;
        self.recycle(done);
        restored.sort_unstable();
        self.check_restored(rolled_back(), &restored);
        Ok(())
    }

    /// Release the locks the logged transactions still hold (one round):
    /// every live replica's word read as the transaction's.
    async fn unlock(
        &self,
        records: &[LogRecord],
        decisions: &[Decision],
        (words, first): (&Done, &[usize]),
        report: &mut RecoveryReport,
    ) -> Result<(), VerbError> {
        let mut round = self.new_round();
        for ((rec, d), &p0) in records.iter().zip(decisions).zip(first) {
            match d {
                Decision::Nothing => report.already_done += 1,
                Decision::RollForward => report.rolled_forward += 1,
                Decision::RollBack => report.rolled_back += 1,
            }
            if *d == Decision::Nothing {
                continue;
            }
            let w = LockWord::owned(rec.coordinator, rec.tx_seq).0;
            let mut p = p0;
            for e in &rec.entries {
                for (n, addr) in self.live_iter(e) {
                    if word_at(words.bytes(p), 0) == w {
                        round.post(n, [Verb::cas(addr + LOCK_OFF, w, 0)]);
                        report.locks_released += 1;
                    }
                    p += 1;
                }
            }
        }
        let done = self.run(round).await?;
        self.recycle(done);
        Ok(())
    }

    async fn invalidate_logs(
        &self,
        failed: &[u16],
        slots: &[(usize, MemNodeId)],
    ) -> Result<(), VerbError> {
        self.check_invalidation_last();
        let mut round = self.new_round();
        for &(i, n) in slots {
            let addr = self.layout.log_addr(failed[i]);
            let verb = self
                .arena
                .borrow_mut()
                .write_u64(addr, invalid_state_word());
            round.post(n, [verb]);
        }
        let done = self.run(round).await?;
        self.recycle(done);
        Ok(())
    }

    /// The replicas a roll-back restores: every live one, unless a bug says otherwise.
    fn restored(&self, e: &LogEntry) -> Vec<(MemNodeId, u64)> {
        let mut live = self.live(e);
        if self.bugs.restore_one_replica {
            live.truncate(1);
        }
        live
    }

    /// `e`'s replicas on memory nodes not known to be down, primary first.
    fn live_iter<'a>(&'a self, e: &'a LogEntry) -> impl Iterator<Item = (MemNodeId, u64)> + 'a {
        e.replicas
            .iter()
            .copied()
            .filter(|(n, _)| !self.view.is_down(*n))
    }

    /// [`Self::live_iter`], collected.
    fn live(&self, e: &LogEntry) -> Vec<(MemNodeId, u64)> {
        e.replicas
            .iter()
            .copied()
            .filter(|(n, _)| !self.view.is_down(*n))
            .collect()
    }

    /// The first replica (its index and node) not known to be down.
    fn first_live(&self, reps: &[MemNodeId]) -> Result<(usize, MemNodeId), VerbError> {
        let r = reps
            .iter()
            .position(|&n| !self.view.is_down(n))
            .ok_or(VerbError::Unavailable)?;
        Ok((r, reps[r]))
    }

    /// Coordinator `c`'s log nodes that are not known to be down.
    fn live_log_nodes(&self, c: u16) -> Result<Vec<MemNodeId>, VerbError> {
        let live: Vec<MemNodeId> = self
            .layout
            .log_nodes(c)
            .into_iter()
            .filter(|&n| !self.view.is_down(n))
            .collect();
        if live.is_empty() {
            return Err(VerbError::Unavailable);
        }
        Ok(live)
    }

    /// Decide a record some of whose replicas are down, while no transaction
    /// runs anywhere (every live compute node holds, docs/DESIGN.md §4.6). Its
    /// primary locks may be lost with a memory node, so the decision rests
    /// on the live replicas' versions, as the Pandora paper §3.2.5 decides a
    /// compute node's own transactions: committed if every live replica
    /// carries the new version, else rolled back. A version that is neither
    /// the record's old nor its new one means the transaction finished long
    /// ago (no one else could write while it held its locks): nothing to do.
    pub fn decide_quiesced(rec: &LogRecord, versions: &[Vec<u64>]) -> Decision {
        let foreign = rec
            .entries
            .iter()
            .zip(versions)
            .any(|(e, vs)| vs.iter().any(|&v| v != e.old_version && v != e.new_version));
        if foreign {
            Decision::Nothing
        } else if all_new(rec, versions) {
            Decision::RollForward
        } else {
            Decision::RollBack
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogEntry;

    fn rec(entries: usize) -> LogRecord {
        LogRecord {
            coordinator: 7,
            tx_seq: 3,
            entries: (0..entries)
                .map(|i| LogEntry {
                    table: 0,
                    op: OpKind::Update,
                    key: i as u64,
                    old_version: 10,
                    new_version: 20,
                    old_flags: 1,
                    replicas: vec![(0, 0), (1, 0)],
                    old_value: vec![],
                })
                .collect(),
        }
    }

    /// A store of one 40-byte table and 8 log slots (of `slot_bytes`, or the
    /// default) on three in-process memory nodes.
    fn log_store(
        slot_bytes: Option<u64>,
    ) -> (Arc<Layout>, tandem_fabric::inline::InlineCluster) {
        use crate::config::{Mode, StoreConfig, TableSpec};
        let tables = vec![TableSpec {
            id: 0,
            name: "t".into(),
            value_size: 40,
            capacity: 64,
        }];
        let mut store = StoreConfig::new(Mode::Pandora, 3, 2, tables);
        store.log_slots = 8;
        if let Some(b) = slot_bytes {
            store.log_slot_bytes = b;
        }
        let layout = Arc::new(Layout::new(&store).unwrap());
        let size = *layout.region_bytes.iter().max().unwrap();
        (layout, tandem_fabric::inline::InlineCluster::with_nodes(3, size, 1))
    }

    /// A record longer than the first round's probe is fetched whole by a
    /// second read; a short one comes back from the first; a record in a
    /// slot that names another coordinator, or none, is ignored.
    #[test]
    fn read_logs_fetches_records_longer_than_the_probe_whole() {
        let (layout, cluster) = log_store(Some(16 * 1024));
        let fabric = cluster.join(1).unwrap();
        let rc = RecoveryCoordinator::new(&fabric, layout.clone(), 7);
        let record = |c: u16, entries: usize| {
            let mut r = rec(entries);
            r.coordinator = c;
            for e in &mut r.entries {
                e.old_value = vec![c as u8; 40];
            }
            r
        };
        let (short, long) = (record(2, 1), record(3, 40));
        assert!(short.encoded_len() as u32 <= rc.log_probe_bytes());
        assert!(long.encoded_len() as u32 > rc.log_probe_bytes());
        let stranger = record(9, 1);
        for (slot_of, r) in [(2, &short), (3, &long), (4, &stranger)] {
            for n in layout.log_nodes(slot_of) {
                let node = &cluster.nodes()[n as usize];
                node.write_bytes(layout.log_addr(slot_of), &r.encode())
                    .unwrap();
            }
        }
        let logs = futures::FutureExt::now_or_never(rc.read_logs(&[2, 3, 4, 5]));
        let got = logs.expect("inline verbs complete at once").unwrap();
        let padded = |r: &LogRecord| LogRecord::decode(&r.encode()).unwrap();
        assert_eq!(
            got,
            vec![Some(padded(&short)), Some(padded(&long)), None, None]
        );
    }

    /// The copies of one coordinator's log that the first round reads only
    /// the header of: a newer record there, or a torn first copy, is read
    /// whole; copies equal to the first are not read again.
    #[test]
    fn other_log_copies_are_read_whole_only_when_they_may_differ() {
        let (layout, cluster) = log_store(None);
        let fabric = cluster.join(1).unwrap();
        let record = |c: u16, seq: u64| LogRecord {
            coordinator: c,
            tx_seq: seq,
            ..rec(2)
        };
        let put = |c: u16, copy: usize, bytes: &[u8]| {
            let n = layout.log_nodes(c)[copy];
            let node = &cluster.nodes()[n as usize];
            node.write_bytes(layout.log_addr(c), bytes).unwrap();
        };
        // 2: the second copy is newer. 3: the first copy is torn past its
        // header. 4: both the same. 5: the first copy holds nothing, the
        // second a record as short as a header.
        put(5, 1, &LogRecord { entries: vec![], ..record(5, 9) }.encode());
        put(2, 0, &record(2, 5).encode());
        put(2, 1, &record(2, 6).encode());
        let mut torn = record(3, 5).encode();
        torn[HEADER_BYTES + 3] ^= 0xff;
        put(3, 0, &torn);
        put(3, 1, &record(3, 5).encode());
        put(4, 0, &record(4, 5).encode());
        put(4, 1, &record(4, 5).encode());
        let rc = RecoveryCoordinator::new(&fabric, layout.clone(), 7);
        let logs = futures::FutureExt::now_or_never(rc.read_logs(&[2, 3, 4, 5]));
        let got = logs.expect("inline verbs complete at once").unwrap();
        let seqs: Vec<Option<u64>> = got.iter().map(|r| r.as_ref().map(|r| r.tx_seq)).collect();
        assert_eq!(seqs, [Some(6), Some(5), Some(5), Some(9)]);
        let rc = RecoveryCoordinator::new(&fabric, layout.clone(), 7);
        let logs = futures::FutureExt::now_or_never(rc.read_logs(&[4]));
        assert!(logs.unwrap().unwrap()[0].is_some());
        assert_eq!(rc.rounds.get(), 1, "equal copies need no second read");
    }

    #[test]
    fn the_decision_rule_of_design_4_5() {
        type RC = RecoveryCoordinator<tandem_fabric::inline::InlineFabric>;
        let r = rec(2);
        let w = LockWord::owned(7, 3).0;
        let other = LockWord::owned(8, 1).0;
        assert_eq!(
            RC::decide(&r, &[0, other], &[vec![20, 20], vec![20, 20]]),
            Decision::Nothing
        );
        assert_eq!(
            RC::decide(&r, &[w, 0], &[vec![20, 20], vec![20, 20]]),
            Decision::RollForward
        );
        assert_eq!(
            RC::decide(&r, &[w, w], &[vec![20, 20], vec![20, 20]]),
            Decision::RollForward
        );
        assert_eq!(
            RC::decide(&r, &[w, w], &[vec![20, 20], vec![20, 10]]),
            Decision::RollBack
        );
        assert_eq!(
            RC::decide(&r, &[w, w], &[vec![10, 10], vec![10, 10]]),
            Decision::RollBack
        );
        // A later transaction of the same coordinator (other seq) is not this record's.
        assert_eq!(
            RC::decide(
                &r,
                &[LockWord::owned(7, 4).0, w],
                &[vec![10, 10], vec![10, 10]]
            ),
            Decision::RollForward
        );
    }
}

/// The background scan of docs/DESIGN.md §4.5: release, with CAS, every primary
/// lock still owned by a coordinator in `failed`. Only safe once log recovery
/// has finished for those coordinators: what is left are NotLogged stray locks,
/// whose transactions wrote nothing. Used before recycling coordinator ids and
/// to clear locks nobody touched. Returns the number of locks released.
pub async fn sweep_stray_locks<F: Fabric>(
    fabric: &F,
    layout: &Layout,
    failed: &crate::FailedIds,
) -> Result<usize, VerbError> {
    sweep_stray_locks_live(fabric, layout, failed, &MemoryView::default()).await
}

/// [`sweep_stray_locks`] on the primaries `view` gives (the first replica
/// not marked down).
pub async fn sweep_stray_locks_live<F: Fabric>(
    fabric: &F,
    layout: &Layout,
    failed: &crate::FailedIds,
    view: &MemoryView,
) -> Result<usize, VerbError> {
    let qps: Vec<F::Qp> = (0..fabric.memory_nodes())
        .map(|m| fabric.queue_pair(m as MemNodeId))
        .collect();
    let mut released = 0;
    for tl in &layout.tables {
        let slot = tl.slot_bytes as u64;
        for p in 0..tl.partitions {
            let reps = &tl.replicas[p as usize];
            let r = reps
                .iter()
                .position(|&n| !view.is_down(n))
                .ok_or(VerbError::Unavailable)?;
            let primary = reps[r];
            for (base, n) in tl.scan_reads(p, r, SCAN_READ_BYTES) {
                let r = qps[primary as usize]
                    .post(batch![Verb::read(base, n * slot as u32)])
                    .await;
                let bytes = r.into_iter().next().expect("one completion")?.into_bytes();
                let mut cas = Vec::new();
                let mut expected = Vec::new();
                for i in 0..n as u64 {
                    let w = LockWord(word_at(&bytes, (i * slot) as usize));
                    if let Some(stray) = StrayLock::of(w, failed) {
                        cas.push(Verb::cas(base + i * slot + LOCK_OFF, stray.word().0, 0));
                        expected.push(stray.word().0);
                    }
                }
                if !cas.is_empty() {
                    let r = qps[primary as usize].post(cas).await;
                    for (c, w) in r.into_iter().zip(expected) {
                        // A lost race means a live coordinator stole it first: fine.
                        if c?.old_value() == w {
                            released += 1;
                        }
                    }
                }
            }
        }
    }
    Ok(released)
}

/// What baseline (ford / traditional) recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaselineReport {
    /// Slots whose lock word was read (the whole store for ford's scan).
    pub slots_scanned: u64,
    pub locks_found: usize,
    pub rolled_forward: usize,
    pub rolled_back: usize,
    pub locks_released: usize,
    pub replicas_restored: usize,
}

impl<F: Fabric> RecoveryCoordinator<F> {
    /// Records in the area at `offset` of coordinator `c`'s log slot on `n`.
    async fn read_area(
        &self,
        c: u16,
        nodes: &[MemNodeId],
        offset: u64,
    ) -> Result<Vec<LogRecord>, VerbError> {
        let half = (self.layout.log_slot_bytes / 2) as u32;
        let posts = nodes
            .iter()
            .map(|&n| {
                (
                    n,
                    batch![Verb::read(self.layout.log_addr(c) + offset, half)],
                )
            })
            .collect();
        let mut out = Vec::new();
        for mut r in self.round(posts).await? {
            out.extend(
                LogRecord::decode_all(&r.remove(0).expect("checked").into_bytes())
                    .into_iter()
                    .filter(|x| x.coordinator == c),
            );
        }
        Ok(out)
    }

    /// The current transaction's undo entries of coordinator `c` (its newest
    /// sequence number), keyed by primary slot address. An entry exists only
    /// for a lock the transaction acquired (FORD writes it after the lock).
    async fn undo_entries(
        &self,
        c: u16,
        only_seq: Option<u64>,
    ) -> Result<(u64, BTreeMap<(MemNodeId, u64), LogEntry>), VerbError> {
        let all: Vec<MemNodeId> = (0..self.layout.memory_nodes).collect();
        let recs = self.read_area(c, &all, 0).await?;
        let seq = only_seq.unwrap_or_else(|| recs.iter().map(|r| r.tx_seq).max().unwrap_or(0));
        let mut map = BTreeMap::new();
        for r in recs.into_iter().filter(|r| r.tx_seq == seq) {
            for e in r.entries {
                map.insert(e.replicas[0], e);
            }
        }
        Ok((seq, map))
    }

    /// FORD's stop-the-world recovery. The caller has paused every live
    /// coordinator and let in-flight transactions drain, so every lock still
    /// set belongs to a failed coordinator (locks name no owner). Scan every
    /// primary for locks, then decide each failed transaction from its undo
    /// entries with the rule of docs/DESIGN.md §4.5.
    pub async fn recover_ford(&mut self, failed: &[u16]) -> Result<BaselineReport, VerbError> {
        let mut report = BaselineReport::default();
        let mut locked = BTreeSet::new();
        for tl in &self.layout.tables {
            let slot = tl.slot_bytes as u64;
            for p in 0..tl.partitions {
                let primary = tl.replicas[p as usize][0];
                for (base, n) in tl.scan_reads(p, 0, SCAN_READ_BYTES) {
                    let mut r = self
                        .round(vec![(primary, batch![Verb::read(base, n * slot as u32)])])
                        .await?;
                    let bytes = r.remove(0).remove(0).expect("checked").into_bytes();
                    for i in 0..n as u64 {
                        if word_at(&bytes, (i * slot) as usize) != 0 {
                            locked.insert((primary, base + i * slot));
                        }
                    }
                    report.slots_scanned += n as u64;
                }
            }
        }
        report.locks_found = locked.len();
        // FORD knows no current transaction: the newest undo entries may be
        // those of an aborted transaction (FORD never invalidates them), the
        // "lost decision" that FORD's C2 design leaves in (docs/DESIGN.md §4.7).
        let seqs = vec![None; failed.len()];
        self.finish_baseline(failed, &seqs, locked, &mut report)
            .await?;
        Ok(report)
    }

    /// Traditional logging's recovery: the lock logs name every object a
    /// failed coordinator may have locked, so no scan is needed; live
    /// coordinators are paused and drained as for ford (locks name no owner).
    pub async fn recover_traditional(
        &mut self,
        failed: &[u16],
    ) -> Result<BaselineReport, VerbError> {
        let mut report = BaselineReport::default();
        let mut candidates = BTreeSet::new();
        let half = self.layout.log_slot_bytes / 2;
        let mut seqs = Vec::new();
        for &c in failed {
            let recs = self.read_area(c, &self.layout.log_nodes(c), half).await?;
            let seq = recs.iter().map(|r| r.tx_seq).max().unwrap_or(0);
            // The lock log names the current transaction (written before its
            // first lock): only its undo entries count, never those of an
            // earlier, aborted one (the "lost decision" fix).
            seqs.push(if self.bugs.lost_decision {
                None
            } else {
                Some(seq)
            });
            for r in recs.into_iter().filter(|r| r.tx_seq == seq) {
                for e in r.entries {
                    candidates.insert(e.replicas[0]);
                }
            }
        }
        let posts: Vec<_> = candidates
            .iter()
            .map(|&(n, a)| (n, batch![Verb::read(a + LOCK_OFF, 8)]))
            .collect();
        let results = self.round(posts).await?;
        let mut locked = BTreeSet::new();
        for (k, mut r) in candidates.iter().zip(results) {
            if word_at(&r.remove(0).expect("checked").into_bytes(), 0) != 0 {
                locked.insert(*k);
            }
        }
        report.slots_scanned = candidates.len() as u64;
        report.locks_found = locked.len();
        self.finish_baseline(failed, &seqs, locked, &mut report)
            .await?;
        Ok(report)
    }

    /// Decide, restore, unlock and invalidate, given the locked primaries.
    async fn finish_baseline(
        &mut self,
        failed: &[u16],
        seqs: &[Option<u64>],
        mut locked: BTreeSet<(MemNodeId, u64)>,
        report: &mut BaselineReport,
    ) -> Result<(), VerbError> {
        let mut restores = Vec::new();
        // The live replicas of rolled-back objects, and those restored.
        let (mut rolled_back, mut restored) = (Vec::new(), BTreeSet::new());
        for (&c, &seq) in failed.iter().zip(seqs) {
            let (_, undo) = self.undo_entries(c, seq).await?;
            if undo.is_empty() {
                continue;
            }
            // Versions on every replica of every object the transaction acquired.
            let entries: Vec<&LogEntry> = undo.values().collect();
            let posts: Vec<_> = entries
                .iter()
                .flat_map(|e| {
                    e.replicas
                        .iter()
                        .map(|&(n, a)| (n, batch![Verb::read(a + VERSION_OFF, 8)]))
                })
                .collect();
            let mut vs = self.round(posts).await?.into_iter();
            let versions: Vec<Vec<u64>> = entries
                .iter()
                .map(|e| {
                    e.replicas
                        .iter()
                        .map(|_| {
                            word_at(
                                &vs.next()
                                    .expect("one per replica")
                                    .remove(0)
                                    .expect("checked")
                                    .into_bytes(),
                                0,
                            )
                        })
                        .collect()
                })
                .collect();
            let all_new = entries
                .iter()
                .zip(&versions)
                .all(|(e, v)| v.iter().all(|&x| x == e.new_version));
            // Locks name no owner: a locked object is this transaction's only if
            // its primary still carries this transaction's old or new version.
            // Otherwise it released the object and another failed coordinator
            // (same node) locked it since: never restore over that.
            let held = entries
                .iter()
                .zip(&versions)
                .filter(|(e, v)| {
                    let ours = v[0] == e.old_version || v[0] == e.new_version;
                    locked.contains(&e.replicas[0])
                        && (ours || self.bugs.trust_undo_images || self.bugs.lost_decision)
                })
                .count();
            let decision = if held == 0 {
                Decision::Nothing
            } else if held < entries.len() || all_new {
                Decision::RollForward
            } else {
                Decision::RollBack
            };
            match decision {
                Decision::Nothing => continue,
                Decision::RollForward => report.rolled_forward += 1,
                Decision::RollBack => {
                    report.rolled_back += 1;
                    self.check_baseline_rollback(&entries, &versions);
                    for e in &entries {
                        self.version_counter += 1;
                        let version = make_version(self.id, self.version_counter);
                        self.check_fresh_rollback(e, version);
                        rolled_back.extend(self.live(e));
                        let body = undo_body(e, self.layout.table(e.table).value_bytes);
                        for (n, a) in self.restored(e) {
                            restored.insert((n, a));
                            restores.push((
                                n,
                                batch![
                                    Verb::write(a + KEY_OFF, body.clone()),
                                    Verb::write_u64(a + VERSION_OFF, version),
                                ],
                            ));
                            report.replicas_restored += 1;
                        }
                    }
                }
            }
        }
        self.round(restores).await?;
        self.check_replicas_restored(&rolled_back, &restored);
        // Every lock left is a failed coordinator's: release them all.
        let unlocks: Vec<_> = std::mem::take(&mut locked)
            .into_iter()
            .map(|(n, a)| (n, batch![Verb::write_u64(a + LOCK_OFF, 0)]))
            .collect();
        report.locks_released = unlocks.len();
        self.round(unlocks).await?;
        // Invalidate the failed coordinators' undo and lock-log areas.
        let half = self.layout.log_slot_bytes / 2;
        let mut inval = Vec::new();
        for &c in failed {
            for n in 0..self.layout.memory_nodes {
                inval.push((
                    n,
                    batch![Verb::write_u64(
                        self.layout.log_addr(c),
                        invalid_state_word(),
                    )],
                ));
                inval.push((
                    n,
                    batch![Verb::write_u64(
                        self.layout.log_addr(c) + half,
                        invalid_state_word(),
                    )],
                ));
            }
        }
        self.round(inval).await?;
        Ok(())
    }
}

impl<F: Fabric> RecoveryCoordinator<F> {
    /// Continue minting versions after `counter` (one recovery coordinator's
    /// versions must never repeat across recoveries).
    pub fn with_version_counter(mut self, counter: u64) -> Self {
        self.version_counter = counter;
        self
    }

    pub fn version_counter(&self) -> u64 {
        self.version_counter
    }

    /// Before coordinator ids are recycled: rewrite, under a lock, the version
    /// of every object whose version was minted by one of `ids`, with a fresh
    /// version of this recovery coordinator. Validation compares versions for
    /// equality only, so once a recycled id mints again, an old version of its
    /// previous owner must no longer exist anywhere (no ABA). Objects locked by
    /// live transactions are retried; after a bounded number of passes,
    /// `Ok(None)`: the ids must not be recycled yet.
    pub async fn retire_versions(&mut self, ids: &[u16]) -> Result<Option<usize>, VerbError> {
        let owned_by_ids = |v: u64| v != 0 && ids.contains(&((v >> 48) as u16));
        let mut rewritten = 0;
        for _pass in 0..16 {
            let mut pending = Vec::new();
            for tl in &self.layout.tables {
                let slot = tl.slot_bytes as u64;
                for p in 0..tl.partitions {
                    let (r0, primary) = self.first_live(&tl.replicas[p as usize])?;
                    for (base, n) in tl.scan_reads(p, r0, SCAN_READ_BYTES) {
                        let mut r = self
                            .round(vec![(primary, batch![Verb::read(base, n * slot as u32)])])
                            .await?;
                        let bytes = r.remove(0).remove(0).expect("checked").into_bytes();
                        for i in 0..n as u64 {
                            if owned_by_ids(word_at(&bytes, (i * slot + VERSION_OFF) as usize)) {
                                let first = (base - tl.slot_addr(p, r0, 0)) / slot;
                                pending.push((tl.spec.id, p, (first + i) as u32));
                            }
                        }
                    }
                }
            }
            if pending.is_empty() {
                return Ok(Some(rewritten));
            }
            for (t, p, s) in pending {
                let tl = self.layout.table(t);
                let reps = tl.replicas[p as usize].clone();
                let (r0, first_live) = self.first_live(&reps)?;
                let primary = tl.slot_addr(p, r0, s);
                self.version_counter += 1;
                let word = LockWord::owned(self.id, self.version_counter).0;
                let mut r = self
                    .round(vec![(
                        first_live,
                        batch![
                            Verb::cas(primary + LOCK_OFF, 0, word),
                            Verb::read(primary + VERSION_OFF, 8),
                        ],
                    )])
                    .await?;
                let mut res = r.remove(0).into_iter();
                let old_lock = res.next().expect("cas").expect("checked").old_value();
                let version = word_at(&res.next().expect("read").expect("checked").into_bytes(), 0);
                if old_lock != 0 {
                    continue; // a live transaction holds it: next pass
                }
                if owned_by_ids(version) {
                    self.version_counter += 1;
                    let fresh = make_version(self.id, self.version_counter);
                    let writes = reps
                        .iter()
                        .enumerate()
                        .filter(|(_, &n)| !self.view.is_down(n))
                        .map(|(r, &n)| {
                            (
                                n,
                                batch![Verb::write_u64(tl.slot_addr(p, r, s) + VERSION_OFF, fresh)],
                            )
                        })
                        .collect();
                    self.round(writes).await?;
                    rewritten += 1;
                }
                self.round(vec![(
                    first_live,
                    batch![Verb::cas(primary + LOCK_OFF, word, 0)],
                )])
                .await?;
            }
        }
        Ok(None)
    }
}
