//! A compute node: the compute-side library shared by its coordinators
//! (the Pandora paper, §2.1). It owns the fabric handle, the layout, the address
//! cache and the `failed_ids` set; coordinators are cheap handles onto it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;
use std::sync::Arc;

use tandem_fabric::Fabric;

use crate::config::{BugSwitches, Mode, OnStray, StoreConfig, TableId};
use crate::failed_ids::FailedIds;
use crate::layout::Layout;

/// Bound on cached slot addresses per compute node. A full cache starts
/// over: under inserts and deletes it fills with the addresses of deleted
/// keys, which only cost a probe each.
pub const ADDRESS_CACHE_MAX: usize = 1 << 21;

pub struct ComputeNode<F: Fabric> {
    pub(crate) fabric: F,
    pub(crate) layout: Arc<Layout>,
    pub(crate) mode: Mode,
    pub(crate) bugs: BugSwitches,
    pub(crate) on_stray: OnStray,
    /// Whether deletes queue their tombstones for reclamation.
    pub(crate) reclaim: bool,
    pub(crate) failed: FailedIds,
    /// Whether the coordinators' invariant assertions run (`StoreConfig::assertions`).
    pub(crate) asserts: bool,
    /// Memory nodes this compute node has been told are down (docs/DESIGN.md §4.6).
    pub(crate) memory: MemoryView,
    /// (table, key) → slot index in its partition: a hint, checked against
    /// the slot's key on use (a reclaimed slot may hold another key since).
    addr_cache: RefCell<HashMap<(TableId, u64), u32, BuildHasherDefault<KeyHasher>>>,
}

impl<F: Fabric> ComputeNode<F> {
    pub fn new(fabric: F, cfg: &StoreConfig, layout: Arc<Layout>, failed: FailedIds) -> Rc<Self> {
        Self::with_memory_view(fabric, cfg, layout, failed, MemoryView::default())
    }

    /// A compute node whose view of down memory nodes the caller (the
    /// membership runtime) updates from another thread.
    pub fn with_memory_view(
        fabric: F,
        cfg: &StoreConfig,
        layout: Arc<Layout>,
        failed: FailedIds,
        memory: MemoryView,
    ) -> Rc<Self> {
        Rc::new(ComputeNode {
            fabric,
            layout,
            mode: cfg.mode,
            bugs: cfg.bugs,
            on_stray: cfg.on_stray,
            reclaim: cfg.reclaim,
            memory,
            failed,
            asserts: cfg.assertions.unwrap_or(!cfg.bugs.any()),
            addr_cache: RefCell::new(HashMap::default()),
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    pub fn failed_ids(&self) -> &FailedIds {
        &self.failed
    }

    /// The memory nodes this compute node considers down; the membership
    /// service updates it, and primaries are recomputed from it.
    pub fn memory_view(&self) -> &MemoryView {
        &self.memory
    }

    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    pub(crate) fn cached_slot(&self, table: TableId, key: u64) -> Option<u32> {
        self.addr_cache.borrow().get(&(table, key)).copied()
    }

    pub(crate) fn evict_slot(&self, table: TableId, key: u64) {
        self.addr_cache.borrow_mut().remove(&(table, key));
    }

    pub(crate) fn cache_slot(&self, table: TableId, key: u64, slot: u32) {
        let mut c = self.addr_cache.borrow_mut();
        if c.len() >= ADDRESS_CACHE_MAX {
            c.clear();
        }
        c.insert((table, key), slot);
    }
}

/// A fast multiplicative hasher for (table, key) pairs: the address cache is
/// on every transaction's path and needs no DoS resistance (keys are ours).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
    }
}

pub use crate::view::MemoryView;
