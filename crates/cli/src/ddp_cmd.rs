//! `tandem ddp ...`: the DDP models (ddp-minos.txt) in seeded simulation.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde::Serialize;
use tandem_ddp::simcheck::{self, CheckConfig, Crash};
use tandem_ddp::{Bugs, Model};

use crate::args::write_json;

#[derive(Args)]
pub struct DdpArgs {
    #[command(subcommand)]
    command: DdpCommand,
}

#[derive(Subcommand)]
enum DdpCommand {
    /// Seeded simulations with message faults and crashes; every promise of each model checked.
    Check(CheckArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    /// Models: `all` or a list such as lin-synch,re-eventual.
    #[arg(long, default_value = "all")]
    model: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Seeds per model and crash kind.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// none, one (a node crashes and rejoins), all (whole-cluster crash), or mix (each in turn).
    #[arg(long, default_value = "mix")]
    crash: String,
    /// Test-only protocol bug (reply-before-last-ack, val-before-persist, read-in-invalid, early-scope-ack,
    /// causal-early-apply).
    #[arg(long = "inject-bug")]
    bugs: Vec<String>,
    /// A reliable network: no drops, duplicates or extra delays.
    #[arg(long)]
    no_net_faults: bool,
    /// Simulated NVM persist latency.
    #[arg(long, default_value_t = 400)]
    persist_ns: u64,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Serialize, Default)]
struct ModelReport {
    model: String,
    runs: u64,
    completed: u64,
    lost_acked_writes: u64,
    vanished_reads: u64,
    violation_count: usize,
    violations: Vec<String>,
}

pub fn run(a: DdpArgs) -> Result<(), String> {
    match a.command {
        DdpCommand::Check(c) => check(c),
    }
}

fn crashes(name: &str) -> Result<Vec<Crash>, String> {
    if name == "mix" {
        return Ok(vec![Crash::None, Crash::One, Crash::All]);
    }
    Ok(vec![Crash::parse(name).map_err(|e| format!("{e}, or mix"))?])
}

fn check(a: CheckArgs) -> Result<(), String> {
    let all = a.model.trim().eq_ignore_ascii_case("all");
    let models = Model::parse_list(&a.model)?;
    let (models, skipped): (Vec<Model>, Vec<Model>) = models.into_iter().partition(|m| m.implemented());
    if !skipped.is_empty() {
        let names: Vec<String> = skipped.iter().map(|m| m.to_string()).collect();
        if !all {
            return Err(format!("not implemented yet: {} (all but Transactional consistency are)", names.join(", ")));
        }
        eprintln!("skipping {} models not implemented yet: {}", names.len(), names.join(", "));
    }
    let bugs = Bugs::parse(&a.bugs)?;
    let crashes = crashes(&a.crash)?;
    let mut reports = Vec::new();
    let mut last = Instant::now();
    for m in models {
        let mut rep = ModelReport { model: m.to_string(), ..ModelReport::default() };
        for &crash in &crashes {
            for seed in a.seed..a.seed.saturating_add(a.seeds) {
                let cfg = CheckConfig { crash, bugs, net_faults: !a.no_net_faults, persist_ns: a.persist_ns, ..CheckConfig::new(m, seed) };
                let r = simcheck::run(&cfg);
                rep.runs += 1;
                rep.completed += r.completed;
                rep.lost_acked_writes += r.lost_acked_writes;
                rep.vanished_reads += r.vanished_reads;
                if let Some(v) = r.violations.first() {
                    rep.violations.push(format!("{v} ({} in all); replay: {}", r.violations.len(), r.replay));
                }
                if last.elapsed() >= Duration::from_secs(1) {
                    eprintln!("  {m} crash {} seed {seed}: {} ops, {} violations so far", crash.name(), rep.completed, rep.violations.len());
                    last = Instant::now();
                }
            }
        }
        rep.violation_count = rep.violations.len();
        print_model(&rep);
        reports.push(rep);
    }
    if let Some(p) = &a.json {
        write_json(p, &serde_json::json!({ "system": "ddp", "models": reports }))?;
    }
    let bad: usize = reports.iter().map(|r| r.violation_count).sum();
    if bad > 0 {
        return Err(format!("{bad} runs with violations"));
    }
    Ok(())
}

fn print_model(r: &ModelReport) {
    println!(
        "{:<16} {:>4} runs {:>8} ops  {:>3} violations  after whole-cluster crashes: {} acked writes lost, {} read versions vanished",
        r.model, r.runs, r.completed, r.violation_count, r.lost_acked_writes, r.vanished_reads
    );
    for v in r.violations.iter().take(3) {
        println!("    {v}");
    }
}
