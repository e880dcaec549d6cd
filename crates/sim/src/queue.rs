//! A typed event queue ordered by `(time, sequence)`, for simulators that
//! own their events as values (no boxed closure per event). Events at the
//! same instant pop in the order they were pushed, so a run is the same
//! under the same seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Width of a calendar bucket: 2^6 = 64 ns.
const WIDTH_BITS: u32 = 6;
/// Buckets in the calendar: with 64 ns each, 131 µs ahead of the earliest
/// event; later events wait in a heap until the calendar reaches them.
const BUCKETS: u64 = 1 << 11;

/// Pending events of type `E`, as a calendar queue: events due within
/// [`BUCKETS`] buckets of the earliest sit unsorted in the bucket of their
/// time (a few each, for a simulated network), later ones in a binary heap.
/// Each is keyed by `(time, seq, slot)` packed in one `u128` (time, then a
/// 40-bit sequence number, then a 24-bit slot), and a pop takes the least
/// key of the first non-empty bucket, so the order is exactly that of a
/// heap on `(time, seq)`. Events sit in a slab whose slots are reused, so
/// pushing and popping moves 16 bytes and allocates nothing once the queue
/// has grown.
pub struct TimedQueue<E> {
    buckets: Vec<Vec<u128>>,
    /// The bucket number (time >> WIDTH_BITS) of the first bucket that may
    /// hold an event: everything queued is at or after it, or (pushed for
    /// an earlier time after a peek moved on) sits in its bucket.
    cursor: u64,
    /// Events in the buckets.
    near: usize,
    /// Events at or past bucket `cursor + BUCKETS`.
    far: BinaryHeap<Reverse<u128>>,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
    next_seq: u64,
}

impl<E> Default for TimedQueue<E> {
    fn default() -> Self {
        TimedQueue {
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            cursor: 0,
            near: 0,
            far: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }
}

fn bucket_of(key: u128) -> u64 {
    ((key >> 64) as u64) >> WIDTH_BITS
}

impl<E> TimedQueue<E> {
    pub fn push(&mut self, time_ns: u64, ev: E) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(ev);
                s
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        assert!(slot < 1 << 24, "more than 16 M events queued");
        let seq = u128::from(self.next_seq & ((1 << 40) - 1));
        self.next_seq += 1;
        self.insert(u128::from(time_ns) << 64 | seq << 24 | u128::from(slot));
    }

    fn insert(&mut self, key: u128) {
        let b = bucket_of(key).max(self.cursor);
        if b >= self.cursor + BUCKETS {
            self.far.push(Reverse(key));
        } else {
            self.put(b, key);
        }
    }

    fn put(&mut self, b: u64, key: u128) {
        self.buckets[(b % BUCKETS) as usize].push(key);
        self.near += 1;
    }

    /// Move the cursor to the first non-empty bucket (pulling in far
    /// events as the calendar's window moves); false if nothing is queued.
    fn settle(&mut self) -> bool {
        loop {
            if self.near == 0 {
                let Some(&Reverse(k)) = self.far.peek() else {
                    return false;
                };
                self.cursor = self.cursor.max(bucket_of(k));
                self.pull_far();
            }
            if !self.buckets[(self.cursor % BUCKETS) as usize].is_empty() {
                return true;
            }
            self.cursor += 1;
            self.pull_far();
        }
    }

    /// Far events that the window `[cursor, cursor + BUCKETS)` now covers.
    fn pull_far(&mut self) {
        let end = self.cursor + BUCKETS;
        while let Some(&Reverse(k)) = self.far.peek() {
            if bucket_of(k) >= end {
                return;
            }
            self.far.pop();
            self.put(bucket_of(k).max(self.cursor), k);
        }
    }

    /// The least key of the cursor's bucket, and where it is.
    fn least(&self) -> (usize, u128) {
        let b = &self.buckets[(self.cursor % BUCKETS) as usize];
        let (mut at, mut min) = (0, b[0]);
        for (j, &k) in b.iter().enumerate().skip(1) {
            if k < min {
                (at, min) = (j, k);
            }
        }
        (at, min)
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        if !self.settle() {
            return None;
        }
        let (at, key) = self.least();
        self.buckets[(self.cursor % BUCKETS) as usize].swap_remove(at);
        self.near -= 1;
        let (time_ns, slot) = ((key >> 64) as u64, (key as u32) & 0xFF_FFFF);
        self.free.push(slot);
        Some((
            time_ns,
            self.slab[slot as usize]
                .take()
                .expect("a queued slot holds its event"),
        ))
    }

    pub fn peek_time(&mut self) -> Option<u64> {
        self.settle().then(|| (self.least().1 >> 64) as u64)
    }

    pub fn len(&self) -> usize {
        self.near + self.far.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_push_order_and_reuses_slots() {
        let mut q = TimedQueue::default();
        for (t, e) in [(30, 'a'), (10, 'b'), (30, 'c'), (10, 'd')] {
            q.push(t, e);
        }
        let order: Vec<(u64, char)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, 'b'), (10, 'd'), (30, 'a'), (30, 'c')]);
        q.push(5, 'e');
        assert_eq!((q.len(), q.slab.len(), q.peek_time()), (1, 4, Some(5)));
    }

    /// The calendar pops exactly as a heap on `(time, seq)` would: random
    /// pushes near and far (past the calendar's window), interleaved with
    /// pops and peeks, and pushes before a peeked time.
    #[test]
    fn pops_as_a_heap_would_across_the_window() {
        let mut rng = crate::Rng::new(7);
        let mut q = TimedQueue::default();
        let mut heap = BinaryHeap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for round in 0..200_000u64 {
            if rng.below(3) > 0 || heap.is_empty() {
                let ahead = match rng.below(10) {
                    0 => rng.below(10_000_000),
                    1 => 0,
                    _ => rng.below(2_000),
                };
                q.push(now + ahead, round);
                heap.push(Reverse((now + ahead, seq, round)));
                seq += 1;
            } else if rng.below(5) == 0 {
                let t = q.peek_time();
                assert_eq!(t, heap.peek().map(|Reverse(e)| e.0));
            } else {
                let Reverse((t, _, e)) = heap.pop().unwrap();
                assert_eq!(q.pop(), Some((t, e)), "round {round}");
                now = t;
            }
            assert_eq!(q.len(), heap.len());
        }
        while let Some(Reverse((t, _, e))) = heap.pop() {
            assert_eq!(q.pop(), Some((t, e)));
        }
        assert_eq!(q.pop(), None);
    }
}
