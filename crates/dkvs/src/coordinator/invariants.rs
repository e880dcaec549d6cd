//! Invariant assertions of the coordinator (TigerBeetle style): what must
//! hold before or after a step of a transaction that the simulation's checks
//! and DART rely on later. The phases call these helpers at the step; each
//! reads the transaction's state, never a planted bug ([`crate::BugSwitches`]),
//! and panics with a message that starts with the invariant's name.
//!
//! They run when the compute node's `asserts` is on
//! ([`crate::StoreConfig::assertions`]; by default on, and off with a
//! planted bug, whose tests exist to show that a checker catches it). Each
//! costs a pass over the write set or less.
//!
//! | invariant | checked in | holds because |
//! |---|---|---|
//! | `locks-before-log` | `commit::post_log` | Pandora logs once every lock is held (its record names the locks recovery compares) |
//! | `locks-before-validation` | `commit::post_validation` | validation reads go out only once every lock is held (OCC's lock-then-validate) |
//! | `validation-unlocked` | `commit::judge_validation` | a validated object was at its version and not locked by a live coordinator |
//! | `undo-after-lock` | `post_undo` | ford/traditional undo images are taken under the object's lock |
//! | `undo-before-write` | `commit::commit_rounds` | ford/traditional: every object the commit writes has its undo entry |
//! | `reclaim-tail` | `commit::commit_rounds` | a tombstone is emptied only while its successor is guarded empty |
//! | `version-fresh` | `commit::commit_rounds` | a commit writes a version minted by this coordinator, never the one it replaces |
//! | `unlock-after-writes` | `commit::commit_rounds` | a commit unlocks only once every object's writes landed on its live replicas |
//! | `unlock-only-held` | `release_locks` | a transaction releases only locks it acquired |
//! | `lock-ownership` | `abort_with`, `Coordinator::take_unlocks`, `Coordinator::unlocks_landed` | a held lock stays ours until we release it: our unlock CAS finds our own word |
//! | `steal-only-failed` | `try_resolve_lock` | PILL: a lock is stolen only from an owner in failed-ids |
//! | `phantom-guard` | `guard_absent` | an absent key guards every slot its probe passed |

use tandem_fabric::{Completion, Fabric, VerbOutput};

use super::{LockState, Transaction};
use crate::config::{Mode, TableId};
use crate::slot::LockWord;

/// `lock-ownership`: the completions of unlock CASes that expected
/// `word` (other completions, errors included, are no evidence).
pub(super) fn check_unlocks(coordinator: u16, word: LockWord, done: &[Completion]) {
    for c in done {
        if let Ok(VerbOutput::Cas(old)) = c {
            assert!(
                *old == word.0,
                "lock-ownership: coordinator {coordinator} unlocks a lock it held ({:#x}) and finds {old:#x}: someone released or stole it meanwhile",
                word.0
            );
        }
    }
}

impl<F: Fabric> Transaction<'_, F> {
    fn asserts(&self) -> bool {
        self.c.node.asserts
    }

    /// `locks-before-log` / `locks-before-validation`: every write-set lock
    /// is held before `phase`.
    pub(super) fn check_locks_held(&self, invariant: &str, phase: &str) {
        if !self.asserts() {
            return;
        }
        for w in &self.writes {
            assert!(
                matches!(w.lock, LockState::Acquired),
                "{invariant}: coordinator {} tx {}: {phase} while the lock of table {} key {} is {}",
                self.c.id,
                self.seq,
                w.table,
                w.key,
                match w.lock {
                    LockState::Pending(_) => "not yet acquired",
                    LockState::Failed => "not acquired",
                    LockState::Acquired => unreachable!(),
                }
            );
        }
    }

    /// `validation-unlocked`: validation passed for a slot whose lock word
    /// is `lock` and version `seen`, the read having seen `version`;
    /// `blocked`: that word is a live coordinator's.
    pub(super) fn check_validated(&self, lock: LockWord, blocked: bool, seen: u64, version: u64) {
        if !self.asserts() {
            return;
        }
        assert!(
            !blocked && seen == version,
            "validation-unlocked: coordinator {} tx {} validates a read of version {version:#x}, now {seen:#x} under lock {:#x} of a live coordinator",
            self.c.id,
            self.seq,
            lock.0
        );
    }

    /// `undo-after-lock`: write entry `i` is locked before its undo image is taken.
    pub(super) fn check_undo_under_lock(&self, i: usize) {
        if !self.asserts() {
            return;
        }
        let w = &self.writes[i];
        assert!(
            matches!(w.lock, LockState::Acquired),
            "undo-after-lock: coordinator {} tx {} logs the undo image of table {} key {} before holding its lock",
            self.c.id,
            self.seq,
            w.table,
            w.key
        );
    }

    /// Before the commit writes: `undo-before-write` (ford, traditional),
    /// `reclaim-tail` and `version-fresh`, over every entry the commit writes.
    pub(super) fn check_before_commit_writes(&self) {
        if !self.asserts() {
            return;
        }
        let (id, seq, pandora) = (self.c.id, self.seq, self.c.node.mode == Mode::Pandora);
        for w in self.writes.iter().filter(|w| w.dirty) {
            assert!(
                pandora || w.undo_logged,
                "undo-before-write: coordinator {id} tx {seq} commits table {} key {} without an undo entry ({:?})",
                w.table,
                w.key,
                w.op()
            );
            if w.reclaim {
                self.check_reclaim_guarded(w.table, w.part, w.slot);
                continue;
            }
            let old = w.image.as_ref().map_or(0, |im| im.version);
            let mine = (w.new_version >> 48) as u16 == id;
            assert!(
                w.new_version != 0 && w.new_version != old && mine,
                "version-fresh: coordinator {id} tx {seq} commits table {} key {} at version {:#x}, replacing {old:#x}",
                w.table,
                w.key,
                w.new_version
            );
        }
    }

    /// `reclaim-tail`: emptying `slot` needs a guard of its successor at version 0.
    fn check_reclaim_guarded(&self, t: TableId, part: u32, slot: u32) {
        let spp = self.table(t).slots_per_partition();
        let next = (slot + 1) % spp;
        assert!(
            self.guards
                .iter()
                .any(|g| (g.table, g.part, g.slot, g.version) == (t, part, next, 0)),
            "reclaim-tail: coordinator {} tx {} empties the tombstone at table {t} partition {part} slot {slot} without guarding slot {next} empty",
            self.c.id,
            self.seq
        );
    }

    /// `unlock-after-writes`: every entry the commit wrote landed.
    pub(super) fn check_writes_landed(&self) {
        if !self.asserts() {
            return;
        }
        for w in self.writes.iter().filter(|w| w.dirty) {
            assert!(
                w.landed,
                "unlock-after-writes: coordinator {} tx {} unlocks table {} key {} before its commit writes landed",
                self.c.id,
                self.seq,
                w.table,
                w.key
            );
        }
    }

    /// `ack-on-live-replicas`: a commit about to be acknowledged missed its
    /// writes only at memory nodes the membership declared failed.
    pub(super) fn check_missed_declared(&self, missed: u64) {
        if missed == 0 || !self.asserts() {
            return;
        }
        let view = &self.c.node.memory;
        let live = (0..64).find(|&m| missed & 1 << m != 0 && !view.is_declared(m));
        assert!(
            live.is_none(),
            "ack-on-live-replicas: coordinator {} tx {} would acknowledge a commit whose write memory node {} missed, which is not declared failed",
            self.c.id,
            self.seq,
            live.unwrap_or(0)
        );
    }

    /// `unlock-only-held`: the lock of write entry `i` is about to be released.
    pub(super) fn check_unlock_held(&self, i: usize) {
        if !self.asserts() {
            return;
        }
        let w = &self.writes[i];
        assert!(
            matches!(w.lock, LockState::Acquired),
            "unlock-only-held: coordinator {} tx {} releases the lock of table {} key {}, which it never acquired",
            self.c.id,
            self.seq,
            w.table,
            w.key
        );
    }

    /// `steal-only-failed`: about to steal lock word `old`; `owner_failed`:
    /// its owner was in failed-ids when the word was judged stray.
    pub(super) fn check_steal(&self, old: LockWord, owner_failed: bool) {
        if !self.asserts() {
            return;
        }
        assert!(
            owner_failed,
            "steal-only-failed: coordinator {} tx {} steals lock {:#x} of coordinator {}, which is not in failed-ids",
            self.c.id,
            self.seq,
            old.0,
            old.owner()
        );
    }

    /// `phantom-guard`: an absent key's probe passed `probed` slots and
    /// `added` guards were taken.
    pub(super) fn check_guarded(&self, t: TableId, probed: usize, added: usize) {
        if !self.asserts() {
            return;
        }
        assert!(
            added == probed,
            "phantom-guard: coordinator {} tx {} guards {added} of the {probed} slots an absent key's probe passed in table {t}",
            self.c.id,
            self.seq
        );
    }
}
