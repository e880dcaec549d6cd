//! Contract tests of the shm backend's own parts (`tandem_fabric::shm`): its
//! Unix socket against garbage and wrong keys, and revocation of compute
//! *processes* that map a memory server's region. The compute processes are
//! this test binary run again (`child_compute_process`), so the region is
//! really shared between two processes. The tests both backends share are in
//! `tcp_contract.rs`.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_fabric::tcp::wire::{self, ClientMsg, RejectReason, ServerMsg};
use tandem_fabric::tcp::{MemoryServerHandle, TcpCluster};
use tandem_fabric::{Fabric, MemoryNode, QueuePair, Verb, VerbError, VerbOutput};

fn keyring() -> tandem_fabric::auth::Keyring {
    tandem_fabric::auth::Keyring::from_master_hex("5a4e1100000000000000000000000011").unwrap()
}
const CHILD_ENV: &str = "TANDEM_SHM_TEST_CHILD";
/// The compute node the child processes act as.
const CHILD: u16 = 7;
/// Verbs per batch of a child in `huge` mode: each batch takes milliseconds,
/// so the child is almost always inside one.
const HUGE_BATCH: usize = 200_000;

fn shm_server(size: u64) -> MemoryServerHandle {
    let node = Arc::new(MemoryNode::shared(size).expect("memfd region"));
    MemoryServerHandle::bind("127.0.0.1:0".parse().unwrap(), node, keyring()).unwrap()
}

fn cluster(s: &MemoryServerHandle) -> TcpCluster {
    TcpCluster::new(vec![s.local_addr()], keyring()).shm(true)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

/// Not a test when run by `cargo test`: the body of a compute process that
/// the tests below start with `CHILD_ENV=mode,addr,key`. It maps the region
/// and writes an increasing counter to word 0 until its verbs are revoked.
#[test]
fn child_compute_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (mode, addr, key) = (
        parts[0],
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    );
    block_on(async move {
        let fabric = TcpCluster::new(vec![addr], keyring())
            .shm(true)
            .connect(CHILD, &[key])
            .await
            .expect("attach");
        let qp = fabric.queue_pair(0);
        println!("ready");
        let per_batch = if mode == "huge" { HUGE_BATCH } else { 1 };
        for n in 1u64.. {
            let batch: Vec<Verb> = (0..per_batch as u64)
                .map(|i| Verb::write_u64(0, n * per_batch as u64 + i))
                .collect();
            let done = qp.post(batch).await;
            if done[0] == Err(VerbError::Revoked) {
                println!("revoked");
                return;
            }
            assert_eq!(done[0], Ok(VerbOutput::Write));
        }
    });
}

/// Start this binary as a compute process of `s` in `mode`; returns once it
/// has attached and started writing.
fn spawn_child(
    s: &MemoryServerHandle,
    mode: &str,
) -> (Reaped, BufReader<std::process::ChildStdout>) {
    let key = s.node().register(CHILD).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_compute_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{mode},{},{key}", s.local_addr()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    wait_for_line(&mut out, "ready");
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.node().load_u64(0) == 0 {
        assert!(Instant::now() < deadline, "the child never wrote");
        std::thread::sleep(Duration::from_millis(1));
    }
    (Reaped(child), out)
}

/// A child process that a failing test does not leave behind (stopped).
struct Reaped(Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_line(out: &mut impl BufRead, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended before {want:?}"
        );
        // libtest prints "test NAME ... " before the test's own output.
        if line.trim().ends_with(want) {
            return;
        }
    }
}

/// Word 0 does not change for a while: nothing of the child lands any more.
fn assert_frozen(s: &MemoryServerHandle, why: &str) {
    let before = s.node().load_u64(0);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        s.node().load_u64(0),
        before,
        "{why}: a verb landed after revoke returned"
    );
}

/// Stop the child (`SIGSTOP`, then wait until the kernel says it is
/// stopped: the signal is asynchronous) at a moment it is inside a batch.
fn stop_inside_a_batch(s: &MemoryServerHandle, child: &Child) {
    for _ in 0..1000 {
        signal(child, libc::SIGSTOP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while state(child) != 'T' {
            assert!(Instant::now() < deadline, "the child does not stop");
            std::thread::sleep(Duration::from_micros(200));
        }
        if s.node().executing(CHILD) > 0 {
            return;
        }
        signal(child, libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("never caught the child inside a batch");
}

/// The child's state letter from /proc (R, S, T, Z, ...).
fn state(child: &Child) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())
        .unwrap_or('?')
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child, which has not been reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn a_running_process_sees_its_verbs_revoked_and_lives() {
    let s = shm_server(1 << 16);
    let (mut child, mut out) = spawn_child(&s, "small");
    s.node().revoke(CHILD);
    assert_frozen(&s, "running child");
    wait_for_line(&mut out, "revoked");
    assert!(
        child.wait().unwrap().success(),
        "a process that drained is not killed"
    );
}

/// A process stopped in the middle of a batch (SIGSTOP: alive and slow, as
/// a falsely suspected node is) is killed through its pidfd, and revocation
/// returns only once it is gone.
#[test]
fn a_process_stopped_inside_a_batch_is_killed_by_revocation() {
    let s = shm_server(1 << 16);
    let (mut child, _out) = spawn_child(&s, "huge");
    stop_inside_a_batch(&s, &child);
    let node = s.node().clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(node.revoke(CHILD)));
    let returned = rx.recv_timeout(Duration::from_secs(10));
    assert!(
        returned.is_ok(),
        "revocation never returned: the stopped child was not fenced"
    );
    assert_eq!(s.node().executing(CHILD), 0);
    let status = child
        .try_wait()
        .unwrap()
        .expect("revoke returned before the child exited");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert_frozen(&s, "killed child");
    assert!(s.node().register(CHILD).is_err(), "fenced for good");
}

/// A process that died inside a batch (kill -9) leaves its count behind;
/// revocation sees the process gone and returns without the grace wait.
#[test]
fn a_process_killed_inside_a_batch_does_not_hold_up_revocation() {
    let s = shm_server(1 << 16);
    let (mut child, _out) = spawn_child(&s, "huge");
    stop_inside_a_batch(&s, &child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        s.node().executing(CHILD) > 0,
        "the dead child's batch is still counted"
    );
    let t = Instant::now();
    s.node().revoke(CHILD);
    assert_eq!(s.node().executing(CHILD), 0);
    assert!(
        t.elapsed() < Duration::from_millis(15),
        "took {:?}",
        t.elapsed()
    );
}

/// A Unix connection authenticated as compute node 1, for raw frames.
fn raw(s: &MemoryServerHandle) -> UnixStream {
    raw_as(s, 1)
}

fn raw_as(s: &MemoryServerHandle, compute: u64) -> UnixStream {
    let name = tandem_fabric::shm::socket_name(s.local_addr().port());
    let mut u = UnixStream::connect_addr(&UnixAddr::from_abstract_name(name).unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let role = tandem_fabric::auth::Role::Compute;
    tandem_fabric::auth::connect(&mut u, &keyring(), role, compute, deadline).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    u
}

fn frame(msg: ClientMsg) -> Vec<u8> {
    let mut b = Vec::new();
    msg.encode(&mut b);
    b
}

/// What the server sent before closing (frames), failing if it stays open.
fn answers(u: &mut UnixStream) -> Vec<ServerMsg> {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match u.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server left a bad connection open: {e}"),
        }
    }
    let (mut bytes, mut body, mut out) = (got.as_slice(), Vec::new(), Vec::new());
    while let Ok(true) = wire::read_frame(&mut bytes, &mut body) {
        out.push(ServerMsg::decode(&body).unwrap());
    }
    out
}

#[test]
fn garbage_and_wrong_keys_on_the_shm_socket_get_nothing() {
    let s = shm_server(4096);
    let key = s.node().register(1).unwrap();
    let c = cluster(&s);
    let good = block_on(async {
        let f = c.connect(1, &[key]).await.unwrap();
        f.queue_pair(0).post(vec![Verb::write_u64(0, 5)]).await;
        f
    });
    // Noise, an oversized length, a truncated hello: closed without an answer.
    let mut u = raw(&s);
    u.write_all(&[0xA5; 300]).unwrap();
    let _ = u.shutdown(std::net::Shutdown::Write);
    assert_eq!(answers(&mut u), vec![]);
    let mut u = raw(&s);
    u.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert_eq!(answers(&mut u), vec![]);
    let hello = frame(ClientMsg::Hello {
        compute: 1,
        key,
        priority: false,
    });
    let mut u = raw(&s);
    u.write_all(&hello[..hello.len() - 2]).unwrap();
    u.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(answers(&mut u), vec![]);
    // Anything but a hello, and hellos with wrong keys: a Reject.
    for (msg, reason) in [
        (ClientMsg::Admin, RejectReason::Protocol),
        (
            ClientMsg::Hello {
                compute: 1,
                key: key ^ 1,
                priority: false,
            },
            RejectReason::BadKey,
        ),
        (
            ClientMsg::Hello {
                compute: 2,
                key,
                priority: false,
            },
            RejectReason::BadKey,
        ),
    ] {
        let mut u = raw(&s);
        u.write_all(&frame(msg)).unwrap();
        assert_eq!(answers(&mut u), vec![ServerMsg::Reject { reason }]);
    }
    let err = block_on(c.connect(2, &[key])).expect_err("another node's key accepted");
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    // The attached compute thread from before is untouched by all of this.
    block_on(async {
        let qp = good.queue_pair(0);
        assert_eq!(
            qp.post(vec![Verb::faa(0, 1)]).await,
            vec![Ok(VerbOutput::Faa(5))]
        );
    });
    assert_eq!(s.node().load_u64(0), 6);
    // A server without a shared region has no shm socket: a clear error.
    let tcp_only = MemoryServerHandle::bind(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(MemoryNode::new(64)),
        keyring(),
    )
    .unwrap();
    let k = tcp_only.node().register(1).unwrap();
    let err = block_on(cluster(&tcp_only).connect(1, &[k])).expect_err("no shm endpoint");
    assert!(err.to_string().contains("--shm"), "{err}");
}
