//! Verbs, their completions and errors.

use std::fmt;

/// Bytes a verb carries: a write's data, a read's result.
pub type Bytes = Vec<u8>;

/// A doorbell batch: the verbs posted with one call.
pub type Batch = Vec<Verb>;

/// The completions of a batch, one per verb, in posting order.
pub type Completions = Vec<Completion>;

/// Build a [`Batch`] like `vec![...]`.
#[macro_export]
macro_rules! batch {
    ($elem:expr; $n:expr) => {
        vec![$elem; $n]
    };
    ($($verb:expr),* $(,)?) => {
        vec![$($verb),*]
    };
}

/// Buffers a queue pair's owner keeps from one batch to the next (an arena
/// per coordinator, docs/DESIGN.md §3): emptied batches, completion vectors and byte
/// buffers. Posting through [`crate::QueuePair::post_in`] takes from it and
/// gives back, so a warm owner's verbs allocate nothing on a backend that
/// executes in process; every backend accepts it. Each pool is bounded.
#[derive(Debug)]
pub struct VerbArena {
    batches: Vec<Batch>,
    completions: Vec<Completions>,
    /// Byte buffers by size: `[0]` of at most [`SMALL_BYTES`] capacity
    /// (words, short writes), `[1]` larger (slots, log records), so a
    /// large read does not take a word's buffer and grow it.
    bytes: [Vec<Bytes>; 2],
    /// The capacity of every buffer in `bytes`, summed.
    kept_bytes: usize,
    /// Buffers kept per pool, and byte buffers' capacity kept in all.
    keep: usize,
    keep_total: usize,
}

impl Default for VerbArena {
    fn default() -> Self {
        VerbArena::keeping(ARENA_KEEP)
    }
}

/// Buffers kept per pool: more than a transaction's batches in flight.
const ARENA_KEEP: usize = 256;
/// Byte buffers of at most this capacity are kept apart from larger ones.
const SMALL_BYTES: usize = 64;
/// Byte buffers larger than this are freed rather than kept (a rare large
/// read must not pin its memory in every coordinator that made one).
const ARENA_KEEP_BYTES: usize = 64 << 10;
/// The byte buffers kept, at most, by capacity (per arena).
const ARENA_KEEP_TOTAL: usize = 1 << 20;

impl VerbArena {
    /// An arena that keeps up to `keep` buffers per pool (and byte buffers
    /// of at most `keep` × 4 KiB in all, or the default's bound if larger):
    /// for an owner whose batches hold thousands of verbs.
    pub fn keeping(keep: usize) -> Self {
        VerbArena {
            batches: Vec::new(),
            completions: Vec::new(),
            bytes: [Vec::new(), Vec::new()],
            kept_bytes: 0,
            keep,
            keep_total: ARENA_KEEP_TOTAL.max(keep << 12),
        }
    }

    /// An empty batch.
    pub fn batch(&mut self) -> Batch {
        self.batches.pop().unwrap_or_default()
    }
    /// A batch of `verbs`.
    pub fn batch_of<const N: usize>(&mut self, verbs: [Verb; N]) -> Batch {
        let mut b = self.batch();
        b.extend(verbs);
        b
    }
    /// An empty completion vector.
    pub fn completions(&mut self) -> Completions {
        self.completions.pop().unwrap_or_default()
    }
    /// A buffer holding a copy of `data`.
    pub fn copy(&mut self, data: &[u8]) -> Bytes {
        let mut b = self.empty_bytes_for(data.len());
        b.extend_from_slice(data);
        b
    }
    /// A zeroed buffer of `len` bytes (a read's destination).
    pub fn zeroed(&mut self, len: usize) -> Bytes {
        let mut b = self.empty_bytes_for(len);
        b.resize(len, 0);
        b
    }
    /// An empty buffer (a large one if the arena has one).
    pub fn empty_bytes(&mut self) -> Bytes {
        self.empty_bytes_for(SMALL_BYTES + 1)
    }
    /// An empty buffer for `len` bytes: from the pool of its size, else a
    /// larger one, else a new one.
    pub fn empty_bytes_for(&mut self, len: usize) -> Bytes {
        let class = (len > SMALL_BYTES) as usize;
        let kept = match self.bytes[class].pop() {
            Some(b) => Some(b),
            None if class == 0 => self.bytes[1].pop(),
            None => None,
        };
        let mut b = kept.unwrap_or_else(|| Vec::with_capacity(len));
        self.kept_bytes -= b.capacity().min(self.kept_bytes);
        b.clear();
        b
    }
    /// A write of a copy of `data`.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Verb {
        Verb::Write {
            addr,
            data: self.copy(data),
        }
    }
    /// An 8-byte write.
    pub fn write_u64(&mut self, addr: u64, value: u64) -> Verb {
        self.write(addr, &value.to_le_bytes())
    }
    /// Take back a posted batch, and its writes' buffers.
    pub fn give_batch(&mut self, mut batch: Batch) {
        for v in batch.drain(..) {
            if let Verb::Write { data, .. } = v {
                self.give_bytes(data);
            }
        }
        if self.batches.len() < self.keep {
            self.batches.push(batch);
        }
    }
    /// Take back a batch's completions, and its reads' buffers.
    pub fn give(&mut self, mut done: Completions) {
        for c in done.drain(..) {
            if let Ok(VerbOutput::Read(b)) = c {
                self.give_bytes(b);
            }
        }
        if self.completions.len() < self.keep {
            self.completions.push(done);
        }
    }
    /// Take back a byte buffer.
    pub fn give_bytes(&mut self, b: Bytes) {
        let cap = b.capacity();
        let pool = &mut self.bytes[(cap > SMALL_BYTES) as usize];
        let room = self.kept_bytes + cap <= self.keep_total && pool.len() < self.keep;
        if room && (1..=ARENA_KEEP_BYTES).contains(&cap) {
            self.kept_bytes += cap;
            pool.push(b);
        }
    }
}

pub type MemNodeId = u16;
pub type ComputeNodeId = u16;

/// A one-sided verb. Addresses are byte offsets into the memory node's region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    Read {
        addr: u64,
        len: u32,
    },
    Write {
        addr: u64,
        data: Bytes,
    },
    /// 8-byte compare-and-swap; completes with the old value.
    Cas {
        addr: u64,
        expected: u64,
        new: u64,
    },
    /// 8-byte fetch-and-add (wrapping); completes with the old value.
    Faa {
        addr: u64,
        add: u64,
    },
}

/// A verb borrowed from where it lies (a received frame), so a memory
/// server executes it without copying it into a [`Verb`] first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbRef<'a> {
    Read { addr: u64, len: u32 },
    Write { addr: u64, data: &'a [u8] },
    Cas { addr: u64, expected: u64, new: u64 },
    Faa { addr: u64, add: u64 },
}

impl VerbRef<'_> {
    /// The same verb, owning its bytes.
    pub fn to_verb(self) -> Verb {
        match self {
            VerbRef::Read { addr, len } => Verb::Read { addr, len },
            VerbRef::Write { addr, data } => Verb::write_slice(addr, data),
            VerbRef::Cas { addr, expected, new } => Verb::Cas { addr, expected, new },
            VerbRef::Faa { addr, add } => Verb::Faa { addr, add },
        }
    }
}

impl Verb {
    /// This verb, borrowed.
    pub fn as_ref(&self) -> VerbRef<'_> {
        match self {
            Verb::Read { addr, len } => VerbRef::Read { addr: *addr, len: *len },
            Verb::Write { addr, data } => VerbRef::Write { addr: *addr, data },
            Verb::Cas { addr, expected, new } => VerbRef::Cas {
                addr: *addr,
                expected: *expected,
                new: *new,
            },
            Verb::Faa { addr, add } => VerbRef::Faa { addr: *addr, add: *add },
        }
    }

    pub fn read(addr: u64, len: u32) -> Verb {
        Verb::Read { addr, len }
    }
    pub fn write(addr: u64, data: impl Into<Bytes>) -> Verb {
        Verb::Write {
            addr,
            data: data.into(),
        }
    }
    /// Write `data` (copied; inline when short).
    pub fn write_slice(addr: u64, data: &[u8]) -> Verb {
        Verb::Write {
            addr,
            data: data.to_vec(),
        }
    }
    pub fn write_u64(addr: u64, value: u64) -> Verb {
        Verb::write_slice(addr, &value.to_le_bytes())
    }
    pub fn cas(addr: u64, expected: u64, new: u64) -> Verb {
        Verb::Cas {
            addr,
            expected,
            new,
        }
    }
    pub fn faa(addr: u64, add: u64) -> Verb {
        Verb::Faa { addr, add }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerbOutput {
    Read(Bytes),
    Write,
    Cas(u64),
    Faa(u64),
}

impl VerbOutput {
    /// The bytes of a read completion. Panics on any other kind: a caller
    /// matching completions to the verbs it posted knows the kind.
    pub fn into_bytes(self) -> Bytes {
        match self {
            VerbOutput::Read(b) => b,
            other => panic!("expected a read completion, got {other:?}"),
        }
    }
    /// The old value of a CAS or FAA completion.
    pub fn old_value(&self) -> u64 {
        match self {
            VerbOutput::Cas(v) | VerbOutput::Faa(v) => *v,
            other => panic!("expected an atomic completion, got {other:?}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbError {
    /// The compute node's access was revoked (active-link termination) or its key is wrong.
    Revoked,
    /// The address range lies outside the region.
    OutOfRange,
    /// An atomic at an address that is not 8-byte aligned.
    Misaligned,
    /// The memory node is down or the connection to it is lost.
    Unavailable,
}

impl fmt::Display for VerbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            VerbError::Revoked => "access revoked",
            VerbError::OutOfRange => "address out of range",
            VerbError::Misaligned => "misaligned atomic",
            VerbError::Unavailable => "memory node unavailable",
        };
        f.write_str(s)
    }
}

impl std::error::Error for VerbError {}

pub type Completion = Result<VerbOutput, VerbError>;

#[cfg(test)]
mod tests {
    use super::*;

    impl VerbArena {
        fn kept_buffers(&self) -> usize {
            self.bytes[0].len() + self.bytes[1].len()
        }
    }

    #[test]
    fn a_large_read_does_not_grow_a_word_buffer() {
        let mut a = VerbArena::default();
        a.give_bytes(Vec::with_capacity(8));
        a.give_bytes(Vec::with_capacity(300));
        let big = a.zeroed(264);
        assert_eq!(big.capacity(), 300, "the large pool's buffer");
        let word = a.zeroed(8);
        assert_eq!(word.capacity(), 8, "the small pool's buffer");
        let another = a.zeroed(16);
        assert!(another.capacity() >= 16);
    }

    #[test]
    fn the_arena_reuses_buffers_and_bounds_what_it_keeps() {
        let mut a = VerbArena::default();
        let w = a.write(0, &[1, 2, 3]);
        let Verb::Write { data, .. } = &w else {
            unreachable!()
        };
        let ptr = data.as_ptr();
        a.give_batch(vec![w, Verb::read(0, 8)]);
        let again = a.zeroed(2);
        assert_eq!(
            (again.as_ptr(), again.as_slice()),
            (ptr, &[0u8, 0][..]),
            "reused, zeroed"
        );
        assert_eq!(a.copy(&[9; 5]), vec![9; 5]);
        for _ in 0..2 * ARENA_KEEP {
            a.give_bytes(vec![0; 8]);
        }
        assert_eq!(a.kept_buffers(), ARENA_KEEP, "the pool is bounded");
        let mut b = VerbArena::default();
        b.give_bytes(Vec::with_capacity(ARENA_KEEP_BYTES + 1));
        b.give_bytes(Vec::new());
        assert!(
            b.kept_buffers() == 0,
            "no huge buffer and no empty one is kept"
        );
        for _ in 0..ARENA_KEEP {
            b.give_bytes(Vec::with_capacity(ARENA_KEEP_BYTES));
        }
        assert_eq!(b.kept_bytes, ARENA_KEEP_TOTAL, "bounded by bytes too");
        let n = b.kept_buffers();
        b.empty_bytes();
        assert_eq!(b.kept_bytes, (n - 1) * ARENA_KEEP_BYTES);
        b.bytes = Default::default();
        b.kept_bytes = 0;
        b.give(vec![
            Ok(VerbOutput::Read(vec![1; 16])),
            Ok(VerbOutput::Write),
        ]);
        assert_eq!(
            (b.kept_buffers(), b.completions().capacity() >= 2),
            (1, true)
        );
    }
}
