//! A lock-free skiplist in the style of Fraser and Herlihy–Shavit: a node
//! is `[key, height, next_0 .. next_{height-1}]`, padded to an even number
//! of words so that bit 0 of every `next` is free for a deletion mark.
//!
//! The bottom level is the set: insert linearizes at the CAS that links the
//! node into level 0, delete at the CAS that marks the node's `next_0`.
//! Upper levels are only shortcuts. Insert links them bottom-up after its
//! linearization; delete marks them top-down *before* marking level 0, and
//! traversals unlink (snip) any node whose `next` at the level they walk is
//! marked. A node can therefore stay linked on an upper level after it has
//! left level 0, but only once all its levels are marked.
//!
//! Heights come from the key, not from a random source: one plus the
//! trailing zeros of the upper half of a multiplicative hash, capped at
//! [`MAX_LEVEL`] (so a level holds about half the nodes of the one below).
//! Sentinels: head (key 0) and tail (key `u64::MAX`), both of full height.

use std::collections::HashSet;

use super::{marked, unmarked, Image, Lfd, LfdKind, Op, Outcome, MARK};
use crate::trace::Sync::{Acquire, Plain, Release};
use crate::{Mutant, PMem};

/// Levels: log2 of a million keys, so the top level stays short at 1M keys.
pub const MAX_LEVEL: usize = 20;

const KEY: u64 = 0;
const HEIGHT: u64 = 1;
const NEXT: u64 = 2;

type Path = [u64; MAX_LEVEL];

/// The number of levels a key's node spans, 1..=MAX_LEVEL.
pub fn height(key: u64) -> usize {
    let hash = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    1 + (hash.trailing_zeros() as usize).min(MAX_LEVEL - 1)
}

/// The address of a node's `next` at `level`.
fn next(n: u64, level: usize) -> u64 {
    n + NEXT + level as u64
}

/// A node with its key and height written (plain: private until linked).
async fn node<M: PMem>(m: &M, key: u64, h: usize) -> u64 {
    let n = m.alloc((NEXT + h as u64).next_multiple_of(2));
    debug_assert!(n != 0 && n % 2 == 0, "skiplist node at {n} is not even");
    m.store(n + KEY, key, Plain).await;
    m.store(n + HEIGHT, h as u64, Plain).await;
    n
}

/// Set the mark bit of a `next` field (a CAS loop; no-op if set).
async fn mark<M: PMem>(m: &M, field: u64) {
    let mut cur = m.load(field, Acquire).await;
    while !marked(cur) {
        match m.cas(field, cur, cur | MARK, Release).await {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Skiplist {
    head: u64,
    tail: u64,
}

impl Skiplist {
    /// For every level, top down: the last node with a key below `key`
    /// (`preds`) and the first unmarked node after it (`succs`), snipping
    /// marked nodes in between. Whether `succs[0]` holds `key`.
    async fn find<M: PMem>(&self, m: &M, key: u64, preds: &mut Path, succs: &mut Path) -> bool {
        'retry: loop {
            let mut pred = self.head;
            for level in (0..MAX_LEVEL).rev() {
                let mut curr = unmarked(m.load(next(pred, level), Acquire).await);
                let mut curr_key = u64::MAX; // the tail's
                while curr != self.tail {
                    let succ = m.load(next(curr, level), Acquire).await;
                    if marked(succ) {
                        // `curr` is deleted at this level: unlink it here.
                        if m.cas(next(pred, level), curr, unmarked(succ), Release)
                            .await
                            .is_err()
                        {
                            continue 'retry;
                        }
                        curr = unmarked(succ);
                        continue;
                    }
                    curr_key = m.load(curr + KEY, Plain).await;
                    if curr_key >= key {
                        break;
                    }
                    (pred, curr, curr_key) = (curr, succ, u64::MAX);
                }
                (preds[level], succs[level]) = (pred, curr);
                if level == 0 {
                    return curr_key == key;
                }
            }
            unreachable!("level 0 returns");
        }
    }

    async fn insert<M: PMem>(&self, m: &M, key: u64) -> Outcome {
        let h = height(key);
        let n = node(m, key, h).await;
        let (mut preds, mut succs) = ([0; MAX_LEVEL], [0; MAX_LEVEL]);
        loop {
            if self.find(m, key, &mut preds, &mut succs).await {
                return Outcome::fail();
            }
            for (level, &succ) in succs.iter().enumerate().take(h) {
                m.store(next(n, level), succ, Plain).await;
            }
            if m.cas(next(preds[0], 0), succs[0], n, Release).await.is_ok() {
                break;
            }
        }
        let out = Outcome::done(m, 0);
        self.link_upper(m, n, key, h, &mut preds, &mut succs).await;
        out
    }

    /// Link a node already on level 0 into its levels 1..h, bottom up. Each
    /// level first points the node at the successor `find` just saw, then
    /// swings the predecessor to it. Gives up once the node is being deleted.
    async fn link_upper<M: PMem>(
        &self,
        m: &M,
        n: u64,
        key: u64,
        h: usize,
        preds: &mut Path,
        succs: &mut Path,
    ) {
        for level in 1..h {
            loop {
                let own = m.load(next(n, level), Acquire).await;
                if marked(own) {
                    return;
                }
                if own != succs[level]
                    && m.cas(next(n, level), own, succs[level], Release)
                        .await
                        .is_err()
                {
                    continue;
                }
                if m.cas(next(preds[level], level), succs[level], n, Release)
                    .await
                    .is_ok()
                {
                    break;
                }
                if !self.find(m, key, preds, succs).await || succs[0] != n {
                    return; // deleted meanwhile
                }
            }
        }
    }

    async fn delete<M: PMem>(&self, m: &M, key: u64) -> Outcome {
        let (mut preds, mut succs) = ([0; MAX_LEVEL], [0; MAX_LEVEL]);
        if !self.find(m, key, &mut preds, &mut succs).await {
            return Outcome::fail();
        }
        let victim = succs[0];
        let h = m.load(victim + HEIGHT, Plain).await as usize;
        for level in (1..h).rev() {
            mark(m, next(victim, level)).await;
        }
        // Whoever marks level 0 deletes the key.
        let mut succ = m.load(next(victim, 0), Acquire).await;
        while !marked(succ) {
            match m.cas(next(victim, 0), succ, succ | MARK, Release).await {
                Ok(_) => {
                    let out = Outcome::done(m, 0);
                    self.find(m, key, &mut preds, &mut succs).await; // snip it
                    return out;
                }
                Err(now) => succ = now,
            }
        }
        Outcome::fail()
    }

    /// Walk level 0 as the Harris list is walked: written, sorted, ending at
    /// the tail, no cycle. The set of its nodes and the unmarked keys.
    fn recover_bottom(&self, img: &Image) -> Result<(HashSet<u64>, Vec<u64>), String> {
        let (mut nodes, mut keys) = (HashSet::new(), Vec::new());
        let mut prev_key = img.get(self.head + KEY)?;
        let mut at = img.get(next(self.head, 0))?;
        if marked(at) {
            return Err("the head's level-0 link is marked".into());
        }
        for _ in 0..img.bound() {
            if at == self.tail {
                return Ok((nodes, keys));
            }
            if at == 0 {
                return Err(format!(
                    "level 0 ends in null before the tail (after key {prev_key})"
                ));
            }
            let (key, h, link) = (
                img.get(at + KEY)?,
                img.get(at + HEIGHT)?,
                img.get(next(at, 0))?,
            );
            if key <= prev_key {
                return Err(format!("level 0 out of order: {key} after {prev_key}"));
            }
            if h == 0 || h > MAX_LEVEL as u64 {
                return Err(format!("node with key {key} has height {h}"));
            }
            if !marked(link) {
                keys.push(key);
            }
            nodes.insert(at);
            prev_key = key;
            at = unmarked(link);
        }
        Err("level 0 has a cycle".into())
    }

    /// Walk one upper level: written, sorted, tall enough, ending at the
    /// tail; a node that has left level 0 must be marked (deleted) on both.
    fn recover_level(
        &self,
        img: &Image,
        level: usize,
        bottom: &HashSet<u64>,
    ) -> Result<(), String> {
        let (mut prev_key, mut prev_marked) = (0, false);
        let mut at = img.get(next(self.head, level))?;
        if marked(at) {
            return Err(format!("the head's level-{level} link is marked"));
        }
        for _ in 0..img.bound() {
            if at == self.tail {
                return Ok(());
            }
            if at == 0 {
                return Err(format!(
                    "level {level} ends in null before the tail (after key {prev_key})"
                ));
            }
            let (key, h, link) = (
                img.get(at + KEY)?,
                img.get(at + HEIGHT)?,
                img.get(next(at, level))?,
            );
            // A node deleted at this level may still sit before a newer node
            // with its key (a search can link past it before it is snipped).
            let tie_ok = key == prev_key && (prev_marked || marked(link));
            if (key <= prev_key && !tie_ok) || h <= level as u64 {
                return Err(format!(
                    "level {level}: key {key} (height {h}) after {prev_key}"
                ));
            }
            let allowed = bottom.contains(&at) || (marked(link) && marked(img.get(next(at, 0))?));
            if !allowed {
                return Err(format!(
                    "level {level} links key {key}, which is neither on level 0 nor deleted"
                ));
            }
            (prev_key, prev_marked) = (key, marked(link));
            at = unmarked(link);
        }
        Err(format!("level {level} has a cycle"))
    }
}

impl Lfd for Skiplist {
    const KIND: LfdKind = LfdKind::Skiplist;

    /// No mutant concerns the skiplist.
    async fn create<M: PMem>(m: &M, _mutant: Option<Mutant>) -> Skiplist {
        let tail = node(m, u64::MAX, MAX_LEVEL).await;
        let head = node(m, 0, MAX_LEVEL).await;
        for level in 0..MAX_LEVEL {
            m.store(next(tail, level), 0, Plain).await;
            m.store(next(head, level), tail, Plain).await;
        }
        Skiplist { head, tail }
    }

    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome {
        match op {
            Op::Insert(k) => self.insert(m, k).await,
            Op::Delete(k) => self.delete(m, k).await,
        }
    }

    fn recover(&self, img: &Image) -> Result<Vec<u64>, String> {
        if img.get(self.tail + KEY)? != u64::MAX {
            return Err("the tail sentinel is not in place".into());
        }
        let (bottom, keys) = self.recover_bottom(img)?;
        for level in 1..MAX_LEVEL {
            self.recover_level(img, level, &bottom)?;
        }
        Ok(keys)
    }
}
