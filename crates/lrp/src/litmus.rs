//! Small programs on the machine (spec §5.2): run a litmus program under a
//! policy over many seeds, crash it after every step with every subset of
//! the persists in flight, and report each image of the watched words with
//! its RP verdict. Also random small programs, for the differential test
//! against the axiomatic model and for hunting mechanism mutants.

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
        Program { threads, watch: watch.to_vec(), tweak: None }
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
        self.images.iter().filter_map(|(v, r)| r.as_ref().err().map(|w| (v, w)))
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
    let mut cfg = Config::check(p.threads.len(), FILL_BASE + 64 * 64 * LINE_WORDS * p.threads.len() as u64, seed);
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
    Run { trace: std::mem::take(&mut mb.core.trace), log: std::mem::take(&mut mb.log), steps: std::mem::take(&mut mb.steps), nvm, nvm_writer, initial: Vec::new(), lin: Vec::new() }
}

/// Every image of `p` over `seeds`, each crash point with up to `cap`
/// images; `visit` also sees the trace, the writes each image holds and
/// whether the linear-time check found it legal.
pub fn explore(p: &Program, policy: PolicyKind, mutant: Option<Mutant>, seeds: std::ops::Range<u64>, cap: usize, mut visit: impl FnMut(&Trace, &BTreeSet<EventId>, bool)) -> Outcomes {
    let mut out = Outcomes::default();
    for seed in seeds {
        let (_, images) = explore_seed(p, policy, mutant, seed, cap, &mut out.crash_images, &mut visit);
        out.runs += 1;
        for (values, verdict) in images {
            out.images.entry(values).or_insert(verdict);
        }
    }
    out
}

/// One execution of `p` and the images its crash points reach.
pub fn explore_seed(p: &Program, policy: PolicyKind, mutant: Option<Mutant>, seed: u64, cap: usize, count: &mut u64, mut visit: impl FnMut(&Trace, &BTreeSet<EventId>, bool)) -> (Trace, BTreeMap<Vec<u64>, Result<(), String>>) {
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
    Program { threads: code, watch: (0..words).map(addr).collect(), tweak: None }
}
