//! What the TCP side of the runtime needs beyond the sans-IO protocol: the
//! [`Wire`] bounds a protocol's types must meet to cross the wire, and a
//! writer thread for the configuration manager's streams (the node host
//! itself is one event loop, `host.rs`).

use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc::{channel, Sender};
use std::thread;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::protocol::Protocol;

/// A thread that writes the byte batches it is sent to `s`.
pub fn spawn_writer(mut s: TcpStream) -> Sender<Vec<u8>> {
    let (tx, rx) = channel::<Vec<u8>>();
    thread::spawn(move || {
        while let Ok(b) = rx.recv() {
            if s.write_all(&b).is_err() {
                break;
            }
        }
    });
    tx
}

/// A protocol whose messages, operations, replies and records cross the
/// wire (the bounds the TCP host needs, implied wherever `P: Wire`).
pub trait Wire:
    Protocol<
        Msg: Serialize + DeserializeOwned + Send,
        Op: Serialize + DeserializeOwned + Send,
        Reply: Serialize + DeserializeOwned + Send,
        Record: Serialize + DeserializeOwned,
    > + 'static
{
}

impl<P> Wire for P where
    P: Protocol<
            Msg: Serialize + DeserializeOwned + Send,
            Op: Serialize + DeserializeOwned + Send,
            Reply: Serialize + DeserializeOwned + Send,
            Record: Serialize + DeserializeOwned,
        > + 'static
{
}
