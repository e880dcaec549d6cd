//! Tier 3: PostgreSQL as the real-world control (docs/DESIGN.md §5): the same
//! litmus scripts through the `postgres` crate. SERIALIZABLE must pass;
//! REPEATABLE READ (snapshot isolation) must show litmus 2's write skew;
//! READ COMMITTED must be flagged. The server is started with
//! `scripts/postgres.sh start`; if it cannot be, these tests fail (CI
//! installs PostgreSQL first), they never skip.

use std::process::Command;
use std::sync::Once;

use tandem_dart::campaign::{self, CampaignConfig, CampaignReport, StoreKind};
use tandem_dart::pg_store::Isolation;

const URL: &str = "postgres://postgres@127.0.0.1:25329/postgres";

fn server() {
    static START: Once = Once::new();
    START.call_once(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/postgres.sh");
        let out = Command::new("bash").arg(script).arg("start").output().expect("run scripts/postgres.sh");
        assert!(
            out.status.success(),
            "PostgreSQL could not be started with `bash scripts/postgres.sh start` (exit {:?}):\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

fn campaign(isolation: Isolation, tests: &str, runs: u64) -> CampaignReport {
    server();
    let mut c = CampaignConfig::new(StoreKind::Postgres {
        url: URL.into(),
        isolation,
    });
    c.tests = tests.into();
    c.instances = 1;
    c.seeds = Some(runs);
    c.crash_rate = 0.0;
    c.txs_per_client = 80;
    c.stop_at_first = isolation != Isolation::Serializable;
    let rep = campaign::run(&c).expect("campaign against PostgreSQL");
    eprintln!(
        "postgres {isolation} [{tests}]: {} runs, {} tx ({} committed, {} aborted), {} violations; first: {:?}",
        rep.runs,
        rep.transactions,
        rep.committed,
        rep.aborted,
        rep.violation_count,
        rep.violations.first().map(|v| (&v.test, &v.description))
    );
    rep
}

#[test]
fn serializable_passes_every_litmus_test() {
    let rep = campaign(Isolation::Serializable, "all", 2);
    assert_eq!(rep.violation_count, 0, "{:?}", rep.violations.first());
    assert!(
        rep.committed > 500 && rep.aborted > 0,
        "too little contention to mean anything: {rep:?}"
    );
}

#[test]
fn repeatable_read_shows_write_skew_in_litmus_2() {
    let rep = campaign(Isolation::RepeatableRead, "2", 10);
    let v = rep
        .violations
        .first()
        .expect("REPEATABLE READ (snapshot isolation) must show write skew within 10 runs");
    assert_eq!(v.test, "litmus-2", "{}", v.description);
}

#[test]
fn read_committed_is_flagged() {
    let rep = campaign(Isolation::ReadCommitted, "all", 10);
    assert!(
        rep.violation_count > 0,
        "READ COMMITTED must be flagged within 10 runs"
    );
}
