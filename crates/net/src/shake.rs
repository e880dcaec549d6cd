//! The role handshake of `tandem_auth` on the event loop's non-blocking
//! streams (docs/SECURITY.md). A stream this node dials ([`Dialing`]) and a
//! stream it accepts ([`Listening`]) carry nothing else until the handshake
//! is done: the dialer sends its hello, checks the listener's challenge,
//! sends its proof and waits for the verdict before its first frame. Both
//! sides read exactly the bytes of the message they wait for, so nothing an
//! unauthenticated peer sends is buffered beyond 56 bytes.

use std::io;

use tandem_auth::{
    AuthError, ClientHandshake, Keyring, Next, Peer, Role, ServerHandshake, CHALLENGE_BYTES,
    VERDICT_ACCEPTED, VERDICT_REFUSED,
};

use crate::conn::{Conn, ReadEnd};

/// How long a handshake may take, in the loop's ns.
pub const DEADLINE_NS: u64 = 2_000_000_000;

fn refused(e: AuthError) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, e.to_string())
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "closed during the handshake",
    )
}

/// Our side of a stream we dialled.
pub(crate) struct Dialing {
    hs: ClientHandshake,
    got: Vec<u8>,
    /// Waiting for the challenge (64 bytes), then for the verdict (1).
    want: usize,
    pub(crate) deadline: u64,
}

impl Dialing {
    /// Queue our hello as `role` claiming `id` on a stream just opened.
    pub(crate) fn start(
        keys: &Keyring,
        role: Role,
        id: u64,
        conn: &mut Conn,
        now: u64,
    ) -> io::Result<Dialing> {
        let (hs, hello) = ClientHandshake::start(keys, role, id).map_err(refused)?;
        conn.queue_bytes(&hello);
        Ok(Dialing {
            hs,
            got: Vec::with_capacity(CHALLENGE_BYTES),
            want: CHALLENGE_BYTES,
            deadline: now + DEADLINE_NS,
        })
    }

    /// Read what arrived; `Ok(true)` once the listener accepted us.
    pub(crate) fn advance(&mut self, conn: &mut Conn) -> io::Result<bool> {
        loop {
            let end = conn.read_raw(&mut self.got, self.want)?;
            if self.got.len() < self.want {
                return if end == ReadEnd::Open {
                    Ok(false)
                } else {
                    Err(closed())
                };
            }
            if self.want == 1 {
                return match self.got[0] {
                    VERDICT_ACCEPTED => Ok(true),
                    VERDICT_REFUSED => Err(refused(AuthError::BadProof)),
                    _ => Err(refused(AuthError::NotTandem)),
                };
            }
            let challenge: [u8; CHALLENGE_BYTES] = self.got[..].try_into().expect("64 bytes");
            conn.queue_bytes(&self.hs.challenge(&challenge).map_err(refused)?);
            conn.flush()?;
            self.got.clear();
            self.want = 1;
        }
    }
}

/// Our side of a stream we accepted.
pub(crate) struct Listening {
    hs: ServerHandshake,
    got: Vec<u8>,
    pub(crate) deadline: u64,
    /// Its whole hello arrived (a listener sheds the others first).
    pub(crate) heard: bool,
}

impl Listening {
    pub(crate) fn new(keys: &Keyring, allowed: &[Role], now: u64) -> Listening {
        Listening {
            hs: ServerHandshake::new(keys, allowed),
            got: Vec::with_capacity(tandem_auth::HELLO_BYTES),
            deadline: now + DEADLINE_NS,
            heard: false,
        }
    }

    /// Read what arrived; the peer once it proved its role (the verdict is queued).
    pub(crate) fn advance(&mut self, conn: &mut Conn) -> io::Result<Option<Peer>> {
        loop {
            let want = self.hs.need();
            let end = conn.read_raw(&mut self.got, want)?;
            if self.got.len() < want {
                return if end == ReadEnd::Open {
                    Ok(None)
                } else {
                    Err(closed())
                };
            }
            let next = self.hs.take(&self.got);
            if next == Err(AuthError::BadProof) {
                conn.queue_bytes(&[VERDICT_REFUSED]);
                let _ = conn.flush();
            }
            match next.map_err(refused)? {
                Next::Send(challenge) => {
                    self.heard = true;
                    conn.queue_bytes(&challenge);
                    conn.flush()?;
                    self.got.clear();
                }
                Next::Done(peer) => {
                    conn.queue_bytes(&[VERDICT_ACCEPTED]);
                    return Ok(Some(peer));
                }
            }
        }
    }
}
