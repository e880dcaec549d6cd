//! `tandem compare --system ddp`: Tandem's DDP over five
//! `tandem node` processes beside what users run instead, on YCSB-A and B
//! with the same records, value size and client count:
//!
//! - ⟨Lin, Synch⟩ against a 3-member etcd, at equal durability twice: etcd
//!   without WAL fsync against Tandem's memory-mapped NVM files, then etcd
//!   with fsync against Tandem with `--fsync`;
//! - ⟨Eventual, Eventual⟩ against Redis with two replicas, asynchronous and
//!   with `WAIT 2` after every write.
//!
//! Each row states its system's durability in words (for the peers, as the
//! running servers report it). Every system gets the same key choice
//! (YCSB's Zipfian, or uniform); Tandem's values are 8 bytes.

use std::path::PathBuf;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tandem_ycsb::Ycsb;

use crate::cluster::{self, DdpCluster, RunSpec, TandemRun, NODES};
use tandem_peers::kv::{EtcdKv, KvPeer, RedisKv};
use tandem_peers::kv_driver::{drive, Counts, KvDriveConfig};
use tandem_peers::system::Endpoints;

pub const PEERS_SCRIPT: &str = "bash scripts/peers.sh start ddp";
/// The goal: ⟨Lin, Synch⟩ at least this many times etcd.
pub const GOAL_VS_ETCD: f64 = 5.0;
/// What `crate::load` writes.
pub const TANDEM_VALUE_BYTES: usize = 8;
pub const WORKLOADS: [&str; 2] = ["ycsb-a", "ycsb-b"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    Off,
    On,
    Both,
}

impl Fsync {
    pub fn parse(s: &str) -> Result<Fsync, String> {
        match s {
            "off" => Ok(Fsync::Off),
            "on" => Ok(Fsync::On),
            "both" => Ok(Fsync::Both),
            other => Err(format!(
                "unknown --fsync '{other}' (expected both, off or on)"
            )),
        }
    }

    fn modes(self) -> Vec<bool> {
        match self {
            Fsync::Off => vec![false],
            Fsync::On => vec![true],
            Fsync::Both => vec![false, true],
        }
    }
}

#[derive(Clone, Debug)]
pub struct DdpCompareConfig {
    /// From [`WORKLOADS`].
    pub workloads: Vec<String>,
    pub records: u64,
    /// Uniform keys instead of YCSB's Zipfian (θ = 0.99).
    pub uniform: bool,
    pub value_size: usize,
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub fsync: Fsync,
    pub seed: u64,
    pub tandem_exe: PathBuf,
    /// Where the nodes' NVM files go (a real disk, so that `--fsync` means it).
    pub nvm_dir: PathBuf,
    pub endpoints: Endpoints,
    /// Check ⟨Lin, Synch⟩'s histories for linearizability.
    pub check: bool,
    pub progress: bool,
}

impl DdpCompareConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.workloads.is_empty() {
            return Err("no workload".into());
        }
        if let Some(w) = self
            .workloads
            .iter()
            .find(|w| !WORKLOADS.contains(&w.as_str()))
        {
            return Err(format!(
                "unknown workload '{w}' for --system ddp (expected ycsb-a, ycsb-b or both)"
            ));
        }
        if self.clients == 0 {
            return Err("--clients must be at least 1".into());
        }
        if self.records == 0 {
            return Err("--records must be at least 1".into());
        }
        if self.value_size == 0 || self.value_size > 1 << 20 {
            return Err("--value-size must be between 1 and 1048576 bytes".into());
        }
        if self.duration.is_zero() {
            return Err("--duration must be more than 0 seconds".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// e.g. `tandem-lin-synch-fsync`, `etcd-fsync`, `redis-wait2`.
    pub id: String,
    pub durability: String,
    pub clients: usize,
    pub value_bytes: usize,
    pub ops: u64,
    pub ops_per_s: f64,
    pub reads: u64,
    pub writes: u64,
    pub missing_reads: u64,
    /// Writes acknowledged without the promise (`WAIT` timed out).
    pub unconfirmed_writes: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub duration_s: f64,
    /// ⟨Lin, Synch⟩ rows with the check on: the history was linearizable.
    pub linearizable: Option<bool>,
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub tandem: String,
    pub peer: String,
    pub tandem_over_peer: f64,
    pub goal: Option<f64>,
    pub met: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    pub workload: String,
    pub read_ratio: f64,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DdpComparison {
    pub records: u64,
    pub value_size: usize,
    pub tandem_value_bytes: usize,
    pub key_choice: String,
    pub clients: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub fsync: Fsync,
    pub seed: u64,
    pub nodes: usize,
    /// Every process (nodes, servers, clients) shares these cores.
    pub cores: usize,
    /// The 1-minute load average when the run started (other work on the machine).
    pub load_average_at_start: Option<f64>,
    pub workloads: Vec<WorkloadResult>,
}

impl DdpComparison {
    pub fn passed(&self) -> bool {
        self.workloads
            .iter()
            .flat_map(|w| &w.rows)
            .all(|r| r.errors.is_empty() && r.linearizable != Some(false))
    }
}

/// One Tandem configuration against the peers it is compared with.
struct Pairing {
    model: &'static str,
    fsync: bool,
    peers: Vec<Box<dyn KvPeer>>,
    goal: Option<f64>,
}

fn tandem_id(model: &str, fsync: bool) -> String {
    format!("tandem-{model}-{}", if fsync { "fsync" } else { "nvm" })
}

fn tandem_durability(model: &str, fsync: bool) -> String {
    let disk = if fsync {
        "flushed to the device (fdatasync, group commit) before the persist counts (--fsync): survives a power loss"
    } else {
        "memory-mapped, no fsync: survives kill -9 of any or all processes, not a power loss"
    };
    match model {
        "lin-synch" => format!("Tandem ⟨Lin, Synch⟩, {NODES} node processes, every key on all {NODES}: a write is acknowledged once all {NODES} applied it and appended it to their NVM file ({disk})"),
        _ => format!("Tandem ⟨Eventual, Eventual⟩, {NODES} node processes: a write is acknowledged by its coordinator at once, replicated in batches and persisted lazily to the NVM files ({disk}); an acknowledged write is lost if its node crashes before sending it"),
    }
}

fn pairings(cfg: &DdpCompareConfig) -> Vec<Pairing> {
    let e = &cfg.endpoints;
    let mut out: Vec<Pairing> = cfg
        .fsync
        .modes()
        .into_iter()
        .map(|fsync| {
            let ports = if fsync {
                e.etcd_ports
            } else {
                e.etcd_nofsync_ports
            };
            Pairing {
                model: "lin-synch",
                fsync,
                peers: vec![Box::new(EtcdKv::new(ports, fsync))],
                goal: Some(GOAL_VS_ETCD),
            }
        })
        .collect();
    let redis: Vec<Box<dyn KvPeer>> = vec![
        Box::new(RedisKv::new(e.redis_repl_port, false)),
        Box::new(RedisKv::new(e.redis_repl_port, true)),
    ];
    out.push(Pairing {
        model: "eventual-eventual",
        fsync: false,
        peers: redis,
        goal: None,
    });
    out
}

fn row(
    id: String,
    durability: String,
    cfg: &DdpCompareConfig,
    value_bytes: usize,
    c: &Counts,
    elapsed_s: f64,
    hist: &Histogram<u64>,
) -> Row {
    let ops = c.reads + c.writes;
    Row {
        id,
        durability,
        clients: cfg.clients,
        value_bytes,
        ops,
        ops_per_s: ops as f64 / elapsed_s.max(1e-9),
        reads: c.reads,
        writes: c.writes,
        missing_reads: c.missing,
        unconfirmed_writes: c.unconfirmed,
        p50_us: if ops > 0 {
            hist.value_at_quantile(0.5)
        } else {
            0
        },
        p99_us: if ops > 0 {
            hist.value_at_quantile(0.99)
        } else {
            0
        },
        duration_s: elapsed_s,
        linearizable: None,
        errors: Vec::new(),
    }
}

fn run_tandem(cfg: &DdpCompareConfig, w: &Ycsb, model: &str, fsync: bool) -> Result<Row, String> {
    let id = tandem_id(model, fsync);
    if cfg.progress {
        eprintln!(
            "compare: {} on {}, {} clients, {:.1}s warm-up + {:.1}s measured",
            id,
            w.name,
            cfg.clients,
            cfg.warmup.as_secs_f64(),
            cfg.duration.as_secs_f64()
        );
    }
    let dir = cfg.nvm_dir.join(&id);
    let cluster = DdpCluster::start(&cfg.tandem_exe, model, fsync, &dir)?;
    let spec = RunSpec {
        clients: cfg.clients as u64,
        records: cfg.records,
        workload: w.clone(),
        warmup: cfg.warmup,
        duration: cfg.duration,
        seed: cfg.seed,
        progress: cfg.progress,
    };
    let r: TandemRun = cluster::run(&cluster, &spec);
    drop(cluster);
    let mut out = row(
        id,
        tandem_durability(model, fsync),
        cfg,
        TANDEM_VALUE_BYTES,
        &r.counts,
        r.elapsed_s,
        &r.hist,
    );
    if r.failed > 0 {
        out.errors.push(format!(
            "{} operations failed or got no reply (node logs in {})",
            r.failed,
            dir.display()
        ));
    } else {
        // 64 MB of NVM file per node: kept only when something went wrong.
        let _ = std::fs::remove_dir_all(&dir);
    }
    if cfg.check && model.starts_with("lin-") {
        let t = std::time::Instant::now();
        let verdict = tandem_check::check_linearizable(&r.history);
        if cfg.progress {
            eprintln!(
                "  linearizability of {} operations: {} ({:.1}s)",
                r.history.len(),
                if verdict.is_ok() { "passed" } else { "FAILED" },
                t.elapsed().as_secs_f64()
            );
        }
        if let Err(v) = &verdict {
            out.errors.push(format!("history not linearizable: {v}"));
        }
        out.linearizable = Some(verdict.is_ok());
    }
    Ok(out)
}

fn run_peer(cfg: &DdpCompareConfig, w: &Ycsb, peer: &dyn KvPeer) -> Result<Row, String> {
    if cfg.progress {
        eprintln!(
            "compare: {} on {}: loading {} records of {} bytes, then {} clients, {:.1}s + {:.1}s",
            peer.id(),
            w.name,
            cfg.records,
            cfg.value_size,
            cfg.clients,
            cfg.warmup.as_secs_f64(),
            cfg.duration.as_secs_f64()
        );
    }
    peer.load(cfg.records, cfg.value_size)
        .map_err(|e| format!("loading {} failed: {e}", peer.id()))?;
    let dc = KvDriveConfig {
        clients: cfg.clients,
        value_size: cfg.value_size,
        warmup: cfg.warmup,
        duration: cfg.duration,
        seed: cfg.seed,
        progress: cfg.progress,
    };
    let r = drive(peer, w, &dc)?;
    // After the run: etcd's fsync counters then include it.
    let durability = peer.durability()?;
    let mut out = row(
        peer.id().to_string(),
        durability,
        cfg,
        cfg.value_size,
        &r.counts,
        r.elapsed_s,
        &r.hist,
    );
    out.errors = r.errors;
    Ok(out)
}

fn ratio(rows: &[Row], tandem: &str, peer: &str, goal: Option<f64>) -> Option<Ratio> {
    let t = rows.iter().find(|r| r.id == tandem)?;
    let p = rows.iter().find(|r| r.id == peer)?;
    let x = t.ops_per_s / p.ops_per_s.max(1e-9);
    Some(Ratio {
        tandem: tandem.into(),
        peer: peer.into(),
        tandem_over_peer: x,
        goal,
        met: goal.map(|g| x >= g),
    })
}

fn run_workload(
    cfg: &DdpCompareConfig,
    name: &str,
    pairs: &[Pairing],
) -> Result<WorkloadResult, String> {
    // The same key choice for every system (YCSB's Zipfian unless --uniform).
    let w = Ycsb::new(name, cfg.records, cfg.uniform)?;
    let (mut rows, mut ratios) = (Vec::new(), Vec::new());
    for p in pairs {
        let tid = tandem_id(p.model, p.fsync);
        rows.push(run_tandem(cfg, &w, p.model, p.fsync)?);
        for peer in &p.peers {
            rows.push(run_peer(cfg, &w, peer.as_ref())?);
            ratios.extend(ratio(&rows, &tid, peer.id(), p.goal));
        }
    }
    Ok(WorkloadResult {
        workload: name.into(),
        read_ratio: w.read_ratio,
        rows,
        ratios,
    })
}

/// Run every pairing on every workload. Peers are probed first, so a
/// missing server fails the run before anything is measured.
pub fn compare_ddp(cfg: &DdpCompareConfig) -> Result<DdpComparison, String> {
    cfg.validate()?;
    let pairs = pairings(cfg);
    for peer in pairs.iter().flat_map(|p| &p.peers) {
        peer.durability().map_err(|e| {
            format!(
                "{} is not reachable on {} ({e}); start the peers with `{PEERS_SCRIPT}`",
                peer.id(),
                peer.endpoint()
            )
        })?;
    }
    let load_average_at_start = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok());
    let workloads = cfg
        .workloads
        .iter()
        .map(|w| run_workload(cfg, w, &pairs))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(DdpComparison {
        records: cfg.records,
        value_size: cfg.value_size,
        tandem_value_bytes: TANDEM_VALUE_BYTES,
        key_choice: if cfg.uniform {
            "uniform"
        } else {
            "zipfian (0.99)"
        }
        .into(),
        clients: cfg.clients,
        warmup_s: cfg.warmup.as_secs_f64(),
        duration_s: cfg.duration.as_secs_f64(),
        fsync: cfg.fsync,
        seed: cfg.seed,
        nodes: NODES,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average_at_start,
        workloads,
    })
}

fn goal_text(r: &Ratio) -> String {
    match (r.goal, r.met) {
        (Some(g), Some(true)) => format!("goal >= {g:.0}x: met"),
        (Some(g), _) => format!("goal >= {g:.0}x: NOT met"),
        _ => "no goal set".into(),
    }
}

fn header(c: &DdpComparison) -> String {
    let mut s = format!(
        "YCSB, {} records, {} keys, {} clients per system, {:.1}s measured after {:.1}s warm-up, systems run back to back; peers' values {} bytes",
        c.records, c.key_choice, c.clients, c.duration_s, c.warmup_s, c.value_size
    );
    if c.value_size != c.tandem_value_bytes {
        s += &format!(
            ", Tandem's {} bytes (crate::load writes 8-byte values)",
            c.tandem_value_bytes
        );
    } else {
        s += " (Tandem's too)";
    }
    s += &format!("; every process on {} cores", c.cores);
    if let Some(l) = c.load_average_at_start {
        s += &format!(" (load average {l:.1} at the start)");
    }
    s + "\n"
}

/// The human-readable report (stdout).
pub fn render(c: &DdpComparison) -> String {
    let mut s = header(c);
    for w in &c.workloads {
        s += &format!("\n{} ({:.0} % reads)\n", w.workload, 100.0 * w.read_ratio);
        s += &format!(
            "  {:<30} {:>10} {:>9} {:>9} {:>9}  {}\n",
            "system", "ops/s", "p50 us", "p99 us", "missing", "notes"
        );
        for r in &w.rows {
            let mut notes: Vec<String> = r.errors.iter().take(3).cloned().collect();
            if r.unconfirmed_writes > 0 {
                notes.push(format!("{} writes unconfirmed", r.unconfirmed_writes));
            }
            if let Some(l) = r.linearizable {
                notes.push(if l {
                    "linearizable".into()
                } else {
                    "NOT linearizable".into()
                });
            }
            s += &format!(
                "  {:<30} {:>10.0} {:>9} {:>9} {:>9}  {}\n",
                r.id,
                r.ops_per_s,
                r.p50_us,
                r.p99_us,
                r.missing_reads,
                notes.join("; ")
            );
        }
        for r in &w.ratios {
            s += &format!(
                "  {} / {}: {:.2}x   {}\n",
                r.tandem,
                r.peer,
                r.tandem_over_peer,
                goal_text(r)
            );
        }
    }
    s += "\nDurability (peers: as the running servers report it):\n";
    let mut seen = Vec::new();
    for r in c.workloads.iter().flat_map(|w| &w.rows) {
        if !seen.contains(&r.id) {
            s += &format!("  {:<30} {}\n", r.id, r.durability);
            seen.push(r.id.clone());
        }
    }
    s
}

/// The RESULTS.md section body: ratios table, rows, durability.
pub fn render_markdown(c: &DdpComparison, command: &str) -> String {
    let mut s = format!("`{command}`\n\n{}\n", header(c));
    s += "| workload | Tandem | peer | Tandem / peer | goal |\n|---|---|---|---|---|\n";
    for w in &c.workloads {
        for r in &w.ratios {
            s += &format!(
                "| {} | {} | {} | **{:.2}x** | {} |\n",
                w.workload,
                r.tandem,
                r.peer,
                r.tandem_over_peer,
                goal_text(r)
            );
        }
    }
    s += "\n| workload | system | ops/s | p50 µs | p99 µs | notes |\n|---|---|---|---|---|---|\n";
    for w in &c.workloads {
        for r in &w.rows {
            let mut notes = Vec::new();
            if let Some(l) = r.linearizable {
                notes.push(
                    if l {
                        "history linearizable"
                    } else {
                        "history NOT linearizable"
                    }
                    .to_string(),
                );
            }
            if r.unconfirmed_writes > 0 {
                notes.push(format!("{} writes unconfirmed", r.unconfirmed_writes));
            }
            if r.missing_reads > 0 {
                notes.push(format!(
                    "{} reads found no value ({:.2} %)",
                    r.missing_reads,
                    100.0 * r.missing_reads as f64 / r.reads.max(1) as f64
                ));
            }
            notes.extend(r.errors.iter().take(2).cloned());
            s += &format!(
                "| {} | {} | {:.0} | {} | {} | {} |\n",
                w.workload,
                r.id,
                r.ops_per_s,
                r.p50_us,
                r.p99_us,
                notes.join("; ")
            );
        }
    }
    s += "\n| system | durability of an acknowledged write |\n|---|---|\n";
    let mut seen = Vec::new();
    for r in c.workloads.iter().flat_map(|w| &w.rows) {
        if !seen.contains(&r.id) {
            s += &format!("| {} | {} |\n", r.id, r.durability);
            seen.push(r.id.clone());
        }
    }
    s
}
