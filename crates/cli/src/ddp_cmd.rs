//! `tandem ddp ...`: the DDP models (*Distributed Data Persistency*, MICRO
//! 2021) in seeded simulation.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde::Serialize;
use tandem_ddp::simcheck::{self, CheckConfig, Crash};
use tandem_ddp::{Bugs, HealOpts, Model};

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
    /// Every interleaving of a small script on the engine's own step functions (3 nodes, one fault).
    Explore(ExploreArgs),
    /// Throughput of the models in simulated time (YCSB), normalized to lin-synch from the same run.
    Bench(BenchArgs),
    /// The configuration manager of a `tandem node` deployment (heartbeats, leases, epochs).
    Manager(crate::node_cmd::ManagerArgs),
    /// Closed-loop client sessions against `tandem node` processes, recording a history.
    Load(crate::node_cmd::LoadArgs),
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
    /// none, one (a node crashes and rejoins), all (whole-cluster crash), buddy (a second member crashes
    /// while the first recovers), again (the recovering node crashes again), two (a second node crashes
    /// while the first is away), suspect (a slow node is removed while alive, then added back), isolated
    /// (the same, cut off instead of slow), suspect-spread (suspect, with the manager's announcements
    /// reaching nodes at different times), bounce (a node restarted within its lease), copy-source
    /// (an origin's updates reach one member only, the origin crashes, a restarting node copies from
    /// that member, which crashes right after), flip (a node removed while cut off is re-added while
    /// still cut off from its copy sources, which the manager hears no more), bridge (two pairs cut
    /// off from each other, both reaching the fifth node, nobody removed), one-way (one direction of
    /// a link cut for many timeouts while clients give up on slow replies and move; throughput must
    /// come back), all-but-one (a whole-cluster crash recovered without one node, which the manager
    /// had removed; it is added back later), mix (none, one, all),
    /// recovery (one, buddy, again, two, copy-source) or membership (suspect, isolated,
    /// suspect-spread, bounce, flip).
    #[arg(long, default_value = "mix")]
    crash: String,
    /// How a restarted node catches up: full-copy, heal (HEAL: the Lin models), or heal-no-shadow
    /// (HEAL's ablation without the shadow replica: it chases its Buddy in rounds, then hands over).
    #[arg(long, default_value = "full-copy")]
    recovery: String,
    /// Test-only protocol bug, by name (docs/DDP.md lists them; an unknown name is refused with
    /// the list of known ones).
    #[arg(long = "inject-bug")]
    bugs: Vec<String>,
    /// The engine's handler assertions: stop at the first broken invariant, naming it. Default: on,
    /// unless --inject-bug plants a bug (then the run shows what the checkers find on their own).
    #[arg(long)]
    assertions: Option<bool>,
    /// A reliable network: no drops, duplicates or extra delays.
    #[arg(long)]
    no_net_faults: bool,
    /// Sessions reach the nodes under ids spread over all 64 bits, as the RESP front end draws them.
    #[arg(long)]
    wide_sessions: bool,
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
    /// Transactional consistency: committed (answered), squashed, committed but unanswered.
    #[serde(skip_serializing_if = "Option::is_none")]
    transactions: Option<[u64; 4]>,
    /// HEAL: recoveries that ran HEAL's steps, and that fell back to a full copy.
    heal_recoveries: u64,
    heal_fallbacks: u64,
    /// The `CatchUp_req` rounds of those recoveries.
    heal_rounds: u64,
    /// Crashes (buddy, again) that hit a node still recovering.
    mid_recovery_crashes: u64,
    /// Causal: operations answered PastLost (their past died with two crashed nodes).
    pasts_lost: u64,
}

pub fn run(a: DdpArgs) -> Result<(), String> {
    match a.command {
        DdpCommand::Check(c) => check(c),
        DdpCommand::Bench(b) => bench(b),
        DdpCommand::Explore(e) => explore(e),
        DdpCommand::Manager(m) => crate::node_cmd::manager(m),
        DdpCommand::Load(l) => crate::node_cmd::load(l),
    }
}

fn crashes(name: &str) -> Result<Vec<Crash>, String> {
    match name {
        "mix" => Ok(vec![Crash::None, Crash::One, Crash::All]),
        "recovery" => Ok(vec![
            Crash::One,
            Crash::Buddy,
            Crash::Again,
            Crash::Two,
            Crash::CopySource,
        ]),
        "membership" => Ok(vec![
            Crash::Suspect,
            Crash::Isolated,
            Crash::SuspectSpread,
            Crash::Bounce,
            Crash::Flip,
        ]),
        _ => {
            Ok(vec![Crash::parse(name).map_err(|e| {
                format!("{e}, mix, recovery or membership")
            })?])
        }
    }
}

/// `--recovery`: whether restarted nodes use HEAL (only where it is
/// implemented), or its NoShadow ablation.
fn heal_recovery(name: &str, models: &[Model]) -> Result<Option<HealOpts>, String> {
    let opts = match name {
        "full-copy" => return Ok(None),
        "heal" => HealOpts::default(),
        "heal-no-shadow" => HealOpts {
            no_shadow: true,
            ..HealOpts::default()
        },
        other => {
            return Err(format!(
                "unknown --recovery '{other}': full-copy, heal or heal-no-shadow"
            ))
        }
    };
    match models.iter().find(|m| !HealOpts::supports(**m)) {
        Some(m) => Err(format!("HEAL recovers the Lin models (lin-strict, lin-synch, lin-re, lin-eventual, lin-scope); not {m} (use --recovery full-copy)")),
        None => Ok(Some(opts)),
    }
}

fn check(a: CheckArgs) -> Result<(), String> {
    let all = a.model.trim().eq_ignore_ascii_case("all");
    let models = Model::parse_list(&a.model)?;
    let (models, skipped): (Vec<Model>, Vec<Model>) =
        models.into_iter().partition(|m| m.implemented());
    if !skipped.is_empty() {
        let names: Vec<String> = skipped.iter().map(|m| m.to_string()).collect();
        if !all {
            return Err(format!("not implemented yet: {}", names.join(", ")));
        }
        eprintln!(
            "skipping {} models not implemented yet: {}",
            names.len(),
            names.join(", ")
        );
    }
    let bugs = Bugs::parse(&a.bugs)?;
    let crashes = crashes(&a.crash)?;
    let heal = heal_recovery(&a.recovery, &models)?;
    let mut reports = Vec::new();
    let mut last = Instant::now();
    for m in models {
        let mut rep = ModelReport {
            model: m.to_string(),
            ..ModelReport::default()
        };
        for &crash in &crashes {
            for seed in a.seed..a.seed.saturating_add(a.seeds) {
                let mut cfg = CheckConfig {
                    crash,
                    bugs,
                    assertions: a.assertions.unwrap_or(bugs == Bugs::default()),
                    net_faults: !a.no_net_faults,
                    persist_ns: a.persist_ns,
                    wide_sessions: a.wide_sessions,
                    ..CheckConfig::new(m, seed)
                };
                if let Some(opts) = heal {
                    cfg = cfg.with_heal_opts(opts);
                }
                let r = simcheck::run(&cfg);
                rep.runs += 1;
                rep.completed += r.completed;
                rep.lost_acked_writes += r.lost_acked_writes;
                rep.vanished_reads += r.vanished_reads;
                (rep.heal_recoveries, rep.heal_fallbacks, rep.heal_rounds) = (
                    rep.heal_recoveries + r.heal_recoveries,
                    rep.heal_fallbacks + r.heal_fallbacks,
                    rep.heal_rounds + r.heal_rounds,
                );
                rep.mid_recovery_crashes += r.mid_recovery_crashes;
                rep.pasts_lost += r.pasts_lost;
                if m.c == tandem_ddp::Consistency::Trans {
                    let t = rep.transactions.get_or_insert([0; 4]);
                    (t[0], t[1], t[2], t[3]) = (
                        t[0] + r.tx_committed,
                        t[1] + r.tx_aborted,
                        t[2] + r.tx_unanswered_commits,
                        t[3] + r.tx_unknown,
                    );
                }
                // A replay (one seed) shows every violation; a sweep the first of each run.
                let shown = if a.seeds == 1 { r.violations.len() } else { 1 };
                for v in r.violations.iter().take(shown) {
                    rep.violations.push(format!(
                        "{v} ({} in all); replay: {}",
                        r.violations.len(),
                        r.replay
                    ));
                }
                if last.elapsed() >= Duration::from_secs(1) {
                    eprintln!(
                        "  {m} crash {} seed {seed}: {} ops, {} violations so far",
                        crash.name(),
                        rep.completed,
                        rep.violations.len()
                    );
                    last = Instant::now();
                }
            }
        }
        rep.violation_count = rep.violations.len();
        print_model(&rep);
        reports.push(rep);
    }
    if let Some(p) = &a.json {
        write_json(
            p,
            &serde_json::json!({ "system": "ddp", "models": reports }),
        )?;
    }
    let bad: usize = reports.iter().map(|r| r.violation_count).sum();
    if bad > 0 {
        return Err(format!(
            "{bad} violations (the first of each run; all of them when one seed is run)"
        ));
    }
    Ok(())
}

fn print_model(r: &ModelReport) {
    println!(
        "{:<16} {:>4} runs {:>8} ops  {:>3} violations  after whole-cluster crashes: {} acked writes lost, {} read versions vanished",
        r.model, r.runs, r.completed, r.violation_count, r.lost_acked_writes, r.vanished_reads
    );
    if let Some([done, aborted, unanswered, unknown]) = r.transactions {
        let share = 100.0 * aborted as f64 / (done + aborted).max(1) as f64;
        println!("    transactions: {done} committed, {aborted} squashed and restarted ({share:.0}% of attempts), {unknown} ends answered OutcomeUnknown, {unanswered} committed without an answer (coordinator crashed or left)");
    }
    if r.heal_recoveries + r.heal_fallbacks > 0 {
        println!("    HEAL: {} recoveries by the Buddy's catch-up ({} CatchUp_req rounds), {} by the full-copy fallback; {} crashes hit a recovery in progress", r.heal_recoveries, r.heal_rounds, r.heal_fallbacks, r.mid_recovery_crashes);
    }
    if r.pasts_lost > 0 {
        println!("    {} operations answered PastLost (their causal past died with two crashed nodes; the sessions went on without it)", r.pasts_lost);
    }
    for v in r.violations.iter().take(3) {
        println!("    {v}");
    }
}

#[derive(Args)]
pub struct BenchArgs {
    /// Models: `all` or a list; lin-synch is always measured as the baseline.
    #[arg(long, default_value = "all")]
    pub(crate) models: String,
    /// ycsb-a, ycsb-b, ycsb-c or ycsb-w (95 % writes).
    #[arg(long, default_value = "ycsb-a")]
    pub(crate) workload: String,
    /// sim (simulated time, the paper's parameters) or tcp (five `tandem node`
    /// processes on loopback, beside the runtime's echo ceiling).
    #[arg(long, default_value = "sim")]
    pub(crate) net: String,
    #[arg(long, default_value_t = 1000)]
    pub(crate) records: u64,
    /// Uniform instead of Zipfian keys.
    #[arg(long)]
    pub(crate) uniform: bool,
    /// Clients per node (5 nodes).
    #[arg(long, default_value_t = 20)]
    pub(crate) clients: u64,
    #[arg(long, default_value_t = 1000)]
    pub(crate) rtt_ns: u64,
    #[arg(long, default_value_t = 400)]
    pub(crate) persist_ns: u64,
    /// sim: worker cores per node, each taking 200 ns per input (docs/DESIGN.md §7.1's
    /// model is 1; the paper's servers have 20, see docs/DDP.md).
    #[arg(long, default_value_t = 1)]
    pub(crate) cores: usize,
    /// Zipfian exponent of the keys (default YCSB's 0.99; --uniform for none).
    #[arg(long)]
    pub(crate) theta: Option<f64>,
    /// sim: application CPU per client request, in ns, on top of the 200 ns per input.
    #[arg(long, default_value_t = 0)]
    pub(crate) app_ns: u64,
    /// sim: 64-byte NVM line writes per persist. 1 (the default): a persist
    /// is one write, 16 in flight per node. Above 1 each node's NVM is 16
    /// banks and each line takes the first free one for the persist time,
    /// so large records load the NVM (a 1 KB YCSB record is 16).
    #[arg(long, default_value_t = 1)]
    pub(crate) persist_lines: u32,
    /// Simulated time measured per model, after a 10 % warm-up.
    #[arg(long, default_value_t = 10_000_000)]
    pub(crate) measure_ns: u64,
    /// tcp: seconds measured per model and round (after a 1 s warm-up).
    #[arg(long, default_value_t = 3.0)]
    pub(crate) seconds: f64,
    /// tcp: rounds; every model runs once per round, medians are reported.
    #[arg(long, default_value_t = 1)]
    pub(crate) rounds: u32,
    /// tcp: nodes flush their NVM file to the device before a persist completes.
    #[arg(long)]
    pub(crate) fsync: bool,
    #[arg(long)]
    pub(crate) json: Option<String>,
}

fn bench(a: BenchArgs) -> Result<(), String> {
    use tandem_ddp_lab::bench::{run_models, DdpBenchConfig};
    match a.net.as_str() {
        "sim" => {}
        "tcp" => return crate::ddp_tcp_cmd::bench_tcp(&a),
        other => return Err(format!("--net {other}: expected sim or tcp")),
    }
    let mut models: Vec<Model> = Model::parse_list(&a.models)?
        .into_iter()
        .filter(|m| m.implemented())
        .collect();
    if !models.contains(&Model::LIN_SYNCH) {
        models.insert(0, Model::LIN_SYNCH);
    }
    let theta = match (a.uniform, a.theta) {
        (true, Some(_)) => return Err("--uniform and --theta: choose one".into()),
        (true, None) => None,
        (false, t) => Some(t.unwrap_or(0.99)),
    };
    let workload = tandem_ycsb::Ycsb::skewed(&a.workload, a.records, theta)?;
    let cfg = DdpBenchConfig {
        clients_per_node: a.clients.max(1),
        rtt_ns: a.rtt_ns,
        persist_ns: a.persist_ns,
        cores: a.cores.max(1),
        app_ns: a.app_ns,
        persist_lines: a.persist_lines.clamp(1, 1024),
        measure_ns: a.measure_ns.max(10_000),
        warmup_ns: a.measure_ns / 10,
        ..DdpBenchConfig::paper(workload)
    };
    println!(
        "{} on 5 nodes of {} cores, {} clients each, rtt {} ns, persist {} ns, {} records{}",
        a.workload,
        cfg.cores,
        cfg.clients_per_node,
        a.rtt_ns,
        a.persist_ns,
        a.records,
        if a.uniform { " uniform" } else { " zipfian" }
    );
    println!(
        "{:<16} {:>12} {:>8} {:>10} {:>10} {:>8} {:>14}",
        "model", "ops/s(sim)", "vs l-s", "read us", "write us", "msg/op", "sim msgs/s"
    );
    let results = run_models(&cfg, &models, |r| {
        println!(
            "{:<16} {:>12.0} {:>8.2} {:>10.2} {:>10.2} {:>8.2} {:>14.0}",
            r.model,
            r.throughput_ops,
            r.normalized.unwrap_or(f64::NAN),
            r.read_latency_us,
            r.write_latency_us,
            r.messages_per_op,
            r.sim_messages_per_s
        );
        if let Some(a) = r.tx_abort_ratio {
            println!(
                "{:<16} {:.0}% of transaction attempts squashed and restarted",
                "",
                100.0 * a
            );
        }
    });
    if let Some(p) = &a.json {
        write_json(
            p,
            &serde_json::json!({ "system": "ddp", "workload": a.workload, "net": "sim", "rtt_ns": a.rtt_ns, "persist_ns": a.persist_ns, "cores": cfg.cores, "clients_per_node": cfg.clients_per_node, "models": results }),
        )?;
    }
    Ok(())
}

#[derive(Args)]
pub struct ExploreArgs {
    /// A Lin model (the final histories are checked for linearizability).
    #[arg(long, default_value = "lin-synch")]
    model: String,
    /// loss, duplicate or crash (one of it, plus a timer firing after a loss).
    #[arg(long, default_value = "loss")]
    fault: String,
    #[arg(long = "inject-bug")]
    bugs: Vec<String>,
    /// The engine's handler assertions: stop at the first broken invariant, naming it. Default: on,
    /// unless --inject-bug plants a bug (then the run shows what the checkers find on their own).
    #[arg(long)]
    assertions: Option<bool>,
    #[arg(long, default_value_t = 5_000_000)]
    max_states: usize,
}

fn explore(a: ExploreArgs) -> Result<(), String> {
    use tandem_ddp::explore::{explore, ExploreConfig};
    let model = Model::parse(&a.model)?;
    if model.c != tandem_ddp::Consistency::Lin {
        return Err(format!(
            "{model}: the explorer checks linearizability, so it takes a lin-* model"
        ));
    }
    if !["loss", "duplicate", "crash"].contains(&a.fault.as_str()) {
        return Err(format!(
            "unknown --fault '{}': loss, duplicate or crash",
            a.fault
        ));
    }
    let mut cfg = ExploreConfig::small(model, &a.fault);
    cfg.bugs = Bugs::parse(&a.bugs)?;
    cfg.assertions = a.assertions.unwrap_or(cfg.bugs == Bugs::default());
    cfg.max_states = a.max_states;
    let started = Instant::now();
    let r = explore(&cfg);
    println!(
        "{model}, one {}: {} states, {} transitions, {} final histories, {} in {:.1}s",
        a.fault,
        r.states,
        r.transitions,
        r.final_histories,
        if r.complete {
            "exhausted"
        } else if r.violation.is_some() {
            "stopped at a violation"
        } else {
            "NOT exhausted (raise --max-states)"
        },
        started.elapsed().as_secs_f64()
    );
    match r.violation {
        Some(v) => Err(format!("violation: {v}")),
        None => Ok(()),
    }
}
