//! `tandem experiment heal-peers`: how long a stopped
//! follower takes to catch up, in HEAL and in two real replicated systems,
//! after the same downtime at the same write rate. Each system runs on
//! loopback: HEAL as five `tandem node --recovery heal` processes
//! (⟨Lin, Synch⟩), ZooKeeper as a 3-member ensemble
//! (`scripts/zookeeper.sh start-ensemble`), etcd as a 3-member cluster
//! (`scripts/peers.sh start etcd`). Per run and system: a fresh cluster,
//! every key written once, writes at the rate for a warm-up, `kill -9` of
//! one follower, writes at the rate for the downtime, a restart, and two
//! times measured from the restart while the writes go on: (a) the process
//! answers at all, (b) it has caught up. (b) − (a) is the catch-up net of
//! the process start-up (a JVM's, for ZooKeeper).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use tandem_peers::ensemble::writers::{self, Writers};
use tandem_peers::ensemble::{etcd, zookeeper, Peer, Started};
use tandem_report::plot::bars_svg;
use tandem_report::ExperimentOutput;

use super::system as heal_sys;

pub const NAME: &str = "heal-peers";

/// How long a restarted follower may take to catch up before the run fails.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(120);
/// How often the restarted follower is probed: every 2 ms, or every 1 % of
/// the time since the restart when that is longer (a slow catch-up is not
/// slowed further by probes).
const POLL: Duration = Duration::from_millis(2);

#[derive(Clone, Debug)]
pub struct Options {
    pub downtime_s: f64,
    /// Writes per second, before, during and after the downtime.
    pub rate: f64,
    pub keys: u64,
    /// Runs per system (interleaved); medians are reported.
    pub runs: usize,
    pub warmup_s: f64,
    /// The `tandem` executable (HEAL's nodes).
    pub exe: PathBuf,
    /// The checkout holding `scripts/` (see [`find_root`]).
    pub root: PathBuf,
    /// Data and logs of the clusters.
    pub work: PathBuf,
    pub quick: bool,
    /// Which systems to run (`heal`, `heal-fsync`, `zookeeper`, `etcd`), and HEAL's model.
    pub systems: Vec<String>,
    pub model: String,
}

impl Options {
    /// The defaults (`quick`: a short downtime at a low rate, one run).
    pub fn new(quick: bool, exe: &Path, root: &Path) -> Options {
        let (downtime_s, rate, runs, warmup_s) = if quick {
            (2.0, 100.0, 1, 1.0)
        } else {
            (10.0, 500.0, 5, 2.0)
        };
        let systems = ["heal", "heal-fsync", "zookeeper", "etcd"]
            .map(String::from)
            .to_vec();
        Options {
            downtime_s,
            rate,
            keys: 10_000,
            runs,
            warmup_s,
            exe: exe.into(),
            root: root.into(),
            work: root.join("target").join(NAME),
            quick,
            systems,
            model: "lin-synch".into(),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.downtime_s > 0.0 && self.downtime_s.is_finite()) {
            return Err("--downtime-s must be positive".into());
        }
        if !(self.rate >= 1.0 && self.rate.is_finite()) {
            return Err("--rate must be at least 1 write per second".into());
        }
        if self.runs == 0 || self.keys == 0 {
            return Err("--runs and --keys must be at least 1".into());
        }
        Ok(())
    }

    /// The command line that reproduces this run.
    fn command(&self) -> String {
        let d = Options::new(self.quick, &self.exe, &self.root);
        let mut c = format!(
            "tandem experiment {NAME}{}",
            if self.quick { " --quick" } else { "" }
        );
        if self.downtime_s != d.downtime_s {
            c += &format!(" --downtime-s {}", self.downtime_s);
        }
        if self.rate != d.rate {
            c += &format!(" --rate {}", self.rate);
        }
        if self.keys != d.keys {
            c += &format!(" --keys {}", self.keys);
        }
        if self.runs != d.runs {
            c += &format!(" --runs {}", self.runs);
        }
        c
    }
}

/// The checkout whose `scripts/` start the peers: the current directory or
/// one above it, else one above the executable (`target/release/tandem`).
pub fn find_root(exe: &Path) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    let has_scripts = |d: &&Path| {
        d.join("scripts/zookeeper.sh").is_file() && d.join("scripts/peers.sh").is_file()
    };
    cwd.ancestors().find(has_scripts).or_else(|| exe.ancestors().find(has_scripts)).map(Path::to_path_buf).ok_or_else(|| {
        format!("{NAME} starts ZooKeeper and etcd with scripts/zookeeper.sh and scripts/peers.sh: run it from the Tandem checkout (not found above {})", cwd.display())
    })
}

// ---------------------------------------------------------------- one run

/// One run of one system.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub follower: String,
    /// From the restart until the process answers at all.
    pub answer_ms: f64,
    /// From the restart until it has caught up.
    pub caught_up_ms: f64,
    /// `caught_up_ms - answer_ms`: the catch-up net of the process start-up.
    pub net_ms: f64,
    /// The follower's index just before the kill, and the leader's at the restart (ZooKeeper: zxid; etcd: Raft index).
    pub follower_index_before: Option<u64>,
    pub leader_index_at_restart: Option<u64>,
    /// Writes acknowledged by the kill, by the restart, and during the catch-up.
    pub acked_at_kill: u64,
    pub acked_at_restart: u64,
    pub acked_during_catch_up: u64,
    /// Writes per second acknowledged during the downtime.
    pub downtime_rate: f64,
    pub write_errors: u64,
    pub how: String,
    pub details: Value,
}

impl RunResult {
    /// How far behind the follower was at its restart: log entries, or (HEAL) acknowledged writes.
    pub fn behind(&self) -> u64 {
        match (self.follower_index_before, self.leader_index_at_restart) {
            (Some(f), Some(l)) => l.saturating_sub(f),
            _ => self.acked_at_restart - self.acked_at_kill,
        }
    }
}

enum Outcome {
    Ran(RunResult),
    CannotInstall(String),
}

/// Start the cluster, run the scenario, stop the cluster.
fn one_run(p: &mut dyn Peer, o: &Options, progress: &dyn Fn(&str)) -> Result<Outcome, String> {
    let started = p.start().inspect_err(|_| p.stop())?; // a member that did start is stopped
    if let Started::CannotInstall(why) = started {
        return Ok(Outcome::CannotInstall(why));
    }
    let r = scenario(p, o, progress);
    p.stop();
    r.map(Outcome::Ran)
}

fn scenario(p: &mut dyn Peer, o: &Options, progress: &dyn Fn(&str)) -> Result<RunResult, String> {
    let f = p.follower()?;
    let w = warm_up(p, f, o, progress)?;
    let before = p.follower_index(f);
    let acked_at_kill = w.acked();
    p.kill(f)?;
    let at = before.map_or(String::new(), |i| format!(" (at {})", p.fmt_index(i)));
    progress(&format!(
        "    {}: kill -9 {}{at}; writing {} /s for {} s",
        p.name(),
        p.member_name(f),
        o.rate,
        o.downtime_s
    ));
    let downtime_rate = downtime(&w, o, progress);
    let target = p.leader_index()?;
    let acked_at_restart = w.acked();
    let t0 = Instant::now();
    p.restart(f)?;
    let watched = watch(p, f, target.unwrap_or(acked_at_restart), t0);
    let (acked_during_catch_up, write_errors, last_error) =
        (w.acked() - acked_at_restart, w.errors(), w.last_error());
    drop(w);
    let (answer, caught) = watched?;
    let notes = p.notes(f)?;
    let (answer_ms, caught_up_ms) = (answer.as_secs_f64() * 1e3, caught.as_secs_f64() * 1e3);
    let failed = last_error.map_or(String::new(), |e| {
        format!("; {write_errors} writes failed, the last: {e}")
    });
    progress(&format!("    {}: restarted; answers after {answer_ms:.0} ms, caught up after {caught_up_ms:.0} ms ({}){failed}", p.name(), notes.how));
    Ok(RunResult {
        follower: p.member_name(f),
        answer_ms,
        caught_up_ms,
        net_ms: caught_up_ms - answer_ms,
        follower_index_before: before,
        leader_index_at_restart: target,
        acked_at_kill,
        acked_at_restart,
        acked_during_catch_up,
        downtime_rate,
        write_errors,
        how: notes.how,
        details: notes.extra,
    })
}

/// Write every key once, then start the load and let it run for the warm-up.
fn warm_up(
    p: &dyn Peer,
    f: usize,
    o: &Options,
    progress: &dyn Fn(&str),
) -> Result<Writers, String> {
    progress(&format!(
        "    {}: up; writing each of {} keys once",
        p.name(),
        o.keys
    ));
    let t = Instant::now();
    writers::preload(o.keys, p.connect(f))?;
    progress(&format!(
        "    {}: preloaded in {:.1} s; writing {} /s for {} s",
        p.name(),
        t.elapsed().as_secs_f64(),
        o.rate,
        o.warmup_s
    ));
    let w = Writers::start(o.rate, o.keys, p.connect(f));
    std::thread::sleep(Duration::from_secs_f64(o.warmup_s));
    Ok(w)
}

/// Keep writing for the downtime, saying the rate each second; the rate achieved.
fn downtime(w: &Writers, o: &Options, progress: &dyn Fn(&str)) -> f64 {
    let (start, first) = (Instant::now(), w.acked());
    let end = start + Duration::from_secs_f64(o.downtime_s);
    let mut last = (start, first);
    while Instant::now() < end {
        std::thread::sleep((end - Instant::now()).min(Duration::from_secs(1)));
        let now = (Instant::now(), w.acked());
        if now.0 + Duration::from_millis(100) < end {
            progress(&format!(
                "      {:.0} s: {:.0} writes/s",
                (now.0 - start).as_secs_f64(),
                (now.1 - last.1) as f64 / (now.0 - last.0).as_secs_f64()
            ));
        }
        last = now;
    }
    (w.acked() - first) as f64 / start.elapsed().as_secs_f64()
}

/// Probe the restarted follower: when it answers, when it has caught up.
fn watch(p: &dyn Peer, f: usize, target: u64, t0: Instant) -> Result<(Duration, Duration), String> {
    let mut answered = None;
    loop {
        if answered.is_none() && p.answers(f) {
            answered = Some(t0.elapsed());
        }
        if p.caught_up(f, target) {
            let caught = t0.elapsed();
            return Ok((answered.unwrap_or(caught), caught));
        }
        if t0.elapsed() > CATCH_UP_LIMIT {
            return Err(format!(
                "{}: {} did not catch up within {} s (answers: {})",
                p.name(),
                p.member_name(f),
                CATCH_UP_LIMIT.as_secs(),
                answered.is_some()
            ));
        }
        std::thread::sleep(POLL.max(t0.elapsed() / 100));
    }
}

// ---------------------------------------------------------------- results

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Medians {
    pub answer_ms: f64,
    pub caught_up_ms: f64,
    pub net_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct SystemResult {
    pub system: String,
    /// Why it was not measured (it cannot be installed here).
    pub skipped: Option<String>,
    pub runs: Vec<RunResult>,
    pub median: Option<Medians>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl SystemResult {
    fn new(system: &str) -> Self {
        SystemResult {
            system: system.into(),
            skipped: None,
            runs: Vec::new(),
            median: None,
        }
    }

    fn summarize(&mut self) {
        if self.runs.is_empty() {
            return;
        }
        let m = |f: fn(&RunResult) -> f64| median(self.runs.iter().map(f).collect());
        self.median = Some(Medians {
            answer_ms: m(|r| r.answer_ms),
            caught_up_ms: m(|r| r.caught_up_ms),
            net_ms: m(|r| r.net_ms),
        });
    }
}

/// Run the experiment: every system `o.runs` times, interleaved.
pub fn run(o: &Options, progress: &dyn Fn(&str)) -> Result<ExperimentOutput, String> {
    o.validate()?;
    let mut peers: Vec<Box<dyn Peer>> = vec![
        Box::new(heal_sys::HealSystem::new(
            &o.exe,
            &o.work.join("heal"),
            &o.model,
            false,
        )),
        Box::new(heal_sys::HealSystem::new(
            &o.exe,
            &o.work.join("heal-fsync"),
            &o.model,
            true,
        )),
        Box::new(zookeeper::ZkEnsemble::new(
            &o.root,
            &o.work.join("zookeeper"),
        )),
        Box::new(etcd::EtcdCluster::new(&o.root, &o.work.join("etcd"))),
    ];
    peers.retain(|p| o.systems.iter().any(|s| s == p.name()));
    let mut results: Vec<SystemResult> =
        peers.iter().map(|p| SystemResult::new(p.name())).collect();
    for run in 1..=o.runs {
        for (p, r) in peers
            .iter_mut()
            .zip(&mut results)
            .filter(|(_, r)| r.skipped.is_none())
        {
            progress(&format!("  {NAME} run {run}/{}: {}", o.runs, p.name()));
            match one_run(p.as_mut(), o, progress)? {
                Outcome::Ran(x) => r.runs.push(x),
                Outcome::CannotInstall(why) => {
                    progress(&format!(
                        "    {} skipped: it cannot be installed here: {why}",
                        p.name()
                    ));
                    r.skipped = Some(why);
                }
            }
        }
    }
    results.iter_mut().for_each(SystemResult::summarize);
    let ratios = ratios(&results);
    progress(&table(&results, &ratios));
    let json = json!({ "experiment": NAME, "downtime_s": o.downtime_s, "rate": o.rate, "keys": o.keys, "runs": o.runs, "warmup_s": o.warmup_s,
        "client_threads": writers::THREADS, "systems": results, "ratios": ratios });
    Ok(ExperimentOutput {
        name: NAME.into(),
        command: o.command(),
        json,
        figure_svg: figure(&results),
        markdown: markdown(o, &results, &ratios),
    })
}

/// Per peer system and HEAL variant: the peer's median times over HEAL's
/// (how many times HEAL is faster).
#[derive(Debug, Serialize)]
pub struct Ratio {
    pub system: String,
    /// `heal` or `heal-fsync`.
    pub heal: String,
    pub caught_up: f64,
    pub net: f64,
}

fn is_heal(system: &str) -> bool {
    system.starts_with("heal")
}

fn ratios(results: &[SystemResult]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for h in results.iter().filter(|r| is_heal(&r.system)) {
        let Some(hm) = h.median else { continue };
        for r in results.iter().filter(|r| !is_heal(&r.system)) {
            if let Some(m) = r.median {
                out.push(Ratio {
                    system: r.system.clone(),
                    heal: h.system.clone(),
                    caught_up: m.caught_up_ms / hm.caught_up_ms,
                    net: m.net_ms / hm.net_ms.max(0.001),
                });
            }
        }
    }
    out
}

/// How a HEAL variant is named in tables and figures.
fn heal_label(system: &str) -> &str {
    match system {
        "heal" => "HEAL",
        "heal-fsync" => "HEAL+fsync",
        "zookeeper" => "ZooKeeper",
        other => other,
    }
}

fn table(results: &[SystemResult], ratios: &[Ratio]) -> String {
    let mut t = format!(
        "{:<10} {:>6} {:>14} {:>14} {:>14}  how\n",
        "system", "runs", "answers (a)", "caught up (b)", "net (b - a)"
    );
    for r in results {
        match (&r.median, &r.skipped) {
            (Some(m), _) => {
                let how = r.runs.last().map_or("", |x| x.how.as_str());
                t += &format!(
                    "{:<10} {:>6} {:>11.1} ms {:>11.1} ms {:>11.1} ms  {how}\n",
                    r.system,
                    r.runs.len(),
                    m.answer_ms,
                    m.caught_up_ms,
                    m.net_ms
                );
            }
            (None, Some(why)) => t += &format!("{:<10} skipped: {why}\n", r.system),
            (None, None) => t += &format!("{:<10} no runs\n", r.system),
        }
    }
    for x in ratios {
        t += &format!(
            "{} / {}: {:.1}x caught up, {:.1}x net of start-up\n",
            x.system,
            heal_label(&x.heal),
            x.caught_up,
            x.net
        );
    }
    t
}

fn figure(results: &[SystemResult]) -> String {
    let mut bars = Vec::new();
    for r in results {
        if let Some(m) = r.median {
            let name = heal_label(&r.system);
            bars.push((format!("{name} (b)"), m.caught_up_ms));
            bars.push((format!("{name} (b − a)"), m.net_ms));
        }
    }
    bars_svg(
        "A follower's catch-up: (b) caught up, (b − a) net of start-up (medians)",
        "ms from the restart",
        &bars,
    )
}

fn markdown(o: &Options, results: &[SystemResult], ratios: &[Ratio]) -> String {
    let mut md = format!(
        "Real processes on this machine's loopback, its 2 cores shared by every server and the clients. Per system and run: a fresh cluster; each of {} keys written once; {} client threads writing {} times a second in all (uniform keys, 8-byte values) to the members other than the follower, for {} s; `kill -9` of one follower; {} s more of the same writes; the follower restarts from what it had on disk (HEAL: its NVM file) and the writes go on. Times from the restart, probed every {} ms (or every 1 % of the time since the restart, when longer):\n\n\
- **(a) answers**: the process answers at all. ZooKeeper: `ruok` (the JVM is up and has loaded its snapshot and log); etcd: `/version` on its peer listener (its WAL replayed; etcd serves clients only once caught up); HEAL: the node's `node_stats` (its NVM file loaded).\n\
- **(b) caught up**: ZooKeeper: `srvr` says `Mode: follower` with a zxid at least the leader's at the restart; etcd: its `raftAppliedIndex` is at least the leader's `raftIndex` at the restart; HEAL: the node is online (`HEAL: recovered` in its log, after it applied its Buddy's answer and before it serves).\n\
- **(b) − (a)**: the catch-up net of the process start-up (the JVM's start-up is not catch-up).\n\n",
        o.keys, writers::THREADS, o.rate, o.warmup_s, o.downtime_s, POLL.as_millis()
    );
    md += &runs_table(results);
    md += &medians_table(results);
    md += &verdict(ratios);
    md += &zk_failures(results);
    md += "\nTwo shared cores make single runs noisy: compare the rows, not only the medians. And the systems are not set up alike, so read the ratios with this in mind: ZooKeeper (3.8, Debian's, ZooKeeper's sample settings, JVM defaults with a 512 MB heap) and etcd (3.4, Debian's, its defaults) are 3 members and fsync their logs to this machine's disk, as they do by default; HEAL is 5 replicas (the paper's degree) plus a configuration manager, and persists to an NVM file that is a memory-mapped file here: plain HEAL's persists survive a `kill -9`, not a power cut (the paper's NVM would survive both); HEAL+fsync (`tandem node --fsync`) flushes them to this machine's disk before they count (group commit), as ZooKeeper and etcd do. HEAL's (b) includes the node reaching the configuration manager and being added back. ZooKeeper's behind is in zxids, etcd's in Raft entries, HEAL's in acknowledged writes; HEAL's Buddy ships the latest version of each key written meanwhile (`missed_updates` in the JSON), ZooKeeper and etcd every entry (or, for ZooKeeper, a whole snapshot when it judges the log too long: SNAP).\n";
    md
}

/// The ZooKeeper runs whose follower failed to sync at first, and why.
fn zk_failures(results: &[SystemResult]) -> String {
    let Some(zk) = results.iter().find(|r| r.system == "zookeeper") else {
        return String::new();
    };
    let failed: Vec<&RunResult> = zk
        .runs
        .iter()
        .filter(|r| {
            r.details["failed_attempts"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        })
        .collect();
    if failed.is_empty() {
        return String::new();
    }
    let mut why: Vec<String> = failed
        .iter()
        .flat_map(|r| {
            r.details["failed_attempts"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(|v| v.as_str().map(|s| format!("`{s}`")))
        .collect();
    why.sort();
    why.dedup();
    let mut md = format!(
        "\nIn {} of {} ZooKeeper runs the restarted follower's first attempt to sync with the leader failed ({}), and it synced on a later attempt, after a new election: its (b) includes the failed attempt.",
        failed.len(),
        zk.runs.len(),
        why.join(", ")
    );
    if why.iter().any(|w| w.contains("\"pif\" is null")) {
        md += " The NullPointerException in `Learner.syncWithLeader` is ZOOKEEPER-4394, reported upstream: a proposal still outstanding when a DIFF starts, committed before the follower is up to date (writes going on during the sync, as here).";
    }
    md + "\n"
}

fn runs_table(results: &[SystemResult]) -> String {
    let mut md = String::from("| system | run | follower | behind at restart | writes/s while it was down | (a) answers | (b) caught up | (b) − (a) | how it caught up |\n|---|---:|---|---:|---:|---:|---:|---:|---|\n");
    for r in results {
        if let Some(why) = &r.skipped {
            md += &format!(
                "| {} | – | skipped: cannot be installed here ({}) | | | | | | |\n",
                r.system,
                why.lines().last().unwrap_or("")
            );
        }
        for (i, x) in r.runs.iter().enumerate() {
            let unit = if x.follower_index_before.is_some() {
                "entries"
            } else {
                "writes"
            };
            md += &format!(
                "| {} | {} | {} | {} {unit} | {:.0} | {:.1} ms | {:.1} ms | {:.1} ms | {} |\n",
                r.system,
                i + 1,
                x.follower,
                x.behind(),
                x.downtime_rate,
                x.answer_ms,
                x.caught_up_ms,
                x.net_ms,
                x.how
            );
        }
    }
    md
}

fn medians_table(results: &[SystemResult]) -> String {
    let mut md = String::from("\nMedians (each column its own):\n\n| system | runs | (a) answers | (b) caught up | (b) − (a) |\n|---|---:|---:|---:|---:|\n");
    for r in results {
        if let Some(m) = r.median {
            md += &format!(
                "| {} | {} | {:.1} ms | {:.1} ms | {:.1} ms |\n",
                r.system,
                r.runs.len(),
                m.answer_ms,
                m.caught_up_ms,
                m.net_ms
            );
        }
    }
    md
}

/// The ratios against the goal (HEAL at least 10x faster than both).
fn verdict(ratios: &[Ratio]) -> String {
    if ratios.is_empty() {
        return "\nNo ratio: HEAL or both peers were not measured.\n".into();
    }
    let mut md = String::from("\n");
    for x in ratios {
        let met = |v: f64| if v >= 10.0 { "met" } else { "missed" };
        md += &format!(
            "- {} / {}: **{:.1}x** on (b) caught up, **{:.1}x** on (b) − (a); the goal of at least 10x: {} on (b), {} on (b) − (a).\n",
            x.system, heal_label(&x.heal), x.caught_up, x.net, met(x.caught_up), met(x.net)
        );
    }
    md
}
