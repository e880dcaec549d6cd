//! Kite (or the ZAB baseline, which takes Kite's client API) behind Redis's
//! protocol (`tandem node --system kite --resp ADDR`): each RESP connection
//! is a client session of the node.
//!
//! Kite's values are 64-bit words, so this front end stores 64-bit
//! integers; a Redis key is hashed to Kite's 64-bit key (FNV-1a), as DDP's
//! front end does (`docs/RESP.md`). A key never written reads as nil.
//!
//! - `GET` and `SET k n` are Kite's relaxed reads and writes (Eventual
//!   Store): they order only behind the session's acquires and releases;
//! - `KITE.ACQUIRE k` reads with acquire semantics (`ABD`), `KITE.RELEASE
//!   k n` writes with release semantics: everything the session wrote
//!   before is visible to whoever acquires what it released;
//! - `INCR`, `INCRBY`, `DECR`, `DECRBY` are Kite's fetch-and-add (per-key
//!   Paxos), with acquire and release semantics;
//! - `KITE.CAS k expected new` is Kite's compare-and-swap: `1` if it
//!   swapped, `0` if the value was not `expected`.
//!
//! The ZAB baseline answers `GET`, `SET`, `KITE.ACQUIRE` and `KITE.RELEASE`
//! (reads are local and sequentially consistent, writes totally ordered)
//! and refuses `INCR` and `KITE.CAS`: it has no read-modify-write.
//!
//! Refused: transactions (`MULTI`), several keys at once (`MGET`, `MSET`),
//! deletes, and `SET`'s options. A reply that never came answers
//! `-TRYAGAIN` for a read and `-INDOUBT` for anything that writes.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tandem_auth::Keyring;
use tandem_kite::types::{Op, Reply as KiteReply};
use tandem_net::client::Client;
use tandem_resp::blocking::{self, Bounds, Handler};
use tandem_resp::control::{name, unknown, wrong_args};
use tandem_resp::{Conn, Reply, Request};

/// What a node's RESP front end serves.
pub struct KiteResp {
    pub node: u16,
    /// `kite` or `zab`.
    pub system: String,
    pub node_addr: SocketAddr,
    pub keys: Keyring,
    pub password: Option<String>,
    pub bounds: Bounds,
}

struct Shared {
    cfg: KiteResp,
    front: blocking::Shared,
}

/// Serve RESP on `listener` from a thread of its own.
pub fn spawn(cfg: KiteResp, listener: TcpListener) -> std::io::Result<std::thread::JoinHandle<()>> {
    let info = vec![("tandem_node".into(), cfg.node.to_string())];
    let store = format!("{} (node {})", cfg.system, cfg.node);
    let front = blocking::Shared::new(cfg.password.clone(), store, info);
    let shared = Arc::new(Shared { cfg, front });
    let (bounds, clients) = (shared.cfg.bounds, shared.front.clients.clone());
    std::thread::Builder::new()
        .name("resp".into())
        .spawn(move || {
            blocking::serve(listener, bounds, clients, move |id| {
                KiteConn::new(shared.clone(), id)
            })
        })
}

const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Parse a data command into Kite's operation (`None`: not one).
fn parse(req: &Request) -> Option<Result<Op, Reply>> {
    let n = name(req);
    let a = &req[1..];
    let key = |k: &[u8]| tandem_resp::fnv1a64(k);
    let int = |v: &[u8]| {
        tandem_resp::canonical_int(v).ok_or_else(|| tandem_resp::not_an_integer("Kite", v))
    };
    let arity = |ok: bool| if ok { Ok(()) } else { Err(wrong_args(&n)) };
    Some(match n.as_str() {
        "GET" => arity(a.len() == 1).map(|_| Op::Read(key(&a[0]))),
        "SET" if a.len() > 2 => Err(Reply::err("ERR SET's options (NX, XX, GET, expiry) are not Kite's: use KITE.CAS for a conditional write")),
        "SET" => arity(a.len() == 2).and_then(|_| Ok(Op::Write(key(&a[0]), int(&a[1])? as u64))),
        "KITE.ACQUIRE" => arity(a.len() == 1).map(|_| Op::Acquire(key(&a[0]))),
        "KITE.RELEASE" => arity(a.len() == 2).and_then(|_| Ok(Op::Release(key(&a[0]), int(&a[1])? as u64))),
        "INCR" | "DECR" => arity(a.len() == 1).map(|_| Op::Faa(key(&a[0]), if n == "INCR" { 1 } else { u64::MAX })),
        "INCRBY" | "DECRBY" => arity(a.len() == 2).and_then(|_| {
            let by = int(&a[1])?;
            let by = if n == "DECRBY" { by.wrapping_neg() } else { by };
            Ok(Op::Faa(key(&a[0]), by as u64))
        }),
        "KITE.CAS" => arity(a.len() == 3).and_then(|_| {
            Ok(Op::Cas { key: key(&a[0]), expected: int(&a[1])? as u64, new: int(&a[2])? as u64, weak: false })
        }),
        "MULTI" | "EXEC" | "DISCARD" | "WATCH" => Err(Reply::err("ERR Kite has no transactions: use KITE.ACQUIRE and KITE.RELEASE to order, KITE.CAS or INCR to update atomically")),
        "MGET" | "MSET" | "EXISTS" => Err(Reply::err("ERR Kite reads and writes one key at a time")),
        "DEL" | "UNLINK" => Err(Reply::err("ERR Kite's keys cannot be deleted")),
        _ => return None,
    })
}

/// An integer reply's text.
fn bulk(v: u64) -> Reply {
    Reply::Bulk((v as i64).to_string().into_bytes())
}

/// What Kite answered, as Redis would answer the command.
fn answer(op: &Op, r: KiteReply) -> Reply {
    match (op, r) {
        (Op::Read(_) | Op::Acquire(_), KiteReply::Value { version, .. })
            if version == Default::default() =>
        {
            Reply::Nil
        }
        (Op::Read(_) | Op::Acquire(_), KiteReply::Value { value, .. }) => bulk(value),
        (Op::Write(..) | Op::Release(..), KiteReply::Written { .. }) => Reply::ok(),
        (Op::Faa(..), KiteReply::Rmw { new, .. }) => Reply::Int(new as i64),
        (Op::Cas { .. }, KiteReply::Rmw { .. }) => Reply::Int(1),
        (Op::Cas { .. }, KiteReply::CasFail { .. }) => Reply::Int(0),
        (_, other) => Reply::err(format!("ERR unexpected answer from the node: {other:?}")),
    }
}

struct KiteConn {
    shared: Arc<Shared>,
    conn: Conn,
    session: Option<Client<Op, KiteReply>>,
}

impl Handler for KiteConn {
    fn handle(&mut self, req: Request) -> Reply {
        self.shared.front.commands.fetch_add(1, Ordering::Relaxed);
        let n = name(&req);
        if let Some(r) = self.conn.refuse_before_auth(&n) {
            return r;
        }
        let shared = self.shared.clone();
        if let Some(r) = self.conn.control(&shared.front, &n, &req) {
            return r;
        }
        match parse(&req) {
            Some(Ok(Op::Faa(..) | Op::Cas { .. })) if self.shared.cfg.system == "zab" => Reply::err(
                "ERR the ZAB baseline has no read-modify-write (Kite's benchmark runs its fetch-and-add and compare-and-swap as plain writes); INCR and KITE.CAS are Kite's",
            ),
            Some(Ok(op)) => self.call(op),
            Some(Err(e)) => e,
            None => unknown(&req),
        }
    }
    fn closing(&self) -> bool {
        self.conn.closing
    }
}

impl KiteConn {
    fn new(shared: Arc<Shared>, id: u64) -> KiteConn {
        let authed = shared.front.password.is_none();
        KiteConn {
            shared,
            conn: Conn::new(id, authed),
            session: None,
        }
    }

    fn call(&mut self, op: Op) -> Reply {
        if self.session.is_none() {
            let cfg = &self.shared.cfg;
            let sid = tandem_net::client::fresh_session_id();
            match Client::connect(cfg.node_addr, &cfg.keys, sid, CALL_TIMEOUT) {
                Ok(c) => self.session = Some(c),
                Err(e) => {
                    return Reply::err(format!(
                        "TRYAGAIN cannot open a session at this node ({e}); nothing was written"
                    ))
                }
            }
        }
        match self.session.as_mut().expect("opened").call(op) {
            Ok(r) => answer(&op, r),
            Err(e) => {
                self.session = None;
                match op {
                    Op::Read(_) | Op::Acquire(_) => Reply::err(format!("TRYAGAIN the node did not answer ({e})")),
                    _ => Reply::err(format!("INDOUBT the node did not answer ({e}): the write may or may not have taken effect")),
                }
            }
        }
    }
}
