//! The manager process (`manager::serve`) over real TCP, driven by fake
//! nodes that speak its wire protocol, so that the order of events across
//! links can be forced.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use tandem_net::manager::{self, ManagerConfig};
use tandem_net::wire::{frame, Frames, FromManager, Heartbeat, Hello};

fn keys() -> tandem_auth::Keyring {
    tandem_auth::Keyring::from_master_hex("5ec05ec05ec05ec05ec05ec05ec05ec0").unwrap()
}

struct FakeNode {
    out: TcpStream,
    frames: Frames<TcpStream>,
}

impl FakeNode {
    fn link(addr: std::net::SocketAddr, node: u16, boot: u64) -> FakeNode {
        let mut out = TcpStream::connect(addr).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        tandem_auth::connect(
            &mut out,
            &keys(),
            tandem_auth::Role::Peer,
            node as u64,
            deadline,
        )
        .unwrap();
        out.set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        let frames = Frames::new(out.try_clone().unwrap());
        let mut n = FakeNode { out, frames };
        n.send(&Hello::ToManager { node, boot });
        n
    }

    fn send<T: serde::Serialize>(&mut self, v: &T) {
        self.out.write_all(&frame(v)).unwrap();
    }

    fn beat(&mut self, seq: u64) {
        self.send(&Heartbeat {
            seq,
            caught_up: true,
            epoch: 0,
        });
    }

    /// What the manager sent next, if anything within the timeout.
    fn next(&mut self) -> Option<FromManager> {
        self.frames.next::<FromManager>().ok().flatten()
    }

    /// Read until a configuration of `epoch` arrives (panics on silence).
    fn config(&mut self, epoch: u64) -> Vec<u16> {
        loop {
            match self.next() {
                Some(FromManager::Config(c)) if c.epoch == epoch => return c.members,
                Some(_) => {}
                None => panic!("no configuration of epoch {epoch}"),
            }
        }
    }
}

/// Node 1's first run linked and heartbeated; its second run links (the
/// first was killed), and only then does a heartbeat the first run sent
/// reach the manager. It comes from a run that is gone: it must neither
/// add node 1 back nor earn the new run a lease (the new run has its own
/// heartbeat of that sequence number, sent at another time).
#[test]
fn a_heartbeat_of_a_dead_run_earns_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = ManagerConfig {
        startup_ns: 10_000_000_000,
        lease_ns: 10_000_000_000,
        ..ManagerConfig::default()
    };
    std::thread::spawn(move || manager::serve(listener, keys(), &[0, 1], cfg, None));
    let mut zero = FakeNode::link(addr, 0, 100);
    assert_eq!(zero.config(1), vec![0, 1]);
    let mut old = FakeNode::link(addr, 1, 7);
    assert_eq!(old.config(1), vec![0, 1]);
    old.beat(1);
    assert!(matches!(old.next(), Some(FromManager::Lease { seq: 1 })));
    let mut new = FakeNode::link(addr, 1, 8);
    assert_eq!(new.config(2), vec![0], "the new run removes node 1");
    old.beat(2);
    let after: Vec<FromManager> = std::iter::from_fn(|| new.next())
        .filter(|m| !matches!(m, FromManager::Config(c) if c.epoch == 2))
        .collect();
    assert!(
        after.is_empty(),
        "the dead run's heartbeat reached the new run as {after:?}"
    );
    assert!(zero.config(2) == vec![0]);
    assert!(zero.next().is_none(), "node 1 was added back by a dead run");
    new.beat(1);
    assert!(matches!(new.next(), Some(FromManager::Lease { seq: 1 })));
    assert_eq!(new.config(3), vec![0, 1], "its own heartbeat adds it back");
}
