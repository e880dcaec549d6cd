//! Bulk loading of a dataset straight into the slots of every replica, before
//! transactions start (FORD and Pandora populate tables the same way). Uses
//! coordinator id 0's version, so loaded objects are distinguishable from
//! transactional writes.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use tandem_fabric::{Batch, Fabric, MemNodeId, QueuePair, Verb, VerbError};

use crate::config::TableId;
use crate::layout::{Layout, ASSOC, MAX_PROBE_BUCKETS};
use crate::slot::{encode_slot, FLAG_LIVE, LOADED_VERSION};

#[derive(Debug)]
pub enum LoadError {
    /// No free slot within the probe bound: the table's capacity is too small.
    TableFull {
        table: TableId,
        key: u64,
    },
    DuplicateKey {
        table: TableId,
        key: u64,
    },
    ValueTooLarge {
        table: TableId,
        key: u64,
        len: usize,
    },
    Fabric(VerbError),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::TableFull { table, key } => {
                write!(f, "table {table} is full (key {key}); raise its capacity")
            }
            LoadError::DuplicateKey { table, key } => {
                write!(f, "key {key} loaded twice into table {table}")
            }
            LoadError::ValueTooLarge { table, key, len } => write!(
                f,
                "value of {len} bytes for key {key} exceeds table {table}'s value size"
            ),
            LoadError::Fabric(e) => write!(f, "fabric error while loading: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Verbs per doorbell batch and batches in flight while loading.
const BATCH_VERBS: usize = 256;
const BATCHES_IN_FLIGHT: usize = 16;

pub struct Loader<F: Fabric> {
    layout: Arc<Layout>,
    qps: Vec<F::Qp>,
    /// Occupied slots per (table, partition), and the keys loaded.
    used: HashMap<(TableId, u32), Vec<bool>>,
    keys: HashMap<TableId, std::collections::HashSet<u64>>,
    queued: Vec<Batch>,
    in_flight: Vec<<F::Qp as QueuePair>::Pending>,
    pub loaded: u64,
}

impl<F: Fabric> Loader<F> {
    /// A loader for an empty store.
    pub fn new(fabric: &F, layout: Arc<Layout>) -> Self {
        let qps = (0..fabric.memory_nodes())
            .map(|m| fabric.queue_pair(m as MemNodeId))
            .collect();
        Loader {
            qps,
            queued: vec![Batch::new(); layout.memory_nodes as usize],
            layout,
            used: HashMap::new(),
            keys: HashMap::new(),
            in_flight: Vec::new(),
            loaded: 0,
        }
    }

    /// Queue one object; verbs go out in large batches.
    pub async fn put(&mut self, table: TableId, key: u64, value: &[u8]) -> Result<(), LoadError> {
        assert_ne!(
            key,
            crate::slot::NO_KEY,
            "key u64::MAX is reserved (slot::NO_KEY)"
        );
        let tl = self.layout.table(table);
        if value.len() > tl.spec.value_size as usize {
            return Err(LoadError::ValueTooLarge {
                table,
                key,
                len: value.len(),
            });
        }
        if !self.keys.entry(table).or_default().insert(key) {
            return Err(LoadError::DuplicateKey { table, key });
        }
        let (part, home) = tl.home(key);
        let used = self
            .used
            .entry((table, part))
            .or_insert_with(|| vec![false; tl.slots_per_partition() as usize]);
        let buckets = tl.buckets_per_partition;
        let slot = (0..MAX_PROBE_BUCKETS.min(buckets))
            .flat_map(|p| (0..ASSOC).map(move |i| ((home + p) % buckets) * ASSOC + i))
            .find(|&s| !used[s as usize])
            .ok_or(LoadError::TableFull { table, key })?;
        used[slot as usize] = true;
        let bytes = encode_slot(LOADED_VERSION, key, FLAG_LIVE, value, tl.value_bytes);
        for (r, &n) in tl.replicas[part as usize].iter().enumerate() {
            let addr = tl.slot_addr(part, r, slot);
            self.queued[n as usize].push(Verb::write(addr, bytes.clone()));
            if self.queued[n as usize].len() >= BATCH_VERBS {
                let batch = std::mem::take(&mut self.queued[n as usize]);
                self.in_flight.push(self.qps[n as usize].post(batch));
            }
        }
        self.loaded += 1;
        if self.in_flight.len() >= BATCHES_IN_FLIGHT {
            self.drain().await?;
        }
        Ok(())
    }

    async fn drain(&mut self) -> Result<(), LoadError> {
        for r in join_all(std::mem::take(&mut self.in_flight)).await {
            if let Some(Err(e)) = r.into_iter().find(|c| c.is_err()) {
                return Err(LoadError::Fabric(e));
            }
        }
        Ok(())
    }

    /// Flush everything queued and wait for it.
    pub async fn finish(mut self) -> Result<u64, LoadError> {
        for n in 0..self.queued.len() {
            let batch = std::mem::take(&mut self.queued[n]);
            if !batch.is_empty() {
                self.in_flight.push(self.qps[n].post(batch));
            }
        }
        self.drain().await?;
        Ok(self.loaded)
    }
}
