//! Cluster, table and protocol configuration (docs/DESIGN.md §4.1–4.4).

use std::fmt;
use std::str::FromStr;

/// Which transaction protocol the coordinators run (docs/DESIGN.md §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Owner-tagged locks (PILL), one log write after all locks are held.
    Pandora,
    /// FORD: owner-less locks, per-object undo records to every replica during execution.
    Ford,
    /// FORD plus a lock-log write before every lock CAS (one extra round trip).
    Traditional,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Pandora, Mode::Ford, Mode::Traditional];
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pandora => "pandora",
            Mode::Ford => "ford",
            Mode::Traditional => "traditional",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pandora" => Ok(Mode::Pandora),
            "ford" => Ok(Mode::Ford),
            "traditional" => Ok(Mode::Traditional),
            other => Err(format!(
                "unknown store mode '{other}' (expected pandora, ford or traditional)"
            )),
        }
    }
}

pub type TableId = u32;

/// What a transaction does when it meets a lock held by another coordinator
/// (Pandora paper §6.4, "sensitivity to stalls"; `--on-stray`). Until recovery
/// has published a failed coordinator's ids, its stray locks look live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStray {
    /// Abort at once (the default, as FORD and Pandora do).
    Abort,
    /// Re-try the read or the lock CAS, up to `max_retries` round trips,
    /// until the lock is released or stealable; then abort.
    Stall { max_retries: u32 },
}

impl FromStr for OnStray {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "abort" => Ok(OnStray::Abort),
            "stall" => Ok(OnStray::Stall {
                max_retries: 100_000,
            }),
            other => Err(format!(
                "unknown --on-stray '{other}' (expected abort or stall)"
            )),
        }
    }
}

/// A table: u64 keys, fixed-size values, hash-partitioned.
#[derive(Clone, Debug)]
pub struct TableSpec {
    pub id: TableId,
    pub name: String,
    pub value_size: u32,
    /// Keys the table must hold; slots are provisioned with head-room for probing.
    pub capacity: u64,
}

/// Test-only switches that re-inject FORD's bugs (docs/DESIGN.md §4.7, the Pandora paper Table 1).
/// All off by default; they exist so tests can prove they catch each bug.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BugSwitches {
    /// C1 "complicit abort": abort releases every write-set lock, acquired or not.
    pub complicit_abort: bool,
    /// C1 "covert locks": validation compares versions only, ignoring the lock bit.
    pub covert_locks: bool,
    /// C1 "relaxed locks": validation is posted before the pending lock CASes complete.
    pub relaxed_locks: bool,
    /// C2 "missing actions" (ford/traditional): inserts are not undo-logged.
    pub missing_insert_undo: bool,
    /// C2 "logging without locking" (ford/traditional): a write to an object
    /// read earlier posts its undo entry with the pre-lock image, alongside
    /// the lock CAS instead of after it.
    pub logging_without_locking: bool,
    /// Not FORD's (pandora): a coordinator that stalled [`LEASE_STALLS`]
    /// round trips on a lock (`OnStray::Stall`) presumes its owner dead, as
    /// a lock lease would: it reads through and steals that lock word from
    /// then on. Pandora treats only locks of failed ids so (PILL); with a
    /// quick recovery the lock is gone before the lease ends.
    pub lock_lease: bool,
    /// Not FORD's (slot reclamation): empty a tombstone whose successor in
    /// probe order is not empty. That cuts the probe path of every key
    /// stored behind it: a reader then misses a live key, an insert makes a
    /// second copy of it.
    pub reclaim_mid_run: bool,
    /// Not FORD's (slot reclamation): an absent key guards only the empty
    /// slot that ends its probe, not the slot before it. A reclamation of
    /// that slot, then an insert of the key there, go unseen by validation.
    pub unguarded_phantoms: bool,
    /// Not FORD's (real links): acknowledge a commit whose write failed at
    /// a replica the membership has not declared failed, taking it for
    /// dead. A replica behind a reset link or a partition is alive: it
    /// misses the write for good, and recovery may roll the commit back.
    pub ack_missed_replica: bool,
}

/// Round trips of stalling after which the lock-lease bug steals a lock.
pub const LEASE_STALLS: u32 = 128;

impl BugSwitches {
    pub const NAMES: [&'static str; 9] = [
        "complicit-abort",
        "covert-locks",
        "relaxed-locks",
        "missing-insert-undo",
        "logging-without-locking",
        "lock-lease",
        "reclaim-mid-run",
        "unguarded-phantoms",
        "ack-missed-replica",
    ];

    pub fn parse(name: &str) -> Result<BugSwitches, String> {
        let mut b = BugSwitches::default();
        match name {
            "complicit-abort" => b.complicit_abort = true,
            "covert-locks" => b.covert_locks = true,
            "relaxed-locks" => b.relaxed_locks = true,
            "missing-insert-undo" => b.missing_insert_undo = true,
            "logging-without-locking" => b.logging_without_locking = true,
            "lock-lease" => b.lock_lease = true,
            "reclaim-mid-run" => b.reclaim_mid_run = true,
            "unguarded-phantoms" => b.unguarded_phantoms = true,
            "ack-missed-replica" => b.ack_missed_replica = true,
            other => {
                return Err(format!(
                    "unknown bug '{other}' (known: {})",
                    Self::NAMES.join(", ")
                ))
            }
        }
        Ok(b)
    }

    /// Both sets of switches.
    pub fn union(self, o: BugSwitches) -> BugSwitches {
        BugSwitches {
            complicit_abort: self.complicit_abort || o.complicit_abort,
            covert_locks: self.covert_locks || o.covert_locks,
            relaxed_locks: self.relaxed_locks || o.relaxed_locks,
            missing_insert_undo: self.missing_insert_undo || o.missing_insert_undo,
            logging_without_locking: self.logging_without_locking || o.logging_without_locking,
            lock_lease: self.lock_lease || o.lock_lease,
            reclaim_mid_run: self.reclaim_mid_run || o.reclaim_mid_run,
            unguarded_phantoms: self.unguarded_phantoms || o.unguarded_phantoms,
            ack_missed_replica: self.ack_missed_replica || o.ack_missed_replica,
        }
    }

    /// The names of the switches that are on.
    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.complicit_abort,
            self.covert_locks,
            self.relaxed_locks,
            self.missing_insert_undo,
            self.logging_without_locking,
            self.lock_lease,
            self.reclaim_mid_run,
            self.unguarded_phantoms,
            self.ack_missed_replica,
        ];
        Self::NAMES
            .iter()
            .zip(on)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect()
    }

    pub fn any(&self) -> bool {
        *self != BugSwitches::default()
    }
}

/// Everything a compute node needs to compute the same layout as every other.
/// Copies of each partition at most (the commit path tracks live replicas
/// in a 64-bit mask).
pub const MAX_REPLICAS: u16 = 64;

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub mode: Mode,
    pub memory_nodes: u16,
    /// Copies of each partition (f+1).
    pub replicas: u16,
    /// Partitions per table.
    pub partitions_per_table: u32,
    pub tables: Vec<TableSpec>,
    /// Bytes of log per coordinator on each log node (default 32 KiB, the Pandora paper §3.2.2).
    pub log_slot_bytes: u64,
    /// Log slots per memory node; coordinator `c` uses slot `c % log_slots`.
    pub log_slots: u32,
    pub on_stray: OnStray,
    /// Slot reclamation (on by default): inserts reuse other keys'
    /// tombstones, and a tombstone becomes an empty slot again once no key's
    /// probe path needs it. Off, every key ever inserted keeps a slot for good.
    pub reclaim: bool,
    pub bugs: BugSwitches,
    /// The coordinators' invariant assertions (`coordinator/invariants.rs`):
    /// `None`, the default, runs them unless `bugs` plants a bug, whose
    /// tests show that a checker (the simulation's checks, DART) catches it;
    /// `Some(on)` decides.
    pub assertions: Option<bool>,
}

impl StoreConfig {
    pub fn new(mode: Mode, memory_nodes: u16, replicas: u16, tables: Vec<TableSpec>) -> Self {
        StoreConfig {
            mode,
            memory_nodes,
            replicas,
            partitions_per_table: 16,
            tables,
            log_slot_bytes: 32 * 1024,
            log_slots: 1024,
            on_stray: OnStray::Abort,
            reclaim: true,
            bugs: BugSwitches::default(),
            assertions: None,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.memory_nodes == 0 {
            return Err("need at least one memory node".into());
        }
        if self.replicas == 0 || self.replicas > self.memory_nodes {
            return Err(format!(
                "replicas must be between 1 and the number of memory nodes ({}), got {}",
                self.memory_nodes, self.replicas
            ));
        }
        if self.replicas > MAX_REPLICAS {
            return Err(format!(
                "replicas must be at most {MAX_REPLICAS}, got {}",
                self.replicas
            ));
        }
        if self.partitions_per_table == 0 {
            return Err("partitions_per_table must be positive".into());
        }
        if self.log_slot_bytes < 4096 || self.log_slot_bytes % 8 != 0 {
            return Err("log_slot_bytes must be a multiple of 8 and at least 4096".into());
        }
        if self.log_slots == 0 {
            return Err("log_slots must be positive".into());
        }
        for (i, t) in self.tables.iter().enumerate() {
            if t.id as usize != i {
                return Err(format!(
                    "table '{}' has id {} but is listed at position {i}",
                    t.name, t.id
                ));
            }
            if t.value_size == 0 || t.value_size > 4096 {
                return Err(format!(
                    "table '{}': value size must be 1..=4096 bytes",
                    t.name
                ));
            }
            if t.capacity == 0 {
                return Err(format!("table '{}': capacity must be positive", t.name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_beyond_the_live_mask_are_refused_with_a_clear_error() {
        let tables = vec![TableSpec {
            id: 0,
            name: "t".into(),
            value_size: 8,
            capacity: 64,
        }];
        let mut c = StoreConfig::new(Mode::Pandora, 70, MAX_REPLICAS, tables);
        assert_eq!(c.validate(), Ok(()));
        c.replicas = MAX_REPLICAS + 1;
        let e = c.validate().unwrap_err();
        assert!(e.contains("at most 64"), "{e}");
    }
}
