//! `tandem ddp bench --net tcp`: the models over five real node processes,
//! beside the runtime's ceiling like for like (`tandem_ddp_lab::echo`) and
//! its cost line (`tandem net echo --sweep`) from the same run.

use std::time::Duration;

use tandem_ddp::Model;
use tandem_ddp_lab::tcp::{run_tcp_models, TcpBenchConfig, TcpRun, ECHO_NAME};
use tandem_ycsb::Ycsb;

use crate::args::write_json;
use crate::ddp_cmd::BenchArgs;

/// Windows of the echoes the runtime's cost line is fitted over (five
/// processes, as the cluster has).
const ECHO_NODES: u16 = 5;
const ECHO_SWEEP: [u64; 3] = [5, 20, 80];

pub fn bench_tcp(a: &BenchArgs) -> Result<(), String> {
    if a.app_ns != 0 || a.persist_lines != 1 {
        return Err("--app-ns and --persist-lines model the paper's machine: use them with --net sim".into());
    }
    if !(a.seconds.is_finite() && a.seconds > 0.0) {
        return Err("--seconds must be a positive number".into());
    }
    let mut models: Vec<Model> = Model::parse_list(&a.models)?;
    if !models.contains(&Model::LIN_SYNCH) {
        models.insert(0, Model::LIN_SYNCH);
    }
    let cfg = TcpBenchConfig {
        workload: match (a.uniform, a.theta) {
            (false, Some(t)) => Ycsb::skewed(&a.workload, a.records, Some(t))?,
            (true, Some(_)) => return Err("--uniform and --theta: choose one".into()),
            _ => Ycsb::new(&a.workload, a.records, a.uniform)?,
        },
        clients_per_node: a.clients.max(1),
        warmup: Duration::from_secs(1),
        measure: Duration::from_secs_f64(a.seconds),
        rounds: a.rounds.max(1),
        fsync: a.fsync,
        exe: std::env::current_exe().map_err(|e| format!("cannot find the tandem binary: {e}"))?,
        dir: std::env::temp_dir().join(format!("tandem-ddp-tcp-{}", std::process::id())),
        seed: 1,
    };
    println!("{} over 5 `tandem node` processes on loopback, {} sessions each, {} records{}{}, {} round(s) of {:.1} s per model", a.workload, cfg.clients_per_node, a.records, if a.uniform { " uniform" } else { " zipfian" }, if a.fsync { ", --fsync" } else { "" }, cfg.rounds, a.seconds);
    let model = crate::net_cmd::echo_model(ECHO_NODES, &ECHO_SWEEP, a.seconds.min(2.0))?;
    println!("runtime cost (echo among {ECHO_NODES} processes at windows {ECHO_SWEEP:?}): {:.0} ns per message + {:.0} ns per syscall", model.per_message_ns, model.per_syscall_ns);
    let run = run_tcp_models(&cfg, &models, |m, r, ops| {
        eprintln!("  round {}: {m}: {ops:.0} ops/s", r + 1)
    })?;
    let _ = std::fs::remove_dir_all(&cfg.dir);
    print_table(&run, &model);
    if let Some(p) = &a.json {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        write_json(
            p,
            &serde_json::json!({ "system": "ddp", "workload": a.workload, "net": "tcp", "records": a.records, "uniform": a.uniform, "fsync": a.fsync, "clients_per_node": cfg.clients_per_node, "seconds": a.seconds, "rounds": cfg.rounds, "cores": cores, "runtime_model": model, "echo": run.echo, "models": run.models }),
        )?;
    }
    Ok(())
}

fn print_table(run: &TcpRun, model: &crate::net_cmd::EchoModel) {
    println!(
        "{:<16} {:>10} {:>8} {:>8} {:>8} {:>12} {:>8} {:>10} {:>10} {:>11} {:>8} {:>8} {:>10}",
        "model",
        "ops/s",
        "vs l-s",
        "of echo",
        "msg/op",
        "msgs/s",
        "of echo",
        "msg/write",
        "cpu us/op",
        "cpu ns/msg",
        "vs echo",
        "sys/msg",
        "vs runtime"
    );
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.1}%", 100.0 * x));
    for r in run.models.iter().chain([&run.echo]) {
        println!(
            "{:<16} {:>10.0} {:>8.2} {:>8} {:>8.2} {:>12.0} {:>8} {:>10.1} {:>10.1} {:>11.0} {:>8} {:>8.2} {:>9.2}x",
            r.model,
            r.throughput_ops,
            r.normalized.unwrap_or(f64::NAN),
            pct(r.of_echo_ops),
            r.messages_per_op,
            r.messages_per_s,
            pct(r.of_echo_messages),
            r.messages_per_write,
            r.node_cpu_us_per_op,
            r.node_cpu_ns_per_message,
            r.cpu_per_message_vs_echo.map_or("-".into(), |x| format!("{x:.2}x")),
            r.node_syscalls_per_message,
            r.node_cpu_ns_per_message / model.cpu_ns_at(r.node_syscalls_per_message)
        );
    }
    println!(
        "({ECHO_NAME}: the same sessions against five nodes that carry ⟨Lin, Synch⟩'s messages \
         (INV, ACK, VAL per write; a request for a key the node is writing waits for its last \
         ACK, any other read is answered at once) and do nothing else, in the same \
         rounds; of echo: ops/s and peer messages/s over its; msgs/s: protocol messages between \
         nodes, client requests and replies not counted; cpu ns/msg: the nodes' CPU per peer \
         message received or client request taken; vs echo: over the echo nodes'; sys/msg: \
         their system calls (reads, writes, poller waits) per message; vs runtime: CPU per \
         message over the runtime's cost line at their syscalls per message)"
    );
}
