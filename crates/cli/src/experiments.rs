//! The experiment registry: every experiment `tandem experiment NAME`
//! runs, from every system's lab, in the order `docs/RESULTS.md` lists
//! them, and the dispatch to the lab that runs it.

use tandem_pandora_lab::experiment as pandora;
use tandem_report::ExperimentOutput;

/// Experiment names, in the order `docs/RESULTS.md` lists them.
pub const NAMES: [&str; 17] = [
    "table2",
    "pill-overhead",
    "mttf",
    "failover-compute",
    "failover-memory",
    "stalls",
    "traditional-overhead",
    "ford-scan",
    "ddp-heatmap",
    "ddp-sweeps",
    "heal-recovery",
    "lrp",
    "kite-throughput",
    "kite-sleep",
    "kite-lfd",
    "kite-tcp",
    "memory-loss-procs",
];

/// Run experiment `name`; `quick` shrinks it to seconds (CI, smoke tests);
/// `progress` gets a line per run.
pub fn run(name: &str, quick: bool, progress: &dyn Fn(&str)) -> Result<ExperimentOutput, String> {
    let command = format!(
        "tandem experiment {name}{}",
        if quick { " --quick" } else { "" }
    );
    let (json, figure_svg, markdown) = match name {
        "table2" => pandora::table2(quick, progress)?,
        "pill-overhead" => pandora::pill_overhead(quick, progress)?,
        "mttf" => pandora::mttf(quick, progress)?,
        "failover-compute" => pandora::failover(quick, false, progress)?,
        "failover-memory" => pandora::failover(quick, true, progress)?,
        "stalls" => pandora::stalls(quick, progress)?,
        "traditional-overhead" => pandora::traditional_overhead(quick, progress)?,
        "ford-scan" => pandora::ford_scan(quick, progress)?,
        "ddp-heatmap" => tandem_ddp_lab::bench::heatmap_experiment(quick, progress)?,
        "ddp-sweeps" => tandem_ddp_lab::bench::sweeps_experiment(quick, progress)?,
        "heal-recovery" => tandem_ddp_lab::heal::experiment::experiment(quick, progress)?,
        "lrp" => tandem_lrp::experiment::experiment(quick, progress)?,
        "kite-throughput" => tandem_kite_lab::experiment::throughput(quick, progress)?,
        "kite-sleep" => tandem_kite_lab::experiment::sleep(quick, progress)?,
        "kite-lfd" => tandem_kite_lab::experiment::lfd(quick, progress)?,
        "kite-tcp" => tandem_kite_lab::experiment::tcp(quick, progress)?,
        "memory-loss-procs" => tandem_pandora_lab::memloss_procs::experiment(quick, progress)?,
        other => {
            return Err(format!(
                "unknown experiment '{other}' (expected one of {})",
                NAMES.join(", ")
            ))
        }
    };
    Ok(ExperimentOutput {
        name: name.to_string(),
        command,
        json,
        figure_svg,
        markdown,
    })
}
