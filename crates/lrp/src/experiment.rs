//! `tandem experiment lrp`: release persistency on the persistency machine
//! (thesis ch. 3; its evaluation, §3.6, as ratios). What each mechanism
//! costs per log-free data structure in counted cycles (cached and uncached
//! NVM, threads 1–32, the RET watermark), then what the crash checker
//! shows: violations per policy, mutants caught, the differential against
//! the axiomatic model, and how many crash images it checks per second.

use crate::bench::{bench, BenchOpts, BenchResult};
use crate::check::{check, CheckOpts};
use crate::lfd::LfdKind;
use crate::litmus::{differential, hunt};
use crate::machine::DEFAULT_HOP;
use crate::{Mutant, PolicyKind};
use serde_json::{json, Value};

use tandem_report::plot::{bars_svg, lines_svg, stack_svg};

type ExperimentResult = Result<(Value, String, String), String>;

const COST_POLICIES: [PolicyKind; 5] = [
    PolicyKind::Nop,
    PolicyKind::Lrp,
    PolicyKind::Bb,
    PolicyKind::Sb,
    PolicyKind::Eager,
];

struct Scale {
    threads: usize,
    size: usize,
    ops: usize,
    list_ops: usize,
    thread_sweep: &'static [usize],
    sizes: &'static [usize],
    check_seeds: u64,
}

fn scale(quick: bool) -> Scale {
    if quick {
        Scale {
            threads: 8,
            size: 4096,
            ops: 20,
            list_ops: 5,
            thread_sweep: &[1, 8],
            sizes: &[1024, 4096],
            check_seeds: 10,
        }
    } else {
        Scale {
            threads: 32,
            size: 65536,
            ops: 100,
            list_ops: 25,
            thread_sweep: &[1, 2, 4, 8, 16, 32],
            sizes: &[8192, 65536, 1 << 20],
            check_seeds: 200,
        }
    }
}

/// One choice for each of the cost model's unknowns (`--hop`,
/// `--no-driver` and `--no-stack-alloc` of `tandem lrp bench`).
struct Model {
    /// Cycles per mesh hop, which the thesis does not give (0: no network).
    hop: u64,
    /// The Synchrobench driver's own stores.
    driver: bool,
    /// The stack's and the allocator's stores.
    stack_alloc: bool,
    name: &'static str,
}

/// The tables use the first; the model sweep all of them.
const MODELS: [Model; 5] = [
    Model {
        hop: DEFAULT_HOP,
        driver: true,
        stack_alloc: true,
        name: "mesh 1 cycle/hop, driver, stack and allocator (the tables)",
    },
    Model {
        hop: DEFAULT_HOP,
        driver: true,
        stack_alloc: false,
        name: "mesh 1, driver, no stack or allocator",
    },
    Model {
        hop: DEFAULT_HOP,
        driver: false,
        stack_alloc: true,
        name: "mesh 1, no driver, stack and allocator",
    },
    Model {
        hop: 0,
        driver: true,
        stack_alloc: true,
        name: "no mesh, driver, stack and allocator",
    },
    Model {
        hop: 2,
        driver: true,
        stack_alloc: true,
        name: "mesh 2 cycles/hop, driver, stack and allocator",
    },
];

/// Costs within this fraction of each other are a tie when the thesis's
/// order SB > BB > LRP > NOP is judged.
pub const TIE: f64 = 0.01;

/// How a structure's ratios over NOP stand against SB > BB > LRP > NOP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Every step strictly in the thesis's order.
    Holds,
    /// In order once costs within [`TIE`] count as equal.
    Tie,
    Fails,
}

impl Order {
    pub fn of(sb: f64, bb: f64, lrp: f64) -> Order {
        let steps = [(sb, bb), (bb, lrp), (lrp, 1.0)];
        if steps.iter().all(|&(hi, lo)| hi > lo) {
            Order::Holds
        } else if steps.iter().all(|&(hi, lo)| hi >= lo * (1.0 - TIE)) {
            Order::Tie
        } else {
            Order::Fails
        }
    }

    fn word(self) -> &'static str {
        match self {
            Order::Holds => "yes",
            Order::Tie => "tie",
            Order::Fails => "no",
        }
    }
}

fn run_cost(
    s: &Scale,
    lfd: LfdKind,
    policy: PolicyKind,
    threads: usize,
    nvm: u64,
    watermark: usize,
) -> BenchResult {
    bench(&sized(s, lfd, policy, threads, s.size, nvm, watermark))
}

/// One cell's options, under the tables' model (`MODELS[0]`).
fn sized(
    s: &Scale,
    lfd: LfdKind,
    policy: PolicyKind,
    threads: usize,
    size: usize,
    nvm: u64,
    watermark: usize,
) -> BenchOpts {
    let ops = if lfd == LfdKind::List {
        s.list_ops
    } else {
        s.ops
    };
    BenchOpts {
        lfd,
        policy,
        threads,
        size,
        ops,
        nvm,
        hop: MODELS[0].hop,
        driver: MODELS[0].driver,
        stack_alloc: MODELS[0].stack_alloc,
        ret_watermark: watermark,
        seed: 1,
    }
}

/// LRP, BB and SB over NOP (cached, full scale) under each of [`MODELS`].
fn model_sweep(s: &Scale, progress: &dyn Fn(&str)) -> Vec<(LfdKind, usize, [f64; 3])> {
    let mut out = Vec::new();
    for lfd in LfdKind::ALL {
        for (i, model) in MODELS.iter().enumerate() {
            let cycles = |policy| {
                let base = sized(s, lfd, policy, s.threads, s.size, 120, 4);
                bench(&BenchOpts {
                    hop: model.hop,
                    driver: model.driver,
                    stack_alloc: model.stack_alloc,
                    ..base
                })
                .cycles
                .max(1) as f64
            };
            let nop = cycles(PolicyKind::Nop);
            let r = [PolicyKind::Lrp, PolicyKind::Bb, PolicyKind::Sb].map(|p| cycles(p) / nop);
            progress(&format!(
                "  lrp: {} {}: LRP/BB/SB over NOP {r:.2?}",
                lfd.name(),
                model.name
            ));
            out.push((lfd, i, r));
        }
    }
    out
}

fn model_markdown(sweep: &[(LfdKind, usize, [f64; 3])]) -> String {
    let mut md = String::from("\n**The cost model's unknowns.** Over NOP, cached, at the tables' scale, under each choice the thesis leaves open: the mesh's cycles per hop (Table 3.1 names a 2D mesh of 64 tiles with 32-bit flits, not its latency; 1 is that of PriME, the thesis's simulator), whether the Synchrobench driver's own stores (each thread's seed and counters) run, and whether the stack's and the allocator's do (each operation's call frames; malloc's free-list head and count). The last column judges the thesis's order, with costs within 1 % a tie:\n\n| structure | model | LRP | BB | SB | SB > BB > LRP > NOP |\n|---|---|---|---|---|---|\n");
    for (l, i, [lrp, bb, sb]) in sweep {
        md += &format!(
            "| {} | {} | {lrp:.3} | {bb:.3} | {sb:.3} | {} |\n",
            l.name(),
            MODELS[*i].name,
            Order::of(*sb, *bb, *lrp).word()
        );
    }
    md + "\n"
}

/// LRP and BB over NOP as the structure grows (the thesis: no significant change).
fn size_sweep(s: &Scale, progress: &dyn Fn(&str)) -> Vec<(LfdKind, PolicyKind, Vec<f64>)> {
    let mut out = Vec::new();
    for lfd in [LfdKind::Hash, LfdKind::Bst] {
        let nops: Vec<f64> = s
            .sizes
            .iter()
            .map(|&n| {
                bench(&sized(s, lfd, PolicyKind::Nop, s.threads, n, 120, 4))
                    .cycles
                    .max(1) as f64
            })
            .collect();
        for p in [PolicyKind::Lrp, PolicyKind::Bb] {
            let v: Vec<f64> = s
                .sizes
                .iter()
                .zip(&nops)
                .map(|(&n, &nop)| {
                    bench(&sized(s, lfd, p, s.threads, n, 120, 4)).cycles as f64 / nop
                })
                .collect();
            progress(&format!(
                "  lrp: {} {} over NOP by size {:?}: {v:.2?}",
                lfd.name(),
                p.name(),
                s.sizes
            ));
            out.push((lfd, p, v));
        }
    }
    out
}

/// The same structures on real atomics and two OS threads (wall clock).
fn volatile_baseline(s: &Scale, progress: &dyn Fn(&str)) -> Vec<(LfdKind, f64)> {
    LfdKind::ALL
        .into_iter()
        .map(|lfd| {
            let ops = if lfd == LfdKind::List { 200 } else { 20_000 };
            let r = crate::bench::volatile(lfd, 2, s.size, ops, 1);
            progress(&format!(
                "  lrp: {} on real atomics: {r:.0} ops/s",
                lfd.name()
            ));
            (lfd, r)
        })
        .collect()
}

/// Cycles of every policy per structure, normalised to NOP.
fn cost_table(s: &Scale, nvm: u64, progress: &dyn Fn(&str)) -> Vec<(LfdKind, Vec<BenchResult>)> {
    LfdKind::ALL
        .iter()
        .map(|&lfd| {
            let rs: Vec<BenchResult> = COST_POLICIES
                .iter()
                .map(|&p| run_cost(s, lfd, p, s.threads, nvm, 4))
                .collect();
            let nop = rs[0].cycles.max(1) as f64;
            let line: Vec<String> = rs
                .iter()
                .map(|r| format!("{} {:.2}x", r.opts.policy.name(), r.cycles as f64 / nop))
                .collect();
            progress(&format!(
                "  lrp: {} nvm {nvm}: {}",
                lfd.name(),
                line.join(", ")
            ));
            (lfd, rs)
        })
        .collect()
}

fn ratio(rs: &[BenchResult], p: PolicyKind) -> f64 {
    let nop = rs[0].cycles.max(1) as f64;
    rs.iter()
        .find(|r| r.opts.policy == p)
        .map_or(f64::NAN, |r| r.cycles as f64 / nop)
}

fn critical(rs: &[BenchResult], p: PolicyKind) -> f64 {
    rs.iter()
        .find(|r| r.opts.policy == p)
        .map_or(f64::NAN, |r| 100.0 * r.critical_share)
}

/// % overhead over NOP of LRP and BB as threads grow (thesis Figs. 3.7–3.8).
fn thread_sweep(s: &Scale, progress: &dyn Fn(&str)) -> Vec<(LfdKind, PolicyKind, Vec<f64>)> {
    let mut out = Vec::new();
    for lfd in LfdKind::ALL {
        let nops: Vec<u64> = s
            .thread_sweep
            .iter()
            .map(|&t| run_cost(s, lfd, PolicyKind::Nop, t, 120, 4).cycles.max(1))
            .collect();
        for p in [PolicyKind::Lrp, PolicyKind::Bb] {
            let v: Vec<f64> = s
                .thread_sweep
                .iter()
                .zip(&nops)
                .map(|(&t, &n)| {
                    100.0 * (run_cost(s, lfd, p, t, 120, 4).cycles as f64 / n as f64 - 1.0)
                })
                .collect();
            progress(&format!(
                "  lrp: {} {} overhead by threads {:?}: {:?}",
                lfd.name(),
                p.name(),
                s.thread_sweep,
                v.iter().map(|x| x.round()).collect::<Vec<_>>()
            ));
            out.push((lfd, p, v));
        }
    }
    out
}

const WATERMARKS: [usize; 6] = [1, 2, 4, 8, 16, 28];

/// LRP's cost as the RET watermark (not given by the thesis) varies.
fn watermark_sweep(s: &Scale, progress: &dyn Fn(&str)) -> Vec<(LfdKind, Vec<f64>)> {
    [LfdKind::Hash, LfdKind::Bst, LfdKind::Queue]
        .into_iter()
        .map(|lfd| {
            let nop = run_cost(s, lfd, PolicyKind::Nop, s.threads, 120, 4)
                .cycles
                .max(1) as f64;
            let v: Vec<f64> = WATERMARKS
                .iter()
                .map(|&w| run_cost(s, lfd, PolicyKind::Lrp, s.threads, 120, w).cycles as f64 / nop)
                .collect();
            progress(&format!(
                "  lrp: {} LRP/NOP by RET watermark {WATERMARKS:?}: {v:.2?}",
                lfd.name()
            ));
            (lfd, v)
        })
        .collect()
}

pub fn experiment(quick: bool, progress: &dyn Fn(&str)) -> ExperimentResult {
    let s = scale(quick);
    let cached = cost_table(&s, 120, progress);
    let uncached = cost_table(&s, 350, progress);
    let threads = thread_sweep(&s, progress);
    let watermarks = watermark_sweep(&s, progress);
    let sizes = size_sweep(&s, progress);
    let models = model_sweep(&s, progress);
    let volatile = volatile_baseline(&s, progress);
    let checks = crash_checks(&s, progress);
    let mutants = mutant_hunts(progress);
    let diff = differential(9, if quick { 20 } else { 80 }, 4);
    progress(&format!(
        "  lrp: differential: LRP reached {} of {} RP-legal images, {} illegal",
        diff.reached, diff.legal, diff.reached_illegal
    ));
    let json = json!({
        "scale": { "threads": s.threads, "size": s.size, "ops_per_thread": s.ops, "list_ops_per_thread": s.list_ops, "hop": MODELS[0].hop, "driver": MODELS[0].driver, "stack_alloc": MODELS[0].stack_alloc },
        "cached": cost_json(&cached), "uncached": cost_json(&uncached),
        "threads": threads.iter().map(|(l, p, v)| json!({"lfd": l.name(), "policy": p.name(), "threads": s.thread_sweep, "overhead_pct": v})).collect::<Vec<_>>(),
        "ret_watermark": watermarks.iter().map(|(l, v)| json!({"lfd": l.name(), "watermarks": WATERMARKS, "lrp_over_nop": v})).collect::<Vec<_>>(),
        "models": models.iter().map(|(l, i, r)| json!({"lfd": l.name(), "hop": MODELS[*i].hop, "driver": MODELS[*i].driver, "stack_alloc": MODELS[*i].stack_alloc, "lrp_bb_sb_over_nop": r})).collect::<Vec<_>>(),
        "sizes": sizes.iter().map(|(l, p, v)| json!({"lfd": l.name(), "policy": p.name(), "sizes": s.sizes, "over_nop": v})).collect::<Vec<_>>(),
        "volatile_ops_per_s_2_threads": volatile.iter().map(|(l, r)| json!({"lfd": l.name(), "ops_per_s": r})).collect::<Vec<_>>(),
        "checks": checks, "mutants": mutants, "differential": diff,
    });
    let svg = figure(&s, &cached, &uncached, &threads);
    let mut md = markdown(
        &s,
        &cached,
        &uncached,
        &threads,
        &watermarks,
        &checks,
        &mutants,
        &diff,
    );
    md += &model_markdown(&models);
    md += &extra_markdown(&s, &sizes, &volatile);
    Ok((json, svg, md))
}

fn cost_json(t: &[(LfdKind, Vec<BenchResult>)]) -> Value {
    t.iter()
        .map(|(l, rs)| json!({"lfd": l.name(), "runs": rs}))
        .collect()
}

/// The crash checker per structure and policy: violating seeds, images, images/s.
fn crash_checks(s: &Scale, progress: &dyn Fn(&str)) -> Vec<Value> {
    let mut out = Vec::new();
    for lfd in LfdKind::ALL {
        for p in PolicyKind::ALL {
            let r = check(&CheckOpts::new(lfd, p), 1, s.check_seeds, |_, _| {});
            progress(&format!(
                "  lrp: check {} {}: {} of {} seeds violate ({} images, {:.0}/s)",
                lfd.name(),
                p.name(),
                r.violating_seeds,
                r.seeds,
                r.images,
                r.images_per_second
            ));
            out.push(json!({"lfd": lfd.name(), "policy": p.name(), "seeds": r.seeds, "violating_seeds": r.violating_seeds, "crash_points": r.crash_points, "images": r.images, "seconds": r.seconds, "images_per_second": r.images_per_second, "first": r.violations.first()}));
        }
    }
    out
}

/// Mechanism mutants: executions until caught. Data-structure mutants:
/// violating seeds of 20 under LRP.
fn mutant_hunts(progress: &dyn Fn(&str)) -> Vec<Value> {
    let mut out = Vec::new();
    for m in Mutant::ALL {
        let v = if m.is_mechanism() {
            let runs = hunt(m, 2000);
            json!({"mutant": m.name(), "kind": "mechanism", "executions_to_catch": runs})
        } else {
            let lfd = match m {
                Mutant::QueueRelaxedLink => LfdKind::Queue,
                Mutant::BstEarlyPublish => LfdKind::Bst,
                _ => LfdKind::List,
            };
            let mut o = CheckOpts::new(lfd, PolicyKind::Lrp);
            o.mutant = Some(m);
            let r = check(&o, 1, 20, |_, _| {});
            json!({"mutant": m.name(), "kind": "data structure", "lfd": lfd.name(), "violating_seeds_of_20": r.violating_seeds, "level": r.violations.first().map(|v| v.level)})
        };
        progress(&format!("  lrp: mutant {v}"));
        out.push(v);
    }
    out
}

fn figure(
    s: &Scale,
    cached: &[(LfdKind, Vec<BenchResult>)],
    uncached: &[(LfdKind, Vec<BenchResult>)],
    threads: &[(LfdKind, PolicyKind, Vec<f64>)],
) -> String {
    let bars = |t: &[(LfdKind, Vec<BenchResult>)]| -> Vec<(String, f64)> {
        t.iter()
            .flat_map(|(l, rs)| {
                rs.iter().skip(1).map(move |r| {
                    (
                        format!("{} {}", l.name(), r.opts.policy.name()),
                        ratio(rs, r.opts.policy),
                    )
                })
            })
            .collect()
    };
    let xs: Vec<String> = s.thread_sweep.iter().map(|t| t.to_string()).collect();
    let series: Vec<(String, Vec<Option<f64>>)> = threads
        .iter()
        .map(|(l, p, v)| {
            (
                format!("{} {}", l.name(), p.name()),
                v.iter().map(|&x| Some(x)).collect(),
            )
        })
        .collect();
    stack_svg(&[
        bars_svg(
            &format!(
                "execution time / NOP, cached NVM (120 cycles), {} threads, {} keys",
                s.threads, s.size
            ),
            "x",
            &bars(cached),
        ),
        bars_svg(
            "execution time / NOP, uncached NVM (350 cycles)",
            "x",
            &bars(uncached),
        ),
        lines_svg(
            "overhead over NOP by threads (cached)",
            "threads",
            "% over NOP",
            &xs,
            &series,
        ),
    ])
}

#[allow(clippy::too_many_arguments)]
fn markdown(
    s: &Scale,
    cached: &[(LfdKind, Vec<BenchResult>)],
    uncached: &[(LfdKind, Vec<BenchResult>)],
    threads: &[(LfdKind, PolicyKind, Vec<f64>)],
    watermarks: &[(LfdKind, Vec<f64>)],
    checks: &[Value],
    mutants: &[Value],
    diff: &crate::litmus::Differential,
) -> String {
    let mut md = format!(
        "The persistency machine of `crates/lrp` (per-core L1s of 32 KB, 8-way, 64-byte lines; directory; NVM at 120 cycles cached, 350 uncached; Table 3.1's latencies, counted, not timed), {} threads, {} keys prefilled, 1:1 inserts and deletes on keys 1..={} ({} operations per thread; {} for the list, whose operations walk it), each with the stores a whole-binary trace has around it: Synchrobench's driver (its per-thread seed and counters), the operation's call frames on the thread's stack, and malloc's bookkeeping for each node; the mesh at {} cycle per hop (see the model sweep below). Ratios are counted execution times (the slowest core) over NOP's in the same run. `tandem lrp bench` reruns one cell.\n\n",
        s.threads,
        s.size,
        2 * s.size,
        s.ops,
        s.list_ops,
        MODELS[0].hop
    );
    md += &cost_markdown("Cached NVM (thesis Fig. 3.4, 3.5)", cached);
    md += &cost_markdown("Uncached NVM (thesis Fig. 3.6)", uncached);
    md += &claims_markdown(cached, uncached);
    md += &sweeps_markdown(s, threads, watermarks);
    md += &check_markdown(checks, mutants, diff);
    md
}

fn cost_markdown(title: &str, t: &[(LfdKind, Vec<BenchResult>)]) -> String {
    let mut md = format!("**{title}.** Execution time over NOP, and the share of write-backs on the critical path of the core that did them (it stalled for them):\n\n| structure | LRP | BB | SB | eager | LRP critical | BB critical |\n|---|---|---|---|---|---|---|\n");
    for (l, rs) in t {
        md += &format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} % | {:.0} % |\n",
            l.name(),
            ratio(rs, PolicyKind::Lrp),
            ratio(rs, PolicyKind::Bb),
            ratio(rs, PolicyKind::Sb),
            ratio(rs, PolicyKind::Eager),
            critical(rs, PolicyKind::Lrp),
            critical(rs, PolicyKind::Bb)
        );
    }
    md + "\n"
}

/// The thesis's claims, each checked against this run's numbers.
fn claims_markdown(
    cached: &[(LfdKind, Vec<BenchResult>)],
    uncached: &[(LfdKind, Vec<BenchResult>)],
) -> String {
    let order = |o| order_names(cached, o);
    let (holds, ties) = (order(Order::Holds), order(Order::Tie));
    let lrp_c: Vec<f64> = cached
        .iter()
        .map(|(_, rs)| ratio(rs, PolicyKind::Lrp))
        .collect();
    let lrp_u: Vec<f64> = uncached
        .iter()
        .map(|(_, rs)| ratio(rs, PolicyKind::Lrp))
        .collect();
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let crit_l = avg(&cached
        .iter()
        .map(|(_, rs)| critical(rs, PolicyKind::Lrp))
        .collect::<Vec<_>>());
    let crit_b = avg(&cached
        .iter()
        .map(|(_, rs)| critical(rs, PolicyKind::Bb))
        .collect::<Vec<_>>());
    let gain = |t: &[(LfdKind, Vec<BenchResult>)], l: LfdKind| {
        t.iter().find(|(k, _)| *k == l).map_or(f64::NAN, |(_, rs)| {
            100.0 * (1.0 - ratio(rs, PolicyKind::Lrp) / ratio(rs, PolicyKind::Bb))
        })
    };
    let gain_avg = |t: &[(LfdKind, Vec<BenchResult>)]| avg(&LfdKind::ALL.map(|l| gain(t, l)));
    let min = |v: &[f64]| {
        (
            v.iter().cloned().fold(f64::INFINITY, f64::min),
            v.iter().cloned().fold(0.0, f64::max),
        )
    };
    let (cmin, cmax) = min(&lrp_c);
    let (umin, umax) = min(&lrp_u);
    format!(
        "**Against the thesis (§3.6.4).**\n\n| claim | thesis | here |\n|---|---|---|\n\
         | SB > BB > LRP > NOP (ties within 1 %) | every structure | {} of 5 ({}); {} more only as a tie ({}) |\n\
         | LRP over NOP, cached | 1.05–1.12 (avg 1.09) | {cmin:.2}–{cmax:.2} (avg {:.2}) |\n\
         | LRP over NOP, uncached | 1.06–1.20 (avg 1.11) | {umin:.2}–{umax:.2} (avg {:.2}) |\n\
         | write-backs on the critical path, LRP vs BB | 15 % vs 69 % | {crit_l:.0} % vs {crit_b:.0} % |\n\
         | LRP's gain over BB, BST vs list | 37 % vs 19 % | {:.0} % vs {:.0} % |\n\
         | LRP's gain over BB, uncached vs cached (avg) | 76 % vs 33 % | {:.0} % vs {:.0} % |\n\n\
         Gain is `1 − T_LRP / T_BB` (the thesis does not define it). Where the two columns part, the cost model is the first suspect: see docs/LRP.md, \"What the numbers mean\".\n\n",
        holds.len(),
        names(&holds),
        ties.len(),
        names(&ties),
        avg(&lrp_c),
        avg(&lrp_u),
        gain(cached, LfdKind::Bst),
        gain(cached, LfdKind::List),
        gain_avg(uncached),
        gain_avg(cached),
    )
}

/// The structures whose cached ratios stand as `o` against the thesis's order.
fn order_names(cached: &[(LfdKind, Vec<BenchResult>)], o: Order) -> Vec<&'static str> {
    cached
        .iter()
        .filter(|(_, rs)| {
            let r = |p| ratio(rs, p);
            Order::of(r(PolicyKind::Sb), r(PolicyKind::Bb), r(PolicyKind::Lrp)) == o
        })
        .map(|(l, _)| l.name())
        .collect()
}

fn names(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn sweeps_markdown(
    s: &Scale,
    threads: &[(LfdKind, PolicyKind, Vec<f64>)],
    watermarks: &[(LfdKind, Vec<f64>)],
) -> String {
    let cols: Vec<String> = s.thread_sweep.iter().map(|t| t.to_string()).collect();
    let mut md = format!("**Threads (thesis Figs. 3.7–3.8).** % over NOP, cached:\n\n| structure | policy | {} |\n|---|---|{}\n", cols.join(" | "), "---|".repeat(cols.len()));
    for (l, p, v) in threads {
        md += &format!(
            "| {} | {} | {} |\n",
            l.name(),
            p.name(),
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    md += &format!("\n**RET watermark** (not given by the thesis; 4 is the default). LRP over NOP, cached:\n\n| structure | {} |\n|---|{}\n", WATERMARKS.map(|w| w.to_string()).join(" | "), "---|".repeat(WATERMARKS.len()));
    for (l, v) in watermarks {
        md += &format!(
            "| {} | {} |\n",
            l.name(),
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    md + "\n"
}

fn check_markdown(
    checks: &[Value],
    mutants: &[Value],
    diff: &crate::litmus::Differential,
) -> String {
    let mut md = "**Crash checking** (`tandem lrp check`: 3 threads × 12 operations on 8 keys, a crash at every step and inside every stall, up to 32 subsets of the persists in flight each, three levels). Violating seeds:\n\n| structure | lrp | sb | bb | eager | nop | arp |\n|---|---|---|---|---|---|---|\n".to_string();
    let (mut images, mut seconds) = (0.0, 0.0);
    for lfd in LfdKind::ALL {
        let cell = |p: &str| {
            checks
                .iter()
                .find(|c| c["lfd"] == lfd.name() && c["policy"] == p)
                .map_or("-".into(), |c| {
                    format!("{} / {}", c["violating_seeds"], c["seeds"])
                })
        };
        md += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            lfd.name(),
            cell("lrp"),
            cell("sb"),
            cell("bb"),
            cell("eager"),
            cell("nop"),
            cell("arp")
        );
    }
    for c in checks {
        images += c["images"].as_f64().unwrap_or(0.0);
        seconds += c["seconds"].as_f64().unwrap_or(0.0);
    }
    md += &format!("\nSpeed: {:.0} crash images checked per second on one core ({images:.0} images in {seconds:.1} s: run the machine, land each subset, check all three levels, undo).\n\n", images / seconds.max(1e-9));
    md += "**Mutants** (`tandem_lrp::Mutant`). Mechanism mutants: executions (program × seed) until an illegal image; data-structure mutants: violating seeds of 20 under LRP:\n\n| mutant | caught |\n|---|---|\n";
    for m in mutants {
        let caught = match m["kind"].as_str() {
            Some("mechanism") => m["executions_to_catch"]
                .as_u64()
                .map_or("NOT CAUGHT in 2000".into(), |n| {
                    format!("after {n} execution(s)")
                }),
            _ => format!(
                "{} of 20 seeds on the {} ({} level)",
                m["violating_seeds_of_20"],
                m["lfd"].as_str().unwrap_or("?"),
                m["level"].as_str().unwrap_or("-")
            ),
        };
        md += &format!("| {} | {caught} |\n", m["mutant"].as_str().unwrap_or("?"));
    }
    md += &format!(
        "\n**Differential.** On random programs (2 threads, up to 5 accesses on 3 words), the LRP machine reached {} of the {} RP-legal images of the executions it ran ({:.0} %), and {} illegal ones, over {} executions: it refines RP, and is stricter than the model by {:.0} %.\n",
        diff.reached,
        diff.legal,
        100.0 * diff.reached as f64 / diff.legal.max(1) as f64,
        diff.reached_illegal,
        diff.executions,
        100.0 * (1.0 - diff.reached as f64 / diff.legal.max(1) as f64)
    );
    md
}

fn extra_markdown(
    s: &Scale,
    sizes: &[(LfdKind, PolicyKind, Vec<f64>)],
    volatile: &[(LfdKind, f64)],
) -> String {
    let cols: Vec<String> = s.sizes.iter().map(|n| format!("{}K", n / 1024)).collect();
    let mut md = format!("\n**Size** (the thesis: no significant change from 8K to 1M). Over NOP, cached, {} threads:\n\n| structure | policy | {} |\n|---|---|{}\n", s.threads, cols.join(" | "), "---|".repeat(cols.len()));
    for (l, p, v) in sizes {
        md += &format!(
            "| {} | {} | {} |\n",
            l.name(),
            p.name(),
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    md += &format!("\n**Volatile baseline**: the same code on real `AtomicU64`s, 2 OS threads, {} keys (wall clock on this 2-core machine): ", s.size);
    md += &volatile
        .iter()
        .map(|(l, r)| format!("{} {:.2} M ops/s", l.name(), r / 1e6))
        .collect::<Vec<_>>()
        .join(", ");
    md + ".\n"
}
