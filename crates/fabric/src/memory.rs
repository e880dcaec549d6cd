//! A memory node's registered region and its access control: the passive side
//! of every backend (Pandora paper §2.1: memory servers run no transactional
//! logic, only verbs, setup and link termination).

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::region::Region;
use crate::shm::Process;

/// Batches this long or longer are prefetched before they execute (the
/// commit path's one- and two-verb batches are not: nothing to overlap).
const PREFETCH_FROM: usize = 3;
/// Cache lines prefetched per verb, at most.
const PREFETCH_LINES: u64 = 4;

/// Hint the CPU to bring the cache line at `p` in (x86-64; elsewhere nothing).
#[inline(always)]
fn prefetch_line(p: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

use crate::verb::{Bytes, Completion, ComputeNodeId, Verb, VerbError, VerbOutput, VerbRef};

/// A region key, issued to one compute node (like an RDMA rkey): 128 bits
/// from the OS's CSPRNG. Its low half is never zero.
pub type RegionKey = u128;

/// Registration refused: this compute-node incarnation was revoked. It must
/// rejoin under a new identity (new node id, new coordinator ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fenced(pub ComputeNodeId);

impl std::fmt::Display for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "compute node {} was revoked (fenced) and cannot register again; rejoin as a new incarnation", self.0)
    }
}

impl std::error::Error for Fenced {}

/// How long `revoke` spins on a verb in flight before it sleeps instead.
const REVOKE_SPINS: u32 = 1_000;

/// How long `revoke` waits for a compute process that maps a shared region
/// to finish the batch it is executing before it kills the process.
const SHM_DRAIN_GRACE: Duration = Duration::from_millis(20);

/// The memory of one memory node: a byte-addressed region stored as 8-byte
/// words, so CAS and FAA are real atomics and a long read really can tear.
///
/// The words and the access tables live in one [`Region`]: private to this
/// process, or a memfd that compute processes map (the shm backend). Either
/// way the same code checks keys and executes verbs, in whichever process
/// holds the mapping.
pub struct MemoryNode {
    /// Words; per compute node: its current key (0 means no access), the
    /// batches it is executing right now (revocation waits for them: once
    /// `revoke` returns, nothing of that node executes any more, Cor1, even a
    /// verb that passed its key check a moment before), and whether it was
    /// revoked here for good (fencing cannot be undone by a later
    /// registration: a falsely suspected node that registers after its
    /// revocation would otherwise act under ids already in everyone's
    /// failed-ids).
    region: Region,
    /// Test-only bug switch: registration ignores `fenced` (the behaviour
    /// before fencing was permanent), so simulations can show what it cost.
    revocable_fencing: AtomicBool,
    failed: AtomicBool,
    /// Processes that mapped this (shared) region, by compute node: what
    /// revocation kills if they do not drain.
    mappers: Mutex<Vec<(ComputeNodeId, Process)>>,
}

impl MemoryNode {
    /// A zeroed region of `size_bytes` (rounded up to 8). Region keys come
    /// from the OS's CSPRNG: no key tells anything about another.
    pub fn new(size_bytes: u64) -> Self {
        let region = Region::private(Self::words(size_bytes))
            .unwrap_or_else(|e| panic!("cannot map a region of {size_bytes} bytes: {e}"));
        Self::with_region(region)
    }

    /// A zeroed region in a memfd that compute processes on this host can
    /// map (the shm backend; see [`crate::shm`]).
    pub fn shared(size_bytes: u64) -> std::io::Result<Self> {
        let region = Region::shared(Self::words(size_bytes), "tandem-memory-node")?;
        Ok(Self::with_region(region))
    }

    /// A compute process's view of a shared region it was handed: it
    /// executes verbs, checking the key tables that the memory server keeps.
    pub(crate) fn attached(fd: OwnedFd) -> std::io::Result<Self> {
        Ok(Self::with_region(Region::attach(fd)?))
    }

    fn words(size_bytes: u64) -> usize {
        size_bytes.div_ceil(8) as usize
    }

    fn with_region(region: Region) -> Self {
        MemoryNode {
            region,
            revocable_fencing: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            mappers: Mutex::new(Vec::new()),
        }
    }

    /// The memfd of a [`MemoryNode::shared`] region.
    pub(crate) fn shared_fd(&self) -> Option<BorrowedFd<'_>> {
        self.region.fd()
    }

    /// Whether compute processes can map this node's region.
    pub fn is_shared(&self) -> bool {
        self.region.fd().is_some()
    }

    pub fn size_bytes(&self) -> u64 {
        self.region.words().len() as u64 * 8
    }

    /// Issue (or re-issue) a region key to `compute`; an older key stops
    /// working. A revoked incarnation gets none ([`Fenced`]), whenever its
    /// registration arrives: before, during or after the revocation.
    pub fn register(&self, compute: ComputeNodeId) -> Result<RegionKey, Fenced> {
        if self.is_fenced(compute) {
            return Err(Fenced(compute));
        }
        // Fresh from the OS's CSPRNG; its low half is never zero, nor the
        // low half it replaces. The old key dies first (low half cleared),
        // then the high half is written, then the low half publishes it.
        let (lo, hi) = self.key_words(compute);
        let old = lo.load(Ordering::SeqCst);
        let new_lo = loop {
            let k = tandem_auth::random::nonzero_u64();
            if k != old {
                break k;
            }
        };
        let new_hi = u64::from_le_bytes(tandem_auth::random::bytes::<8>());
        lo.store(0, Ordering::SeqCst);
        hi.store(new_hi, Ordering::SeqCst);
        lo.store(new_lo, Ordering::SeqCst);
        // A revocation that raced with us either saw our key (and cleared it)
        // or set `fenced` before we looked again: take the key back. Nobody
        // holds it yet, so no verb can have used it.
        if self.is_fenced(compute) {
            let _ = lo.compare_exchange(new_lo, 0, Ordering::SeqCst, Ordering::SeqCst);
            return Err(Fenced(compute));
        }
        Ok((new_hi as u128) << 64 | new_lo as u128)
    }

    /// Active-link termination, for good: every later verb of `compute`
    /// fails with `Revoked`, and it can never register again.
    pub fn revoke(&self, compute: ComputeNodeId) {
        self.region.fenced()[compute as usize].store(1, Ordering::SeqCst);
        self.key_words(compute).0.store(0, Ordering::SeqCst);
        self.await_drain(compute);
    }

    /// Wait until no batch of `compute` executes. A verb that saw the old key
    /// may still be running on another thread. Spin briefly, then sleep: the
    /// revoker may outrank that thread (the runner's membership thread is
    /// SCHED_FIFO), and on a shared core a spinning revoker keeps the verb
    /// from ever finishing, until the kernel's real-time throttling steps in
    /// about a second later. On a shared region the batch may be running in
    /// another process, which can be stopped or dead: after a grace period
    /// its processes are killed, and waited for ([`MemoryNode::fence_mappers`]).
    fn await_drain(&self, compute: ComputeNodeId) {
        let executing = &self.region.executing()[compute as usize];
        let start = Instant::now();
        let (mut spins, mut looked, mut escalated) = (0u32, false, false);
        while executing.load(Ordering::SeqCst) > 0 {
            if spins < REVOKE_SPINS {
                std::hint::spin_loop();
                spins += 1;
                continue;
            }
            // A shared region's batch may run in a process that died in it
            // (kill -9): look once at once; after the grace, kill.
            if self.is_shared() && !looked {
                looked = true;
                if self.fence_mappers(compute, true) {
                    return;
                }
            } else if self.is_shared() && !escalated && start.elapsed() > SHM_DRAIN_GRACE {
                escalated = true;
                if self.fence_mappers(compute, false) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Kill every other process of `compute` that mapped this region, wait
    /// until each has exited, then clear its count of executing batches: a
    /// dead process executes nothing, and a new one of `compute` is refused.
    /// With `dead_only`, only if they have all exited already. False if
    /// nothing was done (or the batch runs in this process).
    fn fence_mappers(&self, compute: ComputeNodeId, dead_only: bool) -> bool {
        let mine: Vec<Process> = {
            let mut m = self.mappers();
            let all_dead = m.iter().all(|(c, p)| *c != compute || p.has_exited());
            if dead_only && !all_dead {
                return false;
            }
            let (mine, rest) = m.drain(..).partition(|(c, _)| *c == compute);
            *m = rest;
            mine.into_iter().map(|(_, p)| p).collect()
        };
        if mine.is_empty() {
            return false;
        }
        for p in &mine {
            p.kill_and_wait();
        }
        log::warn!(
            "memory node: compute node {compute} did not drain after its revocation; \
             its {} process(es) were killed",
            mine.len()
        );
        self.region.executing()[compute as usize].store(0, Ordering::SeqCst);
        true
    }

    fn mappers(&self) -> std::sync::MutexGuard<'_, Vec<(ComputeNodeId, Process)>> {
        self.mappers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record that process `p` of `compute` maps this region, before its key
    /// is checked: a revocation then either finds it here or makes the check
    /// fail. Processes that have exited are forgotten.
    pub(crate) fn add_mapper(&self, compute: ComputeNodeId, p: Process) {
        if p.pid() == std::process::id() as i32 {
            return; // Threads of this process are waited for, never killed.
        }
        let executing = self.region.executing();
        let mut m = self.mappers();
        // A dead process's share of its node's count is frozen: if the count
        // is zero, so is its share, and it can be forgotten. Otherwise the
        // node's revocation still needs it.
        m.retain(|(c, q)| !(q.has_exited() && executing[*c as usize].load(Ordering::SeqCst) == 0));
        if !m.iter().any(|(c, q)| *c == compute && q.pid() == p.pid()) {
            m.push((compute, p));
        }
    }

    /// Batches of `compute` executing right now (inspection for tests).
    pub fn executing(&self, compute: ComputeNodeId) -> u32 {
        self.region.executing()[compute as usize].load(Ordering::SeqCst)
    }

    /// Whether `compute` was ever revoked here.
    pub fn is_fenced(&self, compute: ComputeNodeId) -> bool {
        (self.region.fenced()[compute as usize].load(Ordering::SeqCst) != 0)
            && !self.revocable_fencing.load(Ordering::Relaxed)
    }

    /// Test-only bug switch: let a revoked incarnation register again (the
    /// old behaviour), to show that the simulations catch what it causes.
    #[doc(hidden)]
    pub fn inject_revocable_fencing(&self, on: bool) {
        self.revocable_fencing.store(on, Ordering::SeqCst);
    }

    /// Whether `key` is `compute`'s current key. The low half is read first:
    /// a key that passes was current when it was read (a registration
    /// clears the low half before it writes the high one).
    pub fn is_authorized(&self, compute: ComputeNodeId, key: RegionKey) -> bool {
        let (lo, hi) = self.key_words(compute);
        let (key_lo, key_hi) = (key as u64, (key >> 64) as u64);
        key_lo != 0 && lo.load(Ordering::SeqCst) == key_lo && hi.load(Ordering::SeqCst) == key_hi
    }

    /// The two words of `compute`'s key: low half (0: none), high half.
    fn key_words(&self, compute: ComputeNodeId) -> (&AtomicU64, &AtomicU64) {
        let k = self.region.keys();
        (&k[2 * compute as usize], &k[2 * compute as usize + 1])
    }

    /// Simulate loss of this memory node: every later verb fails with `Unavailable`.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Bring the node back as an empty replacement: memory zeroed, serving
    /// again, region keys kept (the replacement of docs/DESIGN.md §4.6 in place).
    pub fn replace_with_empty(&self) {
        for w in self.region.words().iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.failed.store(false, Ordering::SeqCst);
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Execute one verb on behalf of `compute` holding `key`.
    pub fn execute(&self, compute: ComputeNodeId, key: RegionKey, verb: &Verb) -> Completion {
        let mut out = Err(VerbError::Unavailable);
        self.execute_batch(compute, key, std::slice::from_ref(verb), |c| out = c);
        out
    }

    /// Execute a doorbell batch on behalf of `compute` holding `key`, handing
    /// each completion to `done` in order. Access is checked once per batch:
    /// a batch that passed the check runs to its end, as the verbs a NIC has
    /// already taken do, and [`MemoryNode::revoke`] waits for it.
    pub fn execute_batch(
        &self,
        compute: ComputeNodeId,
        key: RegionKey,
        verbs: &[Verb],
        done: impl FnMut(Completion),
    ) {
        self.execute_batch_with(compute, key, verbs, |n| vec![0; n], done)
    }

    /// [`MemoryNode::execute_batch`], each read landing in `buffer(len)`
    /// (a zeroed buffer of that length).
    pub fn execute_batch_with(
        &self,
        compute: ComputeNodeId,
        key: RegionKey,
        verbs: &[Verb],
        buffer: impl FnMut(usize) -> Bytes,
        done: impl FnMut(Completion),
    ) {
        let refs = verbs.iter().map(Verb::as_ref);
        self.execute_refs(compute, key, refs, buffer, done)
    }

    /// [`MemoryNode::execute_batch_with`] on borrowed verbs (a memory
    /// server's, read where they lie in the frame): every path that
    /// executes verbs comes here.
    pub fn execute_refs<'v>(
        &self,
        compute: ComputeNodeId,
        key: RegionKey,
        verbs: impl Iterator<Item = VerbRef<'v>> + Clone,
        mut buffer: impl FnMut(usize) -> Bytes,
        mut done: impl FnMut(Completion),
    ) {
        if self.is_failed() {
            verbs.for_each(|_| done(Err(VerbError::Unavailable)));
            return;
        }
        // Announce, then check the key: `revoke` stores the new key, then waits
        // for announced batches, so a batch either sees the revocation or is
        // waited for.
        let executing = &self.region.executing()[compute as usize];
        executing.fetch_add(1, Ordering::SeqCst);
        if self.is_authorized(compute, key) {
            if verbs.clone().nth(PREFETCH_FROM - 1).is_some() {
                self.prefetch(verbs.clone());
            }
            verbs.for_each(|v| done(self.execute_with(v, &mut buffer)));
        } else {
            verbs.for_each(|_| done(Err(VerbError::Revoked)));
        }
        executing.fetch_sub(1, Ordering::SeqCst);
    }

    /// Execute a verb without access control: for the node's own setup path
    /// (bulk loading through the control endpoint) and for inspection in tests.
    pub fn execute_unchecked(&self, verb: &Verb) -> Completion {
        self.execute_with(verb.as_ref(), |n| vec![0; n])
    }

    fn execute_with(&self, verb: VerbRef<'_>, mut buffer: impl FnMut(usize) -> Bytes) -> Completion {
        match verb {
            VerbRef::Read { addr, len } => {
                self.check_range(addr, len as u64)?;
                let mut out = buffer(len as usize);
                self.read_into(addr, &mut out)?;
                Ok(VerbOutput::Read(out))
            }
            VerbRef::Write { addr, data } => {
                self.write_bytes(addr, data)?;
                Ok(VerbOutput::Write)
            }
            VerbRef::Cas {
                addr,
                expected,
                new,
            } => {
                let w = self.word(addr)?;
                let old =
                    match w.compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(v) | Err(v) => v,
                    };
                Ok(VerbOutput::Cas(old))
            }
            VerbRef::Faa { addr, add } => {
                let w = self.word(addr)?;
                Ok(VerbOutput::Faa(w.fetch_add(add, Ordering::SeqCst)))
            }
        }
    }

    /// Ask for the first cache lines of every verb of a batch before
    /// executing any, so its cache misses overlap, as a NIC's DMA reads of
    /// one doorbell do, instead of running one after the other. A hint only:
    /// bad addresses are skipped here and fail when executed.
    fn prefetch<'v>(&self, verbs: impl Iterator<Item = VerbRef<'v>>) {
        let words = self.region.words();
        for v in verbs {
            let (addr, len) = match v {
                VerbRef::Read { addr, len } => (addr, len as u64),
                VerbRef::Write { addr, data } => (addr, data.len() as u64),
                VerbRef::Cas { addr, .. } | VerbRef::Faa { addr, .. } => (addr, 8),
            };
            let first = (addr / 8) as usize;
            let lines = len.div_ceil(64).clamp(1, PREFETCH_LINES) as usize;
            for i in (0..lines).map(|l| first + 8 * l) {
                if let Some(w) = words.get(i) {
                    prefetch_line(w.as_ptr());
                }
            }
        }
    }

    fn word(&self, addr: u64) -> Result<&AtomicU64, VerbError> {
        if addr % 8 != 0 {
            return Err(VerbError::Misaligned);
        }
        self.region
            .words()
            .get((addr / 8) as usize)
            .ok_or(VerbError::OutOfRange)
    }

    fn check_range(&self, addr: u64, len: u64) -> Result<(), VerbError> {
        match addr.checked_add(len) {
            Some(end) if end <= self.size_bytes() => Ok(()),
            _ => Err(VerbError::OutOfRange),
        }
    }

    /// Read `out.len()` bytes at `addr`, one 8-byte word at a time (so it can tear).
    pub fn read_into(&self, addr: u64, out: &mut [u8]) -> Result<(), VerbError> {
        self.check_range(addr, out.len() as u64)?;
        if addr % 8 == 0 {
            // Whole words first (the common case: slots and log records are
            // word-aligned), then a partial tail word.
            let words = &self.region.words()[(addr / 8) as usize..];
            let at = (addr as usize + out.len()) / 8;
            let mut chunks = out.chunks_exact_mut(8);
            for (w, c) in words.iter().zip(&mut chunks) {
                c.copy_from_slice(&w.load(Ordering::SeqCst).to_le_bytes());
            }
            let tail = chunks.into_remainder();
            if !tail.is_empty() {
                let w = self.region.words()[at].load(Ordering::SeqCst).to_le_bytes();
                let n = tail.len();
                tail.copy_from_slice(&w[..n]);
            }
            return Ok(());
        }
        let mut pos = 0usize;
        let mut a = addr;
        while pos < out.len() {
            let w = self.region.words()[(a / 8) as usize]
                .load(Ordering::SeqCst)
                .to_le_bytes();
            let off = (a % 8) as usize;
            let n = (8 - off).min(out.len() - pos);
            out[pos..pos + n].copy_from_slice(&w[off..off + n]);
            pos += n;
            a += n as u64;
        }
        Ok(())
    }

    /// Write `data` at `addr`; each 8-byte word is updated atomically.
    pub fn write_bytes(&self, addr: u64, data: &[u8]) -> Result<(), VerbError> {
        self.check_range(addr, data.len() as u64)?;
        if addr % 8 == 0 && data.len() % 8 == 0 {
            // Whole words only (slot bodies, versions, log records): Release
            // stores, in ascending order, as the general loop below does.
            let words = &self.region.words()[(addr / 8) as usize..];
            for (w, c) in words.iter().zip(data.chunks_exact(8)) {
                w.store(u64::from_le_bytes(c.try_into().unwrap()), Ordering::Release);
            }
            return Ok(());
        }
        let mut pos = 0usize;
        let mut a = addr;
        while pos < data.len() {
            let off = (a % 8) as usize;
            let n = (8 - off).min(data.len() - pos);
            let w = &self.region.words()[(a / 8) as usize];
            if n == 8 {
                // Release suffices for whole-word stores: readers acquire-load
                // (SeqCst) and the protocol's store-load (Dekker) patterns go
                // through CAS, which stays SeqCst.
                w.store(
                    u64::from_le_bytes(data[pos..pos + 8].try_into().unwrap()),
                    Ordering::Release,
                );
            } else {
                let _ = w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |old| {
                    let mut b = old.to_le_bytes();
                    b[off..off + n].copy_from_slice(&data[pos..pos + n]);
                    Some(u64::from_le_bytes(b))
                });
            }
            pos += n;
            a += n as u64;
        }
        Ok(())
    }

    /// Load one aligned word (inspection helper for checks and tests).
    pub fn load_u64(&self, addr: u64) -> u64 {
        self.word(addr)
            .expect("load_u64: bad address")
            .load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_do_what_they_say_and_bad_addresses_are_errors() {
        let m = MemoryNode::new(64);
        let k = m.register(3).unwrap();
        assert_eq!(
            m.execute(3, k, &Verb::write(4, vec![1, 2, 3, 4, 5, 6, 7])),
            Ok(VerbOutput::Write)
        );
        assert_eq!(
            m.execute(3, k, &Verb::read(4, 7)),
            Ok(VerbOutput::Read(vec![1, 2, 3, 4, 5, 6, 7]))
        );
        assert_eq!(
            m.execute(3, k, &Verb::cas(16, 0, 9)),
            Ok(VerbOutput::Cas(0))
        );
        assert_eq!(
            m.execute(3, k, &Verb::cas(16, 0, 10)),
            Ok(VerbOutput::Cas(9))
        );
        assert_eq!(m.execute(3, k, &Verb::faa(16, 2)), Ok(VerbOutput::Faa(9)));
        assert_eq!(m.load_u64(16), 11);
        assert_eq!(
            m.execute(3, k, &Verb::cas(12, 0, 1)),
            Err(VerbError::Misaligned)
        );
        assert_eq!(
            m.execute(3, k, &Verb::faa(64, 1)),
            Err(VerbError::OutOfRange)
        );
        assert_eq!(
            m.execute(3, k, &Verb::read(60, 8)),
            Err(VerbError::OutOfRange)
        );
        assert_eq!(
            m.execute(3, k, &Verb::read(u64::MAX - 2, 8)),
            Err(VerbError::OutOfRange)
        );
        // The node still serves after errors.
        assert_eq!(
            m.execute(3, k, &Verb::read(16, 8)),
            Ok(VerbOutput::Read(11u64.to_le_bytes().as_slice().into()))
        );
    }

    #[test]
    fn a_long_batch_with_bad_addresses_is_prefetched_and_fails_per_verb() {
        let m = MemoryNode::new(64);
        let k = m.register(3).unwrap();
        let verbs = [
            Verb::read(u64::MAX - 2, 8),
            Verb::read(u64::MAX & !7, u32::MAX),
            Verb::write(56, vec![7; 8]),
            Verb::cas(12, 0, 1),
            Verb::faa(1 << 62, 1),
            Verb::read(0, 64),
        ];
        assert!(verbs.len() >= PREFETCH_FROM, "the batch is prefetched");
        let mut done = Vec::new();
        m.execute_batch(3, k, &verbs, |c| done.push(c));
        let mut want = vec![Err(VerbError::OutOfRange); 2];
        want.extend([Ok(VerbOutput::Write), Err(VerbError::Misaligned)]);
        want.push(Err(VerbError::OutOfRange));
        let mut slot = vec![0; 64];
        slot[56..].fill(7);
        want.push(Ok(VerbOutput::Read(slot)));
        assert_eq!(done, want);
    }

    /// The attack on keys made by a bijective mix of (counter ^ salt): from
    /// one key and its (small, guessable) counter, recover the salt and
    /// compute the next key. CSPRNG keys defeat it, and look uniform.
    #[test]
    fn a_region_key_tells_nothing_about_the_next() {
        const C: u64 = 0x9E37_79B9_7F4A_7C15;
        let c_inv = (0..6).fold(C, |x, _| {
            x.wrapping_mul(2u64.wrapping_sub(C.wrapping_mul(x)))
        });
        assert_eq!(C.wrapping_mul(c_inv), 1);
        let unmix = |k: u64| (k ^ (k >> 29) ^ (k >> 58)).wrapping_mul(c_inv);
        let mix = |x: u64| {
            let k = x.wrapping_mul(C);
            k ^ (k >> 29)
        };
        let m = MemoryNode::new(64);
        let keys: Vec<u128> = (0..2000).map(|_| m.register(1).unwrap()).collect();
        let mut predicted = 0;
        for (i, w) in keys.windows(2).enumerate() {
            let n = i as u64 + 1;
            let salt = unmix(w[0] as u64) ^ n;
            predicted += (mix((n + 1) ^ salt).max(1) == w[1] as u64) as usize;
        }
        assert_eq!(predicted, 0, "keys follow from the key before");
        let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        for bit in 0..128 {
            let ones = keys.iter().filter(|k| *k >> bit & 1 == 1).count();
            assert!(
                (850..1150).contains(&ones),
                "bit {bit} set in {ones} of 2000 keys"
            );
        }
    }

    #[test]
    fn keys_gate_access_and_revocation_is_final() {
        let m = MemoryNode::new(64);
        assert_eq!(m.execute(1, 0, &Verb::read(0, 8)), Err(VerbError::Revoked));
        let k = m.register(1).unwrap();
        assert_eq!(
            m.execute(1, k ^ 1, &Verb::read(0, 8)),
            Err(VerbError::Revoked)
        );
        assert_eq!(
            m.execute(2, k, &Verb::read(0, 8)),
            Err(VerbError::Revoked),
            "a key is per compute node"
        );
        assert!(m.execute(1, k, &Verb::read(0, 8)).is_ok());
        m.revoke(1);
        assert_eq!(
            m.execute(1, k, &Verb::write_u64(0, 7)),
            Err(VerbError::Revoked)
        );
        assert_eq!(m.load_u64(0), 0, "a revoked write does not execute");
        // Fencing is for good: registering again gets no key, the old one stays dead.
        assert_eq!(m.register(1), Err(Fenced(1)));
        assert_eq!(m.execute(1, k, &Verb::read(0, 8)), Err(VerbError::Revoked));
        // A node revoked before it ever registered (a verdict between join and
        // registration) is refused too; other nodes are unaffected.
        m.revoke(4);
        assert_eq!(m.register(4), Err(Fenced(4)));
        assert!(m.register(5).is_ok());
    }

    /// Registration and revocation racing on real threads: whatever the
    /// interleaving, a key handed out is never usable after `revoke` returned.
    #[test]
    fn a_registration_racing_a_revocation_never_yields_a_live_key() {
        for round in 0..2000u64 {
            let m = std::sync::Arc::new(MemoryNode::new(64));
            let id = (round % 1000) as ComputeNodeId + 1;
            let reg = {
                let m = m.clone();
                std::thread::spawn(move || m.register(id))
            };
            m.revoke(id);
            if let Ok(k) = reg.join().unwrap() {
                assert_eq!(
                    m.execute(id, k, &Verb::write_u64(0, 1)),
                    Err(VerbError::Revoked),
                    "round {round}"
                );
            }
            assert_eq!(m.load_u64(0), 0);
            assert!(m.register(id).is_err());
        }
    }
}

#[cfg(test)]
mod revocation_race {
    use super::*;
    use std::sync::Arc;

    /// Cor1 with real threads: once `revoke` returns, no verb of the revoked
    /// node executes, not even one that passed its key check just before.
    #[test]
    fn nothing_executes_after_revoke_returns() {
        for round in 0..200 {
            let m = Arc::new(MemoryNode::new(64));
            let k = m.register(1).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let writer = {
                let (m, stop) = (m.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 1u64;
                    while !stop.load(Ordering::SeqCst) {
                        let _ = m.execute(1, k, &Verb::write_u64(0, i));
                        i += 1;
                    }
                })
            };
            std::thread::sleep(std::time::Duration::from_micros(50));
            m.revoke(1);
            let after = m.load_u64(0);
            std::thread::sleep(std::time::Duration::from_micros(200));
            assert_eq!(
                m.load_u64(0),
                after,
                "round {round}: a write landed after revoke returned"
            );
            stop.store(true, Ordering::SeqCst);
            writer.join().unwrap();
        }
    }
}
