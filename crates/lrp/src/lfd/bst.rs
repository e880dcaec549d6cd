//! The Natarajan–Mittal lock-free external binary search tree (PPoPP'14).
//!
//! Keys live in the leaves; internal nodes only route (`key < node.key`
//! goes left, otherwise right). A node is `[key, left, right, pad]`, four
//! words on a 4-word boundary, so the two low bits of every child pointer
//! are free: bit 0 *flags* an edge whose leaf is being deleted, bit 1 *tags*
//! an edge that must not change any more because its parent is about to be
//! removed. Every CAS on an edge expects a clean (unflagged, untagged) value,
//! so a flagged or tagged edge is frozen.
//!
//! Insert swings the parent's edge from the leaf to a new internal node
//! whose children are the old leaf and a new one (its linearization).
//! Delete flags the edge to its leaf (its linearization), then *cleans up*:
//! it tags the edge to the leaf's sibling and swings the nearest ancestor
//! with an untagged edge on the path (the "ancestor"), from its child on the
//! path (the "successor") to that sibling, carrying the sibling edge's flag
//! over. Any thread that runs into a flagged or tagged edge helps clean up.
//!
//! Abstract state: because deletion linearizes at the flag, a leaf whose
//! incoming edge is flagged is already *deleted*: `recover` leaves it out,
//! and insert and delete treat such a leaf as absent (they help remove it,
//! then retry) so that their answers agree with that choice. (The paper's
//! insert returns "present" on a flagged leaf; that is only linearizable if
//! deletion is placed at the physical removal.)
//!
//! Sentinels: the root R has key `INF2` with children S and a leaf `INF2`;
//! S has key `INF1` with leaves `INF0` and `INF1`. User keys lie below
//! `INF0`, so they all live in S's left subtree and R, S and the three
//! sentinel leaves are never removed.

use std::collections::HashSet;

use super::{Image, Lfd, LfdKind, Op, Outcome};
use crate::trace::Sync::{Acquire, Plain, Release};
use crate::{Mutant, PMem};

const KEY: u64 = 0;
const LEFT: u64 = 1;
const RIGHT: u64 = 2;
const NODE_WORDS: u64 = 4;

/// Edge bits: the leaf below is being deleted / the edge is frozen.
const FLAG: u64 = 1;
const TAG: u64 = 2;

pub const INF0: u64 = u64::MAX - 2;
pub const INF1: u64 = u64::MAX - 1;
pub const INF2: u64 = u64::MAX;

fn addr(edge: u64) -> u64 {
    edge & !(FLAG | TAG)
}

fn flagged(edge: u64) -> bool {
    edge & FLAG != 0
}

fn tagged(edge: u64) -> bool {
    edge & TAG != 0
}

/// The child field of `node` (whose key is `node_key`) on `key`'s path.
fn child_field(node: u64, node_key: u64, key: u64) -> u64 {
    if key < node_key {
        node + LEFT
    } else {
        node + RIGHT
    }
}

fn alloc_node<M: PMem>(m: &M) -> u64 {
    let n = m.alloc(NODE_WORDS);
    debug_assert!(
        n != 0 && n % NODE_WORDS == 0,
        "BST node at {n} is not 4-word aligned"
    );
    n
}

/// Write a node's key and children (plain: private until published).
async fn fill<M: PMem>(m: &M, n: u64, key: u64, left: u64, right: u64) {
    m.store(n + KEY, key, Plain).await;
    m.store(n + LEFT, left, Plain).await;
    m.store(n + RIGHT, right, Plain).await;
}

async fn node<M: PMem>(m: &M, key: u64, left: u64, right: u64) -> u64 {
    let n = alloc_node(m);
    fill(m, n, key, left, right).await;
    n
}

/// Where a descent for a key ended: the last edge on the path that was not
/// tagged runs ancestor → successor; the path ends parent → leaf, over the
/// edge value `edge`. Keys are kept so no node is read twice.
#[derive(Clone, Copy, Debug)]
struct Seek {
    ancestor: u64,
    ancestor_key: u64,
    successor: u64,
    parent: u64,
    parent_key: u64,
    leaf: u64,
    leaf_key: u64,
    edge: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct Bst {
    /// R; S is its left child.
    root: u64,
    s: u64,
    mutant: Option<Mutant>,
}

impl Bst {
    /// Descend from S's left edge to a leaf, remembering the last untagged
    /// edge passed (the one a cleanup will swing).
    async fn seek<M: PMem>(&self, m: &M, key: u64) -> Seek {
        let mut s = Seek {
            ancestor: self.root,
            ancestor_key: INF2,
            successor: self.s,
            parent: self.s,
            parent_key: INF1,
            leaf: 0,
            leaf_key: 0,
            edge: 0,
        };
        let mut edge = m.load(self.s + LEFT, Acquire).await;
        let mut at = addr(edge);
        let mut at_key = m.load(at + KEY, Plain).await;
        loop {
            let below = m.load(child_field(at, at_key, key), Acquire).await;
            if addr(below) == 0 {
                break; // `at` is a leaf
            }
            if !tagged(edge) {
                (s.ancestor, s.ancestor_key, s.successor) = (s.parent, s.parent_key, at);
            }
            (s.parent, s.parent_key) = (at, at_key);
            edge = below;
            at = addr(below);
            at_key = m.load(at + KEY, Plain).await;
        }
        Seek {
            leaf: at,
            leaf_key: at_key,
            edge,
            ..s
        }
    }

    /// Set the tag bit of an edge (a bit-test-and-set as a CAS loop); the
    /// edge's value from then on, which no CAS can change any more.
    async fn tag<M: PMem>(m: &M, field: u64) -> u64 {
        let mut cur = m.load(field, Acquire).await;
        while !tagged(cur) {
            match m.cas(field, cur, cur | TAG, Release).await {
                Ok(_) => return cur | TAG,
                Err(now) => cur = now,
            }
        }
        cur
    }

    /// Remove the flagged leaf below `s.parent` (on `key`'s side or the
    /// other): freeze the edge to the child that stays, then swing the
    /// ancestor's edge from the successor straight to that child, keeping
    /// its flag. Whether this thread's swing did it.
    async fn cleanup<M: PMem>(&self, m: &M, key: u64, s: &Seek) -> bool {
        let ours = child_field(s.parent, s.parent_key, key);
        let other = if ours == s.parent + LEFT {
            s.parent + RIGHT
        } else {
            s.parent + LEFT
        };
        // If our side is not flagged, the flagged leaf is the other one, and
        // our side is what stays.
        let keep = if flagged(m.load(ours, Acquire).await) {
            other
        } else {
            ours
        };
        let kept = Self::tag(m, keep).await;
        let swing = child_field(s.ancestor, s.ancestor_key, key);
        m.cas(swing, s.successor, kept & !TAG, Release)
            .await
            .is_ok()
    }

    async fn insert<M: PMem>(&self, m: &M, key: u64) -> Outcome {
        let early = self.mutant == Some(Mutant::BstEarlyPublish);
        let leaf = node(m, key, 0, 0).await;
        let inner = alloc_node(m);
        loop {
            let s = self.seek(m, key).await;
            if s.leaf_key == key {
                if !flagged(s.edge) {
                    return Outcome::fail();
                }
                // Deleted already (flagged) but still in place: remove it first.
                self.cleanup(m, key, &s).await;
                continue;
            }
            let (left, right) = if key < s.leaf_key {
                (leaf, s.leaf)
            } else {
                (s.leaf, leaf)
            };
            let inner_key = key.max(s.leaf_key);
            if !early {
                fill(m, inner, inner_key, left, right).await;
            }
            match m
                .cas(
                    child_field(s.parent, s.parent_key, key),
                    s.leaf,
                    inner,
                    Release,
                )
                .await
            {
                Ok(_) => {
                    let out = Outcome::done(m, 0);
                    if early {
                        // The mutant: the node was reachable before it was written.
                        fill(m, inner, inner_key, left, right).await;
                    }
                    return out;
                }
                Err(now) if addr(now) == s.leaf => {
                    // The edge is flagged or tagged: help the delete in the way.
                    self.cleanup(m, key, &s).await;
                }
                Err(_) => {}
            }
        }
    }

    /// Flag the edge to `key`'s leaf: the delete's linearization. `Ok` with
    /// the flagged leaf and the outcome if the leaf still has to be removed;
    /// `Err` with the final outcome if the delete is over (the key was
    /// absent, or the first cleanup already removed the leaf).
    async fn inject<M: PMem>(&self, m: &M, key: u64) -> Result<(u64, Outcome), Outcome> {
        loop {
            let s = self.seek(m, key).await;
            if s.leaf_key != key {
                return Err(Outcome::fail());
            }
            if flagged(s.edge) {
                // Another delete of this key linearized first: finish it and look again.
                self.cleanup(m, key, &s).await;
                continue;
            }
            match m
                .cas(
                    child_field(s.parent, s.parent_key, key),
                    s.leaf,
                    s.leaf | FLAG,
                    Release,
                )
                .await
            {
                Ok(_) => {
                    let out = Outcome::done(m, 0);
                    if !self.cleanup(m, key, &s).await {
                        return Ok((s.leaf, out));
                    }
                    return Err(out);
                }
                Err(now) if addr(now) == s.leaf => {
                    self.cleanup(m, key, &s).await;
                }
                Err(_) => {}
            }
        }
    }

    async fn delete<M: PMem>(&self, m: &M, key: u64) -> Outcome {
        let (leaf, out) = match self.inject(m, key).await {
            Ok(flagged) => flagged,
            Err(out) => return out, // absent, or flagged and removed at once
        };
        // The flagged leaf is still in the tree: remove it (or see it gone).
        loop {
            let s = self.seek(m, key).await;
            if s.leaf != leaf || self.cleanup(m, key, &s).await {
                return out;
            }
        }
    }
}

impl Lfd for Bst {
    const KIND: LfdKind = LfdKind::Bst;

    async fn create<M: PMem>(m: &M, mutant: Option<Mutant>) -> Bst {
        let leaf0 = node(m, INF0, 0, 0).await;
        let leaf1 = node(m, INF1, 0, 0).await;
        let leaf2 = node(m, INF2, 0, 0).await;
        let s = node(m, INF1, leaf0, leaf1).await;
        let root = node(m, INF2, s, leaf2).await;
        Bst { root, s, mutant }
    }

    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome {
        match op {
            Op::Insert(k) => self.insert(m, k).await,
            Op::Delete(k) => self.delete(m, k).await,
        }
    }

    /// Walk the image from R: every reachable word written, every node met
    /// once (no cycle or sharing), two children or none, keys within the
    /// bounds of the path (left `< key <=` right), flags only on edges to
    /// leaves, the sentinels in place. The keys of the unflagged user leaves.
    fn recover(&self, img: &Image) -> Result<Vec<u64>, String> {
        if img.get(self.root + KEY)? != INF2
            || img.get(self.root + LEFT)? != self.s
            || img.get(self.s + KEY)? != INF1
        {
            return Err("the sentinel nodes R and S are not in place".into());
        }
        let mut keys = Vec::new();
        let mut sentinels = 0;
        let mut seen = HashSet::new();
        // (edge into the node, lowest allowed key, bound above it, exclusive)
        let mut stack: Vec<(u64, u64, u128)> = vec![(self.root, 0, 1 << 64)];
        while let Some((edge, lo, hi)) = stack.pop() {
            let n = addr(edge);
            if n % NODE_WORDS != 0 || !seen.insert(n) || seen.len() > img.bound() {
                return Err(format!(
                    "node {n} is misaligned or reachable twice (a cycle or a shared subtree)"
                ));
            }
            let (key, left, right) = (img.get(n + KEY)?, img.get(n + LEFT)?, img.get(n + RIGHT)?);
            match (left, right) {
                (0, 0) => {
                    if (key as u128) >= hi || key < lo {
                        return Err(format!(
                            "leaf {key} lies outside its subtree's range [{lo}, {hi})"
                        ));
                    }
                    if key >= INF0 {
                        if flagged(edge) {
                            return Err(format!("the sentinel leaf {key} is flagged"));
                        }
                        sentinels += 1;
                    } else if !flagged(edge) {
                        keys.push(key);
                    }
                }
                (0, _) | (_, 0) => {
                    return Err(format!("internal node {n} (key {key}) has one child"))
                }
                _ if flagged(edge) => {
                    return Err(format!("a flagged edge leads to internal node {n}"))
                }
                _ => {
                    // Left popped first: leaves come out in key order.
                    stack.push((right, key, hi));
                    stack.push((left, lo, key as u128));
                }
            }
        }
        if sentinels != 3 {
            return Err(format!("{sentinels} sentinel leaves instead of 3"));
        }
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        Ok(keys)
    }
}
