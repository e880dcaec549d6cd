//! `tandem net echo`: the message-passing runtime's ceiling between two
//! processes on this machine (the physical limit DDP over TCP is compared with).

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tandem_net::echo::{Echo, EchoFactory};
use tandem_net::host::{self, HostConfig};
use tandem_net::procstat::cpu_seconds;

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
    /// Messages in flight.
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
}

/// Both ends of the echo derive the same keys (a loopback measurement).
const SECRET: &str = "ec40ec40ec40ec40ec40ec40ec40ec40";

fn host_cfg(id: u16, peers: &[std::net::SocketAddr], dir: &str) -> HostConfig {
    HostConfig {
        id,
        peers: peers
            .iter()
            .enumerate()
            .map(|(i, &a)| (i as u16, a))
            .collect(),
        manager: None,
        keys: tandem_fabric::auth::Keyring::from_master_hex(SECRET).expect("a 128-bit secret"),
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
            let l = TcpListener::bind(peers[1]).map_err(|e| e.to_string())?;
            let factory = EchoFactory {
                window: 0,
                received: Arc::default(),
            };
            host::run::<Echo, _>(host_cfg(1, &peers, &p.dir), l, factory).map_err(|e| e.to_string())
        }
    }
}

fn echo(a: EchoArgs) -> Result<(), String> {
    let e = echo_rate(a.window, a.seconds)?;
    println!(
        "echo between two processes: {:.0} messages/s ({} in flight), {:.0} ns of CPU per message",
        e.messages_per_s, a.window, e.cpu_ns_per_message
    );
    if let Some(p) = &a.json {
        write_json(
            p,
            &serde_json::json!({ "system": "net", "window": a.window, "messages_per_s": e.messages_per_s, "cpu_ns_per_message": e.cpu_ns_per_message }),
        )?;
    }
    Ok(())
}

/// What [`echo_rate`] measured.
#[derive(Clone, Copy, Debug)]
pub struct EchoRun {
    pub messages_per_s: f64,
    /// CPU both processes used (user and system, from /proc) per message
    /// received, in ns.
    pub cpu_ns_per_message: f64,
}

/// Messages per second two processes bounce through the runtime, with
/// `window` in flight, measured for `seconds` after a warm-up, and the CPU
/// they spent on each.
pub fn echo_rate(window: u64, seconds: f64) -> Result<EchoRun, String> {
    let dir = std::env::temp_dir().join(format!("tandem-echo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let l0 = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let a1 = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?;
    let peers = vec![l0.local_addr().map_err(|e| e.to_string())?, a1];
    let list = format!("{},{}", peers[0], peers[1]);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args([
            "net",
            "echo-peer",
            "--peers",
            &list,
            "--dir",
            dir.to_str().unwrap_or("."),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let received = Arc::new(AtomicU64::new(0));
    let node = host::spawn::<Echo, _>(
        host_cfg(0, &peers, dir.to_str().unwrap_or(".")),
        l0,
        EchoFactory {
            window,
            received: received.clone(),
        },
    )
    .map_err(|e| e.to_string())?;
    // Warm up, then measure.
    std::thread::sleep(Duration::from_millis(500));
    let cpu = || cpu_seconds(child.id()) + cpu_seconds(std::process::id());
    let (start, before, cpu0) = (Instant::now(), received.load(Ordering::Relaxed), cpu());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let msgs = 2 * (received.load(Ordering::Relaxed) - before);
    let rate = msgs as f64 / start.elapsed().as_secs_f64();
    let cpu_ns_per_message = 1e9 * (cpu() - cpu0) / (msgs as f64).max(1.0);
    node.stop();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if msgs == 0 {
        return Err("no message came back: the echo peer did not start".into());
    }
    Ok(EchoRun {
        messages_per_s: rate,
        cpu_ns_per_message,
    })
}
