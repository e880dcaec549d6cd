//! The crash checker (docs/LRP.md, "Checking"): run a data structure on the
//! machine under a policy, crash it after every step with every (or a
//! sample of) subset of the persists in flight, and check each image at
//! three levels:
//! 1. `image`: the image is a consistent cut under RP (`cut`), with a
//!    witness (a lost write that had to persist before a surviving one);
//! 2. `structure`: null recovery reads a well-formed structure (`Lfd::recover`);
//! 3. `linearizability`: buffered durable linearizability: the operations
//!    whose linearizing write survived, replayed in order, return what they
//!    returned and leave exactly the recovered state.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use tandem_sim::Rng;

use crate::cut::Cut;
use crate::lfd::{replay, Image, Lfd, LfdKind, Op, Outcome};
use crate::machine::{event_of, Config, Persist, INITIAL};
use crate::sim::{run, Body, Machine, SimMem};
use crate::trace::Trace;
use crate::{Mutant, PolicyKind};

#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckOpts {
    pub lfd: LfdKind,
    pub policy: PolicyKind,
    pub threads: usize,
    /// Operations per thread.
    pub ops: usize,
    /// Keys are drawn from 1..=keys.
    pub keys: u64,
    pub prefill: usize,
    pub mutant: Option<Mutant>,
    /// At most this many images per crash point (all of them if fewer).
    pub images_per_point: usize,
    /// Check this many random crash points per seed instead of all of them (long runs).
    pub sample: Option<usize>,
}

impl CheckOpts {
    pub fn new(lfd: LfdKind, policy: PolicyKind) -> CheckOpts {
        CheckOpts {
            lfd,
            policy,
            threads: 3,
            ops: 12,
            keys: 8,
            prefill: 4,
            mutant: None,
            images_per_point: 32,
            sample: None,
        }
    }

    /// The command that replays one seed.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut c = format!("tandem lrp check --lfd {} --policy {} --threads {} --ops {} --keys {} --prefill {} --seed {seed} --seeds 1", self.lfd.name(), self.policy.name(), self.threads, self.ops, self.keys, self.prefill);
        if let Some(m) = self.mutant {
            c += &format!(" --mutant {}", m.name());
        }
        if let Some(n) = self.sample {
            c += &format!(" --crash-points {n}");
        }
        c
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Violation {
    pub seed: u64,
    /// The crash time (machine cycles).
    pub time: u64,
    pub level: &'static str,
    pub detail: String,
    pub replay: String,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SeedResult {
    pub crash_points: u64,
    pub images: u64,
    pub violation: Option<Violation>,
}

/// One executed run, kept for crash checking after it finished (so every
/// operation's outcome is known).
pub(crate) struct Run {
    pub(crate) trace: Trace,
    pub(crate) log: Vec<Persist>,
    pub(crate) steps: Vec<crate::sim::Step>,
    pub(crate) nvm: Vec<u64>,
    pub(crate) nvm_writer: Vec<u32>,
    pub(crate) initial: Vec<u64>,
    /// Mutating operations that linearized, by linearizing event.
    pub(crate) lin: Vec<(usize, Op, Outcome)>,
}

fn heap_words(o: &CheckOpts) -> u64 {
    4096 + (o.prefill + o.threads * o.ops) as u64 * 32 + o.threads as u64 * 256
}

/// Run `L` on the machine: create and prefill it, settle that as the
/// initial image, then run the threads' random operations.
fn execute<L: Lfd>(o: &CheckOpts, seed: u64) -> (Run, L) {
    let mut cfg = Config::check(o.threads, heap_words(o), seed);
    cfg.mutant = o.mutant.filter(|m| m.is_mechanism());
    let m = Rc::new(RefCell::new(Machine::new(cfg, o.policy)));
    let mut rng = Rng::new(seed);
    let lfd = setup::<L>(&m, o, &mut rng);
    m.borrow_mut().settle();
    let initial = {
        let mb = m.borrow();
        lfd.recover(&Image {
            words: &mb.core.nvm,
            writers: &mb.core.nvm_writer,
        })
        .expect("the prefilled structure is well-formed")
    };
    let (nvm, nvm_writer) = (
        m.borrow().core.nvm.clone(),
        m.borrow().core.nvm_writer.clone(),
    );
    let history = Rc::new(RefCell::new(Vec::new()));
    let bodies = (0..o.threads)
        .map(|t| {
            Some(thread_body(
                SimMem { m: m.clone(), t },
                lfd,
                o,
                rng.fork(),
                history.clone(),
            ))
        })
        .collect();
    run(&m, bodies);
    let mut lin: Vec<(usize, Op, Outcome)> = history
        .borrow()
        .iter()
        .filter_map(|&(op, out): &(Op, Outcome)| out.lin.map(|e| (e, op, out)))
        .collect();
    lin.sort_unstable_by_key(|x| x.0);
    let mut mb = m.borrow_mut();
    let run = Run {
        trace: std::mem::take(&mut mb.core.trace),
        log: std::mem::take(&mut mb.log),
        steps: std::mem::take(&mut mb.steps),
        nvm,
        nvm_writer,
        initial,
        lin,
    };
    (run, lfd)
}

fn setup<L: Lfd>(m: &Rc<RefCell<Machine>>, o: &CheckOpts, rng: &mut Rng) -> L {
    let slot = Rc::new(Cell::new(None));
    let keys: Vec<u64> = (0..o.prefill)
        .map(|i| {
            if o.lfd == LfdKind::Queue {
                1_000_000 + i as u64
            } else {
                1 + rng.below(o.keys)
            }
        })
        .collect();
    let (mem, out, mutant) = (SimMem { m: m.clone(), t: 0 }, slot.clone(), o.mutant);
    let body: Body = Box::pin(async move {
        let lfd = L::create(&mem, mutant).await;
        for k in keys {
            lfd.apply(&mem, Op::Insert(k)).await;
        }
        out.set(Some(lfd));
    });
    run(m, vec![Some(body)]);
    slot.take().expect("setup ran")
}

fn thread_body<L: Lfd>(
    mem: SimMem,
    lfd: L,
    o: &CheckOpts,
    mut rng: Rng,
    history: Rc<RefCell<Vec<(Op, Outcome)>>>,
) -> Body {
    let (ops, keys, t) = (o.ops, o.keys, mem.t as u64);
    Box::pin(async move {
        for i in 0..ops as u64 {
            let key = if L::KIND == LfdKind::Queue {
                (t + 1) << 32 | i
            } else {
                1 + rng.below(keys)
            };
            let op = if rng.chance(0.5) {
                Op::Insert(key)
            } else {
                Op::Delete(key)
            };
            let out = lfd.apply(&mem, op).await;
            history.borrow_mut().push((op, out));
        }
    })
}

/// Check one seed: every crash point, a bounded set of images at each.
pub fn check_seed(o: &CheckOpts, seed: u64) -> SeedResult {
    match o.lfd {
        LfdKind::List => check_run::<crate::lfd::list::List>(o, seed),
        LfdKind::Hash => check_run::<crate::lfd::hash::Hash>(o, seed),
        LfdKind::Queue => check_run::<crate::lfd::queue::Queue>(o, seed),
        LfdKind::Bst => check_run::<crate::lfd::bst::Bst>(o, seed),
        LfdKind::Skiplist => check_run::<crate::lfd::skiplist::Skiplist>(o, seed),
    }
}

fn check_run<L: Lfd>(o: &CheckOpts, seed: u64) -> SeedResult {
    let (run, lfd) = execute::<L>(o, seed);
    let mut crash = Crash::new(&run, o.threads, seed);
    let mut res = SeedResult::default();
    let mut times = crash.times();
    if let Some(n) = o.sample.filter(|&n| n < times.len()) {
        let mut rng = Rng::new(seed ^ 0x5a3f);
        for i in 0..n {
            let j = i + rng.below((times.len() - i) as u64) as usize;
            times.swap(i, j);
        }
        times.truncate(n);
        times.sort_unstable();
    }
    for time in times {
        res.crash_points += 1;
        if let Err((level, detail)) =
            crash.at_time(time, o.images_per_point, &mut res.images, |c| {
                c.levels(&lfd)
            })
        {
            res.violation = Some(Violation {
                seed,
                time,
                level,
                detail,
                replay: o.replay_command(seed),
            });
            break;
        }
    }
    res
}

/// Crash images of one run, built step by step from its persist log.
pub(crate) struct Crash<'a> {
    run: &'a Run,
    cut: Cut,
    pub(crate) nvm: Vec<u64>,
    pub(crate) writer: Vec<u32>,
    by_done: Vec<usize>,
    landed: usize,
    rng: Rng,
    survived: Vec<usize>,
    scratch: Vec<u32>,
}

impl<'a> Crash<'a> {
    pub(crate) fn new(run: &'a Run, threads: usize, seed: u64) -> Crash<'a> {
        let mut by_done: Vec<usize> = (0..run.log.len()).collect();
        by_done.sort_by_key(|&i| (run.log[i].done, i));
        let cut = Cut::new(&run.trace, threads);
        let survived = vec![0; cut.by_addr.len()];
        Crash {
            run,
            cut,
            nvm: run.nvm.clone(),
            writer: run.nvm_writer.clone(),
            by_done,
            landed: 0,
            rng: Rng::new(seed ^ 0xc4a5),
            survived,
            scratch: Vec::new(),
        }
    }

    fn apply(nvm: &mut [u64], writer: &mut [u32], p: &Persist) {
        let base = (p.line * crate::machine::LINE_WORDS) as usize;
        nvm[base..base + p.words.len()].copy_from_slice(&p.words);
        writer[base..base + p.words.len()].copy_from_slice(&p.writers);
    }

    /// Every crash time that gives a different set of images: after each
    /// step, and around each persist's issue and acknowledgement (a crash
    /// can happen in the middle of a stall, not only between accesses).
    pub(crate) fn times(&self) -> Vec<u64> {
        let mut t: Vec<u64> = self.run.steps.iter().map(|s| s.time).collect();
        for p in &self.run.log {
            t.extend([p.issue, p.done - 1]);
        }
        t.sort_unstable();
        t.dedup();
        t
    }

    /// The persists that may land at time `now`, grouped per line in issue
    /// order (each line's NVM controller is FIFO, so a line keeps a prefix:
    /// one not issued yet holds back those after it).
    fn in_flight(&self, now: u64) -> Vec<Vec<usize>> {
        let mut lines: Vec<(u64, Vec<usize>)> = Vec::new();
        let mut blocked = Vec::new();
        for (i, p) in self.run.log.iter().enumerate() {
            if p.done <= now || blocked.contains(&p.line) {
                continue;
            }
            if p.issue > now {
                blocked.push(p.line);
                continue;
            }
            match lines.iter_mut().find(|(l, _)| *l == p.line) {
                Some((_, v)) => v.push(i),
                None => lines.push((p.line, vec![i])),
            }
        }
        lines.into_iter().map(|(_, v)| v).collect()
    }

    /// Visit the images of a crash at `time` (times must come in order): all
    /// of them when there are at most `cap`, else `cap` of them (none
    /// landed, all landed, random).
    pub(crate) fn at_time<E>(
        &mut self,
        time: u64,
        cap: usize,
        images: &mut u64,
        mut visit: impl FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<(), E> {
        while self.landed < self.by_done.len()
            && self.run.log[self.by_done[self.landed]].done <= time
        {
            let p = &self.run.log[self.by_done[self.landed]];
            Self::apply(&mut self.nvm, &mut self.writer, p);
            self.landed += 1;
        }
        let flight = self.in_flight(time);
        let total: u64 = flight
            .iter()
            .try_fold(1u64, |acc, v| acc.checked_mul(v.len() as u64 + 1))
            .unwrap_or(u64::MAX);
        let count = total.min(cap as u64);
        let mut choice = vec![0usize; flight.len()];
        for k in 0..count {
            if total <= count {
                let mut x = k;
                for (c, v) in choice.iter_mut().zip(&flight) {
                    *c = (x % (v.len() as u64 + 1)) as usize;
                    x /= v.len() as u64 + 1;
                }
            } else {
                for (c, v) in choice.iter_mut().zip(&flight) {
                    *c = if k == 0 {
                        0
                    } else if k == 1 {
                        v.len()
                    } else {
                        self.rng.below(v.len() as u64 + 1) as usize
                    };
                }
            }
            *images += 1;
            let undo = self.land(&flight, &choice);
            self.survivors();
            let r = visit(self);
            for (base, w, wr) in undo.into_iter().rev() {
                self.nvm[base..base + w.len()].copy_from_slice(&w);
                self.writer[base..base + wr.len()].copy_from_slice(&wr);
            }
            r?;
        }
        Ok(())
    }

    /// Land the chosen prefix of each line's persists; what to undo.
    fn land(
        &mut self,
        flight: &[Vec<usize>],
        choice: &[usize],
    ) -> Vec<(usize, Vec<u64>, Vec<u32>)> {
        let mut undo = Vec::new();
        for (v, &c) in flight.iter().zip(choice) {
            if c == 0 {
                continue;
            }
            let p = &self.run.log[v[c - 1]];
            let base = (p.line * crate::machine::LINE_WORDS) as usize;
            let n = p.words.len();
            undo.push((
                base,
                self.nvm[base..base + n].to_vec(),
                self.writer[base..base + n].to_vec(),
            ));
            Self::apply(&mut self.nvm, &mut self.writer, p);
        }
        undo
    }

    fn survivors(&mut self) {
        for (i, (addr, _)) in self.cut.by_addr.iter().enumerate() {
            let w = self.writer[*addr as usize];
            self.survived[i] = if w == INITIAL {
                0
            } else {
                self.cut.survived(event_of(w))
            };
        }
    }

    /// The writes the image holds: each word's surviving write and those
    /// before it in coherence order.
    pub(crate) fn present_writes(&self) -> std::collections::BTreeSet<crate::trace::EventId> {
        self.cut
            .by_addr
            .iter()
            .zip(&self.survived)
            .flat_map(|((_, w), &k)| w[..k].iter().copied())
            .collect()
    }

    /// The image is a consistent cut under RP; else a witness in words.
    pub(crate) fn rp_legal(&mut self) -> Result<(), String> {
        self.cut
            .check(&self.survived, &mut self.scratch)
            .map_err(|(missing, present)| {
                let t = &self.run.trace;
                format!(
                    "{} must persist before {}, which survived without it",
                    t.describe(missing),
                    t.describe(present)
                )
            })
    }

    /// The three levels; the failing one's name and what it found.
    fn levels(&mut self, lfd: &impl Lfd) -> Result<(), (&'static str, String)> {
        self.rp_legal().map_err(|w| ("image", w))?;
        let img = Image {
            words: &self.nvm,
            writers: &self.writer,
        };
        let recovered = lfd.recover(&img).map_err(|e| ("structure", e))?;
        let persisted = self
            .run
            .lin
            .iter()
            .filter(|(e, ..)| self.cut.present(*e, &self.survived))
            .map(|&(_, op, out)| (op, out));
        let expected = replay(lfd_kind(lfd), &self.run.initial, persisted)
            .map_err(|e| ("linearizability", e))?;
        if expected != recovered {
            return Err((
                "linearizability",
                format!(
                    "the persisted operations leave {expected:?} but the image holds {recovered:?}"
                ),
            ));
        }
        Ok(())
    }
}

fn lfd_kind<L: Lfd>(_: &L) -> LfdKind {
    L::KIND
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub opts: CheckOpts,
    pub first_seed: u64,
    pub seeds: u64,
    pub crash_points: u64,
    pub images: u64,
    pub seconds: f64,
    pub images_per_second: f64,
    pub violating_seeds: u64,
    pub violations: Vec<Violation>,
}

/// Check `seeds` seeds from `first`; `progress` hears about each seed.
pub fn check(
    o: &CheckOpts,
    first: u64,
    seeds: u64,
    mut progress: impl FnMut(u64, &SeedResult),
) -> Report {
    let start = Instant::now();
    let mut r = Report {
        opts: o.clone(),
        first_seed: first,
        seeds,
        crash_points: 0,
        images: 0,
        seconds: 0.0,
        images_per_second: 0.0,
        violating_seeds: 0,
        violations: Vec::new(),
    };
    for seed in first..first + seeds {
        let s = check_seed(o, seed);
        r.crash_points += s.crash_points;
        r.images += s.images;
        progress(seed, &s);
        if let Some(v) = s.violation {
            r.violating_seeds += 1;
            if r.violations.len() < 10 {
                r.violations.push(v);
            }
        }
    }
    r.seconds = start.elapsed().as_secs_f64();
    r.images_per_second = r.images as f64 / r.seconds.max(1e-9);
    r
}

/// A seed's history around the words of a violation, for reading by hand:
/// every access to their lines and every persist of those lines.
pub fn explain(o: &CheckOpts, seed: u64, words: &[u64]) -> String {
    let run = match o.lfd {
        LfdKind::List => execute::<crate::lfd::list::List>(o, seed).0,
        LfdKind::Hash => execute::<crate::lfd::hash::Hash>(o, seed).0,
        LfdKind::Queue => execute::<crate::lfd::queue::Queue>(o, seed).0,
        LfdKind::Bst => execute::<crate::lfd::bst::Bst>(o, seed).0,
        LfdKind::Skiplist => execute::<crate::lfd::skiplist::Skiplist>(o, seed).0,
    };
    let line = |a: u64| a / crate::machine::LINE_WORDS;
    let lines: Vec<u64> = words.iter().map(|&w| line(w)).collect();
    let mut out = String::new();
    for (e, ev) in run
        .trace
        .events
        .iter()
        .enumerate()
        .filter(|(_, ev)| lines.contains(&line(ev.addr)))
    {
        out += &format!("{} from {:?}\n", run.trace.describe(e), ev.read_from());
    }
    for p in run.log.iter().filter(|p| lines.contains(&p.line)) {
        let writers: Vec<_> = p
            .writers
            .iter()
            .map(|&w| crate::machine::event_of(w))
            .collect();
        out += &format!(
            "persist line {} by core {} issued {} done {}: writers {:?}\n",
            p.line, p.issuer, p.issue, p.done, writers
        );
    }
    out
}
