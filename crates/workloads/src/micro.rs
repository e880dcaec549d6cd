//! The micro-benchmark of FORD and Pandora (Pandora §4): 8-byte keys,
//! 40-byte values, a write ratio, and keys chosen uniformly, from a hot set,
//! or by a Zipf distribution.
//!
//! Each value carries a per-key write counter. Every write is a
//! read-modify-write that increments it, so the post-run check is exact: the
//! counters sum to the number of acknowledged writes (a lost or phantom update
//! shows up as a difference).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use tandem_dkvs::loader::{LoadError, Loader};
use tandem_dkvs::{Coordinator, TableId, TableSpec, TxError};
use tandem_fabric::Fabric;
use tandem_sim::Rng;

use crate::Zipf;

pub const TABLE: TableId = 0;
pub const VALUE_BYTES: u32 = 40;

#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform,
    /// `hot_fraction` of accesses go to the first `hot_keys` keys.
    Hot {
        hot_keys: u64,
        hot_fraction: f64,
    },
    Zipf(Zipf),
}

#[derive(Clone, Debug)]
pub struct MicroSpec {
    pub keys: u64,
    /// Fraction of accessed objects that are written (0.0..=1.0).
    pub write_ratio: f64,
    /// Objects accessed per transaction (distinct keys).
    pub ops_per_tx: u32,
    pub chooser: KeyChooser,
}

impl Default for MicroSpec {
    fn default() -> Self {
        MicroSpec {
            keys: 100_000,
            write_ratio: 0.5,
            ops_per_tx: 2,
            chooser: KeyChooser::Uniform,
        }
    }
}

pub fn encode_value(key: u64, counter: u64) -> [u8; VALUE_BYTES as usize] {
    let mut v = [0u8; VALUE_BYTES as usize];
    v[..8].copy_from_slice(&counter.to_le_bytes());
    v[8..16].copy_from_slice(&key.to_le_bytes());
    v
}

pub fn decode_counter(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("micro value carries a counter"))
}

impl MicroSpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.keys < self.ops_per_tx as u64 {
            return Err(format!("micro needs at least {} keys", self.ops_per_tx));
        }
        if !(0.0..=1.0).contains(&self.write_ratio) {
            return Err(format!(
                "write ratio must be in [0, 1], got {}",
                self.write_ratio
            ));
        }
        if self.ops_per_tx == 0 {
            return Err("ops per transaction must be positive".into());
        }
        if let KeyChooser::Hot {
            hot_keys,
            hot_fraction,
        } = self.chooser
        {
            if hot_keys == 0 || hot_keys > self.keys || !(0.0..=1.0).contains(&hot_fraction) {
                return Err("hot set must be 1..=keys keys with a fraction in [0, 1]".into());
            }
        }
        Ok(())
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec {
            id: TABLE,
            name: "micro".into(),
            value_size: VALUE_BYTES,
            capacity: self.keys,
        }]
    }

    pub async fn load<F: Fabric>(&self, loader: &mut Loader<F>) -> Result<(), LoadError> {
        for k in 0..self.keys {
            loader.put(TABLE, k, &encode_value(k, 0)).await?;
        }
        Ok(())
    }

    fn pick(&self, rng: &mut Rng) -> u64 {
        match &self.chooser {
            KeyChooser::Uniform => rng.below(self.keys),
            KeyChooser::Hot {
                hot_keys,
                hot_fraction,
            } => {
                if rng.chance(*hot_fraction) {
                    rng.below(*hot_keys)
                } else {
                    rng.below(self.keys)
                }
            }
            KeyChooser::Zipf(z) => z.sample(rng),
        }
    }
}

/// What a micro client saw acknowledged.
#[derive(Clone, Debug, Default)]
pub struct MicroLedger {
    /// Writes of acknowledged commits.
    pub writes_committed: u64,
    /// Writes of the transaction whose commit is under way.
    pub pending: u64,
    /// Writes of transactions whose outcome is unknown (crash, lost access).
    pub in_doubt: u64,
}

impl MicroLedger {
    pub fn merge(&mut self, o: &MicroLedger) {
        self.writes_committed += o.writes_committed;
        // A commit that never returned is in doubt.
        self.in_doubt += o.in_doubt + o.pending;
    }
}

/// A micro client: one per coordinator.
pub struct MicroClient {
    spec: MicroSpec,
    rng: Rng,
    keys: Vec<u64>,
    /// Which of `keys` this transaction writes (kept for its capacity).
    writes: Vec<bool>,
    /// Shared so a harness can read it after a crash dropped the client's task.
    pub ledger: Rc<RefCell<MicroLedger>>,
}

impl MicroClient {
    pub fn new(spec: MicroSpec, seed: u64) -> Self {
        MicroClient {
            spec,
            rng: Rng::new(seed),
            keys: Vec::new(),
            writes: Vec::new(),
            ledger: Rc::default(),
        }
    }

    /// Run one transaction. `Ok(true)` committed, `Ok(false)` aborted.
    pub async fn run_one<F: Fabric>(
        &mut self,
        coord: &mut Coordinator<F>,
    ) -> Result<bool, TxError> {
        self.keys.clear();
        while self.keys.len() < self.spec.ops_per_tx as usize {
            let k = self.spec.pick(&mut self.rng);
            if !self.keys.contains(&k) {
                self.keys.push(k);
            }
        }
        self.writes.clear();
        for _ in 0..self.keys.len() {
            self.writes.push(self.rng.chance(self.spec.write_ratio));
        }
        let mut tx = coord.begin();
        let mut n_writes = 0;
        for (&k, &write) in self.keys.iter().zip(&self.writes) {
            let r = if write {
                match tx.read_for_update_ref(TABLE, k).await {
                    Ok(v) => {
                        n_writes += 1;
                        let v = encode_value(k, decode_counter(v) + 1);
                        tx.write(TABLE, k, &v).await
                    }
                    Err(e) => Err(e),
                }
            } else {
                tx.read_ref(TABLE, k).await.map(|_| ())
            };
            match r {
                Ok(()) => {}
                Err(TxError::Aborted(_)) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        self.ledger.borrow_mut().pending = n_writes;
        let r = tx.commit().await;
        let mut l = self.ledger.borrow_mut();
        let pending = std::mem::take(&mut l.pending);
        match r {
            Ok(()) => {
                l.writes_committed += pending;
                Ok(true)
            }
            Err(TxError::Aborted(_)) => Ok(false),
            Err(e) => {
                l.in_doubt += pending;
                Err(e)
            }
        }
    }
}

/// Post-run check: counters sum to the acknowledged writes, plus at most the
/// in-doubt ones (never assumed absent, never assumed present); every key present.
pub fn verify(
    spec: &MicroSpec,
    live: &BTreeMap<u64, Vec<u8>>,
    ledger: &MicroLedger,
) -> Vec<String> {
    let mut v = Vec::new();
    if live.len() as u64 != spec.keys {
        v.push(format!("{} keys live, expected {}", live.len(), spec.keys));
    }
    let sum: u64 = live.values().map(|b| decode_counter(b)).sum();
    let (lo, hi) = (
        ledger.writes_committed,
        ledger.writes_committed + ledger.in_doubt + ledger.pending,
    );
    if sum < lo || sum > hi {
        v.push(format!(
            "write counters sum to {sum}, but acknowledged writes allow {lo}..={hi}"
        ));
    }
    v
}
