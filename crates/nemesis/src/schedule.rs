//! The faults a nemesis run injects, and the seeded schedule of them.

use std::fmt;

use tandem_sim::Rng;

/// What a system under faults has, and so which faults it can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Replica processes, on [`crate::addr_of`] `0..nodes`.
    pub nodes: usize,
    /// A configuration manager on `addr_of(nodes)` (DDP, HEAL): `manager`
    /// and `flip` need one.
    pub manager: bool,
    /// Whether a killed node is started again at the heal (from its NVM
    /// file). A crash-stop system (Kite) keeps it down, so a schedule kills
    /// at most a minority, and never all nodes at once.
    pub restarts: bool,
}

impl Shape {
    /// The classes this shape can take.
    pub fn classes(&self) -> Vec<&'static str> {
        CLASSES
            .iter()
            .copied()
            .filter(|c| self.manager || !matches!(*c, "manager" | "flip"))
            .filter(|c| self.restarts || !matches!(*c, "kill-all" | "recover"))
            .collect()
    }
}

/// One fault, held for the schedule's fault time, then healed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Node `n` cut off from everyone (the manager and clients included).
    Isolate(usize),
    /// A minority cut off from the majority (which keeps the manager).
    Split(Vec<usize>),
    /// Two halves joined through one node: `a` and `b` cannot reach each
    /// other, both reach `bridge`.
    Bridge { a: Vec<usize>, b: Vec<usize> },
    /// Packets from `from` to `to` vanish; the other way works.
    OneWay { from: usize, to: usize },
    /// Each packet between nodes vanishes with this probability (%).
    Loss(u32),
    /// New connections to node `n` get no answer; open streams work.
    BlackholeConnects(usize),
    /// Streams between `a` and `b` reset (both ends), connects refused.
    Reset { a: usize, b: usize },
    /// Every chunk on the links of node `only` (of every node when `None`)
    /// held `ms` plus up to `jitter_ms`, by the run's proxy
    /// ([`crate::proxy`]): a node alive and slow, or a slow network.
    Delay {
        only: Option<usize>,
        ms: u32,
        jitter_ms: u32,
    },
    /// A node alive and slow: its links delayed as [`Fault::Delay`] has
    /// them for the whole fault, while clients still reach it. In a system
    /// with a manager it is suspected too: half-way its packets to the
    /// manager start to vanish (its heartbeats stop arriving; the
    /// manager's replies, late, still do).
    Slow {
        node: usize,
        ms: u32,
        jitter_ms: u32,
    },
    /// The manager cut off from every node.
    IsolateManager,
    /// The manager cut off from these nodes only (Pandora: the membership
    /// from a memory server, which compute servers still reach).
    CutManager(Vec<usize>),
    /// Each packet between the manager and any node vanishes with this
    /// probability (%).
    ManagerLoss(u32),
    /// A partition between processes a system names itself, beyond its
    /// nodes and manager (Pandora: ZooKeeper and a membership replica):
    /// every pair in `cut` cannot reach each other.
    Cut {
        class: &'static str,
        what: String,
        cut: Vec<(std::net::Ipv4Addr, std::net::Ipv4Addr)>,
    },
    /// `SIGSTOP` node `node` (a false suspicion) for the first half while
    /// `during` holds, e.g. a cut or lossy link of the manager that slows
    /// the suspected node's revocation; `SIGCONT` half-way, `during` still
    /// holding.
    Suspect { node: usize, during: Box<Fault> },
    /// `SIGSTOP` node `n` (alive, silent), `SIGCONT` at the heal.
    Pause(usize),
    /// `kill -9` node `n`; restarted from its NVM file at the heal.
    Kill(usize),
    /// `kill -9` every node at once; all restarted from their NVM files.
    KillAll,
    /// A flapping network: node `n` isolated for the first half; then the
    /// others cut off from `n` and from the manager, which reaches `n` alone.
    Flip(usize),
    /// `kill -9` node `n` for the first half; then it restarts and
    /// recovers while `during` holds (a recovery under faults).
    Recover { node: usize, during: Box<Fault> },
}

/// The classes `--faults` names.
pub const CLASSES: [&str; 14] = [
    "isolate",
    "split",
    "bridge",
    "one-way",
    "loss",
    "blackhole",
    "delay",
    "slow",
    "manager",
    "pause",
    "kill",
    "kill-all",
    "flip",
    "recover",
];

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Isolate(n) => write!(f, "isolate node {n}"),
            Fault::Split(g) => write!(f, "split {g:?} from the rest"),
            Fault::Bridge { a, b } => write!(f, "bridge {a:?} | {b:?}"),
            Fault::OneWay { from, to } => write!(f, "drop {from} -> {to}"),
            Fault::Loss(p) => write!(f, "{p}% loss between nodes"),
            Fault::BlackholeConnects(n) => write!(f, "blackhole connects to node {n}"),
            Fault::Reset { a, b } => write!(f, "reset streams between {a} and {b}"),
            Fault::Delay {
                only,
                ms,
                jitter_ms,
            } => match only {
                Some(n) => write!(f, "delay node {n}'s links {ms}+{jitter_ms} ms"),
                None => write!(f, "delay every link {ms}+{jitter_ms} ms"),
            },
            Fault::Slow {
                node,
                ms,
                jitter_ms,
            } => write!(f, "slow node {node} ({ms}+{jitter_ms} ms)"),
            Fault::IsolateManager => write!(f, "isolate the manager"),
            Fault::CutManager(g) => write!(f, "cut the manager from {g:?}"),
            Fault::ManagerLoss(p) => write!(f, "{p}% loss to and from the manager"),
            Fault::Cut { what, .. } => write!(f, "cut {what}"),
            Fault::Suspect { node, during } => {
                write!(f, "SIGSTOP node {node} for half the time under {during}")
            }
            Fault::Pause(n) => write!(f, "SIGSTOP node {n}"),
            Fault::Kill(n) => write!(f, "kill -9 node {n}"),
            Fault::KillAll => write!(f, "kill -9 all nodes"),
            Fault::Flip(n) => write!(f, "isolate node {n}, then only {n} and the manager"),
            Fault::Recover { node, during } => {
                write!(f, "kill -9 node {node}, recover it under {during}")
            }
        }
    }
}

impl Fault {
    /// Its class, as `--faults` names it.
    pub fn class(&self) -> &'static str {
        match self {
            Fault::Isolate(_) => "isolate",
            Fault::Split(_) => "split",
            Fault::Bridge { .. } => "bridge",
            Fault::OneWay { .. } => "one-way",
            Fault::Loss(_) => "loss",
            Fault::BlackholeConnects(_) => "blackhole",
            Fault::Reset { .. } => "reset",
            Fault::Delay { .. } => "delay",
            Fault::Slow { .. } => "slow",
            Fault::IsolateManager => "manager",
            Fault::CutManager(_) => "manager-cut",
            Fault::ManagerLoss(_) => "manager-loss",
            Fault::Cut { class, .. } => class,
            Fault::Suspect { .. } => "suspect",
            Fault::Pause(_) => "pause",
            Fault::Kill(_) => "kill",
            Fault::KillAll => "kill-all",
            Fault::Flip(_) => "flip",
            Fault::Recover { .. } => "recover",
        }
    }
}

/// Check a `--faults` list against what `shape` can take.
pub fn parse_classes(list: &str, shape: Shape) -> Result<Vec<String>, String> {
    let can = shape.classes();
    let classes: Vec<String> = match list {
        "all" => can.iter().map(|s| s.to_string()).collect(),
        _ => list.split(',').map(|s| s.trim().to_string()).collect(),
    };
    match classes.iter().find(|c| !can.contains(&c.as_str())) {
        Some(c) if CLASSES.contains(&c.as_str()) => Err(format!(
            "fault class '{c}' does not apply to this system ({})",
            why_not(c)
        )),
        Some(c) => Err(format!(
            "unknown fault class '{c}' (one of: all, {})",
            can.join(", ")
        )),
        None if classes.is_empty() => Err("--faults names no class".into()),
        None => Ok(classes),
    }
}

fn why_not(class: &str) -> &'static str {
    match class {
        "kill-all" | "recover" => "its replicas are crash-stop: a killed one stays down",
        _ => "it has no configuration manager",
    }
}

/// The faults of schedule `seed`: `n` of them, drawn from `classes`.
/// Without restarts, kills beyond a minority of the nodes become pauses.
pub fn draw(seed: u64, classes: &[String], n: usize, shape: Shape) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    let mut killed = Vec::new();
    (0..n)
        .map(|_| {
            let class = &classes[rng.below(classes.len() as u64) as usize];
            let f = fault_of(class, &mut rng, shape.nodes);
            match f {
                Fault::Kill(k) if !shape.restarts => crash_stop(k, &mut killed, shape.nodes),
                f => f,
            }
        })
        .collect()
}

/// A kill in a crash-stop system: of a node still up, while a majority stays up.
fn crash_stop(k: usize, killed: &mut Vec<usize>, nodes: usize) -> Fault {
    let Some(k) = (k..k + nodes)
        .map(|i| i % nodes)
        .find(|i| !killed.contains(i))
    else {
        return Fault::Pause(k);
    };
    if killed.len() >= (nodes - 1) / 2 {
        return Fault::Pause(k);
    }
    killed.push(k);
    Fault::Kill(k)
}

fn node(rng: &mut Rng, nodes: usize) -> usize {
    rng.below(nodes as u64) as usize
}

/// `k` distinct nodes of `nodes`, and the others.
fn pick(rng: &mut Rng, k: usize, nodes: usize) -> (Vec<usize>, Vec<usize>) {
    let mut all: Vec<usize> = (0..nodes).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let rest = all.split_off(k);
    (all, rest)
}

/// One node's links or all, 10–50 ms, jitter up to as much again.
pub fn delay(rng: &mut Rng, nodes: usize) -> Fault {
    let only = (rng.below(2) == 0).then(|| node(rng, nodes));
    let ms = 10 + 10 * rng.below(5) as u32;
    Fault::Delay {
        only,
        ms,
        jitter_ms: rng.below(ms as u64 + 1) as u32,
    }
}

/// One node alive and slow: its links 100–400 ms, jitter up to 50 ms.
pub fn slow(rng: &mut Rng, nodes: usize) -> Fault {
    Fault::Slow {
        node: node(rng, nodes),
        ms: 100 + 100 * rng.below(4) as u32,
        jitter_ms: rng.below(51) as u32,
    }
}

fn fault_of(class: &str, rng: &mut Rng, n: usize) -> Fault {
    let minority = (n - 1) / 2;
    match class {
        "isolate" => Fault::Isolate(node(rng, n)),
        "split" => Fault::Split(pick(rng, minority, n).0),
        "bridge" => {
            let (mut a, mut b) = pick(rng, minority, n);
            b.truncate(n - minority - 1);
            a.sort();
            b.sort();
            Fault::Bridge { a, b }
        }
        "one-way" => {
            let (pair, _) = pick(rng, 2, n);
            Fault::OneWay {
                from: pair[0],
                to: pair[1],
            }
        }
        "loss" => Fault::Loss(10 + 10 * rng.below(4) as u32),
        "blackhole" => Fault::BlackholeConnects(node(rng, n)),
        "delay" => delay(rng, n),
        "slow" => slow(rng, n),
        "manager" => Fault::IsolateManager,
        "pause" => Fault::Pause(node(rng, n)),
        "kill" => Fault::Kill(node(rng, n)),
        "kill-all" => Fault::KillAll,
        "flip" => Fault::Flip(node(rng, n)),
        "recover" => {
            let node = node(rng, n);
            let during = ["isolate", "split", "one-way", "loss", "pause"];
            let c = during[rng.below(during.len() as u64) as usize];
            Fault::Recover {
                node,
                during: Box::new(fault_of(c, rng, n)),
            }
        }
        other => unreachable!("checked class {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DDP: Shape = Shape {
        nodes: 5,
        manager: true,
        restarts: true,
    };
    const KITE: Shape = Shape {
        nodes: 5,
        manager: false,
        restarts: false,
    };

    #[test]
    fn a_seed_names_one_schedule() {
        let all = parse_classes("all", DDP).unwrap();
        assert_eq!(draw(7, &all, 6, DDP), draw(7, &all, 6, DDP));
        assert_ne!(draw(7, &all, 6, DDP), draw(8, &all, 6, DDP));
        let bridges = draw(3, &["bridge".to_string()], 20, DDP);
        for b in bridges {
            let Fault::Bridge { a, b } = b else { panic!() };
            assert_eq!((a.len(), b.len()), (2, 2));
            assert!(a.iter().all(|n| !b.contains(n)));
        }
    }

    #[test]
    fn every_class_draws_faults_of_its_own_class() {
        for c in CLASSES {
            let f = draw(5, &[c.to_string()], 3, DDP);
            assert!(f.iter().all(|f| f.class() == c), "{c}: {f:?}");
        }
    }

    #[test]
    fn unknown_classes_are_refused() {
        assert!(parse_classes("isolate,typo", DDP)
            .unwrap_err()
            .contains("typo"));
        assert_eq!(
            parse_classes("kill, pause", DDP).unwrap(),
            ["kill", "pause"]
        );
        let e = parse_classes("kill-all", KITE).unwrap_err();
        assert!(e.contains("crash-stop"), "{e}");
        assert!(parse_classes("manager", KITE)
            .unwrap_err()
            .contains("no configuration manager"));
        assert!(!parse_classes("all", KITE)
            .unwrap()
            .contains(&"flip".to_string()));
    }

    #[test]
    fn a_crash_stop_schedule_kills_a_minority_of_distinct_nodes() {
        for seed in 0..50 {
            let f = draw(seed, &["kill".to_string()], 6, KITE);
            let mut killed: Vec<usize> = f
                .iter()
                .filter_map(|f| {
                    if let Fault::Kill(k) = f {
                        Some(*k)
                    } else {
                        None
                    }
                })
                .collect();
            assert_eq!(killed.len(), 2, "{f:?}");
            killed.sort();
            killed.dedup();
            assert_eq!(killed.len(), 2, "{f:?}");
            assert!(f[2..].iter().all(|f| matches!(f, Fault::Pause(_))), "{f:?}");
        }
    }
}
