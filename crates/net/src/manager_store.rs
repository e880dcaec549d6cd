//! Where the configuration manager keeps its state, so that a restarted
//! manager never announces an epoch it announced before with other
//! members. Nodes take only configurations newer than theirs: a manager
//! that started over at epoch 1 would be ignored (the others would wait
//! on a dead node forever), and once its count passed theirs, one epoch
//! number would name two memberships.
//!
//! The manager saves its state (epoch, members, each node's boot id)
//! before it announces anything that depends on it, and stops if a save
//! fails. Two stores: a file (`--state`, written atomically and fsync'd)
//! and a ZooKeeper znode (`--zookeeper`, in the `tandem` CLI).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::NodeId;

/// What a restarted manager needs to go on where it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerState {
    pub epoch: u64,
    pub members: Vec<NodeId>,
    /// The boot id each node last linked with: a node that restarted while
    /// the manager was down is still seen as restarted.
    pub boots: BTreeMap<NodeId, u64>,
    /// The epoch in which each member was last added back (see
    /// `Config::joined`).
    #[serde(default)]
    pub joined: BTreeMap<NodeId, u64>,
}

pub trait ManagerStore: Send {
    /// The state saved last, if any.
    fn load(&mut self) -> Result<Option<ManagerState>, String>;
    /// Returns once the state is durable.
    fn save(&mut self, state: &ManagerState) -> Result<(), String>;
    fn describe(&self) -> String;
}

/// The state in a JSON file, replaced atomically (write a temporary file,
/// fsync it, rename it over the old one, fsync the directory).
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub fn new(path: &Path) -> FileStore {
        FileStore {
            path: path.to_path_buf(),
        }
    }

    fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()
    }
}

impl ManagerStore for FileStore {
    fn load(&mut self) -> Result<Option<ManagerState>, String> {
        match std::fs::read(&self.path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| format!("{}: not a manager state: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
        }
    }

    fn save(&mut self, state: &ManagerState) -> Result<(), String> {
        let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
        self.write(&bytes)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_store_gives_back_what_it_saved_and_refuses_garbage() {
        let dir = std::env::temp_dir().join(format!("tandem-mstore-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.state");
        let mut s = FileStore::new(&path);
        assert_eq!(s.load().unwrap(), None);
        let st = ManagerState {
            epoch: 7,
            members: vec![0, 2],
            boots: [(0, 11), (2, 12)].into_iter().collect(),
            joined: [(2, 5)].into_iter().collect(),
        };
        s.save(&st).unwrap();
        assert_eq!(FileStore::new(&path).load().unwrap(), Some(st));
        std::fs::write(&path, b"epoch 7").unwrap();
        let e = FileStore::new(&path).load().unwrap_err();
        assert!(e.contains("not a manager state"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
