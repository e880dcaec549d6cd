//! A RESP listener with a thread per connection, for front ends whose
//! store is reached by blocking calls (a DDP node's client session).
//!
//! Bounds, as for the asynchronous front end: at most `max_clients`
//! connections (the next is told so and closed); a request's lengths are
//! checked before they are buffered ([`Limits`]); the replies to what one
//! read brought are written before the next read, so a client that
//! pipelines without reading stops being read once the kernel's buffers
//! fill; a protocol error is answered, then the connection closed after a
//! short, bounded drain.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::control::same_secret;
use crate::{Limits, Parser, Reply, Request, Server};

/// One connection's command handler.
pub trait Handler: Send + 'static {
    fn handle(&mut self, req: Request) -> Reply;
    /// The client sent `QUIT`: close after the last reply.
    fn closing(&self) -> bool;
}

#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub limits: Limits,
    pub max_clients: usize,
}

/// Connections open now (for `INFO`).
pub type Clients = Arc<AtomicUsize>;

/// What every connection of a front end shares: the password, the
/// counters, and what `INFO` says the store is.
pub struct Shared {
    /// `AUTH` must present this (the client credential's key, hex).
    pub password: Option<String>,
    pub clients: Clients,
    pub commands: AtomicU64,
    /// `INFO`'s `tandem_store`, and lines of its own (`key:value`).
    pub store: String,
    pub info: Vec<(String, String)>,
}

impl Shared {
    pub fn new(password: Option<String>, store: String, info: Vec<(String, String)>) -> Shared {
        Shared {
            password,
            clients: Clients::default(),
            commands: AtomicU64::new(0),
            store,
            info,
        }
    }
}

impl Server for Shared {
    fn has_password(&self) -> bool {
        self.password.is_some()
    }
    fn password_ok(&self, given: &[u8]) -> bool {
        self.password
            .as_deref()
            .is_some_and(|w| same_secret(w.as_bytes(), given))
    }
    fn info(&self) -> String {
        let own: String = self
            .info
            .iter()
            .map(|(k, v)| format!("{k}:{v}\r\n"))
            .collect();
        format!(
            "# Server\r\nredis_version:7.0.0\r\ntandem_version:{}\r\ntandem_store:{}\r\n{own}\
             # Clients\r\nconnected_clients:{}\r\n# Stats\r\ntotal_commands_processed:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            self.store,
            self.clients.load(Ordering::Relaxed),
            self.commands.load(Ordering::Relaxed),
        )
    }
}

/// Accept on `listener` until the process ends; `new(id)` makes connection `id`'s handler.
pub fn serve<H: Handler>(
    listener: TcpListener,
    bounds: Bounds,
    clients: Clients,
    new: impl Fn(u64) -> H + Send + Sync + 'static,
) {
    let last_id = AtomicU64::new(0);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if clients.fetch_add(1, Ordering::SeqCst) >= bounds.max_clients {
            clients.fetch_sub(1, Ordering::SeqCst);
            let _ = std::thread::Builder::new()
                .name("resp-refuse".into())
                .spawn(move || close_after(stream, b"-ERR max number of clients reached\r\n"));
            continue;
        }
        let handler = new(last_id.fetch_add(1, Ordering::Relaxed) + 1);
        let open = clients.clone();
        let spawned = std::thread::Builder::new()
            .name("resp-conn".into())
            .spawn(move || {
                let _ = connection(stream, bounds.limits, handler);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            // The connection went with the closure, and is closed.
            clients.fetch_sub(1, Ordering::SeqCst);
            eprintln!("resp: no thread for a new connection ({e}); it was closed");
        }
    }
}

fn connection<H: Handler>(mut stream: TcpStream, limits: Limits, mut h: H) -> std::io::Result<()> {
    let mut parser = Parser::new(limits);
    let (mut buf, mut out) = (vec![0u8; 16 << 10], Vec::new());
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        parser.feed(&buf[..n]);
        loop {
            match parser.request() {
                Ok(Some(req)) => {
                    h.handle(req).encode(&mut out);
                    if h.closing() {
                        return close_after(stream, &out);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    Reply::err(format!("ERR {e}")).encode(&mut out);
                    return close_after(stream, &out);
                }
            }
        }
        stream.write_all(&out)?;
        out.clear();
    }
}

/// How long, and how much, a closing connection is still read.
const LINGER: Duration = Duration::from_millis(200);
const LINGER_BYTES: usize = 1 << 20;

/// Write `last`, end our side, and drain what the client still sends for a
/// moment (closing with unread bytes resets the connection, and the client
/// could lose `last` to the reset). Bounded in bytes and time.
fn close_after(mut stream: TcpStream, last: &[u8]) -> std::io::Result<()> {
    stream.write_all(last)?;
    stream.shutdown(Shutdown::Write)?;
    let until = Instant::now() + LINGER;
    let (mut buf, mut left) = ([0u8; 4096], LINGER_BYTES);
    while left > 0 {
        let now = Instant::now();
        if now >= until {
            break;
        }
        stream.set_read_timeout(Some(until - now))?;
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    Ok(())
}
