//! The TCP wire format shared by nodes, clients and the configuration
//! manager: every stream opens with the role handshake of `tandem_auth`,
//! then a [`Hello`] naming what it carries, then length-prefixed bincode
//! frames. Writers
//! append many frames to one buffer and send it with one write
//! (coalescing, as Hermes packs messages).

use std::io::{self, BufReader, Read};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::protocol::{Config, NodeId, SessionId};

/// Refuse frames larger than this (a corrupt or hostile stream).
pub const MAX_FRAME: usize = 64 << 20;

/// A stream's first frame, once its role handshake (`tandem_auth`) is done:
/// what the stream carries. A node takes `Peer` only from a stream that
/// authenticated as that peer, and `Client`/`Stats` only from the client role.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Hello {
    /// Node `node` will send protocol messages on this stream.
    Peer { node: NodeId },
    /// A client session stream.
    Client,
    /// Node `node` talks to the configuration manager; `boot` names this
    /// run of its process (a restart brings a new one).
    ToManager { node: NodeId, boot: u64 },
    /// Ask a node for its [`NodeStats`] (one frame back).
    Stats,
}

impl Hello {
    /// The role (and id) a stream must have authenticated as to say this.
    pub fn speaker(&self) -> (tandem_auth::Role, u64) {
        use tandem_auth::Role;
        match *self {
            Hello::Peer { node } | Hello::ToManager { node, .. } => (Role::Peer, node as u64),
            Hello::Client | Hello::Stats => (Role::Client, 0),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientReq<Op> {
    pub session: SessionId,
    pub req: u64,
    pub op: Op,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientResp<R> {
    pub session: SessionId,
    pub req: u64,
    pub result: R,
}

/// What a node has done since it started (`Hello::Stats`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeStats {
    /// Protocol messages sent to peers, and received from them.
    pub sent: u64,
    pub received: u64,
    /// Client requests taken and replies sent.
    pub requests: u64,
    pub replies: u64,
    pub persists: u64,
    /// TCP writes to peers (each carries the messages coalesced since the last).
    pub peer_writes: u64,
    /// Streams to peers that were up and broke or fell silent (the runtime
    /// then dials again).
    pub links_lost: u64,
    /// System calls the runtime made on its streams and its poller (reads,
    /// writes, waits), counted by itself.
    pub syscalls: u64,
    /// CPU ns the node's process has used, and its event loop's thread
    /// (the one that steps the protocol, reads and writes the streams).
    pub cpu_ns: u64,
    pub loop_cpu_ns: u64,
}

impl std::ops::AddAssign for NodeStats {
    fn add_assign(&mut self, o: NodeStats) {
        self.sent += o.sent;
        self.received += o.received;
        self.requests += o.requests;
        self.replies += o.replies;
        self.persists += o.persists;
        self.peer_writes += o.peer_writes;
        self.links_lost += o.links_lost;
        self.syscalls += o.syscalls;
        self.cpu_ns += o.cpu_ns;
        self.loop_cpu_ns += o.loop_cpu_ns;
    }
}

/// Node → manager.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Heartbeat {
    pub seq: u64,
    /// The node holds every acknowledged write (it is not waiting for a
    /// copy after being re-added): see `manager.rs`.
    pub caught_up: bool,
    /// The epoch of the last configuration the node has taken in: a node
    /// caught up in an epoch before it was last added is not caught up.
    pub epoch: u64,
}

/// Manager → node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromManager {
    /// The heartbeat `seq` earned a lease.
    Lease {
        seq: u64,
    },
    Config(Config),
}

/// Append one frame (`u32` length, then the bincode of `v`) to `buf`.
pub fn put<T: Serialize>(buf: &mut Vec<u8>, v: &T) {
    let at = buf.len();
    buf.extend_from_slice(&[0; 4]);
    bincode::serialize_into(&mut *buf, v).expect("serializing into a Vec cannot fail");
    let len = (buf.len() - at - 4) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// One frame as bytes.
pub fn frame<T: Serialize>(v: &T) -> Vec<u8> {
    let mut b = Vec::new();
    put(&mut b, v);
    b
}

/// Reads frames from a stream.
pub struct Frames<R: Read> {
    r: BufReader<R>,
    buf: Vec<u8>,
}

impl<R: Read> Frames<R> {
    pub fn new(r: R) -> Self {
        Frames {
            r: BufReader::with_capacity(256 << 10, r),
            buf: Vec::new(),
        }
    }

    /// The next frame, or None at a clean end of stream.
    pub fn next<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        let mut len = [0u8; 4];
        match self.r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame of {len} bytes exceeds {MAX_FRAME}"),
            ));
        }
        // Grow the buffer as the bytes arrive, not to the claimed length up
        // front: a peer that sends a 4-byte prefix and nothing more (before
        // any secret was checked) must not cost `MAX_FRAME` bytes.
        self.buf.clear();
        (&mut self.r).take(len as u64).read_to_end(&mut self.buf)?;
        if self.buf.len() < len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        bincode::deserialize(&self.buf)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}
