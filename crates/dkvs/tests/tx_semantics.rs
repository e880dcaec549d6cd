//! Tier-1 transaction semantics on the simulated fabric: the API contract and
//! the insert/delete corner cases a reviewer found (each failed before its fix).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::{
    AbortReason, ComputeNode, FailedIds, Layout, Mode, StoreConfig, TableSpec, TxError,
};
use tandem_fabric::sim::{SimCluster, SimFabric, SimFabricConfig};
use tandem_sim::Sim;

struct World {
    sim: Sim,
    cluster: SimCluster,
    layout: Arc<Layout>,
    store: StoreConfig,
}

fn world(mode: Mode, seed: u64, fabric: SimFabricConfig) -> World {
    let tables = vec![TableSpec {
        id: 0,
        name: "t".into(),
        value_size: 16,
        capacity: 64,
    }];
    let mut store = StoreConfig::new(mode, 3, 2, tables);
    store.partitions_per_table = 2;
    store.log_slots = 16;
    store.log_slot_bytes = 4096;
    let layout = Arc::new(Layout::new(&store).unwrap());
    let sim = Sim::new(seed);
    let cluster = SimCluster::with_nodes(
        sim.handle(),
        3,
        *layout.region_bytes.iter().max().unwrap(),
        fabric,
    );
    let (f, l) = (
        cluster.join(0).expect("a fresh compute-node id"),
        layout.clone(),
    );
    sim.spawn(99, async move {
        let mut ld = Loader::new(&f, l);
        for k in 0..8u64 {
            ld.put(0, k, &k.to_le_bytes()).await.unwrap();
        }
        ld.finish().await.unwrap();
    });
    sim.run();
    World {
        sim,
        cluster,
        layout,
        store,
    }
}

impl World {
    fn node(&self, id: u16) -> Rc<ComputeNode<SimFabric>> {
        ComputeNode::new(
            self.cluster.join(id).expect("a fresh compute-node id"),
            &self.store,
            self.layout.clone(),
            FailedIds::new(),
        )
    }
    /// Two keys (not loaded) with the same home bucket.
    fn same_bucket_keys(&self, n: usize) -> Vec<u64> {
        let t = self.layout.table(0);
        let target = t.home(1000);
        let mut v: Vec<u64> = (1000..200_000)
            .filter(|&k| t.home(k) == target)
            .take(n)
            .collect();
        v.sort();
        v
    }
}

fn run_task(w: &World, node: u32, f: impl std::future::Future<Output = ()> + 'static) {
    w.sim.spawn(node, f);
    w.sim.run();
}

#[test]
fn read_write_insert_delete_round_trip_with_typed_errors() {
    for mode in Mode::ALL {
        let w = world(mode, 1, SimFabricConfig::default());
        let node = w.node(1);
        let log = Rc::new(RefCell::new(Vec::new()));
        let l = log.clone();
        run_task(&w, 1, async move {
            let mut c = node.coordinator(1);
            let mut tx = c.begin();
            assert_eq!(tx.read(0, 3).await.unwrap(), Some(pad(3)));
            assert_eq!(tx.read(0, 500).await.unwrap(), None);
            tx.write(0, 3, &pad(33)).await.unwrap();
            assert_eq!(tx.insert(0, 4, &pad(1)).await, Err(TxError::AlreadyExists));
            tx.insert(0, 500, &pad(500)).await.unwrap();
            tx.delete(0, 5).await.unwrap();
            assert_eq!(tx.delete(0, 5).await, Err(TxError::NotFound));
            assert_eq!(
                tx.read(0, 3).await.unwrap(),
                Some(pad(33)),
                "a transaction reads its own writes"
            );
            tx.commit().await.unwrap();
            let mut tx = c.begin();
            assert_eq!(tx.read(0, 3).await.unwrap(), Some(pad(33)));
            assert_eq!(tx.read(0, 500).await.unwrap(), Some(pad(500)));
            assert_eq!(tx.read(0, 5).await.unwrap(), None);
            assert_eq!(tx.read_for_update(0, 5).await, Err(TxError::NotFound));
            tx.insert(0, 5, &pad(55)).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = c.begin();
            assert_eq!(
                tx.read(0, 5).await.unwrap(),
                Some(pad(55)),
                "re-insert after delete"
            );
            assert_eq!(tx.abort().await, TxError::Aborted(AbortReason::User));
            l.borrow_mut().push("done");
        });
        assert_eq!(*log.borrow(), vec!["done"], "{mode}");
    }
}

/// Coordinator `id` of `node` locks `key` and "crashes": its transaction is
/// abandoned mid-way, its lock left held, exactly as a crash leaves it.
async fn crash_holding_lock(node: &Rc<ComputeNode<SimFabric>>, id: u16, key: u64) {
    let mut c = node.coordinator(id);
    let mut tx = c.begin();
    tx.read_for_update(0, key).await.unwrap();
    std::mem::forget(tx);
}

fn pad(v: u64) -> Vec<u8> {
    let mut b = v.to_le_bytes().to_vec();
    b.resize(16, 0);
    b
}

#[test]
fn several_inserts_into_one_bucket_and_an_absence_read_commit_together() {
    for mode in Mode::ALL {
        let w = world(mode, 2, SimFabricConfig::default());
        let keys = w.same_bucket_keys(3);
        let node = w.node(1);
        let ok = Rc::new(RefCell::new(false));
        let o = ok.clone();
        run_task(&w, 1, async move {
            let mut c = node.coordinator(1);
            let mut tx = c.begin();
            assert_eq!(tx.read(0, keys[2]).await.unwrap(), None);
            tx.insert(0, keys[0], &pad(1)).await.unwrap();
            tx.insert(0, keys[1], &pad(2)).await.unwrap();
            tx.commit().await.expect("our own locks must not block us");
            let mut tx = c.begin();
            assert_eq!(tx.read(0, keys[0]).await.unwrap(), Some(pad(1)));
            assert_eq!(tx.read(0, keys[1]).await.unwrap(), Some(pad(2)));
            assert_eq!(tx.read(0, keys[2]).await.unwrap(), None);
            tx.commit().await.unwrap();
            *o.borrow_mut() = true;
        });
        assert!(*ok.borrow(), "{mode}");
    }
}

#[test]
fn an_aborted_insert_does_not_poison_the_address_cache() {
    let w = world(Mode::Pandora, 3, SimFabricConfig::default());
    let keys = w.same_bucket_keys(2);
    let (a, b) = (w.node(1), w.node(2));
    let k = keys.clone();
    run_task(&w, 1, async move {
        let mut c = a.coordinator(1);
        let mut tx = c.begin();
        tx.insert(0, k[0], &pad(1)).await.unwrap();
        tx.abort().await;
        // Another node now takes that slot for a different key.
        let mut c2 = b.coordinator(2);
        let mut tx = c2.begin();
        tx.insert(0, k[1], &pad(2)).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = c.begin();
        assert_eq!(
            tx.read(0, k[0]).await.unwrap(),
            None,
            "must not return another key's value"
        );
        tx.insert(0, k[0], &pad(1)).await.unwrap();
        tx.commit().await.unwrap();
    });
    assert_eq!(w.sim.live_tasks(), 0);
}

#[test]
fn a_blind_write_to_a_key_deleted_meanwhile_aborts() {
    let w = world(Mode::Pandora, 4, SimFabricConfig::default());
    let (a, b) = (w.node(1), w.node(2));
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    run_task(&w, 1, async move {
        let mut ca = a.coordinator(1);
        let mut tx = ca.begin();
        tx.read(0, 6).await.unwrap(); // caches the slot
        tx.commit().await.unwrap();
        let mut cb = b.coordinator(2);
        let mut tx = cb.begin();
        tx.delete(0, 6).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = ca.begin();
        tx.write(0, 6, &pad(60)).await.unwrap();
        *o.borrow_mut() = Some(tx.commit().await);
    });
    assert_eq!(
        *out.borrow(),
        Some(Err(TxError::Aborted(AbortReason::StaleRead)))
    );
}

#[test]
fn concurrent_reinserts_of_a_deleted_key_never_both_commit() {
    for mode in Mode::ALL {
        for seed in 0..150 {
            let w = world(mode, seed, SimFabricConfig::default());
            let setup = w.node(9);
            run_task(&w, 9, async move {
                let mut c = setup.coordinator(9);
                let mut tx = c.begin();
                tx.delete(0, 7).await.unwrap();
                tx.commit().await.unwrap();
            });
            let wins = Rc::new(RefCell::new(0));
            for id in 1..=2u16 {
                let node = w.node(id);
                let wins = wins.clone();
                w.sim.spawn(id as u32, async move {
                    let mut c = node.coordinator(id);
                    let mut tx = c.begin();
                    if tx.insert(0, 7, &pad(id as u64)).await.is_ok() && tx.commit().await.is_ok() {
                        *wins.borrow_mut() += 1;
                    }
                });
            }
            w.sim.run();
            assert!(
                *wins.borrow() <= 1,
                "{mode} seed {seed}: both re-inserts committed"
            );
        }
    }
}

/// PILL (Pandora paper §3.1.2): a lock owned by a coordinator in `failed_ids`
/// is stray. Reads ignore it, writers steal it; a live owner's lock blocks.
#[test]
fn stray_locks_of_failed_coordinators_are_ignored_by_reads_and_stolen_by_writes() {
    let w = world(Mode::Pandora, 6, SimFabricConfig::default());
    let failed = FailedIds::new();
    let mk = |id: u16| {
        ComputeNode::new(
            w.cluster.join(id).expect("a fresh compute-node id"),
            &w.store,
            w.layout.clone(),
            failed.clone(),
        )
    };
    let (dead, live) = (mk(1), mk(2));
    let out = Rc::new(RefCell::new(Vec::new()));
    let (o, f) = (out.clone(), failed.clone());
    run_task(&w, 1, async move {
        // Coordinator 1 locks key 2 and "crashes".
        crash_holding_lock(&dead, 1, 2).await;
        let mut c2 = live.coordinator(2);
        // While 1 is considered alive, its lock blocks readers and writers.
        let mut tx = c2.begin();
        o.borrow_mut()
            .push(format!("{:?}", tx.read(0, 2).await.err()));
        let mut tx = c2.begin();
        o.borrow_mut()
            .push(format!("{:?}", tx.read_for_update(0, 2).await.err()));
        // Declared failed: reads proceed and the write steals the lock.
        f.insert(1);
        let mut tx = c2.begin();
        o.borrow_mut()
            .push(format!("{:?}", tx.read(0, 2).await.map(|v| v.is_some())));
        tx.commit().await.unwrap();
        let mut tx = c2.begin();
        tx.read_for_update(0, 2).await.unwrap();
        tx.write(0, 2, &pad(22)).await.unwrap();
        tx.commit().await.unwrap();
        o.borrow_mut()
            .push(format!("stolen {}", c2.stats.locks_stolen));
        let mut tx = c2.begin();
        o.borrow_mut().push(format!(
            "{:?}",
            tx.read(0, 2).await.unwrap() == Some(pad(22))
        ));
        tx.commit().await.unwrap();
    });
    assert_eq!(
        *out.borrow(),
        vec![
            "Some(Aborted(ReadLocked))".to_string(),
            "Some(Aborted(LockConflict))".into(),
            "Ok(true)".into(),
            "stolen 1".into(),
            "true".into()
        ]
    );
    // Our own unlock CAS released the stolen lock: nothing is left held.
    let checker = w.cluster.join(u16::MAX).expect("a fresh compute-node id");
    let l = w.layout.clone();
    let held = Rc::new(RefCell::new(None));
    let h = held.clone();
    run_task(&w, 7, async move {
        let snap = tandem_dkvs::check::snapshot(&checker, &l, 0).await.unwrap();
        *h.borrow_mut() = Some(snap.held_locks().len());
    });
    assert_eq!(*held.borrow(), Some(0));
}

#[test]
fn ford_mode_never_steals_owner_less_locks() {
    let w = world(Mode::Ford, 6, SimFabricConfig::default());
    let failed = FailedIds::new();
    failed.insert(1);
    let mk = |id: u16| {
        ComputeNode::new(
            w.cluster.join(id).expect("a fresh compute-node id"),
            &w.store,
            w.layout.clone(),
            failed.clone(),
        )
    };
    let (dead, live) = (mk(1), mk(2));
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    run_task(&w, 1, async move {
        crash_holding_lock(&dead, 1, 2).await;
        let mut c2 = live.coordinator(2);
        let mut tx = c2.begin();
        *o.borrow_mut() = tx.read_for_update(0, 2).await.err();
    });
    assert_eq!(
        *out.borrow(),
        Some(TxError::Aborted(AbortReason::LockConflict)),
        "a FORD lock names no owner"
    );
}

/// `--on-stray stall`: a transaction that meets a stray lock waits instead of
/// aborting, and proceeds (stealing it) once recovery publishes the owner.
#[test]
fn stalled_transactions_proceed_once_the_owner_is_declared_failed() {
    let mut w = world(Mode::Pandora, 8, SimFabricConfig::default());
    w.store.on_stray = tandem_dkvs::OnStray::Stall {
        max_retries: 1_000_000,
    };
    let failed = FailedIds::new();
    let mk = |id: u16| {
        ComputeNode::new(
            w.cluster.join(id).expect("a fresh compute-node id"),
            &w.store,
            w.layout.clone(),
            failed.clone(),
        )
    };
    let (dead, live) = (mk(1), mk(2));
    run_task(&w, 1, async move {
        crash_holding_lock(&dead, 1, 2).await;
    });
    let out = Rc::new(RefCell::new(Vec::new()));
    let o = out.clone();
    w.sim.spawn(2, async move {
        let mut c2 = live.coordinator(2);
        let mut tx = c2.begin();
        let r = tx.read(0, 2).await.map(|v| v.is_some());
        o.borrow_mut().push(format!("read {r:?}"));
        let r = tx.read_for_update(0, 2).await.map(|_| ());
        o.borrow_mut().push(format!("rfu {r:?}"));
        let r = tx.commit().await;
        o.borrow_mut().push(format!(
            "commit {r:?} stalled {}",
            c2.stats.stall_retries > 0
        ));
    });
    // The stalled transaction waits; nothing completes while the owner looks alive.
    w.sim.run_until(w.sim.now_ns() + 200_000);
    assert!(out.borrow().is_empty(), "{:?}", out.borrow());
    failed.insert(1);
    w.sim.run();
    assert_eq!(
        *out.borrow(),
        vec!["read Ok(true)", "rfu Ok(())", "commit Ok(()) stalled true"]
    );
}

/// Before an id is recycled, no version it minted may survive: validation
/// compares versions for equality, so a reused id re-minting an old version
/// would let a stale read validate (ABA).
#[test]
fn retiring_a_recycled_ids_versions_leaves_none_and_fails_stale_readers() {
    let w = world(Mode::Pandora, 9, SimFabricConfig::default());
    let (writer, reader) = (w.node(1), w.node(2));
    let rc_fabric = w.cluster.join(900).expect("a fresh compute-node id");
    let layout = w.layout.clone();
    let out = Rc::new(RefCell::new(Vec::new()));
    let o = out.clone();
    run_task(&w, 1, async move {
        let mut c5 = writer.coordinator(5);
        let mut tx = c5.begin();
        tx.write(0, 2, &pad(20)).await.unwrap();
        tx.commit().await.unwrap();
        // A reader records the version coordinator 5 minted...
        let mut c6 = reader.coordinator(6);
        let mut stale = c6.begin();
        assert_eq!(stale.read(0, 2).await.unwrap(), Some(pad(20)));
        // ... coordinator 5 has failed and its id is about to be recycled.
        let mut rc = tandem_dkvs::recovery::RecoveryCoordinator::new(&rc_fabric, layout.clone(), 7);
        let n = rc.retire_versions(&[5]).await.unwrap();
        o.borrow_mut().push(format!("retired {n:?}"));
        let snap = tandem_dkvs::check::snapshot(&rc_fabric, &layout, 0)
            .await
            .unwrap();
        let left = snap
            .partitions
            .iter()
            .flatten()
            .flatten()
            .filter(|s| s.version >> 48 == 5)
            .count();
        o.borrow_mut().push(format!("left {left}"));
        o.borrow_mut()
            .push(format!("stale reader: {:?}", stale.commit().await));
    });
    assert_eq!(
        *out.borrow(),
        vec![
            "retired Some(1)".to_string(),
            "left 0".into(),
            "stale reader: Err(Aborted(ValidationFailed))".into()
        ]
    );
}

/// Insert `keys` (value: the key, padded) in one committed transaction.
async fn insert_all(c: &mut tandem_dkvs::Coordinator<SimFabric>, keys: &[u64]) {
    let mut tx = c.begin();
    for &k in keys {
        tx.insert(0, k, &pad(k)).await.unwrap();
    }
    tx.commit().await.unwrap();
}

/// Delete `key` in a committed transaction of its own.
async fn delete_one(c: &mut tandem_dkvs::Coordinator<SimFabric>, key: u64) {
    let mut tx = c.begin();
    tx.delete(0, key).await.unwrap();
    tx.commit().await.unwrap();
}

/// Non-empty slots of table 0, from the primaries.
async fn occupied(f: &SimFabric, layout: &Arc<Layout>) -> usize {
    let snap = tandem_dkvs::check::snapshot(f, layout, 0).await.unwrap();
    snap.partitions
        .iter()
        .map(|p| p[0].iter().filter(|s| !s.is_empty()).count())
        .sum()
}

/// Slot reclamation (`coordinator/reclaim.rs`): a tombstone with an empty
/// successor is emptied; one in the middle of a run waits, and follows by
/// cascade once the run's tail is reclaimed; the slot then takes a new key.
#[test]
fn tail_tombstones_are_reclaimed_by_cascade_and_their_slots_reused() {
    for mode in Mode::ALL {
        let w = world(mode, 10, SimFabricConfig::default());
        let k = w.same_bucket_keys(4);
        let (node, f, layout) = (w.node(1), w.cluster.join(50).unwrap(), w.layout.clone());
        let out = Rc::new(RefCell::new(Vec::new()));
        let o = out.clone();
        run_task(&w, 1, async move {
            let mut c = node.coordinator(1);
            let mut tx = c.begin();
            for &key in &k[..3] {
                tx.insert(0, key, &pad(key)).await.unwrap();
            }
            tx.commit().await.unwrap();
            let before = occupied(&f, &layout).await;
            delete_one(&mut c, k[1]).await;
            c.reclaim_pending(8).await.unwrap();
            o.borrow_mut().push(format!(
                "middle: reclaimed {} deferred {}",
                c.stats.slots_reclaimed, c.stats.reclaims_deferred
            ));
            delete_one(&mut c, k[2]).await;
            c.reclaim_pending(8).await.unwrap();
            o.borrow_mut()
                .push(format!("tail: reclaimed {}", c.stats.slots_reclaimed));
            o.borrow_mut()
                .push(format!("freed {}", before - occupied(&f, &layout).await));
            let mut tx = c.begin();
            tx.insert(0, k[3], &pad(3)).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = c.begin();
            let seen = [
                tx.read(0, k[0]).await.unwrap(),
                tx.read(0, k[1]).await.unwrap(),
                tx.read(0, k[2]).await.unwrap(),
                tx.read(0, k[3]).await.unwrap(),
            ];
            tx.commit().await.unwrap();
            o.borrow_mut()
                .push(format!("{:?}", seen.map(|v| v.is_some())));
            o.borrow_mut().push(format!(
                "occupied +{}",
                occupied(&f, &layout).await + 2 - before
            ));
        });
        let want = [
            "middle: reclaimed 0 deferred 1",
            "tail: reclaimed 2",
            "freed 2",
            "[true, false, false, true]",
            "occupied +1",
        ];
        assert_eq!(*out.borrow(), want, "{mode}");
    }
}

/// Emptying a tombstone that is not the tail of its run cuts the probe path
/// of the key behind it: the `reclaim-mid-run` mutant loses that key.
#[test]
fn reclaiming_mid_run_would_lose_the_key_behind_the_tombstone() {
    for mid_run in [false, true] {
        let mut w = world(Mode::Pandora, 11, SimFabricConfig::default());
        w.store.bugs.reclaim_mid_run = mid_run;
        // The lost key must show, not the coordinators' assertion (tests/assertions.rs).
        w.store.assertions = Some(!mid_run);
        let k = w.same_bucket_keys(2);
        let (node, reader) = (w.node(1), w.node(2));
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        run_task(&w, 1, async move {
            let mut c = node.coordinator(1);
            insert_all(&mut c, &k[..2]).await;
            delete_one(&mut c, k[0]).await;
            c.reclaim_pending(8).await.unwrap();
            c.take_unlocks().await;
            // Another node: no cached address to skip the probe.
            let mut other = reader.coordinator(2);
            let mut tx = other.begin();
            *o.borrow_mut() = Some(tx.read(0, k[1]).await.unwrap().is_some());
        });
        assert_eq!(
            *out.borrow(),
            Some(!mid_run),
            "mutant reclaim-mid-run {mid_run}"
        );
    }
}

/// The phantom guard: a transaction found `k` absent behind two live keys;
/// the second is deleted and `k` inserted into its tombstone. Validation
/// must fail; the `unguarded-phantoms` mutant, which guards only the empty
/// slot that ended the probe, commits.
#[test]
fn an_absent_read_fails_validation_when_its_path_is_freed_and_the_key_inserted() {
    for unguarded in [false, true] {
        let mut w = world(Mode::Pandora, 12, SimFabricConfig::default());
        w.store.bugs.unguarded_phantoms = unguarded;
        // The commit must show, not the coordinators' assertion (tests/assertions.rs).
        w.store.assertions = Some(!unguarded);
        let k = w.same_bucket_keys(3);
        let (a, b) = (w.node(1), w.node(2));
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        run_task(&w, 1, async move {
            let mut c = a.coordinator(1);
            insert_all(&mut c, &k[..2]).await;
            let mut reader = b.coordinator(2);
            let mut r = reader.begin();
            assert_eq!(r.read(0, k[2]).await.unwrap(), None);
            r.write(0, 3, &pad(30)).await.unwrap();
            delete_one(&mut c, k[1]).await;
            let mut tx = c.begin();
            tx.insert(0, k[2], &pad(2)).await.unwrap();
            tx.commit().await.unwrap();
            *o.borrow_mut() = Some(r.commit().await);
        });
        let want = if unguarded {
            Ok(())
        } else {
            Err(TxError::Aborted(AbortReason::ValidationFailed))
        };
        assert_eq!(
            *out.borrow(),
            Some(want),
            "mutant unguarded-phantoms {unguarded}"
        );
    }
}

/// Another key's tombstone is reused by an insert, and the slot's old key
/// stays absent; a reclaimed slot is reused too.
#[test]
fn inserts_reuse_other_keys_tombstones() {
    let w = world(Mode::Pandora, 13, SimFabricConfig::default());
    let k = w.same_bucket_keys(4);
    let (node, f, layout) = (w.node(1), w.cluster.join(51).unwrap(), w.layout.clone());
    let out = Rc::new(RefCell::new(Vec::new()));
    let o = out.clone();
    run_task(&w, 1, async move {
        let mut c = node.coordinator(1);
        let mut tx = c.begin();
        tx.insert(0, k[0], &pad(0)).await.unwrap();
        tx.insert(0, k[1], &pad(1)).await.unwrap();
        tx.commit().await.unwrap();
        let before = occupied(&f, &layout).await;
        let mut tx = c.begin();
        tx.delete(0, k[0]).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = c.begin();
        tx.insert(0, k[2], &pad(2)).await.unwrap();
        tx.commit().await.unwrap();
        o.borrow_mut().push(format!(
            "occupied +{}",
            occupied(&f, &layout).await - before
        ));
        let mut tx = c.begin();
        let seen = [
            tx.read(0, k[0]).await.unwrap(),
            tx.read(0, k[1]).await.unwrap(),
            tx.read(0, k[2]).await.unwrap(),
        ];
        tx.commit().await.unwrap();
        o.borrow_mut()
            .push(format!("{:?}", seen.map(|v| v.is_some())));
    });
    assert_eq!(*out.borrow(), ["occupied +0", "[false, true, true]"]);
}

/// The message of the assertion `f` panicked with (a panic that is not an
/// invariant assertion goes on).
fn assertion(f: impl FnOnce()) -> Option<String> {
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).err()?;
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    let name = msg.split(':').next().unwrap_or("");
    if !tandem_dkvs::INVARIANTS.contains(&name) {
        std::panic::resume_unwind(payload);
    }
    Some(msg)
}

/// The phantom-guard scenario above with the coordinators' assertions on:
/// `unguarded-phantoms` trips `phantom-guard` at its first absent read.
#[test]
fn unguarded_phantoms_trip_phantom_guard() {
    let mut w = world(Mode::Pandora, 12, SimFabricConfig::default());
    w.store.bugs.unguarded_phantoms = true;
    w.store.assertions = Some(true);
    let k = w.same_bucket_keys(3);
    let a = w.node(1);
    let msg = assertion(|| {
        run_task(&w, 1, async move {
            let mut c = a.coordinator(1);
            insert_all(&mut c, &k[..2]).await;
            let mut tx = c.begin();
            let _ = tx.read(0, k[2]).await;
        })
    });
    let msg = msg.expect("unguarded-phantoms tripped no assertion");
    eprintln!("unguarded-phantoms: {msg}");
    assert!(msg.starts_with("phantom-guard:"), "{msg}");
}

/// The `lock-lease` bug (Pandora, `--on-stray stall`): a coordinator that
/// stalled a lease on a lock presumes its owner dead and steals it. The
/// owner here is alive (not in failed-ids): without assertions the thief
/// commits over a live transaction's lock; with them, `steal-only-failed`
/// fires at the steal. Without the bug, the stalled write gives up.
#[test]
fn a_lock_lease_steals_a_live_lock_and_trips_steal_only_failed() {
    let outcome = |lease: bool, asserts: bool| {
        let mut w = world(Mode::Pandora, 14, SimFabricConfig::default());
        w.store.on_stray = tandem_dkvs::OnStray::Stall { max_retries: 500 };
        w.store.bugs.lock_lease = lease;
        w.store.assertions = Some(asserts);
        let (owner, thief) = (w.node(1), w.node(2));
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        let msg = assertion(|| {
            run_task(&w, 1, async move {
                // A live transaction holds key 3 (its coordinator is slow, not failed).
                let mut c = owner.coordinator(1);
                let mut held = c.begin();
                held.read_for_update(0, 3).await.unwrap();
                let mut t = thief.coordinator(2);
                let mut tx = t.begin();
                let r = match tx.write(0, 3, &pad(9)).await {
                    Ok(()) => tx.commit().await,
                    Err(e) => Err(e),
                };
                *o.borrow_mut() = Some(r);
                std::mem::forget(held);
            })
        });
        (out.take(), msg)
    };
    let (r, msg) = outcome(false, true);
    assert_eq!(r, Some(Err(TxError::Aborted(AbortReason::LockConflict))));
    assert_eq!(msg, None);
    let (r, msg) = outcome(true, false);
    assert_eq!(
        r,
        Some(Ok(())),
        "the lease bug steals a live lock and commits"
    );
    assert_eq!(msg, None);
    let (r, msg) = outcome(true, true);
    let msg = msg.expect("lock-lease tripped no assertion");
    eprintln!("lock-lease: {msg}");
    assert!(
        r.is_none() && msg.starts_with("steal-only-failed:"),
        "{r:?} {msg}"
    );
}
