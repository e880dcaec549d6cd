//! `tandem pandora table-soak`: an insert/delete workload run long and at full speed
//! on the in-process fabric, sampling every table's occupancy and the
//! process's memory. With slot reclamation, a table that deletes rows holds
//! slots only for its live rows and what probing still needs; without it,
//! every row ever inserted keeps its slot until the table is full.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tandem_cluster::backend::Backend;
use tandem_cluster::runner::{self, occupancy::Occupancy, RunConfig, RunResult};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};

/// What to soak.
#[derive(Clone, Debug)]
pub struct SoakOpts {
    pub workload: WorkloadSpec,
    pub duration: Duration,
    pub every: Duration,
    pub reclaim: bool,
    pub compute_nodes: u16,
    pub coordinators: u16,
    pub seed: u64,
    pub progress: bool,
}

/// One table across the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableTrend {
    pub name: String,
    pub slots: u64,
    /// Occupied slots at the first sample, half-way and at the end.
    pub first: u64,
    pub mid: u64,
    pub end: u64,
    pub live_end: u64,
}

impl TableTrend {
    /// Growth over the second half, as a share of the table's slots.
    pub fn late_growth(&self) -> f64 {
        (self.end as f64 - self.mid as f64) / self.slots.max(1) as f64
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakReport {
    pub workload: String,
    pub reclaim: bool,
    pub duration_s: f64,
    pub committed: u64,
    pub throughput_tps: f64,
    pub slots_reclaimed: u64,
    pub reclaims_dropped: u64,
    /// Transactions aborted because an insert found no free slot.
    #[serde(default)]
    pub table_full_aborts: u64,
    pub check_passed: Option<bool>,
    pub violations: Vec<String>,
    pub errors: Vec<String>,
    pub tables: Vec<TableTrend>,
    /// Resident memory half-way and at the end (bytes).
    pub rss_mid: u64,
    pub rss_end: u64,
    pub samples: Vec<Occupancy>,
}

/// Growth over the second half above which a table counts as still filling.
pub const STABLE_GROWTH: f64 = 0.01;
/// Resident-memory growth over the second half above which memory counts as growing.
pub const STABLE_RSS_GROWTH: f64 = 0.05;

impl SoakReport {
    /// Why the run does not show stable occupancy and memory (empty: it does).
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .tables
            .iter()
            .filter(|t| t.late_growth() > STABLE_GROWTH)
            .map(|t| {
                format!(
                    "table {} still fills: {} → {} of {} slots over the second half",
                    t.name, t.mid, t.end, t.slots
                )
            })
            .collect();
        let rss = (self.rss_end as f64 - self.rss_mid as f64) / self.rss_mid.max(1) as f64;
        if rss > STABLE_RSS_GROWTH {
            out.push(format!(
                "resident memory grew {:.1}% over the second half ({} → {} MiB)",
                rss * 100.0,
                self.rss_mid >> 20,
                self.rss_end >> 20
            ));
        }
        if self.table_full_aborts > 0 {
            out.push(format!(
                "{} transactions aborted: a table was full",
                self.table_full_aborts
            ));
        }
        if self.check_passed == Some(false) || !self.errors.is_empty() {
            out.push(format!(
                "the run failed: {} violations, {} errors (first: {:?})",
                self.violations.len(),
                self.errors.len(),
                self.violations.iter().chain(&self.errors).next()
            ));
        }
        out
    }
}

/// Run the soak.
pub fn run(o: &SoakOpts) -> Result<SoakReport, String> {
    let mut cfg = RunConfig::new(Mode::Pandora, o.workload.clone());
    cfg.duration = o.duration;
    cfg.compute_nodes = o.compute_nodes;
    cfg.coordinators = o.coordinators;
    cfg.seed = o.seed;
    cfg.progress = o.progress;
    cfg.progress_every = o.every;
    cfg.reclaim = o.reclaim;
    cfg.occupancy_every = Some(o.every);
    // No fault is injected: a lenient detector keeps scheduling hiccups of
    // a long run on two shared cores from looking like crashes.
    cfg.heartbeat_timeout = Duration::from_millis(100);
    cfg.validate()?;
    let layout = Layout::new(&cfg.store_config())?;
    let region = layout.region_bytes.iter().copied().max().unwrap_or(0);
    let backend = Backend::inline(cfg.memory_nodes as usize, region, cfg.seed);
    let r = runner::run(&cfg, &backend)?;
    Ok(report(o, &layout, r))
}

fn report(o: &SoakOpts, layout: &Layout, r: RunResult) -> SoakReport {
    let s = &r.occupancy;
    let at = |i: usize| s.get(i).cloned().unwrap_or_default();
    let (first, mid, end) = (at(0), at(s.len() / 2), at(s.len().saturating_sub(1)));
    let tables = layout
        .tables
        .iter()
        .enumerate()
        .map(|(i, tl)| {
            let occ = |o: &Occupancy| o.tables.get(i).map_or(0, |t| t.occupied);
            TableTrend {
                name: tl.spec.name.clone(),
                slots: tl.slots_per_partition() as u64 * tl.partitions as u64,
                first: occ(&first),
                mid: occ(&mid),
                end: occ(&end),
                live_end: end.tables.get(i).map_or(0, |t| t.live),
            }
        })
        .collect();
    SoakReport {
        workload: r.workload.clone(),
        reclaim: o.reclaim,
        duration_s: r.duration_s,
        committed: r.committed,
        throughput_tps: r.throughput_tps,
        slots_reclaimed: r.slots_reclaimed,
        reclaims_dropped: r.reclaims_dropped,
        table_full_aborts: r.aborts_by_reason.get("table-full").copied().unwrap_or(0),
        check_passed: r.check_passed,
        violations: r.violations,
        errors: r.errors,
        tables,
        rss_mid: mid.rss_bytes,
        rss_end: end.rss_bytes,
        samples: r.occupancy,
    }
}

/// The tables worth plotting: those whose occupancy changed in some report.
fn churning(reports: &[SoakReport]) -> Vec<usize> {
    let n = reports.first().map_or(0, |r| r.tables.len());
    (0..n)
        .filter(|&i| {
            reports.iter().any(|r| {
                r.tables[i].first != r.tables[i].end || r.tables[i].end > r.tables[i].live_end
            })
        })
        .collect()
}

/// Occupied slots over time of the changing tables, one line per table and
/// report (reclamation on and off side by side).
pub fn figure(reports: &[SoakReport]) -> String {
    let Some(longest) = reports.iter().max_by_key(|r| r.samples.len()) else {
        return String::new();
    };
    // About a dozen labels on the time axis, whatever the run's length.
    let every = longest.samples.len().div_ceil(12).max(1);
    let xs: Vec<String> = longest
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i % every == 0 {
                format!("{:.0}", s.t_s)
            } else {
                String::new()
            }
        })
        .collect();
    let n = xs.len();
    let series: Vec<(String, Vec<Option<f64>>)> = churning(reports)
        .into_iter()
        .flat_map(|i| {
            reports.iter().map(move |r| {
                let label = format!(
                    "{} ({})",
                    r.tables[i].name,
                    if r.reclaim {
                        "reclamation"
                    } else {
                        "no reclamation"
                    }
                );
                let values = (0..n)
                    .map(|k| {
                        r.samples
                            .get(k)
                            .and_then(|s| s.tables.get(i))
                            .map(|t| t.occupied as f64)
                    })
                    .collect();
                (label, values)
            })
        })
        .collect();
    let title = format!(
        "{}: occupied slots over a {:.0} s run",
        longest.workload, longest.duration_s
    );
    tandem_report::plot::lines_svg(&title, "seconds", "occupied slots", &xs, &series)
}
