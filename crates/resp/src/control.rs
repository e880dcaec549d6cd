//! The commands of a connection rather than of a store, the same on every
//! Tandem front end: `AUTH`, `HELLO`, `PING`, `ECHO`, `QUIT`, `SELECT`,
//! `CLIENT`, `COMMAND`, `CONFIG GET`, `INFO`, and the gate that keeps a
//! connection to `AUTH`, `HELLO` and `QUIT` until it authenticates.

use crate::{Reply, Request};

/// What the control commands need from the server behind the connection.
pub trait Server {
    /// `AUTH` must present a password (the client credential's key).
    fn has_password(&self) -> bool;
    /// `given` is the password (compared in constant time).
    fn password_ok(&self, given: &[u8]) -> bool;
    /// `INFO`'s text.
    fn info(&self) -> String;
}

/// A password check in constant time.
pub fn same_secret(want: &[u8], given: &[u8]) -> bool {
    want.len() == given.len() && want.iter().zip(given).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// One connection's own state.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub authed: bool,
    pub name: Option<Vec<u8>>,
    /// The client sent `QUIT`: close after this reply.
    pub closing: bool,
}

/// Commands a client may send before `AUTH`.
const BEFORE_AUTH: [&str; 3] = ["AUTH", "HELLO", "QUIT"];

/// A request's command name, upper-cased.
pub fn name(req: &Request) -> String {
    String::from_utf8_lossy(&req[0]).to_ascii_uppercase()
}

pub fn wrong_args(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

impl Conn {
    pub fn new(id: u64, authed: bool) -> Conn {
        Conn {
            id,
            authed,
            name: None,
            closing: false,
        }
    }

    /// `-NOAUTH` if the connection may not run command `n` yet.
    pub fn refuse_before_auth(&self, n: &str) -> Option<Reply> {
        (!self.authed && !BEFORE_AUTH.contains(&n))
            .then(|| Reply::err("NOAUTH Authentication required."))
    }

    /// Answer `req` if it is a control command (`n` its name).
    pub fn control(&mut self, server: &impl Server, n: &str, req: &Request) -> Option<Reply> {
        Some(match n {
            "PING" => match req.len() {
                1 => Reply::Simple("PONG".into()),
                2 => Reply::Bulk(req[1].clone()),
                _ => wrong_args(n),
            },
            "ECHO" if req.len() == 2 => Reply::Bulk(req[1].clone()),
            "QUIT" => {
                self.closing = true;
                Reply::ok()
            }
            "AUTH" => self.auth(server, &req[1..]),
            "HELLO" => self.hello(server, &req[1..]),
            "SELECT" if req.len() == 2 => match &req[1][..] {
                b"0" => Reply::ok(),
                _ => Reply::err("ERR DB index is out of range"),
            },
            "CLIENT" => self.client(&req[1..]),
            "COMMAND" => Reply::Array(Vec::new()),
            "CONFIG" if req.len() == 3 && req[1].eq_ignore_ascii_case(b"GET") => {
                config_get(&req[2])
            }
            "INFO" => Reply::Bulk(server.info().into_bytes()),
            "ECHO" | "SELECT" => wrong_args(n),
            _ => return None,
        })
    }

    fn auth(&mut self, server: &impl Server, args: &[Vec<u8>]) -> Reply {
        let Some(password) = args.last().filter(|_| matches!(args.len(), 1 | 2)) else {
            return wrong_args("AUTH");
        };
        if !server.has_password() {
            return Reply::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
        }
        if args.len() == 2 && args[0] != b"default" {
            return Reply::err("WRONGPASS invalid username-password pair or user is disabled.");
        }
        match server.password_ok(password) {
            true => {
                self.authed = true;
                Reply::ok()
            }
            false => Reply::err("WRONGPASS invalid username-password pair or user is disabled."),
        }
    }

    /// `HELLO [2 [AUTH user pass] [SETNAME name]]`: RESP2 only.
    fn hello(&mut self, server: &impl Server, args: &[Vec<u8>]) -> Reply {
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
                    let r = self.auth(server, &args[i + 1..i + 3]);
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

/// `-ERR unknown command`, quoting a bounded part of the request.
pub fn unknown(req: &Request) -> Reply {
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
