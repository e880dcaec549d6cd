//! DDP behind Redis's protocol (`tandem node --resp ADDR`): each RESP
//! connection is a client session of this node, in the node's model.
//!
//! DDP's engine stores 64-bit words, so this front end stores 64-bit
//! integers: `SET k 42` is taken, `SET k hello` is refused with an error
//! saying why (never narrowed). A Redis key is hashed to DDP's 64-bit key
//! (FNV-1a); the engine has no room to keep the key beside the value, so
//! two keys with one hash would be one key (`docs/RESP.md` gives the odds).
//!
//! What each model can give, and what it refuses:
//! - every model: `GET`, `SET` (no options), `EXISTS` of one key;
//! - Transactional models: `MULTI`/`EXEC` (one DDP transaction, run again
//!   when squashed), and `MGET`, `MSET`, `INCR`… as transactions of their
//!   own; elsewhere these are refused (`-ERR … needs a transaction`);
//! - Scope persistency: `TANDEM.PERSIST` closes the session's scope and
//!   answers once its writes are durable at every replica;
//! - Causal models: the session carries its causal past, as DDP's clients do.
//!
//! Failures: the node's reply never came (it is down, partitioned or
//! recovering): a read answers `-TRYAGAIN`, a write `-INDOUBT`; the next
//! command opens a new session. A squashed transaction that keeps being
//! squashed answers `-TRYAGAIN`; an unknown commit outcome `-INDOUBT`.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tandem_auth::Keyring;
use tandem_ddp::upd::vector::Vector;
use tandem_ddp::{Consistency, Model, Op, Persistency, Reply as DdpReply};
use tandem_net::client::Client;
use tandem_resp::blocking::{self, Bounds, Handler};
use tandem_resp::control::{name, unknown, wrong_args};
use tandem_resp::{Conn, Reply, Request};

/// What a node's RESP front end serves.
pub struct DdpResp {
    pub node: u16,
    /// Where the node takes client sessions.
    pub node_addr: SocketAddr,
    pub model: Model,
    pub keys: Keyring,
    /// `AUTH` must present this (the client key, hex); none: loopback only.
    pub password: Option<String>,
    pub bounds: Bounds,
    /// Test-only planted bug: answer `GET` from the last value this front
    /// end wrote, without asking the node (a front-end cache), so that a
    /// test can show the history check catch it.
    pub bug_cached_reads: bool,
}

struct Shared {
    cfg: DdpResp,
    front: blocking::Shared,
    cache: std::sync::Mutex<std::collections::HashMap<u64, i64>>,
}

/// Serve RESP on `listener` from a thread of its own.
pub fn spawn(cfg: DdpResp, listener: TcpListener) -> std::io::Result<std::thread::JoinHandle<()>> {
    let info = vec![
        ("tandem_node".into(), cfg.node.to_string()),
        ("tandem_model".into(), cfg.model.to_string()),
    ];
    let store = format!("ddp {} (node {})", cfg.model, cfg.node);
    let front = blocking::Shared::new(cfg.password.clone(), store, info);
    let shared = Arc::new(Shared {
        cfg,
        front,
        cache: Default::default(),
    });
    let (bounds, clients) = (shared.cfg.bounds, shared.front.clients.clone());
    std::thread::Builder::new()
        .name("resp".into())
        .spawn(move || {
            blocking::serve(listener, bounds, clients, move |id| {
                DdpConn::new(shared.clone(), id)
            })
        })
}

/// A data command, its keys hashed and its values parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Cmd {
    Get(u64),
    Set(u64, i64),
    Exists(u64),
    MGet(Vec<u64>),
    MSet(Vec<(u64, i64)>),
    IncrBy(u64, i64),
}

impl Cmd {
    fn writes(&self) -> bool {
        matches!(self, Cmd::Set(..) | Cmd::MSet(_) | Cmd::IncrBy(..))
    }
    /// Whether it runs alone outside a transaction.
    fn single(&self) -> bool {
        matches!(self, Cmd::Get(_) | Cmd::Set(..) | Cmd::Exists(_))
    }
}

fn key(k: &[u8]) -> u64 {
    tandem_resp::fnv1a64(k)
}

fn int(v: &[u8]) -> Option<i64> {
    tandem_resp::canonical_int(v)
}

fn not_int(v: &[u8]) -> Reply {
    tandem_resp::not_an_integer("DDP's engine", v)
}

/// Parse a data command (`None`: not one).
fn parse(req: &Request) -> Option<Result<Cmd, Reply>> {
    let n = name(req);
    let a = &req[1..];
    let arity = |ok: bool| if ok { Ok(()) } else { Err(wrong_args(&n)) };
    Some(match n.as_str() {
        "GET" => arity(a.len() == 1).map(|_| Cmd::Get(key(&a[0]))),
        "SET" if a.len() > 2 => Err(Reply::err("ERR SET's options (NX, XX, GET, expiry) need a compare or a read with the write; DDP's writes are blind")),
        "SET" => arity(a.len() == 2).and_then(|_| int(&a[1]).map(|v| Cmd::Set(key(&a[0]), v)).ok_or_else(|| not_int(&a[1]))),
        "EXISTS" if a.len() > 1 => Err(Reply::err("ERR EXISTS of several keys reads them at once; ask one key at a time")),
        "EXISTS" => arity(a.len() == 1).map(|_| Cmd::Exists(key(&a[0]))),
        "MGET" => arity(!a.is_empty()).map(|_| Cmd::MGet(a.iter().map(|k| key(k)).collect())),
        "MSET" => arity(!a.is_empty() && a.len().is_multiple_of(2)).and_then(|_| {
            a.chunks(2)
                .map(|p| int(&p[1]).map(|v| (key(&p[0]), v)).ok_or_else(|| not_int(&p[1])))
                .collect::<Result<_, _>>()
                .map(Cmd::MSet)
        }),
        "INCR" | "DECR" => arity(a.len() == 1).map(|_| Cmd::IncrBy(key(&a[0]), if n == "INCR" { 1 } else { -1 })),
        "INCRBY" | "DECRBY" => arity(a.len() == 2).and_then(|_| {
            let by = int(&a[1]).ok_or_else(|| not_int(&a[1]))?;
            let by = if n == "DECRBY" { by.checked_neg().ok_or_else(|| not_int(&a[1]))? } else { by };
            Ok(Cmd::IncrBy(key(&a[0]), by))
        }),
        "DEL" | "UNLINK" => Err(Reply::err("ERR DDP's keys cannot be deleted (its engine has writes, not deletes)")),
        _ => return None,
    })
}

/// Why a call to the node failed.
enum Lost {
    /// No session could be opened: nothing was sent.
    Unreachable(String),
    /// Sent, and no answer came.
    Silent(String),
}

/// How many times a squashed transaction is run again.
const TX_TRIES: u32 = 100;
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// One RESP connection: a client session of the node.
struct DdpConn {
    shared: Arc<Shared>,
    conn: Conn,
    session: Option<Client<Op, DdpReply>>,
    /// Causal models: the session's causal past.
    past: Vector,
    /// Scope persistency: the open scope and the writes in it.
    scope: u64,
    scope_writes: u32,
    tx_seq: u64,
    multi: Option<Vec<Cmd>>,
    multi_failed: bool,
}

impl Handler for DdpConn {
    fn handle(&mut self, req: Request) -> Reply {
        self.shared.front.commands.fetch_add(1, Ordering::Relaxed);
        let n = name(&req);
        if let Some(r) = self.conn.refuse_before_auth(&n) {
            return r;
        }
        if self.multi.is_some() && !matches!(n.as_str(), "EXEC" | "DISCARD" | "MULTI" | "QUIT") {
            return self.queue(&req);
        }
        let shared = self.shared.clone();
        if let Some(r) = self.conn.control(&shared.front, &n, &req) {
            return r;
        }
        match n.as_str() {
            "MULTI" | "EXEC" | "DISCARD" => self.tx_command(&n),
            "WATCH" | "UNWATCH" => Reply::err("ERR WATCH is not offered on DDP: its transactions are serializable already (MULTI/EXEC under a Transactional model)"),
            "TANDEM.PERSIST" => self.persist(),
            _ => match parse(&req) {
                Some(Ok(cmd)) => self.data(cmd),
                Some(Err(e)) => e,
                None => unknown(&req),
            },
        }
    }
    fn closing(&self) -> bool {
        self.conn.closing
    }
}

impl DdpConn {
    fn new(shared: Arc<Shared>, id: u64) -> DdpConn {
        let authed = shared.front.password.is_none();
        DdpConn {
            shared,
            conn: Conn::new(id, authed),
            session: None,
            past: Vector::default(),
            scope: 0,
            scope_writes: 0,
            tx_seq: 0,
            multi: None,
            multi_failed: false,
        }
    }

    fn model(&self) -> Model {
        self.shared.cfg.model
    }

    fn transactional(&self) -> bool {
        self.model().c == Consistency::Trans
    }

    fn queue(&mut self, req: &Request) -> Reply {
        match parse(req) {
            Some(Ok(cmd)) => {
                self.multi.as_mut().expect("in MULTI").push(cmd);
                Reply::Simple("QUEUED".into())
            }
            Some(Err(e)) => {
                self.multi_failed = true;
                e
            }
            None => {
                self.multi_failed = true;
                Reply::err(format!(
                    "ERR {} inside MULTI is not supported by this store",
                    name(req)
                ))
            }
        }
    }

    fn tx_command(&mut self, n: &str) -> Reply {
        match (n, self.multi.is_some()) {
            ("MULTI", _) if !self.transactional() => Reply::err(format!(
                "ERR MULTI needs a transaction; model {} has none (the Transactional models have)",
                self.model()
            )),
            ("MULTI", true) => Reply::err("ERR MULTI calls can not be nested"),
            ("MULTI", false) => {
                (self.multi, self.multi_failed) = (Some(Vec::new()), false);
                Reply::ok()
            }
            ("EXEC", false) => Reply::err("ERR EXEC without MULTI"),
            ("DISCARD", false) => Reply::err("ERR DISCARD without MULTI"),
            ("DISCARD", true) => {
                self.multi = None;
                Reply::ok()
            }
            _ => {
                let cmds = self.multi.take().expect("in MULTI");
                if self.multi_failed {
                    return Reply::err(
                        "EXECABORT Transaction discarded because of previous errors.",
                    );
                }
                self.transaction(&cmds).map_or_else(|e| e, Reply::Array)
            }
        }
    }

    fn data(&mut self, cmd: Cmd) -> Reply {
        if self.transactional() {
            return self
                .transaction(std::slice::from_ref(&cmd))
                .map_or_else(|e| e, |mut r| r.pop().expect("one reply"));
        }
        if !cmd.single() {
            return Reply::err(format!("ERR this command reads or writes several keys at once (or reads and writes one), which needs a transaction; model {} has none", self.model()));
        }
        match self.plain(&cmd, None) {
            Ok(r) => r,
            Err(Lost::Unreachable(e)) => Reply::err(format!("TRYAGAIN cannot open a session at this node ({e}); nothing was written")),
            Err(Lost::Silent(e)) if cmd.writes() => Reply::err(format!("INDOUBT the node did not answer the write ({e}): it may or may not have taken effect")),
            Err(Lost::Silent(e)) => Reply::err(format!("TRYAGAIN the node did not answer ({e})")),
        }
    }

    /// A read or a write, in transaction `tx` if given.
    fn plain(&mut self, cmd: &Cmd, tx: Option<u64>) -> Result<Reply, Lost> {
        if let Some(r) = self.planted_cache(cmd) {
            return Ok(r);
        }
        let after = self.past.clone();
        let op = match *cmd {
            Cmd::Get(key) | Cmd::Exists(key) => Op::Read { key, after, tx },
            Cmd::Set(key, v) => Op::Write {
                key,
                value: v as u64,
                scope: self.scope,
                after,
                tx,
            },
            _ => unreachable!("single commands only"),
        };
        let r = self.call(op)?;
        Ok(match (cmd, r) {
            (Cmd::Get(_), DdpReply::Read { value, .. }) => value.map_or(Reply::Nil, |v| {
                Reply::Bulk((v as i64).to_string().into_bytes())
            }),
            (Cmd::Exists(_), DdpReply::Read { value, .. }) => Reply::Int(value.is_some() as i64),
            (Cmd::Set(..), DdpReply::Written { .. }) => {
                self.scope_writes += 1;
                Reply::ok()
            }
            (_, other) => refusal(other),
        })
    }

    /// Send `op` on this connection's session (opened if need be).
    fn call(&mut self, op: Op) -> Result<DdpReply, Lost> {
        if self.session.is_none() {
            let cfg = &self.shared.cfg;
            let sid = tandem_net::client::fresh_session_id();
            let c = Client::connect(cfg.node_addr, &cfg.keys, sid, CALL_TIMEOUT)
                .map_err(|e| Lost::Unreachable(e.to_string()))?;
            self.session = Some(c);
        }
        let r = self.session.as_mut().expect("opened").call(op);
        match r {
            Ok(r) => {
                self.follow(&r);
                Ok(r)
            }
            Err(e) => {
                // A session whose reply never came is not used again.
                self.session = None;
                Err(Lost::Silent(e.to_string()))
            }
        }
    }

    /// Causal models: what the reply adds to the session's past.
    fn follow(&mut self, r: &DdpReply) {
        match r {
            DdpReply::Read { id: Some(id), .. } | DdpReply::Written { id: Some(id), .. } => {
                self.past.add(*id)
            }
            DdpReply::PastLost { upto } => self.past.clamp(upto),
            _ => {}
        }
    }

    fn persist(&mut self) -> Reply {
        if self.model().p != Persistency::Scope {
            return Reply::err(format!("ERR TANDEM.PERSIST closes a scope; model {} has no scopes (its persistency decides when each write is durable)", self.model()));
        }
        let (scope, writes) = (self.scope, self.scope_writes);
        (self.scope, self.scope_writes) = (scope + 1, 0);
        match self.call(Op::Persist { scope, writes }) {
            Ok(DdpReply::Persisted { .. }) => Reply::ok(),
            Ok(DdpReply::ScopeLost { .. }) => Reply::err("SCOPELOST the scope's writes are not all known at this node (the session moved after a crash): none was made durable as part of it"),
            Ok(other) => refusal(other),
            Err(Lost::Unreachable(e) | Lost::Silent(e)) => Reply::err(format!("INDOUBT the node did not answer the persist ({e}): the scope may or may not be durable")),
        }
    }
}

impl DdpConn {
    /// The planted front-end cache (`bug_cached_reads`): a `GET` of a key
    /// this front end wrote is answered from memory; a `SET` is remembered.
    fn planted_cache(&self, cmd: &Cmd) -> Option<Reply> {
        if !self.shared.cfg.bug_cached_reads {
            return None;
        }
        let mut cache = self.shared.cache.lock().expect("not poisoned");
        match *cmd {
            Cmd::Get(k) => cache
                .get(&k)
                .map(|v| Reply::Bulk(v.to_string().into_bytes())),
            Cmd::Set(k, v) => {
                cache.insert(k, v);
                None
            }
            _ => None,
        }
    }
}

/// A reply that is not the one asked for: the model's refusal, or a lost past.
fn refusal(r: DdpReply) -> Reply {
    match r {
        DdpReply::Error { msg } => Reply::err(format!("ERR {msg}")),
        DdpReply::PastLost { .. } => Reply::err("TRYAGAIN part of this session's causal past was lost (the nodes holding it crashed); the session now carries what survives; nothing was done"),
        other => Reply::err(format!("ERR unexpected answer from the node: {other:?}")),
    }
}

/// What one command inside a transaction came to: its reply, or squashed.
type Step = Result<Option<Reply>, Reply>;

impl DdpConn {
    /// `cmds` as one DDP transaction, run again while it is squashed.
    fn transaction(&mut self, cmds: &[Cmd]) -> Result<Vec<Reply>, Reply> {
        for n in 0..TX_TRIES {
            if n > 0 {
                std::thread::sleep(Duration::from_micros(50 << n.min(10)));
            }
            if let Some(replies) = self.attempt(cmds)? {
                return Ok(replies);
            }
        }
        Err(Reply::err(format!("TRYAGAIN the transaction was squashed {TX_TRIES} times on conflicts; nothing was written")))
    }

    /// One run: its replies if it committed, `None` if it was squashed.
    fn attempt(&mut self, cmds: &[Cmd]) -> Result<Option<Vec<Reply>>, Reply> {
        let tx = self.tx_seq;
        self.tx_seq += 1;
        match self.tx_call(Op::Begin { tx }, false)? {
            DdpReply::Begun { .. } => {}
            DdpReply::Aborted { .. } => return Ok(None),
            other => return Err(refusal(other)),
        }
        let mut own = std::collections::HashMap::new();
        let mut replies = Vec::with_capacity(cmds.len());
        for cmd in cmds {
            match self.in_tx(cmd, tx, &mut own)? {
                Some(r) => replies.push(r),
                None => return Ok(None),
            }
        }
        match self.tx_call(Op::End { tx }, cmds.iter().any(Cmd::writes))? {
            DdpReply::Committed { .. } => Ok(Some(replies)),
            DdpReply::Aborted { .. } => Ok(None),
            DdpReply::OutcomeUnknown { .. } => Err(Reply::err("INDOUBT the transaction's coordinator crashed after it was ended: it may or may not have committed")),
            other => Err(refusal(other)),
        }
    }

    /// A call inside a transaction; `commit`: whether a lost answer leaves
    /// writes in doubt (only the end of a writing transaction can).
    fn tx_call(&mut self, op: Op, commit: bool) -> Result<DdpReply, Reply> {
        self.call(op).map_err(|lost| match (lost, commit) {
            (Lost::Silent(e), true) => Reply::err(format!("INDOUBT the node did not answer the commit ({e}): it may or may not have committed")),
            (Lost::Silent(e) | Lost::Unreachable(e), _) => Reply::err(format!("TRYAGAIN the node did not answer ({e}); the transaction did not commit")),
        })
    }

    fn in_tx(&mut self, cmd: &Cmd, tx: u64, own: &mut std::collections::HashMap<u64, i64>) -> Step {
        Ok(Some(match cmd {
            Cmd::Get(k) => match self.tx_read(*k, tx, own)? {
                Some(v) => v.map_or(Reply::Nil, |v| Reply::Bulk(v.to_string().into_bytes())),
                None => return Ok(None),
            },
            Cmd::Exists(k) => match self.tx_read(*k, tx, own)? {
                Some(v) => Reply::Int(v.is_some() as i64),
                None => return Ok(None),
            },
            Cmd::MGet(keys) => {
                let mut out = Vec::with_capacity(keys.len());
                for k in keys {
                    match self.in_tx(&Cmd::Get(*k), tx, own)? {
                        Some(r) => out.push(r),
                        None => return Ok(None),
                    }
                }
                Reply::Array(out)
            }
            Cmd::Set(k, v) => match self.tx_write(*k, *v, tx, own)? {
                true => Reply::ok(),
                false => return Ok(None),
            },
            Cmd::MSet(pairs) => {
                for &(k, v) in pairs {
                    if !self.tx_write(k, v, tx, own)? {
                        return Ok(None);
                    }
                }
                Reply::ok()
            }
            Cmd::IncrBy(k, by) => return self.tx_incr(*k, *by, tx, own),
        }))
    }

    fn tx_incr(
        &mut self,
        k: u64,
        by: i64,
        tx: u64,
        own: &mut std::collections::HashMap<u64, i64>,
    ) -> Step {
        let Some(now) = self.tx_read(k, tx, own)? else {
            return Ok(None);
        };
        let Some(next) = now.unwrap_or(0).checked_add(by) else {
            return Ok(Some(Reply::err(
                "ERR increment or decrement would overflow",
            )));
        };
        Ok(self.tx_write(k, next, tx, own)?.then_some(Reply::Int(next)))
    }

    /// `Some(value)` read (this transaction's own write first), `None` if squashed.
    fn tx_read(
        &mut self,
        key: u64,
        tx: u64,
        own: &std::collections::HashMap<u64, i64>,
    ) -> Result<Option<Option<i64>>, Reply> {
        if let Some(&v) = own.get(&key) {
            return Ok(Some(Some(v)));
        }
        let after = self.past.clone();
        match self.tx_call(
            Op::Read {
                key,
                after,
                tx: Some(tx),
            },
            false,
        )? {
            DdpReply::Read { value, .. } => Ok(Some(value.map(|v| v as i64))),
            DdpReply::Aborted { .. } => Ok(None),
            other => Err(refusal(other)),
        }
    }

    /// `true` if written, `false` if squashed.
    fn tx_write(
        &mut self,
        key: u64,
        v: i64,
        tx: u64,
        own: &mut std::collections::HashMap<u64, i64>,
    ) -> Result<bool, Reply> {
        let (after, scope) = (self.past.clone(), self.scope);
        match self.tx_call(
            Op::Write {
                key,
                value: v as u64,
                scope,
                after,
                tx: Some(tx),
            },
            false,
        )? {
            DdpReply::Written { .. } => {
                own.insert(key, v);
                self.scope_writes += 1;
                Ok(true)
            }
            DdpReply::Aborted { .. } => Ok(false),
            other => Err(refusal(other)),
        }
    }
}
