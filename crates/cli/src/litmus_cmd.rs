//! `tandem dart`: DART's litmus tests against a store (docs/DESIGN.md §5,
//! Pandora §5, thesis ch. 5). Thin: flags in, `tandem_dart::campaign`
//! does the work; every violation prints the command that replays it.

use std::time::Duration;

use clap::Args;
use tandem_dart::campaign::{self, CampaignConfig, CampaignReport, FabricKind, StoreKind};
use tandem_dart::history::write_json_lines;
use tandem_dart::pg_store::Isolation;
use tandem_dart::proc_run::ProcSetup;
use tandem_dkvs::Mode;

use crate::args::write_json;

#[derive(Args)]
pub struct LitmusArgs {
    /// pandora, ford, traditional or postgres.
    #[arg(long, default_value = "pandora")]
    store: String,
    /// sim (seeded, with crash injection), tcp (memory-server processes) or shm (memory-server
    /// processes whose regions the compute side maps); Tandem stores only.
    #[arg(long, default_value = "sim")]
    fabric: String,
    /// PostgreSQL isolation level: serializable, repeatable-read or read-committed.
    #[arg(long, default_value = "serializable")]
    isolation: String,
    /// mix (each run either every test, or one test on one hot instance), all, 1, 2, 3, ext,
    /// or test names (comma-separated).
    #[arg(long, default_value = "mix")]
    tests: String,
    /// Instances of each test's objects (mix: of its broad runs).
    #[arg(long, default_value_t = 2)]
    instances: u32,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Number of runs (seeds). Default 20 unless --duration is given.
    #[arg(long)]
    seeds: Option<u64>,
    /// Run for this many seconds (with --seeds: whichever ends first).
    #[arg(long)]
    duration: Option<f64>,
    /// Fraction of runs that crash compute nodes (default 0.8 on sim): simulated runs at verb
    /// boundaries (weighted: 1-3 crashes, each followed by a replacement node); with --fabric
    /// tcp (pandora), every compute node is a process and one gets kill -9.
    #[arg(long)]
    crash_rate: Option<f64>,
    /// With --fabric tcp or shm (pandora): fraction of runs that also kill -9 one memory-server
    /// process mid-run; its replacement is filled and admitted before the final check.
    #[arg(long, default_value_t = 0.0)]
    memory_kill_rate: f64,
    /// Simulated crash points: weighted (toward the protocol's windows: between the replica
    /// writes of a commit, before unlocks, after logging, inside log recovery, around the
    /// publication of failed ids) or uniform (after any verb).
    #[arg(long, default_value = "weighted")]
    crash_points: String,
    /// Slow every simulated recovery coordinator by this many ns per doorbell, so live
    /// coordinators meet the failed node's locks while recovery is under way.
    #[arg(long)]
    slow_recovery_ns: Option<u64>,
    /// Skip the replica check (fail each memory node in turn and re-read every key; over
    /// processes also kill -9 one memory server and re-read every key from the survivors).
    #[arg(long)]
    no_replica_check: bool,
    /// Simulated pandora runs: abort or stall on locks of other coordinators (default: a
    /// quarter of the runs stall).
    #[arg(long)]
    on_stray: Option<String>,
    /// Re-inject a bug (complicit-abort, covert-locks, relaxed-locks, missing-insert-undo,
    /// logging-without-locking, lock-lease, or a recovery bug: lost-decision, trust-undo-images,
    /// always-roll-back, skip-log-recovery, restore-one-replica, invalidate-logs-first, or a
    /// deployment bug: publish-before-recovery); repeatable. Over processes the recovery bugs
    /// and publish-before-recovery are injected into the membership process.
    #[arg(long)]
    inject_bug: Vec<String>,
    /// Write the history (JSON lines) of the first violating run, else of the first run.
    #[arg(long)]
    history: Option<String>,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<String>,
    /// PostgreSQL connection URL (`bash scripts/postgres.sh start` serves the default).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:25329/postgres")]
    postgres: String,
    #[arg(long, default_value_t = 2)]
    compute_nodes: u16,
    /// Clients (coordinators; PostgreSQL connections) per compute node.
    #[arg(long, default_value_t = 4)]
    clients: u16,
    /// Transactions per client per run.
    #[arg(long, default_value_t = 60)]
    txs: u64,
    /// Probability that a transaction is an assert.
    #[arg(long, default_value_t = 0.2)]
    assert_chance: f64,
    /// Skip the history checker (assertions only).
    #[arg(long)]
    no_history_check: bool,
    /// Worker threads for simulated runs (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Stop at the first violating run.
    #[arg(long)]
    stop_at_first: bool,
    /// --fabric tcp (pandora): network faults on the litmus workers while they run, each held
    /// --fault-ms: isolate, manager-cut (a worker cut from the membership only), loss, pause,
    /// suspect, or all (comma-separated). Needs root: the run gets a network namespace of its
    /// own, and each worker an address.
    #[arg(long)]
    net_faults: Option<String>,
    /// How long each network fault holds, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    fault_ms: u64,
    /// --fabric tcp or shm with --crash-rate: the membership's heartbeat timeout in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    detect_ms: f64,
}

pub fn run(a: LitmusArgs) -> Result<(), String> {
    let (fabric, shm) = match a.fabric.as_str() {
        "sim" => (FabricKind::Sim, false),
        "tcp" => (FabricKind::Tcp, false),
        "shm" => (FabricKind::Tcp, true),
        o => return Err(format!("unknown --fabric '{o}' (expected sim, tcp or shm)")),
    };
    let isolation: Isolation = a.isolation.parse()?;
    let store = match a.store.as_str() {
        "postgres" => StoreKind::Postgres {
            url: a.postgres.clone(),
            isolation,
        },
        m => StoreKind::Tandem(m.parse().map_err(|e: String| format!("{e}, or postgres"))?),
    };
    let tandem_sim = matches!(store, StoreKind::Tandem(_)) && fabric == FabricKind::Sim;
    check_fault_flags(&a, &store, fabric, tandem_sim)?;
    let mut cfg = campaign_config(&a, &store, fabric, shm, tandem_sim)?;
    if let StoreKind::Postgres { url, .. } = &store {
        // Fail fast, with the fix in the message.
        tandem_dart::pg_store::connect(url)?;
    }
    if fabric == FabricKind::Tcp {
        if !matches!(store, StoreKind::Tandem(_)) {
            return Err("--fabric tcp and shm apply to Tandem stores".into());
        }
        over_processes(&a, &mut cfg, shm)?;
    }
    if a.net_faults.is_some() {
        crate::nemesis_cmd::prepare()?;
    }
    let rep = campaign::run(&cfg)?;
    print_campaign(&rep);
    if let Some(path) = &a.history {
        write_history(path, &rep)?;
    }
    if let Some(path) = &a.json {
        write_json(path, &rep)?;
    }
    Ok(())
}

/// The crash, memory-kill, bug and duration flags fit the store and fabric.
fn check_fault_flags(
    a: &LitmusArgs,
    store: &StoreKind,
    fabric: FabricKind,
    tandem_sim: bool,
) -> Result<(), String> {
    if let Some(r) = a.crash_rate {
        if !(0.0..=1.0).contains(&r) {
            return Err("--crash-rate must be in [0, 1]".into());
        }
        let pandora_tcp =
            matches!(store, StoreKind::Tandem(Mode::Pandora)) && fabric == FabricKind::Tcp;
        if r > 0.0 && !tandem_sim && !pandora_tcp {
            return Err("--crash-rate needs a Tandem store on --fabric sim, or pandora on --fabric tcp or shm (kill -9 of compute-server processes; PostgreSQL crashes are not injected)".into());
        }
    }
    if !(0.0..=1.0).contains(&a.memory_kill_rate) {
        return Err("--memory-kill-rate must be in [0, 1]".into());
    }
    if a.memory_kill_rate > 0.0
        && !(matches!(store, StoreKind::Tandem(Mode::Pandora)) && fabric == FabricKind::Tcp)
    {
        return Err(
            "--memory-kill-rate needs --store pandora --fabric tcp or shm (memory-server processes)"
                .into(),
        );
    }
    if !a.inject_bug.is_empty() && !matches!(store, StoreKind::Tandem(_)) {
        return Err("--inject-bug applies to Tandem stores only".into());
    }
    if a.duration.is_some_and(|d| !(d > 0.0)) {
        return Err("--duration must be positive".into());
    }
    Ok(())
}

/// The campaign the flags describe (without the processes of `--fabric tcp`).
fn campaign_config(
    a: &LitmusArgs,
    store: &StoreKind,
    fabric: FabricKind,
    shm: bool,
    tandem_sim: bool,
) -> Result<CampaignConfig, String> {
    let mut cfg = CampaignConfig::new(store.clone());
    cfg.fabric = fabric;
    cfg.shm = shm;
    cfg.tests = a.tests.clone();
    cfg.instances = a.instances;
    cfg.first_seed = a.seed;
    cfg.duration = a.duration.map(Duration::from_secs_f64);
    cfg.seeds = match (a.seeds, a.duration) {
        (Some(n), _) => Some(n.max(1)),
        (None, Some(_)) => None,
        (None, None) => Some(20),
    };
    cfg.crash_rate = a.crash_rate.unwrap_or(if tandem_sim {
        campaign::DEFAULT_CRASH_RATE
    } else {
        0.0
    });
    cfg.memory_kill_rate = a.memory_kill_rate;
    cfg.crash_points = a.crash_points.parse()?;
    cfg.slow_recovery_ns = a.slow_recovery_ns;
    cfg.replica_check = !a.no_replica_check;
    cfg.on_stray = match a.on_stray.as_deref() {
        None => None,
        Some("abort") => Some(tandem_dkvs::OnStray::Abort),
        Some("stall") => Some(campaign::STALL),
        Some(o) => {
            return Err(format!(
                "unknown --on-stray '{o}' (expected abort or stall)"
            ))
        }
    };
    cfg.bug_names = a.inject_bug.clone();
    cfg.compute_nodes = a.compute_nodes.max(1);
    cfg.clients_per_node = a.clients.max(1);
    cfg.txs_per_client = a.txs.max(1);
    cfg.assert_chance = a.assert_chance.clamp(0.0, 1.0);
    cfg.check_history = !a.no_history_check;
    cfg.jobs = a.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    cfg.progress = Some(Duration::from_secs(2));
    cfg.stop_at_first = a.stop_at_first;
    Ok(cfg)
}

/// `--fabric tcp` or `shm`: memory-server processes for every run, and
/// with crashes or memory kills, every compute node a process too.
fn over_processes(a: &LitmusArgs, cfg: &mut CampaignConfig, shm: bool) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))?;
    let net_faults = net_faults(a, cfg, shm)?;
    if cfg.crash_rate > 0.0 || cfg.memory_kill_rate > 0.0 || net_faults.is_some() {
        // Every compute node a `tandem litmus-worker` process; a kill -9 on the runs the seed picks.
        // Recovery bugs and publish-before-recovery go to the membership
        // process, which runs log recovery and publishes failed ids.
        cfg.procs = Some(ProcSetup {
            exe: exe.clone(),
            detect_ms: a.detect_ms,
            shm,
            net_faults,
        });
    }
    cfg.tcp = Some(std::sync::Arc::new(move |count, bytes| {
        let secret = tandem_fabric::auth::MasterSecret::generate();
        let servers =
            tandem_cluster::backend::MemoryServers::spawn_on(&exe, count, bytes, secret, shm)
                .map_err(|e| format!("cannot start memory servers: {e}"))?;
        // Interleave coordinators at verb boundaries on shm too.
        let cluster = servers.cluster().yielding(true);
        Ok((cluster, Box::new(servers) as Box<dyn std::any::Any>))
    }));
    Ok(())
}

/// `--net-faults`: only for pandora's workers over TCP (on shm their verbs
/// never cross a network).
fn net_faults(
    a: &LitmusArgs,
    cfg: &CampaignConfig,
    shm: bool,
) -> Result<Option<tandem_dart::net_faults::NetFaults>, String> {
    let Some(list) = &a.net_faults else {
        return Ok(None);
    };
    if shm || !matches!(cfg.store, StoreKind::Tandem(Mode::Pandora)) {
        return Err("--net-faults needs --store pandora --fabric tcp (on shm the workers' verbs never cross a network)".into());
    }
    tandem_dart::net_faults::NetFaults::parse(list, a.fault_ms).map(Some)
}

/// Every violation with its replay command, then the campaign's summary line.
fn print_campaign(rep: &CampaignReport) {
    for v in &rep.violations {
        println!(
            "VIOLATION [{}] seed {}: {}\n  replay: {}",
            v.test, v.seed, v.description, v.replay
        );
    }
    println!(
        "litmus {} ({}{}): {} runs, {} transactions ({} committed, {} aborted, {} unknown), {} asserts checked, {} crashes, {} violations, {:.0} tx/s checked",
        rep.store,
        rep.fabric,
        rep.isolation.as_ref().map(|i| format!(", {i}")).unwrap_or_default(),
        rep.runs,
        rep.transactions,
        rep.committed,
        rep.aborted,
        rep.unknown,
        rep.asserts_checked,
        rep.crashes,
        rep.violation_count,
        rep.transactions_per_s
    );
}

/// Write the first violating run's history, else the first run's, as JSON lines.
fn write_history(path: &str, rep: &CampaignReport) -> Result<(), String> {
    let h = rep
        .first_violating_history
        .as_ref()
        .or(rep.first_history.as_ref())
        .cloned()
        .unwrap_or_default();
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).map_err(|e| format!("cannot write {path}: {e}"))?,
    );
    write_json_lines(&mut f, &h).map_err(|e| format!("cannot write {path}: {e}"))
}
