//! A fast pre-check that finds most register violations in O(n log n),
//! with a witness of a handful of operations: the cluster/zone
//! characterization of atomic registers with unique written values
//! (Gibbons & Korach, "Testing shared memories", 1997; restated as zones by
//! Golab, Li & Shah, PODC 2011).
//!
//! A value's cluster is its write and the reads that returned it (the
//! initial value's cluster has a virtual write before everything). In any
//! linearization each cluster is one contiguous block, so with `s` the
//! earliest return in a cluster and `f` its latest call, clusters `a` and
//! `b` cannot be ordered either way iff `s_a < f_b` and `s_b < f_a`: some
//! operation of each precedes some operation of the other. Such a pair, or
//! a read that returned before its value's write was called, is a
//! violation; the two clusters' extreme operations alone already show it.
//!
//! Callers confirm every witness with the [`crate::wgl`] search, so this
//! module only ever speeds things up: a conflict it reports is checked, and
//! when it finds none the full search still decides.

use std::collections::HashMap;

use crate::wgl::RegOp;

/// Time of the initial value's virtual write: before every operation.
const BEFORE_ALL: i128 = -1;

/// One value's cluster: earliest return and latest call, with the
/// operations (indices) that attain them.
#[derive(Clone, Copy, Debug)]
struct Cluster {
    s: i128,
    s_op: Option<usize>,
    f: i128,
    f_op: Option<usize>,
    write: Option<usize>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            s: i128::MAX,
            s_op: None,
            f: i128::MIN,
            f_op: None,
            write: None,
        }
    }

    fn add(&mut self, i: usize, op: &RegOp) {
        if (op.ret as i128) < self.s {
            (self.s, self.s_op) = (op.ret as i128, Some(i));
        }
        if op.call as i128 > self.f {
            (self.f, self.f_op) = (op.call as i128, Some(i));
        }
    }

    /// The operations that pin this cluster's zone, and its write.
    fn witness(&self) -> impl Iterator<Item = usize> {
        [self.write, self.s_op, self.f_op].into_iter().flatten()
    }
}

/// Indices of a small set of operations that is not linearizable, if the
/// zone check finds one; `None` if it finds no conflict.
pub(crate) fn find_conflict(ops: &[RegOp]) -> Option<Vec<usize>> {
    let clusters = match clusters(ops) {
        Ok(c) => c,
        Err(witness) => return Some(witness),
    };
    let (a, b) = conflicting_pair(&clusters)?;
    let mut witness: Vec<usize> = clusters[a].witness().chain(clusters[b].witness()).collect();
    witness.sort_unstable();
    witness.dedup();
    Some(witness)
}

/// The clusters, or a witness: a read whose value no write (in `ops`)
/// wrote, or that returned before that write was called. Values written
/// twice void the characterization: then no clusters at all.
fn clusters(ops: &[RegOp]) -> Result<Vec<Cluster>, Vec<usize>> {
    let mut by_value: HashMap<Option<u64>, Cluster> = HashMap::new();
    let init = by_value.entry(None).or_insert_with(Cluster::new);
    (init.s, init.f) = (BEFORE_ALL, BEFORE_ALL);
    for (i, op) in ops.iter().enumerate().filter(|(_, o)| o.write) {
        let c = by_value.entry(op.value).or_insert_with(Cluster::new);
        if c.write.replace(i).is_some() {
            return Ok(Vec::new());
        }
        c.add(i, op);
    }
    for (i, op) in ops.iter().enumerate().filter(|(_, o)| !o.write) {
        let Some(c) = by_value.get_mut(&op.value) else {
            return Err(vec![i]);
        };
        if let Some(w) = c.write.filter(|&w| op.ret < ops[w].call) {
            return Err(vec![w, i]);
        }
        c.add(i, op);
    }
    Ok(by_value.into_values().collect())
}

/// Two clusters `a`, `b` with `s_a < f_b` and `s_b < f_a`, if any. Sorted
/// by `s`, the clusters with `s_a < f_b` are a prefix; the one among them
/// (other than `b`) with the latest `f` is the only candidate needed.
fn conflicting_pair(clusters: &[Cluster]) -> Option<(usize, usize)> {
    let mut by_s: Vec<usize> = (0..clusters.len()).collect();
    by_s.sort_by_key(|&i| clusters[i].s);
    let top2 = prefix_top2(clusters, &by_s);
    for b in 0..clusters.len() {
        let k = by_s.partition_point(|&i| clusters[i].s < clusters[b].f);
        let Some(&(first, second)) = k.checked_sub(1).map(|k| &top2[k]) else {
            continue;
        };
        let a = if first == Some(b) { second } else { first };
        if let Some(a) = a.filter(|&a| clusters[b].s < clusters[a].f) {
            return Some((a, b));
        }
    }
    None
}

/// For each prefix of `order`, the two clusters with the latest `f`.
fn prefix_top2(clusters: &[Cluster], order: &[usize]) -> Vec<(Option<usize>, Option<usize>)> {
    let f = |i: Option<usize>| i.map_or(i128::MIN, |i| clusters[i].f);
    let mut best: (Option<usize>, Option<usize>) = (None, None);
    let mut out = Vec::with_capacity(order.len());
    for &i in order {
        if f(Some(i)) > f(best.0) {
            best = (Some(i), best.0);
        } else if f(Some(i)) > f(best.1) {
            best.1 = Some(i);
        }
        out.push(best);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wgl::{search, Outcome};

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// A tiny random history: small integer times (many ties), unique
    /// write values 1.., reads of any of them or of `None`, some writes
    /// with no reply.
    fn tiny(rng: &mut Rng) -> Vec<RegOp> {
        let n = 1 + rng.below(9);
        let writes = rng.below(n + 1);
        (0..n)
            .map(|i| {
                let call = rng.below(10);
                let ret = call + rng.below(6);
                match i < writes {
                    true if rng.below(6) == 0 => RegOp {
                        call,
                        ret: u64::MAX,
                        write: true,
                        value: Some(i + 1),
                    },
                    true => RegOp {
                        call,
                        ret,
                        write: true,
                        value: Some(i + 1),
                    },
                    false => RegOp {
                        call,
                        ret,
                        write: false,
                        value: Some(rng.below(writes + 1)).filter(|&v| v > 0),
                    },
                }
            })
            .collect()
    }

    fn violated(ops: &[RegOp]) -> bool {
        matches!(search(ops, 1_000_000), Outcome::Violated { .. })
    }

    #[test]
    fn zones_agree_with_the_search_on_tiny_histories() {
        let mut rng = Rng(12345);
        let (mut conflicts, mut total) = (0, 0);
        for _ in 0..200_000 {
            let ops = tiny(&mut rng);
            let zone = find_conflict(&ops);
            assert_eq!(
                zone.is_some(),
                violated(&ops),
                "{ops:?}: zones say {zone:?}"
            );
            if let Some(w) = zone {
                let piece: Vec<RegOp> = w.iter().map(|&i| ops[i]).collect();
                assert!(violated(&piece), "{ops:?}: witness {w:?} is linearizable");
                conflicts += 1;
            }
            total += 1;
        }
        assert!(
            conflicts > total / 10 && conflicts < total * 9 / 10,
            "{conflicts} of {total}"
        );
    }
}
