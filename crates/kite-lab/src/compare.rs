//! `tandem compare --system kite`: Kite's node
//! processes beside what users run instead, a 3-member ZooKeeper (ZAB) and
//! a 3-member etcd (Raft), each started by the project's scripts
//! (`scripts/zookeeper.sh start-ensemble`, `scripts/peers.sh start etcd`)
//! on loopback, with the same keys, value size (8 bytes), client count and
//! request mix ([`crate::bench::draw_class`]: uniform keys, the paper's
//! write, sync and RMW ratios). Each request class runs as the peer's
//! nearest operation:
//!
//! | class | Kite | ZooKeeper | etcd |
//! |---|---|---|---|
//! | relaxed read | local read | `getData` at the member | serializable range at the member |
//! | relaxed write | ES write | `setData` | `put` |
//! | acquire | ABD read + write-back | `sync` + `getData` | linearizable range |
//! | release | ABD write | `setData` | `put` |
//! | RMW | FAA on per-key Paxos | `getData` + `setData` at its version, again on a conflict | range + `txn` on `mod_revision`, again on a conflict |
//!
//! Durability is stated per row. By default the peers run without fsync
//! (`forceSync=no`, `--unsafe-no-fsync`): Kite keeps its data in the
//! replicas' memory only, as the paper's does, and this is the nearest
//! setting of theirs; `--fsync on|both` adds their defaults.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tandem_sim::Rng;

use crate::bench::{draw_class, Class, System};
use crate::procs::{bench_tcp, BenchMix, LoadOpts, NodeOpts};
use tandem_peers::ensemble::etcd::{client_port, etcd_key, EtcdCluster};
use tandem_peers::ensemble::writers::{preload, Connect, Writer};
use tandem_peers::ensemble::zookeeper::{self, ZkEnsemble, ZkWriter};
use tandem_peers::ensemble::{Peer, Started};
use tandem_peers::etcd::{op_put, same_revision, Etcd};

/// The goal: Kite at least this many times each peer.
pub const GOAL: f64 = 5.0;
/// Every system's values: one u64.
pub const VALUE_BYTES: usize = 8;
/// Kite's write time-out over TCP (as `kite bench --net tcp`).
const KITE_TIMEOUT_MS: f64 = 20.0;

#[derive(Clone, Debug, Serialize)]
pub struct KiteCompareConfig {
    pub keys: u64,
    /// Client sessions per system (Kite: spread over its nodes).
    pub clients: usize,
    /// Kite node processes (the peers have 3 members).
    pub nodes: usize,
    pub write_ratio: f64,
    pub sync_ratio: f64,
    pub rmw_ratio: f64,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// Peers' fsync settings to run: `false` without, `true` with (their default).
    pub fsync: Vec<bool>,
    /// Which of kite, zookeeper, etcd.
    pub systems: Vec<String>,
    pub seed: u64,
    #[serde(skip)]
    pub exe: PathBuf,
    /// The checkout holding `scripts/`.
    #[serde(skip)]
    pub root: PathBuf,
    #[serde(skip)]
    pub work: PathBuf,
    #[serde(skip)]
    pub progress: bool,
}

impl KiteCompareConfig {
    pub fn validate(&self) -> Result<(), String> {
        let ratio = |v: f64| (0.0..=1.0).contains(&v);
        if !ratio(self.write_ratio)
            || !ratio(self.sync_ratio)
            || !ratio(self.rmw_ratio)
            || self.rmw_ratio > self.write_ratio
        {
            return Err("--write-ratio, --sync-ratio and --rmw-ratio are in [0, 1], and RMWs count as writes (rmw <= write)".into());
        }
        if self.keys == 0 || self.clients == 0 || !(3..=9).contains(&self.nodes) {
            return Err("--records and --clients must be at least 1, --nodes 3..=9".into());
        }
        if !(self.duration_s > 0.0) || self.fsync.is_empty() {
            return Err("--duration must be positive".into());
        }
        if let Some(s) = self
            .systems
            .iter()
            .find(|s| !["kite", "zookeeper", "etcd"].contains(&s.as_str()))
        {
            return Err(format!(
                "unknown system '{s}' for --system kite (kite, zookeeper, etcd)"
            ));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `kite`, `zookeeper-nofsync`, `etcd-fsync`, ...
    pub id: String,
    pub durability: String,
    pub clients: usize,
    pub ops: u64,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Peers' RMWs: conditional writes that lost to a concurrent one and went again.
    pub rmw_retries: u64,
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub peer: String,
    pub kite_over_peer: f64,
    pub goal: f64,
    pub met: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct KiteComparison {
    pub config: KiteCompareConfig,
    pub value_bytes: usize,
    pub cores: usize,
    pub load_average_at_start: Option<f64>,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
}

impl KiteComparison {
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.errors.is_empty())
    }
}

// ------------------------------------------------------------ the clients

/// One client connection of a peer, running the request classes.
trait Conn: Send {
    /// `Ok(n)`: done, after `n` conditional writes that lost and went again.
    fn run(&mut self, c: Class, key: u64, value: u64) -> Result<u64, String>;
}

impl Conn for ZkWriter {
    fn run(&mut self, c: Class, key: u64, value: u64) -> Result<u64, String> {
        let path = zookeeper::path(key);
        match c {
            Class::Read => self.get(&path).map(|_| 0),
            Class::Acquire => self.sync(&path).and_then(|()| self.get(&path)).map(|_| 0),
            Class::Write | Class::Release => self.set(&path, &value.to_le_bytes(), None).map(|_| 0),
            Class::Rmw => {
                for retries in 0.. {
                    let (data, version) = self.get(&path)?;
                    let old = u64::from_le_bytes(data.try_into().unwrap_or_default());
                    if self.set(&path, &(old + 1).to_le_bytes(), Some(version))? {
                        return Ok(retries);
                    }
                }
                unreachable!("the loop returns")
            }
        }
    }
}

/// A key's value as this comparison stores it (8 little-endian bytes), and
/// its revision; an absent key (a serializable read on a member that has not
/// applied the preload yet) reads 0 at revision 0, which a `Txn` compare
/// takes as "absent".
fn etcd_read(etcd: &Etcd, key: &[u8], serializable: bool) -> Result<(u64, i64), String> {
    Ok(match etcd.range(key, serializable)? {
        Some(kv) => (
            u64::from_le_bytes(kv.value.try_into().unwrap_or_default()),
            kv.mod_revision,
        ),
        None => (0, 0),
    })
}

impl Conn for Etcd {
    fn run(&mut self, c: Class, key: u64, value: u64) -> Result<u64, String> {
        let k = etcd_key(key).into_bytes();
        match c {
            Class::Read => etcd_read(self, &k, true).map(|_| 0),
            Class::Acquire => etcd_read(self, &k, false).map(|_| 0),
            Class::Write | Class::Release => self.put(&k, &value.to_le_bytes()).map(|_| 0),
            Class::Rmw => {
                for retries in 0.. {
                    let (old, rev) = etcd_read(self, &k, false)?;
                    let put = op_put(&k, &(old + 1).to_le_bytes());
                    let r = self.txn(vec![same_revision(&k, rev)], vec![put])?;
                    if r["succeeded"].as_bool() == Some(true) {
                        return Ok(retries);
                    }
                }
                unreachable!("the loop returns")
            }
        }
    }
}

type Connector = Box<dyn Fn(usize) -> Result<Box<dyn Conn>, String> + Sync>;

fn zk_connector() -> Connector {
    Box::new(|t| ZkWriter::connect(zookeeper::port(t % 3)).map(|w| Box::new(w) as Box<dyn Conn>))
}

fn etcd_connector() -> Connector {
    Box::new(|t| {
        let etcd = Etcd::member(client_port(t % 3), Duration::from_secs(10));
        Ok(Box::new(etcd) as Box<dyn Conn>)
    })
}

// ------------------------------------------------------------ the driver

struct Shared {
    stop: AtomicBool,
    measuring: AtomicBool,
    done: AtomicU64,
}

/// What one client thread measured.
struct ClientRun {
    ops: u64,
    retries: u64,
    hist: Histogram<u64>,
    error: Option<String>,
}

fn client(conn: &mut dyn Conn, cfg: &KiteCompareConfig, t: usize, sh: &Shared) -> ClientRun {
    let mut rng = Rng::new(cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut r = ClientRun {
        ops: 0,
        retries: 0,
        hist: Histogram::new(3).expect("3 significant digits"),
        error: None,
    };
    let mut value = (t as u64) << 40;
    while !sh.stop.load(Ordering::Relaxed) {
        let (c, key) = (
            draw_class(cfg.write_ratio, cfg.sync_ratio, cfg.rmw_ratio, &mut rng),
            rng.below(cfg.keys),
        );
        value += 1;
        let t0 = Instant::now();
        match conn.run(c, key, value) {
            Ok(retries) if sh.measuring.load(Ordering::Relaxed) => {
                let _ = r.hist.record((t0.elapsed().as_micros() as u64).max(1));
                (r.ops, r.retries) = (r.ops + 1, r.retries + retries);
                sh.done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => {
                r.error = Some(e);
                break;
            }
        }
    }
    r
}

/// Sleep through the measured interval, printing ops/s every second.
fn measure(id: &str, cfg: &KiteCompareConfig, sh: &Shared) -> f64 {
    sh.measuring.store(true, Ordering::SeqCst);
    let (start, end) = (Instant::now(), Duration::from_secs_f64(cfg.duration_s));
    let mut last = (start, 0u64);
    while start.elapsed() < end {
        std::thread::sleep(
            end.saturating_sub(start.elapsed())
                .min(Duration::from_secs(1)),
        );
        if cfg.progress {
            let (now, d) = (Instant::now(), sh.done.load(Ordering::Relaxed));
            let rate = (d - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-9);
            eprintln!(
                "  [{:>4.1}s] {id:<20} {d:>9} ops  {rate:>9.0} ops/s",
                start.elapsed().as_secs_f64()
            );
            last = (now, d);
        }
    }
    sh.measuring.store(false, Ordering::SeqCst);
    start.elapsed().as_secs_f64()
}

/// `cfg.clients` closed-loop clients on the running peer.
fn drive(id: &str, connect: &Connector, cfg: &KiteCompareConfig) -> Result<Row, String> {
    let mut conns = Vec::with_capacity(cfg.clients);
    for t in 0..cfg.clients {
        conns.push(connect(t)?);
    }
    let sh = Shared {
        stop: AtomicBool::new(false),
        measuring: AtomicBool::new(false),
        done: AtomicU64::new(0),
    };
    let (runs, secs) = std::thread::scope(|s| {
        let sh = &sh;
        let workers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(t, mut c)| s.spawn(move || client(c.as_mut(), cfg, t, sh)))
            .collect();
        std::thread::sleep(Duration::from_secs_f64(cfg.warmup_s));
        let secs = measure(id, cfg, sh);
        sh.stop.store(true, Ordering::SeqCst);
        (
            workers
                .into_iter()
                .map(|w| w.join().map_err(|_| format!("a {id} client panicked")))
                .collect::<Result<Vec<_>, _>>(),
            secs,
        )
    });
    let mut hist = Histogram::<u64>::new(3).expect("3 significant digits");
    let mut row = Row {
        id: id.into(),
        durability: String::new(),
        clients: cfg.clients,
        ops: 0,
        ops_per_s: 0.0,
        p50_us: 0.0,
        p99_us: 0.0,
        rmw_retries: 0,
        errors: Vec::new(),
    };
    for (t, r) in runs?.into_iter().enumerate() {
        hist.add(&r.hist).expect("same bounds");
        (row.ops, row.rmw_retries) = (row.ops + r.ops, row.rmw_retries + r.retries);
        row.errors
            .extend(r.error.map(|e| format!("client {t}: {e}")));
    }
    row.ops_per_s = row.ops as f64 / secs.max(1e-9);
    (row.p50_us, row.p99_us) = (
        hist.value_at_quantile(0.5) as f64,
        hist.value_at_quantile(0.99) as f64,
    );
    Ok(row)
}

// ------------------------------------------------------------ the systems

fn kite_durability(nodes: usize) -> String {
    format!(
        "Kite, {nodes} node processes, in memory only (the paper's design, nothing on disk): a relaxed write is acknowledged \
         by its local replica and reaches the others in the background; a release once a majority holds it. Survives kill -9 \
         of a minority, not a power loss"
    )
}

fn run_kite(cfg: &KiteCompareConfig) -> Result<Row, String> {
    let per_node = cfg.clients.div_ceil(cfg.nodes) as u64;
    if cfg.progress {
        eprintln!(
            "compare: kite, {} nodes x {per_node} sessions, {:.1}s warm-up + {:.1}s measured",
            cfg.nodes, cfg.warmup_s, cfg.duration_s
        );
    }
    let mix = BenchMix {
        system: System::Kite,
        keys: cfg.keys,
        write_ratio: cfg.write_ratio,
        sync_ratio: cfg.sync_ratio,
        rmw_ratio: cfg.rmw_ratio,
    };
    let node = NodeOpts {
        timeout_ms: Some(KITE_TIMEOUT_MS),
        ..NodeOpts::default()
    };
    let progress = cfg.progress.then(|| "kite".to_string());
    let o = LoadOpts {
        sessions_per_node: per_node,
        warmup_s: cfg.warmup_s,
        duration_s: cfg.duration_s,
        seed: cfg.seed,
        progress,
        ..LoadOpts::default()
    };
    let (res, rep) = bench_tcp(&cfg.exe, &cfg.work.join("kite"), cfg.nodes, &node, mix, &o)?;
    let clients = per_node as usize * cfg.nodes;
    let ops = (res.throughput_ops * cfg.duration_s).round() as u64;
    let mut errors = Vec::new();
    if rep.moves > 0 {
        errors.push(format!(
            "{} calls went unanswered past the client time-out",
            rep.moves
        ));
    }
    Ok(Row {
        id: "kite".into(),
        durability: kite_durability(cfg.nodes),
        clients,
        ops,
        ops_per_s: res.throughput_ops,
        p50_us: res.latency_us.p50,
        p99_us: res.latency_us.p99,
        rmw_retries: 0,
        errors,
    })
}

fn zk_durability(fsync: bool) -> String {
    let version = zookeeper::four(zookeeper::port(0), "srvr")
        .lines()
        .find_map(|l| l.strip_prefix("Zookeeper version: "))
        .map(|v| v.split(['-', ',']).next().unwrap_or(v).to_string());
    let disk = if fsync {
        "the transaction log is fsync'd before the ACK (forceSync=yes, ZooKeeper's default): survives a power loss"
    } else {
        "forceSync=no: logged to the page cache, not fsync'd: survives kill -9, not a power loss"
    };
    format!("ZooKeeper {}: ZAB, 3 members (quorum 2), a write acknowledged once a quorum logged it; {disk}", version.as_deref().unwrap_or("?"))
}

/// `dir`: the cluster's `PEERS_DIR`, where `scripts/peers.sh` notes how etcd-nofsync avoids fsync.
fn etcd_durability(fsync: bool, dir: &std::path::Path) -> String {
    let version = Etcd::member(client_port(0), Duration::from_secs(5))
        .version()
        .ok();
    let how = match std::fs::read_to_string(dir.join("etcd-nofsync").join("mode"))
        .unwrap_or_default()
        .trim()
    {
        "unsafe-no-fsync" => "--unsafe-no-fsync",
        "tmpfs" => {
            "its data on tmpfs, where fsync reaches no device; this etcd has no --unsafe-no-fsync"
        }
        _ => "?",
    };
    let disk = if fsync {
        "the WAL is fsync'd before a commit is acknowledged (etcd's default): survives a power loss"
            .to_string()
    } else {
        format!("no WAL fsync ({how}): survives kill -9, not a power loss")
    };
    format!("etcd {}: Raft, 3 members (quorum 2), a write acknowledged once a quorum appended it; {disk}", version.as_deref().unwrap_or("?"))
}

/// Start a fresh cluster of `peer`, preload every key, drive the clients, stop it.
fn run_peer(cfg: &KiteCompareConfig, name: &str, fsync: bool) -> Result<Row, String> {
    let id = format!("{name}-{}", if fsync { "fsync" } else { "nofsync" });
    let dir = cfg.work.join(&id);
    let (mut peer, connect, writer): (Box<dyn Peer>, Connector, Connect) = match name {
        "zookeeper" => {
            let zk = ZkEnsemble::new(&cfg.root, &dir);
            let zk = if fsync { zk } else { zk.without_fsync() };
            (Box::new(zk), zk_connector(), zk_writer())
        }
        _ => {
            let etcd = EtcdCluster::new(&cfg.root, &dir);
            let etcd = if fsync { etcd } else { etcd.without_fsync() };
            let w = etcd.connect(usize::MAX);
            (Box::new(etcd), etcd_connector(), w)
        }
    };
    if cfg.progress {
        eprintln!(
            "compare: {id}: starting 3 members, writing {} keys, then {} clients, {:.1}s + {:.1}s",
            cfg.keys, cfg.clients, cfg.warmup_s, cfg.duration_s
        );
    }
    if let Started::CannotInstall(why) = peer.start()? {
        return Err(format!("{name} is not installed and cannot be: {why}"));
    }
    preload(cfg.keys, writer).map_err(|e| format!("{id}: {e}"))?;
    let mut row = drive(&id, &connect, cfg)?;
    row.durability = if name == "zookeeper" {
        zk_durability(fsync)
    } else {
        etcd_durability(fsync, &dir)
    };
    peer.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(row)
}

fn zk_writer() -> Connect {
    std::sync::Arc::new(|t| {
        ZkWriter::connect(zookeeper::port(t % 3)).map(|w| Box::new(w) as Box<dyn Writer>)
    })
}

/// Run every system in `cfg.systems`, peers once per fsync setting, and the ratios.
pub fn compare_kite(cfg: &KiteCompareConfig) -> Result<KiteComparison, String> {
    cfg.validate()?;
    let load_average_at_start = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok());
    let mut rows = Vec::new();
    for s in &cfg.systems {
        if s == "kite" {
            rows.push(run_kite(cfg)?);
            continue;
        }
        for &fsync in &cfg.fsync {
            rows.push(run_peer(cfg, s, fsync)?);
        }
    }
    let kite = rows.iter().find(|r| r.id == "kite").map(|r| r.ops_per_s);
    let ratios = rows
        .iter()
        .filter(|r| r.id != "kite")
        .filter_map(|r| kite.map(|k| (r, k / r.ops_per_s.max(1e-9))))
        .map(|(r, x)| Ratio {
            peer: r.id.clone(),
            kite_over_peer: x,
            goal: GOAL,
            met: x >= GOAL,
        })
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(KiteComparison {
        config: cfg.clone(),
        value_bytes: VALUE_BYTES,
        cores,
        load_average_at_start,
        rows,
        ratios,
    })
}

fn header(c: &KiteComparison) -> String {
    let k = &c.config;
    let mut s = format!(
        "{} keys (uniform), {}-byte values, {} clients per system, {:.0} % writes, {:.0} % sync, {:.0} % RMWs; {:.1}s measured after {:.1}s warm-up; every process on {} cores",
        k.keys,
        c.value_bytes,
        k.clients,
        100.0 * k.write_ratio,
        100.0 * k.sync_ratio,
        100.0 * k.rmw_ratio,
        k.duration_s,
        k.warmup_s,
        c.cores
    );
    if let Some(l) = c.load_average_at_start {
        s += &format!(" (load average {l:.1} at the start)");
    }
    s + "\n"
}

fn notes(r: &Row) -> String {
    let mut n: Vec<String> = r.errors.iter().take(2).cloned().collect();
    if r.rmw_retries > 0 {
        n.push(format!("{} RMW retries", r.rmw_retries));
    }
    n.join("; ")
}

/// The human-readable report.
pub fn render(c: &KiteComparison) -> String {
    let mut s = header(c);
    s += &format!(
        "  {:<20} {:>10} {:>9} {:>9} {:>8}  {}\n",
        "system", "ops/s", "p50 us", "p99 us", "clients", "notes"
    );
    for r in &c.rows {
        s += &format!(
            "  {:<20} {:>10.0} {:>9.0} {:>9.0} {:>8}  {}\n",
            r.id,
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            r.clients,
            notes(r)
        );
    }
    for r in &c.ratios {
        s += &format!(
            "  kite / {}: {:.2}x   goal >= {:.0}x: {}\n",
            r.peer,
            r.kite_over_peer,
            r.goal,
            if r.met { "met" } else { "NOT met" }
        );
    }
    s += "\nDurability:\n";
    for r in &c.rows {
        s += &format!("  {:<20} {}\n", r.id, r.durability);
    }
    s
}

/// How each request class runs on each system (the module's table).
const MAPPING: &str = "| request | Kite | ZooKeeper | etcd |\n|---|---|---|---|\n\
| relaxed read | local read | `getData` at the member | serializable range at the member |\n\
| relaxed write | ES write | `setData` | `put` |\n\
| acquire | ABD read + write-back | `sync` + `getData` | linearizable range |\n\
| release | ABD write | `setData` | `put` |\n\
| RMW | FAA on per-key Paxos | `getData` + `setData` at its version, again on a conflict | range + `txn` on `mod_revision`, again on a conflict |\n";

/// The RESULTS.md section body.
pub fn render_markdown(c: &KiteComparison, command: &str) -> String {
    let mut s = format!(
        "`{command}`\n\n{}\nEach system is started fresh by the project's scripts, every key written once, then driven by the \
         same number of closed-loop clients (Kite: sessions over its nodes; the peers: one connection per client thread, spread \
         over the 3 members). Each request class runs as the peer's nearest operation:\n\n{MAPPING}\n\
         | Kite / peer | ratio | goal |\n|---|---|---|\n",
        header(c)
    );
    for r in &c.ratios {
        s += &format!(
            "| kite / {} | **{:.2}x** | >= {:.0}x: {} |\n",
            r.peer,
            r.kite_over_peer,
            r.goal,
            if r.met { "met" } else { "not met" }
        );
    }
    s += "\n| system | ops/s | p50 µs | p99 µs | clients | notes |\n|---|---|---|---|---|---|\n";
    for r in &c.rows {
        s += &format!(
            "| {} | {:.0} | {:.0} | {:.0} | {} | {} |\n",
            r.id,
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            r.clients,
            notes(r)
        );
    }
    s += "\n| system | durability of an acknowledged write |\n|---|---|\n";
    for r in &c.rows {
        s += &format!("| {} | {} |\n", r.id, r.durability);
    }
    s
}
