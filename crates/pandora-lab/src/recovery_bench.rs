//! Log recovery, and nothing else, many times over: `tandem pandora
//! recovery-bench`. Each run plants what a crash of a compute node with
//! `coordinators` in-flight transactions leaves (a log record per
//! coordinator on its f+1 log nodes, lock words on the primaries, new
//! versions on some replicas: finished, half-unlocked, fully written and
//! half-written transactions in turn), then times one
//! [`RecoveryCoordinator::recover`] from the calling thread: its wall time
//! and its thread's CPU time, per coordinator and per round. `tandem
//! pandora recovery` measures the same step inside a loaded run once; this
//! repeats it on a quiet machine, so its CPU figures can be compared
//! binary against binary. Its floor: the last recovery's verbs, recorded
//! and posted again raw, a round's batches together, on the same fabric.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tandem_cluster::backend::{AnyFabric, Backend};
use tandem_cluster::runner::{block_on_local, load};
use tandem_cluster::workload::WorkloadSpec;
use tandem_dkvs::log::{LogEntry, LogRecord, OpKind};
use tandem_dkvs::recovery::{RecoveryCoordinator, RecoveryReport};
use tandem_dkvs::slot::{make_version, LockWord, LOCK_OFF, VERSION_OFF};
use tandem_dkvs::{Layout, Mode};
use tandem_fabric::trace::{replay, Recorder, Trace};
use tandem_fabric::{Batch, Fabric, MemNodeId, QueuePair, Verb};
use tandem_sim::cpu::{pid_ns, thread_ns};

/// The compute node the bench joins as, and the recovery coordinator's id
/// (beyond the failed ones).
const BENCH_NODE: u16 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct RecoveryBenchResult {
    pub fabric: String,
    pub coordinators: u16,
    pub keys: u64,
    pub runs: usize,
    /// Per run: wall µs and CPU µs of `recover`.
    pub wall_us: Vec<f64>,
    pub cpu_us: Vec<f64>,
    pub median_wall_us: f64,
    pub median_cpu_us: f64,
    pub cpu_ns_per_coordinator: f64,
    pub rounds: usize,
    pub cpu_us_per_round: f64,
    pub rolled_forward: usize,
    pub rolled_back: usize,
    /// The floor: one recovery's verbs posted again raw, round by round
    /// (`tandem_fabric::trace`), as many times: median wall and CPU µs.
    pub floor_wall_us: f64,
    pub floor_cpu_us: f64,
    pub verbs: u64,
    /// Median of each recovery's CPU over the floor's measured next to it
    /// (the physical limit is 1).
    pub protocol_overhead: f64,
    /// The memory-server processes' CPU (all their threads) during each
    /// recovery and each floor, medians (0 in process).
    pub servers_cpu_us: f64,
    pub floor_servers_cpu_us: f64,
    /// The host's cores, and the CPU of a median recovery (and floor) of
    /// every process spread over them: no schedule on this host does that
    /// work in less wall time.
    pub cores: usize,
    pub cpu_bound_wall_us: f64,
    pub floor_cpu_bound_wall_us: f64,
}

/// Plant and recover `runs` times on `backend` (loaded with micro's `keys`).
pub fn run(
    backend: &Backend,
    servers: &[u32],
    layout: Arc<Layout>,
    keys: u64,
    coordinators: u16,
    runs: usize,
) -> Result<RecoveryBenchResult, String> {
    load(
        backend,
        &layout,
        &WorkloadSpec::from_name("micro", Some(keys))?,
    )?;
    block_on_local(async {
        // Over TCP, as the membership's recovery coordinator does: its
        // connections are served by each memory server's urgent poller.
        let fabric = backend
            .prioritised()
            .join(BENCH_NODE)
            .await
            .map_err(|e| format!("cannot join: {e}"))?;
        match fabric {
            AnyFabric::Inline(f) => {
                runs_on(&f, servers, layout, keys, coordinators, runs, backend.name()).await
            }
            AnyFabric::Tcp(f) => {
                runs_on(&f, servers, layout, keys, coordinators, runs, backend.name()).await
            }
        }
    })
}

async fn runs_on<F: Fabric>(
    f: &F,
    servers: &[u32],
    layout: Arc<Layout>,
    keys: u64,
    coordinators: u16,
    runs: usize,
    fabric: &str,
) -> Result<RecoveryBenchResult, String> {
    let failed: Vec<u16> = (1..=coordinators).collect();
    let (recorder, trace) = Recorder::new(f.clone(), usize::MAX);
    let mut rec = Recovering {
        f,
        recorder,
        layout,
        failed,
        rc_id: coordinators + 1,
        seq: 0,
        servers: servers.to_vec(),
        servers_us: Default::default(),
    };
    // A recovery to warm up, whose verbs are the floor's trace.
    trace.start();
    let first = rec.once().await?;
    trace.stop();
    let trace = Rc::new(trace.take());
    let (mut wall_us, mut cpu_us, mut srv_us) = (Vec::new(), Vec::new(), Vec::new());
    let (mut floor_wall, mut floor_cpu, mut floor_srv) = (Vec::new(), Vec::new(), Vec::new());
    // Recoveries and floors alternate, so a drift of the host hits both.
    for _ in 0..runs {
        let (wall, cpu, r) = rec.once().await?;
        wall_us.push(wall);
        cpu_us.push(cpu);
        srv_us.push(std::mem::take(&mut rec.servers_us));
        if r.logs_found != rec.failed.len() {
            return Err(format!(
                "found {} logs of {}",
                r.logs_found,
                rec.failed.len()
            ));
        }
        let (wall, cpu) = rec.floor(&trace).await?;
        floor_wall.push(wall);
        floor_cpu.push(cpu);
        floor_srv.push(std::mem::take(&mut rec.servers_us));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bound = |client: &[f64], srv: &[f64]| {
        let all: Vec<f64> = client.iter().zip(srv).map(|(c, s)| c + s).collect();
        median(&all) / cores as f64
    };
    let (rounds, fwd, back) = (first.2.rounds, first.2.rolled_forward, first.2.rolled_back);
    let median_cpu_us = median(&cpu_us);
    let ratios: Vec<f64> = cpu_us
        .iter()
        .zip(&floor_cpu)
        .map(|(c, f)| c / f.max(1e-3))
        .collect();
    let floor_cpu_us = median(&floor_cpu);
    let (cpu_bound_wall_us, floor_cpu_bound_wall_us) =
        (bound(&cpu_us, &srv_us), bound(&floor_cpu, &floor_srv));
    Ok(RecoveryBenchResult {
        fabric: fabric.to_string(),
        coordinators,
        keys,
        runs,
        median_wall_us: median(&wall_us),
        cpu_ns_per_coordinator: median_cpu_us * 1e3 / coordinators.max(1) as f64,
        cpu_us_per_round: median_cpu_us / rounds.max(1) as f64,
        median_cpu_us,
        wall_us,
        cpu_us,
        rounds,
        rolled_forward: fwd,
        rolled_back: back,
        floor_wall_us: median(&floor_wall),
        floor_cpu_us,
        verbs: trace.verbs(),
        protocol_overhead: median(&ratios),
        servers_cpu_us: median(&srv_us),
        floor_servers_cpu_us: median(&floor_srv),
        cores,
        cpu_bound_wall_us,
        floor_cpu_bound_wall_us,
    })
}

/// One store's recoveries: each plants transaction `seq` and recovers it.
struct Recovering<'a, F: Fabric> {
    f: &'a F,
    recorder: Recorder<F>,
    layout: Arc<Layout>,
    failed: Vec<u16>,
    rc_id: u16,
    seq: u64,
    /// The memory servers' pids, and their CPU µs in the last timed step.
    servers: Vec<u32>,
    servers_us: f64,
}

impl<F: Fabric> Recovering<'_, F> {
    /// Plant, then recover: wall µs, CPU µs and the report.
    async fn once(&mut self) -> Result<(f64, f64, RecoveryReport), String> {
        self.seq += 1;
        plant(self.f, &self.layout, &self.failed, self.seq).await?;
        let mut rc = RecoveryCoordinator::new(&self.recorder, self.layout.clone(), self.rc_id)
            .with_version_counter(1 << 40 | self.seq << 24);
        let (t0, c0, s0) = (Instant::now(), thread_ns(), self.servers_ns());
        let r = rc
            .recover(&self.failed)
            .await
            .map_err(|e| format!("recovery failed: {e}"))?;
        let cpu = (thread_ns() - c0) as f64 / 1e3;
        self.servers_us = (self.servers_ns() - s0) as f64 / 1e3;
        Ok((t0.elapsed().as_secs_f64() * 1e6, cpu, r))
    }

    /// The memory servers' CPU so far, all their threads.
    fn servers_ns(&self) -> u64 {
        let each = self.servers.iter().map(|&p| pid_ns(p).unwrap_or(0));
        each.sum()
    }

    /// Plant, then post `trace` raw: wall µs and CPU µs.
    async fn floor(&mut self, trace: &Rc<Trace>) -> Result<(f64, f64), String> {
        self.seq += 1;
        plant(self.f, &self.layout, &self.failed, self.seq).await?;
        let (t0, c0, s0) = (Instant::now(), thread_ns(), self.servers_ns());
        replay(self.f, trace.clone(), 1).await;
        let cpu = (thread_ns() - c0) as f64 / 1e3;
        self.servers_us = (self.servers_ns() - s0) as f64 / 1e3;
        Ok((t0.elapsed().as_secs_f64() * 1e6, cpu))
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// What a crash leaves, for transaction `seq` of every coordinator in
/// `failed`: two objects each, on slots of their own.
async fn plant<F: Fabric>(f: &F, layout: &Layout, failed: &[u16], seq: u64) -> Result<(), String> {
    let qps: Vec<F::Qp> = (0..f.memory_nodes())
        .map(|m| f.queue_pair(m as MemNodeId))
        .collect();
    let mut posts: Vec<Vec<Verb>> = vec![Vec::new(); qps.len()];
    for (i, &c) in failed.iter().enumerate() {
        let rec = record(layout, c, i, failed.len(), seq);
        let w = LockWord::owned(c, seq).0;
        for (k, e) in rec.entries.iter().enumerate() {
            for (r, &(n, addr)) in e.replicas.iter().enumerate() {
                // 0: finished; 1: half unlocked; 2: all written; 3: half written.
                let state = i % 4;
                let locked = r == 0 && (state == 2 || state == 3 || (state == 1 && k == 0));
                let written = state != 3 || r == 0;
                let version = if written {
                    e.new_version
                } else {
                    e.old_version
                };
                posts[n as usize]
                    .push(Verb::write_u64(addr + LOCK_OFF, if locked { w } else { 0 }));
                posts[n as usize].push(Verb::write_u64(addr + VERSION_OFF, version));
            }
        }
        for n in layout.log_nodes(c) {
            posts[n as usize].push(Verb::write(layout.log_addr(c), rec.encode()));
        }
    }
    for (n, verbs) in posts.into_iter().enumerate() {
        for chunk in verbs.chunks(256) {
            let b: Batch = chunk.to_vec();
            for c in qps[n].post(b).await {
                c.map_err(|e| format!("planting failed: {e}"))?;
            }
        }
    }
    Ok(())
}

/// Coordinator `c`'s (the `i`-th failed) record of transaction `seq`.
/// The objects are spread evenly over each partition, as a run's uniformly
/// chosen keys are, so a larger store costs what it would (cache and TLB
/// misses), not what neighbouring slots cost.
fn record(layout: &Layout, c: u16, i: usize, count: usize, seq: u64) -> LogRecord {
    let t = layout.table(0);
    let per_partition = (2 * count as u64).div_ceil(t.partitions as u64).max(1);
    let stride = (t.slots_per_partition() as u64 / per_partition).max(1);
    let entries = (0..2)
        .map(|k| {
            let n = (2 * i + k) as u64;
            let p = (n % t.partitions as u64) as u32;
            let slot = ((n / t.partitions as u64) * stride % t.slots_per_partition() as u64) as u32;
            LogEntry {
                table: 0,
                op: OpKind::Update,
                key: n,
                old_version: make_version(c, 2 * seq),
                new_version: make_version(c, 2 * seq + 1),
                old_flags: 1,
                replicas: (0..t.replicas[p as usize].len())
                    .map(|r| (t.replicas[p as usize][r], t.slot_addr(p, r, slot)))
                    .collect(),
                old_value: vec![seq as u8; t.value_bytes as usize],
            }
        })
        .collect();
    LogRecord {
        coordinator: c,
        tx_seq: seq,
        entries,
    }
}

/// The store a micro workload of `keys` keys needs, with log slots for
/// `coordinators` and the recovery coordinator.
pub fn layout(keys: u64, coordinators: u16) -> Result<Layout, String> {
    let spec = WorkloadSpec::from_name("micro", Some(keys))?;
    let mut cfg = tandem_cluster::runner::RunConfig::new(Mode::Pandora, spec);
    cfg.compute_nodes = 1;
    cfg.coordinators = coordinators + 1;
    Layout::new(&cfg.store_config())
}
