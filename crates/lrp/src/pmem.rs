//! The persistent-memory interface the data structures are written
//! against, once: word loads, stores and CAS with release/acquire
//! annotations (docs/LRP.md decision 2). Two implementations: the simulated machine
//! ([`crate::sim::SimMem`]) and real atomics ([`Atomics`], the volatile baseline).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use crate::trace::{EventId, Sync};

/// Word-addressed persistent memory. Every access is an `.await` point: the
/// simulator interleaves threads there.
#[allow(async_fn_in_trait)]
pub trait PMem {
    async fn load(&self, addr: u64, sync: Sync) -> u64;
    async fn store(&self, addr: u64, val: u64, sync: Sync);
    /// Compare-and-swap: `Ok(old)` if it wrote, `Err(current)` if not.
    async fn cas(&self, addr: u64, old: u64, new: u64, sync: Sync) -> Result<u64, u64>;
    /// A fresh, zero-filled block of `words` words (never reused: null
    /// recovery leaks unpublished nodes, docs/LRP.md decision 11).
    fn alloc(&self, words: u64) -> u64;
    /// The trace event of this thread's last successful write, if traced.
    fn last_write(&self) -> Option<EventId>;
}

fn ordering(sync: Sync) -> Ordering {
    match sync {
        Sync::Plain => Ordering::Relaxed,
        Sync::Acquire => Ordering::Acquire,
        Sync::Release => Ordering::Release,
        Sync::AcqRel => Ordering::AcqRel,
    }
}

/// A heap of real `AtomicU64`s shared by OS threads, with a bump allocator.
pub struct Heap {
    words: Vec<AtomicU64>,
    next: AtomicU64,
}

impl Heap {
    pub fn new(words: u64, reserved: u64) -> Arc<Heap> {
        Arc::new(Heap {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicU64::new(reserved),
        })
    }
}

impl Heap {
    /// The heap's words now (for reading a volatile run back with `recover`).
    pub fn snapshot(&self) -> Vec<u64> {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .collect()
    }
}

/// One thread's handle on a [`Heap`].
#[derive(Clone)]
pub struct Atomics(pub Arc<Heap>);

impl PMem for Atomics {
    async fn load(&self, addr: u64, sync: Sync) -> u64 {
        let o = match sync {
            Sync::Release | Sync::Plain => Ordering::Relaxed,
            _ => Ordering::Acquire,
        };
        self.0.words[addr as usize].load(o)
    }
    async fn store(&self, addr: u64, val: u64, sync: Sync) {
        let o = match sync {
            Sync::Acquire | Sync::Plain => Ordering::Relaxed,
            _ => Ordering::Release,
        };
        self.0.words[addr as usize].store(val, o)
    }
    async fn cas(&self, addr: u64, old: u64, new: u64, sync: Sync) -> Result<u64, u64> {
        let fail = match sync {
            Sync::Acquire | Sync::AcqRel => Ordering::Acquire,
            _ => Ordering::Relaxed,
        };
        self.0.words[addr as usize].compare_exchange(old, new, ordering(sync), fail)
    }
    fn alloc(&self, words: u64) -> u64 {
        let at = self.0.next.fetch_add(words, Ordering::Relaxed);
        assert!(
            at + words <= self.0.words.len() as u64,
            "volatile heap exhausted"
        );
        at
    }
    fn last_write(&self) -> Option<EventId> {
        None
    }
}

/// Run a future whose awaits never block (real atomics) to completion.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn noop_raw() -> RawWaker {
    fn clone(_: *const ()) -> RawWaker {
        noop_raw()
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    RawWaker::new(std::ptr::null(), &VTABLE)
}

/// A waker that does nothing: the schedulers here poll, they are not woken.
pub fn noop_waker() -> Waker {
    // SAFETY: every vtable function ignores its (null) data pointer.
    unsafe { Waker::from_raw(noop_raw()) }
}
