//! The configuration manager (docs/DESIGN.md §7.1, HEAL §IV): nodes heartbeat
//! it; it grants each heartbeat a lease and announces `Config { epoch,
//! members }` whenever a node joins or stops heartbeating. Sans-IO, like
//! the protocols: the host feeds it heartbeats and ticks.
//!
//! **Leases make removal safe.** A node serves clients only while it holds
//! a lease, counted from when it *sent* the heartbeat that earned it. The
//! manager removes a node only once `lease_ns` (plus a margin) has passed
//! since that node's last heartbeat reached it, so by then the node's
//! lease has run out: a falsely suspected node, alive and slow, stops
//! serving before the others stop waiting for it.
//!
//! **A restart is a removal.** A process killed and restarted within its
//! lease never falls silent long enough to be removed, yet it lost its
//! volatile state: the others would wait on or count on what it forgot
//! (Transactional: a prepared transaction of its never settles). Each run
//! of a node links with a new boot id; a member that links with a new one
//! is removed at once and joins again with its first heartbeat, so the
//! others go through the same removal and re-add as after a crash.
//!
//! **Someone always holds the latest state.** A member re-added after a
//! removal copies from the members before it serves, and says so in its
//! heartbeats (`caught_up`). The manager never removes silent members if
//! that would leave no caught-up member: on a flapping network it may hear
//! only a node that is still waiting for its copy, and with the others
//! removed that node would serve alone what it never received. The silent
//! caught-up members stay (without leases, serving nothing) until the
//! network lets them back or the copy completes.
//!
//! **A removal can go unheard.** A member cut off from the manager too
//! never hears that it was removed, and when it is heard again it is
//! added back in a configuration that looks, to it, like one it was
//! always in: it would still call itself caught up, with nothing copied.
//! So each configuration names the epoch in which each re-added member
//! joined (`Config::joined`), and a heartbeat carries the epoch the node
//! is in: the node learns it was away and copies, and the manager counts
//! it caught up only from a heartbeat sent in its joining epoch or later.

use std::collections::{BTreeMap, BTreeSet};

use crate::manager_store::{ManagerState, ManagerStore};
use crate::protocol::{Config, NodeId};

#[derive(Clone, Copy, Debug)]
pub struct ManagerConfig {
    /// How long a heartbeat's lease lasts at the node.
    pub lease_ns: u64,
    /// Extra silence before removal, beyond the lease.
    pub margin_ns: u64,
    /// Members at start are given this long to send their first heartbeat.
    pub startup_ns: u64,
}

impl Default for ManagerConfig {
    /// Suits processes on one loaded two-core machine (heartbeats every few ms).
    fn default() -> Self {
        ManagerConfig {
            lease_ns: 200_000_000,
            margin_ns: 50_000_000,
            startup_ns: 2_000_000_000,
        }
    }
}

pub struct Manager {
    cfg: ManagerConfig,
    epoch: u64,
    members: BTreeSet<NodeId>,
    last_heard: BTreeMap<NodeId, u64>,
    /// The boot id each node last linked with.
    boots: BTreeMap<NodeId, u64>,
    /// Members known to hold every acknowledged write: those of the first
    /// configuration, and those that said so since they were last added.
    caught_up: BTreeSet<NodeId>,
    /// The epoch in which each member was last added back.
    joined: BTreeMap<NodeId, u64>,
}

impl Manager {
    /// Start with `members` in epoch 1; each has `startup_ns` to heartbeat.
    pub fn new(cfg: ManagerConfig, members: &[NodeId], now_ns: u64) -> Self {
        let heard = now_ns + cfg.startup_ns;
        Manager {
            cfg,
            epoch: 1,
            members: members.iter().copied().collect(),
            last_heard: members.iter().map(|&m| (m, heard)).collect(),
            boots: BTreeMap::new(),
            caught_up: members.iter().copied().collect(),
            joined: BTreeMap::new(),
        }
    }

    /// Go on from a saved state (a restarted manager). As at a first
    /// start, a member is removed only after `startup_ns` plus a lease and
    /// its margin without a heartbeat: any lease the last run granted has
    /// run out by then.
    pub fn resume(cfg: ManagerConfig, state: &ManagerState, now_ns: u64) -> Self {
        let mut m = Manager::new(cfg, &state.members, now_ns).at_epoch(state.epoch);
        m.boots = state.boots.clone();
        m.joined = state.joined.clone();
        // A re-added member is caught up once it says so again.
        let joined = &m.joined;
        m.caught_up.retain(|n| !joined.contains_key(n));
        m
    }

    /// What a restarted manager needs (see `manager_store.rs`).
    pub fn state(&self) -> ManagerState {
        ManagerState {
            epoch: self.epoch,
            members: self.members.iter().copied().collect(),
            boots: self.boots.clone(),
            joined: self.joined.clone(),
        }
    }

    /// Resume numbering from `epoch` (a simulation that played the manager
    /// itself until now).
    pub fn at_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// Node `node` linked, in its run `boot`. A member that linked before
    /// with another boot id restarted: it is removed (a new epoch,
    /// returned), and its heartbeats add it back.
    pub fn linked(&mut self, node: NodeId, boot: u64) -> Option<Config> {
        let before = self.boots.insert(node, boot);
        if before.is_none_or(|b| b == boot) || !self.members.remove(&node) {
            return None;
        }
        self.caught_up.remove(&node);
        self.joined.remove(&node);
        self.epoch += 1;
        Some(self.config())
    }

    /// `boot` is the run of `node` that linked last (or none has linked).
    pub fn current_run(&self, node: NodeId, boot: u64) -> bool {
        self.boots.get(&node).is_none_or(|&b| b == boot)
    }

    pub fn config(&self) -> Config {
        let mut c = Config::new(self.epoch, self.members.iter().copied().collect());
        c.joined = self.joined.iter().map(|(&n, &e)| (n, e)).collect();
        c
    }

    /// A heartbeat from a caught-up `node` in the current epoch (see
    /// [`Manager::heartbeat_from`]).
    pub fn heartbeat(&mut self, now_ns: u64, node: NodeId) -> Option<Config> {
        self.heartbeat_from(now_ns, node, true, self.epoch)
    }

    /// A heartbeat from `node`, which holds every acknowledged write
    /// (`caught_up`) or is still catching up: its lease is granted (the
    /// host answers it); a node that is not a member joins, in a new epoch
    /// (returned), and counts as caught up only once it says so.
    pub fn heartbeat_from(
        &mut self,
        now_ns: u64,
        node: NodeId,
        caught_up: bool,
        epoch: u64,
    ) -> Option<Config> {
        self.last_heard.insert(node, now_ns);
        if self.members.insert(node) {
            self.caught_up.remove(&node);
            self.epoch += 1;
            self.joined.insert(node, self.epoch);
            return Some(self.config());
        }
        if caught_up && epoch >= self.joined.get(&node).copied().unwrap_or(0) {
            self.caught_up.insert(node);
        }
        None
    }

    /// Remove members silent past their lease; a new epoch if any was.
    /// Silent caught-up members stay if none would be left otherwise.
    pub fn tick(&mut self, now_ns: u64) -> Option<Config> {
        let limit = self.cfg.lease_ns + self.cfg.margin_ns;
        let mut silent: Vec<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|m| now_ns.saturating_sub(self.last_heard[m]) > limit)
            .collect();
        let keeps_one = self
            .members
            .iter()
            .any(|m| self.caught_up.contains(m) && !silent.contains(m));
        if !keeps_one {
            silent.retain(|m| !self.caught_up.contains(m));
        }
        if silent.is_empty() {
            return None;
        }
        for m in silent {
            self.members.remove(&m);
            self.caught_up.remove(&m);
            self.joined.remove(&m);
        }
        self.epoch += 1;
        Some(self.config())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_member_leaves_only_after_its_lease_and_comes_back_in_a_new_epoch() {
        let cfg = ManagerConfig {
            lease_ns: 100,
            margin_ns: 10,
            startup_ns: 0,
        };
        let mut m = Manager::new(cfg, &[0, 1, 2], 0);
        m.heartbeat(50, 0);
        m.heartbeat(50, 1);
        assert_eq!(m.tick(109), None, "node 2 may still hold a lease");
        let c = m.tick(111).expect("node 2 removed");
        assert_eq!((c.epoch, c.members), (2, vec![0, 1]));
        let c = m.heartbeat(120, 2).expect("node 2 rejoins");
        assert_eq!((c.epoch, c.members), (3, vec![0, 1, 2]));
        assert_eq!(m.heartbeat(121, 2), None);
    }

    /// Three members (100 ns leases); node 2 falls silent and is removed,
    /// 0 and 1 go on (epoch 2).
    fn node_2_removed() -> Manager {
        let cfg = ManagerConfig {
            lease_ns: 100,
            margin_ns: 10,
            startup_ns: 0,
        };
        let mut m = Manager::new(cfg, &[0, 1, 2], 0);
        m.heartbeat(100, 0);
        m.heartbeat(100, 1);
        assert_eq!(m.tick(115).unwrap().members, vec![0, 1]);
        m
    }

    #[test]
    fn the_last_caught_up_members_are_never_removed() {
        let mut m = node_2_removed();
        // The network flips: only node 2 is heard, still catching up.
        let c = m.heartbeat_from(120, 2, false, 2).expect("re-added");
        assert_eq!(c.members, vec![0, 1, 2]);
        m.heartbeat_from(200, 2, false, 3);
        assert_eq!(
            m.tick(230),
            None,
            "0 and 1 are the only caught-up members: they stay"
        );
        // Once node 2 has its copy, the silent ones may go.
        m.heartbeat_from(240, 2, true, 3);
        assert_eq!(m.tick(241).unwrap().members, vec![2]);
    }

    /// A node cut off from the manager too never heard it was removed: its
    /// heartbeats still say caught up, from the epoch it last saw. Only one
    /// sent in its joining epoch or later counts, and the configuration
    /// tells it when it joined.
    #[test]
    fn caught_up_counts_only_from_the_epoch_a_node_joined() {
        let mut m = node_2_removed();
        // Node 2 heard none of that: it is still in epoch 1, "caught up".
        let c = m.heartbeat_from(120, 2, true, 1).expect("re-added");
        assert_eq!((c.epoch, c.joined_at(2), c.joined_at(0)), (3, 3, 0));
        assert!(c.missed_removal(2, 1) && !c.missed_removal(0, 2));
        m.heartbeat_from(200, 2, true, 1);
        assert_eq!(m.tick(230), None, "its word from epoch 1 does not count");
        m.heartbeat_from(240, 2, true, 3);
        assert_eq!(m.tick(241).unwrap().members, vec![2]);
        assert_eq!(m.config().joined, vec![(2, 3)]);
    }

    #[test]
    fn a_member_restarted_within_its_lease_is_removed_and_added_back() {
        let mut m = Manager::new(ManagerConfig::default(), &[0, 1, 2], 0);
        assert_eq!(m.linked(2, 7), None, "its first run");
        assert_eq!(m.linked(2, 7), None, "the same run, linked again");
        m.heartbeat(10, 2);
        let c = m.linked(2, 8).expect("a new run of node 2 removes it");
        assert_eq!((c.epoch, c.members), (2, vec![0, 1]));
        let c = m.heartbeat(20, 2).expect("its heartbeat adds it back");
        assert_eq!((c.epoch, c.members), (3, vec![0, 1, 2]));
        assert_eq!(m.linked(2, 8), None);
    }

    #[test]
    fn a_resumed_manager_goes_on_from_its_epoch_and_waits_out_old_leases() {
        let cfg = ManagerConfig {
            lease_ns: 100,
            margin_ns: 10,
            startup_ns: 0,
        };
        let mut m = Manager::new(cfg, &[0, 1, 2], 0);
        m.linked(2, 7);
        m.linked(2, 8).expect("removed");
        m.heartbeat(5, 2).expect("added back");
        let st = m.state();
        assert_eq!((st.epoch, st.members.len()), (3, 3));
        let mut r = Manager::resume(cfg, &st, 1_000);
        assert_eq!(r.config(), m.config());
        assert_eq!(r.tick(1_109), None, "a lease of the last run may run");
        assert_eq!(r.linked(2, 8), None, "the same run of node 2");
        // All silent. Node 2, added back and never heard caught up since,
        // goes; removing 0 and 1 would leave no one with the latest state.
        let c = r.tick(1_111).expect("node 2 goes");
        assert_eq!((c.epoch, c.members), (4, vec![0, 1]));
        assert_eq!(r.heartbeat(1_200, 1), None, "node 1 is still a member");
        let c = r.tick(1_201).expect("the silent others go");
        assert_eq!((c.epoch, c.members), (5, vec![1]));
    }
}

/// The manager as a process: nodes connect with `Hello::ToManager`, it
/// answers each heartbeat with a lease and tells every node each new
/// configuration. Runs in the calling thread.
pub fn serve(
    listener: std::net::TcpListener,
    keys: tandem_auth::Keyring,
    members: &[NodeId],
    cfg: ManagerConfig,
    mut store: Option<Box<dyn ManagerStore>>,
) -> Result<(), String> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    use std::time::{Duration, Instant};

    use crate::wire::{frame, FromManager};

    let (tx, rx) = channel::<ManagerEvent>();
    let known = members.to_vec();
    std::thread::spawn(move || accept_nodes(listener, keys, known, tx));
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    let mut m = open(&mut store, cfg, members, now())?;
    let mut saved = m.state();
    let mut links: BTreeMap<NodeId, std::sync::mpsc::Sender<Vec<u8>>> = BTreeMap::new();
    eprintln!(
        "manager: epoch {}, members {:?}",
        saved.epoch, saved.members
    );
    loop {
        let announce = match rx.recv_timeout(Duration::from_millis(2)) {
            Ok(ManagerEvent::Link(node, boot, w)) => {
                let removed = m.linked(node, boot);
                save(&mut store, &m, &mut saved)?;
                let _ = w.send(frame(&FromManager::Config(m.config())));
                links.insert(node, w);
                removed
            }
            // A heartbeat still queued from a run that a newer one replaced:
            // that run is gone, and its sequence numbers mean nothing to the new one.
            Ok(ManagerEvent::Beat(node, boot, ..)) if !m.current_run(node, boot) => None,
            Ok(ManagerEvent::Beat(node, _, seq, caught_up, epoch)) => {
                let joined = m.heartbeat_from(now(), node, caught_up, epoch);
                if let Some(w) = links.get(&node) {
                    let _ = w.send(frame(&FromManager::Lease { seq }));
                }
                joined
            }
            Err(RecvTimeoutError::Timeout) => m.tick(now()),
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        save(&mut store, &m, &mut saved)?;
        if let Some(c) = announce {
            eprintln!("manager: epoch {}, members {:?}", c.epoch, c.members);
            for w in links.values() {
                let _ = w.send(frame(&FromManager::Config(c.clone())));
            }
        }
    }
}

/// The manager a store holds (resumed), or a new one (saved at once).
fn open(
    store: &mut Option<Box<dyn ManagerStore>>,
    cfg: ManagerConfig,
    members: &[NodeId],
    now: u64,
) -> Result<Manager, String> {
    let Some(st) = store.as_mut() else {
        eprintln!("manager: no --state or --zookeeper: a restarted manager would start over at epoch 1, and the nodes would ignore it");
        return Ok(Manager::new(cfg, members, now));
    };
    let Some(state) = st.load()? else {
        let m = Manager::new(cfg, members, now);
        st.save(&m.state())?;
        return Ok(m);
    };
    check_state(&state, members).map_err(|e| format!("manager state {}: {e}", st.describe()))?;
    eprintln!("manager: resumed from {}", st.describe());
    Ok(Manager::resume(cfg, &state, now))
}

/// Whether a stored state can be resumed by a manager of `members`: it
/// names none beyond them, and its epoch is one a run reaches (the next
/// change adds one to it).
pub fn check_state(state: &ManagerState, members: &[NodeId]) -> Result<(), String> {
    if let Some(n) = state.members.iter().find(|n| !members.contains(n)) {
        return Err(format!("names node {n}, beyond --nodes {}", members.len()));
    }
    if state.epoch > u64::MAX / 2 {
        return Err(format!("epoch {} is out of range", state.epoch));
    }
    Ok(())
}

/// Save the state if it changed, before anything that depends on it is sent.
fn save(
    store: &mut Option<Box<dyn ManagerStore>>,
    m: &Manager,
    saved: &mut ManagerState,
) -> Result<(), String> {
    let (Some(st), now) = (store.as_mut(), m.state()) else {
        return Ok(());
    };
    if now != *saved {
        st.save(&now)
            .map_err(|e| format!("manager: cannot save its state, stopping: {e}"))?;
        *saved = now;
    }
    Ok(())
}

enum ManagerEvent {
    Link(NodeId, u64, std::sync::mpsc::Sender<Vec<u8>>),
    /// A heartbeat: the node, its run's boot id, the sequence number.
    /// node, boot, heartbeat seq, caught up, the node's epoch.
    Beat(NodeId, u64, u64, bool, u64),
}

/// Connections in their handshake at once (a new one sheds a trickling one).
const HANDSHAKING_MAX: usize = 32;
/// Authenticated links at once (each a thread); more are closed.
const LINKS_MAX: usize = 1024;

/// Counts a link's thread while it lives.
struct Linked(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Linked {
    fn new(n: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Linked {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Linked(n.clone())
    }
}

impl Drop for Linked {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Accept the members' streams: each authenticates as the peer role for
/// its own node id, which must be a member, then says `Hello::ToManager`.
fn accept_nodes(
    listener: std::net::TcpListener,
    keys: tandem_auth::Keyring,
    members: Vec<NodeId>,
    tx: std::sync::mpsc::Sender<ManagerEvent>,
) {
    use crate::wire::{Frames, Heartbeat, Hello};
    let gate = std::sync::Arc::new(tandem_auth::Gate::new(HANDSHAKING_MAX));
    let keys = std::sync::Arc::new(keys);
    let linked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for mut s in listener.incoming().flatten() {
        if linked.load(std::sync::atomic::Ordering::SeqCst) >= LINKS_MAX {
            continue;
        }
        let Ok(ticket) = gate.admit(&s) else { continue };
        let (tx, gate, keys, members) = (tx.clone(), gate.clone(), keys.clone(), members.clone());
        let link = Linked::new(&linked);
        std::thread::spawn(move || -> std::io::Result<()> {
            let _link = link;
            s.set_nodelay(true)?;
            // A member behind a partition fails the stream, not the writer for ever.
            crate::conn::bound_silence(&s);
            let deadline = std::time::Instant::now() + tandem_auth::HANDSHAKE_DEADLINE;
            let roles = [tandem_auth::Role::Peer];
            let who = match gate.authenticate(ticket, &mut s, &keys, &roles, deadline) {
                Ok(who) => who,
                Err(e) => {
                    log::debug!("manager: a connection refused: {e}");
                    return Ok(());
                }
            };
            let mut frames = Frames::new(s.try_clone()?);
            let hello = frames.next::<Hello>()?;
            let Some(Hello::ToManager { node, boot }) = hello else {
                return Ok(());
            };
            if who.id != node as u64 || !members.contains(&node) {
                log::warn!(
                    "manager: node {} said it was node {node}, not a member of {members:?}",
                    who.id
                );
                return Ok(());
            }
            let _ = tx.send(ManagerEvent::Link(
                node,
                boot,
                crate::links::spawn_writer(s),
            ));
            while let Some(Heartbeat {
                seq,
                caught_up,
                epoch,
            }) = frames.next()?
            {
                if tx
                    .send(ManagerEvent::Beat(node, boot, seq, caught_up, epoch))
                    .is_err()
                {
                    break;
                }
            }
            Ok(())
        });
    }
}
