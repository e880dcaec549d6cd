//! The [`replica_check`] over processes, where one of the failures is a
//! real memory-server kill. After a [`crate::proc_run`] run's final check,
//! on the quiet store, the checker's compute node:
//!
//! 1. reads every litmus key with every memory server up;
//! 2. fails each memory node in turn, logically (its own [`MemoryView`]
//!    marks the node down: the primary becomes the first live replica,
//!    docs/DESIGN.md §4.6), and re-reads every key;
//! 3. has the parent `kill -9` one memory-server process (the seed picks it
//!    among the nodes that are the primary of some litmus partition, so the
//!    kill moves reads), marks it down in the same view and re-reads every
//!    key from the replicas that take over. Every key has [`REPLICAS`]
//!    copies on [`MEMORY_NODES`] nodes, so one dead server leaves a copy of
//!    everything.
//!
//! Steps 2 and 3 must read exactly what step 1 read. No verb goes to the
//! dead server: a read-only transaction posts only to primaries, which the
//! view steers away from it (and the tcp fabric completes a verb on a dead
//! connection with `Unavailable` rather than hang). Every step is bounded
//! by [`STEP_TIMEOUT`].
//!
//! [`ReplicaCheck::corrupt_one_backup`] is a test hook: it overwrites one
//! live key's value in its backup replica only, through the raw fabric, so
//! a test can see the check fail over processes.

use std::future::Future;
use std::time::Duration;

use tandem_cluster::backend::MemoryServers;
use tandem_dkvs::check::snapshot;
use tandem_dkvs::slot::{encode_body, KEY_OFF};
use tandem_dkvs::{Layout, MemoryView};
use tandem_fabric::tcp::TcpFabric;
use tandem_fabric::{Fabric, QueuePair, Verb};
use tandem_sim::Rng;

use crate::proc_run::{MEMORY_NODES, REPLICAS};
use crate::replica_check::{self, compare, read_all};
use crate::suite::Suite;
use crate::tandem_store::{TandemStore, LITMUS_TABLE};
use crate::value::Value;

// One dead server must leave a copy of everything, and the hook needs a backup.
const _: () = assert!(REPLICAS >= 2);

/// Bound on each step (one read of every key, the kill, the test hook).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the check found, and what it did (for the run's crash note).
#[derive(Debug, Default)]
pub struct Outcome {
    pub violations: Vec<String>,
    pub notes: Vec<String>,
}

/// The checker's view of the store for one replica check.
pub struct ReplicaCheck<'a> {
    pub suite: &'a Suite,
    pub layout: &'a Layout,
    /// Every litmus key that exists or may exist now.
    pub keys: Vec<u64>,
    /// The memory view the checker's compute node was built with.
    pub view: MemoryView,
    /// The checker's raw fabric (only the test hook uses it).
    pub fabric: TcpFabric,
    /// The memory server to `kill -9` ([`victim`]).
    pub victim: u16,
    /// Test hook: make one key's replicas diverge before the check.
    pub corrupt_one_backup: bool,
}

/// The memory server run `seed` kills: one that is the primary of some
/// litmus partition (killing a node that is nobody's primary moves no read).
pub fn victim(layout: &Layout, seed: u64) -> u16 {
    let mut primaries: Vec<u16> = layout
        .table(LITMUS_TABLE)
        .replicas
        .iter()
        .map(|r| r[0])
        .collect();
    primaries.sort_unstable();
    primaries.dedup();
    primaries[Rng::new(seed ^ 0x3E3_0009).below(primaries.len() as u64) as usize]
}

async fn bounded<T>(what: &str, f: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    match tokio::time::timeout(STEP_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "the replica check's {what} did not finish in {} s",
            STEP_TIMEOUT.as_secs()
        )),
    }
}

impl ReplicaCheck<'_> {
    /// Run the check. `Err` is a harness failure (a kill or the test hook
    /// failed); what the check finds goes into the outcome.
    pub async fn run(
        &self,
        store: &mut TandemStore<TcpFabric>,
        servers: &mut MemoryServers,
    ) -> Result<Outcome, String> {
        let mut out = Outcome::default();
        if self.corrupt_one_backup {
            out.notes
                .push(bounded("test hook", self.corrupt_one_backup()).await?);
        }
        let up = match bounded(
            "read with every memory server up",
            read_all(store, &self.keys),
        )
        .await
        {
            Ok(up) => up,
            Err(e) => {
                out.violations.push(e);
                return Ok(out);
            }
        };
        let fail = |m: u16, down: bool| self.view.set_down(m, down);
        let logical = replica_check::fail_each_against(
            store,
            &fail,
            self.suite,
            &self.keys,
            &up,
            MEMORY_NODES,
        );
        if let Err(e) = bounded("logical failover of each memory node", logical).await {
            out.violations.push(format!("{e} (logical failover)"));
        }
        let moved = self.keys_on_victim();
        self.kill(servers)?;
        out.notes.push(format!(
            "memory server {} killed for the replica check ({moved} of {} keys read from backups)",
            self.victim,
            self.keys.len()
        ));
        let after = bounded(
            &format!("read with memory server {} killed", self.victim),
            read_all(store, &self.keys),
        )
        .await;
        if let Err(e) = after.and_then(|a| compare(self.suite, &self.keys, &up, &a, self.victim)) {
            out.violations.push(format!(
                "{e} (memory server {} killed with kill -9)",
                self.victim
            ));
        }
        Ok(out)
    }

    /// `kill -9` the victim and mark it down in the checker's view, so no
    /// verb is posted to it.
    fn kill(&self, servers: &mut MemoryServers) -> Result<(), String> {
        self.view.set_down(self.victim, true);
        servers.kill(self.victim as usize).map_err(|e| {
            format!(
                "kill -9 of memory server {} for the replica check: {e}",
                self.victim
            )
        })
    }

    /// Keys whose primary is the victim: they fail over when it dies.
    fn keys_on_victim(&self) -> usize {
        let tl = self.layout.table(LITMUS_TABLE);
        self.keys
            .iter()
            .filter(|&&k| tl.replicas[tl.home(k).0 as usize][0] == self.victim)
            .count()
    }

    /// Test hook: overwrite one live litmus key's value in its backup replica
    /// only (same version), preferring a key whose primary is the victim.
    async fn corrupt_one_backup(&self) -> Result<String, String> {
        let snap = snapshot(&self.fabric, self.layout, LITMUS_TABLE)
            .await
            .map_err(|e| format!("the test hook could not read the litmus table: {e}"))?;
        let live: Vec<(usize, usize)> = (0..snap.partitions.len())
            .flat_map(|p| (0..snap.partitions[p][0].len()).map(move |i| (p, i)))
            .filter(|&(p, i)| {
                snap.partitions[p][0][i].is_live()
                    && self.keys.contains(&snap.partitions[p][0][i].key)
            })
            .collect();
        let &(p, i) = live
            .iter()
            .find(|&&(p, _)| snap.replicas[p][0] == self.victim)
            .or(live.first())
            .ok_or("the test hook found no live litmus key")?;
        let slot = &snap.partitions[p][0][i];
        let v = Value::decode(&slot.value).ok_or("the test hook found no litmus value")?;
        let forged = Value {
            payload: v.payload.wrapping_add(1_000_003),
            ..v
        };
        let tl = self.layout.table(LITMUS_TABLE);
        let (node, addr) = (snap.replicas[p][1], tl.slot_addr(p as u32, 1, i as u32));
        let body = encode_body(slot.key, slot.flags, &forged.encode(), tl.value_bytes);
        let done = self
            .fabric
            .queue_pair(node)
            .post(tandem_fabric::batch![Verb::write(addr + KEY_OFF, body)])
            .await;
        if let Some(Err(e)) = done.into_iter().next() {
            return Err(format!(
                "the test hook could not write memory node {node}: {e}"
            ));
        }
        Ok(format!(
            "test hook: key {} corrupted in its backup on memory node {node} only (primary {})",
            slot.key, snap.replicas[p][0]
        ))
    }
}
