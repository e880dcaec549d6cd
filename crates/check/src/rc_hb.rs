//! Happens-before over a release-consistent history, and the barrier
//! (load value) check on it: check 6 of [`crate::rc`] (its invariants 7 and
//! 8; axioms i–iii and vi of the Kite paper's supplementary material §2.2;
//! litmus L1–L3).
//!
//! Edges, on completed operations:
//! - session order around sync ops: every op before a release or RMW in
//!   its session happens before it; an acquire, RMW or non-local failed
//!   CAS happens before every later op of its session; the sync ops of a
//!   session are ordered among themselves;
//! - reads-from between sync ops: a release or RMW happens before an
//!   acquire, RMW or non-local failed CAS of another session that read its
//!   `(key, version)`;
//! - real time among sync ops: one that completed before another was
//!   invoked happens before it.
//!
//! Only sync ops carry a vector clock over sessions: `clock[s]` is 1 + the
//! session-order index of the latest release or RMW of session `s` that
//! happens before the op (or is it); 0 means none. Relaxed ops reach other
//! sessions only through a later release of their own session and are
//! reached only through an earlier acquire of theirs, so a relaxed read R
//! after acquire A in session j must see every relaxed write of a session
//! i ≠ j whose index is below `A.clock[i] − 1`.
//!
//! The clocks are computed in one pass, in a topological order (Kahn's
//! algorithm), rather than by iterating to a fixed point: reads-from edges
//! may run against invocation order (an acquire invoked before the release
//! it reads), and long chains of them are legal under contention, so a cap
//! on passes would report them as cycles. Real-time edges, O(n²) if listed,
//! go through a chain of time nodes instead: T_k joins the first k sync ops
//! to complete, and an op invoked after exactly k completions depends on
//! T_k. What Kahn's algorithm leaves over lies on or after an hb cycle.

use std::collections::HashMap;

use crate::rc::{is_acquire, is_relaxed_read, is_release, Hist, RcViolation, RcViolationKind};
use crate::rc_history::{Class, RcKind, Version};

/// No position: the op is not a completed sync op.
const NONE: usize = usize::MAX;

/// The happens-before predecessors of a sync op, as positions.
#[derive(Clone, Copy)]
struct Preds {
    /// The previous sync op of its session.
    session: Option<usize>,
    /// The release or RMW of another session it read from.
    rf: Option<usize>,
    /// How many sync ops completed before it was invoked: it depends on
    /// the time node T_rt (none if 0).
    rt: usize,
}

/// Happens-before on the completed sync ops, as vector clocks.
pub(crate) struct HappensBefore {
    /// Op indices, in invocation order; an op's place here is its position.
    sync: Vec<usize>,
    /// Op index → position (`NONE` if not a completed sync op).
    at: Vec<usize>,
    /// Dense session → its sync positions in session order.
    by_session: Vec<Vec<usize>>,
    /// Positions in completion order.
    by_complete: Vec<usize>,
    preds: Vec<Preds>,
    /// Sessions: the length of a clock.
    width: usize,
    /// Position p's clock is `clocks[p * width..(p + 1) * width]`.
    clocks: Vec<u32>,
}

/// The state of Kahn's algorithm over the sync ops and the time nodes.
struct Walk {
    /// Predecessors not yet finished, per position.
    waiting: Vec<u8>,
    ready: Vec<usize>,
    finished: Vec<bool>,
    /// Time nodes T_1..T_front are finished; `time` is T_front's clock.
    front: usize,
    time: Vec<u32>,
    /// Session and reads-from successors, per position.
    succ: Vec<Vec<usize>>,
    /// `after[k]`: positions that depend on T_k.
    after: Vec<Vec<usize>>,
}

impl Walk {
    /// A predecessor of `q` finished: `q` is ready when none is left.
    fn release(&mut self, q: usize) {
        self.waiting[q] -= 1;
        if self.waiting[q] == 0 {
            self.ready.push(q);
        }
    }
}

impl HappensBefore {
    /// Build happens-before; a cycle is a `NotLinearizable` violation.
    pub(crate) fn build(h: &Hist) -> Result<HappensBefore, RcViolation> {
        let mut hb = HappensBefore::index(h);
        hb.propagate(h)?;
        Ok(hb)
    }

    /// Completed sync ops.
    pub(crate) fn len(&self) -> usize {
        self.sync.len()
    }

    fn index(h: &Hist) -> HappensBefore {
        let mut sync: Vec<usize> = (0..h.ops.len())
            .filter(|&i| h.pos[i].is_some() && h.ops[i].kind.class() != Class::Relaxed)
            .collect();
        sync.sort_by_key(|&i| (h.ops[i].invoke_ns, i));
        let mut at = vec![NONE; h.ops.len()];
        for (p, &i) in sync.iter().enumerate() {
            at[i] = p;
        }
        let mut by_complete: Vec<usize> = (0..sync.len()).collect();
        by_complete.sort_by_key(|&p| (h.done(sync[p]), p));
        let by_session = h
            .sessions
            .iter()
            .map(|list| list.iter().map(|&i| at[i]).filter(|&p| p != NONE).collect())
            .collect();
        let width = h.sessions.len();
        let clocks = vec![0; sync.len() * width];
        let mut hb = HappensBefore {
            sync,
            at,
            by_session,
            by_complete,
            preds: Vec::new(),
            width,
            clocks,
        };
        hb.preds = hb.find_preds(h);
        hb
    }

    fn find_preds(&self, h: &Hist) -> Vec<Preds> {
        let completes: Vec<u64> = self
            .by_complete
            .iter()
            .map(|&p| h.done(self.sync[p]))
            .collect();
        let mut preds: Vec<Preds> = self
            .sync
            .iter()
            .map(|&i| Preds {
                session: None,
                rf: self.rf_source(h, i),
                rt: completes.partition_point(|&c| c < h.ops[i].invoke_ns),
            })
            .collect();
        for list in &self.by_session {
            for w in list.windows(2) {
                preds[w[1]].session = Some(w[0]);
            }
        }
        preds
    }

    /// The release or RMW of another session that acquire-type op `i` read.
    fn rf_source(&self, h: &Hist, i: usize) -> Option<usize> {
        let kind = &h.ops[i].kind;
        if !is_acquire(kind) {
            return None;
        }
        let (version, value) = kind.read()?;
        let &w = h.writes.get(&(kind.key(), version))?;
        let source = &h.ops[w];
        let rf = is_release(&source.kind)
            && source.kind.written() == Some((version, value))
            && source.session != h.ops[i].session;
        rf.then_some(self.at[w])
    }

    fn row(&self, p: usize) -> &[u32] {
        &self.clocks[p * self.width..(p + 1) * self.width]
    }

    fn row_mut(&mut self, p: usize) -> &mut [u32] {
        &mut self.clocks[p * self.width..(p + 1) * self.width]
    }

    /// Clock `dst` joins clock `src`.
    fn join_row(&mut self, dst: usize, src: usize) {
        let w = self.width;
        let (d, s) = if dst < src {
            let (a, b) = self.clocks.split_at_mut(src * w);
            (&mut a[dst * w..(dst + 1) * w], &b[..w])
        } else {
            let (a, b) = self.clocks.split_at_mut(dst * w);
            (&mut b[..w], &a[src * w..(src + 1) * w])
        };
        join(d, s);
    }

    /// Kahn's algorithm: each op's clock is final when it leaves `ready`.
    fn propagate(&mut self, h: &Hist) -> Result<(), RcViolation> {
        let mut walk = self.walk();
        let mut finished = 0;
        while let Some(p) = walk.ready.pop() {
            self.stamp(h, p);
            walk.finished[p] = true;
            finished += 1;
            for q in std::mem::take(&mut walk.succ[p]) {
                self.join_row(q, p);
                walk.release(q);
            }
            self.advance_time(&mut walk);
        }
        if finished < self.sync.len() {
            return Err(self.cycle(h, &walk));
        }
        Ok(())
    }

    fn walk(&self) -> Walk {
        let m = self.sync.len();
        let (mut succ, mut after, mut waiting) =
            (vec![Vec::new(); m], vec![Vec::new(); m + 1], vec![0u8; m]);
        for (q, pr) in self.preds.iter().enumerate() {
            for p in [pr.session, pr.rf].into_iter().flatten() {
                succ[p].push(q);
                waiting[q] += 1;
            }
            if pr.rt > 0 {
                after[pr.rt].push(q);
                waiting[q] += 1;
            }
        }
        let ready = (0..m).rev().filter(|&q| waiting[q] == 0).collect();
        Walk {
            waiting,
            ready,
            finished: vec![false; m],
            front: 0,
            time: vec![0; self.width],
            succ,
            after,
        }
    }

    /// A release or RMW is in its own clock.
    fn stamp(&mut self, h: &Hist, p: usize) {
        let i = self.sync[p];
        if is_release(&h.ops[i].kind) {
            let (s, k) = h.pos[i].expect("sync ops are completed");
            let entry = &mut self.row_mut(p)[s];
            *entry = (*entry).max(k + 1);
        }
    }

    /// Finish the time nodes whose ops have all finished, in order, and
    /// hand each to the ops that depend on it.
    fn advance_time(&mut self, walk: &mut Walk) {
        while walk.front < self.sync.len() && walk.finished[self.by_complete[walk.front]] {
            join(&mut walk.time, self.row(self.by_complete[walk.front]));
            walk.front += 1;
            for q in std::mem::take(&mut walk.after[walk.front]) {
                join(self.row_mut(q), &walk.time);
                walk.release(q);
            }
        }
    }

    /// The violation for the ops Kahn's algorithm left: walk unfinished
    /// predecessors back from one of them until an op repeats.
    fn cycle(&self, h: &Hist, walk: &Walk) -> RcViolation {
        let start = walk
            .finished
            .iter()
            .position(|f| !f)
            .expect("an op is left");
        let (mut seen, mut path, mut p) = (HashMap::new(), Vec::new(), start);
        while !seen.contains_key(&p) {
            seen.insert(p, path.len());
            path.push(p);
            p = self.unfinished_pred(p, walk);
        }
        let ring: Vec<usize> = path[seen[&p]..].iter().map(|&q| self.sync[q]).collect();
        let key = h.ops[ring[0]].key();
        let key = ring.iter().all(|&i| h.ops[i].key() == key).then_some(key);
        let message = format!(
            "happens-before has a cycle through {} sync ops (session order, reads-from and real time; kite.md §7 inv. 7, \
             axioms i–iii): no execution order satisfies them",
            ring.len()
        );
        h.violation(RcViolationKind::NotLinearizable, key, message, &ring)
    }

    /// An unfinished predecessor of unfinished `p`: its session or
    /// reads-from predecessor, else the first sync op to complete that has
    /// not finished (`p` waits for a time node that waits for it).
    fn unfinished_pred(&self, p: usize, walk: &Walk) -> usize {
        let pr = self.preds[p];
        let direct = [pr.session, pr.rf]
            .into_iter()
            .flatten()
            .find(|&q| !walk.finished[q]);
        direct.unwrap_or_else(|| {
            debug_assert!(pr.rt > walk.front, "an unfinished op waits for something");
            self.by_complete[walk.front]
        })
    }

    /// Check 6: every relaxed read after an acquire sees each relaxed write
    /// that precedes, in its session, a release that happens before the
    /// acquire. Returns how many reads were checked.
    pub(crate) fn check_barrier(&self, h: &Hist) -> Result<usize, RcViolation> {
        let writes = RelaxedWrites::index(h);
        let mut checked = 0;
        for (j, list) in h.sessions.iter().enumerate() {
            let mut acquire = None;
            for &i in list {
                let kind = &h.ops[i].kind;
                if is_acquire(kind) {
                    acquire = Some(self.at[i]);
                } else if let (Some(a), true) = (acquire, is_relaxed_read(kind)) {
                    checked += 1;
                    self.check_read(h, &writes, j, a, i)?;
                }
            }
        }
        Ok(checked)
    }

    /// Check relaxed read `r` of session `j`, whose last acquire is at
    /// position `a`, against the writes of every other session.
    fn check_read(
        &self,
        h: &Hist,
        writes: &RelaxedWrites,
        j: usize,
        a: usize,
        r: usize,
    ) -> Result<(), RcViolation> {
        let (read, _) = h.ops[r].kind.read().expect("a relaxed read reads");
        let key = h.ops[r].key();
        for &i in writes.writers(key) {
            let bound = self.row(a)[i];
            if i == j || bound == 0 {
                continue;
            }
            match writes.newest_before(i, key, bound - 1) {
                Some((newest, w)) if newest > read => return Err(self.barrier(h, w, a, r)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The violation for relaxed read `r`, after the acquire at position
    /// `a`, that missed relaxed write `w`: the chain W, the first release
    /// after it, the sync ops linking that release to the acquire, R.
    fn barrier(&self, h: &Hist, w: usize, a: usize, r: usize) -> RcViolation {
        let (i, k) = h.pos[w].expect("a completed write");
        let later = &h.sessions[i][k as usize + 1..];
        let release = *later
            .iter()
            .find(|&&x| is_release(&h.ops[x].kind))
            .expect("a release follows the write");
        let bound = h.pos[release].expect("a completed release").1 + 1;
        let mut piece = vec![w, release, r];
        piece.extend(self.trace(h, a, i, bound));
        let (wop, rop) = (&h.ops[w], &h.ops[r]);
        let (wv, rv) = (
            wop.kind.written().expect("a write").0,
            rop.kind.read().expect("a read").0,
        );
        let message = format!(
            "key {}: session {} read version {rv} after an acquire, but session {} wrote version {wv} before a release \
             that happens before that acquire (release barrier / load value, kite.md §7 inv. 8)",
            rop.key(),
            rop.session,
            wop.session
        );
        h.violation(RcViolationKind::Barrier, Some(rop.key()), message, &piece)
    }

    /// The sync ops (op indices) through which a release of session `s` at
    /// index ≥ `bound − 1` reaches position `from`, back to that release.
    fn trace(&self, h: &Hist, from: usize, s: usize, bound: u32) -> Vec<usize> {
        let (mut out, mut p) = (Vec::new(), from);
        for _ in 0..=self.sync.len() {
            out.push(self.sync[p]);
            if self.is_origin(h, p, s, bound) {
                break;
            }
            let first = self.first_in_session(h, p, s, bound);
            p = match (first != p)
                .then_some(first)
                .or_else(|| self.carrier(p, s, bound))
            {
                Some(q) => q,
                None => break,
            };
        }
        out
    }

    /// Whether position `p` is a release of session `s` at index ≥ `bound − 1`.
    fn is_origin(&self, h: &Hist, p: usize, s: usize, bound: u32) -> bool {
        let i = self.sync[p];
        let (si, k) = h.pos[i].expect("sync ops are completed");
        si == s && k + 1 >= bound && is_release(&h.ops[i].kind)
    }

    /// The first sync op of `p`'s session whose clock has `s` at `bound`
    /// (clocks only grow along a session).
    fn first_in_session(&self, h: &Hist, p: usize, s: usize, bound: u32) -> usize {
        let (sp, _) = h.pos[self.sync[p]].expect("sync ops are completed");
        let list = &self.by_session[sp];
        list[list.partition_point(|&q| self.row(q)[s] < bound)]
    }

    /// The reads-from or real-time predecessor of `p` that brought `s` at
    /// `bound` into its clock (the earliest to complete, for real time).
    fn carrier(&self, p: usize, s: usize, bound: u32) -> Option<usize> {
        let pr = self.preds[p];
        let has = |q: &usize| self.row(*q)[s] >= bound;
        pr.rf
            .filter(has)
            .or_else(|| self.by_complete[..pr.rt].iter().copied().find(has))
    }
}

/// `d` joins `s`, entry by entry.
fn join(d: &mut [u32], s: &[u32]) {
    for (x, y) in d.iter_mut().zip(s) {
        *x = (*x).max(*y);
    }
}

/// One relaxed write of a session to a key, with a prefix maximum.
struct Written {
    /// Its index in session order.
    index: u32,
    /// The newest version the session wrote to the key up to this write.
    newest: Version,
    /// The op that wrote `newest`.
    by: usize,
}

/// Relaxed writes per (session, key), for the barrier check.
struct RelaxedWrites {
    /// (dense session, key) → its writes in session order.
    by: HashMap<(usize, u64), Vec<Written>>,
    /// Key → the sessions that wrote it, in order.
    writers: HashMap<u64, Vec<usize>>,
}

impl RelaxedWrites {
    fn index(h: &Hist) -> RelaxedWrites {
        let mut rw = RelaxedWrites {
            by: HashMap::new(),
            writers: HashMap::new(),
        };
        for (s, list) in h.sessions.iter().enumerate() {
            for &i in list {
                let RcKind::Write { key, version, .. } = h.ops[i].kind else {
                    continue;
                };
                let k = h.pos[i].expect("a completed write").1;
                let writes = rw.by.entry((s, key)).or_insert_with(|| {
                    rw.writers.entry(key).or_default().push(s);
                    Vec::new()
                });
                let (newest, by) = match writes.last() {
                    Some(w) if w.newest >= version => (w.newest, w.by),
                    _ => (version, i),
                };
                writes.push(Written {
                    index: k,
                    newest,
                    by,
                });
            }
        }
        rw
    }

    fn writers(&self, key: u64) -> &[usize] {
        self.writers.get(&key).map_or(&[], Vec::as_slice)
    }

    /// The newest version session `s` wrote to `key` at an index below
    /// `bound`, with its op.
    fn newest_before(&self, s: usize, key: u64, bound: u32) -> Option<(Version, usize)> {
        let writes = self.by.get(&(s, key))?;
        let n = writes.partition_point(|w| w.index < bound);
        n.checked_sub(1).map(|n| (writes[n].newest, writes[n].by))
    }
}
