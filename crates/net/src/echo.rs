//! The runtime's own ceiling on this machine: two processes bouncing small
//! messages through the same host (event loop, coalesced writes, reader
//! threads) that the stores use. `tandem net echo` reports messages per
//! second; a store's messages per second are compared with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::protocol::{Command, Config, Durable, Input, NodeFactory, NodeId, Nvm, Protocol};

/// A 16-byte message, about the size of a DDP ACK or VAL.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Ping {
    pub seq: u64,
    pub key: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NoRecord;

impl Durable for NoRecord {
    type Slot = ();
    fn slot(&self) {}
}

const RESEND_NS: u64 = 100_000_000;

/// Node 0 keeps `window` messages in flight to node 1, which sends each back.
pub struct Echo {
    me: NodeId,
    window: u64,
    started: bool,
    /// Messages received by this node (shared with the process that reports).
    pub received: Arc<AtomicU64>,
}

impl Protocol for Echo {
    type Msg = Ping;
    type Op = ();
    type Reply = ();
    type Record = NoRecord;

    fn step(&mut self, now: u64, input: Input<Self>, out: &mut Vec<Command<Self>>) {
        match input {
            Input::Recv { from, msg } => {
                self.started = true;
                self.received.fetch_add(1, Ordering::Relaxed);
                out.push(Command::Send { to: from, msg });
            }
            // Until the first message comes back (the peer may not be up
            // yet, and a link that is down drops), send the window again.
            Input::Config(_) | Input::Timer { .. } if self.me == 0 && !self.started => {
                for seq in 0..self.window {
                    out.push(Command::Send {
                        to: 1,
                        msg: Ping { seq, key: seq },
                    });
                }
                out.push(Command::SetTimer {
                    token: 0,
                    at_ns: now + RESEND_NS,
                });
            }
            _ => {}
        }
    }
}

pub struct EchoFactory {
    pub window: u64,
    pub received: Arc<AtomicU64>,
}

impl NodeFactory<Echo> for EchoFactory {
    fn start(&self, me: NodeId, _config: &Config) -> Echo {
        Echo {
            me,
            window: self.window,
            started: false,
            received: self.received.clone(),
        }
    }
    fn recover(&self, me: NodeId, config: &Config, _nvm: &Nvm<NoRecord>) -> Echo {
        self.start(me, config)
    }
}
