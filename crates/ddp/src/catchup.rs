//! Restart: a node rebuilds what its NVM holds, then catches up by a full
//! copy from every other member (HEAL, the next issue, replaces the copy).
//! Until the copy is in, it parks client operations. A version that was
//! not validated where it came from stays invalid here until a VAL or a
//! replay validates it, so a restart never serves an unvalidated version.

use tandem_net::{Command, Config, NodeFactory, NodeId, Nvm};

use crate::heal::state::{Heal, HealOpts};
use crate::model::Model;
use crate::node::{Bugs, DdpNode, Out, Params};
use crate::types::{Msg, Record, Version};

impl DdpNode {
    pub(crate) fn on_copy_req(&mut self, from: NodeId, out: &mut Out) {
        let read = self.rules.read;
        let mut versions: Vec<(Version, bool)> = (self.keys.iter())
            .filter_map(|(&k, s)| {
                s.version(k)
                    .map(|v| (v, s.write.is_none() && read.holds(s.c_ok(), s.p_ok())))
            })
            .collect();
        versions.sort_by_key(|v| v.0.key); // key order: a seed replays the same steps
        out.push(Command::Send {
            to: from,
            msg: Msg::CopyResp { versions },
        });
    }

    /// A copy asked in an epoch this node has not reached: served once it
    /// has. Before, a member still in the epoch that left the asker out
    /// could copy out a key, then acknowledge a newer write of it there,
    /// which ended without the asker (C11 under `--crash suspect-spread`).
    pub(crate) fn on_copy_req_in(&mut self, from: NodeId, epoch: u64, out: &mut Out) {
        if epoch > self.config.epoch && !self.bugs.copy_in_old_epoch {
            return self.copy_reqs.push((from, epoch));
        }
        self.assert_copy_epoch(from, epoch);
        if self.rules.upd.is_some() {
            self.on_upd_copy_req(from, out);
        } else {
            self.on_copy_req(from, out);
        }
    }

    /// After a reconfiguration: the copies asked in this epoch (or before).
    pub(crate) fn serve_deferred_copies(&mut self, out: &mut Out) {
        let epoch = self.config.epoch;
        let (due, later) = std::mem::take(&mut self.copy_reqs)
            .into_iter()
            .partition(|&(_, e)| e <= epoch);
        self.copy_reqs = later;
        for (from, e) in due {
            self.on_copy_req_in(from, e, out);
        }
    }

    /// The first of `nodes` after this node in ring order.
    pub(crate) fn ring_next(&self, nodes: impl Iterator<Item = NodeId>) -> Option<NodeId> {
        let me = self.me;
        nodes.min_by_key(|&n| (n < me, n))
    }

    pub(crate) fn on_copy_resp(
        &mut self,
        from: NodeId,
        versions: Vec<(Version, bool)>,
        out: &mut Out,
    ) {
        if self.ready || !self.copy_from.remove(&from) {
            return;
        }
        self.copy_got = true;
        for (v, valid) in versions {
            self.adopt(v, valid, out);
        }
        self.check_ready(out);
    }

    /// Take a copied version if it is newer; trust its validity only then.
    fn adopt(&mut self, v: Version, valid: bool, out: &mut Out) {
        if self.apply_newer(v) && self.rules.persist != crate::model::PersistIssue::AtScope {
            self.persist_version(v, out);
        }
        let s = self.key(v.key);
        if valid && v.ts == s.ts {
            s.val_c = s.val_c.max(v.ts);
            s.val_p = s.val_p.max(v.ts);
            self.reached_gdp(v.key, v.ts); // HEAL: a copied valid version is past its GDP
        }
    }

    /// After a reconfiguration: ask the members for a copy once, and ask
    /// again if a member left before it answered. The manager removes the
    /// last caught-up member only once another member is caught up, and
    /// that one may have joined after this node asked: without asking it,
    /// this node would take its catch-up as done with nothing copied (C11
    /// under `--crash flip`; mutant `source-left-ready`).
    pub(crate) fn copy_after_reconfigure(&mut self, out: &mut Out) {
        if self.ready || !self.config.members.contains(&self.me) || self.heal_owns_catchup() {
            return;
        }
        let (members, before) = (self.config.members.clone(), self.copy_from.len());
        self.copy_from.retain(|m| members.contains(m));
        let source_left = self.copy_asked
            && if self.bugs.source_left_ready {
                self.copy_from_one && self.copy_from.is_empty() && !self.copy_got
            } else {
                self.copy_from.len() < before
            };
        if !self.copy_asked || source_left {
            self.copy_asked = true;
            self.copy_retry = (self.now + self.params.bulk_ns, self.params.bulk_ns);
            let (others, epoch) = (self.config.others(self.me), self.config.epoch);
            self.copy_from = if self.copy_from_one {
                self.ring_next(others).into_iter().collect()
            } else {
                others.collect()
            };
            for &o in &self.copy_from {
                out.push(Command::Send {
                    to: o,
                    msg: Msg::CopyReq { epoch },
                });
            }
        }
        self.check_ready(out);
    }

    /// Ask again the members whose copy has not come (lost messages),
    /// waiting twice as long each time: a large copy takes a while, and
    /// every request makes the source build it again.
    pub(crate) fn retry_copy(&mut self, out: &mut Out) {
        if !self.ready && self.copy_asked && self.now >= self.copy_retry.0 {
            self.copy_retry = (self.now + self.copy_retry.1 * 2, self.copy_retry.1 * 2);
            let epoch = self.config.epoch;
            for &o in &self.copy_from {
                out.push(Command::Send {
                    to: o,
                    msg: Msg::CopyReq { epoch },
                });
            }
        }
    }

    fn check_ready(&mut self, out: &mut Out) {
        if self.rules.upd.is_some() {
            return self.upd_check_ready(out);
        }
        if !self.copy_from.is_empty() || !self.copy_asked {
            return;
        }
        self.assert_copy_answered();
        self.become_ready(out);
        self.heal_copy_done(out);
    }

    /// Serve clients: settle every key, run the parked operations.
    pub(crate) fn become_ready(&mut self, out: &mut Out) {
        self.ready = true;
        let keys: Vec<_> = self.unsettled.iter().copied().collect();
        for k in keys {
            self.settle(k, out);
        }
        for (session, req, op) in std::mem::take(&mut self.parked) {
            self.step_client(session, req, op, out);
        }
    }

    /// Rebuild from NVM: every version there, none validated yet.
    fn load(&mut self, nvm: &Nvm<Record>) {
        for r in nvm.values() {
            let versions: Vec<Version> = match r {
                Record::Key(v) | Record::Rollback { to: Some(v), .. } => vec![*v],
                Record::Rollback { to: None, .. } | Record::Gdp { .. } => continue,
                Record::Incarnation(i) => {
                    self.upd.origin.since = self.upd.origin.since.max(i + 1);
                    continue;
                }
                Record::Scope { scope, versions } => {
                    self.scopes_done.insert(*scope);
                    versions.clone()
                }
                Record::Tx { .. } => self.load_tx(r),
            };
            for v in versions {
                let s = self.key(v.key);
                if v.ts > s.ts {
                    s.ts = v.ts;
                    s.value = Some(v.value);
                }
                s.nvm = s.nvm.max(v.ts);
                if self.rules.trans.is_none() || self.rules.read != crate::model::Gate::Immediate {
                    self.unsettled.insert(v.key); // Trans: committed versions need no replay (but RE-p's VAL_p)
                }
            }
        }
        self.ready = false;
    }
}

/// Builds DDP nodes of one model.
#[derive(Clone, Debug)]
pub struct DdpFactory {
    pub model: Model,
    pub params: Params,
    pub bugs: Bugs,
    /// Recover a restarted node with HEAL instead of a full copy.
    pub heal: Option<HealOpts>,
    /// The full copy comes from one member (Hermes-style, the HEAL paper's
    /// State-of-the-art baseline) instead of every member. Lin and RE only:
    /// after a whole-cluster crash each node's NVM holds part of the newest state.
    pub copy_from_one: bool,
}

impl DdpFactory {
    /// Full-copy recovery from every member, no test bugs.
    pub fn new(model: Model, params: Params) -> DdpFactory {
        DdpFactory {
            model,
            params,
            bugs: Bugs::default(),
            heal: None,
            copy_from_one: false,
        }
    }
}

impl NodeFactory<DdpNode> for DdpFactory {
    fn start(&self, id: NodeId, config: &Config) -> DdpNode {
        let mut n = DdpNode::new(id, self.model, self.params, self.bugs, config.clone());
        n.heal = self
            .heal
            .map(|opts| Box::new(Heal::new(opts, &config.members)));
        n.copy_from_one = self.copy_from_one;
        n
    }

    fn recover(&self, id: NodeId, config: &Config, nvm: &Nvm<Record>) -> DdpNode {
        let mut n = self.start(id, config);
        // What it voted before the crash is gone: it vouches for nothing
        // until it is added back.
        n.trans.since = crate::trans::state::NOT_MEMBER;
        if n.heal.is_some() {
            n.heal_load(nvm);
            return n;
        }
        n.load(nvm);
        if n.rules.upd.is_some() {
            n.upd_loaded();
        }
        n
    }
}
