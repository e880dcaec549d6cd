//! `tandem demo kite`: the paper's data structures on five Kite processes.
//! Half the sessions push and pop on Treiber stacks, half enqueue and
//! dequeue on Michael–Scott queues; node 1 is stopped (SIGSTOP) for 1.5 s
//! mid-run and continued. Printed: the plan and what each replica served;
//! written: a timeline figure; checked: release consistency of every call
//! and the structures' own invariants.

use std::path::Path;

use tandem_kite::lfd::{Both, LfdKind, LfdWorkload};
use tandem_kite_lab::procs::{run_load, Fault, Gen, KiteCluster, LoadOpts, NodeOpts};
use tandem_report::plot::{timeline_svg_of, write_figure, Series};

const SLEEPER: usize = 1;
const SESSIONS_PER_NODE: u64 = 10;

fn workload(
    sessions: u64,
) -> (
    Both,
    [std::rc::Rc<std::cell::RefCell<tandem_kite::lfd::LfdLog>>; 2],
) {
    let mut stacks = LfdWorkload::new(LfdKind::Stack, 4, 4, sessions, 7);
    stacks.runs = |s| s % 2 == 0;
    let mut queues = LfdWorkload::new(LfdKind::Queue, 4, 4, sessions, 8);
    (queues.first, queues.runs) = (100, |s| s % 2 == 1);
    let logs = [stacks.log.clone(), queues.log.clone()];
    (Both(stacks, queues), logs)
}

pub fn run(figure: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("tandem-demo-kite-{}", std::process::id()));
    let nodes = 5;
    println!("Kite demo: {nodes} `tandem node --system kite` processes on loopback; {} sessions: half on 4 Treiber stacks, half on 4 MS queues (4 fields per node)", SESSIONS_PER_NODE * nodes as u64);
    println!("  plan: node {SLEEPER} is stopped (SIGSTOP) at 1.5 s for 1.5 s, then continued; the run lasts 5 s");
    let mut cluster = KiteCluster::start(&exe, nodes, &NodeOpts::default(), &dir)?;
    let (work, logs) = workload(SESSIONS_PER_NODE * nodes as u64);
    let faults = vec![Fault::Sleep {
        node: SLEEPER,
        from_s: 1.5,
        for_s: 1.5,
    }];
    let o = LoadOpts {
        sessions_per_node: SESSIONS_PER_NODE,
        duration_s: 5.0,
        faults,
        ..LoadOpts::default()
    };
    let r = run_load(&mut cluster, Gen::Work(Box::new(work)), &o)?;
    let per_node: Vec<Vec<f64>> = (0..nodes)
        .map(|n| {
            r.timeline_per_node
                .iter()
                .map(|row| row[n] as f64 * 10.0)
                .collect()
        })
        .collect();
    let labels: Vec<String> = (0..nodes)
        .map(|n| {
            if n == SLEEPER {
                format!("node {n} (stopped 1.5-3 s)")
            } else {
                format!("node {n}")
            }
        })
        .collect();
    let series: Vec<Series> = (0..nodes)
        .map(|n| Series {
            label: &labels[n],
            tps: &per_node[n],
        })
        .collect();
    let events = vec![
        (1.5, format!("SIGSTOP node {SLEEPER}")),
        (3.0, format!("SIGCONT node {SLEEPER}")),
    ];
    let svg = timeline_svg_of(
        "Kite demo: stacks and queues, one replica stopped (Kite calls/s per replica)",
        "Kite calls/s",
        100,
        &series,
        &events,
    );
    let (svg_path, _) = write_figure(figure, &svg)?;
    println!("  figure: {}", svg_path.display());
    summarize(&r, &logs, &per_node)
}

fn summarize(
    r: &tandem_kite_lab::procs::LoadReport,
    logs: &[std::rc::Rc<std::cell::RefCell<tandem_kite::lfd::LfdLog>>; 2],
    per_node: &[Vec<f64>],
) -> Result<(), String> {
    let during = |n: usize| per_node[n].iter().skip(17).take(12).sum::<f64>() / 12.0;
    let before = |n: usize| per_node[n].iter().skip(5).take(10).sum::<f64>() / 10.0;
    for n in 0..per_node.len() {
        println!(
            "  node {n}: {:>7.0} calls/s before, {:>7.0} while node {SLEEPER} is stopped",
            before(n),
            during(n)
        );
    }
    let ops: Vec<usize> = logs
        .iter()
        .map(|l| {
            l.borrow()
                .ops
                .iter()
                .filter(|o| o.complete_ns.is_some())
                .count()
        })
        .collect();
    let faults: Vec<String> = logs
        .iter()
        .flat_map(|l| l.borrow().violations.clone())
        .collect();
    println!("  {} Kite calls, {} stack and {} queue operations completed; release consistency: {}; structures: {}",
        r.ops, ops[0], ops[1], r.violation.as_deref().unwrap_or("ok"), faults.first().map_or("ok", |v| v.as_str()));
    if r.violation.is_some() || !faults.is_empty() {
        return Err("the run violated release consistency or a structure's invariant".into());
    }
    Ok(())
}
