//! `tandem heal`: recoveries of a crashed replica, HEAL against the full copy.

use clap::{Args, Subcommand};
use tandem_ddp::Model;
use tandem_ddp_lab::heal::{RecoverConfig, RecoverReport, Scheme};

use crate::args::write_json;

#[derive(Args)]
pub struct HealArgs {
    #[command(subcommand)]
    command: HealCommand,
}

#[derive(Subcommand)]
enum HealCommand {
    /// Crash one of five nodes under load, keep serving for the downtime, restart it and time its catch-up.
    Recover(RecoverArgs),
}

#[derive(Args)]
pub struct RecoverArgs {
    /// A Lin model for HEAL (lin-strict, lin-synch, lin-re, lin-eventual, lin-scope); the full copy takes any INV-family model.
    #[arg(long, default_value = "lin-synch")]
    model: String,
    /// heal, full-copy (from one member, the paper's State-of-the-art), leader (the leader-based store,
    /// HEAL §II-C), both (heal and full-copy) or all (default: both; heal with --net tcp).
    #[arg(long)]
    scheme: Option<String>,
    /// Records in the store (every node holds all of them).
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// How long the node stays away, in seconds (default: 0.005 simulated; 5 with --net tcp).
    #[arg(long)]
    downtime_s: Option<f64>,
    /// With --net tcp: writes per second from 8 client threads, before, during and after the downtime.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Closed-loop clients per node (5 nodes).
    #[arg(long, default_value_t = 20)]
    clients: u64,
    /// The leader-based scheme without some of its costs (the paper's Fig. 9): any of
    /// dedup (no redundant copies), dram (no NVM log scan), shadow (the follower takes writes while it syncs).
    #[arg(long, value_delimiter = ',')]
    leader_without: Vec<String>,
    /// Every update during the downtime is a new buffer entry (the paper's "modeled 256 GB").
    #[arg(long)]
    distinct: bool,
    /// HEAL's NoShadow ablation: the restarted node takes no writes until it has chased its Buddy's
    /// buffer down in rounds; only the last round runs with it as a shadow replica.
    #[arg(long)]
    no_shadow: bool,
    /// Stop once the node serves again: the recovery time alone, without the horizon after it and
    /// the failure-free run that the throughput loss needs (large stores).
    #[arg(long)]
    recovery_only: bool,
    /// sim (simulated time), or tcp: five `tandem node --recovery heal` processes and a manager on
    /// loopback, node 2 killed with -9 and restarted from its NVM file, wall-clock times (HEAL only).
    #[arg(long, default_value = "sim")]
    net: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: Option<String>,
}

pub fn run(a: HealArgs) -> Result<(), String> {
    match a.command {
        HealCommand::Recover(r) => recover(r),
    }
}

fn recover(a: RecoverArgs) -> Result<(), String> {
    let model = Model::parse(&a.model)?;
    match a.net.as_str() {
        "sim" => {}
        "tcp" if a.distinct || a.no_shadow || a.recovery_only || !a.leader_without.is_empty() => return Err("--distinct, --no-shadow, --recovery-only and --leader-without are for simulated runs: use them with --net sim".into()),
        "tcp" => return crate::heal_tcp::recover(a.scheme.as_deref().unwrap_or("heal"), model, a.records, a.downtime_s.unwrap_or(5.0), a.rate, a.json.as_deref()),
        other => return Err(format!("--net {other}: sim or tcp")),
    }
    let downtime_s = a.downtime_s.unwrap_or(0.005);
    if !(downtime_s > 0.0 && downtime_s <= 10.0) {
        return Err(format!("--downtime-s {downtime_s}: expected a positive number of simulated seconds, at most 10"));
    }
    let mut reports = Vec::new();
    for scheme in Scheme::parse(a.scheme.as_deref().unwrap_or("both"))? {
        let mut cfg = RecoverConfig::new(model, scheme, a.records);
        (
            cfg.downtime_ns,
            cfg.clients_per_node,
            cfg.distinct,
            cfg.no_shadow,
            cfg.recovery_only,
            cfg.seed,
        ) = (
            (downtime_s * 1e9) as u64,
            a.clients,
            a.distinct,
            a.no_shadow,
            a.recovery_only,
            a.seed,
        );
        for w in &a.leader_without {
            match w.as_str() {
                "dedup" => cfg.leader.dedup = true,
                "dram" => cfg.leader.dram = true,
                "shadow" => cfg.leader.shadow = true,
                other => {
                    return Err(format!(
                        "--leader-without {other}: expected dedup, dram or shadow"
                    ))
                }
            }
        }
        eprintln!(
            "  {}: {} records, node 2 away for {} ms (simulated)...",
            scheme.name(),
            a.records,
            downtime_s * 1e3
        );
        let r = tandem_ddp_lab::heal::recover::run(&cfg)?;
        print_report(&r);
        reports.push(r);
    }
    if let Some(h) = reports.iter().find(|r| r.scheme == "heal") {
        for o in reports.iter().filter(|r| r.scheme != "heal") {
            let faster = o.recovery_us / h.recovery_us.max(1e-3);
            match a.recovery_only {
                true => println!("HEAL recovers {faster:.1}x faster than {}", o.scheme),
                false => println!(
                    "HEAL recovers {faster:.1}x faster than {} and loses {:.2} of its throughput loss",
                    o.scheme,
                    h.throughput_lost / o.throughput_lost.max(1e-9)
                ),
            }
        }
    }
    if let Some(p) = &a.json {
        write_json(p, &serde_json::json!({ "system": "heal", "runs": reports }))?;
    }
    Ok(())
}

fn print_report(r: &RecoverReport) {
    println!(
        "{} {}: crash at {:.2} ms, rejoined at {:.2} ms, online at {:.3} ms (simulated)",
        r.model, r.scheme, r.crash_ms, r.rejoin_ms, r.online_ms
    );
    println!("  recovery {:.1} us", r.recovery_us);
    if r.scheme == "heal" && !r.fell_back_to_full_copy {
        println!(
            "    Start_to_ACK {:.1} us, CatchUp_to_Resp {:.1} us, Apply_to_end {:.1} us",
            r.start_to_ack_us, r.catchup_to_resp_us, r.apply_to_end_us
        );
        println!("    MissedUpdates: {} entries shipped in {} round(s) (largest buffer {}), Partially_persisted: {}", r.missed_entries, r.rounds, r.missed_peak, r.partial_entries);
    }
    if let Some(l) = &r.leader {
        println!("    leader's log scan: {} entries from zxid {} ({} distinct keys, {} redundant) in {:.1} us", l.scanned, l.from_zxid, l.distinct_keys, l.scanned - l.distinct_keys, l.scan_ns as f64 / 1e3);
        println!("    then {} round(s) for the {} writes committed meanwhile; {} entries shipped; in sync {:.1} us after asking", l.rounds, l.buffered, l.shipped, (l.joined_ns - l.asked_ns) as f64 / 1e3);
    }
    if r.fell_back_to_full_copy {
        println!("    (fell back to the full copy)");
    }
    if r.throughput_lost.is_nan() {
        return println!("  (recovery only: no failure-free run, no throughput loss)");
    }
    println!(
        "  throughput lost against the failure-free run over {:.1} ms: {:.2} % ({} vs {} ops)",
        r.horizon_ms,
        100.0 * r.throughput_lost,
        r.ops,
        r.baseline_ops
    );
    let step = r.throughput.len().div_ceil(40).max(1);
    let line: Vec<String> = r
        .throughput
        .iter()
        .step_by(step)
        .map(|(_, x)| format!("{:.1}", x / 1e6))
        .collect();
    let every = r.throughput.get(step).map_or(0.0, |w| w.0);
    println!("  M ops/s every {every:.2} ms: {}", line.join(" "));
}
