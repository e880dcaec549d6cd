//! How a Redis key and value sit in a Pandora slot.
//!
//! Pandora's keys are 64-bit and its values fixed-size; Redis's keys and
//! values are byte strings. A key is hashed to its slot key (FNV-1a), and
//! the slot holds the key itself beside the value, so two keys that hash
//! alike are told apart: the second is refused with an error, never
//! stored over the first. Each record carries a write count, so `WATCH`
//! sees a write that put back the same value.
//!
//! Layout: key length (u16), value length (u32), write count (u64), the
//! key's bytes, the value's bytes; little-endian; the rest of the slot zero.

use tandem_dkvs::slot::NO_KEY;

const HEAD: usize = 2 + 4 + 8;

/// A stored key and value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub writes: u64,
}

/// The slot key of `key` (FNV-1a, 64 bits; Pandora reserves `u64::MAX`).
pub fn slot_key(key: &[u8]) -> u64 {
    let h = tandem_resp::fnv1a64(key);
    if h == NO_KEY {
        h - 1
    } else {
        h
    }
}

/// Bytes of key and value together a slot of `value_size` bytes holds.
pub fn capacity(value_size: usize) -> usize {
    value_size.saturating_sub(HEAD)
}

impl Record {
    pub fn encode(&self, value_size: usize) -> Option<Vec<u8>> {
        if self.key.len() + self.value.len() > capacity(value_size)
            || self.key.len() > u16::MAX as usize
        {
            return None;
        }
        let mut b = Vec::with_capacity(value_size);
        b.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.writes.to_le_bytes());
        b.extend_from_slice(&self.key);
        b.extend_from_slice(&self.value);
        b.resize(value_size, 0);
        Some(b)
    }

    /// `None`: not a record (a slot this layer did not write).
    pub fn decode(b: &[u8]) -> Option<Record> {
        let klen = u16::from_le_bytes(b.get(0..2)?.try_into().ok()?) as usize;
        let vlen = u32::from_le_bytes(b.get(2..6)?.try_into().ok()?) as usize;
        let writes = u64::from_le_bytes(b.get(6..14)?.try_into().ok()?);
        let key = b.get(HEAD..HEAD + klen)?.to_vec();
        let value = b.get(HEAD + klen..HEAD + klen + vlen)?.to_vec();
        Some(Record { key, value, writes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_an_oversized_one_is_refused() {
        let r = Record {
            key: b"user:1".to_vec(),
            value: b"x".repeat(10),
            writes: 7,
        };
        let b = r.encode(64).unwrap();
        assert_eq!(b.len(), 64);
        assert_eq!(Record::decode(&b), Some(r.clone()));
        assert_eq!(capacity(64), 50);
        let big = Record {
            value: b"x".repeat(45),
            ..r
        };
        assert!(big.encode(64).is_none());
        assert_ne!(slot_key(b"a"), slot_key(b"b"));
    }
}
