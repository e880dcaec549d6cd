//! The Michael–Scott lock-free queue (PODC'96): nodes `[value, next]`, a
//! sentinel at `head`; enqueue links at `tail.next` (its linearization)
//! and swings `tail`; dequeue swings `head` (its linearization).

use super::{Image, Lfd, LfdKind, Op, Outcome};
use crate::trace::Sync::{Acquire, Plain, Release};
use crate::{Mutant, PMem};

const VALUE: u64 = 0;
const NEXT: u64 = 1;

#[derive(Clone, Copy, Debug)]
pub struct Queue {
    head: u64,
    tail: u64,
    mutant: Option<Mutant>,
}

async fn node<M: PMem>(m: &M, value: u64) -> u64 {
    let n = m.alloc(2);
    m.store(n + VALUE, value, Plain).await;
    m.store(n + NEXT, 0, Plain).await;
    n
}

impl Queue {
    async fn enqueue<M: PMem>(&self, m: &M, value: u64) -> Outcome {
        let n = node(m, value).await;
        let link = if self.mutant == Some(Mutant::QueueRelaxedLink) {
            Plain
        } else {
            Release
        };
        loop {
            let last = m.load(self.tail, Acquire).await;
            let next = m.load(last + NEXT, Acquire).await;
            if last != m.load(self.tail, Acquire).await {
                continue;
            }
            if next != 0 {
                let _ = m.cas(self.tail, last, next, Release).await;
                continue;
            }
            if m.cas(last + NEXT, 0, n, link).await.is_ok() {
                let out = Outcome::done(m, 0);
                let _ = m.cas(self.tail, last, n, Release).await;
                return out;
            }
        }
    }

    async fn dequeue<M: PMem>(&self, m: &M) -> Outcome {
        loop {
            let first = m.load(self.head, Acquire).await;
            let last = m.load(self.tail, Acquire).await;
            let next = m.load(first + NEXT, Acquire).await;
            if first != m.load(self.head, Acquire).await {
                continue;
            }
            if first == last {
                if next == 0 {
                    return Outcome::fail();
                }
                let _ = m.cas(self.tail, last, next, Release).await;
                continue;
            }
            let value = m.load(next + VALUE, Plain).await;
            if m.cas(self.head, first, next, Release).await.is_ok() {
                return Outcome::done(m, value);
            }
        }
    }
}

impl Lfd for Queue {
    const KIND: LfdKind = LfdKind::Queue;

    async fn create<M: PMem>(m: &M, mutant: Option<Mutant>) -> Queue {
        let sentinel = node(m, 0).await;
        // head and tail on lines of their own, as real queues pad them.
        let roots = m.alloc(16);
        m.store(roots, sentinel, Plain).await;
        m.store(roots + 8, sentinel, Plain).await;
        Queue {
            head: roots,
            tail: roots + 8,
            mutant,
        }
    }

    async fn apply<M: PMem>(&self, m: &M, op: Op) -> Outcome {
        match op {
            Op::Insert(v) => self.enqueue(m, v).await,
            Op::Delete(_) => self.dequeue(m).await,
        }
    }

    /// The values after the sentinel, front to back; the chain must end in
    /// null and every node on it must be written.
    fn recover(&self, img: &Image) -> Result<Vec<u64>, String> {
        let tail = img.get(self.tail)?;
        img.get(tail + NEXT).map_err(|e| format!("tail: {e}"))?;
        let mut at = img.get(img.get(self.head)? + NEXT)?;
        let mut values = Vec::new();
        for _ in 0..img.bound() {
            if at == 0 {
                return Ok(values);
            }
            values.push(img.get(at + VALUE)?);
            at = img.get(at + NEXT)?;
        }
        Err("the queue has a cycle".into())
    }
}
