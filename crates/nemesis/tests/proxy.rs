//! The link proxy on real sockets, in a namespace of the test's own (root
//! needed): it carries a link from its first byte, delays it only while
//! asked, keeps each stream in order under jitter, and passes a far leg's
//! death on to the near one.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use tandem_nemesis::proxy::{Proxy, Slow};
use tandem_nemesis::{addr_of, Firewall, Link};

const PORT: u16 = 9000;

/// Enter a fresh namespace in this thread; start an echo server on node 1.
fn setup() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    tandem_nemesis::install_tools(&repo).expect("nftables installed");
    tandem_nemesis::enter_fresh_netns().expect("a namespace (root needed)");
    let l = TcpListener::bind((addr_of(1), PORT)).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || echo(s));
        }
    });
}

fn echo(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 || s.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A connection from node 0 to node 1's echo server.
fn dial() -> std::io::Result<TcpStream> {
    let to = SocketAddr::from((addr_of(1), PORT));
    let from = Some(addr_of(0).into());
    let s = tandem_auth::dial::connect_timeout_from(to, Duration::from_secs(5), from)?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn round_trip(s: &mut TcpStream, n: u64) -> Duration {
    let t = Instant::now();
    s.write_all(&n.to_le_bytes()).unwrap();
    let mut back = [0u8; 8];
    s.read_exact(&mut back).unwrap();
    assert_eq!(u64::from_le_bytes(back), n);
    t.elapsed()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn in_namespace(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        setup();
        f()
    })
    .join()
    .unwrap();
}

#[test]
fn a_link_is_slow_only_while_asked_and_stays_in_order() {
    in_namespace(|| {
        let proxy = Proxy::start(&[addr_of(0), addr_of(1)], 7).unwrap();
        let mut s = dial().unwrap();
        assert!(round_trip(&mut s, 1) < ms(40));
        assert_eq!(proxy.carried(), 1, "the link goes through the proxy");
        let slow = |only: Option<Vec<Ipv4Addr>>, delay, jitter| Slow {
            only,
            delay: ms(delay),
            jitter: ms(jitter),
        };
        proxy.slow(slow(None, 50, 0));
        let rtt = round_trip(&mut s, 2);
        assert!(rtt >= ms(100), "50 ms each way, took {rtt:?}");
        proxy.slow(slow(Some(vec![addr_of(5)]), 50, 0));
        assert!(round_trip(&mut s, 3) < ms(40), "another node's links only");
        proxy.slow(slow(Some(vec![addr_of(1)]), 5, 40));
        let mut sent = Vec::new();
        for i in 0..200u64 {
            s.write_all(&i.to_le_bytes()).unwrap();
            sent.push(i);
        }
        let mut back = vec![0u8; 8 * 200];
        s.read_exact(&mut back).unwrap();
        let got: Vec<u64> = back
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, sent, "jitter never reorders a stream");
        proxy.heal();
        assert!(round_trip(&mut s, 4) < ms(40));
    });
}

#[test]
fn a_far_leg_cut_one_way_resets_the_near_one() {
    in_namespace(|| {
        let _proxy = Proxy::start(&[addr_of(0), addr_of(1)], 7).unwrap();
        let mut s = dial().unwrap();
        round_trip(&mut s, 1);
        let mut fw = Firewall::new().unwrap();
        fw.drop_one_way(Link {
            from: addr_of(0),
            to: addr_of(1),
        })
        .unwrap();
        // Node 0's packets reach the proxy (their destination is the
        // proxy's after NAT) and the proxy acknowledges them: only the
        // proxy's own silence bound on the far leg can end the near one.
        s.set_read_timeout(Some(ms(200))).unwrap();
        let t = Instant::now();
        let died = loop {
            if s.write_all(&[0u8; 64]).is_err() {
                break true;
            }
            let mut b = [0u8; 64];
            if matches!(s.read(&mut b), Ok(0) | Err(_)) && t.elapsed() > ms(100) {
                if s.take_error().ok().flatten().is_some() || s.write(&[0]).is_err() {
                    break true;
                }
            }
            if t.elapsed() > Duration::from_secs(6) {
                break false;
            }
        };
        assert!(died, "the near leg outlived its dead far leg by 6 s");
    });
}

#[test]
fn a_blackholed_connect_is_reset_after_the_proxys_patience() {
    in_namespace(|| {
        let _proxy = Proxy::start(&[addr_of(0), addr_of(1)], 7).unwrap();
        let mut fw = Firewall::new().unwrap();
        fw.blackhole_connects(addr_of(1)).unwrap();
        let t = Instant::now();
        let r = dial().and_then(|mut s| {
            s.write_all(b"x")?;
            let mut b = [0u8; 1];
            s.set_read_timeout(Some(Duration::from_secs(6)))?;
            s.read(&mut b)
        });
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        let took = t.elapsed();
        assert!(took < Duration::from_secs(4), "reset after {took:?}");
        assert!(
            took >= ms(1_500),
            "reset after {took:?}, before the far connect gave up"
        );
    });
}
