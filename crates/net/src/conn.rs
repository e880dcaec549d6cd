//! One non-blocking TCP stream of an event loop (the node host and the
//! pipelined client): bytes read are cut into frames (`wire.rs`), bytes to
//! send wait in a buffer until the socket takes them. Many frames queued
//! between two flushes leave in one `write` (coalescing).

use std::io::{self, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::wire::{put, MAX_FRAME};

pub use tandem_auth::dial::{bound_silence, SILENCE_MS};

/// Refuse a stream connected to itself. A connect to a loopback port no one
/// listens on (a node that is down) can be given that same port as its
/// source, and TCP's simultaneous open then connects the socket to itself;
/// kept, it would hold the dead node's port, and the node could not listen
/// on it when it restarts.
/// Such a stream is set to reset when closed (`SO_LINGER` 0): a plain close
/// would keep the port for a minute (FIN_WAIT, TIME_WAIT).
pub fn not_to_itself(s: &impl std::os::fd::AsRawFd) -> io::Result<()> {
    let fd = s.as_raw_fd();
    let addr = |peer: bool| -> io::Result<Vec<u8>> {
        let mut a: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = &mut a as *mut libc::sockaddr_storage as *mut libc::sockaddr;
        let r = unsafe {
            match peer {
                true => libc::getpeername(fd, p, &mut len),
                false => libc::getsockname(fd, p, &mut len),
            }
        };
        let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) };
        (r == 0)
            .then(|| bytes.to_vec())
            .ok_or_else(io::Error::last_os_error)
    };
    let local = addr(false)?;
    let same = local == addr(true)?;
    match same {
        true => {
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    &linger as *const libc::linger as *const libc::c_void,
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            Err(io::Error::new(
                ErrorKind::ConnectionRefused,
                "connected to itself (no one listens on that port)",
            ))
        }
        false => Ok(()),
    }
}

/// Bytes read per `read` call.
const CHUNK: usize = 64 << 10;

pub struct Conn {
    pub stream: TcpStream,
    /// Read buffer (all of it initialized): bytes `consumed..filled` are
    /// read and not yet cut into frames.
    inbuf: Vec<u8>,
    consumed: usize,
    filled: usize,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    written: usize,
    /// A non-blocking connect not yet known to have succeeded.
    pub connecting: bool,
}

/// What a read found besides frames.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadEnd {
    /// The socket has nothing more for now.
    Open,
    /// The peer closed the stream, or it broke.
    Closed,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            inbuf: vec![0; CHUNK],
            consumed: 0,
            filled: 0,
            out: Vec::new(),
            written: 0,
            connecting: false,
        }
    }

    /// Connect without blocking the loop longer than `timeout`.
    pub fn connect(addr: std::net::SocketAddr, timeout: std::time::Duration) -> io::Result<Conn> {
        let s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        not_to_itself(&s)?;
        s.set_nonblocking(true)?;
        Ok(Conn::new(TcpStream::from_std(s)))
    }

    /// [`Conn::connect`], then the role handshake as `role` claiming `id`
    /// (blocking, within the handshake's deadline).
    pub fn connect_as(
        addr: std::net::SocketAddr,
        timeout: std::time::Duration,
        keys: &tandem_auth::Keyring,
        role: tandem_auth::Role,
        id: u64,
    ) -> io::Result<Conn> {
        let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        not_to_itself(&s)?;
        bound_silence(&s);
        authenticate(&mut s, addr, keys, role, id)?;
        s.set_nonblocking(true)?;
        Ok(Conn::new(TcpStream::from_std(s)))
    }

    /// Start connecting without blocking; the stream becomes writable once
    /// it is connected (then call [`Conn::connected`]).
    pub fn start_connect(addr: std::net::SocketAddr) -> io::Result<Conn> {
        Conn::start_connect_from(addr, None)
    }

    /// [`Conn::start_connect`] from the local address `from` (any port),
    /// with the stream's silence bounded ([`bound_silence`]).
    pub fn start_connect_from(
        addr: std::net::SocketAddr,
        from: Option<std::net::IpAddr>,
    ) -> io::Result<Conn> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        s.set_nonblocking(true)?;
        if let Some(ip) = from {
            s.bind(&std::net::SocketAddr::new(ip, 0).into())?;
        }
        bound_silence(&s);
        match s.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let mut c = Conn::new(TcpStream::from_std(s.into()));
        c.connecting = true;
        Ok(c)
    }

    /// After a writable event on a connecting stream: did the connect
    /// succeed? Err if it failed.
    pub fn connected(&mut self) -> io::Result<bool> {
        if !self.connecting {
            return Ok(true);
        }
        if let Some(e) = self.stream.take_error()? {
            return Err(e);
        }
        match self.stream.peer_addr() {
            Ok(_) => {
                not_to_itself(&self.stream)?;
                self.connecting = false;
                let _ = self.stream.set_nodelay(true);
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn register(&mut self, r: &Registry, t: Token) -> io::Result<()> {
        r.register(&mut self.stream, t, Interest::READABLE | Interest::WRITABLE)
    }

    /// Queue one frame.
    pub fn queue<T: Serialize>(&mut self, v: &T) {
        put(&mut self.out, v);
    }

    /// Queue bytes that are already framed.
    pub fn queue_bytes(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    /// Bytes waiting to be written.
    pub fn pending(&self) -> usize {
        self.out.len() - self.written
    }

    /// Write what the socket takes; Err if the stream broke.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.connecting {
            return Ok(());
        }
        while self.written < self.out.len() {
            count_syscall();
            match self.stream.write(&self.out[self.written..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
        } else if self.written > self.out.len() / 2 {
            // A stream that never drains completely must not grow forever.
            self.out.drain(..self.written);
            self.written = 0;
        }
        Ok(())
    }

    /// Read raw bytes into `into` until it holds `want` (the handshake's
    /// fixed-size messages, before any frame). Reads no byte beyond `want`,
    /// so nothing an unauthenticated peer sends is buffered past it.
    pub fn read_raw(&mut self, into: &mut Vec<u8>, want: usize) -> io::Result<ReadEnd> {
        let mut buf = [0u8; 128];
        while into.len() < want {
            let n = (want - into.len()).min(buf.len());
            count_syscall();
            match self.stream.read(&mut buf[..n]) {
                Ok(0) => return Ok(ReadEnd::Closed),
                Ok(got) => into.extend_from_slice(&buf[..got]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(ReadEnd::Open),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Ok(ReadEnd::Closed),
            }
        }
        Ok(ReadEnd::Open)
    }

    /// Read everything the socket holds and hand each whole frame to `f`.
    /// A short read means the socket was drained (its next bytes raise a
    /// new readiness edge), so it ends the loop without one more `read`.
    pub fn read_frames(&mut self, mut f: impl FnMut(&[u8])) -> io::Result<ReadEnd> {
        loop {
            self.make_room();
            let room = self.inbuf.len() - self.filled;
            count_syscall();
            match self.stream.read(&mut self.inbuf[self.filled..]) {
                Ok(0) => return Ok(ReadEnd::Closed),
                Ok(n) => {
                    self.filled += n;
                    self.cut(&mut f)?;
                    if n < room {
                        return Ok(ReadEnd::Open);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(ReadEnd::Open),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Ok(ReadEnd::Closed),
            }
        }
    }

    /// Move the unread tail to the front, and grow the buffer when the
    /// tail is a frame bigger than what is left.
    fn make_room(&mut self) {
        if self.consumed > 0 {
            self.inbuf.copy_within(self.consumed..self.filled, 0);
            self.filled -= self.consumed;
            self.consumed = 0;
        }
        if self.inbuf.len() - self.filled < CHUNK / 4 {
            self.inbuf.resize(self.inbuf.len() + CHUNK, 0);
        }
    }

    /// Hand every whole frame in the buffer to `f`, keep the partial tail.
    fn cut(&mut self, f: &mut impl FnMut(&[u8])) -> io::Result<()> {
        let r = cut_frames(&self.inbuf[self.consumed..self.filled], f);
        self.consumed += r.consumed;
        r.error.map_or(Ok(()), Err)
    }
}

/// Reads, writes and poller waits this process's runtime has made
/// ([`crate::wire::NodeStats::syscalls`]).
pub static SYSCALLS: AtomicU64 = AtomicU64::new(0);

/// One more system call on a stream or the poller.
pub fn count_syscall() {
    SYSCALLS.fetch_add(1, Ordering::Relaxed);
}

/// What [`cut_frames`] did with a buffer.
#[derive(Debug)]
pub struct Cut {
    /// Bytes of the whole frames handed out (the partial tail stays).
    pub consumed: usize,
    /// A length prefix above [`MAX_FRAME`]: the stream is unusable.
    pub error: Option<io::Error>,
}

/// Hand every whole frame at the start of `buf` (`u32` length, then that
/// many bytes) to `f`, in order, and say how many bytes they took. Stops at
/// a partial frame, or at a length prefix above [`MAX_FRAME`] (an error).
pub fn cut_frames(buf: &[u8], f: &mut impl FnMut(&[u8])) -> Cut {
    let mut consumed = 0;
    loop {
        let rest = &buf[consumed..];
        if rest.len() < 4 {
            return Cut {
                consumed,
                error: None,
            };
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > MAX_FRAME {
            let e = io::Error::new(
                ErrorKind::InvalidData,
                format!("frame of {len} bytes exceeds {MAX_FRAME}"),
            );
            return Cut {
                consumed,
                error: Some(e),
            };
        }
        if rest.len() < 4 + len {
            return Cut {
                consumed,
                error: None,
            };
        }
        f(&rest[4..4 + len]);
        consumed += 4 + len;
    }
}

/// The role handshake on a blocking stream; a refusal is `PermissionDenied`.
pub fn authenticate(
    s: &mut std::net::TcpStream,
    addr: std::net::SocketAddr,
    keys: &tandem_auth::Keyring,
    role: tandem_auth::Role,
    id: u64,
) -> io::Result<()> {
    let deadline = std::time::Instant::now() + tandem_auth::HANDSHAKE_DEADLINE;
    tandem_auth::connect(s, keys, role, id, deadline)
        .map_err(|e| io::Error::new(e.io_kind(), format!("node at {addr}: {e}")))
}

/// Decode one frame's payload.
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> io::Result<T> {
    bincode::deserialize(b).map_err(|e| io::Error::new(ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket bound to port P that connects to P connects to itself (TCP
    /// simultaneous open), as a redial to a dead node's port can when the
    /// kernel picks that port as the source. It must be refused, and the
    /// port left free for the node to listen on again.
    #[test]
    fn a_stream_connected_to_itself_is_refused_and_frees_the_port() {
        use std::os::fd::FromRawFd;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(fd >= 0);
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let (sa, len) = (
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(unsafe { libc::bind(fd, sa, len) }, 0);
        assert_eq!(unsafe { libc::connect(fd, sa, len) }, 0, "self-connect");
        let std_stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
        assert_eq!(
            std_stream.local_addr().unwrap(),
            std_stream.peer_addr().unwrap()
        );
        std_stream.set_nonblocking(true).unwrap();
        let mut c = Conn::new(TcpStream::from_std(std_stream));
        c.connecting = true;
        let e = c.connected().unwrap_err();
        assert!(e.to_string().contains("connected to itself"), "{e}");
        drop(c);
        let t = std::time::Instant::now();
        while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed().as_secs() < 2,
                "the port stayed taken (a plain close keeps it a minute)"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A stream whose peer reads slowly never drains completely while its
    /// writer keeps up with the reader; what was written must still leave
    /// the buffer (it once grew without bound, and every growth copied it).
    #[test]
    fn a_stream_that_never_drains_keeps_only_what_is_pending() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = vec![0u8; 64 << 10];
            let mut total = 0;
            while let Ok(n) = s.read(&mut b) {
                if n == 0 {
                    break;
                }
                total += n;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            total
        });
        let mut c = Conn::connect(addr, std::time::Duration::from_secs(1)).unwrap();
        let frame = vec![7u8; 16 << 10];
        let mut queued = 0;
        while queued < 48 << 20 {
            if c.pending() < 64 << 10 {
                c.queue_bytes(&frame);
                queued += frame.len();
            }
            c.flush().unwrap();
            assert!(
                c.out.len() <= 2 * c.pending(),
                "buffer {} bytes for {} pending",
                c.out.len(),
                c.pending()
            );
        }
        drop(c);
        assert!(reader.join().unwrap() > 0);
    }

    #[test]
    fn frames_split_across_reads_are_cut_whole() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut w = std::net::TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut c = Conn::new(TcpStream::from_std(s));
        let mut bytes = Vec::new();
        for i in 0..1000u64 {
            put(&mut bytes, &vec![i; (i % 50) as usize]);
        }
        let mut got: Vec<Vec<u64>> = Vec::new();
        for piece in bytes.chunks(777) {
            w.write_all(piece).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(200));
            c.read_frames(|b| got.push(decode(b).unwrap())).unwrap();
        }
        while got.len() < 1000 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            c.read_frames(|b| got.push(decode(b).unwrap())).unwrap();
        }
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, v)| v.len() == i % 50 && v.iter().all(|&x| x == i as u64)));
    }
}
