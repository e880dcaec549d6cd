//! Releases and acquires: multi-writer ABD with Kite's barriers
//! (Kite paper §3.3, §4).
//!
//! A release reads versions from a majority at once (round 1 carries no
//! value, so it overlaps the wait), waits until every earlier write of its
//! session is acknowledged by every replica or timed out, publishes the
//! DM-set of those that missed one to a majority (the slow path), and only
//! then writes its value to a majority.
//!
//! An acquire reads a majority, writes the newest value back if fewer
//! than a majority hold it, and learns from both rounds' replies whether
//! this machine is delinquent; if it is, it bumps the machine epoch before
//! completing (every key goes out of epoch) and only then asks for its
//! bit to be reset.

use tandem_net::{NodeId, SessionId};

use crate::inflight::*;
use crate::node::{Active, Delinquency, KiteNode, Mutant, Out};
use crate::types::*;

impl KiteNode {
    pub fn release(&mut self, now: u64, s: SessionId, key: Key, value: Value, out: &mut Out) {
        let r1 = self.fresh_id();
        let op = Release {
            key,
            value,
            r1,
            r1_done: false,
            max: Version::default(),
            stage: RelStage::Wait,
            dm: (0, 0),
        };
        self.sess(s).op = Some(Active::Release(op));
        self.start_round(now, s, r1, Msg::ReadTs { rid: r1, key }, out);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn release_rep(
        &mut self,
        now: u64,
        s: SessionId,
        mut r: Release,
        rid: u64,
        rep: Rep,
        done: bool,
        out: &mut Out,
    ) {
        match (&r.stage, rep) {
            (RelStage::Wait, Rep::Ts { version }) if rid == r.r1 => {
                r.max = r.max.max(version);
                r.r1_done |= done;
                return self.release_advance(now, s, r, out);
            }
            (RelStage::Slow { rid: x }, _) if rid == *x && done => {
                self.dm_published(r.dm.0, r.dm.1);
                return self.value_round(now, s, r, out);
            }
            (&RelStage::Value { wid, version }, _) if rid == wid && done => {
                return self.reply(s, Reply::Written { version }, out);
            }
            _ => {}
        }
        self.sess(s).op = Some(Active::Release(r));
    }

    /// Go on once round 1 has a majority and the barrier is clear.
    pub fn release_advance(&mut self, now: u64, s: SessionId, r: Release, out: &mut Out) {
        let barrier = self.sess(s).live.is_empty() || self.mutant(Mutant::NoReleaseBarrier);
        if r.stage != RelStage::Wait || !r.r1_done || !barrier {
            self.sess(s).op = Some(Active::Release(r));
            return;
        }
        self.check_barrier(s, "a release");
        let dm = self.dm_to_publish(s);
        if dm == 0 {
            return self.value_round(now, s, r, out);
        }
        self.stats.slow_releases += 1;
        let rid = self.fresh_id();
        let mut r = r;
        r.stage = RelStage::Slow { rid };
        r.dm = (dm, self.dm_stamp());
        self.sess(s).op = Some(Active::Release(r));
        self.start_round(now, s, rid, Msg::SlowRelease { rid, dm }, out);
    }

    fn value_round(&mut self, now: u64, s: SessionId, mut r: Release, out: &mut Out) {
        // The local version too: another session of this node may have
        // released the key since round 1 read it.
        let version = Version(r.max.max(self.key(r.key).version).0 + 1, self.me, 0);
        self.check_fresh_write(r.key, version);
        self.apply(r.key, version, r.value);
        let wid = self.fresh_id();
        let msg = Msg::Write {
            wid,
            key: r.key,
            version,
            value: r.value,
        };
        r.stage = RelStage::Value { wid, version };
        let sess = self.sess(s);
        sess.missing = 0; // published (or there was none)
        sess.op = Some(Active::Release(r));
        self.send_tracked(now, s, wid, msg, true, out);
    }

    /// The own-bit check at the start of an acquire or an RMW (the paper is
    /// silent on it; Kite's public code does it, docs/KITE.md): a slow release
    /// that named this machine reached it, so it is delinquent.
    pub fn own_bit(&mut self) -> bool {
        let me = self.me as usize;
        if self.dv[me] == Delinquency::Zero {
            return false;
        }
        self.dv[me] = Delinquency::Zero;
        true
    }

    /// Every key goes out of epoch. Always a bump, never "unless someone
    /// bumped since this operation began" (a shortcut `if epoch <= e0`): a key
    /// refreshed since that bump may hold a value older than the writes
    /// the new DM-set covers (tests/scenarios.rs).
    pub fn bump_epoch(&mut self) {
        self.epoch += 1;
        self.stats.epoch_bumps += 1;
    }

    pub fn acquire(&mut self, now: u64, s: SessionId, key: Key, out: &mut Out) {
        if self.own_bit() {
            self.bump_epoch();
        }
        let sess = self.sess(s);
        sess.acq_seq += 1;
        let acq = AcqId {
            session: s,
            seq: sess.acq_seq,
        };
        let rid = self.fresh_id();
        let op = Acquire {
            key,
            acq,
            rid,
            write_back: false,
            best: (Version::default(), 0),
            n_best: 0,
            flagged: 0,
            cas_fail: false,
        };
        self.sess(s).op = Some(Active::Acquire(op));
        self.start_round(
            now,
            s,
            rid,
            Msg::Read {
                rid,
                key,
                acq: Some(acq),
            },
            out,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub fn acquire_rep(
        &mut self,
        now: u64,
        s: SessionId,
        mut a: Acquire,
        rid: u64,
        from: NodeId,
        rep: Rep,
        done: bool,
        out: &mut Out,
    ) {
        if rid != a.rid {
            self.sess(s).op = Some(Active::Acquire(a));
            return;
        }
        match rep {
            Rep::Value {
                version,
                value,
                delinquent,
            } => {
                a.flagged |= if delinquent { bit(from) } else { 0 };
                if version > a.best.0 {
                    (a.best, a.n_best) = ((version, value), 1);
                } else if version == a.best.0 {
                    a.n_best += 1;
                }
            }
            Rep::Ack { delinquent } => a.flagged |= if delinquent { bit(from) } else { 0 },
            _ => {}
        }
        if !done {
            self.sess(s).op = Some(Active::Acquire(a));
        } else if !a.write_back && a.n_best < self.quorum() && !self.mutant(Mutant::NoWriteBack) {
            self.write_back(now, s, a, out);
        } else {
            self.acquire_done(s, a, out);
        }
    }

    /// Round 2: make the newest value a majority's before returning it.
    pub fn write_back(&mut self, now: u64, s: SessionId, mut a: Acquire, out: &mut Out) {
        self.stats.write_backs += 1;
        let ((version, value), key, acq) = (a.best, a.key, a.acq);
        self.apply(key, version, value);
        a.rid = self.fresh_id();
        a.write_back = true;
        let rid = a.rid;
        self.sess(s).op = Some(Active::Acquire(a));
        self.start_round(
            now,
            s,
            rid,
            Msg::WriteBack {
                rid,
                key,
                version,
                value,
                acq,
            },
            out,
        );
    }

    fn acquire_done(&mut self, s: SessionId, a: Acquire, out: &mut Out) {
        self.check_acquire_majority(&a);
        let (version, value) = a.best;
        self.apply(a.key, version, value);
        let (own, e0) = (self.own_bit(), self.epoch);
        if own || a.flagged != 0 {
            self.on_delinquent(a.acq, a.flagged, out);
        }
        self.check_delinquency_handled(own || a.flagged != 0, e0, "an acquire");
        let result = match a.cas_fail {
            true => Reply::CasFail {
                value,
                version,
                local: false,
            },
            false => Reply::Value { value, version },
        };
        self.reply(s, result, out);
    }

    /// Told it is delinquent: bump the epoch first, then ask for the bit to
    /// be reset (Lemma 2.6).
    /// The reset-bit goes only to `flagged`, the replicas whose counted
    /// replies told this acquire: a replica its late request reaches after
    /// a newer slow release must keep that bit (tests/scenarios.rs).
    pub fn on_delinquent(&mut self, acq: AcqId, flagged: Mask, out: &mut Out) {
        if self.mutant(Mutant::SkipDelinquencyCheck) {
            return;
        }
        self.bump_epoch();
        let to = if self.mutant(Mutant::ResetAll) {
            self.others()
        } else {
            flagged & self.others()
        };
        self.check_reset_targets(acq, to, flagged);
        self.send_to(to, &Msg::ResetBit { acq }, out);
    }
}
