//! The systems `tandem compare` measures Tandem against (issue 5; DESIGN.md
//! §6): PostgreSQL at SERIALIZABLE, Redis with WATCH/MULTI/EXEC, and etcd
//! with compare-and-swap `Txn`s over three Raft members, each a real server
//! started by `scripts/peers.sh`, each running Tandem's own workloads (same
//! keys, mix and client concurrency) and checked afterwards with the same
//! consistency check as Tandem.
//!
//! | module | what |
//! |---|---|
//! | `workload` | SmallBank / micro transactions as plans (read set, then writes), ledgers, the check |
//! | `system` | the `PeerSystem` trait: load, connect, inspect, durability |
//! | `postgres_peer`, `redis_peer`, `etcd_peer` | one peer each |
//! | `driver` | client threads, warm-up, measured interval, latency histogram |
//! | `compare` | Tandem plus the peers back to back, ratios, report |
//! | `kv`, `kv_driver` | etcd and Redis (with replicas) as plain key-value stores, driven by YCSB |
//! | `ddp_cluster`, `ddp_compare` | `tandem compare --system ddp`: five `tandem node` processes against them |

pub mod compare;
pub mod ddp_cluster;
pub mod ddp_compare;
pub mod driver;
pub mod etcd_peer;
pub mod kv;
pub mod kv_driver;
pub mod postgres_peer;
pub mod redis_peer;
pub mod system;
pub mod workload;
