//! Several stores on one workload, alternated in rounds (A B A B ...) within
//! one run, so a noisy machine's drift hits every store alike. Reports each
//! store's median and its ratio to the first store (docs/DESIGN.md §1 principle 6).

use serde::Serialize;
use tandem_dkvs::Mode;

use tandem_cluster::runner::{RunConfig, RunResult};

#[derive(Clone, Debug, Serialize)]
pub struct StoreSummary {
    pub store: String,
    pub rounds: usize,
    pub median_throughput_tps: f64,
    pub median_p50_us: u64,
    pub median_p99_us: u64,
    pub median_verbs_per_commit: f64,
    /// Medians of the runs that measured them (`RunResult::cpu_ns_per_commit`,
    /// its floor and their ratio).
    pub median_cpu_ns_per_commit: Option<f64>,
    pub median_floor_cpu_ns_per_commit: Option<f64>,
    pub median_protocol_overhead: Option<f64>,
    /// Median throughput relative to the first store listed.
    pub throughput_ratio: f64,
    pub all_checks_passed: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub runs: Vec<RunResult>,
    pub summary: Vec<StoreSummary>,
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median of the values present, if any.
fn median_of(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| median_f(v))
}

fn median_u(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Run `rounds` rounds of every store in `stores`; `run_one` performs one
/// run on fresh memory.
pub fn alternate(
    stores: &[Mode],
    rounds: usize,
    template: &RunConfig,
    mut run_one: impl FnMut(&RunConfig) -> Result<RunResult, String>,
    mut on_result: impl FnMut(usize, &RunResult),
) -> Result<Comparison, String> {
    if stores.is_empty() || rounds == 0 {
        return Err("need at least one store and one round".into());
    }
    let mut runs = Vec::new();
    for round in 0..rounds {
        for &mode in stores {
            let mut cfg = template.clone();
            cfg.mode = mode;
            cfg.seed = template.seed.wrapping_add(round as u64);
            let r = run_one(&cfg)?;
            on_result(round, &r);
            runs.push(r);
        }
    }
    let mut summary: Vec<StoreSummary> = Vec::new();
    for &mode in stores {
        let mine: Vec<&RunResult> = runs.iter().filter(|r| r.store == mode.name()).collect();
        summary.push(StoreSummary {
            store: mode.name().into(),
            rounds: mine.len(),
            median_throughput_tps: median_f(mine.iter().map(|r| r.throughput_tps).collect()),
            median_p50_us: median_u(mine.iter().map(|r| r.latency_us.p50).collect()),
            median_p99_us: median_u(mine.iter().map(|r| r.latency_us.p99).collect()),
            median_verbs_per_commit: median_f(mine.iter().map(|r| r.verbs_per_commit).collect()),
            median_cpu_ns_per_commit: median_of(mine.iter().map(|r| r.cpu_ns_per_commit)),
            median_floor_cpu_ns_per_commit: median_of(
                mine.iter()
                    .map(|r| r.floor.as_ref().map(|f| f.cpu_ns_per_commit)),
            ),
            median_protocol_overhead: median_of(mine.iter().map(|r| r.protocol_overhead)),
            throughput_ratio: 0.0,
            all_checks_passed: mine
                .iter()
                .all(|r| r.check_passed != Some(false) && r.errors.is_empty()),
        });
    }
    let base = summary[0].median_throughput_tps.max(f64::MIN_POSITIVE);
    for s in &mut summary {
        s.throughput_ratio = s.median_throughput_tps / base;
    }
    Ok(Comparison { runs, summary })
}
