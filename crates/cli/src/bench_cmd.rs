//! `tandem pandora bench`, `tandem pandora fabric-bench` and `tandem pandora sim`.

use std::time::Duration;

use clap::Args;
use tandem_cluster::backend::{Backend, MemoryServers};
use tandem_cluster::runner::{run, CrashPlan, MemoryFailurePlan, RunConfig, RunResult};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::recovery::RecoveryBugs;
use tandem_dkvs::{BugSwitches, Layout, Mode, OnStray};
use tandem_pandora_lab::alternate::alternate;
use tandem_pandora_lab::sim_run::{self, Faults, SimConfig};
use tandem_pandora_lab::{echo_bench, fabric_bench};
use tandem_workloads::bank::BankSpec;
use tandem_workloads::micro::{KeyChooser, MicroSpec};
use tandem_workloads::Zipf;

use crate::args::{keyring_from, parse_addrs, parse_stores, write_json};

#[derive(Args, Clone)]
pub struct FabricArgs {
    /// sim: in-process memory nodes (verbs execute at once, no delays or faults); tcp: memory-server
    /// processes, verbs over TCP; shm: memory-server processes whose regions this process maps.
    #[arg(long, default_value = "sim")]
    pub fabric: String,
    /// With --fabric tcp or shm: use running memory servers (comma-separated) instead of starting them.
    #[arg(long)]
    pub memory: Option<String>,
    /// Master secret of the memory servers given with --memory (hex; default $TANDEM_SECRET, or the keyring in $TANDEM_KEYRING).
    #[arg(long)]
    pub secret: Option<String>,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Store(s) to run, comma-separated: pandora, ford, traditional.
    #[arg(long, default_value = "pandora")]
    store: String,
    /// micro, smallbank, tatp, tpcc, or bank (the bug-hunting bank).
    #[arg(long, default_value = "micro")]
    workload: String,
    #[command(flatten)]
    fabric: FabricArgs,
    #[arg(long, default_value_t = 3)]
    memory_nodes: u16,
    #[arg(long, default_value_t = 2)]
    replicas: u16,
    #[arg(long, default_value_t = 2)]
    compute_nodes: u16,
    /// Coordinators per compute node.
    #[arg(long, default_value_t = 16)]
    coordinators: u16,
    /// micro: number of keys; smallbank: accounts; tatp: subscribers.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// tpcc: warehouses (1-4 fit this machine).
    #[arg(long, default_value_t = 1)]
    warehouses: u64,
    /// micro: fraction of accessed objects written.
    #[arg(long, default_value_t = 0.5)]
    write_ratio: f64,
    /// micro: objects per transaction.
    #[arg(long, default_value_t = 2)]
    ops_per_tx: u32,
    /// micro: Zipf skew (0 < theta < 1) instead of uniform keys.
    #[arg(long)]
    zipf: Option<f64>,
    /// micro: hot-set size (with --hot-fraction).
    #[arg(long)]
    hot_keys: Option<u64>,
    #[arg(long, default_value_t = 0.9)]
    hot_fraction: f64,
    /// bank: customers (two accounts each).
    #[arg(long, default_value_t = 50_000)]
    customers: u64,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Unmeasured seconds before each run.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Rounds per store (alternated A B A B ...). Default: 3 with several stores, else 1.
    #[arg(long)]
    rounds: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the post-run inspection of the whole store.
    #[arg(long)]
    no_check: bool,
    /// Failure-detector heartbeat timeout. Benchmarks inject no crash, so the
    /// default is lenient: a loaded machine's scheduling hiccups must not be
    /// mistaken for crashes (`tandem pandora recovery` and the demo use 5 ms).
    #[arg(long, default_value_t = 100.0)]
    heartbeat_timeout_ms: f64,
    /// On a lock held by another coordinator: abort, or stall until it is released or stealable.
    #[arg(long, default_value = "abort")]
    on_stray: OnStray,
    /// Skip the floor (recording the warm-up's verbs and posting them again
    /// raw after the run), and so the protocol overhead.
    #[arg(long)]
    no_floor: bool,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<String>,
}

pub fn workload_from(name: &str, a: &BenchArgs) -> Result<WorkloadSpec, String> {
    match name {
        "micro" => {
            let chooser = match (a.zipf, a.hot_keys) {
                (Some(_), Some(_)) => {
                    return Err("choose either --zipf or --hot-keys, not both".into())
                }
                (Some(theta), None) => {
                    if !(theta > 0.0 && theta < 1.0) {
                        return Err(format!("--zipf must be in (0, 1), got {theta}"));
                    }
                    KeyChooser::Zipf(Zipf::new(a.keys, theta))
                }
                (None, Some(h)) => KeyChooser::Hot {
                    hot_keys: h,
                    hot_fraction: a.hot_fraction,
                },
                (None, None) => KeyChooser::Uniform,
            };
            let m = MicroSpec {
                keys: a.keys,
                write_ratio: a.write_ratio,
                ops_per_tx: a.ops_per_tx,
                chooser,
            };
            m.validate()?;
            Ok(WorkloadSpec::Micro(m))
        }
        "bank" => {
            if a.customers < 2 {
                return Err("--customers must be at least 2".into());
            }
            Ok(WorkloadSpec::Bank(BankSpec {
                customers: a.customers,
                initial_balance: 1_000,
                receipt_capacity: 1_000_000,
                drain_chance: 0.01,
                receipt_chance: 0.02,
                retries: 0,
            }))
        }
        "smallbank" | "tatp" => WorkloadSpec::from_name(name, Some(a.keys)),
        "tpcc" | "tpcc-bounded" => WorkloadSpec::from_name(name, Some(a.warehouses)),
        other => Err(format!(
            "unknown workload '{other}' (expected micro, smallbank, tatp, tpcc or bank)"
        )),
    }
}

fn secs(s: f64, what: &str) -> Result<Duration, String> {
    if !(s.is_finite() && s >= 0.0) {
        return Err(format!("--{what} must be a non-negative number of seconds"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// A tcp or shm backend on fresh memory: new server processes (with shared
/// regions for shm), or (with --memory) the given ones.
fn tcp_backend(
    f: &FabricArgs,
    nodes: u16,
    region_bytes: u64,
) -> Result<(Backend, Option<MemoryServers>), String> {
    match &f.memory {
        Some(list) => {
            let addrs = parse_addrs(list)?;
            if addrs.len() != nodes as usize {
                return Err(format!(
                    "--memory lists {} servers but --memory-nodes is {nodes}",
                    addrs.len()
                ));
            }
            let keys = keyring_from(f.secret.as_deref())?
                .ok_or("--memory needs --secret, $TANDEM_SECRET or $TANDEM_KEYRING")?;
            let cluster = tandem_fabric::tcp::TcpCluster::new(addrs, keys);
            Ok((Backend::Tcp(cluster.shm(f.fabric == "shm")), None))
        }
        None => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find the tandem binary: {e}"))?;
            let shm = f.fabric == "shm";
            let servers = MemoryServers::spawn_pinned(
                &exe,
                nodes as usize,
                region_bytes,
                tandem_fabric::auth::MasterSecret::generate(),
                shm,
            )
            .map_err(|e| format!("cannot start memory servers: {e}"))?;
            Ok((Backend::Tcp(servers.cluster()), Some(servers)))
        }
    }
}

pub fn print_run(r: &RunResult) {
    eprintln!(
        "{:<12} {:<6} {:<4} {:>10.0} tx/s  committed {:>9}  aborts {:>5.1}%  p50 {:>6} us  p99 {:>7} us  verbs/commit {:>5.2}  check {}",
        r.store,
        r.workload,
        r.fabric,
        r.throughput_tps,
        r.committed,
        100.0 * r.abort_rate,
        r.latency_us.p50,
        r.latency_us.p99,
        r.verbs_per_commit,
        match r.check_passed {
            Some(true) => "passed",
            Some(false) => "FAILED",
            None => "skipped",
        }
    );
    print_cpu(r);
    if !r.committed_by_type.is_empty() {
        let total: u64 = r.committed_by_type.values().sum::<u64>().max(1);
        let mix: Vec<String> = r
            .committed_by_type
            .iter()
            .map(|(k, v)| format!("{k} {v} ({:.0}%)", 100.0 * *v as f64 / total as f64))
            .collect();
        eprintln!(
            "    commits by type: {}; application rollbacks {}",
            mix.join(", "),
            r.rolled_back_by_application
        );
    }
    for n in &r.false_positives {
        eprintln!(
            "    note: compute node {n} was declared failed without crashing (a failure-detector false positive on this loaded machine); it was fenced off and recovered, and stopped working"
        );
    }
    for v in r.violations.iter().take(5) {
        eprintln!("    violation: {v}");
    }
    for e in r.errors.iter().take(5) {
        eprintln!("    error: {e}");
    }
}

/// CPU per committed transaction, its floor and their ratio.
fn print_cpu(r: &RunResult) {
    let Some(cpu) = r.cpu_ns_per_commit else {
        return;
    };
    match &r.floor {
        Some(f) => eprintln!(
            "    cpu/commit {cpu:>7.0} ns   floor {:>6.0} ns ({:.2} verbs at {:.0} ns)   protocol overhead {:>5.2}x",
            f.cpu_ns_per_commit,
            f.verbs_per_commit,
            f.cpu_ns_per_verb,
            r.protocol_overhead.unwrap_or(f64::NAN)
        ),
        None => eprintln!("    cpu/commit {cpu:>7.0} ns"),
    }
}

pub fn bench(a: BenchArgs) -> Result<(), String> {
    let stores = parse_stores(&a.store)?;
    let workload = workload_from(&a.workload, &a)?;
    let mut template = RunConfig::new(stores[0], workload);
    template.memory_nodes = a.memory_nodes;
    template.replicas = a.replicas;
    template.compute_nodes = a.compute_nodes;
    template.coordinators = a.coordinators;
    template.duration = secs(a.duration, "duration")?;
    template.warmup = secs(a.warmup, "warmup")?;
    template.seed = a.seed;
    template.check = !a.no_check;
    if !(a.heartbeat_timeout_ms.is_finite() && a.heartbeat_timeout_ms > 0.0) {
        return Err("--heartbeat-timeout-ms must be positive".into());
    }
    template.heartbeat_timeout = Duration::from_secs_f64(a.heartbeat_timeout_ms / 1e3);
    template.on_stray = a.on_stray;
    template.floor = !a.no_floor;
    template.validate()?;
    let layout = Layout::new(&template.store_config())?;
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    let rounds = a.rounds.unwrap_or(if stores.len() > 1 { 3 } else { 1 });
    if !matches!(a.fabric.fabric.as_str(), "sim" | "tcp" | "shm") {
        return Err(format!(
            "unknown fabric '{}' (expected sim, tcp or shm)",
            a.fabric.fabric
        ));
    }
    if a.fabric.memory.is_some() && (rounds * stores.len() > 1 || a.workload != "micro") {
        eprintln!("note: reusing --memory servers across runs; each run reloads the dataset over the previous one");
    }
    eprintln!(
        "bench: {} on {} over {}, {} memory nodes (replicas {}), {} compute nodes x {} coordinators, {} round(s) of {:.1}s",
        stores.iter().map(|m| m.name()).collect::<Vec<_>>().join(","),
        a.workload,
        a.fabric.fabric,
        a.memory_nodes,
        a.replicas,
        a.compute_nodes,
        a.coordinators,
        rounds,
        a.duration
    );
    let comparison = alternate(
        &stores,
        rounds,
        &template,
        |cfg| match a.fabric.fabric.as_str() {
            "tcp" | "shm" => {
                let (backend, _servers) = tcp_backend(&a.fabric, cfg.memory_nodes, region)?;
                run(cfg, &backend)
            }
            _ => run(
                cfg,
                &Backend::inline(cfg.memory_nodes as usize, region, cfg.seed),
            ),
        },
        |round, r| {
            eprint!("round {}: ", round + 1);
            print_run(r);
        },
    )?;
    if comparison.summary.len() > 1 || rounds > 1 {
        eprintln!("\nmedians over {rounds} round(s):");
        for s in &comparison.summary {
            eprintln!(
                "  {:<12} {:>10.0} tx/s  ratio {:>5.3}  p50 {:>6} us  p99 {:>7} us  verbs/commit {:>5.2}",
                s.store, s.median_throughput_tps, s.throughput_ratio, s.median_p50_us, s.median_p99_us, s.median_verbs_per_commit
            );
            if let (Some(c), Some(f), Some(o)) = (
                s.median_cpu_ns_per_commit,
                s.median_floor_cpu_ns_per_commit,
                s.median_protocol_overhead,
            ) {
                eprintln!("  {:<12} cpu/commit {c:>7.0} ns  floor {f:>6.0} ns  protocol overhead {o:>5.2}x", "");
            }
        }
    }
    if let Some(path) = &a.json {
        write_json(path, &comparison)?;
        eprintln!("wrote {path}");
    }
    let failed = comparison
        .runs
        .iter()
        .any(|r| r.check_passed == Some(false) || !r.errors.is_empty());
    if failed {
        return Err("a run failed its post-run check or hit errors (see above)".into());
    }
    Ok(())
}

#[derive(Args)]
pub struct FabricBenchArgs {
    #[command(flatten)]
    fabric: FabricArgs,
    /// Verbs in flight per thread.
    #[arg(long, default_value_t = 1)]
    depth: u32,
    #[arg(long, default_value_t = 2)]
    threads: u32,
    #[arg(long, default_value_t = 3)]
    memory_nodes: u16,
    #[arg(long, default_value_t = 64)]
    read_bytes: u32,
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    #[arg(long)]
    json: Option<String>,
}

pub fn fabric_bench(a: FabricBenchArgs) -> Result<(), String> {
    let region: u64 = 64 << 20;
    let duration = secs(a.duration, "duration")?;
    let (backend, _servers) = match a.fabric.fabric.as_str() {
        "sim" => (Backend::inline(a.memory_nodes as usize, region, 1), None),
        "tcp" | "shm" => tcp_backend(&a.fabric, a.memory_nodes, region)?,
        "echo" => {
            let servers = a.memory_nodes as usize;
            let r = echo_bench::run(servers, a.threads, a.depth, a.read_bytes, duration)?;
            return report_fabric_bench(&r, a.json.as_deref());
        }
        other => {
            return Err(format!(
                "unknown fabric '{other}' (expected sim, tcp, shm or echo)"
            ))
        }
    };
    let r = fabric_bench::run(&backend, a.threads, a.depth, a.read_bytes, region, duration)?;
    report_fabric_bench(&r, a.json.as_deref())
}

fn report_fabric_bench(
    r: &fabric_bench::FabricBenchResult,
    json: Option<&str>,
) -> Result<(), String> {
    eprintln!(
        "fabric-bench {}: {} threads x depth {}: {:.0} verbs/s ({} reads of {} B in {:.2}s)",
        r.fabric, r.threads, r.depth, r.verbs_per_s, r.verbs, r.read_bytes, r.duration_s
    );
    if let Some(path) = json {
        write_json(path, r)?;
        eprintln!("wrote {path}");
    }
    Ok(())
}

#[derive(Args)]
pub struct SimBankArgs {
    /// The simulation's workload at the simulation tests' sizes: bank (default), smallbank, tatp, tatp-hot, tpcc, tpcc-2.
    #[arg(long, default_value = "bank")]
    workload: String,
    #[arg(long, default_value = "pandora")]
    store: Mode,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Re-inject one of FORD's bugs (complicit-abort, covert-locks, relaxed-locks); repeatable.
    #[arg(long)]
    inject_bug: Vec<String>,
    /// Concentrate debits on one customer whose accounts have different primaries.
    #[arg(long)]
    hot_sibling_pair: bool,
    /// Customers (default: 6, or 24 with --hot-sibling-pair).
    #[arg(long)]
    customers: Option<u64>,
    /// Seeds to run, starting at --seed.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Crash this compute node (0-based) at --crash-at-ns (simulated, loading included); recovery then runs.
    #[arg(long)]
    crash_node: Option<u16>,
    #[arg(long, default_value_t = 50_000)]
    crash_at_ns: u64,
    /// Simulated failure-detection delay.
    #[arg(long, default_value_t = 20_000)]
    detect_ns: u64,
    /// Declare the node failed without crashing it.
    #[arg(long)]
    false_positive: bool,
    /// Crash the first recovery coordinator this long after it starts.
    #[arg(long)]
    crash_recovery_after_ns: Option<u64>,
    /// At the crash, also stall this compute node's heartbeats (0-based): a
    /// slow node, suspected alongside, whose clients keep running.
    #[arg(long)]
    suspect_too: Option<u16>,
    /// Compute nodes (4 coordinators each).
    #[arg(long, default_value_t = 2)]
    compute_nodes: u16,
    /// Transactions per coordinator.
    #[arg(long)]
    txs: Option<u32>,
    /// Probability that a debit inserts a receipt.
    #[arg(long)]
    receipt_chance: Option<f64>,
    /// Retry aborted transactions this often with the same arguments.
    #[arg(long)]
    retries: Option<u32>,
    /// Lose this memory node (0-based) at --fail-memory-at-ns (simulated, loading included); it is re-replicated later.
    #[arg(long)]
    fail_memory_node: Option<u16>,
    #[arg(long, default_value_t = 50_000)]
    fail_memory_at_ns: u64,
    /// With --fail-memory-node (Pandora): crash this compute node (0-based)
    /// just before the memory node fails; it is recovered from the live
    /// replicas while every other compute node holds.
    #[arg(long, requires = "fail_memory_node")]
    crash_in_memory_loss: Option<u16>,
    /// Cut the link between compute node N and memory node M (`N:M`,
    /// 0-based) at --cut-at-ns, both alive: the compute node's verbs there
    /// fail while the membership has the memory node up. Its commits that
    /// missed a write there wait for a verdict; it ends its incarnation and
    /// is recovered (docs/DESIGN.md §4.6).
    #[arg(long, value_parser = parse_link)]
    cut_link: Option<(u16, u16)>,
    #[arg(long, default_value_t = 50_000)]
    cut_at_ns: u64,
}

fn parse_link(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("--cut-link wants COMPUTE:MEMORY (0-based), got '{s}'");
    let (n, m) = s.split_once(':').ok_or_else(bad)?;
    Ok((n.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?))
}

pub fn sim_bank(a: SimBankArgs) -> Result<(), String> {
    let (bugs, recovery_bugs) = parse_sim_bugs(&a.inject_bug)?;
    check_sim_flags(&a, recovery_bugs)?;
    sim_run::preset(&a.workload)?;
    let bank = a.workload == "bank";
    if !bank
        && (a.hot_sibling_pair
            || a.customers.is_some()
            || a.receipt_chance.is_some()
            || a.retries.is_some())
    {
        return Err(
            "--hot-sibling-pair, --customers, --receipt-chance and --retries are the bank's".into(),
        );
    }
    let mut failures = 0;
    for seed in a.seed..a.seed.saturating_add(a.seeds.max(1)) {
        let cfg = sim_config(&a, seed, bugs, recovery_bugs)?;
        let r = sim_run::run(&cfg);
        if !print_sim_run(seed, &cfg, &r) {
            failures += 1;
        }
    }
    if failures > 0 {
        return Err(format!("{failures} seed(s) violated invariants"));
    }
    Ok(())
}

/// The store's bugs and the recovery's among `--inject-bug`.
fn parse_sim_bugs(names: &[String]) -> Result<(BugSwitches, RecoveryBugs), String> {
    let mut bugs = BugSwitches::default();
    let mut recovery_bugs = RecoveryBugs::default();
    for b in names {
        match b.as_str() {
            "always-roll-back" => recovery_bugs.always_roll_back = true,
            "skip-log-recovery" => recovery_bugs.skip_log_recovery = true,
            "lost-decision" => recovery_bugs.lost_decision = true,
            "trust-undo-images" => recovery_bugs.trust_undo_images = true,
            "ignore-lost-primaries" => recovery_bugs.ignore_lost_primaries = true,
            other => {
                let one = BugSwitches::parse(other)
                    .map_err(|e| format!("{e}, or a recovery bug: always-roll-back, skip-log-recovery, lost-decision, trust-undo-images, ignore-lost-primaries"))?;
                bugs = bugs.union(one);
            }
        }
    }
    Ok((bugs, recovery_bugs))
}

/// The fault flags of `tandem pandora sim` that only make sense together.
fn check_sim_flags(a: &SimBankArgs, recovery_bugs: RecoveryBugs) -> Result<(), String> {
    if a.crash_node.is_none()
        && a.crash_in_memory_loss.is_none()
        && (a.cut_link.is_none() || a.false_positive || a.suspect_too.is_some())
        && (a.false_positive
            || a.crash_recovery_after_ns.is_some()
            || a.suspect_too.is_some()
            || recovery_bugs != RecoveryBugs::default())
    {
        return Err("--false-positive, --suspect-too, --crash-recovery-after-ns and recovery bugs need --crash-node".into());
    }
    if a.crash_in_memory_loss.is_some_and(|n| n >= a.compute_nodes) {
        return Err("--crash-in-memory-loss must be below --compute-nodes".into());
    }
    if a.crash_in_memory_loss.is_some() && a.store != Mode::Pandora {
        return Err("--crash-in-memory-loss needs --store pandora (log recovery)".into());
    }
    if !(1..=8).contains(&a.compute_nodes) {
        return Err("--compute-nodes must be between 1 and 8".into());
    }
    if a.suspect_too
        .is_some_and(|n| n >= a.compute_nodes || Some(n) == a.crash_node)
    {
        return Err("--suspect-too must name another compute node, below --compute-nodes".into());
    }
    Ok(())
}

/// The simulation of `seed` as the flags describe it.
fn sim_config(
    a: &SimBankArgs,
    seed: u64,
    bugs: BugSwitches,
    recovery_bugs: RecoveryBugs,
) -> Result<SimConfig, String> {
    let bank = a.workload == "bank";
    let mut cfg = SimConfig::new(a.store, &a.workload, seed)?;
    cfg.compute_nodes = a.compute_nodes;
    cfg.bugs = bugs;
    cfg.hot_sibling_pair = a.hot_sibling_pair;
    if bank {
        let b = cfg.bank_mut();
        b.customers = a
            .customers
            .unwrap_or(if a.hot_sibling_pair || a.crash_node.is_some() {
                24
            } else {
                b.customers
            });
        if let Some(p) = a.receipt_chance {
            if !(0.0..=1.0).contains(&p) {
                return Err("--receipt-chance must be in [0, 1]".into());
            }
            b.receipt_chance = p;
        }
        if let Some(r) = a.retries {
            b.retries = r;
        }
    }
    if let Some(n) = a.txs {
        cfg.txs_per_coordinator = n;
    } else if a.crash_node.is_some() {
        cfg.txs_per_coordinator = 60;
    }
    if let Some(node) = a.crash_node {
        if node >= cfg.compute_nodes {
            return Err(format!("--crash-node must be below {}", cfg.compute_nodes));
        }
        cfg.faults = Faults {
            crash: Some((node, a.crash_at_ns)),
            false_positive: a.false_positive,
            crash_recovery_after_ns: a.crash_recovery_after_ns,
            detect_ns: a.detect_ns,
            recovery_bugs,
            memory_failure: None,
            suspect_too: a.suspect_too,
            crash_in_memory_loss: None,
            cut_link: None,
        };
    }
    if let Some((n, m)) = a.cut_link {
        if a.crash_node.is_some() || a.fail_memory_node.is_some() {
            return Err("--cut-link goes alone: no --crash-node or --fail-memory-node".into());
        }
        if n >= cfg.compute_nodes || m >= cfg.memory_nodes {
            return Err(format!(
                "--cut-link needs a compute node below {} and a memory node below {}",
                cfg.compute_nodes, cfg.memory_nodes
            ));
        }
        cfg.faults.cut_link = Some((n, m, a.cut_at_ns));
        cfg.faults.detect_ns = a.detect_ns;
        cfg.txs_per_coordinator = a.txs.unwrap_or(60);
    }
    if let Some(m) = a.fail_memory_node {
        if a.crash_node.is_some() {
            return Err("inject either --crash-node or --fail-memory-node, not both".into());
        }
        if m >= cfg.memory_nodes {
            return Err(format!(
                "--fail-memory-node must be below {}",
                cfg.memory_nodes
            ));
        }
        cfg.faults.memory_failure = Some((m, a.fail_memory_at_ns));
        cfg.faults.crash_in_memory_loss = a.crash_in_memory_loss;
        cfg.faults.recovery_bugs = recovery_bugs;
        if bank {
            cfg.bank_mut().customers = a.customers.unwrap_or(24);
        }
        cfg.txs_per_coordinator = a.txs.unwrap_or(60);
    }
    Ok(cfg)
}

/// Print one seed's run; whether every invariant held.
fn print_sim_run(seed: u64, cfg: &SimConfig, r: &sim_run::SimReport) -> bool {
    let planned = cfg
        .faults
        .crash
        .map(|c| c.1)
        .or(cfg.faults.memory_failure.map(|m| m.1))
        .or(cfg.faults.cut_link.map(|c| c.2));
    if let Some(at) = planned.filter(|&at| at < r.clients_start_ns) {
        eprintln!("  note: the fault at {at} ns came before the clients started (at {} ns, after the load): it hit at their start", r.clients_start_ns);
    }
    eprintln!(
        "seed {seed}: {} committed, {} aborted, {} verbs, {:.3} ms simulated: {}",
        r.committed,
        r.aborted,
        r.stats.verbs,
        r.sim_time_ns as f64 / 1e6,
        if r.violations.is_empty() {
            "all invariants hold".to_string()
        } else {
            format!("{} VIOLATIONS", r.violations.len())
        }
    );
    if r.slots_rereplicated > 0 {
        let mf = r
            .stats
            .aborts_by_reason
            .get(&tandem_dkvs::AbortReason::MemoryNodeFailed)
            .copied()
            .unwrap_or(0);
        eprintln!("  memory-node loss: {mf} transactions aborted by it");
        eprintln!(
            "  memory-node loss: {} commits while running on one copy; {} slots re-replicated onto the replacement",
            r.commits_while_degraded, r.slots_rereplicated
        );
    }
    for rep in &r.recoveries {
        eprintln!(
            "  recovery: {} logs, {} rolled forward, {} rolled back, {} already done, {} locks released, {} replicas restored; {} stray locks swept; {} survivor commits in the {:.1} us window; {} in doubt",
            rep.logs_found, rep.rolled_forward, rep.rolled_back, rep.already_done, rep.locks_released, rep.replicas_restored,
            r.stray_locks_swept, r.survivor_commits_during_recovery, r.recovery_window_ns as f64 / 1e3, r.in_doubt
        );
    }
    for v in &r.violations {
        eprintln!("  {v}");
    }
    if !r.violations.is_empty() {
        eprintln!("  replay: {}", r.replay);
    }
    r.violations.is_empty()
}

#[derive(Args)]
pub struct RecoveryArgs {
    /// Store whose recovery to measure: pandora (non-blocking), ford (stop the world, scan), traditional (stop the world, lock logs).
    #[arg(long, default_value = "pandora")]
    store: Mode,
    /// micro, smallbank, tatp, tpcc, or bank.
    #[arg(long, default_value = "micro")]
    workload: String,
    #[command(flatten)]
    fabric: FabricArgs,
    /// Coordinators per compute node.
    #[arg(long, default_value_t = 64)]
    coordinators: u16,
    /// micro: keys; smallbank: accounts; tatp: subscribers.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// tpcc: warehouses.
    #[arg(long, default_value_t = 1)]
    warehouses: u64,
    #[arg(long, default_value_t = 2)]
    compute_nodes: u16,
    /// Compute node to crash (1-based).
    #[arg(long, default_value_t = 2)]
    crash_node: u16,
    /// Seconds into the measured run at which the node crashes.
    #[arg(long, default_value_t = 1.0)]
    crash_after: f64,
    #[arg(long, default_value_t = 2.5)]
    duration: f64,
    /// Failure-detector heartbeat timeout in milliseconds.
    #[arg(long, default_value_t = 5.0)]
    timeout_ms: f64,
    #[arg(long, default_value_t = 0.5)]
    write_ratio: f64,
    #[arg(long, default_value_t = 50_000)]
    customers: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// On a lock held by another coordinator (e.g. the crashed one's): abort, or stall until recovery.
    #[arg(long, default_value = "abort")]
    on_stray: OnStray,
    /// Instead of a compute crash, lose this memory node (0-based; in-process fabric only),
    /// run on the surviving copies for --degraded-for seconds, then re-replicate.
    #[arg(long)]
    fail_memory_node: Option<u16>,
    #[arg(long, default_value_t = 0.5)]
    degraded_for: f64,
    #[arg(long)]
    json: Option<String>,
    /// Write the throughput timeline (10 ms buckets, failure, detection and
    /// recovery marked) as FIGURE.svg and FIGURE.png.
    #[arg(long)]
    figure: Option<std::path::PathBuf>,
}

pub fn recovery(a: RecoveryArgs) -> Result<(), String> {
    let cfg = recovery_config(&a)?;
    let (backend, _servers) = recovery_backend(&a, &cfg)?;
    eprintln!(
        "recovery: {} on {} over {}, {} compute nodes x {} coordinators; crash node {} at {:.2}s, {} ms heartbeat timeout",
        a.store, a.workload, a.fabric.fabric, a.compute_nodes, a.coordinators, a.crash_node, a.crash_after, a.timeout_ms
    );
    let r = run(&cfg, &backend)?;
    print_run(&r);
    if let Some(stem) = &a.figure {
        let title = format!(
            "{} on {} ({}): {} x {} coordinators",
            a.store, a.workload, a.fabric.fabric, a.compute_nodes, a.coordinators
        );
        let (svg, png) = write_timeline_figure(stem, &title, &r)?;
        eprintln!("figure: {} and {}", svg.display(), png.display());
    }
    if let Some(m) = &r.memory_failure {
        print_memory_failure(m);
        if let Some(path) = &a.json {
            write_json(path, &r)?;
        }
        return if r.check_passed == Some(false) || !r.errors.is_empty() {
            Err("the run failed its post-run check or hit errors".into())
        } else {
            Ok(())
        };
    }
    let Some(t) = &r.recovery else {
        return Err(format!("no recovery happened: {}", r.errors.join("; ")));
    };
    print_recovery(t);
    if let Some(path) = &a.json {
        write_json(path, &r)?;
        eprintln!("wrote {path}");
    }
    if r.check_passed == Some(false) || !r.errors.is_empty() {
        return Err("the run failed its post-run check or hit errors (see above)".into());
    }
    Ok(())
}

/// The run `tandem pandora recovery` measures: the workload as `bench`
/// would build it, with a compute crash or a memory-node loss.
fn recovery_config(a: &RecoveryArgs) -> Result<RunConfig, String> {
    let wl = BenchArgs {
        store: a.store.to_string(),
        workload: a.workload.clone(),
        fabric: a.fabric.clone(),
        memory_nodes: 3,
        replicas: 2,
        compute_nodes: a.compute_nodes,
        coordinators: a.coordinators,
        keys: a.keys,
        warehouses: a.warehouses,
        write_ratio: a.write_ratio,
        ops_per_tx: 2,
        zipf: None,
        hot_keys: None,
        hot_fraction: 0.9,
        customers: a.customers,
        duration: a.duration,
        warmup: 0.3,
        rounds: None,
        seed: a.seed,
        no_check: false,
        heartbeat_timeout_ms: a.timeout_ms,
        on_stray: a.on_stray,
        no_floor: true,
        json: None,
    };
    let workload = workload_from(&a.workload, &wl)?;
    let mut cfg = RunConfig::new(a.store, workload);
    cfg.compute_nodes = a.compute_nodes;
    cfg.coordinators = a.coordinators;
    cfg.duration = secs(a.duration, "duration")?;
    cfg.seed = a.seed;
    cfg.progress = true;
    cfg.progress_every = Duration::from_millis(250);
    if let Some(m) = a.fail_memory_node {
        cfg.fail_memory = Some(MemoryFailurePlan {
            node: m,
            after: secs(a.crash_after, "crash-after")?,
            degraded_for: secs(a.degraded_for, "degraded-for")?,
        });
    } else {
        if a.crash_node == 0 || a.crash_node > a.compute_nodes {
            return Err(format!(
                "--crash-node must be between 1 and {}",
                a.compute_nodes
            ));
        }
        cfg.crash = Some(CrashPlan {
            node: a.crash_node - 1,
            after: secs(a.crash_after, "crash-after")?,
        });
    }
    if !(a.timeout_ms.is_finite() && a.timeout_ms > 0.0) {
        return Err("--timeout-ms must be positive".into());
    }
    cfg.heartbeat_timeout = Duration::from_secs_f64(a.timeout_ms / 1e3);
    cfg.on_stray = a.on_stray;
    cfg.validate()?;
    Ok(cfg)
}

/// The memory nodes of `tandem pandora recovery`, by `--fabric` (and the
/// memory-server processes it started, if any).
fn recovery_backend(
    a: &RecoveryArgs,
    cfg: &RunConfig,
) -> Result<(Backend, Option<MemoryServers>), String> {
    let layout = Layout::new(&cfg.store_config())?;
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    Ok(match a.fabric.fabric.as_str() {
        // Yield at every verb so the crash lands inside transactions.
        "sim" => (Backend::inline_yielding(3, region, a.seed), None),
        "tcp" => tcp_backend(&a.fabric, 3, region)?,
        // Verbs on mapped regions never suspend: yield at each batch, as the
        // sim fabric does here, so the crash lands inside transactions.
        "shm" => match tcp_backend(&a.fabric, 3, region)? {
            (Backend::Tcp(c), servers) => (Backend::Tcp(c.yielding(true)), servers),
            other => other,
        },
        other => {
            return Err(format!(
                "unknown fabric '{other}' (expected sim, tcp or shm)"
            ))
        }
    })
}

/// The phases of a memory-node loss, with the throughput in each.
fn print_memory_failure(m: &tandem_cluster::runner::MemoryFailureTimeline) {
    eprintln!("memory node {} lost:", m.failed_node);
    eprintln!("  reconfigure_pause_us   {:>10.0}   (in-flight transactions decided, primaries moved; {} aborted by the loss)", m.reconfigure_pause_us, m.aborted_by_failure);
    eprintln!(
        "  degraded               {:>10.0} tx/s on the surviving copies (before: {:.0} tx/s)",
        m.tps_degraded, m.tps_before
    );
    eprintln!(
        "  rereplicate_pause_us   {:>10.0}   ({} slots copied onto the replacement)",
        m.rereplicate_pause_us, m.slots_copied
    );
    eprintln!(
        "  after                  {:>10.0} tx/s with f+1 copies again",
        m.tps_after
    );
}

/// The run's throughput timeline with its events, as SVG and PNG.
pub fn write_timeline_figure(
    stem: &std::path::Path,
    title: &str,
    r: &tandem_cluster::runner::RunResult,
) -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    use tandem_report::plot::{timeline_svg, write_figure, Series};
    let tps = r.timeline.tps();
    let svg = timeline_svg(
        title,
        r.timeline.bucket_ms,
        &[Series {
            label: "committed (all compute nodes)",
            tps: &tps,
        }],
        &r.timeline.events,
    );
    write_figure(stem, &svg)
}

pub fn print_recovery(t: &tandem_cluster::runner::RecoveryTimeline) {
    eprintln!("recovery of compute node {}:", t.crashed_node);
    eprintln!(
        "  detect_us              {:>10.0}   (heartbeat timeout)",
        t.detect_us
    );
    eprintln!(
        "  link_termination_us    {:>10.0}   (revoked on every memory node, all acks)",
        t.link_termination_us
    );
    eprintln!(
        "  log_recovery_us        {:>10.0}   ({} logs: {} rolled forward, {} rolled back)",
        t.log_recovery_us, t.logs_found, t.rolled_forward, t.rolled_back
    );
    eprintln!(
        "  log_recovery_cpu_us    {:>10.0}   ({:.0} ns per coordinator; {} rounds, {:.0} us of CPU each)",
        t.log_recovery_cpu_us, t.cpu_ns_per_coordinator, t.rounds, t.cpu_us_per_round
    );
    eprintln!(
        "  total_us               {:>10.0}   (crash to failed-ids published)",
        t.total_us
    );
    eprintln!(
        "  stray_locks_stolen     {:>10}   (+{} released by the post-run scan)",
        t.stray_locks_stolen, t.stray_locks_swept
    );
    if t.slots_scanned > 0 || t.world_stopped_us > 0.0 {
        eprintln!(
            "  world_stopped_us       {:>10.0}   ({} lock words read)",
            t.world_stopped_us, t.slots_scanned
        );
    }
    eprintln!(
        "  survivors              {:>10.0} tx/s before the crash, {:.0} tx/s during recovery ({} commits)",
        t.survivors_tps_before, t.survivors_tps_during_recovery, t.survivors_commits_during_recovery
    );
}

#[derive(Args)]
pub struct RecoveryBenchArgs {
    #[command(flatten)]
    fabric: FabricArgs,
    /// Failed coordinators, each with a transaction in flight.
    #[arg(long, default_value_t = 512)]
    coordinators: u16,
    /// Keys of the micro store (its size must not matter).
    #[arg(long, default_value_t = 500_000)]
    keys: u64,
    /// Recoveries to time (the first warms up and is reported too).
    #[arg(long, default_value_t = 50)]
    runs: usize,
    #[arg(long)]
    json: Option<String>,
}

pub fn recovery_bench(a: RecoveryBenchArgs) -> Result<(), String> {
    if a.coordinators == 0 || a.runs == 0 {
        return Err("--coordinators and --runs must be positive".into());
    }
    let layout = std::sync::Arc::new(tandem_pandora_lab::recovery_bench::layout(
        a.keys,
        a.coordinators,
    )?);
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    let (backend, servers) = match a.fabric.fabric.as_str() {
        "sim" => (
            Backend::inline(layout.memory_nodes as usize, region, 1),
            None,
        ),
        "tcp" | "shm" => tcp_backend(&a.fabric, layout.memory_nodes, region)?,
        other => {
            return Err(format!(
                "unknown fabric '{other}' (expected sim, tcp or shm)"
            ))
        }
    };
    eprintln!(
        "recovery-bench: {} coordinators, {} keys, over {}, {} runs",
        a.coordinators, a.keys, a.fabric.fabric, a.runs
    );
    let pids = servers.as_ref().map_or(Vec::new(), |s| s.pids());
    let r = tandem_pandora_lab::recovery_bench::run(
        &backend,
        &pids,
        layout,
        a.keys,
        a.coordinators,
        a.runs,
    )?;
    eprintln!(
        "log recovery: median {:.0} us wall, {:.0} us CPU ({:.0} ns per coordinator; {} rounds, {:.1} us of CPU each); {} rolled forward, {} rolled back per run",
        r.median_wall_us, r.median_cpu_us, r.cpu_ns_per_coordinator, r.rounds, r.cpu_us_per_round, r.rolled_forward, r.rolled_back
    );
    eprintln!(
        "floor (its {} verbs posted raw, round by round): median {:.0} us wall, {:.0} us CPU; protocol overhead {:.2}x",
        r.verbs, r.floor_wall_us, r.floor_cpu_us, r.protocol_overhead
    );
    if !pids.is_empty() {
        eprintln!(
            "memory servers: {:.0} us CPU per recovery, {:.0} per floor; all processes' CPU over {} cores: recovery {:.0} us, floor {:.0} us (no schedule takes less wall time)",
            r.servers_cpu_us, r.floor_servers_cpu_us, r.cores, r.cpu_bound_wall_us, r.floor_cpu_bound_wall_us
        );
    }
    if let Some(path) = &a.json {
        write_json(path, &r)?;
        eprintln!("wrote {path}");
    }
    Ok(())
}
