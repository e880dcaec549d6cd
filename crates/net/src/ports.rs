//! Loopback ports for clusters started on this machine (tests, demos,
//! benchmarks), chosen so that no other chooser takes them in the time
//! between choosing and binding.
//!
//! A port taken with `bind("127.0.0.1:0")` and released for a child
//! process to bind is an ephemeral port: until the child binds it (and
//! again while a killed node is down before its restart), any other
//! `bind(0)` on the machine may be handed the same port. Two test clusters
//! running side by side then share an address, and one node never listens
//! (CI once failed so: a read at a node answered "closed the session", the
//! stream having reached another cluster's node, which refused its hello).
//!
//! These ports come instead from a range below the kernel's ephemeral
//! range, which neither `bind(0)` nor `connect` hands out, and through a
//! cursor in a locked file shared by every process on the machine, so two
//! choosers never get the same port until the range wraps around. A port
//! some other program holds is skipped.

use std::fs::OpenOptions;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

/// The private range: below Linux's default ephemeral range (32768-60999)
/// and the fixed ports of `scripts/peers.sh` (22379 and up).
pub const RANGE: std::ops::Range<u16> = 15_000..22_000;

/// A loopback address no other chooser on this machine holds or has been
/// given recently, for a process to bind.
pub fn reserve_loopback() -> io::Result<SocketAddr> {
    let path = std::env::temp_dir().join("tandem-ports.cursor");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    f.lock()?; // released when `f` closes
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut cursor = text.trim().parse::<u16>().unwrap_or(RANGE.start);
    let span = RANGE.end - RANGE.start;
    for _ in 0..span {
        let port = RANGE.start + (cursor.saturating_sub(RANGE.start)) % span;
        cursor = port + 1;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        if TcpListener::bind(addr).is_ok() {
            f.set_len(0)?;
            f.seek(SeekFrom::Start(0))?;
            write!(f, "{cursor}")?;
            return Ok(addr);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every loopback port in {RANGE:?} is in use"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_differ_and_are_outside_the_ephemeral_range() {
        let a: Vec<SocketAddr> = (0..20).map(|_| reserve_loopback().unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(distinct.len(), a.len(), "{a:?}");
        assert!(a.iter().all(|s| RANGE.contains(&s.port())), "{a:?}");
    }

    #[test]
    fn a_port_someone_holds_is_skipped() {
        let first = reserve_loopback().unwrap();
        // Hold the next port in the cursor's order: it must not be given out.
        let next = SocketAddr::from((Ipv4Addr::LOCALHOST, first.port() + 1));
        let _held = TcpListener::bind(next);
        let second = reserve_loopback().unwrap();
        assert_ne!(second, next);
    }
}
