//! Leader-based recovery of a restarted follower (HEAL §II-C, §IX-D), the
//! baseline HEAL is measured against:
//!
//! 1. the follower sends the leader the last `zxid` of its log (`LastZxid`);
//! 2. the leader scans its log in NVM from there (each entry costs an NVM
//!    read, [`ZabParams::nvm_read_ns`](crate::node::ZabParams)) and
//!    sends every entry, redundant ones included, in `Sync` batches;
//! 3. the follower logs and applies each entry and answers `BatchDone`;
//! 4. meanwhile new writes go on without it; the leader ships what
//!    committed since in a further round, and again ("this process is
//!    suboptimal and may repeat multiple times"). Under a saturating load
//!    the rounds need not reach zero: once a round did not halve the
//!    backlog of the one before, the leader ends the chase and hands the
//!    rest over in the `Join` itself (one step of the leader, so nothing
//!    commits between), and the follower takes proposals again.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;
use tandem_net::{Command, NodeId, Token};

use crate::node::{Entry, Out, ZabMsg, ZabNode, Zxid, RETRY_TIMER, SCAN_TIMER, STALL_TIMER};

/// How one follower was brought back, as the leader saw it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SyncStats {
    pub follower: NodeId,
    pub from_zxid: Zxid,
    /// Log entries read back from NVM and shipped in the first round.
    pub scanned: u64,
    /// Distinct keys among them: the rest are redundant copies.
    pub distinct_keys: u64,
    pub scan_ns: u64,
    /// Further rounds for the writes committed during the sync, and their entries.
    pub rounds: u32,
    pub buffered: u64,
    /// Entries sent in all (fewer than scanned + buffered with `dedup`).
    pub shipped: u64,
    pub asked_ns: u64,
    pub scanned_ns: u64,
    /// When the follower had logged the scanned entries.
    pub shipped_ns: u64,
    pub joined_ns: u64,
}

#[derive(Debug)]
struct Sync {
    /// Highest `zxid` shipped (or being scanned).
    sent: Zxid,
    /// Entries in the last round.
    last_round: u64,
    scanning: bool,
    stats: SyncStats,
}

/// The followers the leader is bringing back.
#[derive(Debug, Default)]
pub(crate) struct Syncs {
    by: BTreeMap<NodeId, Sync>,
    pub(crate) last: Option<SyncStats>,
}

impl Syncs {
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&NodeId) -> bool) {
        self.by.retain(|f, _| keep(f));
    }
}

/// A restarted follower's side of its sync.
#[derive(Debug)]
pub(crate) struct Joining {
    /// Sync entries whose persist has not landed.
    landing: BTreeSet<Zxid>,
    got: bool,
    /// Batches that overtook an earlier one on the wire, by where they start.
    ahead: BTreeMap<Zxid, (Zxid, Vec<Entry>)>,
    /// Where this follower stood when it last asked.
    asked_at: Zxid,
    /// How long to wait for the sync before asking again.
    retry_ns: u64,
}

fn scan_timer(f: NodeId) -> Token {
    SCAN_TIMER + 16 + Token::from(f)
}

impl ZabNode {
    /// Follower, restarted and re-added: ask the leader for what it missed.
    pub(crate) fn ask_sync(&mut self, out: &mut Out) {
        self.ask_sync_every(self.params.retry_ns, out)
    }

    /// Ask for a sync; ask again after `retry_ns` without progress.
    pub(crate) fn ask_sync_every(&mut self, retry_ns: u64, out: &mut Out) {
        if self.joining.as_ref().is_some_and(|j| j.got) {
            return;
        }
        let applied = self.applied;
        self.joining
            .get_or_insert(Joining {
                landing: BTreeSet::new(),
                got: false,
                ahead: BTreeMap::new(),
                asked_at: applied,
                retry_ns,
            })
            .asked_at = applied;
        out.push(Command::Send {
            to: self.leader(),
            msg: ZabMsg::LastZxid { zxid: self.applied },
        });
        let retry_ns = self.joining.as_ref().map_or(retry_ns, |j| j.retry_ns);
        out.push(Command::SetTimer {
            token: RETRY_TIMER,
            at_ns: self.now + retry_ns,
        });
    }

    pub(crate) fn timer(&mut self, token: Token, out: &mut Out) {
        if token == RETRY_TIMER {
            if !self.ready {
                self.retry_sync(out);
            }
        } else if token == STALL_TIMER {
            self.stall_check(out);
        } else if let Some(f) = token.checked_sub(SCAN_TIMER + 16) {
            self.scan_done(f as NodeId, out);
        }
    }

    /// Follower, still not in sync a retry period after it asked: ask
    /// again unless batches came and moved it on since (a batch or the
    /// `Join` may have died with a stream).
    fn retry_sync(&mut self, out: &mut Out) {
        let applied = self.applied;
        match self.joining.as_mut() {
            Some(j) if j.got && j.asked_at != applied => {
                j.asked_at = applied;
                out.push(Command::SetTimer {
                    token: RETRY_TIMER,
                    at_ns: self.now + j.retry_ns,
                });
            }
            Some(j) => {
                j.got = false;
                let every = j.retry_ns;
                self.ask_sync_every(every, out);
            }
            None => self.ask_sync(out),
        }
    }

    /// Leader: a follower is back; scan the log in NVM from its last `zxid`.
    pub(crate) fn on_last_zxid(&mut self, f: NodeId, from_zxid: Zxid, out: &mut Out) {
        let now = self.now;
        let read_ns = self.params.nvm_read_ns;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        match lead.syncs.by.get(&f) {
            Some(s) if s.scanning => return, // the scan under way answers it
            // Asked again after the shipping: a batch was lost; start over.
            Some(_) => drop(lead.syncs.by.remove(&f)),
            None => {}
        }
        lead.active.remove(&f);
        let target = lead.committed.max(from_zxid);
        let scanned = &self.log[from_zxid as usize..target as usize];
        let distinct = scanned.iter().map(|e| e.key).collect::<HashSet<_>>().len() as u64;
        let scan_ns = if self.params.dram {
            0
        } else {
            scanned.len() as u64 * read_ns
        };
        if self.params.shadow {
            // A shadow replica: it takes every proposal from here on.
            lead.active.insert(f);
            for (&z, &(_, origin)) in &lead.acks {
                out.push(Command::Send {
                    to: f,
                    msg: ZabMsg::Proposal {
                        entry: self.log[z as usize - 1],
                        origin,
                    },
                });
            }
        }
        let stats = SyncStats {
            follower: f,
            from_zxid,
            scanned: scanned.len() as u64,
            distinct_keys: distinct,
            scan_ns,
            asked_ns: now,
            ..SyncStats::default()
        };
        lead.syncs.by.insert(
            f,
            Sync {
                sent: target,
                last_round: target - from_zxid,
                scanning: true,
                stats,
            },
        );
        out.push(Command::SetTimer {
            token: scan_timer(f),
            at_ns: now + scan_ns,
        });
    }

    /// Leader: the scan is read; ship it.
    fn scan_done(&mut self, f: NodeId, out: &mut Out) {
        let now = self.now;
        let Some(sync) = self.lead.as_mut().and_then(|l| l.syncs.by.get_mut(&f)) else {
            return;
        };
        sync.scanning = false;
        sync.stats.scanned_ns = now;
        let (from, to) = (sync.stats.from_zxid, sync.sent);
        let count = self.ship(f, from, to, out);
        if let Some(sync) = self.lead.as_mut().and_then(|l| l.syncs.by.get_mut(&f)) {
            sync.stats.shipped += count;
        }
        if from == to {
            self.advance(f, to, out);
        }
    }

    /// Send `(from, to]` in batches, each naming the range it covers.
    fn ship(&self, f: NodeId, from: Zxid, to: Zxid, out: &mut Out) -> u64 {
        let entries = self.shipped(from, to);
        let count = entries.len() as u64;
        let mut start = from;
        let batches: Vec<&[Entry]> = entries.chunks(self.params.batch.max(1)).collect();
        for (i, batch) in batches.iter().enumerate() {
            let upto = if i + 1 == batches.len() {
                to
            } else {
                batch.last().expect("a chunk is not empty").zxid
            };
            out.push(Command::Send {
                to: f,
                msg: ZabMsg::Sync {
                    from: start,
                    upto,
                    entries: batch.to_vec(),
                },
            });
            start = upto;
        }
        count
    }

    /// The log's `(from, to]`; with `dedup`, only the last write of each key.
    fn shipped(&self, from: Zxid, to: Zxid) -> Vec<Entry> {
        let range = &self.log[from as usize..to as usize];
        if !self.params.dedup {
            return range.to_vec();
        }
        let mut seen = HashSet::new();
        let mut last: Vec<Entry> = range
            .iter()
            .rev()
            .filter(|e| seen.insert(e.key))
            .copied()
            .collect();
        last.reverse();
        last
    }

    /// Leader: `f` has logged up to `upto`; ship what committed since, or let it join.
    pub(crate) fn on_batch_done(&mut self, f: NodeId, upto: Zxid, out: &mut Out) {
        self.advance(f, upto, out);
    }

    fn advance(&mut self, f: NodeId, upto: Zxid, out: &mut Out) {
        let shadow = self.params.shadow;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        let committed = lead.committed;
        let Some(sync) = lead.syncs.by.get_mut(&f) else {
            return;
        };
        if sync.scanning || upto < sync.sent {
            return;
        }
        if sync.stats.rounds == 0 {
            sync.stats.shipped_ns = self.now;
        }
        let behind = if shadow { 0 } else { committed - sync.sent };
        if behind > 0 && (sync.stats.rounds == 0 || 2 * behind <= sync.last_round) {
            let from = sync.sent;
            sync.sent = committed;
            sync.last_round = behind;
            sync.stats.rounds += 1;
            sync.stats.buffered += behind;
            let count = self.ship(f, from, committed, out);
            if let Some(sync) = self.lead.as_mut().and_then(|l| l.syncs.by.get_mut(&f)) {
                sync.stats.shipped += count;
            }
            return;
        }
        self.join(f, out);
    }

    /// Leader: `f` has (nearly) caught up: hand it the rest and let it take proposals.
    fn join(&mut self, f: NodeId, out: &mut Out) {
        let (now, early, shadow) = (self.now, self.params.bug_join_early, self.params.shadow);
        let Some((sent, committed)) = self
            .lead
            .as_ref()
            .and_then(|l| l.syncs.by.get(&f).map(|s| (s.sent, l.committed)))
        else {
            return;
        };
        let end = if early || shadow { sent } else { committed };
        let rest = self.shipped(sent, end);
        // A shadow replica already has the open proposals.
        let pending = if shadow {
            Vec::new()
        } else {
            self.open_proposals()
        };
        let lead = self.lead.as_mut().expect("checked");
        let mut sync = lead.syncs.by.remove(&f).expect("checked");
        lead.active.insert(f);
        sync.stats.buffered += end - sent;
        sync.stats.shipped += rest.len() as u64;
        sync.stats.joined_ns = now;
        lead.syncs.last = Some(sync.stats);
        out.push(Command::Send {
            to: f,
            msg: ZabMsg::Join {
                rest,
                upto: end,
                pending,
                committed,
            },
        });
    }

    /// Leader: the proposals not committed yet, with whom to answer.
    fn open_proposals(&self) -> Vec<(Entry, crate::node::Origin)> {
        let lead = self.lead.as_ref().expect("the leader");
        lead.acks
            .iter()
            .map(|(&z, &(_, origin))| (self.log[z as usize - 1], origin))
            .collect()
    }

    /// Follower: log and apply a batch, in `zxid` order (batches may overtake each other).
    pub(crate) fn on_sync(&mut self, from: Zxid, upto: Zxid, entries: Vec<Entry>, out: &mut Out) {
        if self.ready {
            return;
        }
        let Some(j) = self.joining.as_mut() else {
            return;
        };
        j.got = true;
        if from >= self.applied {
            j.ahead.insert(from, (upto, entries));
        }
        while let Some((upto, entries)) = j.ahead.remove(&self.applied) {
            for e in entries {
                self.data.insert(e.key, (e.value, e.zxid));
                self.log.push(e);
                if !self.params.volatile {
                    j.landing.insert(e.zxid);
                    out.push(Command::Persist {
                        token: e.zxid,
                        record: crate::node::ZabRecord::Log(e),
                    });
                }
            }
            self.applied = self.applied.max(upto);
        }
        if self.params.volatile && j.landing.is_empty() {
            // Nothing to wait for: "logged" on arrival.
            out.push(Command::Send {
                to: self.leader(),
                msg: ZabMsg::BatchDone { upto: self.applied },
            });
        }
        self.commit_to = self.commit_to.max(self.applied);
        self.apply_committed(out); // a shadow replica's proposals past the sync
    }

    /// Follower: a sync entry is durable; once all are, say so.
    pub(crate) fn sync_persisted(&mut self, token: Token, out: &mut Out) {
        let Some(j) = self.joining.as_mut() else {
            return;
        };
        if !j.landing.remove(&token) {
            // A proposal (a shadow replica's, or one that overtook the `Join`).
            return out.push(Command::Send {
                to: self.leader(),
                msg: ZabMsg::Ack { zxid: token },
            });
        }
        if j.landing.is_empty() {
            out.push(Command::Send {
                to: self.leader(),
                msg: ZabMsg::BatchDone { upto: self.applied },
            });
        }
    }

    /// Follower: in sync; take the proposals still open and serve clients.
    pub(crate) fn on_join(
        &mut self,
        rest: Vec<Entry>,
        upto: Zxid,
        pending: Vec<(Entry, crate::node::Origin)>,
        committed: Zxid,
        out: &mut Out,
    ) {
        if self.ready || self.joining.is_none() {
            return;
        }
        if upto > self.applied {
            self.on_sync(self.applied, upto, rest, out);
        }
        self.joining = None;
        self.ready = true;
        self.pending.retain(|&z, _| z > upto);
        self.logged.retain(|&z| z > upto);
        for (entry, origin) in pending {
            self.on_proposal(entry, origin, out);
        }
        self.commit_to = self.commit_to.max(committed);
        self.apply_committed(out);
        out.push(Command::Note {
            text: format!("node {} back in sync at zxid {}", self.me, self.applied),
        });
        for (session, req, op) in std::mem::take(&mut self.parked) {
            self.client(session, req, op, out);
        }
    }
}
