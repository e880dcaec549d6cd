//! The threads around a node's event loop: the acceptor and one reader per
//! inbound stream, one writer per peer and per client, and the link to the
//! configuration manager. They only move bytes; the event loop (host.rs)
//! owns the protocol.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::protocol::{NodeId, Protocol};
use crate::wire::{frame, ClientReq, Frames, FromManager, Heartbeat, Hello};

/// What the threads hand the event loop.
pub enum Event<P: Protocol> {
    Peer(NodeId, P::Msg),
    Client(u64, ClientReq<P::Op>),
    ClientConn(u64, Sender<Vec<u8>>),
    ClientGone(u64),
    Manager(FromManager),
    /// The manager link is up: heartbeats go into this sender.
    ManagerConn(Sender<Vec<u8>>),
    Stop,
}

/// How long a writer waits between attempts to reach its peer.
const RECONNECT: Duration = Duration::from_millis(50);

/// Accept streams on `listener` and feed what they carry to `tx`.
pub fn spawn_acceptor<P: Wire>(listener: TcpListener, secret: u64, tx: Sender<Event<P>>) {
    thread::Builder::new().name("accept".into()).spawn(move || {
        let mut next_conn = 0u64;
        for s in listener.incoming().flatten() {
            next_conn += 1;
            let (tx, id) = (tx.clone(), next_conn);
            let _ = thread::Builder::new().name("reader".into()).spawn(move || {
                if let Err(e) = serve_stream::<P>(s, secret, id, &tx) {
                    log::debug!("stream {id}: {e}");
                }
            });
        }
    }).expect("spawn the acceptor");
}

fn serve_stream<P: Wire>(s: TcpStream, secret: u64, id: u64, tx: &Sender<Event<P>>) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut frames = Frames::new(s.try_clone()?);
    let hello: Hello = frames.next()?.ok_or_else(|| io::Error::other("closed before its hello"))?;
    if hello.secret() != secret {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "wrong cluster secret"));
    }
    match hello {
        Hello::Peer { node, .. } => {
            while let Some(msg) = frames.next::<P::Msg>()? {
                if tx.send(Event::Peer(node, msg)).is_err() {
                    break;
                }
            }
        }
        Hello::Client { .. } => {
            let _ = tx.send(Event::ClientConn(id, spawn_writer(s)));
            while let Some(req) = frames.next::<ClientReq<P::Op>>()? {
                if tx.send(Event::Client(id, req)).is_err() {
                    break;
                }
            }
            let _ = tx.send(Event::ClientGone(id));
        }
        Hello::ToManager { .. } => return Err(io::Error::other("a manager link reached a node")),
    }
    Ok(())
}

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

/// A writer to peer `to` at `addr` that connects (and reconnects) by
/// itself; batches sent while it is not connected are dropped, as a lossy
/// network would (the protocols retransmit).
pub fn spawn_peer_writer(me: NodeId, to: NodeId, addr: SocketAddr, secret: u64) -> Sender<Vec<u8>> {
    let (tx, rx) = channel::<Vec<u8>>();
    thread::Builder::new().name(format!("to-{to}")).spawn(move || peer_writer(me, addr, secret, rx)).expect("spawn a peer writer");
    tx
}

fn peer_writer(me: NodeId, addr: SocketAddr, secret: u64, rx: Receiver<Vec<u8>>) {
    loop {
        let mut s = match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => s,
            Err(_) => match rx.recv_timeout(RECONNECT) {
                Err(RecvTimeoutError::Disconnected) => return,
                _ => continue,
            },
        };
        let _ = s.set_nodelay(true);
        if s.write_all(&frame(&Hello::Peer { node: me, secret })).is_err() {
            continue;
        }
        loop {
            match rx.recv() {
                Ok(b) if s.write_all(&b).is_ok() => {}
                Ok(_) => break,
                Err(_) => return,
            }
        }
    }
}

/// The link to the configuration manager: (re)connects, forwards what the
/// manager says, and hands the loop a sender for heartbeats.
pub fn spawn_manager_link<P: Wire>(me: NodeId, addr: SocketAddr, secret: u64, tx: Sender<Event<P>>) {
    thread::Builder::new().name("manager".into()).spawn(move || loop {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            let _ = s.set_nodelay(true);
            if let Ok(mut w) = s.try_clone() {
                if w.write_all(&frame(&Hello::ToManager { node: me, secret })).is_ok() && tx.send(Event::ManagerConn(spawn_writer(w))).is_ok() {
                    let mut frames = Frames::new(s);
                    while let Ok(Some(m)) = frames.next::<FromManager>() {
                        if tx.send(Event::Manager(m)).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        thread::sleep(RECONNECT);
    }).expect("spawn the manager link");
}

/// A heartbeat frame.
pub fn heartbeat(seq: u64) -> Vec<u8> {
    frame(&Heartbeat { seq })
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
