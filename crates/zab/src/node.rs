//! The leader-based baseline (HEAL §II-C, §IX-D): a
//! ZooKeeper-style store on the same runtime, so that HEAL's recovery is
//! compared with leader-based recovery on the same machinery.
//!
//! **Normal operation.** Every write goes through the leader (the lowest
//! member): it gives the write the next `zxid`, logs it in its NVM and sends
//! a `Proposal` to the followers that are in sync; a follower logs it and
//! answers `Ack`. Once a majority of the ensemble (the leader included) has
//! it logged, the leader commits in `zxid` order, applies, and sends
//! `Commit`; followers apply in the same order. Reads are local (ZooKeeper's).
//!
//! **Recovery** ([`crate::sync`]) is the paper's, with its three
//! costs that HEAL removes: it is *reactive* (the leader scans its NVM log
//! only when the restarted follower sends its last `zxid`), *redundant*
//! (every logged update since then is shipped and logged, several per key
//! included), and the follower takes *no part* in new writes until it has
//! caught up (the leader buffers them and ships them in further rounds).
//!
//! Not modeled: leader election. The leader never fails here; the runs
//! crash a follower, as the paper's Fig. 9 does.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tandem_ddp::{Key, Op, Reply, Ts, Value};
use tandem_net::{
    Command, Config, Durable, Input, NodeFactory, NodeId, Nvm, Protocol, SessionId, Token,
};

use crate::sync::{Joining, SyncStats, Syncs};

pub type Zxid = u64;

/// One logged write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub zxid: Zxid,
    pub key: Key,
    pub value: Value,
}

/// Who to answer once a write commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    pub node: NodeId,
    pub session: SessionId,
    pub req: u64,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum ZabMsg {
    /// A follower hands a client's write to the leader.
    Forward {
        origin: Origin,
        key: Key,
        value: Value,
    },
    Proposal {
        entry: Entry,
        origin: Origin,
    },
    Ack {
        zxid: Zxid,
    },
    /// Every write up to `upto` is committed.
    Commit {
        upto: Zxid,
    },
    /// A restarted follower asks to be brought up to date from `zxid`.
    LastZxid {
        zxid: Zxid,
    },
    /// The logged writes in `(from, upto]`, in order (with `dedup`, only
    /// the last of each key).
    Sync {
        from: Zxid,
        upto: Zxid,
        entries: Vec<Entry>,
    },
    /// The follower has logged everything up to `upto`.
    BatchDone {
        upto: Zxid,
    },
    /// The follower is in sync: from now on it takes proposals. `rest` are
    /// the last committed writes it lacks (up to `upto`), `pending` the
    /// proposals not yet committed.
    Join {
        rest: Vec<Entry>,
        upto: Zxid,
        pending: Vec<(Entry, Origin)>,
        committed: Zxid,
    },
}

/// What a node's NVM holds: the preloaded snapshot, one slot per key, and
/// the log, one slot per `zxid`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum ZabRecord {
    Snap { key: Key, value: Value },
    Log(Entry),
}

impl Durable for ZabRecord {
    type Slot = (u8, u64);
    fn slot(&self) -> (u8, u64) {
        match self {
            ZabRecord::Snap { key, .. } => (0, *key),
            ZabRecord::Log(e) => (1, e.zxid),
        }
    }
}

/// Knobs of the baseline.
#[derive(Clone, Debug)]
pub struct ZabParams {
    /// Log entries per `Sync` message. By default a round is one message,
    /// as HEAL's `CatchUp_resp` and the full copy are: the simulator
    /// charges a bulk message per entry on one core at each end, so every
    /// scheme moves its entries on the same terms.
    pub batch: usize,
    /// Reading one log entry back from NVM during the leader's scan. The
    /// default is Optane's sequential read latency, 169 ns (Yang et al.,
    /// FAST '20), the persistent memory the HEAL paper emulates.
    pub nvm_read_ns: u64,
    /// A restarted follower asks again after this long without an answer.
    pub retry_ns: u64,
    /// The Fig. 9 ablations, each removing one of the costs HEAL removes:
    /// ship only the last write of each key (no redundant copies), scan a
    /// buffer in DRAM instead of the NVM log, and let the follower take
    /// proposals from the start of its sync (a shadow replica) instead of
    /// chasing the writes in rounds.
    pub dedup: bool,
    pub dram: bool,
    pub shadow: bool,
    /// Mutant: the follower joins without the writes committed during its
    /// sync (a test must catch it).
    pub bug_join_early: bool,
    /// Mutant: no stall timer, as this baseline first was: a lost message
    /// stalls a follower, or the leader, for good (the nemesis must catch it).
    pub bug_no_stall: bool,
    /// No log in NVM: a proposal counts as logged when it arrives (the
    /// in-memory ZAB the Kite paper measures Kite against, docs/DESIGN.md §7.5).
    pub volatile: bool,
    /// No progress on the oldest open proposal for this long means a lost
    /// message: the follower resyncs, the leader proposes again ([`crate::stall`]).
    pub stall_ns: u64,
}

impl Default for ZabParams {
    fn default() -> Self {
        ZabParams {
            batch: usize::MAX,
            nvm_read_ns: 169,
            retry_ns: 1_000_000_000,
            dedup: false,
            dram: false,
            shadow: false,
            bug_join_early: false,
            bug_no_stall: false,
            volatile: false,
            stall_ns: 200_000_000,
        }
    }
}

/// The leader's bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct Lead {
    pub(crate) zxid: Zxid,
    /// Per uncommitted write: who has it logged (the leader once its own persist lands).
    pub(crate) acks: BTreeMap<Zxid, (BTreeSet<NodeId>, Origin)>,
    pub(crate) committed: Zxid,
    /// Followers in sync: they get proposals and commits.
    pub(crate) active: BTreeSet<NodeId>,
    pub(crate) syncs: Syncs,
}

pub struct ZabNode {
    pub(crate) me: NodeId,
    pub(crate) ensemble: usize,
    pub(crate) params: ZabParams,
    pub(crate) config: Config,
    pub(crate) data: HashMap<Key, (Value, Zxid)>,
    /// Every write this node has seen, `log[i].zxid == i + 1`.
    pub(crate) log: Vec<Entry>,
    /// Proposals received and not yet applied.
    pub(crate) pending: BTreeMap<Zxid, (Entry, Origin)>,
    pub(crate) applied: Zxid,
    pub(crate) commit_to: Zxid,
    pub(crate) ready: bool,
    pub(crate) lead: Option<Lead>,
    pub(crate) joining: Option<Joining>,
    /// Client writes that came while this node was not in sync.
    pub(crate) parked: Vec<(SessionId, u64, Op)>,
    pub(crate) now: u64,
    /// Follower: open proposals whose log record has landed (acknowledged).
    pub(crate) logged: BTreeSet<Zxid>,
    pub(crate) stall: Stall,
}

/// The stall timer's state ([`crate::stall`]).
#[derive(Debug, Default)]
pub(crate) struct Stall {
    pub(crate) armed: bool,
    /// The oldest open proposal when the timer was armed.
    pub(crate) mark: Option<Zxid>,
}

pub(crate) type Out = Vec<Command<ZabNode>>;

/// Persist tokens: a log entry is named by its `zxid`.
pub(crate) const SCAN_TIMER: Token = 1 << 62;
pub(crate) const RETRY_TIMER: Token = (1 << 62) + 1;
pub(crate) const STALL_TIMER: Token = (1 << 62) + 2;

impl ZabNode {
    fn new(me: NodeId, ensemble: usize, params: ZabParams, config: &Config) -> ZabNode {
        let leader = config.members.iter().min() == Some(&me);
        let lead = leader.then(|| Lead {
            active: config.others(me).collect(),
            ..Lead::default()
        });
        ZabNode {
            me,
            ensemble,
            params,
            config: config.clone(),
            data: HashMap::new(),
            log: Vec::new(),
            pending: BTreeMap::new(),
            applied: 0,
            commit_to: 0,
            ready: true,
            lead,
            joining: None,
            parked: Vec::new(),
            now: 0,
            logged: BTreeSet::new(),
            stall: Stall::default(),
        }
    }

    /// Fill the store with `records` keys (value = key): the snapshot every node starts from.
    pub fn preload(&mut self, records: u64) -> Vec<ZabRecord> {
        self.data.reserve(records as usize);
        (0..records)
            .map(|key| {
                self.data.insert(key, (key, 0));
                ZabRecord::Snap { key, value: key }
            })
            .collect()
    }

    /// Serving clients (a follower in sync, or the leader).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The leader's record of the last follower it brought back.
    pub fn last_sync(&self) -> Option<&SyncStats> {
        self.lead.as_ref().and_then(|l| l.syncs.last.as_ref())
    }

    /// One line on where this node stands, for error messages.
    pub fn describe(&self) -> String {
        let lead = self.lead.as_ref().map(|l| {
            format!(
                ", leader: zxid {} committed {} active {:?} syncing {:?}",
                l.zxid, l.committed, l.active, l.syncs
            )
        });
        format!(
            "node {}: ready {}, applied {}, commit_to {}, {} pending, joining {:?}{}",
            self.me,
            self.ready,
            self.applied,
            self.commit_to,
            self.pending.len(),
            self.joining,
            lead.unwrap_or_default()
        )
    }

    /// The value of `key` and the `zxid` that wrote it (0: the preload).
    pub fn version(&self, key: Key) -> Option<(Value, Zxid)> {
        self.data.get(&key).copied()
    }

    /// Key → value, for checks.
    pub fn contents(&self) -> BTreeMap<Key, Value> {
        self.data.iter().map(|(&k, &(v, _))| (k, v)).collect()
    }

    pub(crate) fn leader(&self) -> NodeId {
        self.config.members.iter().copied().min().unwrap_or(0)
    }

    pub(crate) fn client(&mut self, session: SessionId, req: u64, op: Op, out: &mut Out) {
        match op {
            Op::Read { key, .. } => {
                let (value, zxid) = self
                    .data
                    .get(&key)
                    .map_or((None, 0), |&(v, z)| (Some(v), z));
                out.push(Command::Reply {
                    session,
                    req,
                    result: Reply::Read {
                        value,
                        ts: Ts {
                            version: zxid,
                            node: 0,
                        },
                        id: None,
                    },
                });
            }
            Op::Write { key, value, .. } if self.ready => {
                let origin = Origin {
                    node: self.me,
                    session,
                    req,
                };
                if self.lead.is_some() {
                    self.propose(origin, key, value, out);
                } else {
                    out.push(Command::Send {
                        to: self.leader(),
                        msg: ZabMsg::Forward { origin, key, value },
                    });
                }
            }
            op @ Op::Write { .. } => self.parked.push((session, req, op)),
            _ => out.push(Command::Reply {
                session,
                req,
                result: Reply::Error {
                    msg: "the leader-based baseline takes reads and writes".into(),
                },
            }),
        }
    }

    /// Leader: log the write under the next `zxid` and propose it to the followers in sync.
    fn propose(&mut self, origin: Origin, key: Key, value: Value, out: &mut Out) {
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        lead.zxid += 1;
        let entry = Entry {
            zxid: lead.zxid,
            key,
            value,
        };
        lead.acks.insert(entry.zxid, (BTreeSet::new(), origin));
        for &f in &lead.active {
            out.push(Command::Send {
                to: f,
                msg: ZabMsg::Proposal { entry, origin },
            });
        }
        self.log.push(entry);
        if self.params.volatile {
            return self.on_ack(self.me, entry.zxid, out);
        }
        out.push(Command::Persist {
            token: entry.zxid,
            record: ZabRecord::Log(entry),
        });
    }

    /// Follower: log a proposal, acknowledge it once it is durable.
    pub(crate) fn on_proposal(&mut self, entry: Entry, origin: Origin, out: &mut Out) {
        if self.logged.contains(&entry.zxid) {
            // Proposed again: the acknowledgement may have been lost.
            return out.push(Command::Send {
                to: self.leader(),
                msg: ZabMsg::Ack { zxid: entry.zxid },
            });
        }
        if entry.zxid <= self.applied || self.pending.contains_key(&entry.zxid) {
            return;
        }
        self.pending.insert(entry.zxid, (entry, origin));
        if self.params.volatile {
            self.logged.insert(entry.zxid);
            return out.push(Command::Send {
                to: self.leader(),
                msg: ZabMsg::Ack { zxid: entry.zxid },
            });
        }
        out.push(Command::Persist {
            token: entry.zxid,
            record: ZabRecord::Log(entry),
        });
    }

    fn persisted(&mut self, token: Token, out: &mut Out) {
        if self.joining.is_some() {
            return self.sync_persisted(token, out);
        }
        if self.lead.is_some() {
            return self.on_ack(self.me, token, out);
        }
        if self.pending.contains_key(&token) {
            self.logged.insert(token);
        }
        out.push(Command::Send {
            to: self.leader(),
            msg: ZabMsg::Ack { zxid: token },
        });
    }

    /// Leader: count who has `zxid` logged; commit in order on a majority of the ensemble.
    fn on_ack(&mut self, from: NodeId, zxid: Zxid, out: &mut Out) {
        let quorum = self.ensemble / 2 + 1;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        if let Some((acks, _)) = lead.acks.get_mut(&zxid) {
            acks.insert(from);
        }
        let before = lead.committed;
        let mut replies = Vec::new();
        while lead
            .acks
            .get(&(lead.committed + 1))
            .is_some_and(|(a, _)| a.len() >= quorum && a.contains(&self.me))
        {
            lead.committed += 1;
            let (_, origin) = lead.acks.remove(&lead.committed).expect("checked");
            let entry = self.log[lead.committed as usize - 1];
            self.data.insert(entry.key, (entry.value, entry.zxid));
            self.applied = entry.zxid;
            if origin.node == self.me {
                replies.push(written(origin, entry.zxid));
            }
        }
        if lead.committed > before {
            // Applied in zxid order, then answered and committed to the followers.
            let upto = lead.committed;
            let writes = (upto - before) as u32;
            out.push(Command::InOrder { writes });
            out.append(&mut replies);
            for &f in &lead.active {
                out.push(Command::Send {
                    to: f,
                    msg: ZabMsg::Commit { upto },
                });
            }
        }
    }

    /// Follower: apply committed proposals in `zxid` order; answer its own clients.
    pub(crate) fn apply_committed(&mut self, out: &mut Out) {
        let mut replies = Vec::new();
        let before = self.applied;
        while self.applied < self.commit_to {
            let Some((entry, origin)) = self.pending.remove(&(self.applied + 1)) else {
                break;
            };
            self.data.insert(entry.key, (entry.value, entry.zxid));
            self.log.push(entry);
            self.applied = entry.zxid;
            self.logged.remove(&entry.zxid);
            if origin.node == self.me {
                replies.push(written(origin, entry.zxid));
            }
        }
        if self.applied > before {
            out.push(Command::InOrder {
                writes: (self.applied - before) as u32,
            });
            out.append(&mut replies);
        }
    }

    fn recv(&mut self, from: NodeId, msg: ZabMsg, out: &mut Out) {
        match msg {
            ZabMsg::Forward { origin, key, value } => self.propose(origin, key, value, out),
            ZabMsg::Proposal { entry, origin } => self.on_proposal(entry, origin, out),
            ZabMsg::Ack { zxid } => self.on_ack(from, zxid, out),
            ZabMsg::Commit { upto } => {
                self.commit_to = self.commit_to.max(upto);
                self.apply_committed(out);
            }
            ZabMsg::LastZxid { zxid } => self.on_last_zxid(from, zxid, out),
            ZabMsg::Sync {
                from,
                upto,
                entries,
            } => self.on_sync(from, upto, entries, out),
            ZabMsg::BatchDone { upto } => self.on_batch_done(from, upto, out),
            ZabMsg::Join {
                rest,
                upto,
                pending,
                committed,
            } => self.on_join(rest, upto, pending, committed, out),
        }
    }

    fn reconfigure(&mut self, c: Config, out: &mut Out) {
        self.config = c;
        if let Some(lead) = self.lead.as_mut() {
            let members = &self.config.members;
            lead.active.retain(|f| members.contains(f));
            lead.syncs.retain(|f| members.contains(f));
        }
        if !self.ready && self.config.members.contains(&self.me) {
            self.ask_sync(out);
        }
    }
}

/// The answer to `origin`'s write, committed as `zxid`.
fn written(origin: Origin, zxid: Zxid) -> Command<ZabNode> {
    Command::Reply {
        session: origin.session,
        req: origin.req,
        result: Reply::Written {
            ts: Ts {
                version: zxid,
                node: 0,
            },
            id: None,
        },
    }
}

impl Protocol for ZabNode {
    type Msg = ZabMsg;
    type Op = Op;
    type Reply = Reply;
    type Record = ZabRecord;

    fn weight(msg: &ZabMsg) -> u64 {
        match msg {
            ZabMsg::Sync { entries, .. } => entries.len().max(1) as u64,
            ZabMsg::Join { rest, pending, .. } => (rest.len() + pending.len()).max(1) as u64,
            _ => 1,
        }
    }

    fn step(&mut self, now: u64, input: Input<Self>, out: &mut Out) {
        self.now = now;
        match input {
            Input::Client { session, req, op } => self.client(session, req, op, out),
            Input::Recv { from, msg } => self.recv(from, msg, out),
            Input::PersistDone { token } => self.persisted(token, out),
            Input::Timer { token } => self.timer(token, out),
            Input::Config(c) => self.reconfigure(c, out),
        }
        self.watch_stall(out);
    }
}

/// Builds the ensemble: all members at start; a restarted follower from
/// its snapshot and the longest gap-free prefix of its log.
#[derive(Clone, Debug, Default)]
pub struct ZabFactory {
    pub params: ZabParams,
}

impl NodeFactory<ZabNode> for ZabFactory {
    fn start(&self, id: NodeId, config: &Config) -> ZabNode {
        ZabNode::new(id, config.members.len(), self.params.clone(), config)
    }

    fn recover(&self, id: NodeId, config: &Config, nvm: &Nvm<ZabRecord>) -> ZabNode {
        let ensemble = config.members.len().max(id as usize + 1);
        let mut n = ZabNode::new(id, ensemble, self.params.clone(), config);
        n.lead = None;
        n.ready = false;
        for r in nvm.values() {
            match *r {
                ZabRecord::Snap { key, value } => {
                    n.data.insert(key, (value, 0));
                }
                ZabRecord::Log(e) if e.zxid == n.applied + 1 => {
                    n.data.insert(e.key, (e.value, e.zxid));
                    n.log.push(e);
                    n.applied = e.zxid;
                }
                ZabRecord::Log(_) => {} // past a gap: the leader sends it again
            }
        }
        n.commit_to = n.applied;
        n
    }
}
