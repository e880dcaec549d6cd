//! A data connection under a real partition: a memory server on its own
//! address (127.0.0.2) inside a network namespace this test creates, its
//! packets dropped by nftables as a partition drops them. Nothing closes
//! the socket and nothing tells the compute side; only the stream's
//! silence can.
//!
//! Needs root (namespaces) and `bash scripts/netfault.sh install`; CI has both.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_fabric::auth::Keyring;
use tandem_fabric::tcp::{MemoryServerHandle, TcpCluster};
use tandem_fabric::{Fabric, MemoryNode, QueuePair, Verb, VerbError, VerbOutput};
use tandem_nemesis::{addr_of, enter_fresh_netns, Firewall};

fn keyring() -> Keyring {
    Keyring::from_master_hex("7a4de35ec8e7000000000000000000aa").unwrap()
}

fn isolated() -> Firewall {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    tandem_nemesis::install_tools(&repo).expect("nftables and iproute2");
    enter_fresh_netns().expect("a network namespace (run as root)");
    Firewall::new().expect("nftables (bash scripts/netfault.sh install)")
}

/// A verb posted while the server is cut off completes with `Unavailable`
/// within 2.5 s (`TCP_USER_TIMEOUT` of 1 s and the retransmission timer's
/// granularity), not after the kernel's 15 minutes of retransmissions; the
/// queue pair then says it is down, which is what makes a compute server
/// dial it again.
#[test]
fn a_verb_to_a_silent_memory_server_fails_within_two_and_a_half_seconds() {
    let mut fw = isolated();
    let addr = SocketAddr::new(addr_of(0).into(), 7300);
    let node = Arc::new(MemoryNode::new(4096));
    let server = MemoryServerHandle::bind(addr, node, keyring()).expect("bind memory server");
    let cluster = TcpCluster::new(vec![server.local_addr()], keyring())
        .shm(false)
        .bounding_silence();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let (failed_after, connected) = local.block_on(&rt, async {
        let keys = cluster.register(1).await.unwrap();
        let fabric = cluster.connect(1, &keys).await.unwrap();
        let qp = fabric.queue_pair(0);
        let first = qp.post(tandem_fabric::batch![Verb::faa(0, 1)]).await;
        assert_eq!(first, tandem_fabric::batch![Ok(VerbOutput::Faa(0))]);
        fw.isolate(addr_of(0)).unwrap();
        let cut = Instant::now();
        let pending = qp.post(tandem_fabric::batch![Verb::faa(0, 1)]);
        let done = tokio::time::timeout(Duration::from_secs(20), pending).await;
        let done = done.expect("the verb never completed within 20 s");
        assert_eq!(done, tandem_fabric::batch![Err(VerbError::Unavailable)]);
        (cut.elapsed(), fabric.queue_pair_connected(0))
    });
    eprintln!("the verb failed {failed_after:?} into the partition");
    let limit = Duration::from_millis(2_500);
    assert!(
        failed_after <= limit,
        "the verb failed only {failed_after:?} into the partition (bound {limit:?})"
    );
    assert!(!connected, "the queue pair still says it is connected");
    fw.heal().unwrap();
}
