//! The nemesis loop any system plugs into: for each fault of a schedule,
//! inject it, hold it, heal it, and measure how long the cluster took to be
//! whole again; liveness failures come back as violations.
//!
//! A system implements [`Target`] for its processes and hands over a counter
//! of the operations its load has completed. Safety (the history against
//! the system's checker) is the system's own business, after the loop.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::proxy::{Proxy, Slow};
use crate::schedule::{Fault, Shape};
use crate::{addr_of, Firewall, Link};

/// The processes of a system under faults.
pub trait Target {
    fn shape(&self) -> Shape;
    /// `SIGSTOP` (`stop` true) or `SIGCONT` node `n`.
    fn signal(&mut self, n: usize, stop: bool);
    /// `kill -9` node `n`.
    fn kill(&mut self, n: usize);
    /// `kill -9` every node the system restarts as a whole (by default all).
    fn kill_all(&mut self) {
        (0..self.shape().nodes).for_each(|n| self.kill(n));
    }
    /// Start killed node `n` again (only asked when the shape restarts).
    fn restart(&mut self, n: usize) -> Result<(), String>;
    /// Nodes killed and not started again.
    fn down(&self) -> Vec<usize>;
    /// A node process that exited by itself (not one we killed).
    fn exited(&mut self) -> Option<usize>;
    /// Whether every node that is up serves again (a member of the
    /// configuration, or answering a probe). May block for a few ms.
    fn whole(&mut self) -> bool;
    /// What the system's configuration was, for a liveness failure's report.
    fn configuration(&self) -> String;
}

/// How a schedule is driven.
pub struct Drive<'a> {
    pub fault_time: Duration,
    /// Healthy time between two faults, and before the first.
    pub settle: Duration,
    /// After a heal, throughput and membership must be back within this.
    pub bound: Duration,
    /// Operations the load has completed so far.
    pub completed: &'a (dyn Fn() -> u64 + Sync),
    /// The run's link proxy ([`proxy_for`]), which `delay` faults need.
    pub proxy: Option<Arc<Proxy>>,
}

/// A proxy on every link between `addrs` if `faults` delay any, started
/// before the run's processes so that it carries their links from the
/// first connection on. `seed` draws its jitter.
pub fn proxy_for(
    faults: &[Fault],
    addrs: &[Ipv4Addr],
    seed: u64,
) -> Result<Option<Arc<Proxy>>, String> {
    let delays = |f: &Fault| match f {
        Fault::Delay { .. } | Fault::Slow { .. } => true,
        Fault::Recover { during, .. } | Fault::Suspect { during, .. } => {
            matches!(**during, Fault::Delay { .. } | Fault::Slow { .. })
        }
        _ => false,
    };
    if !faults.iter().any(delays) {
        return Ok(None);
    }
    Proxy::start(addrs, seed)
        .map(|p| Some(Arc::new(p)))
        .map_err(|e| format!("cannot start the link proxy: {e}"))
}

/// One fault's heal, and how long the cluster took to be whole again.
#[derive(Clone, Debug, Serialize)]
pub struct Heal {
    pub fault: String,
    pub class: String,
    pub recover_ms: Option<f64>,
    pub rejoin_ms: Option<f64>,
    /// Operations per second before the first fault, and in each 100 ms
    /// window after this heal until throughput was back.
    pub baseline: f64,
    pub rates: Vec<f64>,
    /// The system's configuration when the fault healed.
    pub members_at_heal: String,
}

/// What one schedule did and found.
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleRun {
    pub seed: u64,
    pub faults: Vec<String>,
    pub operations: usize,
    pub unknown: usize,
    /// Broken promises of the model (must be none), and liveness failures.
    pub violations: Vec<String>,
    /// After each fault healed: until throughput was back to half of its
    /// level before the first fault, and until every node was a member again.
    pub heals: Vec<Heal>,
    pub history: PathBuf,
    pub replay: String,
}

/// What the loop saw: a heal per fault, and the liveness failures.
#[derive(Debug, Default)]
pub struct Outcome {
    pub heals: Vec<Heal>,
    pub violations: Vec<String>,
}

impl Drive<'_> {
    /// Settle, measure the healthy rate, then inject, hold and heal each fault.
    pub fn run(&self, t: &mut dyn Target, faults: &[Fault]) -> Result<Outcome, String> {
        let mut fw = Firewall::new()
            .map_err(|e| e.to_string())?
            .with_proxy(self.proxy.clone());
        std::thread::sleep(self.settle);
        let baseline = self.rate(Duration::from_millis(500));
        let mut o = Outcome::default();
        for f in faults {
            hold(&mut fw, t, f, self.fault_time)?;
            heal(&mut fw, t, f)?;
            let h = self.after_heal(t, baseline, f);
            self.liveness(&mut o.violations, &h);
            if let Some(i) = t.exited() {
                o.violations
                    .push(format!("node {i} exited by itself during `{f}`"));
            }
            o.heals.push(h);
            std::thread::sleep(self.settle);
            self.whole_again(t, f, &mut o.violations);
        }
        Ok(o)
    }

    /// Before the next fault, wait until the cluster is whole: a fault's
    /// effects may land after its heal (a server a lossy link got declared
    /// failed late), and the next fault must not compound them beyond the
    /// failures the system tolerates. Not whole within four bounds is a
    /// liveness failure.
    fn whole_again(&self, t: &mut dyn Target, f: &Fault, v: &mut Vec<String>) {
        let start = Instant::now();
        while !t.whole() {
            if start.elapsed() > self.bound * 4 {
                v.push(format!(
                    "after `{f}`: the cluster was not whole again {} ms after the settle ({})",
                    start.elapsed().as_millis(),
                    t.configuration()
                ));
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Operations per second completed over `window`.
    fn rate(&self, window: Duration) -> f64 {
        let before = (self.completed)();
        std::thread::sleep(window);
        ((self.completed)() - before) as f64 / window.as_secs_f64()
    }

    /// Right after `f` healed: how long until throughput and membership
    /// are back, both watched in the same 100 ms windows.
    fn after_heal(&self, t: &mut dyn Target, baseline: f64, f: &Fault) -> Heal {
        let healed = Instant::now();
        let members_at_heal = t.configuration();
        let (mut rates, mut recover_ms, mut rejoin_ms) = (Vec::new(), None, None);
        let since = |at: Instant| Some(at.duration_since(healed).as_secs_f64() * 1e3);
        while healed.elapsed() < self.bound * 4 && (recover_ms.is_none() || rejoin_ms.is_none()) {
            let (start, before) = (Instant::now(), (self.completed)());
            let window = start + Duration::from_millis(100);
            while rejoin_ms.is_none() && Instant::now() < window {
                if t.whole() {
                    rejoin_ms = since(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(window.saturating_duration_since(Instant::now()));
            if recover_ms.is_none() {
                let done = ((self.completed)() - before) as f64;
                rates.push(done / start.elapsed().as_secs_f64());
                if rates.last().is_some_and(|&r| r >= baseline / 2.0) {
                    recover_ms = since(Instant::now());
                }
            }
        }
        Heal {
            fault: f.to_string(),
            class: f.class().into(),
            recover_ms,
            rejoin_ms,
            baseline,
            rates,
            members_at_heal,
        }
    }

    /// Liveness failures after a heal, as violations.
    fn liveness(&self, v: &mut Vec<String>, h: &Heal) {
        let bound_ms = self.bound.as_secs_f64() * 1e3;
        let f = &h.fault;
        match h.recover_ms {
            Some(ms) if ms <= bound_ms => {}
            Some(ms) => v.push(format!(
                "after `{f}`: throughput came back {ms:.0} ms after the heal (bound {bound_ms:.0} ms; ops/s before the faults {:.0}, per 100 ms after the heal {:.0?}; configuration at the heal: {})",
                h.baseline, h.rates, h.members_at_heal
            )),
            None => v.push(format!("after `{f}`: throughput did not come back")),
        }
        match h.rejoin_ms {
            Some(ms) if ms <= bound_ms => {}
            Some(ms) => v.push(format!(
                "after `{f}`: every node served again only {ms:.0} ms after the heal (bound {bound_ms:.0} ms)"
            )),
            None => v.push(format!("after `{f}`: not every node served again")),
        }
    }
}

/// The manager's address in `shape`: the one after the nodes'.
pub fn manager_ip(shape: Shape) -> Ipv4Addr {
    addr_of(shape.nodes)
}

fn ips(nodes: &[usize]) -> Vec<Ipv4Addr> {
    nodes.iter().map(|&n| addr_of(n)).collect()
}

fn io(e: std::io::Error) -> String {
    e.to_string()
}

/// Inject `f` and keep it for `time` (a flip changes shape half-way, a
/// recovery starts half-way under another fault, and a suspected node
/// resumes half-way while the other fault still holds).
fn hold(fw: &mut Firewall, t: &mut dyn Target, f: &Fault, time: Duration) -> Result<(), String> {
    if let Fault::Recover { node, during } = f {
        t.kill(*node);
        std::thread::sleep(time / 2);
        t.restart(*node)?;
        apply(fw, t, during)?;
        std::thread::sleep(time / 2);
        return Ok(());
    }
    if let Fault::Suspect { node, during } = f {
        apply(fw, t, during)?;
        t.signal(*node, true);
        std::thread::sleep(time / 2);
        t.signal(*node, false);
        std::thread::sleep(time / 2);
        return Ok(());
    }
    if let Fault::Slow {
        node,
        ms,
        jitter_ms,
    } = *f
    {
        return slow_then_suspected(fw, t.shape(), node, (ms, jitter_ms), time);
    }
    let Fault::Flip(n) = *f else {
        apply(fw, t, f)?;
        std::thread::sleep(time);
        return Ok(());
    };
    let shape = t.shape();
    fw.isolate(addr_of(n)).map_err(io)?;
    std::thread::sleep(time / 2);
    fw.heal().map_err(io)?;
    let others: Vec<usize> = (0..shape.nodes).filter(|&o| o != n).collect();
    fw.split(&ips(&others), &[addr_of(n), manager_ip(shape)])
        .map_err(io)?;
    std::thread::sleep(time / 2);
    Ok(())
}

/// [`Fault::Slow`]: node `n`'s links slow all along, its packets to the
/// manager (if the system has one) lost from half-way.
fn slow_then_suspected(
    fw: &mut Firewall,
    shape: Shape,
    n: usize,
    (ms, jitter_ms): (u32, u32),
    time: Duration,
) -> Result<(), String> {
    fw.slow(Slow {
        only: Some(vec![addr_of(n)]),
        delay: Duration::from_millis(ms as u64),
        jitter: Duration::from_millis(jitter_ms as u64),
    })
    .map_err(io)?;
    std::thread::sleep(time / 2);
    if shape.manager {
        let to = manager_ip(shape);
        fw.drop_one_way(Link {
            from: addr_of(n),
            to,
        })
        .map_err(io)?;
    }
    std::thread::sleep(time / 2);
    Ok(())
}

fn apply(fw: &mut Firewall, t: &mut dyn Target, f: &Fault) -> Result<(), String> {
    let shape = t.shape();
    match f {
        Fault::Isolate(n) => fw.isolate(addr_of(*n)).map_err(io),
        Fault::Split(g) => {
            let rest: Vec<usize> = (0..shape.nodes).filter(|n| !g.contains(n)).collect();
            fw.split(&ips(g), &ips(&rest)).map_err(io)?;
            if shape.manager {
                // The minority loses the manager too; clients still reach it.
                fw.split(&ips(g), &[manager_ip(shape)]).map_err(io)?;
            }
            Ok(())
        }
        Fault::Bridge { a, b } => fw.split(&ips(a), &ips(b)).map_err(io),
        Fault::OneWay { from, to } => fw
            .drop_one_way(Link {
                from: addr_of(*from),
                to: addr_of(*to),
            })
            .map_err(io),
        Fault::Loss(pct) => loss(fw, shape.nodes, *pct).map_err(io),
        Fault::BlackholeConnects(n) => fw.blackhole_connects(addr_of(*n)).map_err(io),
        Fault::Reset { a, b } => fw.reset(addr_of(*a), addr_of(*b)).map_err(io),
        Fault::Delay {
            only,
            ms,
            jitter_ms,
        } => fw
            .slow(Slow {
                only: only.map(|n| vec![addr_of(n)]),
                delay: Duration::from_millis(*ms as u64),
                jitter: Duration::from_millis(*jitter_ms as u64),
            })
            .map_err(io),
        Fault::IsolateManager => fw.isolate(manager_ip(shape)).map_err(io),
        Fault::CutManager(g) => fw.split(&ips(g), &[manager_ip(shape)]).map_err(io),
        Fault::ManagerLoss(pct) => manager_loss(fw, shape, *pct).map_err(io),
        Fault::Cut { cut, .. } => {
            for &(a, b) in cut {
                fw.partition(a, b).map_err(io)?;
            }
            Ok(())
        }
        Fault::Flip(_) | Fault::Recover { .. } | Fault::Suspect { .. } | Fault::Slow { .. } => {
            unreachable!("held by `hold`")
        }
        Fault::Pause(n) => {
            t.signal(*n, true);
            Ok(())
        }
        Fault::Kill(n) => {
            t.kill(*n);
            Ok(())
        }
        Fault::KillAll => {
            t.kill_all();
            Ok(())
        }
    }
}

/// Loss on every link between two nodes, both ways.
fn loss(fw: &mut Firewall, nodes: usize, pct: u32) -> std::io::Result<()> {
    for a in 0..nodes {
        for b in (0..nodes).filter(|&b| b != a) {
            fw.loss(
                Link {
                    from: addr_of(a),
                    to: addr_of(b),
                },
                pct,
            )?;
        }
    }
    Ok(())
}

/// Loss on every link between the manager and a node, both ways.
fn manager_loss(fw: &mut Firewall, shape: Shape, pct: u32) -> std::io::Result<()> {
    let m = manager_ip(shape);
    for n in 0..shape.nodes {
        let a = addr_of(n);
        fw.loss(Link { from: a, to: m }, pct)?;
        fw.loss(Link { from: m, to: a }, pct)?;
    }
    Ok(())
}

fn heal(fw: &mut Firewall, t: &mut dyn Target, f: &Fault) -> Result<(), String> {
    fw.heal().map_err(io)?;
    match f {
        Fault::Pause(n) => t.signal(*n, false),
        Fault::Recover { during, .. } => return heal(fw, t, during),
        Fault::Suspect { node, during } => {
            t.signal(*node, false);
            return heal(fw, t, during);
        }
        _ => {}
    }
    // Whatever the fault killed starts again (a system may kill nodes of
    // its own accord, e.g. a memory server declared failed).
    if t.shape().restarts {
        for n in t.down() {
            t.restart(n)?;
        }
    }
    Ok(())
}
