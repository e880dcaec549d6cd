//! The message-passing runtime shared by DDP, HEAL, Kite and ZAB
//! (docs/DESIGN.md §7.1).
//!
//! - [`protocol`]: the sans-IO [`Protocol`] trait. A node is a value with
//!   `step(now, input, out)`; durability is a [`Command::Persist`] whose
//!   [`Input::PersistDone`] gates whatever depends on it.
//! - [`sim`]: the deterministic simulated network and NVM, on `crates/sim`.
//!
//! Papers are cited by short name and section: "DDP" is Kokolis et al.,
//! *Distributed Data Persistency*, MICRO 2021; "HEAL" is Psistakis et al.,
//! *HEAL: Online Incremental Recovery for Leaderless Distributed Systems
//! Across Persistency Models*, arXiv:2602.08257, 2026; "Hermes" is Katsarakis
//! et al., ASPLOS 2020 (docs/DESIGN.md, "Sources").

pub mod client;
pub mod conn;
pub mod echo;
pub mod fast_hash;
pub mod host;
mod host_io;
pub mod links;
pub mod manager;
pub mod manager_store;
pub mod nvm_file;
pub mod ports;
pub mod procstat;
pub mod protocol;
mod shake;
pub mod sim;
mod syncer;
pub mod wire;

pub use protocol::{
    land, Command, Config, Durable, Input, NodeFactory, NodeId, Nvm, Protocol, SessionId, Token,
    NO_ANSWER,
};
pub use sim::{Harness, NetStats, SimNet, SimNetConfig, CLIENT_RETRY_NS, PAPER_CORES};
