//! Post-run inspection of the whole store through verbs: the invariants every
//! run must end with (docs/DESIGN.md §1 principle 4): replicas identical, no lock
//! left held, and the live contents for application-level checks.

use std::collections::BTreeMap;

use futures::future::join_all;
use tandem_fabric::batch;
use tandem_fabric::{Fabric, MemNodeId, QueuePair, Verb, VerbError};

use crate::config::TableId;
use crate::layout::{Layout, TableLayout, ASSOC};
use crate::slot::{LockWord, SlotImage, NO_KEY};

/// Bytes per inspection read.
const CHUNK_BYTES: u64 = 64 * 1024;

/// Every slot of every replica of every partition of one table.
pub struct TableSnapshot {
    pub table: TableId,
    /// `[partition][replica][slot]`.
    pub partitions: Vec<Vec<Vec<SlotImage>>>,
    pub replicas: Vec<Vec<MemNodeId>>,
}

/// Read every replica of `table` (chunked, all replicas in parallel).
pub async fn snapshot<F: Fabric>(
    fabric: &F,
    layout: &Layout,
    table: TableId,
) -> Result<TableSnapshot, VerbError> {
    let tl = layout.table(table);
    let qps: Vec<F::Qp> = (0..fabric.memory_nodes())
        .map(|m| fabric.queue_pair(m as MemNodeId))
        .collect();
    let slot_bytes = tl.slot_bytes as u64;
    let mut partitions = Vec::new();
    for p in 0..tl.partitions {
        let mut per_replica = Vec::new();
        for (r, &n) in tl.replicas[p as usize].iter().enumerate() {
            let total = tl.slots_per_partition() as u64;
            let pend: Vec<_> = tl
                .scan_reads(p, r, CHUNK_BYTES)
                .into_iter()
                .map(|(addr, cnt)| {
                    qps[n as usize].post(batch![Verb::read(addr, cnt * slot_bytes as u32)])
                })
                .collect();
            let mut slots = Vec::with_capacity(total as usize);
            for res in join_all(pend).await {
                let bytes = res.into_iter().next().unwrap()?.into_bytes();
                slots.extend(bytes.chunks(slot_bytes as usize).map(SlotImage::decode));
            }
            per_replica.push(slots);
        }
        partitions.push(per_replica);
    }
    Ok(TableSnapshot {
        table,
        partitions,
        replicas: tl.replicas.clone(),
    })
}

impl TableSnapshot {
    /// Live (key → value) pairs, read from each partition's primary. A key
    /// in two slots (see [`Self::structure_violations`]) shows its first.
    pub fn live(&self) -> BTreeMap<u64, Vec<u8>> {
        let mut out = BTreeMap::new();
        for part in &self.partitions {
            for s in part[0].iter().filter(|s| s.is_live()) {
                out.entry(s.key).or_insert_with(|| s.value.clone());
            }
        }
        out
    }

    /// Every replica of every slot agrees on version, key, flags and value.
    pub fn replica_mismatches(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (p, part) in self.partitions.iter().enumerate() {
            for (i, primary) in part[0].iter().enumerate() {
                for (r, rep) in part.iter().enumerate().skip(1) {
                    let b = &rep[i];
                    if (primary.version, primary.key, primary.flags, &primary.value)
                        != (b.version, b.key, b.flags, &b.value)
                    {
                        out.push(format!(
                            "table {} partition {p} slot {i}: primary (node {}) v{:#x} key {} != replica {r} (node {}) v{:#x} key {}",
                            self.table, self.replicas[p][0], primary.version, primary.key, self.replicas[p][r], b.version, b.key
                        ));
                    }
                }
            }
        }
        out
    }

    /// The hash table's own invariants, on each primary: a key holds at
    /// most one slot (live or tombstone), and every slot between a key's
    /// home and its slot is occupied, so its probe reaches it. Tombstones
    /// nobody owns ([`NO_KEY`], rolled-back inserts) are exempt. `tl` must
    /// be this table's layout (`coordinator/reclaim.rs`).
    pub fn structure_violations(&self, tl: &TableLayout) -> Vec<String> {
        let mut out = Vec::new();
        for (p, part) in self.partitions.iter().enumerate() {
            let slots = &part[0];
            let n = slots.len();
            let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
            for (i, s) in slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty() && s.key != NO_KEY)
            {
                if let Some(j) = seen.insert(s.key, i) {
                    out.push(format!(
                        "table {} partition {p}: key {} holds slots {j} and {i}",
                        self.table, s.key
                    ));
                }
                let home = (tl.home(s.key).1 * ASSOC) as usize;
                let gap = (0..(i + n - home) % n)
                    .map(|d| (home + d) % n)
                    .find(|&g| slots[g].is_empty());
                if let Some(g) = gap {
                    out.push(format!("table {} partition {p}: key {} in slot {i} is unreachable: slot {g} on its probe path is empty", self.table, s.key));
                }
            }
        }
        out
    }

    /// Lock words still set anywhere (primary or backup).
    pub fn held_locks(&self) -> Vec<(u64, LockWord)> {
        self.partitions
            .iter()
            .flat_map(|part| part.iter().flat_map(|rep| rep.iter()))
            .filter(|s| s.lock.is_locked())
            .map(|s| (s.key, s.lock))
            .collect()
    }
}
