//! The membership service's side of memory-server loss (docs/DESIGN.md §4.6,
//! the Pandora paper §3.2.5; the protocol is [`tandem_membership::Fleet`]'s).
//!
//! - Heartbeats: every tick, an 8-byte read on the service's own data
//!   connection to each memory server; an answer is [`FleetEvent::Heard`].
//!   A server killed with `kill -9` resets its connections and answers
//!   nothing; a stopped or partitioned one answers nothing either.
//! - [`FleetCommand::Reconfigure`]: the service applies the configuration to
//!   its own links and view first (its recovery coordinator reads and writes
//!   live replicas only), then tells every compute server.
//! - [`FleetCommand::Rereplicate`]: while everyone holds, register with the
//!   replacement, fence on it every compute node declared failed so far,
//!   copy every partition the lost node replicated from a live replica.
//! - A replacement announces itself (`tandem pandora memory-server --replaces N`)
//!   with `{"replacement":{"node":N,"addr":A}}`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tandem_dkvs::recovery::RecoveryBugs;
use tandem_dkvs::{Layout, MemoryView};
use tandem_fabric::tcp::{TcpCluster, TcpFabric};
use tandem_fabric::{Fabric, MemNodeId, QueuePair, RegionKey, Verb};
use tandem_membership::{FleetCommand, FleetEvent, MemoryConfig, NodeStatus};

use super::{FromMembership, Shared, MEMBERSHIP_NODE};

/// The service's links to the memory servers and its view of them.
pub(super) struct MemoryLinks {
    pub memory: RefCell<TcpCluster>,
    pub fabric: TcpFabric,
    /// Probes travel over TCP even when `fabric` maps shared regions (shm):
    /// a memory server is alive if its process answers, and a mapped region
    /// answers without it.
    probes: TcpFabric,
    pub view: MemoryView,
    heard: Rc<RefCell<BTreeSet<MemNodeId>>>,
    /// When the current hold started (for the log).
    held_since: RefCell<Option<Instant>>,
    /// Per memory server, when its dead links may be dialed again.
    redial_at: RefCell<BTreeMap<MemNodeId, Instant>>,
    /// The region key each memory server issued this service (a redial
    /// presents it again: registering anew would cut the live links).
    keys: RefCell<Vec<Option<RegionKey>>>,
}

impl MemoryLinks {
    /// Register with the memory servers `config` does not mark down and
    /// connect to them (the others stay unconnected).
    pub async fn connect(memory: TcpCluster, config: &MemoryConfig) -> Result<MemoryLinks, String> {
        // Recovery and re-replication go through these links: the memory
        // servers serve them before the compute servers' verbs.
        // The service's links keep the kernel's silence bound: with a 1 s
        // one, a schedule of the nemesis lost an acknowledged write after
        // they died mid-run (docs/NEMESIS.md). A link that died anyway is
        // dialed again (`redial`).
        let memory = with_addrs(memory, config)?.prioritised();
        let view = MemoryView::default();
        for &m in &config.down {
            view.set_down(m, true);
        }
        // A server that died while no membership ran answers no probe
        // either: it is declared failed like any other.
        let keys = super::follow::register_live(&memory, MEMBERSHIP_NODE, &config.down)
            .await
            .map_err(|e| format!("cannot register with the memory servers: {e}"))?;
        let connect = |memory: TcpCluster| {
            let keys = &keys;
            async move {
                (memory.connect_live(MEMBERSHIP_NODE, keys).await)
                    .map_err(|e| format!("cannot connect to the memory servers: {e}"))
            }
        };
        let fabric = connect(memory.clone()).await?;
        let probes = connect(memory.clone().shm(false)).await?;
        Ok(MemoryLinks {
            memory: RefCell::new(memory),
            fabric,
            probes,
            view,
            heard: Rc::default(),
            held_since: RefCell::new(None),
            redial_at: RefCell::default(),
            keys: RefCell::new(keys),
        })
    }

    /// Probe every memory server not known to be down, every `tick`, forever.
    pub fn start_probes(self: &Rc<Self>, tick: Duration) {
        let links = self.clone();
        tokio::task::spawn_local(async move {
            loop {
                for m in 0..links.probes.memory_nodes() as MemNodeId {
                    if links.view.is_down(m) {
                        continue;
                    }
                    links.redial(m);
                    let probe = links
                        .probes
                        .queue_pair(m)
                        .post(tandem_fabric::batch![Verb::read(0, 8)]);
                    let heard = links.heard.clone();
                    tokio::task::spawn_local(async move {
                        if probe.await.iter().all(|c| c.is_ok()) {
                            heard.borrow_mut().insert(m);
                        }
                    });
                }
                tokio::time::sleep(tick).await;
            }
        });
    }

    /// A server not known to be down whose link (either set) died: the
    /// kernel gave up on it behind a long partition, or the server reset it.
    /// Dial the dead ones again, at most every [`REDIAL_EVERY`], with the
    /// key the server issued: the probes then hear it, and recovery, which
    /// retries, reaches it. Only a server that refuses the key (it
    /// restarted) is registered with again, which replaces the key and so
    /// ends the live links too; both sets are dialed then.
    fn redial(self: &Rc<Self>, m: MemNodeId) {
        let dead = |f: &TcpFabric| !f.queue_pair_connected(m);
        let now = Instant::now();
        if !(dead(&self.fabric) || dead(&self.probes))
            || self.redial_at.borrow().get(&m).is_some_and(|&t| now < t)
        {
            return;
        }
        self.redial_at.borrow_mut().insert(m, now + REDIAL_EVERY);
        let links = self.clone();
        tokio::task::spawn_local(async move {
            let memory = links.memory.borrow().clone();
            let addr = memory.addrs[m as usize];
            let key = links.keys.borrow()[m as usize];
            let dial = async {
                let dead = [&links.fabric, &links.probes].map(|f| !f.queue_pair_connected(m));
                if let Some(key) = key {
                    let mut all = true;
                    for (f, _) in [&links.fabric, &links.probes]
                        .iter()
                        .zip(dead)
                        .filter(|x| x.1)
                    {
                        all &= f.reconnect(m, addr, key).await.is_ok();
                    }
                    if all {
                        return Ok(());
                    }
                }
                let key = memory.register_on(m, MEMBERSHIP_NODE).await?;
                links.keys.borrow_mut()[m as usize] = Some(key);
                for fabric in [&links.fabric, &links.probes] {
                    fabric.reconnect(m, addr, key).await?;
                }
                Ok::<(), std::io::Error>(())
            };
            match tokio::time::timeout(REDIAL_EVERY * 2, dial).await {
                Ok(Ok(())) => {
                    eprintln!("membership: memory server {m} at {addr}: links dialed again")
                }
                Ok(Err(e)) => log::debug!("memory server {m} at {addr}: redial failed: {e}"),
                Err(_) => log::debug!("memory server {m} at {addr}: redial timed out"),
            }
        });
    }

    /// The memory servers that answered since the last call.
    pub fn take_heard(&self) -> BTreeSet<MemNodeId> {
        std::mem::take(&mut *self.heard.borrow_mut())
    }

    /// The memory servers not known to be down.
    pub fn live(&self) -> Vec<MemNodeId> {
        (0..self.fabric.memory_nodes() as MemNodeId)
            .filter(|&m| !self.view.is_down(m))
            .collect()
    }

    /// Apply `config` to the service's own links: cut the newly down, point
    /// the view at the live ones (admitted servers were connected by the copy).
    fn apply(&self, config: &MemoryConfig) -> Result<(), String> {
        let memory = with_addrs(self.memory.borrow().clone(), config)?;
        for m in 0..memory.addrs.len() as MemNodeId {
            let down = config.down.contains(&m);
            if down && !self.view.is_down(m) {
                self.fabric.cut(m);
                self.probes.cut(m);
            }
            self.view.set_down(m, down);
        }
        *self.memory.borrow_mut() = memory;
        Ok(())
    }
}

/// How often the service dials a memory server whose links died.
const REDIAL_EVERY: Duration = Duration::from_millis(200);

/// `memory` with the addresses `config` holds.
fn with_addrs(mut memory: TcpCluster, config: &MemoryConfig) -> Result<TcpCluster, String> {
    if config.addrs.len() != memory.addrs.len() {
        return Err(format!(
            "the stored configuration has {} memory servers, the command line {}",
            config.addrs.len(),
            memory.addrs.len()
        ));
    }
    for (i, a) in config.addrs.iter().enumerate() {
        memory.addrs[i] = a
            .parse::<SocketAddr>()
            .map_err(|e| format!("bad memory server address {a}: {e}"))?;
    }
    Ok(memory)
}

/// Step the fleet with what the probes heard and a tick; execute what it says.
pub(super) async fn tick(
    shared: &Shared,
    links: &MemoryLinks,
    layout: &Layout,
    bugs: RecoveryBugs,
) -> Result<(), String> {
    // Probe answers and the verdict first: a command of this batch (a copy)
    // may take long, and answers meanwhile are stepped in the next one.
    let mut events: Vec<FleetEvent> = links
        .take_heard()
        .into_iter()
        .map(|node| FleetEvent::Heard { node })
        .collect();
    events.push(FleetEvent::Tick);
    events.extend(std::mem::take(&mut *shared.fleet_events.lock().unwrap()));
    for event in events {
        let (cmds, ack) = {
            let mut m = shared.m.lock().unwrap();
            let cmds = m.step_fleet(shared.now(), event, MEMBERSHIP_NODE);
            (cmds.clone(), shared.save(&m, !cmds.is_empty()))
        };
        if let Some(ack) = ack {
            ack.await
                .unwrap_or_else(|_| Err("the ZooKeeper writer stopped".into()))?;
        }
        for cmd in cmds {
            execute(shared, links, layout, cmd, bugs).await?;
        }
    }
    Ok(())
}

async fn execute(
    shared: &Shared,
    links: &MemoryLinks,
    layout: &Layout,
    cmd: FleetCommand,
    bugs: RecoveryBugs,
) -> Result<(), String> {
    match cmd {
        FleetCommand::Reconfigure { config } => {
            links
                .held_since
                .borrow_mut()
                .get_or_insert_with(Instant::now);
            links.apply(&config)?;
            if !config.down.is_empty() {
                eprintln!(
                    "membership: memory configuration {}: memory nodes {:?} down; compute servers hold, drain and switch primaries",
                    config.epoch, config.down
                );
            } else {
                eprintln!(
                    "membership: memory configuration {}: every memory node up ({})",
                    config.epoch,
                    config.addrs.join(",")
                );
            }
            shared.broadcast_memory(Some(config), None);
        }
        FleetCommand::Resume { epoch } => {
            let held = links.held_since.take().map(|t| t.elapsed().as_micros());
            eprintln!(
                "membership: memory configuration {epoch} applied everywhere; transactions resume{}",
                held.map(|us| format!(" after a hold of {us} us")).unwrap_or_default()
            );
            shared.broadcast_memory(None, Some(epoch));
        }
        FleetCommand::Rereplicate { node, addr, epoch } => {
            let t = Instant::now();
            let copy = rereplicate(shared, links, layout, node, &addr, bugs.skip_rereplication);
            let copy = tokio::time::timeout(COPY_PATIENCE, copy)
                .await
                .unwrap_or_else(|_| Err(format!("no progress within {COPY_PATIENCE:?}")));
            let ok = match copy {
                Ok(slots) => {
                    eprintln!(
                        "membership: memory node {node} re-replicated onto {addr}: {slots} slots in {} us; f+1 copies again",
                        t.elapsed().as_micros()
                    );
                    true
                }
                Err(e) => {
                    eprintln!(
                        "membership: re-replication of memory node {node} onto {addr} failed: {e}"
                    );
                    false
                }
            };
            shared
                .fleet_events
                .lock()
                .unwrap()
                .push(FleetEvent::Copied { node, epoch, ok });
        }
        FleetCommand::Refuse { node, reason } => {
            eprintln!("membership: replacement of memory node {node} refused: {reason}");
        }
    }
    Ok(())
}

/// How long a copy onto a replacement may take before it counts as failed
/// (the replacement is refused; another one may be announced).
const COPY_PATIENCE: Duration = Duration::from_secs(120);

/// Fill the replacement for `node` at `addr`: connect, fence every compute
/// node declared failed so far, copy from live replicas.
async fn rereplicate(
    shared: &Shared,
    links: &MemoryLinks,
    layout: &Layout,
    node: MemNodeId,
    addr: &str,
    skip_copy: bool,
) -> Result<u64, String> {
    let sock: SocketAddr = addr
        .parse()
        .map_err(|e| format!("bad address {addr}: {e}"))?;
    let mut target = links.memory.borrow().clone();
    target.addrs[node as usize] = sock;
    let fenced: Vec<u16> = shared
        .m
        .lock()
        .unwrap()
        .nodes()
        .filter(|(_, s)| !matches!(s, NodeStatus::Alive))
        .map(|(n, _)| n)
        .collect();
    for c in fenced {
        target
            .revoke_on(&[node], c)
            .await
            .map_err(|e| format!("cannot fence compute node {c} on the replacement: {e}"))?;
    }
    let key = target
        .register_on(node, MEMBERSHIP_NODE)
        .await
        .map_err(|e| format!("cannot register with the replacement: {e}"))?;
    for fabric in [&links.fabric, &links.probes] {
        (fabric.reconnect(node, sock, key).await)
            .map_err(|e| format!("cannot connect to the replacement: {e}"))?;
    }
    links.keys.borrow_mut()[node as usize] = Some(key);
    if skip_copy {
        return Ok(0); // test-only: `--inject-bug skip-rereplication`
    }
    tandem_dkvs::repair::rereplicate(&links.fabric, layout, node, &links.view)
        .await
        .map_err(|e| e.to_string())
}

/// What a compute server is told when it subscribes: the configuration, and
/// whether transactions run under it.
pub(super) fn on_subscribe(config: &MemoryConfig, resumed: Option<u64>) -> Vec<FromMembership> {
    let mut out = vec![FromMembership::Memory(config.clone())];
    if let Some(epoch) = resumed {
        out.push(FromMembership::Resume(epoch));
    }
    out
}
