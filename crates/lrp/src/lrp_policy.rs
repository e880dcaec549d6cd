//! Lazy release persistency (thesis §3.5.1–§3.5.2, Figs. 3.2–3.3): per-core
//! epoch-id, min-epoch and release bit per line, the Release Epoch Table
//! (RET), and the persist engine. Writes stay buffered in L1 until an
//! eviction or another core's request forces them out; only then does the
//! engine order them (I1–I4).

use std::collections::VecDeque;

use crate::machine::Core;
use crate::policy::{Cause, Policy};
use crate::Mutant;

pub struct Lrp {
    epoch: Vec<u64>,
    /// RET: the release-epoch and line of each release not yet persisted, oldest first.
    ret: Vec<VecDeque<(u64, u64)>>,
}

impl Lrp {
    pub fn new(threads: usize) -> Lrp {
        Lrp {
            epoch: vec![1; threads],
            ret: vec![VecDeque::new(); threads],
        }
    }

    /// A release starts a new epoch; on overflow every unpersisted line is
    /// persisted and epochs restart (§3.5.2.1).
    fn next_epoch(&mut self, c: &mut Core, t: usize) {
        self.epoch[t] += 1;
        if self.epoch[t] < 1 << c.cfg.epoch_bits {
            return;
        }
        c.stats.epoch_overflows += 1;
        if !c.mutant(Mutant::EpochWrap) {
            self.engine(c, t, u64::MAX, None);
        }
        self.epoch[t] = 1;
    }

    fn scan_hit(c: &Core, min_epoch: u64, e_rel: u64) -> bool {
        if c.mutant(Mutant::ScanCompare) {
            min_epoch > e_rel
        } else {
            min_epoch < e_rel
        }
    }

    /// Persist one released line after everything the engine must put
    /// before it; returns when it is issued and when it is acknowledged.
    fn persist_release(&mut self, c: &mut Core, t: usize, way: usize, at: u64) -> (u64, u64) {
        let line = c.l1[t][way].line;
        let done = c.persist_at(t, line, at);
        if !c.mutant(Mutant::NoDirectoryBlock) {
            c.blocked_until[line as usize] = done;
        }
        c.clean(t, way);
        self.ret[t].retain(|&(_, l)| l != line);
        (at, done)
    }

    /// The persist engine (Figure 3.2): persist every only-written line of an
    /// epoch before `e_rel` now, wait until all of this core's persists are
    /// acknowledged, then the released lines in epoch order, each after the
    /// one before, then `target`. Returns (target issued, target acknowledged).
    fn engine(&mut self, c: &mut Core, t: usize, e_rel: u64, target: Option<u64>) -> (u64, u64) {
        c.stats.engine_scans += 1;
        let mut releases = Vec::new();
        let dirty: Vec<(usize, crate::machine::Way)> = c.dirty(t).collect();
        for (way, w) in dirty {
            if Some(w.line) == target || !Self::scan_hit(c, w.epoch, e_rel) {
                continue;
            }
            if w.released {
                releases.push((w.epoch, way));
            } else {
                c.persist(t, w.line);
                c.clean(t, way);
            }
        }
        let unordered = c.mutant(Mutant::ReleasesFirst);
        let mut at = if unordered {
            c.now
        } else {
            c.now.max(c.pending[t])
        };
        releases.sort_unstable();
        if c.mutant(Mutant::ReleaseOrder) {
            releases.reverse();
        }
        let mut done = at;
        for (_, way) in releases {
            done = self.persist_release(c, t, way, at).1;
            if !unordered {
                at = done;
            }
        }
        match target.and_then(|line| c.way(t, line)) {
            Some(way) => self.persist_release(c, t, way, at),
            None => (at, done),
        }
    }

    /// Persist the released line in `way` (eviction, downgrade, RET
    /// watermark, a release to it, I3).
    fn persist_released(&mut self, c: &mut Core, t: usize, way: usize) -> (u64, u64) {
        let line = c.l1[t][way].line;
        match self.ret[t].iter().find(|&&(_, l)| l == line) {
            Some(&(e_rel, _)) => self.engine(c, t, e_rel, Some(line)),
            None => {
                // Only reachable with the RET mutant: the release was forgotten.
                let done = c.persist(t, line);
                c.clean(t, way);
                (c.now, done)
            }
        }
    }

    /// Record a release in the RET. At the watermark (counting this one),
    /// the oldest *earlier* release is persisted: this one's value is not
    /// written yet, so it cannot be persisted here.
    fn track_release(&mut self, c: &mut Core, t: usize, line: u64) {
        if c.mutant(Mutant::RetOverflow) {
            self.ret[t].push_back((self.epoch[t], line));
            if self.ret[t].len() > c.cfg.ret_size {
                self.ret[t].pop_front();
            }
            return;
        }
        if self.ret[t].len() + 1 >= c.cfg.ret_watermark {
            if let Some(&(_, oldest)) = self.ret[t].front() {
                c.stats.ret_persists += 1;
                if let Some(way) = c.way(t, oldest) {
                    self.persist_released(c, t, way);
                }
            }
        }
        self.ret[t].push_back((self.epoch[t], line));
    }
}

impl Policy for Lrp {
    fn name(&self) -> &'static str {
        "lrp"
    }

    fn on_write(&mut self, c: &mut Core, t: usize, way: usize, release: bool) {
        let w = c.l1[t][way];
        if !release {
            if !w.dirty {
                let stale = c.mutant(Mutant::NoMinEpoch);
                c.l1[t][way].epoch = if stale {
                    (1 << c.cfg.epoch_bits) - 1
                } else {
                    self.epoch[t]
                };
            }
            return;
        }
        self.next_epoch(c, t);
        // A release never coalesces into a line holding an earlier write.
        let w = c.l1[t][way];
        if w.dirty && c.mutant(Mutant::CoalesceRelease) {
            c.l1[t][way].released = true;
            self.track_release(c, t, w.line);
            return;
        }
        if w.dirty {
            if w.released {
                self.persist_released(c, t, way);
            } else {
                c.persist(t, w.line);
                c.clean(t, way);
            }
        }
        c.l1[t][way].epoch = self.epoch[t];
        c.l1[t][way].released = true;
        self.track_release(c, t, w.line);
        debug_assert!(
            !c.stalled,
            "LRP's write hooks change state: they must not stall (the access would be retried)"
        );
    }

    fn after_acquire(&mut self, c: &mut Core, t: usize, line: u64, rmw: bool) {
        if !rmw || c.mutant(Mutant::NoI3) {
            return;
        }
        // I3: a successful acquire-RMW waits until its write persisted.
        let Some(way) = c.way(t, line).filter(|&w| c.l1[t][w].dirty) else {
            return;
        };
        let done = if c.l1[t][way].released {
            self.persist_released(c, t, way).1
        } else {
            let done = c.persist(t, line);
            c.clean(t, way);
            done
        };
        c.stall(t, done);
    }

    fn write_back(&mut self, c: &mut Core, owner: usize, line: u64, cause: Cause) -> u64 {
        let Some(way) = c.way(owner, line) else {
            return c.now;
        };
        if !c.l1[owner][way].released {
            c.persist(owner, line);
            c.clean(owner, way);
            return c.now;
        }
        let (issued, done) = self.persist_released(c, owner, way);
        match cause {
            // I1: earlier writes persisted; the release itself need not be.
            Cause::Evict => issued,
            // I2: the release itself too.
            Cause::Downgrade(_) if c.mutant(Mutant::DowngradeNoWait) => issued,
            Cause::Downgrade(_) => done,
        }
    }
}
