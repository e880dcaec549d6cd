//! The handshake over a blocking `TcpStream`, with one deadline for the
//! whole exchange: a peer that sends a byte at a time still runs out of
//! time (a per-read timeout would restart on every byte).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::handshake::{
    AuthError, ClientHandshake, Next, Peer, ServerHandshake, CHALLENGE_BYTES, VERDICT_ACCEPTED,
    VERDICT_REFUSED,
};
use crate::keys::{Keyring, Role};

/// A blocking stream with read and write timeouts (TCP, or the shm
/// fabric's Unix socket).
pub trait Stream: Read + Write {
    fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> std::io::Result<()>;
}

impl Stream for TcpStream {
    fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(read)?;
        self.set_write_timeout(write)
    }
}

impl Stream for UnixStream {
    fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(read)?;
        self.set_write_timeout(write)
    }
}

/// How long a whole handshake may take, by default.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(2);

/// Authenticate the dialer on `stream` as one of `allowed`, by `deadline`.
/// On success the stream's timeouts are cleared.
pub fn accept<S: Stream>(
    stream: &mut S,
    keys: &Keyring,
    allowed: &[Role],
    deadline: Instant,
) -> Result<Peer, AuthError> {
    accept_then(stream, keys, allowed, deadline, || {})
}

/// [`accept`], calling `on_hello` once the whole hello is in: a listener
/// that must shed handshakes sheds those still trickling their hello first
/// (a real dialer sends its hello at once).
pub fn accept_then<S: Stream>(
    stream: &mut S,
    keys: &Keyring,
    allowed: &[Role],
    deadline: Instant,
    mut on_hello: impl FnMut(),
) -> Result<Peer, AuthError> {
    let mut hs = ServerHandshake::new(keys, allowed);
    let mut buf = [0u8; crate::HELLO_BYTES];
    let peer = loop {
        let n = hs.need();
        read_full(stream, &mut buf[..n], deadline)?;
        if n == crate::HELLO_BYTES {
            on_hello();
        }
        match hs.take(&buf[..n]) {
            Ok(Next::Send(challenge)) => write_full(stream, &challenge, deadline)?,
            Ok(Next::Done(peer)) => break peer,
            Err(AuthError::BadProof) => {
                let _ = write_full(stream, &[VERDICT_REFUSED], deadline);
                return Err(AuthError::BadProof);
            }
            Err(e) => return Err(e),
        }
    };
    write_full(stream, &[VERDICT_ACCEPTED], deadline)?;
    clear_timeouts(stream);
    Ok(peer)
}

/// Authenticate to the listener on `stream` as `role`, claiming `id`.
pub fn connect<S: Stream>(
    stream: &mut S,
    keys: &Keyring,
    role: Role,
    id: u64,
    deadline: Instant,
) -> Result<(), AuthError> {
    let (hs, hello) = ClientHandshake::start(keys, role, id)?;
    write_full(stream, &hello, deadline)?;
    let mut challenge = [0u8; CHALLENGE_BYTES];
    read_full(stream, &mut challenge, deadline)?;
    let proof = hs.challenge(&challenge)?;
    write_full(stream, &proof, deadline)?;
    let mut verdict = [0u8; 1];
    match read_full(stream, &mut verdict, deadline) {
        Ok(()) if verdict[0] == VERDICT_ACCEPTED => {}
        Ok(()) if verdict[0] == VERDICT_REFUSED => return Err(AuthError::BadProof),
        Ok(()) => return Err(AuthError::NotTandem),
        Err(e) => return Err(e),
    }
    clear_timeouts(stream);
    Ok(())
}

fn remaining(deadline: Instant) -> Result<Duration, AuthError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(AuthError::Deadline)
    } else {
        Ok(left)
    }
}

/// Fill `buf`, however the bytes trickle in, by `deadline`.
pub fn read_full<S: Stream>(
    stream: &mut S,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), AuthError> {
    let mut at = 0;
    while at < buf.len() {
        let left = remaining(deadline)?;
        stream
            .set_timeouts(Some(left), Some(left))
            .map_err(|e| AuthError::Io(e.to_string()))?;
        match stream.read(&mut buf[at..]) {
            Ok(0) => return Err(AuthError::Io("closed".into())),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                remaining(deadline)?;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(AuthError::Io(e.to_string())),
        }
    }
    Ok(())
}

fn write_full<S: Stream>(stream: &mut S, buf: &[u8], deadline: Instant) -> Result<(), AuthError> {
    let left = remaining(deadline)?;
    stream
        .set_timeouts(Some(left), Some(left))
        .map_err(|e| AuthError::Io(e.to_string()))?;
    stream.write_all(buf).map_err(|e| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => AuthError::Deadline,
        _ => AuthError::Io(e.to_string()),
    })
}

fn clear_timeouts<S: Stream>(stream: &S) {
    let _ = stream.set_timeouts(None, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn over_tcp_a_holder_gets_in_and_a_slow_dialer_runs_out_of_time() {
        let keys = Keyring::from_master_hex(&Keyring::new_master_hex()).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let k2 = keys.clone();
        let dialer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            connect(
                &mut s,
                &k2,
                Role::Client,
                3,
                Instant::now() + Duration::from_secs(5),
            )
        });
        let (mut s, _) = l.accept().unwrap();
        let peer = accept(
            &mut s,
            &keys,
            &[Role::Client],
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(
            peer,
            Peer {
                role: Role::Client,
                id: 3
            }
        );
        dialer.join().unwrap().unwrap();

        // One byte every 100 ms, under a 300 ms deadline: out of time,
        // though no single read waited long.
        let slow = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            for _ in 0..20 {
                if s.write_all(b"T").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (mut s, _) = l.accept().unwrap();
        let t = Instant::now();
        let r = accept(
            &mut s,
            &keys,
            &[Role::Client],
            Instant::now() + Duration::from_millis(300),
        );
        assert_eq!(r, Err(AuthError::Deadline));
        assert!(
            t.elapsed() < Duration::from_millis(600),
            "{:?}",
            t.elapsed()
        );
        drop(s);
        slow.join().unwrap();
    }
}
