//! What a compute node knows of the memory nodes (docs/DESIGN.md §4.6):
//! which are down, and which the membership has declared failed.
//!
//! The two differ for a moment. A configuration that declares a memory node
//! failed is applied in steps: the compute node cuts its links to it, lets
//! the transactions in flight decide, then switches primaries. Transactions
//! in flight may already rely on the declaration (a commit that missed a
//! write there may be acknowledged), so `declared` is set first and `down`
//! once they have drained.
//!
//! A commit whose write failed at a replica that is not declared failed waits
//! here for the verdict ([`MemoryView::verdict`]): the replica may be alive
//! behind a reset link or a partition, and the membership may never declare
//! it. Whoever runs the compute node watches [`MemoryView::awaited`] and ends
//! the node's incarnation when a verdict is overdue; log recovery then
//! settles the waiting transactions.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tandem_fabric::MemNodeId;

/// Which memory nodes are down or declared failed, as this compute node was
/// told (up to 64). The primary of a partition is its first replica not down.
#[derive(Clone, Default)]
pub struct MemoryView {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    down: AtomicU64,
    declared: AtomicU64,
    waiting: Mutex<Waiting>,
}

/// The commits waiting for a verdict: how many per memory node, and whom
/// to wake.
struct Waiting {
    count: [u32; 64],
    wakers: Vec<Waker>,
}

impl Default for Waiting {
    fn default() -> Self {
        Waiting {
            count: [0; 64],
            wakers: Vec::new(),
        }
    }
}

impl MemoryView {
    /// Mark `node` down (which declares it failed too) or up again (a
    /// replacement was filled: neither down nor declared).
    pub fn set_down(&self, node: MemNodeId, down: bool) {
        let bit = 1u64 << node;
        if down {
            self.declare_failed(node);
            self.inner.down.fetch_or(bit, Ordering::SeqCst);
        } else {
            self.inner.down.fetch_and(!bit, Ordering::SeqCst);
            self.inner.declared.fetch_and(!bit, Ordering::SeqCst);
        }
    }

    /// The membership declared `node` failed: commits that missed a write
    /// there may go on. Primaries move only with [`MemoryView::set_down`].
    pub fn declare_failed(&self, node: MemNodeId) {
        self.inner.declared.fetch_or(1u64 << node, Ordering::SeqCst);
        let wakers = std::mem::take(&mut self.lock().wakers);
        wakers.into_iter().for_each(Waker::wake);
    }

    pub fn is_down(&self, node: MemNodeId) -> bool {
        self.inner.down.load(Ordering::SeqCst) & (1u64 << node) != 0
    }

    /// Down, or declared failed and about to be.
    pub fn is_declared(&self, node: MemNodeId) -> bool {
        self.inner.declared.load(Ordering::SeqCst) & (1u64 << node) != 0
    }

    /// Resolves once `node` is declared failed.
    pub fn verdict(&self, node: MemNodeId) -> Verdict {
        Verdict {
            view: self.clone(),
            node,
            counted: false,
        }
    }

    /// Bit m set: a commit waits for a verdict on memory node m, which is
    /// not declared failed yet.
    pub fn awaited(&self) -> u64 {
        let declared = self.inner.declared.load(Ordering::SeqCst);
        let w = self.lock();
        let waited = w.count.iter().enumerate().filter(|(_, &c)| c > 0);
        waited.fold(0, |mask, (m, _)| mask | 1 << m) & !declared
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.inner.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`MemoryView::verdict`]: counted in [`MemoryView::awaited`] while pending.
pub struct Verdict {
    view: MemoryView,
    node: MemNodeId,
    counted: bool,
}

impl Future for Verdict {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.view.is_declared(self.node) {
            return Poll::Ready(());
        }
        let node = self.node as usize;
        let mut w = self.view.lock();
        // Declared between the check and the lock: its wake-up is spent.
        if self.view.is_declared(self.node) {
            return Poll::Ready(());
        }
        if !w.wakers.iter().any(|k| k.will_wake(cx.waker())) {
            w.wakers.push(cx.waker().clone());
        }
        if !self.counted {
            w.count[node] += 1;
            drop(w);
            self.counted = true;
        }
        Poll::Pending
    }
}

impl Drop for Verdict {
    fn drop(&mut self) {
        if self.counted {
            self.view.lock().count[self.node as usize] -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker;

    #[test]
    fn a_verdict_waits_for_the_declaration_and_counts_while_it_waits() {
        let view = MemoryView::default();
        let mut v = Box::pin(view.verdict(2));
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(v.as_mut().poll(&mut cx).is_pending());
        assert_eq!(view.awaited(), 1 << 2);
        view.declare_failed(2);
        assert_eq!(view.awaited(), 0, "a declared node is not awaited");
        assert!(v.as_mut().poll(&mut cx).is_ready());
        assert!(!view.is_down(2), "declared, primaries not moved yet");
        drop(v);
        view.set_down(2, false);
        let mut again = Box::pin(view.verdict(2));
        assert!(again.as_mut().poll(&mut cx).is_pending());
        drop(again);
        assert_eq!(view.awaited(), 0, "a dropped wait is not counted");
    }
}
