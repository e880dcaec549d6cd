//! Who may speak to the membership service, and for whom (docs/DESIGN.md §8).
//!
//! Every membership connection starts with the `tandem_auth` handshake. A
//! message is taken only on a connection authenticated as the role and id
//! it speaks for ([`ToMembership::speaker`]): a compute node's join,
//! heartbeats, leave, `applied` and incarnation request need the compute key
//! and its own node id; a replacement memory server's announcement needs the
//! memory key; a replica's relay needs the admin key. So nobody without a
//! key can join, leave or announce anything, and no compute node can speak
//! for another.
//!
//! The process's credentials are installed once at start
//! ([`set_credentials`]) by the command that runs the role; every dial of the
//! membership and every listener of it uses them.

use std::io::{self, BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use tandem_fabric::auth::{self, Keyring, Peer, Role};

use super::ToMembership;

static CREDENTIALS: RwLock<Option<Keyring>> = RwLock::new(None);

/// Install this process's credentials. A process that runs several clusters
/// one after another (DART's process runs) installs each one's in turn.
pub fn set_credentials(keys: Keyring) -> Result<(), String> {
    *CREDENTIALS.write().unwrap_or_else(|e| e.into_inner()) = Some(keys);
    Ok(())
}

pub(crate) fn credentials() -> io::Result<Keyring> {
    CREDENTIALS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "no credentials installed (TANDEM_SECRET or TANDEM_KEYRING)",
            )
        })
}

impl ToMembership {
    /// The role and id a connection must have authenticated as to carry this.
    pub(crate) fn speaker(&self) -> (Role, u64) {
        match *self {
            ToMembership::Join { node, .. }
            | ToMembership::Heartbeat(node)
            | ToMembership::Leave(node)
            | ToMembership::Applied { node, .. } => (Role::Compute, node as u64),
            ToMembership::Incarnation { of } => (Role::Compute, of as u64),
            ToMembership::Relay { replica, .. } => (Role::Admin, replica as u64),
            ToMembership::Replacement { node, .. } => (Role::Memory, node as u64),
        }
    }

    /// Whether `peer` may send this.
    pub(crate) fn allowed_from(&self, peer: Peer) -> bool {
        self.speaker() == (peer.role, peer.id)
    }
}

/// How long one write to a membership replica may block.
const DIAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Connect to a membership replica and authenticate as the speaker of `msg`.
pub(crate) fn dial(
    addr: SocketAddr,
    timeout: Duration,
    msg: &ToMembership,
) -> io::Result<TcpStream> {
    let keys = credentials()?;
    let mut conn = auth::dial::connect_timeout(addr, timeout)?;
    let _ = conn.set_nodelay(true);
    // A replica that stops reading fails our writes instead of holding them.
    conn.set_write_timeout(Some(DIAL_WRITE_TIMEOUT))?;
    let (role, id) = msg.speaker();
    let deadline = Instant::now() + timeout.max(auth::HANDSHAKE_DEADLINE);
    // A refusal is final; a connection that broke or ran out of time (a
    // membership restarting) is worth another try.
    auth::connect(&mut conn, &keys, role, id, deadline)
        .map_err(|e| io::Error::new(e.io_kind(), format!("membership at {addr}: {e}")))?;
    Ok(conn)
}

/// The roles a membership replica accepts.
pub(crate) const MEMBERSHIP_ROLES: [Role; 3] = [Role::Compute, Role::Admin, Role::Memory];

/// Longest line a membership message may take: a relay names at most every
/// compute node (65 536 ids of up to 6 bytes each); everything else is short.
pub(crate) fn line_max(role: Role) -> usize {
    match role {
        Role::Admin => 512 << 10,
        _ => 4 << 10,
    }
}

/// The next line (without its newline), or `None` at the end of the stream.
/// A line longer than `max` is an error: nothing is buffered beyond it.
pub(crate) fn next_line<R: Read>(
    r: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<String>> {
    buf.clear();
    let n = r.by_ref().take(max as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line longer than {max} bytes, or cut short"),
        ));
    }
    buf.pop();
    String::from_utf8(std::mem::take(buf))
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_over_its_cap_is_refused_without_reading_on() {
        let mut r =
            BufReader::new(&b"{\"heartbeat\":1}\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"[..]);
        let mut buf = Vec::new();
        assert_eq!(
            next_line(&mut r, &mut buf, 20).unwrap().as_deref(),
            Some("{\"heartbeat\":1}")
        );
        assert!(next_line(&mut r, &mut buf, 20).is_err());
        assert!(buf.len() <= 21);
    }

    #[test]
    fn a_message_is_taken_only_from_the_role_and_id_it_speaks_for() {
        let compute = |id| Peer {
            role: Role::Compute,
            id,
        };
        assert!(ToMembership::Heartbeat(3).allowed_from(compute(3)));
        assert!(!ToMembership::Heartbeat(3).allowed_from(compute(4)));
        assert!(!ToMembership::Leave(1).allowed_from(compute(2)));
        let replacement = ToMembership::Replacement {
            node: 1,
            addr: "127.0.0.1:1".into(),
        };
        assert!(!replacement.allowed_from(compute(1)));
        assert!(replacement.allowed_from(Peer {
            role: Role::Memory,
            id: 1
        }));
        let relay = ToMembership::Relay {
            replica: 0,
            nodes: vec![],
        };
        assert!(!relay.allowed_from(compute(0)));
        assert!(relay.allowed_from(Peer {
            role: Role::Admin,
            id: 0
        }));
    }
}
