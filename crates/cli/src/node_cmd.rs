//! `tandem node` (one replica as a process) and the DDP deployment
//! commands: `tandem ddp manager` and `tandem ddp load`.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use tandem_ddp::ycsb_session::SessionPlan;
use tandem_ddp::{Bugs, DdpFactory, HealOpts, Model, Params};
use tandem_ddp_lab::load::{Load, LoadConfig};
use tandem_net::host::{self, HostConfig};
use tandem_net::manager::{self, ManagerConfig};
use tandem_net::manager_store::{FileStore, ManagerStore};
use tandem_net::nvm_file::{self, OnCorrupt};
use tandem_resp::blocking::Bounds;
use tandem_ycsb::Ycsb;

use crate::args::{parse_addrs, require_keyring};

#[derive(Args)]
pub struct NodeArgs {
    /// The replicated store: ddp; kite (release consistency); or zab (the in-memory ZAB baseline of Kite's
    /// benchmarks, node 0 leads, Kite's client API). Kite and zab keep nothing durable (--nvm is still needed).
    #[arg(long, default_value = "ddp")]
    system: String,
    /// The DDP model, e.g. lin-synch (ddp only).
    #[arg(long, default_value = "lin-synch")]
    model: String,
    /// This node's id: its position in --peers.
    #[arg(long)]
    id: u16,
    /// Every node's address, in id order (this one's included).
    #[arg(long)]
    peers: String,
    /// The configuration manager (`tandem ddp manager`); without one the membership is static.
    #[arg(long)]
    manager: Option<String>,
    /// The NVM file (created if absent; recovered from if not).
    #[arg(long)]
    nvm: PathBuf,
    /// NVM file capacity.
    #[arg(long, default_value = "64M")]
    nvm_size: String,
    /// If the NVM file is corrupt (damage before its last frame, a frame that does not decode; not a
    /// torn last frame, which is always dropped): stop, naming the file and the byte offset and
    /// leaving it untouched; or move-aside: rename it to <nvm>.corrupt-<unix seconds> and restart
    /// with an empty NVM, the node rejoining by a full copy from the live members (ddp with
    /// --recovery full-copy and a Lin, RE, Scope or Trans model only). A bad magic always stops.
    #[arg(long, default_value = "stop")]
    nvm_corrupt: String,
    /// Flush the NVM file to the device before acknowledging a persist (machine-crash durability).
    #[arg(long)]
    fsync: bool,
    /// Cluster secret (hex); else TANDEM_SECRET.
    #[arg(long)]
    secret: Option<String>,
    #[arg(long, default_value_t = 5)]
    heartbeat_ms: u64,
    #[arg(long, default_value_t = 200)]
    lease_ms: u64,
    /// How this node catches up when it restarts: full-copy, or heal (HEAL: the Lin models).
    #[arg(long, default_value = "full-copy")]
    recovery: String,
    /// Test-only protocol bug (see `tandem ddp check --help`), ignore-lease (the node serves
    /// clients without a lease) or lease-from-receipt (a lease counted from the grant's arrival).
    #[arg(long = "inject-bug", hide = true)]
    bugs: Vec<String>,
    /// Kite: the write time-out in ms (the retransmission period is half of it); default 1 ms, the paper's.
    #[arg(long)]
    timeout_ms: Option<f64>,
    /// Kite: a deliberate protocol bug (see `tandem kite check --help`), for tests of the checks;
    /// zab: join-early (a resynced follower joins without the writes committed during its sync) or
    /// no-stall-timer (a message lost with a link stalls a follower or the leader for good).
    #[arg(long, hide = true)]
    mutant: Option<String>,
    /// Serve Redis's protocol (RESP2) here: each connection is a client session of this node (ddp:
    /// in its model; kite and zab: relaxed GET/SET, KITE.ACQUIRE/RELEASE/CAS, INCR as fetch-and-add);
    /// values are 64-bit integers (docs/RESP.md). AUTH with the client key.
    #[arg(long)]
    resp: Option<SocketAddr>,
    /// Connections served at once on --resp.
    #[arg(long, default_value_t = 256)]
    max_clients: usize,
}

/// This node's (or manager's, or load's) credentials: `--secret`, else
/// `TANDEM_KEYRING`, else `TANDEM_SECRET`.
fn secret(flag: Option<&str>) -> Result<tandem_fabric::auth::Keyring, String> {
    require_keyring(flag)
}

pub fn node(a: NodeArgs) -> Result<(), String> {
    match a.system.as_str() {
        "ddp" => {}
        "ddp-echo" if a.resp.is_some() => {
            return Err("--resp: ddp-echo carries messages only".into())
        }
        "kite" => return kite_node(a),
        "zab" => return zab_node(a),
        "ddp-echo" => return ddp_echo_node(a),
        other => return Err(format!("unknown --system '{other}': ddp, kite or zab")),
    }
    if a.timeout_ms.is_some() || a.mutant.is_some() {
        return Err("--timeout-ms and --mutant are Kite's (--system kite)".into());
    }
    let model = Model::parse(&a.model)?;
    if !model.implemented() {
        return Err(format!("model {model} is not implemented yet"));
    }
    let (cfg, listener) = host_config(&a)?;
    let me = cfg.peers[a.id as usize].1;
    println!("node {} ({model}) listening on {me}", a.id);
    let heal = match a.recovery.as_str() {
        "full-copy" => None,
        "heal" if HealOpts::supports(model) => Some(HealOpts::default()),
        "heal" => return Err(format!("HEAL recovers the Lin models (lin-strict, lin-synch, lin-re, lin-eventual, lin-scope); not {model} (use --recovery full-copy)")),
        other => return Err(format!("unknown --recovery '{other}': full-copy or heal")),
    };
    if nvm_corrupt(&a)? == OnCorrupt::MoveAside {
        if heal.is_some() {
            return Err("--nvm-corrupt move-aside needs --recovery full-copy: HEAL's catch-up sends a restarted node only what it missed while down, assuming its NVM holds the rest".into());
        }
        if model.rules().upd.is_some() {
            return Err(format!("--nvm-corrupt move-aside is refused for {model}: a Causal or Eventual node takes its next incarnation from its NVM, so with an empty one it would reuse update ids the others have applied"));
        }
    }
    if let Some(addr) = a.resp {
        serve_resp(&a, &cfg, model, addr)?;
    }
    let factory = DdpFactory {
        bugs: Bugs::parse(&protocol_bugs(&a.bugs))?,
        heal,
        ..DdpFactory::new(model, Params::TCP)
    };
    host::run(cfg, listener, factory).map_err(|e| node_error(a.id, &e))
}

/// `--resp`'s listener, bound and announced, the password `AUTH` needs, and the bounds.
fn resp_port(
    a: &NodeArgs,
    cfg: &HostConfig,
    addr: SocketAddr,
) -> Result<(TcpListener, Option<String>, Bounds), String> {
    let password = crate::serve_cmd::client_password(Some(&cfg.keys), addr.ip())?;
    let listener =
        TcpListener::bind(addr).map_err(|e| format!("--resp: cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("node {}: RESP on {bound} (AUTH with the client key)", a.id);
    let bounds = Bounds {
        limits: tandem_resp::Limits::default(),
        max_clients: a.max_clients.max(1),
    };
    Ok((listener, password, bounds))
}

/// Start this DDP node's RESP front end (its sessions reach the node over loopback).
fn serve_resp(
    a: &NodeArgs,
    cfg: &HostConfig,
    model: Model,
    addr: SocketAddr,
) -> Result<(), String> {
    let (listener, password, bounds) = resp_port(a, cfg, addr)?;
    let front = tandem_ddp_lab::resp::DdpResp {
        node: a.id,
        node_addr: cfg.peers[a.id as usize].1,
        model,
        keys: cfg.keys.clone(),
        password,
        bug_cached_reads: a.bugs.iter().any(|b| b == RESP_CACHED_READS),
        bounds,
    };
    tandem_ddp_lab::resp::spawn(front, listener).map_err(|e| format!("--resp: {e}"))?;
    Ok(())
}

/// Start a Kite or ZAB node's RESP front end (Kite's client API).
fn serve_kite_resp(a: &NodeArgs, cfg: &HostConfig) -> Result<(), String> {
    let Some(addr) = a.resp else { return Ok(()) };
    let (listener, password, bounds) = resp_port(a, cfg, addr)?;
    let front = tandem_kite_lab::resp::KiteResp {
        node: a.id,
        system: a.system.clone(),
        node_addr: cfg.peers[a.id as usize].1,
        keys: cfg.keys.clone(),
        password,
        bounds,
    };
    tandem_kite_lab::resp::spawn(front, listener).map_err(|e| format!("--resp: {e}"))?;
    Ok(())
}

/// The runtime's own planted bugs (`--inject-bug ignore-lease`): the node
/// serves clients without a lease from the manager; `lease-from-receipt`:
/// it counts each lease from when the grant arrived.
const IGNORE_LEASE: &str = "ignore-lease";
const LEASE_FROM_RECEIPT: &str = "lease-from-receipt";
/// The RESP front end's planted bug: `GET`s answered from its own writes.
const RESP_CACHED_READS: &str = "resp-cached-reads";

/// The `--inject-bug` names that are the protocol engine's.
fn protocol_bugs(bugs: &[String]) -> Vec<String> {
    bugs.iter()
        .filter(|b| ![IGNORE_LEASE, LEASE_FROM_RECEIPT, RESP_CACHED_READS].contains(&b.as_str()))
        .cloned()
        .collect()
}

fn nvm_corrupt(a: &NodeArgs) -> Result<OnCorrupt, String> {
    OnCorrupt::parse(&a.nvm_corrupt).map_err(|e| format!("--nvm-corrupt: {e}"))
}

/// The message of a node that stopped: with a hint when its NVM is corrupt.
fn node_error(id: u16, e: &std::io::Error) -> String {
    if nvm_file::corruption(e).is_some() {
        format!("node {id}: {e}. To move it aside and rejoin by a full copy (this node's NVM treated as lost), restart with --nvm-corrupt move-aside")
    } else {
        format!("node {id}: {e}")
    }
}

/// The host configuration shared by every system: listen on our --peers
/// address, static membership unless --manager.
fn host_config(a: &NodeArgs) -> Result<(HostConfig, TcpListener), String> {
    let peers = parse_addrs(&a.peers)?;
    let me = *peers.get(a.id as usize).ok_or_else(|| {
        format!(
            "--id {} is not a position in --peers ({} nodes)",
            a.id,
            peers.len()
        )
    })?;
    let manager = a
        .manager
        .as_deref()
        .map(|m| {
            m.parse::<SocketAddr>()
                .map_err(|e| format!("--manager {m}: {e}"))
        })
        .transpose()?;
    let listener =
        listen_patiently(me).map_err(|e| format!("node {}: cannot listen on {me}: {e}", a.id))?;
    let cfg = HostConfig {
        id: a.id,
        peers: peers
            .iter()
            .enumerate()
            .map(|(i, &p)| (i as u16, p))
            .collect(),
        manager,
        keys: secret(a.secret.as_deref())?,
        nvm: a.nvm.clone(),
        nvm_bytes: crate::args::parse_size(&a.nvm_size)?,
        nvm_corrupt: nvm_corrupt(a)?,
        fsync: a.fsync,
        heartbeat: Duration::from_millis(a.heartbeat_ms),
        lease: Duration::from_millis(a.lease_ms),
        ignore_lease: a.bugs.iter().any(|b| b == IGNORE_LEASE),
        lease_from_receipt: a.bugs.iter().any(|b| b == LEASE_FROM_RECEIPT),
    };
    Ok((cfg, listener))
}

/// `tandem node --system kite`: one Kite replica (crash-stop: nothing is
/// recovered from the NVM file, which only the host needs).
fn kite_node(a: NodeArgs) -> Result<(), String> {
    if !a.bugs.is_empty() || a.recovery != "full-copy" {
        return Err("--inject-bug and --recovery are DDP's; Kite has --mutant".into());
    }
    if nvm_corrupt(&a)? != OnCorrupt::Stop {
        return Err(
            "--nvm-corrupt move-aside is DDP's: a Kite replica is crash-stop and never rejoins"
                .into(),
        );
    }
    let mut kcfg = tandem_kite::KiteConfig::default();
    if let Some(ms) = a.timeout_ms {
        if !(ms > 0.0 && ms.is_finite()) {
            return Err(format!("--timeout-ms {ms}: must be positive"));
        }
        kcfg.timeout_ns = (ms * 1e6) as u64;
        kcfg.retry_ns = kcfg.timeout_ns / 2;
    }
    if let Some(m) = &a.mutant {
        kcfg.mutant =
            Some(tandem_kite::Mutant::parse(m).ok_or_else(|| {
                format!("--mutant {m}: unknown (see `tandem kite check --help`)")
            })?);
    }
    refuse_a_kite_restart(&a)?;
    let (cfg, listener) = host_config(&a)?;
    let me = cfg.peers[a.id as usize].1;
    println!(
        "node {} (kite, time-out {} us) listening on {me}",
        a.id,
        kcfg.timeout_ns / 1000
    );
    serve_kite_resp(&a, &cfg)?;
    host::run(cfg, listener, tandem_kite::simcheck::KiteFactory(kcfg))
        .map_err(|e| node_error(a.id, &e))
}

/// Kite is crash-stop (Kite §2.1): a replica back with empty state would
/// count in read and write quorums it no longer intersects. Its state file
/// records that it ran; starting again from it is refused.
fn refuse_a_kite_restart(a: &NodeArgs) -> Result<(), String> {
    if !a.nvm.exists() {
        return Ok(());
    }
    let size = crate::args::parse_size(&a.nvm_size)?;
    let (_, image) =
        tandem_net::nvm_file::NvmFile::<tandem_kite::types::KiteRecord>::open(&a.nvm, size)
            .map_err(|e| format!("node {}: {}: {e}", a.id, a.nvm.display()))?;
    if image.is_empty() {
        return Ok(());
    }
    Err(format!(
        "node {}: this Kite replica ran before ({} records it). Kite is crash-stop (Kite §2.1): \
         a replica that restarts comes back empty and would count in quorums it no longer \
         intersects, losing acknowledged writes. Leave it down (the others serve without it), \
         or start a new cluster with fresh state files.",
        a.id,
        a.nvm.display()
    ))
}

/// `tandem node --system zab`: one member of the in-memory ZAB ensemble
/// that `tandem kite bench` measures Kite against (node 0 is the leader;
/// no leader election, so a dead leader stops writes).
fn zab_node(a: NodeArgs) -> Result<(), String> {
    if !a.bugs.is_empty() || a.recovery != "full-copy" || a.timeout_ms.is_some() {
        return Err(
            "--inject-bug and --recovery are DDP's, --timeout-ms Kite's; zab takes none".into(),
        );
    }
    let mut params = tandem_zab::ZabParams::default();
    match a.mutant.as_deref() {
        None => {}
        Some("join-early") => params.bug_join_early = true,
        Some("no-stall-timer") => params.bug_no_stall = true,
        Some(m) => {
            return Err(format!(
                "--mutant {m}: zab has join-early and no-stall-timer"
            ))
        }
    }
    if nvm_corrupt(&a)? != OnCorrupt::Stop {
        return Err("--nvm-corrupt move-aside is DDP's (zab keeps nothing durable)".into());
    }
    let (cfg, listener) = host_config(&a)?;
    let me = cfg.peers[a.id as usize].1;
    println!(
        "node {} (zab, {}) listening on {me}",
        a.id,
        if a.id == 0 { "leader" } else { "follower" }
    );
    serve_kite_resp(&a, &cfg)?;
    host::run(
        cfg,
        listener,
        tandem_zab::kite_api::KiteZabFactory::with(params),
    )
    .map_err(|e| node_error(a.id, &e))
}

/// `tandem node --system ddp-echo` (internal): a node that carries the
/// messages of a ⟨Lin, Synch⟩ write and nothing else, the like-for-like
/// ceiling `tandem ddp bench --net tcp` sets the models beside.
fn ddp_echo_node(a: NodeArgs) -> Result<(), String> {
    let (cfg, listener) = host_config(&a)?;
    println!(
        "node {} (ddp-echo) listening on {}",
        a.id, cfg.peers[a.id as usize].1
    );
    host::run(cfg, listener, tandem_ddp_lab::echo::DdpEchoFactory).map_err(|e| node_error(a.id, &e))
}

/// Bind `addr`, retrying for up to 5 s while it is in use: a restarted node
/// may find its port still held for a moment by what its last run left
/// (`tandem demo heal` once failed 1 of 20 runs with "Address already in
/// use" on restart; the holder was not identified).
fn listen_patiently(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut told = false;
    loop {
        match TcpListener::bind(addr) {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < give_up =>
            {
                if !std::mem::replace(&mut told, true) {
                    eprintln!("{addr} is in use; retrying for 5 s");
                }
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r,
        }
    }
}

#[derive(Args)]
pub struct ManagerArgs {
    #[arg(long)]
    listen: String,
    /// Number of nodes (ids 0..N), all members at start.
    #[arg(long, default_value_t = 5)]
    nodes: u16,
    #[arg(long)]
    secret: Option<String>,
    /// Lease of each heartbeat; a node silent this long (plus 25 %) is removed.
    #[arg(long, default_value_t = 200)]
    lease_ms: u64,
    /// Keep the manager's state (epoch, members, boot ids) in this file, fsync'd before each
    /// announcement, so a restarted manager goes on from its epoch. Created if missing.
    #[arg(long, conflicts_with = "zookeeper")]
    state: Option<std::path::PathBuf>,
    /// Keep it in ZooKeeper instead (host:port[,host:port...]), in the znode --zk-path.
    #[arg(long)]
    zookeeper: Option<String>,
    #[arg(long, default_value = "/tandem/ddp-manager")]
    zk_path: String,
}

pub fn manager(a: ManagerArgs) -> Result<(), String> {
    let listener = TcpListener::bind(&a.listen)
        .map_err(|e| format!("manager: cannot listen on {}: {e}", a.listen))?;
    println!(
        "manager listening on {}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let lease = a.lease_ms * 1_000_000;
    let cfg = ManagerConfig {
        lease_ns: lease,
        margin_ns: lease / 4,
        ..ManagerConfig::default()
    };
    let members: Vec<u16> = (0..a.nodes).collect();
    let store: Option<Box<dyn ManagerStore>> = match (&a.state, &a.zookeeper) {
        (Some(p), _) => Some(Box::new(FileStore::new(p))),
        (None, Some(hosts)) => Some(Box::new(crate::zk_store::ZkManagerStore::open(
            hosts, &a.zk_path,
        )?)),
        (None, None) => None,
    };
    manager::serve(listener, secret(a.secret.as_deref())?, &members, cfg, store)
}

#[derive(Args)]
pub struct LoadArgs {
    /// Node addresses.
    #[arg(long)]
    nodes: String,
    #[arg(long)]
    secret: Option<String>,
    #[arg(long, default_value_t = 20)]
    sessions: u64,
    #[arg(long, default_value_t = 0)]
    first_session: u64,
    /// ycsb-a, ycsb-b, ycsb-c or ycsb-w (Zipfian keys unless --uniform).
    #[arg(long, default_value = "ycsb-a")]
    workload: String,
    /// Records (keys).
    #[arg(long, visible_alias = "keys", default_value_t = 1000)]
    records: u64,
    #[arg(long)]
    uniform: bool,
    /// The cluster's model: its scopes and transactions shape the sessions
    /// (Scope: a persist every 10 writes; Trans: transactions of 5 requests).
    #[arg(long, default_value = "lin-synch")]
    model: String,
    /// Seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the history (JSON lines) here.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Check the history for linearizability (Lin models).
    #[arg(long)]
    check_lin: bool,
}

/// Reads, writes and poller waits this process's sessions have made.
fn load_syscalls() -> u64 {
    tandem_net::conn::SYSCALLS.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn load(a: LoadArgs) -> Result<(), String> {
    let plan = SessionPlan::paper(
        Ycsb::new(&a.workload, a.records, a.uniform)?,
        Model::parse(&a.model)?,
    );
    let cfg = LoadConfig {
        nodes: parse_addrs(&a.nodes)?,
        keys: secret(a.secret.as_deref())?,
        sessions: a.sessions,
        first_session: a.first_session,
        plan,
        seed: a.seed,
        timeout: Duration::from_secs(2),
    };
    let nodes = cfg.nodes.clone();
    let keys = cfg.keys.clone();
    let stats = move || -> Option<tandem_net::wire::NodeStats> {
        let mut t = tandem_net::wire::NodeStats::default();
        for a in &nodes {
            t += tandem_net::client::node_stats(*a, &keys, Duration::from_secs(2)).ok()?;
        }
        Some(t)
    };
    let epoch = Instant::now();
    let load = Load::start(&cfg, epoch);
    let (s0, cpu0, sys0) = (stats(), tandem_sim::cpu::process_ns(), load_syscalls());
    let mut last = 0;
    while epoch.elapsed().as_secs_f64() < a.duration {
        std::thread::sleep(Duration::from_secs(1).min(Duration::from_secs_f64(
            (a.duration - epoch.elapsed().as_secs_f64()).max(0.0),
        )));
        let now = load.completed.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "  {:.0} s: {} ops/s",
            epoch.elapsed().as_secs_f64(),
            now - last
        );
        last = now;
    }
    let requests = load.completed.load(std::sync::atomic::Ordering::Relaxed);
    let (s1, cpu1, sys1) = (stats(), tandem_sim::cpu::process_ns(), load_syscalls());
    let ops = load.stop();
    let per = requests.max(1) as f64;
    println!(
        "load process: {:.0} ns of CPU and {:.2} syscalls per request",
        (cpu1 - cpu0) as f64 / per,
        (sys1 - sys0) as f64 / per
    );
    if let (Some(a), Some(b)) = (s0, s1) {
        println!(
            "nodes: {:.2} protocol messages and {:.2} syscalls per request (their own counters)",
            (b.sent - a.sent) as f64 / per,
            (b.syscalls - a.syscalls) as f64 / per
        );
    }
    let done = ops.iter().filter(|o| o.complete_ns.is_some()).count();
    println!("{requests} requests completed, {:.0} per second; history: {done} operations completed, {} unknown (transactional requests are not recorded)", requests as f64 / a.duration, ops.len() - done);
    // Answered without effect: refused, or PastLost (a causal past that died
    // with two crashed nodes; the session went on without it).
    let void = ops
        .iter()
        .filter(|o| o.complete_ns.is_some() && !o.ok)
        .count();
    if void > 0 {
        println!("{void} operations answered without effect (refused, or their causal past lost)");
    }
    if let Some(p) = &a.history {
        tandem_check::write_jsonl(p, &ops)?;
    }
    if a.check_lin {
        let s = tandem_check::check_linearizable(&ops)
            .map_err(|v| format!("history not linearizable: {v}"))?;
        println!(
            "linearizable: {} keys, {} operations checked",
            s.keys, s.ops
        );
    }
    Ok(())
}
