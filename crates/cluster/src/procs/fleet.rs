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
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tandem_dkvs::recovery::RecoveryBugs;
use tandem_dkvs::{Layout, MemoryView};
use tandem_fabric::tcp::{TcpCluster, TcpFabric};
use tandem_fabric::{Fabric, MemNodeId, QueuePair, Verb};
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
}

impl MemoryLinks {
    /// Register with the memory servers `config` does not mark down and
    /// connect to them (the others stay unconnected).
    pub async fn connect(memory: TcpCluster, config: &MemoryConfig) -> Result<MemoryLinks, String> {
        // Recovery and re-replication go through these links: the memory
        // servers serve them before the compute servers' verbs.
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
        let keys = &keys;
        let connect = |memory: TcpCluster| async move {
            (memory.connect_live(MEMBERSHIP_NODE, keys).await)
                .map_err(|e| format!("cannot connect to the memory servers: {e}"))
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
