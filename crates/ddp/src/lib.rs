//! DDP (Kokolis, Psistakis, Reidys, Huang, Torrellas, *Distributed Data
//! Persistency*, MICRO 2021; cited as "DDP" below): leaderless replication for the 25
//! ⟨consistency, persistency⟩ models, as one sans-IO engine on
//! `tandem-net` (docs/DESIGN.md §7.2).
//!
//! - [`model`]: the models and the rules each fixes (docs/DDP.md's tables).
//! - [`node`]: the engine ([`DdpNode`]), for two families of protocols:
//!   - INV/ACK/VAL (Lin and RE consistency): `inv`;
//!   - UPD (Causal and Eventual consistency): `upd/mod.rs`
//!     (client side, and the decisions on docs/DDP.md's open points 5–8, 12,
//!     22, 23), `upd/apply.rs` (receipt, causal buffering, apply, persist),
//!     `upd/sync.rs` (anti-entropy, catch-up), [`vector`] (update ids and
//!     dependency vectors);
//!
//!   - transactions (Transactional consistency): `trans/mod.rs`
//!     (client side, and the decisions on docs/DDP.md's open point 9),
//!     `trans/conflict.rs` (conflicts, squashes), `trans/commit.rs` (votes,
//!     decision, delivery, persistence), `trans/follow.rs` (members,
//!     retries, failures);
//!
//!   - HEAL's online recovery of a crashed node: [`heal`] (the live nodes
//!     and the Buddy in `heal/mod.rs`, the recovering node in
//!     `heal/recovering.rs`, their state in `heal/state.rs`);
//!
//!   and for all `scope.rs` (scopes) and `catchup.rs` (restart, full-copy
//!   catch-up, recovery from NVM). Each family keeps its state types in a
//!   `state.rs` that `node.rs` imports, and its behaviour (`impl DdpNode`)
//!   in the files beside it, so no two files import each other.
//! - [`ycsb_session`]: what a YCSB client session asks next (scopes and
//!   transactions as the model needs); `tandem_ddp_lab::load` runs such
//!   sessions over TCP.
//! - `invariants.rs`: what the handlers assert before and after each
//!   state transition a checker relies on (`Params::assertions`).
//! - [`simcheck`]: seeded simulations with faults and crashes, checking
//!   every promise of a model (docs/DDP.md, "Check labels").
//!
//! Implemented: all 25 models.

pub mod catchup;
pub mod explore;
pub(crate) use tandem_net::fast_hash;
pub mod heal;
mod inv;
mod invariants;
pub mod model;
pub mod node;
mod scope;
pub mod simcheck;
mod trans;
pub mod types;
pub mod upd;
pub mod ycsb_session;

pub use catchup::DdpFactory;
pub use heal::state::HealOpts;
pub use model::{Consistency, Model, Persistency, Rules};
pub use node::{Bugs, DdpNode, Params, ReadCount};
pub use trans::state::{Squash, TransStats};
pub use types::{
    CatchUpResp, Key, Msg, Op, Record, Reply, ScopeId, Ts, TxAck, TxHdr, TxId, TxPhase, Upd, Value,
    Version, Vote,
};
pub use upd::vector;
pub use upd::vector::{Origin, UpdId, Vector};
