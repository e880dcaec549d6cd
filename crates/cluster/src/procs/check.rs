//! Loading the micro dataset before compute servers join, and the post-run
//! check of a multi-process deployment (`tandem pandora check-cluster`).

use std::path::PathBuf;
use std::sync::Arc;

use tandem_dkvs::slot::LockWord;
use tandem_dkvs::{Layout, StoreConfig};
use tandem_fabric::tcp::TcpCluster;
use tandem_workloads::micro::{MicroLedger, MicroSpec};

use crate::runner::block_on_local;

/// The node id the loader registers under.
const LOADER_NODE: u16 = 0;
/// The node id `check-cluster` registers under.
const CHECKER_NODE: u16 = u16::MAX;

fn servers(memory: &TcpCluster) -> String {
    memory
        .addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Load the micro dataset (before compute servers join).
pub fn load_micro(
    memory: &TcpCluster,
    store: &StoreConfig,
    micro: &MicroSpec,
) -> Result<u64, String> {
    let layout = Arc::new(Layout::new(store)?);
    let fail = |e: std::io::Error| {
        format!(
            "loading through the memory servers {}: {e}",
            servers(memory)
        )
    };
    block_on_local(async {
        let keys = memory.register(LOADER_NODE).await.map_err(fail)?;
        let f = memory.connect(LOADER_NODE, &keys).await.map_err(fail)?;
        let mut loader = tandem_dkvs::loader::Loader::new(&f, layout);
        micro.load(&mut loader).await.map_err(|e| e.to_string())?;
        loader.finish().await.map_err(|e| e.to_string())
    })
}

/// Read ledger files written by compute servers (alive or killed) into one ledger.
pub fn read_ledgers(paths: &[PathBuf]) -> Result<MicroLedger, String> {
    let mut total = MicroLedger::default();
    for p in paths {
        let bytes =
            std::fs::read(p).map_err(|e| format!("cannot read ledger {}: {e}", p.display()))?;
        for rec in bytes.chunks_exact(16) {
            total.writes_committed += u64::from_le_bytes(rec[..8].try_into().unwrap());
            total.in_doubt += u64::from_le_bytes(rec[8..].try_into().unwrap());
        }
    }
    Ok(total)
}

/// What `check-cluster` found.
#[derive(Debug, Default)]
pub struct ClusterCheck {
    /// Replicas that differ, locks held by coordinators not known to have
    /// failed, counters that disagree with the ledgers.
    pub violations: Vec<String>,
    /// Locks still held by failed coordinators: legitimate (docs/DESIGN.md §4.5,
    /// NotLogged stray locks) until a live coordinator steals them or the
    /// membership's scan releases them.
    pub stray_locks: usize,
}

/// After the compute servers are gone: check replicas, locks and the micro
/// counters, reading only. `failed`: coordinators known to have failed
/// (their recovery done).
pub fn check_cluster(
    memory: &TcpCluster,
    store: &StoreConfig,
    micro: &MicroSpec,
    ledger: &MicroLedger,
    failed: &[u16],
) -> Result<ClusterCheck, String> {
    let layout = Arc::new(Layout::new(store)?);
    let fail = |e: std::io::Error| {
        format!(
            "checking through the memory servers {}: {e}",
            servers(memory)
        )
    };
    block_on_local(async {
        let keys = memory.register(CHECKER_NODE).await.map_err(fail)?;
        let f = memory.connect(CHECKER_NODE, &keys).await.map_err(fail)?;
        let snap = tandem_dkvs::check::snapshot(&f, &layout, 0)
            .await
            .map_err(|e| e.to_string())?;
        let mut check = ClusterCheck {
            violations: [
                snap.replica_mismatches(),
                snap.structure_violations(layout.table(0)),
            ]
            .concat(),
            stray_locks: 0,
        };
        let (stray, held) = classify_locks(snap.held_locks(), failed);
        check.stray_locks = stray;
        check.violations.extend(held);
        check
            .violations
            .extend(tandem_workloads::micro::verify(micro, &snap.live(), ledger));
        Ok(check)
    })
}

/// Locks of failed coordinators (counted) apart from locks of anyone else
/// (violations: nobody is running, so no live transaction holds them).
pub fn classify_locks(held: Vec<(u64, LockWord)>, failed: &[u16]) -> (usize, Vec<String>) {
    let (stray, live): (Vec<_>, Vec<_>) = held
        .into_iter()
        .partition(|(_, w)| failed.contains(&w.owner()));
    let live = live
        .into_iter()
        .map(|(k, w)| format!("key {k}: lock {:#x} still held by coordinator {}, which is not known to have failed", w.0, w.owner()))
        .collect();
    (stray.len(), live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_of_failed_coordinators_are_stray_and_others_are_violations() {
        let held = vec![
            (1, LockWord::owned(5, 1)),
            (2, LockWord::owned(9, 3)),
            (3, LockWord::owned(5, 2)),
        ];
        let (stray, violations) = classify_locks(held.clone(), &[5]);
        assert_eq!(stray, 2);
        assert_eq!(violations.len(), 1);
        assert!(
            violations[0].contains("key 2")
                && violations[0].contains("coordinator 9, which is not known to have failed"),
            "{violations:?}"
        );
        let (stray, violations) = classify_locks(held, &[5, 9]);
        assert_eq!((stray, violations.len()), (3, 0));
    }
}
