//! Harris's lock-free linked list (DISC'01): nodes `[key, next]`, deletion
//! marks `next` (logical), then unlinks (physical). Sentinels hold keys 0
//! and `u64::MAX`; user keys lie strictly between.

use super::{marked, unmarked, Image, Lfd, LfdKind, Op, Outcome, MARK};
use crate::trace::Sync::{Acquire, Plain, Release};
use crate::{Mutant, PMem};

const KEY: u64 = 0;
const NEXT: u64 = 1;

/// One sorted list between two sentinels (the hash set has one per bucket).
#[derive(Clone, Copy, Debug)]
pub struct Chain {
    pub head: u64,
    pub tail: u64,
    pub mutant: Option<Mutant>,
}

async fn node<M: PMem>(m: &M, key: u64, next: u64) -> u64 {
    let n = m.alloc(2);
    m.store(n + KEY, key, Plain).await;
    m.store(n + NEXT, next, Plain).await;
    n
}

impl Chain {
    /// Write a head sentinel at `head` (allocated by the caller) pointing at `tail`.
    pub async fn init_head<M: PMem>(m: &M, head: u64, tail: u64) {
        m.store(head + KEY, 0, Plain).await;
        m.store(head + NEXT, tail, Plain).await;
    }

    pub async fn create<M: PMem>(m: &M, tail: Option<u64>, mutant: Option<Mutant>) -> Chain {
        let tail = match tail {
            Some(t) => t,
            None => node(m, u64::MAX, 0).await,
        };
        let head = node(m, 0, tail).await;
        Chain { head, tail, mutant }
    }

    /// The first unmarked node with a key >= `key` (right) and its unmarked
    /// predecessor (left), unlinking marked nodes between them.
    async fn search<M: PMem>(&self, m: &M, key: u64) -> (u64, u64) {
        'retry: loop {
            let mut t = self.head;
            let mut t_next = m.load(t + NEXT, Acquire).await;
            let (mut left, mut left_next) = (t, t_next);
            loop {
                if !marked(t_next) {
                    (left, left_next) = (t, t_next);
                }
                t = unmarked(t_next);
                if t == self.tail {
                    break;
                }
                t_next = m.load(t + NEXT, Acquire).await;
                if !marked(t_next) && m.load(t + KEY, Plain).await >= key {
                    break;
                }
            }
            let right = t;
            if left_next != right && m.cas(left + NEXT, left_next, right, Release).await.is_err() {
                continue 'retry;
            }
            if right != self.tail && marked(m.load(right + NEXT, Acquire).await) {
                continue 'retry;
            }
            return (left, right);
        }
    }

    pub async fn insert<M: PMem>(&self, m: &M, key: u64) -> Outcome {
        let n = node(m, key, 0).await;
        let link = if self.mutant == Some(Mutant::ListRelaxedLink) {
            Plain
        } else {
            Release
        };
        loop {
            let (left, right) = self.search(m, key).await;
            if right != self.tail && m.load(right + KEY, Plain).await == key {
                return Outcome::fail();
            }
            m.store(n + NEXT, right, Plain).await;
            if m.cas(left + NEXT, right, n, link).await.is_ok() {
                return Outcome::done(m, 0);
            }
        }
    }

    pub async fn delete<M: PMem>(&self, m: &M, key: u64) -> Outcome {
        loop {
            let (left, right) = self.search(m, key).await;
            if right == self.tail || m.load(right + KEY, Plain).await != key {
                return Outcome::fail();
            }
            let next = m.load(right + NEXT, Acquire).await;
            if marked(next) {
                continue;
            }
            if self.mutant == Some(Mutant::ListUnlinkUnmarked) {
                if m.cas(left + NEXT, right, next, Release).await.is_ok() {
                    return Outcome::done(m, 0);
                }
                continue;
            }
            if m.cas(right + NEXT, next, next | MARK, Release)
                .await
                .is_ok()
            {
                let out = Outcome::done(m, 0);
                if m.cas(left + NEXT, right, next, Release).await.is_err() {
                    self.search(m, key).await;
                }
                return out;
            }
        }
    }

    /// Walk the image: sorted keys, written fields, ends at the tail; the
    /// keys of the unmarked nodes.
    pub fn recover_into(&self, img: &Image, keys: &mut Vec<u64>) -> Result<(), String> {
        let mut prev_key = img.get(self.head + KEY)?;
        let mut at = unmarked(img.get(self.head + NEXT)?);
        for _ in 0..img.bound() {
            if at == self.tail {
                return Ok(());
            }
            if at == 0 {
                return Err(format!(
                    "the list ends in null before its tail (after key {prev_key})"
                ));
            }
            let key = img.get(at + KEY)?;
            let next = img.get(at + NEXT)?;
            if key <= prev_key {
                return Err(format!("keys out of order: {key} after {prev_key}"));
            }
            if !marked(next) {
                keys.push(key);
            }
            prev_key = key;
            at = unmarked(next);
        }
        Err("the list has a cycle".into())
    }
}

/// The whole set as one chain.
#[derive(Clone, Copy, Debug)]
pub struct List(pub Chain);

impl Lfd for List {
    const KIND: LfdKind = LfdKind::List;

    async fn create<M: PMem>(m: &M, mutant: Option<Mutant>) -> List {
        List(Chain::create(m, None, mutant).await)
    }

    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome {
        match op {
            Op::Insert(k) => self.0.insert(m, k).await,
            Op::Delete(k) => self.0.delete(m, k).await,
        }
    }

    fn recover(&self, img: &Image) -> Result<Vec<u64>, String> {
        let mut keys = Vec::new();
        self.0.recover_into(img, &mut keys)?;
        Ok(keys)
    }
}
