//! Delay and jitter, which a packet filter cannot make (this kernel has no
//! `netem`): a stream proxy on every link of a run.
//!
//! A NAT rule in the namespace's `output` hook sends every new TCP
//! connection between two of the run's addresses to the proxy, which reads
//! the connection's original destination (`SO_ORIGINAL_DST`) and dials it
//! from the connection's own source address. Both legs keep the link's two
//! addresses, so the [`crate::Firewall`]'s rules still cut it: a partition
//! drops the proxy's leg to the far node, and the proxy then ends the near
//! leg with a reset as soon as its own, equally bounded, leg dies. The
//! proxy's sockets carry a mark the NAT rule skips.
//!
//! The rule is in place before the run's processes start, so every link
//! is proxied from its first byte (NAT only ever sees a connection's first
//! packet). At rest the proxy forwards at once; [`Proxy::slow`] delays
//! each chunk it reads by a fixed delay plus a random jitter, on the links
//! of one node or of all. A chunk never overtakes the one before it on the
//! same stream, as TCP would not let it: jitter shows as bursts. TCP also
//! absorbs a duplicated or reordered packet before any process sees it,
//! so a proxy of streams has neither to offer; what a process can meet is
//! messages of different links arriving in another order, which
//! independent jitter per link gives.
//!
//! What the proxy changes: a connect to a blackholed node is accepted by
//! the proxy, which then resets it when its own connect gives up
//! ([`CONNECT_PATIENCE`]), instead of timing out in the dialler.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tandem_sim::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Instant;

/// The nftables table of the proxy's NAT rule.
const TABLE: &str = "tandem_proxy";
/// The mark on the proxy's own sockets, which the NAT rule lets pass.
const MARK: u32 = 0x7a7a;
/// `SO_ORIGINAL_DST` (linux/netfilter_ipv4.h).
const SO_ORIGINAL_DST: libc::c_int = 80;
/// How long the proxy's connect to the far node may take.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(2);
/// Chunks in flight per direction of a link (each ≤ `CHUNK` bytes): a
/// stalled far leg stops the proxy reading the near one, as TCP would.
const QUEUE: usize = 64;
const CHUNK: usize = 16 * 1024;

/// How slow links are: `delay` plus up to `jitter` per chunk, on the links
/// with an end in `only` (every proxied link when `None`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slow {
    pub only: Option<Vec<Ipv4Addr>>,
    pub delay: Duration,
    pub jitter: Duration,
}

impl Slow {
    /// How long to hold a chunk of link `a`–`b`.
    fn hold(&self, a: Ipv4Addr, b: Ipv4Addr, rng: &mut Rng) -> Duration {
        let hit = |ips: &Vec<Ipv4Addr>| ips.contains(&a) || ips.contains(&b);
        match self.only.as_ref().is_none_or(hit) && !self.delay.is_zero() {
            true => self.delay + self.jitter.mul_f64(rng.below(1_001) as f64 / 1e3),
            false => Duration::ZERO,
        }
    }
}

/// The settings every stream reads, and a version that tells a stream
/// when to read them again.
#[derive(Default)]
struct Shared {
    version: AtomicU64,
    slow: Mutex<Slow>,
}

impl Shared {
    fn set(&self, s: Slow) {
        *self.slow.lock().unwrap() = s;
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Bring a stream's copy `mine`, of version `seen`, up to date.
    fn refresh(&self, seen: &mut u64, mine: &mut Slow) {
        let v = self.version.load(Ordering::Acquire);
        if v != *seen {
            *mine = self.slow.lock().unwrap().clone();
            *seen = v;
        }
    }
}

/// The proxy of a namespace's links, and its NAT rule. Dropping it
/// removes the rule and closes every stream it carries.
pub struct Proxy {
    slow: Arc<Shared>,
    carried: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Carry every TCP connection between two of `addrs` from now on, in
    /// the calling thread's namespace. `seed` draws the jitter.
    pub fn start(addrs: &[Ipv4Addr], seed: u64) -> io::Result<Proxy> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        install_rule(addrs, listener.local_addr()?.port())?;
        let slow = Arc::new(Shared::default());
        let carried = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (s, c) = (slow.clone(), carried.clone());
        let thread = std::thread::Builder::new()
            .name("nemesis-proxy".into())
            .spawn(move || serve(listener, s, c, seed, stopped))?;
        Ok(Proxy {
            slow,
            carried,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Slow the links `s` names down, from the next chunk on.
    pub fn slow(&self, s: Slow) {
        self.slow.set(s);
    }

    /// Forward at once again (chunks already delayed keep their time).
    pub fn heal(&self) {
        self.slow(Slow::default());
    }

    /// Connections the proxy has accepted so far.
    pub fn carried(&self) -> u64 {
        self.carried.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = crate::run("nft", &["delete", "table", "ip", TABLE]);
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The NAT rule: new connections between two of `addrs`, not the proxy's
/// own, go to the proxy's `port` on 127.0.0.1.
fn install_rule(addrs: &[Ipv4Addr], port: u16) -> io::Result<()> {
    let _ = crate::run("nft", &["delete", "table", "ip", TABLE]);
    let set = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    crate::nft(&format!(
        "add table ip {TABLE}\n\
         add chain ip {TABLE} out {{ type nat hook output priority -100; policy accept; }}\n\
         add rule ip {TABLE} out meta mark != {MARK} ip saddr {{ {set} }} ip daddr {{ {set} }} \
         meta l4proto tcp redirect to :{port}\n"
    ))
}

fn serve(
    listener: std::net::TcpListener,
    slow: Arc<Shared>,
    carried: Arc<AtomicU64>,
    seed: u64,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the proxy's runtime");
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener).expect("a non-blocking listener");
        let accept = async {
            loop {
                let Ok((near, _)) = listener.accept().await else {
                    continue;
                };
                let n = carried.fetch_add(1, Ordering::Relaxed);
                let rng = Rng::new(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                tokio::spawn(carry(near, slow.clone(), rng));
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = stopped => {}
        }
    });
}

/// One proxied connection: dial its destination from its source, then
/// pump both ways until both ends are done; an error resets both legs.
async fn carry(near: TcpStream, slow: Arc<Shared>, rng: Rng) {
    let (Ok(SocketAddr::V4(from)), Ok(to)) = (near.peer_addr(), original_dst(&near)) else {
        return reset(&near);
    };
    let far = match dial(*from.ip(), to).await {
        Ok(far) => far,
        Err(_) => return reset(&near),
    };
    for s in [&near, &far] {
        tandem_net::conn::bound_silence(s);
        let _ = s.set_nodelay(true);
        reset(s);
    }
    let link = (*from.ip(), *to.ip());
    let (nr, nw) = near.into_split();
    let (fr, fw) = far.into_split();
    let mut back = rng.clone();
    back.next_u64();
    let _ = tokio::try_join!(
        pump(nr, fw, link, slow.clone(), rng),
        pump(fr, nw, link, slow, back)
    );
}

/// Bytes from `r` to `w`, each chunk held as long as the links are slow.
/// At rest a chunk is written as soon as it is read; held chunks wait in
/// order, and at most [`QUEUE`] of them before the reading stops.
async fn pump(
    mut r: OwnedReadHalf,
    mut w: OwnedWriteHalf,
    (a, b): (Ipv4Addr, Ipv4Addr),
    slow: Arc<Shared>,
    mut rng: Rng,
) -> io::Result<()> {
    let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; CHUNK];
    let mut open = true;
    let (mut seen, mut now_slow) = (u64::MAX, Slow::default());
    while open || !held.is_empty() {
        let due = held.front().map(|h| h.0);
        tokio::select! {
            n = r.read(&mut buf), if open && held.len() < QUEUE => {
                let n = n?;
                if n == 0 {
                    open = false;
                    continue;
                }
                slow.refresh(&mut seen, &mut now_slow);
                let hold = now_slow.hold(a, b, &mut rng);
                if hold.is_zero() && held.is_empty() {
                    w.write_all(&buf[..n]).await?;
                    continue;
                }
                let at = held.back().map_or(Instant::now(), |h| h.0);
                held.push_back((at.max(Instant::now() + hold), buf[..n].to_vec()));
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                let (_, chunk) = held.pop_front().expect("a held chunk");
                w.write_all(&chunk).await?;
            }
        }
    }
    w.shutdown().await
}

/// Connect to `to` from `from`, marked so that the NAT rule lets it pass.
async fn dial(from: Ipv4Addr, to: SocketAddrV4) -> io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    set_int(&s, libc::SOL_SOCKET, libc::SO_MARK, MARK as libc::c_int)?;
    s.bind(SocketAddr::from((from, 0)))?;
    tokio::time::timeout(CONNECT_PATIENCE, s.connect(to.into()))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the far leg's connect"))?
}

/// Where a redirected connection was going.
fn original_dst(s: &TcpStream) -> io::Result<SocketAddrV4> {
    // SAFETY: getsockopt writes at most `len` bytes into `a`.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            &mut a as *mut libc::sockaddr_in as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
    Ok(SocketAddrV4::new(ip, u16::from_be(a.sin_port)))
}

fn set_int(
    s: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads one c_int from `v`.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Have `s` close with a reset (`SO_LINGER` 0, which never blocks), as
/// a connection the far end refused or a link that died.
fn reset(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads one `linger` from `l`.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}
