//! DDP (`ddp-minos.txt`): leaderless replication for the 25
//! ⟨consistency, persistency⟩ models, as one sans-IO engine on
//! `tandem-net` (DESIGN.md §7.2).
//!
//! - [`model`]: the models and the rules each fixes (spec §7.4, §9.0).
//! - [`node`]: the engine ([`DdpNode`]); `write.rs` the INV/ACK/VAL path,
//!   `scope.rs` scopes, `catchup.rs` restart and full-copy catch-up.
//!
//! Implemented today: Lin and RE consistency with all five persistency
//! models (spec §9.0 rows 1–10). Trans, Causal and Eventual consistency
//! are not built yet; [`Model::implemented`] says so and the CLI refuses them.

pub mod catchup;
pub mod explore;
pub mod load;
pub mod model;
pub mod simcheck;
pub mod node;
mod scope;
pub mod types;
mod write;

pub use catchup::DdpFactory;
pub use model::{Consistency, Model, Persistency, Rules};
pub use node::{Bugs, DdpNode, Params};
pub use types::{Key, Msg, Op, Record, Reply, ScopeId, Ts, Value, Version};
