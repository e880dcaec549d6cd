//! `tandem ddp manager --zookeeper`: the configuration manager's state in a
//! ZooKeeper znode, through the same writer as Pandora's membership
//! (`tandem_cluster::zk`): each save is a compare-and-set on the znode's
//! version, so a second manager writing it makes the first one's next save
//! fail, and that manager stops.

use std::time::Duration;

use tandem_cluster::zk::ZkState;
use tandem_net::manager_store::{ManagerState, ManagerStore};

/// What the znode's record names as its owner (a Pandora membership state
/// at the same path is refused).
const OWNER: &str = "tandem ddp manager";

pub struct ZkManagerStore {
    zk: ZkState<ManagerState>,
    loaded: bool,
}

impl ZkManagerStore {
    pub fn open(hosts: &str, path: &str) -> Result<ZkManagerStore, String> {
        let zk = ZkState::open(hosts, path, OWNER, Duration::from_secs(4), None)?;
        Ok(ZkManagerStore { zk, loaded: false })
    }
}

impl ManagerStore for ZkManagerStore {
    /// What the znode held when opened (the manager loads once, at start).
    fn load(&mut self) -> Result<Option<ManagerState>, String> {
        if std::mem::replace(&mut self.loaded, true) {
            return Err("the ZooKeeper state is read once, at start".into());
        }
        Ok(self.zk.restored().cloned())
    }

    fn save(&mut self, state: &ManagerState) -> Result<(), String> {
        self.zk.save_blocking(state)
    }

    fn describe(&self) -> String {
        format!("ZooKeeper {}", self.zk.describe())
    }
}
