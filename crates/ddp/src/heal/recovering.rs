//! HEAL's recovering node (RR; HEAL paper §V-C, Fig. 4): it restarts from the
//! GDP-flagged part of its NVM, holds the rest aside as its
//! Partially_persisted list, and follows the others' writes as a
//! ShadowReplica (it applies, persists and ACKs, and serves no client)
//! while it runs the three steps: `Recov_start` to every member and their
//! ACKs; `CatchUp_req` to its Buddy and the answer; apply, go online,
//! `Recov_end`. A configuration change during the steps restarts them
//! (a new Buddy if the old one left, HEAL §VI). If no member can be the
//! Buddy (all restarted, or every buffer overflowed) it falls back to the
//! full copy.

use crate::fast_hash::FastMap;
use crate::heal::state::Phase;
use crate::heal::state::RecoveringReplica;
use crate::node::{DdpNode, Out, Wait};
use crate::types::{CatchUpResp, Validity};
use crate::types::{Key, Msg, Record, Ts, Version};
use std::collections::BTreeMap;
use tandem_net::{Command, NodeId, Nvm};

impl DdpNode {
    /// Rebuild from NVM for HEAL: GDP-flagged versions are committed and
    /// valid; the others wait for the Buddy's verdict (HEAL §V-C; O-7 in docs/HEAL.md).
    pub(crate) fn heal_load(&mut self, nvm: &Nvm<Record>) {
        // GDP slots sort by key, as `newest` does: walk both in step.
        let mut flags = nvm
            .values()
            .filter_map(|r| {
                if let Record::Gdp { key, ts } = r {
                    Some((*key, *ts))
                } else {
                    None
                }
            })
            .peekable();
        let mut partial = BTreeMap::new();
        let newest = newest_durable(nvm);
        self.keys.reserve(newest.len());
        for v in newest {
            while flags.next_if(|f| f.0 < v.key).is_some() {}
            if flags.peek().is_some_and(|&(k, f)| k == v.key && f >= v.ts) {
                let s = self.key(v.key);
                (s.ts, s.value, s.val_c, s.val_p, s.nvm) = (v.ts, Some(v.value), v.ts, v.ts, v.ts);
            } else {
                partial.insert(v.key, v);
            }
        }
        self.ready = false;
        self.heal.as_mut().expect("HEAL node").rr = Some(RecoveringReplica::new(partial));
    }

    /// A node dropped while alive (slow, partitioned) catches up like a
    /// restarted one when re-added, keeping what it holds.
    pub(crate) fn heal_dropped(&mut self) {
        if let Some(h) = self.heal.as_mut().filter(|h| h.rr.is_none()) {
            h.rr = Some(RecoveringReplica::new(BTreeMap::new()));
        }
    }

    pub(crate) fn rr(&mut self) -> Option<&mut RecoveringReplica> {
        self.heal.as_mut().and_then(|h| h.rr.as_mut())
    }

    /// HEAL runs this node's catch-up (the engine's full copy stays idle).
    pub(crate) fn heal_owns_catchup(&self) -> bool {
        self.heal
            .as_ref()
            .and_then(|h| h.rr.as_ref())
            .is_some_and(|r| r.phase != Phase::FullCopy)
    }

    /// Step 1 (again, after a configuration change mid-way).
    pub(crate) fn rr_reconfigure(&mut self, out: &mut Out) {
        let (me, epoch, now, retry) = (self.me, self.config.epoch, self.now, self.params.retry_ns);
        let member = self.config.members.contains(&me);
        let others: Vec<NodeId> = self.config.others(me).collect();
        let Some(rr) = self.rr() else { return };
        if !member {
            // Dropped (while recovering, or while slow): start over once re-added.
            (rr.phase, rr.epoch) = (Phase::Restored, 0);
            return;
        }
        if !matches!(
            rr.phase,
            Phase::Restored | Phase::Starting | Phase::CatchingUp | Phase::Handoff
        ) || rr.epoch == epoch
        {
            if rr.phase == Phase::Ending {
                self.rr_check_end();
            }
            return;
        }
        if rr.phase == Phase::Restored {
            rr.timeline.start_ns = now;
        }
        rr.timeline.attempts += 1;
        (rr.phase, rr.epoch, rr.sent_at, rr.buddy, rr.wait) =
            (Phase::Starting, epoch, now, None, retry);
        rr.acks.clear();
        for o in others {
            out.push(Command::Send {
                to: o,
                msg: Msg::RecovStart { epoch },
            });
        }
        self.rr_check_acks(out);
    }

    pub(crate) fn on_recov_start_ack(
        &mut self,
        from: NodeId,
        epoch: u64,
        online: bool,
        inflight: Vec<(Version, Validity)>,
        out: &mut Out,
    ) {
        let Some(rr) = self
            .rr()
            .filter(|r| r.phase == Phase::Starting && r.epoch == epoch)
        else {
            return;
        };
        rr.acks.insert(from, online);
        // Own writes still in flight elsewhere: hold them (unvalidated) so
        // that no timestamp of theirs is issued again (they may commit by replay).
        for (v, at) in inflight {
            self.rr_apply(v, at, out);
        }
        self.rr_check_acks(out);
    }

    /// Step 2 once every member answered: `CatchUp_req` to the Buddy, the
    /// first member after this node (ring order) that can be one.
    fn rr_check_acks(&mut self, out: &mut Out) {
        let (me, now, early, bulk) = (
            self.me,
            self.now,
            self.bugs.heal_online_early,
            self.params.bulk_ns,
        );
        let others: Vec<NodeId> = self.config.others(me).collect();
        let Some(rr) = self.rr() else { return };
        if !others.iter().all(|o| rr.acks.contains_key(o)) {
            return;
        }
        let able: Vec<NodeId> = others.iter().copied().filter(|o| rr.acks[o]).collect();
        let Some(buddy) = self.ring_next(able.into_iter()) else {
            return self.rr_full_copy(out);
        };
        let rr = self.rr().expect("recovering");
        let t = &mut rr.timeline;
        (t.acks_ns, t.req_ns, t.marked, t.missed, t.pending, t.rounds) = (now, now, 0, 0, 0, 1);
        (rr.phase, rr.buddy, rr.sent_at, rr.wait) = (Phase::CatchingUp, Some(buddy), now, bulk);
        rr.chase = crate::heal::state::Chase::first();
        out.push(Command::Send {
            to: buddy,
            msg: rr.catchup_req(),
        });
        if early {
            // Mutant: online before the Buddy's answer is applied.
            self.rr_online(out);
        }
    }

    /// Step 3: apply the marked entries, the Buddy's version of the others,
    /// its buffer and its unvalidated versions (only what is newer here).
    pub(crate) fn on_catchup_resp(
        &mut self,
        from: NodeId,
        epoch: u64,
        resp: CatchUpResp,
        out: &mut Out,
    ) {
        let now = self.now;
        if self.config.epoch != epoch {
            return; // an answer for an earlier attempt
        }
        let Some(rr) = self.rr().filter(|r| {
            r.buddy == Some(from)
                && r.epoch == epoch
                && r.chase.round == resp.round
                && matches!(r.phase, Phase::CatchingUp | Phase::Ending)
        }) else {
            return;
        };
        if resp.overflowed {
            return self.rr_full_copy(out);
        }
        rr.chase
            .answered(resp.seq, resp.missed.len() + resp.pending.len());
        let t = &mut rr.timeline;
        t.resp_ns = now;
        t.marked += resp.marked.len();
        t.missed += resp.missed.len();
        t.pending += resp.pending.len();
        let early = rr.phase == Phase::Ending;
        if !early {
            rr.phase = Phase::Applying;
        }
        let partial = std::mem::take(&mut rr.partial);
        for (key, _, at) in &resp.marked {
            if let Some(&v) = partial.get(key) {
                self.rr_apply(v, *at, out);
                if at.gdp {
                    self.heal.as_mut().expect("HEAL").flag(v.key, v.ts);
                }
            }
        }
        for (key, t_in, cur) in resp.unmarked {
            self.rr_rollback(key, t_in, cur, out);
        }
        for v in resp.missed {
            self.rr_apply(v, Validity { c: true, gdp: true }, out);
        }
        for (v, at) in resp.pending {
            self.rr_apply(v, at, out);
        }
        self.rr_applied(out);
    }

    /// An entry that never committed (or was superseded): the slot takes
    /// the newest of the Buddy's version and what this node holds, or none.
    fn rr_rollback(&mut self, key: Key, t_in: Ts, cur: Option<(Version, Validity)>, out: &mut Out) {
        if let Some((v, at)) = cur {
            self.rr_take(v, at);
        }
        let to = self.keys.get(&key).and_then(|s| s.version(key));
        self.rr_persist(
            Record::Rollback {
                key,
                to,
                over: t_in,
            },
            out,
        );
    }

    /// Take `v` if newer, into DRAM and NVM.
    pub(crate) fn rr_apply(&mut self, v: Version, at: Validity, out: &mut Out) {
        self.rr_take(v, at);
        let s = &self.keys[&v.key];
        if s.nvm < v.ts {
            // Neither `v` nor a newer version is durable here yet (a shadow
            // INV's persist may be in flight, or under Event its write-back
            // not due): persist what DRAM holds (`v` or newer), and go
            // online only once it landed. Under NoShadow `v`'s own gates do
            // not wait for this node.
            let cur = s.version(v.key).filter(|c| c.ts >= v.ts).unwrap_or(v);
            self.rr_persist(Record::Key(cur), out);
        }
    }

    /// Take `v` into DRAM if newer, validated as far as it got at the
    /// Buddy (short of its GDP: for consistency at most).
    fn rr_take(&mut self, v: Version, at: Validity) {
        self.apply_newer(v);
        let s = self.key(v.key);
        if s.ts == v.ts && (at.c || at.gdp) {
            s.val_c = s.val_c.max(v.ts);
        }
        if s.ts == v.ts && at.gdp {
            s.val_p = s.val_p.max(v.ts);
            self.reached_gdp(v.key, v.ts);
        }
    }

    fn rr_persist(&mut self, record: Record, out: &mut Out) {
        let (key, ts) = match &record {
            Record::Key(v) => (v.key, v.ts),
            Record::Rollback { key, to, .. } => (*key, to.map_or(Ts::ZERO, |v| v.ts)),
            _ => unreachable!("HEAL applies keys"),
        };
        let token = self.token(Wait::HealApply { key, ts });
        self.rr().expect("recovering").applying += 1;
        out.push(Command::Persist { token, record });
    }

    pub(crate) fn heal_apply_landed(&mut self, key: Key, ts: Ts, out: &mut Out) {
        if ts > Ts::ZERO {
            self.key_persisted(key, ts, out);
        }
        if let Some(rr) = self.rr() {
            rr.applying = rr.applying.saturating_sub(1);
        }
        self.rr_applied(out);
    }

    fn rr_applied(&mut self, out: &mut Out) {
        if self
            .rr()
            .is_some_and(|r| r.phase == Phase::Applying && r.applying == 0)
        {
            self.rr_round_done(out);
        }
    }

    /// Online: serve clients, tell every member (`Recov_end`).
    pub(crate) fn rr_online(&mut self, out: &mut Out) {
        self.assert_rr_applied();
        self.rr_end(out);
        self.become_ready(out);
    }

    fn rr_end(&mut self, out: &mut Out) {
        out.extend(self.rr_note());
        let (now, retry, others): (u64, u64, Vec<NodeId>) = (
            self.now,
            self.params.retry_ns,
            self.config.others(self.me).collect(),
        );
        let Some(rr) = self.rr() else { return };
        (rr.phase, rr.sent_at, rr.wait, rr.timeline.online_ns) = (Phase::Ending, now, retry, now);
        let epoch = rr.epoch;
        for o in others {
            out.push(Command::Send {
                to: o,
                msg: Msg::RecovEnd { epoch },
            });
        }
        self.rr_check_end();
    }

    pub(crate) fn on_recov_end_ack(&mut self, from: NodeId, epoch: u64) {
        if let Some(rr) = self
            .rr()
            .filter(|r| r.phase == Phase::Ending && r.epoch == epoch)
        {
            rr.end_acks.insert(from);
        }
        self.rr_check_end();
    }

    /// Every member has the `Recov_end`: the recovery is over.
    fn rr_check_end(&mut self) {
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let Some(h) = self.heal.as_mut() else { return };
        if h.rr.as_ref().is_some_and(|r| {
            r.phase == Phase::Ending && others.iter().all(|o| r.end_acks.contains(o))
        }) {
            h.last = h.rr.take().map(|r| r.timeline);
        }
    }

    /// What the operator sees when this node goes online.
    fn rr_note(&self) -> Option<Command<DdpNode>> {
        let r = self.heal.as_ref()?.rr.as_ref()?;
        let t = &r.timeline;
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
        let text = if t.full_copy {
            format!(
                "HEAL: no member could be the Buddy; recovered by a full copy in {:.1} ms",
                ms(t.start_ns, self.now)
            )
        } else {
            format!(
                "HEAL: recovered in {:.1} ms (Start_to_ACK {:.1}, CatchUp_to_Resp {:.1}, Apply_to_end {:.1}); Buddy {} sent {} missed updates and {} in flight; {} Partially_persisted entries, {} committed",
                ms(t.start_ns, self.now), ms(t.start_ns, t.acks_ns), ms(t.req_ns, t.resp_ns), ms(t.resp_ns, self.now), r.buddy.map_or(-1, i32::from), t.missed, t.pending, t.partial, t.marked
            )
        };
        Some(Command::Note { text })
    }

    /// No Buddy: the Partially_persisted entries become unvalidated
    /// versions (as a plain restart has them) and the full copy runs.
    fn rr_full_copy(&mut self, out: &mut Out) {
        let no_shadow = self.heal.as_ref().is_some_and(|h| h.opts.no_shadow);
        let Some(rr) = self.rr() else { return };
        rr.timeline.full_copy = true;
        let partial = std::mem::take(&mut rr.partial);
        for v in partial.into_values() {
            self.apply_newer(v);
            self.key(v.key).nvm = v.ts;
        }
        if no_shadow {
            // The members left it out of writes: take it back in first, or
            // the writes after the copy skip it.
            self.rr().expect("recovering").chase.then_copy = true;
            return self.rr_handoff(out);
        }
        self.rr_start_copy(out);
    }

    pub(crate) fn rr_start_copy(&mut self, out: &mut Out) {
        let Some(rr) = self.rr() else { return };
        rr.phase = Phase::FullCopy;
        (self.copy_asked, self.copy_got) = (false, false);
        self.copy_after_reconfigure(out);
    }

    /// The full copy finished (the node is ready): end the recovery as HEAL does.
    pub(crate) fn heal_copy_done(&mut self, out: &mut Out) {
        if self.rr().is_some_and(|r| r.phase == Phase::FullCopy) {
            self.rr_end(out);
        }
    }

    /// Resend what is unanswered.
    pub(crate) fn rr_tick(&mut self, out: &mut Out) {
        let (now, others): (u64, Vec<NodeId>) = (self.now, self.config.others(self.me).collect());
        let Some(rr) = self.rr().filter(|r| now >= r.sent_at + r.wait) else {
            return;
        };
        (rr.sent_at, rr.wait) = (now, rr.wait * 2);
        let epoch = rr.epoch;
        match rr.phase {
            Phase::Starting => out.extend(others.iter().filter(|o| !rr.acks.contains_key(o)).map(
                |&o| Command::Send {
                    to: o,
                    msg: Msg::RecovStart { epoch },
                },
            )),
            Phase::CatchingUp => out.push(Command::Send {
                to: rr.buddy.expect("chosen"),
                msg: rr.catchup_req(),
            }),
            Phase::Handoff => out.extend(
                others
                    .iter()
                    .filter(|o| !rr.chase.shadow_acks.contains(o))
                    .map(|&o| Command::Send {
                        to: o,
                        msg: Msg::ShadowStart { epoch },
                    }),
            ),
            Phase::Ending => out.extend(others.iter().filter(|o| !rr.end_acks.contains(o)).map(
                |&o| Command::Send {
                    to: o,
                    msg: Msg::RecovEnd { epoch },
                },
            )),
            _ => {}
        }
    }
}

/// The newest version of every key the NVM holds: in its own slot, or in a
/// persisted scope (Scope persistency writes whole scopes). A flag covers
/// only versions this node persisted, so the newest is the one it names.
fn newest_durable(nvm: &Nvm<Record>) -> Vec<Version> {
    let (mut own, mut scoped) = (Vec::new(), Vec::new());
    for r in nvm.values() {
        match r {
            Record::Key(v) | Record::Rollback { to: Some(v), .. } => own.push(*v),
            Record::Scope { versions, .. } => scoped.extend_from_slice(versions),
            _ => {}
        }
    }
    if scoped.is_empty() {
        return own; // one per key slot, in key order (slots sort by key)
    }
    let mut newest: FastMap<Key, Version> = FastMap::default();
    for v in own.iter().chain(&scoped) {
        let e = newest.entry(v.key).or_insert(*v);
        if v.ts > e.ts {
            *e = *v;
        }
    }
    let mut newest: Vec<Version> = newest.into_values().collect();
    newest.sort_unstable_by_key(|v| v.key);
    newest
}
