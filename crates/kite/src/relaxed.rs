//! Relaxed reads and writes: the Eventual Store on the fast path, and the
//! stripped-down ABD of the slow path for keys out of epoch (Kite paper §3.2,
//! §4.2, §4.3).

use tandem_net::SessionId;

use crate::inflight::*;
use crate::node::{Active, KeyState, KiteNode, Mutant, Out};
use crate::types::*;

impl KiteNode {
    /// In epoch: the key was refreshed since the machine's last epoch bump.
    fn in_epoch(&mut self, k: Key) -> bool {
        let epoch = self.epoch;
        self.key(k).epoch == epoch || self.mutant(Mutant::NoSlowPathRefresh)
    }

    /// The local value if `k` is in epoch. A key never written here reads
    /// as a fresh `KeyState` would, without storing one: reads (most of
    /// the load) do not grow the store.
    fn local_read(&self, k: Key) -> Option<Reply> {
        let fresh = KeyState::default();
        let ks = self.keys.get(&k).unwrap_or(&fresh);
        let in_epoch = ks.epoch == self.epoch || self.mutant(Mutant::NoSlowPathRefresh);
        in_epoch.then_some(Reply::Value {
            value: ks.value,
            version: ks.version,
        })
    }

    pub fn relaxed_read(&mut self, now: u64, s: SessionId, k: Key, out: &mut Out) {
        if let Some(result) = self.local_read(k) {
            self.check_in_epoch(k, "a relaxed read");
            return self.reply(s, result, out);
        }
        self.stats.slow_reads += 1;
        self.slow_start(now, s, k, None, out);
    }

    pub fn relaxed_write(&mut self, now: u64, s: SessionId, k: Key, v: Value, out: &mut Out) {
        if self.in_epoch(k) {
            self.check_in_epoch(k, "a relaxed write");
            let version = Version(self.key(k).version.0 + 1, self.me, 0);
            return self.write_out(now, s, k, version, v, out);
        }
        self.stats.slow_writes += 1;
        self.slow_start(now, s, k, Some(v), out);
    }

    fn slow_start(
        &mut self,
        now: u64,
        s: SessionId,
        key: Key,
        write: Option<Value>,
        out: &mut Out,
    ) {
        let rid = self.fresh_id();
        let msg = match write {
            Some(_) => Msg::ReadTs { rid, key },
            None => Msg::Read {
                rid,
                key,
                acq: None,
            },
        };
        let op = SlowOp {
            key,
            e0: self.epoch,
            rid,
            write,
            best: (Version::default(), 0),
        };
        self.sess(s).op = Some(Active::Slow(op));
        self.start_round(now, s, rid, msg, out);
    }

    /// Apply a relaxed write locally, broadcast it, track its acks and
    /// reply at once (the write does not block the session).
    fn write_out(
        &mut self,
        now: u64,
        s: SessionId,
        k: Key,
        version: Version,
        value: Value,
        out: &mut Out,
    ) {
        self.check_fresh_write(k, version);
        self.apply(k, version, value);
        let wid = self.fresh_id();
        self.send_tracked(
            now,
            s,
            wid,
            Msg::Write {
                wid,
                key: k,
                version,
                value,
            },
            false,
            out,
        );
        self.reply(s, Reply::Written { version }, out);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn slow_rep(
        &mut self,
        now: u64,
        s: SessionId,
        mut op: SlowOp,
        rid: u64,
        rep: Rep,
        done: bool,
        out: &mut Out,
    ) {
        if rid != op.rid {
            self.sess(s).op = Some(Active::Slow(op));
            return;
        }
        {
            match rep {
                Rep::Ts { version } => op.best.0 = op.best.0.max(version),
                Rep::Value { version, value, .. } if version > op.best.0 => {
                    op.best = (version, value)
                }
                _ => {}
            }
        }
        if !done {
            self.sess(s).op = Some(Active::Slow(op));
            return;
        }
        let (me, epoch) = (self.me, self.epoch);
        let ks = self.key(op.key);
        ks.epoch = ks.epoch.max(op.e0);
        if ks.epoch > epoch {
            let e = format!(
                "node {me}: key {} epoch {} > machine epoch {epoch}",
                op.key, ks.epoch
            );
            self.invariant.get_or_insert(e);
        }
        match op.write {
            Some(v) => {
                let version = Version(op.best.0.max(self.key(op.key).version).0 + 1, self.me, 0);
                self.write_out(now, s, op.key, version, v, out);
            }
            None => {
                let (version, value) = op.best;
                self.apply(op.key, version, value);
                self.reply(s, Reply::Value { value, version }, out);
            }
        }
    }
}
