//! `tandem kite check`: seeded simulations of Kite under faults, through
//! the release-consistency checker.

use std::time::Instant;

use clap::{Args, Subcommand};
use tandem_kite::simcheck::{check, rc_history_of, CheckOpts, Faults};
use tandem_kite::{KiteConfig, Mutant};

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
    /// Faults: "seed" (drawn from each seed), "none", or a comma list of lossy, partition, sleep, crash, slow (one node's outgoing links).
    #[arg(long, default_value = "seed")]
    faults: String,
    /// A deliberate bug: no-release-barrier, skip-delinquency-check, accept-lower-ballot, no-write-back,
    /// no-slow-path-refresh.
    #[arg(long)]
    mutant: Option<String>,
    /// Write the history of the first violating seed (or of the last seed) as JSON lines.
    #[arg(long)]
    history: Option<String>,
    #[arg(long)]
    json: Option<String>,
}

pub fn run(a: KiteArgs) -> Result<(), String> {
    match a.command {
        KiteCommand::Check(c) => run_check(c),
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
            other => return Err(format!("--faults: unknown fault {other:?} (lossy, partition, sleep, crash, slow, none or seed)")),
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
        Some(m) => Some(Mutant::parse(m).ok_or_else(|| format!("--mutant {m}: unknown (see --help)"))?),
    };
    let base = CheckOpts::default();
    let cfg = KiteConfig { mutant, ..base.cfg };
    Ok(CheckOpts { nodes: a.nodes, sessions: a.sessions, run_ns: a.run_us * 1000, faults: parse_faults(&a.faults)?, cfg, ..base })
}

fn run_check(a: CheckArgs) -> Result<(), String> {
    let opts = options(&a)?;
    let started = Instant::now();
    let mut last = Instant::now();
    let summary = check(&opts, a.seed, a.seeds, |r| {
        if r.violation.is_some() || last.elapsed().as_secs_f64() >= 1.0 {
            let verdict = if r.violation.is_some() { "VIOLATION" } else { "ok" };
            eprintln!("  seed {} [{}]: {} ops, {verdict} ({:.1} s)", r.seed, r.faults.describe(), r.ops, started.elapsed().as_secs_f64());
            last = Instant::now();
        }
    });
    println!(
        "kite check: {} seeds, {} operations, {} violation(s); slow releases {}, epoch bumps {}, write time-outs {}, Paxos retries {}",
        summary.seeds, summary.ops, summary.violation_count, summary.stats.slow_releases, summary.stats.epoch_bumps,
        summary.stats.write_timeouts, summary.stats.paxos_retries
    );
    if let Some(v) = summary.violations.first() {
        println!("  first: seed {} [{}]: {}\n  replay: {}", v.seed, v.faults, v.detail, v.replay);
    }
    if let Some(path) = &a.json {
        write_json(path, &summary)?;
    }
    if let Some(path) = &a.history {
        let seed = summary.violations.first().map_or(a.seed + a.seeds - 1, |v| v.seed);
        std::fs::write(path, rc_history_of(seed, &opts)).map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    if summary.violation_count > 0 {
        return Err(format!("{} seed(s) violated release consistency or never completed", summary.violation_count));
    }
    Ok(())
}
