//! Serializability of a transactional history, from what clients saw
//! (Adya's direct serialization graph, as "Generalized Isolation Level
//! Definitions", ICDE 2000, defines it; DDP's Transactional models).
//!
//! Each [`TxHist`] is one transaction a session ran: its reads and writes,
//! with the version each names (the store's timestamp, which orders a
//! key's versions), and how it ended. The graph's nodes are the committed
//! transactions, plus every `unknown` one whose write an included
//! transaction read (it must have committed); unobserved unknown ones may
//! have aborted and are left out. Edges, per key:
//! - `ww`: each version's writer precedes the next version's writer;
//! - `wr`: the writer of the version a transaction read precedes it;
//! - `rw`: a reader precedes the writer of the version after the one it read.
//!
//! A cycle is a violation (G0, G1c or G2), and so is a read of an aborted
//! transaction's write (G1a) or of a value nobody wrote. Real-time order
//! is not checked: the models promise serializability, not its strict form.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// How a transaction ended, as its client learnt it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TxOutcome {
    Committed,
    Aborted,
    /// No answer (a timeout, a lost stream) or an answer saying the
    /// outcome is unknown: it may have committed.
    Unknown,
}

/// One read or write of a transaction. `version` orders a key's versions
/// (0: the initial, absent value); a read names the version it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxStep {
    pub write: bool,
    pub key: u64,
    pub value: Option<u64>,
    pub version: u64,
}

/// One transaction of a session (one line of `transactions.jsonl`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxHist {
    pub session: u64,
    /// The session's number for it (a restart takes a new one).
    pub tx: u64,
    /// The node it ran at.
    pub node: u16,
    pub invoke_ns: u64,
    pub complete_ns: Option<u64>,
    pub outcome: TxOutcome,
    pub steps: Vec<TxStep>,
}

/// What the check saw, when it passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SerialStats {
    pub transactions: usize,
    pub edges: usize,
}

/// Check that the committed transactions of `txs` are serializable.
pub fn check_serializable(txs: &[TxHist]) -> Result<SerialStats, String> {
    let writer = writers(txs);
    let included = included(txs, &writer);
    let versions = versions(txs, &included)?;
    let mut edges: Vec<HashSet<usize>> = vec![HashSet::new(); txs.len()];
    for chain in versions.values() {
        for w in chain.windows(2) {
            edges[w[0].1].insert(w[1].1);
        }
    }
    for &t in &included {
        for r in txs[t].steps.iter().filter(|s| !s.write) {
            read_edges(txs, t, r, &writer, &versions, &mut edges)?;
        }
    }
    for (t, out) in edges.iter_mut().enumerate() {
        out.remove(&t);
    }
    if let Some(cycle) = find_cycle(&edges, &included) {
        let names: Vec<String> = cycle.iter().map(|&t| name(&txs[t])).collect();
        return Err(format!(
            "not serializable: a dependency cycle among committed transactions: {}",
            names.join(" -> ")
        ));
    }
    Ok(SerialStats {
        transactions: included.len(),
        edges: edges.iter().map(HashSet::len).sum(),
    })
}

fn name(t: &TxHist) -> String {
    format!("session {} tx {} (node {})", t.session, t.tx, t.node)
}

/// Each written (key, value) and the transaction that wrote it.
fn writers(txs: &[TxHist]) -> HashMap<(u64, u64), usize> {
    let mut w = HashMap::new();
    for (t, tx) in txs.iter().enumerate() {
        for s in tx.steps.iter().filter(|s| s.write) {
            if let Some(v) = s.value {
                w.insert((s.key, v), t);
            }
        }
    }
    w
}

/// The committed transactions and the unknown ones an included one read.
fn included(txs: &[TxHist], writer: &HashMap<(u64, u64), usize>) -> Vec<usize> {
    let mut inc: Vec<bool> = txs
        .iter()
        .map(|t| t.outcome == TxOutcome::Committed)
        .collect();
    let mut work: Vec<usize> = (0..txs.len()).filter(|&t| inc[t]).collect();
    while let Some(t) = work.pop() {
        for r in txs[t].steps.iter().filter(|s| !s.write) {
            let Some(&w) = r.value.and_then(|v| writer.get(&(r.key, v))) else {
                continue;
            };
            if !inc[w] && txs[w].outcome == TxOutcome::Unknown {
                inc[w] = true;
                work.push(w);
            }
        }
    }
    (0..txs.len()).filter(|&t| inc[t]).collect()
}

/// Per key, the included transactions' final versions in version order.
fn versions(
    txs: &[TxHist],
    included: &[usize],
) -> Result<BTreeMap<u64, Vec<(u64, usize)>>, String> {
    let mut by_key: BTreeMap<u64, BTreeMap<u64, usize>> = BTreeMap::new();
    for &t in included {
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for s in txs[t].steps.iter().filter(|s| s.write) {
            last.insert(s.key, s.version);
        }
        for (key, version) in last {
            if let Some(&o) = by_key.entry(key).or_default().get(&version) {
                return Err(format!(
                    "key {key}: {} and {} both installed version {version}",
                    name(&txs[o]),
                    name(&txs[t])
                ));
            }
            by_key.entry(key).or_default().insert(version, t);
        }
    }
    Ok(by_key
        .into_iter()
        .map(|(k, m)| (k, m.into_iter().collect()))
        .collect())
}

/// The `wr` and `rw` edges of transaction `t`'s read `r`.
fn read_edges(
    txs: &[TxHist],
    t: usize,
    r: &TxStep,
    writer: &HashMap<(u64, u64), usize>,
    versions: &BTreeMap<u64, Vec<(u64, usize)>>,
    edges: &mut [HashSet<usize>],
) -> Result<(), String> {
    if let Some(v) = r.value {
        let Some(&w) = writer.get(&(r.key, v)) else {
            return Err(format!(
                "{} read value {v} of key {}, which no transaction wrote",
                name(&txs[t]),
                r.key
            ));
        };
        if w == t {
            return Ok(()); // its own write
        }
        if txs[w].outcome == TxOutcome::Aborted {
            return Err(format!(
                "G1a: {} read value {v} of key {}, written by {}, which aborted",
                name(&txs[t]),
                r.key,
                name(&txs[w])
            ));
        }
        edges[w].insert(t);
    }
    let chain = versions.get(&r.key).map_or(&[][..], Vec::as_slice);
    let next = chain.partition_point(|&(ver, _)| ver <= r.version);
    if let Some(&(_, w)) = chain[next..].iter().find(|&&(_, w)| w != t) {
        edges[t].insert(w);
    }
    Ok(())
}

/// A cycle among `nodes`, if the graph has one (Kahn's algorithm, then a
/// walk inside what it could not remove).
pub(crate) fn find_cycle(edges: &[HashSet<usize>], nodes: &[usize]) -> Option<Vec<usize>> {
    let member: HashSet<usize> = nodes.iter().copied().collect();
    let mut indeg: HashMap<usize, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    for &n in nodes {
        for m in edges[n].iter().filter(|m| member.contains(m)) {
            *indeg.get_mut(m).expect("a member") += 1;
        }
    }
    let mut ready: Vec<usize> = nodes.iter().copied().filter(|n| indeg[n] == 0).collect();
    while let Some(n) = ready.pop() {
        indeg.remove(&n);
        for m in &edges[n] {
            let Some(d) = indeg.get_mut(m) else { continue };
            *d -= 1;
            if *d == 0 {
                ready.push(*m);
            }
        }
    }
    let start = *indeg.keys().min()?;
    // Every node left has an in-edge from another node left: walk them
    // backwards until one repeats.
    let mut back: HashMap<usize, usize> = HashMap::new();
    for (&n, _) in indeg.iter() {
        for &m in edges[n].iter().filter(|m| indeg.contains_key(m)) {
            back.entry(m).or_insert(n);
        }
    }
    let (mut path, mut seen, mut at) = (Vec::new(), HashMap::new(), start);
    while !seen.contains_key(&at) {
        seen.insert(at, path.len());
        path.push(at);
        at = back[&at];
    }
    let mut cycle = path.split_off(seen[&at]);
    cycle.reverse();
    Some(cycle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(session: u64, outcome: TxOutcome, steps: &[(bool, u64, Option<u64>, u64)]) -> TxHist {
        TxHist {
            session,
            tx: 0,
            node: 0,
            invoke_ns: 0,
            complete_ns: Some(1),
            outcome,
            steps: steps
                .iter()
                .map(|&(write, key, value, version)| TxStep {
                    write,
                    key,
                    value,
                    version,
                })
                .collect(),
        }
    }

    use TxOutcome::*;

    #[test]
    fn transactions_in_version_order_pass() {
        let h = [
            tx(0, Committed, &[(false, 1, None, 0), (true, 1, Some(10), 1)]),
            tx(
                1,
                Committed,
                &[(false, 1, Some(10), 1), (true, 1, Some(11), 2)],
            ),
            tx(
                2,
                Committed,
                &[(false, 1, Some(11), 2), (false, 2, None, 0)],
            ),
            tx(3, Aborted, &[(true, 2, Some(20), 1)]),
        ];
        let s = check_serializable(&h).unwrap();
        assert_eq!(s.transactions, 3);
    }

    #[test]
    fn write_skew_is_a_cycle() {
        // Each read the initial version of the key the other then wrote.
        let h = [
            tx(0, Committed, &[(false, 1, None, 0), (true, 2, Some(20), 1)]),
            tx(1, Committed, &[(false, 2, None, 0), (true, 1, Some(10), 1)]),
        ];
        let e = check_serializable(&h).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
    }

    #[test]
    fn a_lost_update_is_a_cycle() {
        // Both read version 1 of key 1 and wrote the next ones.
        let h = [
            tx(0, Committed, &[(true, 1, Some(10), 1)]),
            tx(
                1,
                Committed,
                &[(false, 1, Some(10), 1), (true, 1, Some(11), 2)],
            ),
            tx(
                2,
                Committed,
                &[(false, 1, Some(10), 1), (true, 1, Some(12), 3)],
            ),
        ];
        let e = check_serializable(&h).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
    }

    #[test]
    fn reading_an_aborted_write_is_g1a() {
        let h = [
            tx(0, Aborted, &[(true, 1, Some(10), 1)]),
            tx(1, Committed, &[(false, 1, Some(10), 1)]),
        ];
        assert!(check_serializable(&h).unwrap_err().starts_with("G1a"));
    }

    #[test]
    fn an_unknown_transaction_counts_once_read() {
        // The unknown writer was read, so it committed: its read of the
        // initial version then orders it before tx 2's write of key 2.
        let h = [
            tx(0, Unknown, &[(false, 2, None, 0), (true, 1, Some(10), 1)]),
            tx(
                1,
                Committed,
                &[(false, 1, Some(10), 1), (true, 2, Some(20), 1)],
            ),
            tx(
                2,
                Committed,
                &[(false, 1, None, 0), (false, 2, Some(20), 1)],
            ),
        ];
        let e = check_serializable(&h).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
        let unread = [tx(0, Unknown, &[(true, 1, Some(10), 1)])];
        assert_eq!(check_serializable(&unread).unwrap().transactions, 0);
    }
}
