//! Identifiers shared by the membership and its fleet of memory servers.

/// A compute node's id.
pub type NodeId = u16;
