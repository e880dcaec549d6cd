//! What each persistency mechanism costs (thesis §3.6, spec §4.5): the
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
use crate::machine::{Config, Stats};
use crate::sim::{run, Body, Machine, SimMem};
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
        seed: o.seed,
        ret_watermark: o.ret_watermark,
        ..Config::thesis(o.threads, heap_words(o))
    };
    let m = Rc::new(RefCell::new(Machine::new(cfg, o.policy)));
    let mut rng = Rng::new(o.seed);
    let lfd = prefill::<L>(&m, o, &mut rng);
    m.borrow_mut().settle();
    let range = 2 * o.size as u64;
    let bodies = (0..o.threads).map(|t| {
        let (mem, mut rng, ops) = (SimMem { m: m.clone(), t }, rng.fork(), o.ops);
        let body: Body = Box::pin(async move {
            for _ in 0..ops {
                let key = 1 + rng.below(range);
                let op = if rng.chance(0.5) {
                    Op::Insert(key)
                } else {
                    Op::Delete(key)
                };
                lfd.apply(&mem, op).await;
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
