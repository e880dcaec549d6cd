//! The Rust client library: one closed-loop session over TCP to any node
//! (the stores are leaderless). The CLI uses the same wire protocol.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::protocol::SessionId;
use crate::wire::{frame, ClientReq, ClientResp, Frames, Hello};

pub struct Client<Op, R> {
    w: TcpStream,
    frames: Frames<TcpStream>,
    session: SessionId,
    next_req: u64,
    addr: SocketAddr,
    _types: std::marker::PhantomData<(Op, R)>,
}

impl<Op: Serialize, R: DeserializeOwned> Client<Op, R> {
    /// Connect session `session` (unique in the cluster) to the node at `addr`.
    pub fn connect(addr: SocketAddr, secret: u64, session: SessionId, timeout: Duration) -> io::Result<Self> {
        let w = TcpStream::connect_timeout(&addr, timeout).map_err(|e| io::Error::new(e.kind(), format!("cannot reach node at {addr}: {e}")))?;
        w.set_nodelay(true)?;
        w.set_read_timeout(Some(timeout))?;
        let mut c = Client { frames: Frames::new(w.try_clone()?), w, session, next_req: 0, addr, _types: std::marker::PhantomData };
        c.w.write_all(&frame(&Hello::Client { secret }))?;
        Ok(c)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Send `op` and wait for its reply (a timeout is an error: outcome unknown).
    pub fn call(&mut self, op: Op) -> io::Result<R> {
        let req = self.next_req;
        self.next_req += 1;
        self.w.write_all(&frame(&ClientReq { session: self.session, req, op }))?;
        loop {
            let r: ClientResp<R> = self.frames.next()?.ok_or_else(|| io::Error::new(io::ErrorKind::ConnectionAborted, format!("node at {} closed the session", self.addr)))?;
            if r.req == req && r.session == self.session {
                return Ok(r.result);
            }
        }
    }
}
