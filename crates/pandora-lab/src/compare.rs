//! `tandem compare`: one workload, the same keys and transaction mix, run for
//! the same duration against Tandem (pandora over memory-server processes,
//! replicas 2, its verbs over TCP or on the servers' mapped regions: shm) and
//! each peer. The client count is swept, every system runs at every count,
//! and the systems alternate within each round (round r starts with the r-th
//! system), so no system always runs first or last. Each system is reported
//! at its best client count (the median of its rounds there), with the whole
//! curve beside it. Every run's final state is checked with the Tandem
//! workload's own consistency check; durability and replication are reported
//! as the running servers state them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tandem_cluster::backend::{Backend, MemoryServers};
use tandem_cluster::runner::{run, RunConfig};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};

use tandem_peers::driver::{drive, DriveConfig};
use tandem_peers::etcd_peer::EtcdSystem;
use tandem_peers::postgres_peer::PostgresSystem;
use tandem_peers::redis_peer::RedisSystem;
use tandem_peers::system::{Durability, Endpoints, PeerSystem};
use tandem_peers::workload::{PeerLedger, PeerWorkload};

/// The script that installs and starts the peers.
pub const PEERS_SCRIPT: &str = "bash scripts/peers.sh start";

/// Tandem over TCP, Tandem on shm, and the peers. `tandem` alone means `tandem-tcp`.
pub const SYSTEMS: [&str; 5] = ["tandem-tcp", "tandem-shm", "postgres", "redis", "etcd"];

/// Whether `system` is one of Tandem's.
pub fn is_tandem(system: &str) -> bool {
    system.starts_with("tandem")
}

/// The goals for committed SmallBank tx/s: Tandem at least this many times
/// the peer.
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
    /// Client counts to sweep, each run by every system.
    pub clients: Vec<usize>,
    /// Runs of every system at every client count (the median counts).
    pub rounds: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    /// The `tandem` binary (it serves `tandem pandora memory-server`).
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
    /// The sweep's client count this run was for (`clients` is what ran:
    /// Tandem splits them over two compute threads when the count is even).
    pub clients_asked: usize,
    /// Which round of the sweep (0-based).
    pub round: usize,
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

/// One point of a system's curve: the median of its rounds at `clients`.
#[derive(Clone, Debug, Serialize)]
pub struct CurvePoint {
    pub system: String,
    pub clients: usize,
    pub throughput_tps: f64,
    /// Every round at this point passed its check without errors.
    pub passed: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// `tandem-tcp` or `tandem-shm`.
    pub tandem: String,
    pub peer: String,
    /// Tandem's committed tx/s over the peer's, each at its best client count.
    pub tandem_over_peer: f64,
    pub goal: Option<f64>,
    pub met: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub workload: String,
    /// SmallBank accounts or micro keys.
    pub rows: u64,
    /// The client counts swept.
    pub clients: Vec<usize>,
    pub rounds: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub seed: u64,
    /// Each system at its best: the median run of its best client count.
    pub systems: Vec<SystemResult>,
    /// Every system at every client count.
    pub curve: Vec<CurvePoint>,
    /// Every run, in the order they ran.
    pub runs: Vec<SystemResult>,
    pub ratios: Vec<Ratio>,
}

impl Comparison {
    /// Every run of every system passed its check without errors.
    pub fn passed(&self) -> bool {
        self.runs
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
        let name = if name == "tandem" { "tandem-tcp" } else { name };
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

fn tandem_durability(shm: bool) -> Durability {
    let links = match shm {
        true => "their regions mapped by the compute threads (shm)",
        false => "verbs over loopback TCP",
    };
    Durability {
        version: format!("Tandem {} (pandora)", env!("CARGO_PKG_VERSION")),
        persistence: "none: memory only, no disk".into(),
        replication: format!("2 replicas over 3 memory-server processes (--pollers cpus), {links}; a commit is acknowledged once every replica is written"),
    }
}

/// Tandem's harness with the comparison's shape: 3 memory-server processes,
/// replicas 2, `clients` split over two compute threads (coordinators).
fn run_tandem(cfg: &CompareConfig, clients: usize, shm: bool) -> Result<SystemResult, String> {
    let spec = match &cfg.workload {
        PeerWorkload::SmallBank(s) => WorkloadSpec::SmallBank(s.clone()),
        PeerWorkload::Micro(m) => WorkloadSpec::Micro(m.clone()),
    };
    let mut rc = RunConfig::new(Mode::Pandora, spec);
    rc.memory_nodes = 3;
    rc.replicas = 2;
    let (nodes, coords) = if clients >= 2 && clients / 2 * 2 == clients {
        (2, clients / 2)
    } else {
        (1, clients)
    };
    rc.compute_nodes = nodes;
    rc.coordinators = u16::try_from(coords).map_err(|_| "too many clients".to_string())?;
    rc.warmup = cfg.warmup;
    rc.duration = cfg.duration;
    rc.seed = cfg.seed;
    rc.progress = cfg.progress;
    rc.check = true;
    // As `tandem pandora bench`: no crash is injected, so a lenient failure detector
    // (scheduling hiccups on two shared cores are not crashes).
    rc.heartbeat_timeout = Duration::from_millis(100);
    rc.validate()?;
    let layout = Layout::new(&rc.store_config())?;
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    let secret = tandem_fabric::auth::MasterSecret::generate();
    let (exe, count) = (&cfg.tandem_exe, rc.memory_nodes as usize);
    let servers = MemoryServers::spawn_pinned(exe, count, region, secret, shm).map_err(|e| {
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
        system: if shm { "tandem-shm" } else { "tandem-tcp" }.into(),
        clients: nodes as usize * coords,
        clients_asked: 0,
        round: 0,
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
        durability: tandem_durability(shm),
    })
}

fn run_peer(
    sys: &dyn PeerSystem,
    durability: Durability,
    cfg: &CompareConfig,
    clients: usize,
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
        clients,
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
        clients,
        clients_asked: 0,
        round: 0,
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

/// Run every system of `cfg` at every client count, alternating within each
/// round. Peers are probed first, so a missing server fails the run before
/// anything is measured.
pub fn compare(cfg: &CompareConfig) -> Result<Comparison, String> {
    if cfg.clients.is_empty() || cfg.clients.contains(&0) {
        return Err("--clients must list counts of at least 1".into());
    }
    if cfg.rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    let peers = probe_peers(cfg)?;
    let mut runs = Vec::new();
    for &clients in &cfg.clients {
        for round in 0..cfg.rounds {
            let n = cfg.systems.len();
            for name in (0..n).map(|i| &cfg.systems[(i + round) % n]) {
                if cfg.progress {
                    eprintln!(
                        "compare: {name}, {clients} clients, round {}/{}, {:.1}s warm-up + {:.1}s measured",
                        round + 1,
                        cfg.rounds,
                        cfg.warmup.as_secs_f64(),
                        cfg.duration.as_secs_f64()
                    );
                }
                let mut r = run_one(cfg, &peers, name, clients)?;
                (r.round, r.clients_asked) = (round, clients);
                runs.push(r);
            }
        }
    }
    Ok(summarise(cfg, runs))
}

/// The peers of `cfg` (not Tandem), each with its durability as it reports it.
fn probe_peers(cfg: &CompareConfig) -> Result<Vec<(Box<dyn PeerSystem>, Durability)>, String> {
    let mut peers: Vec<(Box<dyn PeerSystem>, Durability)> = Vec::new();
    for name in cfg.systems.iter().filter(|s| !is_tandem(s)) {
        let sys = peer(name, &cfg.endpoints).ok_or_else(|| format!("unknown system '{name}'"))?;
        let d = sys.durability().map_err(|e| {
            format!("{name} is not reachable on {} ({e}); start the peers with `{PEERS_SCRIPT}` (or `{PEERS_SCRIPT} {name}`), or leave it out of --systems", sys.endpoint())
        })?;
        peers.push((sys, d));
    }
    Ok(peers)
}

fn run_one(
    cfg: &CompareConfig,
    peers: &[(Box<dyn PeerSystem>, Durability)],
    name: &str,
    clients: usize,
) -> Result<SystemResult, String> {
    if is_tandem(name) {
        return run_tandem(cfg, clients, name == "tandem-shm");
    }
    let (sys, d) = peers
        .iter()
        .find(|(s, _)| s.name() == name)
        .expect("probed above");
    run_peer(sys.as_ref(), d.clone(), cfg, clients)
}

/// The median run of `system` at `clients` (by committed tx/s), and whether
/// every run there passed.
fn median_run<'a>(
    runs: &'a [SystemResult],
    system: &str,
    clients: usize,
) -> Option<(&'a SystemResult, bool)> {
    let mut at: Vec<&SystemResult> = runs
        .iter()
        .filter(|r| r.system == system && r.clients_asked == clients)
        .collect();
    at.sort_by(|a, b| a.throughput_tps.total_cmp(&b.throughput_tps));
    let passed = at.iter().all(|r| r.check_passed && r.errors.is_empty());
    at.get(at.len() / 2).map(|r| (*r, passed))
}

fn summarise(cfg: &CompareConfig, runs: Vec<SystemResult>) -> Comparison {
    let mut curve = Vec::new();
    let mut best: Vec<SystemResult> = Vec::new();
    for system in &cfg.systems {
        let mut top: Option<&SystemResult> = None;
        for &clients in &cfg.clients {
            let Some((r, passed)) = median_run(&runs, system, clients) else {
                continue;
            };
            curve.push(CurvePoint {
                system: system.clone(),
                clients,
                throughput_tps: r.throughput_tps,
                passed,
            });
            if top.is_none_or(|t| r.throughput_tps > t.throughput_tps) {
                top = Some(r);
            }
        }
        best.extend(top.cloned());
    }
    let ratios = ratios(cfg.workload.name(), &best);
    Comparison {
        workload: cfg.workload.name().into(),
        rows: rows(&cfg.workload),
        clients: cfg.clients.clone(),
        rounds: cfg.rounds,
        warmup_s: cfg.warmup.as_secs_f64(),
        duration_s: cfg.duration.as_secs_f64(),
        seed: cfg.seed,
        systems: best,
        curve,
        runs,
        ratios,
    }
}

/// Each Tandem variant over each peer, both at their best.
fn ratios(workload: &str, best: &[SystemResult]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for t in best.iter().filter(|r| is_tandem(&r.system)) {
        for p in best.iter().filter(|r| !is_tandem(&r.system)) {
            let ratio = t.throughput_tps / p.throughput_tps.max(1e-9);
            let goal = goal(workload, &p.system);
            out.push(Ratio {
                tandem: t.system.clone(),
                peer: p.system.clone(),
                tandem_over_peer: ratio,
                goal,
                met: goal.map(|g| ratio >= g),
            });
        }
    }
    out
}

/// The human-readable report (stdout).
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    let what = if c.workload == "smallbank" {
        "accounts"
    } else {
        "keys"
    };
    let counts = c
        .clients
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    s += &format!(
        "{} ({} {what}), clients swept over {counts}, {} round(s) alternating the systems, {:.1}s measured after {:.1}s warm-up per run\n\n",
        c.workload, c.rows, c.rounds, c.duration_s, c.warmup_s
    );
    s += "Each system at its best client count (the median of its rounds there):\n";
    s += &format!(
        "{:<11} {:>8} {:>12} {:>10} {:>9} {:>9} {:>8}  {}\n",
        "system", "clients", "committed/s", "committed", "p50 us", "p99 us", "aborts", "check"
    );
    for r in &c.systems {
        s += &format!(
            "{:<11} {:>8} {:>12.0} {:>10} {:>9} {:>9} {:>7.1}%  {}\n",
            r.system,
            r.clients_asked,
            r.throughput_tps,
            r.committed,
            r.latency_us.p50,
            r.latency_us.p99,
            100.0 * r.abort_rate,
            if c.runs
                .iter()
                .filter(|x| x.system == r.system)
                .all(|x| x.check_passed && x.errors.is_empty())
            {
                "passed (every run)"
            } else {
                "FAILED"
            }
        );
    }
    s += &render_curve(c);
    if !c.ratios.is_empty() {
        s += "\nTandem vs peers (committed tx/s, each at its best):\n";
        for r in &c.ratios {
            let goal = match (r.goal, r.met) {
                (Some(g), Some(true)) => format!("goal >= {g:.0}x: met"),
                (Some(g), _) => format!("goal >= {g:.0}x: NOT met"),
                _ => "no goal set".into(),
            };
            s += &format!(
                "  {:<10} / {:<9} {:>8.1}x   {goal}\n",
                r.tandem, r.peer, r.tandem_over_peer
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
    for r in &c.runs {
        for v in r.violations.iter().take(5) {
            s += &format!("  {} violation: {v}\n", r.system);
        }
        for e in r.errors.iter().take(5) {
            s += &format!("  {} error: {e}\n", r.system);
        }
    }
    s
}

/// Committed tx/s of every system at every client count (medians).
fn render_curve(c: &Comparison) -> String {
    let mut s = String::from("\nThe curve (committed tx/s, median of the rounds):\n");
    s += &format!("{:<11}", "clients");
    for n in &c.clients {
        s += &format!(" {n:>10}");
    }
    s += "\n";
    let mut systems: Vec<&str> = Vec::new();
    for p in &c.curve {
        if !systems.contains(&p.system.as_str()) {
            systems.push(&p.system);
        }
    }
    for sys in systems {
        s += &format!("{sys:<11}");
        for n in &c.clients {
            match c.curve.iter().find(|p| p.system == sys && p.clients == *n) {
                Some(p) => s += &format!(" {:>10.0}", p.throughput_tps),
                None => s += &format!(" {:>10}", "-"),
            }
        }
        s += "\n";
    }
    s
}
