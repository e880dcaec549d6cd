//! Who may talk to a Tandem process, and how it proves it (docs/DESIGN.md §8).
//!
//! Every listener — memory servers, the membership, the configuration
//! manager, message-passing nodes — runs [`ServerHandshake`] on a new
//! connection before it reads anything else, and every dialer runs
//! [`ClientHandshake`]. The handshake is a mutual challenge–response
//! keyed by the claimed [`Role`]'s 256-bit key: each side sends a fresh
//! 256-bit nonce from the OS's CSPRNG and proves it holds the key with an
//! HMAC-SHA256 over both nonces, so a recorded transcript replays nowhere.
//! Messages have fixed sizes, so a listener never allocates in proportion
//! to what an unauthenticated party sends.

pub mod dial;
pub mod gate;
pub mod handshake;
pub mod io;
pub mod keys;
pub mod random;

pub use gate::Gate;
pub use handshake::{
    AuthError, ClientHandshake, Next, Peer, ServerHandshake, CHALLENGE_BYTES, HELLO_BYTES,
    PROOF_BYTES, VERDICT_ACCEPTED, VERDICT_REFUSED,
};
pub use io::{accept, accept_then, connect, Stream, HANDSHAKE_DEADLINE};
pub use keys::{Key, Keyring, MasterSecret, Role};
