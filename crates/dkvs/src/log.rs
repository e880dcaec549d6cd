//! Log records (docs/DESIGN.md §4.4 step 2; Pandora paper §3.1.4).
//!
//! Pandora writes ONE record per transaction, after all its locks are held,
//! into the coordinator's fixed log slot on each of its f+1 log nodes. The
//! record is self-validating: a magic, a length and a checksum over everything
//! but the state word, so a torn or stale-garbage record is recognisable.
//! Aborting a logged transaction, and recovery, flip the state word to
//! `INVALID` with a single 8-byte write.
//!
//! FORD mode writes per-object undo entries (same entry format) into the log
//! slot of every replica of the object; traditional mode additionally appends
//! lock-log entries (table, key, slot) before each lock.
//!
//! Slot layout: `[record area: log_slot_bytes/2][lock-log area: log_slot_bytes/2]`.

use crate::config::TableId;
use tandem_fabric::MemNodeId;

pub const MAGIC: u32 = 0x544E_444D; // "TNDM"
pub const STATE_VALID: u32 = 1;
pub const STATE_INVALID: u32 = 2;
/// Header: state word, magic|len, coordinator|n_entries, tx_seq, checksum.
pub const HEADER_BYTES: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpKind {
    Update = 1,
    Insert = 2,
    Delete = 3,
    /// A tombstone returned to the empty state (slot reclamation).
    Reclaim = 4,
}

impl OpKind {
    fn from_u8(v: u8) -> Option<OpKind> {
        match v {
            1 => Some(OpKind::Update),
            2 => Some(OpKind::Insert),
            3 => Some(OpKind::Delete),
            4 => Some(OpKind::Reclaim),
            _ => None,
        }
    }
}

/// One logged object: enough to roll it back or forward on every replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub table: TableId,
    pub op: OpKind,
    pub key: u64,
    pub old_version: u64,
    pub new_version: u64,
    pub old_flags: u64,
    /// (memory node, slot address) of every replica, primary first.
    pub replicas: Vec<(MemNodeId, u64)>,
    /// Undo image of the value.
    pub old_value: Vec<u8>,
}

impl LogEntry {
    pub fn encoded_len(&self) -> usize {
        entry_len(self.replicas.len(), self.old_value.len())
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        encode_entry(
            out,
            self.head(),
            self.replicas.iter().copied(),
            &self.old_value,
        );
    }

    fn head(&self) -> EntryHead {
        EntryHead {
            table: self.table,
            op: self.op,
            key: self.key,
            old_version: self.old_version,
            new_version: self.new_version,
            old_flags: self.old_flags,
        }
    }

    fn decode(b: &[u8]) -> Option<(LogEntry, usize)> {
        let u64_at = |i: usize| {
            b.get(i..i + 8)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        };
        let table = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?);
        let op = OpKind::from_u8(*b.get(4)?)?;
        let nrep = *b.get(5)? as usize;
        let vlen = u16::from_le_bytes(b.get(6..8)?.try_into().ok()?) as usize;
        let mut e = LogEntry {
            table,
            op,
            key: u64_at(8)?,
            old_version: u64_at(16)?,
            new_version: u64_at(24)?,
            old_flags: u64_at(32)?,
            replicas: Vec::with_capacity(nrep),
            old_value: Vec::new(),
        };
        let mut pos = 40;
        for _ in 0..nrep {
            e.replicas
                .push((u64_at(pos)? as MemNodeId, u64_at(pos + 8)?));
            pos += 16;
        }
        e.old_value = b.get(pos..pos + vlen)?.to_vec();
        Some((e, pos + vlen))
    }
}

/// The fixed fields of a log entry, for encoding one without building a
/// [`LogEntry`] (the commit path encodes straight from its write set).
#[derive(Clone, Copy, Debug)]
pub struct EntryHead {
    pub table: TableId,
    pub op: OpKind,
    pub key: u64,
    pub old_version: u64,
    pub new_version: u64,
    pub old_flags: u64,
}

/// Encoded size of an entry with `replicas` replicas and an undo image of `value_len` bytes.
pub fn entry_len(replicas: usize, value_len: usize) -> usize {
    40 + 16 * replicas + value_len.div_ceil(8) * 8
}

/// Append one entry to a record begun with [`begin_record`].
pub fn encode_entry(
    out: &mut Vec<u8>,
    h: EntryHead,
    replicas: impl ExactSizeIterator<Item = (MemNodeId, u64)>,
    old_value: &[u8],
) {
    let vlen = old_value.len().div_ceil(8) * 8;
    out.extend_from_slice(&h.table.to_le_bytes());
    out.push(h.op as u8);
    out.push(replicas.len() as u8);
    out.extend_from_slice(&(vlen as u16).to_le_bytes());
    for w in [h.key, h.old_version, h.new_version, h.old_flags] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for (n, a) in replicas {
        out.extend_from_slice(&(n as u64).to_le_bytes());
        out.extend_from_slice(&a.to_le_bytes());
    }
    let start = out.len();
    out.extend_from_slice(old_value);
    out.resize(start + vlen, 0);
}

/// Start a record in `out` (cleared): a valid state word and room for the header.
pub fn begin_record(out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(STATE_VALID as u64).to_le_bytes());
    out.extend_from_slice(&[0u8; 32]);
}

/// Seal a record whose `entries` entries follow the header: length, owner, checksum.
pub fn finish_record(out: &mut [u8], coordinator: u16, entries: usize, tx_seq: u64) {
    let len = out.len() as u32;
    out[8..12].copy_from_slice(&MAGIC.to_le_bytes());
    out[12..16].copy_from_slice(&len.to_le_bytes());
    out[16..18].copy_from_slice(&coordinator.to_le_bytes());
    out[20..24].copy_from_slice(&(entries as u32).to_le_bytes());
    out[24..32].copy_from_slice(&tx_seq.to_le_bytes());
    let sum = checksum(&[&out[8..32], &out[HEADER_BYTES..]]);
    out[32..40].copy_from_slice(&sum.to_le_bytes());
}

/// A transaction's log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub coordinator: u16,
    pub tx_seq: u64,
    pub entries: Vec<LogEntry>,
}

/// Order-sensitive 64-bit checksum over the 8-byte words of `parts` (each
/// part's length a multiple of 8 except possibly the last), plus a length tweak.
pub fn checksum(parts: &[&[u8]]) -> u64 {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut h: u64 = 0x6A09_E667_F3BC_C908 ^ len as u64;
    let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    for part in parts {
        let mut chunks = part.chunks_exact(8);
        for c in &mut chunks {
            h = mix(h, u64::from_le_bytes(c.try_into().unwrap()));
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut w = [0u8; 8];
            w[..tail.len()].copy_from_slice(tail);
            h = mix(h, u64::from_le_bytes(w));
        }
    }
    h ^ (h >> 32)
}

impl LogRecord {
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + self.entries.iter().map(|e| e.encoded_len()).sum::<usize>()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        begin_record(&mut out);
        for e in &self.entries {
            e.encode_into(&mut out);
        }
        finish_record(&mut out, self.coordinator, self.entries.len(), self.tx_seq);
        out
    }

    /// Whether `b` starts with a valid-state header (the length may exceed `b`).
    pub fn header_plausible(b: &[u8]) -> bool {
        b.len() >= HEADER_BYTES
            && u64::from_le_bytes(b[0..8].try_into().unwrap()) == STATE_VALID as u64
            && u32::from_le_bytes(b[8..12].try_into().unwrap()) == MAGIC
    }

    /// Decode a record from the start of a log slot. `None` if the slot holds
    /// no record, an invalidated one, or a torn/corrupt one.
    pub fn decode(b: &[u8]) -> Option<LogRecord> {
        if b.len() < HEADER_BYTES {
            return None;
        }
        let state = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let magic = u32::from_le_bytes(b[8..12].try_into().unwrap());
        let len = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        if state != STATE_VALID as u64 || magic != MAGIC || len < HEADER_BYTES || len > b.len() {
            return None;
        }
        let sum = u64::from_le_bytes(b[32..40].try_into().unwrap());
        if checksum(&[&b[8..32], &b[HEADER_BYTES..len]]) != sum {
            return None;
        }
        let coordinator = u16::from_le_bytes(b[16..18].try_into().unwrap());
        let n = u32::from_le_bytes(b[20..24].try_into().unwrap()) as usize;
        let tx_seq = u64::from_le_bytes(b[24..32].try_into().unwrap());
        let mut entries = Vec::with_capacity(n.min(1024));
        let mut pos = HEADER_BYTES;
        for _ in 0..n {
            let (e, used) = LogEntry::decode(&b[pos..len])?;
            entries.push(e);
            pos += used;
        }
        (pos == len).then_some(LogRecord {
            coordinator,
            tx_seq,
            entries,
        })
    }
}

impl LogRecord {
    /// Records appended back to back from the start of an area (FORD's undo
    /// entries, traditional's lock-log entries), up to the first invalid one.
    pub fn decode_all(b: &[u8]) -> Vec<LogRecord> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos + HEADER_BYTES <= b.len() {
            match LogRecord::decode(&b[pos..]) {
                Some(r) => {
                    pos += r.encoded_len();
                    out.push(r);
                }
                None => break,
            }
        }
        out
    }
}

/// The 8 bytes that invalidate a record (written at the slot's offset 0).
pub fn invalid_state_word() -> u64 {
    STATE_INVALID as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LogRecord {
        LogRecord {
            coordinator: 42,
            tx_seq: 99,
            entries: vec![
                LogEntry {
                    table: 1,
                    op: OpKind::Update,
                    key: 5,
                    old_version: 10,
                    new_version: 11,
                    old_flags: 1,
                    replicas: vec![(0, 4096), (2, 8192)],
                    old_value: vec![1, 2, 3],
                },
                LogEntry {
                    table: 0,
                    op: OpKind::Insert,
                    key: 6,
                    old_version: 0,
                    new_version: 12,
                    old_flags: 0,
                    replicas: vec![(1, 64)],
                    old_value: vec![0; 40],
                },
            ],
        }
    }

    #[test]
    fn record_round_trips() {
        let r = sample();
        let b = r.encode();
        assert_eq!(b.len(), r.encoded_len());
        let mut expect = r.clone();
        expect.entries[0].old_value.resize(8, 0);
        assert_eq!(LogRecord::decode(&b), Some(expect));
    }

    #[test]
    fn torn_invalidated_or_corrupt_records_are_rejected() {
        let b = sample().encode();
        for cut in [0, 8, 39, 40, b.len() - 1] {
            let mut torn = b.clone();
            torn[cut..].fill(0xA5);
            assert_eq!(LogRecord::decode(&torn), None, "torn at {cut}");
        }
        let mut inval = b.clone();
        inval[0..8].copy_from_slice(&invalid_state_word().to_le_bytes());
        assert_eq!(LogRecord::decode(&inval), None);
        for i in 8..b.len() {
            let mut flip = b.clone();
            flip[i] ^= 0x10;
            assert_eq!(
                LogRecord::decode(&flip),
                None,
                "bit flip at byte {i} must be detected"
            );
        }
        assert_eq!(LogRecord::decode(&[]), None);
    }
}
