//! `tandem nemesis`: real processes under real network and process faults,
//! in a network namespace of the command's own, checked afterwards.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use tandem_ddp_lab::nemesis::{self, schedule, NemesisConfig, ScheduleRun, RECOVERY_BOUND};

#[derive(Args)]
pub struct NemesisArgs {
    /// The system under faults: ddp (five `tandem node` processes and their manager).
    #[arg(long, default_value = "ddp")]
    system: String,
    /// DDP's model (a Lin model: its history is checked for linearizability).
    #[arg(long, default_value = "lin-synch")]
    model: String,
    /// First schedule's seed; schedules run with seed, seed+1, ...
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 3)]
    schedules: u64,
    /// Fault classes to draw from, comma-separated, or all: isolate, split, bridge, one-way, loss,
    /// blackhole, manager, pause, kill, kill-all, flip.
    #[arg(long, default_value = "all")]
    faults: String,
    #[arg(long, default_value_t = 3)]
    faults_per_schedule: usize,
    /// How long each fault is held before it heals.
    #[arg(long, default_value_t = 1500)]
    fault_ms: u64,
    /// Logs and histories (`<out>/seed-N/history.jsonl`, docs/NEMESIS.md has the format).
    #[arg(long, default_value = "target/nemesis")]
    out: PathBuf,
    /// Write every schedule's result here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Test-only planted bug for every node (see `tandem node --help`), to show the nemesis catches it.
    #[arg(long = "inject-bug", hide = true)]
    bugs: Vec<String>,
}

pub fn run(a: NemesisArgs) -> Result<(), String> {
    if a.system != "ddp" {
        return Err(format!(
            "--system {}: the nemesis runs ddp so far (pandora, heal and kite are not wired to it yet)",
            a.system
        ));
    }
    let cfg = config(&a)?;
    prepare()?;
    println!(
        "nemesis: {} schedules of {} faults ({} ms each) on DDP {} (5 nodes, a manager), seed {}; logs in {}",
        cfg.schedules,
        cfg.faults,
        a.fault_ms,
        cfg.model,
        cfg.seed,
        cfg.out_dir()
    );
    let runs = nemesis::run(&cfg, print_run);
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&runs).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    summary(&runs)
}

trait OutDir {
    fn out_dir(&self) -> String;
}

impl OutDir for NemesisConfig {
    fn out_dir(&self) -> String {
        self.dir.display().to_string()
    }
}

fn config(a: &NemesisArgs) -> Result<NemesisConfig, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let cfg = NemesisConfig {
        exe,
        model: a.model.clone(),
        seed: a.seed,
        schedules: a.schedules,
        classes: schedule::parse_classes(&a.faults)?,
        faults: a.faults_per_schedule,
        fault_time: Duration::from_millis(a.fault_ms),
        dir: std::path::absolute(&a.out).map_err(|e| e.to_string())?,
        bugs: a.bugs.clone(),
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The tools (installed through the checkout's script when it is here),
/// then this thread into a network namespace of its own.
fn prepare() -> Result<(), String> {
    let script = std::path::Path::new("scripts/netfault.sh");
    if script.exists() {
        tandem_nemesis::install_tools(std::path::Path::new(".")).map_err(|e| format!("{e}"))?;
    }
    tandem_nemesis::enter_fresh_netns().map_err(|e| e.to_string())
}

fn print_run(r: &ScheduleRun) {
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
    let verdict = if r.violations.is_empty() {
        "ok"
    } else {
        "FAILED"
    };
    println!(
        "  seed {:>3}: {verdict}; {} ops ({} unknown)",
        r.seed, r.operations, r.unknown
    );
    for h in &r.heals {
        println!(
            "            {:<34} back {:>5} ms after the heal, all members {:>5} ms",
            h.fault,
            ms(h.recover_ms),
            ms(h.rejoin_ms)
        );
    }
    for v in &r.violations {
        println!("            {v}");
    }
    if !r.violations.is_empty() {
        println!("            history: {}", r.history.display());
        println!("            replay:  {}", r.replay);
    }
}

fn summary(runs: &[ScheduleRun]) -> Result<(), String> {
    let bad = runs.iter().filter(|r| !r.violations.is_empty()).count();
    println!(
        "{} schedules, {} failed (safety: the model's checker; liveness: back within {} ms of each heal)",
        runs.len(),
        bad,
        RECOVERY_BOUND.as_millis()
    );
    match bad {
        0 => Ok(()),
        n => Err(format!("{n} of {} schedules failed", runs.len())),
    }
}
