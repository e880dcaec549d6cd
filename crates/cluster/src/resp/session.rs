//! One client connection's state and the commands that are not data:
//! `AUTH`, `HELLO`, `PING`, `ECHO`, `SELECT`, `CLIENT`, `COMMAND`, `INFO`,
//! `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`, `QUIT`.

use tandem_fabric::Fabric;
use tandem_resp::control::unknown;
use tandem_resp::{Conn, Reply, Request};

use super::command::{self, name, wrong_args, Cmd};
use super::run::{stamp_of, transact, Watched};
use super::serve::Front;

/// A client connection.
#[derive(Debug)]
pub struct Session {
    pub conn: Conn,
    /// Inside `MULTI`: the commands queued, and whether one was refused.
    multi: Option<Vec<Cmd>>,
    multi_failed: bool,
    watched: Vec<Watched>,
}

/// Commands that run at once inside `MULTI`, not queued.
const NOT_QUEUED: [&str; 5] = ["EXEC", "DISCARD", "MULTI", "WATCH", "QUIT"];

impl Session {
    pub fn new(id: u64, authed: bool) -> Session {
        Session {
            conn: Conn::new(id, authed),
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
        }
    }

    /// Answer one request.
    pub async fn handle<F: Fabric>(&mut self, front: &Front<F>, req: Request) -> Reply {
        let n = name(&req);
        if let Some(r) = self.conn.refuse_before_auth(&n) {
            return r;
        }
        if self.multi.is_some() && !NOT_QUEUED.contains(&n.as_str()) {
            return self.queue(&req, &n);
        }
        if let Some(r) = self.conn.control(front, &n, &req) {
            return r;
        }
        match n.as_str() {
            "MULTI" | "EXEC" | "DISCARD" | "WATCH" | "UNWATCH" => self.tx(front, &n, &req).await,
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
}
