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
    /// The store: pandora (strictly serializable transactions; MULTI/EXEC is one); ddp (three
    /// nodes of --model); kite, or zab (Kite's ZAB baseline): three nodes. DDP, Kite and ZAB store
    /// 64-bit integer values (docs/RESP.md).
    #[arg(long, default_value = "pandora")]
    system: String,
    /// DDP's consistency-persistency model (--system ddp).
    #[arg(long, default_value = "lin-synch")]
    model: String,
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
    if !["pandora", "ddp", "kite", "zab"].contains(&a.system.as_str()) {
        return Err(format!("--system {}: pandora, ddp, kite or zab", a.system));
    }
    if a.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    check_slot_bytes(a.slot_bytes)?;
    let password = client_password(keyring_from(a.secret.as_deref())?.as_ref(), a.bind)?;
    let model = match a.system.as_str() {
        "ddp" => Some(tandem_ddp::Model::parse(&a.model)?),
        _ => None,
    };
    let addr = SocketAddr::new(a.bind, a.port);
    let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let front = front_config(a.max_clients, password);
    // The bound address (with --port 0, the port the kernel chose).
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let what = match model {
        Some(m) => format!("ddp {m}, three nodes in this process"),
        None if a.system == "pandora" => "pandora".to_string(),
        None => format!("{}, three nodes in this process", a.system),
    };
    let value = if a.system == "pandora" { "v" } else { "42" };
    let auth = match front.password {
        Some(_) => "AUTH required",
        None => "no AUTH: loopback only",
    };
    let announce = format!(
        "tandem serve: {what} on {bound} ({auth}); try: redis-cli -p {} set k {value}",
        bound.port()
    );
    if a.system == "pandora" {
        println!("{announce}");
    }
    match a.system.as_str() {
        "pandora" => {
            let store = Embedded {
                keys: a.keys,
                slot_bytes: a.slot_bytes,
                ..Embedded::default()
            };
            store.serve(listener, front)
        }
        system => serve_nodes(
            system,
            model,
            listener,
            front,
            a.secret.as_deref(),
            &announce,
        ),
    }
}

/// Wait (up to 30 s) until the node at `addr` answers `op`.
fn wait_serving<Op: serde::Serialize + Clone, R: serde::de::DeserializeOwned>(
    addr: SocketAddr,
    keys: &Keyring,
    op: Op,
) -> Result<(), String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let timeout = std::time::Duration::from_secs(1);
    loop {
        let sid = tandem_net::client::fresh_session_id();
        let answered = tandem_net::client::Client::<Op, R>::connect(addr, keys, sid, timeout)
            .and_then(|mut c| c.call(op.clone()));
        match answered {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() > until => {
                return Err(format!("the nodes did not start serving within 30 s: {e}"))
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

/// Three DDP, Kite or ZAB nodes in this process (threads over loopback,
/// NVM files in a directory of their own, nothing kept past the process);
/// node 0 serves `listener`.
fn serve_nodes(
    system: &str,
    model: Option<tandem_ddp::Model>,
    listener: TcpListener,
    front: FrontConfig,
    secret: Option<&str>,
    announce: &str,
) -> Result<(), String> {
    // The nodes authenticate each other: the user's credentials, or fresh ones.
    let keys = match keyring_from(secret)? {
        Some(k) => k,
        None => {
            Keyring::from_master_hex(tandem_fabric::auth::keys::MasterSecret::generate().hex())?
        }
    };
    // Named by the port: a later run on the same port empties and reuses it.
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let dir = std::env::temp_dir().join(format!("tandem-serve-{system}-{port}"));
    let bounds = tandem_resp::blocking::Bounds {
        limits: front.limits,
        max_clients: front.max_clients,
    };
    let started = match (system, model) {
        ("ddp", Some(m)) => tandem_net::host::embedded(
            tandem_ddp::DdpFactory::new(m, tandem_ddp::Params::TCP),
            keys.clone(),
            &dir,
            true,
        ),
        ("kite", _) => tandem_net::host::embedded(
            tandem_kite::simcheck::KiteFactory(tandem_kite::KiteConfig::default()),
            keys.clone(),
            &dir,
            false,
        ),
        _ => tandem_net::host::embedded(
            tandem_zab::kite_api::KiteZabFactory::with(tandem_zab::ZabParams::default()),
            keys.clone(),
            &dir,
            false,
        ),
    };
    let (addrs, _threads) = started.map_err(|e| format!("cannot start the nodes: {e}"))?;
    match model {
        Some(_) => wait_serving::<_, tandem_ddp::Reply>(addrs[0], &keys, tandem_ddp::Op::read(0))?,
        None => wait_serving::<_, tandem_kite::Reply>(addrs[0], &keys, tandem_kite::Op::Read(0))?,
    }
    println!("{announce}");
    let (node_addr, password) = (addrs[0], front.password);
    let gateway = match model {
        Some(model) => {
            let cfg = tandem_ddp_lab::resp::DdpResp {
                node: 0,
                node_addr,
                model,
                keys,
                password,
                bounds,
                bug_cached_reads: false,
            };
            tandem_ddp_lab::resp::spawn(cfg, listener)
        }
        None => {
            let cfg = tandem_kite_lab::resp::KiteResp {
                node: 0,
                system: system.into(),
                node_addr,
                keys,
                password,
                bounds,
            };
            tandem_kite_lab::resp::spawn(cfg, listener)
        }
    };
    let gateway = gateway.map_err(|e| e.to_string())?;
    gateway
        .join()
        .map_err(|_| "the RESP front end panicked".to_string())
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
