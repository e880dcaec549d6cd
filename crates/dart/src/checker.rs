//! The strict-serializability history checker (thesis §2.5.1: Adya's DSG,
//! Def. 2.5.4, and the real-time serialization graph RSG, Def. 2.5.9–2.5.10).
//!
//! Nodes are committed transactions, plus every `unknown` transaction whose
//! write some included transaction read (it must have committed; unobserved
//! unknown transactions may have aborted and are left out, never assumed
//! absent for what they did write). Edges:
//! - `wr`: the reader of a version depends on its writer (writers are in the
//!   values, [`crate::value`]);
//! - `ww`: a version whose `prev` names the version it replaced follows it;
//! - `rw`: the reader of a version anti-depends on the writer of the next one;
//! - `rt`: a transaction that completed before another was invoked precedes
//!   it. Instead of n² edges, completions are threaded on a chain of time
//!   nodes: `T → τ(complete T) → τ(next) → … → U` iff `complete T < invoke U`.
//!
//! A write or delete that read the key first names the version it replaced
//! (a write in its value's `prev`, a delete in its op's `prev`), so both add
//! `ww` and `rw` edges. Blind writes carry no `prev` and add `wr` edges only:
//! every edge the checker adds is a real dependency (or a path of them), so a
//! reported cycle is a real one, but cycles through blind versions can be
//! missed (their tests rely on their assertions instead).
//!
//! Reported phenomena (Def. 2.5.6): G1a (a committed transaction read an
//! aborted one's write, or a value nobody wrote — a torn read), G1b (read a
//! non-final write), and per strongly connected component its weakest cycle:
//! G0 (ww only), G1c (ww/wr), G2 (with rw), or `-realtime` variants of G1c/G2
//! that need `rt` edges (strict serializability, Def. 2.5.10).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

use crate::history::{Outcome, TxRecord};
use crate::value::{Value, LOADER_TX};

/// Bound on anomalies reported per history.
pub const MAX_ANOMALIES: usize = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AnomalyKind {
    G0,
    G1a,
    G1b,
    G1c,
    G2,
    G1cRealtime,
    G2Realtime,
}

impl AnomalyKind {
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::G0 => "G0",
            AnomalyKind::G1a => "G1a",
            AnomalyKind::G1b => "G1b",
            AnomalyKind::G1c => "G1c",
            AnomalyKind::G2 => "G2",
            AnomalyKind::G1cRealtime => "G1c-realtime",
            AnomalyKind::G2Realtime => "G2-realtime",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One violation found in a history.
#[derive(Clone, Debug)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// Transactions involved (the example cycle, or reader and writer).
    pub txs: Vec<u64>,
    /// Keys on the example cycle's edges (or the key read).
    pub keys: Vec<u64>,
    pub description: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    Ww,
    Wr,
    Rw,
    Rt,
}

impl Edge {
    fn name(self) -> &'static str {
        match self {
            Edge::Ww => "ww",
            Edge::Wr => "wr",
            Edge::Rw => "rw",
            Edge::Rt => "rt",
        }
    }
}

/// What the checker found, and how big the graph was.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub anomalies: Vec<Anomaly>,
    /// Transactions in the graph.
    pub nodes: usize,
    pub edges: usize,
}

/// A transaction id as `c<client>.<seq>` when it follows DART's numbering.
pub fn fmt_tx(id: u64) -> String {
    if id == LOADER_TX {
        "init".into()
    } else if id >> 32 != 0 {
        format!("c{}.{}", (id >> 32) - 1, id & 0xFFFF_FFFF)
    } else {
        format!("t{id}")
    }
}

/// The graph: tx nodes `0..txs`, then time nodes.
struct Graph {
    adj: Vec<Vec<(u32, Edge, u64)>>,
    txs: usize,
    edges: usize,
}

impl Graph {
    fn add(&mut self, a: usize, b: usize, e: Edge, key: u64) {
        if a != b {
            self.adj[a].push((b as u32, e, key));
            self.edges += 1;
        }
    }
}

/// Strongly connected components (iterative Tarjan) of the sub-graph on
/// `nodes` (all nodes if `None`) whose edges pass `keep`. Only components
/// with more than one node are returned.
fn sccs(g: &Graph, nodes: Option<&HashSet<usize>>, keep: &dyn Fn(Edge) -> bool) -> Vec<Vec<usize>> {
    let n = g.adj.len();
    let inside = |v: usize| nodes.is_none_or(|s| s.contains(&v));
    let mut index = vec![u32::MAX; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0u32;
    let mut out = Vec::new();
    let roots: Vec<usize> = match nodes {
        Some(s) => {
            let mut v: Vec<usize> = s.iter().copied().collect();
            v.sort_unstable();
            v
        }
        None => (0..n).collect(),
    };
    for root in roots {
        if index[root] != u32::MAX {
            continue;
        }
        // (node, next edge position)
        let mut call: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = call.last_mut() {
            if let Some(&(w, e, _)) = g.adj[v].get(*pos) {
                *pos += 1;
                let w = w as usize;
                if !keep(e) || !inside(w) {
                    continue;
                }
                if index[w] == u32::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(parent, _)) = call.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    loop {
                        let w = stack.pop().expect("tarjan stack");
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        out.push(comp);
                    }
                }
            }
        }
    }
    out
}

/// A shortest cycle through `comp[0]` inside `comp`, over edges that pass `keep`.
fn example_cycle(
    g: &Graph,
    comp: &HashSet<usize>,
    start: usize,
    keep: &dyn Fn(Edge) -> bool,
) -> Vec<(usize, Edge, u64)> {
    let mut prev: HashMap<usize, (usize, Edge, u64)> = HashMap::new();
    let mut q = VecDeque::from([start]);
    while let Some(v) = q.pop_front() {
        for &(w, e, k) in &g.adj[v] {
            let w = w as usize;
            if !keep(e) || !comp.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![(v, e, k)];
                let mut cur = v;
                while cur != start {
                    let (p, pe, pk) = prev[&cur];
                    path.push((p, pe, pk));
                    cur = p;
                }
                path.reverse();
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = prev.entry(w) {
                slot.insert((v, e, k));
                q.push_back(w);
            }
        }
    }
    Vec::new()
}

/// One step of the classification: the phenomenon, its edge filter, and
/// whether time nodes (real-time edges) may take part.
type Rung<'a> = (AnomalyKind, &'a dyn Fn(Edge) -> bool, bool);

/// Checks a history for strict serializability.
pub struct Checker<'h> {
    history: &'h [TxRecord],
    by_id: HashMap<u64, usize>,
    anomalies: Vec<Anomaly>,
}

impl<'h> Checker<'h> {
    pub fn new(history: &'h [TxRecord]) -> Self {
        let by_id = history.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        Checker {
            history,
            by_id,
            anomalies: Vec::new(),
        }
    }

    /// Check `history` (convenience for `Checker::new(h).run()`).
    pub fn check(history: &[TxRecord]) -> CheckReport {
        Checker::new(history).run()
    }

    fn report(&mut self, kind: AnomalyKind, txs: Vec<u64>, keys: Vec<u64>, description: String) {
        if self.anomalies.len() < MAX_ANOMALIES {
            self.anomalies.push(Anomaly {
                kind,
                txs,
                keys,
                description,
            });
        }
    }

    /// The final value tx `w` wrote to `key`, and whether it wrote `v` at all.
    fn written(&self, w: usize, key: u64, v: &Value) -> (Option<Option<Value>>, bool) {
        let mut last = None;
        let mut any = false;
        for op in self.history[w]
            .ops
            .iter()
            .filter(|o| !o.is_read() && o.key == key)
        {
            last = Some(op.value);
            any |= op.value.as_ref() == Some(v);
        }
        (last, any)
    }

    /// Committed transactions, plus unknown ones an included one observed.
    /// Reports G1a/G1b on the way.
    fn included(&mut self) -> Vec<bool> {
        let h = self.history;
        let mut inc: Vec<bool> = h.iter().map(|t| t.outcome == Outcome::Committed).collect();
        let mut work: Vec<usize> = (0..h.len()).filter(|&i| inc[i]).collect();
        while let Some(r) = work.pop() {
            for op in h[r].ops.iter().filter(|o| o.is_read()) {
                let Some(v) = op.value else { continue };
                if v.writer == LOADER_TX || v.writer == h[r].id {
                    continue;
                }
                let Some(&w) = self.by_id.get(&v.writer) else {
                    self.report(
                        AnomalyKind::G1a,
                        vec![h[r].id],
                        vec![op.key],
                        format!("{} read key {} = {v:?}, which no transaction wrote (torn or garbage read)", fmt_tx(h[r].id), op.key),
                    );
                    continue;
                };
                let (last, any) = self.written(w, op.key, &v);
                match h[w].outcome {
                    Outcome::Aborted => {
                        self.report(
                            AnomalyKind::G1a,
                            vec![h[w].id, h[r].id],
                            vec![op.key],
                            format!(
                                "{} read key {} written by aborted {}",
                                fmt_tx(h[r].id),
                                op.key,
                                fmt_tx(h[w].id)
                            ),
                        );
                        continue;
                    }
                    Outcome::Unknown if !inc[w] => {
                        inc[w] = true;
                        work.push(w);
                    }
                    _ => {}
                }
                if last != Some(Some(v)) {
                    let (kind, what) = if any {
                        (AnomalyKind::G1b, "an intermediate write")
                    } else {
                        (
                            AnomalyKind::G1a,
                            "a value that transaction never wrote (torn read)",
                        )
                    };
                    self.report(
                        kind,
                        vec![h[w].id, h[r].id],
                        vec![op.key],
                        format!(
                            "{} read key {} = {v:?}: {what} of {}",
                            fmt_tx(h[r].id),
                            op.key,
                            fmt_tx(h[w].id)
                        ),
                    );
                }
            }
        }
        inc
    }

    fn build(&self, inc: &[bool]) -> (Graph, Vec<usize>) {
        let h = self.history;
        let nodes: Vec<usize> = (0..h.len()).filter(|&i| inc[i]).collect();
        let node_of: HashMap<u64, usize> = nodes
            .iter()
            .enumerate()
            .map(|(n, &i)| (h[i].id, n))
            .collect();
        // Real-time chain: one time node per completed included transaction.
        let mut done: Vec<(u64, usize)> = nodes
            .iter()
            .enumerate()
            .filter_map(|(n, &i)| {
                h[i].complete_ns
                    .filter(|_| h[i].outcome == Outcome::Committed)
                    .map(|c| (c, n))
            })
            .collect();
        done.sort_unstable();
        let txs = nodes.len();
        let mut g = Graph {
            adj: vec![Vec::new(); txs + done.len()],
            txs,
            edges: 0,
        };
        // (key, writer of the version replaced) -> transactions that replaced it.
        let mut succ: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
        for (n, &i) in nodes.iter().enumerate() {
            // The version each key's last write or delete replaced.
            let mut last: HashMap<u64, Option<u64>> = HashMap::new();
            for op in h[i].ops.iter().filter(|o| !o.is_read()) {
                last.insert(op.key, op.replaced());
            }
            for (key, prev) in last {
                if let Some(prev) = prev {
                    succ.entry((key, prev)).or_default().push(n);
                    if let Some(&p) = node_of.get(&prev) {
                        g.add(p, n, Edge::Ww, key);
                    }
                }
            }
        }
        for (n, &i) in nodes.iter().enumerate() {
            for op in h[i].ops.iter().filter(|o| o.is_read()) {
                let Some(v) = op.value else { continue };
                if v.writer == h[i].id {
                    continue;
                }
                if let Some(&w) = node_of.get(&v.writer) {
                    g.add(w, n, Edge::Wr, op.key);
                }
                for &u in succ
                    .get(&(op.key, v.writer))
                    .map(|s| s.as_slice())
                    .unwrap_or(&[])
                {
                    g.add(n, u, Edge::Rw, op.key);
                }
            }
        }
        for (k, &(_, n)) in done.iter().enumerate() {
            g.add(n, txs + k, Edge::Rt, 0);
            if k + 1 < done.len() {
                g.add(txs + k, txs + k + 1, Edge::Rt, 0);
            }
        }
        for (n, &i) in nodes.iter().enumerate() {
            // The latest completion strictly before this invocation.
            let k = done.partition_point(|&(c, _)| c < h[i].invoke_ns);
            if k > 0 {
                g.add(txs + k - 1, n, Edge::Rt, 0);
            }
        }
        (g, nodes)
    }

    pub fn run(mut self) -> CheckReport {
        let inc = self.included();
        let (g, nodes) = self.build(&inc);
        let h = self.history;
        let all = |_: Edge| true;
        for comp in sccs(&g, None, &all) {
            let comp: HashSet<usize> = comp.into_iter().collect();
            let ladder: [Rung<'_>; 5] = [
                (AnomalyKind::G0, &|e| e == Edge::Ww, false),
                (
                    AnomalyKind::G1c,
                    &|e| matches!(e, Edge::Ww | Edge::Wr),
                    false,
                ),
                (AnomalyKind::G2, &|e| e != Edge::Rt, false),
                (AnomalyKind::G1cRealtime, &|e| e != Edge::Rw, true),
                (AnomalyKind::G2Realtime, &all, true),
            ];
            for (kind, keep, with_time) in ladder {
                let sub: HashSet<usize> = comp
                    .iter()
                    .copied()
                    .filter(|&v| with_time || v < g.txs)
                    .collect();
                let Some(inner) = sccs(&g, Some(&sub), keep).into_iter().next() else {
                    continue;
                };
                let inner: HashSet<usize> = inner.into_iter().collect();
                let start = *inner
                    .iter()
                    .filter(|&&v| v < g.txs)
                    .min()
                    .expect("a cycle has a transaction");
                let cycle = example_cycle(&g, &inner, start, keep);
                let mut text = String::new();
                let (mut txs, mut keys) = (Vec::new(), Vec::new());
                for (v, e, k) in &cycle {
                    if *v < g.txs {
                        let id = h[nodes[*v]].id;
                        txs.push(id);
                        text += &fmt_tx(id);
                    }
                    // Runs of time nodes print as one rt edge.
                    match e {
                        Edge::Rt if *v >= g.txs => {}
                        Edge::Rt => text += " -rt-> ",
                        _ => {
                            keys.push(*k);
                            text += &format!(" -{}(key {k})-> ", e.name());
                        }
                    }
                }
                text += &fmt_tx(txs[0]);
                let size = comp.iter().filter(|&&v| v < g.txs).count();
                self.report(
                    kind,
                    txs,
                    keys,
                    format!("{kind} cycle among {size} transactions, e.g. {text}"),
                );
                break;
            }
        }
        CheckReport {
            nodes: g.txs,
            edges: g.edges,
            anomalies: self.anomalies,
        }
    }
}
