//! `tandem compare`: Tandem against PostgreSQL, Redis and etcd on the same
//! workload (the servers come from `scripts/peers.sh start`). `--system
//! pandora` (the default): Pandora transactions on SmallBank or micro;
//! `--system ddp`: DDP's node processes on YCSB against etcd and Redis with
//! replicas (`scripts/peers.sh start ddp`); `--system kite`: Kite's node
//! processes against 3-member ZooKeeper and etcd clusters it starts itself.

use std::time::Duration;

use clap::Args;
use tandem_pandora_lab::compare::{compare, parse_systems, render, CompareConfig};
use tandem_peers::system::Endpoints;
use tandem_peers::workload::PeerWorkload;
use tandem_workloads::micro::MicroSpec;
use tandem_workloads::smallbank::SmallBankSpec;

use crate::args::write_json;

#[derive(Args)]
pub struct CompareArgs {
    /// pandora (transactions vs PostgreSQL, Redis, etcd), ddp (YCSB: lin-synch vs etcd,
    /// eventual-eventual vs Redis with replicas) or kite (Kite's mix vs ZooKeeper and etcd).
    #[arg(long, default_value = "pandora")]
    system: String,
    /// pandora: smallbank (default) or micro. ddp: ycsb-a, ycsb-b or both (default).
    #[arg(long)]
    workload: Option<String>,
    /// Systems to run, comma-separated, in order. pandora: tandem-tcp, tandem-shm, postgres, redis,
    /// etcd (the default; `tandem` is tandem-tcp); kite: kite, zookeeper, etcd (the default).
    #[arg(long)]
    systems: Option<String>,
    /// Concurrent clients per system (pandora: coordinators over two compute threads;
    /// ddp: client sessions). pandora: a comma-separated sweep, e.g. 4,16,64, every system at
    /// every count, each reported at its best. Default 16.
    #[arg(long)]
    clients: Option<String>,
    /// pandora: runs of every system at every client count, alternating which system goes
    /// first; the median counts.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Measured seconds per system (default: pandora 5, ddp 3).
    #[arg(long)]
    duration: Option<f64>,
    /// Unmeasured seconds before each system's measurement.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// smallbank: accounts (hot set 4 %, default 100 000); micro: keys (default 100 000).
    #[arg(long)]
    accounts: Option<u64>,
    /// micro: fraction of accessed objects written (default 0.5). kite: share of requests that write,
    /// RMWs included (default 0.05).
    #[arg(long)]
    write_ratio: Option<f64>,
    /// kite: share of reads and writes that are acquires and releases.
    #[arg(long, default_value_t = 0.05)]
    sync_ratio: f64,
    /// kite: share of requests that are RMWs (FAA; the peers' compare-and-set).
    #[arg(long, default_value_t = 0.0)]
    rmw_ratio: f64,
    /// kite: Kite node processes (the peers have 3 members).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// ddp: YCSB records (default 1000). kite: keys, each written once before a peer's run (default 10 000).
    #[arg(long)]
    records: Option<u64>,
    /// ddp: uniform keys instead of YCSB's Zipfian (θ = 0.99), for every system.
    #[arg(long)]
    uniform: bool,
    /// ddp: the peers' value size in bytes (Tandem's load writes 8-byte values).
    #[arg(long, default_value_t = 8)]
    value_size: usize,
    /// ddp: which equal-durability pairings with etcd to run: off (etcd without WAL fsync
    /// vs Tandem's memory-mapped NVM), on (both fsync), or both (the default).
    /// kite: the peers without fsync (off, the default: Kite keeps data in memory only), with it (on), or both.
    #[arg(long)]
    fsync: Option<String>,
    /// ddp: directory for the nodes' NVM files (on a real disk, for --fsync to mean it).
    #[arg(long, default_value = "target/compare-ddp")]
    nvm_dir: std::path::PathBuf,
    /// ddp: skip the linearizability check of lin-synch's histories.
    #[arg(long)]
    no_check: bool,
    /// Write results as JSON.
    #[arg(long)]
    json: Option<String>,
    /// Also write a bar figure next to this RESULTS.md (figures/compare-WORKLOAD.{svg,png})
    /// and the ratio table as its `compare-WORKLOAD` section.
    #[arg(long)]
    markdown: Option<std::path::PathBuf>,
}

pub fn run(a: CompareArgs) -> Result<(), String> {
    check_seconds(a.duration.unwrap_or(0.0), "duration")?;
    check_seconds(a.warmup, "warmup")?;
    match a.system.as_str() {
        "pandora" => run_pandora(a),
        "ddp" => {
            let c = tandem_ddp_lab::compare::compare_ddp(&a.ddp()?)?;
            let out = Published {
                section: "compare-ddp",
                title: "DDP beside etcd and Redis",
                passed: c.passed(),
            };
            let failure =
                "a system hit errors or a lin-synch history was not linearizable (see above)";
            publish(
                &a,
                &c,
                &tandem_ddp_lab::compare::render(&c),
                |cmd| tandem_ddp_lab::compare::render_markdown(&c, cmd),
                out,
                failure,
            )
        }
        "kite" => {
            use tandem_kite_lab::compare::{compare_kite, render, render_markdown};
            let c = compare_kite(&a.kite()?)?;
            let out = Published {
                section: "compare-kite",
                title: "Kite beside ZooKeeper and etcd",
                passed: c.passed(),
            };
            publish(
                &a,
                &c,
                &render(&c),
                |cmd| render_markdown(&c, cmd),
                out,
                "a system hit errors (see above)",
            )
        }
        other => Err(format!(
            "unknown --system '{other}' (expected pandora, ddp or kite)"
        )),
    }
}

/// Where a comparison's report goes in RESULTS.md, and whether it passed.
struct Published {
    section: &'static str,
    title: &'static str,
    passed: bool,
}

/// Print `report`; write `value` as JSON (`--json`) and the section
/// `body(command)` of RESULTS.md (`--markdown`); fail with `failure` if the
/// comparison did not pass.
fn publish(
    a: &CompareArgs,
    value: &impl serde::Serialize,
    report: &str,
    body: impl Fn(&str) -> String,
    out: Published,
    failure: &str,
) -> Result<(), String> {
    print!("{report}");
    if let Some(path) = &a.json {
        write_json(path, value)?;
        eprintln!("wrote {path}");
    }
    if let Some(md) = &a.markdown {
        let cmd = std::env::args()
            .skip(1)
            .filter(|x| !x.starts_with("--markdown") && !x.ends_with(".md"))
            .collect::<Vec<_>>()
            .join(" ");
        let section = format!(
            "### {}: {}\n\n{}",
            out.section,
            out.title,
            body(&format!("tandem {cmd}"))
        );
        crate::experiment_cmd::update_section(md, out.section, &section)?;
        eprintln!("wrote the {} section of {}", out.section, md.display());
    }
    if out.passed {
        Ok(())
    } else {
        Err(failure.into())
    }
}

fn check_seconds(v: f64, what: &str) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("--{what} must be a non-negative number of seconds"))
    }
}

/// `--clients 4,16,64`: the sweep's client counts, each at least 1.
fn client_counts(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<usize>() {
            Ok(n) if n > 0 => out.push(n),
            _ => {
                return Err(format!(
                    "--clients must be at least 1 (pandora takes a comma-separated sweep); got '{part}'"
                ))
            }
        }
    }
    if out.is_empty() {
        return Err("--clients names no count".into());
    }
    Ok(out)
}

impl CompareArgs {
    /// `--clients` for the comparisons that take one count (ddp, kite).
    fn one_client_count(&self, default: usize) -> Result<usize, String> {
        match self.clients.as_deref() {
            None => Ok(default),
            Some(s) => match client_counts(s)?.as_slice() {
                [n] => Ok(*n),
                _ => Err("--system ddp and kite take one --clients count".into()),
            },
        }
    }

    fn ddp(&self) -> Result<tandem_ddp_lab::compare::DdpCompareConfig, String> {
        use tandem_ddp_lab::compare::{DdpCompareConfig, Fsync, WORKLOADS};
        if self.accounts.is_some() {
            return Err("--accounts is for --system pandora; --system ddp takes --records".into());
        }
        let workloads = match self.workload.as_deref().unwrap_or("both") {
            "both" => WORKLOADS.iter().map(|w| w.to_string()).collect(),
            w => vec![w.to_string()],
        };
        Ok(DdpCompareConfig {
            workloads,
            records: self.records.unwrap_or(1000),
            uniform: self.uniform,
            value_size: self.value_size,
            clients: self.one_client_count(16)?,
            warmup: Duration::from_secs_f64(self.warmup),
            duration: Duration::from_secs_f64(self.duration.unwrap_or(3.0)),
            fsync: Fsync::parse(self.fsync.as_deref().unwrap_or("both"))?,
            seed: self.seed,
            tandem_exe: std::env::current_exe()
                .map_err(|e| format!("cannot find the tandem binary: {e}"))?,
            nvm_dir: self.nvm_dir.clone(),
            endpoints: Endpoints::from_env()?,
            check: !self.no_check,
            progress: true,
        })
    }
}

impl CompareArgs {
    fn kite(&self) -> Result<tandem_kite_lab::compare::KiteCompareConfig, String> {
        if self.accounts.is_some() || self.workload.is_some() {
            return Err("--accounts and --workload are not --system kite's (it takes --records, --write-ratio, --sync-ratio, --rmw-ratio)".into());
        }
        let fsync = match self.fsync.as_deref().unwrap_or("off") {
            "off" => vec![false],
            "on" => vec![true],
            "both" => vec![false, true],
            other => {
                return Err(format!(
                    "unknown --fsync '{other}' (expected off, on or both)"
                ))
            }
        };
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))?;
        let root = tandem_ddp_lab::heal::peers::find_root(&exe)?;
        Ok(tandem_kite_lab::compare::KiteCompareConfig {
            keys: self.records.unwrap_or(10_000),
            clients: self.one_client_count(48)?,
            nodes: self.nodes,
            write_ratio: self.write_ratio.unwrap_or(0.05),
            sync_ratio: self.sync_ratio,
            rmw_ratio: self.rmw_ratio,
            warmup_s: self.warmup,
            duration_s: self.duration.unwrap_or(5.0),
            fsync,
            systems: self
                .systems
                .as_deref()
                .unwrap_or("kite,zookeeper,etcd")
                .split(',')
                .map(|s| s.trim().to_string())
                .collect(),
            seed: self.seed,
            exe,
            work: root.join("target").join("compare-kite"),
            root,
            progress: true,
        })
    }
}

fn run_pandora(a: CompareArgs) -> Result<(), String> {
    let workload = match a.workload.as_deref().unwrap_or("smallbank") {
        "smallbank" => {
            let s = a.accounts.map(SmallBankSpec::scaled).unwrap_or_default();
            s.validate()?;
            PeerWorkload::SmallBank(s)
        }
        "micro" => {
            let m = MicroSpec {
                keys: a.accounts.unwrap_or(MicroSpec::default().keys),
                write_ratio: a.write_ratio.unwrap_or(0.5),
                ..MicroSpec::default()
            };
            m.validate()?;
            PeerWorkload::Micro(m)
        }
        other => {
            return Err(format!(
                "unknown workload '{other}' (expected smallbank or micro)"
            ))
        }
    };
    let cfg = CompareConfig {
        workload,
        systems: parse_systems(
            a.systems
                .as_deref()
                .unwrap_or("tandem-tcp,tandem-shm,postgres,redis,etcd"),
        )?,
        clients: client_counts(a.clients.as_deref().unwrap_or("16"))?,
        rounds: a.rounds,
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(a.duration.unwrap_or(5.0)),
        seed: a.seed,
        tandem_exe: std::env::current_exe()
            .map_err(|e| format!("cannot find the tandem binary: {e}"))?,
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
        write_compare_figures(&c, &dir, &name)?;
        let cmd = std::env::args()
            .skip(1)
            .filter(|x| !x.starts_with("--markdown") && !x.ends_with(".md"))
            .collect::<Vec<_>>()
            .join(" ");
        let section = format!(
            "### {name}\n\n`tandem {cmd}`\n\n![{name}](figures/{name}.png)\n\n![{name}-curve](figures/{name}-curve.png)\n\n```\n{}```\n",
            render(&c)
        );
        crate::experiment_cmd::update_section(md, &name, &section)?;
        eprintln!(
            "wrote {} and its section of {}",
            dir.join("figures").join(&name).display(),
            md.display()
        );
    }
    if !c.passed() {
        return Err("a system failed its consistency check or hit errors (see above)".into());
    }
    Ok(())
}

/// The bars of each system at its best, and the curve over the client counts.
fn write_compare_figures(
    c: &tandem_pandora_lab::compare::Comparison,
    dir: &std::path::Path,
    name: &str,
) -> Result<(), String> {
    use tandem_report::plot::{bars_svg, log_lines_svg, write_figure};
    let bars: Vec<(String, f64)> = (c.systems.iter())
        .map(|r| {
            (
                format!("{} ({})", r.system, r.clients_asked),
                r.throughput_tps,
            )
        })
        .collect();
    let title = format!(
        "{}: committed tx/s, each system at its best client count",
        c.workload
    );
    write_figure(
        &dir.join("figures").join(name),
        &bars_svg(&title, "committed tx/s", &bars),
    )?;
    let xs: Vec<String> = c.clients.iter().map(|n| n.to_string()).collect();
    let series: Vec<(String, Vec<Option<f64>>)> = (c.systems.iter())
        .map(|r| {
            let at = |n: &usize| {
                let p = c
                    .curve
                    .iter()
                    .find(|p| p.system == r.system && p.clients == *n);
                p.map(|p| p.throughput_tps)
            };
            (r.system.clone(), c.clients.iter().map(at).collect())
        })
        .collect();
    let title = format!(
        "{}: committed tx/s by client count (median of rounds, log scale)",
        c.workload
    );
    let svg = log_lines_svg(&title, "clients", "committed tx/s", &xs, &series);
    write_figure(&dir.join("figures").join(format!("{name}-curve")), &svg)?;
    Ok(())
}
