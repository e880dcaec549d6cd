//! `tandem keys`: make a master secret, and split it into keyrings that hold
//! only what one kind of process needs (docs/SECURITY.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tandem_fabric::auth::{Keyring, Role};

#[derive(Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    cmd: KeysCmd,
}

#[derive(Subcommand)]
enum KeysCmd {
    /// Print a fresh 256-bit master secret (hex) from the OS's random number generator.
    New,
    /// Write one keyring per kind of process into DIR (mode 600), from --secret or
    /// TANDEM_SECRET: memory-server.keyring (admin, compute, memory), membership.keyring
    /// (admin, compute), compute-server.keyring (compute, client: checks AUTH on --resp), node.keyring (peer, client: checks AUTH on --resp),
    /// client.keyring (client). Give each process its own with TANDEM_KEYRING=FILE.
    Split {
        #[arg(long)]
        out: PathBuf,
        /// Master secret (hex); default $TANDEM_SECRET.
        #[arg(long)]
        secret: Option<String>,
    },
}

/// Which roles' keys each kind of process holds.
pub const KEYRINGS: [(&str, &[Role]); 5] = [
    ("memory-server", &[Role::Admin, Role::Compute, Role::Memory]),
    ("membership", &[Role::Admin, Role::Compute]),
    // The client key checks AUTH on `compute-server --resp`.
    ("compute-server", &[Role::Compute, Role::Client]),
    // The client key checks AUTH on `node --resp`.
    ("node", &[Role::Peer, Role::Client]),
    ("client", &[Role::Client]),
];

pub fn run(a: KeysArgs) -> Result<(), String> {
    match a.cmd {
        KeysCmd::New => {
            println!("{}", Keyring::new_master_hex());
            Ok(())
        }
        KeysCmd::Split { out, secret } => {
            let hex = match secret {
                Some(s) => s,
                None => std::env::var("TANDEM_SECRET").map_err(|_| {
                    "give --secret or TANDEM_SECRET (make one with `tandem keys new`)"
                })?,
            };
            let all = Keyring::from_master_hex(&hex)?;
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            for (name, roles) in KEYRINGS {
                let path = out.join(format!("{name}.keyring"));
                all.only(roles).write_file(&path)?;
                println!("{}", path.display());
            }
            Ok(())
        }
    }
}
