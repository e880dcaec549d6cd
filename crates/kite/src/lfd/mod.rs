//! The paper's lock-free data structures on Kite's API (Kite paper
//! §7.3): Treiber stack, Michael–Scott queue and Harris–Michael list,
//! written once as `async` code against [`Api`], one Kite call at a time,
//! with relaxed accesses for node fields and acquires/CAS for the links.
//!
//! In the simulator each session's program is a future the check harness
//! polls: it stops at every call, the harness issues the call as the
//! session's next operation and resumes it with the reply ([`LfdWorkload`]).

pub mod list;
pub mod queue;
pub mod stack;
mod workload;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::types::*;

pub use workload::{Both, LfdBug, LfdKind, LfdLog, LfdWorkload};

/// The call was lost with its node (crash): the operation's outcome is
/// unknown and the session starts over elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost;

/// How a CAS failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasErr {
    /// Through consensus: `value` is the current one, acquired.
    Remote(Value),
    /// On the local replica (weak CAS): a hint, not synchronized.
    Local(Value),
}

/// The mailbox between a session's program and the harness.
#[derive(Default)]
pub struct Chan {
    op: Cell<Option<Op>>,
    reply: Cell<Option<Result<Reply, Lost>>>,
    now: Cell<u64>,
}

/// Kite's API for a program (one session).
#[derive(Clone)]
pub struct Api(pub Rc<Chan>);

struct Call<'a> {
    chan: &'a Chan,
    op: Option<Op>,
}

impl Future for Call<'_> {
    type Output = Result<Reply, Lost>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(op) = self.op.take() {
            self.chan.op.set(Some(op));
            return Poll::Pending;
        }
        match self.chan.reply.take() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl Api {
    pub fn call(&self, op: Op) -> impl Future<Output = Result<Reply, Lost>> + '_ {
        Call {
            chan: &self.0,
            op: Some(op),
        }
    }

    /// The harness clock at the last call's answer.
    pub fn now(&self) -> u64 {
        self.0.now.get()
    }

    async fn value(&self, op: Op) -> Result<Value, Lost> {
        match self.call(op).await? {
            Reply::Value { value, .. } => Ok(value),
            r => panic!("{op:?} answered {r:?}"),
        }
    }

    pub async fn read(&self, k: Key) -> Result<Value, Lost> {
        self.value(Op::Read(k)).await
    }

    pub async fn acquire(&self, k: Key) -> Result<Value, Lost> {
        self.value(Op::Acquire(k)).await
    }

    pub async fn write(&self, k: Key, v: Value) -> Result<(), Lost> {
        self.call(Op::Write(k, v)).await.map(|_| ())
    }

    pub async fn release(&self, k: Key, v: Value) -> Result<(), Lost> {
        self.call(Op::Release(k, v)).await.map(|_| ())
    }

    /// A weak CAS (fails locally when the local value differs).
    pub async fn cas(
        &self,
        key: Key,
        expected: Value,
        new: Value,
    ) -> Result<Result<(), CasErr>, Lost> {
        Ok(
            match self
                .call(Op::Cas {
                    key,
                    expected,
                    new,
                    weak: true,
                })
                .await?
            {
                Reply::Rmw { .. } => Ok(()),
                Reply::CasFail {
                    value, local: true, ..
                } => Err(CasErr::Local(value)),
                Reply::CasFail { value, .. } => Err(CasErr::Remote(value)),
                r => panic!("CAS answered {r:?}"),
            },
        )
    }
}

/// The key of field `f` of node `id` (ids 1.. are allocated by sessions;
/// id 0 is a structure's own sentinel, `sentinel` its key base).
pub fn field(sentinel: Key, id: u64, f: u64) -> Key {
    if id == 0 {
        sentinel + f
    } else {
        NODES + id * 64 + f
    }
}

/// Where node fields live in the key space (above every other key).
pub const NODES: Key = 1 << 40;
/// Structures' roots and sentinels: `ROOTS + structure * 64 + ...`.
pub const ROOTS: Key = 1 << 32;

/// A node id no other session uses: `(session + 1) << 24 | n`.
pub fn node_id(session: u64, n: u64) -> u64 {
    ((session + 1) << 24) | n
}
