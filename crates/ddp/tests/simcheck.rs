//! Every implemented model keeps its promises under message faults and
//! crashes, in seeded simulations (docs/DDP.md, "Check labels").
//!
//! The runs with a mutant switch the engine's own assertions off
//! (`cfg.assertions = false`): they show that the checkers catch each
//! mutant on their own. `tests/assertions.rs` runs them with assertions on.

use tandem_ddp::simcheck::{run, CheckConfig, Crash};
use tandem_ddp::Model;

fn seeds() -> u64 {
    std::env::var("DDP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

fn clean(model: &str, crash: Crash) {
    let model = Model::parse(model).unwrap();
    for seed in 0..seeds() {
        let mut cfg = CheckConfig::new(model, seed);
        cfg.crash = crash;
        let r = run(&cfg);
        assert!(
            r.violations.is_empty(),
            "{model} seed {seed}: {}\nreplay: {}",
            r.violations.join("\n"),
            r.replay
        );
        assert!(
            r.completed > cfg.sessions * cfg.ops / 2,
            "{model} seed {seed}: only {} completed",
            r.completed
        );
    }
}

#[test]
fn lin_synch_without_crashes() {
    clean("lin-synch", Crash::None);
}

#[test]
fn lin_synch_one_crash() {
    clean("lin-synch", Crash::One);
}

#[test]
fn lin_synch_whole_cluster_crash() {
    clean("lin-synch", Crash::All);
}

#[test]
fn every_implemented_model_keeps_its_promises() {
    for model in Model::all().into_iter().filter(|m| m.implemented()) {
        for crash in [Crash::None, Crash::One, Crash::All] {
            clean(&model.to_string(), crash);
        }
    }
}

/// The first seed below `budget` whose run reports a violation.
fn caught(
    model: &str,
    crash: Crash,
    bug: &str,
    persist_ns: u64,
    budget: u64,
) -> Option<(u64, String)> {
    let model = Model::parse(model).unwrap();
    let bugs = tandem_ddp::Bugs::parse(&[bug.to_string()]).unwrap();
    (0..budget).find_map(|seed| {
        let mut cfg = CheckConfig::new(model, seed);
        cfg.crash = crash;
        (cfg.bugs, cfg.assertions) = (bugs, false);
        cfg.persist_ns = persist_ns;
        let r = run(&cfg);
        (!r.violations.is_empty()).then(|| (seed, r.violations.join("\n")))
    })
}

/// Each protocol mutant is caught by the checkers within 20 seeds.
#[test]
fn mutants_are_caught() {
    // An early scope ACK shows only when a follower's NVM is slower than
    // the network round trip, hence the 2 µs persists there.
    for (model, bug, expect, persist_ns) in [
        ("lin-synch", "reply-before-last-ack", "S-1", 400),
        (
            "lin-eventual",
            "reply-before-last-ack",
            "linearizability",
            400,
        ),
        ("lin-synch", "val-before-persist", "G1", 400),
        ("re-re", "val-before-persist", "G1", 400),
        ("lin-eventual", "read-in-invalid", "linearizability", 400),
        ("lin-synch", "read-in-invalid", "RP-1", 400),
        ("lin-scope", "early-scope-ack", "SC-1", 2_000),
        // The UPD family (Causal and Eventual consistency).
        ("causal-synch", "causal-early-apply", "C1", 400),
        ("causal-eventual", "causal-early-apply", "C1", 400),
        ("causal-re", "causal-early-apply", "C2", 400),
        ("eventual-strict", "reply-before-last-ack", "S-1", 400),
        ("causal-strict", "val-before-persist", "G1", 400),
        ("causal-synch", "read-in-invalid", "C1'", 400),
        ("eventual-re", "read-in-invalid", "RP-1'", 400),
        ("causal-scope", "early-scope-ack", "SC-1", 2_000),
        // Transactions: End before every vote, read-uncommitted, votes and
        // INITX ACKs before their persist, no conflict detection.
        ("trans-synch", "reply-before-last-ack", "T-2", 400),
        ("trans-strict", "reply-before-last-ack", "T-2", 400),
        ("trans-eventual", "read-in-invalid", "G1a", 400),
        ("trans-re", "read-in-invalid", "G1a", 400),
        ("trans-synch", "val-before-persist", "G1", 400),
        ("trans-scope", "skip-conflict-check", "serializability", 400),
    ] {
        let found = caught(model, Crash::None, bug, persist_ns, 20);
        let (seed, v) =
            found.unwrap_or_else(|| panic!("{model} with {bug}: no violation in 20 seeds"));
        assert!(
            v.lines().any(|l| l.starts_with(expect)),
            "{model} with {bug} (seed {seed}): expected {expect}, got {v}"
        );
        eprintln!(
            "{model} with {bug}: caught at seed {seed}: {}",
            v.lines().next().unwrap_or("")
        );
    }
    // An End answered before the decision is durable shows only after a
    // whole-cluster crash: completed transactions are lost (T-3).
    for model in ["trans-synch", "trans-strict"] {
        let found = caught(model, Crash::All, "commit-before-persist", 400, 20);
        let (seed, v) = found.unwrap_or_else(|| {
            panic!("{model} with commit-before-persist: no violation in 20 seeds")
        });
        assert!(
            v.lines().any(|l| l.starts_with("T-3")),
            "{model} with commit-before-persist (seed {seed}): expected T-3, got {v}"
        );
    }
}

/// Spec §13.4: the weaker models really lose what they do not promise to
/// keep after a whole-cluster crash (so the post-crash checks are not
/// vacuous): acknowledged writes (non-stale reads fail), and for some also
/// versions reads returned (monotonic reads fail).
#[test]
fn weaker_models_show_the_losses_they_allow() {
    for (model, acked, read) in [
        ("re-synch", true, false),
        ("lin-re", true, false),
        ("lin-eventual", false, true),
        ("re-eventual", false, true),
        ("lin-scope", false, true),
        ("causal-synch", true, false),
        ("causal-re", true, false),
        ("eventual-synch", true, true),
        ("trans-re", true, false),
        ("trans-scope", true, true),
        ("trans-eventual", true, true),
    ] {
        let m = Model::parse(model).unwrap();
        let (mut lost, mut vanished) = (0, 0);
        for seed in 0..20 {
            let mut cfg = CheckConfig::new(m, seed);
            cfg.crash = Crash::All;
            // An NVM much slower than a network round trip: writes that do
            // not wait for persistence are acknowledged long before it.
            cfg.persist_ns = 10_000;
            // Many keys: under Lin a key takes its next write only once the
            // previous one validated, so few writes are in flight per key.
            (cfg.keys, cfg.sessions) = (64, 20);
            let r = run(&cfg);
            assert!(
                r.violations.is_empty(),
                "{model} seed {seed}: {:?}",
                r.violations
            );
            lost += r.lost_acked_writes;
            vanished += r.vanished_reads;
        }
        eprintln!("{model}: {lost} acknowledged writes lost, {vanished} read versions vanished over 20 crashes");
        assert!(
            (lost > 0 || !acked) && (vanished > 0 || !read),
            "{model}: lost {lost}, vanished {vanished}"
        );
    }
}

/// A member crashes while another catches up by a full copy (`buddy`).
/// Eventual consistency sends its updates lazily, so the crashed member's
/// last updates may have reached only the catching-up node, inside its
/// copy. These seeds diverged (G6) before that node logged what it adopted
/// (`copy-unlogged` brings it back). An origin that crashes leaves a gap in
/// its updates, and anti-entropy must learn which ones lie past it, or logs
/// never drain and nodes never settle (`gossip-prefix-only`; since copies
/// carry whole logs, the gaps come from an origin cut off and crashed:
/// `copy-source`, eventual-re seeds 11 and 51).
#[test]
fn lazy_updates_survive_a_crash_during_a_copy() {
    let cases = [
        ("eventual-synch", Crash::Buddy, &[6, 27, 58][..]),
        ("eventual-re", Crash::Buddy, &[4, 6, 46]),
        ("eventual-eventual", Crash::Buddy, &[18, 42, 47]),
        ("eventual-re", Crash::CopySource, &[11, 51]),
    ];
    let check = |bug: Option<&str>| {
        let mut found = Vec::new();
        for (model, crash, seeds) in cases {
            for &seed in seeds {
                let mut cfg = CheckConfig::new(Model::parse(model).unwrap(), seed);
                cfg.crash = crash;
                if let Some(b) = bug {
                    cfg.bugs = tandem_ddp::Bugs::parse(&[b.to_string()]).unwrap();
                    cfg.assertions = false;
                }
                found.extend(run(&cfg).violations);
            }
        }
        found
    };
    let v = check(None);
    assert!(v.is_empty(), "{v:?}");
    let diverged = check(Some("copy-unlogged"));
    assert!(
        diverged.iter().any(|l| l.contains("after quiescence node")),
        "copy-unlogged: {diverged:?}"
    );
    let stuck = check(Some("gossip-prefix-only"));
    assert!(
        stuck.iter().any(|l| l.contains("not settled")),
        "gossip-prefix-only: {stuck:?}"
    );
}

/// A node that restarts copies from a member that alone holds some
/// updates (their origin was cut off from every other member, then
/// crashed), and that member crashes right after serving the copy
/// (`Crash::CopySource`). The copy carries the member's log, so the
/// copying node sends those updates on, each with its cauhist. With
/// `copy-unlogged` (Causal's old behaviour: the updates live only in its
/// copied versions) the replicas diverge or sessions wait forever.
/// Reliable links here: with message loss the same faults can also orphan
/// updates whose cauhist died with both crashed nodes, which is found, not
/// fixed (docs/DDP.md).
#[test]
fn a_copy_carries_the_sources_log() {
    let check = |model: &str, bug: Option<&str>| {
        let mut bad = Vec::new();
        for seed in 0..seeds() + 4 {
            let mut cfg = CheckConfig::new(Model::parse(model).unwrap(), seed);
            (cfg.crash, cfg.net_faults) = (Crash::CopySource, false);
            if let Some(b) = bug {
                cfg.bugs = tandem_ddp::Bugs::parse(&[b.to_string()]).unwrap();
                cfg.assertions = false;
            }
            let r = run(&cfg);
            bad.extend(
                r.violations
                    .first()
                    .map(|v| format!("{v} (replay: {})", r.replay)),
            );
        }
        bad
    };
    // Eventual's copy gap has its own test (lazy_updates_survive_a_crash_during_a_copy).
    let v = check("eventual-synch", None);
    assert!(v.is_empty(), "eventual-synch: {v:?}");
    for model in ["causal-eventual", "causal-scope"] {
        let v = check(model, None);
        assert!(v.is_empty(), "{model}: {v:?}");
        let caught = check(model, Some("copy-unlogged"));
        assert!(!caught.is_empty(), "{model}: copy-unlogged never caught");
        eprintln!(
            "{model} with copy-unlogged: {} of {} seeds caught",
            caught.len(),
            seeds() + 4
        );
    }
}

/// Causal: when both nodes that held some updates crash (the origin cut
/// off from all but one member, then that member), the updates that follow
/// them and the sessions whose past holds them must not wait forever: the
/// members give up on them once the dead origin's survivors stay put, and
/// answer those sessions `PastLost`. With `orphans-kept` they wait (G6).
#[test]
fn orphaned_updates_are_given_up_and_their_sessions_told() {
    let runs = |model: &str, bug: Option<&str>, net_faults: bool| {
        let bugs: Vec<String> = bug.map(String::from).into_iter().collect();
        let reports = (0..seeds() + 4).map(|seed| {
            let mut cfg = CheckConfig::new(Model::parse(model).unwrap(), seed);
            (cfg.crash, cfg.net_faults) = (Crash::CopySource, net_faults);
            cfg.bugs = tandem_ddp::Bugs::parse(&bugs).unwrap();
            cfg.assertions = bug.is_none();
            run(&cfg)
        });
        reports.collect::<Vec<_>>()
    };
    let first = |r: tandem_ddp::simcheck::CheckReport| {
        r.violations
            .first()
            .map(|v| format!("{v} (replay: {})", r.replay))
    };
    for model in [
        "causal-synch",
        "causal-re",
        "causal-strict",
        "causal-scope",
        "causal-eventual",
    ] {
        for net_faults in [false, true] {
            let (mut bad, mut told) = (Vec::new(), 0);
            for r in runs(model, None, net_faults) {
                told += r.pasts_lost;
                bad.extend(first(r));
            }
            assert!(bad.is_empty(), "{model} (net faults {net_faults}): {bad:?}");
            eprintln!("{model} (net faults {net_faults}): {told} operations answered PastLost");
        }
    }
    // No one gives up anything without two crashed holders.
    for crash in [Crash::One, Crash::Two, Crash::Buddy, Crash::Suspect] {
        for seed in 0..seeds() {
            let mut cfg = CheckConfig::new(Model::parse("causal-synch").unwrap(), seed);
            cfg.crash = crash;
            let r = run(&cfg);
            assert_eq!(
                r.pasts_lost, 0,
                "PastLost without a double crash: {}",
                r.replay
            );
        }
    }
    let caught: Vec<String> = runs("causal-synch", Some("orphans-kept"), false)
        .into_iter()
        .filter_map(first)
        .collect();
    assert!(!caught.is_empty(), "orphans-kept never caught");
    eprintln!(
        "causal-synch with orphans-kept: {} of {} seeds caught",
        caught.len(),
        seeds() + 4
    );
}

/// A node that rejoins by copy drops the versions only its NVM held; its
/// next write of such a key must take a timestamp past the NVM's, or it is
/// taken for the old version (its persist skipped) and the session's read
/// of its own write returns the copied, older value (C1'). Found by the
/// copy-source checks at these seeds; `ts-below-nvm` is the old rule.
#[test]
fn a_write_after_a_rejoin_takes_a_timestamp_past_its_nvm() {
    let run_at = |seed: u64, bug: &[String]| {
        let mut cfg = CheckConfig::new(Model::parse("causal-synch").unwrap(), seed);
        cfg.crash = Crash::CopySource;
        cfg.bugs = tandem_ddp::Bugs::parse(bug).unwrap();
        cfg.assertions = bug.is_empty();
        run(&cfg)
    };
    let mutant = ["ts-below-nvm".to_string()];
    for seed in [1000, 1073] {
        let r = run_at(seed, &[]);
        assert!(r.violations.is_empty(), "{:?} ({})", r.violations, r.replay);
        let r = run_at(seed, &mutant);
        assert!(
            r.violations.iter().any(|v| v.contains("read-your-writes")),
            "seed {seed}: ts-below-nvm not caught (if the interleaving moved, find new seeds with \
             `tandem ddp check --model causal-synch --crash copy-source --seed 1000 --seeds 100 \
             --inject-bug ts-below-nvm`): {:?}",
            r.violations
        );
    }
}

/// Every UPD-family model keeps its promises, converges and settles when
/// crashes hit during recovery (`buddy`, `again`) or while a node is away
/// (`two`).
#[test]
fn the_upd_family_recovers_through_crashes_during_recovery() {
    for model in Model::all().into_iter().filter(|m| {
        let name = m.to_string();
        name.starts_with("causal") || name.starts_with("eventual")
    }) {
        for crash in [Crash::Buddy, Crash::Again, Crash::Two] {
            clean(&model.to_string(), crash);
        }
    }
}

/// A restarted `tandem node` boots in epoch 0 and its clients come back to
/// it. Its updates must not reuse the ids of its last life, which the
/// others applied and would drop as duplicates: each life persists a new
/// incarnation before it writes. With `reuse-origin` the restarted node's
/// writes never leave it (G6), or a session that moves on misses them.
#[test]
fn a_restarted_node_takes_a_new_incarnation() {
    let model = Model::parse("eventual-synch").unwrap();
    let bugs = tandem_ddp::Bugs::parse(&["reuse-origin".to_string()]).unwrap();
    let mut caught = 0;
    for seed in 0..10 {
        let mut cfg = CheckConfig::new(model, seed);
        cfg.crash = Crash::One;
        let r = run(&cfg);
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        (cfg.bugs, cfg.assertions) = (bugs, false);
        caught += usize::from(!run(&cfg).violations.is_empty());
    }
    assert!(caught >= 5, "reuse-origin caught in {caught} of 10 seeds");
}

/// False suspicion: a node that is alive, slow (`Suspect`) or cut off
/// (`Isolated`), is removed and added back without a restart; with
/// `SuspectSpread` the nodes hear of it at different times. Every model
/// keeps its promises, converges and settles.
#[test]
fn a_falsely_suspected_node_comes_back_without_harm() {
    for model in Model::all().into_iter().filter(|m| m.implemented()) {
        for crash in [Crash::Suspect, Crash::Isolated, Crash::SuspectSpread] {
            clean(&model.to_string(), crash);
        }
    }
}

/// A node killed and restarted within its lease (a supervisor) is never
/// silent long enough to be removed. The configuration manager's own code
/// decides (`Manager::linked`): the new run's boot id removes it and its
/// heartbeat adds it back. Every model then keeps its promises; before,
/// the Transactional models left its prepared transactions unsettled at
/// the others (G6 in 8 of 30 trans-synch seeds).
#[test]
fn a_node_restarted_within_its_lease_is_removed_and_added_back() {
    for model in Model::all().into_iter().filter(|m| m.implemented()) {
        clean(&model.to_string(), Crash::Bounce);
    }
}

/// A flapping network, found on real processes (`tandem nemesis --faults
/// flip`) before the simulator had it: a node removed while cut off is
/// re-added once only the manager reaches it, still cut off from the
/// members it must copy from, and the manager would remove those silent
/// members. Left alone with its copy sources gone, the node served what it
/// never received (C11 in 100 of 100 lin-synch seeds). The manager now
/// keeps a caught-up member in every configuration (`Manager::tick`), and
/// every model keeps its promises.
///
/// Cut off from the manager as well, the node never hears its own removal
/// (found on processes: a lost update under trans-synch). Re-added, it took
/// the new configuration for one it had always been in, said it was caught
/// up, and the manager removed the others: 20 of 20 lin-synch seeds and 19
/// of 20 trans-synch seeds broke. Configurations now name the epoch each
/// re-added member joined (mutant `unheard-removal`: the old rule).
///
/// On processes the others fall silent one by one, so the manager keeps
/// one of them and removes the rest; they relink first after the heal,
/// copy from the kept one, and once one is caught up the manager removes
/// the kept one, which relinks last. The re-added node had asked only the
/// kept one, so its catch-up ended with nothing copied (C11 in 33 of 40
/// lin-synch seeds, a dependency cycle on processes). A node now asks
/// again when a member leaves before answering (mutant
/// `source-left-ready`: the old rule).
#[test]
fn a_node_re_added_while_cut_off_never_serves_alone() {
    for model in Model::all().into_iter().filter(|m| m.implemented()) {
        clean(&model.to_string(), Crash::Flip);
    }
    for (model, bug) in [
        ("lin-synch", "unheard-removal"),
        ("trans-synch", "unheard-removal"),
        ("lin-synch", "source-left-ready"),
        ("trans-synch", "source-left-ready"),
    ] {
        let (seed, _) = caught(model, Crash::Flip, bug, 400, 6)
            .unwrap_or_else(|| panic!("{model}: {bug} not caught in 6 seeds"));
        eprintln!("{model} with {bug}: caught at seed {seed}");
    }
}

/// A coordinator and two members, removed while cut off from the manager
/// alone, finish a transaction in their old epoch with votes all given
/// before the removal, and commit. A member that had voted Prepared then
/// settles it in the new configuration, where the victim of the flip, added
/// back since and never told of it, was asked: its refusal made the settler
/// abort what the coordinator had committed (T-5). Only a member that has
/// been one since the transaction began may now refuse it to a settler
/// (`trans-synch --seed 34 --crash flip`; mutant `undecisive-refusal`).
#[test]
fn a_settler_aborts_only_on_a_refusal_that_vouches_for_the_coordinator() {
    clean_flip_seed("trans-synch", 34);
    let mut cfg = CheckConfig::new(Model::parse("trans-synch").unwrap(), 34);
    cfg.crash = Crash::Flip;
    cfg.bugs = tandem_ddp::Bugs::parse(&["undecisive-refusal".to_string()]).unwrap();
    cfg.assertions = false;
    let r = run(&cfg);
    assert!(
        r.violations.iter().any(|v| v.starts_with("T-5")),
        "the old rule should decide seed 34's transaction both ways: {:?}",
        r.violations
    );
}

/// A node removed while alive takes the copies' state when it is added
/// back, and gets its own updates that only it held back from the members
/// its log sent them to. Such an update is in its NVM already, so nothing
/// persisted it again, and the key's durable version stayed the copied,
/// older one: a Synch read (the newest durable version) then returned a
/// version older than the session's own write (C1', `causal-synch --seed 21
/// --crash flip`). Re-applying a version that is in NVM now makes it the
/// durable one.
#[test]
fn a_node_added_back_reads_its_own_update_once_it_has_it_again() {
    clean_flip_seed("causal-synch", 21);
}

/// `model` under `--crash flip` at `seed`: no violation.
fn clean_flip_seed(model: &str, seed: u64) {
    let mut cfg = CheckConfig::new(Model::parse(model).unwrap(), seed);
    cfg.crash = Crash::Flip;
    let r = run(&cfg);
    assert!(
        r.violations.is_empty(),
        "{}\nreplay: {}",
        r.violations.join("\n"),
        r.replay
    );
}

/// Members hear a re-add at different times. A member still in the epoch
/// that left the node out served its copy request, then acknowledged a
/// newer write of a copied key there; the write ended without the node,
/// which came back online stale (C11). A copy asked in an epoch the member
/// has not reached now waits for it (mutant `copy-in-old-epoch`), and a
/// member no longer ACKs an INV of an epoch it left (alone, that fixed
/// `lin-scope --seed 3 --crash suspect-spread`; the copy rule covers it too).
#[test]
fn a_copy_is_served_only_in_the_epoch_it_was_asked_in() {
    let seed = caught_as(
        "lin-synch",
        Crash::SuspectSpread,
        "copy-in-old-epoch",
        "C11:",
    );
    eprintln!("lin-synch with copy-in-old-epoch: caught at seed {seed}");
}

/// The first seed below 30 whose violations include one containing
/// `expect`, under `bug`.
fn caught_as(model: &str, crash: Crash, bug: &str, expect: &str) -> u64 {
    let model = Model::parse(model).unwrap();
    let bugs = tandem_ddp::Bugs::parse(&[bug.to_string()]).unwrap();
    (0..30)
        .find(|&seed| {
            let mut cfg = CheckConfig::new(model, seed);
            (cfg.crash, cfg.bugs, cfg.assertions) = (crash, bugs, false);
            run(&cfg).violations.iter().any(|v| v.contains(expect))
        })
        .unwrap_or_else(|| panic!("{model} with {bug}: no {expect} in 30 seeds"))
}

/// Transactional consistency, a coordinator removed while alive: the
/// members settle its transactions without it. It answers its clients at
/// once (Aborted before ENDX, OutcomeUnknown after), keeps only the
/// transactions it voted Prepared on (votes are stable), and settles those
/// once re-added. Mutants: `silent-removal` (the old behaviour: its
/// clients wait forever) and `kept-unsettled` (it keeps a transaction the
/// members decided without it and never learns how: it never settles).
#[test]
fn a_removed_coordinator_answers_its_clients_and_holds_nothing() {
    for model in ["trans-synch", "trans-re"] {
        let seed = caught_as(model, Crash::Suspect, "silent-removal", "still outstanding");
        eprintln!("{model} with silent-removal: caught at seed {seed}");
        let seed = caught_as(model, Crash::Suspect, "kept-unsettled", "not settled");
        eprintln!("{model} with kept-unsettled: caught at seed {seed}");
    }
}

/// Seen on real processes first: one direction of a link is cut for many
/// of the engine's timeouts while clients give up on slow replies and move
/// to the next node mid-transaction. The transactions their sessions left
/// must not hold keys until the idle timeout, or younger ones wait behind
/// them until their own clients give up, and the cluster livelocks after
/// the heal (G7: throughput does not come back). Mutant `left-waits` (the
/// old behaviour: only the coordinator squashed a left transaction, and
/// only when the session began its next one there) is caught.
#[test]
fn transactions_come_back_after_a_one_way_cut_with_impatient_clients() {
    for model in [
        "trans-strict",
        "trans-synch",
        "trans-re",
        "trans-scope",
        "trans-eventual",
    ] {
        clean(model, Crash::OneWay);
    }
    let seed = caught_as("trans-synch", Crash::OneWay, "left-waits", "G7:");
    eprintln!("trans-synch with left-waits: caught at seed {seed}");
}

/// Seen on real processes first: after a whole-cluster crash the
/// configuration manager, which outlived it, may have removed a node for
/// its silence, and the others recover without it. Under Strict and Synch
/// every completed transaction must be in what they recover (T-3), so a
/// commit is answered only once every member persisted its record.
/// Mutant `commit-answered-early` (the old rule: once the decider's record
/// landed) loses completed transactions.
#[test]
fn completed_transactions_survive_a_whole_cluster_crash_that_leaves_a_node_out() {
    for model in ["trans-strict", "trans-synch"] {
        clean(model, Crash::AllButOne);
        let seed = caught_as(model, Crash::AllButOne, "commit-answered-early", "T-3:");
        eprintln!("{model} with commit-answered-early: caught at seed {seed}");
    }
}

/// The End of a transaction whose coordinator crashed reaches a node that
/// cannot tell its outcome: the members that prepared it may commit it, so
/// the answer is OutcomeUnknown, never Aborted (a client told Aborted runs
/// it again and its writes take effect twice). Mutant `abort-unknown-end`
/// (the old answer) is caught by T-4 under one-node crashes.
#[test]
fn an_end_of_unknown_outcome_is_not_answered_aborted() {
    for model in ["trans-synch", "trans-re"] {
        let seed = caught_as(model, Crash::One, "abort-unknown-end", "T-4:");
        eprintln!("{model} with abort-unknown-end: caught at seed {seed}");
    }
}

/// A node removed while alive keeps what it applied; when it adopts the
/// members' copies it must claim only what they applied, or an update it
/// alone held goes to the others and never back to it (G6). Mutant
/// `keep-applied` (the old behaviour) diverges.
#[test]
fn a_node_added_back_claims_only_what_its_copies_applied() {
    let model = Model::parse("eventual-eventual").unwrap();
    let bugs = tandem_ddp::Bugs::parse(&["keep-applied".to_string()]).unwrap();
    let diverged = (0..100).any(|seed| {
        let mut cfg = CheckConfig::new(model, seed);
        (cfg.crash, cfg.bugs, cfg.assertions) = (Crash::Isolated, bugs, false);
        run(&cfg)
            .violations
            .iter()
            .any(|v| v.contains("after quiescence node"))
    });
    assert!(diverged, "keep-applied never diverged in 100 seeds");
}

/// ⟨Eventual, RE⟩ and ⟨Causal, RE⟩ reads wait for the persist at the node
/// that serves them only (docs/DDP.md open point 8). A whole-cluster crash
/// that the cluster recovers without one node may lose a version read
/// only there: counted, not a broken promise. These seeds each lose one
/// (the check called them RP-2 before it knew which node served a read).
#[test]
fn a_version_read_only_at_the_node_a_recovery_leaves_out_may_vanish() {
    for (model, seed) in [("eventual-re", 1002), ("causal-re", 1013)] {
        let mut cfg = CheckConfig::new(Model::parse(model).unwrap(), seed);
        cfg.crash = Crash::AllButOne;
        let r = run(&cfg);
        assert!(
            r.violations.is_empty(),
            "{model} seed {seed}: {:?}",
            r.violations
        );
        assert!(
            r.vanished_reads > 0,
            "{model} seed {seed}: nothing was read there"
        );
    }
}
