//! A typed event queue ordered by `(time, sequence)`, for simulators that
//! own their events as values (no boxed closure per event). Events at the
//! same instant pop in the order they were pushed, so a run is the same
//! under the same seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pending events of type `E`. The heap holds only `(time, seq, slot)`,
/// packed in one `u128` (time, then a 40-bit sequence number, then a
/// 24-bit slot: one compare per step of a sift); events sit in a slab whose
/// slots are reused, so pushing and popping moves 16 bytes and allocates
/// nothing once the queue has grown.
pub struct TimedQueue<E> {
    heap: BinaryHeap<Reverse<u128>>,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
    next_seq: u64,
}

impl<E> Default for TimedQueue<E> {
    fn default() -> Self {
        TimedQueue {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }
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
        self.heap.push(Reverse(
            u128::from(time_ns) << 64 | seq << 24 | u128::from(slot),
        ));
        self.next_seq += 1;
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        let Reverse(key) = self.heap.pop()?;
        let (time_ns, slot) = ((key >> 64) as u64, (key as u32) & 0xFF_FFFF);
        self.free.push(slot);
        Some((
            time_ns,
            self.slab[slot as usize]
                .take()
                .expect("a queued slot holds its event"),
        ))
    }

    pub fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(k)| (k >> 64) as u64)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
}
