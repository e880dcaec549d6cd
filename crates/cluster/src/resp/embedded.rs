//! `tandem serve --system pandora`: a small Pandora in this process (its
//! memory nodes in memory, one compute node, its coordinators) behind a
//! RESP port, for a user to point `redis-cli` or a client library at.
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
    pub coordinators: u16,
}

impl Default for Embedded {
    fn default() -> Self {
        Embedded {
            memory_nodes: 3,
            replicas: 2,
            keys: 100_000,
            slot_bytes: 256,
            coordinators: 16,
        }
    }
}

/// The store's one table.
const TABLE: tandem_dkvs::TableId = 0;
/// The compute node's id (the loader's is 0).
const COMPUTE: u16 = 1;

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
            "pandora (embedded: {} memory nodes in this process, {} copies of each key, {} coordinators; nothing survives the process)",
            self.memory_nodes, self.replicas, self.coordinators
        )
    }

    /// Build the store and serve `listener` until the process ends.
    pub fn serve(&self, listener: std::net::TcpListener, mut front: FrontConfig) -> Result<(), String> {
        let store = self.store();
        store.validate().map_err(|e| e.to_string())?;
        let layout = Arc::new(Layout::new(&store).map_err(|e| e.to_string())?);
        let size = *layout.region_bytes.iter().max().expect("a memory node");
        let cluster = InlineCluster::with_nodes(self.memory_nodes as usize, size, 0);
        let join = |n| cluster.join(n).map_err(|e| format!("{e:?}"));
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        front.description = self.describe();
        crate::runner::block_on_local(async move {
            let loader = Loader::new(&join(0)?, layout.clone());
            loader.finish().await.map_err(|e| format!("{e:?}"))?;
            let node = ComputeNode::new(join(COMPUTE)?, &store, layout, FailedIds::new());
            let coords = (0..self.coordinators).map(|i| node.coordinator(i + 1)).collect();
            let ks = Keyspace::new(TABLE, self.slot_bytes as usize, COMPUTE);
            let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            serve(listener, Rc::new(Front::new(front, ks, coords))).await;
            Ok(())
        })
    }
}
