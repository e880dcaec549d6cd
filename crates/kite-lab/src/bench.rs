//! Kite and its baselines in simulated time (Kite §6–7): five replicas,
//! closed-loop sessions bound to a home node, uniform keys, the paper's
//! request mix. Every system runs on the same simulated network and CPU
//! model and the same workload draw, so their ratios are the result, not
//! the absolute numbers:
//!
//! - `kite`: relaxed ops on ES, `sync` of them as releases/acquires, RMWs
//!   (FAA) on Paxos, with the fast/slow path;
//! - `es`: the same node, every op relaxed (the upper bound);
//! - `abd`: every read an acquire, every write a release;
//! - `paxos`: writes as Paxos RMWs, reads as ABD acquires;
//! - `zab`: the leader-based log of [`tandem_zab::node`] without NVM (the
//!   in-memory ZAB of the Kite paper, behind Kite's API: [`tandem_zab::kite_api`]):
//!   writes, releases and RMWs through the leader in zxid order, reads and
//!   acquires local.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use tandem_kite::simcheck::KiteFactory;
use tandem_kite::{KiteConfig, KiteNode};
use tandem_net::{
    Config, Harness, NodeFactory, NodeId, Nvm, Protocol, SessionId, SimNet, SimNetConfig,
};
use tandem_sim::Rng;

use tandem_zab::kite_api::{KiteZabFactory, KiteZabNode};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    Kite,
    Es,
    Abd,
    Paxos,
    Zab,
}

impl System {
    pub const ALL: [System; 5] = [
        System::Kite,
        System::Es,
        System::Abd,
        System::Paxos,
        System::Zab,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            System::Kite => "kite",
            System::Es => "es",
            System::Abd => "abd",
            System::Paxos => "paxos",
            System::Zab => "zab",
        }
    }

    pub fn parse(s: &str) -> Result<System, String> {
        System::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown system {s:?} (kite, es, abd, paxos, zab)"))
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct KiteBenchOpts {
    pub nodes: u16,
    pub sessions_per_node: u64,
    pub keys: u64,
    /// Share of requests that write, RMWs included (the paper's counting, Kite §7.1).
    pub write_ratio: f64,
    /// Share of reads and writes that are acquires and releases.
    pub sync_ratio: f64,
    /// Share of requests that are RMWs (FAA).
    pub rmw_ratio: f64,
    /// CPU per message received, and per message sent, per destination.
    pub cpu_ns: u64,
    pub send_ns: u64,
    /// ZAB's ordered apply: the hand-off per write (the other systems have no total order).
    pub lane_ns: u64,
    pub rtt_ns: u64,
    pub cores: usize,
    pub warmup_ns: u64,
    pub measure_ns: u64,
    pub seed: u64,
}

impl Default for KiteBenchOpts {
    /// The paper's setup (Kite §6, §7.1) on docs/DESIGN.md §7.1's simulated
    /// machine: 5 replicas, 1 M keys, uniform; 5 % sync, no RMWs.
    fn default() -> Self {
        KiteBenchOpts {
            nodes: 5,
            sessions_per_node: 40,
            keys: 1_000_000,
            write_ratio: 0.05,
            sync_ratio: 0.05,
            rmw_ratio: 0.0,
            cpu_ns: 200,
            send_ns: 0,
            lane_ns: 0,
            rtt_ns: 1_000,
            cores: 1,
            warmup_ns: 200_000,
            measure_ns: 1_000_000,
            seed: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SystemResult {
    pub system: &'static str,
    pub write_ratio: f64,
    pub sync_ratio: f64,
    pub rmw_ratio: f64,
    /// Requests per simulated second, all replicas together.
    pub throughput_ops: f64,
    pub latency_us: Latency,
    pub messages_per_op: f64,
    /// Kite only: the fast/slow path's counters over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kite: Option<tandem_kite::KiteStats>,
}

/// What a request is, before a system maps it to its own operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Read,
    Write,
    Acquire,
    Release,
    Rmw,
}

fn draw(o: &KiteBenchOpts, rng: &mut Rng) -> Class {
    draw_class(o.write_ratio, o.sync_ratio, o.rmw_ratio, rng)
}

/// One request of the paper's mix (Kite §7.1): an RMW with probability
/// `rmw`; otherwise a write with the rest of `write`, and sync with `sync`.
pub fn draw_class(write: f64, sync: f64, rmw: f64, rng: &mut Rng) -> Class {
    if rng.unit_f64() < rmw {
        return Class::Rmw;
    }
    let w = ((write - rmw) / (1.0 - rmw).max(1e-9)).clamp(0.0, 1.0);
    let sync = rng.unit_f64() < sync;
    match (rng.unit_f64() < w, sync) {
        (true, true) => Class::Release,
        (true, false) => Class::Write,
        (false, true) => Class::Acquire,
        (false, false) => Class::Read,
    }
}

/// `c` as `system` runs it, in Kite's API (ZAB's adapter takes it too).
pub fn kite_op(system: System, c: Class, key: u64, value: u64) -> tandem_kite::Op {
    use tandem_kite::Op;
    let c = match (system, c) {
        (System::Es, Class::Acquire) => Class::Read,
        (System::Es, Class::Release | Class::Rmw) => Class::Write,
        (System::Abd, Class::Read) => Class::Acquire,
        (System::Abd, Class::Write | Class::Rmw) => Class::Release,
        (System::Paxos, Class::Read) => Class::Acquire,
        (System::Paxos, Class::Write | Class::Release) => Class::Rmw,
        (System::Zab, Class::Acquire) => Class::Read,
        (System::Zab, Class::Release | Class::Rmw) => Class::Write,
        (_, c) => c,
    };
    match c {
        Class::Read => Op::Read(key),
        Class::Write => Op::Write(key, value),
        Class::Acquire => Op::Acquire(key),
        Class::Release => Op::Release(key, value),
        Class::Rmw => Op::Faa(key, 1),
    }
}

/// Closed-loop sessions: draw, map, time.
struct Load<O> {
    opts: KiteBenchOpts,
    map: Box<dyn Fn(Class, u64, u64) -> O>,
    invoked: Vec<u64>,
    next_value: u64,
    done: u64,
    lat_ns: Vec<u64>,
    /// Completions per (time bucket, serving node), if a timeline is kept.
    buckets: Option<(u64, Vec<Vec<u64>>)>,
}

struct Hook<O>(Rc<RefCell<Load<O>>>);

impl<P: Protocol> Harness<P> for Hook<P::Op>
where
    P::Op: 'static,
{
    fn next_op(&mut self, s: SessionId, now: u64, rng: &mut Rng) -> Option<P::Op> {
        let mut l = self.0.borrow_mut();
        let (c, key) = (draw(&l.opts, rng), rng.below(l.opts.keys));
        l.next_value += 1;
        l.invoked[s as usize] = now;
        Some((l.map)(c, key, l.next_value))
    }

    fn completed(
        &mut self,
        s: SessionId,
        _req: u64,
        node: NodeId,
        _r: &P::Reply,
        now: u64,
        _nvm: &[Nvm<P::Record>],
    ) {
        let mut l = self.0.borrow_mut();
        if let Some((width, b)) = &mut l.buckets {
            let i = (now / *width) as usize;
            if let Some(row) = b.get_mut(i) {
                row[node as usize] += 1;
            }
        }
        let (warm, end) = (l.opts.warmup_ns, l.opts.warmup_ns + l.opts.measure_ns);
        if (warm..end).contains(&now) {
            l.done += 1;
            let at = l.invoked[s as usize];
            l.lat_ns.push(now - at);
        }
    }
}

fn run<P: Protocol + 'static, F: NodeFactory<P>>(
    o: &KiteBenchOpts,
    system: System,
    factory: F,
    map: Box<dyn Fn(Class, u64, u64) -> P::Op>,
) -> (SystemResult, SimNet<P, F>) {
    let sessions = o.sessions_per_node * o.nodes as u64;
    let load = Load {
        opts: o.clone(),
        map,
        invoked: vec![0; sessions as usize],
        next_value: 0,
        done: 0,
        lat_ns: Vec::new(),
        buckets: None,
    };
    let load = Rc::new(RefCell::new(load));
    let cfg = SimNetConfig {
        link_ns: o.rtt_ns / 2,
        jitter_ns: o.rtt_ns / 20,
        cpu_ns: o.cpu_ns,
        send_ns: o.send_ns,
        lane_ns: o.lane_ns,
        cores: o.cores,
        ..SimNetConfig::default()
    };
    let net = SimNet::new(
        o.seed,
        cfg,
        Config::new(1, (0..o.nodes).collect()),
        factory,
        Box::new(Hook(load.clone())),
        sessions,
    );
    net.start_clients();
    net.run_for(o.warmup_ns + o.measure_ns);
    net.stop_clients();
    let stats = net.stats();
    let mut l = load.borrow_mut();
    l.lat_ns.sort_unstable();
    let pct = |q: f64| {
        l.lat_ns
            .get(((l.lat_ns.len() as f64 * q) as usize).min(l.lat_ns.len().saturating_sub(1)))
            .map_or(0.0, |&n| n as f64 / 1e3)
    };
    let result = SystemResult {
        system: system.name(),
        write_ratio: o.write_ratio,
        sync_ratio: o.sync_ratio,
        rmw_ratio: o.rmw_ratio,
        throughput_ops: l.done as f64 * 1e9 / o.measure_ns as f64,
        latency_us: Latency {
            p50: pct(0.5),
            p99: pct(0.99),
            p999: pct(0.999),
        },
        messages_per_op: stats.messages_sent as f64 / stats.replies.max(1) as f64,
        kite: None,
    };
    drop(l);
    (result, net)
}

/// Run `system` under `o` in simulated time.
pub fn bench_system(o: &KiteBenchOpts, system: System) -> SystemResult {
    let map = Box::new(move |c, k, v| kite_op(system, c, k, v));
    if system == System::Zab {
        return run::<KiteZabNode, _>(o, system, KiteZabFactory::default(), map).0;
    }
    let (mut r, net) = run::<KiteNode, _>(o, system, KiteFactory(KiteConfig::default()), map);
    let mut total = tandem_kite::KiteStats::default();
    for n in 0..o.nodes {
        net.with_node(n, |p| {
            p.map(|p| tandem_kite::simcheck::add_stats(&mut total, &p.stats))
        });
    }
    r.kite = (system == System::Kite).then_some(total);
    r
}

/// Throughput over time with one replica asleep (the paper's Fig. 8).
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub bucket_us: f64,
    pub sleeper: NodeId,
    pub sleep_from_us: f64,
    pub sleep_for_us: f64,
    pub timeout_us: f64,
    /// Per bucket: requests completed per second by each node.
    pub per_node_ops: Vec<Vec<f64>>,
}

/// Kite under `o` for `total_ns`; node `sleeper` is stopped (SIGSTOP-like:
/// its inputs queue) from `from_ns` for `for_ns`.
pub fn sleep_timeline(
    o: &KiteBenchOpts,
    cfg: KiteConfig,
    sleeper: NodeId,
    from_ns: u64,
    for_ns: u64,
    total_ns: u64,
    bucket_ns: u64,
) -> Timeline {
    let sessions = o.sessions_per_node * o.nodes as u64;
    let rows = (total_ns / bucket_ns) as usize + 1;
    let map: Box<dyn Fn(Class, u64, u64) -> tandem_kite::Op> =
        Box::new(|c, k, v| kite_op(System::Kite, c, k, v));
    let load = Load {
        opts: KiteBenchOpts {
            warmup_ns: 0,
            measure_ns: total_ns,
            ..o.clone()
        },
        map,
        invoked: vec![0; sessions as usize],
        next_value: 0,
        done: 0,
        lat_ns: Vec::new(),
        buckets: Some((bucket_ns, vec![vec![0; o.nodes as usize]; rows])),
    };
    let load = Rc::new(RefCell::new(load));
    let net_cfg = SimNetConfig {
        link_ns: o.rtt_ns / 2,
        jitter_ns: o.rtt_ns / 20,
        cpu_ns: o.cpu_ns,
        send_ns: o.send_ns,
        lane_ns: o.lane_ns,
        cores: o.cores,
        ..SimNetConfig::default()
    };
    let net = SimNet::new(
        o.seed,
        net_cfg,
        Config::new(1, (0..o.nodes).collect()),
        KiteFactory(cfg),
        Box::new(Hook(load.clone())),
        sessions,
    );
    net.start_clients();
    net.run_for(from_ns);
    net.pause(sleeper, from_ns + for_ns);
    net.run_for(total_ns - from_ns);
    net.stop_clients();
    let l = load.borrow();
    let per_s = 1e9 / bucket_ns as f64;
    let per_node_ops = l
        .buckets
        .as_ref()
        .map(|b| {
            b.1.iter()
                .take(rows - 1)
                .map(|r| r.iter().map(|&c| c as f64 * per_s).collect())
                .collect()
        })
        .unwrap_or_default();
    Timeline {
        bucket_us: bucket_ns as f64 / 1e3,
        sleeper,
        sleep_from_us: from_ns as f64 / 1e3,
        sleep_for_us: for_ns as f64 / 1e3,
        timeout_us: cfg.timeout_ns as f64 / 1e3,
        per_node_ops,
    }
}
