//! HEAL-NoShadow, a third ablation beside the HEAL paper's (Fig. 9): the recovering node (RR)
//! is left out of writes until it has caught up, so HEAL's single
//! `CatchUp_req` is not enough (the writes of the recovery itself pass it
//! by). Instead the RR chases its Buddy's `MissedUpdates` in rounds, each
//! asking for what was recorded after the last answer. Once a round did
//! not halve the one before (or shipped nothing), it hands over: every
//! member includes it in writes from its `ShadowStart` on and ships the
//! writes it coordinates that went out without it; one last round, now as
//! a ShadowReplica, closes the gap, and the RR goes online as HEAL's does.
//!
//! Why the last round misses nothing: take a write `w` that went out
//! without the RR. If `w` reached its GDP at the Buddy before the last
//! answer, it is in the buffer; if it was applied there short of its GDP,
//! it is among the versions the Buddy ships unvalidated (`pending`); if
//! its INV had not reached the Buddy, `w` had not committed when its
//! coordinator answered `ShadowStart` (it still needed the Buddy's ACK),
//! so that answer carried it. Scope persists in progress that left the RR
//! out are sent to it then, and wait for it.
//!
//! The mutant `heal-no-shadow` leaves the RR out the same way but goes
//! online after the first answer, taking it as complete.

use crate::heal::state::Phase;
use crate::node::{DdpNode, Out};
use crate::types::Validity;
use crate::types::{Key, Msg, Version};
use tandem_net::{Command, NodeId};

impl DdpNode {
    /// Members a write or a scope leaves out now (HEAL-NoShadow).
    pub(crate) fn heal_skip(&self) -> Vec<NodeId> {
        match self.heal.as_ref() {
            Some(h) if !h.excluded.is_empty() => h
                .excluded
                .keys()
                .copied()
                .filter(|n| *n != self.me && self.config.members.contains(n))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Send `msg` to every other member but `skip`.
    pub(crate) fn send_to_peers(&self, msg: Msg, skip: &[NodeId], out: &mut Out) {
        if skip.is_empty() {
            return out.push(Command::Broadcast { msg });
        }
        for o in self.config.others(self.me).filter(|o| !skip.contains(o)) {
            out.push(Command::Send {
                to: o,
                msg: msg.clone(),
            });
        }
    }

    /// A member: include `rr` in writes from now on, and send it the
    /// writes coordinated here that went out without it.
    pub(crate) fn on_shadow_start(&mut self, rr: NodeId, epoch: u64, out: &mut Out) {
        let Some(h) = self.heal.as_mut() else { return };
        if h.excluded.get(&rr).is_some_and(|&e| e > epoch) {
            return; // from an attempt before its latest `Recov_start`
        }
        h.include(rr, epoch);
        let mut keys: Vec<Key> = self
            .unsettled
            .iter()
            .copied()
            .filter(|k| {
                self.keys[k]
                    .write
                    .as_ref()
                    .is_some_and(|w| w.skip.contains(&rr))
            })
            .collect();
        keys.sort_unstable();
        let inflight: Vec<(Version, Validity)> =
            keys.into_iter().filter_map(|k| self.known(k)).collect();
        out.push(Command::Send {
            to: rr,
            msg: Msg::ShadowStartAck { epoch, inflight },
        });
        self.unskip_scopes(rr, out);
    }

    /// Scope persists in progress here that left `rr` out now wait for it
    /// too (once online, it must hold every scope reported durable).
    fn unskip_scopes(&mut self, rr: NodeId, out: &mut Out) {
        let epoch = self.config.epoch;
        for (&scope, sp) in self
            .scope_persists
            .iter_mut()
            .filter(|(_, sp)| sp.skip.contains(&rr))
        {
            sp.skip.retain(|&n| n != rr);
            out.push(Command::Send {
                to: rr,
                msg: Msg::ScopePersist {
                    scope,
                    versions: sp.versions.clone(),
                    epoch,
                },
            });
        }
    }

    /// The RR: a member includes it now; after the last, ask the last round.
    pub(crate) fn on_shadow_start_ack(
        &mut self,
        from: NodeId,
        epoch: u64,
        inflight: Vec<(Version, Validity)>,
        out: &mut Out,
    ) {
        let Some(rr) = self
            .rr()
            .filter(|r| r.phase == Phase::Handoff && r.epoch == epoch)
        else {
            return;
        };
        rr.chase.shadow_acks.insert(from);
        for (v, at) in inflight {
            self.rr_apply(v, at, out);
        }
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let rr = self.rr().expect("recovering");
        if !others.iter().all(|o| rr.chase.shadow_acks.contains(o)) {
            return;
        }
        if rr.chase.then_copy {
            return self.rr_start_copy(out);
        }
        rr.chase.last_round = true;
        self.rr_next_round(out);
    }

    /// The RR applied an answer: online (HEAL, or the last round), hand
    /// over, or ask again.
    pub(crate) fn rr_round_done(&mut self, out: &mut Out) {
        let (no_shadow, epoch) = (
            self.heal.as_ref().is_some_and(|h| h.opts.no_shadow),
            self.config.epoch,
        );
        let Some(rr) = self.rr() else { return };
        if !no_shadow || rr.chase.last_round {
            return self.rr_online(out);
        }
        if rr.epoch != epoch {
            // The configuration changed while it applied: start over.
            rr.phase = Phase::Starting;
            return self.rr_reconfigure(out);
        }
        if !rr.chase.handoff_due() {
            return self.rr_next_round(out);
        }
        self.rr_handoff(out);
    }

    /// Ask every member to take this node into writes (`ShadowStart`).
    pub(crate) fn rr_handoff(&mut self, out: &mut Out) {
        let (now, retry) = (self.now, self.params.retry_ns);
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        let Some(rr) = self.rr() else { return };
        (rr.phase, rr.sent_at, rr.wait) = (Phase::Handoff, now, retry);
        rr.chase.shadow_acks.clear();
        let epoch = rr.epoch;
        out.extend(others.into_iter().map(|o| Command::Send {
            to: o,
            msg: Msg::ShadowStart { epoch },
        }));
    }

    fn rr_next_round(&mut self, out: &mut Out) {
        let (now, bulk) = (self.now, self.params.bulk_ns);
        let Some(rr) = self.rr() else { return };
        rr.chase.round += 1;
        rr.timeline.rounds += 1;
        (rr.phase, rr.sent_at, rr.wait) = (Phase::CatchingUp, now, bulk);
        out.push(Command::Send {
            to: rr.buddy.expect("chosen"),
            msg: rr.catchup_req(),
        });
    }
}
