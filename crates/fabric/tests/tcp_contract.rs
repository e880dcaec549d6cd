//! Contract tests of the tcp and shm backends against the fabric semantics
//! of docs/DESIGN.md §3: a real memory server on 127.0.0.1:0 (background threads)
//! and clients on a tokio `current_thread` runtime with a `LocalSet`, as
//! compute threads run them. The tests that apply to both backends run on
//! each (`mod NAME { fn tcp, fn shm }`); `shm_contract.rs` has the shm
//! backend's own (its socket, and compute processes killed on revocation).

/// The completions a batch should come back with, like `vec![...]`.
macro_rules! done {
    ($($t:tt)*) => {{
        let c: tandem_fabric::Completions = tandem_fabric::batch![$($t)*];
        c
    }};
}

use std::cell::RefCell;
use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tandem_fabric::auth::{Keyring, Role};
use tandem_fabric::tcp::wire::{self, ClientMsg, RejectReason, ServerMsg};
use tandem_fabric::tcp::{MemoryServerHandle, Polling, TcpCluster};
use tandem_fabric::{Fabric, MemoryNode, QueuePair, Verb, VerbArena, VerbError, VerbOutput};

/// The cluster's keys (every role), from a fixed master secret.
fn keyring() -> Keyring {
    Keyring::from_master_hex("7a4de35ec8e7000000000000000000aa").unwrap()
}
/// Every test body must finish well within this; a hang fails instead of stalling CI.
const TEST_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Tcp,
    Shm,
}

/// Run test `$name(mode)` on both backends, as `$name::tcp` and `$name::shm`.
macro_rules! on_both_backends {
    ($name:ident) => {
        mod $name {
            #[test]
            fn tcp() {
                super::$name(super::Mode::Tcp)
            }
            #[test]
            fn shm() {
                super::$name(super::Mode::Shm)
            }
        }
    };
}

fn server(size_bytes: u64) -> MemoryServerHandle {
    server_on(Mode::Tcp, size_bytes)
}

/// A memory server whose region is private (tcp) or a memfd (shm).
fn server_on(mode: Mode, size_bytes: u64) -> MemoryServerHandle {
    let node = match mode {
        Mode::Tcp => MemoryNode::new(size_bytes),
        Mode::Shm => MemoryNode::shared(size_bytes).expect("memfd region"),
    };
    MemoryServerHandle::bind("127.0.0.1:0".parse().unwrap(), Arc::new(node), keyring())
        .expect("bind memory server")
}

fn cluster(servers: &[&MemoryServerHandle]) -> TcpCluster {
    cluster_on(Mode::Tcp, servers)
}

fn cluster_on(mode: Mode, servers: &[&MemoryServerHandle]) -> TcpCluster {
    TcpCluster::new(servers.iter().map(|s| s.local_addr()).collect(), keyring())
        .shm(mode == Mode::Shm)
}

/// Run `f` as a compute thread does: current_thread runtime plus LocalSet.
fn run<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        tokio::time::timeout(TEST_TIMEOUT, f)
            .await
            .expect("test timed out")
    })
}

/// A connection authenticated as compute node 1, for raw frames.
fn raw(addr: SocketAddr) -> TcpStream {
    raw_as(addr, Role::Compute, 1)
}

/// A connection authenticated as `role` claiming `id`.
fn raw_as(addr: SocketAddr, role: Role, id: u64) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    tandem_fabric::auth::connect(&mut s, &keyring(), role, id, deadline).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

/// A connection that has not authenticated.
fn unauthenticated(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

/// Read until the server closes the connection; returns what it sent. A
/// read timeout means the server left the connection open: a failure.
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("server did not close the connection: {e}"),
        }
    }
}

/// Decode the frames a server sent on a raw connection.
fn server_frames(mut bytes: &[u8]) -> Vec<ServerMsg> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    while let Ok(true) = wire::read_frame(&mut bytes, &mut body) {
        out.push(ServerMsg::decode(&body).expect("server sent a malformed frame"));
    }
    out
}

fn frame(msg: ClientMsg) -> Vec<u8> {
    let mut b = Vec::new();
    msg.encode(&mut b);
    b
}

on_both_backends!(verbs_on_one_queue_pair_execute_in_posting_order);
fn verbs_on_one_queue_pair_execute_in_posting_order(mode: Mode) {
    let (s0, s1) = (server_on(mode, 4096), server_on(mode, 4096));
    let c = cluster_on(mode, &[&s0, &s1]);
    run(async {
        let keys = c.register(1).await.unwrap();
        assert_eq!(keys.len(), 2);
        let fabric = c.connect(1, &keys).await.unwrap();
        assert_eq!((fabric.memory_nodes(), fabric.compute_node()), (2, 1));
        let qp = fabric.queue_pair(0);
        assert_eq!(qp.memory_node(), 0);

        // 200 batches in flight at once: each CAS succeeds only if its
        // predecessor already executed.
        let pending: Vec<_> = (0..200u64)
            .map(|i| qp.post(tandem_fabric::batch![Verb::cas(0, i, i + 1)]))
            .collect();
        for (i, p) in pending.into_iter().enumerate() {
            assert_eq!(
                p.await,
                done![Ok(VerbOutput::Cas(i as u64))],
                "batch {i} ran out of order"
            );
        }
        assert_eq!(s0.node().load_u64(0), 200);

        // Within a batch too, and on the other memory node independently.
        let qp1 = fabric.queue_pair(1);
        let got = qp1
            .post(tandem_fabric::batch![
                Verb::write_u64(8, 5),
                Verb::faa(8, 1),
                Verb::read(8, 8),
            ])
            .await;
        assert_eq!(
            got,
            done![
                Ok(VerbOutput::Write),
                Ok(VerbOutput::Faa(5)),
                Ok(VerbOutput::Read(6u64.to_le_bytes().as_slice().into()))
            ]
        );
        assert_eq!((s0.node().load_u64(8), s1.node().load_u64(8)), (0, 6));

        // Many coordinators (tasks) pipelining on the same connection.
        let olds = Rc::new(RefCell::new(Vec::new()));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (qp, olds) = (fabric.queue_pair(1), olds.clone());
                tokio::task::spawn_local(async move {
                    for _ in 0..50 {
                        let done = qp.post(tandem_fabric::batch![Verb::faa(16, 1)]).await;
                        olds.borrow_mut().push(done[0].clone().unwrap().old_value());
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let mut olds = olds.take();
        olds.sort_unstable();
        assert_eq!(
            olds,
            (0..400).collect::<Vec<u64>>(),
            "every FAA executed exactly once"
        );

        // A coordinator that stops waiting (its future dropped) does not
        // disturb the connection: the verbs still execute, in order.
        drop(qp.post(tandem_fabric::batch![Verb::faa(0, 10)]));
        let p = qp.post(tandem_fabric::batch![Verb::faa(0, 1)]);
        drop(qp.post(tandem_fabric::batch![Verb::faa(0, 100)]));
        assert_eq!(p.await, done![Ok(VerbOutput::Faa(210))]);
        assert_eq!(
            qp.post(tandem_fabric::batch![Verb::read(0, 8)]).await,
            done![Ok(VerbOutput::Read(311u64.to_le_bytes().as_slice().into()))]
        );
        assert_eq!(qp.outstanding(), 0);

        assert_eq!(c.info().await.unwrap(), vec![4096, 4096]);
        assert!(fabric.is_connected());
    });
}

on_both_backends!(batches_posted_through_an_arena_complete_as_plain_ones_do);
/// `post_in` keeps the contract of `post` (posting order, the same
/// completions, errors per verb) and reuses the arena's buffers: the arena
/// gets each batch back at once, and the completions once given back.
fn batches_posted_through_an_arena_complete_as_plain_ones_do(mode: Mode) {
    let s = server_on(mode, 4096);
    let c = cluster_on(mode, &[&s]);
    run(async {
        let keys = c.register(1).await.unwrap();
        let qp = c.connect(1, &keys).await.unwrap().queue_pair(0);
        let mut arena = VerbArena::default();
        let mut pending = Vec::new();
        for i in 0..100u64 {
            let w = arena.write_u64(8 * (i % 4) + 64, i);
            let b = arena.batch_of([Verb::cas(0, i, i + 1), w, Verb::read(0, 8)]);
            pending.push(qp.post_in(b, &mut arena));
        }
        for (i, p) in pending.into_iter().enumerate() {
            let i = i as u64;
            let done = p.await;
            let want = done![
                Ok(VerbOutput::Cas(i)),
                Ok(VerbOutput::Write),
                Ok(VerbOutput::Read((i + 1).to_le_bytes().as_slice().into()))
            ];
            assert_eq!(done, want, "batch {i}");
            arena.give(done);
        }
        let bad = arena.batch_of([Verb::read(1 << 40, 8), Verb::faa(3, 1)]);
        let done = qp.post_in(bad, &mut arena).await;
        let want = done![Err(VerbError::OutOfRange), Err(VerbError::Misaligned)];
        assert_eq!(done, want);
        arena.give(done);
        // Warm: a batch, its write's buffer and its completions come back.
        let b = arena.batch();
        let (cap, ptr) = (b.capacity(), b.as_ptr());
        arena.give_batch(b);
        let again = arena.batch();
        assert_eq!(
            (again.capacity(), again.as_ptr()),
            (cap, ptr),
            "the same batch reused"
        );
        assert!(cap >= 3, "a posted batch went back to the arena");
        let plain = qp.post(tandem_fabric::batch![Verb::read(64, 32)]).await;
        let (w, r) = (s.node().load_u64(64), s.node().load_u64(0));
        assert_eq!((w, r), (96, 100), "the arena's writes landed, in order");
        assert_eq!(plain[0].clone().unwrap().into_bytes().len(), 32);
    });
}

on_both_backends!(after_revocation_verbs_complete_with_revoked_and_do_not_execute);
fn after_revocation_verbs_complete_with_revoked_and_do_not_execute(mode: Mode) {
    let s = server_on(mode, 1024);
    let c = cluster_on(mode, &[&s]);
    run(async {
        let keys3 = c.register(3).await.unwrap();
        let keys4 = c.register(4).await.unwrap();
        let f3 = c.connect(3, &keys3).await.unwrap();
        let f4 = c.connect(4, &keys4).await.unwrap();
        let qp3 = f3.queue_pair(0);
        assert_eq!(
            qp3.post(tandem_fabric::batch![Verb::write_u64(0, 1)]).await,
            done![Ok(VerbOutput::Write)]
        );

        c.revoke(3).await.unwrap();
        let got = qp3
            .post(tandem_fabric::batch![
                Verb::write_u64(0, 99),
                Verb::faa(8, 1),
                Verb::read(0, 8),
            ])
            .await;
        assert_eq!(got, done![Err(VerbError::Revoked); 3]);
        assert_eq!(
            (s.node().load_u64(0), s.node().load_u64(8)),
            (1, 0),
            "revoked verbs must not execute"
        );

        // Other compute nodes are unaffected.
        assert_eq!(
            f4.queue_pair(0)
                .post(tandem_fabric::batch![Verb::faa(8, 2)])
                .await,
            done![Ok(VerbOutput::Faa(0))]
        );
        // The revoked key cannot open a new connection.
        let err = c
            .connect(3, &keys3)
            .await
            .expect_err("revoked key accepted");
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        // Fencing is for good: the revoked incarnation cannot register again,
        // and its old connection stays cut off.
        let err = c
            .register(3)
            .await
            .expect_err("a revoked incarnation got a fresh key");
        assert!(tandem_fabric::tcp::is_fenced(&err), "{err}");
        assert_eq!(
            qp3.post(tandem_fabric::batch![Verb::write_u64(0, 7)]).await,
            done![Err(VerbError::Revoked)]
        );
        assert_eq!(s.node().load_u64(0), 1);
        // A node revoked before it ever registered (a verdict between join and
        // registration) is refused as well.
        c.revoke(5).await.unwrap();
        assert!(tandem_fabric::tcp::is_fenced(
            &c.register(5)
                .await
                .expect_err("registered after its revocation")
        ));
    });
}

on_both_backends!(bad_addresses_complete_with_errors_and_the_server_keeps_serving);
fn bad_addresses_complete_with_errors_and_the_server_keeps_serving(mode: Mode) {
    let s = server_on(mode, 64);
    let c = cluster_on(mode, &[&s]);
    run(async {
        let keys = c.register(1).await.unwrap();
        let qp = c.connect(1, &keys).await.unwrap().queue_pair(0);
        let got = qp
            .post(tandem_fabric::batch![
                Verb::read(60, 8),
                Verb::cas(12, 0, 1),
                Verb::faa(64, 1),
                Verb::read(u64::MAX - 2, 8),
                Verb::write(63, vec![1, 2]),
                Verb::read(0, 1 << 20),
                Verb::faa(3, 1),
                Verb::cas(56, 0, 9),
            ])
            .await;
        use VerbError::{Misaligned, OutOfRange};
        let expected: tandem_fabric::Completions = tandem_fabric::batch![
            Err(OutOfRange),
            Err(Misaligned),
            Err(OutOfRange),
            Err(OutOfRange),
            Err(OutOfRange),
            Err(OutOfRange),
            Err(Misaligned),
            Ok(VerbOutput::Cas(0)),
        ];
        assert_eq!(got, expected);
        // A batch whose answer cannot fit in one frame is refused locally,
        // per verb (tcp); shm has no frames, only the region's bounds.
        let second = match mode {
            Mode::Tcp => Err(OutOfRange),
            Mode::Shm => Ok(VerbOutput::Read(vec![0; 8])),
        };
        assert_eq!(
            qp.post(tandem_fabric::batch![
                Verb::read(0, u32::MAX),
                Verb::read(0, 8)
            ])
            .await,
            done![Err(OutOfRange), second]
        );
        assert_eq!(qp.post(tandem_fabric::batch![]).await, done![]);
        assert_eq!(
            qp.post(tandem_fabric::batch![Verb::read(56, 8)]).await,
            done![Ok(VerbOutput::Read(9u64.to_le_bytes().as_slice().into()))]
        );
        assert!(qp.is_connected());
    });
}

#[test]
fn garbage_clients_are_disconnected_and_the_server_keeps_serving() {
    let s = server(1024);
    let addr = s.local_addr();
    let c = cluster(&[&s]);
    run(async {
        let keys = c.register(1).await.unwrap();
        let good = c.connect(1, &keys).await.unwrap().queue_pair(0);
        assert_eq!(
            good.post(tandem_fabric::batch![Verb::write_u64(0, 11)])
                .await,
            done![Ok(VerbOutput::Write)]
        );

        // Random bytes (then end of stream, in case they look like a short frame).
        let mut x: u64 = 0x1234_5678_9ABC_DEF1;
        let noise: Vec<u8> = (0..1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut g = raw(addr);
        g.write_all(&noise).unwrap();
        let _ = g.shutdown(Shutdown::Write);
        read_until_closed(&mut g);
        // ... and before any handshake, as noise, or as a frame that needs no
        // authentication to look plausible: closed with no answer.
        for bytes in [
            noise.clone(),
            frame(ClientMsg::Info),
            u32::MAX.to_le_bytes().to_vec(),
        ] {
            let mut g = unauthenticated(addr);
            g.write_all(&bytes).unwrap();
            let _ = g.shutdown(Shutdown::Write);
            assert!(read_until_closed(&mut g).is_empty());
        }

        // An oversized length prefix closes at once, with no end of stream needed.
        let mut g = raw(addr);
        g.write_all(&u32::MAX.to_le_bytes()).unwrap();
        g.write_all(&[0x02; 64]).unwrap();
        read_until_closed(&mut g);

        // A frame cut short by the end of the stream.
        let hello = frame(ClientMsg::Hello {
            compute: 1,
            key: keys[0],
            priority: false,
        });
        let mut g = raw(addr);
        g.write_all(&hello[..hello.len() / 2]).unwrap();
        g.shutdown(Shutdown::Write).unwrap();
        assert!(read_until_closed(&mut g).is_empty());

        // A correct Hello, then a batch whose length says one thing and whose
        // verbs another (a truncated verb): the connection closes, nothing executes.
        let mut g = raw(addr);
        g.write_all(&hello).unwrap();
        let mut batch = frame(ClientMsg::Batch {
            req_id: 0,
            verbs: vec![Verb::write_u64(8, 5), Verb::write_u64(16, 5)],
        });
        batch.truncate(batch.len() - 3);
        let body_len = (batch.len() - 4) as u32;
        batch[..4].copy_from_slice(&body_len.to_le_bytes());
        g.write_all(&batch).unwrap();
        assert_eq!(
            server_frames(&read_until_closed(&mut g)),
            vec![ServerMsg::HelloOk]
        );
        assert_eq!((s.node().load_u64(8), s.node().load_u64(16)), (0, 0));

        // Trailing bytes after a valid message.
        let mut g = raw(addr);
        let mut bad = frame(ClientMsg::Info);
        bad[..4].copy_from_slice(&2u32.to_le_bytes());
        bad.push(0);
        g.write_all(&bad).unwrap();
        read_until_closed(&mut g);

        // A wrong key in Hello, Admin on a compute connection, a batch before any Hello:
        // each gets a Reject and the connection closes.
        for (msg, reason) in [
            (
                ClientMsg::Hello {
                    compute: 1,
                    key: keys[0] ^ 1,
                    priority: false,
                },
                RejectReason::BadKey,
            ),
            (
                ClientMsg::Batch {
                    req_id: 0,
                    verbs: vec![Verb::write_u64(0, 1)],
                },
                RejectReason::Protocol,
            ),
        ] {
            let mut g = raw(addr);
            g.write_all(&frame(msg)).unwrap();
            assert_eq!(
                server_frames(&read_until_closed(&mut g)),
                vec![ServerMsg::Reject { reason }]
            );
        }
        // A compute node's control connection: it may register itself, never
        // another node, and never revoke.
        for msg in [
            ClientMsg::Revoke { compute: 1 },
            ClientMsg::Register { compute: 2 },
        ] {
            let mut g = raw(addr);
            let mut bytes = frame(ClientMsg::Admin);
            bytes.extend(frame(msg));
            g.write_all(&bytes).unwrap();
            assert_eq!(
                server_frames(&read_until_closed(&mut g)),
                vec![
                    ServerMsg::AdminOk,
                    ServerMsg::Reject {
                        reason: RejectReason::NotAdmin
                    }
                ]
            );
        }
        let other = Keyring::from_master_hex(&Keyring::new_master_hex()).unwrap();
        let err = TcpCluster::new(vec![addr], other)
            .register(2)
            .await
            .expect_err("another cluster's keys accepted");
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        let compute_only = TcpCluster::new(vec![addr], keyring().only(&[Role::Compute]));
        let err = compute_only
            .revoke_on(&[0], 2)
            .await
            .expect_err("a compute keyring revoked a node");
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        // It registers itself only (its own key, on a connection proving its id).
        let own = compute_only
            .register(3)
            .await
            .expect("a compute node registers itself");
        assert!(s.node().is_authorized(3, own[0]));
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);

        // The connection that was open all along, and a new one, still work.
        assert_eq!(
            good.post(tandem_fabric::batch![Verb::read(0, 8)]).await,
            done![Ok(VerbOutput::Read(11u64.to_le_bytes().as_slice().into()))]
        );
        let again = c.connect(1, &keys).await.unwrap().queue_pair(0);
        assert_eq!(
            again.post(tandem_fabric::batch![Verb::faa(0, 1)]).await,
            done![Ok(VerbOutput::Faa(11))]
        );
        assert_eq!(s.node().load_u64(0), 12);
    });
}

#[test]
fn a_data_connection_with_a_wrong_key_executes_nothing() {
    let s = server(1024);
    let addr = s.local_addr();
    let c = cluster(&[&s]);
    run(async {
        let keys1 = c.register(1).await.unwrap();
        // Wrong key, another node's key, and no key at all for an
        // unregistered node; the batch is pipelined right behind the Hello.
        for (compute, key) in [(1, keys1[0] ^ 0x100), (2, keys1[0]), (9, 0)] {
            let mut g = raw_as(addr, Role::Compute, compute as u64);
            let mut bytes = frame(ClientMsg::Hello {
                compute,
                key,
                priority: false,
            });
            bytes.extend(frame(ClientMsg::Batch {
                req_id: 0,
                verbs: vec![Verb::write_u64(0, 0xBAD), Verb::faa(8, 1)],
            }));
            g.write_all(&bytes).unwrap();
            let answers = server_frames(&read_until_closed(&mut g));
            assert!(
                answers
                    .iter()
                    .all(|m| matches!(m, ServerMsg::Reject { .. })),
                "{answers:?}"
            );
        }
        let err = c
            .connect(2, &keys1)
            .await
            .expect_err("another node's key accepted");
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        assert_eq!(
            (s.node().load_u64(0), s.node().load_u64(8)),
            (0, 0),
            "nothing executed"
        );
    });
}

#[test]
fn a_lost_connection_completes_every_verb_with_unavailable() {
    // A fake memory server: accepts the handshake, reads one batch, then dies.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        tandem_fabric::auth::accept(&mut s, &keyring(), &[Role::Compute], deadline).unwrap();
        let mut body = Vec::new();
        let mut rd = s.try_clone().unwrap();
        assert!(matches!(wire::read_frame(&mut rd, &mut body), Ok(true)));
        s.write_all(&{
            let mut b = Vec::new();
            ServerMsg::HelloOk.encode(&mut b);
            b
        })
        .unwrap();
        assert!(matches!(wire::read_frame(&mut rd, &mut body), Ok(true)));
    });
    run(async {
        let fabric = TcpCluster::new(vec![addr], keyring())
            .connect(1, &[42])
            .await
            .unwrap();
        let qp = fabric.queue_pair(0);
        let first = qp.post(tandem_fabric::batch![
            Verb::read(0, 8),
            Verb::faa(8, 1),
            Verb::write_u64(0, 1),
        ]);
        let second = qp.post(tandem_fabric::batch![Verb::cas(0, 0, 1)]);
        assert_eq!(first.await, done![Err(VerbError::Unavailable); 3]);
        assert_eq!(second.await, done![Err(VerbError::Unavailable)]);
        assert!(!fabric.is_connected());
        assert_eq!(
            qp.post(tandem_fabric::batch![Verb::read(0, 8), Verb::read(8, 8)])
                .await,
            done![Err(VerbError::Unavailable); 2]
        );
    });
    fake.join().unwrap();
}

on_both_backends!(a_server_shutting_down_completes_later_verbs_with_unavailable);
fn a_server_shutting_down_completes_later_verbs_with_unavailable(mode: Mode) {
    let s = server_on(mode, 1024);
    let c = cluster_on(mode, &[&s]);
    run(async {
        let keys = c.register(1).await.unwrap();
        let qp = c.connect(1, &keys).await.unwrap().queue_pair(0);
        assert_eq!(
            qp.post(tandem_fabric::batch![Verb::faa(0, 1)]).await,
            done![Ok(VerbOutput::Faa(0))]
        );
        s.shutdown();
        if mode == Mode::Shm {
            // Verbs run here; the closed liveness link is what tells.
            while qp.is_connected() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let after = qp.post(tandem_fabric::batch![Verb::faa(0, 1)]).await;
        assert_eq!(after, done![Err(VerbError::Unavailable)]);
        assert_eq!(
            qp.post(tandem_fabric::batch![Verb::faa(0, 1)]).await,
            done![Err(VerbError::Unavailable)]
        );
    });
}

/// Pinned pollers (`memory-server`'s default) move a connection to the
/// poller on its client's CPU. A client hopping between CPUs makes its
/// connection move back and forth; every verb still executes exactly once,
/// in posting order.
#[cfg(target_os = "linux")]
#[test]
fn a_connection_follows_its_client_across_pollers_in_posting_order() {
    if tandem_fabric::cpu_count() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let polling = Polling {
        spin: Duration::ZERO,
        threads: 2,
        pin: true,
        urgent: false,
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let node = Arc::new(MemoryNode::new(4096));
    let s = MemoryServerHandle::spawn_with(listener, node, keyring(), polling).unwrap();
    let c = cluster(&[&s]);
    let hops = 6;
    // Before this thread pins itself, while it may run on every CPU.
    let cpus: Vec<usize> = (0..2).map(|i| tandem_fabric::nth_cpu(i).unwrap()).collect();
    run(async {
        let keys = c.register(1).await.unwrap();
        let qp = c.connect(1, &keys).await.unwrap().queue_pair(0);
        let mut next = 0u64;
        for hop in 0..hops {
            assert!(tandem_fabric::pin_to_cpu(cpus[hop % 2]));
            for _ in 0..300 {
                let window: Vec<_> = (0..8)
                    .map(|_| qp.post(tandem_fabric::batch![Verb::faa(0, 1)]))
                    .collect();
                for p in window {
                    assert_eq!(p.await, done![Ok(VerbOutput::Faa(next))], "FAA {next}");
                    next += 1;
                }
            }
        }
    });
    assert_eq!(s.node().load_u64(0), hops as u64 * 300 * 8);
    let moves = s.connection_moves();
    assert!(
        moves >= hops as u64 / 2,
        "the connection moved {moves} times in {hops} hops"
    );
}

/// `memory-server`'s urgent poller serves the priority connections (a
/// recovery coordinator's) alone: the other poller's clients, here one that
/// stopped reading its answers, do not hold them up.
#[test]
fn a_priority_connection_is_served_while_the_other_poller_is_stuck() {
    let polling = Polling {
        spin: Duration::ZERO,
        threads: 1,
        pin: false,
        urgent: true,
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let node = Arc::new(MemoryNode::new(1 << 20));
    let s = MemoryServerHandle::spawn_with(listener, node, keyring(), polling).unwrap();
    let c = cluster(&[&s]);
    run(async {
        let stuck = c.register(1).await.unwrap()[0];
        let mut g = raw(s.local_addr());
        let mut bytes = frame(ClientMsg::Hello {
            compute: 1,
            key: stuck,
            priority: false,
        });
        for req_id in 0..400 {
            let verbs = vec![Verb::read(0, 60_000)];
            bytes.extend(frame(ClientMsg::Batch { req_id, verbs }));
        }
        // 24 MB of answers that nobody reads.
        g.write_all(&bytes).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let keys = c.register(2).await.unwrap();
        let prio = c.clone().prioritised().connect(2, &keys).await.unwrap();
        let t0 = std::time::Instant::now();
        let got = prio
            .queue_pair(0)
            .post(tandem_fabric::batch![Verb::faa(8, 1)])
            .await;
        let waited = t0.elapsed();
        assert_eq!(got, done![Ok(VerbOutput::Faa(0))]);
        assert!(
            waited < Duration::from_millis(500),
            "the priority verb waited {waited:?}"
        );
        drop(g);
    });
}

/// docs/DESIGN.md §3, the tcp backend: a poller spins briefly, then parks, so
/// an idle server burns no core. Between bursts of work, the poller thread
/// uses (almost) no CPU.
#[cfg(target_os = "linux")]
#[test]
fn an_idle_server_parks_its_polling_thread() {
    let s = server(1024);
    let c = cluster(&[&s]);
    let name = format!("mempoll-{}", s.local_addr().port());
    // utime + stime of the poller thread, in clock ticks (usually 10 ms).
    let poller_cpu_ticks = || -> u64 {
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() == name {
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap();
                // Fields after the parenthesised name: state is 3rd, utime 14th, stime 15th.
                let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
                return fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
            }
        }
        panic!("no thread named {name}");
    };
    run(async {
        let keys = c.register(1).await.unwrap();
        let qp = c.connect(1, &keys).await.unwrap().queue_pair(0);
        for _ in 0..2 {
            for _ in 0..100 {
                assert!(qp.post(tandem_fabric::batch![Verb::faa(0, 1)]).await[0].is_ok());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let before = poller_cpu_ticks();
            std::thread::sleep(Duration::from_millis(200));
            let used = poller_cpu_ticks() - before;
            // A spinning poller would use ~20 ticks here (fewer on a loaded machine, but far more than 2).
            assert!(used <= 2, "idle poller used {used} ticks in 200 ms");
        }
        assert_eq!(s.node().load_u64(0), 200);
    });
}

/// A recovery coordinator's connection (`TcpCluster::prioritised`) is served
/// first in each polling round; beside a client flooding the same server it
/// still gets every verb executed, in order.
#[test]
fn a_priority_connection_is_served_beside_a_flooding_one() {
    let s = server(4096);
    let c = cluster(&[&s]);
    run(async {
        let keys = c.register(1).await.unwrap();
        let busy = c.connect(1, &keys).await.unwrap().queue_pair(0);
        let keys = c.register(2).await.unwrap();
        let prio = c.clone().prioritised();
        let prio = prio.connect(2, &keys).await.unwrap().queue_pair(0);
        let flood: Vec<_> = (0..2000)
            .map(|_| busy.post(tandem_fabric::batch![Verb::faa(0, 1)]))
            .collect();
        let got = prio
            .post(tandem_fabric::batch![Verb::faa(8, 5), Verb::read(8, 8)])
            .await;
        let five = 5u64.to_le_bytes().as_slice().into();
        assert_eq!(
            got,
            done![Ok(VerbOutput::Faa(0)), Ok(VerbOutput::Read(five))]
        );
        for p in flood {
            assert!(p.await[0].is_ok());
        }
        assert_eq!(s.node().load_u64(0), 2000);
    });
}

/// A compute node that posts large reads and never reads the answers (stopped,
/// or buggy) costs the server's other clients nothing: its answers wait in a
/// bounded queue while its further requests wait unread, the poller writes to
/// it only when its socket has room, and once it has taken nothing for the
/// write deadline (2 s) its connection is cut off. Verbs it had executed stay
/// executed, and the server keeps serving.
#[test]
fn a_client_that_does_not_read_its_answers_neither_slows_others_nor_stays() {
    const MIB: u32 = 1 << 20;
    // The server's write deadline (2 s), and slack.
    const CUT_OFF_BY: Duration = Duration::from_millis(2_000 + 1_200);
    let s = server(4 << 20);
    let addr = s.local_addr();
    let c = cluster(&[&s]);
    let start = std::time::Instant::now();
    let (mut latencies, slow, poster, mut stuck, keys) = run(async {
        let key = c.register(1).await.unwrap()[0];
        let stuck = raw(addr);
        let mut bytes = frame(ClientMsg::Hello {
            compute: 1,
            key,
            priority: false,
        });
        bytes.extend(frame(ClientMsg::Batch {
            req_id: 0,
            verbs: vec![Verb::faa(8, 1)],
        }));
        // 2,000 batches of three 1 MiB reads: 6 GB of answers, none read.
        for req_id in 1..=2000 {
            let verbs = vec![Verb::read(0, MIB); 3];
            assert!(wire::batch_fits(&verbs));
            bytes.extend(frame(ClientMsg::Batch { req_id, verbs }));
        }
        let w = stuck.try_clone().unwrap();
        w.set_write_timeout(Some(Duration::from_secs(4))).unwrap();
        // The server may stop reading them: post from a thread of its own.
        let poster = std::thread::spawn(move || (&w).write_all(&bytes).is_ok());
        tokio::time::sleep(Duration::from_millis(300)).await;

        let keys = c.register(2).await.unwrap();
        let good = c.connect(2, &keys).await.unwrap().queue_pair(0);
        let (mut latencies, mut slow) = (Vec::new(), Vec::new());
        let until = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < until {
            let t = std::time::Instant::now();
            let p = good.post(tandem_fabric::batch![Verb::read(8, 8)]);
            // A verb stuck behind the other client counts as the time it
            // waited, up to 1.2 s (it completes later, in order).
            if let Ok(done) = tokio::time::timeout(Duration::from_millis(1_200), p).await {
                assert!(done[0].is_ok(), "{done:?}");
            }
            let took = t.elapsed();
            latencies.push(took);
            if took >= Duration::from_millis(20) {
                slow.push((t - start, took));
            }
        }
        (latencies, slow, poster, stuck, keys)
    });
    let n = latencies.len();
    latencies.sort_unstable();
    let (p50, p99, max) = (latencies[n / 2], latencies[n * 99 / 100], latencies[n - 1]);
    eprintln!("good client: {n} reads in 3 s; p50 {p50:?}, p99 {p99:?}, max {max:?}");
    assert!(
        p99 < Duration::from_millis(50) && max < Duration::from_millis(500),
        "the other client's reads slowed down: p50 {p50:?}, p99 {p99:?}, max {max:?} over {n}; \
         (started at, took) of those over 20 ms: {slow:?}"
    );

    // By now (3.3 s in, and at least CUT_OFF_BY) the server has cut the
    // stuck connection off: reading it yields what was in flight, then the
    // end; a server still serving it would go on sending its 6 GB.
    if let Some(early) = CUT_OFF_BY.checked_sub(start.elapsed()) {
        std::thread::sleep(early);
    }
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let ended = loop {
        match stuck.read(&mut buf) {
            Ok(0) => break true,
            Ok(k) => got += k,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
            Err(e) => panic!("the stuck connection is still open ({got} bytes read): {e}"),
        }
        if got > 64 << 20 {
            break false;
        }
    };
    assert!(
        ended,
        "the server still serves the stuck connection ({got} bytes read)"
    );
    eprintln!("stuck client: cut off; {got} bytes were in flight");
    poster.join().unwrap();
    assert_eq!(s.node().load_u64(8), 1, "its executed FAA stays executed");

    run(async {
        let good = c.connect(2, &keys).await.unwrap().queue_pair(0);
        let five = tandem_fabric::batch![Verb::faa(16, 5)];
        assert_eq!(good.post(five).await, done![Ok(VerbOutput::Faa(0))]);
        let keys = c.register(3).await.unwrap();
        let again = c.connect(3, &keys).await.unwrap().queue_pair(0);
        assert_eq!(
            again.post(tandem_fabric::batch![Verb::read(16, 8)]).await,
            done![Ok(VerbOutput::Read(5u64.to_le_bytes().as_slice().into()))]
        );
    });
}
