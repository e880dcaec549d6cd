//! Michael's lock-free hash set (SPAA'02): a fixed array of buckets, each a
//! Harris list. The bucket heads are sentinel nodes laid out side by side
//! and share one tail sentinel.

use super::list::Chain;
use super::{Image, Lfd, LfdKind, Op, Outcome};
use crate::{Mutant, PMem};

/// Buckets of a small (checked) set; `create_sized` gives one per key.
pub const SMALL_BUCKETS: u64 = 8;

#[derive(Clone, Copy, Debug)]
pub struct Hash {
    heads: u64,
    buckets: u64,
    tail: u64,
    mutant: Option<Mutant>,
}

impl Hash {
    fn bucket(&self, key: u64) -> Chain {
        let b = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % self.buckets;
        Chain {
            head: self.heads + 2 * b,
            tail: self.tail,
            mutant: self.mutant,
        }
    }
}

impl Lfd for Hash {
    const KIND: LfdKind = LfdKind::Hash;

    async fn create<M: PMem>(m: &M, mutant: Option<Mutant>) -> Hash {
        Self::create_sized(m, mutant, SMALL_BUCKETS as usize).await
    }

    /// Load factor 1: as many buckets as the set is meant to hold.
    async fn create_sized<M: PMem>(m: &M, mutant: Option<Mutant>, size: usize) -> Hash {
        let buckets = (size as u64).max(1);
        let tail = Chain::create(m, None, mutant).await.tail;
        let heads = m.alloc(2 * buckets);
        for b in 0..buckets {
            Chain::init_head(m, heads + 2 * b, tail).await;
        }
        Hash {
            heads,
            buckets,
            tail,
            mutant,
        }
    }

    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome {
        match op {
            Op::Insert(k) => self.bucket(k).insert(m, k).await,
            Op::Delete(k) => self.bucket(k).delete(m, k).await,
        }
    }

    fn recover(&self, img: &Image) -> Result<Vec<u64>, String> {
        let mut keys = Vec::new();
        for b in 0..self.buckets {
            let chain = Chain {
                head: self.heads + 2 * b,
                tail: self.tail,
                mutant: None,
            };
            let from = keys.len();
            chain.recover_into(img, &mut keys)?;
            if let Some(&k) = keys[from..]
                .iter()
                .find(|&&k| self.bucket(k).head != chain.head)
            {
                return Err(format!("key {k} is in bucket {b}, not its own"));
            }
        }
        keys.sort_unstable();
        Ok(keys)
    }
}
