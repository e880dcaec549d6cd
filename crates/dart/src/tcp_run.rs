//! One DART run against Tandem over TCP, with real memory servers
//! (docs/DESIGN.md §3, the tcp backend; §5). Compute nodes run in this process on a
//! tokio `LocalSet`, one coordinator per client; the memory servers come
//! fresh from a [`TcpServers`] factory for every run (the loader expects an
//! empty store), as processes (`tandem dart --fabric tcp`) or in-process
//! servers (tests). Real time is the wall clock of this process.
//!
//! No crashes here: `kill -9` of compute-server processes is
//! [`crate::proc_run`] (`--fabric tcp --crash-rate R`).

use std::any::Any;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::{BugSwitches, ComputeNode, FailedIds, Layout, Mode};
use tandem_fabric::tcp::TcpCluster;

use crate::board::Board;
use crate::client::{Client, ClientSpec};
use crate::report::RunReport;
use crate::suite::Suite;
use crate::tandem_store::{TandemStore, LITMUS_TABLE};

/// Starts `count` memory servers of `bytes` each; returns their cluster and
/// a guard that stops them when dropped.
pub type TcpServers =
    Arc<dyn Fn(usize, u64) -> Result<(TcpCluster, Box<dyn Any>), String> + Send + Sync>;

const LOG_SLOTS: u32 = 64;

#[derive(Clone, Debug)]
pub struct TcpRunConfig {
    pub mode: Mode,
    pub bugs: BugSwitches,
    pub suite: Arc<Suite>,
    pub seed: u64,
    pub compute_nodes: u16,
    pub clients_per_node: u16,
    pub txs_per_client: u64,
    pub assert_chance: f64,
    pub check_history: bool,
}

/// Memory nodes and replicas of a tcp run.
pub const MEMORY_NODES: u16 = 3;
const REPLICAS: u16 = 2;

pub fn run(cfg: &TcpRunConfig, servers: &TcpServers) -> Result<RunReport, String> {
    let clients = cfg.compute_nodes as u32 * cfg.clients_per_node as u32;
    let capacity = cfg
        .suite
        .key_count(cfg.txs_per_client * clients as u64)
        .max(1);
    let mut store =
        crate::proc_run::litmus_store(cfg.mode, MEMORY_NODES, REPLICAS, LOG_SLOTS, capacity);
    store.bugs = cfg.bugs;
    if clients + 2 >= LOG_SLOTS {
        return Err(format!("at most {} clients over tcp", LOG_SLOTS - 3));
    }
    let layout = Arc::new(Layout::new(&store)?);
    let region = *layout.region_bytes.iter().max().expect("memory nodes");
    let (cluster, _guard) = servers(MEMORY_NODES as usize, region)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let join = |node: u16| {
            let cluster = cluster.clone();
            async move {
                let keys = cluster
                    .register(node)
                    .await
                    .map_err(|e| format!("register compute node {node}: {e}"))?;
                cluster
                    .connect(node, &keys)
                    .await
                    .map_err(|e| format!("connect compute node {node}: {e}"))
            }
        };
        let fab = join(u16::MAX - 1).await?;
        let mut loader = Loader::new(&fab, layout.clone());
        for t in &cfg.suite.tests {
            for (k, v) in t.initial() {
                loader
                    .put(LITMUS_TABLE, k, &v.encode())
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        loader.finish().await.map_err(|e| e.to_string())?;
        let start = Instant::now();
        let clock: Rc<dyn Fn() -> u64> = Rc::new(move || start.elapsed().as_nanos() as u64);
        let (board, failed) = (Board::default(), FailedIds::new());
        let mut seeds = tandem_sim::Rng::new(cfg.seed ^ 0x7C9);
        let mut logs = Vec::new();
        let mut tasks = Vec::new();
        for cn in 0..cfg.compute_nodes {
            let node =
                ComputeNode::new(join(cn + 1).await?, &store, layout.clone(), failed.clone());
            for k in 0..cfg.clients_per_node {
                let id = cn as u32 * cfg.clients_per_node as u32 + k as u32;
                let mut session = TandemStore::new(node.coordinator(1 + id as u16));
                let spec = ClientSpec {
                    id,
                    seed: seeds.next_u64(),
                    assert_chance: cfg.assert_chance,
                    record: cfg.check_history,
                };
                let mut client = Client::new(spec, cfg.suite.clone(), board.clone(), clock.clone());
                logs.push(client.log());
                let n = cfg.txs_per_client;
                tasks.push(tokio::task::spawn_local(async move {
                    client.run(&mut session, n).await;
                    session.settle();
                }));
            }
        }
        for t in tasks {
            t.await.map_err(|e| format!("client task failed: {e}"))?;
        }
        let node = ComputeNode::new(
            join(u16::MAX).await?,
            &store,
            layout.clone(),
            failed.clone(),
        );
        let mut session = TandemStore::new(node.coordinator((LOG_SLOTS - 1) as u16));
        let spec = ClientSpec {
            id: clients,
            seed: cfg.seed,
            assert_chance: 1.0,
            record: cfg.check_history,
        };
        let mut client = Client::new(spec, cfg.suite.clone(), board.clone(), clock.clone());
        logs.push(client.log());
        let mut report = RunReport::default();
        if let Err(e) = client.final_check(&mut session, 20).await {
            report.violations.push(("final-check".into(), e));
        }
        report.absorb(&logs);
        if cfg.check_history {
            report.check_history(&cfg.suite);
        }
        Ok(report)
    })
}
