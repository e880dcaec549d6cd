//! Small programs on the machine: run a litmus program under a
//! policy over many seeds, crash it after every step with every subset of
//! the persists in flight, and report each image of the watched words with
//! its RP verdict. Also random small programs, for the differential test
//! against the axiomatic model and for hunting mechanism mutants.
//!
//! The litmus programs (`tests/litmus.rs` on the axiomatic models,
//! `tests/machine_litmus.rs` on the machine), numbered as tests cite them:
//! 1. message passing: `W x; Rel y ‖ Acq y; W z` persists a prefix of the chain;
//! 2. one-way barriers: a write after a release may persist before it;
//! 3. ARP: a release may persist before what it publishes (thesis Fig. 3.1b);
//! 4. no persistency model: the consumer's write can outlive the producer's
//!    (thesis §2.4), which RP forbids;
//! 5. writes to one word persist in order;
//! 6. a release to a dirty line persists the line first (thesis §3.5.2.2);
//! 7. an acquire RMW orders what follows it (I3).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use tandem_sim::Rng;

use crate::check::{Crash, Run};
use crate::machine::{Config, LINE_WORDS};
use crate::sim::{run, Body, Machine, SimMem};
use crate::trace::{EventId, Sync, Trace};
use crate::{Mutant, PMem, PolicyKind};

/// One instruction of a litmus thread. Addresses are words; word `8·k`
/// starts line `k`, which maps to L1 set `k mod 4` in the check geometry.
#[derive(Clone, Copy, Debug)]
pub enum Instr {
    Store(u64, u64, Sync),
    Load(u64, Sync),
    Cas(u64, u64, u64, Sync),
    /// Spin with acquire loads until the word holds the value.
    Await(u64, u64),
    /// Plain writes to `n` private lines of L1 set `set`: evicts what the set held.
    Fill(u64, u64),
}

#[derive(Clone, Debug)]
pub struct Program {
    pub threads: Vec<Vec<Instr>>,
    /// The words an image is projected on.
    pub watch: Vec<u64>,
    /// Machine parameters beyond [`Config::check`] (e.g. a bigger RET).
    pub tweak: Option<fn(&mut Config)>,
}

impl Program {
    pub fn new(threads: Vec<Vec<Instr>>, watch: &[u64]) -> Program {
        Program {
            threads,
            watch: watch.to_vec(),
            tweak: None,
        }
    }
}

/// An image of the watched words, and whether RP allows it (else a witness).
#[derive(Clone, Debug, Default)]
pub struct Outcomes {
    pub images: BTreeMap<Vec<u64>, Result<(), String>>,
    pub runs: u64,
    pub crash_images: u64,
}

impl Outcomes {
    pub fn reachable(&self, values: &[u64]) -> bool {
        self.images.contains_key(values)
    }

    pub fn illegal(&self) -> impl Iterator<Item = (&Vec<u64>, &String)> {
        self.images
            .iter()
            .filter_map(|(v, r)| r.as_ref().err().map(|w| (v, w)))
    }
}

const FILL_BASE: u64 = 4096;

async fn exec(m: &SimMem, i: Instr, fills: &mut u64) {
    match i {
        Instr::Store(a, v, s) => m.store(a, v, s).await,
        Instr::Load(a, s) => {
            m.load(a, s).await;
        }
        Instr::Cas(a, old, new, s) => {
            let _ = m.cas(a, old, new, s).await;
        }
        Instr::Await(a, v) => while m.load(a, Sync::Acquire).await != v {},
        Instr::Fill(set, n) => {
            for _ in 0..n {
                let line = FILL_BASE / LINE_WORDS + (m.t as u64 * 64 + *fills) * 4 + set;
                *fills += 1;
                m.store(line * LINE_WORDS, 1, Sync::Plain).await;
            }
        }
    }
}

/// Execute `p` once; the run, ready for crashing.
fn execute(p: &Program, policy: PolicyKind, mutant: Option<Mutant>, seed: u64) -> Run {
    let mut cfg = Config::check(
        p.threads.len(),
        FILL_BASE + 64 * 64 * LINE_WORDS * p.threads.len() as u64,
        seed,
    );
    cfg.mutant = mutant;
    if let Some(f) = p.tweak {
        f(&mut cfg);
    }
    let m = Rc::new(RefCell::new(Machine::new(cfg, policy)));
    let bodies = p.threads.iter().enumerate().map(|(t, code)| {
        let (mem, code) = (SimMem { m: m.clone(), t }, code.clone());
        let body: Body = Box::pin(async move {
            let mut fills = 0;
            for i in code {
                exec(&mem, i, &mut fills).await;
            }
        });
        Some(body)
    });
    run(&m, bodies.collect());
    let mut mb = m.borrow_mut();
    let (nvm, nvm_writer) = (vec![0; mb.core.nvm.len()], vec![0; mb.core.nvm.len()]);
    Run {
        trace: std::mem::take(&mut mb.core.trace),
        log: std::mem::take(&mut mb.log),
        steps: std::mem::take(&mut mb.steps),
        nvm,
        nvm_writer,
        initial: Vec::new(),
        lin: Vec::new(),
    }
}

/// Every image of `p` over `seeds`, each crash point with up to `cap`
/// images; `visit` also sees the trace, the writes each image holds and
/// whether the linear-time check found it legal.
pub fn explore(
    p: &Program,
    policy: PolicyKind,
    mutant: Option<Mutant>,
    seeds: std::ops::Range<u64>,
    cap: usize,
    mut visit: impl FnMut(&Trace, &BTreeSet<EventId>, bool),
) -> Outcomes {
    let mut out = Outcomes::default();
    for seed in seeds {
        let (_, images) = explore_seed(
            p,
            policy,
            mutant,
            seed,
            cap,
            &mut out.crash_images,
            &mut visit,
        );
        out.runs += 1;
        for (values, verdict) in images {
            out.images.entry(values).or_insert(verdict);
        }
    }
    out
}

/// One execution of `p` and the images its crash points reach.
pub fn explore_seed(
    p: &Program,
    policy: PolicyKind,
    mutant: Option<Mutant>,
    seed: u64,
    cap: usize,
    count: &mut u64,
    mut visit: impl FnMut(&Trace, &BTreeSet<EventId>, bool),
) -> (Trace, BTreeMap<Vec<u64>, Result<(), String>>) {
    let run = execute(p, policy, mutant, seed);
    let mut crash = Crash::new(&run, p.threads.len(), seed);
    let mut images = BTreeMap::new();
    for time in crash.times() {
        let _ = crash.at_time::<()>(time, cap, count, |c| {
            let values: Vec<u64> = p.watch.iter().map(|&a| c.nvm[a as usize]).collect();
            let verdict = c.rp_legal();
            visit(&run.trace, &c.present_writes(), verdict.is_ok());
            images.entry(values).or_insert(verdict);
            Ok(())
        });
    }
    drop(crash);
    (run.trace, images)
}

/// A random program: `threads` threads of up to `ops` instructions on
/// `words` words spread over two L1 sets (so evictions happen), with every
/// kind of access and ordering. Values are unique per store.
pub fn random_program(rng: &mut Rng, threads: usize, ops: usize, words: u64) -> Program {
    let addr = |w: u64| (w / 2 * 4 + 1 + w % 2) * LINE_WORDS + w % 3;
    let syncs = [Sync::Plain, Sync::Acquire, Sync::Release, Sync::AcqRel];
    let mut next = 1;
    let mut code = vec![Vec::new(); threads];
    for c in code.iter_mut() {
        for _ in 0..1 + rng.below(ops as u64) {
            let a = addr(rng.below(words));
            let s = syncs[rng.below(4) as usize];
            next += 1;
            c.push(match rng.below(5) {
                0 | 1 => Instr::Store(a, next, if s == Sync::Acquire { Sync::Plain } else { s }),
                2 => Instr::Load(a, if s == Sync::Release { Sync::Acquire } else { s }),
                3 => Instr::Cas(a, 0, next, s),
                _ => Instr::Fill(1 + rng.below(2), 2),
            });
        }
    }
    Program {
        threads: code,
        watch: (0..words).map(addr).collect(),
        tweak: None,
    }
}

/// The RP-legal images of one execution, each as the surviving write of
/// every watched word (None: its initial value); None if there are more
/// than 4096 candidates. Writes to other words survive as needed.
pub fn legal_survivor_images(t: &Trace, watch: &[u64]) -> Option<BTreeSet<Vec<Option<EventId>>>> {
    let p = crate::persist_order(t, crate::Model::Rp);
    let per: Vec<Vec<EventId>> = watch
        .iter()
        .map(|&a| {
            t.writes()
                .into_iter()
                .filter(|&w| t.events[w].addr == a)
                .collect()
        })
        .collect();
    let total: usize = per.iter().map(|w| w.len() + 1).product();
    if total > 4096 {
        return None;
    }
    let watched: BTreeSet<EventId> = per.iter().flatten().copied().collect();
    let mut out = BTreeSet::new();
    for mut k in 0..total {
        let survived: Vec<usize> = per
            .iter()
            .map(|w| {
                let c = k % (w.len() + 1);
                k /= w.len() + 1;
                c
            })
            .collect();
        let held: BTreeSet<EventId> = per
            .iter()
            .zip(&survived)
            .flat_map(|(w, &c)| w[..c].iter().copied())
            .collect();
        if !held.iter().any(|&w| {
            watched
                .iter()
                .any(|&a| !held.contains(&a) && p.before(a, w))
        }) {
            out.insert(
                per.iter()
                    .zip(&survived)
                    .map(|(w, &c)| c.checked_sub(1).map(|i| w[i]))
                    .collect(),
            );
        }
    }
    Some(out)
}

/// The differential test over random programs: how many of the
/// RP-legal images the LRP machine reaches, and whether it ever reaches an
/// illegal one.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Differential {
    pub executions: u64,
    pub reached: u64,
    pub legal: u64,
    pub reached_illegal: u64,
}

pub fn differential(rng_seed: u64, programs: usize, seeds: u64) -> Differential {
    let mut rng = Rng::new(rng_seed);
    let mut d = Differential::default();
    for _ in 0..programs {
        let p = random_program(&mut rng, 2, 5, 3);
        for seed in 0..seeds {
            let mut reached = BTreeSet::new();
            let mut count = 0;
            let (trace, _) = explore_seed(
                &p,
                PolicyKind::Lrp,
                None,
                seed,
                4096,
                &mut count,
                |t, present, _| {
                    reached.insert(
                        p.watch
                            .iter()
                            .map(|&a| {
                                present
                                    .iter()
                                    .rev()
                                    .copied()
                                    .find(|&e| t.events[e].addr == a)
                            })
                            .collect::<Vec<_>>(),
                    );
                },
            );
            let Some(legal) = legal_survivor_images(&trace, &p.watch) else {
                continue;
            };
            d.executions += 1;
            d.reached += reached.len() as u64;
            d.legal += legal.len() as u64;
            d.reached_illegal += reached.difference(&legal).count() as u64;
        }
    }
    d
}

/// A program that exposes `m` (a mechanism mutant) within a few seeds; the
/// ones random programs find are hunted with `random_program` instead.
pub fn mutant_program(m: Mutant) -> Option<Program> {
    use Instr::*;
    use Sync::*;
    let big_ret = |c: &mut Config| (c.ret_size, c.ret_watermark) = (8, 6);
    match m {
        // M2: three releases in a RET big enough to hold them; evicting the
        // third persists the other two newest first.
        Mutant::ReleaseOrder => Some(Program {
            tweak: Some(big_ret),
            ..Program::new(
                vec![vec![
                    Store(8, 1, Release),
                    Store(16, 1, Release),
                    Store(24, 1, Release),
                    Fill(3, 2),
                ]],
                &[8, 16, 24],
            )
        }),
        // M6: x keeps min-epoch 14 past the wrap of 4-bit epochs.
        Mutant::EpochWrap => {
            let mut t0: Vec<_> = (1..=14).map(|i| Store(32, i, Release)).collect();
            t0.insert(13, Store(8, 1, Plain));
            t0.extend([Store(24, 1, Release), Store(16, 1, Release), Fill(2, 2)]);
            Some(Program {
                tweak: Some(big_ret),
                ..Program::new(vec![t0], &[32, 8, 24, 16])
            })
        }
        // M7: five releases in a 4-entry RET; the dropped one is evicted.
        Mutant::RetOverflow => {
            let t0 = vec![
                Store(32, 1, Plain),
                Store(8, 1, Release),
                Store(16, 1, Release),
                Store(24, 1, Release),
                Store(64, 1, Release),
                Store(72, 1, Release),
                Fill(1, 2),
            ];
            Some(Program::new(vec![t0], &[32, 8, 16, 24, 64, 72]))
        }
        _ => None,
    }
}

/// Hunt mechanism mutant `m`: its own program if it has one, else random
/// programs (3 threads, up to 6 accesses on 4 words, 20 seeds each). The
/// number of executions until an illegal image, or None within `budget`.
pub fn hunt(m: Mutant, budget: u64) -> Option<u64> {
    let caught = |p: &Program, seed: u64| {
        explore(
            p,
            PolicyKind::Lrp,
            Some(m),
            seed..seed + 1,
            64,
            |_, _, _| {},
        )
        .illegal()
        .next()
        .is_some()
    };
    if let Some(p) = mutant_program(m) {
        return (0..budget).find(|&s| caught(&p, s)).map(|s| s + 1);
    }
    let mut rng = Rng::new(7);
    let mut runs = 0;
    while runs < budget {
        let p = random_program(&mut rng, 3, 6, 4);
        for seed in 0..20 {
            runs += 1;
            if caught(&p, seed) {
                return Some(runs);
            }
        }
    }
    None
}
