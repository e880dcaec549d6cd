//! The faults a nemesis run injects, and the seeded schedule of them.

use std::fmt;

use tandem_sim::Rng;

/// Nodes of a DDP cluster (the manager is one more process).
pub const NODES: usize = 5;

/// One fault, held for the schedule's fault time, then healed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Node `n` cut off from everyone (the manager and clients included).
    Isolate(usize),
    /// Two nodes cut off from the other three (and the three keep the manager).
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
    /// The manager cut off from every node.
    IsolateManager,
    /// `SIGSTOP` node `n` (alive, silent), `SIGCONT` at the heal.
    Pause(usize),
    /// `kill -9` node `n`; restarted from its NVM file at the heal.
    Kill(usize),
    /// `kill -9` every node at once; all restarted from their NVM files.
    KillAll,
    /// A flapping network: node `n` isolated for the first half; then the
    /// others cut off from `n` and from the manager, which reaches `n` alone.
    Flip(usize),
}

/// The classes `--faults` names.
pub const CLASSES: [&str; 11] = [
    "isolate",
    "split",
    "bridge",
    "one-way",
    "loss",
    "blackhole",
    "manager",
    "pause",
    "kill",
    "kill-all",
    "flip",
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
            Fault::IsolateManager => write!(f, "isolate the manager"),
            Fault::Pause(n) => write!(f, "SIGSTOP node {n}"),
            Fault::Kill(n) => write!(f, "kill -9 node {n}"),
            Fault::KillAll => write!(f, "kill -9 all nodes"),
            Fault::Flip(n) => write!(f, "isolate node {n}, then only {n} and the manager"),
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
            Fault::IsolateManager => "manager",
            Fault::Pause(_) => "pause",
            Fault::Kill(_) => "kill",
            Fault::KillAll => "kill-all",
            Fault::Flip(_) => "flip",
        }
    }
}

/// Classes `all` leaves out (none today).
pub const NOT_IN_ALL: [&str; 0] = [];

/// Check a `--faults` list.
pub fn parse_classes(list: &str) -> Result<Vec<String>, String> {
    let classes: Vec<String> = match list {
        "all" => CLASSES
            .iter()
            .filter(|c| !NOT_IN_ALL.contains(c))
            .map(|s| s.to_string())
            .collect(),
        _ => list.split(',').map(|s| s.trim().to_string()).collect(),
    };
    match classes.iter().find(|c| !CLASSES.contains(&c.as_str())) {
        Some(c) => Err(format!(
            "unknown fault class '{c}' (one of: all, {})",
            CLASSES.join(", ")
        )),
        None if classes.is_empty() => Err("--faults names no class".into()),
        None => Ok(classes),
    }
}

/// The faults of schedule `seed`: `n` of them, drawn from `classes`.
pub fn draw(seed: u64, classes: &[String], n: usize) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let class = &classes[rng.below(classes.len() as u64) as usize];
            fault_of(class, &mut rng)
        })
        .collect()
}

fn node(rng: &mut Rng) -> usize {
    rng.below(NODES as u64) as usize
}

/// `k` distinct nodes, and the others.
fn pick(rng: &mut Rng, k: usize) -> (Vec<usize>, Vec<usize>) {
    let mut all: Vec<usize> = (0..NODES).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let rest = all.split_off(k);
    (all, rest)
}

fn fault_of(class: &str, rng: &mut Rng) -> Fault {
    match class {
        "isolate" => Fault::Isolate(node(rng)),
        "split" => Fault::Split(pick(rng, 2).0),
        "bridge" => {
            let (mut a, mut b) = pick(rng, 2);
            b.truncate(2);
            a.sort();
            b.sort();
            Fault::Bridge { a, b }
        }
        "one-way" => {
            let (pair, _) = pick(rng, 2);
            Fault::OneWay {
                from: pair[0],
                to: pair[1],
            }
        }
        "loss" => Fault::Loss(10 + 10 * rng.below(4) as u32),
        "blackhole" => Fault::BlackholeConnects(node(rng)),
        "manager" => Fault::IsolateManager,
        "pause" => Fault::Pause(node(rng)),
        "kill" => Fault::Kill(node(rng)),
        "kill-all" => Fault::KillAll,
        "flip" => Fault::Flip(node(rng)),
        other => unreachable!("checked class {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_one_schedule() {
        let all = parse_classes("all").unwrap();
        assert_eq!(draw(7, &all, 6), draw(7, &all, 6));
        assert_ne!(draw(7, &all, 6), draw(8, &all, 6));
        let bridges = draw(3, &["bridge".to_string()], 20);
        for b in bridges {
            let Fault::Bridge { a, b } = b else { panic!() };
            assert_eq!((a.len(), b.len()), (2, 2));
            assert!(a.iter().all(|n| !b.contains(n)));
        }
    }

    #[test]
    fn every_class_draws_faults_of_its_own_class() {
        for c in CLASSES {
            let f = draw(5, &[c.to_string()], 3);
            assert!(f.iter().all(|f| f.class() == c), "{c}: {f:?}");
        }
    }

    #[test]
    fn unknown_classes_are_refused() {
        assert!(parse_classes("isolate,typo").unwrap_err().contains("typo"));
        assert_eq!(parse_classes("kill, pause").unwrap(), ["kill", "pause"]);
    }
}
