//! Clients of the foreign stores Tandem is measured against (docs/DESIGN.md
//! §6), used by every lab: PostgreSQL at SERIALIZABLE, Redis with WATCH/MULTI/EXEC, and etcd
//! with compare-and-swap `Txn`s over three Raft members, each a real server
//! started by `scripts/peers.sh`, each running Tandem's own workloads (same
//! keys, mix and client concurrency) and checked afterwards with the same
//! consistency check as Tandem.
//!
//! One client per store: PostgreSQL through the `postgres` crate, Redis
//! through the `redis` crate, etcd through [`etcd::Etcd`], ZooKeeper through
//! [`ensemble::zookeeper::ZkWriter`]. (Tandem's own membership service keeps
//! its configuration in ZooKeeper with a client of its own in `cluster`: that
//! is Tandem as a ZooKeeper user, not a comparison.)
//!
//! | module | what |
//! |---|---|
//! | `workload` | SmallBank / micro transactions as plans (read set, then writes), ledgers, the check |
//! | `system` | the `PeerSystem` trait: load, connect, inspect, durability |
//! | `etcd` | the etcd client all of them use (v3 JSON gateway) |
//! | `postgres_peer`, `redis_peer`, `etcd_peer` | one peer each |
//! | `driver` | client threads, warm-up, measured interval, latency histogram |
//! | `kv`, `kv_driver` | etcd and Redis (with replicas) as plain key-value stores, driven by YCSB |
//! | `ensemble` | ZooKeeper and etcd ensembles whose members are killed and restarted, and their write load |

pub mod driver;
pub mod ensemble;
pub mod etcd;
pub mod etcd_peer;
pub mod kv;
pub mod kv_driver;
pub mod postgres_peer;
pub mod redis_peer;
pub mod system;
pub mod workload;
