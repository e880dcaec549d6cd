//! Release persistency (RP) and the models and mechanisms it is measured
//! against, after ch. 3 of M. Dananjaya, *TANDEM: Taming Failures in
//! Next-Generation Datacenters with Emerging Memory*, PhD thesis, University
//! of Edinburgh, 2023 (cited below as "thesis"; its conference version is
//! Dananjaya, Gavrielatos, Joshi, Nagarajan, *Lazy Release Persistency*,
//! ASPLOS 2020). docs/LRP.md has the decisions the thesis leaves open,
//! numbered as comments cite them ("decision N"):
//! - `axiom`, `cut`: the axiomatic side (thesis §3.4.1): persist order
//!   under RP, ARP, BEP and strict persistency, legal crash images and witnesses;
//! - `machine`, `policy`, `lrp_policy`, `sim`: the operational machine
//!   with NOP, Eager, SB, BB, ARP and LRP (thesis §3.5, §3.6.2), and the seeded
//!   scheduler;
//! - `lfd`: the log-free data structures, written once against [`PMem`];
//! - `check`: the three-level crash checker (docs/LRP.md, "Checking");
//! - `bench`: the Synchrobench-style cost measurement (thesis §3.6).

pub mod axiom;
pub mod bench;
pub mod check;
pub mod cut;
pub mod experiment;
pub mod lfd;
pub mod litmus;
pub mod lrp_policy;
pub mod machine;
pub mod pmem;
pub mod policy;
pub mod sim;
pub mod trace;

pub use axiom::{legal_images, persist_order, Model, PersistOrder, Witness};
pub use pmem::PMem;
pub use trace::{Event, EventId, Kind, Sync, Trace};

/// The persistency mechanisms (thesis §3.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    Nop,
    Sb,
    Bb,
    Arp,
    Lrp,
    Eager,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 6] = [
        PolicyKind::Nop,
        PolicyKind::Sb,
        PolicyKind::Bb,
        PolicyKind::Arp,
        PolicyKind::Lrp,
        PolicyKind::Eager,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Nop => "nop",
            PolicyKind::Sb => "sb",
            PolicyKind::Bb => "bb",
            PolicyKind::Arp => "arp",
            PolicyKind::Lrp => "lrp",
            PolicyKind::Eager => "eager",
        }
    }

    pub fn parse(s: &str) -> Result<PolicyKind, String> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown policy {s:?}; one of nop, sb, bb, arp, lrp, eager"))
    }

    /// It enforces RP (ARP and NOP do not).
    pub fn enforces_rp(self) -> bool {
        !matches!(self, PolicyKind::Nop | PolicyKind::Arp)
    }
}

/// Deliberate bugs: M1–M9 and the coalescing of litmus program 6 (`litmus`) in LRP's
/// mechanism, and four in the
/// data structures. The checker must catch each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Mutant {
    /// M1: the engine persists released lines without waiting for the only-written ones.
    ReleasesFirst,
    /// M2: released lines persisted out of epoch order.
    ReleaseOrder,
    /// M3: a downgrade does not wait for the release's own ack (no I2b).
    DowngradeNoWait,
    /// M4: the directory does not block requests while a release persists (no I4).
    NoDirectoryBlock,
    /// M5: an acquire-RMW does not wait for its write (no I3).
    NoI3,
    /// M6: epoch-id wraps around without the flush.
    EpochWrap,
    /// M7: a full RET drops its oldest release instead of persisting it.
    RetOverflow,
    /// M8: the persist engine's scan compares min-epoch the wrong way.
    ScanCompare,
    /// M9: a plain write to a clean line does not set min-epoch.
    NoMinEpoch,
    /// Litmus 6: a release to a dirty line coalesces into it instead of persisting it first.
    CoalesceRelease,
    /// List insert links with a plain CAS instead of a release.
    ListRelaxedLink,
    /// Queue enqueue links with a plain CAS.
    QueueRelaxedLink,
    /// BST insert publishes the new internal node before its children are written.
    BstEarlyPublish,
    /// Harris delete unlinks without marking first.
    ListUnlinkUnmarked,
}

impl Mutant {
    pub const ALL: [Mutant; 14] = [
        Mutant::ReleasesFirst,
        Mutant::ReleaseOrder,
        Mutant::DowngradeNoWait,
        Mutant::NoDirectoryBlock,
        Mutant::NoI3,
        Mutant::EpochWrap,
        Mutant::RetOverflow,
        Mutant::ScanCompare,
        Mutant::NoMinEpoch,
        Mutant::CoalesceRelease,
        Mutant::ListRelaxedLink,
        Mutant::QueueRelaxedLink,
        Mutant::BstEarlyPublish,
        Mutant::ListUnlinkUnmarked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutant::ReleasesFirst => "m1-releases-first",
            Mutant::ReleaseOrder => "m2-release-order",
            Mutant::DowngradeNoWait => "m3-downgrade-no-wait",
            Mutant::NoDirectoryBlock => "m4-no-directory-block",
            Mutant::NoI3 => "m5-no-i3",
            Mutant::EpochWrap => "m6-epoch-wrap",
            Mutant::RetOverflow => "m7-ret-overflow",
            Mutant::ScanCompare => "m8-scan-compare",
            Mutant::NoMinEpoch => "m9-no-min-epoch",
            Mutant::CoalesceRelease => "coalesce-release",
            Mutant::ListRelaxedLink => "list-relaxed-link",
            Mutant::QueueRelaxedLink => "queue-relaxed-link",
            Mutant::BstEarlyPublish => "bst-early-publish",
            Mutant::ListUnlinkUnmarked => "list-unlink-unmarked",
        }
    }

    pub fn parse(s: &str) -> Result<Mutant, String> {
        Mutant::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown mutant {s:?}; one of {}",
                    Mutant::ALL.map(|m| m.name()).join(", ")
                )
            })
    }

    /// A bug in LRP's mechanism (only observable under `--policy lrp`).
    pub fn is_mechanism(self) -> bool {
        Mutant::ALL[..10].contains(&self)
    }
}
