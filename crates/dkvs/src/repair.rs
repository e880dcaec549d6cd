//! Re-replication after a memory-node failure (docs/DESIGN.md §4.6;
//! the Pandora paper §3.2.5): a replacement node takes the failed node's place
//! (same node id, same region layout, fresh memory) and every partition it
//! replicates is copied from a live replica, restoring f+1 copies.
//!
//! Runs while new transactions wait and in-flight ones have drained (the
//! membership service pauses them), so the copy is a consistent snapshot and
//! no lock is held anywhere; lock words are written as unlocked.

use futures::future::join_all;
use tandem_fabric::batch;
use tandem_fabric::{Fabric, MemNodeId, QueuePair, Verb, VerbError};

use crate::compute::MemoryView;
use crate::layout::Layout;
use crate::slot::LOCK_OFF;

const COPY_READ_BYTES: u64 = 64 * 1024;

/// Copy every partition that `target` replicates from its first replica that
/// `view` considers up. Returns the number of slots copied.
pub async fn rereplicate<F: Fabric>(
    fabric: &F,
    layout: &Layout,
    target: MemNodeId,
    view: &MemoryView,
) -> Result<u64, VerbError> {
    let qps: Vec<F::Qp> = (0..fabric.memory_nodes())
        .map(|m| fabric.queue_pair(m as MemNodeId))
        .collect();
    let mut copied = 0;
    for tl in &layout.tables {
        let slot = tl.slot_bytes as u64;
        for p in 0..tl.partitions {
            let reps = &tl.replicas[p as usize];
            let Some(dst) = reps.iter().position(|&n| n == target) else {
                continue;
            };
            let Some(src) = reps.iter().position(|&n| n != target && !view.is_down(n)) else {
                // Every other replica is down too: f+1 failures, nothing to copy from.
                return Err(VerbError::Unavailable);
            };
            let reads = tl.scan_reads(p, src, COPY_READ_BYTES);
            let pending: Vec<_> = reads
                .iter()
                .map(|&(a, n)| qps[reps[src] as usize].post(batch![Verb::read(a, n * slot as u32)]))
                .collect();
            let mut writes = Vec::new();
            for ((a, n), r) in reads.iter().zip(join_all(pending).await) {
                let mut bytes = r.into_iter().next().expect("one completion")?.into_bytes();
                for i in 0..*n as usize {
                    let at = i * slot as usize + LOCK_OFF as usize;
                    bytes[at..at + 8].fill(0);
                }
                let first = (a - tl.slot_addr(p, src, 0)) / slot;
                let dst_addr = tl.slot_addr(p, dst, first as u32);
                writes.push(qps[target as usize].post(batch![Verb::write(dst_addr, bytes)]));
                copied += *n as u64;
            }
            for r in join_all(writes).await {
                if let Some(Err(e)) = r.into_iter().find(|c| c.is_err()) {
                    return Err(e);
                }
            }
        }
    }
    Ok(copied)
}
