//! One DART run against Tandem as OS processes, with a `kill -9` of a compute
//! server mid-run (Pandora paper §5: "we randomly inject crashes after any
//! operation"; docs/DESIGN.md §5, crash injection over processes; recovery as
//! in the paper's §3.2 and docs/DESIGN.md §4.5).
//!
//! The parent (`tandem dart --fabric tcp --crash-rate R`) starts three
//! `tandem pandora memory-server` processes and a `tandem pandora membership` process whose
//! layout describes the litmus table (`--litmus-keys`), loads the litmus
//! objects, and starts one `tandem litmus-worker` process per compute node.
//! A worker joins the membership service (coordinator ids, heartbeats,
//! failed-id notices), runs DART clients on its ids and appends its history
//! to a [`Journal`] as it goes. On a run the seed picks to crash, the parent
//! counts the victim's invocations in its journal and sends it SIGKILL after
//! a seeded number of them, waits until the membership service has detected
//! the silence, revoked the victim, recovered its logs and published its
//! failed ids (its stderr says so), and lets the survivors finish. Then it
//! joins as a fresh compute node that knows the failed ids, asserts every
//! instance once more, and checks the merged history: the killed worker's
//! transactions without a completion line have an unknown outcome.
//!
//! Then, unless `replica_check` is off, the [`crate::proc_replicas`] check:
//! that checker fails each memory node in turn in its own memory view and
//! re-reads every key, then the parent `kill -9`s one memory-server process
//! (the seed picks it) and the checker re-reads every key from the replicas
//! that take over. The crash note says which server died.
//!
//! Real time is `CLOCK_REALTIME` since the run began, shared by every process
//! on the machine (the checker's real-time edges compare across workers). A
//! run is re-run, not replayed: the seed fixes the victim and how many
//! transactions it starts before the kill, not the interleaving.
//!
//! Only pandora: the membership process runs pandora's log recovery (ford's
//! and traditional's stop-the-world recovery exists only in the simulator).
//! Recovery bugs among `bug_names` (`--inject-bug restore-one-replica`, ...)
//! and `publish-before-recovery` go to the membership process (its hidden `--inject-bug`); the others to
//! the workers.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tandem_cluster::backend::MemoryServers;
use tandem_cluster::procs::follow::{follow_memory, register_live, Gate, MemoryState};
use tandem_cluster::procs::MembershipSession;
use tandem_dkvs::loader::Loader;
use tandem_dkvs::{ComputeNode, FailedIds, Layout, MemoryView, Mode, StoreConfig, TableSpec};
use tandem_fabric::auth::{Keyring, MasterSecret};
use tandem_fabric::tcp::{TcpCluster, TcpFabric};
use tandem_fabric::RegionKey;
use tandem_sim::Rng;

use crate::board::{Board, MAX_PAIRS};
use crate::client::{Client, ClientSpec};
use crate::history::{Outcome, TxRecord};
use crate::journal::{self, Journal};
use crate::litmus::{Litmus, Pattern};
use crate::net_faults::{self, NetFaults};
use crate::proc_replicas;
use crate::recorder::SharedLog;
use crate::replica_check;
use crate::report::RunReport;
use crate::suite::Suite;
use crate::tandem_store::{TandemStore, LITMUS_TABLE};
use crate::value::VALUE_BYTES;

/// Memory nodes, replicas and log slots (= the coordinator-id space) of a run.
pub const MEMORY_NODES: u16 = 3;
pub const REPLICAS: u16 = 2;
pub const LOG_SLOTS: u32 = 64;

/// The store every process of a litmus cluster computes the same layout from
/// (the membership process too: `tandem pandora membership --litmus-keys`). Bug
/// switches do not change the layout.
pub fn litmus_store(
    mode: Mode,
    memory_nodes: u16,
    replicas: u16,
    log_slots: u32,
    capacity: u64,
) -> StoreConfig {
    let table = TableSpec {
        id: LITMUS_TABLE,
        name: "litmus".into(),
        value_size: VALUE_BYTES,
        capacity: capacity.max(1),
    };
    let mut store = StoreConfig::new(mode, memory_nodes, replicas, vec![table]);
    store.partitions_per_table = 4;
    store.log_slots = log_slots;
    store.log_slot_bytes = 8 * 1024;
    store
}

/// Everything a `tandem litmus-worker` process needs (passed as one JSON argument).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub membership: Vec<SocketAddr>,
    pub memory: Vec<SocketAddr>,
    /// Compute-node id (membership and fabric), 1-based.
    pub node: u16,
    pub clients: u16,
    /// DART client ids are `client_base..client_base + clients`.
    pub client_base: u32,
    /// First insert/delete pair number of this worker.
    pub pair_base: u32,
    pub txs: u64,
    pub seed: u64,
    pub tests: String,
    pub instances: u32,
    pub bugs: Vec<String>,
    pub capacity: u64,
    pub assert_chance: f64,
    /// `CLOCK_REALTIME` ns at which the run began: history times count from it.
    pub epoch_ns: u64,
    pub heartbeat_us: u64,
    pub journal: PathBuf,
    /// Map the memory servers' shared regions (shm fabric); fail rather
    /// than fall back to TCP.
    #[serde(default)]
    pub shm: bool,
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The body of `tandem litmus-worker`: join, run every client to its end,
/// leave. The journal is the output; the return value is a one-line summary.
pub fn worker(cfg: &WorkerConfig, keys: Keyring) -> Result<String, String> {
    let suite = Arc::new(Suite::parse(&cfg.tests, cfg.instances)?);
    let bugs = crate::campaign::parse_bugs(&cfg.bugs)?.store;
    let mut store = litmus_store(
        Mode::Pandora,
        cfg.memory.len() as u16,
        REPLICAS,
        LOG_SLOTS,
        cfg.capacity,
    );
    store.bugs = bugs;
    let layout = Arc::new(Layout::new(&store)?);
    let journal = Arc::new(Journal::create(&cfg.journal)?);
    // On shm, verbs complete at once: yield at each batch so the clients of
    // this worker interleave at verb boundaries, as over TCP.
    tandem_cluster::procs::set_credentials(keys.clone())?;
    let memory = TcpCluster::new(cfg.memory.clone(), keys)
        .shm(cfg.shm)
        .yielding(true);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    // Register first, then join: the detector never judges a worker that
    // holds no keys yet (and a revoked id can never register again anyway).
    let keys = local
        .block_on(&rt, register_live(&memory, cfg.node, &Default::default()))
        .map_err(|e| format!("register compute node {}: {e}", cfg.node))?;
    let session = MembershipSession::join(
        &cfg.membership,
        cfg.node,
        cfg.clients,
        Duration::from_micros(cfg.heartbeat_us.max(100)),
    )?;
    journal.ids(&session.ids);
    let clients = WorkerClients {
        cfg,
        memory: &memory,
        store: &store,
        layout: &layout,
        suite,
        journal,
    };
    let logs = local.block_on(&rt, clients.run(&keys, &session))?;
    session.leave();
    let (mut c, mut a, mut u) = (0, 0, 0);
    for l in &logs {
        let l = l.borrow();
        (c, a, u) = (c + l.committed, a + l.aborted, u + l.unknown);
    }
    Ok(format!(
        "litmus worker {}: {c} committed, {a} aborted, {u} unknown",
        cfg.node
    ))
}

/// A `litmus-worker`'s compute node and its DART clients.
struct WorkerClients<'a> {
    cfg: &'a WorkerConfig,
    memory: &'a TcpCluster,
    store: &'a StoreConfig,
    layout: &'a Arc<Layout>,
    suite: Arc<Suite>,
    journal: Arc<Journal>,
}

impl WorkerClients<'_> {
    /// Connect with `keys`, follow the memory servers' changes, run one
    /// client on each of the session's ids to its end; the clients' logs.
    async fn run(
        &self,
        keys: &[Option<RegionKey>],
        session: &MembershipSession,
    ) -> Result<Vec<SharedLog>, String> {
        let cfg = self.cfg;
        let fabric = self
            .memory
            .connect_live(cfg.node, keys)
            .await
            .map_err(|e| format!("connect compute node {}: {e}", cfg.node))?;
        let node = ComputeNode::new(
            fabric,
            self.store,
            self.layout.clone(),
            session.failed.clone(),
        );
        // Memory-server loss: hold, drain and switch primaries as told.
        let gate = Rc::new(Gate::default());
        let follower = tokio::task::spawn_local(follow_memory(
            cfg.node,
            session.memory(),
            node.clone(),
            gate.clone(),
            Rc::new(MemoryState::new(self.memory.clone())),
        ));
        let (logs, tasks) = self.spawn_clients(&node, &gate, &session.ids);
        for t in tasks {
            t.await.map_err(|e| format!("client task failed: {e}"))?;
        }
        if follower.is_finished() {
            let e = follower.await.map_err(|e| e.to_string())?;
            return Err(format!("compute node {}: {e}", cfg.node));
        }
        follower.abort();
        // Let the last unlocks land before leaving.
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(logs)
    }

    /// One client task per coordinator id in `ids`, each running its
    /// transactions through `gate`; their logs and tasks.
    fn spawn_clients(
        &self,
        node: &Rc<ComputeNode<TcpFabric>>,
        gate: &Rc<Gate>,
        ids: &[u16],
    ) -> (Vec<SharedLog>, Vec<tokio::task::JoinHandle<()>>) {
        let cfg = self.cfg;
        let epoch = cfg.epoch_ns;
        let clock: Rc<dyn Fn() -> u64> = Rc::new(move || wall_ns().saturating_sub(epoch));
        let board = Board::with_pair_base(cfg.pair_base);
        let mut seeds = Rng::new(cfg.seed ^ 0x7C9 ^ ((cfg.node as u64) << 40));
        let (mut logs, mut tasks) = (Vec::new(), Vec::new());
        for (k, &id) in ids.iter().enumerate() {
            let mut session = TandemStore::new(node.coordinator(id)).with_gate(gate.clone());
            let spec = ClientSpec {
                id: cfg.client_base + k as u32,
                seed: seeds.next_u64(),
                assert_chance: cfg.assert_chance,
                record: true,
            };
            let mut client = Client::new(spec, self.suite.clone(), board.clone(), clock.clone())
                .with_journal(self.journal.clone());
            logs.push(client.log());
            let n = cfg.txs;
            tasks.push(tokio::task::spawn_local(async move {
                client.run(&mut session, n).await;
                session.settle();
            }));
        }
        (logs, tasks)
    }
}

/// How the parent starts processes.
#[derive(Clone, Debug)]
pub struct ProcSetup {
    /// The `tandem` binary (memory-server, membership, litmus-worker).
    pub exe: PathBuf,
    /// The membership's heartbeat timeout.
    pub detect_ms: f64,
    /// The memory servers keep their regions in memfds that the workers map
    /// (the shm fabric) instead of serving verbs over TCP.
    pub shm: bool,
    /// Network faults on the workers while they run ([`crate::net_faults`]);
    /// the run must be in a network namespace of its own.
    pub net_faults: Option<NetFaults>,
}

#[derive(Clone, Debug)]
pub struct ProcRunConfig {
    pub setup: ProcSetup,
    pub bug_names: Vec<String>,
    pub suite: Arc<Suite>,
    /// The `--tests` selector and instances the suite came from (for workers).
    pub tests: String,
    pub instances: u32,
    pub seed: u64,
    pub workers: u16,
    pub clients_per_worker: u16,
    pub txs_per_client: u64,
    pub assert_chance: f64,
    pub check_history: bool,
    /// `kill -9` one worker in this run (which and when follows from the seed).
    pub kill: bool,
    /// After the final check, the replica check (logical failover of each
    /// memory node, then a real `kill -9` of one memory server).
    pub replica_check: bool,
    /// `kill -9` one memory server mid-run (which and when follows from the
    /// seed) and start its replacement: the workers hold, drain and switch
    /// primaries, and the final check runs once the replacement is admitted.
    pub kill_memory: bool,
    /// Test hook: before the replica check, overwrite one live key's value in
    /// its backup replica only, so the check must report diverging replicas.
    pub corrupt_one_backup: bool,
}

/// A child process killed (SIGKILL) and reaped when dropped.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The membership process's stderr, line by line as it comes.
type MembershipLog = Arc<Mutex<Vec<String>>>;

/// The membership process: its address and its stderr lines.
/// Its log recovery re-injects the recovery bugs among `bugs`.
fn spawn_membership(
    exe: &Path,
    memory: &[SocketAddr],
    secret: &MasterSecret,
    capacity: u64,
    timeouts_ms: (f64, f64),
    bugs: &[String],
) -> Result<(Kid, SocketAddr, MembershipLog), String> {
    let mut child = membership_command(exe, memory, capacity, timeouts_ms, bugs)
        .env("TANDEM_SECRET", secret.hex())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the membership process: {e}"))?;
    let (stdout, stderr) = (
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let kid = Kid(child);
    let lines = Arc::new(Mutex::new(Vec::new()));
    {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().expect("membership log").push(l);
            }
        });
    }
    let mut out = BufReader::new(stdout);
    let mut first = String::new();
    out.read_line(&mut first)
        .map_err(|e| format!("membership process: {e}"))?;
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| {
            format!(
                "the membership process did not announce its address (said '{}'; stderr: {:?})",
                first.trim(),
                lines.lock().expect("log")
            )
        })?;
    std::thread::spawn(move || for _ in out.lines() {});
    Ok((kid, addr, lines))
}

/// `tandem pandora membership` for a litmus cluster on the memory servers
/// `memory`, with the recovery bugs among `bugs`.
fn membership_command(
    exe: &Path,
    memory: &[SocketAddr],
    capacity: u64,
    (detect_ms, memory_ms): (f64, f64),
    bugs: &[String],
) -> Command {
    let mem = memory
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let recovery_bugs = bugs.iter().filter(|b| membership_bug(b));
    let mut command = Command::new(exe);
    command
        .args([
            "pandora",
            "membership",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            &mem,
            "--replicas",
            &REPLICAS.to_string(),
        ])
        .args([
            "--log-slots",
            &LOG_SLOTS.to_string(),
            "--litmus-keys",
            &capacity.to_string(),
            "--timeout-ms",
            &detect_ms.to_string(),
            "--memory-timeout-ms",
            &memory_ms.to_string(),
        ])
        .args(recovery_bugs.flat_map(|b| ["--inject-bug", b.as_str()]));
    command
}

/// The membership's memory-probe timeout: twice the heartbeat timeout
/// (50 ms at least); under network faults 2 s, because the faults slow the
/// membership's own links (`suspect`) and these runs replace no memory
/// server the membership would declare failed (only a killed one).
fn memory_timeout_ms(setup: &ProcSetup) -> f64 {
    match setup.net_faults {
        Some(_) => 2_000.0,
        None => (setup.detect_ms * 2.0).max(50.0),
    }
}

/// Whether the membership process carries out planted bug `b`: log
/// recovery's bugs, and publishing failed ids before recovery ends.
fn membership_bug(b: &str) -> bool {
    crate::campaign::RECOVERY_BUG_NAMES.contains(&b) || b == "publish-before-recovery"
}

/// Count the `invoke` lines appended to a journal since the last call.
struct InvokeCounter {
    path: PathBuf,
    offset: u64,
    invokes: u64,
}

impl InvokeCounter {
    fn poll(&mut self) -> u64 {
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            let mut buf = Vec::new();
            if f.seek(SeekFrom::Start(self.offset)).is_ok() && f.read_to_end(&mut buf).is_ok() {
                let whole = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                self.invokes += buf[..whole]
                    .split(|&b| b == b'\n')
                    .filter(|l| l.starts_with(b"{\"invoke\""))
                    .count() as u64;
                self.offset += whole as u64;
            }
        }
        self.invokes
    }
}

/// Run one seed. Harness failures (a process that will not start, a recovery
/// that never comes) are errors; what DART finds goes into the report.
pub fn run(cfg: &ProcRunConfig) -> Result<RunReport, String> {
    let sizes = Sizes::of(cfg)?;
    let mut cluster = Cluster::start(cfg, &sizes)?;
    cluster.load(&cfg.suite)?;
    let epoch_ns = wall_ns();
    let heartbeat_us = ((cfg.setup.detect_ms * 1e3) / 10.0).max(200.0) as u64;
    let (mut kids, journals) = cluster.spawn_workers(cfg, &sizes, epoch_ns, heartbeat_us)?;

    let mut report = RunReport::default();
    let net = cfg.setup.net_faults.as_ref().map(|plan| {
        let targets = net_faults::Targets {
            workers: kids.iter().map(|k| k.0.id()).collect(),
            membership: cluster.maddr,
            memory: cluster.servers.addrs.clone(),
        };
        net_faults::Running::start(plan, cfg.seed, targets)
    });
    let victim = cluster.inject_kills(cfg, &sizes, &mut kids, &journals, &mut report)?;
    let exits = wait_for_workers(&mut kids, victim, &cluster.dir)?;
    if let Some(net) = net {
        add_note(
            &mut report,
            &format!("network faults: {}", net.stop()?.join("; ")),
        );
    }
    let fenced = judge_exits(exits, &cluster.mlog, cfg, victim, &mut report)?;
    let failed_ids = fold_journals(&journals, victim, &fenced, &mut report)?;
    let check = FinalCheckPlan {
        sizes: &sizes,
        failed_ids: &failed_ids,
        epoch_ns,
        heartbeat_us,
    };
    let replica_notes = cluster.final_check(cfg, check, &mut report)?;
    if cfg.check_history {
        report.check_history(&cfg.suite);
    }
    note_membership(&cluster.mlog, victim, &cfg.bug_names, &mut report);
    if let Some(notes) = replica_notes {
        if victim.is_none() {
            add_note(&mut report, "no worker killed");
        }
        notes.iter().for_each(|n| add_note(&mut report, n));
    }
    if let Some(note) = &report.crash_note {
        eprintln!("litmus seed {}: {note}", cfg.seed);
    }
    Ok(cluster.shut_down(report))
}

/// The sizes of one run, within the coordinator-id space and the
/// insert/delete pair numbers.
struct Sizes {
    workers: u16,
    /// DART clients over every worker.
    clients: u32,
    /// Each worker numbers its fresh insert/delete pairs in a range of its own.
    pairs_per_worker: u32,
    /// Keys of the litmus table.
    capacity: u64,
}

impl Sizes {
    fn of(cfg: &ProcRunConfig) -> Result<Sizes, String> {
        let workers = cfg.workers.max(1);
        let clients = workers as u32 * cfg.clients_per_worker as u32;
        // Ids: every worker's coordinators, the final checker's, the membership's own.
        if clients + 3 >= LOG_SLOTS {
            return Err(format!("at most {} clients over processes", LOG_SLOTS - 4));
        }
        let pairs_per_worker = cfg.txs_per_client * cfg.clients_per_worker as u64;
        if pairs_per_worker * workers as u64 > MAX_PAIRS as u64 {
            return Err(format!(
                "at most {MAX_PAIRS} transactions over all workers (insert/delete pair numbers)"
            ));
        }
        let capacity = cfg
            .suite
            .key_count(cfg.txs_per_client * clients as u64)
            .max(1);
        Ok(Sizes {
            workers,
            clients,
            pairs_per_worker: pairs_per_worker as u32,
            capacity,
        })
    }
}

/// What a run starts before its workers: the memory servers, the
/// membership process, the journals' directory and this process's runtime.
/// Its fields drop in order: the runtime, then the membership process, then
/// the memory servers.
struct Cluster {
    local: tokio::task::LocalSet,
    rt: tokio::runtime::Runtime,
    /// The workers' journals and stderr.
    dir: PathBuf,
    membership: Kid,
    maddr: SocketAddr,
    mlog: MembershipLog,
    memory: TcpCluster,
    servers: MemoryServers,
    secret: MasterSecret,
    store: StoreConfig,
    layout: Arc<Layout>,
    region: u64,
}

impl Cluster {
    fn start(cfg: &ProcRunConfig, sizes: &Sizes) -> Result<Cluster, String> {
        let bugs = crate::campaign::parse_bugs(&cfg.bug_names)?.store;
        let capacity = sizes.capacity;
        let mut store = litmus_store(Mode::Pandora, MEMORY_NODES, REPLICAS, LOG_SLOTS, capacity);
        store.bugs = bugs;
        let layout = Arc::new(Layout::new(&store)?);
        let region = *layout.region_bytes.iter().max().expect("memory nodes");
        let secret = MasterSecret::generate();
        // This process joins the membership too (the final check).
        tandem_cluster::procs::set_credentials(secret.keyring())?;
        let (exe, nodes, shm) = (&cfg.setup.exe, MEMORY_NODES as usize, cfg.setup.shm);
        let servers = MemoryServers::spawn_on(exe, nodes, region, secret.clone(), shm)
            .map_err(|e| format!("cannot start memory servers: {e}"))?;
        let memory = servers.cluster();
        let (membership, maddr, mlog) = spawn_membership(
            &cfg.setup.exe,
            &servers.addrs,
            &secret,
            capacity,
            (cfg.setup.detect_ms, memory_timeout_ms(&cfg.setup)),
            &cfg.bug_names,
        )?;
        let dir =
            std::env::temp_dir().join(format!("tandem-litmus-{}-{}", std::process::id(), cfg.seed));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let local = tokio::task::LocalSet::new();
        Ok(Cluster {
            local,
            rt,
            dir,
            membership,
            maddr,
            mlog,
            memory,
            servers,
            secret,
            store,
            layout,
            region,
        })
    }

    /// Load the initial values of every litmus instance.
    fn load(&self, suite: &Suite) -> Result<(), String> {
        let (memory, layout) = (&self.memory, &self.layout);
        self.local.block_on(&self.rt, async {
            let keys = memory
                .register(u16::MAX - 1)
                .await
                .map_err(|e| format!("register the loader: {e}"))?;
            let fab = memory
                .connect(u16::MAX - 1, &keys)
                .await
                .map_err(|e| format!("connect the loader: {e}"))?;
            let mut loader = Loader::new(&fab, layout.clone());
            for t in &suite.tests {
                for (k, v) in t.initial() {
                    loader
                        .put(LITMUS_TABLE, k, &v.encode())
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            loader.finish().await.map_err(|e| e.to_string()).map(|_| ())
        })
    }

    /// Start one `tandem litmus-worker` process per worker; the processes
    /// and their journals.
    fn spawn_workers(
        &self,
        cfg: &ProcRunConfig,
        sizes: &Sizes,
        epoch_ns: u64,
        heartbeat_us: u64,
    ) -> Result<(Vec<Kid>, Vec<PathBuf>), String> {
        let mut kids = Vec::new();
        let mut journals = Vec::new();
        for w in 0..sizes.workers {
            let journal = self.dir.join(format!("worker-{}.jsonl", w + 1));
            let wc = WorkerConfig {
                membership: vec![self.maddr],
                memory: self.servers.addrs.clone(),
                node: w + 1,
                clients: cfg.clients_per_worker,
                client_base: w as u32 * cfg.clients_per_worker as u32,
                pair_base: w as u32 * sizes.pairs_per_worker,
                txs: cfg.txs_per_client,
                seed: cfg.seed,
                tests: cfg.tests.clone(),
                instances: cfg.instances,
                bugs: cfg.bug_names.clone(),
                capacity: sizes.capacity,
                assert_chance: cfg.assert_chance,
                epoch_ns,
                heartbeat_us,
                journal: journal.clone(),
                shm: cfg.setup.shm,
            };
            kids.push(self.spawn_worker(cfg, w, &wc)?);
            journals.push(journal);
        }
        Ok((kids, journals))
    }

    /// Start worker `w` (0-based) with `wc`, its stderr in the run's directory.
    fn spawn_worker(&self, cfg: &ProcRunConfig, w: u16, wc: &WorkerConfig) -> Result<Kid, String> {
        let err = std::fs::File::create(self.dir.join(format!("worker-{}.err", w + 1)))
            .map_err(|e| e.to_string())?;
        let mut command = Command::new(&cfg.setup.exe);
        if cfg.setup.net_faults.is_some() {
            let from = net_faults::worker_ip(w).to_string();
            command.env(tandem_fabric::auth::dial::DIAL_FROM_ENV, from);
        }
        let child = command
            .args([
                "litmus-worker",
                "--config",
                &serde_json::to_string(wc).map_err(|e| e.to_string())?,
            ])
            .env("TANDEM_SECRET", self.secret.hex())
            .stdout(Stdio::null())
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("cannot start litmus worker {}: {e}", w + 1))?;
        Ok(Kid(child))
    }

    /// Carry out the seed's kills and wait until the membership has dealt
    /// with them, noting each in `report`; the worker killed (node, after
    /// how many invocations).
    fn inject_kills(
        &mut self,
        cfg: &ProcRunConfig,
        sizes: &Sizes,
        kids: &mut [Kid],
        journals: &[PathBuf],
        report: &mut RunReport,
    ) -> Result<Option<(u16, u64)>, String> {
        let kills = Kills::plan(cfg, sizes.workers);
        let (victim, memory_victim) = kills.inject(
            kids,
            journals,
            &mut self.servers,
            (&cfg.setup.exe, self.region, self.maddr),
        )?;
        if let Some(m) = memory_victim {
            add_note(report, &format!("kill -9 of memory server {m} mid-run"));
            wait_for_membership(&self.mlog, "every memory node up", Duration::from_secs(60))?;
            add_note(report, "its replacement was filled and admitted");
        }
        if let Some((node, at)) = victim {
            // The survivors' PILL needs the failed ids; the final check needs the logs recovered.
            let note = if await_recovery(&self.mlog, node)? {
                report.crashes = 1;
                format!("kill -9 of worker {node} after {at} invocations")
            } else {
                format!("worker {node} left the membership before its kill -9 landed")
            };
            add_note(report, &note);
        }
        Ok(victim)
    }

    /// The final check: a fresh compute node that knows the failed ids,
    /// then the replica check (if configured). Its history and violations
    /// go into `report`; the replica check's notes.
    fn final_check(
        &mut self,
        cfg: &ProcRunConfig,
        plan: FinalCheckPlan,
        report: &mut RunReport,
    ) -> Result<Option<Vec<String>>, String> {
        let board = Board::default();
        note_pairs(&cfg.suite, &board, &report.history);
        let node = plan.sizes.workers + 1;
        let session = MembershipSession::join(
            &[self.maddr],
            node,
            1,
            Duration::from_micros(plan.heartbeat_us),
        )?;
        let failed: FailedIds = session.failed.clone();
        for &id in plan.failed_ids {
            failed.insert(id);
        }
        let memory = self.servers.cluster();
        let check = FinalCheck {
            cfg,
            memory: &memory,
            store: &self.store,
            layout: self.layout.clone(),
            failed,
            node,
            coordinator: session.ids[0],
            client: plan.sizes.clients,
            board,
            epoch_ns: plan.epoch_ns,
        };
        let (log, replicas) = self
            .local
            .block_on(&self.rt, check.run(&mut self.servers))?;
        session.leave();
        report.absorb(&[log]);
        Ok(replicas.map(|o| {
            report.violations.extend(
                o.violations
                    .into_iter()
                    .map(|v| ("replica-check".to_string(), v)),
            );
            o.notes
        }))
    }

    /// Stop the membership process and the memory servers; keep the
    /// journals and the membership's log only if the run found a violation
    /// (and say where).
    fn shut_down(self, mut report: RunReport) -> RunReport {
        let Cluster {
            mut membership,
            servers,
            dir,
            mlog,
            ..
        } = self;
        let _ = membership.0.kill();
        drop(servers);
        if report.violations.is_empty() {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            let log = mlog.lock().expect("log").join("\n");
            let _ = std::fs::write(dir.join("membership.log"), log + "\n");
            let note = format!(
                "{}; journals in {}",
                report.crash_note.take().unwrap_or_else(|| "no kill".into()),
                dir.display()
            );
            for v in &mut report.violations {
                v.1 += &format!(" [{note}]");
            }
            report.crash_note = Some(note);
        }
        report
    }
}

/// What the final check needs from the run so far.
struct FinalCheckPlan<'a> {
    sizes: &'a Sizes,
    /// The killed worker's coordinator ids.
    failed_ids: &'a [u16],
    epoch_ns: u64,
    heartbeat_us: u64,
}

/// A worker that exited with an error: its node and what it said.
type Exit = (u16, String);

/// Wait (120 s at most) for every worker but the killed one to exit; those
/// that failed, with their stderr.
fn wait_for_workers(
    kids: &mut [Kid],
    victim: Option<(u16, u64)>,
    dir: &Path,
) -> Result<Vec<Exit>, String> {
    let mut failed = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(120);
    for (w, k) in kids.iter_mut().enumerate() {
        if victim.is_some_and(|(n, _)| n as usize == w + 1) {
            continue;
        }
        let status = loop {
            if let Some(s) = k.0.try_wait().map_err(|e| e.to_string())? {
                break s;
            }
            if Instant::now() > give_up {
                return Err(format!("litmus worker {} did not finish in 120 s", w + 1));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if !status.success() {
            let err = std::fs::read_to_string(dir.join(format!("worker-{}.err", w + 1)))
                .unwrap_or_default();
            failed.push((
                w as u16 + 1,
                format!("exited with {status}: {}", err.trim()),
            ));
        }
    }
    Ok(failed)
}

/// Under network faults, the workers the membership declared failed
/// (fenced while alive: their journals' ids are failed ids, and their exit
/// with an error is expected); without, none. Any other worker that exited
/// with an error is a harness violation.
fn judge_exits(
    exits: Vec<Exit>,
    mlog: &MembershipLog,
    cfg: &ProcRunConfig,
    victim: Option<(u16, u64)>,
    report: &mut RunReport,
) -> Result<Vec<u16>, String> {
    let mut fenced = Vec::new();
    if cfg.setup.net_faults.is_some() {
        for node in 1..=cfg.workers.max(1) {
            if victim.is_none_or(|(v, _)| v != node) && await_fencing(mlog, node)? {
                fenced.push(node);
            }
        }
        if !fenced.is_empty() {
            add_note(
                report,
                &format!("workers {fenced:?} declared failed while alive"),
            );
        }
    }
    for (node, what) in exits.into_iter().filter(|(n, _)| !fenced.contains(n)) {
        report
            .violations
            .push(("harness".into(), format!("litmus worker {node} {what}")));
    }
    Ok(fenced)
}

/// Fold the workers' journals into `report`; the coordinator ids of the
/// killed worker and of the `fenced` ones.
fn fold_journals(
    journals: &[PathBuf],
    victim: Option<(u16, u64)>,
    fenced: &[u16],
    report: &mut RunReport,
) -> Result<Vec<u16>, String> {
    let mut failed_ids = Vec::new();
    for (w, path) in journals.iter().enumerate() {
        let c = journal::read(path)?;
        let node = w as u16 + 1;
        if victim.is_some_and(|(n, _)| n == node) || fenced.contains(&node) {
            failed_ids.extend(c.ids.iter().copied());
        }
        for r in &c.records {
            match r.outcome {
                Outcome::Committed => report.committed += 1,
                Outcome::Aborted => report.aborted += 1,
                Outcome::Unknown => report.unknown += 1,
            }
        }
        report.asserts_checked += c.asserts_checked;
        report.violations.extend(c.violations);
        report.history.extend(c.records);
    }
    Ok(failed_ids)
}

/// Note what the membership's log says: the victim's recovery, recoveries
/// of suspected survivors, and whether the recovery bugs were injected.
fn note_membership(
    mlog: &MembershipLog,
    victim: Option<(u16, u64)>,
    bug_names: &[String],
    report: &mut RunReport,
) {
    if let Some((node, _)) = victim {
        let needle = format!("membership: recovered node {node} ");
        if let Some(l) = mlog
            .lock()
            .expect("log")
            .iter()
            .find(|l| l.starts_with(&needle))
        {
            add_note(report, l.trim_start_matches("membership: "));
        }
    }
    // Recoveries the membership ran (a falsely suspected survivor counts too).
    let recoveries = mlog
        .lock()
        .expect("log")
        .iter()
        .filter(|l| l.contains("published"))
        .count();
    if recoveries as u32 > report.crashes {
        add_note(
            report,
            &format!("{recoveries} recoveries (a survivor was suspected too)"),
        );
    }
    if let Err(e) = recovery_bugs_taken(bug_names, mlog) {
        report.violations.push(("harness".into(), e));
    }
}

/// Wait until a line of the membership's log contains `needle`.
fn wait_for_membership(mlog: &MembershipLog, needle: &str, within: Duration) -> Result<(), String> {
    let give_up = Instant::now() + within;
    while !mlog.lock().expect("log").iter().any(|l| l.contains(needle)) {
        if Instant::now() > give_up {
            return Err(format!(
                "the membership service never said '{needle}': {:?}",
                mlog.lock().expect("log")
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Whether the membership declared worker `node` failed (it may have left
/// since, and its revocation may still be under way); if so, wait (20 s at
/// most) until its logs are recovered and its failed ids published.
fn await_fencing(mlog: &MembershipLog, node: u16) -> Result<bool, String> {
    let declared = format!("compute node {node} missed its heartbeats");
    if !mlog
        .lock()
        .expect("log")
        .iter()
        .any(|l| l.contains(&declared))
    {
        return Ok(false);
    }
    let published = format!("failed ids of node {node} published");
    wait_for_membership(mlog, &published, Duration::from_secs(20)).map(|_| true)
}

/// Wait (20 s at most) until the membership has recovered the killed
/// `node` and published its failed ids: `Ok(true)`. `Ok(false)`: the worker
/// had left the membership on its own, its transactions all ended, before
/// the kill landed (a starved harness may kill it that late), so there is
/// nothing to recover.
fn await_recovery(mlog: &MembershipLog, node: u16) -> Result<bool, String> {
    let (needle, left) = (
        format!("failed ids of node {node} published"),
        format!("compute node {node} left"),
    );
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        {
            let log = mlog.lock().expect("log");
            if log.iter().any(|l| l.contains(&needle)) {
                return Ok(true);
            }
            if log.iter().any(|l| l.contains(&left)) {
                return Ok(false);
            }
            if Instant::now() > give_up {
                return Err(format!(
                    "the membership service never published the recovery of node {node}: {:?}",
                    *log
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The kills of one run: a worker (`kill`) and a memory server
/// (`kill_memory`), each after a seeded number of invocations in the
/// journal of the worker watched (the victim, else worker 1).
struct Kills {
    watched: u16,
    worker: Option<u64>,
    memory: Option<(u16, u64)>,
}

impl Kills {
    fn plan(cfg: &ProcRunConfig, workers: u16) -> Kills {
        let mut rng = Rng::new(cfg.seed ^ 0xC7A5_0009);
        let v = rng.below(workers as u64) as u16;
        let total = cfg.clients_per_worker as u64 * cfg.txs_per_client;
        let target = rng.range_inclusive(1, (total * 3 / 4).max(1));
        let mut mrng = Rng::new(cfg.seed ^ 0x3E3_0015);
        let memory = cfg.kill_memory.then(|| {
            let m = mrng.below(MEMORY_NODES as u64) as u16;
            (m, mrng.range_inclusive(1, (total / 2).max(1)))
        });
        Kills {
            watched: if cfg.kill { v } else { 0 },
            worker: cfg.kill.then_some(target),
            memory,
        }
    }

    /// Carry the kills out as the watched worker's journal grows; a memory
    /// server killed is replaced at once (the replacement waits until the
    /// membership has declared it failed). The worker killed (node, after how
    /// many invocations) and the memory server killed.
    fn inject(
        mut self,
        kids: &mut [Kid],
        journals: &[PathBuf],
        servers: &mut MemoryServers,
        (exe, region, maddr): (&Path, u64, SocketAddr),
    ) -> Result<(Option<(u16, u64)>, Option<u16>), String> {
        let v = self.watched as usize;
        let mut counter = InvokeCounter {
            path: journals[v].clone(),
            offset: 0,
            invokes: 0,
        };
        let (mut victim, mut memory_victim) = (None, None);
        let give_up = Instant::now() + Duration::from_secs(60);
        while self.worker.is_some() || self.memory.is_some() {
            let n = counter.poll();
            if let Some((m, _)) = self.memory.filter(|&(_, t)| n >= t) {
                servers
                    .kill(m as usize)
                    .map_err(|e| format!("kill -9 of memory server {m}: {e}"))?;
                servers
                    .replace(exe, m as usize, region, maddr)
                    .map_err(|e| {
                        format!("cannot start a replacement for memory server {m}: {e}")
                    })?;
                (memory_victim, self.memory) = (Some(m), None);
            }
            if self.worker.is_some_and(|t| n >= t) {
                // A worker that already ended (this thread may have been
                // starved past its last invocation) is not killed: a kill
                // of its zombie would count a crash that never happened.
                let ended = kids[v].0.try_wait().map_err(|e| e.to_string())?.is_some();
                if !ended {
                    kids[v]
                        .0
                        .kill()
                        .map_err(|e| format!("kill -9 of worker {}: {e}", v + 1))?;
                    let _ = kids[v].0.wait();
                    victim = Some((v as u16 + 1, counter.poll()));
                }
                self.worker = None;
            }
            let gone =
                victim.is_some() || kids[v].0.try_wait().map_err(|e| e.to_string())?.is_some();
            if Instant::now() > give_up {
                break;
            }
            if gone {
                self.worker = None; // It finished first: no worker kill.
                                    // Its journal grows no more: the memory server dies now.
                self.memory = self.memory.map(|(m, _)| (m, 0));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok((victim, memory_victim))
    }
}

/// The final check: a fresh compute node that knows the failed ids.
struct FinalCheck<'a> {
    cfg: &'a ProcRunConfig,
    memory: &'a TcpCluster,
    store: &'a StoreConfig,
    layout: Arc<Layout>,
    failed: FailedIds,
    /// Its compute-node id, coordinator id and DART client id.
    node: u16,
    coordinator: u16,
    client: u32,
    board: Board,
    epoch_ns: u64,
}

impl FinalCheck<'_> {
    /// Assert every instance, then run the replica check (if configured),
    /// which kills one of `servers`.
    async fn run(
        &self,
        servers: &mut MemoryServers,
    ) -> Result<(SharedLog, Option<proc_replicas::Outcome>), String> {
        let keys = self
            .memory
            .register(self.node)
            .await
            .map_err(|e| format!("register the checker: {e}"))?;
        let fab = self
            .memory
            .connect(self.node, &keys)
            .await
            .map_err(|e| format!("connect the checker: {e}"))?;
        let view = MemoryView::default();
        let node = ComputeNode::with_memory_view(
            fab.clone(),
            self.store,
            self.layout.clone(),
            self.failed.clone(),
            view.clone(),
        );
        let mut s = TandemStore::new(node.coordinator(self.coordinator));
        let epoch_ns = self.epoch_ns;
        let clock: Rc<dyn Fn() -> u64> = Rc::new(move || wall_ns().saturating_sub(epoch_ns));
        let spec = ClientSpec {
            id: self.client,
            seed: self.cfg.seed,
            assert_chance: 1.0,
            record: self.cfg.check_history,
        };
        let mut client = Client::new(spec, self.cfg.suite.clone(), self.board.clone(), clock);
        let log = client.log();
        if let Err(e) = client.final_check(&mut s, 20).await {
            log.borrow_mut().violations.push(("final-check".into(), e));
        }
        s.settle();
        tokio::time::sleep(Duration::from_millis(10)).await;
        if !self.cfg.replica_check {
            return Ok((log, None));
        }
        let check = proc_replicas::ReplicaCheck {
            suite: &self.cfg.suite,
            layout: &self.layout,
            keys: replica_check::keys_now(&self.cfg.suite, &self.board),
            view,
            fabric: fab,
            victim: proc_replicas::victim(&self.layout, self.cfg.seed),
            corrupt_one_backup: self.cfg.corrupt_one_backup,
        };
        let outcome = check.run(&mut s, servers).await?;
        s.settle();
        Ok((log, Some(outcome)))
    }
}

/// The membership process said its log recovery re-injects the recovery
/// bugs among `bugs` (an injection that did not take would pass silently).
fn recovery_bugs_taken(bugs: &[String], mlog: &MembershipLog) -> Result<(), String> {
    let wanted: Vec<&str> = bugs
        .iter()
        .map(String::as_str)
        .filter(|b| membership_bug(b))
        .collect();
    let said = mlog.lock().expect("log").iter().find_map(|l| {
        l.strip_prefix("membership: log recovery re-injects ")
            .map(str::to_string)
    });
    match said {
        _ if wanted.is_empty() => Ok(()),
        Some(s) if wanted.iter().all(|b| s.split(", ").any(|x| x == *b)) => Ok(()),
        _ => Err(format!(
            "the membership process never confirmed injecting {}",
            wanted.join(", ")
        )),
    }
}

/// Append `note` to the run's crash note.
fn add_note(report: &mut RunReport, note: &str) {
    report.crash_note = Some(match report.crash_note.take() {
        Some(n) if !n.is_empty() => format!("{n}; {note}"),
        _ => note.to_string(),
    });
}

/// Make the insert/delete pairs the workers used known to the final check's board.
fn note_pairs(suite: &Suite, board: &Board, history: &[TxRecord]) {
    for r in history {
        for op in &r.ops {
            let Some(t) = Litmus::index_of_key(op.key) else {
                continue;
            };
            if suite
                .tests
                .get(t as usize)
                .is_some_and(|x| x.pattern == Pattern::InsertDelete)
            {
                board.note_pairs(t, Litmus::instance_of_key(op.key) + 1);
            }
        }
    }
}
