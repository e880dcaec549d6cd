//! Sequential consistency in zxid order, for histories of a leader-based
//! store (the ZAB baseline): [`check_zxid_sc`] over [`RcOp`]s
//! ([`crate::rc_history`]).
//!
//! The store's leader gives every write the next zxid; each node applies
//! the committed writes in zxid order and serves reads from its own copy.
//! So the zxid order of the writes, with every read placed after the write
//! it read, must be a total order that keeps each session's program order.
//! A read may be stale in real time (its node lags), but never older than
//! what its own session has already observed.
//!
//! Conventions of the history:
//! - a read or an acquire is a local read, a write or a release a write
//!   through the leader; any other kind (an RMW, a failed CAS) is a
//!   violation, as the store runs none;
//! - the zxid is the first field of [`Version`]; the other two are ignored;
//! - a key never written reads as value 0 at version 0;
//! - a session is one sequential client on one node: its operations,
//!   ordered by invocation time, are its program order;
//! - an operation without a reply (`complete_ns == None`) has no version
//!   and constrains nothing; a pending write only explains reads of its
//!   (key, value).
//!
//! Checks, in this order; the first failure is returned:
//! 1. every operation is a read or a write ([`ZxidViolationKind::NotReadWrite`]);
//! 2. completed writes have distinct, non-zero zxids
//!    ([`ZxidViolationKind::DuplicateZxid`]);
//! 3. no thin air: a completed read at version v > 0 returns the value the
//!    completed write of its key with zxid v wrote; if no completed write
//!    has zxid v, a pending write of its key must have written that value;
//!    a read at version 0 returns 0 ([`ZxidViolationKind::ThinAir`]);
//! 4. per session, with P the largest zxid the session has observed so far
//!    (the version of each completed read, the zxid of each completed
//!    write): a read of key k at version v is stale if a completed write of
//!    k has a zxid in (v, P]; a write must get a zxid above P, or zxid
//!    order would put it before something its session did earlier
//!    ([`ZxidViolationKind::Stale`]). This covers read-your-writes and
//!    monotonic reads.
//!
//! The cost is O(n log n): the sessions are sorted once, and each read
//! looks for a write in (v, P] by binary search in its key's sorted zxids.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::rc_history::{RcKind, RcOp, Version};

/// What a passing check counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZxidStats {
    /// Completed reads (reads and acquires).
    pub reads: usize,
    /// Completed writes (writes and releases).
    pub writes: usize,
    /// Operations without a reply.
    pub pending: usize,
    /// Distinct session names, pending operations included.
    pub sessions: usize,
}

/// Which rule failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZxidViolationKind {
    /// Two completed writes share a zxid, or a write has zxid 0.
    DuplicateZxid,
    /// A read returned a value no write of its key at its version explains.
    ThinAir,
    /// A session went back in zxid order: a read missed a write its session
    /// had already observed or made, or a write got a zxid below one its
    /// session had already observed.
    Stale,
    /// An operation other than a read or a write.
    NotReadWrite,
}

/// A failed check: which rule, the key at fault, a human message naming
/// the operations involved, and those operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZxidViolation {
    pub kind: ZxidViolationKind,
    pub key: u64,
    pub message: String,
    /// The operations involved, in the order the message names them.
    pub ops: Vec<RcOp>,
}

impl fmt::Display for ZxidViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ZxidViolation {}

/// Check a leader-based store's history for sequential consistency in zxid
/// order: the four checks of the module docs, in order; the first failure
/// is returned.
pub fn check_zxid_sc(ops: &[RcOp]) -> Result<ZxidStats, ZxidViolation> {
    let accesses = ops.iter().map(access).collect::<Result<Vec<_>, _>>()?;
    let index = Index::build(ops, accesses)?;
    index.check_reads_from()?;
    index.check_sessions()?;
    Ok(index.stats())
}

/// One operation as a read or a write of `key`; `zxid` is its version's
/// first field (meaningless when the operation is pending).
#[derive(Clone, Copy, Debug)]
struct Access {
    write: bool,
    key: u64,
    value: u64,
    zxid: u64,
}

/// The zxid a version stands for.
fn zxid(v: Version) -> u64 {
    u64::from(v.0)
}

/// Classify `op`, or fail it as neither a read nor a write.
fn access(op: &RcOp) -> Result<Access, ZxidViolation> {
    let (write, key, value, version) = match op.kind {
        RcKind::Read {
            key,
            value,
            version,
        }
        | RcKind::Acquire {
            key,
            value,
            version,
        } => (false, key, value, version),
        RcKind::Write {
            key,
            value,
            version,
        }
        | RcKind::Release {
            key,
            value,
            version,
        } => (true, key, value, version),
        RcKind::Rmw { .. } | RcKind::CasFail { .. } => {
            let message = format!("{op}: not a read or a write");
            return Err(violation(
                ZxidViolationKind::NotReadWrite,
                op,
                message,
                [op],
            ));
        }
    };
    Ok(Access {
        write,
        key,
        value,
        zxid: zxid(version),
    })
}

/// Build a violation of `kind` at `op`'s key.
fn violation<'a>(
    kind: ZxidViolationKind,
    op: &RcOp,
    message: String,
    ops: impl IntoIterator<Item = &'a RcOp>,
) -> ZxidViolation {
    ZxidViolation {
        kind,
        key: op.key(),
        message,
        ops: ops.into_iter().cloned().collect(),
    }
}

/// A history indexed for the checks.
struct Index<'a> {
    ops: &'a [RcOp],
    acc: Vec<Access>,
    /// Completed write by zxid.
    by_zxid: HashMap<u64, usize>,
    /// Per key, its completed writes as (zxid, op), sorted by zxid.
    by_key: HashMap<u64, Vec<(u64, usize)>>,
    /// (key, value) of every pending write.
    pending_writes: HashSet<(u64, u64)>,
    /// Per session, its completed operations in program order.
    sessions: BTreeMap<u64, Vec<usize>>,
}

impl<'a> Index<'a> {
    /// Index `ops`, failing on a zero or repeated zxid (check 2).
    fn build(ops: &'a [RcOp], acc: Vec<Access>) -> Result<Index<'a>, ZxidViolation> {
        let mut ix = Index {
            ops,
            acc,
            by_zxid: HashMap::new(),
            by_key: HashMap::new(),
            pending_writes: HashSet::new(),
            sessions: ops.iter().map(|o| (o.session, Vec::new())).collect(),
        };
        for i in 0..ops.len() {
            ix.add(i)?;
        }
        for list in ix.by_key.values_mut() {
            list.sort_unstable();
        }
        for list in ix.sessions.values_mut() {
            list.sort_by_key(|&i| (ops[i].invoke_ns, i));
        }
        Ok(ix)
    }

    /// Add operation `i` to the index.
    fn add(&mut self, i: usize) -> Result<(), ZxidViolation> {
        let (op, a) = (&self.ops[i], self.acc[i]);
        if op.is_pending() {
            if a.write {
                self.pending_writes.insert((a.key, a.value));
            }
            return Ok(());
        }
        self.sessions.entry(op.session).or_default().push(i);
        if !a.write {
            return Ok(());
        }
        if a.zxid == 0 {
            let message = format!("a completed write has zxid 0, the initial version: {op}");
            return Err(violation(
                ZxidViolationKind::DuplicateZxid,
                op,
                message,
                [op],
            ));
        }
        if let Some(&j) = self.by_zxid.get(&a.zxid) {
            let first = &self.ops[j];
            let message = format!(
                "two completed writes share zxid {}: {first} and {op}",
                a.zxid
            );
            return Err(violation(
                ZxidViolationKind::DuplicateZxid,
                op,
                message,
                [first, op],
            ));
        }
        self.by_zxid.insert(a.zxid, i);
        self.by_key.entry(a.key).or_default().push((a.zxid, i));
        Ok(())
    }

    /// Check 3: every completed read is explained by a write of its key at
    /// its version (or by a pending write of its key and value).
    fn check_reads_from(&self) -> Result<(), ZxidViolation> {
        for (i, op) in self.ops.iter().enumerate() {
            let a = self.acc[i];
            if a.write || op.is_pending() {
                continue;
            }
            if let Some(why) = self.unexplained(a) {
                let message = format!("{op}: {why}");
                let mut involved = vec![op];
                involved.extend(self.by_zxid.get(&a.zxid).map(|&w| &self.ops[w]));
                return Err(violation(ZxidViolationKind::ThinAir, op, message, involved));
            }
        }
        Ok(())
    }

    /// Why the read `a` is not explained by any write, if it is not.
    fn unexplained(&self, a: Access) -> Option<String> {
        if a.zxid == 0 {
            return (a.value != 0)
                .then(|| format!("version 0 is the initial value 0, not {}", a.value));
        }
        match self.by_zxid.get(&a.zxid) {
            Some(&w) => {
                let (wa, wop) = (self.acc[w], &self.ops[w]);
                if wa.key != a.key {
                    Some(format!("zxid {} wrote another key: {wop}", a.zxid))
                } else if wa.value != a.value {
                    Some(format!("zxid {} wrote another value: {wop}", a.zxid))
                } else {
                    None
                }
            }
            None if self.pending_writes.contains(&(a.key, a.value)) => None,
            None => Some(format!(
                "no completed write has zxid {} and no pending write of k{} wrote {}",
                a.zxid, a.key, a.value
            )),
        }
    }

    /// Check 4: no session goes back in zxid order.
    fn check_sessions(&self) -> Result<(), ZxidViolation> {
        for list in self.sessions.values() {
            self.check_session(list)?;
        }
        Ok(())
    }

    /// Check 4 for one session's completed operations, in program order.
    /// `seen` is the largest zxid observed so far and the operation that
    /// observed it.
    fn check_session(&self, list: &[usize]) -> Result<(), ZxidViolation> {
        let mut seen: Option<(u64, usize)> = None;
        for &i in list {
            let a = self.acc[i];
            if let Some((p, by)) = seen {
                if a.write && a.zxid <= p {
                    return Err(self.write_behind(i, p, by));
                }
                if !a.write {
                    if let Some(w) = self.write_between(a.key, a.zxid, p) {
                        return Err(self.stale_read(i, p, by, w));
                    }
                }
            }
            if !matches!(seen, Some((p, _)) if p >= a.zxid) {
                seen = Some((a.zxid, i));
            }
        }
        Ok(())
    }

    /// A completed write of `key` with a zxid in (`after`, `upto`], if any.
    fn write_between(&self, key: u64, after: u64, upto: u64) -> Option<usize> {
        let list = self.by_key.get(&key)?;
        let first = list.partition_point(|&(z, _)| z <= after);
        list.get(first)
            .filter(|&&(z, _)| z <= upto)
            .map(|&(_, w)| w)
    }

    /// The violation of read `i`, which missed write `w` although its
    /// session had observed zxid `p` at operation `by`.
    fn stale_read(&self, i: usize, p: u64, by: usize, w: usize) -> ZxidViolation {
        let (read, seen, write) = (&self.ops[i], &self.ops[by], &self.ops[w]);
        let message = format!(
            "stale read {read}: its session had already observed zxid {p} at {seen}, \
             so it must see {write}, which zxid {} puts after the version read",
            self.acc[w].zxid
        );
        violation(ZxidViolationKind::Stale, read, message, [read, seen, write])
    }

    /// The violation of write `i`, whose zxid is not above zxid `p` that its
    /// session had observed earlier at operation `by`.
    fn write_behind(&self, i: usize, p: u64, by: usize) -> ZxidViolation {
        let (write, seen) = (&self.ops[i], &self.ops[by]);
        let message = format!(
            "write {write} got zxid {}, but its session had already observed zxid {p} \
             at {seen}: zxid order puts the write first, against program order",
            self.acc[i].zxid
        );
        violation(ZxidViolationKind::Stale, write, message, [write, seen])
    }

    /// The counts of a passing history.
    fn stats(&self) -> ZxidStats {
        let pending = self.ops.iter().filter(|o| o.is_pending()).count();
        ZxidStats {
            reads: self.ops.len() - pending - self.by_zxid.len(),
            writes: self.by_zxid.len(),
            pending,
            sessions: self.sessions.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed read of `key` on `node` returning `value` at zxid `z`.
    fn rd(session: u64, node: u16, key: u64, value: u64, z: u32, t: u64) -> RcOp {
        let version = Version(z, 0, 0);
        op(
            session,
            node,
            RcKind::Read {
                key,
                value,
                version,
            },
            t,
        )
    }

    /// A completed write of `value` to `key` on `node`, given zxid `z`.
    fn wr(session: u64, node: u16, key: u64, value: u64, z: u32, t: u64) -> RcOp {
        let version = Version(z, 0, 0);
        op(
            session,
            node,
            RcKind::Write {
                key,
                value,
                version,
            },
            t,
        )
    }

    /// A write without a reply: its version is unset.
    fn pending_wr(session: u64, node: u16, key: u64, value: u64, t: u64) -> RcOp {
        let version = Version::default();
        RcOp {
            complete_ns: None,
            ..op(
                session,
                node,
                RcKind::Write {
                    key,
                    value,
                    version,
                },
                t,
            )
        }
    }

    /// An operation invoked at `t` that completed at `t + 5`.
    fn op(session: u64, node: u16, kind: RcKind, t: u64) -> RcOp {
        RcOp {
            session,
            node,
            kind,
            invoke_ns: t,
            complete_ns: Some(t + 5),
        }
    }

    /// The kind of the violation `ops` shows; panics if it passes.
    fn fails(ops: &[RcOp]) -> ZxidViolationKind {
        match check_zxid_sc(ops) {
            Ok(s) => panic!("a violating history passed: {s:?}"),
            Err(v) => {
                assert!(!v.message.is_empty() && !v.ops.is_empty(), "{v}");
                v.kind
            }
        }
    }

    /// Two nodes: node 1 lags behind node 0, and its session reads old
    /// values in real time, which sequential consistency allows.
    #[test]
    fn a_correct_interleaving_passes() {
        let ops = vec![
            wr(1, 0, 1, 10, 1, 0),
            wr(1, 0, 2, 20, 2, 10),
            rd(1, 0, 1, 10, 1, 20),
            rd(2, 1, 2, 0, 0, 30),
            rd(2, 1, 1, 10, 1, 40),
            wr(2, 1, 1, 11, 3, 50),
            rd(2, 1, 2, 20, 2, 60),
            RcOp {
                kind: RcKind::Acquire {
                    key: 1,
                    value: 11,
                    version: Version(3, 0, 0),
                },
                ..rd(1, 0, 0, 0, 0, 70)
            },
        ];
        let stats = check_zxid_sc(&ops).expect("a correct interleaving");
        let want = ZxidStats {
            reads: 5,
            writes: 3,
            pending: 0,
            sessions: 2,
        };
        assert_eq!(stats, want);
    }

    /// Program order is invocation order, whatever order the history
    /// lists the operations in.
    #[test]
    fn program_order_is_invocation_order() {
        let ops = vec![rd(1, 0, 1, 10, 1, 20), wr(1, 0, 1, 10, 1, 0)];
        assert!(check_zxid_sc(&ops).is_ok());
        let ops = vec![rd(1, 0, 1, 0, 0, 20), wr(1, 0, 1, 10, 1, 0)];
        assert_eq!(fails(&ops), ZxidViolationKind::Stale);
    }

    /// A session that saw zxid 3 (key 2) reads key 1 at zxid 1, although
    /// zxid 2 wrote key 1: a monotonic-reads violation.
    #[test]
    fn a_stale_read_after_a_newer_zxid_fails() {
        let mut ops = vec![
            wr(1, 0, 1, 10, 1, 0),
            wr(1, 0, 1, 11, 2, 10),
            wr(1, 0, 2, 20, 3, 20),
            rd(2, 1, 2, 20, 3, 30),
            rd(2, 1, 1, 11, 2, 40),
        ];
        assert!(check_zxid_sc(&ops).is_ok());
        ops[4] = rd(2, 1, 1, 10, 1, 40);
        assert_eq!(fails(&ops), ZxidViolationKind::Stale);
        let v = check_zxid_sc(&ops).unwrap_err();
        assert_eq!(v.key, 1);
        assert_eq!(
            v.ops.len(),
            3,
            "the read, what the session saw, the write missed: {v}"
        );
    }

    /// A session writes key 1 and then reads it back at an older version,
    /// or at the initial version.
    #[test]
    fn broken_read_your_writes_fails() {
        let ok = vec![
            wr(1, 0, 1, 10, 1, 0),
            wr(2, 1, 1, 11, 2, 10),
            rd(2, 1, 1, 11, 2, 20),
        ];
        assert!(check_zxid_sc(&ok).is_ok());
        let mut older = ok.clone();
        older[2] = rd(2, 1, 1, 10, 1, 20);
        assert_eq!(fails(&older), ZxidViolationKind::Stale);
        let initial = vec![wr(1, 0, 1, 10, 1, 0), rd(1, 0, 1, 0, 0, 10)];
        assert_eq!(fails(&initial), ZxidViolationKind::Stale);
    }

    /// A session that saw zxid 2 then writes at zxid 1: zxid order would
    /// put the write before the read.
    #[test]
    fn a_write_ordered_before_what_its_session_saw_fails() {
        let ops = vec![
            wr(1, 0, 1, 10, 1, 0),
            wr(1, 0, 2, 20, 2, 0),
            rd(2, 1, 2, 20, 2, 10),
            wr(2, 1, 3, 30, 3, 20),
        ];
        assert!(check_zxid_sc(&ops).is_ok());
        let mut swapped = ops.clone();
        swapped[0] = wr(1, 0, 1, 10, 3, 0);
        swapped[3] = wr(2, 1, 3, 30, 1, 20);
        assert_eq!(fails(&swapped), ZxidViolationKind::Stale);
    }

    /// Values and versions nobody wrote: a wrong value at a known zxid, a
    /// zxid of another key, an unknown zxid, a non-zero initial value.
    #[test]
    fn a_thin_air_value_fails() {
        let w = [wr(1, 0, 1, 10, 1, 0), wr(1, 0, 2, 20, 2, 10)];
        for bad in [
            rd(2, 1, 1, 99, 1, 30),
            rd(2, 1, 1, 20, 2, 30),
            rd(2, 1, 1, 10, 7, 30),
            rd(2, 1, 1, 10, 0, 30),
        ] {
            let mut ops = w.to_vec();
            ops.push(bad);
            assert_eq!(fails(&ops), ZxidViolationKind::ThinAir);
        }
    }

    /// Two completed writes with one zxid, and a write at the initial zxid.
    #[test]
    fn a_duplicate_or_zero_zxid_fails() {
        let ok = vec![wr(1, 0, 1, 10, 1, 0), wr(2, 1, 2, 20, 2, 10)];
        assert!(check_zxid_sc(&ok).is_ok());
        let dup = vec![wr(1, 0, 1, 10, 1, 0), wr(2, 1, 2, 20, 1, 10)];
        assert_eq!(fails(&dup), ZxidViolationKind::DuplicateZxid);
        let zero = vec![wr(1, 0, 1, 10, 0, 0)];
        assert_eq!(fails(&zero), ZxidViolationKind::DuplicateZxid);
    }

    /// A pending write's value may be read, at a zxid no completed write
    /// has, but only for its key and value.
    #[test]
    fn a_read_of_a_pending_writes_value_passes() {
        let ops = vec![
            wr(1, 0, 1, 10, 1, 0),
            pending_wr(1, 0, 1, 77, 10),
            rd(2, 1, 1, 77, 2, 20),
        ];
        assert!(check_zxid_sc(&ops).is_ok());
        let mut other_value = ops.clone();
        other_value[2] = rd(2, 1, 1, 78, 2, 20);
        assert_eq!(fails(&other_value), ZxidViolationKind::ThinAir);
        let mut other_key = ops.clone();
        other_key[2] = rd(2, 1, 2, 77, 2, 20);
        assert_eq!(fails(&other_key), ZxidViolationKind::ThinAir);
    }

    /// Pending operations have default versions and do not count: not as
    /// zxid 0 or duplicates, not as reads, and not in a session's zxids
    /// (had the write at zxid 9 completed, the later read of key 1 at zxid
    /// 1 would have missed the write at zxid 5).
    #[test]
    fn pending_ops_are_ignored() {
        let mut garbage_read = rd(1, 0, 1, 555, 9, 20);
        garbage_read.complete_ns = None;
        let mut seen_9 = wr(1, 0, 2, 20, 9, 30);
        seen_9.complete_ns = None;
        let ops = vec![
            wr(1, 0, 1, 10, 1, 0),
            pending_wr(1, 0, 1, 11, 10),
            pending_wr(2, 1, 1, 12, 10),
            garbage_read,
            seen_9,
            rd(1, 0, 1, 10, 1, 40),
            wr(2, 1, 1, 15, 5, 50),
        ];
        let stats = check_zxid_sc(&ops).expect("pending ops constrain nothing");
        let want = ZxidStats {
            reads: 1,
            writes: 2,
            pending: 4,
            sessions: 2,
        };
        assert_eq!(stats, want);
        let mut read_done = ops.clone();
        read_done[3].complete_ns = Some(25);
        assert_eq!(fails(&read_done), ZxidViolationKind::ThinAir);
        let mut write_done = ops.clone();
        write_done[4].complete_ns = Some(35);
        assert_eq!(fails(&write_done), ZxidViolationKind::Stale);
    }

    /// RMWs and failed CASes are not operations of this store.
    #[test]
    fn an_rmw_is_not_a_read_or_a_write() {
        let rmw = RcKind::Rmw {
            key: 1,
            old: 0,
            old_version: Version(0, 0, 0),
            new: 1,
            version: Version(1, 0, 0),
        };
        assert_eq!(fails(&[op(1, 0, rmw, 0)]), ZxidViolationKind::NotReadWrite);
        let cas = RcKind::CasFail {
            key: 1,
            expected: 3,
            value: 0,
            version: Version(0, 0, 0),
            local: true,
        };
        assert_eq!(fails(&[op(1, 0, cas, 0)]), ZxidViolationKind::NotReadWrite);
    }

    /// A simulated correct store: the leader appends writes, each node
    /// applies a prefix of the log and reads it, a writer's node applies up
    /// to its write before replying. The history passes; making one read
    /// return its key's previous write, when the session had seen the
    /// newer one, fails it.
    #[test]
    fn a_simulated_store_passes_and_a_planted_stale_read_fails() {
        let ops = simulate(20_000, 4, 8);
        let stats = check_zxid_sc(&ops).expect("a correct simulated store");
        assert_eq!(stats.reads + stats.writes, ops.len());
        let (i, older) = plant_stale_read(&ops).expect("some read can go stale");
        let mut bad = ops.clone();
        bad[i] = older;
        assert_eq!(fails(&bad), ZxidViolationKind::Stale);
    }

    /// `n` operations of a store with `nodes` nodes (one session each) and
    /// `keys` keys, from a fixed pseudo-random sequence.
    fn simulate(n: usize, nodes: usize, keys: u64) -> Vec<RcOp> {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let mut log: Vec<(u64, u64)> = Vec::new();
        let mut applied = vec![0usize; nodes];
        let mut state = vec![HashMap::<u64, (u64, u32)>::new(); nodes];
        let mut ops = Vec::with_capacity(n);
        for t in 0..n as u64 {
            let (node, key, write) = (next(nodes as u64) as usize, next(keys), next(3) == 0);
            if write {
                log.push((key, t + 1));
            }
            let upto = if write || next(3) == 0 {
                log.len()
            } else {
                applied[node]
            };
            for (z, &(k, value)) in log.iter().enumerate().take(upto).skip(applied[node]) {
                state[node].insert(k, (value, z as u32 + 1));
            }
            applied[node] = upto;
            let (s, at) = (node as u64, node as u16);
            ops.push(if write {
                wr(s, at, key, t + 1, upto as u32, t * 10)
            } else {
                let (value, z) = state[node].get(&key).copied().unwrap_or((0, 0));
                rd(s, at, key, value, z, t * 10)
            });
        }
        ops
    }

    /// A read whose session had already observed its version, and the same
    /// read returning the key's write before it instead.
    fn plant_stale_read(ops: &[RcOp]) -> Option<(usize, RcOp)> {
        let mut by_key: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
        for o in ops {
            if let RcKind::Write {
                key,
                value,
                version,
            } = o.kind
            {
                by_key.entry(key).or_default().push((version.0, value));
            }
        }
        let mut seen: HashMap<u64, u32> = HashMap::new();
        for (i, o) in ops.iter().enumerate() {
            let RcKind::Read { key, version, .. } = o.kind else {
                continue;
            };
            let prior = seen.get(&o.session).copied().unwrap_or(0);
            let list = by_key.get(&key).map_or(&[][..], Vec::as_slice);
            let at = list.iter().position(|&(z, _)| z == version.0);
            if let Some(at @ 1..) = at.filter(|_| version.0 <= prior) {
                let (z, value) = list[at - 1];
                return Some((i, rd(o.session, o.node, key, value, z, o.invoke_ns)));
            }
            seen.insert(o.session, prior.max(version.0));
        }
        None
    }
}
