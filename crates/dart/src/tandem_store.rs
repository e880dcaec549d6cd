//! The [`TransactionalStore`] adapter for Tandem (pandora, ford,
//! traditional; docs/DESIGN.md §4.3–4.4) on any fabric: one session is one
//! `dkvs::Coordinator`. The adapter only maps the litmus API onto the
//! coordinator's and its typed errors onto [`TxFailure`]; it never looks at
//! slots, locks or logs (DART is black-box, thesis §5.1).
//!
//! On the simulator a session may carry a [`Gate`]: ford and traditional
//! recovery stop the world, so `begin` waits while the gate is paused and a
//! transaction counts as active until its unlocks have landed.

use std::rc::Rc;

use tandem_dkvs::{Coordinator, TableId, Transaction, TxError};
use tandem_fabric::Fabric;
use tandem_sim::SimHandle;

use tandem_cluster::procs::follow::{Gate as Gate_, InFlight};

use crate::gate::Gate;
use crate::store::{StoreTx, TransactionalStore, TxFailure};
use crate::value::Value;

/// The one table every litmus object lives in.
pub const LITMUS_TABLE: TableId = 0;

/// Stop-the-world participation of a simulated session.
pub struct SimPause {
    pub gate: Rc<Gate>,
    pub sim: SimHandle,
    /// 0-based compute node of this session.
    pub node: usize,
    /// Simulator task tag of that compute node (crashing it drops the waiter too).
    pub tag: u32,
}

/// One Tandem coordinator as a DART session.
pub struct TandemStore<F: Fabric> {
    coord: Coordinator<F>,
    pause: Option<SimPause>,
    /// Whether a transaction of this session is counted in the gate.
    counted: bool,
    /// Over processes: the compute node's memory-reconfiguration gate
    /// (docs/DESIGN.md §4.6); a transaction waits while it is held.
    hold: Option<Rc<Gate_>>,
}

impl<F: Fabric> TandemStore<F> {
    pub fn new(coord: Coordinator<F>) -> Self {
        TandemStore {
            coord,
            pause: None,
            counted: false,
            hold: None,
        }
    }

    /// Pass `gate` before every transaction (a `litmus-worker` process).
    pub fn with_gate(mut self, gate: Rc<Gate_>) -> Self {
        self.hold = Some(gate);
        self
    }

    pub fn with_pause(coord: Coordinator<F>, pause: SimPause) -> Self {
        TandemStore {
            coord,
            pause: Some(pause),
            counted: false,
            hold: None,
        }
    }

    pub fn coordinator(&self) -> &Coordinator<F> {
        &self.coord
    }

    /// Hand the last transaction's unlocks to a background task that marks
    /// it inactive once they land (a stop-the-world recovery must not start
    /// while a live coordinator's unlock is in flight).
    pub fn settle(&mut self) {
        let unlocks = self.coord.take_unlocks();
        match &self.pause {
            Some(p) if self.counted => {
                self.counted = false;
                let (gate, node) = (p.gate.clone(), p.node);
                p.sim.spawn(p.tag, async move {
                    unlocks.await;
                    gate.active.borrow_mut()[node] -= 1;
                });
            }
            _ => drop(unlocks),
        }
    }
}

fn failure(e: TxError, committing: bool) -> TxFailure {
    match e {
        // A pipelined write's missing key surfaces at commit, which aborts.
        TxError::NotFound | TxError::AlreadyExists if committing => {
            TxFailure::Aborted(e.to_string())
        }
        TxError::NotFound => TxFailure::NotFound,
        TxError::AlreadyExists => TxFailure::AlreadyExists,
        TxError::Aborted(r) => TxFailure::Aborted(r.name().to_string()),
        // Data is written only by `commit`: before it, losing access means
        // nothing of the transaction can be visible.
        other if !committing => TxFailure::Aborted(other.to_string()),
        other => TxFailure::Unknown(other.to_string()),
    }
}

impl<F: Fabric> TransactionalStore for TandemStore<F> {
    type Tx<'a> = TandemTx<'a, F>;

    async fn begin(&mut self) -> Result<TandemTx<'_, F>, TxFailure> {
        self.settle();
        if let Some(p) = &self.pause {
            while p.gate.paused.get() {
                p.sim.sleep(1_000).await;
            }
            p.gate.active.borrow_mut()[p.node] += 1;
            self.counted = true;
        }
        let in_flight = match &self.hold {
            Some(g) => {
                // A worker process's verbs on mapped regions (shm) complete
                // without suspending: let its other clients and its
                // memory follower run between transactions.
                tokio::task::yield_now().await;
                Some(g.enter().await)
            }
            None => None,
        };
        Ok(TandemTx {
            tx: self.coord.begin(),
            _in_flight: in_flight,
        })
    }
}

/// An open Tandem transaction.
pub struct TandemTx<'a, F: Fabric> {
    tx: Transaction<'a, F>,
    /// Counted in the memory-reconfiguration gate until it ends.
    _in_flight: Option<InFlight>,
}

impl<'a, F: Fabric> StoreTx for TandemTx<'a, F> {
    async fn read(&mut self, key: u64) -> Result<Option<Value>, TxFailure> {
        let v = self
            .tx
            .read(LITMUS_TABLE, key)
            .await
            .map_err(|e| failure(e, false))?;
        Ok(v.and_then(|b| Value::decode(&b)))
    }

    async fn write(&mut self, key: u64, value: Value) -> Result<(), TxFailure> {
        self.tx
            .write(LITMUS_TABLE, key, &value.encode())
            .await
            .map_err(|e| failure(e, false))
    }

    async fn insert(&mut self, key: u64, value: Value) -> Result<(), TxFailure> {
        self.tx
            .insert(LITMUS_TABLE, key, &value.encode())
            .await
            .map_err(|e| failure(e, false))
    }

    async fn delete(&mut self, key: u64) -> Result<(), TxFailure> {
        self.tx
            .delete(LITMUS_TABLE, key)
            .await
            .map_err(|e| failure(e, false))
    }

    async fn commit(self) -> Result<(), TxFailure> {
        self.tx.commit().await.map_err(|e| failure(e, true))
    }

    async fn abort(self) {
        self.tx.abort().await;
    }
}
