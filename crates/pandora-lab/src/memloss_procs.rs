//! `tandem experiment memory-loss-procs` (docs/DESIGN.md §4.6, Pandora
//! §3.2.5 and Figs. 8–11's memory faults): Pandora as OS
//! processes on loopback, three `memory-server`s (two copies of every
//! partition), the membership and two `compute-server`s under the micro
//! workload. One memory server gets `kill -9`; a replacement
//! (`memory-server --replaces 1`) starts 0.6 s later. Measured from the
//! processes' own reports: detection, the hold that moves primaries, the
//! copy onto the replacement and the hold that admits it, throughput before,
//! degraded and after. The second run also kills a compute server in the
//! same second. Each run ends with `check-cluster`'s checks on the new set of
//! servers (replicas identical, counters consistent with the ledgers).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_cluster::backend::MemoryServers;
use tandem_cluster::procs;
use tandem_dkvs::{Mode, StoreConfig};
use tandem_workloads::micro::{KeyChooser, MicroSpec};

use tandem_report::plot::{timeline_svg, Series};

type ExperimentResult = Result<(Value, String, String), String>;

const KEYS: u64 = 100_000;
const MEM_BYTES: u64 = 64 << 20;

/// What one run measured.
struct RunResult {
    label: &'static str,
    detect_ms: f64,
    holds_us: Vec<f64>,
    copy_us: f64,
    slots: u64,
    /// Commits per 100 ms of the surviving compute server(s), summed.
    timeline: Vec<u64>,
    kill_s: f64,
    replace_s: f64,
    violations: Vec<String>,
    recovered: Option<String>,
}

pub fn experiment(quick: bool, progress: &dyn Fn(&str)) -> ExperimentResult {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))?;
    let secs = if quick { 3.0 } else { 6.0 };
    let mut runs = Vec::new();
    for (label, kill_compute) in [
        ("memory server", false),
        ("memory and compute server", true),
    ] {
        let r = one_run(&exe, secs, label, kill_compute)?;
        progress(&format!(
            "  memory-loss-procs, {label}: detected in {:.0} ms, holds {:?} µs, {} slots copied in {:.0} µs, {} violations",
            r.detect_ms,
            r.holds_us.iter().map(|h| h.round() as u64).collect::<Vec<_>>(),
            r.slots,
            r.copy_us,
            r.violations.len()
        ));
        runs.push(r);
    }
    let svg = figure(&runs);
    let md = markdown(&runs, secs);
    let j = json!(runs
        .iter()
        .map(|r| json!({
            "run": r.label, "detect_ms": r.detect_ms, "holds_us": r.holds_us, "copy_us": r.copy_us,
            "slots_copied": r.slots, "timeline_100ms": r.timeline, "kill_s": r.kill_s,
            "replacement_s": r.replace_s, "violations": r.violations, "recovered": r.recovered,
        }))
        .collect::<Vec<_>>());
    Ok((j, svg, md))
}

fn micro() -> MicroSpec {
    MicroSpec {
        keys: KEYS,
        write_ratio: 0.5,
        ops_per_tx: 2,
        chooser: KeyChooser::Uniform,
    }
}

/// `tandem args` with stdout piped and stderr to `err`.
fn spawn(exe: &Path, args: &[&str], secret: &str, err: &Path) -> Result<Child, String> {
    let err = std::fs::File::create(err).map_err(|e| e.to_string())?;
    Command::new(exe)
        .args(args)
        .env("TANDEM_SECRET", secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("cannot start tandem {}: {e}", args[0]))
}

/// Kills the child when dropped.
struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(path: &Path, needle: &str, within: Duration) -> Result<String, String> {
    let until = Instant::now() + within;
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) {
            return Ok(log);
        }
        if Instant::now() > until {
            return Err(format!("the membership never said '{needle}':\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn one_run(
    exe: &Path,
    secs: f64,
    label: &'static str,
    kill_compute: bool,
) -> Result<RunResult, String> {
    let dir = std::env::temp_dir().join(format!(
        "tandem-memloss-{}-{kill_compute}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let secret = tandem_fabric::auth::MasterSecret::generate();
    let mut servers =
        MemoryServers::spawn(exe, 3, MEM_BYTES, secret.clone()).map_err(|e| e.to_string())?;
    let memory = servers
        .addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (secret_hex, keys) = (secret.hex().to_string(), KEYS.to_string());
    let common = ["--memory", memory.as_str(), "--keys", keys.as_str()];
    let mlog = dir.join("membership.log");
    let (membership, maddr) = start_membership(exe, &common, &secret_hex, &mlog)?;
    let computes = ComputeServers {
        exe,
        dir: &dir,
        maddr: &maddr,
        duration: secs.to_string(),
        common: &common,
        secret_hex: &secret_hex,
    };
    let c1 = computes.spawn("1")?;
    let mut c2 = computes.spawn("2")?;
    let kill = Kill {
        exe,
        mlog: &mlog,
        maddr: &maddr,
        secs,
        kill_compute,
    };
    let times = kill.run(&mut servers, &mut c2)?;
    let timeline = surviving_timelines(&dir, [("1", c1), ("2", c2)], kill_compute)?;
    let log = wait_for(&mlog, "every memory node up", Duration::from_secs(10))?;
    let violations = check(&servers, &dir, kill_compute)?;
    let (holds_us, copy_us, slots) = parse_log(&log);
    let recovered = log
        .lines()
        .find(|l| l.contains("recovered node 2"))
        .map(|l| l.trim_start_matches("membership: ").to_string());
    drop(membership);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(RunResult {
        label,
        detect_ms: times.detect_ms,
        holds_us,
        copy_us,
        slots,
        timeline,
        kill_s: times.kill_s,
        replace_s: times.replace_s,
        violations,
        recovered,
    })
}

/// Start the membership (it loads the store), its stderr in `mlog`; the
/// process and the address it announced.
fn start_membership(
    exe: &Path,
    common: &[&str],
    secret_hex: &str,
    mlog: &Path,
) -> Result<(Kid, String), String> {
    let margs = [
        &[
            "pandora",
            "membership",
            "--listen",
            "127.0.0.1:0",
            "--load",
            "--timeout-ms",
            "50",
            "--memory-timeout-ms",
            "100",
        ][..],
        common,
    ]
    .concat();
    let mut membership = Kid(spawn(exe, &margs, secret_hex, mlog)?);
    let mut line = String::new();
    BufReader::new(membership.0.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let maddr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or("the membership did not announce itself")?
        .to_string();
    Ok((membership, maddr))
}

/// What a run's compute servers share: the membership, the memory
/// servers, how long they run, where they report.
struct ComputeServers<'a> {
    exe: &'a Path,
    dir: &'a Path,
    maddr: &'a str,
    /// Seconds.
    duration: String,
    common: &'a [&'a str],
    secret_hex: &'a str,
}

impl ComputeServers<'_> {
    /// Start compute server `node`, its ledger, report and stderr in the
    /// run's directory.
    fn spawn(&self, node: &str) -> Result<Child, String> {
        let dir = self.dir;
        let (ledger, json) = (
            dir.join(format!("c{node}.ledger")),
            dir.join(format!("c{node}.json")),
        );
        let args = [
            &[
                "pandora",
                "compute-server",
                "--membership",
                self.maddr,
                "--node",
                node,
                "--coordinators",
                "8",
            ][..],
            &["--duration", self.duration.as_str(), "--heartbeat-ms", "2"],
            &[
                "--ledger",
                ledger.to_str().unwrap(),
                "--json",
                json.to_str().unwrap(),
            ],
            self.common,
        ]
        .concat();
        spawn(
            self.exe,
            &args,
            self.secret_hex,
            &dir.join(format!("c{node}.err")),
        )
    }
}

/// The kill of one run: memory server 1 (and compute server 2 with it, if
/// `kill_compute`) a third of the way in, its replacement 0.6 s later.
struct Kill<'a> {
    exe: &'a Path,
    mlog: &'a Path,
    maddr: &'a str,
    secs: f64,
    kill_compute: bool,
}

/// When the kill happened and the replacement started (seconds after
/// compute server 1 joined), and how long detection took.
struct KillTimes {
    kill_s: f64,
    detect_ms: f64,
    replace_s: f64,
}

impl Kill<'_> {
    fn run(&self, servers: &mut MemoryServers, c2: &mut Child) -> Result<KillTimes, String> {
        let mlog = self.mlog;
        // Compute server 1's timeline starts when it joins.
        wait_for(mlog, "compute node 1 joined", Duration::from_secs(30))?;
        let t0 = Instant::now();
        wait_for(mlog, "compute node 2 joined", Duration::from_secs(30))?;
        std::thread::sleep(Duration::from_secs_f64(self.secs / 3.0));
        if self.kill_compute {
            c2.kill().map_err(|e| e.to_string())?;
        }
        servers.kill(1).map_err(|e| e.to_string())?;
        let killed = Instant::now();
        let kill_s = t0.elapsed().as_secs_f64();
        wait_for(mlog, "memory nodes {1} down", Duration::from_secs(10))?;
        let detect_ms = killed.elapsed().as_secs_f64() * 1e3;
        std::thread::sleep(Duration::from_millis(600).saturating_sub(killed.elapsed()));
        let replace_s = t0.elapsed().as_secs_f64();
        servers
            .replace(
                self.exe,
                1,
                MEM_BYTES,
                self.maddr.parse().map_err(|e| format!("{e}"))?,
            )
            .map_err(|e| e.to_string())?;
        Ok(KillTimes {
            kill_s,
            detect_ms,
            replace_s,
        })
    }
}

/// Wait for the compute servers to end; the timelines of those not
/// killed, summed. A survivor that failed is an error, with its stderr.
fn surviving_timelines(
    dir: &Path,
    computes: [(&str, Child); 2],
    kill_compute: bool,
) -> Result<Vec<u64>, String> {
    let mut timeline = Vec::new();
    for (node, c) in computes {
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        if kill_compute && node == "2" {
            continue;
        }
        if !out.status.success() {
            let err = std::fs::read_to_string(dir.join(format!("c{node}.err"))).unwrap_or_default();
            return Err(format!("compute server {node} failed:\n{err}"));
        }
        add_timeline(&mut timeline, &dir.join(format!("c{node}.json")))?;
    }
    Ok(timeline)
}

fn add_timeline(sum: &mut Vec<u64>, json: &Path) -> Result<(), String> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(json).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let t: Vec<u64> = v["timeline_100ms"]
        .as_array()
        .ok_or("no timeline")?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    if sum.len() < t.len() {
        sum.resize(t.len(), 0);
    }
    for (s, x) in sum.iter_mut().zip(t) {
        *s += x;
    }
    Ok(())
}

/// `check-cluster` on the servers after the replacement.
fn check(servers: &MemoryServers, dir: &Path, kill_compute: bool) -> Result<Vec<String>, String> {
    // The layout `tandem pandora membership` computes from its command line.
    let mut store = StoreConfig::new(Mode::Pandora, 3, 2, micro().tables());
    store.partitions_per_table = 64;
    store.log_slots = 1024;
    let ledgers: Vec<PathBuf> = ["1", "2"]
        .iter()
        .map(|n| dir.join(format!("c{n}.ledger")))
        .collect();
    let ledger = procs::read_ledgers(&ledgers)?;
    let mut failed = Vec::new();
    for (i, l) in ledgers.iter().enumerate() {
        failed.extend(if kill_compute && i == 1 {
            procs::read_ids(l)?
        } else {
            procs::fenced_ids(l)?
        });
    }
    Ok(procs::check_cluster(&servers.cluster(), &store, &micro(), &ledger, &failed)?.violations)
}

/// The holds (µs, in order), the copy's µs and slots, from the membership's log.
fn parse_log(log: &str) -> (Vec<f64>, f64, u64) {
    let num_after = |l: &str, key: &str| -> Option<f64> {
        let rest = &l[l.find(key)? + key.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let holds = log
        .lines()
        .filter_map(|l| num_after(l, "after a hold of "))
        .collect();
    let copy = log.lines().find(|l| l.contains("re-replicated onto"));
    let slots = copy
        .and_then(|l| num_after(&l[l.find("onto ")?..], ": "))
        .unwrap_or(0.0) as u64;
    let copy_us = copy.and_then(|l| num_after(l, "slots in ")).unwrap_or(0.0);
    (holds, copy_us, slots)
}

fn figure(runs: &[RunResult]) -> String {
    let tps: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| r.timeline.iter().map(|&c| c as f64 * 10.0).collect())
        .collect();
    let series: Vec<Series> = runs
        .iter()
        .zip(&tps)
        .map(|(r, t)| Series {
            label: r.label,
            tps: t,
        })
        .collect();
    let r = &runs[0];
    timeline_svg(
        "Memory-server kill -9 over processes: surviving compute servers' commits",
        100,
        &series,
        &[
            (r.kill_s, "kill -9".into()),
            (r.replace_s, "replacement starts".into()),
        ],
    )
}

fn markdown(runs: &[RunResult], secs: f64) -> String {
    let mut md = format!(
        "Three `memory-server` processes (two copies of every partition), the membership (heartbeat timeout 50 ms, memory \
         timeout 100 ms) and two `compute-server`s of 8 coordinators, micro workload ({KEYS} keys, 2 operations, 50 % writes), \
         {secs:.0} s each, all on this machine's loopback. At a third of the run memory server 1 gets `kill -9` (in the second \
         run compute server 2 first, in the same millisecond); its replacement starts 0.6 s after the kill. Throughput counts \
         the surviving compute servers.\n\n\
         | run | detected after ms | hold to move primaries µs | slots copied | copy µs | hold to fill and admit µs | tx/s before | tx/s degraded | tx/s after | check |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    );
    for r in runs {
        let rate = |from: f64, to: f64| {
            let (a, b) = (
                (from * 10.0) as usize,
                ((to * 10.0) as usize).min(r.timeline.len()),
            );
            let n = b.saturating_sub(a).max(1);
            r.timeline[a.min(b)..b].iter().sum::<u64>() as f64 * 10.0 / n as f64
        };
        let end = r.timeline.len() as f64 / 10.0;
        md += &format!(
            "| {} | {:.0} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} |\n",
            r.label,
            r.detect_ms,
            r.holds_us.first().copied().unwrap_or(0.0),
            r.slots,
            r.copy_us,
            r.holds_us.last().copied().unwrap_or(0.0),
            rate(0.5, r.kill_s - 0.1),
            rate(r.kill_s + 0.2, r.replace_s),
            rate(r.replace_s + 0.5, end),
            if r.violations.is_empty() {
                "passed".to_string()
            } else {
                format!("{} VIOLATIONS", r.violations.len())
            }
        );
    }
    if let Some(rec) = runs.iter().find_map(|r| r.recovered.as_ref()) {
        md += &format!("\nThe compute server killed in the second run: {rec}.\n");
    }
    md += "\nEvery reconfiguration holds new transactions until every live compute server has cut its links to the lost \
           server, drained and switched primaries (docs/DESIGN.md §4.6), as the paper's memory-fault path blocks; the copy onto \
           the replacement runs inside the second hold. Detection is the memory timeout plus a probe period. Degraded runs faster than before the kill \
           here: the two memory-server processes left share this machine's cores with one process fewer, and the \
           partitions of the lost server write one copy instead of two; the paper's memory servers have cores of their own.\n";
    md
}
