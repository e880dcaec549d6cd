//! Test support: run a workload's clients sequentially on the inline fabric
//! (no simulator, no faults) and hand back the live tables, so unit tests can
//! check that a clean run passes the post-run check and a tampered state fails it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tandem_dkvs::check::snapshot;
use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{
    ComputeNode, Coordinator, FailedIds, Layout, Mode, StoreConfig, TableSpec, TxError,
};
use tandem_fabric::inline::{InlineCluster, InlineFabric};

/// Inline verbs complete at post time, so polling to completion never waits.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

pub type Live = Vec<BTreeMap<u64, Vec<u8>>>;

/// Load with `load`, then run `rounds` rounds in which each of `clients`
/// clients runs one transaction through its own coordinator; return the live
/// tables and how many transactions committed.
pub fn run_inline<C>(
    tables: Vec<TableSpec>,
    load: impl AsyncFnOnce(&mut Loader<InlineFabric>) -> Result<(), LoadError>,
    mut clients: Vec<C>,
    rounds: usize,
    run_one: impl AsyncFn(&mut C, &mut Coordinator<InlineFabric>) -> Result<bool, TxError>,
) -> (Live, u64) {
    let n_tables = tables.len() as u32;
    let store = StoreConfig::new(Mode::Pandora, 3, 2, tables);
    let layout = Arc::new(Layout::new(&store).expect("layout"));
    let cluster = InlineCluster::with_nodes(3, *layout.region_bytes.iter().max().unwrap(), 1);
    let fab = cluster.join(0).expect("a fresh compute-node id");
    block_on(async {
        let mut loader = Loader::new(&fab, layout.clone());
        load(&mut loader).await.expect("load");
        loader.finish().await.expect("load");
    });
    let node = ComputeNode::new(
        cluster.join(1).expect("a fresh compute-node id"),
        &store,
        layout.clone(),
        FailedIds::new(),
    );
    let mut coords: Vec<_> = (0..clients.len())
        .map(|i| node.coordinator(i as u16 + 1))
        .collect();
    let mut committed = 0;
    for _ in 0..rounds {
        for (c, coord) in clients.iter_mut().zip(coords.iter_mut()) {
            if block_on(run_one(c, coord)).expect("no faults") {
                committed += 1;
            }
        }
    }
    let checker = cluster.join(2).expect("a fresh compute-node id");
    let live = (0..n_tables)
        .map(|t| {
            block_on(snapshot(&checker, &layout, t))
                .expect("snapshot")
                .live()
        })
        .collect();
    (live, committed)
}
