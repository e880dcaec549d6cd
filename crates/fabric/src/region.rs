//! The memory behind a [`MemoryNode`](crate::MemoryNode): one mapping that
//! holds the node's access-control tables and its words, so that the same
//! bytes can be private to one process or shared by several (the shm
//! backend of docs/DESIGN.md §3: memory nodes as memfd regions mapped by
//! compute processes).
//!
//! Layout, every part 8-byte aligned and the words page-aligned:
//!
//! | offset | what |
//! |---|---|
//! | 0 | header: magic, layout version, number of words |
//! | `KEYS` | current region key of each compute node: two `u64`s, low then high (low 0 = none) |
//! | `EXECUTING` | batches of each compute node executing now (`u32`) |
//! | `FENCED` | whether each compute node was revoked (`u8`, 0 or 1) |
//! | `WORDS` | the region itself, as 8-byte words |
//!
//! Everything after the header is only ever accessed through atomics, from
//! any process that maps it: a CAS here is a real `lock cmpxchg` on memory
//! that every mapper sees.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

use memmap2::{MmapOptions, MmapRaw};

/// Compute-node ids have 16 bits: one table entry for each.
pub(crate) const KEY_SLOTS: usize = 1 << 16;

const MAGIC: u64 = u64::from_le_bytes(*b"TANDEMMN");
const LAYOUT_VERSION: u64 = 2;
const HEADER: usize = 64;
const KEYS: usize = HEADER;
const EXECUTING: usize = KEYS + KEY_SLOTS * 16;
const FENCED: usize = EXECUTING + KEY_SLOTS * 4;
const WORDS: usize = (FENCED + KEY_SLOTS).next_multiple_of(4096);

/// Map every page of an attached region now, as an RDMA registration pins
/// and maps a region before the first verb: otherwise each page's first
/// verb in this process takes a page fault, several microseconds on a busy
/// host. A recovery coordinator that maps the regions at startup and first
/// touches them during recovery paid 800-1,200 of them at 512 coordinators
/// (3-5 ms of a 5-7 ms log recovery). The pages are shared with the memory
/// server, so for a region its store fills this costs page tables, not
/// memory; a region larger than its store becomes resident in full. A hint:
/// on a kernel without `MADV_POPULATE_WRITE` (before 5.14) pages fault in
/// lazily.
fn populate(map: &MmapRaw) {
    // SAFETY: the range is this mapping, which stays alive across the call;
    // populating changes no byte of it.
    let r = unsafe {
        libc::madvise(
            map.as_mut_ptr().cast(),
            map.len(),
            libc::MADV_POPULATE_WRITE,
        )
    };
    if r != 0 {
        log::debug!(
            "region: pages not populated at attach ({}); they fault in on first use",
            io::Error::last_os_error()
        );
    }
}

/// One mapping holding a memory node's tables and words.
pub(crate) struct Region {
    map: MmapRaw,
    words: usize,
    /// The memfd behind a shared region (what is handed to compute processes).
    fd: Option<File>,
}

impl Region {
    /// A private, zeroed region of `words` words (pages are touched lazily).
    pub(crate) fn private(words: usize) -> io::Result<Region> {
        let map = MmapOptions::new().len(Self::bytes(words)?).map_anon()?;
        Self::init(MmapRaw::from(map), words, None)
    }

    /// A zeroed region in a fresh memfd, which [`Region::fd`] hands out.
    pub(crate) fn shared(words: usize, name: &str) -> io::Result<Region> {
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        let len = Self::bytes(words)?;
        file.set_len(len as u64)?;
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        Self::init(map, words, Some(file))
    }

    /// Map a shared region another process created; its header must say so.
    pub(crate) fn attach(fd: OwnedFd) -> io::Result<Region> {
        let file = File::from(fd);
        let len = file.metadata()?.len();
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        if len < WORDS as u64 {
            return Err(bad(format!(
                "a region of {len} bytes has no room for its tables"
            )));
        }
        let map = MmapOptions::new().len(len as usize).map_raw(&file)?;
        let header = |i: usize| unsafe { (map.as_ptr() as *const AtomicU64).add(i).as_ref() };
        let load = |i| header(i).map_or(0, |w| w.load(std::sync::atomic::Ordering::SeqCst));
        let (magic, version, words) = (load(0), load(1), load(2) as usize);
        if magic != MAGIC || version != LAYOUT_VERSION {
            return Err(bad(format!(
                "not a memory-node region (magic {magic:#x}, layout {version})"
            )));
        }
        if Self::bytes(words).ok() != Some(len as usize) {
            return Err(bad(format!("{words} words do not match {len} bytes")));
        }
        populate(&map);
        Ok(Region {
            map,
            words,
            fd: None,
        })
    }

    fn bytes(words: usize) -> io::Result<usize> {
        words
            .checked_mul(8)
            .and_then(|w| w.checked_add(WORDS))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))
    }

    fn init(map: MmapRaw, words: usize, fd: Option<File>) -> io::Result<Region> {
        let r = Region { map, words, fd };
        let h = r.slice::<AtomicU64>(0, 3);
        h[2].store(words as u64, std::sync::atomic::Ordering::SeqCst);
        h[1].store(LAYOUT_VERSION, std::sync::atomic::Ordering::SeqCst);
        h[0].store(MAGIC, std::sync::atomic::Ordering::SeqCst);
        Ok(r)
    }

    /// `len` atomics of type `T` at byte `offset` of the mapping.
    fn slice<T>(&self, offset: usize, len: usize) -> &[T] {
        debug_assert!(offset + len * size_of::<T>() <= self.map.len());
        // SAFETY: the mapping lives as long as `self`, is zero-initialised or
        // written only through atomics, and every part is aligned for `T`
        // (the offsets above are multiples of 8 and the mapping page-aligned).
        // `T` is an atomic type, valid for any bit pattern its mappers store.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(offset) as *const T, len) }
    }

    /// Two words per compute node: the key's low half (0: no key), then its high half.
    pub(crate) fn keys(&self) -> &[AtomicU64] {
        self.slice(KEYS, 2 * KEY_SLOTS)
    }

    pub(crate) fn executing(&self) -> &[AtomicU32] {
        self.slice(EXECUTING, KEY_SLOTS)
    }

    pub(crate) fn fenced(&self) -> &[AtomicU8] {
        self.slice(FENCED, KEY_SLOTS)
    }

    pub(crate) fn words(&self) -> &[AtomicU64] {
        self.slice(WORDS, self.words)
    }

    /// The memfd of a region made by [`Region::shared`].
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Minor page faults this thread has taken so far.
    fn minor_faults() -> i64 {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `u` is a valid rusage to fill in.
        assert_eq!(
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) },
            0
        );
        // SAFETY: getrusage succeeded and filled it in.
        unsafe { u.assume_init() }.ru_minflt
    }

    #[test]
    fn an_attached_region_takes_no_page_fault_on_first_touch() {
        const PAGES: usize = 2048;
        let made = Region::shared(PAGES * 512, "test-populate").unwrap();
        // The server has written every page (as loading a store does).
        made.words()
            .iter()
            .step_by(512)
            .for_each(|w| w.store(7, Ordering::SeqCst));
        let fd = made.fd().unwrap().try_clone_to_owned().unwrap();
        let attached = Region::attach(fd).unwrap();
        let before = minor_faults();
        let sum: u64 = attached
            .words()
            .iter()
            .step_by(512)
            .map(|w| w.load(Ordering::SeqCst))
            .sum();
        let faults = minor_faults() - before;
        assert_eq!(sum, 7 * PAGES as u64);
        assert!(
            faults < 16,
            "{faults} page faults touching {PAGES} pages of an attached region"
        );
    }
}
