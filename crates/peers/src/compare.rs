//! `tandem compare`: one workload, the same keys, transaction mix and client
//! concurrency, run back to back for the same duration against Tandem
//! (pandora over TCP, memory-server processes, replicas 2) and each peer;
//! every system's final state is checked with the Tandem workload's own
//! consistency check. Results are reported with each system's durability and
//! replication as the running servers state them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tandem_cluster::backend::{Backend, MemoryServers};
use tandem_cluster::runner::{run, RunConfig};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};

use crate::driver::{drive, DriveConfig};
use crate::etcd_peer::EtcdSystem;
use crate::postgres_peer::PostgresSystem;
use crate::redis_peer::RedisSystem;
use crate::system::{Durability, Endpoints, PeerSystem};
use crate::workload::{PeerLedger, PeerWorkload};

/// The script that installs and starts the peers.
pub const PEERS_SCRIPT: &str = "bash scripts/peers.sh start";

pub const SYSTEMS: [&str; 4] = ["tandem", "postgres", "redis", "etcd"];

/// Issue 5's goals for committed SmallBank tx/s: Tandem at least this many
/// times the peer.
pub fn goal(workload: &str, peer: &str) -> Option<f64> {
    match (workload, peer) {
        ("smallbank", "postgres") => Some(10.0),
        ("smallbank", "redis") => Some(3.0),
        ("smallbank", "etcd") => Some(20.0),
        _ => None,
    }
}

#[derive(Clone, Debug)]
pub struct CompareConfig {
    pub workload: PeerWorkload,
    /// Names from [`SYSTEMS`], in run order.
    pub systems: Vec<String>,
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    /// The `tandem` binary (it serves `tandem memory-server`).
    pub tandem_exe: PathBuf,
    pub endpoints: Endpoints,
    pub progress: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct LatencyUs {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub mean: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SystemResult {
    pub system: String,
    pub clients: usize,
    pub committed: u64,
    /// Aborted by the store plus rolled back by the application (as Tandem counts them).
    pub aborted: u64,
    pub abort_rate: f64,
    /// Aborts by cause where the system tells them (Tandem: its abort
    /// reasons; peers on SmallBank: store conflicts vs application rollbacks).
    pub aborts_by_reason: BTreeMap<String, u64>,
    pub duration_s: f64,
    pub throughput_tps: f64,
    pub latency_us: LatencyUs,
    pub check_passed: bool,
    pub violations: Vec<String>,
    pub errors: Vec<String>,
    pub durability: Durability,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub peer: String,
    /// Tandem's committed tx/s over the peer's.
    pub tandem_over_peer: f64,
    pub goal: Option<f64>,
    pub met: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub workload: String,
    /// SmallBank accounts or micro keys.
    pub rows: u64,
    pub clients: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub seed: u64,
    pub systems: Vec<SystemResult>,
    pub ratios: Vec<Ratio>,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.systems
            .iter()
            .all(|s| s.check_passed && s.errors.is_empty())
    }
}

fn rows(w: &PeerWorkload) -> u64 {
    w.tables().first().map(|t| t.1).unwrap_or(0)
}

pub fn peer(name: &str, e: &Endpoints) -> Option<Box<dyn PeerSystem>> {
    match name {
        "postgres" => Some(Box::new(PostgresSystem::new(e.postgres_port))),
        "redis" => Some(Box::new(RedisSystem::new(e.redis_port))),
        "etcd" => Some(Box::new(EtcdSystem::new(e.etcd_ports))),
        _ => None,
    }
}

/// Parse `--systems`: comma-separated names from [`SYSTEMS`], no repeats.
pub fn parse_systems(s: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !SYSTEMS.contains(&name) {
            return Err(format!(
                "unknown system '{name}' (expected some of {})",
                SYSTEMS.join(",")
            ));
        }
        if !out.iter().any(|o| o == name) {
            out.push(name.to_string());
        }
    }
    if out.is_empty() {
        return Err("--systems names no system".into());
    }
    Ok(out)
}

fn tandem_durability() -> Durability {
    Durability {
        version: format!("Tandem {} (pandora)", env!("CARGO_PKG_VERSION")),
        persistence: "none: memory only, no disk".into(),
        replication: "2 replicas over 3 memory-server processes on loopback (TCP); a commit is acknowledged once every replica is written".into(),
    }
}

/// Tandem's harness with the comparison's shape: 3 memory-server processes,
/// replicas 2, the clients split over two compute threads (coordinators).
fn run_tandem(cfg: &CompareConfig) -> Result<SystemResult, String> {
    let spec = match &cfg.workload {
        PeerWorkload::SmallBank(s) => WorkloadSpec::SmallBank(s.clone()),
        PeerWorkload::Micro(m) => WorkloadSpec::Micro(m.clone()),
    };
    let mut rc = RunConfig::new(Mode::Pandora, spec);
    rc.memory_nodes = 3;
    rc.replicas = 2;
    let (nodes, coords) = if cfg.clients >= 2 && cfg.clients / 2 * 2 == cfg.clients {
        (2, cfg.clients / 2)
    } else {
        (1, cfg.clients)
    };
    rc.compute_nodes = nodes;
    rc.coordinators = u16::try_from(coords).map_err(|_| "too many clients".to_string())?;
    rc.warmup = cfg.warmup;
    rc.duration = cfg.duration;
    rc.seed = cfg.seed;
    rc.progress = cfg.progress;
    rc.check = true;
    // As `tandem bench`: no crash is injected, so a lenient failure detector
    // (scheduling hiccups on two shared cores are not crashes).
    rc.heartbeat_timeout = Duration::from_millis(100);
    rc.validate()?;
    let layout = Layout::new(&rc.store_config())?;
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    let secret = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (t ^ ((std::process::id() as u64) << 32)) | 1
    };
    let servers = MemoryServers::spawn(&cfg.tandem_exe, rc.memory_nodes as usize, region, secret)
        .map_err(|e| {
        format!(
            "cannot start Tandem memory servers ({}): {e}",
            cfg.tandem_exe.display()
        )
    })?;
    let r = run(&rc, &Backend::Tcp(servers.cluster()))?;
    drop(servers);
    let mut violations = r.violations.clone();
    if !r.false_positives.is_empty() {
        violations.push(format!(
            "compute nodes {:?} were declared failed without crashing",
            r.false_positives
        ));
    }
    Ok(SystemResult {
        system: "tandem".into(),
        clients: nodes as usize * coords,
        committed: r.committed,
        aborted: r.aborted,
        abort_rate: r.abort_rate,
        aborts_by_reason: r.aborts_by_reason.clone(),
        duration_s: r.duration_s,
        throughput_tps: r.throughput_tps,
        latency_us: LatencyUs {
            p50: r.latency_us.p50,
            p99: r.latency_us.p99,
            p999: r.latency_us.p999,
            mean: r.latency_us.mean,
        },
        check_passed: r.check_passed == Some(true) && r.false_positives.is_empty(),
        violations,
        errors: r.errors,
        durability: tandem_durability(),
    })
}

fn run_peer(
    sys: &dyn PeerSystem,
    durability: Durability,
    cfg: &CompareConfig,
) -> Result<SystemResult, String> {
    let w = &cfg.workload;
    if cfg.progress {
        eprintln!(
            "compare: loading {} ({} rows)",
            sys.name(),
            w.tables().iter().map(|t| t.1).sum::<u64>()
        );
    }
    sys.load(w)
        .map_err(|e| format!("loading {} failed: {e}", sys.name()))?;
    let dc = DriveConfig {
        clients: cfg.clients,
        warmup: cfg.warmup,
        duration: cfg.duration,
        seed: cfg.seed,
        progress_every: cfg.progress.then_some(Duration::from_secs(1)),
    };
    let d = drive(sys, w, &dc)?;
    let mut live = Vec::new();
    for (t, n) in w.tables() {
        live.push(
            sys.snapshot(t, n)
                .map_err(|e| format!("inspecting {} failed: {e}", sys.name()))?,
        );
    }
    let violations = w.verify(&live, &d.ledger);
    // The ledger counts the whole run, warm-up included.
    let aborts_by_reason = match &d.ledger {
        PeerLedger::SmallBank(l) => BTreeMap::from([
            ("conflict (whole run)".to_string(), l.aborted),
            (
                "rolled back by SmallBank (whole run)".to_string(),
                l.rolled_back,
            ),
        ]),
        PeerLedger::Micro(_) => BTreeMap::new(),
    };
    Ok(SystemResult {
        system: sys.name().into(),
        clients: cfg.clients,
        committed: d.committed,
        aborted: d.aborted,
        abort_rate: d.aborted as f64 / (d.committed + d.aborted).max(1) as f64,
        aborts_by_reason,
        duration_s: d.elapsed_s,
        throughput_tps: d.committed as f64 / d.elapsed_s.max(1e-9),
        latency_us: LatencyUs {
            p50: d.hist.value_at_quantile(0.5),
            p99: d.hist.value_at_quantile(0.99),
            p999: d.hist.value_at_quantile(0.999),
            mean: d.hist.mean(),
        },
        check_passed: violations.is_empty(),
        violations,
        errors: d.errors,
        durability,
    })
}

/// Run every system of `cfg` back to back. Peers are probed first, so a
/// missing server fails the run before anything is measured.
pub fn compare(cfg: &CompareConfig) -> Result<Comparison, String> {
    if cfg.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    let mut peers: Vec<(Box<dyn PeerSystem>, Durability)> = Vec::new();
    for name in cfg.systems.iter().filter(|s| *s != "tandem") {
        let sys = peer(name, &cfg.endpoints).ok_or_else(|| format!("unknown system '{name}'"))?;
        let d = sys.durability().map_err(|e| {
            format!("{name} is not reachable on {} ({e}); start the peers with `{PEERS_SCRIPT}` (or `{PEERS_SCRIPT} {name}`), or leave it out of --systems", sys.endpoint())
        })?;
        peers.push((sys, d));
    }
    let mut results = Vec::new();
    for name in &cfg.systems {
        if cfg.progress {
            eprintln!(
                "compare: {name}, {} clients, {:.1}s warm-up + {:.1}s measured",
                cfg.clients,
                cfg.warmup.as_secs_f64(),
                cfg.duration.as_secs_f64()
            );
        }
        let r = if name == "tandem" {
            run_tandem(cfg)?
        } else {
            let (sys, d) = peers
                .iter()
                .find(|(s, _)| s.name() == name)
                .expect("probed above");
            run_peer(sys.as_ref(), d.clone(), cfg)?
        };
        results.push(r);
    }
    let tandem_tps = results
        .iter()
        .find(|r| r.system == "tandem")
        .map(|r| r.throughput_tps);
    let ratios = match tandem_tps {
        Some(t) => results
            .iter()
            .filter(|r| r.system != "tandem")
            .map(|r| {
                let ratio = t / r.throughput_tps.max(1e-9);
                let goal = goal(cfg.workload.name(), &r.system);
                Ratio {
                    peer: r.system.clone(),
                    tandem_over_peer: ratio,
                    goal,
                    met: goal.map(|g| ratio >= g),
                }
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(Comparison {
        workload: cfg.workload.name().into(),
        rows: rows(&cfg.workload),
        clients: cfg.clients,
        warmup_s: cfg.warmup.as_secs_f64(),
        duration_s: cfg.duration.as_secs_f64(),
        seed: cfg.seed,
        systems: results,
        ratios,
    })
}

/// The human-readable report (stdout).
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let what = if c.workload == "smallbank" {
        "accounts"
    } else {
        "keys"
    };
    s += &format!(
        "{} ({} {what}), {} clients per system, {:.1}s measured after {:.1}s warm-up, systems run back to back\n\n",
        c.workload, c.rows, c.clients, c.duration_s, c.warmup_s
    );
    s += &format!(
        "{:<9} {:>12} {:>10} {:>9} {:>9} {:>8}  {}\n",
        "system", "committed/s", "committed", "p50 us", "p99 us", "aborts", "check"
    );
    for r in &c.systems {
        s += &format!(
            "{:<9} {:>12.0} {:>10} {:>9} {:>9} {:>7.1}%  {}\n",
            r.system,
            r.throughput_tps,
            r.committed,
            r.latency_us.p50,
            r.latency_us.p99,
            100.0 * r.abort_rate,
            if r.check_passed && r.errors.is_empty() {
                "passed"
            } else {
                "FAILED"
            }
        );
    }
    if !c.ratios.is_empty() {
        s += "\nTandem vs peers (committed tx/s):\n";
        for r in &c.ratios {
            let goal = match (r.goal, r.met) {
                (Some(g), Some(true)) => format!("goal >= {g:.0}x: met"),
                (Some(g), _) => format!("goal >= {g:.0}x: NOT met"),
                _ => "no goal set".into(),
            };
            s += &format!(
                "  tandem / {:<9} {:>8.1}x   {goal}\n",
                r.peer, r.tandem_over_peer
            );
        }
    }
    s += "\nDurability and replication (as the running servers report them):\n";
    for r in &c.systems {
        s += &format!(
            "  {:<9} {}; {}; replication: {}\n",
            r.system, r.durability.version, r.durability.persistence, r.durability.replication
        );
    }
    for r in &c.systems {
        for v in r.violations.iter().take(5) {
            s += &format!("  {} violation: {v}\n", r.system);
        }
        for e in r.errors.iter().take(5) {
            s += &format!("  {} error: {e}\n", r.system);
        }
    }
    s
}
