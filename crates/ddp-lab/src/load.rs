//! Closed-loop client sessions against `tandem node` processes over TCP,
//! recording a history (crates/check's JSON lines) as they go. Each
//! session has one request outstanding, as the papers run them; one thread
//! drives up to [`SESSIONS_PER_DRIVER`] sessions over one stream per node
//! (`tandem_net::client::Mux`), so the load itself costs little CPU. A
//! session whose node stops answering records its operation as unknown
//! and moves to the next node, as a real client would.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_check::serial::{TxHist, TxOutcome, TxStep};
use tandem_check::{HistOp, OpKind};
use tandem_net::client::{Mux, MuxEvent};
use tandem_sim::Rng;

use tandem_ddp::ycsb_session::{SessionPlan, YcsbSession};
use tandem_ddp::{Op, Reply};

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub nodes: Vec<SocketAddr>,
    /// The client credential (and any others).
    pub keys: tandem_auth::Keyring,
    pub sessions: u64,
    /// Session ids start here (unique across load generators).
    pub first_session: u64,
    /// What each session asks (YCSB mix and key choice; scopes and
    /// transactions as the model needs them).
    pub plan: SessionPlan,
    pub seed: u64,
    /// How long a call may take before its outcome counts as unknown.
    pub timeout: Duration,
}

/// Sessions one driver thread carries.
pub const SESSIONS_PER_DRIVER: u64 = 128;

/// How long a session waits before trying another node it could not reach.
const RETRY_NS: u64 = 20_000_000;

/// A running load; `stop` ends it and returns the history.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<History>>,
    pub completed: Arc<AtomicU64>,
}

/// What a load's sessions did: their reads and writes outside
/// transactions, and their transactions (Transactional models).
#[derive(Default)]
pub struct History {
    pub ops: Vec<HistOp>,
    pub txs: Vec<TxHist>,
}

impl Load {
    pub fn start(cfg: &LoadConfig, epoch: Instant) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let drivers = cfg.sessions.div_ceil(SESSIONS_PER_DRIVER).max(1);
        let threads = (0..drivers)
            .map(|d| {
                let ids: Vec<u64> = (0..cfg.sessions).filter(|i| i % drivers == d).collect();
                let (cfg, stop, done) = (cfg.clone(), stop.clone(), completed.clone());
                std::thread::spawn(move || Driver::new(&cfg, &ids, epoch).run(&stop, &done))
            })
            .collect();
        Load {
            stop,
            threads,
            completed,
        }
    }

    pub fn stop(self) -> Vec<HistOp> {
        self.stop_all().ops
    }

    /// Stop, and return the transactions too.
    pub fn stop_all(self) -> History {
        self.stop.store(true, Ordering::Relaxed);
        let mut h = History::default();
        for t in self.threads {
            let part = t.join().unwrap_or_default();
            h.ops.extend(part.ops);
            h.txs.extend(part.txs);
        }
        h
    }
}

struct Session {
    id: u64,
    node: usize,
    rng: Rng,
    n: u64,
    ycsb: YcsbSession,
    next_req: u64,
    /// The call in flight: its request number, history entry and deadline.
    pending: Option<(u64, Option<HistOp>, u64)>,
    /// Do not call before this (after failing to reach a node).
    wake_at: u64,
    /// The transaction it is running, and what the call in flight asks of it.
    tx: Option<TxHist>,
    tx_call: Option<TxCall>,
}

/// A transactional call in flight.
#[derive(Clone, Copy)]
enum TxCall {
    Read(u64),
    Write(u64, u64),
    End,
}

struct Driver {
    cfg: LoadConfig,
    mux: Mux<Op, Reply>,
    sessions: Vec<Session>,
    by_id: HashMap<u64, usize>,
    epoch: Instant,
    ops: Vec<HistOp>,
    txs: Vec<TxHist>,
}

impl Driver {
    fn new(cfg: &LoadConfig, ids: &[u64], epoch: Instant) -> Driver {
        let sessions: Vec<Session> = ids
            .iter()
            .map(|&i| {
                let id = cfg.first_session + i;
                let rng = Rng::new(cfg.seed ^ id.wrapping_mul(0x9E37_79B9));
                Session {
                    id,
                    node: i as usize % cfg.nodes.len(),
                    rng,
                    n: 0,
                    ycsb: YcsbSession::default(),
                    next_req: 0,
                    pending: None,
                    wake_at: 0,
                    tx: None,
                    tx_call: None,
                }
            })
            .collect();
        let by_id = sessions
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id, i))
            .collect();
        let mux = Mux::new(cfg.nodes.clone(), cfg.keys.clone(), cfg.timeout)
            .expect("an event loop for the load");
        Driver {
            cfg: cfg.clone(),
            mux,
            sessions,
            by_id,
            epoch,
            ops: Vec::new(),
            txs: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn run(mut self, stop: &AtomicBool, done: &AtomicU64) -> History {
        let mut next_sweep = 0;
        while !stop.load(Ordering::Relaxed) {
            let now = self.now();
            if now >= next_sweep {
                self.expire(now);
                next_sweep = now + 5_000_000;
            }
            for i in 0..self.sessions.len() {
                if self.sessions[i].pending.is_none() && self.sessions[i].wake_at <= now {
                    self.call(i, now);
                }
            }
            self.round(done);
        }
        self.finish(done)
    }

    /// Write what is queued, then take the replies that arrived.
    fn round(&mut self, done: &AtomicU64) {
        let mut events = Vec::new();
        if self
            .mux
            .poll(Duration::from_millis(1), &mut events)
            .is_err()
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        for ev in events {
            self.on_event(ev, done);
        }
    }

    /// Stopped: no new calls; the calls in flight get up to the timeout to
    /// complete, so a history ends with outcomes, not unknowns.
    fn finish(mut self, done: &AtomicU64) -> History {
        let deadline = self.now() + self.cfg.timeout.as_nanos() as u64;
        while self.sessions.iter().any(|s| s.pending.is_some()) && self.now() < deadline {
            self.round(done);
        }
        let mut ops = self.ops;
        let mut txs = self.txs;
        for s in self.sessions {
            ops.extend(s.pending.and_then(|p| p.1));
            txs.extend(s.tx); // unanswered: its outcome is unknown
        }
        History { ops, txs }
    }

    /// Start session `i`'s next operation. Reads and writes outside
    /// transactions go into the history, transactions into their own
    /// (`History::txs`); scope persists do not.
    fn call(&mut self, i: usize, now: u64) {
        let timeout = self.cfg.timeout.as_nanos() as u64;
        let s = &mut self.sessions[i];
        s.n += 1;
        let op = s
            .ycsb
            .next_op(&self.cfg.plan, &mut s.rng, (s.id + 1) << 32 | s.n);
        let kind = match op {
            Op::Read { key, tx: None, .. } => Some(OpKind::Read { key, value: None }),
            Op::Write {
                key,
                value,
                tx: None,
                ..
            } => Some(OpKind::Write { key, value }),
            _ => None,
        };
        let call = self.tx_call(i, &op, now);
        let s = &mut self.sessions[i];
        s.tx_call = call;
        let req = s.next_req;
        s.next_req += 1;
        let h = kind.map(|kind| HistOp {
            session: s.id,
            node: s.node as u16,
            kind,
            invoke_ns: now,
            complete_ns: None,
            ok: true,
        });
        if self.mux.send(s.node, s.id, req, op).is_ok() {
            s.pending = Some((req, h, now + timeout));
        } else {
            // Never sent: no effect, nothing to record. Try the next node later.
            s.ycsb.on_reply(&self.cfg.plan, &Reply::Aborted { tx: 0 });
            s.node = (s.node + 1) % self.cfg.nodes.len();
            s.wake_at = now + RETRY_NS;
        }
    }

    /// What the transactional call `op` of session `i` asks; a `Begin`
    /// opens the session's transaction record (closing one it left).
    fn tx_call(&mut self, i: usize, op: &Op, now: u64) -> Option<TxCall> {
        let s = &mut self.sessions[i];
        match *op {
            Op::Begin { tx } => {
                self.txs.extend(s.tx.take());
                s.tx = Some(TxHist {
                    session: s.id,
                    tx,
                    node: s.node as u16,
                    invoke_ns: now,
                    complete_ns: None,
                    outcome: TxOutcome::Unknown,
                    steps: Vec::new(),
                });
                None
            }
            Op::Read {
                key, tx: Some(_), ..
            } => Some(TxCall::Read(key)),
            Op::Write {
                key,
                value,
                tx: Some(_),
                ..
            } => Some(TxCall::Write(key, value)),
            Op::End { .. } => Some(TxCall::End),
            _ => None,
        }
    }

    /// Session `i`'s transaction learns `r` (the answer to its call `c`).
    fn tx_reply(&mut self, i: usize, c: Option<TxCall>, r: &Reply, now: u64) {
        let s = &mut self.sessions[i];
        let Some(t) = s.tx.as_mut() else { return };
        let version = |ts: tandem_ddp::Ts| ts.version << 16 | u64::from(ts.node);
        let end = match (c, r) {
            (Some(TxCall::Read(key)), Reply::Read { value, ts, .. }) => {
                t.steps.push(TxStep {
                    write: false,
                    key,
                    value: *value,
                    version: version(*ts),
                });
                None
            }
            (Some(TxCall::Write(key, value)), Reply::Written { ts, .. }) => {
                t.steps.push(TxStep {
                    write: true,
                    key,
                    value: Some(value),
                    version: version(*ts),
                });
                None
            }
            (_, Reply::Committed { .. }) => Some(TxOutcome::Committed),
            (_, Reply::Aborted { .. }) => Some(TxOutcome::Aborted),
            (_, Reply::OutcomeUnknown { .. }) => Some(TxOutcome::Unknown),
            _ => None,
        };
        if let Some(outcome) = end {
            (t.outcome, t.complete_ns) = (outcome, Some(now));
            self.txs.extend(s.tx.take());
        }
    }

    fn on_event(&mut self, ev: MuxEvent<Reply>, done: &AtomicU64) {
        match ev {
            MuxEvent::Reply {
                session,
                req,
                result,
                ..
            } => {
                let Some(&i) = self.by_id.get(&session) else {
                    return;
                };
                if self.sessions[i]
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.0 == req)
                {
                    let now = self.now();
                    let n = self.complete(i, result, now);
                    done.fetch_add(n, Ordering::Relaxed);
                }
            }
            MuxEvent::Lost { node } => {
                for i in 0..self.sessions.len() {
                    if self.sessions[i].node == node && self.sessions[i].pending.is_some() {
                        self.give_up(i);
                    }
                }
            }
        }
    }

    /// Session `i`'s reply; returns the YCSB requests it completes.
    fn complete(&mut self, i: usize, r: Reply, now: u64) -> u64 {
        let call = self.sessions[i].tx_call.take();
        self.tx_reply(i, call, &r, now);
        let s = &mut self.sessions[i];
        let (_, h, _) = s.pending.take().expect("checked by the caller");
        let done = s.ycsb.on_reply(&self.cfg.plan, &r);
        let Some(mut h) = h else { return done };
        h.complete_ns = Some(now);
        // Refused (a plain write under Transactional consistency, or a past
        // lost): no effect.
        h.ok = !matches!(
            r,
            Reply::Error { .. } | Reply::Aborted { .. } | Reply::PastLost { .. }
        );
        if let (OpKind::Read { value, .. }, Reply::Read { value: v, .. }) = (&mut h.kind, r) {
            *value = v;
        }
        self.ops.push(h);
        done
    }

    /// Session `i`'s call has an unknown outcome; it moves to the next node.
    fn give_up(&mut self, i: usize) {
        let s = &mut self.sessions[i];
        // Its transaction's outcome is unknown (after End it may commit).
        s.tx_call = None;
        self.txs.extend(s.tx.take());
        if let Some((_, h, _)) = s.pending.take() {
            self.ops.extend(h);
            // An open transaction died with its coordinator's stream: restart it.
            s.ycsb.on_reply(&self.cfg.plan, &Reply::Aborted { tx: 0 });
        }
        s.node = (s.node + 1) % self.cfg.nodes.len();
    }

    fn expire(&mut self, now: u64) {
        for i in 0..self.sessions.len() {
            if self.sessions[i]
                .pending
                .as_ref()
                .is_some_and(|p| p.2 <= now)
            {
                self.give_up(i);
            }
        }
    }
}
