//! Heap allocations on the hot path: a micro transaction
//! (one read, one read-modify-write) on the in-process fabric, counted by a
//! counting global allocator over many committed transactions after a
//! warm-up. A warm coordinator allocates nothing: its batches, completion
//! vectors and byte buffers come from its `VerbArena`, its read, guard and
//! write sets are reused, and the borrowing reads (`read_ref`,
//! `read_for_update_ref`) hand out the transaction's own buffers. The
//! copying reads allocate exactly the one value each returns.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;
use std::sync::Arc;

use futures::FutureExt;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::{ComputeNode, FailedIds, Layout, Mode, StoreConfig, TableSpec};
use tandem_fabric::inline::InlineCluster;

struct Counting;

thread_local! {
    /// Per thread, so tests running side by side do not count each other's.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    ALLOCS.with(|n| n.set(n.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        count();
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, new: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Run `f` to completion at once: the inline fabric never suspends.
fn now<T>(f: impl std::future::Future<Output = T>) -> T {
    f.now_or_never().expect("inline verbs complete at once")
}

/// Allocations per committed transaction, over `n` after a warm-up, with
/// the borrowing reads (`borrow`) or the copying ones.
fn allocations_per_transaction(n: u64, borrow: bool) -> f64 {
    allocations_in_mode(Mode::Pandora, n, borrow)
}

/// [`allocations_per_transaction`] in `mode`.
fn allocations_in_mode(mode: Mode, n: u64, borrow: bool) -> f64 {
    let tables = vec![TableSpec {
        id: 0,
        name: "micro".into(),
        value_size: 40,
        capacity: 1000,
    }];
    let store = StoreConfig::new(mode, 3, 2, tables);
    let layout = Arc::new(Layout::new(&store).unwrap());
    let size = *layout.region_bytes.iter().max().unwrap();
    let cluster = InlineCluster::with_nodes(3, size, 1);
    let mut ld = Loader::new(&cluster.join(0).unwrap(), layout.clone());
    for k in 0..100u64 {
        now(ld.put(0, k, &[0u8; 40])).unwrap();
    }
    now(ld.finish()).unwrap();
    let node = ComputeNode::new(cluster.join(1).unwrap(), &store, layout, FailedIds::new());
    let mut c = node.coordinator(1);
    let mut one = |i: u64| {
        let (r, w) = (i % 100, (i * 7 + 1) % 100);
        let r = if r == w { (r + 1) % 100 } else { r };
        let mut tx = c.begin();
        let mut v = [0u8; 40];
        if borrow {
            now(tx.read_ref(0, r)).unwrap();
            v.copy_from_slice(now(tx.read_for_update_ref(0, w)).unwrap());
        } else {
            now(tx.read(0, r)).unwrap();
            v.copy_from_slice(&now(tx.read_for_update(0, w)).unwrap());
        }
        v[0] = v[0].wrapping_add(1);
        now(tx.write(0, w, &v)).unwrap();
        now(tx.commit()).unwrap();
        assert!(c.unlocks_landed());
    };
    (0..1000).for_each(&mut one);
    let before = ALLOCS.with(Cell::get);
    (1000..1000 + n).for_each(&mut one);
    (ALLOCS.with(Cell::get) - before) as f64 / n as f64
}

#[test]
fn a_warm_coordinator_commits_a_micro_transaction_without_allocating() {
    let per_tx = allocations_per_transaction(10_000, true);
    eprintln!("allocations per committed micro transaction, borrowing reads: {per_tx:.2}");
    assert_eq!(per_tx, 0.0, "{per_tx:.2} allocations per transaction");
}

#[test]
fn the_copying_reads_allocate_only_the_values_they_return() {
    let per_tx = allocations_per_transaction(10_000, false);
    eprintln!("allocations per committed micro transaction, copying reads: {per_tx:.2}");
    assert_eq!(per_tx, 2.0, "{per_tx:.2} allocations per transaction");
}

#[test]
fn the_baselines_undo_and_lock_logs_allocate_nothing_either() {
    for mode in [Mode::Ford, Mode::Traditional] {
        let per_tx = allocations_in_mode(mode, 10_000, true);
        eprintln!("{mode:?}: allocations per committed micro transaction: {per_tx:.2}");
        assert_eq!(
            per_tx, 0.0,
            "{mode:?}: {per_tx:.2} allocations per transaction"
        );
    }
}
