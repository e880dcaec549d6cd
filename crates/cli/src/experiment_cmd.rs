//! `tandem experiment NAME [--quick]`: one of the paper's experiments
//! (Pandora §6). Writes its JSON, its figure (SVG and PNG) and its
//! section of `RESULTS.md` (between `<!-- experiment NAME -->` markers, so
//! each experiment can be re-run alone).

use std::path::{Path, PathBuf};

use crate::experiments::{self as experiment, NAMES};
use clap::Args;
use tandem_ddp_lab::heal::peers as heal_peers;
use tandem_report::plot::write_figure;

#[derive(Args)]
pub struct ExperimentArgs {
    /// table2, pill-overhead, mttf, failover-compute, failover-memory, stalls,
    /// traditional-overhead, ford-scan, ddp-heatmap, ddp-sweeps, heal-recovery, lrp,
    /// kite-throughput, kite-sleep, kite-lfd, kite-tcp (node processes),
    /// heal-peers (not part of all), or all.
    name: String,
    /// A scaled-down run that takes seconds (smoke test; not for RESULTS).
    #[arg(long)]
    quick: bool,
    /// Directory holding RESULTS.md, results/ (JSON) and figures/
    /// (default: docs, or target/experiments-quick with --quick).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    peers: HealPeersArgs,
}

/// Options of `heal-peers` (HEAL's follower catch-up against a ZooKeeper
/// ensemble and an etcd cluster; not part of `all`: it starts real servers).
#[derive(Args)]
pub struct HealPeersArgs {
    /// heal-peers: seconds the follower stays down (default 10; 2 with --quick).
    #[arg(long)]
    downtime_s: Option<f64>,
    /// heal-peers: writes per second, before, during and after the downtime (default 500; 100 with --quick).
    #[arg(long)]
    rate: Option<f64>,
    /// heal-peers: runs per system, medians reported (default 5; 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// heal-peers: keys written (default 10000).
    #[arg(long)]
    keys: Option<u64>,
    /// heal-peers: also write the JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl HealPeersArgs {
    fn given(&self) -> bool {
        self.downtime_s.is_some()
            || self.rate.is_some()
            || self.runs.is_some()
            || self.keys.is_some()
            || self.json.is_some()
    }

    fn options(&self, quick: bool) -> Result<heal_peers::Options, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut o = heal_peers::Options::new(quick, &exe, &heal_peers::find_root(&exe)?);
        o.downtime_s = self.downtime_s.unwrap_or(o.downtime_s);
        o.rate = self.rate.unwrap_or(o.rate);
        o.runs = self.runs.unwrap_or(o.runs);
        o.keys = self.keys.unwrap_or(o.keys);
        o.validate()?;
        Ok(o)
    }
}

pub fn run(a: ExperimentArgs) -> Result<(), String> {
    let names: Vec<&str> = if a.name == "all" {
        NAMES.to_vec()
    } else {
        vec![a.name.as_str()]
    };
    if let Some(bad) = names
        .iter()
        .find(|n| !NAMES.contains(n) && **n != heal_peers::NAME)
    {
        return Err(format!(
            "unknown experiment '{bad}' (expected one of {}, {}, or all)",
            NAMES.join(", "),
            heal_peers::NAME
        ));
    }
    if a.peers.given() && a.name != heal_peers::NAME {
        return Err(format!(
            "--downtime-s, --rate, --runs, --keys and --json are options of {} only",
            heal_peers::NAME
        ));
    }
    let peers = if a.name == heal_peers::NAME {
        Some(a.peers.options(a.quick)?)
    } else {
        None
    };
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(if a.quick {
            "target/experiments-quick"
        } else {
            "docs"
        })
    });
    for name in names {
        let t = std::time::Instant::now();
        eprintln!(
            "experiment {name}{}:",
            if a.quick { " (quick)" } else { "" }
        );
        let progress = |line: &str| eprintln!("{line}");
        let e = match &peers {
            Some(o) => heal_peers::run(o, &progress)?,
            None => experiment::run(name, a.quick, &progress)?,
        };
        let json_path = out.join("results").join(format!("{name}.json"));
        std::fs::create_dir_all(json_path.parent().expect("has a parent"))
            .map_err(|err| format!("cannot create {}: {err}", out.display()))?;
        let text = serde_json::to_string_pretty(&e.json).map_err(|err| err.to_string())?;
        for path in std::iter::once(&json_path).chain(a.peers.json.as_ref()) {
            std::fs::write(path, &text)
                .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        }
        let (svg, png) = write_figure(&out.join("figures").join(name), &e.figure_svg)?;
        let section = format!(
            "### {name}\n\n`{}` ({:.0} s on this machine). Data: [`results/{name}.json`](results/{name}.json).\n\n![{name}](figures/{name}.png)\n\n{}",
            e.command,
            t.elapsed().as_secs_f64(),
            e.markdown
        );
        let results = out.join("RESULTS.md");
        update_section(&results, name, &section)?;
        eprintln!(
            "  wrote {}, {}, {} and its section of {}",
            json_path.display(),
            svg.display(),
            png.display(),
            results.display()
        );
    }
    Ok(())
}

/// Replace the text between this experiment's markers (or append it under
/// the experiments heading).
pub fn update_section(path: &Path, name: &str, section: &str) -> Result<(), String> {
    let (open, close) = (
        format!("<!-- experiment {name} -->"),
        format!("<!-- /experiment {name} -->"),
    );
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{open}\n{}\n{close}", section.trim_end());
    let new = match (old.find(&open), old.find(&close)) {
        (Some(i), Some(j)) if j > i => format!("{}{block}{}", &old[..i], &old[j + close.len()..]),
        _ => {
            let heading = "## Other results";
            let mut s = old.trim_end().to_string();
            if !s.contains(heading) {
                s += &format!("\n\n{heading}\n\nEach section below is written by its command; `scripts/results.sh` runs them all.");
            }
            format!("{s}\n\n{block}\n")
        }
    };
    std::fs::write(path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
