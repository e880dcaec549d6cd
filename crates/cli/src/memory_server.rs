//! `tandem pandora memory-server`: a passive memory node served over TCP
//! (docs/DESIGN.md §3). It listens on loopback unless told otherwise, and executes
//! verbs only for compute nodes registered by the admin role, on
//! connections that authenticated first (docs/SECURITY.md).

use std::net::TcpListener;
use std::sync::Arc;

use clap::Args;
use std::time::Duration;

use tandem_fabric::auth::Role;
use tandem_fabric::tcp::{default_spin, serve_with, Polling};
use tandem_fabric::MemoryNode;

use crate::args::{keyring_from, parse_addrs, parse_size};

#[derive(Args)]
pub struct MemoryServerArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: String,
    /// Memory to serve, e.g. 512M or 2G. With --shm, all of it is resident
    /// once a compute process maps it (each mapper maps every page at attach,
    /// as an RDMA registration pins a region), so size it to the store.
    #[arg(long, default_value = "256M")]
    mem: String,
    /// Master secret (hex, at least 128 bits). Defaults to $TANDEM_KEYRING (a keyring with the admin and
    /// compute keys, and memory's to announce a replacement), then $TANDEM_SECRET, else a random one printed at start.
    #[arg(long)]
    secret: Option<String>,
    /// Replace memory node N, declared failed: once listening, announce this
    /// server to the membership service (`--membership`), which fills it from
    /// the live replicas while transactions hold, then admits it
    /// (docs/DESIGN.md §4.6).
    #[arg(long, value_name = "N", requires = "membership")]
    replaces: Option<u16>,
    /// Membership replicas (comma-separated) to announce a replacement to.
    #[arg(long)]
    membership: Option<String>,
    /// Microseconds the polling thread keeps polling after it served before
    /// it sleeps: lower latency at low depth for a core's worth of CPU.
    /// Default: 50 with more than two cores, 0 (sleep at once) otherwise.
    #[arg(long, value_name = "US")]
    poll_spin_us: Option<u64>,
    /// Polling threads serving data connections: N (default 1, unpinned: a
    /// connection goes to the poller with the fewest), or `cpus`: one per
    /// CPU, poller i pinned to the i-th CPU, each connection moved to the
    /// poller on the CPU its packets come from. `cpus` doubles verbs/s at
    /// low depth on two cores; it is for hosts given to memory servers, as
    /// busy pinned pollers take CPU from everything else (a ZooKeeper on the
    /// same two cores timed out). Priority connections (a recovery
    /// coordinator's, the membership's probes) always have one more poller
    /// of their own, at real-time priority where the OS allows it.
    #[arg(long, value_name = "N|cpus", default_value = "1", value_parser = parse_pollers)]
    pollers: Polling,
    /// Keep the region in a memfd that compute processes on this host map
    /// (the shm fabric): they execute verbs on it themselves, and reach this
    /// server over TCP only for admin calls. TCP data connections still work.
    #[arg(long)]
    shm: bool,
}

pub fn run(a: MemoryServerArgs) -> Result<(), String> {
    let bytes = parse_size(&a.mem)?;
    let keys = match keyring_from(a.secret.as_deref())? {
        Some(k) => k,
        None => {
            let s = tandem_fabric::auth::MasterSecret::generate();
            eprintln!("no --secret, TANDEM_SECRET or TANDEM_KEYRING given; master secret for this server: {}", s.hex());
            s.keyring()
        }
    };
    keys.require(Role::Admin)?;
    keys.require(Role::Compute)?;
    let listener =
        TcpListener::bind(&a.listen).map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let node = Arc::new(if a.shm {
        MemoryNode::shared(bytes).map_err(|e| format!("cannot create a shared region: {e}"))?
    } else {
        MemoryNode::new(bytes)
    });
    // The harness that started us waits for this exact line.
    println!("listening on {addr}");

    let spin = a
        .poll_spin_us
        .map_or_else(default_spin, Duration::from_micros);
    let polling = Polling { spin, ..a.pollers };
    let how = if a.shm { " (shared: shm fabric)" } else { "" };
    let pinned = if polling.pin { "pinned " } else { "" };
    eprintln!(
        "memory server: {} bytes on {addr}{how}, {} {pinned}polling thread(s)",
        node.size_bytes(),
        polling.threads
    );
    let announce = keys.clone();
    let serve = move || serve_with(listener, node, keys, polling);
    if let (Some(n), Some(m)) = (a.replaces, a.membership.as_deref()) {
        let membership = parse_addrs(m)?;
        let server = std::thread::spawn(serve);
        tandem_cluster::procs::set_credentials(announce)?;
        tandem_cluster::procs::announce_replacement(&membership, n, &addr.to_string(), PATIENCE)?;
        eprintln!("memory server: the membership service takes this server as memory node {n}");
        return server
            .join()
            .map_err(|_| "memory server thread panicked".to_string())?
            .map_err(|e| format!("memory server failed: {e}"));
    }
    serve().map_err(|e| format!("memory server failed: {e}"))
}

/// How long a replacement waits for the membership service to answer.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

fn parse_pollers(s: &str) -> Result<Polling, String> {
    match s {
        "cpus" => Ok(Polling::per_cpu()),
        n => match n.parse::<u16>() {
            Ok(n) if n > 0 => Ok(Polling {
                threads: n.into(),
                ..Polling::single()
            }),
            _ => Err(format!(
                "--pollers takes a positive count or 'cpus', not '{s}'"
            )),
        },
    }
}
