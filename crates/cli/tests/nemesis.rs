//! `tandem nemesis` as a user runs it: real processes, real packets
//! dropped in a namespace of the command's own (root; nftables through
//! scripts/netfault.sh, which the command runs from the checkout).

use std::process::Command;

mod common;

/// Every run takes this alone: its liveness bounds compare throughput
/// after a heal with throughput before the first fault, and a neighbouring
/// run's load that changes in between (a ZooKeeper starting, a cluster
/// killed and restarted) moved them by half, with nothing wrong in the
/// system under test. [`alone`] holds it across several runs.
static CORES: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    static ALONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with no other nemesis run of this binary beside it.
fn alone<T>(f: impl FnOnce() -> T) -> T {
    let _all = CORES.write().unwrap_or_else(|p| p.into_inner());
    ALONE.with(|a| a.set(true));
    let r = f();
    ALONE.with(|a| a.set(false));
    r
}

/// The longer tier (`TANDEM_NEMESIS_FULL=1`): each planted bug's control
/// run (kills alone, which must not catch it) and the ZooKeeper-backed
/// membership's leader cut. The default run keeps every catch.
fn full() -> bool {
    std::env::var_os("TANDEM_NEMESIS_FULL").is_some()
}

fn nemesis(args: &[&str], out: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("{out}-{}", std::process::id()));
    let r = nemesis_in(args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// `tandem nemesis ARGS --out DIR`, DIR kept.
fn nemesis_in(args: &[&str], dir: &std::path::Path) -> (bool, String) {
    let _alone =
        (!ALONE.with(|a| a.get())).then(|| CORES.write().unwrap_or_else(|p| p.into_inner()));
    let o = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("nemesis")
        .args(args)
        .arg("--out")
        .arg(&dir)
        .current_dir(common::workspace())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    eprintln!("{text}");
    (o.status.success(), text)
}

/// README's "Faults on a real network" command, as written: three
/// schedules over every fault class, no violation, every heal followed by
/// the cluster back within the bound.
#[test]
fn the_readme_nemesis_runs_as_written_and_ddp_survives_it() {
    let readme = std::fs::read_to_string(common::workspace().join("README.md")).unwrap();
    let section = readme.split("## Faults on a real network").nth(1).unwrap();
    let line = section
        .lines()
        .find(|l| l.starts_with("tandem nemesis"))
        .unwrap();
    let line = line.split('#').next().unwrap();
    let args: Vec<&str> = line.split_whitespace().skip(2).collect();
    assert!(
        args.contains(&"3"),
        "the README runs three schedules: {line}"
    );
    let (ok, text) = nemesis(&args, "tandem-nemesis-ok");
    assert!(ok, "the nemesis found a violation:\n{text}");
    assert!(text.contains("3 schedules, 0 failed"), "{text}");
    let heals = text.matches("after the heal, all serving").count();
    assert_eq!(heals, 9, "a line per heal:\n{text}");
}

/// A node that serves without a lease (a planted bug) is caught once a
/// partition leaves it in the minority with clients still reaching it; the
/// same bug under kill -9 alone goes unseen (the full tier, [`full`]). The
/// failure names a replay.
#[test]
fn a_node_serving_without_a_lease_is_caught_by_partitions_not_by_kills() {
    // Sessions time out after 250 ms and move to the next node, so during
    // a split they keep reaching the minority. Two splits catch it in most
    // schedules, but not all (none of seed 1's eight in one full-suite run,
    // with other nemesis tests sharing the two cores): schedules one at a
    // time until one does, at most six.
    let bug = ["--inject-bug", "ignore-lease"];
    let caught = (2..=7).find_map(|seed: u32| {
        let seed = seed.to_string();
        let split = [
            &bug[..],
            &["--seed", &seed, "--schedules", "1"],
            &["--faults", "split", "--faults-per-schedule", "2"],
        ]
        .concat();
        let (ok, text) = nemesis(&split, "tandem-nemesis-split");
        (!ok && text.contains("not linearizable")).then_some(text)
    });
    let text =
        caught.expect("six schedules of splits did not catch the node serving without a lease");
    assert!(text.contains("not linearizable"), "{text}");
    assert!(
        text.contains("replay:  tandem nemesis --system ddp"),
        "{text}"
    );
    if !full() {
        return;
    }
    let kills = [
        &bug[..],
        &["--seed", "1"],
        &[
            "--schedules",
            "1",
            "--faults",
            "kill",
            "--faults-per-schedule",
            "3",
        ],
    ]
    .concat();
    let (_, text) = nemesis(&kills, "tandem-nemesis-kill");
    // The claim is about safety: a liveness miss after a kill (one took
    // 2.6 s to rejoin in a full-suite run) is not this bug.
    assert!(
        !text.contains("not linearizable"),
        "kill -9 alone should not expose this bug:\n{text}"
    );
}

#[test]
fn bad_options_are_refused_before_anything_runs() {
    let (ok, text) = nemesis(&["--faults", "isolate,typo"], "tandem-nemesis-bad");
    assert!(!ok && text.contains("unknown fault class 'typo'"), "{text}");
    let (ok, text) = nemesis(&["--model", "causal-sync"], "tandem-nemesis-bad");
    assert!(!ok && text.contains("causal-sync"), "{text}");
    let (ok, text) = nemesis(
        &["--model", "lin-eventual", "--faults", "kill-all"],
        "tandem-nemesis-bad",
    );
    assert!(!ok && text.contains("persistency"), "{text}");
    let (ok, text) = nemesis(
        &["--system", "pandora", "--faults", "flip"],
        "tandem-nemesis-bad",
    );
    assert!(!ok && text.contains("do not talk to each other"), "{text}");
    let (ok, text) = nemesis(
        &["--system", "pandora", "--faults", "zk-cut"],
        "tandem-nemesis-bad",
    );
    assert!(!ok && text.contains("--membership zookeeper"), "{text}");
    let (ok, text) = nemesis(&["--system", "redis"], "tandem-nemesis-bad");
    assert!(!ok && text.contains("one of pandora, ddp"), "{text}");
    let (ok, text) = nemesis(
        &["--system", "kite", "--faults", "kill-all"],
        "tandem-nemesis-bad",
    );
    assert!(!ok && text.contains("crash-stop"), "{text}");
    let (ok, text) = nemesis(
        &["--system", "zab", "--faults", "manager"],
        "tandem-nemesis-bad",
    );
    assert!(!ok && text.contains("no configuration manager"), "{text}");
}

/// Three schedules of two faults over every class `system` takes: no
/// violation, and a line per heal.
fn survives(system: &str) {
    let args = [
        "--system",
        system,
        "--schedules",
        "3",
        "--seed",
        "1",
        "--faults-per-schedule",
        "2",
    ];
    let (ok, text) = nemesis(&args, &format!("tandem-nemesis-{system}"));
    assert!(ok, "the nemesis found a violation in {system}:\n{text}");
    assert!(text.contains("3 schedules, 0 failed"), "{text}");
    assert_eq!(
        text.matches("after the heal, all serving").count(),
        6,
        "{text}"
    );
}

#[test]
fn kite_survives_three_schedules_of_every_fault_it_takes() {
    survives("kite");
}

#[test]
fn the_zab_baseline_survives_three_schedules_of_every_fault_it_takes() {
    survives("zab");
}

/// `system` with the planted `bug`: `schedules` from seed 1, each of `n`
/// faults of the classes `faults`.
fn planted(system: &str, bug: &str, faults: &str, schedules: u32, n: u32) -> (bool, String) {
    let (schedules, n) = (schedules.to_string(), n.to_string());
    let args = [
        "--system",
        system,
        "--inject-bug",
        bug,
        "--schedules",
        &schedules,
        "--seed",
        "1",
        "--faults",
        faults,
        "--faults-per-schedule",
        &n,
    ];
    nemesis(&args, &format!("tandem-nemesis-{system}-{bug}-{faults}"))
}

/// `bug` is caught by one schedule of two `caught_by` faults, and (the
/// full tier, [`full`]) not by one of two kills (crash-stop: nothing ever
/// resyncs or falls behind and serves again).
fn caught_by_network_faults_not_kills(system: &str, bug: &str, caught_by: &str, what: &str) {
    let run = |faults: &str| planted(system, bug, faults, 1, 2);
    let (ok, text) = run(caught_by);
    assert!(
        !ok && text.contains(what),
        "{caught_by} did not catch {bug}:\n{text}"
    );
    assert!(
        text.contains(&format!("replay:  tandem nemesis --system {system}")),
        "{text}"
    );
    if !full() {
        return;
    }
    let (_, text) = run("kill");
    assert!(
        !text.contains(what),
        "kill -9 alone should not expose {bug}:\n{text}"
    );
}

/// A node that counts its lease from when the grant arrived, not from when
/// its heartbeat left (a planted bug): harmless while links are fast, so
/// kills never show it. A node alive and slow (`slow`: its links delayed
/// through the proxy, then its heartbeats lost) is removed by the manager
/// while late grants still extend its lease, and can serve stale reads.
/// Whether one lands in that window is chance: sessions leave a slow node
/// once a write there times out (250 ms). Here it caught the bug in one
/// schedule of six, so it runs on demand, alone and with eight schedules
/// (`cargo test --release -p tandem --test nemesis -- --ignored`).
#[test]
#[ignore = "probabilistic: one slow schedule in six catches it; run with --ignored"]
fn a_lease_counted_from_its_arrival_is_caught_by_a_slow_node_not_by_kills() {
    let run = |faults: &str, schedules| planted("ddp", "lease-from-receipt", faults, schedules, 2);
    let (ok, text) = alone(|| run("slow", 8));
    assert!(!ok && text.contains("not linearizable"), "{text}");
    let (_, text) = run("kill", 1);
    assert!(
        !text.contains("not linearizable"),
        "kill -9 alone should not expose lease-from-receipt:\n{text}"
    );
}

/// A replica that falls behind while cut off, then serves out-of-epoch
/// reads locally: release consistency breaks once it is reachable again.
#[test]
fn kite_serving_out_of_epoch_reads_is_caught_by_isolation_not_by_kills() {
    caught_by_network_faults_not_kills(
        "kite",
        "no-slow-path-refresh",
        "isolate",
        "not release consistent",
    );
}

/// ZAB as it was before the stall timer: a follower that lost a message
/// with its link never applies again.
#[test]
fn zab_without_its_stall_timer_is_caught_by_isolation_not_by_kills() {
    caught_by_network_faults_not_kills(
        "zab",
        "no-stall-timer",
        "isolate",
        "not every node served again",
    );
}

/// One model of each consistency family, and each persistency model once,
/// under one schedule of two faults, each checked by what its model
/// promises. The Causal ones also take bridges and one-way cuts, which once
/// left their replicas diverged for good (the anti-entropy resend order,
/// fixed; `crates/ddp/tests/anti_entropy.rs`). The Transactional ones:
/// `trans_synch_survives_the_nemesis`.
fn ddp_model_survives(model: &str) {
    let faults = match model.split('-').next() {
        Some("causal") => "isolate,bridge,one-way,pause,loss,kill",
        _ => "isolate,split,pause,loss,kill",
    };
    let args = [
        "--system",
        "ddp",
        "--model",
        model,
        "--schedules",
        "1",
        "--seed",
        "2",
        "--faults",
        faults,
        "--faults-per-schedule",
        "2",
    ];
    let (ok, text) = nemesis(&args, &format!("tandem-nemesis-{model}"));
    assert!(ok, "the nemesis found a violation in {model}:\n{text}");
    assert!(text.contains("1 schedules, 0 failed"), "{text}");
}

/// Strict, Synch and RE persistency (Scope and Eventual below).
#[test]
fn lin_strict_re_synch_and_re_re_survive_the_nemesis() {
    ddp_model_survives("lin-strict");
    ddp_model_survives("re-synch");
    ddp_model_survives("re-re");
}

#[test]
fn causal_scope_and_eventual_eventual_survive_the_nemesis() {
    ddp_model_survives("causal-scope");
    ddp_model_survives("eventual-eventual");
}

/// `trans-synch` as `ddp_model_survives` runs the others (seed 2 draws a
/// one-way cut and a whole-cluster crash). Also: the schedule's
/// transactions (`transactions.jsonl`) pass the serializability check,
/// and fail it once one committed transaction that another read from is
/// marked aborted (the check reads the real history).
///
/// It runs alone: its liveness bound compares throughput after each heal
/// with the rate before the faults, and another run starting beside it
/// halves the one without the other (1.7 s to come back in one full-suite
/// run, against 0.1 to 0.2 s alone).
#[test]
fn trans_synch_survives_the_nemesis() {
    alone(trans_synch_nemesis);
}

fn trans_synch_nemesis() {
    use tandem_check::serial::{check_serializable, TxHist, TxOutcome};
    let dir = std::env::temp_dir().join(format!("tandem-nemesis-tx-{}", std::process::id()));
    let args = [
        "--system",
        "ddp",
        "--model",
        "trans-synch",
        "--schedules",
        "1",
        "--seed",
        "2",
    ];
    let faults = [
        "--faults",
        "one-way,kill-all,isolate,pause,kill",
        "--faults-per-schedule",
        "2",
    ];
    let (ok, text) = nemesis_in(&[&args[..], &faults].concat(), &dir);
    assert!(ok && text.contains("1 schedules, 0 failed"), "{text}");
    assert!(
        text.contains("drop ") && text.contains("kill -9 all"),
        "{text}"
    );
    let file = std::fs::read_to_string(dir.join("seed-2/transactions.jsonl")).unwrap();
    let mut txs: Vec<TxHist> = file
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stats = check_serializable(&txs).unwrap();
    assert!(stats.transactions > 100, "{stats:?}");
    let read_from = |t: &TxHist| {
        let writes: Vec<(u64, Option<u64>)> = t
            .steps
            .iter()
            .filter(|s| s.write)
            .map(|s| (s.key, s.value))
            .collect();
        let other = |o: &TxHist| {
            o.outcome == TxOutcome::Committed && (o.session, o.tx) != (t.session, t.tx)
        };
        txs.iter().filter(|o| other(o)).any(|o| {
            o.steps
                .iter()
                .any(|s| !s.write && writes.contains(&(s.key, s.value)))
        })
    };
    let i = (0..txs.len())
        .find(|&i| txs[i].outcome == TxOutcome::Committed && read_from(&txs[i]))
        .expect("a committed transaction another one read from");
    txs[i].outcome = TxOutcome::Aborted;
    let e = check_serializable(&txs).unwrap_err();
    assert!(e.starts_with("G1a"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// HEAL: nodes restarted under every class, `recover` among them (a node
/// killed, then recovering with HEAL while another fault holds).
#[test]
fn heal_survives_three_schedules_with_recoveries_under_faults() {
    survives("heal");
}

/// HEAL's own planted bugs are caught by kills alone over processes, so the
/// bug that shows partitions matter on HEAL's cluster is the lease one: a
/// node that serves without a lease.
#[test]
fn a_heal_node_serving_without_a_lease_is_caught_by_partitions_not_by_kills() {
    // Two schedules of four splits: one caught it in most runs, once not
    // while another nemesis test shared the two cores.
    let run = |faults: &str, n, schedules| planted("heal", "ignore-lease", faults, schedules, n);
    let (ok, text) = run("split", 4, 2);
    assert!(!ok && text.contains("not linearizable"), "{text}");
    assert!(
        text.contains("replay:  tandem nemesis --system heal"),
        "{text}"
    );
    if !full() {
        return;
    }
    let (_, text) = run("kill", 3, 1);
    assert!(
        !text.contains("not linearizable"),
        "kill -9 alone should not expose this bug:\n{text}"
    );
}

/// Pandora: three schedules of two faults over every class it takes
/// (memory servers replaced, compute servers back as new incarnations),
/// then every compute server killed and `check-cluster`'s checks.
///
/// Alone: its liveness bound is throughput back to half of what it was
/// before the first fault, and a neighbour whose load rises in between (a
/// ZooKeeper starting for the replicated detector's test) held it at 40 %
/// for four seconds after a heal, with nothing wrong in Pandora.
#[test]
fn pandora_survives_three_schedules_of_every_fault_it_takes() {
    alone(pandora_three_schedules);
}

fn pandora_three_schedules() {
    let args = [
        "--system",
        "pandora",
        "--schedules",
        "3",
        "--seed",
        "1",
        "--faults-per-schedule",
        "2",
    ];
    let (ok, text) = nemesis(&args, "tandem-nemesis-pandora");
    assert!(ok, "the nemesis found a violation in Pandora:\n{text}");
    assert!(text.contains("3 schedules, 0 failed"), "{text}");
    assert_eq!(
        text.matches("after the heal, all serving").count(),
        6,
        "{text}"
    );
}

/// A membership that publishes a failed compute server's ids as soon as it
/// declares it, before revocation and log recovery (a planted bug): live
/// coordinators steal its locks while it may still run. A false suspicion
/// whose revocation is slowed by the membership's own network (`suspect`)
/// exposes it: acknowledged writes are lost, or the resumed server finds a
/// lock it held stolen. Real crashes alone (`kill`) do not: recovery
/// follows within milliseconds and the dead server writes nothing more.
/// One schedule of three suspicions catches it in most runs, not all (one
/// missed it in a full-suite run): schedules one at a time until one does,
/// at most four.
#[test]
fn pandora_publishing_failed_ids_early_is_caught_by_suspicions_not_by_kills() {
    let bug = "publish-before-recovery";
    let caught =
        |t: &str| t.contains("acknowledged writes allow") || t.contains("exited by itself");
    let text = (1..=4).find_map(|seed: u32| {
        let seed = seed.to_string();
        let args = [
            &["--system", "pandora", "--inject-bug", bug, "--seed", &seed][..],
            &[
                "--schedules",
                "1",
                "--faults",
                "suspect",
                "--faults-per-schedule",
                "3",
            ],
        ]
        .concat();
        let (ok, text) = nemesis(&args, "tandem-nemesis-pandora-early");
        (!ok && caught(&text)).then_some(text)
    });
    let text = text.expect("four schedules of suspicions did not catch the early publication");
    assert!(
        text.contains("replay:  tandem nemesis --system pandora"),
        "{text}"
    );
    if !full() {
        return;
    }
    let (_, text) = planted("pandora", bug, "kill", 1, 3);
    assert!(
        !caught(&text),
        "kill -9 alone should not expose it:\n{text}"
    );
}

/// Every compute server's log of every schedule under `dir`, concatenated.
fn compute_logs(dir: &std::path::Path) -> String {
    let schedules = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let files = schedules.flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten().flatten());
    files
        .filter(|f| f.file_name().to_string_lossy().starts_with("compute-"))
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .collect()
}

/// Pandora's commit on a link a middlebox resets (`reset`): the memory
/// server stays up for the membership, so a commit that missed its write
/// there waits for a verdict, and the compute server ends its incarnation
/// when it is overdue. Two schedules of three resets pass, and an
/// incarnation ends on a reset link.
#[test]
fn pandora_survives_resets_by_ending_the_incarnation() {
    let args = [&["--system", "pandora", "--schedules", "2"][..], &RESETS].concat();
    let dir = std::env::temp_dir().join(format!("tandem-nemesis-reset-{}", std::process::id()));
    let (ok, text) = nemesis_in(&args, &dir);
    let logs = compute_logs(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "the nemesis found a violation under resets:\n{text}");
    assert!(
        logs.contains("unreachable for"),
        "no compute server ended its incarnation on a reset link:\n{text}"
    );
}

const RESETS: [&str; 4] = ["--faults", "reset", "--faults-per-schedule", "3"];

/// The old rule (`ack-missed-replica`: a failed write is a dead replica)
/// acknowledges commits a live replica missed, and recovery rolls some
/// back; a later write to the same key on both replicas hides the rest.
/// Caught in three of eight schedules alone here, but in none of six in a
/// full-suite run; the simulation test
/// `a_commit_that_missed_a_live_replica_waits_for_the_verdict`
/// (crates/pandora-lab/tests/sim_bank.rs) catches it at once and is the
/// gate. A memory server killed (`kill`) is declared failed, which hides it.
#[test]
#[ignore = "probabilistic: three schedules of eight catch it when run alone; run with --ignored"]
fn pandora_acknowledging_a_commit_a_live_replica_missed_is_caught_by_resets_not_by_kills() {
    let bug = "ack-missed-replica";
    let caught = |t: &str| t.contains("acknowledged writes allow") || t.contains(" != replica");
    let text = (1..=8).find_map(|seed: u32| {
        let seed = seed.to_string();
        let args = [
            &["--system", "pandora", "--inject-bug", bug, "--seed", &seed][..],
            &["--schedules", "1"],
            &RESETS,
        ]
        .concat();
        let (ok, text) = alone(|| nemesis(&args, "tandem-nemesis-pandora-ack"));
        (!ok && caught(&text)).then_some(text)
    });
    text.expect("eight schedules of resets did not catch ack-missed-replica");
    let (_, text) = planted("pandora", bug, "kill", 1, 3);
    assert!(
        !caught(&text),
        "kill -9 alone should not expose it:\n{text}"
    );
}

/// Pandora with its failure detector replicated over ZooKeeper: the leading
/// replica cut off from everyone, or ZooKeeper cut from one replica, for
/// 5 s, longer than the 4 s session, so a cut-off leader is replaced. One
/// schedule of each; the leader cut in the full tier ([`full`]) (the plain
/// membership runs three in
/// `pandora_survives_three_schedules_of_every_fault_it_takes`).
#[test]
fn pandora_with_a_replicated_failure_detector_survives_its_replicas_cut_off() {
    let classes: &[&str] = if full() {
        &["zk-cut", "manager"]
    } else {
        &["zk-cut"]
    };
    for &faults in classes {
        let args = [
            &["--system", "pandora", "--membership", "zookeeper"][..],
            &["--schedules", "1", "--seed", "1", "--faults", faults],
            &["--faults-per-schedule", "1", "--fault-ms", "5000"],
        ]
        .concat();
        let (ok, text) = nemesis(&args, "tandem-nemesis-pandora-zk");
        assert!(
            ok,
            "the nemesis found a violation in Pandora over ZooKeeper ({faults}):\n{text}"
        );
        assert!(text.contains("1 schedules, 0 failed"), "{text}");
        assert!(
            text.contains("membership replicas over ZooKeeper"),
            "{text}"
        );
    }
}

fn dart(args: &[&str]) -> (bool, String) {
    let _shared =
        (!ALONE.with(|a| a.get())).then(|| CORES.read().unwrap_or_else(|p| p.into_inner()));
    let o = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "dart", "--store", "pandora", "--fabric", "tcp", "--txs", "2000",
        ])
        .args(args)
        .current_dir(common::workspace())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    let kept: Vec<&str> = text.lines().filter(|l| !l.contains(" WARN ")).collect();
    eprintln!("{}", kept.join("\n"));
    (o.status.success(), text)
}

/// DART over processes with network faults on its litmus workers: workers
/// cut off, lossy, paused, suspected while alive with transactions in
/// flight. The history checker and the final assertions find nothing, and
/// at least one worker was fenced while alive (the faults bit).
#[test]
fn dart_finds_nothing_wrong_with_workers_fenced_while_alive() {
    let (ok, text) = dart(&["--net-faults", "all", "--seed", "10", "--seeds", "2"]);
    assert!(
        ok && text.contains("2 runs") && text.contains(" 0 violations"),
        "{text}"
    );
    assert!(
        text.contains("declared failed while alive"),
        "no worker was fenced:\n{text}"
    );
}

/// A membership that publishes failed ids before log recovery ends (the
/// planted bug) is caught by DART's history checker when a worker is
/// suspected while alive and its revocation is slow (`suspect`); DART's
/// kill -9 runs do not catch it (3 seeds with the bug, 0 violations).
/// Alone: the window is a slow revocation.
#[test]
fn dart_catches_early_publication_under_suspicion() {
    alone(dart_catches_early_publication);
}

fn dart_catches_early_publication() {
    // One seed catches it in about two runs of three (6 of 8 measured):
    // seeds one at a time, until one does (at most six).
    let caught = (1..=6).find_map(|seed: u32| {
        let seed = seed.to_string();
        let bug = [
            "--inject-bug",
            "publish-before-recovery",
            "--seed",
            &seed,
            "--seeds",
            "1",
        ];
        let (_, text) = dart(&[&bug[..], &["--net-faults", "suspect"]].concat());
        (text.contains("VIOLATION [") && text.contains("G2")).then_some(text)
    });
    let text = caught.expect("publish-before-recovery not caught in six seeds");
    assert!(
        text.contains("replay: cargo run --release -- dart --store pandora --fabric tcp"),
        "{text}"
    );
    assert!(text.contains("--net-faults suspect"), "{text}");
}
