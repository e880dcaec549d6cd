//! The transaction coordinator: strictly serializable OCC over one-sided
//! verbs, in the three modes of docs/DESIGN.md §4.4 (Pandora paper §2.3 and §3.1).
//!
//! Phases, as the paper names them:
//! 1. **Execution.** Reads fetch lock+version+value from the primary. Writes
//!    post `cas(lock, 0 → my_word)` and `read(slot)` on the primary's queue
//!    pair in one doorbell, so the read observes the locked object. A lock held
//!    by a coordinator in `failed_ids` is stray: reads ignore it and writers
//!    steal it with a second CAS (PILL, §3.1.2). Blind writes are pipelined:
//!    their lock completes by commit time at the latest.
//! 2. **Logging** (pandora). Once every lock is held, one log record goes to the
//!    coordinator's log slot on each of its f+1 log nodes (§3.1.4).
//! 3. **Validation.** Only after every lock is held: one round re-reading
//!    lock+version of each read-only object; a changed version or a lock held
//!    by a live coordinator aborts. Logging and validation share that round.
//! 4. **Commit.** Write every live replica of every written object (contents
//!    first, version last), wait, acknowledge, then unlock with CAS.
//!    **Abort.** Invalidate the log if one was written, then release exactly
//!    the locks this transaction acquired.
//!
//! FORD mode has owner-less locks and writes a per-object undo entry to every
//! replica of the object during execution; traditional mode adds a lock-log
//! write, awaited, before every lock CAS.

use std::collections::HashMap;
use std::rc::Rc;

use futures::future::join_all;
use tandem_fabric::{batch, Batch};
use tandem_fabric::{
    Completion, Completions, Fabric, MemNodeId, QueuePair, Verb, VerbArena, VerbError,
};

use crate::compute::ComputeNode;
use crate::config::{Mode, OnStray, TableId, LEASE_STALLS};
use crate::error::{AbortReason, TxError};
use crate::layout::{TableLayout, ASSOC, MAX_PROBE_BUCKETS};
use crate::log::{
    begin_record, encode_entry, finish_record, invalid_state_word, EntryHead, OpKind,
};
mod commit;
mod invariants;
mod reclaim;
pub use reclaim::Reclaim;

use crate::slot::{make_version, LockWord, SlotImage, StrayLock, FLAG_LIVE, LOCK_OFF, NO_KEY};

/// Per-coordinator counters.
#[derive(Clone, Debug, Default)]
pub struct CoordinatorStats {
    pub committed: u64,
    pub aborted: u64,
    pub aborts_by_reason: HashMap<AbortReason, u64>,
    pub verbs: u64,
    pub locks_stolen: u64,
    /// Round trips spent waiting on locks (`OnStray::Stall`).
    pub stall_retries: u64,
    /// Tombstones returned to the empty state (see `reclaim`).
    pub slots_reclaimed: u64,
    /// Reclamations put off: the slot after the tombstone was not empty.
    pub reclaims_deferred: u64,
    /// Tombstones never queued for reclamation: the queue was full.
    pub reclaims_dropped: u64,
}

impl CoordinatorStats {
    pub fn merge(&mut self, o: &CoordinatorStats) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        for (r, n) in &o.aborts_by_reason {
            *self.aborts_by_reason.entry(*r).or_default() += n;
        }
        self.verbs += o.verbs;
        self.locks_stolen += o.locks_stolen;
        self.stall_retries += o.stall_retries;
        self.slots_reclaimed += o.slots_reclaimed;
        self.reclaims_deferred += o.reclaims_deferred;
        self.reclaims_dropped += o.reclaims_dropped;
    }
}

/// One coordinator: runs one transaction at a time.
pub struct Coordinator<F: Fabric> {
    node: Rc<ComputeNode<F>>,
    id: u16,
    qps: Vec<F::Qp>,
    /// The f+1 memory nodes holding this coordinator's log.
    log_nodes: Rc<[MemNodeId]>,
    /// The commit path's batches in flight (kept for its capacity).
    inflight: commit::Inflight<F>,
    /// Batches, completion vectors and byte buffers reused from one verb
    /// to the next: a warm coordinator's hot path allocates nothing.
    arena: VerbArena,
    /// The last transaction's read, guard and write sets, emptied, for the next.
    spare: Spare<F>,
    /// Unlocks of the last committed transaction, not yet known to have landed.
    unlocks_in_flight: Vec<Pending<F>>,
    /// The lock word those unlocks expect to find.
    unlock_word: LockWord,
    tx_seq: u64,
    version_counter: u64,
    pub stats: CoordinatorStats,
    /// Lock words outwaited under the lock-lease bug (empty otherwise).
    presumed_dead: Vec<u64>,
    /// Tombstones this coordinator's deletes left, to reclaim.
    reclaim_queue: std::collections::VecDeque<reclaim::Retired>,
}

type Pending<F> = <<F as Fabric>::Qp as QueuePair>::Pending;

/// A finished transaction's sets, kept for their capacity.
struct Spare<F: Fabric> {
    reads: Vec<ReadEntry>,
    guards: Vec<Guard>,
    writes: Vec<WriteEntry<F>>,
    undo_pending: Vec<Pending<F>>,
    undo_cursor: Vec<u64>,
}

impl<F: Fabric> Default for Spare<F> {
    fn default() -> Self {
        Spare {
            reads: Vec::new(),
            guards: Vec::new(),
            writes: Vec::new(),
            undo_pending: Vec::new(),
            undo_cursor: Vec::new(),
        }
    }
}

enum LockState<F: Fabric> {
    /// CAS+read posted, completion not yet consumed.
    Pending(Pending<F>),
    Acquired,
    Failed,
}

/// A slot an absent key's outcome depends on, beyond its read entry: every
/// slot its probe passed (see `reclaim.rs`).
struct Guard {
    table: TableId,
    part: u32,
    slot: u32,
    version: u64,
}

/// A slot validation must find unlocked and at this version: (table,
/// partition, slot, version).
type Check = (TableId, u32, u32, u64);

struct ReadEntry {
    table: TableId,
    key: u64,
    part: u32,
    slot: u32,
    version: u64,
    value: Option<Vec<u8>>,
}

struct WriteEntry<F: Fabric> {
    table: TableId,
    key: u64,
    part: u32,
    slot: u32,
    lock: LockState<F>,
    /// Slot as read right after locking.
    image: Option<SlotImage>,
    /// The slot must be empty when locked (insert into a fresh slot).
    expect_empty: bool,
    /// Version seen by an earlier read in this transaction, if any.
    expect_version: Option<u64>,
    /// Whether the key must be live when locked (update/delete of an existing key).
    expect_live: bool,
    final_live: bool,
    new_value: Option<Vec<u8>>,
    /// Locked to update a live key, but the key turned out deleted.
    found_deleted: bool,
    /// Undo entry already posted (only by the logging-without-locking bug).
    undo_posted: bool,
    /// Its undo entry went out (ford, traditional; `post_undo`).
    undo_logged: bool,
    /// Version this write will commit with (0 until chosen). FORD and
    /// traditional modes choose it at lock time so their undo entries carry
    /// it; pandora chooses at commit.
    new_version: u64,
    /// A reclamation: the tombstone becomes empty (version 0).
    reclaim: bool,
    /// An insert into another key's tombstone (`expect_version` is its version).
    reuse: bool,
    /// Locked blind, through the address cache.
    cached: bool,
    /// The commit writes it (set when the commit chooses versions).
    dirty: bool,
    /// A replica took its commit writes.
    landed: bool,
}

impl<F: Fabric> WriteEntry<F> {
    fn orig_live(&self) -> bool {
        self.image.as_ref().map(|i| i.is_live()).unwrap_or(false)
    }
    fn op(&self) -> Option<OpKind> {
        if self.reclaim {
            return Some(OpKind::Reclaim);
        }
        match (self.orig_live(), self.final_live) {
            (true, true) => Some(OpKind::Update),
            (true, false) => Some(OpKind::Delete),
            (false, true) => Some(OpKind::Insert),
            (false, false) => None,
        }
    }
}

/// Where a key lives, as found by probing.
enum Located {
    Found {
        part: u32,
        slot: u32,
        image: SlotImage,
    },
    /// Absent; `slot` is where an insert goes: the first tombstone or empty
    /// slot in probe order (None: probe bound full); `path`, the (slot,
    /// version) of every slot probed, up to the empty one that ended it.
    Absent {
        part: u32,
        slot: Option<u32>,
        image: Option<SlotImage>,
        path: Vec<(u32, u64)>,
    },
}

impl<F: Fabric> ComputeNode<F> {
    /// A coordinator with the given (membership-assigned, unique) id.
    pub fn coordinator(self: &Rc<Self>, id: u16) -> Coordinator<F> {
        Coordinator::new(self.clone(), id)
    }
}

impl<F: Fabric> Coordinator<F> {
    pub(crate) fn new(node: Rc<ComputeNode<F>>, id: u16) -> Self {
        assert!(id != 0, "coordinator id 0 is reserved for the loader");
        assert!(
            (id as u32) < node.layout.log_slots,
            "coordinator id {id} has no log slot of its own (log_slots = {}); raise log_slots",
            node.layout.log_slots
        );
        let qps = (0..node.fabric.memory_nodes())
            .map(|m| node.fabric.queue_pair(m as MemNodeId))
            .collect();
        let log_nodes = node.layout.log_nodes(id).into();
        Coordinator {
            node,
            id,
            qps,
            log_nodes,
            unlocks_in_flight: Vec::new(),
            unlock_word: LockWord::UNLOCKED,
            inflight: Vec::new(),
            arena: VerbArena::default(),
            spare: Spare::default(),
            tx_seq: 0,
            version_counter: 0,
            stats: CoordinatorStats::default(),
            presumed_dead: Vec::new(),
            reclaim_queue: Default::default(),
        }
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn mode(&self) -> Mode {
        self.node.mode
    }

    /// The last committed transaction's unlocks, as a future that completes
    /// once they have landed. A stop-the-world recovery (ford, traditional)
    /// must not start while a live coordinator's unlock is in flight (its lock
    /// would look stray), so runtimes count a transaction as active until
    /// this completes, without delaying the next transaction.
    pub fn take_unlocks(&mut self) -> impl std::future::Future<Output = ()> + 'static {
        let u = std::mem::take(&mut self.unlocks_in_flight);
        let (id, word, asserts) = (self.id, self.unlock_word, self.node.asserts);
        async move {
            for done in join_all(u).await {
                if asserts {
                    invariants::check_unlocks(id, word, &done);
                }
            }
        }
    }

    /// Whether the last committed transaction's unlocks have all landed,
    /// checked without waiting: true at once on a fabric that executes at
    /// post time. Those that have landed are dropped; if this returns false,
    /// `take_unlocks` hands out the rest.
    pub fn unlocks_landed(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let arena = &mut self.arena;
        let (id, word, asserts) = (self.id, self.unlock_word, self.node.asserts);
        self.unlocks_in_flight.retain_mut(|p| {
            match std::future::Future::poll(std::pin::Pin::new(p), &mut cx) {
                std::task::Poll::Ready(done) => {
                    if asserts {
                        invariants::check_unlocks(id, word, &done);
                    }
                    arena.give(done);
                    false
                }
                std::task::Poll::Pending => true,
            }
        });
        self.unlocks_in_flight.is_empty()
    }

    /// Begin a transaction. It must end with `commit` or `abort`; dropping it
    /// mid-way leaves its locks held, exactly as a crash would.
    pub fn begin(&mut self) -> Transaction<'_, F> {
        self.tx_seq += 1;
        let lock_word = match self.node.mode {
            Mode::Pandora => LockWord::owned(self.id, self.tx_seq),
            Mode::Ford | Mode::Traditional => LockWord::ANONYMOUS,
        };
        let mut undo_cursor = std::mem::take(&mut self.spare.undo_cursor);
        undo_cursor.clear();
        undo_cursor.resize(self.qps.len(), 0);
        Transaction {
            seq: self.tx_seq,
            lock_word,
            reads: std::mem::take(&mut self.spare.reads),
            guards: std::mem::take(&mut self.spare.guards),
            writes: std::mem::take(&mut self.spare.writes),
            undo_pending: std::mem::take(&mut self.spare.undo_pending),
            undo_cursor,
            c: self,
            lock_log_cursor: 0,
            logged: false,
            log_full: false,
            finished: false,
        }
    }

    fn post(&mut self, mem: MemNodeId, batch: Batch) -> Pending<F> {
        self.stats.verbs += batch.len() as u64;
        self.qps[mem as usize].post_in(batch, &mut self.arena)
    }

    /// Post `verbs` as one batch taken from the arena.
    fn post_verbs<const N: usize>(&mut self, mem: MemNodeId, verbs: [Verb; N]) -> Pending<F> {
        let batch = self.arena.batch_of(verbs);
        self.post(mem, batch)
    }

    /// The first completion of `done`; the rest go back to the arena.
    fn first_of(&mut self, mut done: Completions) -> Completion {
        let first = std::mem::replace(&mut done[0], Err(VerbError::Unavailable));
        self.arena.give(done);
        first
    }

    fn next_version(&mut self) -> u64 {
        self.version_counter += 1;
        make_version(self.id, self.version_counter)
    }

    /// Whether a lock word blocks us: locked, and (pandora) not owned by a failed coordinator.
    fn blocks(&self, w: LockWord) -> bool {
        match self.node.mode {
            Mode::Pandora => {
                w.is_locked() && !self.node.failed.contains(w.owner()) && !self.outwaited(w)
            }
            Mode::Ford | Mode::Traditional => w.is_locked(),
        }
    }

    /// The lock-lease bug: a lock word this coordinator stalled on for a
    /// lease counts as stray from then on.
    fn outwaited(&self, w: LockWord) -> bool {
        self.presumed_dead.contains(&w.0)
    }

    fn note_wait(&mut self, w: LockWord, stalls: u32) {
        if self.node.bugs.lock_lease
            && self.node.mode == Mode::Pandora
            && stalls >= LEASE_STALLS
            && !self.outwaited(w)
        {
            self.presumed_dead.push(w.0);
        }
    }
}

/// A transaction in progress.
pub struct Transaction<'c, F: Fabric> {
    c: &'c mut Coordinator<F>,
    seq: u64,
    lock_word: LockWord,
    reads: Vec<ReadEntry>,
    guards: Vec<Guard>,
    writes: Vec<WriteEntry<F>>,
    /// FORD/traditional undo-log writes, awaited before the commit writes.
    undo_pending: Vec<Pending<F>>,
    /// Next free offset in this coordinator's undo area, per memory node.
    undo_cursor: Vec<u64>,
    lock_log_cursor: u64,
    /// A log record of this transaction is (or may be) on its log nodes.
    logged: bool,
    /// An undo entry did not fit the undo area (ford/traditional): abort at commit.
    log_full: bool,
    finished: bool,
}

/// Where the primary of a slot is: its first replica not known to be down.
fn primary_of<F: Fabric>(
    node: &ComputeNode<F>,
    t: TableId,
    part: u32,
    slot: u32,
) -> (MemNodeId, u64) {
    let tl = node.layout.table(t);
    let reps = &tl.replicas[part as usize];
    let r = reps
        .iter()
        .position(|&n| !node.memory.is_down(n))
        .unwrap_or(0);
    (reps[r], tl.slot_addr(part, r, slot))
}

fn first_error(results: &[Completion]) -> Option<VerbError> {
    results.iter().find_map(|r| r.as_ref().err().copied())
}

impl<'c, F: Fabric> Transaction<'c, F> {
    pub fn tx_seq(&self) -> u64 {
        self.seq
    }

    /// Under `OnStray::Stall`, whether to wait one more round trip. Only a
    /// transaction that holds no lock (and has no lock CAS in flight) waits:
    /// a waiter then never blocks another waiter, so stalling cannot deadlock
    /// live transactions (two writers each waiting for the other's lock).
    fn may_stall(&mut self, retries: &mut u32) -> bool {
        if self
            .writes
            .iter()
            .any(|w| matches!(w.lock, LockState::Acquired | LockState::Pending(_)))
        {
            return false;
        }
        match self.c.node.on_stray {
            OnStray::Stall { max_retries } if *retries < max_retries => {
                *retries += 1;
                self.c.stats.stall_retries += 1;
                true
            }
            _ => false,
        }
    }

    /// A lock blocks us unless it is our own (pandora words name their owner).
    fn blocks(&self, w: LockWord) -> bool {
        !(self.c.node.mode == Mode::Pandora && w == self.lock_word) && self.c.blocks(w)
    }

    /// Write entry holding (or claiming) this exact slot.
    fn find_write_slot(&self, t: TableId, part: u32, slot: u32) -> Option<usize> {
        self.writes
            .iter()
            .position(|w| w.table == t && w.part == part && w.slot == slot)
    }

    fn table(&self, t: TableId) -> &TableLayout {
        self.c.node.layout.table(t)
    }

    fn check_table(&self, t: TableId) -> Result<(), TxError> {
        assert!(
            (t as usize) < self.c.node.layout.tables.len(),
            "unknown table id {t}"
        );
        if self.finished {
            return Err(TxError::Finished);
        }
        Ok(())
    }

    /// The primary is the first replica not known to be down (docs/DESIGN.md §4.2, §4.6).
    fn primary_addr(&self, t: TableId, part: u32, slot: u32) -> (MemNodeId, u64) {
        primary_of(&self.c.node, t, part, slot)
    }

    /// Find `key`; a fabric error ends the transaction.
    async fn locate(&mut self, t: TableId, key: u64) -> Result<Located, TxError> {
        match self.probe(t, key).await {
            Ok(l) => Ok(l),
            Err(e) => Err(self.fail(e).await),
        }
    }

    /// The cached slot if known, else probe buckets from the key's home.
    async fn probe(&mut self, t: TableId, key: u64) -> Result<Located, VerbError> {
        let (part, home, slot_bytes, spp) = {
            let tl = self.table(t);
            let (p, b) = tl.home(key);
            (p, b, tl.slot_bytes, tl.slots_per_partition())
        };
        if let Some(slot) = self.c.node.cached_slot(t, key) {
            let (mem, addr) = self.primary_addr(t, part, slot);
            let r = self.c.post_verbs(mem, [Verb::read(addr, slot_bytes)]).await;
            let bytes = self.c.first_of(r)?.into_bytes();
            let image = SlotImage::from_bytes(bytes);
            // A key has one slot at most: if the cached one still holds it,
            // that is the key's (a reclaimed or reused slot is re-probed).
            if image.holds(key) {
                return Ok(Located::Found { part, slot, image });
            }
            self.c.arena.give_bytes(image.value);
            self.c.node.evict_slot(t, key);
        }
        let buckets = self.table(t).buckets_per_partition;
        let mut path = Vec::new();
        let mut reusable: Option<(u32, SlotImage)> = None;
        for probe in 0..MAX_PROBE_BUCKETS.min(buckets) {
            let first = ((home + probe) % buckets) * ASSOC;
            let (mem, addr) = self.primary_addr(t, part, first);
            let r = self
                .c
                .post_verbs(mem, [Verb::read(addr, slot_bytes * ASSOC)])
                .await;
            let bytes = self.c.first_of(r)?.into_bytes();
            for i in 0..ASSOC {
                let img = SlotImage::decode(
                    &bytes[(i * slot_bytes) as usize..((i + 1) * slot_bytes) as usize],
                );
                let slot = first + i;
                debug_assert!(slot < spp);
                if img.holds(key) {
                    self.c.node.cache_slot(t, key, slot);
                    return Ok(Located::Found {
                        part,
                        slot,
                        image: img,
                    });
                }
                path.push((slot, img.version));
                // Claimed by one of our own inserts: not free for another key.
                let ours = self.find_write_slot(t, part, slot).is_some();
                // Another key's tombstone is free for reuse, unless reclamation is off.
                let free = img.is_empty() || self.c.node.reclaim;
                if !ours && !img.is_live() && free && reusable.is_none() {
                    reusable = Some((slot, img.clone()));
                }
                if img.is_empty() && !ours {
                    break;
                }
            }
            if path
                .last()
                .is_some_and(|&(s, v)| v == 0 && self.find_write_slot(t, part, s).is_none())
            {
                break;
            }
        }
        let (slot, image) = reusable.map_or((None, None), |(s, i)| (Some(s), Some(i)));
        Ok(Located::Absent {
            part,
            slot,
            image,
            path,
        })
    }

    fn find_write(&self, t: TableId, key: u64) -> Option<usize> {
        self.writes
            .iter()
            .position(|w| w.table == t && w.key == key)
    }

    fn find_read(&self, t: TableId, key: u64) -> Option<usize> {
        self.reads.iter().position(|r| r.table == t && r.key == key)
    }

    /// An absent key depends on every slot its probe passed: an insert of
    /// it lands in one of them, and a delete or reclamation that would let
    /// it in changes one of them first (`reclaim.rs`).
    fn guard_absent(&mut self, table: TableId, part: u32, path: Vec<(u32, u64)>) {
        let keep = if self.c.node.bugs.unguarded_phantoms {
            path.len().saturating_sub(1)
        } else {
            0
        };
        let (probed, before) = (path.len(), self.guards.len());
        let guards = path.into_iter().skip(keep).map(|(slot, version)| Guard {
            table,
            part,
            slot,
            version,
        });
        self.guards.extend(guards);
        self.check_guarded(table, probed, self.guards.len() - before);
    }

    /// Read `key` without locking. `Ok(None)` if it does not exist.
    pub async fn read(&mut self, t: TableId, key: u64) -> Result<Option<Vec<u8>>, TxError> {
        Ok(self.read_ref(t, key).await?.map(<[u8]>::to_vec))
    }

    /// [`Transaction::read`], borrowing the value from the transaction's
    /// read or write set instead of copying it out.
    pub async fn read_ref(&mut self, t: TableId, key: u64) -> Result<Option<&[u8]>, TxError> {
        self.check_table(t)?;
        if let Some(i) = self.find_write(t, key) {
            self.resolve_lock(i).await?;
            return Ok(self.write_value(i));
        }
        if let Some(i) = self.find_read(t, key) {
            return Ok(self.reads[i].value.as_deref());
        }
        let loc = self.locate(t, key).await?;
        let (part, slot, image) = match loc {
            Located::Found { part, slot, image } => (part, slot, Some(image)),
            Located::Absent {
                part,
                slot: Some(slot),
                image,
                path,
            } => {
                self.guard_absent(t, part, path);
                (part, slot, image)
            }
            Located::Absent {
                part,
                slot: None,
                path,
                ..
            } => {
                self.guard_absent(t, part, path);
                return Ok(None);
            }
        };
        let mut image = image.expect("located slot has an image");
        let probed = image.version;
        let mut retries = 0;
        while self.blocks(image.lock) {
            if !self.may_stall(&mut retries) {
                return Err(self.abort_with(AbortReason::ReadLocked).await);
            }
            self.c.note_wait(image.lock, retries);
            let (mem, addr) = self.primary_addr(t, part, slot);
            let bytes = self
                .c
                .post(mem, batch![Verb::read(addr, self.table(t).slot_bytes)])
                .await
                .remove(0);
            match bytes {
                Ok(b) => image = SlotImage::decode(&b.into_bytes()),
                Err(e) => return Err(self.fail(e).await),
            }
        }
        if !image.holds(key) && image.version != probed {
            // Stalled on the free slot of an absent key, which another key's
            // insert then took: it is neither `key` nor its phantom guard.
            return Err(self.abort_with(AbortReason::ReadLocked).await);
        }
        // The entry keeps the read's buffer.
        let version = image.version;
        let value = match image.is_live() {
            true => Some(image.value),
            false => {
                self.c.arena.give_bytes(image.value);
                None
            }
        };
        self.reads.push(ReadEntry {
            table: t,
            key,
            part,
            slot,
            version,
            value,
        });
        Ok(self.reads.last().and_then(|r| r.value.as_deref()))
    }

    /// The value write entry `i` holds now: its new value, else the one it
    /// locked; `None` if the key is (to be) deleted.
    fn write_value(&self, i: usize) -> Option<&[u8]> {
        let w = &self.writes[i];
        if !w.final_live {
            return None;
        }
        let locked = || w.image.as_ref().map(|im| im.value.as_slice());
        w.new_value.as_deref().or_else(locked)
    }

    /// Lock `key` and read it (read-modify-write). `Err(NotFound)` if absent.
    pub async fn read_for_update(&mut self, t: TableId, key: u64) -> Result<Vec<u8>, TxError> {
        self.read_for_update_ref(t, key).await.map(<[u8]>::to_vec)
    }

    /// [`Transaction::read_for_update`], borrowing the value from the write set.
    pub async fn read_for_update_ref(&mut self, t: TableId, key: u64) -> Result<&[u8], TxError> {
        self.check_table(t)?;
        let i = match self.find_write(t, key) {
            Some(i) => i,
            None => self.lock_existing(t, key).await?,
        };
        self.resolve_lock(i).await?;
        self.write_value(i).ok_or(TxError::NotFound)
    }

    /// Overwrite an existing key. The lock is pipelined: a conflict or a
    /// missing key surfaces at the latest from `commit`.
    pub async fn write(&mut self, t: TableId, key: u64, value: &[u8]) -> Result<(), TxError> {
        self.check_table(t)?;
        self.check_value(t, value);
        let i = match self.find_write(t, key) {
            Some(i) => {
                if !self.writes[i].final_live
                    && !matches!(self.writes[i].lock, LockState::Pending(_))
                {
                    return Err(TxError::NotFound);
                }
                i
            }
            None => self.lock_existing(t, key).await?,
        };
        self.set_new_value(i, value);
        Ok(())
    }

    /// Insert a new key. `Err(AlreadyExists)` if it is live.
    pub async fn insert(&mut self, t: TableId, key: u64, value: &[u8]) -> Result<(), TxError> {
        self.check_table(t)?;
        self.check_value(t, value);
        assert_ne!(key, NO_KEY, "key u64::MAX is reserved (slot::NO_KEY)");
        if let Some(i) = self.find_write(t, key) {
            self.resolve_lock(i).await?;
            let w = &mut self.writes[i];
            if w.final_live {
                return Err(TxError::AlreadyExists);
            }
            w.final_live = true;
            w.new_value = Some(value.to_vec());
            return Ok(());
        }
        let loc = self.locate(t, key).await?;
        let (part, slot, expect_empty, tombstone_version, reuse) = match loc {
            Located::Found { part, slot, image } => {
                if image.is_live() {
                    if self.blocks(image.lock) {
                        return Err(self.abort_with(AbortReason::ReadLocked).await);
                    }
                    // The outcome depends on the key existing: validate that at commit.
                    let v = image.version;
                    self.reads.push(ReadEntry {
                        table: t,
                        key,
                        part,
                        slot,
                        version: v,
                        value: Some(image.value),
                    });
                    return Err(TxError::AlreadyExists);
                }
                (part, slot, false, Some(image.version), false)
            }
            Located::Absent {
                part,
                slot: Some(slot),
                image: Some(image),
                path,
            } => {
                self.guard_absent(t, part, path);
                // The first free slot: empty, or another key's tombstone.
                let empty = image.is_empty();
                (part, slot, empty, (!empty).then_some(image.version), !empty)
            }
            Located::Absent { .. } => return Err(self.abort_with(AbortReason::TableFull).await),
        };
        let i = self
            .post_lock(t, key, part, slot, expect_empty, false)
            .await?;
        if tombstone_version.is_some() {
            // Someone may re-insert or reuse it meanwhile: insist on the tombstone we saw.
            self.writes[i].expect_version = tombstone_version;
        }
        self.writes[i].reuse = reuse;
        self.writes[i].final_live = true;
        self.set_new_value(i, value);
        self.resolve_lock(i).await?;
        Ok(())
    }

    /// Delete an existing key. `Err(NotFound)` if absent.
    pub async fn delete(&mut self, t: TableId, key: u64) -> Result<(), TxError> {
        self.check_table(t)?;
        let i = match self.find_write(t, key) {
            Some(i) => i,
            None => self.lock_existing(t, key).await?,
        };
        self.resolve_lock(i).await?;
        let w = &mut self.writes[i];
        if !w.final_live {
            return Err(TxError::NotFound);
        }
        w.final_live = false;
        w.new_value = None;
        Ok(())
    }

    /// Write entry `i` commits `value` (a copy in an arena buffer).
    fn set_new_value(&mut self, i: usize, value: &[u8]) {
        let value = self.c.arena.copy(value);
        if let Some(old) = self.writes[i].new_value.replace(value) {
            self.c.arena.give_bytes(old);
        }
    }

    fn check_value(&self, t: TableId, value: &[u8]) {
        let vs = self.table(t).spec.value_size as usize;
        assert!(
            value.len() <= vs,
            "value of {} bytes exceeds table value size {vs}",
            value.len()
        );
    }

    /// Locate an existing key and post its lock. `NotFound` if it is not live.
    async fn lock_existing(&mut self, t: TableId, key: u64) -> Result<usize, TxError> {
        let (part, slot, cached) = match self.c.node.cached_slot(t, key) {
            // Blind fast path: the slot is known, the lock is posted without a read.
            Some(slot) => (self.table(t).home(key).0, slot, true),
            None => match self.locate(t, key).await? {
                Located::Found { part, slot, image } if image.is_live() => (part, slot, false),
                Located::Found { part, slot, image } => {
                    self.reads.push(ReadEntry {
                        table: t,
                        key,
                        part,
                        slot,
                        version: image.version,
                        value: None,
                    });
                    return Err(TxError::NotFound);
                }
                Located::Absent {
                    part,
                    slot,
                    image,
                    path,
                } => {
                    self.guard_absent(t, part, path);
                    if let (Some(slot), Some(img)) = (slot, image) {
                        self.reads.push(ReadEntry {
                            table: t,
                            key,
                            part,
                            slot,
                            version: img.version,
                            value: None,
                        });
                    }
                    return Err(TxError::NotFound);
                }
            },
        };
        let i = self.post_lock(t, key, part, slot, false, true).await?;
        self.writes[i].cached = cached;
        Ok(i)
    }

    /// Post the lock CAS (and the read behind it) for a new write-set entry.
    async fn post_lock(
        &mut self,
        t: TableId,
        key: u64,
        part: u32,
        slot: u32,
        expect_empty: bool,
        expect_live: bool,
    ) -> Result<usize, TxError> {
        if self.c.node.mode == Mode::Traditional {
            self.write_lock_log(t, key, part, slot).await?;
        }
        let (mem, addr) = self.primary_addr(t, part, slot);
        let slot_bytes = self.table(t).slot_bytes;
        let w = self.lock_word.0;
        let verbs = [
            Verb::cas(addr + LOCK_OFF, 0, w),
            Verb::read(addr, slot_bytes),
        ];
        let pending = self.c.post_verbs(mem, verbs);
        let expect_version = self.find_read(t, key).map(|i| self.reads[i].version);
        self.writes.push(WriteEntry {
            table: t,
            key,
            part,
            slot,
            lock: LockState::Pending(pending),
            image: None,
            expect_empty,
            expect_version,
            expect_live,
            final_live: expect_live,
            new_value: None,
            found_deleted: false,
            new_version: 0,
            undo_posted: false,
            undo_logged: false,
            reclaim: false,
            reuse: false,
            cached: false,
            dirty: false,
            landed: false,
        });
        let i = self.writes.len() - 1;
        if self.c.node.bugs.logging_without_locking && self.c.node.mode != Mode::Pandora {
            // FORD's C2 bug: log the object before its lock is known to be held,
            // with the image read earlier, unprotected by any lock.
            if let Some(r) = self.find_read(t, key) {
                let r = &self.reads[r];
                let image = SlotImage {
                    lock: LockWord::UNLOCKED,
                    version: r.version,
                    key,
                    flags: if r.value.is_some() { FLAG_LIVE } else { 0 },
                    value: r.value.clone().unwrap_or_default(),
                };
                self.writes[i].image = Some(image);
                self.writes[i].new_version = self.c.next_version();
                self.post_undo(i);
                self.writes[i].undo_posted = true;
                self.writes[i].image = None;
            }
        }
        Ok(i)
    }

    /// Consume the lock completion of write entry `i` (stealing a stray lock
    /// if needed). On failure the whole transaction aborts.
    async fn resolve_lock(&mut self, i: usize) -> Result<(), TxError> {
        match self.try_resolve_lock(i).await {
            Ok(()) => Ok(()),
            Err(Ok(reason)) => Err(self.abort_with(reason).await),
            Err(Err(e)) => Err(self.fail(e).await),
        }
    }

    /// `Err(Ok(reason))`: abort for `reason`; `Err(Err(e))`: fabric error.
    async fn try_resolve_lock(&mut self, i: usize) -> Result<(), Result<AbortReason, VerbError>> {
        let pending = match std::mem::replace(&mut self.writes[i].lock, LockState::Failed) {
            LockState::Pending(p) => p,
            LockState::Acquired => {
                self.writes[i].lock = LockState::Acquired;
                return Ok(());
            }
            LockState::Failed => return Err(Ok(AbortReason::LockConflict)),
        };
        let (t, part, slot) = (
            self.writes[i].table,
            self.writes[i].part,
            self.writes[i].slot,
        );
        let (mem, addr) = self.primary_addr(t, part, slot);
        let slot_bytes = self.table(t).slot_bytes;
        let mut results = pending.await;
        // What the last CAS compared against: 0 first, then the stray word we try to steal.
        let mut expected = LockWord::UNLOCKED;
        let mut stalls = 0;
        // Bounded: each retry means another stealer won a stray lock meanwhile.
        let mut attempt = 0;
        loop {
            if let Some(e) = first_error(&results) {
                return Err(Err(e));
            }
            let old = LockWord(results[0].as_ref().unwrap().old_value());
            if old == expected {
                if expected != LockWord::UNLOCKED {
                    self.c.stats.locks_stolen += 1;
                }
                break;
            }
            // PILL: a lock owned by a failed coordinator is stray and may be stolen.
            let owner_failed = StrayLock::of(old, &self.c.node.failed).is_some();
            let stray = self.c.node.mode == Mode::Pandora
                && old.is_locked()
                && (owner_failed || self.c.outwaited(old));
            if stray && attempt < 4 {
                self.check_steal(old, owner_failed);
                attempt += 1;
                expected = old;
            } else if !old.is_locked() && attempt < 4 {
                // Released while we tried to steal it: take it from unlocked.
                attempt += 1;
                expected = LockWord::UNLOCKED;
            } else if !stray && old.is_locked() && self.may_stall(&mut stalls) {
                self.c.note_wait(old, stalls);
                // Wait for the holder (perhaps a failed coordinator not yet
                // recovered): try the CAS from unlocked again.
                expected = LockWord::UNLOCKED;
            } else {
                return Err(Ok(AbortReason::LockConflict));
            }
            let cas = Verb::cas(addr + LOCK_OFF, expected.0, self.lock_word.0);
            let verbs = [cas, Verb::read(addr, slot_bytes)];
            let stale = std::mem::replace(&mut results, self.c.post_verbs(mem, verbs).await);
            self.c.arena.give(stale);
        }
        self.writes[i].lock = LockState::Acquired;
        let read = std::mem::replace(&mut results[1], Err(VerbError::Unavailable));
        self.c.arena.give(results);
        let image = SlotImage::from_bytes(read.unwrap().into_bytes());
        let w = &mut self.writes[i];
        let key = w.key;
        // The key was deleted since we found it (e.g. through the cache): the
        // entry becomes a no-op; a blind write to it fails at commit.
        let gone = w.expect_live && image.holds(key) && !image.is_live();
        let stale = if w.expect_empty {
            !image.is_empty()
        } else if w.reuse {
            image.is_live() || w.expect_version != Some(image.version)
        } else {
            !image.holds(key) || w.expect_version.is_some_and(|v| v != image.version)
        };
        if stale && w.cached {
            // A cached slot reclaimed or reused since: probe next time.
            self.c.node.evict_slot(w.table, key);
        }
        w.image = Some(image);
        if stale {
            return Err(Ok(if w.expect_empty || w.reuse {
                AbortReason::InsertRace
            } else {
                AbortReason::StaleRead
            }));
        }
        if gone {
            w.final_live = false;
            w.found_deleted = true;
        }
        if self.c.node.mode != Mode::Pandora && !self.writes[i].undo_posted {
            // A reclamation's new version is 0: the slot is empty again.
            if !self.writes[i].reclaim {
                self.writes[i].new_version = self.c.next_version();
            }
            // "Missing actions" (FORD's C2 bug): inserts were not undo-logged.
            if !(self.c.node.bugs.missing_insert_undo
                && (self.writes[i].expect_empty || self.writes[i].reuse))
            {
                self.post_undo(i);
            }
        }
        Ok(())
    }

    /// FORD: write the undo image of write entry `i` to every replica of its object.
    fn post_undo(&mut self, i: usize) {
        self.check_undo_under_lock(i);
        // The undo image of a slot that was empty is "no key here": recovery
        // rolls such an insert back to a tombstone.
        let op = if self.writes[i].reclaim {
            OpKind::Reclaim
        } else if self.writes[i].expect_empty || self.writes[i].reuse {
            OpKind::Insert
        } else {
            OpKind::Update
        };
        let mut rec = self.c.arena.empty_bytes();
        self.encode_undo(&mut rec, i, op);
        let half = self.c.node.layout.log_slot_bytes / 2;
        let base = self.c.node.layout.log_addr(self.c.id);
        let (t, part) = (self.writes[i].table, self.writes[i].part);
        for r in 0..self.table(t).replicas[part as usize].len() {
            let n = self.table(t).replicas[part as usize][r];
            let cur = &mut self.undo_cursor[n as usize];
            if *cur + rec.len() as u64 > half {
                // The undo area is full: the transaction aborts at commit
                // (LogFull) rather than overwrite its own earlier entries.
                self.log_full = true;
                continue;
            }
            let addr = base + *cur;
            *cur += rec.len() as u64;
            let write = self.c.arena.write(addr, &rec);
            let p = self.c.post_verbs(n, [write]);
            self.undo_pending.push(p);
        }
        self.c.arena.give_bytes(rec);
        self.writes[i].undo_logged = true;
    }

    /// The one-entry undo record of write entry `i`, encoded into `rec`.
    fn encode_undo(&self, rec: &mut Vec<u8>, i: usize, op: OpKind) {
        begin_record(rec);
        self.encode_write_entry(rec, &self.writes[i], op);
        finish_record(rec, self.c.id, 1, self.seq);
    }

    /// Append write entry `w`'s log entry (`op`, its versions, every
    /// replica's slot address, the locked image as undo) to `rec`.
    fn encode_write_entry(&self, rec: &mut Vec<u8>, w: &WriteEntry<F>, op: OpKind) {
        let tl = self.table(w.table);
        let image = w.image.as_ref().expect("logged entry is locked");
        let head = EntryHead {
            table: w.table,
            op,
            key: w.key,
            old_version: image.version,
            new_version: w.new_version,
            old_flags: image.flags,
        };
        let reps = &tl.replicas[w.part as usize];
        let addrs = reps
            .iter()
            .enumerate()
            .map(|(r, &n)| (n, tl.slot_addr(w.part, r, w.slot)));
        encode_entry(rec, head, addrs, &image.value);
    }

    /// Traditional logging: persist (table, key, slot) on the log nodes before locking.
    async fn write_lock_log(
        &mut self,
        t: TableId,
        key: u64,
        part: u32,
        slot: u32,
    ) -> Result<(), TxError> {
        let mut rec = self.c.arena.empty_bytes();
        let tl = self.table(t);
        let head = EntryHead {
            table: t,
            op: OpKind::Update,
            key,
            old_version: 0,
            new_version: 0,
            old_flags: 0,
        };
        let reps = &tl.replicas[part as usize];
        let addrs = reps
            .iter()
            .enumerate()
            .map(|(r, &n)| (n, tl.slot_addr(part, r, slot)));
        begin_record(&mut rec);
        encode_entry(&mut rec, head, addrs, &[]);
        finish_record(&mut rec, self.c.id, 1, self.seq);
        let half = self.c.node.layout.log_slot_bytes / 2;
        if self.lock_log_cursor + rec.len() as u64 > half {
            // Never overwrite this transaction's own lock log.
            self.c.arena.give_bytes(rec);
            return Err(self.abort_with(AbortReason::LogFull).await);
        }
        let addr = self.c.node.layout.log_addr(self.c.id) + half + self.lock_log_cursor;
        self.lock_log_cursor += rec.len() as u64;
        // Every copy is posted before any is awaited: one round trip.
        let mut pending = std::mem::take(&mut self.c.inflight);
        pending.clear();
        for r in 0..self.c.log_nodes.len() {
            let write = self.c.arena.write(addr, &rec);
            let p = self.c.post_verbs(self.c.log_nodes[r], [write]);
            pending.push((commit::Purpose::Log, p));
        }
        self.c.arena.give_bytes(rec);
        let mut error = None;
        for (_, p) in pending.drain(..) {
            let r = p.await;
            error = error.or(first_error(&r));
            self.c.arena.give(r);
        }
        self.c.inflight = pending;
        match error {
            Some(e) => Err(self.fail(e).await),
            None => Ok(()),
        }
    }

    /// What validation depends on: the read set (but keys this transaction
    /// writes: their locks checked them) and the absent keys' guards.
    fn depends_on(&self) -> impl Iterator<Item = Check> + '_ {
        let reads = self
            .reads
            .iter()
            .filter(|r| self.find_write(r.table, r.key).is_none())
            .map(|r| (r.table, r.part, r.slot, r.version));
        reads.chain(
            self.guards
                .iter()
                .map(|g| (g.table, g.part, g.slot, g.version)),
        )
    }

    /// Slots read (or guarded) that we then locked under another key (an
    /// absent key's empty slot that we claimed for an insert): the lock-time
    /// image must still show what the read saw.
    fn self_locked_reads_changed(&self) -> bool {
        self.depends_on().any(|(t, p, s, version)| {
            self.find_write_slot(t, p, s).is_some_and(|i| {
                self.writes[i]
                    .image
                    .as_ref()
                    .is_some_and(|im| im.version != version)
            })
        })
    }

    /// Post the unlocks of the locks this transaction holds.
    fn release_locks(&mut self, complicit: bool, out: &mut Vec<Pending<F>>) {
        for i in 0..self.writes.len() {
            let held = matches!(self.writes[i].lock, LockState::Acquired);
            if !held && !complicit {
                continue;
            }
            self.check_unlock_held(i);
            let (mem, addr) = self.primary_addr(
                self.writes[i].table,
                self.writes[i].part,
                self.writes[i].slot,
            );
            let verb = if complicit {
                // FORD's bug: reset every write-set lock word, ours or not.
                self.c.arena.write_u64(addr + LOCK_OFF, 0)
            } else {
                Verb::cas(addr + LOCK_OFF, self.lock_word.0, 0)
            };
            out.push(self.c.post_verbs(mem, [verb]));
        }
    }

    /// Abort: wait for in-flight lock CASes (one may still succeed), then
    /// release exactly the locks acquired. Returns the error to hand the caller.
    async fn abort_with(&mut self, reason: AbortReason) -> TxError {
        if self.finished {
            return TxError::Aborted(reason);
        }
        for i in 0..self.writes.len() {
            if let LockState::Pending(_) = self.writes[i].lock {
                let pending = match std::mem::replace(&mut self.writes[i].lock, LockState::Failed) {
                    LockState::Pending(p) => p,
                    _ => unreachable!(),
                };
                let r = pending.await;
                if first_error(&r).is_none()
                    && LockWord(r[0].as_ref().unwrap().old_value()) == LockWord::UNLOCKED
                {
                    self.writes[i].lock = LockState::Acquired;
                }
            }
        }
        if self.logged {
            // Invalidate first: recovery must never act on an aborted record.
            let addr = self.c.node.layout.log_addr(self.c.id);
            let nodes = self.c.log_nodes.clone();
            let p: Vec<_> = nodes
                .iter()
                .map(|&n| {
                    self.c
                        .post(n, batch![Verb::write_u64(addr, invalid_state_word())])
                })
                .collect();
            for r in join_all(p).await {
                if first_error(&r) == Some(VerbError::Revoked) {
                    self.finished = true;
                    return TxError::Revoked;
                }
            }
            self.logged = false;
        }
        let complicit = self.c.node.bugs.complicit_abort;
        let mut releases = Vec::new();
        self.release_locks(complicit, &mut releases);
        let results = join_all(releases).await;
        if self.c.node.asserts {
            for done in &results {
                invariants::check_unlocks(self.c.id, self.lock_word, done);
            }
        }
        self.finished = true;
        // A lock on an unreachable memory node is gone with it.
        if results
            .iter()
            .any(|r| first_error(r) == Some(VerbError::Revoked))
        {
            return TxError::Revoked;
        }
        self.c.stats.aborted += 1;
        *self.c.stats.aborts_by_reason.entry(reason).or_default() += 1;
        TxError::Aborted(reason)
    }

    /// A fabric error ends the transaction. If access was revoked this node
    /// has been declared failed: no cleanup, recovery owns its locks. If a
    /// memory node is unreachable, the transaction has not committed (commit
    /// handles its own writes): abort, releasing what the live nodes hold
    /// (docs/DESIGN.md §4.6: each compute node decides its own transactions).
    async fn fail(&mut self, e: VerbError) -> TxError {
        if e == VerbError::Revoked || self.finished {
            self.finished = true;
            return TxError::from(e);
        }
        self.abort_with(AbortReason::MemoryNodeFailed).await
    }

    /// Abort on the application's request.
    pub async fn abort(mut self) -> TxError {
        let e = self.abort_with(AbortReason::User).await;
        self.give_back_sets();
        e
    }

    /// Hand the read, guard and write sets back to the coordinator, emptied,
    /// for the next transaction (a transaction dropped mid-way keeps them).
    fn give_back_sets(&mut self) {
        self.undo_pending.clear();
        let spare = &mut self.c.spare;
        std::mem::swap(&mut spare.undo_pending, &mut self.undo_pending);
        std::mem::swap(&mut spare.undo_cursor, &mut self.undo_cursor);
        let arena = &mut self.c.arena;
        let values = self.reads.drain(..).filter_map(|r| r.value);
        values.for_each(|v| arena.give_bytes(v));
        for w in self.writes.drain(..) {
            let image = w.image.map(|im| im.value);
            image
                .into_iter()
                .chain(w.new_value)
                .for_each(|v| arena.give_bytes(v));
        }
        self.guards.clear();
        let spare = &mut self.c.spare;
        std::mem::swap(&mut spare.reads, &mut self.reads);
        std::mem::swap(&mut spare.guards, &mut self.guards);
        std::mem::swap(&mut spare.writes, &mut self.writes);
    }
}
