//! `tandem pandora membership`, `tandem pandora compute-server`, `tandem pandora check-cluster`: the
//! roles of a multi-process Pandora deployment (memory servers are
//! `tandem pandora memory-server`). All speak TCP on loopback by default.

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tandem_cluster::procs::wait::wait_for_listeners;
use tandem_cluster::procs::{self, ComputeServerConfig, MembershipServerConfig, Replica};
use tandem_cluster::zk::{Campaign, ZkState};
use tandem_dkvs::{Mode, StoreConfig};
use tandem_fabric::tcp::TcpCluster;
use tandem_workloads::micro::{KeyChooser, MicroSpec};

use crate::args::{parse_addrs, require_keyring, write_json};

/// What every process must agree on to compute the same layout.
#[derive(Args, Clone)]
pub struct ClusterArgs {
    /// Memory servers, comma-separated, in node-id order.
    #[arg(long)]
    memory: String,
    /// Master secret (hex; default $TANDEM_KEYRING, a keyring file with this role's keys, then $TANDEM_SECRET).
    #[arg(long)]
    secret: Option<String>,
    #[arg(long, default_value_t = 2)]
    replicas: u16,
    /// micro: number of keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Coordinator-id space = log slots per memory node.
    #[arg(long, default_value_t = 1024)]
    log_slots: u32,
    /// Lay the store out for DART's litmus table of this capacity instead of
    /// micro (`tandem dart --fabric tcp --crash-rate R` starts the
    /// membership process with it, so recovery reads the right places).
    #[arg(long, hide = true)]
    litmus_keys: Option<u64>,
    /// Also lay out a table of this many keys for Redis clients
    /// (`compute-server --resp`); every process of the cluster must pass the same.
    #[arg(long, default_value_t = 0)]
    resp_keys: u64,
    /// Bytes per slot of that table: a key and its value together may take this less 14.
    #[arg(long, default_value_t = 256)]
    slot_bytes: u32,
    /// Seconds to wait for peers (memory servers, the membership service)
    /// that are not up yet, before giving up.
    #[arg(long, default_value_t = 30.0)]
    wait: f64,
}

impl ClusterArgs {
    fn cluster(&self) -> Result<TcpCluster, String> {
        let addrs = parse_addrs(&self.memory)?;
        let keys = require_keyring(self.secret.as_deref())?;
        // The membership's listener and dials use the same credentials.
        tandem_cluster::procs::set_credentials(keys.clone())?;
        Ok(TcpCluster::new(addrs, keys))
    }
    fn micro(&self, write_ratio: f64) -> Result<MicroSpec, String> {
        let m = MicroSpec {
            keys: self.keys,
            write_ratio,
            ops_per_tx: 2,
            chooser: KeyChooser::Uniform,
        };
        m.validate()?;
        Ok(m)
    }
    fn patience(&self) -> Result<Duration, String> {
        if !(self.wait.is_finite() && self.wait >= 0.0) {
            return Err("--wait must not be negative".into());
        }
        Ok(Duration::from_secs_f64(self.wait))
    }
    /// Wait (bounded) until every memory server accepts connections.
    fn wait_for_memory(&self, who: &str) -> Result<(), String> {
        wait_for_listeners(
            who,
            "memory server",
            &parse_addrs(&self.memory)?,
            self.patience()?,
        )
    }
    fn store(&self) -> Result<StoreConfig, String> {
        let n = parse_addrs(&self.memory)?.len() as u16;
        if let Some(keys) = self.litmus_keys {
            let s = tandem_dart::proc_run::litmus_store(
                Mode::Pandora,
                n,
                self.replicas,
                self.log_slots,
                keys,
            );
            s.validate()?;
            return Ok(s);
        }
        let mut tables = self.micro(0.5)?.tables();
        if self.resp_keys > 0 {
            crate::serve_cmd::check_slot_bytes(self.slot_bytes)?;
            tables.push(tandem_dkvs::TableSpec {
                id: RESP_TABLE,
                name: "redis".into(),
                value_size: self.slot_bytes,
                capacity: self.resp_keys,
            });
        }
        let mut s = StoreConfig::new(Mode::Pandora, n, self.replicas, tables);
        s.partitions_per_table = 64;
        s.log_slots = self.log_slots;
        s.validate()?;
        Ok(s)
    }
}

/// The table `--resp-keys` adds, after micro's.
const RESP_TABLE: tandem_dkvs::TableId = 1;

#[derive(Args)]
pub struct MembershipArgs {
    #[arg(long, default_value = "127.0.0.1:7300")]
    listen: String,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Heartbeat timeout in milliseconds. The default is chosen for several
    /// processes sharing a loaded two-core machine (no false positive in 40
    /// runs of the README cluster beside two busy loops, ARCHITECTURE.md);
    /// Pandora's 5 ms needs dedicated cores.
    #[arg(long, default_value_t = 250.0)]
    timeout_ms: f64,
    /// A memory server that answers no probe for this many milliseconds is
    /// declared failed: compute servers switch primaries to the first live
    /// replica, and a replacement (`memory-server --replaces N`) is filled
    /// and admitted (docs/DESIGN.md §4.6).
    #[arg(long, default_value_t = 500.0)]
    memory_timeout_ms: f64,
    /// Load the micro dataset before admitting compute servers (skipped when
    /// the state is resumed from ZooKeeper: the cluster is running).
    #[arg(long)]
    load: bool,
    /// Keep the membership state in ZooKeeper (`host:port[,host:port...]`),
    /// as Pandora does: a restarted membership process resumes from it.
    #[arg(long)]
    zookeeper: Option<String>,
    /// The znode holding the state (one per cluster).
    #[arg(long, default_value = "/tandem/membership")]
    zk_path: String,
    /// Every membership replica's listen address, comma-separated, this
    /// one's (`--listen`) among them (Pandora §3.2.4, the distributed
    /// failure detector; needs --zookeeper). Compute servers heartbeat to all
    /// of them; the one holding ZooKeeper's leader znode acts, and declares a
    /// node failed only when fewer than a majority of replicas heard it.
    #[arg(long)]
    fd_replicas: Option<String>,
    /// ZooKeeper session timeout in milliseconds: how soon a dead leader's
    /// znode expires and another replica takes over.
    #[arg(long, default_value_t = 2000)]
    zk_session_ms: u64,
    /// After resuming from ZooKeeper, milliseconds compute servers get to
    /// reconnect before their silence counts.
    #[arg(long, default_value_t = 1000.0)]
    restore_grace_ms: f64,
    /// Test-only: re-inject a recovery bug into log recovery (DART's process
    /// runs pass `tandem dart --inject-bug restore-one-replica` etc. on).
    #[arg(long, hide = true)]
    inject_bug: Vec<String>,
}

pub fn membership(a: MembershipArgs) -> Result<(), String> {
    let bugs = membership_bugs(&a.inject_bug)?;
    let memory = a.cluster.cluster()?;
    let store = a.cluster.store()?;
    check_membership_times(&a)?;
    let (replicas, index) = fd_replicas(&a)?;
    let listener =
        TcpListener::bind(&a.listen).map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    // Listen first (compute servers may wait for it), then wait for the memory servers.

    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {local}");
    let timeout = Duration::from_secs_f64(a.timeout_ms / 1e3);
    let replica = Replica::start(
        listener,
        index as u8,
        replicas.len() as u8,
        (timeout / 5).max(Duration::from_micros(200)),
    );
    let zookeeper = match &a.zookeeper {
        Some(hosts) => Some(open_zookeeper(
            &a, hosts, &replicas, index, local, &replica,
        )?),
        None => None,
    };
    wait_for_memory_servers(&a, zookeeper.as_ref())?;
    let resumed = zookeeper.as_ref().is_some_and(|z| z.restored().is_some());
    if a.load && resumed {
        eprintln!(
            "membership: the cluster is running (state resumed from ZooKeeper); skipping --load"
        );
    } else if a.load {
        let n = procs::load_micro(&memory, &store, &a.cluster.micro(0.5)?)?;
        eprintln!("membership: loaded {n} keys");
    }
    procs::run_membership_server(MembershipServerConfig {
        replica,
        memory,
        store,
        heartbeat_timeout: timeout,
        zookeeper,
        restore_grace: Duration::from_secs_f64(a.restore_grace_ms / 1e3),
        recovery_bugs: bugs.recovery,
        publish_before_recovery: bugs.deployment.publish_before_recovery,
        memory_timeout: Duration::from_secs_f64(a.memory_timeout_ms / 1e3),
    })
}

/// The membership's timeouts are positive, its restore grace not negative.
fn check_membership_times(a: &MembershipArgs) -> Result<(), String> {
    if !(a.timeout_ms.is_finite() && a.timeout_ms > 0.0) {
        return Err("--timeout-ms must be positive".into());
    }
    if !(a.memory_timeout_ms.is_finite() && a.memory_timeout_ms > 0.0) {
        return Err("--memory-timeout-ms must be positive".into());
    }
    if !(a.restore_grace_ms.is_finite() && a.restore_grace_ms >= 0.0) {
        return Err("--restore-grace-ms must not be negative".into());
    }
    Ok(())
}

/// Every replica of the failure detector, and this one's index among them.
fn fd_replicas(a: &MembershipArgs) -> Result<(Vec<String>, usize), String> {
    let replicas: Vec<String> = match &a.fd_replicas {
        None => vec![a.listen.clone()],
        Some(list) => list
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect(),
    };
    let index = replicas
        .iter()
        .position(|r| *r == a.listen)
        .ok_or_else(|| {
            format!(
                "--listen {} is not among --fd-replicas {}",
                a.listen,
                replicas.join(",")
            )
        })?;
    if replicas.len() > tandem_membership::MAX_FD_REPLICAS as usize {
        return Err(format!(
            "at most {} membership replicas",
            tandem_membership::MAX_FD_REPLICAS
        ));
    }
    if replicas.len() > 1 && a.zookeeper.is_none() {
        return Err("--fd-replicas needs --zookeeper: the replicas elect their leader and share their state there".into());
    }
    Ok((replicas, index))
}

/// The membership's state in ZooKeeper at `hosts` (with several replicas,
/// also their leader election), resumed if there is one.
fn open_zookeeper(
    a: &MembershipArgs,
    hosts: &str,
    replicas: &[String],
    index: usize,
    local: std::net::SocketAddr,
    replica: &std::sync::Arc<Replica>,
) -> Result<ZkState, String> {
    let cluster = parse_addrs(&a.cluster.memory)?
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let campaign = (replicas.len() > 1).then(|| {
        let r = replica.clone();
        Campaign {
            me: local.to_string(),
            on_leader: Box::new(move |who: &str| r.set_leader(who)),
        }
    });
    let z: ZkState = ZkState::open(
        hosts,
        &a.zk_path,
        &cluster,
        Duration::from_millis(a.zk_session_ms),
        campaign,
    )?;
    if replicas.len() > 1 {
        eprintln!("membership: replica {index} of {} leads", replicas.len());
    }
    eprintln!(
        "membership: state in ZooKeeper {}: {}",
        z.describe(),
        if z.restored().is_some() {
            "found, resuming"
        } else {
            "none yet, starting afresh"
        }
    );
    Ok(z)
}

/// The memory servers to wait for: a resumed service knows which are down
/// and where replacements listen.
fn wait_for_memory_servers(a: &MembershipArgs, zookeeper: Option<&ZkState>) -> Result<(), String> {
    match zookeeper
        .and_then(|z| z.restored())
        .and_then(|s| s.memory.as_ref())
    {
        Some(config) => {
            let live: Vec<std::net::SocketAddr> = config
                .addrs
                .iter()
                .enumerate()
                .filter(|(m, _)| !config.down.contains(&(*m as u16)))
                .map(|(_, a)| a.parse().map_err(|e| format!("stored address {a}: {e}")))
                .collect::<Result<_, String>>()?;
            wait_for_listeners("membership", "memory server", &live, a.cluster.patience()?)?;
        }
        None => a.cluster.wait_for_memory("membership")?,
    }
    Ok(())
}

/// `--inject-bug` of the membership: recovery bugs, and the deployment bug
/// `publish-before-recovery` (the others live in the compute servers).
fn membership_bugs(names: &[String]) -> Result<tandem_dart::campaign::InjectedBugs, String> {
    let bugs = tandem_dart::campaign::parse_bugs(names)?;
    if bugs.store != Default::default() {
        return Err(format!(
            "the membership takes recovery bugs ({}) and publish-before-recovery, not {names:?}",
            tandem_dart::campaign::RECOVERY_BUG_NAMES.join(", ")
        ));
    }
    if !names.is_empty() {
        eprintln!("membership: log recovery re-injects {}", names.join(", "));
    }
    Ok(bugs)
}

#[derive(Args)]
pub struct ComputeServerArgs {
    /// The membership service: every replica's address, comma-separated.
    #[arg(long)]
    membership: String,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// This compute node's id (1..32767, unique in the cluster; new
    /// incarnations of a fenced node get ids from the membership service).
    #[arg(long)]
    node: u16,
    #[arg(long, default_value_t = 16)]
    coordinators: u16,
    #[arg(long, default_value_t = 0.5)]
    write_ratio: f64,
    /// Seconds to run (default: 10 running micro; with --resp, until killed).
    #[arg(long)]
    duration: Option<f64>,
    /// Serve Redis's protocol (RESP2) on this address instead of running
    /// micro: each command, or MULTI/EXEC block, is a transaction on this
    /// server's coordinators (needs --resp-keys; docs/RESP.md).
    #[arg(long, requires = "resp_keys")]
    resp: Option<String>,
    /// Connections served at once on --resp.
    #[arg(long, default_value_t = 1024)]
    max_clients: usize,
    /// Heartbeat interval in milliseconds (at most a fifth of the
    /// membership's --timeout-ms; the default suits its default).
    #[arg(long, default_value_t = 5.0)]
    heartbeat_ms: f64,
    /// Record acknowledged writes here (survives kill -9), for check-cluster.
    #[arg(long)]
    ledger: Option<PathBuf>,
    #[arg(long)]
    json: Option<String>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A memory server the membership has up that stays unreachable this
    /// many milliseconds (a commit missed its write there, or the data link
    /// is down) ends this incarnation: the membership recovers its
    /// coordinators, settling the commits in doubt, and it comes back as a
    /// new one. Keep it above the membership's --memory-timeout-ms.
    #[arg(long, default_value_t = 3000.0)]
    verdict_patience_ms: f64,
    /// Test-only: plant a coordinator bug (`tandem pandora sim
    /// --inject-bug` lists them), so that a nemesis run can show it caught.
    #[arg(long = "inject-bug", hide = true)]
    inject_bug: Vec<String>,
}

pub fn compute_server(a: ComputeServerArgs) -> Result<(), String> {
    if a.node == 0 || a.node >= tandem_membership::FIRST_INCARNATION_ID {
        return Err(format!(
            "--node must be between 1 and {}",
            tandem_membership::FIRST_INCARNATION_ID - 1
        ));
    }
    let duration = match (a.duration, &a.resp) {
        (Some(d), _) => d,
        (None, None) => 10.0,
        // Until killed (ten years).
        (None, Some(_)) => 3.2e8,
    };
    if !(duration.is_finite() && duration > 0.0 && a.heartbeat_ms > 0.0) {
        return Err("--duration and --heartbeat-ms must be positive".into());
    }
    if !(a.verdict_patience_ms.is_finite() && a.verdict_patience_ms > 0.0) {
        return Err("--verdict-patience-ms must be positive".into());
    }
    let mut store = a.cluster.store()?;
    for b in &a.inject_bug {
        store.bugs = store.bugs.union(tandem_dkvs::BugSwitches::parse(b)?);
        eprintln!("compute node {}: coordinators re-inject {b}", a.node);
    }
    let resp = match &a.resp {
        Some(addr) => Some(resp_serving(&a, addr)?),
        None => None,
    };
    let r = procs::run_compute_server(ComputeServerConfig {
        node: a.node,
        membership: parse_addrs(&a.membership)?,
        memory: a.cluster.cluster()?,
        store,
        micro: a.cluster.micro(a.write_ratio)?,
        coordinators: a.coordinators,
        duration: Duration::from_secs_f64(duration),
        heartbeat_every: Duration::from_secs_f64(a.heartbeat_ms / 1e3),
        ledger: a.ledger,
        seed: a.seed,
        patience: a.cluster.patience()?,
        verdict_patience: Duration::from_secs_f64(a.verdict_patience_ms / 1e3),
        resp,
    })?;
    let fenced = r.incarnations.iter().filter(|i| i.fenced.is_some()).count();
    eprintln!(
        "compute node {}: {} committed, {} aborted, {} stray locks stolen; {} incarnations ({fenced} fenced)",
        r.node,
        r.committed,
        r.aborted,
        r.locks_stolen,
        r.incarnations.len()
    );
    for e in &r.errors {
        eprintln!("  error: {e}");
    }
    if let Some(p) = &a.json {
        write_json(p, &r)?;
    }
    if r.errors.is_empty() {
        Ok(())
    } else {
        Err("coordinators hit errors".into())
    }
}

/// `--resp`'s listener, bound before anything else starts (a port taken
/// fails at once), and its front end's settings.
fn resp_serving(a: &ComputeServerArgs, addr: &str) -> Result<procs::RespServing, String> {
    if a.cluster.resp_keys == 0 {
        return Err("--resp needs --resp-keys (the table Redis clients' keys live in), the same on every process of the cluster".into());
    }
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| format!("--resp {addr}: {e}"))?;
    let keys = require_keyring(a.cluster.secret.as_deref())?;
    let password = crate::serve_cmd::client_password(Some(&keys), addr.ip())?;
    let listener =
        TcpListener::bind(addr).map_err(|e| format!("--resp: cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!(
        "compute node {}: RESP on {bound} (AUTH with the client key)",
        a.node
    );
    let mut front = crate::serve_cmd::front_config(a.max_clients, password);
    front.description = format!(
        "pandora (compute server {} of a multi-process cluster)",
        a.node
    );
    Ok(procs::RespServing {
        listener,
        front,
        table: RESP_TABLE,
        slot_bytes: a.cluster.slot_bytes,
    })
}

#[derive(Args)]
pub struct CheckClusterArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Ledger files of every compute server that ran, comma-separated.
    #[arg(long)]
    ledgers: String,
    /// Ledgers of compute servers that crashed (every incarnation's ids
    /// count as failed; fenced incarnations of any ledger always do).
    #[arg(long, default_value = "")]
    failed: String,
}

pub fn check_cluster(a: CheckClusterArgs) -> Result<(), String> {
    let split = |s: &str| -> Vec<PathBuf> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
            .collect()
    };
    let ledger = procs::read_ledgers(&split(&a.ledgers))?;
    let mut failed = Vec::new();
    for p in split(&a.failed) {
        failed.extend(procs::read_ids(&p)?);
    }
    for p in split(&a.ledgers) {
        failed.extend(procs::fenced_ids(&p)?);
    }
    a.cluster.wait_for_memory("check-cluster")?;
    let c = procs::check_cluster(
        &a.cluster.cluster()?,
        &a.cluster.store()?,
        &a.cluster.micro(0.5)?,
        &ledger,
        &failed,
    )?;
    let v = &c.violations;
    eprintln!(
        "check-cluster: {} acknowledged writes, {} in doubt; {}",
        ledger.writes_committed,
        ledger.in_doubt,
        if v.is_empty() {
            "replicas identical, no lock held by a live coordinator, counters consistent"
                .to_string()
        } else {
            format!("{} VIOLATIONS", v.len())
        }
    );
    if c.stray_locks > 0 {
        eprintln!("  {} stray locks of failed coordinators (legitimate until stolen or swept by the membership)", c.stray_locks);
    }
    for x in v {
        eprintln!("  {x}");
    }
    if v.is_empty() {
        Ok(())
    } else {
        Err("the cluster failed its check".into())
    }
}
