//! `tandem experiment heal-peers` on a short downtime at a low rate: HEAL's
//! five node processes (without and with `--fsync`), a 3-member ZooKeeper
//! ensemble and a 3-member etcd cluster, each with one follower killed,
//! written past and restarted. The JSON must hold all four systems, each with positive times, and a
//! follower that really fell behind. A peer that cannot be installed here
//! (its script's exit 3, which the experiment reports as `skipped`) is
//! skipped with its reason, except under `$CI`.

use serde_json::Value;

mod common;
use common::{fails_with, tandem};

#[test]
fn bad_options_are_refused() {
    fails_with(
        &["experiment", "table2", "--rate", "5"],
        "options of heal-peers only",
    );
    fails_with(
        &["experiment", "heal-peers", "--downtime-s", "0"],
        "--downtime-s must be positive",
    );
    fails_with(
        &["experiment", "heal-peers", "--rate", "0.5"],
        "--rate must be at least 1",
    );
}

/// The follower was behind when it restarted: the leader's index had moved
/// past the follower's (ZooKeeper, etcd), or writes were acknowledged while
/// it was down and its Buddy sent it what it missed (HEAL).
fn assert_lagged(system: &str, r: &Value) {
    match (
        r["follower_index_before"].as_u64(),
        r["leader_index_at_restart"].as_u64(),
    ) {
        (Some(f), Some(l)) => assert!(
            l > f,
            "{system}: leader at {l} at the restart, follower at {f} before its kill"
        ),
        _ => {
            assert!(
                system.starts_with("heal"),
                "{system} reports no indexes: {r}"
            );
            assert!(
                r["acked_at_restart"].as_u64() > r["acked_at_kill"].as_u64(),
                "heal: no write while node 2 was down: {r}"
            );
            assert!(
                r["details"]["missed_updates"].as_u64().unwrap_or(0) > 0,
                "heal: the Buddy sent nothing: {r}"
            );
        }
    }
}

#[test]
fn three_followers_fall_behind_and_catch_up() {
    let dir = std::env::temp_dir().join(format!("tandem-heal-peers-{}", std::process::id()));
    let json = dir.join("hp.json");
    let (d, j) = (dir.to_str().unwrap(), json.to_str().unwrap());
    let out = tandem(&[
        "experiment",
        "heal-peers",
        "--quick",
        "--downtime-s",
        "2",
        "--rate",
        "100",
        "--keys",
        "1000",
        "--out",
        d,
        "--json",
        j,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let systems = v["systems"].as_array().unwrap();
    let names: Vec<&str> = systems
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["heal", "heal-fsync", "zookeeper", "etcd"]);
    for s in systems {
        let name = s["system"].as_str().unwrap();
        if let Some(why) = s["skipped"].as_str() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must measure {name}, but it cannot be installed: {why}"
            );
            eprintln!("skipped {name}: it cannot be installed here: {why}");
            continue;
        }
        let r = &s["runs"][0];
        let ms = |k: &str| {
            r[k].as_f64()
                .unwrap_or_else(|| panic!("{name}: no {k} in {r}"))
        };
        assert!(
            ms("answer_ms") > 0.0 && ms("caught_up_ms") > 0.0,
            "{name}: {r}"
        );
        // HEAL's shadow phase always separates answering from catching up.
        // A peer follower this little behind can catch up between two polls
        // of the watch: it is then seen answering and caught up at once.
        let least_net = if name.starts_with("heal") {
            f64::MIN_POSITIVE
        } else {
            0.0
        };
        assert!(ms("net_ms") >= least_net, "{name}: {r}");
        assert!(
            ms("caught_up_ms") >= ms("answer_ms"),
            "{name}: caught up before it answered: {r}"
        );
        assert!(
            r["downtime_rate"].as_f64().unwrap() > 50.0,
            "{name}: the writes did not keep their rate: {r}"
        );
        assert_lagged(name, r);
    }
    let md = std::fs::read_to_string(dir.join("RESULTS.md")).unwrap();
    assert!(
        md.contains("<!-- experiment heal-peers -->") && md.contains("(b) − (a)"),
        "{md}"
    );
    let ratios: Vec<String> = v["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            format!(
                "{}/{}",
                x["system"].as_str().unwrap(),
                x["heal"].as_str().unwrap()
            )
        })
        .collect();
    let measured = |n: &str| {
        systems
            .iter()
            .any(|s| s["system"] == n && s["skipped"].is_null())
    };
    for (peer, heal) in [
        ("zookeeper", "heal"),
        ("etcd", "heal"),
        ("zookeeper", "heal-fsync"),
        ("etcd", "heal-fsync"),
    ] {
        assert_eq!(
            ratios.contains(&format!("{peer}/{heal}")),
            measured(peer),
            "ratio {peer}/{heal} in {ratios:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
