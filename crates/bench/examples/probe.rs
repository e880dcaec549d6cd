use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::*;
use tandem_fabric::sim::{SimCluster, SimFabricConfig};
use tandem_sim::Sim;
fn main() {
    let mut both = 0;
    let n: u64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(2000);
    for seed in 0..n {
        let tables = vec![TableSpec { id: 0, name: "a".into(), value_size: 8, capacity: 6 }];
        let mut store = StoreConfig::new(Mode::Pandora, 3, 2, tables);
        store.partitions_per_table = 12; store.log_slots = 8; store.log_slot_bytes = 4096;
        store.bugs = BugSwitches { relaxed_locks: true, ..Default::default() };
        let layout = Arc::new(Layout::new(&store).unwrap());
        let sim = Sim::new(seed);
        let cluster = SimCluster::with_nodes(sim.handle(), 3, *layout.region_bytes.iter().max().unwrap(), SimFabricConfig::default());
        let lf = cluster.join(0); let l = layout.clone();
        sim.spawn(99, async move { let mut ld = Loader::new(&lf, l); for k in 0..6 { ld.put(0, k, &100i64.to_le_bytes()).await.unwrap(); } ld.finish().await.unwrap(); });
        sim.run();
        let out = Rc::new(RefCell::new(Vec::new()));
        for (cn, (mine, other, to)) in [(4u64, 5u64, 2u64), (5, 4, 3)].into_iter().enumerate() {
            let node = ComputeNode::new(cluster.join(cn as u16 + 1), &store, layout.clone(), FailedIds::new());
            let mut c = node.coordinator(cn as u16 + 1);
            let o = out.clone(); let h = sim.handle();
            sim.spawn(cn as u32, async move {
                // warm the address cache
                { let mut t = c.begin(); for k in 0..6 { t.read(0, k).await.unwrap(); } t.commit().await.unwrap(); }
                let d = h.with_rng(|r| r.below(3000)); h.sleep(d).await;
                let mut t = c.begin();
                let Ok(Some(s)) = t.read(0, other).await else { o.borrow_mut().push(false); return };
                let Ok(Some(a)) = t.read(0, mine).await else { o.borrow_mut().push(false); return };
                let Ok(Some(b)) = t.read(0, to).await else { o.borrow_mut().push(false); return };
                let f = |v: Vec<u8>| i64::from_le_bytes(v[..8].try_into().unwrap());
                let (s, a, b) = (f(s), f(a), f(b));
                let amt = a + s;
                t.write(0, mine, &(a - amt).to_le_bytes()).await.unwrap();
                t.write(0, to, &(b + amt).to_le_bytes()).await.unwrap();
                let ok = t.commit().await.is_ok(); o.borrow_mut().push(ok);
            });
        }
        sim.run();
        if out.borrow().iter().all(|x| *x) { both += 1; }
    }
    println!("both committed in {both}/2000");
}
