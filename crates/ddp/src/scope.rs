//! Scope persistency (DDP §5.5, Fig. 5; lin-scope and re-scope): a session's writes
//! belong to its open scope; `Persist` closes it, and the coordinator has
//! every replica persist the scope's writes as one record, so a scope
//! lands all or nothing (SC-3) and a completed scope survives (SC-2).

use tandem_net::{Command, NodeId, SessionId};

use crate::model::Persistency;
use crate::node::{DdpNode, Out, ScopePersist, Wait};
use crate::types::{Msg, Record, Reply, ScopeId, Version};

impl DdpNode {
    /// Record a write in its session's open scope (Scope persistency only).
    pub(crate) fn scope_of(&mut self, scope: ScopeId, v: Version) -> Option<ScopeId> {
        if self.model.p != Persistency::Scope {
            return None;
        }
        self.open_scopes.entry(scope).or_default().push(v);
        Some(scope)
    }

    /// The client's `Persist`: close the scope and persist it everywhere.
    pub(crate) fn persist_scope(
        &mut self,
        session: SessionId,
        req: u64,
        seq: u64,
        writes: u32,
        out: &mut Out,
    ) {
        if self.model.p != Persistency::Scope {
            out.push(Command::Reply {
                session,
                req,
                result: Reply::Persisted { seq },
            });
            return;
        }
        let scope = ScopeId { session, seq };
        let versions = self.open_scopes.remove(&scope).unwrap_or_default();
        if versions.len() != writes as usize {
            // Some writes went through a coordinator that crashed.
            out.push(Command::Reply {
                session,
                req,
                result: Reply::ScopeLost { seq },
            });
            return;
        }
        if versions.is_empty() {
            out.push(Command::Reply {
                session,
                req,
                result: Reply::Persisted { seq },
            });
            return;
        }
        let token = self.token(Wait::LocalScope { scope });
        out.push(Command::Persist {
            token,
            record: Record::Scope {
                scope,
                versions: versions.clone(),
            },
        });
        let (epoch, skip) = (self.config.epoch, self.heal_skip());
        self.assert_shadow(&skip, "a scope's [PERSIST]s");
        self.send_to_peers(
            Msg::ScopePersist {
                scope,
                versions: versions.clone(),
                epoch,
            },
            &skip,
            out,
        );
        let sp = ScopePersist {
            client: (session, req),
            versions,
            acks: Default::default(),
            local: false,
            sent_at: self.now,
            skip,
        };
        self.scope_persists.insert(scope, sp);
    }

    pub(crate) fn on_scope_persist(
        &mut self,
        from: NodeId,
        scope: ScopeId,
        versions: Vec<Version>,
        epoch: u64,
        out: &mut Out,
    ) {
        let ack = Command::Send {
            to: from,
            msg: Msg::ScopeAck { scope, epoch },
        };
        if self.scopes_done.contains(&scope) || self.bugs.early_scope_ack {
            self.assert_scope_durable(scope);
            out.push(ack);
            if self.scopes_done.contains(&scope) {
                return;
            }
        }
        if self
            .waits
            .values()
            .any(|w| matches!(w, Wait::Scope { scope: s, .. } if *s == scope))
        {
            return; // already persisting it; the landing answers
        }
        let token = self.token(Wait::Scope { scope, to: from });
        out.push(Command::Persist {
            token,
            record: Record::Scope { scope, versions },
        });
    }

    pub(crate) fn on_scope_ack(&mut self, from: NodeId, scope: ScopeId, epoch: u64, out: &mut Out) {
        if epoch != self.config.epoch {
            return;
        }
        if let Some(sp) = self.scope_persists.get_mut(&scope) {
            sp.acks.insert(from);
            self.try_complete_scope(scope, out);
        }
    }

    /// A scope record landed here; a follower tells the coordinator `to`.
    pub(crate) fn scope_record_landed(
        &mut self,
        scope: ScopeId,
        to: Option<NodeId>,
        out: &mut Out,
    ) {
        self.scopes_done.insert(scope);
        match to {
            Some(to) if !self.bugs.early_scope_ack => {
                out.push(Command::Send {
                    to,
                    msg: Msg::ScopeAck {
                        scope,
                        epoch: self.config.epoch,
                    },
                });
            }
            Some(_) => {}
            None => {
                if let Some(sp) = self.scope_persists.get_mut(&scope) {
                    sp.local = true;
                }
                self.try_complete_scope(scope, out);
            }
        }
    }

    fn try_complete_scope(&mut self, scope: ScopeId, out: &mut Out) {
        let Some(sp) = self.scope_persists.get(&scope) else {
            return;
        };
        if sp.local
            && self
                .config
                .others(self.me)
                .all(|o| sp.acks.contains(&o) || sp.skip.contains(&o))
        {
            let (session, req) = sp.client;
            out.push(Command::Reply {
                session,
                req,
                result: Reply::Persisted { seq: scope.seq },
            });
            let sp = self.scope_persists.remove(&scope).expect("checked");
            self.scope_gdp(sp.versions, out);
        }
    }

    /// HEAL: a scope persisted everywhere puts its writes past their GDP
    /// here (CGDP) and at the followers (`[VAL_P]sc`, FGDP).
    fn scope_gdp(&mut self, versions: Vec<Version>, out: &mut Out) {
        if self.heal.is_none() {
            return;
        }
        let versions: Vec<_> = versions.into_iter().map(|v| (v.key, v.ts)).collect();
        for &(key, ts) in &versions {
            self.reached_gdp(key, ts);
        }
        out.push(Command::Broadcast {
            msg: Msg::ScopeVal {
                versions,
                epoch: self.config.epoch,
            },
        });
    }

    pub(crate) fn retry_scopes(&mut self, out: &mut Out) {
        let (now, retry, epoch) = (self.now, self.params.retry_ns, self.config.epoch);
        let others: Vec<NodeId> = self.config.others(self.me).collect();
        for (&scope, sp) in self
            .scope_persists
            .iter_mut()
            .filter(|(_, sp)| now >= sp.sent_at + retry)
        {
            sp.sent_at = now;
            for &o in others
                .iter()
                .filter(|o| !sp.acks.contains(o) && !sp.skip.contains(o))
            {
                out.push(Command::Send {
                    to: o,
                    msg: Msg::ScopePersist {
                        scope,
                        versions: sp.versions.clone(),
                        epoch,
                    },
                });
            }
        }
    }

    /// A new epoch: scope acknowledgements start over, and are asked again.
    pub(crate) fn reconfigure_scopes(&mut self, out: &mut Out) {
        let scopes: Vec<ScopeId> = self.scope_persists.keys().copied().collect();
        for scope in scopes {
            let sp = self.scope_persists.get_mut(&scope).expect("listed");
            sp.acks.clear();
            sp.sent_at = 0;
        }
        self.retry_scopes(out);
        for scope in self.scope_persists.keys().copied().collect::<Vec<_>>() {
            self.try_complete_scope(scope, out);
        }
    }
}
