//! DDP (Kokolis, Psistakis, Reidys, Huang, Torrellas, *Distributed Data
//! Persistency*, MICRO 2021; cited as "DDP" below): leaderless replication for the 25
//! ⟨consistency, persistency⟩ models, as one sans-IO engine on
//! `tandem-net` (docs/DESIGN.md §7.2).
//!
//! - [`model`]: the models and the rules each fixes (docs/DDP.md's tables).
//! - [`node`]: the engine ([`DdpNode`]), for two families of protocols:
//!   - INV/ACK/VAL (Lin and RE consistency):
//!     `write.rs`;
//!   - UPD (Causal and Eventual consistency): `update.rs`
//!     (client side, and the decisions on docs/DDP.md's open points 5–8, 12,
//!     22, 23), `upd_apply.rs` (receipt, causal buffering, apply, persist),
//!     `upd_sync.rs` (anti-entropy, catch-up), [`vector`] (update ids and
//!     dependency vectors);
//!
//!   - transactions (Transactional consistency): `trans.rs`
//!     (client side, and the decisions on docs/DDP.md's open point 9),
//!     `trans_conflict.rs` (conflicts, squashes), `trans_commit.rs` (votes,
//!     decision, delivery, persistence), `trans_follow.rs` (members,
//!     retries, failures);
//!
//!   and for all `scope.rs` (scopes) and `catchup.rs` (restart, full-copy
//!   catch-up, recovery from NVM).
//! - [`ycsb_session`]: what a YCSB client session asks next (scopes and
//!   transactions as the model needs), and [`load`]: such sessions over TCP.
//! - [`simcheck`]: seeded simulations with faults and crashes, checking
//!   every promise of a model (docs/DDP.md, "Check labels").
//!
//! Implemented: all 25 models.

pub mod catchup;
pub mod explore;
pub(crate) use tandem_net::fast_hash;
pub mod heal;
mod heal_lazy;
mod heal_noshadow;
pub mod heal_rr;
pub mod model;
pub mod node;
mod scope;
pub mod simcheck;
mod trans;
mod trans_commit;
mod trans_conflict;
mod trans_follow;
mod trans_idle;
mod trans_stats;
pub mod types;
mod upd_apply;
mod upd_lost;
mod upd_sync;
mod update;
pub mod vector;
mod write;
pub mod ycsb_session;

pub use catchup::DdpFactory;
pub use heal::{CatchUpResp, HealOpts};
pub use model::{Consistency, Model, Persistency, Rules};
pub use node::{Bugs, DdpNode, Params};
pub use trans_stats::{Squash, TransStats};
pub use types::{
    Key, Msg, Op, Record, Reply, ScopeId, Ts, TxAck, TxHdr, TxId, TxPhase, Upd, Value, Version,
    Vote,
};
pub use vector::{Origin, UpdId, Vector};
