//! Drives each session's data-structure program in the check harness and
//! checks the structures (invariants 18–19 of `tandem_check::rc`): a pop after the
//! session's own push never finds the structure empty; a popped node is
//! one pushed to that structure, with the data written, popped once; a
//! queue keeps each enqueuer's order; a list's final contents are what its
//! successful inserts and deletes leave, sorted; nothing is lost.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tandem_net::SessionId;
use tandem_sim::Rng;

use super::{list, node_id, queue, stack, Api, Chan, Lost};
use crate::simcheck::Workload;
use crate::types::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum LfdKind {
    /// Treiber stack: each session pushes, then pops, on a random stack.
    Stack,
    /// Michael–Scott queue: enqueue, then dequeue.
    Queue,
    /// Harris–Michael list: inserts and deletes of random elements.
    List,
}

impl LfdKind {
    pub const ALL: [LfdKind; 3] = [LfdKind::Stack, LfdKind::Queue, LfdKind::List];

    pub fn name(&self) -> &'static str {
        match self {
            LfdKind::Stack => "ts",
            LfdKind::Queue => "msq",
            LfdKind::List => "hml",
        }
    }

    pub fn parse(s: &str) -> Result<LfdKind, String> {
        LfdKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown data structure {s:?} (ts, msq, hml)"))
    }
}

/// One data-structure operation.
#[derive(Clone, Debug)]
pub struct LfdOp {
    pub session: SessionId,
    pub structure: u64,
    pub kind: LfdOpKind,
    pub invoke_ns: u64,
    pub complete_ns: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LfdOpKind {
    /// Push or enqueue of `node`.
    Push {
        node: u64,
    },
    /// Pop or dequeue: the node, or `None` (empty).
    Pop {
        node: Option<u64>,
    },
    Insert {
        elem: Value,
        ok: bool,
    },
    Delete {
        elem: Value,
        ok: bool,
    },
}

/// Every operation and what the inline checks found.
#[derive(Default)]
pub struct LfdLog {
    pub ops: Vec<LfdOp>,
    pub violations: Vec<String>,
    /// Node -> (structure, the data it was pushed with).
    pushed: BTreeMap<u64, (u64, Value)>,
    /// Node -> the op that popped it.
    popped: BTreeMap<u64, usize>,
}

impl LfdLog {
    fn start(&mut self, session: SessionId, structure: u64, kind: LfdOpKind, now: u64) -> usize {
        self.ops.push(LfdOp {
            session,
            structure,
            kind,
            invoke_ns: now,
            complete_ns: None,
        });
        self.ops.len() - 1
    }

    fn popped(&mut self, i: usize, got: Option<(u64, Vec<Value>)>, now: u64) {
        let op = &mut self.ops[i];
        op.complete_ns = Some(now);
        let (st, s) = (op.structure, op.session);
        let Some((node, data)) = got else {
            return self.violations.push(format!(
                "session {s}: structure {st} was empty after the session's own push"
            ));
        };
        op.kind = LfdOpKind::Pop { node: Some(node) };
        match self.pushed.get(&node) {
            None => self.violations.push(format!("structure {st}: node {node:#x} popped, never pushed")),
            Some(&(pst, meta)) if pst != st || data.iter().any(|&d| d != meta) => self
                .violations
                .push(format!("structure {st}: node {node:#x} pushed to {pst} with data {meta:#x}, popped with {data:x?}")),
            Some(_) => {}
        }
        if let Some(j) = self.popped.insert(node, i) {
            self.violations.push(format!(
                "structure {st}: node {node:#x} popped twice (ops {j} and {i})"
            ));
        }
    }
}

/// Deliberate bugs in the programs, for showing the checks catch them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LfdBug {
    /// Push/enqueue links the node before writing its data.
    PublishFirst,
    /// List delete unlinks without marking.
    UnlinkUnmarked,
}

type Program = Pin<Box<dyn Future<Output = ()>>>;

/// The [`Workload`] that runs data-structure programs.
pub struct LfdWorkload {
    pub kind: LfdKind,
    /// Structures of this kind (a session picks one at random per op).
    pub structures: u64,
    /// Data fields per node (the paper's -4 / -32).
    pub fields: u64,
    /// List elements are 1..=elems.
    pub elems: u64,
    /// Structure ids are `first..first + structures` (two workloads can
    /// share a store).
    pub first: u64,
    /// Sessions this workload runs (others get `None` at once).
    pub runs: fn(SessionId) -> bool,
    pub bug: Option<LfdBug>,
    seed: u64,
    chans: Vec<Rc<Chan>>,
    programs: Vec<Option<Program>>,
    stopping: Rc<Cell<bool>>,
    pub log: Rc<RefCell<LfdLog>>,
}

impl LfdWorkload {
    pub fn new(
        kind: LfdKind,
        structures: u64,
        fields: u64,
        sessions: u64,
        seed: u64,
    ) -> LfdWorkload {
        let n = sessions as usize;
        LfdWorkload {
            kind,
            structures,
            fields,
            elems: 16,
            first: 0,
            runs: |_| true,
            bug: None,
            seed,
            chans: (0..n).map(|_| Rc::new(Chan::default())).collect(),
            programs: (0..n).map(|_| None).collect(),
            stopping: Rc::new(Cell::new(false)),
            log: Rc::default(),
        }
    }

    fn program(&self, s: SessionId) -> Program {
        let api = Api(self.chans[s as usize].clone());
        let ctx = Ctx {
            kind: self.kind,
            structures: self.structures,
            fields: self.fields,
            elems: self.elems,
            first: self.first,
            bug: self.bug,
            stopping: self.stopping.clone(),
            log: self.log.clone(),
        };
        let rng = Rng::new(self.seed ^ (s + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Box::pin(session(ctx, api, s, rng))
    }
}

struct Ctx {
    kind: LfdKind,
    structures: u64,
    fields: u64,
    elems: u64,
    first: u64,
    bug: Option<LfdBug>,
    stopping: Rc<Cell<bool>>,
    log: Rc<RefCell<LfdLog>>,
}

async fn session(c: Ctx, api: Api, s: SessionId, mut rng: Rng) {
    let mut count = 0;
    while !c.stopping.get() {
        let st = c.first + rng.below(c.structures);
        count += 1;
        match c.kind {
            LfdKind::List => list_op(&c, &api, s, st, node_id(s, count), &mut rng).await,
            _ => push_pop(&c, &api, s, st, count).await,
        }
    }
}

async fn push_pop(c: &Ctx, api: &Api, s: SessionId, st: u64, count: u64) {
    let (node, meta) = (node_id(s, count), (st << 48) | (s << 24) | count);
    let i = c
        .log
        .borrow_mut()
        .start(s, st, LfdOpKind::Push { node }, api.now());
    c.log.borrow_mut().pushed.insert(node, (st, meta));
    let first = c.bug == Some(LfdBug::PublishFirst);
    let fields = if first { 0 } else { c.fields };
    let mut pushed = match c.kind {
        LfdKind::Stack => stack::push(api, st, node, meta, fields).await,
        _ => queue::enqueue(api, st, node, meta, fields).await,
    };
    if first && pushed.is_ok() {
        pushed = write_fields(api, c.kind, st, node, meta, c.fields).await;
    }
    if pushed.is_err() {
        return; // lost with its node: outcome unknown
    }
    c.log.borrow_mut().ops[i].complete_ns = Some(api.now());
    let j = c
        .log
        .borrow_mut()
        .start(s, st, LfdOpKind::Pop { node: None }, api.now());
    let got = match c.kind {
        LfdKind::Stack => stack::pop(api, st, c.fields).await,
        _ => queue::dequeue(api, st, c.fields).await,
    };
    if let Ok(got) = got {
        c.log.borrow_mut().popped(j, got, api.now());
    }
}

async fn write_fields(
    api: &Api,
    kind: LfdKind,
    st: u64,
    node: u64,
    meta: Value,
    fields: u64,
) -> Result<(), Lost> {
    let base = if kind == LfdKind::Stack {
        stack::top(st)
    } else {
        queue::dummy(st)
    };
    for f in 1..=fields {
        api.write(super::field(base, node, f), meta).await?;
    }
    Ok(())
}

async fn list_op(c: &Ctx, api: &Api, s: SessionId, l: u64, node: u64, rng: &mut Rng) {
    let elem = 1 + rng.below(c.elems);
    let insert = rng.chance(0.5);
    let kind = if insert {
        LfdOpKind::Insert { elem, ok: false }
    } else {
        LfdOpKind::Delete { elem, ok: false }
    };
    let i = c.log.borrow_mut().start(s, l, kind, api.now());
    let r: Result<bool, Lost> = match insert {
        true => list::insert(api, l, elem, node, node, c.fields).await,
        false if c.bug == Some(LfdBug::UnlinkUnmarked) => list::delete_unmarked(api, l, elem).await,
        false => list::delete(api, l, elem).await,
    };
    if let Ok(ok) = r {
        let mut log = c.log.borrow_mut();
        log.ops[i].complete_ns = Some(api.now());
        log.ops[i].kind = if insert {
            LfdOpKind::Insert { elem, ok }
        } else {
            LfdOpKind::Delete { elem, ok }
        };
    }
}

impl Workload for LfdWorkload {
    fn next(&mut self, s: SessionId, now: u64, _rng: &mut Rng) -> Option<Op> {
        if !(self.runs)(s) {
            return None;
        }
        let chan = self.chans[s as usize].clone();
        chan.now.set(now);
        if self.programs[s as usize].is_none() {
            self.programs[s as usize] = Some(self.program(s));
        }
        let program = self.programs[s as usize].as_mut()?;
        let mut cx = Context::from_waker(Waker::noop());
        match program.as_mut().poll(&mut cx) {
            Poll::Ready(()) => {
                self.programs[s as usize] = None;
                self.chans[s as usize] = Rc::new(Chan::default());
                None
            }
            Poll::Pending => Some(chan.op.take().expect("a pending program waits for a call")),
        }
    }

    fn done(&mut self, s: SessionId, reply: &Reply, now: u64) {
        let chan = &self.chans[s as usize];
        chan.reply.set(Some(Ok(*reply)));
        chan.now.set(now);
    }

    fn lost(&mut self, s: SessionId, now: u64) {
        let chan = &self.chans[s as usize];
        chan.reply.set(Some(Err(Lost)));
        chan.now.set(now);
    }

    fn stop(&mut self) {
        self.stopping.set(true);
    }

    fn verify(&self, state: &dyn Fn(Key) -> Value) -> Result<String, String> {
        let log = self.log.borrow();
        if let Some(v) = log.violations.first() {
            return Err(format!(
                "{} (and {} more data-structure violations)",
                v,
                log.violations.len() - 1
            ));
        }
        let summary = match self.kind {
            LfdKind::List => self.verify_lists(&log, state)?,
            _ => self.verify_pushes(&log, state)?,
        };
        Ok(summary)
    }
}

impl LfdWorkload {
    /// Stacks and queues: every completed push is popped or still there,
    /// nothing there was popped or never pushed; queues keep each
    /// enqueuer's order.
    fn verify_pushes(&self, log: &LfdLog, state: &dyn Fn(Key) -> Value) -> Result<String, String> {
        let limit = log.ops.len() + 1;
        let mut present = BTreeSet::new();
        for st in self.first..self.first + self.structures {
            let ids = match self.kind {
                LfdKind::Stack => stack::walk(st, state, limit)?,
                _ => queue::walk(st, state, limit)?,
            };
            for id in ids {
                if log.popped.contains_key(&id) || log.pushed.get(&id).map(|p| p.0) != Some(st) {
                    return Err(format!("structure {st}: node {id:#x} is there but was popped or never pushed to it"));
                }
                present.insert(id);
            }
        }
        let pending_pop = log
            .ops
            .iter()
            .any(|o| o.complete_ns.is_none() && matches!(o.kind, LfdOpKind::Pop { .. }));
        let done_pushes = log
            .ops
            .iter()
            .filter(|o| o.complete_ns.is_some() && matches!(o.kind, LfdOpKind::Push { .. }));
        for o in done_pushes {
            let LfdOpKind::Push { node } = o.kind else {
                continue;
            };
            if !pending_pop && !present.contains(&node) && !log.popped.contains_key(&node) {
                return Err(format!(
                    "structure {}: node {node:#x} was pushed and is lost",
                    o.structure
                ));
            }
        }
        if self.kind == LfdKind::Queue {
            fifo(log)?;
        }
        Ok(format!(
            "{} ops, {} nodes left",
            log.ops.len(),
            present.len()
        ))
    }

    /// Lists: sorted, and each element there iff its successful inserts
    /// outnumber its successful deletes (by one at most).
    fn verify_lists(&self, log: &LfdLog, state: &dyn Fn(Key) -> Value) -> Result<String, String> {
        let limit = log.ops.len() + 2;
        for l in self.first..self.first + self.structures {
            let elems = list::walk(l, state, limit)?;
            if elems.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("list {l} is not strictly sorted: {elems:?}"));
            }
            let ops: Vec<&LfdOp> = log.ops.iter().filter(|o| o.structure == l).collect();
            if ops.iter().any(|o| o.complete_ns.is_none()) {
                continue; // an operation's outcome is unknown
            }
            for e in 1..=self.elems {
                let net = net_inserts(&ops, e);
                if net != elems.contains(&e) as i64 {
                    return Err(format!("list {l}: element {e} present={}, but successful inserts - deletes = {net}", elems.contains(&e)));
                }
            }
        }
        Ok(format!("{} ops", log.ops.len()))
    }
}

fn net_inserts(ops: &[&LfdOp], e: Value) -> i64 {
    ops.iter()
        .map(|o| match o.kind {
            LfdOpKind::Insert { elem, ok: true } if elem == e => 1,
            LfdOpKind::Delete { elem, ok: true } if elem == e => -1,
            _ => 0,
        })
        .sum()
}

/// A queue keeps each enqueuer's order: of two of its nodes, the later one
/// is not dequeued entirely before the earlier one's dequeue starts.
fn fifo(log: &LfdLog) -> Result<(), String> {
    let deq: BTreeMap<u64, &LfdOp> = log.popped.iter().map(|(&n, &i)| (n, &log.ops[i])).collect();
    let mut by_enqueuer: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for (&node, &(st, _)) in &log.pushed {
        by_enqueuer.entry((st, node >> 24)).or_default().push(node);
    }
    for nodes in by_enqueuer.values() {
        let mut earliest_later_done = u64::MAX;
        for &n in nodes.iter().rev() {
            let Some(d) = deq.get(&n) else { continue };
            if earliest_later_done < d.invoke_ns {
                return Err(format!(
                    "queue {}: node {n:#x} dequeued after a node its enqueuer enqueued later",
                    d.structure
                ));
            }
            earliest_later_done = earliest_later_done.min(d.complete_ns.unwrap_or(u64::MAX));
        }
    }
    Ok(())
}

/// Two workloads on one store: even sessions run `a`, odd ones `b`.
pub struct Both(pub LfdWorkload, pub LfdWorkload);

impl Workload for Both {
    fn next(&mut self, s: SessionId, now: u64, rng: &mut Rng) -> Option<Op> {
        if s % 2 == 0 {
            self.0.next(s, now, rng)
        } else {
            self.1.next(s, now, rng)
        }
    }
    fn done(&mut self, s: SessionId, reply: &Reply, now: u64) {
        if s % 2 == 0 {
            self.0.done(s, reply, now)
        } else {
            self.1.done(s, reply, now)
        }
    }
    fn lost(&mut self, s: SessionId, now: u64) {
        if s % 2 == 0 {
            self.0.lost(s, now)
        } else {
            self.1.lost(s, now)
        }
    }
    fn stop(&mut self) {
        self.0.stop();
        self.1.stop();
    }
    fn verify(&self, state: &dyn Fn(Key) -> Value) -> Result<String, String> {
        Ok(format!(
            "{}; {}",
            self.0.verify(state)?,
            self.1.verify(state)?
        ))
    }
}
