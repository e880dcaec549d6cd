//! CPU per committed transaction and its floor: the compute threads' CPU
//! clocks over the measured interval, against the warm-up's verbs posted
//! again raw on the same fabric.

use std::time::Duration;

use tandem_cluster::backend::Backend;
use tandem_cluster::runner::{self, RunConfig};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};

#[test]
fn a_run_reports_its_cpu_per_commit_over_the_floor_of_its_own_verbs() {
    let mut cfg = RunConfig::new(
        Mode::Pandora,
        WorkloadSpec::from_name("micro", Some(10_000)).unwrap(),
    );
    cfg.coordinators = 8;
    cfg.warmup = Duration::from_millis(300);
    cfg.duration = Duration::from_millis(500);
    cfg.heartbeat_timeout = Duration::from_millis(200);
    cfg.floor = true;
    let layout = Layout::new(&cfg.store_config()).unwrap();
    let region = layout.region_bytes.iter().copied().max().unwrap();
    let backend = Backend::inline(cfg.memory_nodes as usize, region, cfg.seed);
    let r = runner::run(&cfg, &backend).unwrap();
    assert_eq!(r.check_passed, Some(true), "{:?}", r.violations);
    let cpu = r.cpu_ns_per_commit.expect("no compute thread ended early");
    let floor = r
        .floor
        .as_ref()
        .expect("the warm-up committed transactions");
    // The trace holds the same transactions' verbs: as many per commit as
    // the run posted (the warm-up's abort rate aside).
    let verbs = floor.verbs_per_commit / r.verbs_per_commit;
    assert!(
        (0.85..1.25).contains(&verbs),
        "verbs per commit: trace {floor:?}, run {}",
        r.verbs_per_commit
    );
    // A compute thread cannot use more CPU than the interval lasted.
    let ceiling = 1e9 * r.duration_s * cfg.compute_nodes as f64 / r.committed as f64;
    assert!(
        cpu > 0.0 && cpu <= ceiling * 1.05,
        "cpu/commit {cpu} ns, at most {ceiling}"
    );
    let overhead = r.protocol_overhead.unwrap();
    assert!(
        overhead > 1.0 && overhead < 20.0,
        "a protocol costs more than its verbs alone, not 20 times more: {overhead}"
    );
}
