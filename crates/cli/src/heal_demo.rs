//! `tandem demo heal`: HEAL on real processes. Five `tandem node` processes
//! and a configuration manager serve closed-loop sessions; node 2 is
//! `kill -9`ed, the others go on, node 2 restarts from its NVM file and
//! catches up from its Buddy while the cluster keeps serving. Printed: the
//! throughput as it happens, how the recovery went; written: a timeline
//! figure; checked: the whole history is linearizable.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_ddp::ycsb_session::SessionPlan;
use tandem_ddp_lab::heal::procs::HealCluster;
use tandem_ddp_lab::load::Load;
use tandem_report::plot::{timeline_svg_of, write_figure, Series};

const BUCKET: Duration = Duration::from_millis(100);
const VICTIM: usize = 2;

/// The run's plan, seconds from the start of the load.
const KILL_S: f64 = 1.5;
const RESTART_S: f64 = 3.0;
const END_S: f64 = 5.0;
/// How long past `END_S` the load goes on while the restarted node has not
/// reported its recovery yet (a loaded machine may start it late).
const GRACE_S: f64 = 15.0;

pub fn run(figure: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("tandem-demo-heal-{}", std::process::id()));
    println!("HEAL demo: 5 `tandem node --recovery heal` processes (lin-synch) and a configuration manager on loopback; 20 sessions, 80 % reads, 1000 keys");
    let mut c = HealCluster::start(&exe, "lin-synch", &dir)?;
    let load = Load::start(
        &c.load_config(20, SessionPlan::uniform(1000, 0.8), 7),
        Instant::now(),
    );
    c.wait_for("the first operations", Duration::from_secs(30), |_| {
        load.completed.load(Ordering::Relaxed) > 100
    })?;
    let run = drive(&mut c, &load)?;
    let ops = load.stop();
    let svg = timeline_svg_of(
        "HEAL demo: lin-synch, node 2 killed and recovered (ops/s per 100 ms)",
        "ops/s",
        BUCKET.as_millis() as u64,
        &[Series {
            label: "ops/s",
            tps: &run.tps,
        }],
        &run.events,
    );
    let (svg_path, _) = write_figure(figure, &svg)?;
    println!("figure: {}", svg_path.display());
    summarize(&mut c, &run.tps, run.online, &ops)
}

/// What the run saw: ops/s per bucket, the events, the recovery's line.
struct Run {
    tps: Vec<f64>,
    events: Vec<(f64, String)>,
    online: Option<String>,
}

/// Sample the throughput; kill node 2, restart it, watch for its recovery.
fn drive(c: &mut HealCluster, load: &Load) -> Result<Run, String> {
    let start = Instant::now();
    let mut r = Run {
        tps: Vec::new(),
        events: Vec::new(),
        online: None,
    };
    let mut last = load.completed.load(Ordering::Relaxed);
    let (mut killed, mut restarted, mut told) = (false, false, false);
    loop {
        let elapsed = start.elapsed().as_secs_f64();
        let waiting = restarted && r.online.is_none() && elapsed < END_S + GRACE_S;
        if elapsed >= END_S && !waiting {
            break;
        }
        if elapsed >= END_S && !std::mem::replace(&mut told, true) {
            println!(
                "  waiting for node {VICTIM} to report its recovery (up to {GRACE_S:.0} s more)"
            );
        }
        std::thread::sleep(BUCKET);
        let now = load.completed.load(Ordering::Relaxed);
        r.tps.push((now - last) as f64 / BUCKET.as_secs_f64());
        last = now;
        let t = start.elapsed().as_secs_f64();
        let mut event = |what: String| {
            println!("  {t:.1} s: {what}");
            r.events.push((t, what));
        };
        if !killed && t >= KILL_S {
            c.kill(VICTIM);
            killed = true;
            event(format!("kill -9 node {VICTIM}"));
        }
        if !restarted && t >= RESTART_S {
            c.start_node(VICTIM)?;
            restarted = true;
            event(format!("node {VICTIM} restarts from its NVM file"));
        }
        if restarted && r.online.is_none() {
            if let Some(line) = c.node_log(VICTIM).lines().find(|l| l.contains("HEAL:")) {
                println!("  {t:.1} s: {line}");
                r.events.push((t, "recovered (HEAL)".into()));
                r.online = Some(line.to_string());
            }
        }
        if r.tps.len() % 5 == 0 {
            println!(
                "  {t:.1} s: {:.0} ops/s",
                r.tps[r.tps.len() - 5..].iter().sum::<f64>() / 5.0
            );
        }
    }
    Ok(r)
}

fn summarize(
    c: &mut HealCluster,
    tps: &[f64],
    online: Option<String>,
    ops: &[tandem_check::HistOp],
) -> Result<(), String> {
    let avg = |from: f64, to: f64| {
        let (a, b) = (
            (from / BUCKET.as_secs_f64()) as usize,
            ((to / BUCKET.as_secs_f64()) as usize).min(tps.len()),
        );
        tps[a..b].iter().sum::<f64>() / (b - a).max(1) as f64
    };
    let (before, away, after) = (
        avg(0.2, KILL_S),
        avg(KILL_S + 0.5, RESTART_S),
        avg(RESTART_S + 0.5, END_S),
    );
    println!("throughput: {before:.0} ops/s before, {away:.0} while node {VICTIM} was away, {after:.0} after it came back");
    let line = online.ok_or_else(|| {
        format!(
            "node {VICTIM} never reported its recovery; its process: {}\nits log:\n{}\nthe manager's log:\n{}",
            c.node_status(VICTIM),
            c.node_log(VICTIM),
            c.manager_log()
        )
    })?;
    if line.contains("full copy") {
        return Err(format!("node {VICTIM} fell back to a full copy: {line}"));
    }
    if away <= 0.0 || after <= 0.0 {
        return Err("the cluster stopped serving".into());
    }
    let done = ops.iter().filter(|o| o.complete_ns.is_some()).count();
    tandem_check::check_linearizable(ops)
        .map_err(|v| format!("the history is not linearizable: {v}"))?;
    println!(
        "history: {done} operations completed, {} with unknown outcome; linearizable",
        ops.len() - done
    );
    Ok(())
}
