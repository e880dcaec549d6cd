//! One client connection's state and the commands that are not data:
//! `AUTH`, `HELLO`, `PING`, `ECHO`, `SELECT`, `CLIENT`, `COMMAND`, `INFO`,
//! `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`, `QUIT`.

use tandem_fabric::Fabric;
use tandem_resp::{Reply, Request};

use super::command::{self, name, wrong_args, Cmd};
use super::run::{stamp_of, transact, Watched};
use super::serve::Front;

/// A client connection.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    authed: bool,
    name: Option<Vec<u8>>,
    /// Inside `MULTI`: the commands queued, and whether one was refused.
    multi: Option<Vec<Cmd>>,
    multi_failed: bool,
    watched: Vec<Watched>,
    /// The client sent `QUIT`: close after this reply.
    pub closing: bool,
}

/// Commands a client may send before `AUTH`.
const BEFORE_AUTH: [&str; 3] = ["AUTH", "HELLO", "QUIT"];
/// Commands that run at once inside `MULTI`, not queued.
const NOT_QUEUED: [&str; 5] = ["EXEC", "DISCARD", "MULTI", "WATCH", "QUIT"];

impl Session {
    pub fn new(id: u64, authed: bool) -> Session {
        Session {
            id,
            authed,
            name: None,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            closing: false,
        }
    }

    /// Answer one request.
    pub async fn handle<F: Fabric>(&mut self, front: &Front<F>, req: Request) -> Reply {
        let n = name(&req);
        if !self.authed && !BEFORE_AUTH.contains(&n.as_str()) {
            return Reply::err("NOAUTH Authentication required.");
        }
        if self.multi.is_some() && !NOT_QUEUED.contains(&n.as_str()) {
            return self.queue(&req, &n);
        }
        match n.as_str() {
            "PING" => match req.len() {
                1 => Reply::Simple("PONG".into()),
                2 => Reply::Bulk(req[1].clone()),
                _ => wrong_args(&n),
            },
            "ECHO" if req.len() == 2 => Reply::Bulk(req[1].clone()),
            "QUIT" => {
                self.closing = true;
                Reply::ok()
            }
            "AUTH" => self.auth(front, &req[1..]),
            "HELLO" => self.hello(front, &req[1..]),
            "SELECT" if req.len() == 2 => match &req[1][..] {
                b"0" => Reply::ok(),
                _ => Reply::err("ERR DB index is out of range"),
            },
            "CLIENT" => self.client(&req[1..]),
            "COMMAND" => Reply::Array(Vec::new()),
            "CONFIG" if req.len() == 3 && req[1].eq_ignore_ascii_case(b"GET") => {
                config_get(&req[2])
            }
            "INFO" => Reply::Bulk(front.info().into_bytes()),
            "MULTI" | "EXEC" | "DISCARD" | "WATCH" | "UNWATCH" => self.tx(front, &n, &req).await,
            "ECHO" | "SELECT" => wrong_args(&n),
            _ => match command::parse(&req) {
                Some(Ok(cmd)) => self.data(front, cmd).await,
                Some(Err(e)) => e,
                None => unknown(&req),
            },
        }
    }

    fn queue(&mut self, req: &Request, n: &str) -> Reply {
        let refused = match command::parse(req) {
            Some(Ok(cmd)) => {
                self.multi.as_mut().expect("in MULTI").push(cmd);
                return Reply::Simple("QUEUED".into());
            }
            Some(Err(e)) => e,
            None if n == "UNWATCH" || n == "PING" => Reply::err(format!(
                "ERR {n} inside MULTI is not supported by this store"
            )),
            None => unknown(req),
        };
        self.multi_failed = true;
        refused
    }

    async fn data<F: Fabric>(&mut self, front: &Front<F>, cmd: Cmd) -> Reply {
        let ks = &front.keyspace;
        let r = front
            .lend(cmd.writes(), |mut c| async move {
                let r = transact(&mut c, ks, &[], std::slice::from_ref(&cmd)).await;
                (c, r)
            })
            .await;
        match r {
            Ok(mut replies) => replies.pop().expect("one reply per command"),
            Err(e) => e,
        }
    }

    async fn tx<F: Fabric>(&mut self, front: &Front<F>, n: &str, req: &Request) -> Reply {
        match (n, self.multi.is_some()) {
            ("MULTI", true) => Reply::err("ERR MULTI calls can not be nested"),
            ("MULTI", false) => {
                self.multi = Some(Vec::new());
                self.multi_failed = false;
                Reply::ok()
            }
            ("EXEC", false) => Reply::err("ERR EXEC without MULTI"),
            ("DISCARD", false) => Reply::err("ERR DISCARD without MULTI"),
            ("DISCARD", true) => {
                self.multi = None;
                self.watched.clear();
                Reply::ok()
            }
            ("EXEC", true) => self.exec(front).await,
            ("WATCH", true) => Reply::err("ERR WATCH inside MULTI is not allowed"),
            ("WATCH", false) if req.len() < 2 => wrong_args(n),
            ("WATCH", false) => self.watch(front, &req[1..]).await,
            _ => {
                self.watched.clear();
                Reply::ok()
            }
        }
    }

    async fn exec<F: Fabric>(&mut self, front: &Front<F>) -> Reply {
        let cmds = self.multi.take().expect("in MULTI");
        let watched = std::mem::take(&mut self.watched);
        if self.multi_failed {
            return Reply::err("EXECABORT Transaction discarded because of previous errors.");
        }
        let (ks, writes) = (&front.keyspace, cmds.iter().any(Cmd::writes));
        let r = front
            .lend(writes, |mut c| async move {
                let r = transact(&mut c, ks, &watched, &cmds).await;
                (c, r)
            })
            .await;
        match r {
            Ok(replies) => Reply::Array(replies),
            Err(e) => e,
        }
    }

    async fn watch<F: Fabric>(&mut self, front: &Front<F>, keys: &[Vec<u8>]) -> Reply {
        let ks = &front.keyspace;
        let stamps = front
            .lend(false, |mut c| async move {
                let mut stamps = Vec::with_capacity(keys.len());
                for k in keys {
                    match stamp_of(&mut c, ks, k).await {
                        Ok(s) => stamps.push((k.clone(), s)),
                        Err(e) => return (c, Err(e)),
                    }
                }
                (c, Ok(stamps))
            })
            .await;
        match stamps {
            Ok(s) => {
                self.watched.extend(s);
                Reply::ok()
            }
            Err(e) => e,
        }
    }

    fn auth<F: Fabric>(&mut self, front: &Front<F>, args: &[Vec<u8>]) -> Reply {
        let Some(password) = args.last().filter(|_| matches!(args.len(), 1 | 2)) else {
            return wrong_args("AUTH");
        };
        if front.config.password.is_none() {
            return Reply::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
        }
        if args.len() == 2 && args[0] != b"default" {
            return Reply::err("WRONGPASS invalid username-password pair or user is disabled.");
        }
        match front.password_ok(password) {
            true => {
                self.authed = true;
                Reply::ok()
            }
            false => Reply::err("WRONGPASS invalid username-password pair or user is disabled."),
        }
    }

    /// `HELLO [2 [AUTH user pass] [SETNAME name]]`: RESP2 only.
    fn hello<F: Fabric>(&mut self, front: &Front<F>, args: &[Vec<u8>]) -> Reply {
        if let Some(v) = args.first() {
            if v != b"2" {
                return Reply::err("NOPROTO this server speaks RESP2 only");
            }
        }
        let mut i = 1;
        while i < args.len() {
            match String::from_utf8_lossy(&args[i])
                .to_ascii_uppercase()
                .as_str()
            {
                "AUTH" if i + 2 < args.len() => {
                    let r = self.auth(front, &args[i + 1..i + 3]);
                    if matches!(r, Reply::Error(_)) {
                        return r;
                    }
                    i += 3;
                }
                "SETNAME" if i + 1 < args.len() => {
                    self.name = Some(args[i + 1].clone());
                    i += 2;
                }
                _ => return Reply::err("ERR syntax error in HELLO"),
            }
        }
        if !self.authed {
            return Reply::err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        let kv = |k: &str, v: Reply| [Reply::Bulk(k.as_bytes().to_vec()), v];
        let b = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        Reply::Array(
            [
                kv("server", b("tandem")),
                kv("version", b(env!("CARGO_PKG_VERSION"))),
                kv("proto", Reply::Int(2)),
                kv("id", Reply::Int(self.id as i64)),
                kv("mode", b("standalone")),
                kv("role", b("master")),
                kv("modules", Reply::Array(Vec::new())),
            ]
            .concat(),
        )
    }

    fn client(&mut self, args: &[Vec<u8>]) -> Reply {
        let sub = args
            .first()
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase());
        match (sub.as_deref(), args.len()) {
            (Some("SETNAME"), 2) => {
                self.name = Some(args[1].clone());
                Reply::ok()
            }
            (Some("GETNAME"), 1) => self.name.clone().map_or(Reply::Nil, Reply::Bulk),
            (Some("ID"), 1) => Reply::Int(self.id as i64),
            (Some("SETINFO"), 3) => Reply::ok(),
            _ => Reply::err("ERR unknown or unsupported CLIENT subcommand (this store has SETNAME, GETNAME, ID and SETINFO)"),
        }
    }
}

/// What `redis-benchmark` asks before it starts, answered truthfully:
/// nothing is saved or appended to a file. Any other parameter: none.
fn config_get(param: &[u8]) -> Reply {
    let pair = |k: &str, v: &str| Reply::Array(vec![Reply::Bulk(k.into()), Reply::Bulk(v.into())]);
    match String::from_utf8_lossy(param).to_ascii_lowercase().as_str() {
        "save" => pair("save", ""),
        "appendonly" => pair("appendonly", "no"),
        _ => Reply::Array(Vec::new()),
    }
}

fn unknown(req: &Request) -> Reply {
    let args: Vec<String> = req[1..]
        .iter()
        .take(4)
        .map(|a| format!("'{}'", String::from_utf8_lossy(&a[..a.len().min(64)])))
        .collect();
    Reply::err(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(&req[0][..req[0].len().min(64)]),
        args.join(" ")
    ))
}
