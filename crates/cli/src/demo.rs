//! `tandem demo`: the first thing a newcomer runs. An embedded cluster (3
//! memory nodes, replicas 2, 2 compute nodes of many coordinators each) runs
//! SmallBank (FORD's mix) with live progress; compute node 2 crashes mid-run;
//! at the end, a summary, a throughput-timeline figure, and a check of the
//! whole store.

use std::time::Duration;

use clap::Args;
use tandem_cluster::backend::Backend;
use tandem_cluster::runner::{self, CrashPlan, RunConfig, RunResult, SuspectPlan};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};

#[derive(Args)]
pub struct DemoArgs {
    /// Which system: pandora (the transactional store; default), ddp (the consistency x persistency
    /// models) or heal (a replica killed and recovered online, on processes).
    #[arg(default_value = "pandora")]
    system: String,
    /// pandora, ford or traditional.
    #[arg(long, default_value = "pandora")]
    store: Mode,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Coordinators per compute node.
    #[arg(long, default_value_t = 16)]
    coordinators: u16,
    /// SmallBank accounts (4 % of them hot, 90 % of transactions on the hot ones).
    #[arg(long, default_value_t = 100_000)]
    accounts: u64,
    /// Do not crash a compute node mid-run.
    #[arg(long)]
    no_crash: bool,
    /// Do not provoke a false suspicion of compute node 1 (its heartbeats
    /// stall while it keeps committing) late in the run.
    #[arg(long)]
    no_suspicion: bool,
    /// Where to write the throughput-timeline figure (FIGURE.svg, FIGURE.png).
    #[arg(long, default_value = "target/demo/timeline")]
    figure: std::path::PathBuf,
}

pub fn run_demo(a: &DemoArgs) -> Result<bool, String> {
    let cfg = demo_config(a)?;
    let (crash, suspicion) = (!a.no_crash, !a.no_suspicion);
    let layout = Layout::new(&cfg.store_config())?;
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    print_plan(a, &cfg, region);
    // Batches yield at every verb, so a crash really lands mid-transaction.
    let backend = if crash || suspicion {
        Backend::inline_yielding(cfg.memory_nodes as usize, region, cfg.seed)
    } else {
        Backend::inline(cfg.memory_nodes as usize, region, cfg.seed)
    };
    let r = runner::run(&cfg, &backend)?;
    print_summary(a, &r);
    let title = format!(
        "tandem demo: {} store, compute node 2 {}{}",
        a.store,
        if crash { "crashed mid-run" } else { "no crash" },
        if suspicion {
            ", node 1 falsely suspected"
        } else {
            ""
        }
    );
    match crate::bench_cmd::write_timeline_figure(&a.figure, &title, &r) {
        Ok((svg, png)) => eprintln!(
            "  figure         throughput timeline: {} (and {})",
            png.display(),
            svg.display()
        ),
        Err(e) => eprintln!("  figure         not written: {e}"),
    }
    let ok = r.check_passed == Some(true)
        && r.errors.is_empty()
        && r.fenced_acks == 0
        && (!crash || !r.recovered_nodes.is_empty());
    eprintln!(
        "  consistency    {}",
        if ok {
            "passed: every balance equals its initial value plus exactly the acknowledged commits (in-doubt ones either way), total money = initial + known deltas, no savings negative, replicas identical, no lock held"
        } else {
            "FAILED"
        }
    );
    for v in r.violations.iter().chain(r.errors.iter()).take(10) {
        eprintln!("    {v}");
    }
    Ok(ok)
}

/// The demo's run: SmallBank with a crash of compute node 2 and a false
/// suspicion of node 1, unless the flags say otherwise.
fn demo_config(a: &DemoArgs) -> Result<RunConfig, String> {
    if !(a.duration.is_finite() && a.duration > 0.0) {
        return Err("--duration must be a positive number of seconds".into());
    }
    let workload = WorkloadSpec::from_name("smallbank", Some(a.accounts))?;
    let mut cfg = RunConfig::new(a.store, workload);
    cfg.coordinators = a.coordinators;
    cfg.duration = Duration::from_secs_f64(a.duration);
    cfg.progress = true;
    cfg.progress_every = Duration::from_millis(500);
    // Compute node 2 crashes at 40 % of the run: the failure detector
    // (heartbeat timeout) fences it off and recovery runs. With pandora node 1
    // keeps committing throughout; the baselines stop the world to recover.
    if !a.no_crash {
        cfg.crash = Some(CrashPlan {
            node: 1,
            after: cfg.duration.mul_f64(0.4),
        });
        // 10 ms rather than the 5 ms default: the demo shares two cores with its
        // own load generator, and a heartbeat thread can be held off for ~5 ms.
        cfg.heartbeat_timeout = Duration::from_millis(10);
    }
    // Compute node 1 is falsely suspected at 70 %: its heartbeat thread stalls
    // for 4 timeouts while its coordinators keep running. The detector fences
    // it off for good; it stops, and comes back as a new incarnation.
    if !a.no_suspicion {
        cfg.suspect.push(SuspectPlan {
            node: 0,
            after: cfg.duration.mul_f64(0.7),
            pause: cfg.heartbeat_timeout * 4,
        });
    }
    cfg.validate()?;
    Ok(cfg)
}

/// What the demo is about to run, and which faults it injects when.
fn print_plan(a: &DemoArgs, cfg: &RunConfig, region: u64) {
    eprintln!("tandem demo: {} store, embedded cluster", a.store);
    eprintln!(
        "  {} memory nodes ({} MiB each, replicas {}), {} compute nodes x {} coordinators",
        cfg.memory_nodes,
        region >> 20,
        cfg.replicas,
        cfg.compute_nodes,
        cfg.coordinators
    );
    eprintln!(
        "  workload: SmallBank, {} accounts (savings + checking), FORD's mix: Amalgamate 15, Balance 15, DepositChecking 15, SendPayment 25, TransactSavings 15, WriteCheck 15 %",
        a.accounts
    );
    eprintln!(
        "  running {:.1}s (after {:.1}s warm-up)...",
        a.duration,
        cfg.warmup.as_secs_f64()
    );
    if !a.no_crash {
        eprintln!("  compute node 2 will crash at {:.1}s (kill -9 style: its coordinators stop mid-transaction)", a.duration * 0.4);
    }
    if !a.no_suspicion {
        eprintln!("  compute node 1 will be falsely suspected at {:.1}s (its heartbeats stall; it keeps running)", a.duration * 0.7);
    }
}

/// Throughput, aborts, latency, then what the crash, the suspicion and
/// the fencing did.
fn print_summary(a: &DemoArgs, r: &RunResult) {
    let crash = !a.no_crash;
    eprintln!("\nsummary");
    eprintln!(
        "  committed      {} in {:.2}s = {:.0} tx/s",
        r.committed, r.duration_s, r.throughput_tps
    );
    eprintln!(
        "  aborted        {} ({:.2}% of attempts)",
        r.aborted,
        100.0 * r.abort_rate
    );
    for (reason, n) in &r.aborts_by_reason {
        eprintln!("    {reason:<18} {n}");
    }
    eprintln!(
        "  latency        p50 {} us, p99 {} us, p99.9 {} us, mean {:.1} us",
        r.latency_us.p50, r.latency_us.p99, r.latency_us.p999, r.latency_us.mean
    );
    eprintln!("  verbs/commit   {:.2}", r.verbs_per_commit);
    if let Some(t) = &r.recovery {
        eprintln!(
            "  crash          compute node {}: detected after {:.1} ms, fenced in {:.3} ms, log recovery {:.1} ms ({} logs: {} rolled forward, {} rolled back), {:.1} ms crash to recovered",
            t.crashed_node,
            t.detect_us / 1e3,
            t.link_termination_us / 1e3,
            t.log_recovery_us / 1e3,
            t.logs_found,
            t.rolled_forward,
            t.rolled_back,
            t.total_us / 1e3
        );
        eprintln!(
            "                 {}: {:.0} tx/s before, {:.0} tx/s during recovery ({} commits); {} stray locks stolen",
            if a.store == Mode::Pandora { "the survivor kept committing" } else { "the survivor, paused while the world stopped" },
            t.survivors_tps_before, t.survivors_tps_during_recovery, t.survivors_commits_during_recovery, t.stray_locks_stolen
        );
    } else if crash && r.recovered_nodes.is_empty() {
        eprintln!("  crash          recovery did not complete");
    } else if crash {
        eprintln!("  crash          compute node 2 had already been suspected, fenced and replaced before its planned crash");
    }
    for n in &r.false_positives {
        eprintln!(
            "  suspicion      compute node {n} was declared failed while alive: revoked for good on every memory node, its coordinators stopped at their next verb, recovery ran, and it came back as a new incarnation"
        );
    }
    eprintln!(
        "  fencing        {} new incarnations started; {} commits acknowledged by fenced incarnations",
        r.incarnations_started, r.fenced_acks
    );
}

pub fn run(a: DemoArgs) -> Result<(), String> {
    match a.system.as_str() {
        "pandora" => {}
        "ddp" => return crate::ddp_demo::run(&a.figure.with_file_name("ddp")),
        "heal" => return crate::heal_demo::run(&a.figure.with_file_name("heal")),
        "kite" => return crate::kite_demo::run(&a.figure.with_file_name("kite")),
        other => {
            return Err(format!(
                "unknown demo '{other}': pandora, ddp, heal or kite"
            ))
        }
    }
    if run_demo(&a)? {
        Ok(())
    } else {
        Err("the post-run consistency check failed".into())
    }
}
