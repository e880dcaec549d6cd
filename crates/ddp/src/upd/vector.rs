//! Update ids and dependency vectors of the UPD family (DDP §5.2, Fig.
//! 2(e)–(f); docs/DDP.md open point 6: the cauhist as a vector, one sequence number per
//! origin, docs/DESIGN.md §7.2).

use serde::{Deserialize, Serialize};
use tandem_net::NodeId;

/// Where updates come from: one incarnation of a node. A restarted node has
/// lost its sequence counter (and messages of its last life may still be on
/// the wire), so it starts a new origin, named by the configuration epoch it
/// started in. A sequence number therefore never names two updates.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Origin {
    pub node: NodeId,
    pub since: u64,
}

/// An update (UPD): the `seq`-th write its origin coordinated (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UpdId {
    pub origin: Origin,
    pub seq: u64,
}

/// One sequence number per origin, naming the updates `1..=n` of each: the
/// cauhist of an update, a session's causal past, or what a node applied.
/// Kept sorted by origin; an origin it lacks counts as 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vector(Vec<(Origin, u64)>);

impl Vector {
    pub fn get(&self, o: Origin) -> u64 {
        self.0
            .binary_search_by_key(&o, |e| e.0)
            .map_or(0, |i| self.0[i].1)
    }

    /// Raise `o` to at least `n`.
    pub fn raise(&mut self, o: Origin, n: u64) {
        match self.0.binary_search_by_key(&o, |e| e.0) {
            Ok(i) => self.0[i].1 = self.0[i].1.max(n),
            Err(i) => self.0.insert(i, (o, n)),
        }
    }

    /// Add `id` (and, by the vector's meaning, its origin's earlier updates).
    pub fn add(&mut self, id: UpdId) {
        self.raise(id.origin, id.seq);
    }

    /// Lower each origin of `upto` to at most its entry there (a session
    /// whose past on those origins is lost).
    pub fn clamp(&mut self, upto: &Vector) {
        for e in &mut self.0 {
            if let Ok(i) = upto.0.binary_search_by_key(&e.0, |u| u.0) {
                e.1 = e.1.min(upto.0[i].1);
            }
        }
    }

    pub fn merge(&mut self, other: &Vector) {
        for &(o, n) in &other.0 {
            self.raise(o, n);
        }
    }

    pub fn contains(&self, id: UpdId) -> bool {
        self.get(id.origin) >= id.seq
    }

    pub fn covers(&self, other: &Vector) -> bool {
        other.covered_by(|o| self.get(o))
    }

    /// Whether `have(o) >= n` for every entry `(o, n)` of this vector.
    pub fn covered_by(&self, have: impl Fn(Origin) -> u64) -> bool {
        self.0.iter().all(|&(o, n)| have(o) >= n)
    }

    pub fn iter(&self) -> impl Iterator<Item = (Origin, u64)> + '_ {
        self.0.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Origin = Origin { node: 0, since: 1 };
    const B: Origin = Origin { node: 1, since: 1 };
    const B2: Origin = Origin { node: 1, since: 3 };

    #[test]
    fn covers_and_merges_per_origin() {
        let mut x = Vector::default();
        x.add(UpdId { origin: B, seq: 4 });
        x.add(UpdId { origin: A, seq: 2 });
        x.add(UpdId { origin: B, seq: 1 });
        assert_eq!((x.get(A), x.get(B), x.get(B2)), (2, 4, 0));
        let mut y = Vector::default();
        y.raise(B2, 1);
        assert!(!x.covers(&y) && !y.covers(&x));
        y.merge(&x);
        assert!(
            y.covers(&x)
                && y.contains(UpdId { origin: B2, seq: 1 })
                && !y.contains(UpdId { origin: A, seq: 3 })
        );
        assert!(x.covers(&Vector::default()));
    }
}
