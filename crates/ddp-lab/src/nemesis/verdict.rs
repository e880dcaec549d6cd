//! What a DDP model promises that a history of real processes can show.
//!
//! - Lin models: linearizability of the whole history.
//! - RE, Causal and Eventual models: no read from thin air (each value
//!   read was written), and convergence: after the last heal, with the load
//!   stopped, every node holds the same value of every key, and that value
//!   is explained by the history.
//! - Transactional models: the committed transactions are serializable
//!   (`tandem_check::serial`, from what their clients saw: values and the
//!   versions' timestamps), and the nodes agree at the end. The simulator
//!   checks these models more closely (RE's writes ending at their VAL,
//!   causal session order, atomic recovery), with what it sees inside the
//!   nodes. A process history has only what clients saw.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tandem_auth::Keyring;
use tandem_check::{FinalStates, HistOp};
use tandem_ddp::{Consistency, Model, Persistency};

/// How long the replicas may take to agree once the load has stopped.
const CONVERGE_WITHIN: Duration = Duration::from_secs(5);

/// The fault classes `model` can take: a whole-cluster crash loses
/// acknowledged writes under every persistency model but Strict and Synch,
/// which is what those models allow, not a bug.
pub fn refuses(model: Model, class: &str) -> Option<String> {
    let durable = matches!(model.p, Persistency::Strict | Persistency::Synch);
    (class == "kill-all" && !durable).then(|| {
        format!("fault class 'kill-all' does not apply to {model}: its persistency lets a whole-cluster crash lose acknowledged writes")
    })
}

/// The violations of `ops` (and of the nodes' final states, read from
/// `nodes` after the load stopped) under `model`.
pub fn check(
    model: Model,
    h: &crate::load::History,
    nodes: &[SocketAddr],
    keys: &Keyring,
    key_count: u64,
) -> Vec<String> {
    let ops = &h.ops[..];
    if model.c == Consistency::Lin {
        // Four times the default search budget: a fast run puts 8,000
        // operations on one key, where the default was once undecided.
        let cfg = tandem_check::LinConfig {
            max_states: 4_000_000,
            ..tandem_check::LinConfig::default()
        };
        return match tandem_check::check_linearizable_with(ops, &cfg) {
            Ok(_) => Vec::new(),
            Err(v) => vec![format!("not linearizable: {v}")],
        };
    }
    if model.c == Consistency::Trans {
        let serial = tandem_check::serial::check_serializable(&h.txs).err();
        return serial
            .into_iter()
            .chain(agreed(nodes, keys, key_count).err())
            .collect();
    }
    let mut v = Vec::new();
    if let Err(e) = tandem_check::check_no_thin_air(ops) {
        v.push(format!("a read from thin air: {e}"));
    }
    if let Err(e) = converged(ops, nodes, keys, key_count) {
        v.push(format!(
            "the replicas did not converge within {CONVERGE_WITHIN:?} of the end: {e}"
        ));
    }
    v
}

/// Poll the nodes' values until they agree (and the history explains
/// them), or [`CONVERGE_WITHIN`] passes.
fn converged(
    ops: &[HistOp],
    nodes: &[SocketAddr],
    keys: &Keyring,
    key_count: u64,
) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let verdict = finals(nodes, keys, key_count)
            .and_then(|f| tandem_check::check_convergence(&f, ops).map_err(|e| e.to_string()));
        match verdict {
            Ok(_) => return Ok(()),
            Err(e) if t.elapsed() > CONVERGE_WITHIN => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Transactional models: the nodes end with the same values.
fn agreed(nodes: &[SocketAddr], keys: &Keyring, key_count: u64) -> Result<(), String> {
    let t = Instant::now();
    loop {
        // A read may wait behind a prepared transaction: ask again until
        // the window closes.
        let f = match finals(nodes, keys, key_count) {
            Ok(f) => f,
            Err(_) if t.elapsed() <= CONVERGE_WITHIN => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => return Err(format!("within {CONVERGE_WITHIN:?} of the end: {e}")),
        };
        let first = &f[&0];
        let Some((n, k)) = f.iter().find_map(|(n, m)| {
            (0..key_count)
                .find(|k| m.get(k) != first.get(k))
                .map(|k| (*n, k))
        }) else {
            return Ok(());
        };
        if t.elapsed() > CONVERGE_WITHIN {
            return Err(format!(
                "the replicas did not agree within {CONVERGE_WITHIN:?} of the end: key {k} is {:?} at node 0, {:?} at node {n}",
                first.get(&k),
                f[&n].get(&k)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every node's value of keys `0..key_count`, read at that node.
fn finals(nodes: &[SocketAddr], keys: &Keyring, key_count: u64) -> Result<FinalStates, String> {
    let mut out = FinalStates::new();
    for (i, &addr) in nodes.iter().enumerate() {
        let session = (1 << 40) + i as u64;
        let mut c = tandem_net::client::Client::<tandem_ddp::Op, tandem_ddp::Reply>::connect(
            addr,
            keys,
            session,
            Duration::from_secs(1),
        )
        .map_err(|e| format!("cannot reach node {i} at {addr}: {e}"))?;
        let mut values = std::collections::HashMap::new();
        for k in 0..key_count {
            let read = c.call(tandem_ddp::Op::read(k));
            match read.map_err(|e| format!("node {i} did not answer a read of key {k}: {e}"))? {
                tandem_ddp::Reply::Read { value, .. } => values.insert(k, value),
                other => {
                    return Err(format!(
                        "node {i} answered a read of key {k} with {other:?}"
                    ))
                }
            };
        }
        out.insert(i as u16, values);
    }
    Ok(out)
}
