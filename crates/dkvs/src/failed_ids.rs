//! `failed_ids`: the 64 Ki-bit set of coordinator ids declared failed
//! (Pandora paper §3.1.2, PILL). A lock whose owner is in this set is stray:
//! reads treat it as unlocked and writers may steal it with a second CAS.
//! Filled by the membership service after log recovery; settable in tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone)]
pub struct FailedIds {
    bits: Arc<[AtomicU64]>,
}

impl Default for FailedIds {
    fn default() -> Self {
        FailedIds {
            bits: (0..1024)
                .map(|_| AtomicU64::new(0))
                .collect::<Vec<_>>()
                .into(),
        }
    }
}

impl FailedIds {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn insert(&self, id: u16) {
        self.bits[id as usize / 64].fetch_or(1 << (id % 64), Ordering::SeqCst);
    }
    pub fn remove(&self, id: u16) {
        self.bits[id as usize / 64].fetch_and(!(1 << (id % 64)), Ordering::SeqCst);
    }
    pub fn contains(&self, id: u16) -> bool {
        self.bits[id as usize / 64].load(Ordering::Acquire) & (1 << (id % 64)) != 0
    }
    pub fn count(&self) -> u32 {
        self.bits
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bitset_covers_all_16_bit_ids() {
        let f = super::FailedIds::new();
        for id in [0u16, 63, 64, 4095, 65535] {
            assert!(!f.contains(id));
            f.insert(id);
            assert!(f.contains(id));
        }
        assert_eq!(f.count(), 5);
        f.remove(64);
        assert!(!f.contains(64) && f.contains(63));
    }
}
