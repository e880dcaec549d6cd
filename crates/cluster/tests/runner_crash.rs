//! A planned crash hits the node's current incarnation: in CI, the demo's
//! node 2 was falsely suspected at 0.1 s (a loaded machine) and replaced
//! before its crash at 0.4 s, so the crash hit nothing and the demo showed
//! no crash. Reproduced here deterministically with a heartbeat stall of
//! node 2 before its planned crash.

use std::time::Duration;

use tandem_cluster::backend::Backend;
use tandem_cluster::runner::{self, CrashPlan, RunConfig, SuspectPlan};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::{Layout, Mode};

#[test]
fn a_planned_crash_hits_the_incarnation_that_replaced_a_suspected_node() {
    let mut cfg = RunConfig::new(
        Mode::Pandora,
        WorkloadSpec::from_name("smallbank", Some(20_000)).unwrap(),
    );
    cfg.coordinators = 4;
    cfg.duration = Duration::from_millis(1200);
    cfg.heartbeat_timeout = Duration::from_millis(10);
    // Node 2 falsely suspected early, then its planned crash later.
    cfg.suspect.push(SuspectPlan {
        node: 1,
        after: Duration::from_millis(100),
        pause: Duration::from_millis(40),
    });
    cfg.crash = Some(CrashPlan {
        node: 1,
        after: Duration::from_millis(600),
    });
    cfg.validate().unwrap();
    let layout = Layout::new(&cfg.store_config()).unwrap();
    let region = layout.region_bytes.iter().copied().max().unwrap();
    let backend = Backend::inline(cfg.memory_nodes as usize, region, cfg.seed);
    let r = runner::run(&cfg, &backend).unwrap();
    assert_eq!(r.check_passed, Some(true), "{:?}", r.violations);
    let why = format!(
        "errors {:?}, false positives {:?}, recovered {:?}, events {:?}",
        r.errors, r.false_positives, r.recovered_nodes, r.timeline.events
    );
    let t = r
        .recovery
        .as_ref()
        .unwrap_or_else(|| panic!("the crash of node 2's incarnation was not recovered: {why}"));
    assert!(
        t.crashed_node > 2,
        "the crash hit node 2's replacement, not node 2 again: {}",
        t.crashed_node
    );
    assert_eq!(r.fenced_acks, 0);
}
