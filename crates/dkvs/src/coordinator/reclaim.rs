//! Slot reclamation: a deleted key's tombstone is reused by later inserts
//! or becomes an empty slot again, so insert/delete workloads run in
//! bounded memory.
//!
//! Keys live in an open-addressing table probed linearly (slot `s`, then
//! `s + 1`, … within the partition); a probe ends at the first empty slot
//! (version 0). Two invariants hold on every primary, and every checker
//! tests them (`check::TableSnapshot::structure_violations`):
//! - **reachability**: every slot between a key's home and its own slot is
//!   occupied (live, or a tombstone);
//! - **one slot per key**: an insert takes the key's own slot if its probe
//!   meets it (live: `AlreadyExists`; a tombstone: reused), else the first
//!   tombstone or empty slot on its path. Recovery rolls an insert back to a
//!   tombstone nobody owns (`slot::NO_KEY`), never to the key's own.
//!
//! **Emptying rule.** A tombstone at slot `A` may become empty only if
//! `A + 1` is empty. Then no key's path crosses `A` (its path would reach
//! `A + 1`, which is empty, or end there, which holds the key): emptying
//! `A` cuts no path. The reclamation is a transaction like any other: it
//! locks `A` (expecting the tombstone's version), validates that `A + 1` is
//! still empty and unlocked, and commits version 0 to every replica of `A`,
//! logged (op `Reclaim`) so that recovery rolls a crashed one back to a
//! tombstone or forward to empty. An insert racing for `A + 1` either holds
//! its lock (the reclamation's validation fails) or has guarded `A` (its
//! own validation fails): OCC's lock-then-validate order serialises them.
//!
//! **Phantom guard.** A transaction that finds key `K` absent guards every
//! slot its probe passed, up to the empty one that ended it (the `guards`
//! of a transaction, validated like reads). For `K` to appear before
//! validation, an insert must put it on that path: into a tombstone or the
//! empty slot (that slot's version changes), or into a slot a delete or a
//! reclamation freed first (that slot's version changed). Versions are
//! unique and never come back, except 0: an empty slot filled and emptied
//! again needs no detection, since validation sees the path as it is at
//! validation time, and an unchanged path means `K` is absent then. A key
//! found (live or as its tombstone) depends on its own slot only: an insert
//! of it must take that slot.
//!
//! **Readers, logs, caches.** A reader of a present key validates its slot's
//! version, which a delete, a reuse and a reclamation all change. A recovery
//! log names slots, but recovery acts only on slots still locked by the
//! logged transaction (`recovery.rs`), and reclaiming or reusing a slot
//! takes that lock. Address caches are hints: a cached slot is re-checked
//! for the key (`holds`), and a slot found reclaimed or reused is evicted.
//!
//! **Scheduling.** A committed delete queues its slot with its coordinator;
//! the runtime drains the queue between transactions ([`Coordinator::
//! reclaim_pending`]). A tombstone that is not a tail is dropped: an insert
//! may reuse it, or it comes back by cascade (reclaiming `A + 1` queues `A`
//! if it is a tombstone). A non-tail whose successor is a tombstone queues
//! that successor, so tails whose deleter crashed (and lost its queue) are
//! found too.

use tandem_fabric::{Fabric, Verb};

use super::{first_error, Coordinator, Guard, Transaction};
use crate::config::TableId;
use crate::error::TxError;
use crate::slot::SlotImage;

/// Tombstones a coordinator keeps queued; more are dropped (and counted).
const RECLAIM_QUEUE_MAX: usize = 1 << 14;
/// Attempts at a tombstone whose reclamation keeps aborting (contention).
const RECLAIM_ATTEMPTS: u8 = 3;

/// A tombstone waiting for reclamation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Retired {
    table: TableId,
    part: u32,
    slot: u32,
    attempts: u8,
}

/// What one reclamation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// The slot is empty now; `prev_tombstone`: the slot before it is a
    /// tombstone, which may now be reclaimed in turn.
    Emptied { prev_tombstone: bool },
    /// The slot after it is not empty; `next_tombstone`: that slot is a
    /// tombstone itself.
    NotTail { next_tombstone: bool },
    /// Not a tombstone (any more): empty, or live (re-inserted).
    NotTombstone,
    /// Aborted by a conflicting transaction; try again later.
    Busy,
}

fn is_tombstone(s: &SlotImage) -> bool {
    !s.is_empty() && !s.is_live()
}

impl<F: Fabric> Coordinator<F> {
    /// Queue the tombstone a committed delete left.
    pub(super) fn retire(&mut self, table: TableId, part: u32, slot: u32) {
        if !self.node.reclaim {
            return;
        }
        self.queue(Retired {
            table,
            part,
            slot,
            attempts: 0,
        });
    }

    fn queue(&mut self, r: Retired) {
        if self.reclaim_queue.len() >= RECLAIM_QUEUE_MAX {
            self.stats.reclaims_dropped += 1;
        } else {
            self.reclaim_queue.push_back(r);
        }
    }

    /// Tombstones queued for reclamation.
    pub fn reclaim_backlog(&self) -> usize {
        self.reclaim_queue.len()
    }

    /// Reclaim up to `budget` queued tombstones, each in a transaction of
    /// its own; how many became empty. Runtimes call it between
    /// transactions. An error means this node can go on no more (revoked)
    /// or a memory node is unreachable: the tombstone stays queued.
    pub async fn reclaim_pending(&mut self, budget: usize) -> Result<usize, TxError> {
        let mut emptied = 0;
        for _ in 0..budget {
            let Some(r) = self.reclaim_queue.pop_front() else {
                break;
            };
            let spp = self.node.layout.table(r.table).slots_per_partition();
            let next = |s: u32, d: u32| Retired {
                slot: (s + d) % spp,
                attempts: 0,
                ..r
            };
            match self.reclaim_slot(r.table, r.part, r.slot).await {
                Ok(Reclaim::Emptied { prev_tombstone }) => {
                    emptied += 1;
                    if prev_tombstone {
                        self.queue(next(r.slot, spp - 1));
                    }
                }
                Ok(Reclaim::NotTail { next_tombstone }) => {
                    self.stats.reclaims_deferred += 1;
                    if next_tombstone {
                        self.queue(next(r.slot, 1));
                    }
                }
                Ok(Reclaim::NotTombstone) => {}
                Ok(Reclaim::Busy) if r.attempts + 1 < RECLAIM_ATTEMPTS => self.queue(Retired {
                    attempts: r.attempts + 1,
                    ..r
                }),
                Ok(Reclaim::Busy) => self.stats.reclaims_dropped += 1,
                Err(e) => {
                    self.reclaim_queue.push_front(r);
                    return Err(e);
                }
            }
        }
        Ok(emptied)
    }

    /// Return the tombstone in `slot` to the empty state, if it is the tail
    /// of its run (see the module docs), in a transaction of its own.
    pub async fn reclaim_slot(
        &mut self,
        table: TableId,
        part: u32,
        slot: u32,
    ) -> Result<Reclaim, TxError> {
        let r = self.begin().reclaim(table, part, slot).await;
        if let Ok(Reclaim::Emptied { .. }) = r {
            self.stats.slots_reclaimed += 1;
        }
        r
    }
}

impl<F: Fabric> Transaction<'_, F> {
    async fn reclaim(mut self, t: TableId, part: u32, slot: u32) -> Result<Reclaim, TxError> {
        let spp = self.table(t).slots_per_partition();
        let (prev, next) = ((slot + spp - 1) % spp, (slot + 1) % spp);
        let [p, a, b] = self.read_slots(t, part, [prev, slot, next]).await?;
        if !is_tombstone(&a) {
            self.finished = true;
            return Ok(Reclaim::NotTombstone);
        }
        if !self.c.node.bugs.reclaim_mid_run {
            if !b.is_empty() {
                self.finished = true;
                return Ok(Reclaim::NotTail {
                    next_tombstone: is_tombstone(&b),
                });
            }
            self.guards.push(Guard {
                table: t,
                part,
                slot: next,
                version: 0,
            });
        }
        let i = self.post_lock(t, a.key, part, slot, false, false).await?;
        let w = &mut self.writes[i];
        w.expect_version = Some(a.version);
        w.reclaim = true;
        w.final_live = false;
        match self.commit().await {
            Ok(()) => Ok(Reclaim::Emptied {
                prev_tombstone: is_tombstone(&p),
            }),
            Err(TxError::Aborted(_)) => Ok(Reclaim::Busy),
            Err(e) => Err(e),
        }
    }

    /// Read whole slots of one partition from its primary, in one batch.
    async fn read_slots<const N: usize>(
        &mut self,
        t: TableId,
        part: u32,
        slots: [u32; N],
    ) -> Result<[SlotImage; N], TxError> {
        let slot_bytes = self.table(t).slot_bytes;
        let (mem, _) = self.primary_addr(t, part, slots[0]);
        let batch = slots
            .iter()
            .map(|&s| Verb::read(self.primary_addr(t, part, s).1, slot_bytes))
            .collect();
        let results = self.c.post(mem, batch).await;
        if let Some(e) = first_error(&results) {
            return Err(self.fail(e).await);
        }
        let images: Vec<SlotImage> = results
            .into_iter()
            .map(|r| SlotImage::decode(&r.expect("checked").into_bytes()))
            .collect();
        Ok(images
            .try_into()
            .unwrap_or_else(|_| unreachable!("one image per slot")))
    }
}
