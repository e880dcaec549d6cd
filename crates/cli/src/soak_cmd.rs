//! `tandem pandora soak`: the demo scenario many times over, with random false
//! suspicions (heartbeat stalls of live nodes), crashes and a competing load
//! on the machine; and `tandem pandora sim-suspicion`: the seeded simulation of the
//! same faults (replay one seed, or sweep many).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tandem_cluster::backend::Backend;
use tandem_cluster::runner::{self, CrashPlan, RunConfig, RunResult, SuspectPlan};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};
use tandem_pandora_lab::sim_suspicion::{self, FencingBugs, SuspicionConfig};
use tandem_sim::Rng;

use crate::args::write_json;

#[derive(Args)]
pub struct SoakArgs {
    /// How many runs.
    #[arg(long, default_value_t = 20)]
    runs: u32,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// SmallBank accounts.
    #[arg(long, default_value_t = 20_000)]
    accounts: u64,
    /// Seed of the fault plan (run i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Serialize)]
struct SoakRun {
    run: u32,
    seed: u64,
    crash: bool,
    suspicions_planned: usize,
    competing_load: bool,
    suspected: Vec<u16>,
    incarnations_started: usize,
    committed: u64,
    throughput_tps: f64,
    fenced_acks: u64,
    check_passed: bool,
    /// Commits in the last tenth of the run: throughput came back.
    commits_at_end: u64,
    problems: Vec<String>,
}

#[derive(Serialize)]
struct SoakReport {
    system: &'static str,
    runs: u32,
    failed_runs: u32,
    fenced_acks: u64,
    false_positives: usize,
    violation_count: usize,
    violations: Vec<String>,
    details: Vec<SoakRun>,
}

/// The fault plan of one run: maybe a crash of node 2, 1-3 heartbeat stalls
/// of any node (replacements included), maybe a competing load.
fn plan(a: &SoakArgs, seed: u64) -> (RunConfig, bool) {
    let mut r = Rng::new(seed);
    let workload =
        WorkloadSpec::from_name("smallbank", Some(a.accounts)).expect("smallbank exists");
    let mut cfg = RunConfig::new(Mode::Pandora, workload);
    cfg.duration = Duration::from_secs_f64(a.duration);
    cfg.heartbeat_timeout = Duration::from_millis(10);
    cfg.seed = seed;
    let at = |r: &mut Rng, lo: f64, hi: f64| {
        cfg.duration
            .mul_f64(lo + (hi - lo) * r.below(1000) as f64 / 1000.0)
    };
    if r.chance(0.7) {
        cfg.crash = Some(CrashPlan {
            node: 1,
            after: at(&mut r, 0.1, 0.8),
        });
    }
    for _ in 0..1 + r.below(3) {
        let pause = cfg.heartbeat_timeout * (2 + r.below(5) as u32);
        let after = at(&mut r, 0.05, 0.8);
        cfg.suspect.push(SuspectPlan {
            node: r.below(cfg.compute_nodes as u64 + 2) as u16,
            after,
            pause,
        });
    }
    (cfg, r.chance(0.5))
}

/// A noisy neighbour: one thread spinning in bursts while the run lasts.
fn competing_load(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(20) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

fn judge(i: u32, seed: u64, cfg: &RunConfig, load: bool, r: &RunResult) -> SoakRun {
    let tail = r.timeline.committed.len() / 10;
    let commits_at_end: u64 = r.timeline.committed.iter().rev().take(tail.max(1)).sum();
    let mut problems: Vec<String> = r
        .violations
        .iter()
        .chain(&r.errors)
        .take(5)
        .cloned()
        .collect();
    if commits_at_end == 0 {
        problems
            .push("no commits in the last tenth of the run: throughput did not come back".into());
    }
    let check_passed = r.check_passed == Some(true);
    if !check_passed && problems.is_empty() {
        problems.push("post-run check failed".into());
    }
    SoakRun {
        run: i,
        seed,
        crash: cfg.crash.is_some(),
        suspicions_planned: cfg.suspect.len(),
        competing_load: load,
        suspected: r.false_positives.clone(),
        incarnations_started: r.incarnations_started,
        committed: r.committed,
        throughput_tps: r.throughput_tps,
        fenced_acks: r.fenced_acks,
        check_passed,
        commits_at_end,
        problems,
    }
}

pub fn soak(a: SoakArgs) -> Result<(), String> {
    if a.runs == 0 || !(a.duration.is_finite() && a.duration > 0.0) {
        return Err("--runs must be positive and --duration a positive number of seconds".into());
    }
    eprintln!("tandem pandora soak: {} runs of the demo scenario ({:.1}s each) with random false suspicions, crashes and a competing load", a.runs, a.duration);
    let mut details = Vec::new();
    for i in 0..a.runs {
        let seed = a.seed + i as u64;
        let (cfg, load) = plan(&a, seed);
        cfg.validate()?;
        let region = Layout::new(&cfg.store_config())?
            .region_bytes
            .iter()
            .copied()
            .max()
            .unwrap_or(0);
        let backend = Backend::inline_yielding(cfg.memory_nodes as usize, region, seed);
        let stop = Arc::new(AtomicBool::new(false));
        let neighbour = load.then(|| competing_load(stop.clone()));
        let result = runner::run(&cfg, &backend);
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = neighbour {
            let _ = h.join();
        }
        let run = judge(i, seed, &cfg, load, &result?);
        eprintln!(
            "  run {:>3}/{}: {} committed, {} suspected {:?}, {} new incarnations, fenced acks {}, {}{}",
            i + 1,
            a.runs,
            run.committed,
            run.suspected.len(),
            run.suspected,
            run.incarnations_started,
            run.fenced_acks,
            if run.problems.is_empty() { "ok" } else { "FAILED: " },
            run.problems.join("; ")
        );
        details.push(run);
    }
    let failed_runs = details.iter().filter(|d| !d.problems.is_empty()).count() as u32;
    let violations: Vec<String> = details
        .iter()
        .filter(|d| !d.problems.is_empty())
        .map(|d| {
            format!(
                "run {} ({}): replay with tandem pandora soak --runs 1 --seed {} --duration {}",
                d.run,
                d.problems.join("; "),
                d.seed,
                a.duration
            )
        })
        .collect();
    let report = SoakReport {
        system: "pandora",
        runs: a.runs,
        failed_runs,
        fenced_acks: details.iter().map(|d| d.fenced_acks).sum(),
        false_positives: details.iter().map(|d| d.suspected.len()).sum(),
        violation_count: violations.len(),
        violations,
        details,
    };
    eprintln!(
        "summary: {} of {} runs failed, {} commits acknowledged by fenced incarnations, {} nodes suspected while alive (all fenced and back)",
        report.failed_runs, report.runs, report.fenced_acks, report.false_positives
    );
    if let Some(p) = &a.json {
        write_json(p, &report)?;
    }
    if report.failed_runs > 0 || report.fenced_acks > 0 {
        return Err(format!("{} runs failed", report.failed_runs));
    }
    Ok(())
}

#[derive(Args)]
pub struct SimSuspicionArgs {
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many seeds from --seed.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// revocable-fencing, ignore-own-failure (test-only bugs).
    #[arg(long = "inject-bug")]
    bugs: Vec<String>,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Serialize)]
struct SimSuspicionReport {
    system: &'static str,
    seeds: u64,
    committed: u64,
    suspected: usize,
    rejoins: u64,
    fenced_acks: u64,
    violation_count: usize,
    violations: Vec<String>,
}

pub fn sim_suspicion(a: SimSuspicionArgs) -> Result<(), String> {
    let mut bugs = FencingBugs::default();
    for b in &a.bugs {
        match b.as_str() {
            "revocable-fencing" => bugs.revocable_fencing = true,
            "ignore-own-failure" => bugs.ignore_own_failure = true,
            other => {
                return Err(format!(
                    "unknown bug '{other}': revocable-fencing, ignore-own-failure"
                ))
            }
        }
    }
    let mut rep = SimSuspicionReport {
        system: "pandora",
        seeds: a.seeds,
        committed: 0,
        suspected: 0,
        rejoins: 0,
        fenced_acks: 0,
        violation_count: 0,
        violations: Vec::new(),
    };
    let started = Instant::now();
    let mut last = Instant::now();
    for seed in a.seed..a.seed + a.seeds {
        let r = sim_suspicion::run(&SuspicionConfig {
            bugs,
            ..SuspicionConfig::random(seed)
        });
        rep.committed += r.committed;
        rep.suspected += r.declared.len();
        rep.rejoins += r.rejoins as u64;
        rep.fenced_acks += r.fenced_acks;
        if let Some(v) = r.violations.first() {
            rep.violations.push(format!(
                "seed {seed}: {v} ({} in all); replay: {}",
                r.violations.len(),
                r.replay
            ));
        }
        if last.elapsed() >= Duration::from_secs(1) || a.seeds == 1 {
            eprintln!(
                "  seed {seed}: {} committed, declared {:?}, {} rejoins, {} violations",
                r.committed,
                r.declared,
                r.rejoins,
                r.violations.len()
            );
            last = Instant::now();
        }
    }
    rep.violation_count = rep.violations.len();
    eprintln!(
        "{} seeds in {:.1}s: {} committed, {} incarnations declared failed, {} rejoins, {} fenced acks, {} seeds with violations",
        a.seeds,
        started.elapsed().as_secs_f64(),
        rep.committed,
        rep.suspected,
        rep.rejoins,
        rep.fenced_acks,
        rep.violation_count
    );
    for v in rep.violations.iter().take(5) {
        eprintln!("  {v}");
    }
    if let Some(p) = &a.json {
        write_json(p, &rep)?;
    }
    if rep.violation_count > 0 {
        return Err(format!("{} seeds with violations", rep.violation_count));
    }
    Ok(())
}
