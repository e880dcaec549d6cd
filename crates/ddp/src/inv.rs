//! The INV/ACK/VAL write path (Hermes-style; DDP §5.2, Fig. 2(a)–(d), and
//! the Lin and RE models of docs/DDP.md's table):
//! the coordinator applies and broadcasts INV; followers apply newer
//! versions at once but keep the key invalid until its VAL; ACKs and VALs
//! for consistency (c) and persistence (p) as the model's [`Rules`] say.

use tandem_net::{Command, Config, NodeId, SessionId};

use crate::model::{AckMode, Gate, PersistIssue};
use crate::node::{CoordWrite, DdpNode, Out};
use crate::types::{Key, Msg, Op, Reply, ScopeId, Ts, Value, Version};

impl DdpNode {
    /// A client write: start it now if the key is settled here, else defer it.
    pub(crate) fn start_write(
        &mut self,
        session: SessionId,
        req: u64,
        key: Key,
        value: Value,
        scope: u64,
        out: &mut Out,
    ) {
        let below_nvm = self.bugs.ts_below_nvm;
        let s = self.key(key);
        if s.write.is_some() || !s.c_ok() {
            s.deferred
                .push_back((session, req, Op::write(key, value, scope)));
            return;
        }
        // Past the NVM's version too (see `upd_write`): never two writes
        // of one node at one timestamp, across its lives.
        let newest = if below_nvm { s.ts } else { s.ts.max(s.nvm) };
        let ts = Ts {
            version: newest.version + 1,
            node: self.me,
        };
        self.assert_new_ts(key, ts);
        let scope = self.scope_of(
            ScopeId {
                session,
                seq: scope,
            },
            Version { key, ts, value },
        );
        self.begin(key, ts, value, Some((session, req)), scope, out);
    }

    /// Apply `ts` locally and broadcast its INV; `client` is None for a replay.
    fn begin(
        &mut self,
        key: Key,
        ts: Ts,
        value: Value,
        client: Option<(SessionId, u64)>,
        scope: Option<ScopeId>,
        out: &mut Out,
    ) {
        let (now, epoch) = (self.now, self.config.epoch);
        self.assert_ts_forward(key, ts);
        let s = self.key(key);
        let persisted = s.nvm >= ts;
        if s.ts < ts {
            s.invalid_since = now;
        }
        s.ts = ts;
        s.value = Some(value);
        let skip = self.heal_skip();
        self.assert_shadow(&skip, "a write");
        let w = CoordWrite {
            client,
            ts,
            value,
            scope,
            acks_c: Default::default(),
            acks_p: Default::default(),
            local_p: persisted,
            replied: false,
            c_sent: false,
            p_sent: false,
            sent_at: now,
            skip: skip.clone(),
        };
        self.key(key).write = Some(w);
        self.unsettled.insert(key);
        self.heal_applied(key);
        if !persisted {
            self.issue_persist(Version { key, ts, value }, out);
        }
        self.send_to_peers(
            Msg::Inv {
                v: Version { key, ts, value },
                epoch,
                scope,
            },
            &skip,
            out,
        );
        if let (Some((session, req)), Gate::Immediate) = (client, self.rules.reply) {
            out.push(Command::Reply {
                session,
                req,
                result: Reply::Written { ts, id: None },
            });
            self.key(key).write.as_mut().expect("just begun").replied = true;
        }
        self.try_complete(key, out);
    }

    /// Persist a version this node applied, as the model's persistency says.
    fn issue_persist(&mut self, v: Version, out: &mut Out) {
        match self.rules.persist {
            PersistIssue::OnReceipt | PersistIssue::AtApply => self.persist_version(v, out),
            PersistIssue::Lazy => {
                self.dirty.insert(v.key);
            }
            PersistIssue::AtScope => {}
        }
    }

    pub(crate) fn on_inv(&mut self, from: NodeId, v: Version, epoch: u64, out: &mut Out) {
        if self.heal.is_some() && epoch > self.config.epoch {
            return; // HEAL (O-1, docs/HEAL.md): nothing of a configuration not installed here yet
        }
        if self.apply_newer(v) {
            self.issue_persist(v, out);
        }
        if epoch < self.config.epoch {
            // An ACK for an epoch this node left would let the write end
            // without a member that joined since (Hermes ignores messages
            // of an older epoch); the coordinator replays it in the new one.
            return;
        }
        self.acknowledge(from, v.key, v.ts, epoch, out);
    }

    /// Apply `v` if it is newer than the key's version (the key turns
    /// invalid until validated); whether it was.
    pub(crate) fn apply_newer(&mut self, v: Version) -> bool {
        let now = self.now;
        let s = self.key(v.key);
        if v.ts <= s.ts {
            return false;
        }
        s.ts = v.ts;
        s.value = Some(v.value);
        s.invalid_since = now;
        self.unsettled.insert(v.key);
        self.heal_applied(v.key);
        true
    }

    /// ACK every INV (Hermes), as the model's ACK mode says.
    fn acknowledge(&mut self, to: NodeId, key: Key, ts: Ts, epoch: u64, out: &mut Out) {
        let (mode, early) = (self.rules.ack, self.bugs.val_before_persist);
        let s = self.key(key);
        let durable = s.nvm >= ts || early;
        let ack = |c, p| Command::Send {
            to,
            msg: Msg::Ack {
                key,
                ts,
                epoch,
                c,
                p,
            },
        };
        match mode {
            AckMode::ConsistencyOnly => out.push(ack(true, false)),
            AckMode::Split => {
                out.push(ack(true, false));
                if durable {
                    self.assert_ack_p(key, ts);
                    out.push(ack(false, true));
                } else {
                    s.owed.push((to, ts, epoch, false));
                }
            }
            AckMode::Combined if durable => {
                self.assert_ack_p(key, ts);
                out.push(ack(true, true))
            }
            AckMode::Combined => s.owed.push((to, ts, epoch, true)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ack(
        &mut self,
        from: NodeId,
        key: Key,
        ts: Ts,
        epoch: u64,
        c: bool,
        p: bool,
        out: &mut Out,
    ) {
        if p && !c && self.heal_lazy() && self.lazy_ack(from, key, ts, out) {
            return;
        }
        if epoch != self.config.epoch {
            return;
        }
        let Some(w) = self.key(key).write.as_mut().filter(|w| w.ts == ts) else {
            return;
        };
        if c {
            w.acks_c.insert(from);
        }
        if p {
            w.acks_p.insert(from);
        }
        self.try_complete(key, out);
    }

    /// A version of `key` landed in this node's NVM.
    pub(crate) fn key_persisted(&mut self, key: Key, ts: Ts, out: &mut Out) {
        let s = self.key(key);
        s.nvm = s.nvm.max(ts);
        let nvm = s.nvm;
        if let Some(w) = s.write.as_mut().filter(|w| w.ts <= nvm) {
            w.local_p = true;
        }
        let (due, still): (Vec<_>, Vec<_>) = std::mem::take(&mut s.owed)
            .into_iter()
            .partition(|o| o.1 <= nvm);
        s.owed = still;
        for (to, ts, epoch, c) in due {
            out.push(Command::Send {
                to,
                msg: Msg::Ack {
                    key,
                    ts,
                    epoch,
                    c,
                    p: true,
                },
            });
        }
        self.lazy_persisted(key, ts, out);
        self.try_complete(key, out);
    }

    /// Which of the write's gates hold: (C, P).
    fn gates(&self, w: &CoordWrite) -> (bool, bool) {
        let others: Vec<NodeId> = self
            .config
            .others(self.me)
            .filter(|o| !w.skip.contains(o))
            .collect();
        let missing = |acks: &std::collections::BTreeSet<NodeId>| {
            others.iter().filter(|o| !acks.contains(o)).count()
        };
        let slack = usize::from(self.bugs.reply_before_last_ack);
        let c = missing(&w.acks_c) <= slack;
        let p = (w.local_p || self.bugs.val_before_persist) && missing(&w.acks_p) <= slack;
        (c, p)
    }

    /// Send the VALs and the reply whose gates hold; finish the write when
    /// nothing more is owed.
    pub(crate) fn try_complete(&mut self, key: Key, out: &mut Out) {
        let Some(w) = self.keys.get(&key).and_then(|s| s.write.clone()) else {
            return;
        };
        let (c, p) = self.gates(&w);
        let superseded = self.keys[&key].ts > w.ts;
        let mut w = w;
        self.send_vals(key, &mut w, c, p, superseded, out);
        if let (Some((session, req)), false) = (w.client, w.replied) {
            if self.rules.reply.holds(c, p) {
                self.assert_certified(key, &w, self.rules.reply, "its reply");
                out.push(Command::Reply {
                    session,
                    req,
                    result: Reply::Written { ts: w.ts, id: None },
                });
                w.replied = true;
            }
        }
        let done = (w.replied || w.client.is_none()) && w.c_sent && (w.p_sent || !self.tracks_p());
        self.key(key).write = if done { None } else { Some(w) };
        if done {
            self.settle(key, out);
        }
    }

    fn send_vals(
        &mut self,
        key: Key,
        w: &mut CoordWrite,
        c: bool,
        p: bool,
        superseded: bool,
        out: &mut Out,
    ) {
        let r = self.rules;
        let newly_p = !w.p_sent;
        let epoch = self.config.epoch;
        let val = |c, p| Command::Broadcast {
            msg: Msg::Val {
                key,
                ts: w.ts,
                c,
                p,
                epoch,
            },
        };
        if r.combined_val {
            if c && p && !w.c_sent {
                self.assert_certified(key, w, Gate::CP, "VAL");
                if !superseded {
                    out.push(val(true, true));
                }
                (w.c_sent, w.p_sent) = (true, true);
            }
        } else {
            if c && !w.c_sent {
                self.assert_certified(key, w, Gate::C, "VAL_c");
                if r.val_c && !superseded {
                    out.push(val(true, false));
                    self.lazy_track(key, w.ts, w.skip.clone());
                }
                w.c_sent = true;
            }
            if p && !w.p_sent && self.tracks_p() {
                self.assert_certified(key, w, Gate::P, "VAL_p");
                if r.val_p && !superseded {
                    out.push(val(true, true));
                }
                w.p_sent = true;
            }
        }
        if !superseded {
            // The coordinator knows what its VALs certify, sent or not.
            let s = self.key(key);
            if w.c_sent {
                s.val_c = s.val_c.max(w.ts);
            }
            if w.p_sent {
                s.val_p = s.val_p.max(w.ts);
            }
            if w.p_sent && newly_p {
                self.reached_gdp(key, w.ts); // CGDP
            }
        }
    }

    pub(crate) fn on_val(
        &mut self,
        key: Key,
        ts: Ts,
        (c, p): (bool, bool),
        epoch: u64,
        out: &mut Out,
    ) {
        let s = self.key(key);
        if ts > s.ts {
            return; // a VAL for a version this node has not seen (Hermes: current ts only)
        }
        if c {
            s.val_c = s.val_c.max(ts);
        }
        if p {
            s.val_p = s.val_p.max(ts);
        }
        if p && ts == s.ts {
            self.reached_gdp_in(key, ts, epoch); // FGDP
        }
        self.settle(key, out);
    }

    /// The key may have become readable or writable: serve what waits on it.
    pub(crate) fn settle(&mut self, key: Key, out: &mut Out) {
        self.serve_stalled(key, out);
        while let Some(s) = self.keys.get_mut(&key) {
            if s.write.is_some() || !s.c_ok() {
                break;
            }
            let Some((session, req, op)) = s.deferred.pop_front() else {
                break;
            };
            if let Op::Write {
                key, value, scope, ..
            } = op
            {
                self.start_write(session, req, key, value, scope, out);
            }
        }
        let s = &self.keys[&key];
        if s.write.is_none() && self.rules.read.holds(s.c_ok(), s.p_ok()) {
            self.unsettled.remove(&key);
        }
    }

    /// Retransmit unacknowledged INVs; replay keys stuck invalid (Hermes).
    pub(crate) fn retry_writes(&mut self, out: &mut Out) {
        let keys: Vec<Key> = self.unsettled.iter().copied().collect();
        for key in keys {
            let s = &self.keys[&key];
            match &s.write {
                Some(w) if self.now >= w.sent_at + self.params.retry_ns => self.resend(key, out),
                Some(_) => {}
                // A node catching up leaves replays to the others: its copy
                // validates (or supersedes) what its NVM held.
                None if self.ready && self.now >= s.invalid_since + self.replay_delay() => {
                    self.replay(key, out)
                }
                None => {}
            }
        }
    }

    fn resend(&mut self, key: Key, out: &mut Out) {
        let (epoch, others): (u64, Vec<NodeId>) =
            (self.config.epoch, self.config.others(self.me).collect());
        let tracks_p = self.tracks_p();
        let now = self.now;
        let w = self.key(key).write.as_mut().expect("a write");
        w.sent_at = now;
        let v = Version {
            key,
            ts: w.ts,
            value: w.value,
        };
        for o in others.into_iter().filter(|o| !w.skip.contains(o)) {
            if !w.acks_c.contains(&o) || (tracks_p && !w.acks_p.contains(&o)) {
                out.push(Command::Send {
                    to: o,
                    msg: Msg::Inv {
                        v,
                        epoch,
                        scope: w.scope,
                    },
                });
            }
        }
    }

    /// Nodes replay one after another, so usually one replay settles a key.
    fn replay_delay(&self) -> u64 {
        let rank = self
            .config
            .members
            .iter()
            .position(|&m| m == self.me)
            .unwrap_or(0) as u64;
        self.params.replay_ns + rank * self.params.replay_ns / 2
    }

    /// Re-run the write of the key's current version with the same ts.
    pub(crate) fn replay(&mut self, key: Key, out: &mut Out) {
        let s = &self.keys[&key];
        let Some(value) = s.value else {
            self.unsettled.remove(&key);
            return;
        };
        let ts = s.ts;
        self.begin(key, ts, value, None, None, out);
    }

    /// A new configuration: acknowledgements of the old epoch no longer
    /// count, so every write in progress is re-broadcast (Hermes replay).
    pub(crate) fn reconfigure(&mut self, config: Config, out: &mut Out) {
        let missed = self.missed_removal(&config);
        self.take_config(config, out);
        self.assert_rejoin_unheard(missed);
    }

    /// `config` adds this node back after a removal it never heard of: it
    /// thought itself a member in the last epoch it saw.
    pub(crate) fn missed_removal(&self, config: &Config) -> bool {
        self.config.members.contains(&self.me) && config.missed_removal(self.me, self.config.epoch)
    }

    fn take_config(&mut self, config: Config, out: &mut Out) {
        if self.missed_removal(&config) && !self.bugs.unheard_removal {
            // Removed while cut off, and added back: take in the removal
            // first, as if it had been heard (see `Config::joined`).
            let epoch = config.joined_at(self.me) - 1;
            self.reconfigure(Config::new(epoch, config.others(self.me).collect()), out);
        }
        let new_epoch = config.epoch != self.config.epoch;
        if !config.members.contains(&self.me) {
            // Removed (crashed, or suspected while slow): stop serving; if
            // re-added later, catch up by a copy first.
            (self.ready, self.copy_asked, self.copy_got) = (false, false, false);
            self.heal_dropped();
        }
        self.config = config;
        if new_epoch {
            let mut writes: Vec<Key> = self
                .keys
                .iter()
                .filter(|(_, s)| s.write.is_some())
                .map(|(&k, _)| k)
                .collect();
            writes.sort_unstable();
            for key in writes {
                let w = self.key(key).write.as_mut().expect("a write");
                w.acks_c.clear();
                w.acks_p.clear();
                self.resend(key, out);
                self.try_complete(key, out);
            }
            self.reconfigure_scopes(out);
        }
        if self.rules.upd.is_some() {
            self.upd_reconfigure(new_epoch, out);
        }
        if self.rules.trans.is_some() {
            self.trans_reconfigure(new_epoch, out);
        }
        self.heal_reconfigure(out);
        self.copy_after_reconfigure(out);
        self.serve_deferred_copies(out);
    }
}
