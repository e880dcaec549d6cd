//! The release-consistency checker for Kite histories: RC_Lin as the Kite
//! paper defines it (Gavrielatos et al., *Kite: Efficient and Available
//! Release Consistency for the Datacenter*, PPoPP 2020, §2.2–2.3), with the
//! axioms i–vi of its supplementary material (§2.2; listed below):
//! [`check_rc`] over [`RcOp`]s ([`crate::rc_history`]).
//!
//! Checks, in this order; the first failure is returned:
//!
//! | # | check | invariant (list below) | [`RcViolationKind`] |
//! |---|---|---|---|
//! | 1 | write identity `(key, version)` is unique; every read returns the initial write or a write with that version *and* value, invoked before the read completed (or a value a pending write could have written) | inv. 1, 2 | `DuplicateVersion`, `ThinAir` |
//! | 2 | per session and key, observed and written versions never go back; a write is newer than all the session saw | inv. 3 (axiom iv) | `SessionOrder` |
//! | 3 | per key, sync ops (release, acquire, RMW, non-local failed CAS) respect real time: what completed before an op was invoked is seen by it (RC_Lin) | inv. 6, L3 | `NotLinearizable` |
//! | 4 | an RMW reads an older version than it writes, no known write lies between the two, no two RMWs read the same version; a failed CAS read a value other than its expected one | inv. 10, 11 (axiom v) | `RmwAtomicity` |
//! | 5 | a counter key (FAA by 1 only) hands out every count once: 0, 1, …, n−1 | inv. 10, 11 | `Counter` |
//! | 6 | happens-before (session order around sync ops, reads-from between sync ops, real time among sync ops) is acyclic, and a relaxed read after an acquire sees every relaxed write that precedes a release that happens before the acquire | inv. 7, 8 (axioms i–iii, vi), L1, L2 | `NotLinearizable`, `Barrier` |
//!
//! Not checked here:
//! - inv. 4 (convergence after quiescence): [`crate::convergence`], on the
//!   replicas' final states, which a history does not hold;
//! - inv. 5 is respected rather than checked: a stale relaxed read passes
//!   unless an hb chain (check 6) demands freshness;
//! - inv. 6 in full (a linearization of each key's sync sub-history as a
//!   register with RMW): only its real-time order against versions
//!   (check 3); a DRF key could be converted for [`crate::linearizable`];
//! - load value for sync writes: check 6 holds a relaxed read against the
//!   *relaxed* writes ordered before it (inv. 8); a key both released and
//!   relaxed-read is not DRF, and same-key order is checks 2 and 3;
//! - inv. 11–12 beyond what versions show (rmw_id exactly-once, per-slot
//!   agreement at all replicas, gap-free log numbers): they need the
//!   replicas' Paxos state;
//! - inv. 9 and 13–17 (release invariant, epochs, slow path, delinquency
//!   bits, DM-set): white-box assertions the simulator makes on message
//!   traces; inv. 18–21 (data structures, liveness): other tests.
//!
//! The invariants, numbered as the checks' messages number them:
//! 1. write serialization: per key, every write (relaxed, release, RMW,
//!    write-back) has its own version, and versions order them;
//! 2. reads-from: a read returns the initial value or one some write wrote;
//! 3. per session and key, observed versions never go back, and a read after
//!    the session's own write returns it or a later one (axiom iv);
//! 4. convergence: after quiescence every replica holds the same value and
//!    version of every key;
//! 5. relaxed reads may be stale in real time, unless an hb chain (8) says
//!    otherwise;
//! 6. releases, acquires and RMWs of a key are linearizable; in particular
//!    an acquire sees every release that completed before it began (RC_Lin,
//!    Kite §2.3);
//! 7. session order around sync ops: what precedes a release, and an acquire
//!    with what follows it, keep their order (axioms i–iii);
//! 8. load value: a read after an acquire that follows (in happens-before) a
//!    release sees every write that preceded the release (axiom vi; the
//!    litmus tests L1 and L2 below);
//! 9. release invariant: no replica applies a release before every earlier
//!    write of its session is acknowledged by all, or by a quorum with the
//!    set of machines that missed one (Kite §4.2);
//! 10. RMW atomicity: each successful RMW reads the value its immediate
//!     predecessor in the key's write order produced; a CAS succeeds iff it
//!     read its expected value (axiom v);
//! 11. exactly once: every RMW commits at most once, and once if reported
//!     complete; per key and log slot at most one committed RMW;
//! 12. Paxos safety: once a slot's value is chosen, every later commit of
//!     that slot carries it;
//! 13–17. the fast/slow path's internals: per-key epochs never exceed the
//!     machine's, which only grows; relaxed accesses to a stale key take the
//!     slow path; a delinquent acquire bumps the epoch before it completes;
//!     delinquency bits change only along their legal transitions; a slow
//!     release names every machine that missed an earlier write;
//! 18–19. the lock-free data structures keep their own invariants (Kite
//!     §7.3);
//! 20–21. liveness with a minority slept or dropped (Kite §7.4, Fig. 8).
//!
//! Axioms (supplementary material §2.2; `so` session order, `hb`
//! happens-before, Rel/Acq a release or acquire, RMWs being both): i.
//! M →so Rel ⇒ M →hb Rel; ii. Acq →so M ⇒ Acq →hb M; iii. Rel →so Acq ⇒
//! Rel →hb Acq; iv. accesses to one key keep session order; v. no write
//! of another session falls between an RMW's read and its write; vi. a read
//! returns the latest write to its key before it in hb.
//!
//! Litmus tests: L1, producer/consumer (Kite §4.1, Fig. 1); L2, a
//! transitive chain of releases and acquires (supplementary Fig. 3); L3,
//! an acquire invoked after a release completed sees it (RC_Lin, Kite §2.3).
//!
//! Operations without a reply (`complete_ns == None`) constrain nothing:
//! they only explain reads (check 1) and waive checks that an unseen write
//! could break (4, 5). A pending RMW *or CAS* may have written any value;
//! a key with a pending CAS is no counter, and a pending RMW on a counter
//! key is taken to be an increment.
//! Happens-before is built with vector clocks over sessions (see
//! `rc_hb.rs`): memory is O(sync ops × sessions).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::rc_hb::HappensBefore;
use crate::rc_history::{Class, RcKind, RcOp, Version};

/// What a passing check counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcReport {
    /// Operations in the history, pending ones included.
    pub ops: usize,
    /// Distinct keys.
    pub keys: usize,
    /// Completed sync operations (release, acquire, RMW, non-local failed
    /// CAS): the nodes of happens-before.
    pub sync_ops: usize,
    /// Completed relaxed reads (reads, local failed CASes) that follow an
    /// acquire in their session: those the barrier check (6) constrained.
    pub reads_checked: usize,
}

/// Which property failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RcViolationKind {
    /// A read returned a (version, value) no write explains, or a write
    /// invoked after the read completed (inv. 2).
    ThinAir,
    /// Two writes of a key share a version, or a write reuses the initial
    /// version (inv. 1).
    DuplicateVersion,
    /// A session saw a key's versions go back, or wrote a version not newer
    /// than one it saw (inv. 3).
    SessionOrder,
    /// Sync ops of a key contradict real time (inv. 6, RC_Lin), or
    /// happens-before has a cycle (inv. 7).
    NotLinearizable,
    /// An RMW was not atomic: it skipped a write, wrote no newer version,
    /// or read the same version as another RMW; or a CAS failed on its
    /// expected value (inv. 10, 11).
    RmwAtomicity,
    /// A counter key's increments did not hand out each count once.
    Counter,
    /// A relaxed read missed a write that happens before it through a
    /// release and an acquire (inv. 8, load value).
    Barrier,
}

/// A failed check: a human message, the key (if one key is at fault) and
/// the smallest piece of history that still shows the failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RcViolation {
    pub kind: RcViolationKind,
    pub key: Option<u64>,
    pub message: String,
    /// The failing piece of history, sorted by invocation time.
    pub ops: Vec<RcOp>,
}

impl fmt::Display for RcViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        if !self.ops.is_empty() {
            write!(f, "\n  failing piece ({} ops):", self.ops.len())?;
        }
        for op in &self.ops {
            write!(f, "\n    {op}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RcViolation {}

/// Check a Kite history for release consistency (RC_Lin): checks 1–6 of
/// the module docs, in order; the first failure is returned.
pub fn check_rc(ops: &[RcOp]) -> Result<RcReport, RcViolation> {
    let h = Hist::new(ops)?;
    h.check_reads_from()?;
    h.check_session_order()?;
    h.check_sync_real_time()?;
    h.check_rmw_atomicity()?;
    h.check_counters()?;
    let hb = HappensBefore::build(&h)?;
    let reads_checked = hb.check_barrier(&h)?;
    let keys = ops
        .iter()
        .map(RcOp::key)
        .collect::<std::collections::HashSet<_>>()
        .len();
    Ok(RcReport {
        ops: ops.len(),
        keys,
        sync_ops: hb.len(),
        reads_checked,
    })
}

/// A release-type op: its write is a release (Release, RMW).
pub(crate) fn is_release(kind: &RcKind) -> bool {
    matches!(kind.class(), Class::Release | Class::Rmw)
}

/// An acquire-type op: its read is an acquire (Acquire, RMW, non-local
/// failed CAS).
pub(crate) fn is_acquire(kind: &RcKind) -> bool {
    matches!(kind.class(), Class::Acquire | Class::Rmw)
}

/// A relaxed read (Read, local failed CAS).
pub(crate) fn is_relaxed_read(kind: &RcKind) -> bool {
    kind.class() == Class::Relaxed && kind.read().is_some()
}

/// What a key's operations without a reply may have written.
#[derive(Default)]
struct Pending {
    /// Value of a pending write or release → its earliest invocation.
    values: HashMap<u64, u64>,
    /// Earliest invocation of a pending RMW or CAS (any value).
    rmw: Option<u64>,
}

/// A history indexed for the checks.
pub(crate) struct Hist<'a> {
    pub(crate) ops: &'a [RcOp],
    /// Dense session → its completed ops in session order (invocation).
    pub(crate) sessions: Vec<Vec<usize>>,
    /// Op → (dense session, index in session order), if completed.
    pub(crate) pos: Vec<Option<(usize, u32)>>,
    /// Completed writes by identity `(key, version)`.
    pub(crate) writes: HashMap<(u64, Version), usize>,
    pending: HashMap<u64, Pending>,
}

impl<'a> Hist<'a> {
    /// Index `ops`; check 1's write identities on the way.
    fn new(ops: &'a [RcOp]) -> Result<Hist<'a>, RcViolation> {
        let mut h = Hist {
            ops,
            sessions: Vec::new(),
            pos: vec![None; ops.len()],
            writes: HashMap::new(),
            pending: HashMap::new(),
        };
        h.index_sessions();
        h.index_pending();
        h.index_writes()?;
        Ok(h)
    }

    fn index_sessions(&mut self) {
        let mut by_session: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, op) in self.ops.iter().enumerate().filter(|(_, o)| !o.is_pending()) {
            by_session.entry(op.session).or_default().push(i);
        }
        for (s, mut list) in by_session.into_values().enumerate() {
            list.sort_by_key(|&i| (self.ops[i].invoke_ns, i));
            for (k, &i) in list.iter().enumerate() {
                self.pos[i] = Some((s, k as u32));
            }
            self.sessions.push(list);
        }
    }

    fn index_pending(&mut self) {
        for op in self.ops.iter().filter(|o| o.is_pending()) {
            let p = self.pending.entry(op.key()).or_default();
            match op.kind {
                RcKind::Write { value, .. } | RcKind::Release { value, .. } => {
                    let t = p.values.entry(value).or_insert(op.invoke_ns);
                    *t = (*t).min(op.invoke_ns);
                }
                RcKind::Rmw { .. } | RcKind::CasFail { .. } => {
                    p.rmw = Some(p.rmw.map_or(op.invoke_ns, |t| t.min(op.invoke_ns)))
                }
                _ => {}
            }
        }
    }

    /// Check 1: one completed write per `(key, version)`, none at the
    /// initial version.
    fn index_writes(&mut self) -> Result<(), RcViolation> {
        for (i, op) in self.ops.iter().enumerate().filter(|(_, o)| !o.is_pending()) {
            let Some((version, _)) = op.kind.written() else {
                continue;
            };
            let key = op.key();
            if version == Version::default() {
                let message =
                    format!("key {key}: a write reuses the initial version {version}: {op}");
                return Err(self.violation(
                    RcViolationKind::DuplicateVersion,
                    Some(key),
                    message,
                    &[i],
                ));
            }
            if let Some(&j) = self.writes.get(&(key, version)) {
                let message =
                    format!("key {key}: two writes have version {version} (kite.md §7 inv. 1)");
                return Err(self.violation(
                    RcViolationKind::DuplicateVersion,
                    Some(key),
                    message,
                    &[j, i],
                ));
            }
            self.writes.insert((key, version), i);
        }
        Ok(())
    }

    /// A violation whose piece is `idx` (sorted by invocation, deduplicated).
    pub(crate) fn violation(
        &self,
        kind: RcViolationKind,
        key: Option<u64>,
        message: String,
        idx: &[usize],
    ) -> RcViolation {
        let mut idx = idx.to_vec();
        idx.sort_by_key(|&i| (self.ops[i].invoke_ns, self.ops[i].session, i));
        idx.dedup();
        RcViolation {
            kind,
            key,
            message,
            ops: idx.iter().map(|&i| self.ops[i].clone()).collect(),
        }
    }

    pub(crate) fn done(&self, i: usize) -> u64 {
        self.ops[i]
            .complete_ns
            .expect("only completed ops are indexed")
    }

    fn completed(&self) -> impl Iterator<Item = (usize, &'a RcOp)> {
        self.ops.iter().enumerate().filter(|(_, o)| !o.is_pending())
    }

    /// Whether a pending op of `key` invoked by `by` may have written `value`.
    fn pending_explains(&self, key: u64, value: u64, by: u64) -> bool {
        let Some(p) = self.pending.get(&key) else {
            return false;
        };
        p.rmw.is_some_and(|t| t <= by) || p.values.get(&value).is_some_and(|&t| t <= by)
    }

    /// Whether `key` has a pending RMW or CAS: an unseen write with an
    /// unknown version and value.
    fn pending_rmw(&self, key: u64) -> bool {
        self.pending.get(&key).is_some_and(|p| p.rmw.is_some())
    }

    /// Check 1: every completed read is explained by the initial write, a
    /// completed write of that version and value invoked before the read
    /// completed, or a pending write (inv. 2).
    fn check_reads_from(&self) -> Result<(), RcViolation> {
        for (i, op) in self.completed() {
            let Some((version, value)) = op.kind.read() else {
                continue;
            };
            if version == Version::default() && value == 0 {
                continue;
            }
            let key = op.key();
            let source = self.writes.get(&(key, version)).copied();
            let why = match source {
                Some(w) if self.ops[w].kind.written() == Some((version, value)) => {
                    if self.ops[w].invoke_ns <= self.done(i) {
                        continue;
                    }
                    "the write of that version was invoked after the read completed".to_string()
                }
                _ if self.pending_explains(key, value, self.done(i)) => continue,
                Some(w) => format!(
                    "the write of that version wrote {}",
                    self.ops[w].kind.written().map_or(0, |x| x.1)
                ),
                None if version == Version::default() => "the initial value is 0".to_string(),
                None => "no completed write has that version and no pending write explains it"
                    .to_string(),
            };
            let message =
                format!("key {key}: {op} read {value} @{version}, but {why} (kite.md §7 inv. 2)");
            let piece: Vec<usize> = source.into_iter().chain([i]).collect();
            return Err(self.violation(RcViolationKind::ThinAir, Some(key), message, &piece));
        }
        Ok(())
    }

    /// Check 2: per session and key, versions read never go below what the
    /// session saw or wrote before, and a write is newer than all of it.
    fn check_session_order(&self) -> Result<(), RcViolation> {
        for list in &self.sessions {
            let mut floor: HashMap<u64, (Version, usize)> = HashMap::new();
            for &i in list {
                let kind = &self.ops[i].kind;
                if let Some(&(v, j)) = floor.get(&kind.key()) {
                    self.admit_in_session(i, j, v)?;
                }
                let top = [kind.read(), kind.written()]
                    .into_iter()
                    .flatten()
                    .map(|x| x.0)
                    .max();
                if let Some(top) = top {
                    let e = floor.entry(kind.key()).or_insert((top, i));
                    if top > e.0 {
                        *e = (top, i);
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether op `i` may follow op `j`, which left its session at version
    /// `floor` of the key.
    fn admit_in_session(&self, i: usize, j: usize, floor: Version) -> Result<(), RcViolation> {
        let op = &self.ops[i];
        let what = match (op.kind.read(), op.kind.written()) {
            (Some((v, _)), _) if v < floor => format!("read version {v}, older than"),
            (_, Some((v, _))) if v <= floor => format!("wrote version {v}, not newer than"),
            _ => return Ok(()),
        };
        let (session, key) = (op.session, op.key());
        let message = format!("session {session}, key {key}: {what} version {floor} the session saw or wrote before (kite.md §7 inv. 3)");
        Err(self.violation(RcViolationKind::SessionOrder, Some(key), message, &[j, i]))
    }

    /// Check 3: per key, a sync op invoked after another completed reads at
    /// least its version and writes a newer one (inv. 6, RC_Lin).
    fn check_sync_real_time(&self) -> Result<(), RcViolation> {
        let mut by_key: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, op) in self
            .completed()
            .filter(|(_, o)| o.kind.class() != Class::Relaxed)
        {
            by_key.entry(op.key()).or_default().push(i);
        }
        for (key, list) in by_key {
            self.check_sync_key(key, list)?;
        }
        Ok(())
    }

    /// Check 3 for one key's sync ops: sweep them by invocation, with the
    /// newest version among those completed before (a prefix maximum).
    fn check_sync_key(&self, key: u64, mut by_invoke: Vec<usize>) -> Result<(), RcViolation> {
        let mut by_complete = by_invoke.clone();
        by_complete.sort_by_key(|&i| (self.done(i), i));
        by_invoke.sort_by_key(|&i| (self.ops[i].invoke_ns, i));
        let mut newest: Option<(Version, usize)> = None;
        let mut next = 0;
        for &y in &by_invoke {
            while next < by_complete.len() && self.done(by_complete[next]) < self.ops[y].invoke_ns {
                let x = by_complete[next];
                let level = level(&self.ops[x].kind);
                match newest {
                    Some((v, _)) if v >= level => {}
                    _ => newest = Some((level, x)),
                }
                next += 1;
            }
            if let Some((level, x)) = newest {
                self.admit_after(key, x, level, y)?;
            }
        }
        Ok(())
    }

    /// Whether sync op `y`, invoked after `x` (at version `level`)
    /// completed, saw and wrote versions that respect it.
    fn admit_after(&self, key: u64, x: usize, level: Version, y: usize) -> Result<(), RcViolation> {
        let kind = &self.ops[y].kind;
        let what = match (kind.read(), kind.written()) {
            (Some((v, _)), _) if v < level => format!("read version {v}, older than"),
            (_, Some((v, _))) if v <= level => format!("wrote version {v}, not newer than"),
            _ => return Ok(()),
        };
        let message =
            format!("key {key}: a sync op invoked after another completed {what} its version {level} (kite.md §7 inv. 6, RC_Lin)");
        Err(self.violation(
            RcViolationKind::NotLinearizable,
            Some(key),
            message,
            &[x, y],
        ))
    }

    /// Check 4: RMW atomicity and exactly-once as versions show them
    /// (inv. 10, 11), and failed CASes that read their expected value.
    fn check_rmw_atomicity(&self) -> Result<(), RcViolation> {
        let known = self.known_versions();
        let mut readers: HashMap<(u64, Version), usize> = HashMap::new();
        for (i, op) in self.completed() {
            match op.kind {
                RcKind::Rmw {
                    key,
                    old_version,
                    version,
                    ..
                } => {
                    self.admit_rmw(i, (old_version, version), &known[&key], &mut readers)?;
                }
                RcKind::CasFail {
                    key,
                    expected,
                    value,
                    ..
                } if expected == value => {
                    let message = format!("key {key}: a CAS failed although it read its expected value {value} (kite.md §7 inv. 10)");
                    return Err(self.violation(
                        RcViolationKind::RmwAtomicity,
                        Some(key),
                        message,
                        &[i],
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Per key, the versions of the initial and the completed writes, sorted.
    fn known_versions(&self) -> HashMap<u64, Vec<Version>> {
        let mut known: HashMap<u64, Vec<Version>> = HashMap::new();
        for op in self.ops {
            known
                .entry(op.key())
                .or_insert_with(|| vec![Version::default()]);
        }
        for &(key, version) in self.writes.keys() {
            known
                .get_mut(&key)
                .expect("every key is listed")
                .push(version);
        }
        known.values_mut().for_each(|v| v.sort_unstable());
        known
    }

    /// Check 4 for RMW `i`, which read `old` and wrote `new`; `known` is
    /// its key's known versions; `readers` the RMW that read each version.
    fn admit_rmw(
        &self,
        i: usize,
        (old, new): (Version, Version),
        known: &[Version],
        readers: &mut HashMap<(u64, Version), usize>,
    ) -> Result<(), RcViolation> {
        let key = self.ops[i].key();
        let fail = |message: String, piece: &[usize]| {
            Err(self.violation(RcViolationKind::RmwAtomicity, Some(key), message, piece))
        };
        if old >= new {
            return fail(format!("key {key}: an RMW wrote version {new}, not newer than the version {old} it read"), &[i]);
        }
        if let Some(&j) = readers.get(&(key, old)) {
            let message = format!("key {key}: two RMWs read the same version {old}: one overwrote the other (kite.md §7 inv. 10, 11)");
            return fail(message, &[j, i]);
        }
        readers.insert((key, old), i);
        let between = known[known.partition_point(|v| *v <= old)..]
            .first()
            .filter(|v| **v < new);
        match between {
            Some(&v) if !self.pending_rmw(key) => {
                let message =
                    format!("key {key}: an RMW read version {old} and wrote {new}, skipping the write of {v} (kite.md §7 inv. 10)");
                fail(message, &[self.writes[&(key, v)], i])
            }
            _ => Ok(()),
        }
    }

    /// Check 5: every counter key's increments read distinct counts, and
    /// exactly 0..n−1 when no increment is pending.
    fn check_counters(&self) -> Result<(), RcViolation> {
        let mut keys: BTreeMap<u64, Counter> = BTreeMap::new();
        for (i, op) in self.ops.iter().enumerate() {
            let c = keys.entry(op.key()).or_insert(Counter {
                counter: true,
                pending: false,
                olds: Vec::new(),
            });
            match (op.kind, op.is_pending()) {
                (RcKind::Write { .. } | RcKind::Release { .. }, _) => c.counter = false,
                // A CAS without a reply may have written any value.
                (RcKind::CasFail { .. }, true) => c.counter = false,
                (RcKind::Rmw { .. }, true) => c.pending = true,
                (RcKind::Rmw { old, new, .. }, false) if old.checked_add(1) == Some(new) => {
                    c.olds.push((old, i))
                }
                (RcKind::Rmw { .. }, false) => c.counter = false,
                _ => {}
            }
        }
        for (key, c) in keys.into_iter().filter(|(_, c)| c.counter) {
            self.check_counter(key, c)?;
        }
        Ok(())
    }

    fn check_counter(&self, key: u64, mut c: Counter) -> Result<(), RcViolation> {
        c.olds.sort_unstable();
        let fail = |message: String, piece: &[usize]| {
            Err(self.violation(RcViolationKind::Counter, Some(key), message, piece))
        };
        if let Some(w) = c.olds.windows(2).find(|w| w[0].0 == w[1].0) {
            return fail(
                format!(
                    "counter key {key}: two increments read the same count {}",
                    w[0].0
                ),
                &[w[0].1, w[1].1],
            );
        }
        if c.pending {
            return Ok(());
        }
        match c
            .olds
            .iter()
            .enumerate()
            .find(|(k, (old, _))| *old != *k as u64)
        {
            Some((k, &(old, i))) => {
                let n = c.olds.len();
                fail(format!("counter key {key}: {n} increments should read 0..{n}, but count {k} is missing (next read {old})"), &[i])
            }
            None => Ok(()),
        }
    }
}

/// A counter candidate: a key written only by FAA-by-1 RMWs.
struct Counter {
    counter: bool,
    /// Whether an RMW on the key got no reply.
    pending: bool,
    /// The completed increments' `old` counts, with their ops.
    olds: Vec<(u64, usize)>,
}

/// The version an op leaves its key at: what it wrote, else what it read.
fn level(kind: &RcKind) -> Version {
    kind.written()
        .or(kind.read())
        .map(|x| x.0)
        .unwrap_or_default()
}
