//! Invariant assertions of log recovery (TigerBeetle style): what must hold
//! at each step of the recovery of docs/DESIGN.md §4.5 (Pandora's Cor2,
//! Cor3, idempotence) that the crash tests' checks rely on later. Each reads
//! what recovery read and did, never a planted bug ([`RecoveryBugs`]), and
//! panics with a message that starts with the invariant's name.
//!
//! They run when [`RecoveryCoordinator::assertions`] says so (by default on,
//! and off with a planted bug, whose tests show that a checker catches it).
//!
//! | invariant | checked in | holds because |
//! |---|---|---|
//! | `rollback-unacknowledged` | `recover`, `finish_baseline` | Cor3: a transaction whose every replica holds the new version may have been acknowledged; it is never rolled back |
//! | `rollback-all-locked` | `recover` | a logged transaction that released one of its locks was unlocking after its commit: it is rolled forward, not back |
//! | `rollback-ours` | `finish_baseline` | ford/traditional: an object is restored only while it carries this transaction's old or new version |
//! | `quiesced-nothing-superseded` | `recover` | while every compute node holds, a record touching a lost replica is left alone only if another transaction has written one of its objects since (the lock words that would tell were lost) |
//! | `rollback-fresh-version` | `recover`, `finish_baseline` | an undo image goes back under a fresh version, never the old or the new one |
//! | `restore-before-unlock` | `recover`, `finish_baseline` | every live replica of a rolled-back object is restored before any lock is released |
//! | `decide-every-record` | `recover` | Cor2: every valid log record read is decided before the logs are invalidated |
//! | `invalidate-last` | `invalidate_logs` | logs are invalidated only after the restores and unlocks (so a re-run finds the same records) |

use std::collections::BTreeSet;

use tandem_fabric::{Fabric, MemNodeId};

use super::{all_new, Decision, RecoveryBugs, RecoveryCoordinator};
use crate::log::{LogEntry, LogRecord};
use crate::slot::LockWord;

/// How far [`RecoveryCoordinator::recover`] got (for `invalidate-last`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    #[default]
    Idle,
    /// Reading logs, deciding, restoring, unlocking.
    Recovering,
    /// Every decided record's restores and unlocks are done.
    Unlocked,
}

impl<F: Fabric> RecoveryCoordinator<F> {
    pub(super) fn asserts(&self) -> bool {
        self.assertions
            .unwrap_or(self.bugs == RecoveryBugs::default())
    }

    /// The rules a decision `d` of `rec` must keep, given the live replicas'
    /// `versions` and, if it was decided by them, the primaries' lock words;
    /// `held_degraded`: every compute node holds and a replica of `rec` is down.
    ///
    /// `quiesced-nothing-superseded` is checked only then: elsewhere a
    /// record is left alone on the lock words alone (a finished
    /// transaction's, or one aborted after logging: its abort does not
    /// invalidate the record, see below), and a record whose words were lost
    /// with a memory node is what it guards against. Only a version written
    /// since by someone else (neither the entry's old nor its new one) shows
    /// the transaction no longer holds its objects.
    ///
    /// (An abort after logging does not invalidate the record: `Transaction::
    /// logged` is never set, though docs/DESIGN.md §4.4 says a logged
    /// transaction invalidates its log first. Harmless for the decision
    /// rule, whose locks are released by then; a stronger form of this
    /// invariant, "left alone means finished", found it.)
    pub(super) fn check_decision(
        &self,
        rec: &LogRecord,
        d: Decision,
        versions: &[Vec<u64>],
        primary_locks: Option<&[u64]>,
        held_degraded: bool,
    ) {
        if !self.asserts() {
            return;
        }
        let (c, s) = (rec.coordinator, rec.tx_seq);
        match d {
            Decision::RollBack => {
                assert!(
                    !all_new(rec, versions),
                    "rollback-unacknowledged: coordinator {c} tx {s} is rolled back although every replica holds its new versions (it may have been acknowledged)"
                );
                let w = LockWord::owned(c, s).0;
                if let Some(locks) = primary_locks {
                    assert!(
                        locks.iter().all(|&l| l == w),
                        "rollback-all-locked: coordinator {c} tx {s} is rolled back although it released some of its locks ({locks:x?}): it was unlocking after its commit"
                    );
                }
            }
            Decision::Nothing if held_degraded => {
                let superseded =
                    rec.entries.iter().zip(versions).any(|(e, vs)| {
                        vs.iter().any(|&v| v != e.old_version && v != e.new_version)
                    });
                assert!(
                    superseded,
                    "quiesced-nothing-superseded: coordinator {c} tx {s} is left alone while a replica is down, but no object of it was written since (live versions {versions:x?}, old {:x?}, new {:x?})",
                    rec.entries.iter().map(|e| e.old_version).collect::<Vec<_>>(),
                    rec.entries.iter().map(|e| e.new_version).collect::<Vec<_>>()
                );
            }
            Decision::Nothing | Decision::RollForward => {}
        }
    }

    /// `rollback-ours` (ford, traditional): a rolled-back transaction's
    /// `entries`, their primaries being at `versions[i][0]`.
    pub(super) fn check_baseline_rollback(&self, entries: &[&LogEntry], versions: &[Vec<u64>]) {
        if !self.asserts() {
            return;
        }
        for (e, v) in entries.iter().zip(versions) {
            assert!(
                v[0] == e.old_version || v[0] == e.new_version,
                "rollback-ours: table {} key {} is restored to an undo image of version {:#x} while it carries {:#x}, a version of someone else's",
                e.table,
                e.key,
                e.old_version,
                v[0]
            );
        }
        let all = entries
            .iter()
            .zip(versions)
            .all(|(e, v)| v.iter().all(|&x| x == e.new_version));
        assert!(
            !all,
            "rollback-unacknowledged: a transaction is rolled back although every replica holds its new versions (it may have been acknowledged)"
        );
    }

    /// `rollback-fresh-version`: `e` is restored under `version`.
    pub(super) fn check_fresh_rollback(&self, e: &LogEntry, version: u64) {
        if !self.asserts() {
            return;
        }
        assert!(
            version != e.old_version && version != e.new_version && version != 0,
            "rollback-fresh-version: table {} key {} is rolled back under version {version:#x} (old {:#x}, new {:#x})",
            e.table,
            e.key,
            e.old_version,
            e.new_version
        );
    }

    /// `restore-before-unlock`: every live replica of each rolled-back
    /// entry is among the `restored` (node, slot address) pairs, sorted.
    pub(super) fn check_restored<'a>(
        &self,
        rolled_back: impl Iterator<Item = &'a LogEntry>,
        restored: &[(MemNodeId, u64)],
    ) {
        if !self.asserts() {
            return;
        }
        for e in rolled_back {
            for r in self.live_iter(e) {
                assert!(
                    restored.binary_search(&r).is_ok(),
                    "restore-before-unlock: table {} key {}: the replica at node {} address {:#x} is not restored before the locks are released",
                    e.table,
                    e.key,
                    r.0,
                    r.1
                );
            }
        }
    }

    /// `restore-before-unlock` (ford, traditional): every replica of
    /// `rolled_back` is among the `restored`.
    pub(super) fn check_replicas_restored(
        &self,
        rolled_back: &[(MemNodeId, u64)],
        restored: &BTreeSet<(MemNodeId, u64)>,
    ) {
        if !self.asserts() {
            return;
        }
        for r in rolled_back {
            assert!(
                restored.contains(r),
                "restore-before-unlock: the replica at node {} address {:#x} of a rolled-back object is not restored before the locks are released",
                r.0,
                r.1
            );
        }
    }

    /// `decide-every-record`: `found` valid records were read, `decided` decided.
    pub(super) fn check_all_decided(&self, found: usize, decided: usize) {
        if !self.asserts() {
            return;
        }
        assert!(
            decided == found,
            "decide-every-record: {found} valid log records read, {decided} decided before the logs are invalidated"
        );
    }

    /// `invalidate-last`: the logs are about to be invalidated.
    pub(super) fn check_invalidation_last(&self) {
        if !self.asserts() {
            return;
        }
        assert!(
            self.phase == Phase::Unlocked,
            "invalidate-last: logs invalidated in phase {:?}, before every decided record was restored and unlocked",
            self.phase
        );
    }
}
