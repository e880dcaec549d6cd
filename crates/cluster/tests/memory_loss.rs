//! Memory-server loss with the process roles on threads (docs/DESIGN.md
//! §4.6): three memory servers over TCP, the membership and two compute
//! servers. One memory server goes away mid-run (every connection closed, as
//! a `kill -9` leaves them); the membership declares it failed, the compute
//! servers hold, drain and switch primaries, and keep committing; a
//! replacement announces itself, is filled while everyone holds, and admitted.
//! The store then checks out on the new set of servers: replicas identical
//! (f+1 copies again), counters consistent with the ledgers.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_cluster::procs::{self, ComputeServerConfig, MembershipServerConfig, Replica};
use tandem_dkvs::{Mode, StoreConfig};
use tandem_fabric::tcp::{MemoryServerHandle, TcpCluster};
use tandem_fabric::MemoryNode;
use tandem_workloads::micro::{KeyChooser, MicroSpec};

/// Every role's keys, installed as this test process's credentials.
fn keys() -> tandem_fabric::auth::Keyring {
    let k =
        tandem_fabric::auth::Keyring::from_master_hex("5eed0015000000000000000000000015").unwrap();
    procs::set_credentials(k.clone()).unwrap();
    k
}

/// A memory server whose region is private (tcp) or a memfd (shm).
fn memory_server(shm: bool) -> MemoryServerHandle {
    let node = match shm {
        true => MemoryNode::shared(64 << 20).unwrap(),
        false => MemoryNode::new(64 << 20),
    };
    MemoryServerHandle::bind("127.0.0.1:0".parse().unwrap(), Arc::new(node), keys()).unwrap()
}

struct Setup {
    servers: Vec<Option<MemoryServerHandle>>,
    memory: TcpCluster,
    store: StoreConfig,
    micro: MicroSpec,
    membership: SocketAddr,
    dir: PathBuf,
}

fn setup(tag: &str, shm: bool) -> Setup {
    let servers: Vec<MemoryServerHandle> = (0..3).map(|_| memory_server(shm)).collect();
    let memory = TcpCluster::new(servers.iter().map(|s| s.local_addr()).collect(), keys()).shm(shm);
    let micro = MicroSpec {
        keys: 2_000,
        write_ratio: 0.5,
        ops_per_tx: 2,
        chooser: KeyChooser::Uniform,
    };
    let mut store = StoreConfig::new(Mode::Pandora, 3, 2, micro.tables());
    store.partitions_per_table = 16;
    store.validate().unwrap();
    procs::load_micro(&memory, &store, &micro).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let membership = listener.local_addr().unwrap();
    let timeout = Duration::from_millis(100);
    let cfg = MembershipServerConfig {
        replica: Replica::start(listener, 0, 1, timeout / 5),
        memory: memory.clone(),
        store: store.clone(),
        heartbeat_timeout: timeout,
        zookeeper: None,
        restore_grace: Duration::ZERO,
        recovery_bugs: Default::default(),
        publish_before_recovery: false,
        memory_timeout: Duration::from_millis(200),
    };
    std::thread::spawn(move || procs::run_membership_server(cfg));
    let dir =
        std::env::temp_dir().join(format!("tandem-memloss-{tag}-{shm}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Setup {
        servers: servers.into_iter().map(Some).collect(),
        memory,
        store,
        micro,
        membership,
        dir,
    }
}

impl Setup {
    fn compute(&self, node: u16, seconds: f64) -> ComputeServerConfig {
        ComputeServerConfig {
            node,
            membership: vec![self.membership],
            memory: self.memory.clone(),
            store: self.store.clone(),
            micro: self.micro.clone(),
            coordinators: 4,
            duration: Duration::from_secs_f64(seconds),
            heartbeat_every: Duration::from_millis(5),
            ledger: Some(self.dir.join(format!("c{node}.ledger"))),
            seed: node as u64,
            patience: Duration::from_secs(10),
            verdict_patience: Duration::from_secs(3),
            resp: None,
        }
    }

    fn ledgers(&self, nodes: &[u16]) -> Vec<PathBuf> {
        nodes
            .iter()
            .map(|n| self.dir.join(format!("c{n}.ledger")))
            .collect()
    }
}

/// Poll `check` on `memory` until it is clean (recoveries and sweeps settle).
fn check_settled(s: &Setup, memory: &TcpCluster, nodes: &[u16]) -> procs::ClusterCheck {
    let ledgers = s.ledgers(nodes);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let ledger = procs::read_ledgers(&ledgers).unwrap();
        let failed: Vec<u16> = ledgers
            .iter()
            .flat_map(|l| procs::fenced_ids(l).unwrap())
            .collect();
        let c = procs::check_cluster(memory, &s.store, &s.micro, &ledger, &failed).unwrap();
        if (c.violations.is_empty() && c.stray_locks == 0) || Instant::now() > until {
            return c;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn a_lost_memory_server_is_replaced_while_compute_servers_keep_committing(shm: bool) {
    let mut s = setup("replace", shm);
    let runs: Vec<_> = [1u16, 2]
        .iter()
        .map(|&n| {
            let cfg = s.compute(n, 3.0);
            std::thread::spawn(move || procs::run_compute_server(cfg))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    s.servers[1].take().unwrap().shutdown();
    std::thread::sleep(Duration::from_millis(800));
    let replacement = memory_server(shm);
    let addr = replacement.local_addr();
    procs::announce_replacement(
        &[s.membership],
        1,
        &addr.to_string(),
        Duration::from_secs(5),
    )
    .unwrap();
    let reports: Vec<_> = runs
        .into_iter()
        .map(|r| r.join().unwrap().unwrap())
        .collect();
    for r in &reports {
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let late: u64 = r.timeline_100ms.iter().skip(22).sum();
        assert!(
            late > 0,
            "node {} committed after the replacement: {:?}",
            r.node,
            r.timeline_100ms
        );
    }
    let mut memory = s.memory.clone();
    memory.addrs[1] = addr;
    let check = check_settled(&s, &memory, &[1, 2]);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    drop(replacement);
}

/// A hold that never ends (here: a compute node that never applies the new
/// configuration, alive all the same) does not keep a compute server past
/// its run: it stops at its deadline, with what it committed.
fn a_compute_server_held_past_its_deadline_stops(shm: bool) {
    let mut s = setup("held", shm);
    // Joined and heartbeating, but it never answers a memory configuration.
    let _silent =
        procs::MembershipSession::join(&[s.membership], 9, 1, Duration::from_millis(5)).unwrap();
    let cfg = s.compute(1, 1.5);
    let run = std::thread::spawn(move || procs::run_compute_server(cfg));
    std::thread::sleep(Duration::from_millis(500));
    s.servers[2].take().unwrap().shutdown();
    let t = Instant::now();
    let r = run.join().unwrap().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held past its deadline for {:?}",
        t.elapsed()
    );
    assert!(r.committed > 0, "{r:?}");
}

// Every test above, over TCP and on the shm fabric.
tandem_fabric::on_tcp_and_shm!(
    a_lost_memory_server_is_replaced_while_compute_servers_keep_committing,
    a_compute_server_held_past_its_deadline_stops
);
