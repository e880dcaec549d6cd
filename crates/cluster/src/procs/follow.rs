//! A compute node's side of memory-server reconfiguration (docs/DESIGN.md §4.6;
//! the protocol is [`tandem_membership::Fleet`]'s): the [`Gate`] every
//! transaction passes, and [`follow_memory`], which applies each memory
//! configuration the membership announces. Used by `tandem pandora compute-server`
//! and by DART's `litmus-worker` processes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tandem_dkvs::{ComputeNode, MemoryView};
use tandem_fabric::tcp::{TcpCluster, TcpFabric};
use tandem_fabric::{Fabric, MemNodeId, RegionKey};
use tandem_membership::MemoryConfig;
use tokio::sync::watch;

use super::session::{MemorySignal, Stop};

/// Whether transactions may start (a memory reconfiguration holds them), and
/// how many are in flight. Held until the first configuration is applied.
pub struct Gate {
    held: Cell<bool>,
    in_flight: Cell<usize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            held: Cell::new(true),
            in_flight: Cell::new(0),
        }
    }
}

impl Gate {
    /// Wait while held, then count one transaction in flight until the
    /// returned guard is dropped.
    pub async fn enter(self: &Rc<Self>) -> InFlight {
        while self.held.get() {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        self.in_flight.set(self.in_flight.get() + 1);
        InFlight(self.clone())
    }

    /// [`Gate::enter`], or `None` once `deadline` passes while held.
    pub async fn enter_until(self: &Rc<Self>, deadline: Instant) -> Option<InFlight> {
        let deadline = tokio::time::Instant::from_std(deadline);
        tokio::time::timeout_at(deadline, self.enter()).await.ok()
    }

    /// [`Gate::enter_until`], or `None` as soon as the incarnation stops: a
    /// node fenced while its gate was held for a reconfiguration never sees
    /// that gate open again (the membership resumes only its live members).
    pub async fn enter_unless_stopped(
        self: &Rc<Self>,
        deadline: Instant,
        stop: &mut watch::Receiver<Option<Stop>>,
    ) -> Option<InFlight> {
        tokio::select! {
            entered = self.enter_until(deadline) => entered,
            _ = stop.wait_for(Option::is_some) => None,
        }
    }
}

/// One transaction in flight; counted down when dropped.
pub struct InFlight(Rc<Gate>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

/// The memory servers as the newest configuration applied has them: their
/// addresses, and which are down (kept across a compute node's incarnations).
pub struct MemoryState {
    cluster: RefCell<TcpCluster>,
    down: RefCell<BTreeSet<MemNodeId>>,
}

impl MemoryState {
    pub fn new(cluster: TcpCluster) -> MemoryState {
        MemoryState {
            cluster: RefCell::new(cluster),
            down: RefCell::default(),
        }
    }

    pub fn cluster(&self) -> TcpCluster {
        self.cluster.borrow().clone()
    }

    /// The memory nodes the newest configuration applied marks down.
    pub fn down(&self) -> BTreeSet<MemNodeId> {
        self.down.borrow().clone()
    }

    /// A view with the down memory nodes marked.
    pub fn view(&self) -> MemoryView {
        let view = MemoryView::default();
        for &m in self.down.borrow().iter() {
            view.set_down(m, true);
        }
        view
    }
}

/// Region keys from every memory server but those `down` names or that do
/// not answer (dying, not declared failed yet: the membership's next
/// configuration says so, and transactions wait for the first one).
/// Fenced (a revoked incarnation) is an error.
pub async fn register_live(
    memory: &TcpCluster,
    node: u16,
    down: &BTreeSet<MemNodeId>,
) -> std::io::Result<Vec<Option<RegionKey>>> {
    let mut keys = Vec::new();
    for m in 0..memory.addrs.len() as MemNodeId {
        if down.contains(&m) {
            keys.push(None);
            continue;
        }
        let key = tokio::time::timeout(CONNECT_PATIENCE, memory.register_on(m, node)).await;
        match key.unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())) {
            Ok(key) => keys.push(Some(key)),
            Err(e) if unreachable(&e) => {
                log::warn!("compute node {node}: memory server {m} does not answer: {e}");
                keys.push(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(keys)
}

/// A server that is gone (as opposed to one that refuses us).
fn unreachable(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | UnexpectedEof
            | BrokenPipe
            | TimedOut
    ) && !tandem_fabric::tcp::is_fenced(e)
}

/// Apply every memory configuration the service announces, forever (the
/// caller aborts the task): hold new transactions, cut the links to the
/// memory nodes now down (their pending verbs fail at once), let the
/// transactions in flight finish (each commits if every live replica took
/// its writes, else aborts), connect to admitted replacements, switch
/// primaries, answer `applied`; transactions start again once the service
/// resumes. Returns only when it cannot go on: [`Stop::Fenced`] if a
/// memory server refused to register this incarnation because it was
/// revoked (the notice saying so may still be on its way: the incarnation
/// ends and the node comes back as a new one), [`Stop::Lost`] on any other
/// error, which ends the node's run.
pub async fn follow_memory(
    node: u16,
    signal: MemorySignal,
    compute: Rc<ComputeNode<TcpFabric>>,
    gate: Rc<Gate>,
    memory: Rc<MemoryState>,
) -> Stop {
    let mut applied: Option<u64> = None;
    let mut told = Instant::now();
    loop {
        let latest = signal.latest();
        if let Some(config) = latest
            .clone()
            .filter(|c| applied.is_none_or(|a| a < c.epoch))
        {
            gate.held.set(true);
            match apply(&compute, &gate, &memory, &config, &signal).await {
                Ok(true) => {
                    applied = Some(config.epoch);
                    signal.applied(node, config.epoch);
                    told = Instant::now();
                }
                // A server up in it does not answer: hold on until the
                // membership declares it failed (a newer configuration).
                Ok(false) => tokio::time::sleep(RETRY).await,
                Err(Refusal::Fenced(e)) => {
                    return Stop::Fenced(format!(
                        "memory configuration {}: {e}; revoked there",
                        config.epoch
                    ))
                }
                Err(Refusal::Other(e)) => {
                    return Stop::Lost(format!(
                        "cannot apply memory configuration {}: {e}",
                        config.epoch
                    ))
                }
            }
        }
        let current = applied.is_some() && latest.map(|c| c.epoch) == applied;
        if gate.held.get() && current && signal.resumed() >= applied {
            gate.held.set(false);
        }
        // Say it again while held: an answer sent while the membership
        // connection was down is lost, and the rejoin repeats the epoch.
        if let Some(e) = applied.filter(|_| gate.held.get() && told.elapsed() > RETRY) {
            signal.applied(node, e);
            told = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Wait until a memory server that the membership has not declared failed
/// has been unreachable from this compute node for `patience`: a commit
/// waits for a verdict on it (it missed a write there), or its data link is
/// down. Which server, and why. The caller ends its incarnation: the server
/// may be alive and the membership may never declare it, and only log
/// recovery can then settle the waiting commits (docs/DESIGN.md §4.6).
pub async fn overdue_verdict(
    compute: &ComputeNode<TcpFabric>,
    patience: Duration,
) -> (MemNodeId, &'static str) {
    let (fabric, view) = (compute.fabric(), compute.memory_view());
    let servers = fabric.memory_nodes() as MemNodeId;
    let mut since: Vec<Option<Instant>> = vec![None; servers as usize];
    loop {
        let awaited = view.awaited();
        for m in 0..servers {
            let why = if awaited & 1 << m != 0 {
                Some("a commit missed its write there")
            } else if !view.is_declared(m) && !fabric.queue_pair_connected(m) {
                Some("its data link is down")
            } else {
                None
            };
            let first = &mut since[m as usize];
            match (why, *first) {
                (None, _) => *first = None,
                (Some(_), None) => *first = Some(Instant::now()),
                (Some(why), Some(t)) if t.elapsed() >= patience => return (m, why),
                (Some(_), Some(_)) => {}
            }
        }
        tokio::time::sleep(VERDICT_TICK).await;
    }
}

/// How often [`overdue_verdict`] looks.
const VERDICT_TICK: Duration = Duration::from_millis(20);

/// How often a held compute node retries a connection, or repeats its answer.
const RETRY: Duration = Duration::from_millis(50);

/// How long registering with, or connecting to, a memory server may take.
const CONNECT_PATIENCE: Duration = Duration::from_secs(2);

/// Why a configuration cannot be applied.
enum Refusal {
    /// A memory server refused to register this incarnation: it was revoked.
    Fenced(String),
    Other(String),
}

/// Apply `config`: cut, drain, connect, switch. `Ok(false)`: a server that
/// is up in it did not answer (nothing is acknowledged; try again).
async fn apply(
    compute: &ComputeNode<TcpFabric>,
    gate: &Gate,
    memory: &MemoryState,
    config: &MemoryConfig,
    signal: &MemorySignal,
) -> Result<bool, Refusal> {
    let (fabric, view) = (compute.fabric(), compute.memory_view());
    // Declared failed: a commit that missed a write there may go on.
    let cut = |down: &BTreeSet<MemNodeId>| {
        for &m in down {
            if !view.is_down(m) && fabric.queue_pair_connected(m) {
                fabric.cut(m);
            }
            view.declare_failed(m);
        }
    };
    cut(&config.down);
    while gate.in_flight.get() > 0 {
        // A transaction may wait on a server declared failed since.
        if let Some(newer) = signal.latest() {
            cut(&newer.down);
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let mut cluster = memory.cluster();
    if config.addrs.len() != cluster.addrs.len() {
        return Err(Refusal::Other(format!(
            "{} memory servers announced, {} known",
            config.addrs.len(),
            cluster.addrs.len()
        )));
    }
    let mut complete = true;
    for (m, a) in config.addrs.iter().enumerate() {
        let m = m as MemNodeId;
        let addr: SocketAddr = a
            .parse()
            .map_err(|e| Refusal::Other(format!("bad address {a}: {e}")))?;
        let down = config.down.contains(&m);
        let moved = cluster.addrs[m as usize] != addr;
        cluster.addrs[m as usize] = addr;
        if !down && (view.is_down(m) || moved || !fabric.queue_pair_connected(m)) {
            let connected = async {
                let key = cluster.register_on(m, fabric.compute_node()).await?;
                fabric.reconnect(m, addr, key).await
            };
            let connected = tokio::time::timeout(CONNECT_PATIENCE, connected)
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
            match connected {
                Ok(()) => {}
                // Dying, not declared yet: the next configuration will say so.
                Err(e) if unreachable(&e) => {
                    log::warn!("memory server {m} at {addr} does not answer: {e}");
                    complete = false;
                    continue;
                }
                Err(e) if tandem_fabric::tcp::is_fenced(&e) => {
                    return Err(Refusal::Fenced(format!(
                        "memory server {m} at {addr} refused to register it"
                    )))
                }
                Err(e) => {
                    return Err(Refusal::Other(format!(
                        "cannot connect to memory server {m} at {addr}: {e}"
                    )))
                }
            }
        }
        view.set_down(m, down);
    }
    if !complete {
        return Ok(false);
    }
    *memory.cluster.borrow_mut() = cluster;
    *memory.down.borrow_mut() = config.down.clone();
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tandem_dkvs::{FailedIds, Layout, Mode, StoreConfig};
    use tandem_fabric::tcp::MemoryServerHandle;
    use tandem_fabric::MemoryNode;
    use tandem_workloads::micro::{KeyChooser, MicroSpec};

    /// A compute node whose link to a memory server timed out (a partition)
    /// is told a configuration that keeps that server up. Meanwhile the
    /// membership declared the node failed and revoked it everywhere, and
    /// its notice saying so is still on its way. Reconnecting, the server
    /// refuses to register it: that is a fence, so the incarnation ends and
    /// the node comes back as a new one, not an error that stops the node
    /// for good (a nemesis split of a compute server with a memory server
    /// left one compute slot stopped, one run in about eight).
    #[test]
    fn a_revoked_registration_while_applying_a_configuration_is_a_fence() {
        let keys =
            tandem_fabric::auth::Keyring::from_master_hex("f0ced0f0ced0f0ced0f0ced0f0ced0f0")
                .unwrap();
        let servers: Vec<_> = (0..3)
            .map(|_| {
                let node = Arc::new(MemoryNode::new(16 << 20));
                MemoryServerHandle::bind("127.0.0.1:0".parse().unwrap(), node, keys.clone())
                    .unwrap()
            })
            .collect();
        let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.local_addr()).collect();
        let memory = TcpCluster::new(addrs.clone(), keys);
        let micro = MicroSpec {
            keys: 100,
            write_ratio: 0.5,
            ops_per_tx: 2,
            chooser: KeyChooser::Uniform,
        };
        let store = StoreConfig::new(Mode::Pandora, 3, 2, micro.tables());
        let layout = Arc::new(Layout::new(&store).unwrap());
        let refusal = crate::runner::block_on_local(async {
            let keys = register_live(&memory, 1, &BTreeSet::new()).await.unwrap();
            let fabric = memory.connect_live(1, &keys).await.unwrap();
            let compute = ComputeNode::new(fabric, &store, layout, FailedIds::new());
            memory.revoke(1).await.unwrap();
            compute.fabric().cut(1);
            let config = MemoryConfig {
                epoch: 1,
                addrs: addrs.iter().map(|a| a.to_string()).collect(),
                down: BTreeSet::new(),
            };
            let signal = MemorySignal::announcing(config.clone());
            let state = MemoryState::new(memory.clone());
            apply(&compute, &Gate::default(), &state, &config, &signal).await
        });
        assert!(
            matches!(refusal, Err(Refusal::Fenced(ref why)) if why.contains("memory server 1")),
            "{:?}",
            refusal.map_err(|r| match r {
                Refusal::Fenced(w) => format!("fenced: {w}"),
                Refusal::Other(w) => format!("other: {w}"),
            })
        );
    }

    /// A node fenced while a reconfiguration holds its gate: the membership
    /// never resumes a failed member, so waiting for the gate would keep its
    /// coordinators there until the run's deadline, and the node would never
    /// come back as a new incarnation (a nemesis split of a compute server
    /// with a memory server under load, about one run in six). The stop
    /// lets them go at once.
    #[test]
    fn a_fenced_node_leaves_a_held_gate_at_once() {
        let (gate, deadline) = (
            Rc::new(Gate::default()),
            Instant::now() + Duration::from_secs(60),
        );
        let (stop, mut stopped) = watch::channel(None);
        let started = Instant::now();
        let entered = crate::runner::block_on_local(async move {
            tokio::task::spawn_local(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                stop.send_replace(Some(Stop::Fenced("declared failed".into())));
                // The sender lives on: only the stop may end the wait.
                tokio::time::sleep(Duration::from_secs(120)).await;
                drop(stop);
            });
            gate.enter_unless_stopped(deadline, &mut stopped)
                .await
                .is_some()
        });
        assert!(!entered, "a held gate let a fenced node in");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
