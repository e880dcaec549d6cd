//! The deterministic backend: memory nodes driven by the seeded simulator.
//!
//! Each verb executes as a simulator event after a seeded delay. Verbs on one
//! queue pair keep their posting order; verbs on different queue pairs
//! interleave freely. With `tear_reads` on, a read longer than 8 bytes runs as
//! several events, one per 8-byte word, so concurrent writes land in between.
//! Verbs posted by a compute node that then crashes stay in the event queue and
//! execute, unless its access has been revoked by then (docs/DESIGN.md §3).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use tandem_sim::{oneshot, OneshotReceiver, SimHandle};

use crate::memory::{Fenced, MemoryNode, RegionKey};
use crate::verb::{
    Batch, Bytes, Completion, Completions, ComputeNodeId, MemNodeId, Verb, VerbError, VerbOutput,
};
use crate::{Fabric, QueuePair};

/// Latency and fault knobs of the simulated network.
#[derive(Clone, Debug)]
pub struct SimFabricConfig {
    /// One-way delay of a verb, drawn uniformly per verb.
    pub delay_ns_min: u64,
    pub delay_ns_max: u64,
    /// Execute reads longer than 8 bytes one word at a time, with gaps.
    pub tear_reads: bool,
    /// Largest gap between two words of a torn read or write.
    pub tear_gap_ns_max: u64,
    /// Execute writes longer than 8 bytes one word at a time (ascending), with
    /// gaps, so a crash or a concurrent reader can see a half-written record.
    pub tear_writes: bool,
}

impl Default for SimFabricConfig {
    fn default() -> Self {
        SimFabricConfig {
            delay_ns_min: 500,
            delay_ns_max: 3_000,
            tear_reads: true,
            tear_gap_ns_max: 400,
            tear_writes: true,
        }
    }
}

impl SimFabricConfig {
    /// No delay variance and no tearing: every verb takes exactly `delay_ns`.
    pub fn fixed(delay_ns: u64) -> Self {
        SimFabricConfig {
            delay_ns_min: delay_ns,
            delay_ns_max: delay_ns,
            tear_reads: false,
            tear_gap_ns_max: 0,
            tear_writes: false,
        }
    }
}

struct Net {
    sim: SimHandle,
    nodes: Vec<Arc<MemoryNode>>,
    config: SimFabricConfig,
    /// Links cut while both ends live: (compute node, memory node).
    cut: RefCell<Vec<(ComputeNodeId, MemNodeId)>>,
}

/// Where a queue pair's verbs execute: its memory node, as its compute
/// node with its key, unless their link is cut.
#[derive(Clone)]
struct Target {
    net: Rc<Net>,
    mem: MemNodeId,
    compute: ComputeNodeId,
    key: RegionKey,
}

impl Target {
    fn node(&self) -> &MemoryNode {
        &self.net.nodes[self.mem as usize]
    }

    /// A verb on a cut link fails as a reset connection's verbs do.
    fn execute(&self, verb: &Verb) -> Completion {
        if self.net.cut.borrow().contains(&(self.compute, self.mem)) {
            return Err(VerbError::Unavailable);
        }
        self.node().execute(self.compute, self.key, verb)
    }

    fn size_bytes(&self) -> u64 {
        self.node().size_bytes()
    }
}

/// The memory nodes of a simulated cluster, plus its network model.
#[derive(Clone)]
pub struct SimCluster {
    net: Rc<Net>,
}

impl SimCluster {
    pub fn new(sim: SimHandle, nodes: Vec<Arc<MemoryNode>>, config: SimFabricConfig) -> Self {
        SimCluster {
            net: Rc::new(Net {
                sim,
                nodes,
                config,
                cut: RefCell::default(),
            }),
        }
    }

    pub fn with_nodes(
        sim: SimHandle,
        count: usize,
        size_bytes: u64,
        config: SimFabricConfig,
    ) -> Self {
        // Region keys come from the OS now; the draw that salted them stays,
        // so every seed replays the runs it replayed before.
        let _ = sim.with_rng(|r| r.next_u64());
        let nodes = (0..count)
            .map(|_| Arc::new(MemoryNode::new(size_bytes)))
            .collect();
        Self::new(sim, nodes, config)
    }

    pub fn nodes(&self) -> &[Arc<MemoryNode>] {
        &self.net.nodes
    }

    pub fn sim(&self) -> &SimHandle {
        &self.net.sim
    }

    /// Register `compute` on every memory node and hand out its fabric handle.
    /// A revoked incarnation is refused ([`Fenced`]) on every node.
    pub fn join(&self, compute: ComputeNodeId) -> Result<SimFabric, Fenced> {
        let keys = self
            .net
            .nodes
            .iter()
            .map(|n| n.register(compute))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SimFabric {
            net: self.net.clone(),
            compute,
            keys: Rc::new(keys),
        })
    }

    /// A fabric handle from keys registered one memory node at a time
    /// (`MemoryNode::register`), so a simulation can let registration and
    /// revocation interleave as messages would.
    pub fn connect(&self, compute: ComputeNodeId, keys: Vec<RegionKey>) -> SimFabric {
        assert_eq!(keys.len(), self.net.nodes.len(), "one key per memory node");
        SimFabric {
            net: self.net.clone(),
            compute,
            keys: Rc::new(keys),
        }
    }

    /// Cut the link between compute node `compute` and memory node `mem`,
    /// both alive: from now on its verbs fail with `Unavailable`, those in
    /// flight included, as over a connection reset by a middlebox or ended
    /// by a silence bound. The memory node serves everyone else.
    pub fn cut_link(&self, compute: ComputeNodeId, mem: MemNodeId) {
        self.net.cut.borrow_mut().push((compute, mem));
    }

    /// Active-link termination of `compute` on every memory node.
    pub fn revoke(&self, compute: ComputeNodeId) {
        for n in &self.net.nodes {
            n.revoke(compute);
        }
    }
}

#[derive(Clone)]
pub struct SimFabric {
    net: Rc<Net>,
    compute: ComputeNodeId,
    keys: Rc<Vec<RegionKey>>,
}

#[derive(Clone)]
pub struct SimQp {
    net: Rc<Net>,
    mem: MemNodeId,
    compute: ComputeNodeId,
    key: RegionKey,
    /// Execution time of the last verb posted here: later verbs execute after it.
    last_exec_ns: Rc<Cell<u64>>,
    /// Completion time of the last batch: completions arrive in posting order.
    last_done_ns: Rc<Cell<u64>>,
}

impl Fabric for SimFabric {
    type Qp = SimQp;
    fn queue_pair(&self, mem: MemNodeId) -> SimQp {
        SimQp {
            net: self.net.clone(),
            mem,
            compute: self.compute,
            key: self.keys[mem as usize],
            last_exec_ns: Rc::new(Cell::new(0)),
            last_done_ns: Rc::new(Cell::new(0)),
        }
    }
    fn memory_nodes(&self) -> usize {
        self.net.nodes.len()
    }
    fn compute_node(&self) -> ComputeNodeId {
        self.compute
    }
}

type Results = Rc<RefCell<Vec<Option<Completion>>>>;

impl SimQp {
    fn target(&self) -> Target {
        Target {
            net: self.net.clone(),
            mem: self.mem,
            compute: self.compute,
            key: self.key,
        }
    }

    fn delay(&self) -> u64 {
        let c = &self.net.config;
        self.net
            .sim
            .with_rng(|r| r.range_inclusive(c.delay_ns_min, c.delay_ns_max.max(c.delay_ns_min)))
    }

    /// Schedule a torn read: one event per 8-byte word, starting at `t`.
    /// Returns the time of the last word.
    fn schedule_torn_read(
        &self,
        mut t: u64,
        addr: u64,
        len: u32,
        idx: usize,
        results: &Results,
    ) -> u64 {
        let node = self.target();
        let buf: Rc<RefCell<Result<Bytes, VerbError>>> =
            Rc::new(RefCell::new(Ok(Bytes::with_capacity(len as usize))));
        let end = addr.saturating_add(len as u64);
        let mut a = addr;
        while a < end {
            let next = ((a / 8) + 1) * 8;
            let chunk_end = next.min(end);
            let last = chunk_end == end;
            let (node, buf, results) = (node.clone(), buf.clone(), results.clone());
            let (ca, clen) = (a, (chunk_end - a) as u32);
            self.net.sim.schedule_at(t, move || {
                let mut b = buf.borrow_mut();
                if let Ok(bytes) = b.as_mut() {
                    match node.execute(&Verb::read(ca, clen)) {
                        Ok(out) => bytes.extend_from_slice(&out.into_bytes()),
                        Err(e) => *b = Err(e),
                    }
                }
                if last {
                    let r = std::mem::replace(&mut *b, Ok(Bytes::new()));
                    results.borrow_mut()[idx] = Some(r.map(VerbOutput::Read));
                }
            });
            a = chunk_end;
            if !last {
                t += 1 + self
                    .net
                    .sim
                    .with_rng(|r| r.below(self.net.config.tear_gap_ns_max + 1));
            }
        }
        t
    }
}

impl SimQp {
    /// Schedule a torn write: one event per 8-byte word (ascending), from `t`.
    /// An out-of-range write fails as a whole, like any bad verb.
    fn schedule_torn_write(
        &self,
        mut t: u64,
        addr: u64,
        data: Bytes,
        idx: usize,
        results: &Results,
    ) -> u64 {
        let node = self.target();
        if addr + data.len() as u64 > node.size_bytes() {
            let results = results.clone();
            self.net.sim.schedule_at(t, move || {
                results.borrow_mut()[idx] = Some(node.execute(&Verb::Write { addr, data }));
            });
            return t;
        }
        let data = Rc::new(data);
        let failed: Rc<Cell<Option<VerbError>>> = Rc::new(Cell::new(None));
        let end = addr + data.len() as u64;
        let mut a = addr;
        while a < end {
            let chunk_end = (((a / 8) + 1) * 8).min(end);
            let last = chunk_end == end;
            let (node, data, failed, results) =
                (node.clone(), data.clone(), failed.clone(), results.clone());
            let (lo, hi) = ((a - addr) as usize, (chunk_end - addr) as usize);
            let ca = a;
            self.net.sim.schedule_at(t, move || {
                if failed.get().is_none() {
                    if let Err(e) = node.execute(&Verb::write_slice(ca, &data[lo..hi])) {
                        failed.set(Some(e));
                    }
                }
                if last {
                    results.borrow_mut()[idx] = Some(match failed.get() {
                        None => Ok(VerbOutput::Write),
                        Some(e) => Err(e),
                    });
                }
            });
            a = chunk_end;
            if !last {
                t += 1 + self
                    .net
                    .sim
                    .with_rng(|r| r.below(self.net.config.tear_gap_ns_max + 1));
            }
        }
        t
    }
}

impl QueuePair for SimQp {
    type Pending = SimPending;

    fn post(&self, batch: Batch) -> SimPending {
        let n = batch.len();
        let results: Results = Rc::new(RefCell::new(vec![None; n]));
        let mut t = (self.net.sim.now_ns() + self.delay()).max(self.last_exec_ns.get() + 1);
        for (idx, verb) in batch.into_iter().enumerate() {
            match verb {
                Verb::Read { addr, len }
                    if self.net.config.tear_reads
                        && len > 8
                        && addr.checked_add(len as u64).is_some() =>
                {
                    t = self.schedule_torn_read(t, addr, len, idx, &results);
                }
                Verb::Write { addr, data }
                    if self.net.config.tear_writes
                        && data.len() > 8
                        && addr.checked_add(data.len() as u64).is_some() =>
                {
                    t = self.schedule_torn_write(t, addr, data, idx, &results);
                }
                verb => {
                    let (node, results) = (self.target(), results.clone());
                    self.net.sim.schedule_at(t, move || {
                        results.borrow_mut()[idx] = Some(node.execute(&verb));
                    });
                }
            }
            t += 1;
        }
        self.last_exec_ns.set(t);
        let (tx, rx) = oneshot();
        let done_at = (t + self.delay()).max(self.last_done_ns.get() + 1);
        self.last_done_ns.set(done_at);
        self.net.sim.schedule_at(done_at, move || {
            let all = results
                .borrow_mut()
                .drain(..)
                .map(|r| r.expect("verb executed before its completion"))
                .collect();
            tx.send(all);
        });
        SimPending { rx }
    }

    fn memory_node(&self) -> MemNodeId {
        self.mem
    }
}

/// Completions of one posted batch.
pub struct SimPending {
    rx: OneshotReceiver<Completions>,
}

impl Future for SimPending {
    type Output = Completions;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completions> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.expect("the simulator never drops a completion"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch;
    use tandem_sim::Sim;

    fn cluster(sim: &Sim, cfg: SimFabricConfig) -> SimCluster {
        SimCluster::with_nodes(sim.handle(), 2, 1024, cfg)
    }

    #[test]
    fn verbs_on_one_queue_pair_execute_in_posting_order() {
        // Many batches on one QP, with random delays, must apply in order:
        // the final value is the last write, and every CAS sees its predecessor.
        for seed in 0..20 {
            let sim = Sim::new(seed);
            let c = cluster(
                &sim,
                SimFabricConfig {
                    delay_ns_min: 1,
                    delay_ns_max: 5_000,
                    ..Default::default()
                },
            );
            let f = c.join(1).unwrap();
            let qp = f.queue_pair(0);
            let olds = Rc::new(RefCell::new(Vec::new()));
            let mut pendings = Vec::new();
            for i in 0..50u64 {
                pendings.push(qp.post(batch![Verb::cas(8, i, i + 1), Verb::write_u64(16, i)]));
            }
            let o = olds.clone();
            sim.spawn(1, async move {
                for p in pendings {
                    let r = p.await;
                    o.borrow_mut().push(r[0].clone().unwrap().old_value());
                }
            });
            sim.run();
            assert_eq!(*olds.borrow(), (0..50).collect::<Vec<_>>(), "seed {seed}");
            assert_eq!(c.nodes()[0].load_u64(16), 49);
        }
    }

    #[test]
    fn different_queue_pairs_can_reorder() {
        let mut reordered = false;
        for seed in 0..50 {
            let sim = Sim::new(seed);
            let c = cluster(
                &sim,
                SimFabricConfig {
                    delay_ns_min: 1,
                    delay_ns_max: 5_000,
                    ..Default::default()
                },
            );
            let f = c.join(1).unwrap();
            let (a, b) = (f.queue_pair(0), f.queue_pair(0));
            let _p1 = a.post(batch![Verb::write_u64(0, 1)]);
            let _p2 = b.post(batch![Verb::write_u64(0, 2)]);
            sim.run();
            reordered |= c.nodes()[0].load_u64(0) == 1;
        }
        assert!(
            reordered,
            "independent queue pairs must be able to overtake each other"
        );
    }

    #[test]
    fn long_reads_tear_at_word_granularity() {
        let mut torn = false;
        for seed in 0..200 {
            let sim = Sim::new(seed);
            let c = cluster(
                &sim,
                SimFabricConfig {
                    delay_ns_min: 1,
                    delay_ns_max: 3_000,
                    tear_reads: true,
                    tear_gap_ns_max: 2_000,
                    tear_writes: false,
                },
            );
            let f = c.join(1).unwrap();
            let (r, w) = (f.queue_pair(0), f.queue_pair(0));
            let read = r.post(batch![Verb::read(0, 32)]);
            let _w = w.post(batch![Verb::write(0, vec![7u8; 32])]);
            let out = Rc::new(RefCell::new(Vec::new()));
            let o = out.clone();
            sim.spawn(1, async move {
                *o.borrow_mut() = read.await[0].clone().unwrap().into_bytes().to_vec();
            });
            sim.run();
            let words: Vec<u8> = out.borrow().chunks(8).map(|c| c[0]).collect();
            torn |= words.contains(&0) && words.contains(&7);
            // Never torn *inside* a word.
            for ch in out.borrow().chunks(8) {
                assert!(ch.iter().all(|b| *b == ch[0]), "a word itself is atomic");
            }
        }
        assert!(torn, "some seed must observe a torn read");
    }

    #[test]
    fn long_writes_tear_and_a_crash_can_cut_them() {
        let mut partial = false;
        for seed in 0..100 {
            let sim = Sim::new(seed);
            let cfg = SimFabricConfig {
                delay_ns_min: 100,
                delay_ns_max: 200,
                tear_reads: false,
                tear_gap_ns_max: 500,
                tear_writes: true,
            };
            let c = cluster(&sim, cfg);
            let f = c.join(4).unwrap();
            let qp = f.queue_pair(0);
            let _w = qp.post(batch![Verb::write(0, vec![9u8; 64])]);
            // Revoke mid-write: the words not yet written never land.
            let cut = sim.handle().with_rng(|r| r.range_inclusive(100, 2_000));
            sim.run_until(cut);
            c.revoke(4);
            sim.run();
            let words: Vec<u64> = (0..8).map(|i| c.nodes()[0].load_u64(i * 8)).collect();
            partial |= words.contains(&0) && words.iter().any(|&w| w != 0);
            // Ascending: a written word is never followed by an unwritten one and then a written one.
            let first_zero = words.iter().position(|&w| w == 0).unwrap_or(8);
            assert!(
                words[first_zero..].iter().all(|&w| w == 0),
                "seed {seed}: {words:?}"
            );
        }
        assert!(partial, "some cut must leave a half-written record");
    }

    #[test]
    fn completions_on_one_queue_pair_arrive_in_posting_order() {
        let sim = Sim::new(5);
        let c = cluster(
            &sim,
            SimFabricConfig {
                delay_ns_min: 1,
                delay_ns_max: 10_000,
                ..Default::default()
            },
        );
        let qp = c.join(1).unwrap().queue_pair(0);
        let order = Rc::new(RefCell::new(Vec::new()));
        for i in 0..30 {
            let p = qp.post(batch![Verb::read(0, 8)]);
            let (o, h) = (order.clone(), sim.handle());
            sim.spawn(1, async move {
                p.await;
                o.borrow_mut().push((h.now_ns(), i));
            });
        }
        sim.run();
        let got: Vec<i32> = order.borrow().iter().map(|x| x.1).collect();
        assert_eq!(got, (0..30).collect::<Vec<_>>());
    }

    #[test]
    fn verbs_in_flight_execute_after_the_poster_crashes_until_revoked() {
        let sim = Sim::new(3);
        let c = cluster(&sim, SimFabricConfig::fixed(1_000));
        let f = c.join(9).unwrap();
        let qp = f.queue_pair(1);
        sim.spawn(9, async move {
            let _ = qp.post(batch![Verb::write_u64(0, 5)]).await;
            unreachable!("crashed before completion");
        });
        sim.run_until(10);
        sim.crash(9);
        sim.run();
        assert_eq!(
            c.nodes()[1].load_u64(0),
            5,
            "posted verb executed after the crash"
        );

        let qp = f.queue_pair(1);
        let _late = qp.post(batch![Verb::write_u64(8, 6)]);
        c.revoke(9);
        sim.run();
        assert_eq!(
            c.nodes()[1].load_u64(8),
            0,
            "revocation before execution stops it"
        );
    }

    #[test]
    fn a_revoked_incarnation_cannot_register_again_even_with_verbs_in_flight() {
        let sim = Sim::new(4);
        let c = cluster(&sim, SimFabricConfig::fixed(1_000));
        // Judged before it ever registered (the verdict between join and registration).
        c.revoke(7);
        assert!(matches!(c.join(7), Err(Fenced(7))));
        // Registered, a verb in flight, revoked, then registering again: refused,
        // and the verb in flight does not land after the revocation.
        let f = c.join(8).unwrap();
        let _late = f.queue_pair(0).post(batch![Verb::write_u64(0, 9)]);
        c.revoke(8);
        assert!(matches!(c.join(8), Err(Fenced(8))));
        sim.run();
        assert_eq!(c.nodes()[0].load_u64(0), 0);
        assert!(c.join(9).is_ok(), "other incarnations are unaffected");
    }
}
