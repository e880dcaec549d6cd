//! The value every litmus object holds: an application payload plus the
//! identity of the transaction that wrote it and of the version it replaced.
//!
//! Writer ids make every written version unique, so the history checker can
//! tell which transaction a read observed (the `wr` edges of Adya's DSG,
//! thesis §2.5.1.1), and `prev` chains the versions of an object when the
//! writer read the object first, which recovers the version order (`ww`, `rw`
//! edges) without any help from the store. A blind write (litmus 1,
//! the Pandora paper Fig. 5(a)) does not know what it replaces: `prev` is
//! [`PREV_UNKNOWN`].

use serde::{Deserialize, Serialize};

/// Writer id of the initial (loaded) version of every object.
pub const LOADER_TX: u64 = 0;
/// `prev` of a blind write.
pub const PREV_UNKNOWN: u64 = u64::MAX;
/// Bytes of an encoded value (the store's fixed value size).
pub const VALUE_BYTES: u32 = 24;

/// One version of a litmus object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Value {
    /// What the application sees (litmus 1: the writer's tag; litmus 2: 0/1;
    /// litmus 3: a counter).
    pub payload: i64,
    /// Id of the transaction that wrote this version ([`LOADER_TX`] if loaded).
    pub writer: u64,
    /// Writer of the version this one replaced, [`PREV_UNKNOWN`] for a blind
    /// write, [`LOADER_TX`] when it replaced the loaded version.
    pub prev: u64,
}

impl Value {
    /// The version loaded before the run.
    pub fn initial(payload: i64) -> Value {
        Value {
            payload,
            writer: LOADER_TX,
            prev: LOADER_TX,
        }
    }

    pub fn encode(&self) -> [u8; VALUE_BYTES as usize] {
        let mut b = [0u8; VALUE_BYTES as usize];
        b[0..8].copy_from_slice(&self.payload.to_le_bytes());
        b[8..16].copy_from_slice(&self.writer.to_le_bytes());
        b[16..24].copy_from_slice(&self.prev.to_le_bytes());
        b
    }

    /// Decode a stored value; `None` if it is not a litmus value (too short).
    pub fn decode(b: &[u8]) -> Option<Value> {
        if b.len() < VALUE_BYTES as usize {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Value {
            payload: w(0) as i64,
            writer: w(8),
            prev: w(16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_short_buffers_are_rejected() {
        let v = Value {
            payload: -7,
            writer: 42,
            prev: PREV_UNKNOWN,
        };
        assert_eq!(Value::decode(&v.encode()), Some(v));
        assert_eq!(Value::decode(&[0u8; 23]), None);
        assert_eq!(
            Value::initial(3),
            Value {
                payload: 3,
                writer: LOADER_TX,
                prev: LOADER_TX
            }
        );
    }
}
