//! `tandem serve`: a store behind Redis's protocol, for `redis-cli` and any
//! Redis client library.

use std::net::{IpAddr, SocketAddr, TcpListener};

use clap::Args;
use tandem_cluster::resp::{Embedded, FrontConfig};
use tandem_fabric::auth::Role;
use tandem_resp::Limits;

use crate::args::keyring_from;
use tandem_fabric::auth::Keyring;

#[derive(Args)]
pub struct ServeArgs {
    /// The store: pandora (strictly serializable transactions; MULTI/EXEC is one). DDP and Kite
    /// are not embedded here yet: a DDP node serves RESP itself (`tandem node --resp`, 64-bit integer values).
    #[arg(long, default_value = "pandora")]
    system: String,
    /// The RESP port (0: one the kernel picks, printed on the first line).
    #[arg(long, default_value_t = 7379)]
    port: u16,
    /// The address to listen on. Anything but loopback needs credentials (then AUTH is required).
    #[arg(long, default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// Cluster secret (hex), else TANDEM_SECRET or TANDEM_KEYRING. With credentials, a client must
    /// `AUTH <client key>`: the `client` line of the keyring `tandem keys split` writes.
    #[arg(long)]
    secret: Option<String>,
    /// Keys the store holds.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes per slot; a key and its value together may take this less 14.
    #[arg(long, default_value_t = 256)]
    slot_bytes: u32,
    /// Connections served at once; the next is refused with an error.
    #[arg(long, default_value_t = 1024)]
    max_clients: usize,
}

pub fn run(a: ServeArgs) -> Result<(), String> {
    if a.system != "pandora" {
        return Err(format!(
            "--system {}: only pandora is embedded by tandem serve so far; a DDP node serves RESP itself (tandem node --resp ADDR, 64-bit integer values; docs/RESP.md), Kite not yet",
            a.system
        ));
    }
    if a.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    check_slot_bytes(a.slot_bytes)?;
    let password = client_password(keyring_from(a.secret.as_deref())?.as_ref(), a.bind)?;
    let store = Embedded {
        keys: a.keys,
        slot_bytes: a.slot_bytes,
        ..Embedded::default()
    };
    let addr = SocketAddr::new(a.bind, a.port);
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let front = front_config(a.max_clients, password);
    // The bound address (with --port 0, the port the kernel chose).
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!(
        "tandem serve: {} on {bound} ({}); try: redis-cli -p {} set k v",
        a.system,
        if front.password.is_some() {
            "AUTH required"
        } else {
            "no AUTH: loopback only"
        },
        bound.port()
    );
    store.serve(listener, front)
}

pub fn check_slot_bytes(slot_bytes: u32) -> Result<(), String> {
    if !(16..=4096).contains(&slot_bytes) {
        return Err(format!(
            "--slot-bytes {slot_bytes}: must be 16..=4096 (14 bytes of each slot are the record's header; Pandora's values are at most 4 KiB)"
        ));
    }
    Ok(())
}

/// What `AUTH` must present: the client credential's key (hex). Without
/// credentials, none, and only loopback may be served.
pub fn client_password(keys: Option<&Keyring>, bind: IpAddr) -> Result<Option<String>, String> {
    match keys {
        Some(k) => Ok(Some(tandem_fabric::auth::keys::to_hex(k.require(Role::Client)?.bytes()))),
        None if bind.is_loopback() => Ok(None),
        None => Err(format!("{bind}: serving RESP beyond loopback needs credentials (--secret, TANDEM_SECRET or TANDEM_KEYRING); clients then AUTH with the client key")),
    }
}

pub fn front_config(max_clients: usize, password: Option<String>) -> FrontConfig {
    FrontConfig {
        limits: Limits::default(),
        max_clients: max_clients.max(1),
        password,
        description: String::new(),
        clients: Default::default(),
        last_id: Default::default(),
    }
}
