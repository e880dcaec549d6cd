//! Release persistency (RP, thesis ch. 3; digest `../shared/specs/lrp.md`)
//! and the models it is measured against. So far: the axiomatic side
//! (spec §1.3): the persist order a recorded execution implies under each
//! model, whether a set of surviving writes is a legal crash image (with a
//! minimal witness when it is not), and every legal image of a small
//! program. The operational machine, the LFDs and the checkers of DESIGN
//! §7.7 are not built yet.

pub mod axiom;
pub mod trace;

pub use axiom::{legal_images, persist_order, Model, PersistOrder, Witness};
pub use trace::{Event, EventId, Kind, Sync, Trace};
