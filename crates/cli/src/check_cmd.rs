//! `tandem check`: check a history recorded by a client outside Tandem
//! (JSON lines) against a consistency model, and say why it fails.

use clap::Args;

#[derive(Args)]
pub struct CheckArgs {
    /// The history: JSON lines, one operation or transaction each.
    history: std::path::PathBuf,
    /// strict-serializable: transactions with values alone, as a Redis
    /// client sees `MULTI`/`EXEC` (`{"client","invoke_ns","complete_ns",
    /// "outcome":"committed|aborted|unknown","reads":[[key,value|null]],
    /// "writes":[[key,value]]}`; writes unique, each key read before it is
    /// written). linearizable: single-key reads and writes
    /// (`{"session","node","op":"read|write","key","value","invoke_ns","complete_ns","ok"}`).
    #[arg(long, default_value = "strict-serializable")]
    model: String,
}

pub fn run(a: CheckArgs) -> Result<(), String> {
    let file =
        std::fs::File::open(&a.history).map_err(|e| format!("{}: {e}", a.history.display()))?;
    let reader = std::io::BufReader::new(file);
    match a.model.as_str() {
        "strict-serializable" => {
            let txs = parse_lines::<tandem_check::ClientTx>(reader)?;
            let s = tandem_check::check_strict_serializable(&txs)?;
            println!(
                "strictly serializable: {} transactions of {} checked ({} with an unknown outcome that took effect), {} edges",
                s.transactions,
                txs.len(),
                s.unknown_included,
                s.edges
            );
        }
        "linearizable" => {
            let ops = tandem_check::parse_jsonl(reader)?;
            let s = tandem_check::check_linearizable(&ops).map_err(|v| format!("{v:?}"))?;
            println!("linearizable: {} operations, {s:?}", ops.len());
        }
        m => return Err(format!("--model {m}: strict-serializable or linearizable")),
    }
    Ok(())
}

fn parse_lines<T: serde::de::DeserializeOwned>(r: impl std::io::BufRead) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|e| e.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(out)
}
