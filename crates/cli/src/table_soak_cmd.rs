//! `tandem pandora table-soak`: run an insert/delete workload long, at full speed,
//! and report table occupancy and memory over time (slot reclamation).

use std::path::Path;
use std::time::Duration;

use clap::Args;
use tandem_cluster::workload::WorkloadSpec;
use tandem_pandora_lab::table_soak::{self, SoakOpts, SoakReport};

use crate::args::write_json;

#[derive(Args)]
pub struct TableSoakArgs {
    /// tatp, tpcc, bank, smallbank or micro.
    #[arg(long, default_value = "tatp")]
    workload: String,
    /// Workload scale: tatp subscribers, tpcc warehouses, bank customers, ...
    #[arg(long)]
    scale: Option<u64>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 600.0)]
    duration: f64,
    /// Seconds between occupancy samples (and progress lines).
    #[arg(long, default_value_t = 10.0)]
    every: f64,
    /// Slot reclamation: on, off, or both (one run each, reported side by side).
    #[arg(long, default_value = "on")]
    reclaim: String,
    #[arg(long, default_value_t = 2)]
    compute_nodes: u16,
    /// Coordinators per compute node.
    #[arg(long, default_value_t = 16)]
    coordinators: u16,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: Option<String>,
    /// Write the occupancy figure as <STEM>.svg and <STEM>.png.
    #[arg(long)]
    figure: Option<String>,
    /// Run nothing: draw --figure from the reports of an earlier --json.
    #[arg(long)]
    replot: Option<String>,
}

fn positive_secs(s: f64, what: &str) -> Result<Duration, String> {
    if !(s.is_finite() && s > 0.0) {
        return Err(format!("--{what} must be a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(s))
}

pub fn run(a: TableSoakArgs) -> Result<(), String> {
    if let Some(path) = &a.replot {
        let stem = a.figure.as_ref().ok_or("--replot needs --figure")?;
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let reports: Vec<SoakReport> = serde_json::from_str(&text)
            .map_err(|e| format!("{path} is not table-soak JSON: {e}"))?;
        let (svg, png) =
            tandem_report::plot::write_figure(Path::new(stem), &table_soak::figure(&reports))?;
        eprintln!("figure: {} and {}", svg.display(), png.display());
        return Ok(());
    }
    let reclaim: &[bool] = match a.reclaim.as_str() {
        "on" => &[true],
        "off" => &[false],
        "both" => &[true, false],
        other => return Err(format!("--reclaim must be on, off or both, not '{other}'")),
    };
    let (duration, every) = (
        positive_secs(a.duration, "duration")?,
        positive_secs(a.every, "every")?,
    );
    if every > duration {
        return Err("--every must not exceed --duration".into());
    }
    let workload = WorkloadSpec::from_name(&a.workload, a.scale)?;
    let mut reports = Vec::new();
    for &on in reclaim {
        eprintln!(
            "table-soak: {} for {:.0} s, reclamation {}",
            a.workload,
            a.duration,
            if on { "on" } else { "off" }
        );
        let opts = SoakOpts {
            workload: workload.clone(),
            duration,
            every,
            reclaim: on,
            compute_nodes: a.compute_nodes,
            coordinators: a.coordinators,
            seed: a.seed,
            progress: true,
        };
        let r = table_soak::run(&opts)?;
        print_report(&r);
        reports.push(r);
    }
    if let Some(stem) = &a.figure {
        let (svg, png) =
            tandem_report::plot::write_figure(Path::new(stem), &table_soak::figure(&reports))?;
        eprintln!("figure: {} and {}", svg.display(), png.display());
    }
    if let Some(path) = &a.json {
        write_json(path, &reports)?;
    }
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| r.reclaim)
        .flat_map(|r| r.problems())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "occupancy or memory not stable with reclamation: {}",
            failed.join("; ")
        ))
    }
}

fn print_report(r: &SoakReport) {
    println!(
        "{} with reclamation {}: {} commits in {:.0} s ({:.0} tx/s), {} slots reclaimed ({} tombstones dropped), check {}",
        r.workload,
        if r.reclaim { "on" } else { "off" },
        r.committed,
        r.duration_s,
        r.throughput_tps,
        r.slots_reclaimed,
        r.reclaims_dropped,
        match r.check_passed {
            Some(true) => "passed",
            Some(false) => "FAILED",
            None => "skipped",
        }
    );
    println!(
        "  {:<18} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "table", "slots", "first", "half-way", "end", "live"
    );
    for t in r
        .tables
        .iter()
        .filter(|t| t.first != t.end || t.end != t.live_end)
    {
        println!(
            "  {:<18} {:>10} {:>10} {:>10} {:>10} {:>10}",
            t.name, t.slots, t.first, t.mid, t.end, t.live_end
        );
    }
    println!(
        "  resident memory: {} MiB half-way, {} MiB at the end",
        r.rss_mid >> 20,
        r.rss_end >> 20
    );
    for p in r.problems() {
        println!("  problem: {p}");
    }
}
