//! `tandem nemesis`: real processes under real network and process faults,
//! in a network namespace of the command's own, checked afterwards.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use tandem_ddp_lab::nemesis::{self, cluster::SHAPE, NemesisConfig, RECOVERY_BOUND};
use tandem_nemesis::drive::ScheduleRun;
use tandem_nemesis::schedule;

#[derive(Args)]
pub struct NemesisArgs {
    /// The system under faults: pandora (three compute servers, three memory servers and the
    /// membership, checked by check-cluster), ddp (five `tandem node` processes and their manager), heal (the
    /// same, restarted nodes recovering with HEAL: the Lin models), kite (five
    /// Kite replicas, crash-stop), zab (the ZAB baseline: five nodes, leader 0).
    #[arg(long, default_value = "ddp")]
    system: String,
    /// DDP's model, any of the 25 (DDP only). Lin models are checked for linearizability, the
    /// others for reads from thin air and for convergence after the last heal.
    #[arg(long, default_value = "lin-synch")]
    model: String,
    /// Pandora's membership: single (one process) or zookeeper (three replicas of the failure
    /// detector keeping their state in a ZooKeeper that scripts/zookeeper.sh starts).
    #[arg(long, default_value = "single")]
    membership: String,
    /// First schedule's seed; schedules run with seed, seed+1, ...
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 3)]
    schedules: u64,
    /// Fault classes to draw from, comma-separated, or all: isolate, split, bridge, one-way, loss,
    /// blackhole, manager, pause, kill, kill-all, flip, recover (a node killed, then recovering while
    /// another fault holds) (manager and flip need DDP's manager;
    /// Kite and ZAB are crash-stop here: no kill-all or recover, and at most two kills a schedule).
    /// Pandora takes isolate, split, one-way, loss, blackhole, manager, manager-cut (the membership
    /// cut from one memory server), manager-loss, suspect, pause, kill, kill-all (every compute
    /// server), recover, delay, slow, reset (a compute server's streams to a memory server reset),
    /// and with --membership zookeeper zk-cut (ZooKeeper cut from a replica).
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
    /// Test-only planted bug for every node (DDP: `tandem node --inject-bug`; Kite: a `--mutant`;
    /// Pandora: the membership's `--inject-bug`, e.g. publish-before-recovery),
    /// to show the nemesis catches it.
    #[arg(long = "inject-bug", hide = true)]
    bugs: Vec<String>,
}

pub fn run(a: NemesisArgs) -> Result<(), String> {
    let (runs, bound) = match a.system.as_str() {
        "ddp" | "heal" => run_ddp(&a)?,
        "kite" | "zab" => run_kite(&a)?,
        "pandora" => run_pandora(&a)?,
        s => {
            return Err(format!(
                "--system {s}: one of pandora, ddp, heal, kite, zab"
            ))
        }
    };
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&runs).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    summary(&runs, bound)
}

fn header(a: &NemesisArgs, what: &str, dir: &std::path::Path) {
    println!(
        "nemesis: {} schedules of {} faults ({} ms each) on {what}, seed {}; logs in {}",
        a.schedules,
        a.faults_per_schedule,
        a.fault_ms,
        a.seed,
        dir.display()
    );
}

fn run_ddp(a: &NemesisArgs) -> Result<(Vec<ScheduleRun>, Duration), String> {
    let cfg = config(a)?;
    prepare()?;
    let what = match cfg.heal {
        true => format!(
            "DDP {} recovering with HEAL (5 nodes, a manager)",
            cfg.model
        ),
        false => format!("DDP {} (5 nodes, a manager)", cfg.model),
    };
    header(a, &what, &cfg.dir);
    Ok((nemesis::run(&cfg, print_run), RECOVERY_BOUND))
}

fn run_kite(a: &NemesisArgs) -> Result<(Vec<ScheduleRun>, Duration), String> {
    use tandem_kite_lab::nemesis::{KiteNemesis, RECOVERY_BOUND, SHAPE};
    if a.bugs.len() > 1 {
        return Err("--inject-bug: Kite's nodes take one mutant".into());
    }
    let cfg = KiteNemesis {
        exe: std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?,
        zab: a.system == "zab",
        seed: a.seed,
        schedules: a.schedules,
        classes: schedule::parse_classes(&a.faults, SHAPE)?,
        faults: a.faults_per_schedule,
        fault_time: Duration::from_millis(a.fault_ms),
        dir: std::path::absolute(&a.out).map_err(|e| e.to_string())?,
        mutant: a.bugs.first().cloned(),
    };
    check_counts(a)?;
    prepare()?;
    let what = match cfg.zab {
        true => "the ZAB baseline (5 nodes, leader 0)",
        false => "Kite (5 nodes, crash-stop)",
    };
    header(a, what, &cfg.dir);
    Ok((cfg.run(print_run), RECOVERY_BOUND))
}

fn run_pandora(a: &NemesisArgs) -> Result<(Vec<ScheduleRun>, Duration), String> {
    use tandem_pandora_lab::nemesis::{self as pandora, cluster::Membership, NemesisConfig};
    let membership = match a.membership.as_str() {
        "single" => Membership::Single,
        "zookeeper" => Membership::Replicated {
            repo: std::path::absolute(".").map_err(|e| e.to_string())?,
        },
        m => return Err(format!("--membership {m}: single or zookeeper")),
    };
    let replicated = matches!(membership, Membership::Replicated { .. });
    if replicated && !std::path::Path::new("scripts/zookeeper.sh").exists() {
        return Err(
            "--membership zookeeper runs scripts/zookeeper.sh: run it from a Tandem checkout"
                .into(),
        );
    }
    let cfg = NemesisConfig {
        exe: std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?,
        seed: a.seed,
        schedules: a.schedules,
        classes: pandora::parse_classes(&a.faults, replicated)?,
        faults: a.faults_per_schedule,
        fault_time: Duration::from_millis(a.fault_ms),
        dir: std::path::absolute(&a.out).map_err(|e| e.to_string())?,
        bugs: a.bugs.clone(),
        membership,
    };
    check_counts(a)?;
    if let Membership::Replicated { repo } = &cfg.membership {
        // Installing needs the host's network: before the namespace.
        let dir = std::env::temp_dir();
        tandem_pandora_lab::nemesis::cluster::zookeeper_sh(repo, &dir, "install")?;
    }
    prepare()?;
    let what = match replicated {
        true => "Pandora (3 compute servers, 3 memory servers, 3 membership replicas over ZooKeeper; micro, 200 keys)",
        false => "Pandora (3 compute servers, 3 memory servers, the membership; micro, 200 keys)",
    };
    header(a, what, &cfg.dir);
    Ok((pandora::run(&cfg, print_run), cfg.bound()))
}

fn config(a: &NemesisArgs) -> Result<NemesisConfig, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut classes = schedule::parse_classes(&a.faults, SHAPE)?;
    if a.faults == "all" {
        // `all` means every class the model can take.
        let model = tandem_ddp::Model::parse(&a.model)?;
        classes.retain(|c| nemesis::verdict::refuses(model, c).is_none());
    }
    let cfg = NemesisConfig {
        exe,
        model: a.model.clone(),
        seed: a.seed,
        schedules: a.schedules,
        classes,
        faults: a.faults_per_schedule,
        fault_time: Duration::from_millis(a.fault_ms),
        dir: std::path::absolute(&a.out).map_err(|e| e.to_string())?,
        bugs: a.bugs.clone(),
        heal: a.system == "heal",
    };
    cfg.validate()?;
    Ok(cfg)
}

fn check_counts(a: &NemesisArgs) -> Result<(), String> {
    if a.schedules == 0 || a.faults_per_schedule == 0 {
        return Err("--schedules and --faults-per-schedule must be at least 1".into());
    }
    Ok(())
}

/// The tools (installed through the checkout's script when it is here),
/// then this thread into a network namespace of its own.
pub(crate) fn prepare() -> Result<(), String> {
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
            "            {:<34} back {:>5} ms after the heal, all serving {:>5} ms",
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

fn summary(runs: &[ScheduleRun], bound: Duration) -> Result<(), String> {
    let bad = runs.iter().filter(|r| !r.violations.is_empty()).count();
    println!(
        "{} schedules, {} failed (safety: the model's checker; liveness: back within {} ms of each heal)",
        runs.len(),
        bad,
        bound.as_millis()
    );
    match bad {
        0 => Ok(()),
        n => Err(format!("{n} of {} schedules failed", runs.len())),
    }
}
