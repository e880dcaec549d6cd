//! Where this process's connections come from.
//!
//! A process that dials others (a compute server, a membership replica, a
//! memory server announcing itself) normally lets the kernel choose the
//! source address. Under a network namespace where every process has an
//! address of its own in 127.0.0.0/8 (the nemesis, docs/NEMESIS.md), a rule
//! can only tell processes apart if each also dials from its own address:
//! `TANDEM_DIAL_FROM=<ip>` says which. Unset, nothing is bound.
//!
//! [`bound_silence`] bounds how long a stream's peer may stay silent (a
//! partition drops packets, it closes nothing): the message-passing
//! runtime's links take it, and fabric links that opt in.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

/// The variable naming the address to dial from.
pub const DIAL_FROM_ENV: &str = "TANDEM_DIAL_FROM";

/// The address this process dials from, if `TANDEM_DIAL_FROM` names one.
/// A value that is not an IP address is reported once and ignored.
pub fn dial_from() -> Option<IpAddr> {
    static FROM: OnceLock<Option<IpAddr>> = OnceLock::new();
    *FROM.get_or_init(|| {
        let v = std::env::var(DIAL_FROM_ENV).ok()?;
        match v.trim().parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                log::warn!("{DIAL_FROM_ENV}={v:?} is not an IP address; ignored");
                None
            }
        }
    })
}

/// A blocking connect that gives up after `timeout`, from [`dial_from`].
pub fn connect_timeout(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    connect_timeout_from(addr, timeout, dial_from())
}

/// [`connect_timeout`] from `from` (any port), or from the kernel's choice.
pub fn connect_timeout_from(
    addr: SocketAddr,
    timeout: Duration,
    from: Option<IpAddr>,
) -> io::Result<TcpStream> {
    let Some(ip) = from else {
        return TcpStream::connect_timeout(&addr, timeout);
    };
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.bind(&SocketAddr::new(ip, 0).into())?;
    s.connect_timeout(&addr.into(), timeout)?;
    Ok(s.into())
}

/// How long data may stay unacknowledged on a stream before the kernel
/// declares it dead (`TCP_USER_TIMEOUT`): a peer behind a partition or a
/// blackhole drops packets without closing anything, and the kernel's own
/// limit (`tcp_retries2`) is about 15 minutes. With the retransmission
/// timer's granularity a silent stream is declared dead within
/// `SILENCE_MS` + 0.8 s on loopback.
pub const SILENCE_MS: u32 = 1_000;

/// Bound how long a stream may be silent: `TCP_USER_TIMEOUT` for data in
/// flight, and keepalive probes (after 1 s idle, every 1 s) for a stream
/// with nothing to send, so both kinds of silence end in an error the
/// event loop sees. Best effort: an option the kernel refuses is skipped.
pub fn bound_silence(s: &impl std::os::fd::AsRawFd) {
    let fd = s.as_raw_fd();
    let set = |level, name, v: libc::c_int| unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    set(
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        SILENCE_MS as libc::c_int,
    );
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 2);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_connect_from_an_address_arrives_from_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        // All of 127.0.0.0/8 is this host's on Linux: not the default source.
        let from: IpAddr = "127.0.0.3".parse().unwrap();
        let s = connect_timeout_from(l.local_addr().unwrap(), Duration::from_secs(1), Some(from))
            .unwrap();
        let (_, peer) = l.accept().unwrap();
        assert_eq!(peer.ip(), from);
        assert_eq!(s.local_addr().unwrap().ip(), from);
    }

    #[test]
    fn an_address_not_on_this_host_is_refused_at_bind() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let from: IpAddr = "192.0.2.1".parse().unwrap();
        let e = connect_timeout_from(l.local_addr().unwrap(), Duration::from_secs(1), Some(from));
        assert!(e.is_err());
    }
}
