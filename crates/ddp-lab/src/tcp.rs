//! DDP over real processes (`tandem ddp bench --net tcp`): for each model,
//! five `tandem node` processes on loopback and pipelined YCSB sessions
//! (`crate::load`), measured by the nodes' own counters. Models
//! alternate in rounds (so a slow phase of the machine hits them all) and
//! each is reported normalized to ⟨Lin, Synch⟩ of the same run, beside the
//! runtime's ceiling like for like: [`crate::echo`], which carries
//! ⟨Lin, Synch⟩'s messages for the same sessions and does nothing else, run
//! in the same rounds.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::load::Load;
use serde::Serialize;
use tandem_ddp::ycsb_session::SessionPlan;
use tandem_ddp::Model;
use tandem_ycsb::Ycsb;

use crate::procs::{DdpCluster, NODES};

#[derive(Clone, Debug)]
pub struct TcpBenchConfig {
    pub workload: Ycsb,
    pub clients_per_node: u64,
    pub warmup: Duration,
    pub measure: Duration,
    pub rounds: u32,
    pub fsync: bool,
    /// The `tandem` binary the nodes run.
    pub exe: PathBuf,
    /// NVM files go under here (one directory per model, removed after).
    pub dir: PathBuf,
    pub seed: u64,
}

/// One model, medians over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct TcpModelResult {
    pub model: String,
    /// YCSB requests completed per second (a transaction's count when it commits).
    pub throughput_ops: f64,
    pub normalized: Option<f64>,
    /// Protocol messages between nodes per second, and per request.
    pub messages_per_s: f64,
    pub messages_per_op: f64,
    /// Client requests and replies per second (not counted above).
    pub client_messages_per_s: f64,
    /// Protocol messages per TCP write to a peer (coalescing).
    pub messages_per_write: f64,
    /// CPU the five node processes used per request, in µs.
    pub node_cpu_us_per_op: f64,
    /// CPU the five node processes used per message they handled (peer
    /// messages received and client requests), in ns: comparable with
    /// the runtime's echo, whose processes only receive and answer.
    pub node_cpu_ns_per_message: f64,
    /// The node processes' system calls (reads, writes and poller waits,
    /// as their runtime counts them) per message they handled.
    pub node_syscalls_per_message: f64,
    /// The share of the nodes' CPU their event loops' threads used.
    pub node_loop_cpu_share: f64,
    pub rounds_ops: Vec<f64>,
    /// Set beside the echo of the same rounds: this model's requests and
    /// peer messages per second over the echo's, its nodes' CPU per
    /// message over the echo nodes'.
    pub of_echo_ops: Option<f64>,
    pub of_echo_messages: Option<f64>,
    pub cpu_per_message_vs_echo: Option<f64>,
}

/// What [`run_tcp_models`] measured: the models, and the echo beside them.
#[derive(Clone, Debug, Serialize)]
pub struct TcpRun {
    pub models: Vec<TcpModelResult>,
    pub echo: TcpModelResult,
}

/// What a round starts: a model's nodes, or the echo loaded as ⟨Lin, Synch⟩.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Subject {
    Model(Model),
    Echo,
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Model(m) => write!(f, "{m}"),
            Subject::Echo => f.write_str(ECHO_NAME),
        }
    }
}

/// The echo's name in reports.
pub const ECHO_NAME: &str = "ddp-echo";

/// One measured interval of one model.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    ops: f64,
    msgs: f64,
    client_msgs: f64,
    writes: f64,
    /// Peer messages received and client requests taken by the nodes.
    handled: f64,
    cpu: f64,
    syscalls: f64,
    /// The nodes' own CPU clocks: the processes', their event loops'.
    own_cpu_ns: f64,
    loop_cpu_ns: f64,
    secs: f64,
}

/// Start `subject`'s cluster, load it, measure, stop it.
fn sample(cfg: &TcpBenchConfig, subject: Subject, round: u32) -> Result<Sample, String> {
    let dir = cfg.dir.join(format!("{subject}-{round}"));
    let (system, model) = match subject {
        Subject::Model(m) => ("ddp", m),
        Subject::Echo => (ECHO_NAME, Model::LIN_SYNCH),
    };
    let cluster = DdpCluster::start_system(&cfg.exe, system, &model.to_string(), cfg.fsync, &dir)?;
    let plan = SessionPlan::paper(cfg.workload.clone(), model);
    let load = Load::start(
        &cluster.load_config(
            cfg.clients_per_node * NODES as u64,
            0,
            plan,
            cfg.seed + round as u64,
        ),
        Instant::now(),
    );
    std::thread::sleep(cfg.warmup);
    let (s0, c0, d0, t0) = (
        cluster.stats()?,
        cluster.cpu_seconds(),
        load.completed.load(Ordering::Relaxed),
        Instant::now(),
    );
    std::thread::sleep(cfg.measure);
    let (s1, c1, d1, secs) = (
        cluster.stats()?,
        cluster.cpu_seconds(),
        load.completed.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
    );
    load.stop();
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Sample {
        ops: (d1 - d0) as f64,
        msgs: (s1.sent - s0.sent) as f64,
        client_msgs: ((s1.requests + s1.replies) - (s0.requests + s0.replies)) as f64,
        writes: (s1.peer_writes - s0.peer_writes) as f64,
        handled: ((s1.received + s1.requests) - (s0.received + s0.requests)) as f64,
        cpu: c1 - c0,
        syscalls: (s1.syscalls - s0.syscalls) as f64,
        own_cpu_ns: (s1.cpu_ns - s0.cpu_ns) as f64,
        loop_cpu_ns: (s1.loop_cpu_ns - s0.loop_cpu_ns) as f64,
        secs,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn summarize(subject: Subject, samples: &[Sample]) -> TcpModelResult {
    let per = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    let total = |f: fn(&Sample) -> f64| samples.iter().map(f).sum::<f64>();
    let ops = total(|s| s.ops).max(1.0);
    TcpModelResult {
        model: subject.to_string(),
        throughput_ops: per(|s| s.ops / s.secs),
        normalized: None,
        messages_per_s: per(|s| s.msgs / s.secs),
        messages_per_op: total(|s| s.msgs) / ops,
        client_messages_per_s: per(|s| s.client_msgs / s.secs),
        messages_per_write: total(|s| s.msgs) / total(|s| s.writes).max(1.0),
        node_cpu_us_per_op: 1e6 * total(|s| s.cpu) / ops,
        node_cpu_ns_per_message: 1e9 * total(|s| s.cpu) / total(|s| s.handled).max(1.0),
        node_syscalls_per_message: total(|s| s.syscalls) / total(|s| s.handled).max(1.0),
        node_loop_cpu_share: total(|s| s.loop_cpu_ns) / total(|s| s.own_cpu_ns).max(1.0),
        rounds_ops: samples.iter().map(|s| s.ops / s.secs).collect(),
        of_echo_ops: None,
        of_echo_messages: None,
        cpu_per_message_vs_echo: None,
    }
}

/// Every model in every round, and the echo after them; `progress` sees
/// each sample's subject and ops/s.
pub fn run_tcp_models(
    cfg: &TcpBenchConfig,
    models: &[Model],
    progress: impl Fn(Subject, u32, f64),
) -> Result<TcpRun, String> {
    let subjects: Vec<Subject> = models
        .iter()
        .map(|&m| Subject::Model(m))
        .chain([Subject::Echo])
        .collect();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); subjects.len()];
    for round in 0..cfg.rounds.max(1) {
        for (i, &s) in subjects.iter().enumerate() {
            let x = sample(cfg, s, round)?;
            progress(s, round, x.ops / x.secs);
            samples[i].push(x);
        }
    }
    let mut results: Vec<TcpModelResult> = subjects
        .iter()
        .zip(&samples)
        .map(|(&s, x)| summarize(s, x))
        .collect();
    let echo = results.pop().expect("the echo's result");
    let base = results
        .iter()
        .find(|r| r.model == Model::LIN_SYNCH.to_string())
        .map(|r| r.throughput_ops);
    let over = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    for r in &mut results {
        r.normalized = base.and_then(|b| over(r.throughput_ops, b));
        r.of_echo_ops = over(r.throughput_ops, echo.throughput_ops);
        r.of_echo_messages = over(r.messages_per_s, echo.messages_per_s);
        r.cpu_per_message_vs_echo = over(r.node_cpu_ns_per_message, echo.node_cpu_ns_per_message);
    }
    Ok(TcpRun {
        models: results,
        echo,
    })
}
