//! `tandem net echo`: the message-passing runtime's ceiling between two
//! processes on this machine (the physical limit DDP over TCP is compared with).

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tandem_net::echo::{Echo, EchoFactory};
use tandem_net::host::{self, HostConfig};

use crate::args::{parse_addrs, write_json};

#[derive(Args)]
pub struct NetArgs {
    #[command(subcommand)]
    command: NetCommand,
}

#[derive(Subcommand)]
enum NetCommand {
    /// Two processes bounce small messages through the runtime: messages per second.
    Echo(EchoArgs),
    /// The far side of `tandem net echo` (internal).
    #[command(hide = true)]
    EchoPeer(PeerArgs),
}

#[derive(Args)]
pub struct EchoArgs {
    /// Processes, each with `window` messages in flight to every other.
    #[arg(long, default_value_t = 2)]
    nodes: u16,
    /// Echo at each of these windows (comma-separated) and fit the
    /// runtime's CPU per message against its syscalls per message.
    #[arg(long)]
    sweep: Option<String>,
    /// Messages in flight from each process to each other (2 processes:
    /// only the first sends, so this is the whole link's window).
    #[arg(long, default_value_t = 2000)]
    window: u64,
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    #[arg(long)]
    json: Option<String>,
}

#[derive(Args)]
pub struct PeerArgs {
    #[arg(long)]
    peers: String,
    #[arg(long)]
    dir: String,
    /// This process's node id (its place in --peers).
    #[arg(long, default_value_t = 1)]
    id: u16,
    #[arg(long, default_value_t = 0)]
    window: u64,
}

/// Both ends of the echo derive the same keys (a loopback measurement).
const SECRET: &str = "ec40ec40ec40ec40ec40ec40ec40ec40";

fn keys() -> tandem_fabric::auth::Keyring {
    tandem_fabric::auth::Keyring::from_master_hex(SECRET).expect("a 128-bit secret")
}

fn host_cfg(id: u16, peers: &[std::net::SocketAddr], dir: &str) -> HostConfig {
    HostConfig {
        id,
        peers: peers
            .iter()
            .enumerate()
            .map(|(i, &a)| (i as u16, a))
            .collect(),
        manager: None,
        keys: keys(),
        nvm: std::path::Path::new(dir).join(format!("echo{id}.nvm")),
        nvm_bytes: 1 << 20,
        nvm_corrupt: tandem_net::nvm_file::OnCorrupt::Stop,
        fsync: false,
        heartbeat: Duration::from_millis(5),
        lease: Duration::from_millis(200),
        ignore_lease: false,
        lease_from_receipt: false,
    }
}

pub fn run(a: NetArgs) -> Result<(), String> {
    match a.command {
        NetCommand::Echo(e) => echo(e),
        NetCommand::EchoPeer(p) => {
            let peers = parse_addrs(&p.peers)?;
            let me = peers.get(p.id as usize).ok_or("--id is not in --peers")?;
            let l = TcpListener::bind(me).map_err(|e| e.to_string())?;
            let factory = EchoFactory {
                window: p.window,
                received: Arc::default(),
            };
            host::run::<Echo, _>(host_cfg(p.id, &peers, &p.dir), l, factory)
                .map_err(|e| e.to_string())
        }
    }
}

fn echo(a: EchoArgs) -> Result<(), String> {
    if let Some(list) = &a.sweep {
        let windows = list
            .split(',')
            .map(|w| {
                w.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("--sweep: bad window '{w}'"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let m = echo_model(a.nodes, &windows, a.seconds)?;
        for (w, calls, cpu) in &m.points {
            println!("window {w:>5}: {calls:.3} syscalls and {cpu:.0} ns of CPU per message");
        }
        println!(
            "fit: {:.0} ns per message + {:.0} ns per syscall",
            m.per_message_ns, m.per_syscall_ns
        );
        if let Some(p) = &a.json {
            write_json(p, &m)?;
        }
        return Ok(());
    }
    let e = echo_rate(a.nodes, a.window, a.seconds)?;
    println!(
        "echo among {} processes: {:.0} messages/s ({} in flight per link), {:.0} ns of CPU ({:.0} % on the event loops' threads) and {:.2} syscalls per message",
        a.nodes, e.messages_per_s, a.window, e.cpu_ns_per_message, 100.0 * e.loop_cpu_share, e.syscalls_per_message
    );
    if let Some(p) = &a.json {
        write_json(
            p,
            &serde_json::json!({ "system": "net", "nodes": a.nodes, "window": a.window, "messages_per_s": e.messages_per_s, "cpu_ns_per_message": e.cpu_ns_per_message, "loop_cpu_share": e.loop_cpu_share, "syscalls_per_message": e.syscalls_per_message }),
        )?;
    }
    Ok(())
}

/// What [`echo_rate`] measured.
#[derive(Clone, Copy, Debug)]
pub struct EchoRun {
    pub messages_per_s: f64,
    /// CPU the processes used per message they received, in ns (their own
    /// CPU clocks), and the share of it their event loops' threads used.
    pub cpu_ns_per_message: f64,
    pub loop_cpu_share: f64,
    /// System calls per message received: reads, writes and poller waits,
    /// as the runtime counts them (`NodeStats::syscalls`).
    pub syscalls_per_message: f64,
}

/// Messages per second `nodes` processes bounce through the runtime, with
/// `window` in flight from each to each other (two: from the first to the
/// second), measured for `seconds` after a warm-up by the nodes' own
/// counters, and the CPU and system calls they spent on each.
pub fn echo_rate(nodes: u16, window: u64, seconds: f64) -> Result<EchoRun, String> {
    if nodes < 2 {
        return Err("--nodes must be at least 2".into());
    }
    let dir = std::env::temp_dir().join(format!("tandem-echo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let peers = free_ports(nodes)?;
    let mut children = EchoChildren(Vec::new());
    for id in 0..nodes {
        // Two processes: only the first sends, as the echo always has.
        let w = if nodes == 2 && id == 1 { 0 } else { window };
        children.0.push(spawn_peer(&peers, id, w, &dir)?);
    }
    let measure = || -> Result<tandem_net::wire::NodeStats, String> {
        let mut t = tandem_net::wire::NodeStats::default();
        for a in &peers {
            t += tandem_net::client::node_stats(*a, &keys(), Duration::from_secs(2))
                .map_err(|e| format!("stats of echo node at {a}: {e}"))?;
        }
        Ok(t)
    };
    std::thread::sleep(Duration::from_millis(500));
    let (start, s0) = (Instant::now(), measure()?);
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let s1 = measure()?;
    let msgs = (s1.received - s0.received) as f64;
    drop(children);
    let _ = std::fs::remove_dir_all(&dir);
    if msgs == 0.0 {
        return Err("no message came back: the echo peers did not start".into());
    }
    Ok(EchoRun {
        messages_per_s: msgs / start.elapsed().as_secs_f64(),
        cpu_ns_per_message: (s1.cpu_ns - s0.cpu_ns) as f64 / msgs,
        loop_cpu_share: (s1.loop_cpu_ns - s0.loop_cpu_ns) as f64
            / (s1.cpu_ns - s0.cpu_ns).max(1) as f64,
        syscalls_per_message: (s1.syscalls - s0.syscalls) as f64 / msgs,
    })
}

/// The runtime's cost, fitted over echoes of several windows: CPU per
/// message = `per_message_ns` + `per_syscall_ns` × syscalls per message.
/// A wider window coalesces more messages per read and write, so the
/// echo's CPU per message falls with its syscalls per message; a store's
/// node, at its own syscalls per message, is compared with this line.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EchoModel {
    pub per_message_ns: f64,
    pub per_syscall_ns: f64,
    /// (window, syscalls per message, CPU ns per message) of each echo.
    pub points: Vec<(u64, f64, f64)>,
}

impl EchoModel {
    /// The runtime's CPU per message at `syscalls` per message.
    pub fn cpu_ns_at(&self, syscalls: f64) -> f64 {
        self.per_message_ns + self.per_syscall_ns * syscalls
    }
}

/// Echoes among `nodes` processes at each of `windows`, and the line fitted
/// through them (least squares).
pub fn echo_model(nodes: u16, windows: &[u64], seconds: f64) -> Result<EchoModel, String> {
    let mut points = Vec::new();
    for &w in windows {
        let e = echo_rate(nodes, w, seconds)?;
        points.push((w, e.syscalls_per_message, e.cpu_ns_per_message));
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), p| (a + p.1, b + p.2));
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for p in &points {
        sxy += (p.1 - mx) * (p.2 - my);
        sxx += (p.1 - mx) * (p.1 - mx);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    Ok(EchoModel {
        per_message_ns: my - slope * mx,
        per_syscall_ns: slope,
        points,
    })
}

/// The echo's processes; killed when dropped.
struct EchoChildren(Vec<std::process::Child>);

impl Drop for EchoChildren {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Ports for the echo peers, from the range no `connect` or `bind(0)` hands
/// out: an ephemeral port released for a peer to bind may meanwhile become
/// another peer's outgoing source port, and that peer never listens.
fn free_ports(n: u16) -> Result<Vec<std::net::SocketAddr>, String> {
    (0..n)
        .map(|_| {
            tandem_net::ports::reserve_loopback()
                .map_err(|e| format!("no free loopback port: {e}"))
        })
        .collect()
}

fn spawn_peer(
    peers: &[std::net::SocketAddr],
    id: u16,
    window: u64,
    dir: &std::path::Path,
) -> Result<std::process::Child, String> {
    let list: Vec<String> = peers.iter().map(|a| a.to_string()).collect();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Command::new(exe)
        .args(["net", "echo-peer", "--peers", &list.join(",")])
        .args(["--dir", dir.to_str().unwrap_or(".")])
        .args(["--id", &id.to_string(), "--window", &window.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())
}
