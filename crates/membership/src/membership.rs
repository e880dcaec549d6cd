//! The membership state machine.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::fleet::{Fleet, FleetCommand, FleetEvent, MemoryConfig};

pub use crate::ids::NodeId;

#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// A node is declared failed when no heartbeat arrived for this long
    /// (docs/DESIGN.md §4.5: 5 ms by default here; the `tandem pandora membership`
    /// process defaults to 250 ms).
    pub heartbeat_timeout_ns: u64,
    /// Coordinator ids are `1..id_space`; with the store's log slots this is
    /// `log_slots`, so every live coordinator owns a log slot.
    pub id_space: u32,
    /// Fraction of ids in use (live or failed) above which failed ids are
    /// recycled after a stray-lock scan.
    pub recycle_threshold: f64,
    /// After [`Membership::restore`], a node that was alive gets this long on
    /// top of a fresh heartbeat timeout to reconnect to the restarted service
    /// before its silence counts.
    pub restore_grace_ns: u64,
    /// Failure-detector replicas that receive heartbeats (Pandora paper
    /// §3.2.4, the distributed FD): compute nodes send every heartbeat to all
    /// of them, and a node is declared failed only when fewer than a majority
    /// received one within the timeout. 1 (the default) is the standalone FD.
    pub fd_replicas: u8,
    /// Which of the `fd_replicas` this state machine runs on: its own
    /// [`Event::Heartbeat`]s count for this replica; the others report
    /// theirs with [`Event::Relay`].
    pub self_replica: u8,
}

/// At most this many failure-detector replicas.
pub const MAX_FD_REPLICAS: u8 = 7;

/// Node ids from here to [`LAST_INCARNATION_ID`] are handed out by the
/// service to new incarnations of fenced compute nodes
/// ([`Membership::new_incarnation`]); operators choose ids below it.
pub const FIRST_INCARNATION_ID: NodeId = 0x8000;
/// The last node id [`Membership::new_incarnation`] hands out (ids above are
/// reserved for the service's own recovery coordinator, loaders and checkers).
pub const LAST_INCARNATION_ID: NodeId = 65_000;

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig {
            heartbeat_timeout_ns: 5_000_000,
            id_space: 1024,
            recycle_threshold: 0.95,
            restore_grace_ns: 0,
            fd_replicas: 1,
            self_replica: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
    /// A heartbeat from `node` reached this replica.
    Heartbeat { node: NodeId },
    /// Failure-detector replica `replica` reports the nodes it received
    /// heartbeats from since its previous report. Replicas report on every
    /// tick of their own, even with nothing to report: a replica that stops
    /// reporting stops counting towards the majority.
    Relay { replica: u8, nodes: Vec<NodeId> },
    /// A compute node shuts down cleanly after its last transaction.
    Leave { node: NodeId },
    /// Time passed (the runtime calls this periodically).
    Tick,
    /// Link termination of `node` is done: every memory node acknowledged
    /// that it revoked the node's access (Pandora's active-link termination).
    LinksTerminated { node: NodeId },
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
    /// Active-link termination on every memory node; answer with `LinksTerminated`.
    TerminateLinks { node: NodeId },
    /// Run log recovery for `ids` (all of `node`'s coordinators) on
    /// `on`, a live compute node, or on the membership service itself (`None`).
    /// Re-issued from the start if the recovering node fails (idempotent).
    Recover {
        node: NodeId,
        ids: Vec<u16>,
        on: Option<NodeId>,
    },
    /// Add `ids` to every compute node's `failed_ids`: stealing may start.
    NotifyFailed { ids: Vec<u16> },
    /// Release stray locks of these failed ids, then answer `ScanDone`.
    ScanStrayLocks { ids: Vec<u16> },
}

/// The durable part of a [`Membership`] (Pandora paper §3.2.4: what a
/// replicated failure detector keeps in ZooKeeper). Everything a restarted
/// service needs so that no coordinator id is ever handed out twice and no
/// failure is forgotten: id allocation, failed and recycled ids, and every
/// node's ids and status. Heartbeat times are not in it: they are renewed on
/// restore, and who runs which recovery is decided anew.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipState {
    pub next_id: u32,
    pub recycled: BTreeSet<u16>,
    pub failed_ids: BTreeSet<u16>,
    pub nodes: BTreeMap<NodeId, NodeState>,
    /// Version blocks handed to recovery coordinators so far (see
    /// [`Membership::reserve_version_block`]). A state stored before this
    /// field existed reads as 0.
    #[serde(default)]
    pub version_blocks: u64,
    /// Node ids handed out to new incarnations so far (see
    /// [`Membership::new_incarnation`]); 0 in a state stored before this field existed.
    #[serde(default)]
    pub incarnations: u32,
    /// The memory servers' configuration (docs/DESIGN.md §4.6), once the service
    /// tracks them; absent in a state stored before it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryConfig>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub ids: Vec<u16>,
    pub status: NodeStatus,
}

#[derive(Clone, Debug)]
struct Node {
    ids: Vec<u16>,
    /// When a heartbeat last reached each failure-detector replica.
    seen_ns: [u64; MAX_FD_REPLICAS as usize],
    status: NodeStatus,
    /// Node whose recovery this node is running, if any.
    recovering_for: Vec<NodeId>,
    /// Every memory node acknowledged its revocation (`failed-after-revoke`).
    revoked: bool,
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
    /// Bumped by every change of the durable state ([`MembershipState`]).
    durable_epoch: u64,
    version_blocks: u64,
    incarnations: u32,
    /// When each failure-detector replica last reported (this one: always now).
    reported_ns: [Option<u64>; MAX_FD_REPLICAS as usize],
    /// Ticks on which fewer than a majority of replicas were reporting, so
    /// no verdict could be taken.
    pub quorum_lost_ticks: u64,
    /// The memory servers, once attached ([`Membership::attach_fleet`]).
    fleet: Option<Fleet>,
}

impl Membership {
    pub fn new(cfg: MembershipConfig) -> Self {
        assert!(
            cfg.id_space >= 2 && cfg.id_space <= 1 << 16,
            "id space must be 2..=65536"
        );
        assert!(
            (1..=MAX_FD_REPLICAS).contains(&cfg.fd_replicas),
            "1..={MAX_FD_REPLICAS} failure-detector replicas"
        );
        assert!(
            cfg.self_replica < cfg.fd_replicas,
            "self_replica must name one of the replicas"
        );
        Membership {
            cfg,
            nodes: BTreeMap::new(),
            next_id: 1,
            recycled: BTreeSet::new(),
            failed_ids: BTreeSet::new(),
            scanning: false,
            last_tick_ns: None,
            pauses_detected: 0,
            durable_epoch: 0,
            version_blocks: 0,
            incarnations: 0,
            reported_ns: [None; MAX_FD_REPLICAS as usize],
            quorum_lost_ticks: 0,
            fleet: None,
        }
    }

    fn alive_except(&self, exclude: NodeId) -> BTreeSet<NodeId> {
        self.nodes
            .iter()
            .filter(|(&n, x)| n != exclude && x.status == NodeStatus::Alive)
            .map(|(&n, _)| n)
            .collect()
    }

    /// Whether every alive compute node (but `exclude`) applied the current
    /// memory hold: no transaction runs anywhere ([`Fleet::quiesced`]).
    pub fn fleet_quiesced(&self, exclude: NodeId) -> bool {
        let alive = self.alive_except(exclude);
        self.fleet.as_ref().is_some_and(|f| f.quiesced(&alive))
    }

    /// Track the memory servers too (docs/DESIGN.md §4.6): their configuration
    /// becomes part of the durable state.
    pub fn attach_fleet(&mut self, fleet: Fleet) {
        self.fleet = Some(fleet);
        self.durable_epoch += 1;
    }

    pub fn fleet(&self) -> Option<&Fleet> {
        self.fleet.as_ref()
    }

    /// Step the memory servers' [`Fleet`]: every compute node alive (but
    /// `exclude`, the service's own) must apply each reconfiguration, and
    /// none resumes while a failed compute node is revoked or recovered.
    pub fn step_fleet(
        &mut self,
        now_ns: u64,
        event: FleetEvent,
        exclude: NodeId,
    ) -> Vec<FleetCommand> {
        let alive: BTreeSet<NodeId> = self
            .nodes
            .iter()
            .filter(|(&n, x)| n != exclude && x.status == NodeStatus::Alive)
            .map(|(&n, _)| n)
            .collect();
        let busy = self
            .nodes
            .values()
            .any(|x| matches!(x.status, NodeStatus::Revoking | NodeStatus::Recovering));
        let Some(fleet) = self.fleet.as_mut() else {
            return Vec::new();
        };
        let before = fleet.config().clone();
        let cmds = fleet.step(now_ns, event, &alive, busy);
        if *fleet.config() != before {
            self.durable_epoch += 1;
        }
        cmds
    }

    /// The durable state, to be stored before the commands of the step that
    /// changed it take effect (see [`Membership::durable_epoch`]).
    pub fn snapshot(&self) -> MembershipState {
        MembershipState {
            next_id: self.next_id,
            recycled: self.recycled.clone(),
            failed_ids: self.failed_ids.clone(),
            nodes: self
                .nodes
                .iter()
                .map(|(&k, n)| {
                    (
                        k,
                        NodeState {
                            ids: n.ids.clone(),
                            status: n.status,
                        },
                    )
                })
                .collect(),
            version_blocks: self.version_blocks,
            incarnations: self.incarnations,
            memory: self.fleet.as_ref().map(|f| f.config().clone()),
        }
    }

    /// A node id for a new incarnation of a fenced compute node (the Pandora
    /// paper §3.2.2, Fig. 8 "reuse": a suspected node comes back as
    /// someone new, with new coordinator ids and new memory keys). The id was
    /// never handed out before and lies in
    /// `FIRST_INCARNATION_ID..=LAST_INCARNATION_ID`, where operators choose no
    /// ids, so it collides with no other compute node. `None` once that range
    /// is used up. Like [`Membership::reserve_version_block`], the allocation
    /// is durable state: store it before handing the id out.
    pub fn new_incarnation(&mut self) -> Option<NodeId> {
        let id = (FIRST_INCARNATION_ID as u32).checked_add(self.incarnations)?;
        if id > LAST_INCARNATION_ID as u32 {
            return None;
        }
        self.incarnations += 1;
        self.durable_epoch += 1;
        Some(id as NodeId)
    }

    /// Every known node and its status.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, NodeStatus)> + '_ {
        self.nodes.iter().map(|(&k, n)| (k, n.status))
    }

    /// Reserve the next block of versions for a recovery coordinator run by
    /// this service (roll-backs and version retirement mint fresh versions,
    /// which must never repeat, docs/DESIGN.md §4.2). Returns the block's number,
    /// starting at 1. The reservation is part of the durable state: store it
    /// before minting from the block, so a restarted service never hands the
    /// same block out again.
    pub fn reserve_version_block(&mut self) -> u64 {
        self.version_blocks += 1;
        self.durable_epoch += 1;
        self.version_blocks
    }

    /// A counter that changes exactly when [`Membership::snapshot`] would
    /// return something new: a runtime that persists the state compares it
    /// with the epoch it last stored instead of comparing snapshots.
    pub fn durable_epoch(&self) -> u64 {
        self.durable_epoch
    }

    /// A service restarted from stored state at time `now_ns`. Every node
    /// that was alive gets a fresh heartbeat timeout from `now_ns` (plus
    /// `cfg.restore_grace_ns`, time to reconnect), so a restart does not
    /// declare everyone failed. Revocations and recoveries that were under
    /// way are not resumed by this: call [`Membership::reissue_after_restore`]
    /// and execute its commands. A state that breaks an invariant, or whose
    /// counters or memory configuration (`state.memory`, restored by
    /// [`Fleet::restore`]) no run could have reached, is refused.
    pub fn restore(
        cfg: MembershipConfig,
        state: MembershipState,
        now_ns: u64,
    ) -> Result<Self, String> {
        let mut m = Membership::new(cfg);
        let space = m.cfg.id_space;
        if state.next_id < 1 || state.next_id > space {
            return Err(format!(
                "stored next id {} is outside the id space 1..{space}",
                state.next_id
            ));
        }
        let valid = |id: &u16| *id >= 1 && (*id as u32) < state.next_id;
        if let Some(id) = state
            .recycled
            .iter()
            .chain(&state.failed_ids)
            .find(|id| !valid(id))
        {
            return Err(format!(
                "stored id {id} was never handed out (next id {})",
                state.next_id
            ));
        }
        if !state.recycled.is_disjoint(&state.failed_ids) {
            return Err("a stored id is both failed and free".into());
        }
        // Counters past what any run reaches would overflow on their next use.
        let incarnations_max = LAST_INCARNATION_ID as u32 - FIRST_INCARNATION_ID as u32 + 1;
        if state.incarnations > incarnations_max {
            return Err(format!(
                "stored incarnation count {} exceeds the {incarnations_max} ids reserved for incarnations",
                state.incarnations
            ));
        }
        if state.version_blocks > u64::MAX / 2 {
            return Err(format!(
                "stored version block count {} is out of range",
                state.version_blocks
            ));
        }
        if let Some(mem) = &state.memory {
            if let Some(n) = mem.down.iter().find(|&&n| n as usize >= mem.addrs.len()) {
                return Err(format!(
                    "stored memory configuration declares memory node {n} down, but names {} memory nodes",
                    mem.addrs.len()
                ));
            }
            if mem.epoch > u64::MAX / 2 {
                return Err(format!(
                    "stored memory configuration epoch {} is out of range",
                    mem.epoch
                ));
            }
        }
        let mut live = BTreeSet::new();
        for (node, n) in &state.nodes {
            if let Some(id) = n.ids.iter().find(|id| !valid(id)) {
                return Err(format!(
                    "node {node} holds id {id}, which was never handed out"
                ));
            }
            if matches!(n.status, NodeStatus::Failed | NodeStatus::Left) {
                continue;
            }
            for id in &n.ids {
                if !live.insert(*id) || state.recycled.contains(id) || state.failed_ids.contains(id)
                {
                    return Err(format!(
                        "stored id {id} of node {node} is also held elsewhere, free or failed"
                    ));
                }
            }
        }
        let fresh = now_ns.saturating_add(m.cfg.restore_grace_ns);
        m.nodes = state
            .nodes
            .into_iter()
            .map(|(k, n)| {
                (
                    k,
                    Node {
                        ids: n.ids,
                        seen_ns: [fresh; MAX_FD_REPLICAS as usize],
                        status: n.status,
                        recovering_for: Vec::new(),
                        // A stored Recovering or Failed status was reached
                        // through `LinksTerminated`.
                        revoked: matches!(n.status, NodeStatus::Recovering | NodeStatus::Failed),
                    },
                )
            })
            .collect();
        m.next_id = state.next_id;
        m.recycled = state.recycled;
        m.failed_ids = state.failed_ids;
        m.version_blocks = state.version_blocks;
        m.incarnations = state.incarnations;
        // The other replicas get the same grace to start reporting to us.
        m.reported_ns = [Some(fresh); MAX_FD_REPLICAS as usize];
        m.check_invariants();
        Ok(m)
    }

    /// After [`Membership::restore`]: the work the previous incarnation may
    /// have left half done, to run again from the start (every step is
    /// idempotent, docs/DESIGN.md §4.5): revoke every node that was being revoked,
    /// recover every node that was being recovered, and rescan for
    /// recyclable ids if that was due. A crash between storing a step's state
    /// and acting on its commands loses nothing this way.
    pub fn reissue_after_restore(&mut self) -> Vec<Command> {
        let mut out = Vec::new();
        let (revoking, recovering): (Vec<NodeId>, Vec<NodeId>) = {
            let of = |s: NodeStatus| {
                self.nodes
                    .iter()
                    .filter(move |(_, n)| n.status == s)
                    .map(|(k, _)| *k)
            };
            (
                of(NodeStatus::Revoking).collect(),
                of(NodeStatus::Recovering).collect(),
            )
        };
        for node in revoking {
            out.push(Command::TerminateLinks { node });
        }
        for node in recovering {
            if !self
                .nodes
                .values()
                .any(|n| n.recovering_for.contains(&node))
            {
                let ids = self.nodes[&node].ids.clone();
                self.start_recovery(node, ids, &mut out);
            }
        }
        self.maybe_recycle(&mut out);
        out
    }

    pub fn status(&self, node: NodeId) -> Option<NodeStatus> {
        self.nodes.get(&node).map(|n| n.status)
    }

    /// When `node`'s last heartbeat arrived, at any replica.
    pub fn last_heartbeat_ns(&self, node: NodeId) -> Option<u64> {
        self.nodes.get(&node).map(|n| {
            n.seen_ns[..self.cfg.fd_replicas as usize]
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
        })
    }

    /// For each failure-detector replica: how long before `now_ns` it last
    /// reported, and how long before that report it had heard `node` (for
    /// operators: why a node was declared failed).
    pub fn replica_views(&self, node: NodeId, now_ns: u64) -> Vec<(Option<u64>, Option<u64>)> {
        (0..self.cfg.fd_replicas as usize)
            .map(|r| {
                let at = if r == self.cfg.self_replica as usize {
                    Some(now_ns)
                } else {
                    self.reported_ns[r]
                };
                let heard = self
                    .nodes
                    .get(&node)
                    .and_then(|n| at.map(|a| a.saturating_sub(n.seen_ns[r])));
                (at.map(|a| now_ns.saturating_sub(a)), heard)
            })
            .collect()
    }

    fn majority(&self) -> usize {
        self.cfg.fd_replicas as usize / 2 + 1
    }

    fn heard(&mut self, now_ns: u64, node: NodeId, replica: u8) {
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.status == NodeStatus::Alive {
                let t = &mut n.seen_ns[replica as usize];
                *t = (*t).max(now_ns);
            }
        }
    }

    pub fn failed_ids(&self) -> &BTreeSet<u16> {
        &self.failed_ids
    }

    /// The node that was given coordinator id `id`, most recently.
    pub fn owner_of(&self, id: u16) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.ids.contains(&id))
            .map(|(k, _)| *k)
            .last()
    }

    pub fn ids_of(&self, node: NodeId) -> &[u16] {
        self.nodes
            .get(&node)
            .map(|n| n.ids.as_slice())
            .unwrap_or(&[])
    }

    fn ids_in_use(&self) -> usize {
        (self.next_id as usize - 1) - self.recycled.len()
    }

    fn alive(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .filter(|(_, n)| n.status == NodeStatus::Alive)
            .map(|(id, _)| *id)
    }

    pub fn step(&mut self, now_ns: u64, event: Event) -> Vec<Command> {
        let mut out = Vec::new();
        let epoch = self.durable_epoch;
        match event {
            Event::Join { node, coordinators } => self.join(now_ns, node, coordinators, &mut out),
            Event::Heartbeat { node } => self.heard(now_ns, node, self.cfg.self_replica),
            Event::Relay { replica, nodes } => {
                // A report from an unknown replica (misconfiguration) counts for nothing.
                if replica < self.cfg.fd_replicas && replica != self.cfg.self_replica {
                    self.reported_ns[replica as usize] = Some(now_ns);
                    for node in nodes {
                        self.heard(now_ns, node, replica);
                    }
                }
            }
            Event::Tick => self.detect(now_ns, &mut out),
            Event::Leave { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Alive && n.recovering_for.is_empty() {
                        n.status = NodeStatus::Left;
                        self.durable_epoch += 1;
                    }
                }
            }
            Event::LinksTerminated { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Revoking {
                        n.revoked = true;
                        n.status = NodeStatus::Recovering;
                        self.durable_epoch += 1;
                        let ids = n.ids.clone();
                        self.start_recovery(node, ids, &mut out);
                    }
                }
            }
            Event::RecoveryDone { node } => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    if n.status == NodeStatus::Recovering {
                        n.status = NodeStatus::Failed;
                        self.durable_epoch += 1;
                        for r in self.nodes.values_mut() {
                            r.recovering_for.retain(|&x| x != node);
                        }
                        self.publish_failed(node, &mut out);
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
                        self.durable_epoch += 1;
                    }
                }
            }
        }
        // The invariants are over durable state only (ids and statuses), so
        // a step that left it alone (every heartbeat, most ticks) keeps them:
        // checking those cost the membership thread 4 % of a core at 1 024
        // coordinators, in a recovery profile.
        if self.durable_epoch != epoch {
            self.check_invariants();
        }
        out
    }

    fn join(&mut self, now_ns: u64, node: NodeId, coordinators: u16, out: &mut Vec<Command>) {
        let incarnation_ids = FIRST_INCARNATION_ID as u32..=LAST_INCARNATION_ID as u32;
        if incarnation_ids.contains(&(node as u32))
            && node as u32 >= FIRST_INCARNATION_ID as u32 + self.incarnations
        {
            let reason = format!("node id {node} was not handed out by this service (ids from {FIRST_INCARNATION_ID} to {LAST_INCARNATION_ID} are reserved for new incarnations)");
            out.push(Command::Reject { node, reason });
            return;
        }
        if let Some(n) = self.nodes.get(&node) {
            if n.status == NodeStatus::Alive {
                // A retried join: answer with the same ids.
                out.push(Command::AssignIds {
                    node,
                    ids: n.ids.clone(),
                });
            } else if n.status == NodeStatus::Left {
                out.push(Command::Reject {
                    node,
                    reason: format!("compute node {node} left; rejoin under a new node id"),
                });
            } else {
                out.push(Command::Reject {
                    node,
                    reason: format!(
                        "compute node {node} was declared failed; rejoin under a new node id"
                    ),
                });
            }
            return;
        }
        let free = self.recycled.len() + (self.cfg.id_space - self.next_id) as usize;
        if coordinators == 0 || coordinators as usize > free {
            out.push(Command::Reject {
                node,
                reason: format!(
                    "{coordinators} coordinator ids requested, {free} available (id space {})",
                    self.cfg.id_space
                ),
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
        let known = self.nodes.insert(
            node,
            Node {
                ids: ids.clone(),
                seen_ns: [now_ns; MAX_FD_REPLICAS as usize],
                status: NodeStatus::Alive,
                recovering_for: Vec::new(),
                revoked: false,
            },
        );
        assert!(
            known.is_none(),
            "never-rejoin: node {node} registered again (it was {:?}); a revoked node comes back only under a new node id",
            known.map(|n| n.status)
        );
        self.durable_epoch += 1;
        out.push(Command::AssignIds { node, ids });
    }

    fn detect(&mut self, now_ns: u64, out: &mut Vec<Command>) {
        let timeout = self.cfg.heartbeat_timeout_ns;
        // If the detector itself did not run for half a timeout (its process
        // was descheduled or paused), silence during the pause proves
        // nothing: heartbeats may be queued behind it. The pause does not
        // count against anyone: every last-heard time moves forward by its
        // length. Silence while the detector runs still accumulates, so a
        // crashed node is declared even on a machine that pauses the
        // detector again and again (a fresh timeout per pause would never
        // declare it). (Safety never rests on the detector: a false positive
        // is fenced off for good by revocation. This is accuracy.)
        let gap = self.last_tick_ns.map_or(0, |t| now_ns.saturating_sub(t));
        self.last_tick_ns = Some(now_ns);
        if gap > timeout / 2 {
            self.pauses_detected += 1;
            for n in self.nodes.values_mut() {
                if n.status == NodeStatus::Alive {
                    for t in n.seen_ns.iter_mut() {
                        *t = discount_pause(*t, gap, now_ns);
                    }
                }
            }
            for r in self.reported_ns.iter_mut().flatten() {
                *r = discount_pause(*r, gap, now_ns);
            }
            return;
        }
        // The distributed FD (Pandora paper §3.2.4): only replicas that are
        // themselves reporting can vouch for or against a node, and with
        // fewer than a majority of them reporting no verdict is taken (a
        // minority cannot tell a dead node from its own isolation).
        let replicas = self.cfg.fd_replicas as usize;
        let reporting: Vec<usize> = (0..replicas)
            .filter(|&r| {
                r == self.cfg.self_replica as usize
                    || self.reported_ns[r].is_some_and(|t| now_ns.saturating_sub(t) <= timeout)
            })
            .collect();
        if reporting.len() < self.majority() {
            self.quorum_lost_ticks += 1;
            return;
        }
        // A replica vouches for a node if, as of its latest report, it had
        // heard the node within the timeout: a replica that just went quiet
        // abstains instead of voting against everyone.
        let as_of: Vec<u64> = (0..replicas)
            .map(|r| {
                if r == self.cfg.self_replica as usize {
                    now_ns
                } else {
                    self.reported_ns[r].unwrap_or(0)
                }
            })
            .collect();
        let majority = self.majority();
        let late: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                let heard_by = reporting
                    .iter()
                    .filter(|&&r| as_of[r].saturating_sub(n.seen_ns[r]) <= timeout)
                    .count();
                n.status == NodeStatus::Alive && heard_by < majority
            })
            .map(|(id, _)| *id)
            .collect();
        for node in late {
            let n = self.nodes.get_mut(&node).expect("listed");
            n.status = NodeStatus::Revoking;
            self.durable_epoch += 1;
            let orphaned = std::mem::take(&mut n.recovering_for);
            out.push(Command::TerminateLinks { node });
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
            self.nodes
                .get_mut(&r)
                .expect("alive")
                .recovering_for
                .push(node);
        }
        out.push(Command::Recover { node, ids, on });
    }

    /// Publish `node`'s ids as failed: stealing its locks may start
    /// (`publish-after-recovery`: only once it was revoked everywhere, its
    /// recovery finished and nobody runs it any more).
    fn publish_failed(&mut self, node: NodeId, out: &mut Vec<Command>) {
        let n = &self.nodes[&node];
        assert!(
            n.status == NodeStatus::Failed && n.revoked,
            "publish-after-recovery: the ids of node {node} are published in status {:?} (revocation acknowledged: {})",
            n.status,
            n.revoked
        );
        assert!(
            !self.nodes.values().any(|r| r.recovering_for.contains(&node)),
            "publish-after-recovery: the ids of node {node} are published while its recovery still runs"
        );
        let ids = n.ids.clone();
        self.failed_ids.extend(ids.iter().copied());
        out.push(Command::NotifyFailed { ids });
    }

    fn maybe_recycle(&mut self, out: &mut Vec<Command>) {
        let used = self.ids_in_use() as f64 / (self.cfg.id_space - 1) as f64;
        if !self.scanning && used > self.cfg.recycle_threshold && !self.failed_ids.is_empty() {
            self.scanning = true;
            out.push(Command::ScanStrayLocks {
                ids: self.failed_ids.iter().copied().collect(),
            });
        }
    }

    fn check_invariants(&self) {
        let mut seen = BTreeSet::new();
        for (node, n) in &self.nodes {
            // Recovered or failed only once every memory node revoked it.
            let revoked = matches!(n.status, NodeStatus::Recovering | NodeStatus::Failed);
            assert!(
                !revoked || n.revoked,
                "failed-after-revoke: node {node} is {:?} but its revocation was never acknowledged",
                n.status
            );
            if matches!(n.status, NodeStatus::Failed | NodeStatus::Left) {
                continue;
            }
            for id in &n.ids {
                assert!(seen.insert(*id), "id {id} held by two non-failed nodes");
                assert!(
                    !self.recycled.contains(id) && !self.failed_ids.contains(id),
                    "live id {id} is free or failed"
                );
            }
        }
        for (node, n) in &self.nodes {
            for r in &n.recovering_for {
                let status = self.nodes.get(r).map(|x| x.status);
                assert!(
                    status == Some(NodeStatus::Recovering),
                    "recovery-of-recovering: node {node} runs the recovery of node {r}, which is {status:?}"
                );
            }
        }
        assert!(
            self.recycled.is_disjoint(&self.failed_ids),
            "an id is both failed and free"
        );
    }
}

/// A last-heard time moved forward by a detector pause of `gap`, never past
/// now, and never backwards (a restore's grace lies in the future).
fn discount_pause(t: u64, gap: u64, now_ns: u64) -> u64 {
    t.max(t.saturating_add(gap).min(now_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Membership {
        Membership::new(MembershipConfig {
            heartbeat_timeout_ns: 100,
            id_space: 64,
            recycle_threshold: 0.95,
            restore_grace_ns: 0,
            ..MembershipConfig::default()
        })
    }

    #[test]
    fn ids_are_unique_and_serialized_and_a_retry_gets_the_same() {
        let mut m = m();
        assert_eq!(
            m.step(
                0,
                Event::Join {
                    node: 1,
                    coordinators: 3
                }
            ),
            vec![Command::AssignIds {
                node: 1,
                ids: vec![1, 2, 3]
            }]
        );
        assert_eq!(
            m.step(
                0,
                Event::Join {
                    node: 2,
                    coordinators: 2
                }
            ),
            vec![Command::AssignIds {
                node: 2,
                ids: vec![4, 5]
            }]
        );
        assert_eq!(
            m.step(
                0,
                Event::Join {
                    node: 1,
                    coordinators: 3
                }
            ),
            vec![Command::AssignIds {
                node: 1,
                ids: vec![1, 2, 3]
            }]
        );
        match &m.step(
            0,
            Event::Join {
                node: 3,
                coordinators: 100,
            },
        )[0]
        {
            Command::Reject { reason, .. } => assert!(reason.contains("available")),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn a_silent_node_is_revoked_then_recovered_then_published_in_that_order() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 2,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 2,
            },
        );
        m.step(90, Event::Heartbeat { node: 2 });
        assert_eq!(m.step(100, Event::Tick), vec![]);
        // Node 1 has been silent for 101 ns: revoke first, nothing else yet.
        assert_eq!(
            m.step(101, Event::Tick),
            vec![Command::TerminateLinks { node: 1 }]
        );
        assert_eq!(m.failed_ids().len(), 0, "no stealing before recovery");
        assert_eq!(
            m.step(102, Event::RecoveryDone { node: 1 }),
            vec![],
            "recovery cannot finish before revocation"
        );
        assert_eq!(
            m.step(103, Event::LinksTerminated { node: 1 }),
            vec![Command::Recover {
                node: 1,
                ids: vec![1, 2],
                on: Some(2)
            }]
        );
        assert_eq!(
            m.step(104, Event::RecoveryDone { node: 1 }),
            vec![Command::NotifyFailed { ids: vec![1, 2] }]
        );
        assert_eq!(m.status(1), Some(NodeStatus::Failed));
        // A late heartbeat of the failed node changes nothing; it cannot rejoin under its id.
        m.step(105, Event::Heartbeat { node: 1 });
        assert_eq!(m.status(1), Some(NodeStatus::Failed));
        assert!(matches!(
            m.step(
                106,
                Event::Join {
                    node: 1,
                    coordinators: 2
                }
            )[0],
            Command::Reject { .. }
        ));
    }

    #[test]
    fn a_node_that_leaves_cleanly_is_not_declared_failed() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        m.step(10, Event::Leave { node: 1 });
        for t in (20..400).step_by(20) {
            assert_eq!(m.step(t, Event::Tick), vec![]);
        }
        assert_eq!(m.status(1), Some(NodeStatus::Left));
    }

    #[test]
    fn a_paused_detector_does_not_declare_everyone_failed() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        assert_eq!(m.step(40, Event::Tick), vec![]);
        // The detector stalls from 40 to 500: node 1's heartbeats could not be seen.
        assert_eq!(
            m.step(500, Event::Tick),
            vec![],
            "a pause gives a grace period"
        );
        assert_eq!(m.pauses_detected, 1);
        // Ticking normally again, a node that stays silent is declared failed.
        let mut t = 500;
        let mut revoked = false;
        while t < 700 && !revoked {
            t += 20;
            revoked = m.step(t, Event::Tick) == vec![Command::TerminateLinks { node: 1 }];
        }
        // The pause (40..500) does not count: 40 ns of silence before it, so
        // the timeout runs out 60 ns after it.
        assert!(revoked && t > 560 && t <= 600, "declared at {t}");
    }

    #[test]
    fn a_pause_never_shortens_a_grace_that_lies_in_the_future() {
        assert_eq!(discount_pause(1_000, 50, 500), 1_000);
        assert_eq!(discount_pause(100, 50, 500), 150);
        assert_eq!(discount_pause(480, 50, 500), 500);
    }

    /// A detector paused again and again (a loaded machine) still declares a
    /// crashed node: only the pauses are discounted, not the silence between.
    #[test]
    fn a_detector_paused_repeatedly_still_declares_a_silent_node() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 1,
            },
        );
        let mut t = 0;
        let mut declared = None;
        // Every 10 ns tick is followed by a 60 ns pause (longer than half the timeout).
        while t < 5_000 && declared.is_none() {
            t += 10;
            m.step(t, Event::Heartbeat { node: 2 });
            if m.step(t, Event::Tick)
                .contains(&Command::TerminateLinks { node: 1 })
            {
                declared = Some(t);
            }
            t += 60;
            m.step(t, Event::Heartbeat { node: 2 });
            m.step(t, Event::Tick);
        }
        assert!(
            declared.is_some(),
            "node 1 never declared on a pausing detector"
        );
        assert_eq!(
            m.status(2),
            Some(NodeStatus::Alive),
            "the heartbeating node is never declared"
        );
    }

    #[test]
    fn recovery_is_reissued_when_the_recovering_node_fails() {
        let mut m = m();
        for n in 1..=3 {
            m.step(
                0,
                Event::Join {
                    node: n,
                    coordinators: 1,
                },
            );
        }
        m.step(50, Event::Heartbeat { node: 2 });
        m.step(50, Event::Heartbeat { node: 3 });
        m.step(120, Event::Tick);
        assert_eq!(
            m.step(121, Event::LinksTerminated { node: 1 }),
            vec![Command::Recover {
                node: 1,
                ids: vec![1],
                on: Some(2)
            }]
        );
        m.step(140, Event::Heartbeat { node: 3 });
        // Node 2, running node 1's recovery, goes silent.
        let cmds = m.step(151, Event::Tick);
        assert_eq!(
            cmds,
            vec![
                Command::TerminateLinks { node: 2 },
                Command::Recover {
                    node: 1,
                    ids: vec![1],
                    on: Some(3)
                }
            ]
        );
    }

    #[test]
    fn failed_ids_are_recycled_only_after_a_stray_lock_scan() {
        let mut m = Membership::new(MembershipConfig {
            heartbeat_timeout_ns: 10,
            id_space: 21,
            recycle_threshold: 0.5,
            restore_grace_ns: 0,
            ..MembershipConfig::default()
        });
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 8,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 4,
            },
        );
        m.step(5, Event::Heartbeat { node: 2 });
        m.step(11, Event::Tick);
        m.step(11, Event::LinksTerminated { node: 1 });
        let cmds = m.step(12, Event::RecoveryDone { node: 1 });
        let ids: Vec<u16> = (1..=8).collect();
        assert_eq!(
            cmds,
            vec![
                Command::NotifyFailed { ids: ids.clone() },
                Command::ScanStrayLocks { ids: ids.clone() }
            ]
        );
        // Before the scan answers, failed ids are not handed out.
        assert!(matches!(
            m.step(
                13,
                Event::Join {
                    node: 3,
                    coordinators: 9
                }
            )[0],
            Command::Reject { .. }
        ));
        m.step(14, Event::ScanDone { ids });
        assert!(m.failed_ids().is_empty());
        match &m.step(
            15,
            Event::Join {
                node: 3,
                coordinators: 9,
            },
        )[0]
        {
            Command::AssignIds { ids, .. } => assert_eq!(ids.len(), 9),
            c => panic!("{c:?}"),
        }
    }

    /// A fenced node comes back under a node id the service hands
    /// out, one no operator chose and nobody held before, kept across a restart.
    #[test]
    fn new_incarnations_get_fresh_node_ids_that_survive_a_restart() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 2,
            },
        );
        let epoch = m.durable_epoch();
        assert_eq!(m.new_incarnation(), Some(FIRST_INCARNATION_ID));
        assert!(
            m.durable_epoch() > epoch,
            "an allocated node id is durable state"
        );
        assert_eq!(m.new_incarnation(), Some(FIRST_INCARNATION_ID + 1));
        // An allocated id joins like any node; one never handed out is refused.
        assert_eq!(
            m.step(
                1,
                Event::Join {
                    node: FIRST_INCARNATION_ID,
                    coordinators: 2
                }
            ),
            vec![Command::AssignIds {
                node: FIRST_INCARNATION_ID,
                ids: vec![3, 4]
            }]
        );
        match &m.step(
            1,
            Event::Join {
                node: FIRST_INCARNATION_ID + 2,
                coordinators: 1,
            },
        )[0]
        {
            Command::Reject { reason, .. } => {
                assert!(reason.contains("not handed out"), "{reason}")
            }
            c => panic!("{c:?}"),
        }
        // Ids above the range (the service's own node, checkers) are not affected.
        assert!(matches!(
            m.step(
                1,
                Event::Join {
                    node: LAST_INCARNATION_ID + 1,
                    coordinators: 1
                }
            )[0],
            Command::AssignIds { .. }
        ));
        let mut r = Membership::restore(
            cfg(100, 0),
            serde_json::from_str(&serde_json::to_string(&m.snapshot()).unwrap()).unwrap(),
            10,
        )
        .unwrap();
        assert_eq!(
            r.new_incarnation(),
            Some(FIRST_INCARNATION_ID + 2),
            "a restored service never hands a node id out twice"
        );
        // A state stored before incarnations existed reads as none handed out.
        let old = r#"{"next_id":1,"recycled":[],"failed_ids":[],"nodes":{}}"#;
        let mut o =
            Membership::restore(cfg(100, 0), serde_json::from_str(old).unwrap(), 0).unwrap();
        assert_eq!(o.new_incarnation(), Some(FIRST_INCARNATION_ID));
    }

    #[test]
    fn the_incarnation_range_runs_out_cleanly() {
        let mut m = m();
        let n = (LAST_INCARNATION_ID - FIRST_INCARNATION_ID) as usize + 1;
        let ids: Vec<NodeId> = std::iter::from_fn(|| m.new_incarnation()).collect();
        assert_eq!(ids.len(), n);
        assert_eq!(*ids.last().unwrap(), LAST_INCARNATION_ID);
        assert_eq!(m.new_incarnation(), None);
    }

    fn cfg(timeout: u64, grace: u64) -> MembershipConfig {
        MembershipConfig {
            heartbeat_timeout_ns: timeout,
            id_space: 64,
            recycle_threshold: 0.95,
            restore_grace_ns: grace,
            ..MembershipConfig::default()
        }
    }

    /// Through JSON, as the `tandem pandora membership` process stores it.
    fn reload(m: &Membership, cfg: MembershipConfig, now: u64) -> Membership {
        let json = serde_json::to_string(&m.snapshot()).unwrap();
        Membership::restore(cfg, serde_json::from_str(&json).unwrap(), now).unwrap()
    }

    #[test]
    fn a_restored_service_keeps_ids_failures_and_statuses() {
        let mut m = Membership::new(cfg(100, 0));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 3,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 2,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 3,
                coordinators: 1,
            },
        );
        m.step(90, Event::Heartbeat { node: 2 });
        m.step(90, Event::Leave { node: 3 });
        m.step(101, Event::Tick);
        m.step(102, Event::LinksTerminated { node: 1 });
        m.step(103, Event::RecoveryDone { node: 1 });
        let epoch = m.durable_epoch();
        assert_eq!(
            (m.reserve_version_block(), m.reserve_version_block()),
            (1, 2)
        );
        assert!(
            m.durable_epoch() > epoch,
            "a reserved version block is durable state"
        );
        let mut r = reload(&m, cfg(100, 0), 5_000);
        assert_eq!(r.snapshot(), m.snapshot());
        assert_eq!(
            r.reserve_version_block(),
            3,
            "a restored service never hands out a version block twice"
        );
        assert_eq!(
            r.failed_ids().iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(
            (r.status(1), r.status(2), r.status(3)),
            (
                Some(NodeStatus::Failed),
                Some(NodeStatus::Alive),
                Some(NodeStatus::Left)
            )
        );
        // Ids are never handed out twice, a retried join gets the same ids,
        // and a failed node stays failed.
        assert_eq!(
            r.step(
                5_000,
                Event::Join {
                    node: 4,
                    coordinators: 2
                }
            ),
            vec![Command::AssignIds {
                node: 4,
                ids: vec![7, 8]
            }]
        );
        assert_eq!(
            r.step(
                5_000,
                Event::Join {
                    node: 2,
                    coordinators: 2
                }
            ),
            vec![Command::AssignIds {
                node: 2,
                ids: vec![4, 5]
            }]
        );
        assert!(matches!(
            r.step(
                5_000,
                Event::Join {
                    node: 1,
                    coordinators: 3
                }
            )[0],
            Command::Reject { .. }
        ));
        assert_eq!(r.owner_of(1), Some(1));
        assert!(
            r.reissue_after_restore().is_empty(),
            "nothing was under way"
        );
    }

    #[test]
    fn after_a_restore_every_alive_node_gets_a_fresh_timeout_and_the_grace() {
        let mut m = Membership::new(cfg(100, 0));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 1,
            },
        );
        // Restored long after the last heartbeat it knew of: nobody is failed yet.
        let mut r = reload(&m, cfg(100, 0), 1_000);
        for t in (1_000..=1_100).step_by(20) {
            assert_eq!(r.step(t, Event::Tick), vec![], "at {t}");
            r.step(t, Event::Heartbeat { node: 2 });
        }
        // Node 1 never came back: one timeout after the restore it is revoked.
        assert_eq!(
            r.step(1_101, Event::Tick),
            vec![Command::TerminateLinks { node: 1 }]
        );
        assert_eq!(r.status(2), Some(NodeStatus::Alive));
        // With a grace period, silence counts only after grace + timeout.
        let mut g = reload(&m, cfg(100, 500), 1_000);
        let mut t = 1_000;
        while t < 1_600 {
            assert_eq!(g.step(t, Event::Tick), vec![], "at {t}");
            t += 20;
        }
        assert_eq!(
            g.step(1_620, Event::Tick).len(),
            2,
            "both silent nodes are revoked after the grace"
        );
    }

    #[test]
    fn revocations_and_recoveries_under_way_are_reissued_after_a_restore() {
        let mut m = Membership::new(cfg(100, 0));
        for n in 1..=3 {
            m.step(
                0,
                Event::Join {
                    node: n,
                    coordinators: 2,
                },
            );
        }
        m.step(90, Event::Heartbeat { node: 3 });
        // Nodes 1 and 2 are declared failed; 1's revocation is acknowledged,
        // then the service crashes before either finishes.
        assert_eq!(
            m.step(101, Event::Tick),
            vec![
                Command::TerminateLinks { node: 1 },
                Command::TerminateLinks { node: 2 }
            ]
        );
        assert_eq!(
            m.step(102, Event::LinksTerminated { node: 1 }),
            vec![Command::Recover {
                node: 1,
                ids: vec![1, 2],
                on: Some(3)
            }]
        );
        let mut r = reload(&m, cfg(100, 0), 200);
        assert_eq!(
            (r.status(1), r.status(2)),
            (Some(NodeStatus::Recovering), Some(NodeStatus::Revoking))
        );
        assert!(
            r.failed_ids().is_empty(),
            "nothing is published before recovery"
        );
        let cmds = r.reissue_after_restore();
        assert_eq!(
            cmds,
            vec![
                Command::TerminateLinks { node: 2 },
                Command::Recover {
                    node: 1,
                    ids: vec![1, 2],
                    on: Some(3)
                }
            ]
        );
        // And the procedure goes on from there.
        assert_eq!(
            r.step(201, Event::RecoveryDone { node: 1 }),
            vec![Command::NotifyFailed { ids: vec![1, 2] }]
        );
        assert_eq!(
            r.step(202, Event::LinksTerminated { node: 2 }),
            vec![Command::Recover {
                node: 2,
                ids: vec![3, 4],
                on: Some(3)
            }]
        );
        assert_eq!(
            r.step(203, Event::RecoveryDone { node: 2 }),
            vec![Command::NotifyFailed { ids: vec![3, 4] }]
        );
        assert_eq!(r.failed_ids().len(), 4);
    }

    #[test]
    fn a_recycling_scan_that_was_due_is_reissued_after_a_restore() {
        let c = MembershipConfig {
            heartbeat_timeout_ns: 10,
            id_space: 21,
            recycle_threshold: 0.5,
            restore_grace_ns: 0,
            ..MembershipConfig::default()
        };
        let mut m = Membership::new(c.clone());
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 8,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 4,
            },
        );
        m.step(5, Event::Heartbeat { node: 2 });
        m.step(11, Event::Tick);
        m.step(11, Event::LinksTerminated { node: 1 });
        let ids: Vec<u16> = (1..=8).collect();
        assert_eq!(
            m.step(12, Event::RecoveryDone { node: 1 })[1],
            Command::ScanStrayLocks { ids: ids.clone() }
        );
        // Crash before the scan answered: the restarted service scans again.
        let mut r = reload(&m, c, 100);
        assert_eq!(
            r.reissue_after_restore(),
            vec![Command::ScanStrayLocks { ids: ids.clone() }]
        );
        r.step(101, Event::ScanDone { ids });
        assert!(r.failed_ids().is_empty());
    }

    #[test]
    fn a_corrupt_state_is_refused() {
        let mut m = Membership::new(cfg(100, 0));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 2,
            },
        );
        let good = m.snapshot();
        let mut s = good.clone();
        s.failed_ids.insert(1); // a live id cannot be failed
        assert!(Membership::restore(cfg(100, 0), s, 0).is_err());
        let mut s = good.clone();
        s.next_id = 1_000; // outside the id space
        assert!(Membership::restore(cfg(100, 0), s, 0).is_err());
        let mut s = good.clone();
        s.nodes.get_mut(&1).unwrap().ids.push(9); // never handed out
        assert!(Membership::restore(cfg(100, 0), s, 0).is_err());
        let mut s = good;
        s.nodes.insert(
            2,
            NodeState {
                ids: vec![2],
                status: NodeStatus::Alive,
            },
        ); // held twice
        assert!(Membership::restore(cfg(100, 0), s, 0).is_err());
    }

    /// The durable epoch moves exactly when the snapshot does, over random
    /// event sequences: a runtime that persists on epoch changes misses none.
    #[test]
    fn the_durable_epoch_moves_exactly_when_the_durable_state_does() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..50 {
            let mut m = Membership::new(MembershipConfig {
                heartbeat_timeout_ns: 50,
                id_space: 32,
                recycle_threshold: 0.3,
                restore_grace_ns: 0,
                ..MembershipConfig::default()
            });
            let mut t = 0;
            for _ in 0..300 {
                t += rnd(20);
                let node = 1 + rnd(8) as u16;
                let ev = match rnd(8) {
                    0 => Event::Join {
                        node,
                        coordinators: 1 + rnd(3) as u16,
                    },
                    1 | 2 => Event::Heartbeat { node },
                    3 => Event::Leave { node },
                    4 => Event::LinksTerminated { node },
                    5 => Event::RecoveryDone { node },
                    6 => Event::ScanDone {
                        ids: m.failed_ids().iter().copied().collect(),
                    },
                    _ => Event::Tick,
                };
                let (before, epoch) = (m.snapshot(), m.durable_epoch());
                m.step(t, ev.clone());
                assert_eq!(m.snapshot() != before, m.durable_epoch() != epoch, "{ev:?}");
            }
        }
    }

    fn three_replicas(on: u8) -> MembershipConfig {
        MembershipConfig {
            heartbeat_timeout_ns: 100,
            id_space: 64,
            fd_replicas: 3,
            self_replica: on,
            ..MembershipConfig::default()
        }
    }

    // Reference: Pandora paper §3.2.4 — a node is considered failed only when it
    // is disconnected from the majority of failure-detector replicas.
    #[test]
    fn a_node_heard_by_a_majority_of_replicas_lives_and_one_heard_by_a_minority_fails() {
        let mut m = Membership::new(three_replicas(0));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        m.step(
            0,
            Event::Join {
                node: 2,
                coordinators: 1,
            },
        );
        for t in (20..=400).step_by(20) {
            // Node 1 reaches only replica 2 (a minority), node 2 only replicas 1 and 2.
            m.step(
                t,
                Event::Relay {
                    replica: 1,
                    nodes: vec![2],
                },
            );
            m.step(
                t,
                Event::Relay {
                    replica: 2,
                    nodes: vec![1, 2],
                },
            );
            let cmds = m.step(t, Event::Tick);
            if t <= 100 {
                assert!(cmds.is_empty(), "nobody is late yet at {t}");
            } else if t == 120 {
                assert_eq!(
                    cmds,
                    vec![Command::TerminateLinks { node: 1 }],
                    "node 1 reached one replica of three"
                );
            } else {
                assert!(
                    cmds.is_empty(),
                    "node 2 reached two replicas of three at {t}: {cmds:?}"
                );
            }
        }
        assert_eq!(m.status(2), Some(NodeStatus::Alive));
    }

    #[test]
    fn a_replica_that_stops_reporting_stops_vouching_and_without_a_majority_no_verdict_is_taken() {
        let mut m = Membership::new(three_replicas(0));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        // Only the other two replicas hear node 1; both report until 200.
        for t in (20..=200).step_by(20) {
            m.step(
                t,
                Event::Relay {
                    replica: 1,
                    nodes: vec![1],
                },
            );
            m.step(
                t,
                Event::Relay {
                    replica: 2,
                    nodes: vec![1],
                },
            );
            assert!(m.step(t, Event::Tick).is_empty());
        }
        // Both followers go silent: this replica alone is a minority, so it
        // may not declare node 1 failed, however long the silence lasts.
        for t in (220..=1_000).step_by(20) {
            assert!(
                m.step(t, Event::Tick).is_empty(),
                "a minority took a verdict at {t}"
            );
        }
        assert!(m.quorum_lost_ticks > 0);
        // One follower comes back without having heard node 1: a majority
        // reports, and it did not hear node 1.
        m.step(
            1_020,
            Event::Relay {
                replica: 1,
                nodes: vec![],
            },
        );
        assert_eq!(
            m.step(1_020, Event::Tick),
            vec![Command::TerminateLinks { node: 1 }]
        );
    }

    #[test]
    fn reports_from_unknown_replicas_count_for_nothing() {
        let mut m = Membership::new(three_replicas(1));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        for t in (20..=300).step_by(20) {
            m.step(
                t,
                Event::Relay {
                    replica: 0,
                    nodes: vec![],
                },
            );
            m.step(
                t,
                Event::Relay {
                    replica: 1,
                    nodes: vec![1],
                },
            ); // claims to be us: ignored
            m.step(
                t,
                Event::Relay {
                    replica: 9,
                    nodes: vec![1],
                },
            ); // no such replica: ignored
            let cmds = m.step(t, Event::Tick);
            assert_eq!(cmds.is_empty(), t <= 100, "at {t}: {cmds:?}");
            if !cmds.is_empty() {
                break;
            }
        }
    }

    #[test]
    fn a_replica_that_dies_abstains_and_the_others_keep_vouching() {
        let mut m = Membership::new(three_replicas(0));
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 1,
            },
        );
        // Every replica hears node 1 until replica 2 dies at 200; then
        // replicas 0 and 1 (a majority) still do.
        for t in (20..=2_000).step_by(20) {
            m.step(t, Event::Heartbeat { node: 1 });
            m.step(
                t,
                Event::Relay {
                    replica: 1,
                    nodes: vec![1],
                },
            );
            if t <= 200 {
                m.step(
                    t,
                    Event::Relay {
                        replica: 2,
                        nodes: vec![1],
                    },
                );
            }
            assert!(m.step(t, Event::Tick).is_empty(), "false positive at {t}");
        }
        // Node 1 dies: the two live replicas stop hearing it.
        for t in (2_020..=2_200).step_by(20) {
            m.step(
                t,
                Event::Relay {
                    replica: 1,
                    nodes: vec![],
                },
            );
            let cmds = m.step(t, Event::Tick);
            assert_eq!(cmds.is_empty(), t <= 2_100, "at {t}: {cmds:?}");
            if !cmds.is_empty() {
                return;
            }
        }
        panic!("the dead node was never declared failed");
    }

    /// The assertions guard the order detect → revoke → recover → publish
    /// against regressions of the state machine itself (no planted bug lives
    /// here: DART's `publish-before-recovery` publishes from its harness).
    /// Publishing a node's ids while it is still being recovered trips
    /// `publish-after-recovery`.
    #[test]
    #[should_panic(expected = "publish-after-recovery")]
    fn publishing_before_recovery_trips_an_assertion() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 2,
            },
        );
        m.step(101, Event::Tick);
        m.step(102, Event::LinksTerminated { node: 1 });
        assert_eq!(m.status(1), Some(NodeStatus::Recovering));
        m.publish_failed(1, &mut Vec::new());
    }

    /// A node that reached Recovering without its revocation acknowledged
    /// (a path that skipped `LinksTerminated`) trips `failed-after-revoke` at the
    /// next change of durable state (here a join).
    #[test]
    #[should_panic(expected = "failed-after-revoke")]
    fn recovering_without_revocation_trips_an_assertion() {
        let mut m = m();
        m.step(
            0,
            Event::Join {
                node: 1,
                coordinators: 2,
            },
        );
        m.step(101, Event::Tick);
        m.nodes.get_mut(&1).unwrap().status = NodeStatus::Recovering;
        m.step(
            102,
            Event::Join {
                node: 2,
                coordinators: 1,
            },
        );
    }
}
