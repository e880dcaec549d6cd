//! What a real network takes from ZAB, and how it is given back.
//!
//! A stream that dies loses what was in it: proposals, acknowledgements
//! and commits sent just before a link was cut never arrive, and the
//! runtime's new stream starts after the gap. ZooKeeper's answer is to send
//! the follower back through synchronisation with the leader. Here:
//!
//! - a **follower** whose oldest open proposal has not been applied for a
//!   whole stall period (its proposal, its acknowledgement or its commit was
//!   lost) leaves the broadcast and asks the leader for a sync
//!   ([`crate::sync`]), exactly as a restarted follower does; the leader
//!   ships what it missed and hands it the open proposals again;
//! - the **leader** whose oldest open proposal has not committed for a
//!   whole stall period sends its open proposals again to the followers in
//!   sync; a follower that already logged one acknowledges it again.
//!
//! The stall timer runs only while something is open, so a quiet
//! simulation still ends. Found by `tandem nemesis --system zab`: a
//! follower cut off for longer than the link's silence bound never applied
//! a write again, and a leader in the minority of a split never committed
//! again after the heal.

use tandem_net::Command;

use crate::node::{Out, ZabMsg, ZabNode, STALL_TIMER};

impl ZabNode {
    /// Arm the stall timer if something is open and it is not armed.
    pub(crate) fn watch_stall(&mut self, out: &mut Out) {
        if self.stall.armed || self.params.bug_no_stall || self.oldest_open().is_none() {
            return;
        }
        self.stall.armed = true;
        self.stall.mark = self.oldest_open();
        out.push(Command::SetTimer {
            token: STALL_TIMER,
            at_ns: self.now + self.params.stall_ns,
        });
    }

    /// The oldest proposal not yet applied here (leader: not committed).
    fn oldest_open(&self) -> Option<crate::node::Zxid> {
        match &self.lead {
            Some(l) => l.acks.keys().next().copied(),
            None if self.ready => self.pending.keys().next().copied(),
            None => None,
        }
    }

    /// The stall timer fired: no progress on the oldest open proposal
    /// since it was armed means something was lost.
    pub(crate) fn stall_check(&mut self, out: &mut Out) {
        self.stall.armed = false;
        let oldest = self.oldest_open();
        if oldest.is_some() && oldest == self.stall.mark {
            if self.lead.is_some() {
                self.propose_again(out);
            } else {
                self.resync(out);
            }
        }
        self.watch_stall(out);
    }

    /// Leader: send every open proposal again to the followers in sync.
    fn propose_again(&mut self, out: &mut Out) {
        let Some(lead) = self.lead.as_ref() else {
            return;
        };
        for (&z, &(_, origin)) in &lead.acks {
            let entry = self.log[z as usize - 1];
            for &f in &lead.active {
                out.push(Command::Send {
                    to: f,
                    msg: ZabMsg::Proposal { entry, origin },
                });
            }
        }
    }

    /// Follower: leave the broadcast and be brought back by a sync. Open
    /// proposals come back with the `Join`; writes of this node's clients
    /// that committed meanwhile are not answered (their outcome is unknown
    /// to the client, which has timed out).
    pub(crate) fn resync(&mut self, out: &mut Out) {
        self.ready = false;
        self.pending.clear();
        self.logged.clear();
        self.commit_to = self.applied;
        out.push(Command::Note {
            text: format!(
                "node {}: no commit past zxid {} for {} ms; asking the leader for a sync",
                self.me,
                self.applied,
                self.params.stall_ns / 1_000_000
            ),
        });
        // The request can be lost too: ask again each stall period.
        self.ask_sync_every(self.params.stall_ns, out);
    }
}
