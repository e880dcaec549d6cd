//! Michael's lock-free hash set (SPAA'02): a fixed array of buckets, each a
//! Harris list (sharing one tail sentinel).

use super::list::Chain;
use super::{Image, Lfd, LfdKind, Op, Outcome};
use crate::{Mutant, PMem};

/// Buckets per set (a power of two). The bench prefills thousands of keys,
/// so chains stay a few nodes long, as in Synchrobench's load factor.
pub const BUCKETS: usize = 64;

#[derive(Clone, Copy, Debug)]
pub struct Hash {
    buckets: [Chain; BUCKETS],
}

impl Hash {
    fn bucket(&self, key: u64) -> &Chain {
        &self.buckets[(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % BUCKETS]
    }
}

impl Lfd for Hash {
    const KIND: LfdKind = LfdKind::Hash;

    async fn create<M: PMem>(m: &M, mutant: Option<Mutant>) -> Hash {
        let first = Chain::create(m, None, mutant).await;
        let mut buckets = [first; BUCKETS];
        for b in buckets.iter_mut().skip(1) {
            *b = Chain::create(m, Some(first.tail), mutant).await;
        }
        Hash { buckets }
    }

    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome {
        match op {
            Op::Insert(k) => self.bucket(k).insert(m, k).await,
            Op::Delete(k) => self.bucket(k).delete(m, k).await,
        }
    }

    fn recover(&self, img: &Image) -> Result<Vec<u64>, String> {
        let mut keys = Vec::new();
        for b in &self.buckets {
            b.recover_into(img, &mut keys)?;
        }
        keys.sort_unstable();
        Ok(keys)
    }
}
