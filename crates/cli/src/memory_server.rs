//! `tandem memory-server`: a passive memory node served over TCP
//! (DESIGN.md §3). It listens on loopback unless told otherwise, and executes
//! verbs only for compute nodes registered with its admin secret.

use std::net::TcpListener;
use std::sync::Arc;

use clap::Args;
use tandem_fabric::tcp::serve;
use tandem_fabric::MemoryNode;

use crate::args::{parse_size, random_secret, secret_from};

#[derive(Args)]
pub struct MemoryServerArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: String,
    /// Memory to serve, e.g. 512M or 2G.
    #[arg(long, default_value = "256M")]
    mem: String,
    /// Admin secret (hex). Defaults to $TANDEM_SECRET, else a random one printed at start.
    #[arg(long)]
    secret: Option<String>,
}

pub fn run(a: MemoryServerArgs) -> Result<(), String> {
    let bytes = parse_size(&a.mem)?;
    let secret = match secret_from(a.secret.as_deref())? {
        Some(s) => s,
        None => {
            let s = random_secret();
            eprintln!("no --secret or TANDEM_SECRET given; admin secret for this server: {s:016x}");
            s
        }
    };
    let listener =
        TcpListener::bind(&a.listen).map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let node = Arc::new(MemoryNode::new(bytes, secret.rotate_left(17)));
    // The harness that started us waits for this exact line.
    println!("listening on {addr}");
    eprintln!("memory server: {} bytes on {addr}", node.size_bytes());
    serve(listener, node, secret).map_err(|e| format!("memory server failed: {e}"))
}
