//! Invariant assertions of a Kite node (TigerBeetle style): what must hold
//! before or after a state transition that the release-consistency checker
//! relies on later. The handlers call these helpers at the transition; each
//! reads the node's state, never the planted bug (`KiteConfig::mutant`), and
//! panics with a message that starts with the invariant's name.
//!
//! They run when `KiteNode::asserts` is on (`KiteConfig::assertions`; by
//! default on, and off with a planted bug, whose tests exist to show that a
//! checker catches it). Each costs O(1) or a scan of at most 32 machines.
//!
//! | invariant | checked in | holds because |
//! |---|---|---|
//! | `release-barrier` | `sync::release_advance`, `paxos::rmw_advance` | a release (an RMW's accept) goes on only when every earlier tracked write of its session is acked by every replica or timed out |
//! | `delinquent-acquire` | `sync::acquire_done`, `paxos::after_propose` | an acquire told it is delinquent bumps the machine epoch before it completes (every key off the fast path) |
//! | `own-bit` | the same | an acquire (and an RMW's propose) ends with this machine's own delinquency bit consumed |
//! | `paxos-promise` | `replica::on_propose`, `replica::on_accept` | an acceptor never promises or accepts below its promised ballot |
//! | `paxos-commit-agreement` | `replica::apply_commit` | a committed slot never changes value |
//! | `paxos-helper-value` | `paxos::rmw_advance` | a helper's accept carries the accepted value it adopts, unchanged (its DM-set included) |
//! | `rmw-commit-majority` | `paxos::rmw_complete` | an RMW completes only from its commit stage, once a majority has the commit |
//! | `acquire-majority` | `sync::acquire_done` | an acquire returns a value a majority holds (read by a majority, or written back) |
//! | `fast-path-epoch` | `relaxed::relaxed_read`, `relaxed::relaxed_write` | a relaxed access is served locally only for a key in the machine epoch |
//! | `reset-bit-targets` | `sync::on_delinquent` | a reset-bit goes only to replicas whose counted replies flagged the acquire |
//! | `dm-cover` | `node::dm_to_publish` | a machine leaves a DM-set only for a publication sent after the write it missed was done |
//! | `version-monotonic` | `node::apply` | a replica's version of a key never goes backwards |
//! | `write-version-fresh` | `relaxed::write_out`, `sync::value_round` | a write this node issues is newer than what its replica holds |

use tandem_net::SessionId;

use crate::inflight::{Acquire, Rmw, Stage};
use crate::node::{Delinquency, KiteNode};
use crate::types::*;

impl KiteNode {
    /// `release-barrier`: `what` goes on only with no earlier write of
    /// session `s` still tracked.
    pub(crate) fn check_barrier(&mut self, s: SessionId, what: &str) {
        if !self.asserts {
            return;
        }
        let me = self.me;
        let live = &self.sess(s).live;
        assert!(
            live.is_empty(),
            "release-barrier: node {me} session {s}: {what} goes on while {} earlier writes ({live:?}) are neither acked by every replica nor timed out",
            live.len()
        );
    }

    /// `delinquent-acquire` and `own-bit`, after an acquire (or an RMW's
    /// propose) handled what it learned: told delinquent, it bumped the
    /// epoch past `e0`; its own bit is consumed either way.
    pub(crate) fn check_delinquency_handled(&self, told: bool, e0: u64, what: &str) {
        if !self.asserts {
            return;
        }
        let me = self.me;
        assert!(
            !told || self.epoch > e0,
            "delinquent-acquire: node {me}: {what} was told it is delinquent but completes in epoch {} (no bump since {e0}): its keys stay on the fast path",
            self.epoch
        );
        assert!(
            self.dv[me as usize] == Delinquency::Zero,
            "own-bit: node {me}: {what} completes with its own delinquency bit still set ({:?})",
            self.dv[me as usize]
        );
    }

    /// `paxos-promise`: an acceptor of `key` that promised `before` answers
    /// a `ballot` (an accept if `accepting`) and now promises `after`.
    pub(crate) fn check_promise(
        &self,
        key: Key,
        before: Ballot,
        ballot: Ballot,
        after: Ballot,
        accepting: bool,
    ) {
        if !self.asserts {
            return;
        }
        let (me, what) = (self.me, if accepting { "accepts" } else { "promises" });
        assert!(
            ballot >= before && after >= before,
            "paxos-promise: node {me} key {key}: {what} ballot {ballot:?} below its promise {before:?} (now {after:?})"
        );
    }

    /// `paxos-commit-agreement`: a commit of `slot` that is the key's last
    /// committed one carries the RMW already committed there.
    pub(crate) fn check_commit_agreement(&mut self, key: Key, slot: u32, rec: &RmwRec) {
        if !self.asserts {
            return;
        }
        let me = self.me;
        let ks = self.key(key);
        if let (true, Some(last)) = (slot == ks.last_committed, ks.last_rec) {
            assert!(
                last.id == rec.id && last.new == rec.new && last.old_version == rec.old_version,
                "paxos-commit-agreement: node {me} key {key} slot {slot}: committed {last:?}, now told {rec:?}"
            );
        }
    }

    /// `paxos-helper-value`: the accept of a helper sends `sent`, the value
    /// it found accepted being `adopted`.
    pub(crate) fn check_helper_value(&self, key: Key, adopted: &RmwRec, sent: &RmwRec) {
        if !self.asserts {
            return;
        }
        assert!(
            adopted == sent,
            "paxos-helper-value: node {} key {key}: helps {adopted:?} but accepts {sent:?}",
            self.me
        );
    }

    /// `rmw-commit-majority`: RMW `r` completes from its commit stage.
    pub(crate) fn check_rmw_committed(&self, r: &Rmw) {
        if !self.asserts {
            return;
        }
        assert!(
            matches!(r.stage, Stage::Commit { help: false, .. }),
            "rmw-commit-majority: node {} RMW {:?} on key {} completes in stage {:?}, before its commit reached a majority",
            self.me,
            r.id,
            r.key,
            r.stage
        );
    }

    /// `acquire-majority`: acquire `a` returns a value a majority holds.
    pub(crate) fn check_acquire_majority(&self, a: &Acquire) {
        if !self.asserts {
            return;
        }
        assert!(
            a.write_back || a.n_best >= self.quorum(),
            "acquire-majority: node {} acquire {:?} of key {} returns {:?}, read from {} replicas (a majority is {}) and not written back",
            self.me,
            a.acq,
            a.key,
            a.best,
            a.n_best,
            self.quorum()
        );
    }

    /// `fast-path-epoch`: key `k` is served from the local replica.
    pub(crate) fn check_in_epoch(&self, k: Key, what: &str) {
        if !self.asserts {
            return;
        }
        let epoch = self.keys.get(&k).map_or(0, |ks| ks.epoch);
        assert!(
            epoch == self.epoch,
            "fast-path-epoch: node {}: {what} of key {k} served locally, key epoch {epoch} but machine epoch {}",
            self.me,
            self.epoch
        );
    }

    /// `reset-bit-targets`: a reset-bit of `acq` goes to `to`, the counted
    /// replies having flagged `flagged`.
    pub(crate) fn check_reset_targets(&self, acq: AcqId, to: Mask, flagged: Mask) {
        if !self.asserts {
            return;
        }
        assert!(
            to & !flagged == 0,
            "reset-bit-targets: node {} acquire {acq:?} resets bits at {to:#b}, but only {flagged:#b} flagged it",
            self.me
        );
    }

    /// `dm-cover`: session `s` dropped the machines of `removed` from its
    /// DM-set as already published.
    pub(crate) fn check_cover(&self, s: SessionId, removed: Mask) {
        if !self.asserts || removed == 0 {
            return;
        }
        let Some(sess) = self.sessions.get(&s) else {
            return;
        };
        for m in (0..32).filter(|m| removed & (1 << m) != 0) {
            assert!(
                self.published[m] > sess.missing_at[m],
                "dm-cover: node {} session {s}: machine {m} counts as published by a DM-set sent at stamp {}, not after its missed write was done (stamp {})",
                self.me,
                self.published[m],
                sess.missing_at[m]
            );
        }
    }

    /// `version-monotonic`: key `k` held `before` and was told
    /// `(version, value)`.
    pub(crate) fn check_apply(
        &mut self,
        k: Key,
        before: (Version, Value),
        version: Version,
        value: Value,
    ) {
        if !self.asserts {
            return;
        }
        let me = self.me;
        let ks = self.key(k);
        assert!(
            ks.version >= before.0,
            "version-monotonic: node {me} key {k}: version went back from {} to {}",
            before.0,
            ks.version
        );
        // Not asserted: that a write naming the key's own version carries the
        // same value. That is a property of the peer's message, not of this
        // node's state (a forged or corrupt one must not stop the node; the
        // fuzzer sends such messages), and the write changes nothing here.
        let _ = (version, value);
    }

    /// `write-version-fresh`: this node writes `version` to key `k`.
    pub(crate) fn check_fresh_write(&self, k: Key, version: Version) {
        if !self.asserts {
            return;
        }
        let held = self.keys.get(&k).map(|ks| ks.version).unwrap_or_default();
        assert!(
            version > held,
            "write-version-fresh: node {} key {k}: writes version {version}, not newer than its replica's {held}",
            self.me
        );
    }
}
