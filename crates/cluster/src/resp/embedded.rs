//! `tandem serve --system pandora`: a small Pandora in this process (its
//! memory nodes in memory; a compute node per serving thread, each with its
//! coordinators, the threads taking connections from one listener) behind a
//! RESP port, for a user to point `redis-cli` or a client library at.
//! Transactions of different threads run at once and conflict as any
//! Pandora compute nodes' do.
//! Nothing is durable past the process and no failure detector runs: the
//! deployment with both is `tandem pandora compute-server` over memory
//! servers.

use std::rc::Rc;
use std::sync::Arc;

use tandem_dkvs::loader::Loader;
use tandem_dkvs::{ComputeNode, FailedIds, Layout, Mode, StoreConfig, TableSpec};
use tandem_fabric::inline::InlineCluster;

use super::run::Keyspace;
use super::serve::{serve, Front, FrontConfig};

/// The embedded store's shape.
#[derive(Clone, Debug)]
pub struct Embedded {
    pub memory_nodes: u16,
    pub replicas: u16,
    /// Keys the store must hold.
    pub keys: u64,
    /// Bytes per slot: a key and its value together take up to this less 14.
    pub slot_bytes: u32,
    /// Coordinators per serving thread.
    pub coordinators: u16,
    /// Serving threads, each a compute node.
    pub threads: u16,
}

impl Default for Embedded {
    fn default() -> Self {
        Embedded {
            memory_nodes: 3,
            replicas: 2,
            keys: 100_000,
            slot_bytes: 256,
            coordinators: 16,
            threads: 2,
        }
    }
}

/// The store's one table.
const TABLE: tandem_dkvs::TableId = 0;

impl Embedded {
    fn store(&self) -> StoreConfig {
        let table = TableSpec {
            id: TABLE,
            name: "redis".into(),
            value_size: self.slot_bytes,
            capacity: self.keys,
        };
        StoreConfig::new(Mode::Pandora, self.memory_nodes, self.replicas, vec![table])
    }

    /// A description for `INFO`.
    pub fn describe(&self) -> String {
        format!(
            "pandora (embedded: {} memory nodes in this process, {} copies of each key, {} compute nodes of {} coordinators; nothing survives the process)",
            self.memory_nodes, self.replicas, self.threads, self.coordinators
        )
    }

    /// Build the store and serve `listener` until the process ends.
    pub fn serve(
        &self,
        listener: std::net::TcpListener,
        mut front: FrontConfig,
    ) -> Result<(), String> {
        let store = self.store();
        store.validate().map_err(|e| e.to_string())?;
        let layout = Arc::new(Layout::new(&store).map_err(|e| e.to_string())?);
        let size = *layout.region_bytes.iter().max().expect("a memory node");
        let cluster = InlineCluster::with_nodes(self.memory_nodes as usize, size, 0);
        let loader = Loader::new(&join(&cluster, 0)?, layout.clone());
        crate::runner::block_on_local(loader.finish()).map_err(|e| format!("{e:?}"))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        front.description = self.describe();
        let threads: Vec<_> = (0..self.threads.max(1))
            .map(|t| {
                let (me, cluster, store, layout) =
                    (self.clone(), cluster.clone(), store.clone(), layout.clone());
                let (listener, front) = (listener.try_clone(), front.clone());
                std::thread::spawn(move || -> Result<(), String> {
                    let listener = listener.map_err(|e| e.to_string())?;
                    let ks = Keyspace::new(TABLE, me.slot_bytes as usize, t + 1);
                    me.serve_thread(t, &cluster, &store, layout, listener, front, ks)
                })
            })
            .collect();
        for t in threads {
            t.join()
                .map_err(|_| "a serving thread panicked".to_string())??;
        }
        Ok(())
    }

    /// Thread `t`: compute node `t + 1`, its coordinators, its share of the clients.
    #[allow(clippy::too_many_arguments)]
    fn serve_thread(
        &self,
        t: u16,
        cluster: &InlineCluster,
        store: &StoreConfig,
        layout: Arc<Layout>,
        listener: std::net::TcpListener,
        front: FrontConfig,
        ks: Keyspace,
    ) -> Result<(), String> {
        let node = ComputeNode::new(join(cluster, t + 1)?, store, layout, FailedIds::new());
        let first = t * self.coordinators + 1;
        let coords = (first..first + self.coordinators)
            .map(|i| node.coordinator(i))
            .collect();
        crate::runner::block_on_local(async move {
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            serve(listener, Rc::new(Front::new(front, ks, coords))).await;
            Ok(())
        })
    }
}

fn join(cluster: &InlineCluster, node: u16) -> Result<tandem_fabric::inline::InlineFabric, String> {
    cluster.join(node).map_err(|e| format!("{e:?}"))
}
