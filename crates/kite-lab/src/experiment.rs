//! `tandem experiment kite-throughput`, `kite-sleep` and `kite-lfd`:
//! Kite's results (Kite §7) as ratios on one simulated cluster,
//! beside the paper's, and the seeded correctness checks behind them;
//! `kite-tcp`: the same ratios over node processes on loopback.

use serde_json::{json, Value};
use tandem_kite::lfd::{LfdKind, LfdWorkload};
use tandem_kite::simcheck::{check_with, CheckOpts, Faults, RandomMix, Workload};
use tandem_kite::KiteConfig;

use crate::bench::{
    bench_system, fit_lane, sleep_timeline, KiteBenchOpts, LaneFit, System, SystemResult,
};
use crate::procs::{bench_tcp, BenchMix, LoadOpts, NodeOpts};
use tandem_report::plot::lines_svg;

type ExperimentResult = Result<(Value, String, String), String>;

const WRITES: [f64; 6] = [0.01, 0.05, 0.2, 0.5, 0.75, 1.0];
/// The paper's Fig. 4 (Kite §7.1; values read from the figure), Mreq/s: ES, ABD, Paxos,
/// Kite, ZAB.
const PAPER: [[f64; 6]; 5] = [
    [765.0, 478.0, 275.0, 160.0, 119.0, 96.0],
    [130.0, 105.0, 86.0, 67.0, 67.0, 63.0],
    [129.0, 95.0, 58.0, 34.0, 26.0, 23.0],
    [526.0, 353.0, 219.0, 138.0, 105.0, 84.0],
    [172.0, 130.0, 76.0, 30.0, 21.0, 16.0],
];
/// Fig. 5's Kite variants: (sync, RMW share).
const VARIANTS: [(f64, f64); 3] = [(0.05, 0.01), (0.2, 0.05), (0.5, 0.5)];
/// Fig. 5 read from the figure: each variant over Kite at 5 % sync.
const PAPER_FIG5: [[f64; 6]; 3] = [
    [0.78, 0.82, 0.89, 0.91, 0.92, 0.75],
    [0.60, 0.54, 0.61, 0.66, 0.75, 0.75],
    [0.37, 0.39, 0.32, 0.27, 0.31, 0.31],
];

fn opts(quick: bool) -> KiteBenchOpts {
    let measure_ns = if quick { 200_000 } else { 1_000_000 };
    KiteBenchOpts {
        measure_ns,
        warmup_ns: measure_ns / 5,
        ..KiteBenchOpts::default()
    }
}

/// The one point ZAB's ordered lane is fitted on: ZAB / ES at 20 %
/// writes, the lowest write ratio at which the paper's ZAB writes have
/// reached their plateau (15.2 of 16 M writes/s), so the first to measure
/// the lane. Every other figure is predicted.
const FIT_WRITES: f64 = 0.2;

/// The paper's ratio of two systems at write ratio `w` (Fig. 4).
fn paper_ratio(a: System, b: System, w: f64) -> f64 {
    let row = |s| match s {
        System::Es => 0,
        System::Abd => 1,
        System::Paxos => 2,
        System::Kite => 3,
        System::Zab => 4,
    };
    let i = WRITES
        .iter()
        .position(|&x| x == w)
        .expect("one of the paper's write ratios");
    PAPER[row(a)][i] / PAPER[row(b)][i]
}

/// `o` with ZAB's lane fitted on [`FIT_WRITES`], and the fit.
fn fitted(o: &KiteBenchOpts, progress: &dyn Fn(&str)) -> (KiteBenchOpts, LaneFit) {
    let at = KiteBenchOpts {
        write_ratio: FIT_WRITES,
        ..o.clone()
    };
    let fit = fit_lane(&at, paper_ratio(System::Zab, System::Es, FIT_WRITES));
    progress(&format!(
        "  kite: ZAB's lane fitted at {:.0}% writes: {} ns per write gives ZAB/ES {:.3} (paper {:.3})",
        FIT_WRITES * 100.0,
        fit.lane_ns,
        fit.zab_over_es,
        fit.target
    ));
    let o = KiteBenchOpts {
        lane_ns: fit.lane_ns,
        ..o.clone()
    };
    (o, fit)
}

/// Within 25 % of the paper counts as reproduced.
fn verdict(ours: f64, paper: f64) -> &'static str {
    if (ours / paper - 1.0).abs() <= 0.25 {
        "✓"
    } else {
        "✗"
    }
}

/// ZAB / ES under other lane hand-offs, at the write ratios that bound
/// it: whether any `h` puts the paper's low and high write ratios both
/// within 25 % (the evidence for what the fit cannot reach).
fn lane_sweep(
    o: &KiteBenchOpts,
    rs: &[SystemResult],
    progress: &dyn Fn(&str),
) -> Vec<(u64, Vec<f64>)> {
    let mut hs = vec![0, 50, 100, 200, 400, 800, 1_600, o.lane_ns];
    hs.sort_unstable();
    hs.dedup();
    let mut out = Vec::new();
    for h in hs {
        let row: Vec<f64> = LANE_WRITES
            .iter()
            .map(|&w| {
                let z = KiteBenchOpts {
                    write_ratio: w,
                    lane_ns: h,
                    ..o.clone()
                };
                bench_system(&z, System::Zab).throughput_ops
                    / find(rs, System::Es, w).throughput_ops
            })
            .collect();
        progress(&format!("  kite: ZAB lane {h} ns: ZAB/ES {row:.2?}"));
        out.push((h, row));
    }
    out
}

/// The write ratios of the lane sweep.
const LANE_WRITES: [f64; 3] = [0.01, 0.05, 1.0];

/// The main ratios with other send costs (ZAB's lane refitted for each).
fn send_sensitivity(o: &KiteBenchOpts, progress: &dyn Fn(&str)) -> Vec<(u64, u64, Vec<[f64; 4]>)> {
    let mut out = Vec::new();
    for send_ns in [0, 200] {
        let (o, fit) = fitted(
            &KiteBenchOpts {
                send_ns,
                ..o.clone()
            },
            &|_| {},
        );
        let rows = [0.01, 1.0]
            .iter()
            .map(|&w| {
                let o = KiteBenchOpts {
                    write_ratio: w,
                    ..o.clone()
                };
                let t: Vec<f64> = [System::Es, System::Kite, System::Abd, System::Zab]
                    .iter()
                    .map(|&s| bench_system(&o, s).throughput_ops)
                    .collect();
                [t[1] / t[0], t[2] / t[0], t[3] / t[0], t[1] / t[3]]
            })
            .collect();
        progress(&format!(
            "  kite: send {send_ns} ns (lane {} ns): {rows:.2?}",
            fit.lane_ns
        ));
        out.push((send_ns, fit.lane_ns, rows));
    }
    out
}

fn find(rs: &[SystemResult], s: System, w: f64) -> &SystemResult {
    rs.iter()
        .find(|r| r.system == s.name() && r.write_ratio == w)
        .expect("measured")
}

/// Fig. 4 and 6: every system at every write ratio, 5 % sync.
fn sweep(o: &KiteBenchOpts, progress: &dyn Fn(&str)) -> Vec<SystemResult> {
    let mut out = Vec::new();
    for w in WRITES {
        for s in System::ALL {
            let r = bench_system(
                &KiteBenchOpts {
                    write_ratio: w,
                    ..o.clone()
                },
                s,
            );
            progress(&format!(
                "  kite: {:>3.0}% writes {:<5} {:>12.0} ops/s",
                w * 100.0,
                s.name(),
                r.throughput_ops
            ));
            out.push(r);
        }
    }
    out
}

/// Fig. 5: Kite with more sync and RMWs, over Kite at 5 % sync.
fn variants(
    o: &KiteBenchOpts,
    base: &[SystemResult],
    progress: &dyn Fn(&str),
) -> Vec<(f64, f64, Vec<f64>)> {
    let mut out = Vec::new();
    for (sync, rmw) in VARIANTS {
        let v: Vec<f64> = WRITES
            .iter()
            .map(|&w| {
                let o = KiteBenchOpts {
                    write_ratio: w,
                    sync_ratio: sync,
                    rmw_ratio: rmw.min(w),
                    ..o.clone()
                };
                bench_system(&o, System::Kite).throughput_ops
                    / find(base, System::Kite, w).throughput_ops
            })
            .collect();
        progress(&format!(
            "  kite: {:.0}% sync, {:.0}% RMW over 5% sync: {v:.2?}",
            sync * 100.0,
            rmw * 100.0
        ));
        out.push((sync, rmw, v));
    }
    out
}

/// Seeded checks: the random mix and each data structure, under faults.
fn checks(quick: bool, progress: &dyn Fn(&str)) -> Vec<Value> {
    let seeds = if quick { 5 } else { 200 };
    let o = CheckOpts::default();
    let mut out = Vec::new();
    for w in [
        None,
        Some(LfdKind::Stack),
        Some(LfdKind::Queue),
        Some(LfdKind::List),
    ] {
        let work = |seed| -> Box<dyn Workload> {
            match w {
                None => Box::new(RandomMix::new(o.mix, o.sessions)),
                Some(k) => Box::new(LfdWorkload::new(k, 4, 4, o.sessions, seed)),
            }
        };
        let s = check_with(&o, 1, seeds, work, |_| {});
        let name = w.map_or("mix", |k| k.name());
        progress(&format!(
            "  kite: check {name}: {} seeds, {} ops, {} violations",
            s.seeds, s.ops, s.violation_count
        ));
        out.push(json!({"workload": name, "seeds": s.seeds, "ops": s.ops, "violation_count": s.violation_count, "stats": s.stats}));
    }
    out
}

pub fn throughput(quick: bool, progress: &dyn Fn(&str)) -> ExperimentResult {
    let (o, fit) = fitted(&opts(quick), progress);
    let rs = sweep(&o, progress);
    let vs = variants(&o, &rs, progress);
    let lanes = lane_sweep(&o, &rs, progress);
    let sends = send_sensitivity(&o, progress);
    let cs = checks(quick, progress);
    let json = json!({"options": o, "lane_fit": fit, "results": rs,
        "variants": vs.iter().map(|(s, r, v)| json!({"sync": s, "rmw": r, "over_kite_5pct_sync": v})).collect::<Vec<_>>(),
        "lane_sweep": lanes.iter().map(|(h, r)| json!({"lane_ns": h, "write_ratios": LANE_WRITES, "zab_over_es": r})).collect::<Vec<_>>(),
        "send_sensitivity": sends.iter().map(|(s, h, r)| json!({"send_ns": s, "lane_ns": h, "kite_abd_zab_over_es_and_kite_over_zab_at_1_and_100pct": r})).collect::<Vec<_>>(),
        "checks": cs});
    let xs: Vec<String> = WRITES
        .iter()
        .map(|w| format!("{:.0}%", w * 100.0))
        .collect();
    let series: Vec<(String, Vec<Option<f64>>)> = System::ALL
        .iter()
        .map(|&s| {
            (
                s.name().to_string(),
                WRITES
                    .iter()
                    .map(|&w| Some(find(&rs, s, w).throughput_ops / 1e6))
                    .collect(),
            )
        })
        .collect();
    let svg = lines_svg(
        "Kite and its baselines vs write ratio (5% sync; simulated, 5 replicas)",
        "write ratio",
        "M requests/s (simulated)",
        &xs,
        &series,
    );
    let md = markdown(&o, &fit, &rs, &vs, &cs) + &lane_markdown(&o, &lanes, &sends);
    Ok((json, svg, md))
}

/// One row of ratios at `writes` (each one of [`WRITES`]), ours (the paper's).
fn ratio_row(
    writes: &[f64],
    name: &str,
    ours: impl Fn(f64) -> f64,
    paper: impl Fn(usize) -> f64,
) -> String {
    let at = |w: f64| {
        WRITES
            .iter()
            .position(|&x| x == w)
            .expect("one of the paper's write ratios")
    };
    let cells: Vec<String> = writes
        .iter()
        .map(|&w| {
            let (o, p) = (ours(w), paper(at(w)));
            format!("{o:.2} ({p:.2}) {}", verdict(o, p))
        })
        .collect();
    format!("| {name} | {} |\n", cells.join(" | "))
}

/// Four ratios (Kite / ES, Kite / ZAB, ABD / ES, Paxos / ZAB) at `writes`: this
/// run's (the paper's Fig. 4).
fn ratio_table(writes: &[f64], t: impl Fn(System, f64) -> f64) -> String {
    let head: Vec<String> = writes
        .iter()
        .map(|w| format!("{:.0}% writes", w * 100.0))
        .collect();
    let mut md = format!(
        "| ratio | {} |\n|---|{}\n",
        head.join(" | "),
        "---|".repeat(writes.len())
    );
    md += &ratio_row(
        writes,
        "Kite / ES",
        |w| t(System::Kite, w) / t(System::Es, w),
        |i| PAPER[3][i] / PAPER[0][i],
    );
    md += &ratio_row(
        writes,
        "Kite / ZAB",
        |w| t(System::Kite, w) / t(System::Zab, w),
        |i| PAPER[3][i] / PAPER[4][i],
    );
    md += &ratio_row(
        writes,
        "ABD / ES",
        |w| t(System::Abd, w) / t(System::Es, w),
        |i| PAPER[1][i] / PAPER[0][i],
    );
    md += &ratio_row(
        writes,
        "Paxos / ZAB",
        |w| t(System::Paxos, w) / t(System::Zab, w),
        |i| PAPER[2][i] / PAPER[4][i],
    );
    md += &ratio_row(
        writes,
        "Paxos / ES",
        |w| t(System::Paxos, w) / t(System::Es, w),
        |i| PAPER[2][i] / PAPER[0][i],
    );
    md + &ratio_row(
        writes,
        "ZAB / ES",
        |w| t(System::Zab, w) / t(System::Es, w),
        |i| PAPER[4][i] / PAPER[0][i],
    )
}

fn markdown(
    o: &KiteBenchOpts,
    fit: &LaneFit,
    rs: &[SystemResult],
    vs: &[(f64, f64, Vec<f64>)],
    cs: &[Value],
) -> String {
    let t = |s, w| find(rs, s, w).throughput_ops;
    let mut md = format!(
        "Kite, ES, ABD, Paxos and ZAB on one simulated cluster of the paper's machine (Kite §6): 5 replicas of {} worker cores, \
         {} µs round trip, {} ns of CPU per input and {} ns per message sent, per destination; ZAB applies its total order \
         through one ordered lane per node, {} ns per write, **fitted** so that ZAB / ES at {:.0} % writes is the paper's \
         {:.3} (it gives {:.3}); nothing else is fitted. {} closed-loop sessions per replica, {} keys, uniform, {:.1} ms \
         measured per run. Each cell: this run's ratio (the paper's Fig. 4 ratio, read from its figure), ✓ within 25 %, ✗ outside.\n\n",
        o.cores, o.rtt_ns as f64 / 1e3, o.cpu_ns, o.send_ns, fit.lane_ns, fit.write_ratio * 100.0, fit.target,
        fit.zab_over_es, o.sessions_per_node, o.keys, o.measure_ns as f64 / 1e6
    );
    let head: Vec<String> = WRITES
        .iter()
        .map(|w| format!("{:.0}% writes", w * 100.0))
        .collect();
    md += &ratio_table(&WRITES, t);
    md += &format!(
        "\nWrite-only (Fig. 6): Paxos / ZAB {:.2} (paper 1.44) {}, ZAB / ES {:.2} (paper 0.17) {}.\n",
        t(System::Paxos, 1.0) / t(System::Zab, 1.0),
        verdict(t(System::Paxos, 1.0) / t(System::Zab, 1.0), 1.44),
        t(System::Zab, 1.0) / t(System::Es, 1.0),
        verdict(t(System::Zab, 1.0) / t(System::Es, 1.0), 16.0 / 96.0),
    );
    md += "\nFig. 5 (Kite with more synchronization, over Kite at 5 % sync; RMWs capped at the write ratio), this run's (the paper's):\n\n";
    md += &format!(
        "| variant | {} |\n|---|{}\n",
        head.join(" | "),
        "---|".repeat(WRITES.len())
    );
    for ((sync, rmw, v), paper) in vs.iter().zip(PAPER_FIG5) {
        let cells: Vec<String> = v
            .iter()
            .zip(paper)
            .map(|(x, p)| format!("{x:.2} ({p:.2}) {}", verdict(*x, p)))
            .collect();
        md += &format!(
            "| {:.0}% sync, {:.0}% RMW | {} |\n",
            sync * 100.0,
            rmw * 100.0,
            cells.join(" | ")
        );
    }
    md += "\nSeeded checks behind these numbers (`tandem kite check`, faults drawn per seed):\n\n| workload | seeds | operations | violations |\n|---|---|---|---|\n";
    for c in cs {
        md += &format!(
            "| {} | {} | {} | {} |\n",
            c["workload"].as_str().unwrap_or(""),
            c["seeds"],
            c["ops"],
            c["violation_count"]
        );
    }
    md
}

/// The lane sweep and the send costs, with what they show.
fn lane_markdown(
    o: &KiteBenchOpts,
    lanes: &[(u64, Vec<f64>)],
    sends: &[(u64, u64, Vec<[f64; 4]>)],
) -> String {
    let paper: Vec<f64> = LANE_WRITES
        .iter()
        .map(|&w| paper_ratio(System::Zab, System::Es, w))
        .collect();
    let head: Vec<String> = LANE_WRITES
        .iter()
        .zip(&paper)
        .map(|(w, p)| format!("{:.0}% writes (paper {p:.2})", w * 100.0))
        .collect();
    let mut md = format!(
        "\n**What the one parameter cannot reach.** ZAB / ES under other lane hand-offs (the fitted one is {} ns):\n\n| lane ns per write | {} |\n|---|{}\n",
        o.lane_ns, head.join(" | "), "---|".repeat(LANE_WRITES.len())
    );
    for (h, row) in lanes {
        let cells: Vec<String> = row
            .iter()
            .zip(&paper)
            .map(|(x, p)| format!("{x:.2} {}", verdict(*x, *p)))
            .collect();
        md += &format!("| {h} | {} |\n", cells.join(" | "));
    }
    let both = lanes
        .iter()
        .filter(|(_, r)| verdict(r[0], paper[0]) == "✓" && verdict(r[2], paper[2]) == "✓")
        .count();
    md += &format!(
        "\n{} of these hand-offs put ZAB / ES within 25 % at both 1 % and 100 % writes. The paper's own ZAB numbers say why: its writes run at 1.7 M/s at 1 % writes and 16 M/s at 100 % (Fig. 4). A lane that lets 16 M writes/s through is idle nine tenths of the time at 1.7 M/s, so it cannot be what holds ZAB at 0.22 of ES there; a lane slow enough to hold it (a hand-off nine times longer) would cap the write-only point at 1.7 M/s. With one hand-off per write the 1 % and 100 % points contradict each other. In the authors' ZAB a worker takes global ids for a batch of its writes at once, and the next worker waits for the whole batch, so the hand-off is paid per batch, and batches grow with the load: that would reconcile the two, at the cost of a batching model this machine does not have.\n",
        if both == 0 { "None".to_string() } else { both.to_string() }
    );
    md += "\nThe send cost is our choice, not a fit. With ZAB's lane refitted for each, the main ratios at 1 % / 100 % writes:\n\n| ns per send | lane ns | Kite / ES | ABD / ES | ZAB / ES | Kite / ZAB |\n|---|---|---|---|---|---|\n";
    for (send, h, rows) in sends {
        let c = |i: usize| format!("{:.2} / {:.2}", rows[0][i], rows[1][i]);
        md += &format!(
            "| {send} | {h} | {} | {} | {} | {} |\n",
            c(0),
            c(1),
            c(2),
            c(3)
        );
    }
    md += "| (paper) | | 0.69 / 0.88 | 0.17 / 0.66 | 0.22 / 0.17 | 3.06 / 5.25 |\n";
    md
}

/// Fig. 8: one of five replicas sleeps; throughput per replica over time.
pub fn sleep(quick: bool, progress: &dyn Fn(&str)) -> ExperimentResult {
    // Keys scaled with the per-replica rate: the paper's replicas serve
    // ~68 M req/s over 1 M keys (every key touched every ~15 ms), ours
    // ~3 M/s, so 40 K keys keep the same refresh horizon after a wake-up
    // (a woken replica refreshes each key once, Kite §4).
    // It runs on docs/DESIGN.md §7.1's first machine (one core per
    // replica, sends free), for which the keys above were scaled.
    let o = KiteBenchOpts {
        write_ratio: 0.05,
        sync_ratio: 0.05,
        keys: 40_000,
        cores: 1,
        send_ns: 0,
        lane_ns: 0,
        ..KiteBenchOpts::default()
    };
    let cfg = KiteConfig::default();
    let ms = 1_000_000;
    let (from, dur, total, bucket) = if quick {
        (2 * ms, 3 * ms, 8 * ms, 200_000)
    } else {
        (5 * ms, 20 * ms, 100 * ms, 500_000)
    };
    let tl = sleep_timeline(&o, cfg, 1, from, dur, total, bucket);
    let total_of = |row: &Vec<f64>, skip: Option<usize>| {
        row.iter()
            .enumerate()
            .filter(|(n, _)| Some(*n) != skip)
            .map(|(_, v)| v)
            .sum::<f64>()
    };
    let bucket = tl.bucket_us * 1e3;
    let idx = |t: u64| (t as f64 / bucket) as usize;
    let steady: Vec<&Vec<f64>> = tl.per_node_ops[idx(from / 4)..idx(from)].iter().collect();
    let steady_rest =
        steady.iter().map(|r| total_of(r, Some(1))).sum::<f64>() / steady.len().max(1) as f64;
    let asleep = &tl.per_node_ops[idx(from + cfg.timeout_ns * 2)..idx(from + dur)];
    let during =
        asleep.iter().map(|r| total_of(r, Some(1))).sum::<f64>() / asleep.len().max(1) as f64;
    let stall_us = longest_dip(&tl.per_node_ops, steady_rest, tl.bucket_us);
    progress(&format!("  kite-sleep: the other four at {:.2}x their steady throughput while node 1 sleeps; longest dip below half: {stall_us:.0} µs (time-out {:.0} µs)", during / steady_rest, tl.timeout_us));
    let every = (tl.per_node_ops.len() / 10).max(1);
    let xs: Vec<String> = (0..tl.per_node_ops.len())
        .map(|i| {
            if i % every == 0 {
                format!("{:.0}", i as f64 * tl.bucket_us / 1e3)
            } else {
                String::new()
            }
        })
        .collect();
    let series: Vec<(String, Vec<Option<f64>>)> = (0..o.nodes as usize)
        .map(|n| {
            (
                format!("node {n}{}", if n == 1 { " (sleeps)" } else { "" }),
                tl.per_node_ops.iter().map(|r| Some(r[n] / 1e6)).collect(),
            )
        })
        .collect();
    let svg = lines_svg(
        "Kite with one replica asleep (simulated; 5% writes, 5% sync)",
        "time (ms)",
        "M requests/s per replica",
        &xs,
        &series,
    );
    let json = json!({"timeline": tl, "steady_rest_ops": steady_rest, "asleep_rest_ops": during, "rest_ratio": during / steady_rest, "longest_dip_us": stall_us});
    let md = format!(
        "One of five replicas is stopped (its inputs queue, as under SIGSTOP) from {:.0} ms for {:.0} ms; 5 % writes, 5 % sync, \
         40 K keys (scaled with the per-replica rate, see `crates/kite-lab/src/experiment.rs`); time-out {:.0} µs. The other four replicas serve **{:.2}×** their steady throughput while it sleeps (paper Fig. 8: \
         0.92× for the total, 1.16× per remaining replica); the longest dip of the others below half their steady rate lasts \
         **{stall_us:.0} µs** (one time-out is {:.0} µs).\n",
        from as f64 / 1e6, dur as f64 / 1e6, tl.timeout_us, during / steady_rest, tl.timeout_us
    );
    Ok((json, svg, md))
}

/// The longest run of buckets in which the awake replicas (all but node 1)
/// serve less than half of `steady`, in µs.
fn longest_dip(rows: &[Vec<f64>], steady: f64, bucket_us: f64) -> f64 {
    let (mut best, mut run) = (0usize, 0usize);
    for r in rows {
        let rest: f64 = r
            .iter()
            .enumerate()
            .filter(|(n, _)| *n != 1)
            .map(|(_, v)| v)
            .sum();
        run = if rest < steady / 2.0 { run + 1 } else { 0 };
        best = best.max(run);
    }
    best as f64 * bucket_us
}

/// One data structure on Kite in simulated time, against ZAB-ideal: ZAB's
/// throughput at the structure's own write ratio, divided by the Kite
/// calls one operation makes (the paper's Fig. 7 normalization).
fn lfd_run(kind: LfdKind, fields: u64, machine: &KiteBenchOpts, quick: bool) -> Value {
    let run_ns = if quick { 5_000_000 } else { 20_000_000 };
    let o = CheckOpts {
        sessions: 200,
        run_ns,
        faults: Some(Faults::default()),
        cfg: KiteConfig::default(),
        net: machine.net(),
        ..CheckOpts::default()
    };
    let work = LfdWorkload::new(kind, 1000, fields, o.sessions, 1);
    let log = work.log.clone();
    let r = tandem_kite::simcheck::run_with(1, &o, Box::new(work));
    let (from, to) = (run_ns / 5, run_ns);
    let done = log
        .borrow()
        .ops
        .iter()
        .filter(|op| op.complete_ns.is_some_and(|c| (from..to).contains(&c)))
        .count();
    let ops_per_s = done as f64 * 1e9 / (to - from) as f64;
    let calls = r.history.len() as f64 / log.borrow().ops.len().max(1) as f64;
    let writes = r
        .history
        .iter()
        .filter(|h| {
            h.kind.written().is_some() || matches!(h.kind, tandem_check::RcKind::CasFail { .. })
        })
        .count();
    let write_ratio = writes as f64 / r.history.len().max(1) as f64;
    let zab = bench_system(
        &KiteBenchOpts {
            write_ratio,
            sync_ratio: 0.0,
            ..machine.clone()
        },
        System::Zab,
    )
    .throughput_ops;
    let zab_ideal = zab / calls;
    json!({"structure": format!("{}-{fields}", kind.name()), "ops_per_s": ops_per_s, "calls_per_op": calls, "write_ratio": write_ratio,
           "zab_ideal_ops_per_s": zab_ideal, "over_zab_ideal": ops_per_s / zab_ideal, "violation": r.violation})
}

/// The lanes (ns per write) a figure is reproduced at: the interval over
/// which `f(h)` lies within 25 % of `paper`, given that `f` only rises
/// (`rising`) or only falls as the lane grows. None: at no lane in
/// 0..=[`LANE_MAX`].
fn lane_interval(f: &dyn Fn(u64) -> f64, paper: f64, rising: bool) -> Option<(u64, u64)> {
    let (low, high) = (0.75 * paper, 1.25 * paper);
    // The first lane past which `f` has left the band on the side it moves to,
    // and the first lane at which it has entered it.
    let enter = |v: f64| if rising { v >= low } else { v <= high };
    let leave = |v: f64| if rising { v > high } else { v < low };
    let lo = first_lane(&|h| enter(f(h)))?;
    let hi = first_lane(&|h| leave(f(h))).map_or(LANE_MAX, |h| h.saturating_sub(1));
    (lo <= hi && !leave(f(lo))).then_some((lo, hi))
}

/// The largest lane the interval search tries.
const LANE_MAX: u64 = 4_096;

/// The smallest lane in 0..=[`LANE_MAX`] at which `p` holds, for a `p` that
/// holds from some lane on (bisection); None if it never does.
fn first_lane(p: &dyn Fn(u64) -> bool) -> Option<u64> {
    if p(0) {
        return Some(0);
    }
    if !p(LANE_MAX) {
        return None;
    }
    let (mut lo, mut hi) = (0, LANE_MAX); // p(lo) false, p(hi) true
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match p(mid) {
            true => hi = mid,
            false => lo = mid,
        }
    }
    Some(hi)
}

/// Every figure that moves with ZAB's lane, and the lanes at which each is
/// within 25 % of the paper: the six structures over ZAB-ideal, ZAB / ES at
/// the fit point, and write-only Paxos / ZAB. Whether one lane reproduces
/// them all is the evidence for Fig. 7's verdicts.
fn lfd_lanes(rows: &[Value], machine: &KiteBenchOpts, progress: &dyn Fn(&str)) -> Value {
    let zab = |w: f64, h: u64| {
        let o = KiteBenchOpts {
            write_ratio: w,
            lane_ns: h,
            ..machine.clone()
        };
        bench_system(&o, System::Zab).throughput_ops
    };
    let at = |w: f64, s: System| {
        let o = KiteBenchOpts {
            write_ratio: w,
            ..machine.clone()
        };
        bench_system(&o, s).throughput_ops
    };
    let mut out = Vec::new();
    let mut push = |name: String, paper: f64, f: &dyn Fn(u64) -> f64, rising: bool| {
        let lanes = lane_interval(f, paper, rising);
        progress(&format!("  kite-lfd: {name} within 25 % at lanes {lanes:?} ns"));
        out.push(json!({"figure": name, "paper": paper, "lanes": lanes.map(|(a, b)| [a, b])}));
    };
    for r in rows {
        let name = r["structure"].as_str().unwrap_or("").to_string();
        let paper = paper_of(&name);
        if paper.is_nan() {
            continue;
        }
        let work = r["ops_per_s"].as_f64().unwrap_or(0.0) * r["calls_per_op"].as_f64().unwrap_or(0.0);
        let w = r["write_ratio"].as_f64().unwrap_or(0.0);
        let zab_ideal_sync = KiteBenchOpts {
            sync_ratio: 0.0,
            ..machine.clone()
        };
        let f = |h: u64| work / bench_system(&KiteBenchOpts { write_ratio: w, lane_ns: h, ..zab_ideal_sync.clone() }, System::Zab).throughput_ops;
        push(format!("{name} × ZAB-ideal"), paper, &f, true);
    }
    let es = at(FIT_WRITES, System::Es);
    let fit_point = paper_ratio(System::Zab, System::Es, FIT_WRITES);
    push(format!("ZAB / ES at {:.0} % writes (the fit point)", FIT_WRITES * 100.0), fit_point, &|h| zab(FIT_WRITES, h) / es, false);
    let paxos = at(1.0, System::Paxos);
    push("Paxos / ZAB, write-only".into(), paper_ratio(System::Paxos, System::Zab, 1.0), &|h| paxos / zab(1.0, h), true);
    let common = out.iter().try_fold((0u64, LANE_MAX), |(a, b), v| {
        let l = v["lanes"].as_array()?;
        Some((a.max(l[0].as_u64()?), b.min(l[1].as_u64()?)))
    });
    let common = common.filter(|(a, b)| a <= b);
    json!({"figures": out, "common": common.map(|(a, b)| [a, b])})
}

/// The paper's Fig. 7 figure for `structure`.
fn paper_of(structure: &str) -> f64 {
    LFD_PAPER.iter().find(|p| p.0 == structure).map_or(f64::NAN, |p| p.1)
}

/// The paper's Fig. 7: each structure over ZAB-ideal.
const LFD_PAPER: [(&str, f64); 6] = [
    ("hml-4", 1.45),
    ("msq-4", 1.90),
    ("ts-4", 2.66),
    ("hml-32", 3.66),
    ("msq-32", 3.51),
    ("ts-32", 5.62),
];

/// `tandem experiment kite-lfd`: the paper's Fig. 7.
pub fn lfd(quick: bool, progress: &dyn Fn(&str)) -> ExperimentResult {
    let (machine, fit) = fitted(&opts(quick), progress);
    let mut rows = Vec::new();
    for fields in [4, 32] {
        for kind in [LfdKind::List, LfdKind::Queue, LfdKind::Stack] {
            let v = lfd_run(kind, fields, &machine, quick);
            progress(&format!(
                "  kite-lfd: {} {:.0} ops/s, {:.2}x ZAB-ideal ({:.1} calls/op)",
                v["structure"],
                v["ops_per_s"].as_f64().unwrap_or(0.0),
                v["over_zab_ideal"].as_f64().unwrap_or(0.0),
                v["calls_per_op"].as_f64().unwrap_or(0.0)
            ));
            if let Some(e) = v["violation"].as_str() {
                return Err(format!("kite-lfd {}: {e}", v["structure"]));
            }
            rows.push(v);
        }
    }
    let lanes = lfd_lanes(&rows, &machine, progress);
    let bars: Vec<(String, f64)> = rows
        .iter()
        .map(|r| {
            (
                r["structure"].as_str().unwrap_or("").to_string(),
                r["over_zab_ideal"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    let svg = tandem_report::plot::bars_svg(
        "Kite's data structures over ZAB-ideal (simulated, 5 replicas, 1000 structures each)",
        "x ZAB-ideal",
        &bars,
    );
    let mut md = format!("Each structure on Kite's API in simulated time on the machine of kite-throughput ({} cores per replica, \
                  {} ns per send, ZAB's lane fitted there: {} ns per write), 200 sessions over 5 replicas, 1000 structures, every \
                  history checked, over **ZAB-ideal**: the in-memory ZAB's throughput at the structure's own write ratio divided \
                  by the Kite calls one operation makes, with no conflicts (the paper's Fig. 7). Nothing is fitted here: these are predictions. \
                  ✓ within 25 % of the paper, ✗ outside.\n\n\
                  | structure | calls / op | write share | ops/s (sim) | × ZAB-ideal | paper |\n|---|---|---|---|---|---|\n",
                  machine.cores, machine.send_ns, fit.lane_ns);
    for r in &rows {
        let name = r["structure"].as_str().unwrap_or("");
        let p = paper_of(name);
        let over = r["over_zab_ideal"].as_f64().unwrap_or(0.0);
        md += &format!(
            "| {name} | {:.1} | {:.2} | {:.0} | {over:.2} | {p:.2} {} |\n",
            r["calls_per_op"].as_f64().unwrap_or(0.0),
            r["write_ratio"].as_f64().unwrap_or(0.0),
            r["ops_per_s"].as_f64().unwrap_or(0.0),
            verdict(over, p)
        );
    }
    md += &lanes_md(&lanes, fit.lane_ns);
    md += &twins_md(&rows);
    Ok((json!({"lane_fit": fit, "rows": rows, "lanes": lanes}), svg, md))
}

/// The lanes at which each figure is reproduced, and whether one lane
/// reproduces them all.
fn lanes_md(lanes: &Value, fitted: u64) -> String {
    let mut md = format!(
        "\n**What the one parameter can reach.** The lanes (ns per write; the fitted one is {fitted}) at which each \
         figure that moves with ZAB's lane is within 25 % of the paper (bisection over 0–{LANE_MAX} ns; each \
         structure's Kite side as measured above):\n\n| figure | paper | lanes within 25 % |\n|---|---|---|\n"
    );
    let empty = Vec::new();
    let figures = lanes["figures"].as_array().unwrap_or(&empty);
    for f in figures {
        let l = f["lanes"].as_array();
        let span = l.map_or("none".to_string(), |l| format!("{}–{}", l[0], l[1]));
        md += &format!("| {} | {:.2} | {span} |\n", f["figure"].as_str().unwrap_or(""), f["paper"].as_f64().unwrap_or(0.0));
    }
    md += &match lanes["common"].as_array() {
        Some(c) => format!("\nEvery one of them is reproduced at a lane of {}–{} ns.\n", c[0], c[1]),
        None => format!("\nNo lane reproduces them all: {}.\n", conflict(figures)),
    };
    md
}

/// TS-32 against MSQ-32: nearly the same write share, so any lane moves
/// their ZAB-ideal alike, and only their Kite sides tell them apart.
fn twins_md(rows: &[Value]) -> String {
    let row = |n: &str| rows.iter().find(|r| r["structure"] == n);
    let (Some(ts), Some(msq)) = (row("ts-32"), row("msq-32")) else {
        return String::new();
    };
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    format!(
        "\nTS-32 and MSQ-32 write at nearly the same share ({:.2} and {:.2}), so a lane moves their ZAB-ideal \
         alike: TS-32 over MSQ-32 is {:.2} here (it moves little with the lane), against {:.2} in the paper.\n",
        f(ts, "write_ratio"),
        f(msq, "write_ratio"),
        f(ts, "over_zab_ideal") / f(msq, "over_zab_ideal").max(1e-9),
        paper_of("ts-32") / paper_of("msq-32")
    )
}

/// The figure whose interval starts last against the one whose ends first.
fn conflict(figures: &[Value]) -> String {
    let span = |f: &Value| f["lanes"].as_array().map(|l| (l[0].as_u64().unwrap_or(0), l[1].as_u64().unwrap_or(0)));
    let name = |f: &Value| f["figure"].as_str().unwrap_or("").to_string();
    if let Some(none) = figures.iter().find(|f| span(f).is_none()) {
        return format!("{} is at no lane", name(none));
    }
    let late = figures.iter().max_by_key(|f| span(f).map_or(0, |s| s.0));
    let early = figures.iter().min_by_key(|f| span(f).map_or(0, |s| s.1));
    match (late, early) {
        (Some(a), Some(b)) => format!(
            "{} needs at least {} ns, {} at most {} ns",
            name(a),
            span(a).map_or(0, |s| s.0),
            name(b),
            span(b).map_or(0, |s| s.1)
        ),
        _ => "no figure".into(),
    }
}

/// Kite's write time-out over TCP (`kite bench --net tcp`'s default).
const TCP_TIMEOUT_MS: f64 = 20.0;

/// `tandem experiment kite-tcp`: Fig. 4's ratios over real processes:
/// for each write ratio, each system as five `tandem node` processes on
/// loopback (a fresh cluster per run), 40 sessions per node, 1 M keys.
pub fn tcp(quick: bool, progress: &dyn Fn(&str)) -> ExperimentResult {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))?;
    let dir = std::env::temp_dir().join(format!("tandem-kite-tcp-{}", std::process::id()));
    let writes: &[f64] = if quick {
        &[0.05, 1.0]
    } else {
        &[0.01, 0.05, 0.2, 0.5, 1.0]
    };
    let o = LoadOpts {
        warmup_s: 0.5,
        duration_s: if quick { 0.5 } else { 2.0 },
        ..LoadOpts::default()
    };
    let node = NodeOpts {
        timeout_ms: Some(TCP_TIMEOUT_MS),
        ..NodeOpts::default()
    };
    let mut rs: Vec<(SystemResult, f64)> = Vec::new();
    for &w in writes {
        for s in System::ALL {
            let mix = BenchMix {
                system: s,
                keys: 1_000_000,
                write_ratio: w,
                sync_ratio: 0.05,
                rmw_ratio: 0.0,
            };
            let (r, rep) = bench_tcp(&exe, &dir, 5, &node, mix, &o)?;
            progress(&format!(
                "  kite-tcp: {:>3.0}% writes {:<5} {:>9.0} ops/s, {:.1} µs node CPU/op",
                w * 100.0,
                s.name(),
                r.throughput_ops,
                rep.node_cpu_us_per_op
            ));
            rs.push((r, rep.node_cpu_us_per_op));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let t = |s: System, w: f64| {
        rs.iter()
            .find(|(r, _)| r.system == s.name() && r.write_ratio == w)
            .map_or(0.0, |(r, _)| r.throughput_ops)
    };
    let xs: Vec<String> = writes
        .iter()
        .map(|w| format!("{:.0}%", w * 100.0))
        .collect();
    let series: Vec<(String, Vec<Option<f64>>)> = System::ALL
        .iter()
        .map(|&s| {
            (
                s.name().to_string(),
                writes.iter().map(|&w| Some(t(s, w) / 1e3)).collect(),
            )
        })
        .collect();
    let svg = lines_svg(
        "Kite and its baselines vs write ratio (5% sync; 5 node processes on loopback)",
        "write ratio",
        "K requests/s",
        &xs,
        &series,
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut md = format!(
        "The same five systems as `kite-throughput`, each as five `tandem node` processes on loopback TCP (a fresh cluster per run; \
         ZAB: `--system zab`, node 0 leads), 40 closed-loop sessions per node from one client process, 1 M keys, uniform, 5 % sync, \
         {:.1} s measured after {:.1} s; Kite's time-out {TCP_TIMEOUT_MS} ms. Every process shares this machine's {cores} cores. \
         Each cell: this run's ratio (the paper's Fig. 4 ratio).\n\n",
        o.duration_s, o.warmup_s
    );
    md += &ratio_table(writes, t);
    let cpu = |s: System, w: f64| {
        rs.iter()
            .find(|(r, _)| r.system == s.name() && r.write_ratio == w)
            .map_or(0.0, |x| x.1)
    };
    let (lo, hi) = (writes[0], writes[writes.len() - 1]);
    md += &format!(
        "\n**Reading it.** Kite/ES is {:.2} at {:.0} % writes and {:.2} at {:.0} % (paper 0.69–0.875): over processes Kite pays \
         the same extra rounds for its releases and acquires as in simulation. ZAB does not fall behind ES here as it does in the \
         paper (ZAB/ES {:.2} at {:.0} % writes): every process shares this machine's {cores} cores, so the leader, which handles \
         every write, just takes more of the shared CPU. Its bottleneck needs a core budget per node, which the simulated machine \
         of `kite-throughput` and the paper's machines have and this one does not; so Kite/ZAB and Paxos/ZAB here say nothing about \
         the paper's claim. ZAB's nodes also spend less CPU per operation ({:.1} µs against Kite's {:.1} at {:.0} % writes): its \
         store is one hash map of values, Kite's keeps each key's epoch, version and Paxos state besides.\n",
        t(System::Kite, lo) / t(System::Es, lo), lo * 100.0, t(System::Kite, hi) / t(System::Es, hi), hi * 100.0,
        t(System::Zab, lo) / t(System::Es, lo), lo * 100.0, cpu(System::Zab, lo), cpu(System::Kite, lo), lo * 100.0
    );
    md += "\n| write % | system | ops/s | p50 µs | p99 µs | messages/op | node CPU µs/op |\n|---|---|---|---|---|---|---|\n";
    for (r, cpu) in &rs {
        md += &format!(
            "| {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {cpu:.1} |\n",
            r.write_ratio * 100.0,
            r.system,
            r.throughput_ops,
            r.latency_us.p50,
            r.latency_us.p99,
            r.messages_per_op
        );
    }
    let json = json!({"options": o, "nodes": 5, "keys": 1_000_000, "timeout_ms": TCP_TIMEOUT_MS, "cores": cores,
                      "results": rs.iter().map(|(r, cpu)| json!({"result": r, "node_cpu_us_per_op": cpu})).collect::<Vec<_>>()});
    Ok((json, svg, md))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The band is found on either side of the lane's effect, and a figure
    /// that never enters it has no interval.
    #[test]
    fn a_lane_interval_is_where_the_figure_is_within_a_quarter() {
        let rising = |h: u64| h as f64 / 100.0;
        assert_eq!(lane_interval(&rising, 2.0, true), Some((150, 250)));
        let falling = |h: u64| 1000.0 / (h as f64 + 1.0);
        assert_eq!(lane_interval(&falling, 10.0, false), Some((79, 132)));
        assert_eq!(lane_interval(&|_| 1.0, 2.0, true), None);
        assert_eq!(first_lane(&|h| h >= 7), Some(7));
        assert_eq!(first_lane(&|_| false), None);
    }
}
