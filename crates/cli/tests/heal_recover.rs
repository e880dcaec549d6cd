//! `tandem heal recover`: one recovery by HEAL and one by the full copy, in
//! simulated time, and the leader-based one; HEAL on processes (`--net
//! tcp`); all reported as JSON; bad input refused with a clear error.

mod common;
use common::{fails_with, tandem};

#[test]
fn heal_and_full_copy_recover_and_report_their_phases() {
    let json = std::env::temp_dir().join(format!("heal-recover-{}.json", std::process::id()));
    let out = tandem(&[
        "heal",
        "recover",
        "--records",
        "20000",
        "--downtime-s",
        "0.002",
        "--clients",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    let (heal, full) = (&runs[0], &runs[1]);
    assert_eq!(
        (heal["scheme"].as_str(), full["scheme"].as_str()),
        (Some("heal"), Some("full-copy"))
    );
    assert_eq!(heal["fell_back_to_full_copy"], false);
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    assert!(
        f(heal, "missed_entries") > 0.0,
        "the Buddy shipped nothing: {heal}"
    );
    let phases =
        f(heal, "start_to_ack_us") + f(heal, "catchup_to_resp_us") + f(heal, "apply_to_end_us");
    assert!(
        phases > 0.0 && phases <= f(heal, "recovery_us") + 1.0,
        "phases {phases} vs recovery {}",
        f(heal, "recovery_us")
    );
    // 20k records, about 6k keys written while the node was away: the
    // full copy moves the whole store.
    assert!(
        f(full, "recovery_us") > f(heal, "recovery_us"),
        "full copy {} us, HEAL {} us",
        f(full, "recovery_us"),
        f(heal, "recovery_us")
    );
    for r in runs {
        let lost = f(r, "throughput_lost");
        assert!((0.0..1.0).contains(&lost), "throughput lost {lost}");
    }
    let _ = std::fs::remove_file(&json);
}

#[test]
fn bad_input_is_refused() {
    fails_with(
        &[
            "heal",
            "recover",
            "--model",
            "causal-synch",
            "--scheme",
            "heal",
        ],
        "HEAL recovers the Lin models",
    );
    fails_with(
        &["heal", "recover", "--scheme", "leaders"],
        "unknown --scheme 'leaders'",
    );
    fails_with(
        &["heal", "recover", "--net", "tcp", "--scheme", "full-copy"],
        "on processes only HEAL runs",
    );
    fails_with(
        &["heal", "recover", "--net", "udp"],
        "--net udp: sim or tcp",
    );
    fails_with(
        &[
            "heal",
            "recover",
            "--scheme",
            "leader",
            "--leader-without",
            "cache",
        ],
        "--leader-without cache",
    );
    fails_with(&["heal", "recover", "--downtime-s=-1"], "--downtime-s -1");
    fails_with(&["heal", "recover", "--downtime-s", "0"], "--downtime-s 0");
    fails_with(&["heal", "recover", "--records", "0"], "records");
    fails_with(
        &["ddp", "check", "--model", "re-scope", "--recovery", "heal"],
        "not re-scope",
    );
}

/// `tandem demo heal`: a node process killed and recovered by HEAL while
/// the others serve; the demo fails unless the history is linearizable and
/// the node recovered from its Buddy.
#[test]
fn the_heal_demo_recovers_a_killed_process() {
    let out = tandem(&[
        "demo",
        "heal",
        "--figure",
        std::env::temp_dir()
            .join(format!("heal-demo-{}", std::process::id()))
            .to_str()
            .unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("HEAL: recovered in") && stdout.contains("linearizable"),
        "{stdout}"
    );
}

#[test]
fn the_leader_based_recovery_reports_its_scan_and_rounds() {
    let json =
        std::env::temp_dir().join(format!("heal-recover-leader-{}.json", std::process::id()));
    let out = tandem(&[
        "heal",
        "recover",
        "--scheme",
        "leader",
        "--records",
        "5000",
        "--downtime-s",
        "0.001",
        "--clients",
        "5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let r = &v["runs"][0];
    assert_eq!(r["scheme"], "leader");
    assert!(
        r["recovery_us"].as_f64().unwrap() > 0.0 && r["leader"]["scanned"].as_u64().unwrap() > 0,
        "{r}"
    );
    let _ = std::fs::remove_file(&json);
}

/// HEAL on five node processes: node 2 killed, written past, restarted.
#[test]
fn heal_recovers_a_killed_node_process_and_reports_its_phases() {
    let json = std::env::temp_dir().join(format!("heal-recover-tcp-{}.json", std::process::id()));
    let args = [
        "heal",
        "recover",
        "--net",
        "tcp",
        "--downtime-s",
        "1",
        "--rate",
        "200",
        "--records",
        "1000",
        "--json",
        json.to_str().unwrap(),
    ];
    let out = tandem(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let r = &v["runs"][0];
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("no {k}: {r}"));
    assert!(
        f("recovery_us") > 0.0 && f("restart_to_online_us") >= f("recovery_us"),
        "{r}"
    );
    assert!(
        f("apply_to_end_us") > 0.0 && r["missed_entries"].as_u64().unwrap() > 0,
        "the Buddy sent nothing: {r}"
    );
    let _ = std::fs::remove_file(&json);
}
