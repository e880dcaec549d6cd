//! The multi-process roles in one process (fencing and new incarnations,
//! docs/DESIGN.md §4.5): memory servers over
//! TCP, the membership server and compute servers on threads. A fenced
//! compute server, however it learns it, comes back as a new incarnation
//! under a node id from the membership, and the store checks out.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_cluster::procs::{
    self, ComputeServerConfig, ComputeServerReport, MembershipServerConfig, MembershipSession,
    Replica,
};
use tandem_cluster::runner::block_on_local;
use tandem_dkvs::{Mode, StoreConfig};
use tandem_fabric::tcp::{MemoryServerHandle, TcpCluster};
use tandem_fabric::MemoryNode;
use tandem_membership::FIRST_INCARNATION_ID;
use tandem_workloads::micro::{KeyChooser, MicroSpec};

const TIMEOUT: Duration = Duration::from_millis(100);

struct Cluster {
    _servers: Vec<MemoryServerHandle>,
    memory: TcpCluster,
    store: StoreConfig,
    micro: MicroSpec,
    membership: SocketAddr,
    dir: PathBuf,
}

/// A memory node's region: private (tcp) or a memfd (shm).
fn node(shm: bool, bytes: u64) -> MemoryNode {
    match shm {
        true => MemoryNode::shared(bytes).unwrap(),
        false => MemoryNode::new(bytes),
    }
}

fn cluster(tag: &str, shm: bool) -> Cluster {
    let secret =
        tandem_fabric::auth::Keyring::from_master_hex("5eed0009000000000000000000000009").unwrap();
    procs::set_credentials(secret.clone()).unwrap();
    let servers: Vec<MemoryServerHandle> = (0..2)
        .map(|_| {
            MemoryServerHandle::bind(
                "127.0.0.1:0".parse().unwrap(),
                Arc::new(node(shm, 64 << 20)),
                secret.clone(),
            )
            .unwrap()
        })
        .collect();
    let memory = TcpCluster::new(servers.iter().map(|s| s.local_addr()).collect(), secret).shm(shm);
    let micro = MicroSpec {
        keys: 2_000,
        write_ratio: 0.5,
        ops_per_tx: 2,
        chooser: KeyChooser::Uniform,
    };
    let mut store = StoreConfig::new(Mode::Pandora, 2, 2, micro.tables());
    store.partitions_per_table = 16;
    store.validate().unwrap();
    procs::load_micro(&memory, &store, &micro).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let membership = listener.local_addr().unwrap();
    let replica = Replica::start(listener, 0, 1, TIMEOUT / 5);
    let cfg = MembershipServerConfig {
        replica,
        memory: memory.clone(),
        store: store.clone(),
        heartbeat_timeout: TIMEOUT,
        zookeeper: None,
        restore_grace: Duration::ZERO,
        recovery_bugs: Default::default(),
        publish_before_recovery: false,
        memory_timeout: Duration::from_millis(500),
    };
    std::thread::spawn(move || procs::run_membership_server(cfg));
    let dir = std::env::temp_dir().join(format!("tandem-procs-{tag}-{shm}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Cluster {
        _servers: servers,
        memory,
        store,
        micro,
        membership,
        dir,
    }
}

impl Cluster {
    fn compute(&self, node: u16, seconds: f64, ledger: &Path) -> ComputeServerConfig {
        ComputeServerConfig {
            node,
            membership: vec![self.membership],
            memory: self.memory.clone(),
            store: self.store.clone(),
            micro: self.micro.clone(),
            coordinators: 4,
            duration: Duration::from_secs_f64(seconds),
            heartbeat_every: Duration::from_millis(5),
            ledger: Some(ledger.to_path_buf()),
            seed: node as u64,
            patience: Duration::from_secs(10),
            verdict_patience: Duration::from_secs(3),
            resp: None,
        }
    }

    /// The store against these ledgers, fenced incarnations' ids counted as
    /// failed: violations, and stray locks of failed coordinators.
    fn check(&self, ledgers: &[PathBuf]) -> procs::ClusterCheck {
        let ledger = procs::read_ledgers(ledgers).unwrap();
        let failed: Vec<u16> = ledgers
            .iter()
            .flat_map(|l| procs::fenced_ids(l).unwrap())
            .collect();
        procs::check_cluster(&self.memory, &self.store, &self.micro, &ledger, &failed).unwrap()
    }

    /// Check once the membership had time to recover the fenced
    /// incarnations and sweep their stray locks (nobody is left).
    fn check_settled(&self, ledgers: &[PathBuf]) -> procs::ClusterCheck {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let c = self.check(ledgers);
            if (c.violations.is_empty() && c.stray_locks == 0) || Instant::now() > until {
                return c;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn assert_came_back(r: &ComputeServerReport, first_fenced_because: &str) {
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.incarnations.len() >= 2, "{:?}", r.incarnations);
    let (first, last) = (&r.incarnations[0], r.incarnations.last().unwrap());
    let why = first.fenced.as_deref().unwrap_or_default();
    assert!(
        why.contains(first_fenced_because),
        "fenced because '{why}', expected '{first_fenced_because}'"
    );
    assert!(
        last.node >= FIRST_INCARNATION_ID && last.fenced.is_none() && !last.ids.is_empty(),
        "{last:?}"
    );
    let ids: Vec<u16> = r.incarnations.iter().flat_map(|i| i.ids.clone()).collect();
    assert!(
        ids.iter()
            .all(|id| ids.iter().filter(|x| *x == id).count() == 1),
        "every incarnation has new coordinator ids: {ids:?}"
    );
}

/// Register first: a node id revoked before the compute server starts is
/// refused by the memory servers, so the server never joins under it and
/// comes back under a node id the membership hands out.
fn a_node_fenced_before_it_starts_never_joins_and_comes_back_under_a_new_node_id(shm: bool) {
    let c = cluster("prefenced", shm);
    block_on_local(c.memory.revoke(5)).unwrap();
    let ledger = c.dir.join("c5.ledger");
    let r = procs::run_compute_server(c.compute(5, 1.0, &ledger)).unwrap();
    assert_came_back(&r, "refuse compute node 5");
    assert!(r.incarnations[0].ids.is_empty(), "{:?}", r.incarnations);
    assert_eq!(r.incarnations[1].node, FIRST_INCARNATION_ID);
    // It registered before joining, so the membership never met node 5: a
    // join under 5 now is a first join, not the rejoin of a failed node.
    match MembershipSession::join_within(
        &[c.membership],
        procs::Joiner::new(5, 1),
        Duration::from_millis(5),
        Duration::from_secs(5),
    ) {
        Ok(s) => assert!(s.ids.len() == 1),
        Err(e) => panic!("node 5 joined the membership before it registered: {e}"),
    }
    assert!(r.committed > 0);
    let check = c.check_settled(&[ledger]);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
}

/// A verb that comes back `Revoked` fences the compute server at once (here
/// the memory servers revoke it behind the membership's back; the
/// membership then sees it go silent and recovers it).
fn a_revoked_verb_fences_the_node_and_it_keeps_committing_as_a_new_incarnation(shm: bool) {
    let c = cluster("revoked", shm);
    let ledger = c.dir.join("c7.ledger");
    let cfg = c.compute(7, 2.0, &ledger);
    let run = std::thread::spawn(move || procs::run_compute_server(cfg));
    std::thread::sleep(Duration::from_millis(500));
    block_on_local(c.memory.revoke(7)).unwrap();
    let r = run.join().unwrap().unwrap();
    assert_came_back(&r, "came back Revoked");
    let commits_after: u64 = r.timeline_100ms.iter().skip(10).sum();
    assert!(
        commits_after > 0,
        "the new incarnation kept committing: {:?}",
        r.timeline_100ms
    );
    let check = c.check_settled(&[ledger]);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(
        check.stray_locks, 0,
        "with no compute node left, the membership sweeps the fenced coordinators' stray locks"
    );
}

/// A node that left may not rejoin under its id: its join is refused as
/// fenced, and it comes back under a new one.
fn a_node_whose_join_is_refused_comes_back_as_a_new_incarnation(shm: bool) {
    let c = cluster("left", shm);
    let (l1, l2) = (c.dir.join("first.ledger"), c.dir.join("second.ledger"));
    let first = procs::run_compute_server(c.compute(6, 0.3, &l1)).unwrap();
    assert_eq!(first.incarnations.len(), 1, "{:?}", first.incarnations);
    let second = procs::run_compute_server(c.compute(6, 0.5, &l2)).unwrap();
    assert_came_back(&second, "compute node 6 left");
    let check = c.check_settled(&[l1, l2]);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
}

// Every test above, over TCP and on the shm fabric.
tandem_fabric::on_tcp_and_shm!(
    a_node_fenced_before_it_starts_never_joins_and_comes_back_under_a_new_node_id,
    a_revoked_verb_fences_the_node_and_it_keeps_committing_as_a_new_incarnation,
    a_node_whose_join_is_refused_comes_back_as_a_new_incarnation
);

/// A compute server given other store flags than the membership service
/// (here one more table, as `--resp-keys` adds) would read and write other
/// slots than the rest of the cluster: its join is refused, saying why,
/// and it stops before running a transaction.
#[test]
fn a_compute_server_that_lays_the_store_out_otherwise_is_refused() {
    let c = cluster("layout", false);
    let ledger = c.dir.join("c7.ledger");
    let mut cfg = c.compute(7, 1.0, &ledger);
    cfg.store.tables.push(tandem_dkvs::TableSpec {
        id: 1,
        name: "redis".into(),
        value_size: 64,
        capacity: 100,
    });
    let e = procs::run_compute_server(cfg)
        .map(|r| r.committed)
        .unwrap_err();
    assert!(e.contains("lays the store out otherwise"), "{e}");
    assert!(e.contains("--resp-keys"), "{e}");
    // The same flags join.
    let r = procs::run_compute_server(c.compute(8, 0.3, &c.dir.join("c8.ledger"))).unwrap();
    assert!(r.committed > 0);
}
