//! Seeded simulation of slot reclamation racing readers, inserts, deletes
//! and (pandora) a compute-node crash with its recovery. A small, crowded
//! table makes probe runs long, so reclamations and absent-key reads meet.
//!
//! Every transaction flips one key (insert it if absent and its partner
//! `k ^ 1` is absent too, delete it if present) and keeps a per-key counter
//! in a second table; readers check keys and the counter. At the end,
//! on every seed: each counter matches its key, no two partners are both
//! live (a phantom: an insert decided on an absence that no longer held), no
//! key is live twice or behind its own slot, every key is reachable from its
//! home, replicas agree and no lock is left. The `reclaim-mid-run` mutant
//! must fail some seed. (`unguarded-phantoms` needs a delete and an insert
//! inside one reader's validation window, too rare here: `tx_semantics.rs`
//! stages it.)
//!
//! `TANDEM_RECLAIM_SEEDS=N` runs N seeds (default 200); `TANDEM_NO_RECLAIM=1`
//! runs the same races with reclamation off, as a baseline.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::log::OpKind;
use tandem_dkvs::recovery::{sweep_stray_locks, RecoveryCoordinator, RecoveryReport};
use tandem_dkvs::{
    BugSwitches, ComputeNode, CoordinatorStats, FailedIds, Layout, Mode, StoreConfig, TableSpec,
};
use tandem_fabric::sim::{SimCluster, SimFabric, SimFabricConfig};
use tandem_sim::{Rng, Sim};

const KEYS: u64 = 40;
const COUNTER: u32 = 1;
const NODES: u16 = 2;
const COORDS_PER_NODE: u16 = 3;
const TXS: usize = 60;

fn store(mode: Mode, bugs: BugSwitches, assertions: bool) -> StoreConfig {
    let tables = vec![
        TableSpec {
            id: 0,
            name: "keys".into(),
            value_size: 8,
            capacity: 24,
        },
        TableSpec {
            id: COUNTER,
            name: "counters".into(),
            value_size: 8,
            capacity: KEYS,
        },
    ];
    let mut s = StoreConfig::new(mode, 3, 2, tables);
    s.partitions_per_table = 1;
    s.log_slots = 32;
    s.log_slot_bytes = 4096;
    s.bugs = bugs;
    s.assertions = Some(assertions);
    s.reclaim = std::env::var("TANDEM_NO_RECLAIM").is_err();
    s
}

fn num(v: Option<Vec<u8>>) -> i64 {
    v.map_or(0, |b| i64::from_le_bytes(b[..8].try_into().unwrap()))
}

/// One client: flips random keys, keeping the counter; sometimes only reads.
async fn client(
    node: Rc<ComputeNode<SimFabric>>,
    id: u16,
    mut rng: Rng,
    stats: Rc<RefCell<CoordinatorStats>>,
) {
    let mut c = node.coordinator(id);
    for _ in 0..TXS {
        let key = rng.below(KEYS);
        let mut tx = c.begin();
        let r: Result<(), tandem_dkvs::TxError> = async {
            let present = tx.read(0, key).await?.is_some();
            if rng.chance(0.25) {
                tx.read(0, rng.below(KEYS)).await?;
                tx.read(COUNTER, key).await?;
                return Ok(());
            }
            // Keys pair up (k, k ^ 1): one is inserted only while its partner
            // is absent, so serializable runs never have both live.
            if !present && tx.read(0, key ^ 1).await?.is_some() {
                return Ok(());
            }
            let n = num(Some(tx.read_for_update(COUNTER, key).await?));
            if present {
                tx.delete(0, key).await?;
                tx.write(COUNTER, key, &(n - 1).to_le_bytes()).await
            } else {
                tx.insert(0, key, &key.to_le_bytes()).await?;
                tx.write(COUNTER, key, &(n + 1).to_le_bytes()).await
            }
        }
        .await;
        // NotFound or AlreadyExists (the key flipped meanwhile) leave the
        // transaction open: abort it, or its locks stay held.
        let _ = if r.is_ok() {
            tx.commit().await
        } else {
            Err(tx.abort().await)
        };
        if c.reclaim_pending(2).await.is_err() {
            break;
        }
    }
    stats.borrow_mut().merge(&c.stats);
}

struct Outcome {
    violations: Vec<String>,
    stats: CoordinatorStats,
    recovered: Recovered,
}

/// What the crash's recovery found and did.
#[derive(Default)]
struct Recovered {
    /// Reclamations in the crashed coordinators' valid log records.
    reclaims_logged: usize,
    report: RecoveryReport,
}

/// A planted bug must be caught by this file's checks, not by the
/// coordinators' assertions ([`a_reclamation_mid_run_trips_reclaim_tail`]
/// runs those).
fn run(mode: Mode, seed: u64, bugs: BugSwitches, crash: bool) -> Outcome {
    run_with(mode, seed, bugs, crash, !bugs.any())
}

fn run_with(mode: Mode, seed: u64, bugs: BugSwitches, crash: bool, assertions: bool) -> Outcome {
    let cfg = store(mode, bugs, assertions);
    let layout = Arc::new(Layout::new(&cfg).unwrap());
    let sim = Sim::new(seed);
    let cluster = SimCluster::with_nodes(
        sim.handle(),
        3,
        *layout.region_bytes.iter().max().unwrap(),
        SimFabricConfig::default(),
    );
    let admin = cluster.join(100).unwrap();
    let (f, l) = (admin.clone(), layout.clone());
    sim.spawn(100, async move {
        let mut ld = Loader::new(&f, l);
        for k in 0..KEYS {
            ld.put(COUNTER, k, &0i64.to_le_bytes()).await.unwrap();
        }
        ld.finish().await.unwrap();
    });
    sim.run();
    let failed = FailedIds::new();
    let stats = Rc::new(RefCell::new(CoordinatorStats::default()));
    let mut rng = Rng::new(seed ^ 0x5EED);
    for n in 1..=NODES {
        let node = ComputeNode::new(
            cluster.join(n).unwrap(),
            &cfg,
            layout.clone(),
            failed.clone(),
        );
        for k in 0..COORDS_PER_NODE {
            let id = n * 10 + k;
            sim.spawn(
                n as u32,
                client(node.clone(), id, rng.fork(), stats.clone()),
            );
        }
    }
    let recovered = Rc::new(RefCell::new(Recovered::default()));
    if crash {
        sim.run_until(sim.now_ns() + 20_000 + rng.below(200_000));
        sim.crash(NODES as u32);
        cluster.revoke(NODES);
        let ids: Vec<u16> = (0..COORDS_PER_NODE).map(|k| NODES * 10 + k).collect();
        let (f, l, fl) = (admin.clone(), layout.clone(), failed.clone());
        let rec = recovered.clone();
        sim.spawn(100, async move {
            let mut rc = RecoveryCoordinator::new(&f, l, 99);
            let logs = rc.read_logs(&ids).await.unwrap();
            let entries = logs.iter().flatten().flat_map(|r| &r.entries);
            rec.borrow_mut().reclaims_logged = entries.filter(|e| e.op == OpKind::Reclaim).count();
            rec.borrow_mut().report = rc.recover(&ids).await.unwrap();
            for id in ids {
                fl.insert(id);
            }
        });
    }
    sim.run();
    let (f, l) = (admin.clone(), layout.clone());
    let violations = Rc::new(RefCell::new(Vec::new()));
    let v = violations.clone();
    sim.spawn(100, async move {
        sweep_stray_locks(&f, &l, &failed).await.unwrap();
        *v.borrow_mut() = inspect(&f, &l).await;
    });
    sim.run();
    let violations = violations.take();
    let stats = stats.take();
    Outcome {
        violations,
        stats,
        recovered: recovered.take(),
    }
}

/// Everything that must hold once the clients stopped.
async fn inspect(f: &SimFabric, layout: &Layout) -> Vec<String> {
    let keys = tandem_dkvs::check::snapshot(f, layout, 0).await.unwrap();
    let counter = tandem_dkvs::check::snapshot(f, layout, COUNTER)
        .await
        .unwrap();
    let mut out = keys.structure_violations(layout.table(0));
    for snap in [&keys, &counter] {
        out.extend(snap.replica_mismatches());
        out.extend(
            snap.held_locks()
                .iter()
                .map(|(k, w)| format!("table {} key {k}: lock {w:?} left held", snap.table)),
        );
    }
    let live_keys = keys.live();
    for k in live_keys
        .keys()
        .filter(|k| *k % 2 == 0 && live_keys.contains_key(&(*k ^ 1)))
    {
        out.push(format!(
            "keys {k} and {} are both live: one was inserted while it saw the other absent",
            k ^ 1
        ));
    }
    let counters = counter.live();
    for k in 0..KEYS {
        let (count, live) = (
            num(counters.get(&k).cloned()),
            live_keys.contains_key(&k) as i64,
        );
        if count != live {
            out.push(format!(
                "key {k}: its counter says {count}, the table says {live}"
            ));
        }
    }
    out
}

fn seeds() -> u64 {
    std::env::var("TANDEM_RECLAIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

#[test]
fn reclamation_races_readers_inserts_and_deletes_in_every_mode() {
    for mode in Mode::ALL {
        let mut reclaimed = 0;
        for seed in 0..seeds() {
            let o = run(mode, seed, BugSwitches::default(), false);
            assert!(
                o.violations.is_empty(),
                "{mode} seed {seed}: {:?}",
                o.violations
            );
            reclaimed += o.stats.slots_reclaimed;
        }
        assert!(
            reclaimed > 0 || std::env::var("TANDEM_NO_RECLAIM").is_ok(),
            "{mode}: nothing was reclaimed"
        );
        eprintln!("{mode}: {reclaimed} slots reclaimed over {} seeds", seeds());
    }
}

#[test]
fn reclamation_races_a_compute_crash_and_its_recovery() {
    let (mut reclaimed, mut in_log, mut acted) = (0, 0, 0);
    for seed in 0..seeds() {
        let o = run(Mode::Pandora, seed, BugSwitches::default(), true);
        assert!(o.violations.is_empty(), "seed {seed}: {:?}", o.violations);
        reclaimed += o.stats.slots_reclaimed;
        in_log += o.recovered.reclaims_logged;
        acted += o.recovered.report.rolled_back + o.recovered.report.rolled_forward;
    }
    assert!(reclaimed > 0 && acted > 0 && in_log > 0, "reclaimed {reclaimed}, rolled back or forward {acted}, reclamations in crashed logs {in_log}");
    eprintln!("{} crashed runs: {reclaimed} slots reclaimed, {acted} transactions rolled back or forward, {in_log} reclamations in crashed logs", seeds());
}

/// The first seed (of `max`) on which `bugs` breaks an invariant.
fn caught(bugs: BugSwitches, max: u64) -> Option<(u64, Vec<String>)> {
    (0..max).find_map(|seed| {
        let o = run(Mode::Pandora, seed, bugs, false);
        (!o.violations.is_empty()).then_some((seed, o.violations))
    })
}

#[test]
fn a_reclamation_mid_run_is_caught() {
    let bugs = BugSwitches {
        reclaim_mid_run: true,
        ..Default::default()
    };
    let (seed, v) = caught(bugs, 200).expect("reclaim-mid-run not caught in 200 seeds");
    eprintln!("reclaim-mid-run caught at seed {seed}: {}", v[0]);
}

/// With the coordinators' assertions on, `reclaim-mid-run` trips
/// `reclaim-tail` (a tombstone emptied without its successor guarded
/// empty) at its first reclamation, before any reader misses a key.
#[test]
fn a_reclamation_mid_run_trips_reclaim_tail() {
    let bugs = BugSwitches {
        reclaim_mid_run: true,
        ..Default::default()
    };
    let hit = (0..200).find_map(|seed| {
        let r = std::panic::catch_unwind(|| run_with(Mode::Pandora, seed, bugs, false, true));
        let payload = r.err()?;
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| std::panic::resume_unwind(payload));
        Some((seed, msg))
    });
    let (seed, msg) = hit.expect("reclaim-mid-run tripped no assertion in 200 seeds");
    eprintln!("reclaim-mid-run: seed {seed}: {msg}");
    assert!(msg.starts_with("reclaim-tail:"), "{msg}");
}
