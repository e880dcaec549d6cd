//! HEAL (docs/HEAL.md): seeded simulations of every fault it claims to
//! survive, its mutants, and two gaps the paper leaves, O-1 and a phantom
//! Partially_persisted entry (O-7), each in a scripted run.

use tandem_ddp::simcheck::{run, CheckConfig, Crash};
use tandem_ddp::{Bugs, DdpFactory, DdpNode, HealOpts, Model, Op, Params, Reply};
use tandem_net::{Config, Harness, Input, NodeId, Nvm, SessionId, SimNet, SimNetConfig};
use tandem_sim::Rng;

fn seeds() -> u64 {
    std::env::var("HEAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

fn heal_cfg(model: &str, seed: u64, crash: Crash) -> CheckConfig {
    heal_cfg_with(model, seed, crash, HealOpts::default())
}

fn heal_cfg_with(model: &str, seed: u64, crash: Crash, opts: HealOpts) -> CheckConfig {
    let mut cfg = CheckConfig::new(Model::parse(model).unwrap(), seed).with_heal_opts(opts);
    cfg.crash = crash;
    cfg
}

#[test]
fn heal_recovers_through_every_fault_without_violations() {
    every_fault(HealOpts::default(), seeds());
}

/// The NoShadow ablation (`heal/noshadow.rs`) keeps every promise too: its
/// chase rounds and its handoff run under the same faults.
#[test]
fn heal_no_shadow_recovers_through_every_fault_without_violations() {
    let rounds = every_fault(
        HealOpts {
            no_shadow: true,
            ..HealOpts::default()
        },
        seeds(),
    );
    assert!(
        rounds.0 > rounds.1,
        "NoShadow never asked more than once: {} rounds for {} recoveries",
        rounds.0,
        rounds.1
    );
}

/// Every model under every recovery fault; returns the `CatchUp_req`
/// rounds and the recoveries.
fn every_fault(opts: HealOpts, seeds: u64) -> (u64, u64) {
    let mut rounds = (0, 0);
    for model in [
        "lin-synch",
        "lin-strict",
        "lin-re",
        "lin-eventual",
        "lin-scope",
    ] {
        for crash in [Crash::One, Crash::Buddy, Crash::Again, Crash::Two] {
            let mut mid = 0;
            for seed in 0..seeds {
                let cfg = heal_cfg_with(model, seed, crash, opts);
                let r = run(&cfg);
                mid += r.mid_recovery_crashes;
                rounds = (rounds.0 + r.heal_rounds, rounds.1 + r.heal_recoveries);
                assert!(
                    r.violations.is_empty(),
                    "{}\nreplay: {}",
                    r.violations.join("\n"),
                    r.replay
                );
                assert!(
                    r.heal_recoveries > 0 && r.heal_fallbacks == 0,
                    "{model} {crash:?} seed {seed}: HEAL did not run ({} recoveries, {} fallbacks)",
                    r.heal_recoveries,
                    r.heal_fallbacks
                );
                assert!(
                    r.completed > cfg.sessions * cfg.ops / 2,
                    "{model} seed {seed}: only {} completed",
                    r.completed
                );
            }
            if matches!(crash, Crash::Buddy | Crash::Again) {
                assert!(
                    mid > 0,
                    "{model} {crash:?}: no crash hit a recovery in progress"
                );
            }
        }
    }
    rounds
}

/// Membership faults: a node suspected while alive (slow, or cut off), a
/// suspicion heard at different times, and a restart within the lease. Each
/// node rejoins through HEAL, and announcements reach nodes up to 5 µs
/// apart in the last two.
#[test]
fn heal_recovers_through_membership_faults() {
    for opts in [
        HealOpts::default(),
        HealOpts {
            no_shadow: true,
            ..HealOpts::default()
        },
    ] {
        for model in ["lin-synch", "lin-eventual", "lin-scope"] {
            let mut healed = 0;
            for crash in [
                Crash::Suspect,
                Crash::Isolated,
                Crash::SuspectSpread,
                Crash::Bounce,
            ] {
                for seed in 0..seeds() {
                    let r = run(&heal_cfg_with(model, seed, crash, opts));
                    assert!(
                        r.violations.is_empty(),
                        "{}\nreplay: {}",
                        r.violations.join("\n"),
                        r.replay
                    );
                    healed += r.heal_recoveries;
                }
            }
            assert!(healed > 0, "{model}: no node rejoined through HEAL");
        }
    }
}

#[test]
fn a_whole_cluster_crash_falls_back_to_the_full_copy() {
    for seed in 0..seeds() {
        let r = run(&heal_cfg("lin-synch", seed, Crash::All));
        assert!(
            r.violations.is_empty(),
            "{}\nreplay: {}",
            r.violations.join("\n"),
            r.replay
        );
        assert!(
            r.heal_fallbacks > 0 && r.heal_recoveries == 0,
            "seed {seed}: no Buddy can exist after a whole-cluster crash"
        );
    }
}

/// Each mutant is caught within a few seeds.
#[test]
fn heal_mutants_are_caught() {
    for bug in ["heal-trim-early", "heal-online-early", "heal-no-shadow"] {
        let caught = (0..10).find(|&seed| {
            let mut cfg = heal_cfg("lin-synch", seed, Crash::One);
            cfg.bugs = Bugs::parse(&[bug.to_string()]).unwrap();
            cfg.assertions = false; // the checkers catch it on their own
            !run(&cfg).violations.is_empty()
        });
        assert!(caught.is_some(), "mutant {bug} not caught in 10 seeds");
    }
}

/// A harness with no sessions: the scripted tests hand nodes client
/// operations themselves.
struct Scripted;

impl Harness<DdpNode> for Scripted {
    fn next_op(&mut self, _session: SessionId, _now: u64, _rng: &mut Rng) -> Option<Op> {
        None
    }
    fn completed(
        &mut self,
        _s: SessionId,
        _r: u64,
        _n: NodeId,
        _reply: &Reply,
        _now: u64,
        _nvm: &[Nvm<tandem_ddp::Record>],
    ) {
    }
}

struct Script {
    net: SimNet<DdpNode, DdpFactory>,
    epoch: u64,
    req: u64,
}

impl Script {
    fn new(bugs: Bugs) -> Script {
        Script::of(Model::LIN_SYNCH, bugs)
    }

    fn of(model: Model, bugs: Bugs) -> Script {
        Script::with(model, bugs, HealOpts::default())
    }

    /// A mutant's run has the engine's assertions off: the scripted
    /// outcome shows what it breaks (`tests/assertions.rs` has them on).
    fn with(model: Model, bugs: Bugs, opts: HealOpts) -> Script {
        let params = Params {
            assertions: bugs == Bugs::default(),
            ..Params::SIM
        };
        let factory = DdpFactory {
            bugs,
            heal: Some(opts),
            ..DdpFactory::new(model, params)
        };
        let net = SimNet::new(
            7,
            SimNetConfig::default(),
            Config::new(1, (0..5).collect()),
            factory,
            Box::new(Scripted),
            0,
        );
        Script {
            net,
            epoch: 1,
            req: 0,
        }
    }

    fn write(&mut self, at: NodeId, key: u64, value: u64) {
        self.req += 1;
        self.net.inject(
            at,
            Input::Client {
                session: 900,
                req: self.req,
                op: Op::write(key, value, 0),
            },
        );
    }

    fn op(&mut self, at: NodeId, op: Op) {
        self.req += 1;
        self.net.inject(
            at,
            Input::Client {
                session: 900,
                req: self.req,
                op,
            },
        );
    }

    fn configure(&mut self, members: Vec<NodeId>, restart: Option<NodeId>) {
        self.epoch += 1;
        let c = Config::new(self.epoch, members);
        if let Some(n) = restart {
            self.net.restart(n, &c);
        }
        self.net.announce(&c);
    }

    fn value(&self, n: NodeId, key: u64) -> Option<u64> {
        self.net
            .with_node(n, |p| p.expect("up").snapshot().get(&key).and_then(|v| v.1))
    }

    fn recovered_by_heal(&self, n: NodeId) -> bool {
        self.net.with_node(n, |p| {
            p.and_then(|p| p.heal())
                .and_then(|h| h.last.clone())
                .is_some_and(|t| !t.full_copy)
        })
    }
}

/// Node 4 coordinates a write while cut off: it persists it (a
/// Partially_persisted entry) but no INV gets out, and it crashes. The
/// Buddy holds an older version (`T_curr < T_in`): the entry never
/// committed, and the recovered node must roll it back.
fn phantom(bugs: Bugs) -> (Option<u64>, Option<u64>, bool) {
    let mut s = Script::new(bugs);
    s.write(0, 1, 10);
    s.net.run_for(100_000);
    for o in 0..4 {
        s.net.partition(4, o, true);
    }
    s.write(4, 1, 99);
    s.net.run_for(2_000);
    s.net.crash(4);
    for o in 0..4 {
        s.net.partition(4, o, false);
    }
    s.configure((0..4).collect(), None);
    s.net.run_for(50_000);
    s.write(0, 2, 20);
    s.net.run_for(50_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(300_000);
    (s.value(4, 1), s.value(0, 1), s.recovered_by_heal(4))
}

#[test]
fn a_partially_persisted_write_that_never_committed_is_rolled_back() {
    let (at_rr, at_others, heal) = phantom(Bugs::default());
    assert!(heal, "the node recovered by HEAL");
    assert_eq!(at_others, Some(10));
    assert_eq!(
        at_rr,
        Some(10),
        "the recovered node must drop its uncommitted write"
    );
    let bugs = Bugs {
        heal_no_ts_compare: true,
        ..Bugs::default()
    };
    let (at_rr, _, _) = phantom(bugs);
    assert_eq!(
        at_rr,
        Some(99),
        "mutant heal-no-ts-compare: the Buddy marks the phantom committed"
    );
}

/// O-1 (docs/HEAL.md): node 1 writes key 5 during the EFN; its link to the Buddy
/// (node 0, the first member after node 4) is slow, so the VAL reaches the
/// Buddy after it answered the recovering node's `CatchUp_req`. The write
/// never touched node 4, and node 4 must still end up with it.
fn late_val(bugs: Bugs) -> (Option<u64>, Option<u64>) {
    let mut s = Script::new(bugs);
    s.net.crash(4);
    s.configure((0..4).collect(), None);
    s.net.run_for(20_000);
    s.net.slow_link(1, 0, 30_000);
    s.write(1, 5, 55);
    // The INV reaches node 0 at about 30 us, the VAL at about 61 us.
    s.net.run_for(35_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(400_000);
    (s.value(4, 5), s.value(0, 5))
}

#[test]
fn a_write_whose_val_reaches_the_buddy_after_its_answer_is_not_missed() {
    let (at_rr, at_buddy) = late_val(Bugs::default());
    assert_eq!(at_buddy, Some(55));
    assert_eq!(at_rr, Some(55));
    let (at_rr, at_buddy) = late_val(Bugs {
        heal_no_pending: true,
        ..Bugs::default()
    });
    assert_eq!(at_buddy, Some(55));
    assert_eq!(
        at_rr, None,
        "mutant heal-no-pending: the Buddy's answer misses the write"
    );
}

/// Review finding: node 4's write ⟨2,4⟩ reaches nodes 1–3 but not the
/// Buddy (node 0) before node 4 crashes; the Buddy rolls node 4's entry
/// back. Node 4 must still not issue ⟨2,4⟩ again for another value (nodes
/// 1–3 would validate theirs under the same timestamp): the members' ACKs
/// to `Recov_start` carry node 4's writes still in flight.
#[test]
fn a_recovered_node_never_reuses_a_timestamp_still_in_flight() {
    let mut s = Script::new(Bugs::default());
    s.write(0, 1, 10);
    s.net.run_for(100_000);
    s.net.partition(4, 0, true);
    s.write(4, 1, 99);
    s.net.run_for(2_000);
    s.net.crash(4);
    s.net.partition(4, 0, false);
    s.configure((0..4).collect(), None);
    s.net.run_for(20_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(30_000);
    s.write(4, 1, 77);
    s.net.run_for(1_000_000);
    let values: Vec<Option<u64>> = (0..5).map(|n| s.value(n, 1)).collect();
    assert!(
        values.iter().all(|v| *v == values[0]),
        "replicas diverge on key 1: {values:?}"
    );
    assert_eq!(values[0], Some(77), "the last write wins");
}

/// Review finding: a node the manager drops while it is alive (slow) and
/// later re-adds runs HEAL's steps too, so every buffer kept for it is
/// released, and it serves again only once caught up.
#[test]
fn a_node_dropped_while_alive_rejoins_through_heal() {
    let mut s = Script::new(Bugs::default());
    s.write(0, 1, 10);
    s.net.run_for(100_000);
    s.configure(vec![0, 1, 2, 4], None);
    s.net.run_for(20_000);
    s.write(0, 3, 33);
    s.net.run_for(50_000);
    s.configure((0..5).collect(), None);
    s.net.run_for(500_000);
    assert_eq!(
        s.value(3, 3),
        Some(33),
        "node 3 caught up with the write it missed"
    );
    for n in 0..5 {
        let (ready, missed, absent) = s.net.with_node(n, |p| {
            let p = p.expect("up");
            (
                p.is_ready(),
                p.heal().unwrap().missed.len(),
                p.heal().unwrap().missed.absent.clone(),
            )
        });
        assert!(
            ready && missed == 0 && absent.is_empty(),
            "node {n}: ready {ready}, {missed} missed updates kept for {absent:?}"
        );
    }
    assert!(s.recovered_by_heal(3));
}

/// Spec §2.10's second gap, under ⟨Lin, Event⟩: node 4 applied a committed
/// write but crashed before its lazy write-back. The lazy GDP completes
/// without it during the EFN, so the write reaches the Buddy's
/// `MissedUpdates`; and since every other version reached its GDP, the
/// Buddy's answer stays small (without the lazy GDP nothing ever reaches
/// one, and the Buddy ships its whole store as unvalidated versions).
#[test]
fn event_a_committed_write_the_crashed_node_never_persisted_comes_back() {
    let mut s = Script::of(Model::parse("lin-eventual").unwrap(), Bugs::default());
    for k in 0..50 {
        s.write((k % 4) as NodeId, k, 100 + k);
    }
    s.net.run_for(300_000);
    s.write(0, 7, 777);
    s.net.run_for(3_000); // committed (VAL_c), well before node 4's write-back
    s.net.crash(4);
    s.configure((0..4).collect(), None);
    s.net.run_for(100_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(300_000);
    assert!(s.recovered_by_heal(4));
    assert_eq!(s.value(4, 7), Some(777), "the committed write came back");
    let t = s
        .net
        .with_node(4, |p| p.unwrap().heal().unwrap().last.clone().unwrap());
    assert!(
        t.missed >= 1 && t.pending < 10,
        "the Buddy shipped {} missed updates and {} unvalidated versions (of 50 keys)",
        t.missed,
        t.pending
    );
}

/// Staggered announcements (what `--crash bounce` found at seed 18): node 1
/// hears that node 4 left before anyone else does, and declares the lazy
/// GDP of its write of key 7 over the four members left. The others,
/// node 0 (node 4's Buddy) among them, get that VAL_p while they still
/// count node 4 a member, so by their view nobody is away. They must still
/// put the version in `MissedUpdates` once they hear the configuration the
/// GDP was declared in: node 4 validated it but never wrote it back.
fn gdp_ahead_of_the_buddy(bugs: Bugs) -> Option<u64> {
    let mut s = Script::of(Model::parse("lin-eventual").unwrap(), bugs);
    for k in 0..50 {
        s.write((k % 4) as NodeId, k, 100 + k);
    }
    s.net.run_for(300_000);
    s.write(1, 7, 777);
    s.net.run_for(3_000); // committed (VAL_c), before any write-back
    s.net.crash(4);
    s.epoch += 1;
    let c = Config::new(s.epoch, (0..4).collect());
    s.net
        .announce_delayed(&c, &[200_000, 0, 200_000, 200_000, 200_000]);
    s.net.run_for(150_000);
    let buddy_epoch = s.net.with_node(0, |p| p.expect("up").config().epoch);
    assert_eq!(buddy_epoch, 1, "the Buddy has not heard node 4 left");
    s.net.run_for(100_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(300_000);
    assert!(s.recovered_by_heal(4));
    s.value(4, 7)
}

#[test]
fn a_gdp_declared_in_a_configuration_the_buddy_has_not_heard_is_not_missed() {
    assert_eq!(gdp_ahead_of_the_buddy(Bugs::default()), Some(777));
    let bug = Bugs {
        heal_gdp_old_view: true,
        ..Bugs::default()
    };
    assert_ne!(
        gdp_ahead_of_the_buddy(bug),
        Some(777),
        "mutant heal-gdp-old-view: node 4 got the write back anyway"
    );
}

/// Scope persistency: 50 keys written and persisted in scope 1, then key 7
/// written in scope 2 at node 0 (committed, answered). Node 4 crashes
/// before scope 2 is persisted anywhere, so its NVM never had the write.
/// `persist_during_downtime`: node 0 persists scope 2 while node 4 is away.
fn scope_gap(
    bugs: Bugs,
    persist_during_downtime: bool,
) -> (Option<u64>, tandem_ddp::heal::state::Timeline) {
    let mut s = Script::of(Model::parse("lin-scope").unwrap(), bugs);
    for k in 0..50 {
        s.op(0, Op::write(k, 100 + k, 1));
        s.net.run_for(5_000);
    }
    s.op(
        0,
        Op::Persist {
            scope: 1,
            writes: 50,
        },
    );
    s.net.run_for(300_000);
    s.op(0, Op::write(7, 777, 2));
    s.net.run_for(5_000); // committed (VAL_c) everywhere, persisted nowhere
    s.net.crash(4);
    s.configure((0..4).collect(), None);
    s.net.run_for(50_000);
    if persist_during_downtime {
        s.op(
            0,
            Op::Persist {
                scope: 2,
                writes: 1,
            },
        );
    }
    s.net.run_for(50_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(300_000);
    assert!(s.recovered_by_heal(4));
    let t = s
        .net
        .with_node(4, |p| p.unwrap().heal().unwrap().last.clone().unwrap());
    (s.value(4, 7), t)
}

#[test]
fn scope_a_committed_write_of_a_scope_never_persisted_comes_back() {
    let (v, t) = scope_gap(Bugs::default(), false);
    assert_eq!(
        v,
        Some(777),
        "the committed write came back (timeline {t:?})"
    );
    assert!(
        t.pending >= 1 && t.pending < 10,
        "the Buddy shipped it as one of a few unvalidated versions: {t:?}"
    );
    let (v, _) = scope_gap(
        Bugs::parse(&["heal-no-pending".to_string()]).unwrap(),
        false,
    );
    assert_eq!(
        v,
        Some(107),
        "without the Buddy's unvalidated versions the node ends with the old value"
    );
}

#[test]
fn scope_a_scope_persisted_during_the_downtime_enters_missed_updates() {
    let (v, t) = scope_gap(Bugs::default(), true);
    assert_eq!(v, Some(777));
    assert!(
        t.missed >= 1 && t.pending < 10,
        "scope 2's write reached its GDP without node 4 and was buffered: {t:?}"
    );
}

/// HEAL-NoShadow: a `Recov_start` that arrives again (duplicated by the
/// network, or resent) after the recovering node handed over and went
/// online must not leave it out of writes once more: it would serve reads
/// without the writes that skipped it.
#[test]
fn a_late_duplicate_recov_start_does_not_exclude_a_node_back_online() {
    let mut s = Script::with(
        Model::LIN_SYNCH,
        Bugs::default(),
        HealOpts {
            no_shadow: true,
            ..HealOpts::default()
        },
    );
    s.net.crash(4);
    s.configure((0..4).collect(), None);
    s.write(1, 3, 30);
    s.net.run_for(50_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(400_000);
    assert!(s.recovered_by_heal(4), "node 4 recovered by HEAL-NoShadow");
    assert_eq!(s.value(4, 3), Some(30));
    s.net.inject(
        1,
        Input::Recv {
            from: 4,
            msg: tandem_ddp::Msg::RecovStart { epoch: s.epoch },
        },
    );
    s.write(1, 3, 31);
    s.net.run_for(100_000);
    assert_eq!(s.value(1, 3), Some(31));
    assert_eq!(
        s.value(4, 3),
        Some(31),
        "node 1 left node 4 out of its write"
    );
}

/// HEAL-NoShadow when no member can be the Buddy (every buffer overflowed):
/// the node falls back to the full copy, and the members, which left it
/// out of writes at its `Recov_start`, must take it back in before that
/// copy is taken, or the writes between the copy and its `Recov_end` skip
/// it for good.
#[test]
fn no_shadow_hands_over_before_the_full_copy_fallback() {
    let opts = HealOpts {
        no_shadow: true,
        missed_cap: 2,
        ..HealOpts::default()
    };
    let mut s = Script::with(Model::LIN_SYNCH, Bugs::default(), opts);
    s.net.crash(4);
    s.configure((0..4).collect(), None);
    for k in 0..5 {
        s.write(1, k, 100 + k);
    }
    s.net.run_for(50_000);
    s.configure((0..5).collect(), Some(4));
    // Keys written once each, so that a write node 4 misses is never
    // overwritten by one it gets.
    for i in 0..100u16 {
        s.write(1 + i % 3, 10 + u64::from(i), 1000 + u64::from(i));
        s.net.run_for(500);
    }
    s.net.run_for(1_000_000);
    let full_copy = s.net.with_node(4, |p| {
        p.and_then(|p| p.heal())
            .and_then(|h| h.last.clone())
            .is_some_and(|t| t.full_copy)
    });
    assert!(full_copy, "node 4 fell back to the full copy");
    for k in 10..110 {
        let values: Vec<Option<u64>> = (0..5).map(|n| s.value(n, k)).collect();
        assert!(
            values.iter().all(|v| *v == values[0]),
            "replicas diverge on key {k}: {values:?}"
        );
    }
}
