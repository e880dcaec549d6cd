//! `tandem`: the command-line front end. Thin by design: every command parses
//! its flags and calls into the library crates. Papers are cited by short name
//! and section (Pandora §N, DDP §N, HEAL §N, Kite §N, thesis ch. N); README.md
//! lists them.

mod args;
mod bench_cmd;
mod check_cmd;
mod compare_cmd;
mod ddp_cmd;
mod ddp_demo;
mod ddp_tcp_cmd;
mod demo;
mod experiment_cmd;
mod experiments;
mod heal_cmd;
mod heal_demo;
mod heal_tcp;
mod keys_cmd;
mod kite_cmd;
mod kite_demo;
mod litmus_cmd;
mod litmus_worker_cmd;
mod lrp_cmd;
mod memory_server;
mod nemesis_cmd;
mod net_cmd;
mod node_cmd;
mod procs_cmd;
mod resp_bench;
mod serve_cmd;
mod soak_cmd;
mod table_soak_cmd;
mod zk_store;

use clap::{Parser, Subcommand};

// The hot path allocates small buffers per verb; mimalloc handles that far
// better than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "Tandem: fault-tolerant replicated key-value stores on disaggregated and persistent memory, and the tools that check their recovery"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch a system at work on this machine, with its faults: pandora (default), ddp, heal or kite.
    Demo(demo::DemoArgs),
    /// Pandora: transactions on disaggregated memory that recover from a compute crash in milliseconds.
    #[command(subcommand)]
    Pandora(PandoraCommand),
    /// DART: litmus tests with crash injection, checked for atomicity and isolation, against any store.
    Dart(litmus_cmd::LitmusArgs),
    /// DDP: leaderless replication under 25 consistency x persistency models.
    Ddp(ddp_cmd::DdpArgs),
    /// HEAL: recover a crashed replica while the others keep serving.
    Heal(heal_cmd::HealArgs),
    /// Kite: release consistency over a leaderless replicated store, beside ZAB.
    Kite(kite_cmd::KiteArgs),
    /// LRP: release persistency for log-free data structures, crash-checked and costed.
    Lrp(lrp_cmd::LrpArgs),
    /// Run a paper experiment of any system (or all): JSON, figure, and its section of docs/RESULTS.md.
    Experiment(experiment_cmd::ExperimentArgs),
    /// Run a system beside the stores users pick instead: PostgreSQL, Redis, etcd, ZooKeeper.
    Compare(compare_cmd::CompareArgs),
    /// Real processes under real faults (partitions, loss, blackholes, SIGSTOP, kill -9) in a network
    /// namespace of its own, then checked: safety by the model's checker, liveness after the heal. Root.
    Nemesis(nemesis_cmd::NemesisArgs),
    /// Credentials: make a master secret, split it into one keyring per kind of process.
    Keys(keys_cmd::KeysArgs),
    /// One replica of a message-passing store (DDP, HEAL, Kite or ZAB) as a process: TCP to its peers, NVM in a file.
    Node(node_cmd::NodeArgs),
    /// A store behind Redis's protocol on a local port, for redis-cli and Redis client libraries.
    Serve(serve_cmd::ServeArgs),
    /// A Redis benchmark client for what redis-benchmark cannot send: MULTI/EXEC blocks, SET then WAIT.
    RespBench(resp_bench::RespBenchArgs),
    /// Check a history a client recorded (JSON lines): strictly serializable, or linearizable.
    Check(check_cmd::CheckArgs),
    /// The message-passing runtime's own ceiling: two processes echoing messages.
    Net(net_cmd::NetArgs),
    /// One compute-server process of `tandem dart --fabric tcp --crash-rate R` (internal).
    #[command(hide = true)]
    LitmusWorker(litmus_worker_cmd::LitmusWorkerArgs),
}

/// Pandora's commands: its processes, benchmarks, recovery and simulations.
#[derive(Subcommand)]
enum PandoraCommand {
    /// Run a memory server: a passive region served over TCP (and shm).
    MemoryServer(memory_server::MemoryServerArgs),
    /// Run the membership service: coordinator ids, failure detection, recovery, failed-ids.
    Membership(procs_cmd::MembershipArgs),
    /// Run a compute server (micro workload) against memory servers and a membership service.
    ComputeServer(procs_cmd::ComputeServerArgs),
    /// After a multi-process run: release the crashed servers' stray locks and check the store.
    CheckCluster(procs_cmd::CheckClusterArgs),
    /// Benchmark pandora, ford and traditional logging on a workload, alternating them in rounds.
    Bench(bench_cmd::BenchArgs),
    /// Crash one compute node mid-run and measure detection, link termination and log recovery.
    Recovery(bench_cmd::RecoveryArgs),
    /// Plant what a compute crash leaves and time log recovery alone, many times (wall and CPU).
    RecoveryBench(bench_cmd::RecoveryBenchArgs),
    /// Measure the verbs/s ceiling of a fabric (--fabric echo: the same frames echoed over loopback).
    FabricBench(bench_cmd::FabricBenchArgs),
    /// Replay seeded simulations (the bank, or --workload smallbank|tatp|tpcc) with faults and check every invariant.
    Sim(bench_cmd::SimBankArgs),
    /// Seeded simulations of false suspicion (slow nodes, verdicts before registration, crossing messages, crashes).
    SimSuspicion(soak_cmd::SimSuspicionArgs),
    /// Run the demo scenario many times with random false suspicions, crashes and a competing load.
    Soak(soak_cmd::SoakArgs),
    /// Run an insert/delete workload long and report table occupancy and memory over time.
    TableSoak(table_soak_cmd::TableSoakArgs),
}

/// Turn transparent huge pages off for this process (unless
/// `TANDEM_HUGE_PAGES=1`). mimalloc advises its arenas for huge pages, and
/// with `defrag=madvise` (the kernel default, and this machine's) the first
/// touch of each 2 MiB region stalls on zeroing (and compacting) a whole
/// huge page, inside whatever first needs the memory:
/// - a restarted DDP node applying its Buddy's answer (`tandem heal recover
///   --net tcp --records 10000 --downtime-s 4`): 7–37 ms with huge pages,
///   1.5 ms without;
/// - a recovery coordinator's first round at 512 coordinators, whose 1 MiB
///   of answers a memory server's idle priority poller and the recovery
///   thread allocate for the first time (`tandem pandora recovery --fabric tcp
///   --coordinators 512`): 10–25 ms of `clear_page_erms` in one run in two.
///
/// The memory servers' regions are never advised, so this changes only the heap.
fn no_huge_pages() {
    if std::env::var("TANDEM_HUGE_PAGES").is_ok_and(|v| v == "1") {
        return;
    }
    // SAFETY: prctl with integer arguments only; it sets a flag on this
    // process's memory map, checked at every later page fault. Children
    // (memory servers started by a harness) inherit it.
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if r != 0 {
        eprintln!(
            "warning: cannot turn transparent huge pages off: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn pandora(c: PandoraCommand) -> Result<(), String> {
    match c {
        PandoraCommand::MemoryServer(a) => memory_server::run(a),
        PandoraCommand::Membership(a) => procs_cmd::membership(a),
        PandoraCommand::ComputeServer(a) => procs_cmd::compute_server(a),
        PandoraCommand::CheckCluster(a) => procs_cmd::check_cluster(a),
        PandoraCommand::Bench(a) => bench_cmd::bench(a),
        PandoraCommand::Recovery(a) => bench_cmd::recovery(a),
        PandoraCommand::RecoveryBench(a) => bench_cmd::recovery_bench(a),
        PandoraCommand::FabricBench(a) => bench_cmd::fabric_bench(a),
        PandoraCommand::Sim(a) => bench_cmd::sim_bank(a),
        PandoraCommand::SimSuspicion(a) => soak_cmd::sim_suspicion(a),
        PandoraCommand::Soak(a) => soak_cmd::soak(a),
        PandoraCommand::TableSoak(a) => table_soak_cmd::run(a),
    }
}

fn main() {
    no_huge_pages();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Pandora(c) => pandora(c),
        Command::Dart(a) => litmus_cmd::run(a),
        Command::Ddp(a) => ddp_cmd::run(a),
        Command::Heal(a) => heal_cmd::run(a),
        Command::Kite(a) => kite_cmd::run(a),
        Command::Lrp(a) => lrp_cmd::run(a),
        Command::Experiment(a) => experiment_cmd::run(a),
        Command::Compare(a) => compare_cmd::run(a),
        Command::Nemesis(a) => nemesis_cmd::run(a),
        Command::Keys(a) => keys_cmd::run(a),
        Command::Node(a) => node_cmd::node(a),
        Command::Serve(a) => serve_cmd::run(a),
        Command::Check(a) => check_cmd::run(a),
        Command::RespBench(a) => resp_bench::run(a),
        Command::Net(a) => net_cmd::run(a),
        Command::LitmusWorker(a) => litmus_worker_cmd::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
