//! The transactional client and checks of [`super`] (what Transactional
//! consistency promises, and T-1, T-2, T-3; docs/DDP.md "Check labels"). Each
//! session runs transactions of one to four reads and writes (Begin,
//! operations, End) and restarts a squashed one with a new number. Checked:
//! every read returns a committed write (or the transaction's own) when it
//! returns (G1a); Init replies only once INITX is persisted everywhere (T-1,
//! Strict and Synch); End replies only once every member voted Prepared, i.e.
//! holds every write (T-2; Strict and Synch: has persisted them); no member
//! votes or ACKs before persisting what its vote promises (G1); the committed
//! transactions are serializable (a cycle in Adya's DSG of ww, wr and rw edges,
//! G1b reads); and after a whole-cluster crash every committed transaction is
//! recovered whole or not at all, completed ones whole under Strict and Synch
//! (T-3). Beyond the paper: T-4 (the API's promise), no transaction answered
//! `Aborted` commits; T-5, no transaction is decided both committed and
//! aborted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tandem_net::{Command, NodeId, Nvm, SessionId};
use tandem_sim::Rng;

use super::{nvm_ts, Rec, Run};
use crate::model::Persistency;
use crate::node::DdpNode;
use crate::types::{Key, Msg, Op, Record, Reply, Slot, Ts, TxAck, TxId, TxPhase, Value, Vote};

/// A session's transaction in progress.
#[derive(Clone, Debug)]
pub(super) struct Cur {
    pub id: TxId,
    /// (write?, key) per operation.
    plan: Vec<(bool, Key)>,
    pos: usize,
    scope: u64,
    begun: bool,
}

/// What the client saw of one transaction.
#[derive(Clone, Debug, Default)]
pub(super) struct TxLog {
    pub reads: Vec<(Key, Option<Value>)>,
    /// The last write of each key: its ts and value.
    pub writes: BTreeMap<Key, (Ts, Value)>,
    /// End answered Committed.
    pub completed: bool,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Txs {
    pub cur: Vec<Option<Cur>>,
    next_seq: Vec<u64>,
    next_value: Vec<u64>,
    pub log: BTreeMap<TxId, TxLog>,
    /// When each transaction was decided committed (its outcome sent, or
    /// its commit record found in an NVM at a crash).
    pub committed_at: HashMap<TxId, u64>,
    pub writer: HashMap<Value, TxId>,
    voted: HashSet<(NodeId, TxId)>,
    /// Per session: writes of its committed transactions in its open scope.
    scope_writes: Vec<u32>,
    pub crash_ns: Option<u64>,
    aborted: u64,
    /// End answered OutcomeUnknown.
    pub unknown: u64,
    /// Transactions some node decided (and sent) aborted.
    decided_abort: HashSet<TxId>,
    /// Transactions a client was told were squashed (Aborted).
    told_aborted: BTreeSet<TxId>,
    /// The transaction each request named: a node may answer a request
    /// its client gave up on, after the session began another one.
    pub of_req: HashMap<(SessionId, u64), TxId>,
}

impl Txs {
    /// Committed and answered, squashed, committed but not answered.
    pub fn counts(&self) -> (u64, u64, u64) {
        let done = self.log.values().filter(|l| l.completed).count() as u64;
        let unanswered = self
            .committed_at
            .keys()
            .filter(|id| self.log.get(id).is_some_and(|l| !l.completed))
            .count() as u64;
        (done, self.aborted, unanswered)
    }

    pub fn new(sessions: usize) -> Self {
        let z = vec![0; sessions];
        Txs {
            cur: vec![None; sessions],
            next_seq: z.clone(),
            next_value: z,
            scope_writes: vec![0; sessions],
            ..Txs::default()
        }
    }
}

impl Rec {
    /// Whether a write counts for its scope: under Trans, only the final
    /// writes of committed transactions do (what `Persist(s)` covers).
    pub(super) fn in_scope(&self, value: Value) -> bool {
        let Some(id) = self.txs.writer.get(&value) else {
            return true;
        };
        let last = self
            .txs
            .log
            .get(id)
            .is_some_and(|l| l.writes.values().any(|w| w.1 == value));
        last && self.txs.committed_at.contains_key(id)
    }

    fn durable(&self) -> bool {
        matches!(self.model.p, Persistency::Strict | Persistency::Synch)
    }

    /// The session's next operation: a Persist between transactions
    /// (Scope), a Begin, the next read or write, or End.
    pub(super) fn next_tx_op(&mut self, session: SessionId, rng: &mut Rng) -> Option<Op> {
        let s = session as usize;
        if self.txs.cur[s].is_none() {
            if self.left[s] == 0 {
                return None;
            }
            if self.model.p == Persistency::Scope && rng.chance(self.cfg.persist_ratio) {
                let (seq, writes) = (
                    self.scope[s].0,
                    std::mem::take(&mut self.txs.scope_writes[s]),
                );
                self.scope[s] = (seq + 1, 0);
                return Some(Op::Persist { scope: seq, writes });
            }
            let plan = (0..1 + rng.below(4))
                .map(|_| (!rng.chance(self.cfg.read_ratio), rng.below(self.cfg.keys)))
                .collect();
            self.start_tx(s, plan);
        }
        let cur = self.txs.cur[s].as_mut().expect("in a transaction");
        let (id, scope) = (cur.id, cur.scope);
        if !cur.begun {
            cur.begun = true;
            return Some(Op::Begin { tx: id.seq });
        }
        let Some(&(write, key)) = cur.plan.get(cur.pos) else {
            return Some(Op::End { tx: id.seq });
        };
        cur.pos += 1;
        self.left[s] = self.left[s].saturating_sub(1);
        if !write {
            return Some(Op::Read {
                key,
                after: Default::default(),
                tx: Some(id.seq),
            });
        }
        self.txs.next_value[s] += 1;
        let value = (session + 1) << 32 | 1 << 31 | self.txs.next_value[s];
        self.note_write(value, key, session, scope);
        self.txs.writer.insert(value, id);
        Some(Op::Write {
            key,
            value,
            scope,
            after: Default::default(),
            tx: Some(id.seq),
        })
    }

    fn start_tx(&mut self, s: usize, plan: Vec<(bool, Key)>) {
        let seq = self.txs.next_seq[s];
        self.txs.next_seq[s] += 1;
        let id = TxId {
            session: self.wire(s as SessionId),
            seq,
        };
        self.txs.log.insert(id, TxLog::default());
        self.txs.cur[s] = Some(Cur {
            id,
            plan,
            pos: 0,
            scope: self.scope[s].0,
            begun: false,
        });
    }

    /// A reply to the session's current transaction; `kind`: the read's or
    /// write's key (and a write's value), and the node it went to.
    pub(super) fn tx_completed(
        &mut self,
        session: SessionId,
        r: &Reply,
        kind: Option<(Key, Option<Value>, NodeId)>,
    ) {
        let s = session as usize;
        let Some(id) = self.txs.cur[s].as_ref().map(|c| c.id) else {
            return;
        };
        match r {
            Reply::Read { value, ts, .. } => {
                let Some((key, _, node)) = kind else { return };
                let log = self.txs.log.get_mut(&id).expect("logged");
                log.reads.push((key, *value));
                if !value.is_some_and(|x| self.txs.writer.get(&x) == Some(&id)) && *ts != Ts::ZERO {
                    self.reads.push((key, *ts, node));
                }
            }
            Reply::Written { ts, .. } => {
                let Some((key, Some(value), _)) = kind else {
                    return;
                };
                self.txs
                    .log
                    .get_mut(&id)
                    .expect("logged")
                    .writes
                    .insert(key, (*ts, value));
                self.writes.get_mut(&value).expect("a write").1 = Some(*ts);
            }
            Reply::Committed { .. } => {
                let log = self.txs.log.get_mut(&id).expect("logged");
                log.completed = true;
                self.acked
                    .extend(log.writes.iter().map(|(&k, &(ts, _))| (k, ts)));
                self.txs.scope_writes[s] += log.writes.len() as u32;
                self.txs.cur[s] = None;
            }
            Reply::Aborted { .. } => {
                self.txs.aborted += 1;
                self.txs.told_aborted.insert(id);
                self.restart(s);
            }
            // The client cannot tell: it runs the transaction again; the
            // first may still commit (then counted as committed unanswered).
            Reply::OutcomeUnknown { .. } => {
                self.txs.unknown += 1;
                self.restart(s);
            }
            _ => {}
        }
    }

    /// A squashed transaction runs again, with a new number (the client's
    /// restart policy), unless the session's budget is spent.
    fn restart(&mut self, s: usize) {
        let Some(cur) = self.txs.cur[s].take() else {
            return;
        };
        if self.left[s] > 0 {
            self.start_tx(s, cur.plan);
        }
    }
}

impl Rec {
    /// Protocol-trace checks of a step (G1 for votes and ACKs, outcomes).
    pub(super) fn tx_step(
        &mut self,
        node: NodeId,
        now: u64,
        c: &Command<DdpNode>,
        nvm: &[Nvm<Record>],
    ) {
        let msg = match c {
            Command::Send { msg, .. } | Command::Broadcast { msg } => msg,
            _ => return,
        };
        let mine = &nvm[node as usize];
        let phase = |id: &TxId| match mine.get(&Slot::Tx(*id)) {
            Some(Record::Tx { phase, .. }) => Some(*phase),
            _ => None,
        };
        match msg {
            Msg::TxOutcome {
                tx, commit: true, ..
            } => {
                self.txs.committed_at.entry(tx.id).or_insert(now);
                if self.txs.decided_abort.contains(&tx.id) {
                    self.violations.push(format!("T-5: node {node} sent commit for {:?}, which another decided aborted (t={now})", tx.id));
                }
            }
            Msg::TxOutcome {
                tx, commit: false, ..
            } => {
                self.txs.decided_abort.insert(tx.id);
                if self.txs.committed_at.contains_key(&tx.id) {
                    self.violations.push(format!("T-5: node {node} sent abort for {:?}, which another decided committed (t={now})", tx.id));
                }
            }
            Msg::TxInv { v, .. } => {
                if let Some(w) = self.writes.get_mut(&v.value) {
                    w.1 = Some(v.ts);
                }
            }
            Msg::TxAck {
                tx,
                ack: TxAck::Vote(Vote::Prepared),
                ..
            } => {
                self.txs.voted.insert((node, *tx));
                if self.durable() && phase(tx) < Some(TxPhase::Prepared) {
                    self.violations.push(format!("G1: node {node} voted Prepared for {tx:?} before persisting its writes (t={now})"));
                }
            }
            Msg::TxAck {
                tx,
                ack: TxAck::Init,
                ..
            } if self.durable()
                && phase(tx).is_none()
                && !self.txs.committed_at.contains_key(tx) =>
            {
                self.violations.push(format!(
                    "G1: node {node} ACKed INITX of {tx:?} before persisting it (t={now})"
                ));
            }
            Msg::TxAck {
                tx,
                ack: TxAck::Write { key, ts },
                ..
            } if self.model.p == Persistency::Strict => {
                let have = mine
                    .get(&Slot::Tx(*tx))
                    .and_then(|r| r.ts_of(*key, true))
                    .unwrap_or_default();
                if have < *ts && !self.txs.committed_at.contains_key(tx) {
                    self.violations.push(format!("G1: node {node} sent ACK_p for key {key} {ts:?} of {tx:?} before persisting it (t={now})"));
                }
            }
            _ => {}
        }
    }

    /// The checks of a reply (G1a, RP-1, T-1, S-1, T-2); false: not a
    /// transactional reply, the generic checks apply.
    pub(super) fn check_tx_reply(
        &mut self,
        node: NodeId,
        session: SessionId,
        req: u64,
        r: &Reply,
        nvm: &[Nvm<Record>],
        now: u64,
    ) -> bool {
        let Some(&id) = self.txs.of_req.get(&(session, req)) else {
            return false;
        };
        let members: Vec<NodeId> = self.configs[node as usize]
            .iter()
            .copied()
            .filter(|&m| self.steady[m as usize])
            .collect();
        match r {
            Reply::Read { value, ts, .. } => self.check_tx_read(node, id, *value, *ts, nvm, now),
            Reply::Begun { .. } if self.durable() => {
                if let Some(m) = members
                    .iter()
                    .find(|&&m| !nvm[m as usize].contains_key(&Slot::Tx(id)))
                {
                    self.violations.push(format!("T-1: Init of {id:?} answered by node {node} while node {m} had not persisted INITX (t={now})"));
                }
            }
            Reply::Written { ts, .. } if self.model.p == Persistency::Strict => {
                let Some(key) = self.index.get(&(session, req)).map(|&i| self.ops[i].key()) else {
                    return true;
                };
                if let Some(m) = members
                    .iter()
                    .find(|&&m| durable_ts(&nvm[m as usize], key, true) < *ts)
                {
                    self.violations.push(format!("S-1: write of key {key} {ts:?} in {id:?} answered by node {node} while node {m} had not persisted it (t={now})"));
                }
            }
            Reply::Committed { .. } => self.check_end(node, id, &members, nvm, now),
            _ => return false,
        }
        true
    }

    /// G1a: a read returns a committed write or its transaction's own;
    /// RP-1 (RE-p): a committed version persisted at every replica.
    fn check_tx_read(
        &mut self,
        node: NodeId,
        id: TxId,
        value: Option<Value>,
        ts: Ts,
        nvm: &[Nvm<Record>],
        now: u64,
    ) {
        let Some(x) = value else { return };
        let w = self.txs.writer.get(&x).copied();
        if w == Some(id) {
            return;
        }
        if let Some(w) = w.filter(|w| !self.txs.committed_at.contains_key(w)) {
            self.violations.push(format!("G1a: node {node} returned to {id:?} a write of {w:?} (ts {ts:?}), which had not committed (t={now})"));
            return;
        }
        if self.model.p == Persistency::Re {
            let key = self.writes[&x].0;
            self.everywhere(node, key, ts, nvm, "RP-1: read returned", now);
        }
    }

    /// T-2: End answered only once every member voted Prepared (Strict,
    /// Synch: with every write persisted there).
    fn check_end(
        &mut self,
        node: NodeId,
        id: TxId,
        members: &[NodeId],
        nvm: &[Nvm<Record>],
        now: u64,
    ) {
        let writes: Vec<(Key, Ts)> = self.txs.log[&id]
            .writes
            .iter()
            .map(|(&k, &(ts, _))| (k, ts))
            .collect();
        if writes.is_empty() {
            return;
        }
        for &m in members.iter().filter(|&&m| m != node) {
            if !self.txs.voted.contains(&(m, id)) {
                self.violations.push(format!("T-2: End of {id:?} answered by node {node} before node {m} voted Prepared (t={now})"));
                return;
            }
        }
        for &m in members {
            if let Some((k, ts)) = writes
                .iter()
                .find(|&&(k, ts)| self.durable() && tx_ts(&nvm[m as usize], id, k) < ts)
            {
                self.violations.push(format!("T-2: End of {id:?} answered by node {node} while node {m} had not persisted its write of key {k} {ts:?} (t={now})"));
                return;
            }
        }
    }
}

/// The newest version of `key` durable in `nvm`: its slot, committed
/// transactions (and, `prepared`, undecided ones).
pub(super) fn durable_ts(nvm: &Nvm<Record>, key: Key, prepared: bool) -> Ts {
    let txs = nvm
        .range(Slot::Tx(TxId::default())..)
        .filter_map(|(_, r)| r.ts_of(key, prepared));
    txs.max().unwrap_or_default().max(nvm_ts(nvm, key))
}

fn tx_ts(nvm: &Nvm<Record>, id: TxId, key: Key) -> Ts {
    nvm.get(&Slot::Tx(id))
        .and_then(|r| r.ts_of(key, true))
        .unwrap_or_default()
}

impl Run {
    /// At a whole-cluster crash: transactions whose commit record is in
    /// some NVM are committed (decided, though perhaps not answered).
    /// The transactions a commit record in some NVM makes durable across a
    /// whole-cluster crash: those of the nodes the recovery reads, not of
    /// `late`, which it goes without (a commit persisted at its decider
    /// alone, its End unanswered, may then go either way).
    pub(super) fn mark_durable_commits(&mut self, late: Option<NodeId>) {
        let now = self.net.now_ns();
        let mut rec = self.rec.borrow_mut();
        rec.txs.crash_ns = Some(now);
        for n in (0..self.cfg.nodes).filter(|&n| Some(n) != late) {
            for r in self.net.nvm(n).values() {
                if let Record::Tx {
                    tx,
                    phase: TxPhase::Committed,
                    ..
                } = r
                {
                    rec.txs.committed_at.entry(*tx).or_insert(now);
                }
            }
        }
    }

    /// No thin air, and the committed transactions are serializable (all
    /// of them under Strict and Synch, which keep them across a crash;
    /// else those committed before it).
    pub(super) fn check_tx_history(&mut self) {
        let rec = self.rec.borrow();
        let mut v = Vec::new();
        if let Err(e) = tandem_check::check_no_thin_air(&rec.ops) {
            v.push(format!("G2: {e}"));
        }
        let upto = rec.txs.crash_ns.filter(|_| !rec.durable());
        if let Err(e) = serializable(&rec.txs, upto) {
            v.push(e);
        }
        v.extend(aborted_but_committed(&rec.txs));
        drop(rec);
        self.report.violations.extend(v);
    }
}

/// A transaction answered `Aborted` takes no effect: none commits.
fn aborted_but_committed(txs: &Txs) -> Option<String> {
    let id = txs
        .told_aborted
        .iter()
        .find(|id| txs.committed_at.contains_key(id))?;
    Some(format!(
        "T-4: {id:?} was answered Aborted, yet it committed (t={})",
        txs.committed_at[id]
    ))
}

/// T-3 after a whole-cluster crash: no uncommitted write recovered, and no
/// committed transaction recovered in part.
pub(super) fn tx_recovery_violations(
    rec: &Rec,
    recovered: &BTreeMap<Key, (Ts, Option<Value>)>,
) -> Vec<String> {
    let at = |k: &Key| recovered.get(k).map_or(Ts::ZERO, |v| v.0);
    let mut v = Vec::new();
    for (k, (_, value)) in recovered {
        let w = value.and_then(|x| rec.txs.writer.get(&x));
        if let Some(w) = w.filter(|w| !rec.txs.committed_at.contains_key(w)) {
            v.push(format!(
                "T-3: key {k} recovered a write of {w:?}, which never committed"
            ));
        }
    }
    for (id, log) in rec
        .txs
        .log
        .iter()
        .filter(|(id, _)| rec.txs.committed_at.contains_key(id))
    {
        let present = log
            .writes
            .iter()
            .any(|(k, (_, x))| recovered.get(k).and_then(|r| r.1) == Some(*x));
        if let Some((k, (ts, _))) = log
            .writes
            .iter()
            .find(|(k, (ts, _))| present && at(k) < *ts)
        {
            v.push(format!("T-3: {id:?} survived in part: its write of key {k} {ts:?} is missing (recovered {:?})", at(k)));
        }
    }
    v.truncate(5);
    v
}

/// Adya's DSG over the committed transactions (committed before `upto`):
/// ww between consecutive versions of a key (timestamp order), wr from a
/// version's writer to its readers, rw from a reader to the writer of the
/// next version. A cycle, or a read of an uncommitted or intermediate
/// write, is a violation.
fn serializable(txs: &Txs, upto: Option<u64>) -> Result<(), String> {
    let committed: BTreeSet<TxId> = txs
        .committed_at
        .iter()
        .filter(|(_, &t)| upto.is_none_or(|u| t < u))
        .map(|(&id, _)| id)
        .collect();
    let versions = committed_versions(txs, &committed)?;
    let mut edges: Edges = committed.iter().map(|&id| (id, BTreeSet::new())).collect();
    for vs in versions.values() {
        vs.windows(2)
            .for_each(|w| add_edge(&mut edges, w[0].1, w[1].1));
    }
    for &id in &committed {
        for &(k, value) in txs
            .log
            .get(&id)
            .map(|l| l.reads.as_slice())
            .unwrap_or_default()
        {
            read_edges(txs, &committed, &versions, &mut edges, id, k, value)?;
        }
    }
    match cycle(&edges) {
        Some(c) => Err(format!("serializability: the committed transactions' DSG has a cycle through {} of them, e.g. {:?}", c.len(), &c[..c.len().min(4)])),
        None => Ok(()),
    }
}

type Edges = BTreeMap<TxId, BTreeSet<TxId>>;
type Versions = BTreeMap<Key, Vec<(Ts, TxId)>>;

fn add_edge(edges: &mut Edges, a: TxId, b: TxId) {
    if a != b {
        edges.entry(a).or_default().insert(b);
    }
}

/// Each key's committed versions in timestamp order (no two at one ts).
fn committed_versions(txs: &Txs, committed: &BTreeSet<TxId>) -> Result<Versions, String> {
    let mut versions = Versions::new();
    for id in committed {
        for (&k, &(ts, _)) in txs.log.get(id).map(|l| &l.writes).into_iter().flatten() {
            versions.entry(k).or_default().push((ts, *id));
        }
    }
    for (k, vs) in versions.iter_mut() {
        vs.sort();
        if let Some(w) = vs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(format!(
                "serializability: key {k} has two committed versions at {:?} ({:?}, {:?})",
                w[0].0, w[0].1, w[1].1
            ));
        }
    }
    Ok(versions)
}

/// The wr and rw edges of `id`'s read of `value` from key `k`.
fn read_edges(
    txs: &Txs,
    committed: &BTreeSet<TxId>,
    versions: &Versions,
    edges: &mut Edges,
    id: TxId,
    k: Key,
    value: Option<Value>,
) -> Result<(), String> {
    let vs = versions.get(&k).map(Vec::as_slice).unwrap_or_default();
    let pos = match value.map(|x| (x, txs.writer.get(&x).copied())) {
        None => None,
        Some((_, Some(w))) if w == id => return Ok(()),
        Some((x, Some(w))) => {
            let last = txs
                .log
                .get(&w)
                .and_then(|l| l.writes.get(&k))
                .filter(|f| f.1 == x && committed.contains(&w));
            let Some(&(ts, _)) = last else {
                return Err(format!("serializability (G1a/G1b): committed {id:?} read key {k} value {x} of {w:?}, not a committed final write"));
            };
            add_edge(edges, w, id);
            vs.iter().position(|v| v.0 == ts)
        }
        Some((x, None)) => {
            return Err(format!(
                "serializability: {id:?} read key {k} value {x}, which no transaction wrote"
            ))
        }
    };
    if let Some(&(_, n)) = vs.get(pos.map_or(0, |p| p + 1)) {
        add_edge(edges, id, n);
    }
    Ok(())
}

/// The transactions left on a cycle after removing every one without
/// predecessors (Kahn's algorithm); None if none is left.
fn cycle(edges: &BTreeMap<TxId, BTreeSet<TxId>>) -> Option<Vec<TxId>> {
    let mut indeg: BTreeMap<TxId, usize> = edges.keys().map(|&k| (k, 0)).collect();
    for b in edges.values().flatten() {
        *indeg.entry(*b).or_default() += 1;
    }
    let mut free: Vec<TxId> = indeg
        .iter()
        .filter(|(_, &d)| d == 0)
        .map(|(&k, _)| k)
        .collect();
    while let Some(a) = free.pop() {
        indeg.remove(&a);
        for b in edges.get(&a).into_iter().flatten() {
            if let Some(d) = indeg.get_mut(b) {
                *d -= 1;
                if *d == 0 {
                    free.push(*b);
                }
            }
        }
    }
    (!indeg.is_empty()).then(|| indeg.into_keys().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(
        txs: &mut Txs,
        session: u64,
        reads: &[(Key, Option<Value>)],
        writes: &[(Key, u64, Value)],
        at: u64,
    ) {
        let id = TxId { session, seq: 0 };
        let writes: BTreeMap<Key, (Ts, Value)> = writes
            .iter()
            .map(|&(k, v, x)| {
                (
                    k,
                    (
                        Ts {
                            version: v,
                            node: session as u16,
                        },
                        x,
                    ),
                )
            })
            .collect();
        for &(_, x) in writes.values() {
            txs.writer.insert(x, id);
        }
        txs.log.insert(
            id,
            TxLog {
                reads: reads.to_vec(),
                writes,
                completed: true,
            },
        );
        txs.committed_at.insert(id, at);
    }

    #[test]
    fn write_skew_is_a_cycle() {
        let mut txs = Txs::new(2);
        tx(&mut txs, 0, &[(1, None)], &[(2, 1, 20)], 10);
        tx(&mut txs, 1, &[(2, None)], &[(1, 1, 10)], 11);
        let e = serializable(&txs, None).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
    }

    #[test]
    fn serial_transactions_pass_and_dirty_reads_fail() {
        let mut txs = Txs::new(3);
        tx(&mut txs, 0, &[(1, None)], &[(1, 1, 10), (2, 1, 20)], 10);
        tx(
            &mut txs,
            1,
            &[(1, Some(10)), (2, Some(20))],
            &[(2, 2, 21)],
            11,
        );
        assert_eq!(serializable(&txs, None), Ok(()));
        // A reader of a transaction that never committed.
        txs.committed_at.remove(&TxId { session: 0, seq: 0 });
        assert!(serializable(&txs, None).unwrap_err().contains("G1a/G1b"));
    }
}
