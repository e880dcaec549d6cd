//! Closed-loop client sessions against `tandem node` processes over TCP,
//! recording a history (crates/check's JSON lines) as they go. A session
//! whose node stops answering records its operation as unknown and moves
//! to the next node, as a real client would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_check::{HistOp, OpKind};
use tandem_net::client::Client;
use tandem_sim::Rng;

use crate::types::{Op, Reply};

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub nodes: Vec<SocketAddr>,
    pub secret: u64,
    pub sessions: u64,
    /// Session ids start here (unique across load generators).
    pub first_session: u64,
    pub keys: u64,
    pub read_ratio: f64,
    pub seed: u64,
    /// How long a call may take before its outcome counts as unknown.
    pub timeout: Duration,
}

/// A running load; `stop` ends it and returns the history.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<HistOp>>>,
    pub completed: Arc<AtomicU64>,
}

impl Load {
    pub fn start(cfg: &LoadConfig, epoch: Instant) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let threads = (0..cfg.sessions)
            .map(|i| {
                let (cfg, stop, done) = (cfg.clone(), stop.clone(), completed.clone());
                std::thread::spawn(move || session(&cfg, cfg.first_session + i, i as usize, epoch, &stop, &done))
            })
            .collect();
        Load { stop, threads, completed }
    }

    pub fn stop(self) -> Vec<HistOp> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().flat_map(|t| t.join().unwrap_or_default()).collect()
    }
}

fn session(cfg: &LoadConfig, id: u64, home: usize, epoch: Instant, stop: &AtomicBool, done: &AtomicU64) -> Vec<HistOp> {
    let mut rng = Rng::new(cfg.seed ^ id.wrapping_mul(0x9E37_79B9));
    let mut ops = Vec::new();
    let mut node = home % cfg.nodes.len();
    let mut client: Option<Client<Op, Reply>> = None;
    let mut n = 0u64;
    // The session's causal past (Causal models): every reply's update id.
    let mut past = crate::vector::Vector::default();
    while !stop.load(Ordering::Relaxed) {
        let c = match client.as_mut() {
            Some(c) => c,
            None => match Client::connect(cfg.nodes[node], cfg.secret, id, cfg.timeout) {
                Ok(c) => client.insert(c),
                Err(_) => {
                    node = (node + 1) % cfg.nodes.len();
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            },
        };
        n += 1;
        let key = rng.below(cfg.keys);
        let (op, kind) = if rng.chance(cfg.read_ratio) {
            (Op::Read { key, after: past.clone(), tx: None }, OpKind::Read { key, value: None })
        } else {
            let value = (id + 1) << 32 | n;
            (Op::Write { key, value, scope: 0, after: past.clone(), tx: None }, OpKind::Write { key, value })
        };
        let invoke_ns = epoch.elapsed().as_nanos() as u64;
        let mut h = HistOp { session: id, node: node as u16, kind, invoke_ns, complete_ns: None, ok: true };
        match c.call(op) {
            Ok(r) => {
                h.complete_ns = Some(epoch.elapsed().as_nanos() as u64);
                if let Reply::Read { id: Some(id), .. } | Reply::Written { id: Some(id), .. } = &r {
                    past.add(*id);
                }
                // Refused (a plain write under Transactional consistency): no effect.
                h.ok = !matches!(r, Reply::Error { .. } | Reply::Aborted { .. });
                if let (OpKind::Read { value, .. }, Reply::Read { value: v, .. }) = (&mut h.kind, r) {
                    *value = v;
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // Unknown outcome; try the next node.
                client = None;
                node = (node + 1) % cfg.nodes.len();
            }
        }
        ops.push(h);
    }
    ops
}
