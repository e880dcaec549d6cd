//! Slot layout and the lock word (docs/DESIGN.md §4.2).
//!
//! ```text
//! offset 0   lock    u64   [coordinator_id:16 | tx_seq:47 | locked:1] (pandora) or 0/1 (ford)
//! offset 8   version u64   [coordinator_id:16 | counter:48]; 0 = slot never used
//! offset 16  key     u64
//! offset 24  flags   u64   bit 0 = live (clear: tombstone)
//! offset 32  value   value_bytes
//! ```
//! Lock and version are adjacent so one 16-byte read returns both.
//!
//! Torn reads: a read longer than 8 bytes is not atomic. Writers therefore
//! write `key|flags|value` first and the version *last* (two verbs, same queue
//! pair, so in order); readers read in ascending address order, so they read
//! the version *first*. A reader that sees the new version is then guaranteed
//! to see the new contents; a reader that sees the old version with new
//! contents fails validation, because by then the version has changed or the
//! writer still holds the lock. A version of 0 means "never committed": such a
//! slot is empty whatever its other words say.

pub const LOCK_OFF: u64 = 0;
pub const VERSION_OFF: u64 = 8;
pub const KEY_OFF: u64 = 16;
pub const SLOT_HEADER_BYTES: u32 = 32;
pub const FLAG_LIVE: u64 = 1;
/// The key of a tombstone nobody owns: recovery rolls an insert back to one,
/// so the slot stays occupied (keys behind it stay reachable) without
/// claiming for the inserted key a second slot. Reserved: no key may be it.
pub const NO_KEY: u64 = u64::MAX;

/// A lock word. In pandora mode it names its owner and the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockWord(pub u64);

const SEQ_MASK: u64 = (1 << 47) - 1;

impl LockWord {
    pub const UNLOCKED: LockWord = LockWord(0);
    /// FORD's owner-less lock.
    pub const ANONYMOUS: LockWord = LockWord(1);

    pub fn owned(coordinator: u16, tx_seq: u64) -> LockWord {
        LockWord(((coordinator as u64) << 48) | ((tx_seq & SEQ_MASK) << 1) | 1)
    }
    pub fn is_locked(self) -> bool {
        self.0 != 0
    }
    pub fn owner(self) -> u16 {
        (self.0 >> 48) as u16
    }
    pub fn tx_seq(self) -> u64 {
        (self.0 >> 1) & SEQ_MASK
    }
}

/// A stray lock (Pandora paper §4): a lock still held by a coordinator that
/// the membership declared failed. Its transaction will never release it;
/// any coordinator may steal it (PILL), and the background scan releases
/// those nobody touched once log recovery is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrayLock(LockWord);

impl StrayLock {
    /// `word` as a stray lock, if it is held by a coordinator in `failed`.
    pub fn of(word: LockWord, failed: &crate::FailedIds) -> Option<StrayLock> {
        (word.is_locked() && failed.contains(word.owner())).then_some(StrayLock(word))
    }
    /// The lock word a CAS that steals or releases it must expect.
    pub fn word(self) -> LockWord {
        self.0
    }
}

/// A version: unique per committed write without coordination.
pub fn make_version(coordinator: u16, counter: u64) -> u64 {
    debug_assert!(counter > 0 && counter < (1 << 48));
    ((coordinator as u64) << 48) | counter
}

/// The version bulk-loaded objects start with (coordinator id 0 is the loader's).
pub const LOADED_VERSION: u64 = 1;

/// A decoded slot, as read from memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotImage {
    pub lock: LockWord,
    pub version: u64,
    pub key: u64,
    pub flags: u64,
    pub value: Vec<u8>,
}

impl SlotImage {
    pub fn decode(bytes: &[u8]) -> SlotImage {
        let w = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        SlotImage {
            lock: LockWord(w(0)),
            version: w(1),
            key: w(2),
            flags: w(3),
            value: bytes[32..].to_vec(),
        }
    }
    /// Decode a slot read, keeping its buffer for the value.
    pub fn from_bytes(mut bytes: Vec<u8>) -> SlotImage {
        let w = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        let (lock, version, key, flags) = (LockWord(w(0)), w(1), w(2), w(3));
        bytes.drain(..32);
        SlotImage {
            lock,
            version,
            key,
            flags,
            value: bytes,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.version == 0
    }
    pub fn is_live(&self) -> bool {
        !self.is_empty() && self.flags & FLAG_LIVE != 0
    }
    /// True if this (non-empty) slot belongs to `key`.
    pub fn holds(&self, key: u64) -> bool {
        !self.is_empty() && self.key == key
    }
}

/// The `key|flags|value` part written at offset `KEY_OFF` by a commit.
pub fn encode_body(key: u64, flags: u64, value: &[u8], value_bytes: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value_bytes as usize);
    encode_body_into(&mut out, key, flags, value, value_bytes);
    out
}

/// [`encode_body`], appended to `out`.
pub fn encode_body_into(out: &mut Vec<u8>, key: u64, flags: u64, value: &[u8], value_bytes: u32) {
    let start = out.len();
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(value);
    out.resize(start + 16 + value_bytes as usize, 0);
}

/// A whole slot image, for bulk loading.
pub fn encode_slot(version: u64, key: u64, flags: u64, value: &[u8], value_bytes: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + value_bytes as usize);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&encode_body(key, flags, value, value_bytes));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_word_packs_owner_and_sequence() {
        let w = LockWord::owned(0xBEEF, 12345);
        assert!(w.is_locked());
        assert_eq!(w.owner(), 0xBEEF);
        assert_eq!(w.tx_seq(), 12345);
        assert_ne!(LockWord::owned(1, 1), LockWord::owned(1, 2));
        assert_ne!(LockWord::owned(1, 1), LockWord::owned(2, 1));
        assert!(!LockWord::UNLOCKED.is_locked());
        assert_eq!(
            LockWord::owned(3, SEQ_MASK + 1).tx_seq(),
            0,
            "sequence wraps within 47 bits"
        );
    }

    #[test]
    fn slot_round_trips() {
        let bytes = encode_slot(make_version(2, 9), 77, FLAG_LIVE, b"hello", 8);
        let s = SlotImage::decode(&bytes);
        assert_eq!(
            (s.version, s.key, s.flags),
            (make_version(2, 9), 77, FLAG_LIVE)
        );
        assert_eq!(&s.value[..5], b"hello");
        assert!(s.is_live() && s.holds(77) && !s.holds(78));
        assert!(SlotImage::decode(&[0u8; 40]).is_empty());
    }
}
