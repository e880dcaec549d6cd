//! Table occupancy over a run: how many slots of each table are taken
//! (live keys and tombstones) and how many hold live keys, sampled from the
//! in-process memory nodes' primaries, with the process's resident memory.
//! With slot reclamation an insert/delete workload's occupancy follows its
//! live keys; without it, every key ever inserted keeps a slot.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tandem_dkvs::slot::{FLAG_LIVE, KEY_OFF, VERSION_OFF};
use tandem_dkvs::Layout;
use tandem_fabric::inline::InlineCluster;

use super::*;

/// One sample.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Occupancy {
    /// Seconds after the measurement started.
    pub t_s: f64,
    /// Per table, in the layout's order.
    pub tables: Vec<TableOccupancy>,
    /// Resident memory of this process (memory nodes included), in bytes.
    pub rss_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct TableOccupancy {
    /// Slots holding a key, live or tombstone.
    pub occupied: u64,
    pub live: u64,
}

/// Count the slots of every table on its partitions' primaries.
pub fn scan(cluster: &InlineCluster, layout: &Layout) -> Vec<TableOccupancy> {
    let nodes = cluster.nodes();
    layout
        .tables
        .iter()
        .map(|tl| {
            let mut o = TableOccupancy::default();
            for p in 0..tl.partitions {
                let node = &nodes[tl.replicas[p as usize][0] as usize];
                for s in 0..tl.slots_per_partition() {
                    let addr = tl.slot_addr(p, 0, s);
                    if node.load_u64(addr + VERSION_OFF) != 0 {
                        o.occupied += 1;
                        o.live += (node.load_u64(addr + KEY_OFF + 8) & FLAG_LIVE != 0) as u64;
                    }
                }
            }
            o
        })
        .collect()
}

/// Resident set size of this process, 0 where unknown.
pub fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Sample every `every` while the run measures; one last sample at its end.
pub(super) fn sample(
    ctl: Arc<Control>,
    cluster: InlineCluster,
    layout: Arc<Layout>,
    every: Duration,
    progress: bool,
) -> Vec<Occupancy> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut next = start;
    loop {
        std::thread::sleep(
            next.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
        let measuring = ctl.measuring.load(Ordering::Relaxed);
        if Instant::now() < next && measuring {
            continue;
        }
        let o = Occupancy {
            t_s: start.elapsed().as_secs_f64(),
            tables: scan(&cluster, &layout),
            rss_bytes: rss_bytes(),
        };
        if progress {
            say_occupancy(&o, &layout);
        }
        out.push(o);
        if !measuring {
            return out;
        }
        next += every;
    }
}

/// One progress line: the tables holding tombstones, and the memory.
fn say_occupancy(o: &Occupancy, layout: &Layout) {
    let tables: Vec<String> = layout
        .tables
        .iter()
        .zip(&o.tables)
        .filter(|(_, t)| t.occupied > t.live)
        .map(|(tl, t)| format!("{} {} slots ({} live)", tl.spec.name, t.occupied, t.live))
        .collect();
    eprintln!(
        "  [{:>5.1}s] occupancy: {}; RSS {:.0} MiB",
        o.t_s,
        tables.join(", "),
        o.rss_bytes as f64 / (1 << 20) as f64
    );
}
