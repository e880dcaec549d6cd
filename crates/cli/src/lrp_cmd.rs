//! `tandem lrp check|bench`: crash-check log-free data structures on the
//! persistency machine under a policy, or count what each policy costs.

use std::time::Instant;

use clap::{Args, Subcommand};
use tandem_lrp::bench::{bench, BenchOpts, BenchResult};
use tandem_lrp::check::{check, explain, CheckOpts, Report};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::{Mutant, PolicyKind};

use crate::args::{parse_size, write_json};

#[derive(Args)]
pub struct LrpArgs {
    #[command(subcommand)]
    command: LrpCommand,
}

#[derive(Subcommand)]
enum LrpCommand {
    /// Crash a data structure after every step, with every subset of the persists in flight, and check each image.
    Check(CheckArgs),
    /// Synchrobench-style 1:1 inserts and deletes: counted cycles, stalls and write-backs per policy.
    Bench(BenchArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    /// list, hash, bst, skiplist, queue, or all.
    #[arg(long, default_value = "all")]
    lfd: String,
    /// lrp, bb, sb, arp, nop, eager (comma-separated), or all.
    #[arg(long, default_value = "lrp")]
    policy: String,
    #[arg(long, default_value_t = 3)]
    threads: usize,
    /// Operations per thread.
    #[arg(long, default_value_t = 12)]
    ops: usize,
    /// Keys are drawn from 1..=KEYS.
    #[arg(long, default_value_t = 8)]
    keys: u64,
    /// Keys inserted before the checked run.
    #[arg(long, default_value_t = 4)]
    prefill: usize,
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// At most this many crash images per crash point (all of them when fewer).
    #[arg(long, default_value_t = 32)]
    images_per_point: usize,
    /// A deliberate bug to plant (m1-releases-first .. m9-no-min-epoch, coalesce-release,
    /// list-relaxed-link, queue-relaxed-link, bst-early-publish, list-unlink-unmarked).
    #[arg(long)]
    mutant: Option<String>,
    /// Check this many random crash points per seed instead of every one (for long runs: large --ops).
    #[arg(long)]
    crash_points: Option<usize>,
    /// On a violation, print the accesses to and persists of the witness's lines.
    #[arg(long)]
    explain: bool,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Comma-separated structures, or all.
    #[arg(long, default_value = "all")]
    lfd: String,
    /// Comma-separated policies, or all but arp (NOP always runs: it is the baseline).
    #[arg(long, default_value = "nop,lrp,bb,sb,eager")]
    policy: String,
    #[arg(long, default_value_t = 32)]
    threads: usize,
    /// Keys in the structure before the run (8K, 64K, 1M ...).
    #[arg(long, default_value = "64K")]
    size: String,
    /// Operations per thread (default 100; 25 for the list, whose operations walk the whole list).
    #[arg(long)]
    ops: Option<usize>,
    /// NVM write latency in cycles: 120 is the thesis's cached mode, 350 its uncached mode.
    #[arg(long, default_value_t = 120)]
    nvm: u64,
    /// Cycles per hop of the on-chip mesh (Table 3.1: an 8x8 2D mesh, 32-bit flits). The thesis gives no hop latency; 1 is that of PriME, its simulator, and 1-2 the plausible range (docs/LRP.md). 0 leaves the network out.
    #[arg(long, default_value_t = tandem_lrp::machine::DEFAULT_HOP)]
    hop: u64,
    /// LRP: RET occupancy (of 32 entries) that persists the oldest release.
    #[arg(long, default_value_t = 4)]
    ret_watermark: usize,
    /// Leave out the Synchrobench driver's own stores (each thread's seed and counters), running the structure's accesses alone.
    #[arg(long)]
    no_driver: bool,
    /// Leave out the stores a whole-binary trace has around each operation: its call frames on the thread's stack, and malloc's on the thread's allocator line.
    #[arg(long)]
    no_stack_alloc: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also run each structure on real atomics and OS threads (no persistency): wall-clock ops/s.
    #[arg(long)]
    volatile: bool,
    #[arg(long)]
    json: Option<String>,
}

pub fn run(a: LrpArgs) -> Result<(), String> {
    match a.command {
        LrpCommand::Check(c) => run_check(c),
        LrpCommand::Bench(b) => run_bench(b),
    }
}

fn lfds(s: &str) -> Result<Vec<LfdKind>, String> {
    if s == "all" {
        return Ok(LfdKind::ALL.to_vec());
    }
    s.split(',').map(|x| LfdKind::parse(x.trim())).collect()
}

fn policies(s: &str, all: &[PolicyKind]) -> Result<Vec<PolicyKind>, String> {
    if s == "all" {
        return Ok(all.to_vec());
    }
    s.split(',').map(|x| PolicyKind::parse(x.trim())).collect()
}

fn validate_threads(t: usize) -> Result<(), String> {
    if (1..=64).contains(&t) {
        Ok(())
    } else {
        Err(format!("--threads {t}: the machine models 1 to 64 cores"))
    }
}

fn run_check(a: CheckArgs) -> Result<(), String> {
    validate_threads(a.threads)?;
    if a.keys == 0
        || a.ops == 0
        || a.seeds == 0
        || a.images_per_point == 0
        || a.crash_points == Some(0)
    {
        return Err(
            "--keys, --ops, --seeds, --images-per-point and --crash-points must be positive".into(),
        );
    }
    let mutant = a.mutant.as_deref().map(Mutant::parse).transpose()?;
    let mut reports = Vec::new();
    for lfd in lfds(&a.lfd)? {
        for policy in policies(&a.policy, &PolicyKind::ALL)? {
            let o = CheckOpts {
                lfd,
                policy,
                threads: a.threads,
                ops: a.ops,
                keys: a.keys,
                prefill: a.prefill,
                mutant,
                images_per_point: a.images_per_point,
                sample: a.crash_points,
            };
            let r = check_one(&o, &a)?;
            reports.push(r);
        }
    }
    if let Some(path) = &a.json {
        write_json(path, &reports)?;
    }
    let violating: u64 = reports.iter().map(|r| r.violating_seeds).sum();
    if violating > 0 {
        return Err(format!("{violating} seed(s) left an image that is not a consistent cut, not a well-formed structure, or not buffered durably linearizable"));
    }
    Ok(())
}

fn check_one(o: &CheckOpts, a: &CheckArgs) -> Result<Report, String> {
    let started = Instant::now();
    let mut last = Instant::now();
    let label = format!("{} under {}", o.lfd.name(), o.policy.name());
    let r = check(o, a.seed, a.seeds, |seed, _| {
        if last.elapsed().as_secs_f64() >= 2.0 {
            eprintln!(
                "  {label}: seed {seed} of {}..{} ({:.0} s)",
                a.seed,
                a.seed + a.seeds - 1,
                started.elapsed().as_secs_f64()
            );
            last = Instant::now();
        }
    });
    println!(
        "{label}: {} seeds, {} crash points, {} images ({:.0} images/s): {} violating seed(s)",
        r.seeds, r.crash_points, r.images, r.images_per_second, r.violating_seeds
    );
    if let Some(v) = r.violations.first() {
        println!(
            "  first: seed {} at t={} cycles, {} level: {}\n  replay: {}",
            v.seed, v.time, v.level, v.detail, v.replay
        );
        if a.explain {
            println!("{}", explain(o, v.seed, &witness_words(&v.detail)));
        }
    }
    Ok(r)
}

/// The word addresses a violation's text names ("... of word 203 ...").
fn witness_words(detail: &str) -> Vec<u64> {
    detail
        .split("word ")
        .skip(1)
        .filter_map(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

fn run_bench(a: BenchArgs) -> Result<(), String> {
    validate_threads(a.threads)?;
    let size = parse_size(&a.size)? as usize;
    if size > 1 << 22 {
        return Err(format!("--size {size}: at most 4M keys"));
    }
    if !(1..=32).contains(&a.ret_watermark) || a.nvm == 0 {
        return Err("--ret-watermark must be 1..=32 and --nvm positive".into());
    }
    let mut pols = policies(
        &a.policy,
        &[
            PolicyKind::Nop,
            PolicyKind::Lrp,
            PolicyKind::Bb,
            PolicyKind::Sb,
            PolicyKind::Eager,
        ],
    )?;
    pols.retain(|&p| p != PolicyKind::Nop);
    pols.insert(0, PolicyKind::Nop);
    let mut results: Vec<BenchResult> = Vec::new();
    println!(
        "{:<9} {:<6} {:>12} {:>7} {:>9} {:>9} {:>12} {:>8}",
        "lfd", "policy", "cycles", "x NOP", "persists", "critical", "stall", "wall s"
    );
    for lfd in lfds(&a.lfd)? {
        let ops = a.ops.unwrap_or(if lfd == LfdKind::List { 25 } else { 100 });
        let mut nop = 0;
        for &policy in &pols {
            let r = bench(&BenchOpts {
                lfd,
                policy,
                threads: a.threads,
                size,
                ops,
                nvm: a.nvm,
                hop: a.hop,
                driver: !a.no_driver,
                stack_alloc: !a.no_stack_alloc,
                ret_watermark: a.ret_watermark,
                seed: a.seed,
            });
            if policy == PolicyKind::Nop {
                nop = r.cycles.max(1);
            }
            println!(
                "{:<9} {:<6} {:>12} {:>7.3} {:>9} {:>8.1}% {:>12} {:>8.2}",
                lfd.name(),
                policy.name(),
                r.cycles,
                r.cycles as f64 / nop as f64,
                r.stats.persists,
                100.0 * r.critical_share,
                r.stats.stall,
                r.wall_seconds
            );
            results.push(r);
        }
        if a.volatile {
            let ops_s = tandem_lrp::bench::volatile(lfd, a.threads, size, ops, a.seed);
            println!(
                "{:<9} {:<6} real atomics, {} OS threads: {:.0} ops/s (wall clock)",
                lfd.name(),
                "atomic",
                a.threads,
                ops_s
            );
        }
    }
    if let Some(path) = &a.json {
        write_json(path, &results)?;
    }
    Ok(())
}
