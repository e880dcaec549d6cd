//! `tandem demo heal`: HEAL on real processes. Five `tandem node` processes
//! and a configuration manager serve closed-loop sessions; node 2 is
//! `kill -9`ed, the others go on, node 2 restarts from its NVM file and
//! catches up from its Buddy while the cluster keeps serving. Printed: the
//! throughput as it happens, how the recovery went; written: a timeline
//! figure; checked: the whole history is linearizable.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_bench::heal_procs::HealCluster;
use tandem_bench::plot::{timeline_svg, write_figure, Series};
use tandem_ddp::load::Load;
use tandem_ddp::ycsb_session::SessionPlan;

const BUCKET: Duration = Duration::from_millis(100);
const VICTIM: usize = 2;

/// The run's plan, seconds from the start of the load.
const KILL_S: f64 = 1.5;
const RESTART_S: f64 = 3.0;
const END_S: f64 = 5.0;

pub fn run(figure: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("tandem-demo-heal-{}", std::process::id()));
    println!("HEAL demo: 5 `tandem node --recovery heal` processes (lin-synch) and a configuration manager on loopback; 20 sessions, 80 % reads, 1000 keys");
    let mut c = HealCluster::start(&exe, "lin-synch", &dir)?;
    let epoch = Instant::now();
    let load = Load::start(&c.load_config(20, SessionPlan::uniform(1000, 0.8), 7), epoch);
    c.wait_for("the first operations", Duration::from_secs(30), |_| load.completed.load(Ordering::Relaxed) > 100)?;
    let start = Instant::now();
    let (mut tps, mut events) = (Vec::new(), Vec::new());
    let mut last = load.completed.load(Ordering::Relaxed);
    let (mut killed, mut restarted, mut online) = (false, false, None);
    while start.elapsed().as_secs_f64() < END_S {
        std::thread::sleep(BUCKET);
        let now = load.completed.load(Ordering::Relaxed);
        tps.push((now - last) as f64 / BUCKET.as_secs_f64());
        last = now;
        let t = start.elapsed().as_secs_f64();
        if !killed && t >= KILL_S {
            c.kill(VICTIM);
            (killed, _) = (true, events.push((t, format!("kill -9 node {VICTIM}"))));
            println!("  {t:.1} s: kill -9 node {VICTIM}");
        }
        if !restarted && t >= RESTART_S {
            c.start_node(VICTIM)?;
            (restarted, _) = (true, events.push((t, format!("node {VICTIM} restarts from its NVM file"))));
            println!("  {t:.1} s: node {VICTIM} restarts from its NVM file");
        }
        if restarted && online.is_none() {
            if let Some(line) = c.node_log(VICTIM).lines().find(|l| l.contains("HEAL:")) {
                events.push((t, "recovered (HEAL)".into()));
                println!("  {t:.1} s: {line}");
                online = Some(line.to_string());
            }
        }
        if tps.len() % 5 == 0 {
            println!("  {t:.1} s: {:.0} ops/s", tps[tps.len() - 5..].iter().sum::<f64>() / 5.0);
        }
    }
    let ops = load.stop();
    let svg = timeline_svg("HEAL demo: lin-synch, node 2 killed and recovered (ops/s per 100 ms)", BUCKET.as_millis() as u64, &[Series { label: "ops/s", tps: &tps }], &events);
    let (svg_path, _) = write_figure(figure, &svg)?;
    println!("figure: {}", svg_path.display());
    summarize(&c, &tps, online, &ops)
}

fn summarize(c: &HealCluster, tps: &[f64], online: Option<String>, ops: &[tandem_check::HistOp]) -> Result<(), String> {
    let avg = |from: f64, to: f64| {
        let (a, b) = ((from / BUCKET.as_secs_f64()) as usize, ((to / BUCKET.as_secs_f64()) as usize).min(tps.len()));
        tps[a..b].iter().sum::<f64>() / (b - a).max(1) as f64
    };
    let (before, away, after) = (avg(0.2, KILL_S), avg(KILL_S + 0.5, RESTART_S), avg(RESTART_S + 0.5, END_S));
    println!("throughput: {before:.0} ops/s before, {away:.0} while node {VICTIM} was away, {after:.0} after it came back");
    let line = online.ok_or_else(|| format!("node {VICTIM} never reported its recovery:\n{}", c.node_log(VICTIM)))?;
    if line.contains("full copy") {
        return Err(format!("node {VICTIM} fell back to a full copy: {line}"));
    }
    if away <= 0.0 || after <= 0.0 {
        return Err("the cluster stopped serving".into());
    }
    let done = ops.iter().filter(|o| o.complete_ns.is_some()).count();
    tandem_check::check_linearizable(ops).map_err(|v| format!("the history is not linearizable: {v}"))?;
    println!("history: {done} operations completed, {} with unknown outcome; linearizable", ops.len() - done);
    Ok(())
}
