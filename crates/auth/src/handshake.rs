//! The handshake as two sans-IO state machines: bytes in, bytes out.
//!
//! ```text
//! dialer -> listener  HELLO     magic "TNDMAUTH" | version | role | 6 zero bytes | id: u64 LE | nonce_d (32)   56 bytes
//! listener -> dialer  CHALLENGE nonce_l (32) | mac_l (32)                                                   64 bytes
//! dialer -> listener  PROOF     mac_d (32)                                                                  32 bytes
//! listener -> dialer  VERDICT   1 (accepted), or 0 (a bad proof) and the connection closes                   1 byte
//!
//! mac_l = HMAC-SHA256(key[role], "tandem/v1/listener" | HELLO | nonce_l)
//! mac_d = HMAC-SHA256(key[role], "tandem/v1/dialer"   | HELLO | nonce_l | mac_l)
//! ```
//!
//! The dialer checks `mac_l` before it sends its proof, so it never proves
//! anything to a listener that does not hold the key. The labels differ by
//! direction, so neither side's MAC can be reflected as the other's. A
//! replayed HELLO meets a fresh `nonce_l`; a replayed CHALLENGE fails the
//! dialer's fresh `nonce_d`. MACs are compared in constant time
//! (`Mac::verify_slice`). The `id` is bound into both MACs; the listener
//! checks it against its configuration (a role key proves the role, not
//! which member of it the peer is).

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::keys::{Key, Keyring, Role};
use crate::random;

pub const HELLO_BYTES: usize = 56;
pub const CHALLENGE_BYTES: usize = 64;
pub const PROOF_BYTES: usize = 32;
pub const VERDICT_ACCEPTED: u8 = 1;
/// Sent before closing on a bad proof, so the dialer can tell a refusal
/// (final) from a connection that broke (worth a retry).
pub const VERDICT_REFUSED: u8 = 0;
const MAGIC: [u8; 8] = *b"TNDMAUTH";
const VERSION: u8 = 1;
const NONCE_BYTES: usize = 32;

/// Who the listener now knows it is talking to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub role: Role,
    /// The id the dialer claimed (a node id, a compute node id, or 0); the
    /// listener must check it against its configuration.
    pub id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// Not a Tandem handshake (wrong magic or version).
    NotTandem,
    /// A role this listener does not serve, or whose key it lacks.
    RoleRefused(Option<Role>),
    /// The other side does not hold the role's key (or replayed a transcript).
    BadProof,
    /// The dialer holds no key for the role it wants to act as.
    NoKey(Role),
    /// The handshake did not finish before its deadline.
    Deadline,
    /// The connection failed or closed mid-handshake.
    Io(String),
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::NotTandem => f.write_str("not a Tandem handshake"),
            AuthError::RoleRefused(Some(r)) => write!(f, "the {r} role is not accepted here"),
            AuthError::RoleRefused(None) => f.write_str("an unknown role"),
            AuthError::BadProof => {
                f.write_str("authentication failed (wrong key, or a replayed handshake)")
            }
            AuthError::NoKey(r) => write!(f, "no {r} credential to authenticate with"),
            AuthError::Deadline => f.write_str("the handshake did not finish in time"),
            AuthError::Io(e) => write!(f, "the connection failed during the handshake: {e}"),
        }
    }
}

impl std::error::Error for AuthError {}

impl AuthError {
    /// As an I/O error kind: a refusal is final (`PermissionDenied`); a
    /// connection that broke or ran out of time is worth another try.
    pub fn io_kind(&self) -> std::io::ErrorKind {
        match self {
            AuthError::Io(_) => std::io::ErrorKind::ConnectionAborted,
            AuthError::Deadline => std::io::ErrorKind::TimedOut,
            _ => std::io::ErrorKind::PermissionDenied,
        }
    }
}

fn mac(key: &Key, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key.bytes()).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m
}

/// The dialer's side.
pub struct ClientHandshake {
    key: Key,
    hello: [u8; HELLO_BYTES],
}

impl ClientHandshake {
    /// Start as `role` claiming `id`; send the returned HELLO.
    pub fn start(
        keys: &Keyring,
        role: Role,
        id: u64,
    ) -> Result<(Self, [u8; HELLO_BYTES]), AuthError> {
        let key = keys.get(role).ok_or(AuthError::NoKey(role))?.clone();
        let mut hello = [0u8; HELLO_BYTES];
        hello[..8].copy_from_slice(&MAGIC);
        hello[8] = VERSION;
        hello[9] = role as u8;
        hello[16..24].copy_from_slice(&id.to_le_bytes());
        hello[24..].copy_from_slice(&random::bytes::<NONCE_BYTES>());
        Ok((ClientHandshake { key, hello }, hello))
    }

    /// Check the listener's CHALLENGE; the PROOF to send back.
    pub fn challenge(&self, msg: &[u8; CHALLENGE_BYTES]) -> Result<[u8; PROOF_BYTES], AuthError> {
        let (nonce, mac_l) = msg.split_at(NONCE_BYTES);
        mac(&self.key, &[b"tandem/v1/listener", &self.hello, nonce])
            .verify_slice(mac_l)
            .map_err(|_| AuthError::BadProof)?;
        let proof = mac(&self.key, &[b"tandem/v1/dialer", &self.hello, nonce, mac_l]).finalize();
        Ok(proof.into_bytes().into())
    }
}

/// The listener's side: feed it [`ServerHandshake::need`] bytes at a time.
pub struct ServerHandshake {
    keys: Keyring,
    allowed: Vec<Role>,
    state: State,
}

enum State {
    Hello,
    Proof {
        hello: [u8; HELLO_BYTES],
        challenge: [u8; CHALLENGE_BYTES],
        role: Role,
    },
    Done,
}

/// What the listener does after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Send these bytes, then read [`ServerHandshake::need`] more.
    Send([u8; CHALLENGE_BYTES]),
    /// Authenticated: send the verdict byte and go on with the protocol.
    Done(Peer),
}

impl ServerHandshake {
    /// A listener that holds `keys` and serves the `allowed` roles.
    pub fn new(keys: &Keyring, allowed: &[Role]) -> Self {
        ServerHandshake {
            keys: keys.clone(),
            allowed: allowed.to_vec(),
            state: State::Hello,
        }
    }

    /// Bytes the next message has (0 once done).
    pub fn need(&self) -> usize {
        match self.state {
            State::Hello => HELLO_BYTES,
            State::Proof { .. } => PROOF_BYTES,
            State::Done => 0,
        }
    }

    /// Take exactly [`ServerHandshake::need`] bytes.
    pub fn take(&mut self, msg: &[u8]) -> Result<Next, AuthError> {
        assert_eq!(
            msg.len(),
            self.need(),
            "a handshake message has a fixed size"
        );
        match std::mem::replace(&mut self.state, State::Done) {
            State::Hello => self.hello(msg.try_into().unwrap()),
            State::Proof {
                hello,
                challenge,
                role,
            } => {
                let (nonce, mac_l) = challenge.split_at(NONCE_BYTES);
                let key = self.keys.get(role).expect("checked at the hello");
                mac(key, &[b"tandem/v1/dialer", &hello, nonce, mac_l])
                    .verify_slice(msg)
                    .map_err(|_| AuthError::BadProof)?;
                let id = u64::from_le_bytes(hello[16..24].try_into().unwrap());
                Ok(Next::Done(Peer { role, id }))
            }
            State::Done => unreachable!("need() is 0 once done"),
        }
    }

    fn hello(&mut self, hello: [u8; HELLO_BYTES]) -> Result<Next, AuthError> {
        if hello[..8] != MAGIC || hello[8] != VERSION || hello[10..16] != [0; 6] {
            return Err(AuthError::NotTandem);
        }
        let role = Role::from_u8(hello[9]).ok_or(AuthError::RoleRefused(None))?;
        let key = match self.keys.get(role) {
            Some(k) if self.allowed.contains(&role) => k,
            _ => return Err(AuthError::RoleRefused(Some(role))),
        };
        let mut challenge = [0u8; CHALLENGE_BYTES];
        challenge[..NONCE_BYTES].copy_from_slice(&random::bytes::<NONCE_BYTES>());
        let mac_l = mac(
            key,
            &[b"tandem/v1/listener", &hello, &challenge[..NONCE_BYTES]],
        )
        .finalize();
        challenge[NONCE_BYTES..].copy_from_slice(&mac_l.into_bytes());
        self.state = State::Proof {
            hello,
            challenge,
            role,
        };
        Ok(Next::Send(challenge))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> Keyring {
        Keyring::from_master_hex(&Keyring::new_master_hex()).unwrap()
    }

    /// Run a whole handshake in memory; the listener's verdict.
    fn run(
        dialer: &Keyring,
        listener: &Keyring,
        role: Role,
        allowed: &[Role],
    ) -> Result<Peer, AuthError> {
        let (c, hello) = ClientHandshake::start(dialer, role, 7)?;
        let mut s = ServerHandshake::new(listener, allowed);
        let Next::Send(ch) = s.take(&hello)? else {
            panic!("a challenge first")
        };
        let proof = c.challenge(&ch)?;
        match s.take(&proof)? {
            Next::Done(p) => Ok(p),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_same_key_authenticates_both_ways_and_a_wrong_one_neither() {
        let k = ring();
        assert_eq!(
            run(&k, &k, Role::Peer, &[Role::Peer]),
            Ok(Peer {
                role: Role::Peer,
                id: 7
            })
        );
        // The dialer finds out first: the listener's MAC does not verify.
        assert_eq!(
            run(&ring(), &k, Role::Peer, &[Role::Peer]),
            Err(AuthError::BadProof)
        );
    }

    #[test]
    fn a_role_the_listener_does_not_serve_or_lacks_is_refused_at_the_hello() {
        let k = ring();
        let compute_only = k.only(&[Role::Compute]);
        assert_eq!(
            run(&k, &k, Role::Admin, &[Role::Compute]),
            Err(AuthError::RoleRefused(Some(Role::Admin)))
        );
        assert_eq!(
            run(
                &k,
                &compute_only,
                Role::Admin,
                &[Role::Admin, Role::Compute]
            ),
            Err(AuthError::RoleRefused(Some(Role::Admin)))
        );
        // A compute node's keyring cannot dial as admin at all.
        assert_eq!(
            run(&compute_only, &k, Role::Admin, &[Role::Admin]).unwrap_err(),
            AuthError::NoKey(Role::Admin)
        );
        // Another role's key does not pass for this one.
        let mut forged = Keyring::default();
        forged.set(Role::Admin, k.get(Role::Compute).unwrap().clone());
        assert_eq!(
            run(&forged, &k, Role::Admin, &[Role::Admin]),
            Err(AuthError::BadProof)
        );
    }

    #[test]
    fn a_recorded_transcript_replays_nowhere() {
        let k = ring();
        let (c, hello) = ClientHandshake::start(&k, Role::Compute, 1).unwrap();
        let mut s = ServerHandshake::new(&k, &[Role::Compute]);
        let Next::Send(ch) = s.take(&hello).unwrap() else {
            panic!()
        };
        let proof = c.challenge(&ch).unwrap();
        assert!(matches!(s.take(&proof), Ok(Next::Done(_))));
        // Replay the dialer's messages to a new listener: a fresh nonce.
        let mut s2 = ServerHandshake::new(&k, &[Role::Compute]);
        let Next::Send(ch2) = s2.take(&hello).unwrap() else {
            panic!()
        };
        assert_ne!(ch, ch2);
        assert_eq!(s2.take(&proof), Err(AuthError::BadProof));
        // Replay the listener's challenge to a new dialer: a fresh nonce.
        let (c2, _) = ClientHandshake::start(&k, Role::Compute, 1).unwrap();
        assert_eq!(c2.challenge(&ch), Err(AuthError::BadProof));
        // Reflect the listener's MAC as a proof: the labels differ.
        let mut s3 = ServerHandshake::new(&k, &[Role::Compute]);
        let Next::Send(ch3) = s3.take(&hello).unwrap() else {
            panic!()
        };
        assert_eq!(s3.take(&ch3[32..]), Err(AuthError::BadProof));
    }

    #[test]
    fn a_tampered_id_or_garbage_hello_fails() {
        let k = ring();
        let (c, mut hello) = ClientHandshake::start(&k, Role::Peer, 1).unwrap();
        let mut s = ServerHandshake::new(&k, &[Role::Peer]);
        hello[16] = 2; // an attacker on the path rewrites the claimed id
        let Next::Send(ch) = s.take(&hello).unwrap() else {
            panic!()
        };
        assert_eq!(c.challenge(&ch), Err(AuthError::BadProof));
        let mut s = ServerHandshake::new(&k, &[Role::Peer]);
        assert_eq!(s.take(&[0xAB; HELLO_BYTES]), Err(AuthError::NotTandem));
    }
}
