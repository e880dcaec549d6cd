//! Where every byte lives: placement of partitions on memory nodes by
//! consistent hashing, the hash-table geometry of each partition, and the log
//! area (docs/DESIGN.md §4.2). Every compute node computes the same `Layout` from
//! the same `StoreConfig`, so addresses are offsets known without asking anyone.
//!
//! Region of a memory node: `[log slots][partition replicas hosted here...]`.
//! A partition is `buckets × ASSOC` slots; a key hashes to a bucket and probes
//! linearly through at most `MAX_PROBE_BUCKETS` buckets of its partition (the
//! paper's overflow area, bounded). A delete leaves a tombstone; an insert
//! takes its key's own slot if its probe meets it, else the first tombstone or
//! empty slot; a tombstone becomes empty again only in a logged transaction,
//! once the next slot is empty (`coordinator/reclaim.rs` has the argument).

use tandem_fabric::MemNodeId;

use crate::config::{StoreConfig, TableId, TableSpec};
use crate::slot::SLOT_HEADER_BYTES;

/// Slots per bucket (one bucket is read in one verb on an address-cache miss).
pub const ASSOC: u32 = 4;
/// Upper bound on buckets probed for one key.
pub const MAX_PROBE_BUCKETS: u32 = 64;
/// Spare buckets provisioned per partition beyond the 2x head-room.
const SPARE_BUCKETS: u64 = 4;
/// Consistent-hashing virtual nodes per memory node.
const VNODES: u32 = 64;
// Distinct salts keep ring points, partition points and log points from
// colliding (an unsalted partition point equals a virtual node's point).
const RING_SALT: u64 = 0x5249_4E47_0000_0000;
const PARTITION_SALT: u64 = 0x5041_5254_0000_0000;
const LOG_SALT: u64 = 0x4C4F_4700_0000_0000;

#[derive(Clone, Debug)]
pub struct TableLayout {
    pub spec: TableSpec,
    /// Value size rounded up to 8 bytes.
    pub value_bytes: u32,
    pub slot_bytes: u32,
    pub buckets_per_partition: u32,
    pub partitions: u32,
    /// `replicas[p]`: the f+1 memory nodes holding partition `p`, in preference order.
    pub replicas: Vec<Vec<MemNodeId>>,
    /// `base[p][i]`: offset of partition `p` in the region of `replicas[p][i]`.
    pub base: Vec<Vec<u64>>,
}

impl TableLayout {
    pub fn partition_bytes(&self) -> u64 {
        self.buckets_per_partition as u64 * ASSOC as u64 * self.slot_bytes as u64
    }
    pub fn slots_per_partition(&self) -> u32 {
        self.buckets_per_partition * ASSOC
    }
    /// Partition and home bucket (within the partition) of `key`.
    pub fn home(&self, key: u64) -> (u32, u32) {
        let h = mix64(key ^ (self.spec.id as u64).wrapping_mul(0xA24B_AED4_963E_E407));
        let p = (h % self.partitions as u64) as u32;
        let b = ((h >> 20) % self.buckets_per_partition as u64) as u32;
        (p, b)
    }
    /// Partition `p`'s slots on replica `replica_idx`, cut into reads of at
    /// most `max_bytes`: `(address, slots in the read)`, in slot order. For
    /// whole-store scans (inspection, stray-lock sweeps, FORD's recovery).
    pub fn scan_reads(&self, p: u32, replica_idx: usize, max_bytes: u64) -> Vec<(u64, u32)> {
        let per = (max_bytes / self.slot_bytes as u64).max(1) as u32;
        let total = self.slots_per_partition();
        (0..total)
            .step_by(per as usize)
            .map(|s| (self.slot_addr(p, replica_idx, s), per.min(total - s)))
            .collect()
    }

    /// Address of slot `slot` of partition `p` on its `i`-th replica.
    pub fn slot_addr(&self, p: u32, replica_idx: usize, slot: u32) -> u64 {
        self.base[p as usize][replica_idx] + slot as u64 * self.slot_bytes as u64
    }
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub tables: Vec<TableLayout>,
    pub memory_nodes: u16,
    pub replicas: u16,
    pub log_slot_bytes: u64,
    pub log_slots: u32,
    /// Bytes each memory node's region needs.
    pub region_bytes: Vec<u64>,
    ring: Vec<(u64, MemNodeId)>,
}

/// A strong 64-bit mixer (splitmix64 finaliser); placement and hashing use it.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Layout {
    pub fn new(cfg: &StoreConfig) -> Result<Layout, String> {
        cfg.validate()?;
        let mut ring: Vec<(u64, MemNodeId)> = (0..cfg.memory_nodes)
            .flat_map(|n| {
                (0..VNODES).map(move |v| (mix64(RING_SALT ^ ((n as u64) << 32) ^ v as u64), n))
            })
            .collect();
        ring.sort_unstable();
        let log_area = cfg.log_slot_bytes * cfg.log_slots as u64;
        let mut region_bytes = vec![log_area; cfg.memory_nodes as usize];
        let mut layout = Layout {
            tables: Vec::new(),
            memory_nodes: cfg.memory_nodes,
            replicas: cfg.replicas,
            log_slot_bytes: cfg.log_slot_bytes,
            log_slots: cfg.log_slots,
            region_bytes: Vec::new(),
            ring,
        };
        for spec in &cfg.tables {
            let value_bytes = spec.value_size.div_ceil(8) * 8;
            let slot_bytes = SLOT_HEADER_BYTES + value_bytes;
            let partitions = cfg.partitions_per_table;
            // 2x head-room so linear probing rarely leaves the home bucket,
            // plus spare buckets per partition so small tables, whose keys
            // spread less evenly, do not fill a partition.
            let slots = spec.capacity * 2 + SPARE_BUCKETS * ASSOC as u64 * partitions as u64;
            let buckets_per_partition =
                (slots.div_ceil(ASSOC as u64 * partitions as u64)).max(1) as u32;
            let mut t = TableLayout {
                spec: spec.clone(),
                value_bytes,
                slot_bytes,
                buckets_per_partition,
                partitions,
                replicas: Vec::new(),
                base: Vec::new(),
            };
            for p in 0..partitions {
                let nodes = layout.place(
                    mix64(PARTITION_SALT ^ ((spec.id as u64) << 32) ^ p as u64),
                    cfg.replicas,
                );
                let mut bases = Vec::new();
                for &n in &nodes {
                    bases.push(region_bytes[n as usize]);
                    region_bytes[n as usize] += t.partition_bytes();
                }
                t.replicas.push(nodes);
                t.base.push(bases);
            }
            layout.tables.push(t);
        }
        layout.region_bytes = region_bytes;
        Ok(layout)
    }

    /// A fingerprint of where everything lies: tables (id, slot size,
    /// buckets, partitions and their places), memory nodes, copies, log
    /// slots. Processes of one cluster must agree on it: one that lays the
    /// store out otherwise would read and write other slots than it means.
    pub fn digest(&self) -> u64 {
        let mut h = mix64(LOG_SALT ^ self.memory_nodes as u64);
        let mut add = |x: u64| h = mix64(h ^ x);
        add(self.replicas as u64);
        add(self.log_slot_bytes);
        add(self.log_slots as u64);
        for t in &self.tables {
            add(t.spec.id as u64);
            add(t.slot_bytes as u64);
            add(t.buckets_per_partition as u64);
            add(t.partitions as u64);
            t.replicas.iter().flatten().for_each(|&n| add(n as u64));
            t.base.iter().flatten().for_each(|&b| add(b));
        }
        self.region_bytes.iter().for_each(|&b| add(b));
        h
    }

    /// The first `count` distinct memory nodes clockwise from `point` on the ring.
    fn place(&self, point: u64, count: u16) -> Vec<MemNodeId> {
        let start = self.ring.partition_point(|(h, _)| *h < point);
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..self.ring.len() {
            let n = self.ring[(start + i) % self.ring.len()].1;
            if !out.contains(&n) {
                out.push(n);
                if out.len() == count as usize {
                    break;
                }
            }
        }
        out
    }

    pub fn table(&self, t: TableId) -> &TableLayout {
        &self.tables[t as usize]
    }

    /// The f+1 memory nodes that hold coordinator `coord`'s log.
    pub fn log_nodes(&self, coord: u16) -> Vec<MemNodeId> {
        self.place(mix64(LOG_SALT ^ coord as u64), self.replicas)
    }

    /// Offset of coordinator `coord`'s log slot on any node.
    pub fn log_addr(&self, coord: u16) -> u64 {
        (coord as u64 % self.log_slots as u64) * self.log_slot_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Mode, StoreConfig, TableSpec};

    fn cfg(nodes: u16, replicas: u16) -> StoreConfig {
        StoreConfig::new(
            Mode::Pandora,
            nodes,
            replicas,
            vec![TableSpec {
                id: 0,
                name: "t".into(),
                value_size: 40,
                capacity: 10_000,
            }],
        )
    }

    /// Two processes given the same store agree on the digest; a table
    /// sized otherwise, one more table, or other slots do not.
    #[test]
    fn the_digest_tells_layouts_apart() {
        let d = |c: &StoreConfig| Layout::new(c).unwrap().digest();
        let base = cfg(3, 2);
        assert_eq!(d(&base), d(&cfg(3, 2)));
        let mut bigger = base.clone();
        bigger.tables[0].capacity = 20_000;
        let mut wider = base.clone();
        wider.tables[0].value_size = 48;
        let mut more = base.clone();
        more.tables.push(TableSpec {
            id: 1,
            name: "redis".into(),
            value_size: 64,
            capacity: 10,
        });
        let all = [
            d(&base),
            d(&bigger),
            d(&wider),
            d(&more),
            d(&cfg(4, 2)),
            d(&cfg(3, 3)),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b, "{all:?}");
            }
        }
    }

    #[test]
    fn replicas_are_distinct_and_regions_do_not_overlap() {
        let l = Layout::new(&cfg(5, 3)).unwrap();
        let t = l.table(0);
        let mut per_node: Vec<Vec<(u64, u64)>> = vec![Vec::new(); 5];
        for p in 0..t.partitions as usize {
            let r = &t.replicas[p];
            assert_eq!(r.len(), 3);
            let mut s = r.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 3, "replicas of a partition are distinct nodes");
            for (i, &n) in r.iter().enumerate() {
                per_node[n as usize].push((t.base[p][i], t.base[p][i] + t.partition_bytes()));
            }
        }
        for (n, mut ranges) in per_node.into_iter().enumerate() {
            ranges.sort();
            assert!(ranges
                .first()
                .map(|r| r.0 >= l.log_slot_bytes * l.log_slots as u64)
                .unwrap_or(true));
            for w in ranges.windows(2) {
                assert!(w[0].1 <= w[1].0, "overlap on node {n}");
            }
            assert!(ranges
                .last()
                .map(|r| r.1 <= l.region_bytes[n])
                .unwrap_or(true));
        }
    }

    #[test]
    fn placement_spreads_partitions_and_is_deterministic() {
        let a = Layout::new(&cfg(3, 2)).unwrap();
        let b = Layout::new(&cfg(3, 2)).unwrap();
        assert_eq!(a.table(0).replicas, b.table(0).replicas);
        let mut primaries = [0; 3];
        for r in &a.table(0).replicas {
            primaries[r[0] as usize] += 1;
        }
        // 16 partitions over 3 nodes: each node should be primary for a fair share.
        assert!(
            primaries.iter().all(|&c| c >= 2),
            "every node is primary for a share: {primaries:?}"
        );
        assert_eq!(a.log_nodes(7).len(), 2);
    }

    #[test]
    fn bad_configs_are_rejected_with_a_reason() {
        assert!(Layout::new(&cfg(2, 3)).unwrap_err().contains("replicas"));
        assert!(Layout::new(&cfg(0, 1)).is_err());
    }
}
