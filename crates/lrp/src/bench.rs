//! What each persistency mechanism costs (thesis §3.6): the
//! Synchrobench-style driver on the machine. A structure is prefilled to
//! `size` keys (drawn from 1..=2·size, Synchrobench's convention), then
//! every thread runs inserts and deletes 1:1 on random keys of that range
//! (100 % updates). Reported in counted cycles of the cost model (Table 3.1),
//! not wall-clock: execution time (the slowest core), stall cycles, and
//! write-backs, with the share on the critical path.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use tandem_sim::Rng;

use crate::lfd::{Lfd, LfdKind, Op};
use crate::machine::{Config, Stats, LINE_WORDS};
use crate::pmem::PMem;
use crate::sim::{run, Body, Machine, SimMem};
use crate::trace::{EventId, Sync as Order};
use crate::PolicyKind;

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchOpts {
    pub lfd: LfdKind,
    pub policy: PolicyKind,
    pub threads: usize,
    pub size: usize,
    /// Operations per thread.
    pub ops: usize,
    /// NVM write latency: 120 (cached mode) or 350 (uncached).
    pub nvm: u64,
    /// Cycles per hop of the on-chip mesh ([`Config::hop`]; 0 leaves the
    /// network out).
    pub hop: u64,
    /// Also run the Synchrobench driver's own loads and stores (its
    /// per-thread seed and counters, see [`Driver`]).
    pub driver: bool,
    /// Also run the stores a whole-binary trace has around each operation:
    /// its call frames on the thread's stack, and malloc's on the thread's
    /// allocator line (see [`Runtime`]).
    pub stack_alloc: bool,
    /// LRP: RET occupancy that triggers persisting the oldest release (of 32).
    pub ret_watermark: usize,
    pub seed: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchResult {
    pub opts: BenchOpts,
    /// Execution time: cycles until the last core finished.
    pub cycles: u64,
    pub stats: Stats,
    /// Share of write-backs their own core stalled for.
    pub critical_share: f64,
    pub wall_seconds: f64,
}

fn heap_words(o: &BenchOpts) -> u64 {
    // Words per key: a node (the BST allocates a leaf and an internal node;
    // skiplist nodes average two levels), plus the hash set's bucket heads.
    let per_key = match o.lfd {
        LfdKind::List | LfdKind::Queue => 2,
        LfdKind::Hash => 4,
        LfdKind::Bst => 8,
        LfdKind::Skiplist => 10,
    };
    let keys = (o.size + o.threads * o.ops) as u64;
    keys * per_key * 3 / 2 + o.threads as u64 * 1024 + 65536
}

/// The prefill keys, in an order that keeps prefilling cheap: descending
/// for the sorted lists (each insert lands at the front), random for the
/// tree (so it is not a path).
fn prefill_keys(o: &BenchOpts, rng: &mut Rng) -> Vec<u64> {
    let range = 2 * o.size as u64;
    let mut keys: Vec<u64> = (1..=range).filter(|_| rng.chance(0.5)).collect();
    match o.lfd {
        LfdKind::List | LfdKind::Skiplist => keys.reverse(),
        _ => {
            for i in (1..keys.len()).rev() {
                keys.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
    }
    keys
}

pub fn bench(o: &BenchOpts) -> BenchResult {
    match o.lfd {
        LfdKind::List => bench_lfd::<crate::lfd::list::List>(o),
        LfdKind::Hash => bench_lfd::<crate::lfd::hash::Hash>(o),
        LfdKind::Queue => bench_lfd::<crate::lfd::queue::Queue>(o),
        LfdKind::Bst => bench_lfd::<crate::lfd::bst::Bst>(o),
        LfdKind::Skiplist => bench_lfd::<crate::lfd::skiplist::Skiplist>(o),
    }
}

fn bench_lfd<L: Lfd>(o: &BenchOpts) -> BenchResult {
    let started = Instant::now();
    let cfg = Config {
        nvm: o.nvm,
        hop: o.hop,
        seed: o.seed,
        ret_watermark: o.ret_watermark,
        ..Config::thesis(o.threads, heap_words(o))
    };
    let m = Rc::new(RefCell::new(Machine::new(cfg, o.policy)));
    let mut rng = Rng::new(o.seed);
    let lfd = prefill::<L>(&m, o, &mut rng);
    m.borrow_mut().settle();
    let range = 2 * o.size as u64;
    let driver = Driver::place(&m, o);
    let runtime = Runtime::place(&m, o);
    let bodies = (0..o.threads).map(|t| {
        let (mut rng, ops) = (rng.fork(), o.ops);
        let mem = Binary::new(SimMem { m: m.clone(), t }, runtime.map(|r| r.thread(t)));
        let td = driver.map(|d| d.thread(t));
        let body: Body = Box::pin(async move {
            for _ in 0..ops {
                let key = 1 + rng.below(range);
                let insert = rng.chance(0.5);
                let op = if insert {
                    Op::Insert(key)
                } else {
                    Op::Delete(key)
                };
                if let Some(td) = td {
                    Driver::draw_key(&mem.mem, td).await;
                }
                mem.call().await;
                let ok = lfd.apply(&mem, op).await.ok;
                mem.ret().await;
                if let Some(td) = td {
                    Driver::count(&mem.mem, td, insert, ok).await;
                }
            }
        });
        Some(body)
    });
    run(&m, bodies.collect());
    let mb = m.borrow();
    let stats = mb.core.stats.clone();
    let critical_share = stats.critical as f64 / stats.persists.max(1) as f64;
    BenchResult {
        opts: o.clone(),
        cycles: mb.core.clock.iter().copied().max().unwrap_or(0),
        stats,
        critical_share,
        wall_seconds: started.elapsed().as_secs_f64(),
    }
}

/// The Synchrobench driver's own memory traffic (`test()` in its
/// `test.c`): each thread's state is one `thread_data_t` of an unpadded
/// array (184 bytes, 23 words, so neighbours share lines: thread `t`'s
/// seed sits on the line of thread `t + 1`'s first fields). For every
/// random key `rand_r` reads and rewrites the thread's `seed`; after
/// every update the thread bumps `nb_add`/`nb_remove` and, when it took
/// effect, `nb_added`/`nb_removed`, then reads the counters and the
/// update rate to pick the next operation ("effective" mode, its
/// default). The thesis simulated whole programs whose memory is NVM, so
/// these plain stores reach the persistency mechanism like the
/// structure's own; a core rewrites them every operation.
#[derive(Clone, Copy)]
struct Driver {
    base: u64,
}

impl Driver {
    const WORDS: u64 = 23;
    const RANGE: u64 = 1;
    const UPDATE: u64 = 2;
    const NB_ADD: u64 = 4;
    const NB_ADDED: u64 = 5;
    const NB_REMOVE: u64 = 6;
    const NB_REMOVED: u64 = 7;
    const NB_CONTAINS: u64 = 8;
    const SEED: u64 = 19;

    fn place(m: &Rc<RefCell<Machine>>, o: &BenchOpts) -> Option<Driver> {
        let mut m = m.borrow_mut();
        // Whole lines, so the structure's later nodes do not share the
        // array's last line (neighbouring threads still share lines).
        let words = (Self::WORDS * o.threads as u64).next_multiple_of(LINE_WORDS);
        o.driver.then(|| Driver {
            base: m.alloc(0, words),
        })
    }

    fn thread(self, t: usize) -> u64 {
        self.base + Self::WORDS * t as u64
    }

    /// `rand_range_re(&d->seed, d->range)`.
    async fn draw_key(mem: &SimMem, td: u64) {
        mem.load(td + Self::RANGE, Order::Plain).await;
        let seed = mem.load(td + Self::SEED, Order::Plain).await;
        let next = seed.wrapping_mul(1103515245).wrapping_add(12345) & 0xffff_ffff;
        mem.store(td + Self::SEED, next, Order::Plain).await;
    }

    /// The counters after an add or a remove, and the next operation's pick.
    async fn count(mem: &SimMem, td: u64, insert: bool, ok: bool) {
        let (tried, done) = if insert {
            (Self::NB_ADD, Self::NB_ADDED)
        } else {
            (Self::NB_REMOVE, Self::NB_REMOVED)
        };
        let bumps: &[u64] = if ok { &[done, tried] } else { &[tried] };
        for &f in bumps {
            let n = mem.load(td + f, Order::Plain).await;
            mem.store(td + f, n + 1, Order::Plain).await;
        }
        let next = [Self::NB_ADDED, Self::NB_REMOVED, Self::UPDATE];
        for f in next
            .into_iter()
            .chain([Self::NB_ADD, Self::NB_REMOVE, Self::NB_CONTAINS])
        {
            mem.load(td + f, Order::Plain).await;
        }
    }
}

/// The rest of what a whole-binary trace holds (the thesis traced the
/// benchmark's binary with Pin, so every store it made reached the
/// persistency mechanism): the call frames of each operation on the
/// thread's stack, and malloc's bookkeeping for each node. Per thread, two
/// stack lines and one allocator line, apart from other threads' (stacks
/// are far apart, and glibc's per-thread cache is a block of its own):
/// - each operation calls two functions (the operation, and the search it
///   starts with), each of which pushes its return address and three
///   callee-saved registers on entry (four stores to one stack line) and
///   pops them on return (four loads); the same words every operation;
/// - each allocation first takes a block off the thread's free list: load
///   and store the list's head, load and store its count (glibc's
///   thread cache: `entries[i]` and `counts[i]`). Nothing is freed:
///   Synchrobench's lock-free structures never free a removed node, and
///   neither do ours (docs/LRP.md decision 11).
#[derive(Clone, Copy)]
struct Runtime {
    base: u64,
}

impl Runtime {
    const FRAMES: u64 = 2;
    const FRAME_STORES: u64 = 4;
    /// The allocator line follows the stack lines.
    const HEAD: u64 = Self::FRAMES * LINE_WORDS;
    const COUNT: u64 = Self::HEAD + 1;
    const WORDS: u64 = Self::HEAD + LINE_WORDS;

    fn place(m: &Rc<RefCell<Machine>>, o: &BenchOpts) -> Option<Runtime> {
        let words = Self::WORDS * o.threads as u64;
        o.stack_alloc.then(|| Runtime {
            base: m.borrow_mut().alloc(0, words),
        })
    }

    fn thread(self, t: usize) -> u64 {
        self.base + Self::WORDS * t as u64
    }
}

/// A thread's memory as the whole binary uses it: [`Runtime`]'s stack
/// accesses around each operation, and malloc's before a new block's first
/// use (the structure's own `alloc` only bumps a pointer).
struct Binary {
    mem: SimMem,
    runtime: Option<u64>,
    mallocs: Cell<u64>,
}

impl Binary {
    fn new(mem: SimMem, runtime: Option<u64>) -> Binary {
        Binary {
            mem,
            runtime,
            mallocs: Cell::new(0),
        }
    }

    /// The frames' pushes, innermost last.
    async fn call(&self) {
        let Some(rt) = self.runtime else { return };
        for f in (0..Runtime::FRAMES).rev() {
            for w in 0..Runtime::FRAME_STORES {
                self.mem
                    .store(rt + f * LINE_WORDS + w, f + w, Order::Plain)
                    .await;
            }
        }
    }

    /// The frames' pops.
    async fn ret(&self) {
        let Some(rt) = self.runtime else { return };
        for f in 0..Runtime::FRAMES {
            for w in 0..Runtime::FRAME_STORES {
                self.mem.load(rt + f * LINE_WORDS + w, Order::Plain).await;
            }
        }
    }

    /// malloc's bookkeeping for the blocks allocated since the last access.
    async fn malloc(&self) {
        let Some(rt) = self.runtime else { return };
        for _ in 0..self.mallocs.replace(0) {
            for f in [Runtime::HEAD, Runtime::COUNT] {
                let n = self.mem.load(rt + f, Order::Plain).await;
                self.mem.store(rt + f, n + 1, Order::Plain).await;
            }
        }
    }
}

impl PMem for Binary {
    async fn load(&self, addr: u64, sync: Order) -> u64 {
        self.malloc().await;
        self.mem.load(addr, sync).await
    }
    async fn store(&self, addr: u64, val: u64, sync: Order) {
        self.malloc().await;
        self.mem.store(addr, val, sync).await
    }
    async fn cas(&self, addr: u64, old: u64, new: u64, sync: Order) -> Result<u64, u64> {
        self.malloc().await;
        self.mem.cas(addr, old, new, sync).await
    }
    fn alloc(&self, words: u64) -> u64 {
        self.mallocs.set(self.mallocs.get() + 1);
        self.mem.alloc(words)
    }
    fn last_write(&self) -> Option<EventId> {
        self.mem.last_write()
    }
}

fn prefill<L: Lfd>(m: &Rc<RefCell<Machine>>, o: &BenchOpts, rng: &mut Rng) -> L {
    let slot = Rc::new(Cell::new(None));
    let (mem, out, size, keys) = (
        SimMem { m: m.clone(), t: 0 },
        slot.clone(),
        o.size,
        prefill_keys(o, rng),
    );
    let body: Body = Box::pin(async move {
        let lfd = L::create_sized(&mem, None, size).await;
        for k in keys {
            lfd.apply(&mem, Op::Insert(k)).await;
        }
        out.set(Some(lfd));
    });
    run(m, vec![Some(body)]);
    slot.take().expect("prefill ran")
}

/// The volatile baseline: the same structure and workload on real atomics
/// and OS threads (no persistency at all), in operations per second of
/// wall-clock time on this machine.
pub fn volatile(lfd: LfdKind, threads: usize, size: usize, ops: usize, seed: u64) -> f64 {
    match lfd {
        LfdKind::List => volatile_lfd::<crate::lfd::list::List>(threads, size, ops, seed),
        LfdKind::Hash => volatile_lfd::<crate::lfd::hash::Hash>(threads, size, ops, seed),
        LfdKind::Queue => volatile_lfd::<crate::lfd::queue::Queue>(threads, size, ops, seed),
        LfdKind::Bst => volatile_lfd::<crate::lfd::bst::Bst>(threads, size, ops, seed),
        LfdKind::Skiplist => {
            volatile_lfd::<crate::lfd::skiplist::Skiplist>(threads, size, ops, seed)
        }
    }
}

fn volatile_lfd<L: Lfd + Send + Sync>(threads: usize, size: usize, ops: usize, seed: u64) -> f64 {
    use crate::pmem::{block_on, Atomics, Heap};
    let o = BenchOpts {
        lfd: L::KIND,
        policy: PolicyKind::Nop,
        threads,
        size,
        ops,
        nvm: 0,
        hop: 0,
        driver: false,
        stack_alloc: false,
        ret_watermark: 0,
        seed,
    };
    let heap = Heap::new(heap_words(&o), crate::machine::LINE_WORDS);
    let mut rng = Rng::new(seed);
    let lfd = block_on(async {
        let m = Atomics(heap.clone());
        let lfd = L::create_sized(&m, None, size).await;
        for k in prefill_keys(&o, &mut rng) {
            lfd.apply(&m, Op::Insert(k)).await;
        }
        lfd
    });
    let range = 2 * size as u64;
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (m, mut rng) = (Atomics(heap.clone()), rng.fork());
            s.spawn(move || {
                for _ in 0..ops {
                    let key = 1 + rng.below(range);
                    let op = if rng.chance(0.5) {
                        Op::Insert(key)
                    } else {
                        Op::Delete(key)
                    };
                    block_on(lfd.apply(&m, op));
                }
            });
        }
    });
    (threads * ops) as f64 / started.elapsed().as_secs_f64()
}
