//! `tandem litmus-worker` (hidden): one compute-server process of a DART run
//! with `kill -9` injection (`tandem dart --fabric tcp --crash-rate R`
//! starts it; `tandem_dart::proc_run` does the work). Thin: the whole
//! configuration comes as one JSON argument, the secret from `TANDEM_SECRET`.

use clap::Args;
use tandem_dart::proc_run::{self, WorkerConfig};

use crate::args::keyring_from;

#[derive(Args)]
pub struct LitmusWorkerArgs {
    /// A `tandem_dart::proc_run::WorkerConfig` as JSON.
    #[arg(long)]
    config: String,
}

pub fn run(a: LitmusWorkerArgs) -> Result<(), String> {
    let cfg: WorkerConfig =
        serde_json::from_str(&a.config).map_err(|e| format!("bad --config: {e}"))?;
    let keys = keyring_from(None)?.ok_or("TANDEM_SECRET or TANDEM_KEYRING is required")?;
    let summary = proc_run::worker(&cfg, keys)?;
    eprintln!("{summary}");
    Ok(())
}
