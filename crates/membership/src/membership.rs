//! The membership state machine.

use std::collections::{BTreeMap, BTreeSet};

pub type NodeId = u16;

#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// A node is declared failed when no heartbeat arrived for this long
    /// (DESIGN.md §4.5: 5 ms over TCP by default).
    pub heartbeat_timeout_ns: u64,
    /// Coordinator ids are `1..id_space`; with the store's log slots this is
    /// `log_slots`, so every live coordinator owns a log slot.
    pub id_space: u32,
    /// Fraction of ids in use (live or failed) above which failed ids are
    /// recycled after a stray-lock scan.
    pub recycle_threshold: f64,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig { heartbeat_timeout_ns: 5_000_000, id_space: 1024, recycle_threshold: 0.95 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    Alive,
    /// Declared failed; waiting for every memory node to revoke its access.
    Revoking,
    /// Access revoked; log recovery under way.
    Recovering,
    /// Recovered; its ids are in `failed_ids`.
    Failed,
    /// Left cleanly: every transaction finished, no lock held. Its ids are
    /// retired (not reused: a conservative choice).
    Left,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A compute node asks for `coordinators` ids.
    Join { node: NodeId, coordinators: u16 },
    Heartbeat { node: NodeId },
    /// A compute node shuts down cleanly after its last transaction.
    Leave { node: NodeId },
    /// Time passed (the runtime calls this periodically).
    Tick,
    /// Every memory node acknowledged the revocation of `node`.
    RevokeAcked { node: NodeId },
    /// Log recovery of `node`'s coordinators finished (invalidated logs included).
    RecoveryDone { node: NodeId },
    /// The stray-lock scan for these ids finished; they may be reused.
    ScanDone { ids: Vec<u16> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Answer a join: the node's coordinators are `ids`.
    AssignIds { node: NodeId, ids: Vec<u16> },
    /// Refuse a join (id space exhausted, or the node is known as failed).
    Reject { node: NodeId, reason: String },
    /// Active-link termination on every memory node; answer with `RevokeAcked`.
    Revoke { node: NodeId },
    /// Run log recovery for `ids` (all of `node`'s coordinators) on
    /// `on`, a live compute node, or on the membership service itself (`None`).
    /// Re-issued from the start if the recovering node fails (idempotent).
    Recover { node: NodeId, ids: Vec<u16>, on: Option<NodeId> },
    /// Add `ids` to every compute node's `failed_ids`: stealing may start.
    NotifyFailed { ids: Vec<u16> },
    /// Release stray locks of these failed ids, then answer `ScanDone`.
    ScanStrayLocks { ids: Vec<u16> },
}

#[derive(Clone, Debug)]
struct Node {
    ids: Vec<u16>,
    last_heartbeat_ns: u64,
    status: NodeStatus,
    /// Node whose recovery this node is running, if any.
    recovering_for: Vec<NodeId>,
}

#[derive(Clone, Debug)]
pub struct Membership {
    cfg: MembershipConfig,
    nodes: BTreeMap<NodeId, Node>,
    /// Never-used ids start here; ids below it are live, failed, or recycled.
    next_id: u32,
    recycled: BTreeSet<u16>,
    failed_ids: BTreeSet<u16>,
    scanning: bool,
    last_tick_ns: Option<u64>,
    /// Ticks at which the detector itself had been paused (see `detect`).
    pub pauses_detected: u64,
}

impl Membership {
    pub fn new(cfg: MembershipConfig) -> Self {
        assert!(cfg.id_space >= 2 && cfg.id_space <= 1 << 16, "id space must be 2..=65536");
        Membership { cfg, nodes: BTreeMap::new(), next_id: 1, recycled: BTreeSet::new(), failed_ids: BTreeSet::new(), scanning: false, last_tick_ns: None, pauses_detected: 0 }
    }

    pub fn status(&self, node: NodeId) -> Option<NodeStatus> {
        self.nodes.get(&node).map(|n| n.status)
    }

    /// When `node`'s last heartbeat arrived.
    pub fn last_heartbeat_ns(&self, node: NodeId) -> Option<u64> {
        self.nodes.get(&node).map(|n| n.last_heartbeat_ns)
    }

    pub fn failed_ids(&self) -> &BTreeSet<u16> {
        &self.failed_ids
    }

    /// The node that was given coordinator id `id`, most recently.
    pub fn owner_of(&self, id: u16) -> Option<NodeId> {
        self.nodes.iter().filter(|(_, n)| n.ids.contains(&id)).map(|(k, _)| *k).last()
    }

    pub fn ids_of(&self, node: NodeId) -> &[u16] {
        self.nodes.get(&node).map(|n| n.ids.as_slice()).unwrap_or(&[])
    }

    fn ids_in_use(&self) -> usize {
        (self.next_id as usize - 1) - self.recycled.len()
    }

    fn alive(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().filter(|(_, n)| n.status == NodeStatus::Alive).map(|(id, _)| *id)
    }

    pub fn step(&mut self, now_ns: u64, event: Event) -> Vec<Command> {
        let mut out = Vec::new();
        match event {
            Event::Join { node, coordinators } => self.join(now_ns, node, coordinators, &mut out),
            Event::Heartbeat { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Alive {
                        n.last_heartbeat_ns = n.last_heartbeat_ns.max(now_ns);
                    }
                }
            }
            Event::Tick => self.detect(now_ns, &mut out),
            Event::Leave { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Alive && n.recovering_for.is_empty() {
                        n.status = NodeStatus::Left;
                    }
                }
            }
            Event::RevokeAcked { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Revoking {
                        n.status = NodeStatus::Recovering;
                        let ids = n.ids.clone();
                        self.start_recovery(node, ids, &mut out);
                    }
                }
            }
            Event::RecoveryDone { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Recovering {
                        n.status = NodeStatus::Failed;
                        let ids = n.ids.clone();
                        self.failed_ids.extend(ids.iter().copied());
                        for r in self.nodes.values_mut() {
                            r.recovering_for.retain(|&x| x != node);
                        }
                        out.push(Command::NotifyFailed { ids });
                        self.maybe_recycle(&mut out);
                    }
                }
            }
            Event::ScanDone { ids } => {
                self.scanning = false;
                for id in ids {
                    // The id's locks are gone and its log invalidated: reusable.
                    if self.failed_ids.remove(&id) {
                        self.recycled.insert(id);
                    }
                }
            }
        }
        self.check_invariants();
        out
    }

    fn join(&mut self, now_ns: u64, node: NodeId, coordinators: u16, out: &mut Vec<Command>) {
        if let Some(n) = self.nodes.get(&node) {
            if n.status == NodeStatus::Alive {
                // A retried join: answer with the same ids.
                out.push(Command::AssignIds { node, ids: n.ids.clone() });
            } else {
                out.push(Command::Reject { node, reason: format!("compute node {node} was declared failed; rejoin under a new node id") });
            }
            return;
        }
        let free = self.recycled.len() + (self.cfg.id_space - self.next_id) as usize;
        if coordinators == 0 || coordinators as usize > free {
            out.push(Command::Reject {
                node,
                reason: format!("{coordinators} coordinator ids requested, {free} available (id space {})", self.cfg.id_space),
            });
            return;
        }
        // Strictly serialized: fresh ids first, then recycled ones.
        let mut ids = Vec::with_capacity(coordinators as usize);
        while ids.len() < coordinators as usize && self.next_id < self.cfg.id_space {
            ids.push(self.next_id as u16);
            self.next_id += 1;
        }
        while ids.len() < coordinators as usize {
            let id = *self.recycled.iter().next().expect("counted above");
            self.recycled.remove(&id);
            ids.push(id);
        }
        self.nodes.insert(node, Node { ids: ids.clone(), last_heartbeat_ns: now_ns, status: NodeStatus::Alive, recovering_for: Vec::new() });
        out.push(Command::AssignIds { node, ids });
    }

    fn detect(&mut self, now_ns: u64, out: &mut Vec<Command>) {
        let timeout = self.cfg.heartbeat_timeout_ns;
        // If the detector itself did not run for half a timeout (its process
        // was descheduled or paused), silence proves nothing: heartbeats may
        // be queued behind the pause. Give every node a fresh timeout rather
        // than declare them all failed. (Safety never rests on the detector:
        // a false positive is fenced off by revocation. This is accuracy.)
        let paused = self.last_tick_ns.is_some_and(|t| now_ns.saturating_sub(t) > timeout / 2);
        self.last_tick_ns = Some(now_ns);
        if paused {
            self.pauses_detected += 1;
            for n in self.nodes.values_mut() {
                if n.status == NodeStatus::Alive {
                    n.last_heartbeat_ns = n.last_heartbeat_ns.max(now_ns);
                }
            }
            return;
        }
        let late: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.status == NodeStatus::Alive && now_ns.saturating_sub(n.last_heartbeat_ns) > timeout)
            .map(|(id, _)| *id)
            .collect();
        for node in late {
            let n = self.nodes.get_mut(&node).expect("listed");
            n.status = NodeStatus::Revoking;
            let orphaned = std::mem::take(&mut n.recovering_for);
            out.push(Command::Revoke { node });
            // It was recovering others: re-run their recovery from the start elsewhere.
            for other in orphaned {
                let ids = self.nodes[&other].ids.clone();
                self.start_recovery(other, ids, out);
            }
        }
    }

    fn start_recovery(&mut self, node: NodeId, ids: Vec<u16>, out: &mut Vec<Command>) {
        let on = self.alive().next();
        if let Some(r) = on {
            self.nodes.get_mut(&r).expect("alive").recovering_for.push(node);
        }
        out.push(Command::Recover { node, ids, on });
    }

    fn maybe_recycle(&mut self, out: &mut Vec<Command>) {
        let used = self.ids_in_use() as f64 / (self.cfg.id_space - 1) as f64;
        if !self.scanning && used > self.cfg.recycle_threshold && !self.failed_ids.is_empty() {
            self.scanning = true;
            out.push(Command::ScanStrayLocks { ids: self.failed_ids.iter().copied().collect() });
        }
    }

    fn check_invariants(&self) {
        let mut seen = BTreeSet::new();
        for n in self.nodes.values() {
            if matches!(n.status, NodeStatus::Failed | NodeStatus::Left) {
                continue;
            }
            for id in &n.ids {
                assert!(seen.insert(*id), "id {id} held by two non-failed nodes");
                assert!(!self.recycled.contains(id) && !self.failed_ids.contains(id), "live id {id} is free or failed");
            }
        }
        assert!(self.recycled.is_disjoint(&self.failed_ids), "an id is both failed and free");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Membership {
        Membership::new(MembershipConfig { heartbeat_timeout_ns: 100, id_space: 64, recycle_threshold: 0.95 })
    }

    #[test]
    fn ids_are_unique_and_serialized_and_a_retry_gets_the_same() {
        let mut m = m();
        assert_eq!(m.step(0, Event::Join { node: 1, coordinators: 3 }), vec![Command::AssignIds { node: 1, ids: vec![1, 2, 3] }]);
        assert_eq!(m.step(0, Event::Join { node: 2, coordinators: 2 }), vec![Command::AssignIds { node: 2, ids: vec![4, 5] }]);
        assert_eq!(m.step(0, Event::Join { node: 1, coordinators: 3 }), vec![Command::AssignIds { node: 1, ids: vec![1, 2, 3] }]);
        match &m.step(0, Event::Join { node: 3, coordinators: 100 })[0] {
            Command::Reject { reason, .. } => assert!(reason.contains("available")),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn a_silent_node_is_revoked_then_recovered_then_published_in_that_order() {
        let mut m = m();
        m.step(0, Event::Join { node: 1, coordinators: 2 });
        m.step(0, Event::Join { node: 2, coordinators: 2 });
        m.step(90, Event::Heartbeat { node: 2 });
        assert_eq!(m.step(100, Event::Tick), vec![]);
        // Node 1 has been silent for 101 ns: revoke first, nothing else yet.
        assert_eq!(m.step(101, Event::Tick), vec![Command::Revoke { node: 1 }]);
        assert_eq!(m.failed_ids().len(), 0, "no stealing before recovery");
        assert_eq!(m.step(102, Event::RecoveryDone { node: 1 }), vec![], "recovery cannot finish before revocation");
        assert_eq!(m.step(103, Event::RevokeAcked { node: 1 }), vec![Command::Recover { node: 1, ids: vec![1, 2], on: Some(2) }]);
        assert_eq!(m.step(104, Event::RecoveryDone { node: 1 }), vec![Command::NotifyFailed { ids: vec![1, 2] }]);
        assert_eq!(m.status(1), Some(NodeStatus::Failed));
        // A late heartbeat of the failed node changes nothing; it cannot rejoin under its id.
        m.step(105, Event::Heartbeat { node: 1 });
        assert_eq!(m.status(1), Some(NodeStatus::Failed));
        assert!(matches!(m.step(106, Event::Join { node: 1, coordinators: 2 })[0], Command::Reject { .. }));
    }

    #[test]
    fn a_node_that_leaves_cleanly_is_not_declared_failed() {
        let mut m = m();
        m.step(0, Event::Join { node: 1, coordinators: 1 });
        m.step(10, Event::Leave { node: 1 });
        for t in (20..400).step_by(20) {
            assert_eq!(m.step(t, Event::Tick), vec![]);
        }
        assert_eq!(m.status(1), Some(NodeStatus::Left));
    }

    #[test]
    fn a_paused_detector_does_not_declare_everyone_failed() {
        let mut m = m();
        m.step(0, Event::Join { node: 1, coordinators: 1 });
        assert_eq!(m.step(40, Event::Tick), vec![]);
        // The detector stalls from 40 to 500: node 1's heartbeats could not be seen.
        assert_eq!(m.step(500, Event::Tick), vec![], "a pause gives a grace period");
        assert_eq!(m.pauses_detected, 1);
        // Ticking normally again, a node that stays silent is declared failed.
        let mut t = 500;
        let mut revoked = false;
        while t < 700 && !revoked {
            t += 20;
            revoked = m.step(t, Event::Tick) == vec![Command::Revoke { node: 1 }];
        }
        assert!(revoked && t > 600, "declared at {t}");
    }

    #[test]
    fn recovery_is_reissued_when_the_recovering_node_fails() {
        let mut m = m();
        for n in 1..=3 {
            m.step(0, Event::Join { node: n, coordinators: 1 });
        }
        m.step(50, Event::Heartbeat { node: 2 });
        m.step(50, Event::Heartbeat { node: 3 });
        m.step(120, Event::Tick);
        assert_eq!(m.step(121, Event::RevokeAcked { node: 1 }), vec![Command::Recover { node: 1, ids: vec![1], on: Some(2) }]);
        m.step(140, Event::Heartbeat { node: 3 });
        // Node 2, running node 1's recovery, goes silent.
        let cmds = m.step(151, Event::Tick);
        assert_eq!(cmds, vec![Command::Revoke { node: 2 }, Command::Recover { node: 1, ids: vec![1], on: Some(3) }]);
    }

    #[test]
    fn failed_ids_are_recycled_only_after_a_stray_lock_scan() {
        let mut m = Membership::new(MembershipConfig { heartbeat_timeout_ns: 10, id_space: 21, recycle_threshold: 0.5 });
        m.step(0, Event::Join { node: 1, coordinators: 8 });
        m.step(0, Event::Join { node: 2, coordinators: 4 });
        m.step(5, Event::Heartbeat { node: 2 });
        m.step(11, Event::Tick);
        m.step(11, Event::RevokeAcked { node: 1 });
        let cmds = m.step(12, Event::RecoveryDone { node: 1 });
        let ids: Vec<u16> = (1..=8).collect();
        assert_eq!(cmds, vec![Command::NotifyFailed { ids: ids.clone() }, Command::ScanStrayLocks { ids: ids.clone() }]);
        // Before the scan answers, failed ids are not handed out.
        assert!(matches!(m.step(13, Event::Join { node: 3, coordinators: 9 })[0], Command::Reject { .. }));
        m.step(14, Event::ScanDone { ids });
        assert!(m.failed_ids().is_empty());
        match &m.step(15, Event::Join { node: 3, coordinators: 9 })[0] {
            Command::AssignIds { ids, .. } => assert_eq!(ids.len(), 9),
            c => panic!("{c:?}"),
        }
    }
}
