//! Strict serializability of a transactional history recorded by a client
//! outside the store, which sees values but no versions (a Redis client
//! running `MULTI`/`EXEC`). It relies on two rules the client keeps:
//! every written value is unique, and a transaction that writes a key
//! reads it first in the same transaction. Then each version names its
//! predecessor (the value its writer read), and the version order of a key
//! is a chain the checker rebuilds.
//!
//! The graph is Adya's serialization graph ([`crate::serial`]) with
//! real-time edges: a committed transaction that completed before another
//! was invoked precedes it. Real time enters through a chain of time
//! points, so the graph stays linear in the history's size. Transactions
//! whose outcome is unknown join when an included transaction read their
//! write; their reads are unknown, so their place in a key's chain is
//! inferred only when one place is possible, and otherwise their edges
//! into the chain are left out (a missed violation, never a false one).
//!
//! Violations: a read of a value nobody wrote, or that an aborted
//! transaction wrote (G1a); two committed writers of one version's
//! successor (a lost update); a cycle (G0, G1c, G2, or against real time).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::serial::{find_cycle, TxOutcome};

/// One transaction, as its client saw it (one line of the history).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTx {
    pub client: u64,
    pub invoke_ns: u64,
    #[serde(default)]
    pub complete_ns: Option<u64>,
    pub outcome: TxOutcome,
    /// What it read (`None`: absent); empty unless it committed.
    #[serde(default)]
    pub reads: Vec<(String, Option<String>)>,
    pub writes: Vec<(String, String)>,
}

/// What the check saw, when it passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StrictStats {
    pub transactions: usize,
    pub unknown_included: usize,
    pub edges: usize,
}

/// Check that `txs` is strictly serializable.
pub fn check_strict_serializable(txs: &[ClientTx]) -> Result<StrictStats, String> {
    let writer = writers(txs)?;
    let included = included(txs, &writer)?;
    let n = txs.len();
    let mut edges: Vec<HashSet<usize>> = vec![HashSet::new(); n];
    let chains = Chains::build(txs, &included, &writer)?;
    for &t in &included {
        for (k, v) in &txs[t].reads {
            read_edges(t, k, v.as_deref(), &writer, &chains, &mut edges);
        }
    }
    for &(w, next) in &chains.succ_of_writer {
        edges[w].insert(next);
    }
    let nodes = real_time(txs, &included, &mut edges);
    for (t, out) in edges.iter_mut().enumerate() {
        out.remove(&t);
    }
    if let Some(cycle) = find_cycle(&edges, &nodes) {
        let names: Vec<String> = cycle
            .iter()
            .filter(|&&t| t < n)
            .map(|&t| name(txs, t))
            .collect();
        return Err(format!(
            "not strictly serializable: a cycle of dependencies and real-time order: {}",
            names.join(" -> ")
        ));
    }
    Ok(StrictStats {
        transactions: included.len(),
        unknown_included: included
            .iter()
            .filter(|&&t| txs[t].outcome == TxOutcome::Unknown)
            .count(),
        edges: edges.iter().map(HashSet::len).sum(),
    })
}

fn name(txs: &[ClientTx], t: usize) -> String {
    let x = &txs[t];
    format!(
        "client {} tx at {} ns ({:?})",
        x.client, x.invoke_ns, x.outcome
    )
}

type Writers = HashMap<(String, String), usize>;

/// Each written (key, value) and its writer; a value written twice is a bad history.
fn writers(txs: &[ClientTx]) -> Result<Writers, String> {
    let mut w = HashMap::new();
    for (t, tx) in txs.iter().enumerate() {
        for (k, v) in &tx.writes {
            if let Some(o) = w.insert((k.clone(), v.clone()), t) {
                return Err(format!(
                    "bad history: {} and {} both write {v:?} to {k:?} (values must be unique)",
                    name(txs, o),
                    name(txs, t)
                ));
            }
        }
    }
    Ok(w)
}

/// The committed transactions, and the unknown ones an included one read.
fn included(txs: &[ClientTx], writer: &Writers) -> Result<Vec<usize>, String> {
    let mut inc: Vec<bool> = txs
        .iter()
        .map(|t| t.outcome == TxOutcome::Committed)
        .collect();
    let mut work: Vec<usize> = (0..txs.len()).filter(|&t| inc[t]).collect();
    while let Some(t) = work.pop() {
        for (k, v) in &txs[t].reads {
            let Some(v) = v else { continue };
            let Some(&w) = writer.get(&(k.clone(), v.clone())) else {
                return Err(format!(
                    "{} read {v:?} from {k:?}, which no transaction wrote",
                    name(txs, t)
                ));
            };
            match txs[w].outcome {
                TxOutcome::Aborted => {
                    return Err(format!(
                        "G1a: {} read {v:?} from {k:?}, written by {}, which was told it aborted",
                        name(txs, t),
                        name(txs, w)
                    ))
                }
                TxOutcome::Unknown if !inc[w] => {
                    inc[w] = true;
                    work.push(w);
                }
                _ => {}
            }
        }
    }
    Ok((0..txs.len()).filter(|&t| inc[t]).collect())
}

/// Per key, which included writer follows which version.
struct Chains {
    /// (key, value read or `None`) → the included writer that overwrote it.
    succ: HashMap<(String, Option<String>), usize>,
    /// writer → the writer of the next version of some key it wrote.
    succ_of_writer: Vec<(usize, usize)>,
}

impl Chains {
    fn build(txs: &[ClientTx], included: &[usize], writer: &Writers) -> Result<Chains, String> {
        let mut succ: HashMap<(String, Option<String>), usize> = HashMap::new();
        let mut heads: HashMap<String, Vec<usize>> = HashMap::new();
        for &t in included {
            for (k, _) in &txs[t].writes {
                let Some((_, prev)) = txs[t].reads.iter().find(|(rk, _)| rk == k) else {
                    match txs[t].outcome {
                        TxOutcome::Committed => {
                            return Err(format!(
                                "bad history: {} writes {k:?} without reading it first",
                                name(txs, t)
                            ))
                        }
                        _ => {
                            heads.entry(k.clone()).or_default().push(t);
                            continue;
                        }
                    }
                };
                if let Some(o) = succ.insert((k.clone(), prev.clone()), t) {
                    return Err(format!(
                        "lost update: {} and {} both overwrote {prev:?} of {k:?}",
                        name(txs, o),
                        name(txs, t)
                    ));
                }
            }
        }
        let mut chains = Chains {
            succ,
            succ_of_writer: Vec::new(),
        };
        for (k, hs) in heads {
            chains.place(txs, &k, &hs);
        }
        for ((k, prev), &t) in &chains.succ {
            if let Some(p) = prev {
                chains
                    .succ_of_writer
                    .push((writer[&(k.clone(), p.clone())], t));
            }
        }
        Ok(chains)
    }

    /// An unknown writer of `k` whose read is unknown: placed after the one
    /// version of `k` with no successor outside its own segment, if there
    /// is exactly one such and it is the only such writer.
    fn place(&mut self, txs: &[ClientTx], k: &str, heads: &[usize]) {
        let [h] = heads else { return };
        let value_of = |t: usize| {
            txs[t]
                .writes
                .iter()
                .find(|(wk, _)| wk == k)
                .map(|(_, v)| v.clone())
        };
        let mut own = HashSet::new();
        let mut at = value_of(*h);
        while let Some(v) = at {
            own.insert(v.clone());
            at = self
                .succ
                .get(&(k.to_string(), Some(v)))
                .and_then(|&t| value_of(t));
        }
        let mut tails = Vec::new();
        let mut at: Option<String> = None;
        loop {
            match self.succ.get(&(k.to_string(), at.clone())) {
                Some(&t) => at = value_of(t),
                None => break tails.push(at),
            }
        }
        if let [tail] = &tails[..] {
            if tail.as_ref().is_none_or(|v| !own.contains(v)) {
                self.succ.insert((k.to_string(), tail.clone()), *h);
            }
        }
    }
}

/// `t` read `v` of `k`: the writer of `v` precedes `t`; `t` precedes the
/// writer of the next version (unless that is `t`).
fn read_edges(
    t: usize,
    k: &str,
    v: Option<&str>,
    writer: &Writers,
    chains: &Chains,
    edges: &mut [HashSet<usize>],
) {
    if let Some(v) = v {
        let w = writer[&(k.to_string(), v.to_string())];
        edges[w].insert(t);
    }
    if let Some(&next) = chains.succ.get(&(k.to_string(), v.map(str::to_string))) {
        if next != t {
            edges[t].insert(next);
        }
    }
}

/// Real-time order through time points: committed `a` completes at a
/// point, every point leads to the next, and the last point before `b`'s
/// invocation leads to `b`. Returns every node (transactions and points).
fn real_time(txs: &[ClientTx], included: &[usize], edges: &mut Vec<HashSet<usize>>) -> Vec<usize> {
    let mut ends: Vec<(u64, usize)> = included
        .iter()
        .filter(|&&t| txs[t].outcome == TxOutcome::Committed)
        .filter_map(|&t| txs[t].complete_ns.map(|c| (c, t)))
        .collect();
    ends.sort_unstable();
    let base = edges.len();
    edges.resize(base + ends.len(), HashSet::new());
    for (i, &(_, t)) in ends.iter().enumerate() {
        edges[t].insert(base + i);
        if i + 1 < ends.len() {
            edges[base + i].insert(base + i + 1);
        }
    }
    for &b in included {
        let before = ends.partition_point(|&(c, _)| c < txs[b].invoke_ns);
        if before > 0 {
            edges[base + before - 1].insert(b);
        }
    }
    included
        .iter()
        .copied()
        .chain(base..base + ends.len())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(
        client: u64,
        at: (u64, u64),
        outcome: TxOutcome,
        reads: &[(&str, Option<&str>)],
        writes: &[(&str, &str)],
    ) -> ClientTx {
        ClientTx {
            client,
            invoke_ns: at.0,
            complete_ns: Some(at.1),
            outcome,
            reads: reads
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect(),
            writes: writes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
    use TxOutcome::*;

    #[test]
    fn a_serial_history_passes() {
        let h = [
            tx(
                1,
                (0, 10),
                Committed,
                &[("x", None), ("y", None)],
                &[("x", "1"), ("y", "2")],
            ),
            tx(2, (20, 30), Committed, &[("x", Some("1"))], &[("x", "3")]),
            tx(
                1,
                (40, 50),
                Committed,
                &[("x", Some("3")), ("y", Some("2"))],
                &[],
            ),
        ];
        assert_eq!(check_strict_serializable(&h).unwrap().transactions, 3);
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_caught() {
        // Serializable (reader first), but the write completed before the read began.
        let h = [
            tx(1, (0, 10), Committed, &[("x", None)], &[("x", "1")]),
            tx(2, (20, 30), Committed, &[("x", None)], &[]),
        ];
        let e = check_strict_serializable(&h).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
    }

    #[test]
    fn a_lost_update_and_a_read_skew_are_caught() {
        let lost = [
            tx(1, (0, 10), Committed, &[("x", None)], &[("x", "1")]),
            tx(2, (0, 10), Committed, &[("x", None)], &[("x", "2")]),
        ];
        assert!(check_strict_serializable(&lost)
            .unwrap_err()
            .contains("lost update"));
        // T2 moves x and y together; T3 sees the new x with the old y.
        let skew = [
            tx(
                1,
                (0, 10),
                Committed,
                &[("x", None), ("y", None)],
                &[("x", "1"), ("y", "2")],
            ),
            tx(
                2,
                (20, 40),
                Committed,
                &[("x", Some("1")), ("y", Some("2"))],
                &[("x", "3"), ("y", "4")],
            ),
            tx(
                3,
                (20, 40),
                Committed,
                &[("x", Some("3")), ("y", Some("2"))],
                &[],
            ),
        ];
        assert!(check_strict_serializable(&skew)
            .unwrap_err()
            .contains("cycle"));
    }

    #[test]
    fn reads_of_aborted_or_unwritten_values_are_caught_and_unknown_writes_may_be_read() {
        let g1a = [
            tx(1, (0, 10), Aborted, &[], &[("x", "1")]),
            tx(2, (20, 30), Committed, &[("x", Some("1"))], &[]),
        ];
        assert!(check_strict_serializable(&g1a).unwrap_err().contains("G1a"));
        let thin = [tx(2, (20, 30), Committed, &[("x", Some("9"))], &[])];
        assert!(check_strict_serializable(&thin)
            .unwrap_err()
            .contains("no transaction wrote"));
        // An in-doubt write that took effect, placed after the only tail.
        let mut unknown = tx(1, (12, 0), Unknown, &[], &[("x", "2")]);
        unknown.complete_ns = None;
        let h = [
            tx(1, (0, 10), Committed, &[("x", None)], &[("x", "1")]),
            unknown,
            tx(2, (20, 30), Committed, &[("x", Some("2"))], &[]),
            tx(3, (40, 50), Committed, &[("x", Some("1"))], &[]),
        ];
        // Client 3 read the overwritten value after client 2 saw the new one.
        assert!(check_strict_serializable(&h).unwrap_err().contains("cycle"));
        assert_eq!(
            check_strict_serializable(&h[..3]).unwrap().unknown_included,
            1
        );
    }
}
