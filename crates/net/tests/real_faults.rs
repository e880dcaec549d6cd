//! The node host under real network faults: two nodes on threads of this
//! test, each on its own address (127.0.0.2, 127.0.0.3) inside a network
//! namespace the test creates, their packets dropped by nftables rules, as
//! a partition or a blackhole drops them: no socket is closed, nothing
//! tells either side.
//!
//! Needs root (namespaces) and `bash scripts/netfault.sh install`; CI has both.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tandem_nemesis::{addr_of, enter_fresh_netns, Firewall};
use tandem_net::echo::NoRecord;
use tandem_net::host::{self, HostConfig, NodeHandle};
use tandem_net::nvm_file::OnCorrupt;
use tandem_net::protocol::{Command, Config, Input, NodeFactory, NodeId, Nvm, Protocol};

/// Every node sends a beacon to every peer this often.
const BEACON_NS: u64 = 10_000_000;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Beacon(u64);

/// When each node last heard each peer: (to, from) → instant.
type Heard = Arc<Mutex<HashMap<(NodeId, NodeId), Instant>>>;

struct Beacons {
    me: NodeId,
    peers: Vec<NodeId>,
    seq: u64,
    heard: Heard,
}

impl Protocol for Beacons {
    type Msg = Beacon;
    type Op = ();
    type Reply = ();
    type Record = NoRecord;

    fn step(&mut self, now: u64, input: Input<Self>, out: &mut Vec<Command<Self>>) {
        match input {
            Input::Recv { from, .. } => {
                let mut h = self.heard.lock().unwrap();
                h.insert((self.me, from), Instant::now());
            }
            Input::Config(_) | Input::Timer { .. } => {
                self.seq += 1;
                for &to in &self.peers {
                    let msg = Beacon(self.seq);
                    out.push(Command::Send { to, msg });
                }
                let at_ns = now + BEACON_NS;
                out.push(Command::SetTimer { token: 0, at_ns });
            }
            _ => {}
        }
    }
}

struct BeaconFactory(Heard);

impl NodeFactory<Beacons> for BeaconFactory {
    fn start(&self, me: NodeId, config: &Config) -> Beacons {
        let peers = config.members.iter().copied().filter(|&n| n != me);
        Beacons {
            me,
            peers: peers.collect(),
            seq: 0,
            heard: self.0.clone(),
        }
    }
    fn recover(&self, me: NodeId, config: &Config, _nvm: &Nvm<NoRecord>) -> Beacons {
        self.start(me, config)
    }
}

/// Two beaconing nodes, 0 on `addr_of(0)` and 1 on `addr_of(1)`.
struct Pair {
    heard: Heard,
    nodes: Vec<NodeHandle>,
    _dir: tempdir::Dir,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(name: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Pair {
    fn start(name: &str) -> Pair {
        let dir = tempdir::Dir::new(name);
        let heard: Heard = Arc::default();
        let listeners: Vec<TcpListener> = (0..2)
            .map(|i| TcpListener::bind((addr_of(i), 0)).unwrap())
            .collect();
        let peers: Vec<(NodeId, SocketAddr)> = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| (i as NodeId, l.local_addr().unwrap()))
            .collect();
        let nodes = listeners
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                let cfg = host_cfg(i as NodeId, &peers, &dir.0);
                host::spawn(cfg, l, BeaconFactory(heard.clone())).unwrap()
            })
            .collect();
        Pair {
            heard,
            nodes,
            _dir: dir,
        }
    }

    /// When `to` last heard `from`.
    fn last(&self, to: NodeId, from: NodeId) -> Option<Instant> {
        self.heard.lock().unwrap().get(&(to, from)).copied()
    }

    /// Wait until each node heard the other after `since`; how long that took.
    fn both_hear(&self, since: Instant, limit: Duration) -> Result<Duration, String> {
        loop {
            let fresh = |to, from| self.last(to, from).is_some_and(|t| t > since);
            if fresh(0, 1) && fresh(1, 0) {
                return Ok(since.elapsed());
            }
            if since.elapsed() > limit {
                return Err(format!(
                    "after {limit:?}: node 0 heard node 1: {}, node 1 heard node 0: {}",
                    fresh(0, 1),
                    fresh(1, 0)
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in &self.nodes {
            n.stop();
        }
    }
}

fn host_cfg(id: NodeId, peers: &[(NodeId, SocketAddr)], dir: &std::path::Path) -> HostConfig {
    HostConfig {
        id,
        peers: peers.to_vec(),
        manager: None,
        keys: tandem_auth::Keyring::from_master_hex("fa017fa017fa017fa017fa017fa017fa").unwrap(),
        nvm: dir.join(format!("n{id}.nvm")),
        nvm_bytes: 1 << 20,
        nvm_corrupt: OnCorrupt::Stop,
        fsync: false,
        heartbeat: Duration::from_millis(5),
        lease: Duration::from_millis(200),
        ignore_lease: false,
        lease_from_receipt: false,
    }
}

/// This test's thread in a namespace of its own, with an empty firewall.
fn isolated() -> Firewall {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    tandem_nemesis::install_tools(&repo).expect("nftables and iproute2");
    enter_fresh_netns().expect("a network namespace (run as root)");
    Firewall::new().expect("nftables (bash scripts/netfault.sh install)")
}

fn ip(i: usize) -> Ipv4Addr {
    addr_of(i)
}

/// A partition long enough that the kernel's retransmissions have backed
/// off to seconds: once it heals, both nodes hear each other again within
/// a second, because each has given up its silent stream and dials afresh.
#[test]
fn after_a_partition_heals_the_peers_hear_each_other_within_a_second() {
    let mut fw = isolated();
    let pair = Pair::start("tandem-partition-heal");
    let up = pair.both_hear(Instant::now(), Duration::from_secs(5));
    up.expect("the pair connects");
    fw.isolate(ip(1)).unwrap();
    std::thread::sleep(Duration::from_secs(8));
    fw.heal().unwrap();
    let healed = Instant::now();
    let back = pair.both_hear(healed, Duration::from_secs(20));
    let back = back.expect("the pair hears each other after the heal");
    eprintln!("heard again {back:?} after the heal");
    assert!(
        back <= Duration::from_secs(1),
        "{back:?} after the heal before both nodes heard each other again (at most 1 s)"
    );
}

/// While a partition lasts, a node with messages in flight declares its
/// stream down and dials again within 2.5 s: its fresh SYNs are the proof.
/// (Node 1 is cut off from every address, so the test holds whatever
/// address node 0 dials from.)
#[test]
fn a_silent_link_is_declared_down_within_two_and_a_half_seconds() {
    let mut fw = isolated();
    let pair = Pair::start("tandem-silent-link");
    let up = pair.both_hear(Instant::now(), Duration::from_secs(5));
    up.expect("the pair connects");
    let syns = fw.count_syns(ip(1)).unwrap();
    fw.isolate(ip(1)).unwrap();
    let cut = Instant::now();
    let limit = Duration::from_millis(2_500);
    while fw.counted(syns).unwrap() == 0 && cut.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let declared = cut.elapsed();
    eprintln!("node 0 dialed node 1 again {declared:?} into the partition");
    assert!(
        declared <= limit,
        "node 0 sent no new SYN to node 1 for {declared:?} into the partition: its silent stream was not declared down (bound {limit:?})"
    );
}

/// Connects to a node that are blackholed (SYNs dropped) from the start
/// never bring a link up; once the blackhole lifts, the link is up within
/// a second, whatever point the dialer's retries had reached.
#[test]
fn a_blackholed_peer_is_reached_within_a_second_of_the_heal() {
    let mut fw = isolated();
    fw.blackhole_connects(ip(1)).unwrap();
    fw.blackhole_connects(ip(0)).unwrap();
    let pair = Pair::start("tandem-blackhole");
    std::thread::sleep(Duration::from_millis(3_300));
    assert!(pair.last(0, 1).is_none() && pair.last(1, 0).is_none());
    fw.heal().unwrap();
    let back = pair.both_hear(Instant::now(), Duration::from_secs(20));
    let back = back.expect("the pair connects after the heal");
    eprintln!("connected {back:?} after the heal");
    assert!(back <= Duration::from_secs(1), "{back:?} after the heal");
}
