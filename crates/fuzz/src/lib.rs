//! A small mutation fuzzer that runs on stable Rust inside `cargo test`.
//!
//! Each target is a closure that takes one input (bytes) and panics when a
//! property fails. [`Fuzz::run`] feeds it, until its time budget is spent:
//!
//! - random bytes (short lengths are likelier);
//! - fresh valid encodings from the target's generator (structure-aware:
//!   the generator builds real messages and encodes them);
//! - mutations of the corpus (seeds, generated encodings, and every input
//!   that produced an outcome not seen before): bit flips, interesting
//!   bytes, little-endian length and count fields overwritten with boundary
//!   values (0, 1, the bytes left, one past them, the maxima), truncation,
//!   deleted, duplicated and inserted ranges, splices of two inputs.
//!
//! The check returns an *outcome label* (an error variant, the message
//! kind that decoded): an input with a new label joins the corpus, a cheap
//! stand-in for coverage feedback.
//!
//! A panic is caught, the input is shrunk (ranges removed, bytes zeroed,
//! while it still panics at the same place), and the run fails with the
//! minimal input in hex, ready to paste into a regression test.
//!
//! Budget: `TANDEM_FUZZ_SECS` seconds per target (default 1; the whole set
//! stays well under a minute of `cargo test`). `TANDEM_FUZZ_SEED` fixes the
//! seed (default: a fixed seed for short runs, the clock for long ones).
//! `TANDEM_FUZZ_REPORT=<file>` appends one line per target (name,
//! executions, seconds, crashes) to that file.
//!
//! The crate also installs a global allocator that counts the bytes each
//! thread holds, so a target can check that decoding allocates no more
//! than its bounds allow ([`peak_alloc`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use std::time::{Duration, Instant};

/// A seeded xorshift64* generator: reproducible, no dependencies.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed: any seed (0 too) gives a good state.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut s = self.0;
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        self.0 = s;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    pub fn u8(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// A length below `max`, small ones likelier (half below 16).
    pub fn len(&mut self, max: usize) -> usize {
        let max = max.max(1);
        match self.below(4) {
            0 | 1 => self.below(16.min(max)),
            2 => self.below(256.min(max)),
            _ => self.below(max),
        }
    }

    /// An integer that is often a boundary value.
    pub fn interesting_u64(&mut self) -> u64 {
        match self.below(12) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => u32::MAX as u64,
            4 => u16::MAX as u64,
            5 => 1 << self.below(64),
            6 => (1 << self.below(64)) - 1,
            7 => i64::MAX as u64,
            8 => self.below(8) as u64,
            9 => u64::MAX - self.below(4) as u64,
            _ => self.next_u64(),
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

/// Apply 1 to 4 structure-blind but format-aware mutations to `b`: the
/// mutations target what length-prefixed binary formats get wrong.
pub fn mutate(rng: &mut Rng, b: &mut Vec<u8>, other: &[u8], max_len: usize) {
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, b, other);
    }
    b.truncate(max_len);
}

fn mutate_once(rng: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    let n = b.len();
    match rng.below(12) {
        // A flipped bit.
        0 if n > 0 => {
            let i = rng.below(n);
            b[i] ^= 1 << rng.below(8);
        }
        // An interesting byte (a tag, a flag, a length's low byte).
        1 if n > 0 => {
            let i = rng.below(n);
            let any = rng.u8();
            b[i] = *rng.pick(&[0, 1, 2, 0x7f, 0x80, 0xfe, 0xff, any]);
        }
        // One more or one less.
        2 if n > 0 => {
            let i = rng.below(n);
            b[i] = if rng.bool() {
                b[i].wrapping_add(1)
            } else {
                b[i].wrapping_sub(1)
            };
        }
        // A little-endian field (length, count, id) set to a boundary value,
        // including the bytes that follow it and one past them.
        3 | 4 if n > 0 => {
            let width = *rng.pick(&[1usize, 2, 4, 8]);
            let at = rng.below(n);
            let rest = (n - at).saturating_sub(width) as u64;
            let v = match rng.below(4) {
                0 => rest,
                1 => rest + 1 + rng.below(3) as u64,
                2 => rest.saturating_sub(1 + rng.below(3) as u64),
                _ => rng.interesting_u64(),
            };
            let bytes = v.to_le_bytes();
            for (k, byte) in bytes.iter().take(width).enumerate() {
                if at + k < n {
                    b[at + k] = *byte;
                }
            }
        }
        // Truncated.
        5 if n > 0 => b.truncate(rng.below(n)),
        // A range deleted.
        6 if n > 0 => {
            let at = rng.below(n);
            let k = 1 + rng.below((n - at).min(16));
            b.drain(at..at + k);
        }
        // A range duplicated in place.
        7 if n > 0 => {
            let at = rng.below(n);
            let k = 1 + rng.below((n - at).min(32));
            let chunk = b[at..at + k].to_vec();
            let to = rng.below(n + 1);
            b.splice(to..to, chunk);
        }
        // Random bytes inserted.
        8 => {
            let to = rng.below(n + 1);
            let k = 1 + rng.below(8);
            let ins = rng.bytes(k);
            b.splice(to..to, ins);
        }
        // Random bytes appended (trailing garbage, or a longer frame).
        9 => {
            let k = 1 + rng.len(64);
            b.extend(rng.bytes(k));
        }
        // A splice: this input's head, another's tail.
        10 if !other.is_empty() => {
            let cut = rng.below(n + 1);
            let from = rng.below(other.len());
            b.truncate(cut);
            b.extend_from_slice(&other[from..]);
        }
        // Another input's bytes overwrite a range of this one.
        _ if n > 0 && !other.is_empty() => {
            let at = rng.below(n);
            let from = rng.below(other.len());
            let k = (n - at).min(other.len() - from).min(1 + rng.below(16));
            b[at..at + k].copy_from_slice(&other[from..from + k]);
        }
        _ => b.push(rng.u8()),
    }
}

/// One fuzz target's settings.
pub struct Fuzz {
    pub name: String,
    /// Inputs are cut to this length.
    pub max_len: usize,
    pub seeds: Vec<Vec<u8>>,
    budget: Duration,
    seed: u64,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Report {
    pub name: String,
    pub execs: u64,
    pub secs: f64,
    pub corpus: usize,
    pub outcomes: usize,
    pub seed: u64,
}

/// Seconds per target: `TANDEM_FUZZ_SECS`, else 1.
pub fn budget() -> Duration {
    let secs = std::env::var("TANDEM_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
        .unwrap_or(1.0);
    Duration::from_secs_f64(secs)
}

/// Whether this is a long run (more than 10 s per target).
pub fn long_run() -> bool {
    budget() > Duration::from_secs(10)
}

impl Fuzz {
    pub fn new(name: &str) -> Fuzz {
        let budget = budget();
        let seed = match std::env::var("TANDEM_FUZZ_SEED")
            .ok()
            .and_then(|s| parse_u64(&s))
        {
            Some(s) => s,
            None if budget > Duration::from_secs(10) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            None => 0x7A4D_E3F0_0D15_EA5E,
        };
        Fuzz {
            name: name.to_string(),
            max_len: 4096,
            seeds: Vec::new(),
            budget,
            seed: seed ^ fnv(name.as_bytes()),
        }
    }

    pub fn max_len(mut self, n: usize) -> Fuzz {
        self.max_len = n;
        self
    }

    pub fn seeds(mut self, seeds: impl IntoIterator<Item = Vec<u8>>) -> Fuzz {
        self.seeds.extend(seeds);
        self
    }

    /// Scale this target's budget in short runs (a slow target gets more
    /// time, so it still runs enough executions); long runs give every
    /// target the same time.
    pub fn budget_times(mut self, k: f64) -> Fuzz {
        if !long_run() {
            self.budget = self.budget.mul_f64(k);
        }
        self
    }

    /// Fuzz `check` until the budget is spent. `gen` builds a fresh valid
    /// encoding. `check` panics on a failed property and returns the
    /// input's outcome label. Panics (after shrinking) on the first crash.
    pub fn run<G, C, L>(self, mut gen: G, mut check: C) -> Report
    where
        G: FnMut(&mut Rng) -> Vec<u8>,
        C: FnMut(&[u8]) -> L,
        L: std::hash::Hash,
    {
        install_hook();
        let mut rng = Rng::new(self.seed);
        let mut corpus: Vec<Vec<u8>> = self.seeds.clone();
        let mut outcomes: HashSet<u64> = HashSet::new();
        let start = Instant::now();
        let mut execs: u64 = 0;
        let mut input = Vec::new();
        // Seeds first, each as it is.
        let mut queue: Vec<Vec<u8>> = self.seeds.clone();
        while queue.len() < 8 {
            queue.push(gen(&mut rng));
        }
        loop {
            if let Some(q) = queue.pop() {
                input = q;
            } else {
                if execs % 64 == 0 && start.elapsed() >= self.budget {
                    break;
                }
                input.clear();
                match rng.below(10) {
                    0 => {
                        let n = rng.len(self.max_len);
                        input.extend(rng.bytes(n));
                    }
                    1 | 2 => input = gen(&mut rng),
                    3 | 4 => {
                        input = gen(&mut rng);
                        let other = pick_other(&mut rng, &corpus);
                        mutate(&mut rng, &mut input, &other, self.max_len);
                    }
                    _ => {
                        input = if corpus.is_empty() {
                            gen(&mut rng)
                        } else {
                            rng.pick(&corpus).clone()
                        };
                        let other = pick_other(&mut rng, &corpus);
                        mutate(&mut rng, &mut input, &other, self.max_len);
                    }
                }
                input.truncate(self.max_len);
            }
            execs += 1;
            match catch(&mut check, &input) {
                Ok(label) => {
                    if outcomes.insert(hash_of(&label)) {
                        if corpus.len() >= 512 {
                            let i = rng.below(corpus.len());
                            corpus[i] = input.clone();
                        } else {
                            corpus.push(input.clone());
                        }
                    }
                }
                Err(first) => {
                    let min = shrink(&mut check, input.clone(), &first);
                    let msg = catch(&mut check, &min).err().unwrap_or(first);
                    let report = Report {
                        name: self.name.clone(),
                        execs,
                        secs: start.elapsed().as_secs_f64(),
                        corpus: corpus.len(),
                        outcomes: outcomes.len(),
                        seed: self.seed,
                    };
                    record(&report, 1);
                    panic!(
                        "fuzz {}: crash after {} executions (seed {:#x}): {}\n  minimal input ({} bytes): {}\n  original input ({} bytes): {}",
                        self.name,
                        execs,
                        self.seed,
                        msg.text,
                        min.len(),
                        hex(&min),
                        input.len(),
                        hex(&input)
                    );
                }
            }
        }
        let report = Report {
            name: self.name,
            execs,
            secs: start.elapsed().as_secs_f64(),
            corpus: corpus.len(),
            outcomes: outcomes.len(),
            seed: self.seed,
        };
        record(&report, 0);
        report
    }
}

fn pick_other(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if corpus.is_empty() {
        Vec::new()
    } else {
        rng.pick(corpus).clone()
    }
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn hash_of<L: std::hash::Hash>(l: &L) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    l.hash(&mut h);
    h.finish()
}

/// Print the report, and append it to `TANDEM_FUZZ_REPORT` if set.
fn record(r: &Report, crashes: u32) {
    let line = format!(
        "fuzz {}: {} executions in {:.1} s ({:.0}/s), corpus {}, {} outcomes, {} crashes, seed {:#x}",
        r.name,
        r.execs,
        r.secs,
        r.execs as f64 / r.secs.max(1e-9),
        r.corpus,
        r.outcomes,
        crashes,
        r.seed
    );
    eprintln!("{line}");
    if let Ok(path) = std::env::var("TANDEM_FUZZ_REPORT") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{}\t{}\t{:.1}\t{}", r.name, r.execs, r.secs, crashes);
        }
    }
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes from hex (for regression tests); whitespace is ignored.
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A caught panic: its message and where it was raised.
#[derive(Clone, Debug)]
struct Crash {
    text: String,
    at: String,
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST: RefCell<Option<Crash>> = const { RefCell::new(None) };
}

/// A panic hook that stays quiet (and records the panic) on a thread that
/// is fuzzing, and defers to the previous hook elsewhere.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) {
                let text = match info.payload().downcast_ref::<&str>() {
                    Some(s) => s.to_string(),
                    None => info
                        .payload()
                        .downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_else(|| "a panic".into()),
                };
                let at = info
                    .location()
                    .map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
                let text = format!("{text} (at {at})");
                LAST.with(|l| *l.borrow_mut() = Some(Crash { text, at }));
            } else {
                prev(info)
            }
        }));
    });
}

fn catch<C, L>(check: &mut C, input: &[u8]) -> Result<L, Crash>
where
    C: FnMut(&[u8]) -> L,
{
    QUIET.with(|q| q.set(true));
    let r = panic::catch_unwind(AssertUnwindSafe(|| check(input)));
    QUIET.with(|q| q.set(false));
    r.map_err(|_| {
        LAST.with(|l| l.borrow_mut().take()).unwrap_or(Crash {
            text: "a panic".into(),
            at: String::new(),
        })
    })
}

/// Shrink `input` while it still panics at the same place: remove ranges
/// (halves down to single bytes), then lower bytes to zero.
fn shrink<C, L>(check: &mut C, mut input: Vec<u8>, first: &Crash) -> Vec<u8>
where
    C: FnMut(&[u8]) -> L,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    let still =
        |check: &mut C, b: &[u8]| -> bool { matches!(catch(check, b), Err(c) if c.at == first.at) };
    let mut chunk = input.len().next_power_of_two();
    while chunk >= 1 && Instant::now() < deadline {
        let mut at = 0;
        while at < input.len() && Instant::now() < deadline {
            let end = (at + chunk).min(input.len());
            let mut shorter = input[..at].to_vec();
            shorter.extend_from_slice(&input[end..]);
            if still(check, &shorter) {
                input = shorter;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    for i in 0..input.len() {
        if Instant::now() >= deadline {
            break;
        }
        if input[i] != 0 {
            let mut z = input.clone();
            z[i] = 0;
            if still(check, &z) {
                input = z;
            }
        }
    }
    input
}

/// A global allocator that counts, per thread, the bytes allocated and the
/// peak of live bytes while a [`peak_alloc`] measurement runs.
pub struct Counting;

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc(size: usize) {
    let _ = MEASURING.try_with(|m| {
        if m.get() {
            let live = LIVE.with(|l| {
                let v = l.get() + size as isize;
                l.set(v);
                v
            });
            PEAK.with(|p| p.set(p.get().max(live)));
            LARGEST.with(|g| g.set(g.get().max(size)));
        }
    });
}

fn note_free(size: usize) {
    let _ = MEASURING.try_with(|m| {
        if m.get() {
            LIVE.with(|l| l.set(l.get() - size as isize));
        }
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters are const-initialized thread locals without destructors, which
// never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_free(layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_free(layout.size());
        note_alloc(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// What `f` allocated on this thread: the peak of live bytes above what
/// was live before, and the largest single allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocated {
    pub peak: usize,
    pub largest: usize,
}

/// Run `f` and measure its allocations on this thread.
pub fn peak_alloc<R>(f: impl FnOnce() -> R) -> (R, Allocated) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    LARGEST.with(|g| g.set(0));
    MEASURING.with(|m| m.set(true));
    let r = f();
    MEASURING.with(|m| m.set(false));
    let peak = PEAK.with(|p| p.get()).max(0) as usize;
    let largest = LARGEST.with(|g| g.get());
    (r, Allocated { peak, largest })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_is_found_and_shrunk_to_its_cause() {
        let r = panic::catch_unwind(|| {
            Fuzz::new("self-test").run(
                |rng| rng.bytes(8),
                |b: &[u8]| {
                    if b.len() >= 3 && b[1] == 0x42 {
                        panic!("found it");
                    }
                    b.len()
                },
            )
        });
        let msg = r.unwrap_err();
        let msg = msg.downcast_ref::<String>().expect("a message");
        assert!(msg.contains("found it"), "{msg}");
        assert!(msg.contains("minimal input (3 bytes): 004200"), "{msg}");
    }

    #[test]
    fn allocations_are_counted_per_thread() {
        let (v, a) = peak_alloc(|| vec![0u8; 10_000]);
        assert!(a.peak >= 10_000 && a.largest >= 10_000, "{a:?}");
        drop(v);
        let ((), a) = peak_alloc(|| ());
        assert_eq!(a.peak, 0);
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(&[0, 1, 0xfe, 0xff])), vec![0, 1, 0xfe, 0xff]);
    }
}
