//! The stop-the-world pause of the baselines' recovery (docs/DESIGN.md §4.4–4.5,
//! the Pandora paper §2.3: FORD's locks name no owner, so live coordinators pause
//! and drain before recovery scans for stray locks). Pandora never pauses.
//!
//! The harness sets `paused`; every Tandem session waits at `begin` while it
//! is set, and counts its transaction as active until the transaction's
//! unlocks have landed, so the harness can wait for a quiet store.

use std::cell::{Cell, RefCell};

/// Shared by the harness and every session of one simulated cluster.
#[derive(Debug, Default)]
pub struct Gate {
    pub paused: Cell<bool>,
    /// Transactions in flight, per compute node.
    pub active: RefCell<Vec<usize>>,
}

impl Gate {
    pub fn new(compute_nodes: usize) -> Gate {
        Gate {
            paused: Cell::new(false),
            active: RefCell::new(vec![0; compute_nodes]),
        }
    }

    /// Whether any compute node has a transaction in flight.
    pub fn busy(&self) -> bool {
        self.active.borrow().iter().any(|&a| a > 0)
    }

    /// A compute node joins (it is the next index).
    pub fn add_node(&self) {
        self.active.borrow_mut().push(0);
    }

    /// A compute node crashed: its transactions are no longer in flight
    /// anywhere but in recovery's hands.
    pub fn crashed(&self, node: usize) {
        self.active.borrow_mut()[node] = 0;
    }
}
