//! `tandem heal recover --net tcp`: one HEAL recovery on real processes.
//! Five `tandem node --recovery heal` processes and a configuration
//! manager on loopback, rate-limited writers; node 2 is killed with -9,
//! the writes go on for the downtime, it restarts from its NVM file and
//! catches up from its Buddy (the HEAL leg of `experiment heal-peers`).
//! Times are wall clock.

use serde_json::{json, Value};
use tandem_ddp::{HealOpts, Model};
use tandem_ddp_lab::heal::peers as heal_peers;

use crate::args::write_json;

pub fn recover(
    scheme: &str,
    model: Model,
    keys: u64,
    downtime_s: f64,
    rate: f64,
    json_path: Option<&str>,
) -> Result<(), String> {
    if scheme != "heal" {
        return Err(format!("--scheme {scheme} --net tcp: on processes only HEAL runs (the full copy and the leader-based recovery run in simulated time, --net sim)"));
    }
    if !HealOpts::supports(model) {
        return Err(format!("HEAL recovers the Lin models; not {model}"));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut o = heal_peers::Options::new(false, &exe, &heal_peers::find_root(&exe)?);
    (o.downtime_s, o.rate, o.keys, o.runs) = (downtime_s, rate, keys, 1);
    (o.systems, o.model) = (vec!["heal".into()], model.to_string());
    o.work = o.work.with_file_name("heal-recover-tcp");
    eprintln!("heal recover --net tcp: {model}, 5 node processes, {rate} writes/s over {keys} keys, node 2 killed for {downtime_s} s");
    let out = heal_peers::run(&o, &|s| eprintln!("{s}"))?;
    let run = &out.json["systems"][0]["runs"][0];
    let report = report(model, keys, downtime_s, run)?;
    print(&report);
    if let Some(p) = json_path {
        write_json(
            p,
            &json!({ "system": "heal", "net": "tcp", "runs": [report] }),
        )?;
    }
    Ok(())
}

/// The run in `heal recover`'s JSON shape (`recovery_us` and each phase's `_us`).
fn report(model: Model, keys: u64, downtime_s: f64, run: &Value) -> Result<Value, String> {
    let ms = |k: &str| {
        run[k]
            .as_f64()
            .ok_or_else(|| format!("the run reports no {k}: {run}"))
    };
    let phase = |k: &str| run["details"]["phases"][k].as_f64().map(|x| x * 1e3);
    Ok(json!({
        "model": model.to_string(), "scheme": "heal", "net": "tcp", "records": keys, "downtime_us": downtime_s * 1e6,
        "recovery_us": ms("net_ms")? * 1e3,
        "restart_to_online_us": ms("caught_up_ms")? * 1e3,
        "process_start_us": ms("answer_ms")? * 1e3,
        "start_to_ack_us": phase("start_to_ack_ms"), "catchup_to_resp_us": phase("catchup_to_resp_ms"), "apply_to_end_us": phase("apply_to_end_ms"),
        "missed_entries": run["details"]["missed_updates"],
        "writes_per_s_during_downtime": run["downtime_rate"], "write_errors": run["write_errors"],
        "node_log": run["details"]["heal_line"],
    }))
}

fn print(r: &Value) {
    let us = |k: &str| {
        r[k].as_f64()
            .map_or("?".into(), |x| format!("{:.1} ms", x / 1e3))
    };
    println!(
        "{} heal (tcp): node 2 answered {} after its restart, online {} after it",
        r["model"].as_str().unwrap_or("?"),
        us("process_start_us"),
        us("restart_to_online_us")
    );
    println!(
        "  recovery {} (online, from the process answering)",
        us("recovery_us")
    );
    println!(
        "    as the node logged it: Start_to_ACK {}, CatchUp_to_Resp {}, Apply_to_end {}",
        us("start_to_ack_us"),
        us("catchup_to_resp_us"),
        us("apply_to_end_us")
    );
    println!(
        "    MissedUpdates: {} entries from the Buddy",
        r["missed_entries"]
    );
    println!(
        "  writes kept {:.0}/s while node 2 was down ({} write errors)",
        r["writes_per_s_during_downtime"].as_f64().unwrap_or(0.0),
        r["write_errors"]
    );
}
