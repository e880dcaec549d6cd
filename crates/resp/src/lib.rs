//! Redis's wire protocol (RESP2) as a Tandem store's front end speaks it:
//! requests in, replies out, every length bounded before anything is
//! allocated.
//!
//! A client's request is a flat array of bulk strings (`*2\r\n$3\r\nGET\r\n
//! $1\r\nk\r\n`) or, typed by hand, an inline line (`GET k\r\n`). That is
//! all a server ever has to parse, so [`Parser`] parses that subset and
//! nothing else: a nested array, a negative or oversized length, a missing
//! CRLF is a protocol error, answered and followed by closing the
//! connection, as Redis does. The parser is incremental: it keeps its
//! place between reads, so a request that arrives a byte at a time costs
//! no more than one that arrives whole (a general frame decoder that
//! starts over on every partial read would be quadratic under slow bytes),
//! and what it buffers is bounded by [`Limits`].
//!
//! [`Reply`] encodes the answers (simple strings, errors, integers, bulk
//! strings, nil, arrays); [`control`] answers the commands of a connection
//! rather than of a store, the same on every front end.

pub mod blocking;
pub mod control;
mod parse;
mod reply;

pub use control::{Conn, Server};
pub use parse::{Limits, Parser, ProtocolError};
pub use reply::Reply;

/// One command: its name and arguments, as the client sent them.
pub type Request = Vec<Vec<u8>>;

/// A key's 64-bit hash (FNV-1a), for stores whose keys are 64-bit words.
pub fn fnv1a64(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A 64-bit integer written as Redis writes one (`42`, `-7`; not `007`,
/// `+7` or `-0`): the values of stores that keep 64-bit words.
pub fn canonical_int(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?;
    let n: i64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// The refusal of a value that is not such an integer.
pub fn not_an_integer(store: &str, v: &[u8]) -> Reply {
    Reply::err(format!(
        "ERR {store} stores 64-bit integers; '{}' is not one (values are written as Redis writes integers)",
        String::from_utf8_lossy(&v[..v.len().min(64)])
    ))
}
