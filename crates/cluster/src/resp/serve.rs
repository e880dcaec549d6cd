//! The RESP listener: one task per client connection on the compute
//! server's thread, a coordinator borrowed per transaction.
//!
//! Bounds: at most `max_clients` connections (the next is told so and
//! closed); a request's lengths are checked before they are buffered
//! ([`tandem_resp::Limits`]); replies to a read's requests are written
//! before the next read, so a client that pipelines without reading
//! stops being read once the kernel's buffers fill, and holds at most one
//! read's replies here; a protocol error is answered, then the connection
//! closed.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tandem_dkvs::Coordinator;
use tandem_fabric::Fabric;
use tandem_resp::{Limits, Parser, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::lend::{Lender, Live};
use super::run::Keyspace;
use super::session::Session;

#[derive(Clone, Debug)]
pub struct FrontConfig {
    pub limits: Limits,
    pub max_clients: usize,
    /// `AUTH` must present this (the client credential's key, hex); none:
    /// every connection may run commands at once.
    pub password: Option<String>,
    /// What `INFO` says the store is.
    pub description: String,
    /// Connections open, over every serving thread (counted against `max_clients`).
    pub clients: Arc<AtomicUsize>,
    /// The last connection id handed out, over every serving thread.
    pub last_id: Arc<AtomicU64>,
}

/// What every connection shares.
pub struct Front<F: Fabric> {
    pub config: FrontConfig,
    pub keyspace: Keyspace,
    pub lender: Lender<F>,
    pub commands: Cell<u64>,
}

impl<F: Fabric> Front<F> {
    /// A front end whose coordinators are lent from the start (the embedded store).
    pub fn new(config: FrontConfig, keyspace: Keyspace, coordinators: Vec<Coordinator<F>>) -> Self {
        assert!(!coordinators.is_empty(), "a front end needs a coordinator");
        let front = Front::down(config, keyspace, "starting");
        let node = front.keyspace.node;
        front.lender.open(node, coordinators, Live::default());
        front
    }

    /// A front end with nothing to lend until [`Lender::open`] (a compute
    /// server before its first incarnation): commands answer `-CLUSTERDOWN`.
    pub fn down(config: FrontConfig, keyspace: Keyspace, why: &str) -> Self {
        Front {
            config,
            keyspace,
            lender: Lender::down(why),
            commands: Cell::new(0),
        }
    }

    /// Run `f` on a lent coordinator (see [`Lender::run`]); a verb that
    /// came back `Revoked` ends the incarnation it belongs to.
    pub async fn lend<T, Fut>(
        &self,
        writes: bool,
        f: impl FnOnce(Coordinator<F>) -> Fut,
    ) -> Result<T, Reply>
    where
        Fut: std::future::Future<Output = (Coordinator<F>, Result<T, Reply>)>,
    {
        let r = self.lender.run(writes, f).await;
        if self.keyspace.revoked.take() {
            self.lender.fence("a verb came back Revoked");
        }
        r
    }
}

impl<F: Fabric> tandem_resp::Server for Front<F> {
    fn has_password(&self) -> bool {
        self.config.password.is_some()
    }

    fn password_ok(&self, given: &[u8]) -> bool {
        self.config
            .password
            .as_deref()
            .is_some_and(|want| tandem_resp::control::same_secret(want.as_bytes(), given))
    }

    fn info(&self) -> String {
        let ks = &self.keyspace;
        format!(
            "# Server\r\nredis_version:7.0.0\r\ntandem_version:{}\r\ntandem_store:{}\r\n\
             # Clients\r\nconnected_clients:{}\r\n\
             # Stats\r\ntotal_commands_processed:{}\r\ntandem_conflict_retries:{}\r\n\
             # Keyspace\r\ntandem_slot_bytes:{}\r\n{}",
            env!("CARGO_PKG_VERSION"),
            self.config.description,
            self.config.clients.load(Ordering::Relaxed),
            self.commands.get(),
            ks.retries.get(),
            ks.value_size,
            self.lender.info(),
        )
    }
}

/// Accept clients on `listener` until the task is dropped.
pub async fn serve<F: Fabric + 'static>(listener: TcpListener, front: Rc<Front<F>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let clients = front.config.clients.clone();
        if clients.fetch_add(1, Ordering::Relaxed) >= front.config.max_clients {
            clients.fetch_sub(1, Ordering::Relaxed);
            tokio::task::spawn_local(refuse(stream));
            continue;
        }
        let id = front.config.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        let f = front.clone();
        tokio::task::spawn_local(async move {
            let _ = connection(stream, &f, id).await;
            clients.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn refuse(stream: TcpStream) {
    let _ = close_after(stream, b"-ERR max number of clients reached\r\n").await;
}

/// Write `last`, end our side, and read (and drop) what the client still
/// sends for a moment: closing a socket with unread bytes resets the
/// connection, and the client could lose `last` to the reset. Bounded in
/// bytes and time.
async fn close_after(mut stream: TcpStream, last: &[u8]) -> std::io::Result<()> {
    stream.write_all(last).await?;
    stream.shutdown().await?;
    let mut buf = [0u8; 4096];
    let mut left = LINGER_BYTES;
    let linger = async {
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, linger).await;
    Ok(())
}

/// How long, and how much, a closing connection is still read.
const LINGER: std::time::Duration = std::time::Duration::from_millis(200);
const LINGER_BYTES: usize = 1 << 20;

async fn connection<F: Fabric>(
    mut stream: TcpStream,
    front: &Front<F>,
    id: u64,
) -> std::io::Result<()> {
    let mut parser = Parser::new(front.config.limits);
    let mut session = Session::new(id, front.config.password.is_none());
    let (mut buf, mut out) = (vec![0u8; 16 << 10], Vec::new());
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        parser.feed(&buf[..n]);
        loop {
            match parser.request() {
                Ok(Some(req)) => {
                    front.commands.set(front.commands.get() + 1);
                    session.handle(front, req).await.encode(&mut out);
                    if session.conn.closing {
                        return close_after(stream, &out).await;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    Reply::err(format!("ERR {e}")).encode(&mut out);
                    return close_after(stream, &out).await;
                }
            }
        }
        stream.write_all(&out).await?;
        out.clear();
    }
}
