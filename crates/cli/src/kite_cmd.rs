//! `tandem kite check`: seeded simulations of Kite under faults, through
//! the release-consistency checker.

use std::time::Instant;

use clap::{Args, Subcommand};
use tandem_check::rc_to_jsonl;
use tandem_kite::lfd::{LfdKind, LfdWorkload};
use tandem_kite::simcheck::{
    check_with, run_with, CheckOpts, Faults, RandomMix, Summary, Workload,
};
use tandem_kite::{KiteConfig, Mutant};

use tandem_kite_lab::bench::{bench_system, KiteBenchOpts, System, SystemResult};

use crate::args::write_json;

#[derive(Args)]
pub struct KiteArgs {
    #[command(subcommand)]
    command: KiteCommand,
}

#[derive(Subcommand)]
enum KiteCommand {
    /// Seeded simulations with faults (drop, duplicate, reorder, partition, a sleeping node, a crashed node),
    /// every history checked for release consistency; exits non-zero on a violation.
    Check(CheckArgs),
    /// Throughput of Kite, ES, ABD, Paxos and ZAB on the same simulated cluster and workload, one after the other
    /// (--net tcp: each as node processes on loopback).
    Bench(BenchArgs),
    /// Node processes on loopback under the checked random mix, with kill -9 and SIGSTOP faults; the history goes
    /// through the release-consistency checker; exits non-zero on a violation.
    Load(LoadArgs),
}

#[derive(Args)]
pub struct LoadArgs {
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    #[arg(long, default_value_t = 40)]
    sessions_per_node: u64,
    #[arg(long, default_value_t = 5.0)]
    duration_s: f64,
    /// SIGSTOP node NODE FROM_S seconds into the run, SIGCONT it FOR_S later (repeatable).
    #[arg(long, value_name = "NODE:FROM_S:FOR_S")]
    sleep: Vec<String>,
    /// kill -9 node NODE AT_S seconds into the run (repeatable).
    #[arg(long, value_name = "NODE:AT_S")]
    kill: Vec<String>,
    /// Kite's write time-out on every node, in ms (default: the paper's 1 ms).
    #[arg(long)]
    timeout_ms: Option<f64>,
    /// A call unanswered this long has an unknown outcome; its session moves to the next node.
    #[arg(long, default_value_t = 3.0)]
    client_timeout_s: f64,
    /// A deliberate bug on every node (see `tandem kite check --help`).
    #[arg(long)]
    mutant: Option<String>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the history as JSON lines.
    #[arg(long)]
    history: Option<String>,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Share of requests that write (RMWs included, as the paper counts).
    #[arg(long, default_value_t = 0.05)]
    write_ratio: f64,
    /// Share of reads and writes that are acquires and releases.
    #[arg(long, default_value_t = 0.05)]
    sync_ratio: f64,
    /// Share of requests that are RMWs (FAA).
    #[arg(long, default_value_t = 0.0)]
    rmw_ratio: f64,
    /// sim (simulated time), or tcp (node processes on loopback, one cluster per system).
    #[arg(long, default_value = "sim")]
    net: String,
    /// tcp: seconds measured, after --warmup-s.
    #[arg(long, default_value_t = 5.0)]
    measure_s: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup_s: f64,
    /// tcp: Kite's write time-out on every node, in ms. Default 20: with the paper's 1 ms, loaded cores make writes
    /// time out spuriously, and the slow path (epoch bumps, quorum reads) takes over.
    #[arg(long)]
    timeout_ms: Option<f64>,
    /// Comma-separated systems (kite, es, abd, paxos, zab), or all.
    #[arg(long, default_value = "all")]
    systems: String,
    #[arg(long, default_value_t = 5)]
    nodes: u16,
    #[arg(long, default_value_t = 40)]
    sessions_per_node: u64,
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Simulated microseconds measured (after a fifth as much warm-up).
    #[arg(long, default_value_t = 1000)]
    measure_us: u64,
    /// sim: worker cores per node.
    #[arg(long)]
    cores: Option<usize>,
    /// sim: CPU per message received (and per client request), in ns.
    #[arg(long)]
    cpu_ns: Option<u64>,
    /// sim: CPU per message sent, per destination, in ns.
    #[arg(long)]
    send_ns: Option<u64>,
    /// sim: ZAB's ordered lane, ns per write applied in zxid order.
    #[arg(long)]
    lane_ns: Option<u64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Args)]
pub struct CheckArgs {
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 5)]
    nodes: u16,
    /// Client sessions (closed loop), spread round robin over the nodes.
    #[arg(long, default_value_t = 20)]
    sessions: u64,
    /// Simulated microseconds with clients running, per seed.
    #[arg(long, default_value_t = 3000)]
    run_us: u64,
    /// Faults: "seed" (drawn from each seed), "none", or a comma list of lossy, partition, sleep, crash, slow (one node's outgoing links), straggle (a few messages
    /// very late).
    #[arg(long, default_value = "seed")]
    faults: String,
    /// A deliberate bug: no-release-barrier, skip-delinquency-check, accept-lower-ballot, no-write-back,
    /// no-slow-path-refresh; or a regression of a review finding: helper-drops-dm, no-own-bit-after-propose,
    /// complete-on-mine, reset-all.
    #[arg(long)]
    mutant: Option<String>,
    /// The workload: "mix" (every operation on random keys), or a data structure on Kite's API: ts (Treiber
    /// stack), msq (Michael-Scott queue), hml (Harris-Michael list), or all (each of the four).
    #[arg(long, default_value = "mix")]
    workload: String,
    /// Data structures: how many, and data fields per node (the paper's -4 / -32).
    #[arg(long, default_value_t = 4)]
    structures: u64,
    #[arg(long, default_value_t = 4)]
    fields: u64,
    /// Write the history of the first violating seed (or of the last seed) as JSON lines.
    #[arg(long)]
    history: Option<String>,
    #[arg(long)]
    json: Option<String>,
}

/// The simulated machine: the paper's unless a flag changes it.
fn machine(a: &BenchArgs) -> KiteBenchOpts {
    let d = KiteBenchOpts::default();
    KiteBenchOpts {
        cores: a.cores.unwrap_or(d.cores).max(1),
        cpu_ns: a.cpu_ns.unwrap_or(d.cpu_ns),
        send_ns: a.send_ns.unwrap_or(d.send_ns),
        lane_ns: a.lane_ns.unwrap_or(d.lane_ns),
        ..d
    }
}

pub fn run(a: KiteArgs) -> Result<(), String> {
    match a.command {
        KiteCommand::Check(c) => run_check(c),
        KiteCommand::Bench(b) => run_bench(b),
        KiteCommand::Load(l) => run_load(l),
    }
}

fn parse_faults(s: &str) -> Result<Option<Faults>, String> {
    let mut f = Faults::default();
    match s {
        "seed" => return Ok(None),
        "none" => return Ok(Some(f)),
        _ => {}
    }
    for name in s.split(',') {
        match name.trim() {
            "lossy" => f.lossy = true,
            "partition" => f.partition = true,
            "sleep" => f.sleep = true,
            "crash" => f.crash = true,
            "slow" => f.slow = true,
            "straggle" => f.straggle = true,
            other => return Err(format!("--faults: unknown fault {other:?} (lossy, partition, sleep, crash, slow, straggle, none or seed)")),
        }
    }
    Ok(Some(f))
}

fn options(a: &CheckArgs) -> Result<CheckOpts, String> {
    if !(3..=9).contains(&a.nodes) {
        return Err(format!("--nodes {}: Kite runs on 3 to 9 replicas", a.nodes));
    }
    if a.seeds == 0 || a.sessions == 0 || a.run_us == 0 {
        return Err("--seeds, --sessions and --run-us must be positive".into());
    }
    let mutant = match a.mutant.as_deref() {
        None => None,
        Some(m) => {
            Some(Mutant::parse(m).ok_or_else(|| format!("--mutant {m}: unknown (see --help)"))?)
        }
    };
    let base = CheckOpts::default();
    let cfg = KiteConfig { mutant, ..base.cfg };
    Ok(CheckOpts {
        nodes: a.nodes,
        sessions: a.sessions,
        run_ns: a.run_us * 1000,
        faults: parse_faults(&a.faults)?,
        cfg,
        ..base
    })
}

fn workloads(s: &str) -> Result<Vec<Option<LfdKind>>, String> {
    match s {
        "mix" => Ok(vec![None]),
        "all" => Ok([None].into_iter().chain(LfdKind::ALL.map(Some)).collect()),
        _ => s
            .split(',')
            .map(|w| {
                if w == "mix" {
                    Ok(None)
                } else {
                    LfdKind::parse(w).map(Some)
                }
            })
            .collect(),
    }
}

fn run_check(a: CheckArgs) -> Result<(), String> {
    let opts = options(&a)?;
    if a.structures == 0 || a.fields == 0 || a.fields > 32 {
        return Err("--structures must be positive and --fields 1..=32".into());
    }
    let mut summaries = Vec::new();
    for w in workloads(&a.workload)? {
        let work = |seed| -> Box<dyn Workload> {
            match w {
                None => Box::new(RandomMix::new(opts.mix, opts.sessions)),
                Some(kind) => Box::new(LfdWorkload::new(
                    kind,
                    a.structures,
                    a.fields,
                    opts.sessions,
                    seed,
                )),
            }
        };
        summaries.push(check_one(&a, &opts, w.map_or("mix", |k| k.name()), work)?);
    }
    if let Some(path) = &a.json {
        let one = summaries.len() == 1;
        if one {
            write_json(path, &summaries[0])?
        } else {
            write_json(path, &summaries)?
        }
    }
    let violations: u64 = summaries.iter().map(|s| s.violation_count).sum();
    if violations > 0 {
        return Err(format!("{violations} seed(s) violated release consistency, a data structure's invariants, or never completed"));
    }
    Ok(())
}

fn check_one(
    a: &CheckArgs,
    opts: &CheckOpts,
    name: &'static str,
    work: impl Fn(u64) -> Box<dyn Workload>,
) -> Result<Summary, String> {
    let started = Instant::now();
    let mut last = Instant::now();
    let mut summary = check_with(opts, a.seed, a.seeds, &work, |r| {
        if r.violation.is_some() || last.elapsed().as_secs_f64() >= 1.0 {
            let verdict = if r.violation.is_some() {
                "VIOLATION"
            } else {
                "ok"
            };
            eprintln!(
                "  seed {} [{}]: {} ops, {verdict} ({:.1} s)",
                r.seed,
                r.faults.describe(),
                r.ops,
                started.elapsed().as_secs_f64()
            );
            last = Instant::now();
        }
    });
    summary.workload = name;
    println!(
        "kite check {name}: {} seeds, {} operations, {} violation(s); slow releases {}, epoch bumps {}, write time-outs {}, Paxos retries {}",
        summary.seeds, summary.ops, summary.violation_count, summary.stats.slow_releases, summary.stats.epoch_bumps,
        summary.stats.write_timeouts, summary.stats.paxos_retries
    );
    if let Some(v) = summary.violations.first() {
        println!(
            "  first: seed {} [{}]: {}\n  replay: {}",
            v.seed, v.faults, v.detail, v.replay
        );
    }
    if let Some(path) = &a.history {
        let seed = summary
            .violations
            .first()
            .map_or(a.seed + a.seeds - 1, |v| v.seed);
        let h = rc_to_jsonl(&run_with(seed, opts, work(seed)).history);
        std::fs::write(path, h).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    Ok(summary)
}

fn ratio(name: &str, v: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("--{name} {v}: a share between 0 and 1"))
    }
}

fn run_bench(a: BenchArgs) -> Result<(), String> {
    match a.net.as_str() {
        "sim" => {}
        "tcp" => return run_bench_tcp(a),
        other => return Err(format!("--net {other}: sim or tcp")),
    }
    if a.timeout_ms.is_some() {
        return Err("--timeout-ms is for --net tcp (the simulation runs the paper's 1 ms)".into());
    }
    if !(3..=9).contains(&a.nodes) || a.sessions_per_node == 0 || a.keys == 0 || a.measure_us == 0 {
        return Err("--nodes 3..=9; --sessions-per-node, --keys and --measure-us positive".into());
    }
    let (m, systems) = mix_and_systems(&a)?;
    let o = KiteBenchOpts {
        nodes: a.nodes,
        sessions_per_node: a.sessions_per_node,
        keys: a.keys,
        write_ratio: m.write,
        sync_ratio: m.sync,
        rmw_ratio: m.rmw,
        measure_ns: a.measure_us * 1000,
        warmup_ns: a.measure_us * 200,
        seed: a.seed,
        ..machine(&a)
    };
    println!(
        "{:<6} {:>14} {:>9} {:>9} {:>10} {:>9}",
        "system", "ops/s (sim)", "p50 us", "p99 us", "msgs/op", "x ES"
    );
    let mut results = Vec::new();
    for s in systems {
        let started = Instant::now();
        let r = bench_system(&o, s);
        let es = results
            .iter()
            .find(|x: &&SystemResult| x.system == "es")
            .map(|x| x.throughput_ops);
        let vs_es = es.map_or("-".to_string(), |e| format!("{:.2}", r.throughput_ops / e));
        println!(
            "{:<6} {:>14.0} {:>9.2} {:>9.2} {:>10.2} {:>9}  ({:.1} s)",
            r.system,
            r.throughput_ops,
            r.latency_us.p50,
            r.latency_us.p99,
            r.messages_per_op,
            vs_es,
            started.elapsed().as_secs_f64()
        );
        results.push(r);
    }
    if let Some(path) = &a.json {
        write_json(
            path,
            &serde_json::json!({ "options": o, "results": results }),
        )?;
    }
    Ok(())
}

/// The request mix of `kite bench`.
struct MixRatios {
    write: f64,
    sync: f64,
    rmw: f64,
}

/// `--write-ratio`, `--sync-ratio`, `--rmw-ratio` (RMWs count as writes) and `--systems`.
fn mix_and_systems(a: &BenchArgs) -> Result<(MixRatios, Vec<System>), String> {
    let m = MixRatios {
        write: ratio("write-ratio", a.write_ratio)?,
        sync: ratio("sync-ratio", a.sync_ratio)?,
        rmw: ratio("rmw-ratio", a.rmw_ratio)?,
    };
    if m.rmw > m.write {
        return Err(format!(
            "--rmw-ratio {} exceeds --write-ratio {}: RMWs count as writes",
            m.rmw, m.write
        ));
    }
    let systems = match a.systems.as_str() {
        "all" => System::ALL.to_vec(),
        s => s
            .split(',')
            .map(|x| System::parse(x.trim()))
            .collect::<Result<_, _>>()?,
    };
    Ok((m, systems))
}

fn work_dir(what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tandem-kite-{what}-{}", std::process::id()))
}

fn exe() -> Result<std::path::PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))
}

/// Kite's time-out for benchmarks over TCP (see `--timeout-ms`).
const TCP_TIMEOUT_MS: f64 = 20.0;

/// Messages in flight per link of the echo the nodes are compared with.
const ECHO_WINDOW: u64 = 20;

/// `tandem kite bench --net tcp`: for each system, five node processes and
/// closed-loop sessions of the paper's mix.
fn run_bench_tcp(a: BenchArgs) -> Result<(), String> {
    use tandem_kite_lab::procs::{bench_tcp, BenchMix, LoadOpts, NodeOpts};
    if !(3..=9).contains(&a.nodes)
        || a.sessions_per_node == 0
        || a.keys == 0
        || a.measure_s.is_nan()
        || a.measure_s <= 0.0
        || a.warmup_s.is_nan()
        || a.warmup_s < 0.0
    {
        return Err("--nodes 3..=9; --sessions-per-node, --keys and --measure-s positive".into());
    }
    let (m, systems) = mix_and_systems(&a)?;
    let (w, r) = (m.write, m.rmw);
    let timeout_ms = a.timeout_ms.unwrap_or(TCP_TIMEOUT_MS);
    let node = NodeOpts {
        timeout_ms: Some(timeout_ms),
        ..NodeOpts::default()
    };
    let o = LoadOpts {
        sessions_per_node: a.sessions_per_node,
        warmup_s: a.warmup_s,
        duration_s: a.measure_s,
        seed: a.seed,
        ..LoadOpts::default()
    };
    let (exe, dir) = (exe()?, work_dir("bench"));
    let model = crate::net_cmd::echo_model(a.nodes, &[5, 20, 80], a.measure_s.min(2.0))?;
    println!(
        "runtime cost (echo among {} processes at windows 5, 20, 80): {:.0} ns per message + {:.0} ns per syscall",
        a.nodes, model.per_message_ns, model.per_syscall_ns
    );
    let echo = crate::net_cmd::echo_rate(a.nodes, ECHO_WINDOW, a.measure_s)?;
    println!(
        "runtime floor: echo among {} processes, all to all, {ECHO_WINDOW} in flight per link: {:.0} messages/s, {:.0} ns of CPU and {:.2} syscalls per message",
        a.nodes, echo.messages_per_s, echo.cpu_ns_per_message, echo.syscalls_per_message
    );
    println!(
        "{:<6} {:>14} {:>9} {:>9} {:>10} {:>12} {:>9} {:>11} {:>8} {:>8} {:>10}",
        "system",
        "ops/s (tcp)",
        "p50 us",
        "p99 us",
        "msgs/op",
        "cpu us/op",
        "x ES",
        "cpu ns/msg",
        "vs echo",
        "sys/msg",
        "vs runtime"
    );
    let mut results: Vec<SystemResult> = Vec::new();
    let mut cpu = Vec::new();
    for s in systems {
        let mix = BenchMix {
            system: s,
            keys: a.keys,
            write_ratio: w,
            sync_ratio: m.sync,
            rmw_ratio: r,
        };
        let started = Instant::now();
        let (res, rep) = bench_tcp(&exe, &dir, a.nodes as usize, &node, mix, &o)?;
        let es = results
            .iter()
            .find(|x| x.system == "es")
            .map(|x| x.throughput_ops);
        let vs_es = es.map_or("-".to_string(), |e| {
            format!("{:.2}", res.throughput_ops / e)
        });
        println!(
            "{:<6} {:>14.0} {:>9.1} {:>9.1} {:>10.2} {:>12.1} {:>9} {:>11.0} {:>7.1}x {:>8.2} {:>9.2}x  ({:.1} s)",
            res.system,
            res.throughput_ops,
            res.latency_us.p50,
            res.latency_us.p99,
            res.messages_per_op,
            rep.node_cpu_us_per_op,
            vs_es,
            rep.node_cpu_ns_per_message,
            rep.node_cpu_ns_per_message / echo.cpu_ns_per_message,
            rep.node_syscalls_per_message,
            rep.node_cpu_ns_per_message / model.cpu_ns_at(rep.node_syscalls_per_message),
            started.elapsed().as_secs_f64()
        );
        cpu.push(serde_json::json!({
            "system": res.system, "node_cpu_ns_per_message": rep.node_cpu_ns_per_message,
            "vs_echo": rep.node_cpu_ns_per_message / echo.cpu_ns_per_message,
            "node_syscalls_per_message": rep.node_syscalls_per_message,
            "vs_runtime": rep.node_cpu_ns_per_message / model.cpu_ns_at(rep.node_syscalls_per_message),
            "node_loop_cpu_share": rep.node_loop_cpu_share,
        }));
        results.push(res);
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(path) = &a.json {
        let options = serde_json::json!({
            "net": "tcp", "nodes": a.nodes, "sessions_per_node": a.sessions_per_node, "keys": a.keys, "write_ratio": w,
            "sync_ratio": m.sync, "rmw_ratio": r, "warmup_s": a.warmup_s, "measure_s": a.measure_s,
            "timeout_ms": timeout_ms, "seed": a.seed,
        });
        let echo = serde_json::json!({
            "nodes": a.nodes, "window": ECHO_WINDOW, "messages_per_s": echo.messages_per_s,
            "cpu_ns_per_message": echo.cpu_ns_per_message, "syscalls_per_message": echo.syscalls_per_message,
        });
        write_json(
            path,
            &serde_json::json!({ "options": options, "echo": echo, "runtime_model": model, "results": results, "node_cpu": cpu }),
        )?;
    }
    Ok(())
}

/// `tandem kite load`: the checked random mix on node processes with faults.
fn run_load(a: LoadArgs) -> Result<(), String> {
    use tandem_kite_lab::procs::{checked_load, Fault, LoadOpts, NodeOpts};
    if !(3..=9).contains(&a.nodes)
        || a.sessions_per_node == 0
        || a.duration_s.is_nan()
        || a.duration_s <= 0.0
    {
        return Err("--nodes 3..=9; --sessions-per-node and --duration-s positive".into());
    }
    if let Some(m) = &a.mutant {
        Mutant::parse(m)
            .ok_or_else(|| format!("--mutant {m}: unknown (see `tandem kite check --help`)"))?;
    }
    let mut faults: Vec<Fault> = a
        .sleep
        .iter()
        .map(|s| Fault::parse_sleep(s))
        .collect::<Result<_, _>>()?;
    faults.extend(
        a.kill
            .iter()
            .map(|s| Fault::parse_kill(s))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let node = NodeOpts {
        timeout_ms: a.timeout_ms,
        mutant: a.mutant.clone(),
        zab: false,
        addrs: None,
    };
    let o = LoadOpts {
        sessions_per_node: a.sessions_per_node,
        duration_s: a.duration_s,
        client_timeout_s: a.client_timeout_s,
        faults,
        seed: a.seed,
        progress: Some("kite load".into()),
        ..LoadOpts::default()
    };
    let dir = work_dir("load");
    let r = checked_load(&exe()?, &dir, a.nodes, &node, &o)?;
    println!(
        "kite load: {} nodes, {} sessions, {:.1} s: {:.0} ops/s, p50 {:.0} us, p99 {:.0} us; {} history ops ({} unknown), {} session moves",
        r.nodes, r.sessions, r.seconds, r.throughput_ops, r.latency_us.p50, r.latency_us.p99, r.ops, r.pending_ops, r.moves
    );
    for (t, row) in r
        .timeline_per_node
        .iter()
        .enumerate()
        .filter(|(t, _)| t % 5 == 4)
    {
        eprintln!(
            "  {:.1} s: per node ops/s (last 100 ms) {:?}",
            (t + 1) as f64 / 10.0,
            row.iter().map(|c| c * 10).collect::<Vec<_>>()
        );
    }
    if let Some(p) = &a.history {
        std::fs::write(p, rc_to_jsonl(&r.history)).map_err(|e| format!("cannot write {p}: {e}"))?;
    }
    if let Some(p) = &a.json {
        write_json(p, &r)?;
    }
    match &r.violation {
        None => {
            println!("release consistent: 0 violations");
            Ok(())
        }
        Some(v) => Err(format!(
            "the history violates release consistency (node logs in {}):\n{v}",
            dir.display()
        )),
    }
}
