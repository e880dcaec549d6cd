//! `tandem lrp`: the crash checker's exit status is its verdict, a violation
//! prints a replay command that reproduces it, bad input is refused clearly,
//! and the cost bench reports every policy against NOP.

use std::process::{Command, Output};

fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn lrp_passes_and_nop_fails_with_a_replay_that_reproduces_it() {
    let ok = tandem(&["lrp", "check", "--lfd", "all", "--seeds", "5"]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert_eq!(
        text(&ok).matches("0 violating seed(s)").count(),
        5,
        "{}",
        text(&ok)
    );

    let json = std::env::temp_dir().join(format!("tandem-lrp-{}.json", std::process::id()));
    let bad = tandem(&[
        "lrp",
        "check",
        "--lfd",
        "queue",
        "--policy",
        "nop",
        "--seeds",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = text(&bad);
    assert!(!bad.status.success(), "NOP must fail: {out}");
    assert!(out.contains("must persist before"), "a witness: {out}");
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: tandem "))
        .expect("a replay command");
    let again = tandem(&replay.split(' ').collect::<Vec<_>>());
    assert!(
        !again.status.success() && text(&again).contains("1 violating seed(s)"),
        "{}",
        text(&again)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report[0]["violating_seeds"], 3);
    let _ = std::fs::remove_file(json);
}

#[test]
fn bad_input_is_refused_with_the_choices() {
    for (args, says) in [
        (
            vec!["lrp", "check", "--lfd", "tree"],
            "one of list, hash, bst, skiplist, queue",
        ),
        (
            vec!["lrp", "check", "--policy", "fast"],
            "one of nop, sb, bb, arp, lrp, eager",
        ),
        (vec!["lrp", "check", "--mutant", "m10"], "unknown mutant"),
        (vec!["lrp", "check", "--threads", "65"], "1 to 64 cores"),
        (vec!["lrp", "bench", "--size", "0"], "zero"),
    ] {
        let o = tandem(&args);
        assert!(
            !o.status.success() && text(&o).contains(says),
            "{args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn bench_reports_each_policy_against_nop() {
    let o = tandem(&[
        "lrp",
        "bench",
        "--lfd",
        "bst",
        "--size",
        "2K",
        "--threads",
        "4",
        "--ops",
        "20",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for p in ["nop", "lrp", "bb", "sb", "eager"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("bst") && l.split_whitespace().nth(1) == Some(p)),
            "{p} missing: {out}"
        );
    }
    let nop = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("nop"))
        .unwrap();
    assert_eq!(nop.split_whitespace().nth(3), Some("1.000"));
}
