//! The causal checks of [`super`] (C1, C1', C2, C3, RP-1'; docs/DDP.md,
//! "Check labels"), for the UPD family. They follow each session's real causal past,
//! not the protocol's vectors: a write's direct dependencies are the
//! session's previous write and the versions it read since, and C1 and C2
//! hold for all of a write's past if they hold for these at every node
//! (induction on the order updates are applied, or persisted, there).

use std::collections::BTreeMap;

use tandem_net::{NodeId, Nvm};

use super::{nvm_ts, Rec, Run};
use crate::model::{Consistency, DepGate, Persistency};
use crate::node::DdpNode;
use crate::types::{Key, Record, Ts, Value, Version};
use crate::upd::vector::{UpdId, Vector};

/// A session's causal past as the client and the checks keep it.
#[derive(Clone, Debug, Default)]
pub(super) struct Past {
    /// Sent with each operation (Causal): the ids of every reply merged.
    pub after: Vector,
    /// What the session observed since its last write, that write included:
    /// the direct dependencies of its next write (with their update ids).
    pub since: Vec<(Key, Ts, Option<UpdId>)>,
}

impl Past {
    /// The node answered `PastLost`: lower the vector, and forget the
    /// dependencies it lost (the others stay checked).
    pub(super) fn lose(&mut self, upto: &Vector) {
        self.after.clamp(upto);
        let after = &self.after;
        self.since
            .retain(|(_, _, id)| id.is_none_or(|id| after.contains(id)));
    }

    /// The direct dependencies of the session's next write.
    pub(super) fn deps(&self) -> Vec<(Key, Ts)> {
        self.since.iter().map(|&(k, ts, _)| (k, ts)).collect()
    }
}

impl Rec {
    /// Reads return versions persisted at the reading node: RE-p in the UPD
    /// family (RP-1'), Causal-Synch (C3).
    pub(super) fn reads_persisted(&self) -> bool {
        let m = self.model;
        m.rules().upd.is_some()
            && (m.p == Persistency::Re || (m.c == Consistency::Causal && m.p == Persistency::Synch))
    }

    /// Causal with Synch or RE-p: every NVM is causally closed (C2).
    pub(super) fn closed_nvm(&self) -> bool {
        self.model.c == Consistency::Causal
            && matches!(self.model.p, Persistency::Synch | Persistency::Re)
    }

    /// A direct dependency of the write of `v` that `nvm` lacks.
    pub(super) fn missing_dep(&self, v: &Version, nvm: &Nvm<Record>) -> Option<(Key, Ts)> {
        self.deps
            .get(&v.value)?
            .iter()
            .copied()
            .find(|&(k, t)| nvm_ts(nvm, k) < t)
    }

    /// C1: each update a node applies finds its direct
    /// dependencies applied there (and, with a persisted gate, at a node
    /// that did not coordinate it, persisted there).
    pub(super) fn observe(&mut self, node: NodeId, now: u64, p: &DdpNode, nvm: &[Nvm<Record>]) {
        let n = node as usize;
        if !p.is_ready() {
            self.seen[n] = None;
            return;
        }
        if self.seen[n].is_none() {
            self.seen[n] = Some(
                p.snapshot()
                    .into_iter()
                    .map(|(k, (ts, _))| (k, ts))
                    .collect(),
            );
            return;
        }
        for v in p.applied_now() {
            if let Some(bad) = self.c1(node, v, &nvm[n]) {
                self.violations.push(format!(
                    "C1: node {node} applied key {} {:?} before its dependency {bad} (t={now})",
                    v.key, v.ts
                ));
            }
            let seen = self.seen[n].as_mut().expect("ready");
            let t = seen.entry(v.key).or_default();
            *t = (*t).max(v.ts);
        }
    }

    fn c1(&self, node: NodeId, v: &Version, nvm: &Nvm<Record>) -> Option<String> {
        let gate = self.model.rules().upd?.gate;
        let seen = self.seen[node as usize].as_ref()?;
        for &(k, t) in self.deps.get(&v.value).filter(|_| gate != DepGate::None)? {
            if seen.get(&k).copied().unwrap_or_default() < t {
                return Some(format!("key {k} {t:?} was applied there"));
            }
            if gate == DepGate::Persisted && v.ts.node != node && nvm_ts(nvm, k) < t {
                return Some(format!("key {k} {t:?} was persisted there"));
            }
        }
        None
    }
}

impl Run {
    /// C2 after F1 (Causal-Synch, Causal-RE-p): each NVM is causally closed.
    pub(super) fn check_closed_nvms(&mut self) {
        let rec = self.rec.borrow();
        if !rec.closed_nvm() {
            return;
        }
        let mut v = Vec::new();
        for n in 0..self.cfg.nodes {
            let nvm = self.net.nvm(n);
            for r in nvm.values() {
                let Record::Key(x) = r else { continue };
                if let Some((k, t)) = rec.missing_dep(x, &nvm) {
                    v.push(format!("C2: after the crash node {n}'s NVM holds key {} {:?} but not its dependency key {k} {t:?}", x.key, x.ts));
                }
            }
        }
        drop(rec);
        self.report.violations.extend(v.into_iter().take(5));
    }

    /// G2 for every UPD model; C1' (read-your-writes and monotonic reads
    /// per session, docs/DDP.md open point 23) under Causal, up to a whole-cluster crash.
    pub(super) fn check_upd_history(&mut self, crash_at: Option<usize>) {
        let rec = self.rec.borrow();
        let mut v = Vec::new();
        if let Err(e) = tandem_check::check_no_thin_air(&rec.ops) {
            v.push(format!("G2: {e}"));
        }
        if self.cfg.model.c == Consistency::Causal {
            let upto = crash_at.unwrap_or(rec.ops.len());
            if let Err(e) = tandem_check::check_sessions(&rec.ops[..upto], &version_order(&rec)) {
                v.push(format!("C1' (session order): {e}"));
            }
        }
        drop(rec);
        self.report.violations.extend(v);
    }
}

/// Each key's versions in timestamp order, for the session checks.
fn version_order(rec: &Rec) -> tandem_check::VersionOrder {
    let mut by_key: BTreeMap<Key, Vec<(Ts, Value)>> = BTreeMap::new();
    for (&value, &(k, ts, _)) in &rec.writes {
        if let Some(ts) = ts {
            by_key.entry(k).or_default().push((ts, value));
        }
    }
    let versions = by_key.into_iter().map(|(k, mut vs)| {
        vs.sort_unstable();
        (k, vs.into_iter().map(|(_, v)| v).collect())
    });
    tandem_check::version_order(&versions.collect())
}
