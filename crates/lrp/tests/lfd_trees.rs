//! The Natarajan–Mittal BST and the skiplist on real atomics: sequential
//! runs against a `BTreeSet`, concurrent runs checked through per-key
//! success counts and per-thread key ranges, every crash prefix of a
//! sequential run, and images corrupted on purpose.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::{Arc, Barrier};

use tandem_lrp::lfd::bst::Bst;
use tandem_lrp::lfd::skiplist::{self, Skiplist};
use tandem_lrp::lfd::{Image, Lfd, Op};
use tandem_lrp::pmem::{block_on, Atomics, Heap};
use tandem_lrp::{EventId, Mutant, PMem, Sync};

const WORDS: u64 = 1 << 21;
const THREADS: usize = 4;
const SHARED: u64 = 32;
const OWN: u64 = 40;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// An insert or a delete (even odds) of a key in `lo..lo + n`.
    fn op(&mut self, lo: u64, n: u64) -> Op {
        let k = lo + self.next() % n;
        if self.next() % 2 == 0 {
            Op::Insert(k)
        } else {
            Op::Delete(k)
        }
    }
}

fn apply_model(model: &mut BTreeSet<u64>, op: Op) -> bool {
    match op {
        Op::Insert(k) => model.insert(k),
        Op::Delete(k) => model.remove(&k),
    }
}

/// Recover the heap as it is now, every word counted as written.
fn recover_now<T: Lfd>(t: &T, heap: &Heap) -> Result<Vec<u64>, String> {
    let words = heap.snapshot();
    t.recover(&Image {
        words: &words,
        writers: &vec![1u32; words.len()],
    })
}

fn sequential<T: Lfd>(seed: u64) {
    let heap = Heap::new(WORDS, 8);
    let m = Atomics(heap.clone());
    let t = block_on(T::create(&m, None));
    assert_eq!(recover_now(&t, &heap).unwrap(), Vec::<u64>::new());
    let (mut model, mut rng) = (BTreeSet::new(), Lcg(seed));
    for i in 0..2000 {
        let op = rng.op(1, 64);
        let out = block_on(t.apply(&m, op));
        assert_eq!(
            out.ok,
            apply_model(&mut model, op),
            "{:?} op {i}: {op:?}",
            T::KIND
        );
        if i % 97 == 0 {
            assert_eq!(
                recover_now(&t, &heap).unwrap(),
                model.iter().copied().collect::<Vec<_>>()
            );
        }
    }
    assert_eq!(
        recover_now(&t, &heap).unwrap(),
        model.into_iter().collect::<Vec<_>>()
    );
}

#[test]
fn bst_sequential() {
    for seed in 1..=5 {
        sequential::<Bst>(seed);
    }
}

#[test]
fn skiplist_sequential() {
    for seed in 1..=5 {
        sequential::<Skiplist>(seed);
    }
}

/// One thread's view: per shared key, its successful inserts minus its
/// successful deletes; and its model of its own keys.
struct Worker {
    net: Vec<i64>,
    own: BTreeSet<u64>,
}

fn own_range(i: usize) -> Range<u64> {
    let lo = 1000 + i as u64 * 100;
    lo..lo + OWN
}

/// `ops` operations; with `mix`, half of them on the thread's own keys,
/// whose outcomes must match its model exactly.
fn work<T: Lfd>(
    t: &T,
    m: &Atomics,
    w: &mut Worker,
    rng: &mut Lcg,
    i: usize,
    ops: usize,
    mix: bool,
) {
    for _ in 0..ops {
        if mix && rng.next() % 2 == 0 {
            let op = rng.op(own_range(i).start, OWN);
            let out = block_on(t.apply(m, op));
            assert_eq!(
                out.ok,
                apply_model(&mut w.own, op),
                "thread {i}: {op:?} on its own key"
            );
        } else {
            let op = rng.op(1, SHARED);
            let ok = block_on(t.apply(m, op)).ok as i64;
            match op {
                Op::Insert(k) => w.net[k as usize] += ok,
                Op::Delete(k) => w.net[k as usize] -= ok,
            }
        }
    }
}

/// In any linearization from the empty set, a key's successful inserts
/// and deletes alternate, starting with an insert: per key, inserts minus
/// deletes is 0 or 1 and says whether the key is in the final set.
fn check_counts(workers: &[Worker], keys: &[u64]) {
    for k in 1..=SHARED {
        let net: i64 = workers.iter().map(|w| w.net[k as usize]).sum();
        assert!(
            net == 0 || net == 1,
            "key {k}: {net} more successful inserts than deletes"
        );
        assert_eq!(
            net == 1,
            keys.contains(&k),
            "key {k}: net {net} but recovered {keys:?}"
        );
    }
}

/// Run `work` on every thread at once, each on its own `Atomics` handle.
fn round<T: Lfd + Send + std::marker::Sync>(
    t: T,
    heap: &Arc<Heap>,
    workers: &mut [Worker],
    rngs: &mut [Lcg],
    mix: bool,
) {
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for (i, (w, rng)) in workers.iter_mut().zip(rngs.iter_mut()).enumerate() {
            let (m, start) = (Atomics(heap.clone()), &start);
            s.spawn(move || {
                start.wait();
                work(&t, &m, w, rng, i, 2000, mix);
            });
        }
    });
}

fn concurrent<T: Lfd + Send + std::marker::Sync>(seed: u64) {
    let heap = Heap::new(WORDS, 8);
    let t = block_on(T::create(&Atomics(heap.clone()), None));
    let mut workers: Vec<Worker> = (0..THREADS)
        .map(|_| Worker {
            net: vec![0; SHARED as usize + 1],
            own: BTreeSet::new(),
        })
        .collect();
    let mut rngs: Vec<Lcg> = (0..THREADS).map(|i| Lcg(seed * 1000 + i as u64)).collect();
    // Phase 1: everyone on the shared keys.
    round(t, &heap, &mut workers, &mut rngs, false);
    let keys =
        recover_now(&t, &heap).unwrap_or_else(|e| panic!("{:?} after phase 1: {e}", T::KIND));
    check_counts(&workers, &keys);
    // Phase 2: shared keys mixed with keys each thread owns.
    round(t, &heap, &mut workers, &mut rngs, true);
    let keys =
        recover_now(&t, &heap).unwrap_or_else(|e| panic!("{:?} after phase 2: {e}", T::KIND));
    check_counts(&workers, &keys);
    for (i, w) in workers.iter().enumerate() {
        let got: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|k| own_range(i).contains(k))
            .collect();
        assert_eq!(
            got,
            w.own.iter().copied().collect::<Vec<_>>(),
            "thread {i}'s own keys"
        );
    }
}

#[test]
fn bst_concurrent() {
    for seed in 1..=5 {
        concurrent::<Bst>(seed);
    }
}

#[test]
fn skiplist_concurrent() {
    for seed in 1..=5 {
        concurrent::<Skiplist>(seed);
    }
}

/// Atomics that also log every successful write, in order.
struct Logged {
    mem: Atomics,
    log: RefCell<Vec<(u64, u64)>>,
}

impl PMem for Logged {
    async fn load(&self, addr: u64, sync: Sync) -> u64 {
        self.mem.load(addr, sync).await
    }
    async fn store(&self, addr: u64, val: u64, sync: Sync) {
        self.log.borrow_mut().push((addr, val));
        self.mem.store(addr, val, sync).await
    }
    async fn cas(&self, addr: u64, old: u64, new: u64, sync: Sync) -> Result<u64, u64> {
        let r = self.mem.cas(addr, old, new, sync).await;
        if r.is_ok() {
            self.log.borrow_mut().push((addr, new));
        }
        r
    }
    fn alloc(&self, words: u64) -> u64 {
        self.mem.alloc(words)
    }
    fn last_write(&self) -> Option<EventId> {
        None
    }
}

/// A sequential run crashed after every prefix of its writes (each a legal
/// image under any persistency model: one thread, program order). Each must
/// recover to the set before or after the operation under way. The first
/// prefix that does not, if any.
fn crash_prefixes<T: Lfd>(mutant: Option<Mutant>, seed: u64) -> Option<String> {
    let m = Logged {
        mem: Atomics(Heap::new(1 << 16, 8)),
        log: RefCell::new(Vec::new()),
    };
    let t = block_on(T::create(&m, mutant));
    let (mut ends, mut states, mut model, mut rng) = (
        vec![m.log.borrow().len()],
        vec![Vec::new()],
        BTreeSet::new(),
        Lcg(seed),
    );
    for _ in 0..400 {
        let op = rng.op(1, 24);
        block_on(t.apply(&m, op));
        apply_model(&mut model, op);
        ends.push(m.log.borrow().len());
        states.push(model.iter().copied().collect::<Vec<u64>>());
    }
    let (mut words, mut writers) = (vec![0u64; 1 << 16], vec![0u32; 1 << 16]);
    let mut op = 0; // ops before `op` are complete
    for (i, &(addr, val)) in m.log.borrow().iter().enumerate() {
        (words[addr as usize], writers[addr as usize]) = (val, 1);
        while op < ends.len() && ends[op] <= i + 1 {
            op += 1;
        }
        if op == 0 {
            continue; // still creating
        }
        let got = t.recover(&Image {
            words: &words,
            writers: &writers,
        });
        let ok = |s: &Vec<u64>| matches!(&got, Ok(k) if k == s);
        if !ok(&states[op - 1]) && !states.get(op).is_some_and(ok) {
            return Some(format!("after write {i} (op {op}): {got:?}"));
        }
    }
    None
}

#[test]
fn crash_prefixes_recover() {
    for seed in 1..=3 {
        assert_eq!(crash_prefixes::<Bst>(None, seed), None, "bst");
        assert_eq!(crash_prefixes::<Skiplist>(None, seed), None, "skiplist");
    }
}

#[test]
fn bst_early_publish_is_caught() {
    let bad = crash_prefixes::<Bst>(Some(Mutant::BstEarlyPublish), 1)
        .expect("the mutant leaves no unrecoverable prefix");
    assert!(bad.contains("never written"), "{bad}");
}

/// A structure holding 10, 20, 30, and the words each insert allocated.
fn three<T: Lfd>() -> (T, Vec<u64>, Vec<u32>, [Range<u64>; 3]) {
    let heap = Heap::new(1 << 16, 8);
    let m = Atomics(heap.clone());
    let t = block_on(T::create(&m, None));
    let mut ranges = [0..0, 0..0, 0..0];
    for (r, k) in ranges.iter_mut().zip([10, 20, 30]) {
        let start = m.alloc(0);
        assert!(block_on(t.apply(&m, Op::Insert(k))).ok);
        *r = start..m.alloc(0);
    }
    let words = heap.snapshot();
    // Written: everything allocated; never written: the rest.
    let end = ranges[2].end;
    let writers = (0..words.len() as u64).map(|a| (a < end) as u32).collect();
    (t, words, writers, ranges)
}

fn recover<T: Lfd>(t: &T, words: &[u64], writers: &[u32]) -> Result<Vec<u64>, String> {
    t.recover(&Image { words, writers })
}

/// The word outside `r` that links to a node inside it (mask: pointer bits).
fn link_into(words: &[u64], r: &Range<u64>, mask: u64) -> usize {
    (0..words.len())
        .find(|&a| {
            !r.contains(&(a as u64)) && words[a] & !mask != 0 && r.contains(&(words[a] & !mask))
        })
        .expect("a link into the last insert's nodes")
}

fn malformed<T: Lfd>(mask: u64) {
    let (t, words, writers, r) = three::<T>();
    assert_eq!(recover(&t, &words, &writers).unwrap(), vec![10, 20, 30]);
    // The last insert's nodes reachable but never written.
    let mut w = writers.clone();
    w[r[2].start as usize..r[2].end as usize].fill(0);
    assert!(recover(&t, &words, &w)
        .unwrap_err()
        .contains("never written"));
    // A link into them redirected to unwritten memory, then off the heap.
    let p = link_into(&words, &r[2], mask);
    for to in [r[2].end + 8, words.len() as u64 + 64] {
        let mut bad = words.clone();
        bad[p] = to;
        assert!(
            recover(&t, &bad, &writers).is_err(),
            "{:?}: link to {to} accepted",
            T::KIND
        );
    }
    // Key 30 rewritten as 5: out of order.
    let mut bad = words.clone();
    let at = (r[2].start..r[2].end)
        .find(|&a| words[a as usize] == 30)
        .unwrap();
    bad[at as usize] = 5;
    let e = recover(&t, &bad, &writers).unwrap_err();
    assert!(e.contains("order") || e.contains("range"), "{e}");
}

#[test]
fn bst_malformed() {
    malformed::<Bst>(3);
    // A node linking to itself.
    let (t, words, writers, r) = three::<Bst>();
    let p = link_into(&words, &r[2], 3);
    let mut bad = words.clone();
    bad[p] = p as u64 & !3;
    assert!(recover(&t, &bad, &writers).unwrap_err().contains("twice"));
    // Layout: insert 30 allocated its leaf, then the internal node above it.
    let (leaf, inner) = (r[2].start, r[2].start + 4);
    let edge = (inner + 1..inner + 3)
        .find(|&a| words[a as usize] == leaf)
        .unwrap() as usize;
    let mut flagged = words.clone();
    flagged[edge] |= 1;
    assert_eq!(
        recover(&t, &flagged, &writers).unwrap(),
        vec![10, 20],
        "a flagged leaf is deleted"
    );
    let mut bad = words.clone();
    bad[p] |= 1;
    assert!(recover(&t, &bad, &writers)
        .unwrap_err()
        .contains("flagged edge"));
}

#[test]
fn skiplist_malformed() {
    malformed::<Skiplist>(1);
}

/// A node that left level 0 may stay on an upper level only if deleted.
#[test]
fn skiplist_upper_levels() {
    let heap = Heap::new(1 << 16, 8);
    let m = Atomics(heap.clone());
    let t = block_on(Skiplist::create(&m, None));
    let tall = (41..).find(|&k| skiplist::height(k) >= 2).unwrap();
    let mut nodes = Vec::new();
    for k in [10, 20, tall] {
        nodes.push(m.alloc(0));
        assert!(block_on(t.apply(&m, Op::Insert(k))).ok);
    }
    let words = heap.snapshot();
    let writers = vec![1u32; words.len()];
    // Layout: [key, height, next_0, ...]. Unlink `tall` from level 0 only.
    let (b, c) = (nodes[1] as usize, nodes[2] as usize);
    let mut bad = words.clone();
    bad[b + 2] = words[c + 2];
    assert!(recover(&t, &bad, &writers)
        .unwrap_err()
        .contains("neither on level 0 nor deleted"));
    // The same, with `tall` marked on every level: a delete half done.
    for l in 0..skiplist::height(tall) {
        bad[c + 2 + l] |= 1;
    }
    assert_eq!(recover(&t, &bad, &writers).unwrap(), vec![10, 20]);
}
