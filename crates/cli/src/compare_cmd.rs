//! `tandem compare`: Tandem against PostgreSQL, Redis and etcd on the same
//! workload (the servers come from `scripts/peers.sh start`).

use std::time::Duration;

use clap::Args;
use tandem_peers::compare::{compare, parse_systems, render, CompareConfig};
use tandem_peers::system::Endpoints;
use tandem_peers::workload::PeerWorkload;
use tandem_workloads::micro::MicroSpec;
use tandem_workloads::smallbank::SmallBankSpec;

use crate::args::write_json;

#[derive(Args)]
pub struct CompareArgs {
    /// smallbank or micro.
    #[arg(long, default_value = "smallbank")]
    workload: String,
    /// Systems to run, comma-separated, in order: tandem, postgres, redis, etcd.
    #[arg(long, default_value = "tandem,postgres,redis,etcd")]
    systems: String,
    /// Concurrent clients per system (Tandem: coordinators over two compute threads).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Measured seconds per system.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds before each system's measurement.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// smallbank: accounts (hot set 4 %, default 100 000); micro: keys (default 100 000).
    #[arg(long)]
    accounts: Option<u64>,
    /// micro: fraction of accessed objects written.
    #[arg(long, default_value_t = 0.5)]
    write_ratio: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<String>,
    /// Also write a bar figure next to this RESULTS.md (figures/compare-WORKLOAD.{svg,png})
    /// and the ratio table as its `compare-WORKLOAD` section.
    #[arg(long)]
    markdown: Option<std::path::PathBuf>,
}

pub fn run(a: CompareArgs) -> Result<(), String> {
    let workload = match a.workload.as_str() {
        "smallbank" => {
            let s = a.accounts.map(SmallBankSpec::scaled).unwrap_or_default();
            s.validate()?;
            PeerWorkload::SmallBank(s)
        }
        "micro" => {
            let m = MicroSpec { keys: a.accounts.unwrap_or(MicroSpec::default().keys), write_ratio: a.write_ratio, ..MicroSpec::default() };
            m.validate()?;
            PeerWorkload::Micro(m)
        }
        other => return Err(format!("unknown workload '{other}' (expected smallbank or micro)")),
    };
    for (v, what) in [(a.duration, "duration"), (a.warmup, "warmup")] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("--{what} must be a non-negative number of seconds"));
        }
    }
    let cfg = CompareConfig {
        workload,
        systems: parse_systems(&a.systems)?,
        clients: a.clients,
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(a.duration),
        seed: a.seed,
        tandem_exe: std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))?,
        endpoints: Endpoints::from_env()?,
        progress: true,
    };
    let c = compare(&cfg)?;
    print!("{}", render(&c));
    if let Some(path) = &a.json {
        write_json(path, &c)?;
        eprintln!("wrote {path}");
    }
    if let Some(md) = &a.markdown {
        let name = format!("compare-{}", c.workload);
        let dir = md.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        let bars: Vec<(String, f64)> = c.systems.iter().map(|r| (r.system.clone(), r.throughput_tps)).collect();
        let svg = tandem_bench::plot::bars_svg(&format!("{}: committed tx/s, {} clients each, same keys and mix", c.workload, c.clients), "committed tx/s", &bars);
        tandem_bench::plot::write_figure(&dir.join("figures").join(&name), &svg)?;
        let cmd = std::env::args().skip(1).filter(|x| !x.starts_with("--markdown") && !x.ends_with(".md")).collect::<Vec<_>>().join(" ");
        let section = format!("### {name}\n\n`tandem {cmd}`\n\n![{name}](figures/{name}.png)\n\n```\n{}```\n", render(&c));
        crate::experiment_cmd::update_section(md, &name, &section)?;
        eprintln!("wrote {} and its section of {}", dir.join("figures").join(&name).display(), md.display());
    }
    if !c.passed() {
        return Err("a system failed its consistency check or hit errors (see above)".into());
    }
    Ok(())
}
