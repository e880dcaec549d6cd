//! Tier 3 (real processes): start PostgreSQL, Redis and a 3-member etcd
//! through `scripts/peers.sh`, run a 1-second `compare` of SmallBank on a
//! small account count against them and Tandem (memory-server processes,
//! over TCP and on shm),
//! and require that every system committed transactions and passed the
//! SmallBank consistency check.
//!
//! A server that cannot be installed (peers.sh exit 3) fails the test when
//! `$CI` is set and skips it otherwise.
//!
//! This file is its own test harness (`harness = false`): run with the
//! argument `memory-server`, the binary is Tandem's memory server, so that
//! the Tandem side needs no other binary than this one.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_pandora_lab::compare::{compare, parse_systems, render, CompareConfig};
use tandem_peers::system::Endpoints;
use tandem_peers::workload::PeerWorkload;
use tandem_workloads::smallbank::SmallBankSpec;

/// `memory-server --listen ADDR --mem BYTES [--shm]`, secret in $TANDEM_SECRET (as
/// `tandem_cluster::backend::MemoryServers::spawn` starts it).
fn memory_server(args: &[String]) -> Result<(), String> {
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let listen = flag("--listen").unwrap_or_else(|| "127.0.0.1:0".into());
    let bytes: u64 = flag("--mem")
        .ok_or("--mem missing")?
        .parse()
        .map_err(|_| "--mem takes bytes")?;
    let keys = tandem_fabric::auth::Keyring::from_env()?.ok_or("TANDEM_SECRET missing")?;
    let listener = std::net::TcpListener::bind(&listen).map_err(|e| e.to_string())?;
    let node = Arc::new(match args.iter().any(|a| a == "--shm") {
        true => tandem_fabric::MemoryNode::shared(bytes).map_err(|e| e.to_string())?,
        false => tandem_fabric::MemoryNode::new(bytes),
    });
    println!(
        "listening on {}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    tandem_fabric::tcp::serve(listener, node, keys).map_err(|e| e.to_string())
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

enum Verdict {
    Passed,
    Skipped(String),
}

fn compare_against_every_peer() -> Result<Verdict, String> {
    let t0 = Instant::now();
    let script = workspace().join("scripts/peers.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("start")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    match out.status.code() {
        Some(0) => {}
        Some(3) if std::env::var_os("CI").is_none() => {
            return Ok(Verdict::Skipped(format!(
                "a peer cannot be installed here: {}",
                stderr.trim()
            )));
        }
        _ => {
            return Err(format!(
                "`bash scripts/peers.sh start` failed ({}):\n{stderr}",
                out.status
            ))
        }
    }
    eprintln!("peers started in {:.1}s", t0.elapsed().as_secs_f64());
    let cfg = CompareConfig {
        workload: PeerWorkload::SmallBank(SmallBankSpec::scaled(2_000)),
        systems: parse_systems("tandem-tcp,tandem-shm,postgres,redis,etcd")?,
        clients: vec![4],
        rounds: 1,
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs(1),
        seed: 5,
        tandem_exe: std::env::current_exe().map_err(|e| e.to_string())?,
        endpoints: Endpoints::from_env()?,
        progress: false,
    };
    let c = compare(&cfg)?;
    println!("{}", render(&c));
    let mut problems = Vec::new();
    for s in &c.systems {
        if s.committed == 0 {
            problems.push(format!("{} committed no transaction", s.system));
        }
        if !s.check_passed {
            problems.push(format!(
                "{} failed the SmallBank check: {:?}",
                s.system,
                s.violations.iter().take(3).collect::<Vec<_>>()
            ));
        }
        if !s.errors.is_empty() {
            problems.push(format!(
                "{} hit errors: {:?}",
                s.system,
                s.errors.iter().take(3).collect::<Vec<_>>()
            ));
        }
    }
    if c.systems.len() != 5 || c.ratios.len() != 6 {
        problems.push(format!(
            "expected 5 systems and 6 ratios, got {} and {}",
            c.systems.len(),
            c.ratios.len()
        ));
    }
    eprintln!("compare took {:.1}s in all", t0.elapsed().as_secs_f64());
    if problems.is_empty() {
        Ok(Verdict::Passed)
    } else {
        Err(problems.join("\n"))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Started as `EXE pandora memory-server ...` by the backend.
    if args.get(1).map(String::as_str) == Some("pandora")
        && args.get(2).map(String::as_str) == Some("memory-server")
    {
        if let Err(e) = memory_server(&args) {
            eprintln!("memory server: {e}");
            std::process::exit(1);
        }
        return;
    }
    // `cargo test -- --list` and name filters: this file has one test.
    if args.iter().any(|a| a == "--list") {
        println!("compare_against_every_peer: test");
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"compare_against_every_peer".contains(f.as_str())) {
        println!("0 passed, 0 failed, 1 skipped");
        return;
    }
    match compare_against_every_peer() {
        Ok(Verdict::Passed) => {
            println!("test compare_against_every_peer ... ok\n1 passed, 0 failed")
        }
        Ok(Verdict::Skipped(why)) => println!(
            "test compare_against_every_peer ... SKIPPED: {why}\n0 passed, 0 failed, 1 skipped"
        ),
        Err(e) => {
            eprintln!("compare_against_every_peer FAILED:\n{e}");
            println!("test compare_against_every_peer ... FAILED\n0 passed, 1 failed");
            std::process::exit(1);
        }
    }
}
