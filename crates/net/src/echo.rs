//! The runtime's own ceiling on this machine: processes bouncing small
//! messages through the same host (event loop, coalesced writes, reader
//! threads) that the stores use. Every node keeps `window` requests in
//! flight to every other node; a node answers each request it receives,
//! and sends a new request for each answer. `tandem net echo` reports
//! messages per second and CPU per message; a store's are compared with it,
//! at the same number of processes and about the same window per link.

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
/// The bit of `Ping::seq` that marks an answer.
const ANSWER: u64 = 1 << 63;

/// One node of the echo.
pub struct Echo {
    me: NodeId,
    window: u64,
    members: Vec<NodeId>,
    /// Peers heard from (each has our window in flight, or had).
    heard: Vec<NodeId>,
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
                if !self.heard.contains(&from) {
                    self.heard.push(from);
                }
                self.received.fetch_add(1, Ordering::Relaxed);
                // An answer asks for the next request; a request for its answer.
                let seq = msg.seq ^ ANSWER;
                out.push(Command::Send {
                    to: from,
                    msg: Ping { seq, key: msg.key },
                });
            }
            // Until a peer is heard from (it may not be up yet, and a link
            // that is down drops), send it the window again.
            Input::Config(_) | Input::Timer { .. } if self.heard.len() + 1 < self.members.len() => {
                let me = self.me;
                let quiet = self
                    .members
                    .iter()
                    .filter(|&&m| m != me && !self.heard.contains(&m));
                for &to in quiet {
                    for seq in 0..self.window {
                        out.push(Command::Send {
                            to,
                            msg: Ping { seq, key: seq },
                        });
                    }
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
    fn start(&self, me: NodeId, config: &Config) -> Echo {
        Echo {
            me,
            window: self.window,
            members: config.members.clone(),
            heard: Vec::new(),
            received: self.received.clone(),
        }
    }
    fn recover(&self, me: NodeId, config: &Config, _nvm: &Nvm<NoRecord>) -> Echo {
        self.start(me, config)
    }
}
