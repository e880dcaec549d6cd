//! An attacker on the same host against freshly started `tandem` processes:
//! the memory server and the membership service. Each attack is one that
//! worked before these listeners authenticated their peers (docs/DESIGN.md §8).
//! A test passes only if the process stays alive and serving, its RSS grows
//! by less than 50 MiB, admin calls keep a p99 under 100 ms during the
//! attack, and nothing it is not owed reaches the attacker.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_fabric::auth::{self, ClientHandshake, Keyring, MasterSecret, Role, CHALLENGE_BYTES};
use tandem_fabric::tcp::TcpCluster;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

/// Start `tandem ARGS` and wait for its "listening on ADDR" line.
fn spawn_listening(args: &[&str], secret: &MasterSecret) -> (Proc, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .env("TANDEM_SECRET", secret.hex())
        .env_remove("TANDEM_KEYRING")
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("ADVERSARY_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("it says where it listens").unwrap();
        if let Some(a) = line.strip_prefix("listening on ") {
            break a.trim().parse().unwrap();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    (Proc(child), addr)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// Sockets that never authenticate: each sends one byte every 1.5 s until
/// `stop` (slowloris), reconnecting when the server cuts it.
fn slowloris(
    addr: SocketAddr,
    sockets: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut conns: Vec<Option<TcpStream>> = (0..sockets)
            .map(|_| TcpStream::connect(addr).ok())
            .collect();
        let mut opened = conns.len();
        while !stop.load(Ordering::Relaxed) {
            for c in conns.iter_mut() {
                let ok = c.as_mut().is_some_and(|s| s.write_all(b"T").is_ok());
                if !ok {
                    *c = TcpStream::connect(addr).ok();
                    opened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(1500));
        }
        opened
    })
}

/// Garbage, huge length prefixes, and a 4-byte header claiming 4 MiB on each
/// of 100 unauthenticated sockets (held open).
fn unauthenticated_floods(addr: SocketAddr) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&(4u32 << 20).to_le_bytes());
        held.push(s);
    }
    for bytes in [
        vec![0xA5; 4096],
        u32::MAX.to_le_bytes().to_vec(),
        vec![0; 56],
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&bytes);
        held.push(s);
    }
    held
}

/// A real dialer's handshake, recorded, then replayed on a new connection:
/// the listener must close without its verdict byte.
fn replay_is_rejected(addr: SocketAddr, keys: &Keyring, role: Role) -> bool {
    let (hs, hello) = ClientHandshake::start(keys, role, 0).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_BYTES];
    s.read_exact(&mut challenge).unwrap();
    let proof = hs.challenge(&challenge).unwrap();
    drop(s);
    let mut r = TcpStream::connect(addr).unwrap();
    r.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    r.write_all(&hello).unwrap();
    let mut fresh = [0u8; CHALLENGE_BYTES];
    r.read_exact(&mut fresh).unwrap();
    assert_ne!(fresh, challenge, "a fresh nonce per connection");
    r.write_all(&proof).unwrap();
    // Refused: the verdict says so (or the stream just closes), and nothing follows.
    let mut verdict = [0u8; 1];
    let refused = match r.read(&mut verdict) {
        Ok(0) | Err(_) => true,
        Ok(_) => verdict[0] == auth::VERDICT_REFUSED,
    };
    refused && matches!(r.read(&mut verdict), Ok(0) | Err(_))
}

#[test]
fn a_memory_server_stays_bounded_and_fences_on_time_under_attack() {
    let secret = MasterSecret::generate();
    let (mut server, addr) = spawn_listening(
        &[
            "pandora",
            "memory-server",
            "--listen",
            "127.0.0.1:0",
            "--mem",
            "16M",
        ],
        &secret,
    );
    let admin = TcpCluster::new(vec![addr], secret.keyring().only(&[Role::Admin]));
    block_on(admin.register(1)).unwrap();
    let rss_before = server.rss_kib();

    let stop = Arc::new(AtomicBool::new(false));
    let loris = slowloris(addr, 1100, stop.clone());
    let held = unauthenticated_floods(addr);
    // The membership's calls, during the attack: Register and Revoke of
    // fresh compute nodes, for 8 s.
    let mut latencies = Vec::new();
    let until = Instant::now() + Duration::from_secs(8);
    let mut compute = 100u16;
    while Instant::now() < until {
        let t = Instant::now();
        block_on(admin.register(compute)).expect("Register during the attack");
        block_on(admin.revoke_on(&[0], compute)).expect("Revoke during the attack");
        latencies.push(t.elapsed());
        compute += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        replay_is_rejected(addr, &secret.keyring(), Role::Admin),
        "a replayed handshake got in"
    );
    // A compute keyring cannot act as admin, and another cluster's keys get nothing.
    let compute_only = TcpCluster::new(vec![addr], secret.keyring().only(&[Role::Compute]));
    assert!(block_on(compute_only.revoke_on(&[0], 1)).is_err());
    let stranger = TcpCluster::new(vec![addr], MasterSecret::generate().keyring());
    assert!(block_on(stranger.register(7)).is_err());

    let rss_growth_mib = server.rss_kib().saturating_sub(rss_before) / 1024;
    stop.store(true, Ordering::Relaxed);
    drop(held);
    let opened = loris.join().unwrap();
    assert!(server.alive(), "the memory server died");
    assert!(opened >= 1100, "{opened} slowloris sockets");
    assert!(rss_growth_mib < 50, "RSS grew by {rss_growth_mib} MiB");
    let p = p99(latencies.clone());
    assert!(
        p < Duration::from_millis(100),
        "Register+Revoke p99 {p:?} over {} calls",
        latencies.len()
    );
    // Still serving its members: compute node 1's key still works.
    let keys = block_on(admin.register(2)).unwrap();
    let full = TcpCluster::new(vec![addr], secret.keyring());
    block_on(async { full.connect(2, &keys).await.map(drop) })
        .expect("a data connection after the attack");
}

/// Send one JSON line on `s` and read the answer line (None: closed).
fn ask(s: &mut TcpStream, line: &str) -> Option<String> {
    s.write_all(format!("{line}\n").as_bytes()).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    match BufReader::new(s.try_clone().unwrap()).read_line(&mut answer) {
        Ok(n) if n > 0 => Some(answer),
        _ => None,
    }
}

fn dial(addr: SocketAddr, keys: &Keyring, role: Role, id: u64) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    auth::connect(
        &mut s,
        keys,
        role,
        id,
        Instant::now() + Duration::from_secs(3),
    )
    .unwrap();
    s
}

#[test]
fn the_membership_takes_nothing_from_whoever_it_cannot_authenticate() {
    let secret = MasterSecret::generate();
    let mut mem = Vec::new();
    for _ in 0..2 {
        mem.push(spawn_listening(
            &[
                "pandora",
                "memory-server",
                "--listen",
                "127.0.0.1:0",
                "--mem",
                "64M",
            ],
            &secret,
        ));
    }
    let memory = mem
        .iter()
        .map(|(_, a)| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let port = tandem_net::ports::reserve_loopback().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "pandora",
        "membership",
        "--listen",
        &listen,
        "--memory",
        &memory,
        "--load",
        "--keys",
        "1000",
    ];
    let mut membership = Proc(
        Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(args)
            .env("TANDEM_SECRET", secret.hex())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = listen.parse().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < until, "the membership never listened");
        std::thread::sleep(Duration::from_millis(100));
    }
    let keys = secret.keyring();
    // Wait until it leads and answers an authenticated join.
    let join = |node: u16| {
        let mut s = dial(addr, &keys, Role::Compute, node as u64);
        ask(
            &mut s,
            &format!("{{\"join\":{{\"node\":{node},\"coordinators\":1}}}}"),
        )
        .map(|a| (s, a))
    };
    let (_joined, first) = loop {
        match join(1) {
            Some((s, a)) if a.contains("assign") => break (s, a),
            _ if Instant::now() < until => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("no join: {:?}", other.map(|x| x.1)),
        }
    };
    assert!(first.contains("assign"), "{first}");
    // Node 1 heartbeats all along, as a live compute node does.
    let beating = Arc::new(AtomicBool::new(true));
    let (b, k) = (beating.clone(), keys.clone());
    let heart = std::thread::spawn(move || {
        let mut s = dial(addr, &k, Role::Compute, 1);
        while b.load(Ordering::Relaxed) {
            s.write_all(b"{\"heartbeat\":1}\n").unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let rss_before = membership.rss_kib();

    // Without credentials: join, leave, heartbeat and replacement lines get
    // no answer, and the connection is cut.
    for line in [
        r#"{"join":{"node":2,"coordinators":4}}"#,
        r#"{"leave":1}"#,
        r#"{"heartbeat":1}"#,
        r#"{"replacement":{"node":0,"addr":"127.0.0.1:9"}}"#,
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        assert_eq!(
            ask(&mut s, line),
            None,
            "{line} was answered without credentials"
        );
    }
    // A compute node speaking for another, or announcing a memory server.
    let mut s = dial(addr, &keys, Role::Compute, 2);
    assert_eq!(ask(&mut s, r#"{"leave":1}"#), None);
    let mut s = dial(addr, &keys, Role::Compute, 2);
    assert_eq!(
        ask(&mut s, r#"{"replacement":{"node":0,"addr":"127.0.0.1:9"}}"#),
        None
    );
    // 256 MiB with no newline, unauthenticated, and a line over its cap, authenticated.
    let mut s = TcpStream::connect(addr).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let sent = (0..256).take_while(|_| s.write_all(&chunk).is_ok()).count();
    assert!(sent < 256, "the membership read 256 MiB from a stranger");
    let mut s = dial(addr, &keys, Role::Compute, 3);
    let sent = (0..64).take_while(|_| s.write_all(&chunk).is_ok()).count();
    assert!(sent < 64, "the membership read 64 MiB of one line");
    assert!(
        replay_is_rejected(addr, &keys, Role::Compute),
        "a replayed handshake got in"
    );
    // Slowloris on more than its handshake cap while a compute node joins.
    let stop = Arc::new(AtomicBool::new(false));
    let loris = slowloris(addr, 1100, stop.clone());
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    let (_, answer) = join(4).expect("a join during the slowloris");
    assert!(answer.contains("assign"), "{answer}");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "a join took {:?}",
        t.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    loris.join().unwrap();

    let rss_growth_mib = membership.rss_kib().saturating_sub(rss_before) / 1024;
    assert!(rss_growth_mib < 50, "RSS grew by {rss_growth_mib} MiB");
    assert!(membership.alive(), "the membership died");
    // Node 1 was not made to leave by anyone: its retried join gets its ids back.
    let (_, again) = join(1).unwrap();
    assert_eq!(again, first, "node 1's ids changed: someone made it leave");
    beating.store(false, Ordering::Relaxed);
    heart.join().unwrap();
}

#[test]
fn a_memory_server_never_sends_anything_to_a_listener_without_the_key() {
    // What the membership does when a replacement names an address: it
    // dials it as admin. A listener that lacks the admin key gets the
    // 56-byte hello (no secret in it) and nothing else.
    let keys = MasterSecret::generate().keyring();
    let attacker = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = attacker.local_addr().unwrap();
    let got = std::thread::spawn(move || {
        let (mut s, _) = attacker.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        // Answer with a challenge made without the key.
        let mut hello = [0u8; 56];
        s.read_exact(&mut hello).unwrap();
        all.extend_from_slice(&hello);
        let _ = s.write_all(&[0x42; CHALLENGE_BYTES]);
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    let c = TcpCluster::new(vec![addr], keys.clone());
    assert!(block_on(c.register(1)).is_err());
    let got = got.join().unwrap();
    assert_eq!(got.len(), 56, "sent {} bytes", got.len());
    assert_eq!(&got[..8], b"TNDMAUTH");
    for role in Role::ALL {
        let k = keys.get(role).unwrap().bytes();
        assert!(
            !got.windows(8).any(|w| w == &k[..8]),
            "{role} key material sent"
        );
    }
}

/// An authenticated stream to a node or manager that says `hello` next;
/// whether the other side kept it open (a read timing out) or closed it.
fn kept_open_after(
    addr: SocketAddr,
    keys: &Keyring,
    role: Role,
    id: u64,
    hello: &tandem_net::wire::Hello,
) -> bool {
    let mut s = dial(addr, keys, role, id);
    s.write_all(&tandem_net::wire::frame(hello)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return true
            }
            Err(_) => return false,
        }
    }
}

#[test]
fn a_ddp_node_and_its_manager_serve_their_members_under_attack() {
    use tandem_net::wire::{Frames, FromManager, Heartbeat, Hello};
    let secret = MasterSecret::generate();
    let keys = secret.keyring();
    let dir = std::env::temp_dir().join(format!("tandem-adversary-node-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = |_| tandem_net::ports::reserve_loopback().unwrap().to_string();
    let (node_addr, manager_addr): (String, String) = (port(0), port(1));
    let nvm = dir.join("node0.nvm");
    let spawn = |args: &[&str]| {
        Proc(
            Command::new(env!("CARGO_BIN_EXE_tandem"))
                .args(args)
                .env("TANDEM_SECRET", secret.hex())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut manager = spawn(&["ddp", "manager", "--listen", &manager_addr, "--nodes", "2"]);
    let mut node = spawn(&[
        "node",
        "--model",
        "lin-synch",
        "--id",
        "0",
        "--peers",
        &format!("{node_addr},127.0.0.1:9"),
        "--nvm",
        nvm.to_str().unwrap(),
    ]);
    let (naddr, maddr): (SocketAddr, SocketAddr) =
        (node_addr.parse().unwrap(), manager_addr.parse().unwrap());
    let until = Instant::now() + Duration::from_secs(20);
    let connect = || {
        tandem_net::client::Client::<tandem_ddp::Op, tandem_ddp::Reply>::connect(
            naddr,
            &keys,
            1,
            Duration::from_secs(2),
        )
    };
    let mut client = loop {
        match connect() {
            Ok(c) => break c,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("the node never served: {e}"),
        }
    };
    client
        .call(tandem_ddp::Op::read(1))
        .expect("a read before the attack");
    // A member of the manager: node 1, heartbeating and timing its leases.
    let mut member = dial(maddr, &keys, Role::Peer, 1);
    member
        .write_all(&tandem_net::wire::frame(&Hello::ToManager {
            node: 1,
            boot: 7,
        }))
        .unwrap();
    member
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut leases = Frames::new(member.try_clone().unwrap());
    let (rss_node, rss_manager) = (node.rss_kib(), manager.rss_kib());

    let stop = Arc::new(AtomicBool::new(false));
    let loris = [
        slowloris(naddr, 1100, stop.clone()),
        slowloris(maddr, 600, stop.clone()),
    ];
    let held = [unauthenticated_floods(naddr), unauthenticated_floods(maddr)];
    // A peer hello naming an id out of range, itself, or another role's;
    // a manager link for a node that is not a member, or not the one it proved.
    assert!(!kept_open_after(
        naddr,
        &keys,
        Role::Peer,
        999,
        &Hello::Peer { node: 999 }
    ));
    assert!(!kept_open_after(
        naddr,
        &keys,
        Role::Peer,
        0,
        &Hello::Peer { node: 0 }
    ));
    assert!(!kept_open_after(
        naddr,
        &keys,
        Role::Client,
        0,
        &Hello::Peer { node: 1 }
    ));
    assert!(!kept_open_after(
        maddr,
        &keys,
        Role::Peer,
        999,
        &Hello::ToManager { node: 999, boot: 1 }
    ));
    assert!(!kept_open_after(
        maddr,
        &keys,
        Role::Peer,
        0,
        &Hello::ToManager { node: 1, boot: 1 }
    ));
    assert!(
        kept_open_after(naddr, &keys, Role::Client, 0, &Hello::Client),
        "a client hello is fine"
    );
    assert!(
        replay_is_rejected(naddr, &keys, Role::Client),
        "a replayed handshake got in (node)"
    );
    assert!(
        replay_is_rejected(maddr, &keys, Role::Peer),
        "a replayed handshake got in (manager)"
    );
    let (mut calls, mut beats) = (Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs(6);
    let mut seq = 0;
    while Instant::now() < end {
        let t = Instant::now();
        client
            .call(tandem_ddp::Op::read(1))
            .expect("a read during the attack");
        calls.push(t.elapsed());
        seq += 1;
        let t = Instant::now();
        member
            .write_all(&tandem_net::wire::frame(&Heartbeat {
                seq,
                caught_up: true,
                epoch: 1,
            }))
            .unwrap();
        loop {
            match leases
                .next::<FromManager>()
                .expect("the manager answers")
                .expect("open")
            {
                FromManager::Lease { seq: s } if s == seq => break,
                _ => {}
            }
        }
        beats.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    let grown = |p: &Proc, before: u64| p.rss_kib().saturating_sub(before) / 1024;
    let (node_mib, manager_mib) = (grown(&node, rss_node), grown(&manager, rss_manager));
    stop.store(true, Ordering::Relaxed);
    drop(held);
    loris.into_iter().for_each(|l| drop(l.join()));
    assert!(node.alive() && manager.alive(), "a process died");
    assert!(
        node_mib < 50 && manager_mib < 50,
        "RSS grew by {node_mib} MiB (node), {manager_mib} MiB (manager)"
    );
    let (pc, pb) = (p99(calls.clone()), p99(beats.clone()));
    assert!(
        pc < Duration::from_millis(100),
        "client read p99 {pc:?} over {} calls",
        calls.len()
    );
    assert!(
        pb < Duration::from_millis(100),
        "heartbeat-to-lease p99 {pb:?} over {} beats",
        beats.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
