//! The engine's own assertions (`src/invariants.rs`) fire on its mutants.
//!
//! Every mutant of `Bugs` runs here as its checker test runs it (same
//! model, crash, persist latency and seeds: `tests/simcheck.rs`,
//! `tests/heal.rs`, `tests/explore.rs`), but with the engine's assertions
//! on (`Params::assertions`, the default) and under `catch_unwind`: the
//! run stops at the first broken invariant, whose name opens the panic
//! message. The test prints a table and asserts, mutant by mutant, that
//! the expected invariant fires, or that none does where no local
//! assertion can see the mutant:
//!
//! - `orphans-kept` breaks liveness only: a Causal node waits forever for
//!   updates both of whose holders crashed. No single state is wrong (each
//!   step waits, as it may for a slow origin); what is wrong is that the
//!   wait never ends, which the checker sees as G6 after quiescence. A
//!   state assertion would need a watchdog that redoes `give_up_orphans`'
//!   own bookkeeping (the dead origins' survivors, over time).
//! - `reuse-origin` is visible locally (a life recovered from NVM writes
//!   under incarnation 0, the first life's) but is deliberately not
//!   asserted: `crates/cli/tests/ddp_procs.rs` runs `tandem node
//!   --inject-bug reuse-origin` over processes to show the writes it loses,
//!   and a node that panics there would break that test; asserting it needs
//!   a way to switch the assertions off in `tandem node`, outside this crate.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use tandem_ddp::explore::{explore, ExploreConfig};
use tandem_ddp::simcheck::{run, CheckConfig, Crash};
use tandem_ddp::{Bugs, DdpFactory, DdpNode, HealOpts, Model, Op, Params, Reply};
use tandem_net::{Config, Harness, Input, NodeId, Nvm, SessionId, SimNet, SimNetConfig};
use tandem_sim::Rng;

thread_local! {
    /// A panic here is expected (caught and reported): keep the hook quiet.
    static EXPECTING: Cell<bool> = const { Cell::new(false) };
}

/// The message of the assertion `f` tripped, if any; other panics too
/// (the caller checks that the message names an invariant).
fn fired(f: impl FnOnce()) -> Option<String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !EXPECTING.with(Cell::get) {
                default(info)
            }
        }));
    });
    EXPECTING.with(|e| e.set(true));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    EXPECTING.with(|e| e.set(false));
    let e = r.err()?;
    let msg = (e.downcast_ref::<String>().cloned())
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
    Some(msg.unwrap_or_else(|| "(a panic without a message)".into()))
}

/// How a mutant's checker test runs it.
#[derive(Clone, Copy)]
enum How {
    /// `simcheck::run` over `seeds`.
    Sim {
        model: &'static str,
        crash: Crash,
        persist_ns: u64,
        net_faults: bool,
        heal: bool,
        seeds: &'static [u64],
    },
    /// A scripted HEAL run of `tests/heal.rs`.
    Script(&'static str, fn(Bugs)),
    /// The explorer's small script with one loss.
    Explore(&'static str),
}

struct Case {
    bug: &'static str,
    how: How,
    /// The invariant that must fire; None: none may.
    expect: Option<&'static str>,
}

const SEEDS_20: &[u64] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
];
const SEEDS_30: &[u64] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29,
];
const SEEDS_10: &[u64] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

/// `mutants_are_caught` (tests/simcheck.rs): no crash, 20 seeds.
const fn plain(model: &'static str, persist_ns: u64) -> How {
    How::Sim {
        model,
        crash: Crash::None,
        persist_ns,
        net_faults: true,
        heal: false,
        seeds: SEEDS_20,
    }
}

const fn sim(model: &'static str, crash: Crash, seeds: &'static [u64]) -> How {
    How::Sim {
        model,
        crash,
        persist_ns: 400,
        net_faults: true,
        heal: false,
        seeds,
    }
}

/// Copy-source runs without message loss (`a_copy_carries_the_sources_log`,
/// `orphaned_updates_are_given_up_and_their_sessions_told`).
const fn copy_source(model: &'static str) -> How {
    How::Sim {
        model,
        crash: Crash::CopySource,
        persist_ns: 400,
        net_faults: false,
        heal: false,
        seeds: SEEDS_10,
    }
}

/// `heal_mutants_are_caught` (tests/heal.rs): lin-synch, one crash, HEAL.
const HEAL_ONE: How = How::Sim {
    model: "lin-synch",
    crash: Crash::One,
    persist_ns: 400,
    net_faults: true,
    heal: true,
    seeds: SEEDS_10,
};

fn cases() -> Vec<Case> {
    let case = |bug, how, expect| Case { bug, how, expect };
    let c = |bug, how, inv| case(bug, how, Some(inv));
    vec![
        // tests/simcheck.rs, mutants_are_caught.
        c(
            "reply-before-last-ack",
            plain("lin-synch", 400),
            "write-certified",
        ),
        c(
            "reply-before-last-ack",
            plain("lin-eventual", 400),
            "write-certified",
        ),
        c(
            "reply-before-last-ack",
            plain("eventual-strict", 400),
            "strict-reply",
        ),
        c(
            "reply-before-last-ack",
            plain("trans-synch", 400),
            "tx-votes",
        ),
        c(
            "reply-before-last-ack",
            plain("trans-strict", 400),
            "tx-strict-write",
        ),
        c(
            "val-before-persist",
            plain("lin-synch", 400),
            "ack-p-durable",
        ),
        c("val-before-persist", plain("re-re", 400), "ack-p-durable"),
        c(
            "val-before-persist",
            plain("causal-strict", 400),
            "ack-p-durable",
        ),
        c(
            "val-before-persist",
            plain("trans-synch", 400),
            "tx-vote-durable",
        ),
        c("read-in-invalid", plain("lin-eventual", 400), "read-valid"),
        c("read-in-invalid", plain("lin-synch", 400), "read-valid"),
        c("read-in-invalid", plain("causal-synch", 400), "upd-read"),
        c("read-in-invalid", plain("eventual-re", 400), "upd-read"),
        c(
            "read-in-invalid",
            plain("trans-eventual", 400),
            "tx-read-committed",
        ),
        c(
            "read-in-invalid",
            plain("trans-re", 400),
            "tx-read-committed",
        ),
        c("read-in-invalid", How::Explore("lin-synch"), "read-valid"),
        c(
            "early-scope-ack",
            plain("lin-scope", 2_000),
            "scope-ack-durable",
        ),
        c(
            "early-scope-ack",
            plain("causal-scope", 2_000),
            "scope-ack-durable",
        ),
        c(
            "causal-early-apply",
            plain("causal-synch", 400),
            "causal-apply",
        ),
        c(
            "causal-early-apply",
            plain("causal-eventual", 400),
            "causal-apply",
        ),
        c(
            "causal-early-apply",
            plain("causal-re", 400),
            "causal-apply",
        ),
        c(
            "skip-conflict-check",
            plain("trans-scope", 400),
            "tx-validated",
        ),
        c(
            "commit-before-persist",
            sim("trans-synch", Crash::All, SEEDS_20),
            "tx-commit-durable",
        ),
        c(
            "commit-before-persist",
            sim("trans-strict", Crash::All, SEEDS_20),
            "tx-commit-durable",
        ),
        // tests/heal.rs.
        c("heal-trim-early", HEAL_ONE, "heal-trim"),
        c("heal-online-early", HEAL_ONE, "heal-online"),
        c("heal-no-shadow", HEAL_ONE, "heal-shadow"),
        c(
            "heal-no-ts-compare",
            How::Script("phantom", phantom),
            "heal-marked",
        ),
        c(
            "heal-no-pending",
            How::Script("late VAL", late_val),
            "heal-pending",
        ),
        c(
            "heal-gdp-old-view",
            How::Script("GDP ahead", gdp_ahead),
            "heal-gdp-epoch",
        ),
        // tests/simcheck.rs, the catch-up and membership mutants.
        c(
            "copy-unlogged",
            sim("eventual-synch", Crash::Buddy, &[6, 27, 58]),
            "copy-logged",
        ),
        c(
            "copy-unlogged",
            copy_source("causal-eventual"),
            "copy-logged",
        ),
        c("copy-unlogged", copy_source("causal-scope"), "copy-logged"),
        c(
            "gossip-prefix-only",
            sim("eventual-re", Crash::CopySource, &[11, 51]),
            "sync-extra",
        ),
        c(
            "gossip-prefix-only",
            sim("eventual-synch", Crash::Buddy, &[6, 27, 58]),
            "sync-extra",
        ),
        case(
            "reuse-origin",
            sim("eventual-synch", Crash::One, SEEDS_10),
            None,
        ),
        c(
            "keep-applied",
            sim("eventual-eventual", Crash::Isolated, SEEDS_30),
            "copy-claims",
        ),
        c(
            "abort-unknown-end",
            sim("trans-synch", Crash::One, SEEDS_30),
            "tx-aborted-decided",
        ),
        c(
            "abort-unknown-end",
            sim("trans-re", Crash::One, SEEDS_30),
            "tx-aborted-decided",
        ),
        c(
            "silent-removal",
            sim("trans-synch", Crash::Suspect, SEEDS_30),
            "tx-removed-answers",
        ),
        c(
            "silent-removal",
            sim("trans-re", Crash::Suspect, SEEDS_30),
            "tx-removed-answers",
        ),
        c(
            "kept-unsettled",
            sim("trans-synch", Crash::Suspect, SEEDS_30),
            "tx-kept-settled",
        ),
        c(
            "kept-unsettled",
            sim("trans-re", Crash::Suspect, SEEDS_30),
            "tx-kept-settled",
        ),
        c(
            "copy-in-old-epoch",
            sim("lin-synch", Crash::SuspectSpread, SEEDS_30),
            "copy-epoch",
        ),
        c(
            "left-waits",
            sim("trans-synch", Crash::OneWay, SEEDS_30),
            "tx-session-left",
        ),
        c(
            "unheard-removal",
            sim("lin-synch", Crash::Flip, SEEDS_30),
            "rejoin-unheard",
        ),
        c(
            "source-left-ready",
            sim("lin-synch", Crash::Flip, SEEDS_30),
            "copy-answered",
        ),
        c(
            "undecisive-refusal",
            sim("trans-synch", Crash::Flip, SEEDS_30),
            "refusal-vouches",
        ),
        c(
            "commit-answered-early",
            sim("trans-synch", Crash::AllButOne, SEEDS_30),
            "tx-commit-everywhere",
        ),
        case("orphans-kept", copy_source("causal-synch"), None),
        c(
            "ts-below-nvm",
            sim("causal-synch", Crash::CopySource, &[1000, 1073]),
            "new-ts",
        ),
    ]
}

/// Run one case; the first assertion that fired: (where, message).
fn first_fired(case: &Case) -> (String, Option<String>) {
    let bugs = Bugs::parse(&[case.bug.to_string()]).unwrap();
    match case.how {
        How::Sim {
            model,
            crash,
            persist_ns,
            net_faults,
            heal,
            seeds,
        } => {
            let model = Model::parse(model).unwrap();
            for &seed in seeds {
                let mut cfg = CheckConfig::new(model, seed);
                if heal {
                    cfg = cfg.with_heal();
                }
                (cfg.crash, cfg.persist_ns, cfg.net_faults) = (crash, persist_ns, net_faults);
                (cfg.bugs, cfg.assertions) = (bugs, true);
                if let Some(msg) = fired(|| {
                    run(&cfg);
                }) {
                    return (format!("{model} {} seed {seed}", crash.name()), Some(msg));
                }
            }
            let n = seeds.len();
            (format!("{model} {}, {n} seeds", crash.name()), None)
        }
        How::Script(name, script) => (format!("script: {name}"), fired(|| script(bugs))),
        How::Explore(model) => {
            let mut cfg = ExploreConfig::small(Model::parse(model).unwrap(), "loss");
            (cfg.bugs, cfg.assertions) = (bugs, true);
            let msg = fired(|| {
                explore(&cfg);
            });
            (format!("explore {model}, one loss"), msg)
        }
    }
}

#[test]
fn the_engines_assertions_fire_on_its_mutants() {
    let cases = cases();
    for name in Bugs::NAMES {
        assert!(
            cases.iter().any(|c| c.bug == *name),
            "mutant {name} has no case here: add one (and the invariant that catches it)"
        );
    }
    let mut rows = Vec::new();
    let mut wrong = Vec::new();
    for case in &cases {
        let (at, msg) = first_fired(case);
        let name = msg
            .as_deref()
            .map(|m| m.split([' ', ':']).next().unwrap_or(""));
        let ok = match (case.expect, msg.as_deref()) {
            (Some(inv), Some(m)) => m.starts_with(inv),
            (None, None) => true,
            _ => false,
        };
        if !ok {
            wrong.push(format!(
                "{} ({at}): expected {:?}, got {:?}",
                case.bug, case.expect, msg
            ));
        }
        let shown = msg.as_deref().map_or("-".to_string(), |m| {
            let m: String = m.chars().take(110).collect();
            m.replace('\n', " ")
        });
        rows.push(format!(
            "| {:<22} | {:<36} | {:<5} | {:<18} | {shown}",
            case.bug,
            at,
            if msg.is_some() { "fires" } else { "no" },
            name.unwrap_or("-"),
        ));
    }
    println!(
        "| {:<22} | {:<36} | {:<5} | {:<18} | message",
        "mutant", "run (first firing)", "", "invariant"
    );
    for r in &rows {
        println!("{r}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// ---- The scripted HEAL runs of tests/heal.rs (there with assertions off).

/// No sessions: the script hands nodes their client operations.
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
    fn new(model: &str, bugs: Bugs) -> Script {
        let factory = DdpFactory {
            bugs,
            heal: Some(HealOpts::default()),
            ..DdpFactory::new(Model::parse(model).unwrap(), Params::SIM)
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
        let op = Op::write(key, value, 0);
        let (session, req) = (900, self.req);
        self.net.inject(at, Input::Client { session, req, op });
    }

    fn configure(&mut self, members: Vec<NodeId>, restart: Option<NodeId>) {
        self.epoch += 1;
        let c = Config::new(self.epoch, members);
        if let Some(n) = restart {
            self.net.restart(n, &c);
        }
        self.net.announce(&c);
    }
}

/// `a_partially_persisted_write_that_never_committed_is_rolled_back`:
/// node 4 persists a write no one else saw, crashes, and rejoins.
fn phantom(bugs: Bugs) {
    let mut s = Script::new("lin-synch", bugs);
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
}

/// `a_write_whose_val_reaches_the_buddy_after_its_answer_is_not_missed`.
fn late_val(bugs: Bugs) {
    let mut s = Script::new("lin-synch", bugs);
    s.net.crash(4);
    s.configure((0..4).collect(), None);
    s.net.run_for(20_000);
    s.net.slow_link(1, 0, 30_000);
    s.write(1, 5, 55);
    s.net.run_for(35_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(400_000);
}

/// `a_gdp_declared_in_a_configuration_the_buddy_has_not_heard_is_not_missed`.
fn gdp_ahead(bugs: Bugs) {
    let mut s = Script::new("lin-eventual", bugs);
    for k in 0..50 {
        s.write((k % 4) as NodeId, k, 100 + k);
    }
    s.net.run_for(300_000);
    s.write(1, 7, 777);
    s.net.run_for(3_000);
    s.net.crash(4);
    s.epoch += 1;
    let c = Config::new(s.epoch, (0..4).collect());
    s.net
        .announce_delayed(&c, &[200_000, 0, 200_000, 200_000, 200_000]);
    s.net.run_for(250_000);
    s.configure((0..5).collect(), Some(4));
    s.net.run_for(300_000);
}
