//! `tandem nemesis --system pandora`: Pandora as processes — three memory
//! servers, the membership and three compute servers under the micro
//! workload — under a seeded schedule of real faults, then checked.
//!
//! Faults ([`draw`]): a compute or memory server isolated, paused or
//! killed (false suspicions, real crashes); a compute server split off with
//! one memory server; one-way drops between a compute and a memory server;
//! loss on every compute–memory link; blackholed connects to a memory
//! server; the membership isolated, or cut from one memory server that
//! compute servers still reach; every compute server killed at once; a
//! compute server restarting while another fault holds; with the
//! replicated failure detector (`--membership zookeeper`), ZooKeeper cut
//! from one membership replica; loss on the
//! membership's links; a compute server paused (falsely suspected) while
//! the membership's links lose packets or it is cut from a memory server,
//! so the revocation is slow, and resumed half-way. At most one memory
//! server is hit at a time: two copies of each partition survive one loss.
//!
//! After the last fault every compute server is killed, and the membership
//! must recover each one's logs and publish its failed ids. Then the check
//! of `tandem pandora check-cluster` runs on the memory servers: replicas
//! identical, no lock held by a coordinator not known to have failed, and
//! the micro counters consistent with the ledgers of acknowledged writes.
//! Liveness: after each heal, every memory node is up again in the
//! membership's configuration and every compute server commits, within
//! [`RECOVERY_BOUND`].

pub mod cluster;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_cluster::procs;
use tandem_dkvs::{Mode, StoreConfig};
use tandem_nemesis::drive::{proxy_for, Drive, ScheduleRun};
use tandem_nemesis::schedule::Fault;
use tandem_sim::Rng;
use tandem_workloads::micro::{KeyChooser, MicroSpec};

use cluster::{Membership, Procs, COMPUTE, FD_REPLICAS, KEYS, MEMORY, MEMORY_TIMEOUT_MS, REPLICAS};

/// The fault classes Pandora takes (`--faults`).
pub const CLASSES: [&str; 17] = [
    "isolate",
    "split",
    "one-way",
    "loss",
    "blackhole",
    "manager",
    "manager-cut",
    "manager-loss",
    "suspect",
    "pause",
    "kill",
    "kill-all",
    "recover",
    "delay",
    "slow",
    "zk-cut",
    "reset",
];

/// After a heal, every memory node must be up and every compute server
/// committing within this, the longer of two paths and a second: a memory
/// server's failure is declared after its probe timeout, then a
/// replacement is filled and admitted (two probe timeouts); a compute
/// server whose data link to a live memory server died just before the
/// heal ends its incarnation after its patience, is declared failed after
/// the heartbeat timeout, and comes back as a new incarnation.
pub const RECOVERY_BOUND: Duration = Duration::from_millis(
    max(
        2 * MEMORY_TIMEOUT_MS,
        cluster::VERDICT_PATIENCE_MS + cluster::TIMEOUT_MS,
    ) + 1_000,
);

const fn max(a: u64, b: u64) -> u64 {
    if a > b {
        a
    } else {
        b
    }
}
/// With the replicated failure detector, a leader cut off from ZooKeeper
/// is replaced only once its session expires, and the new leader gives the
/// compute servers a grace to rejoin it.
pub const ZK_RECOVERY_BOUND: Duration =
    Duration::from_millis(cluster::ZK_SESSION_MS + 2 * MEMORY_TIMEOUT_MS + 2_000);
/// Healthy time between two faults, and before the first.
const SETTLE: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct NemesisConfig {
    /// The `tandem` binary the processes run.
    pub exe: PathBuf,
    pub seed: u64,
    pub schedules: u64,
    pub classes: Vec<String>,
    pub faults: usize,
    pub fault_time: Duration,
    /// Each schedule's logs and ledgers go to `<dir>/seed-<n>/`.
    pub dir: PathBuf,
    /// Test-only planted bugs for the membership (`--inject-bug`).
    pub bugs: Vec<String>,
    pub membership: Membership,
}

/// Check a `--faults` list (`zk-cut` needs the replicated failure detector).
pub fn parse_classes(list: &str, replicated: bool) -> Result<Vec<String>, String> {
    let can = |c: &str| CLASSES.contains(&c) && (replicated || c != "zk-cut");
    let classes: Vec<String> = match list {
        "all" => CLASSES
            .iter()
            .filter(|c| can(c))
            .map(|s| s.to_string())
            .collect(),
        _ => list.split(',').map(|s| s.trim().to_string()).collect(),
    };
    match classes.iter().find(|c| !can(c)) {
        Some(c) if c == "zk-cut" => Err(
            "fault class 'zk-cut' needs the replicated failure detector (--membership zookeeper)"
                .into(),
        ),
        Some(c) if c == "flip" || c == "bridge" => Err(format!(
            "fault class '{c}' does not apply to Pandora (compute servers do not talk to each other)"
        )),
        Some(c) => Err(format!(
            "unknown fault class '{c}' for Pandora (one of: all, {})",
            CLASSES.join(", ")
        )),
        None if classes.is_empty() => Err("--faults names no class".into()),
        None => Ok(classes),
    }
}

impl NemesisConfig {
    fn replicated(&self) -> bool {
        matches!(self.membership, Membership::Replicated { .. })
    }

    /// After a heal, the cluster must be whole within this.
    pub fn bound(&self) -> Duration {
        match self.replicated() {
            true => ZK_RECOVERY_BOUND,
            false => RECOVERY_BOUND,
        }
    }

    /// The command that runs schedule `seed` again.
    pub fn replay(&self, seed: u64) -> String {
        let mut c = format!(
            "tandem nemesis --system pandora{} --seed {seed} --schedules 1 --faults {} --faults-per-schedule {} --fault-ms {}",
            if self.replicated() { " --membership zookeeper" } else { "" },
            self.classes.join(","),
            self.faults,
            self.fault_time.as_millis()
        );
        for b in &self.bugs {
            c += &format!(" --inject-bug {b}");
        }
        c
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

fn compute(rng: &mut Rng) -> usize {
    rng.below(COMPUTE as u64) as usize
}

fn memory(rng: &mut Rng) -> usize {
    COMPUTE + rng.below(MEMORY as u64) as usize
}

fn any(rng: &mut Rng) -> usize {
    rng.below((COMPUTE + MEMORY) as u64) as usize
}

fn fault_of(class: &str, rng: &mut Rng) -> Fault {
    match class {
        "isolate" => Fault::Isolate(any(rng)),
        "split" => Fault::Split(vec![compute(rng), memory(rng)]),
        "one-way" => {
            let (c, m) = (compute(rng), memory(rng));
            match rng.below(2) {
                0 => Fault::OneWay { from: c, to: m },
                _ => Fault::OneWay { from: m, to: c },
            }
        }
        "loss" => Fault::Loss(10 + 10 * rng.below(4) as u32),
        "blackhole" => Fault::BlackholeConnects(memory(rng)),
        "reset" => Fault::Reset {
            a: compute(rng),
            b: memory(rng),
        },
        "delay" => tandem_nemesis::schedule::delay(rng, COMPUTE + MEMORY),
        "slow" => tandem_nemesis::schedule::slow(rng, COMPUTE + MEMORY),
        "manager" => Fault::IsolateManager,
        "manager-cut" => Fault::CutManager(vec![memory(rng)]),
        "manager-loss" => Fault::ManagerLoss(10 + 10 * rng.below(4) as u32),
        "suspect" => Fault::Suspect {
            node: compute(rng),
            during: Box::new(match rng.below(2) {
                0 => Fault::ManagerLoss(20 + 10 * rng.below(3) as u32),
                _ => Fault::CutManager(vec![memory(rng)]),
            }),
        },
        "pause" => Fault::Pause(any(rng)),
        "kill" => Fault::Kill(any(rng)),
        "kill-all" => Fault::KillAll,
        "zk-cut" => {
            let r = rng.below(FD_REPLICAS as u64) as usize;
            Fault::Cut {
                class: "zk-cut",
                what: format!("ZooKeeper from membership replica {r}"),
                cut: vec![(cluster::zookeeper_ip(), cluster::replica_ip(r))],
            }
        }
        "recover" => {
            let node = compute(rng);
            let during = [
                "isolate",
                "one-way",
                "loss",
                "pause",
                "manager-cut",
                "manager-loss",
            ];
            let mut f = fault_of(during[rng.below(during.len() as u64) as usize], rng);
            // The other fault hits another node.
            if let Fault::Isolate(n) | Fault::Pause(n) = &mut f {
                if *n == node {
                    *n = (node + 1) % COMPUTE;
                }
            }
            Fault::Recover {
                node,
                during: Box::new(f),
            }
        }
        other => unreachable!("checked class {other}"),
    }
}

/// Run every schedule; the process must already be in its own namespace.
pub fn run(cfg: &NemesisConfig, mut progress: impl FnMut(&ScheduleRun)) -> Vec<ScheduleRun> {
    (cfg.seed..cfg.seed + cfg.schedules)
        .map(|seed| {
            let r = run_schedule(cfg, seed).unwrap_or_else(|e| ScheduleRun {
                seed,
                faults: draw(seed, &cfg.classes, cfg.faults)
                    .iter()
                    .map(|f| f.to_string())
                    .collect(),
                operations: 0,
                unknown: 0,
                violations: vec![format!("the run could not go on: {e}")],
                heals: Vec::new(),
                history: cfg.dir.join(format!("seed-{seed}")),
                replay: cfg.replay(seed),
            });
            progress(&r);
            r
        })
        .collect()
}

fn run_schedule(cfg: &NemesisConfig, seed: u64) -> Result<ScheduleRun, String> {
    let faults = draw(seed, &cfg.classes, cfg.faults);
    let dir = cfg.dir.join(format!("seed-{seed}"));
    let proxy = proxy_for(&faults, &cluster::addrs(), seed)?;
    let mut procs = Procs::start(&cfg.exe, &dir, &cfg.bugs, &store(), cfg.membership.clone())?;
    wait_committing(&procs)?;
    let watch = procs.watch.clone();
    let completed = || watch.total.load(Ordering::Relaxed);
    let drive = Drive {
        fault_time: cfg.fault_time,
        settle: SETTLE,
        bound: cfg.bound(),
        completed: &completed,
        proxy,
    };
    let outcome = drive.run(&mut procs, &faults)?;
    let mut violations = outcome.violations;
    let end = finish(&mut procs)?;
    violations.extend(end.violations);
    Ok(ScheduleRun {
        seed,
        faults: faults.iter().map(|f| f.to_string()).collect(),
        operations: end.committed as usize,
        unknown: end.in_doubt as usize,
        violations,
        heals: outcome.heals,
        history: dir,
        replay: cfg.replay(seed),
    })
}

/// Wait (30 s at most) until every compute server commits.
fn wait_committing(p: &Procs) -> Result<(), String> {
    let t = Instant::now();
    while !p
        .watch
        .committing(Duration::from_millis(300))
        .iter()
        .all(|&c| c)
    {
        if t.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "not every compute server committed within 30 s (committing: {:?}); logs in {}",
                p.watch.committing(Duration::from_millis(300)),
                p.dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// What the end of a run found.
struct End {
    committed: u64,
    in_doubt: u64,
    violations: Vec<String>,
}

/// Kill every compute server, wait until the membership has recovered each
/// one and every memory node is up, then check the memory servers.
fn finish(p: &mut Procs) -> Result<End, String> {
    p.kill_compute();
    let mut violations = Vec::new();
    let failed = match wait_recovered(p) {
        Ok(ids) => ids,
        Err(e) => {
            violations.push(e);
            published_ids(&p.membership_log())
        }
    };
    let t = Instant::now();
    while !tandem_nemesis::drive::Target::whole(p) && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ledger = procs::read_ledgers(&p.ledgers())?;
    let check = procs::check_cluster(&p.cluster(), &store(), &micro(), &ledger, &failed)?;
    violations.extend(check.violations);
    Ok(End {
        committed: ledger.writes_committed,
        in_doubt: ledger.in_doubt,
        violations,
    })
}

/// Wait (30 s at most) until the membership has published the failed ids
/// of every compute node that joined; every id it published.
fn wait_recovered(p: &Procs) -> Result<Vec<u16>, String> {
    let t = Instant::now();
    loop {
        let log = p.membership_log();
        let joined = joined_nodes(&log);
        let missing: Vec<u16> = joined
            .iter()
            .copied()
            .filter(|n| !log.contains(&format!("failed ids of node {n} published")))
            .collect();
        if missing.is_empty() {
            return Ok(published_ids(&log));
        }
        if t.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "the membership never recovered compute nodes {missing:?} after the last kill (its log: {})",
                p.dir.join("membership.log").display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Compute nodes the membership admitted.
fn joined_nodes(log: &str) -> BTreeSet<u16> {
    log.lines()
        .filter_map(|l| l.strip_prefix("membership: compute node "))
        .filter(|l| l.contains(" joined with "))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

/// Every id the membership's log says it published as failed.
fn published_ids(log: &str) -> Vec<u16> {
    let ids: BTreeSet<u16> = log
        .lines()
        .filter(|l| l.contains("published"))
        .filter_map(|l| l.rsplit("(ids [").next()?.split(']').next())
        .flat_map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()))
        .collect();
    ids.into_iter().collect()
}

fn micro() -> MicroSpec {
    MicroSpec {
        keys: KEYS,
        write_ratio: 0.5,
        ops_per_tx: 2,
        chooser: KeyChooser::Uniform,
    }
}

/// The layout `tandem pandora membership` computes from the run's flags.
fn store() -> StoreConfig {
    let mut s = StoreConfig::new(Mode::Pandora, MEMORY as u16, REPLICAS, micro().tables());
    s.partitions_per_table = 64;
    s.log_slots = 1024;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_hits_at_most_one_memory_server() {
        let all = parse_classes("all", true).unwrap();
        for seed in 0..200 {
            for f in draw(seed, &all, 4) {
                if let Fault::Suspect { node, during } = &f {
                    assert!(*node < COMPUTE, "{f}");
                    assert!(
                        matches!(**during, Fault::ManagerLoss(_) | Fault::CutManager(_)),
                        "{f}"
                    );
                }
                let hit = |n: usize| n >= COMPUTE;
                let memory = match &f {
                    Fault::Isolate(n) | Fault::Pause(n) | Fault::Kill(n) => hit(*n) as usize,
                    Fault::Split(g) | Fault::CutManager(g) => g.iter().filter(|&&n| hit(n)).count(),
                    Fault::Recover { node, during } => {
                        assert!(*node < COMPUTE, "{f}");
                        match **during {
                            Fault::Isolate(n) | Fault::Pause(n) => hit(n) as usize,
                            _ => 0,
                        }
                    }
                    _ => 0,
                };
                assert!(memory <= 1, "seed {seed}: {f}");
            }
        }
    }

    #[test]
    fn classes_are_checked() {
        assert_eq!(parse_classes("all", true).unwrap().len(), CLASSES.len());
        assert_eq!(
            parse_classes("all", false).unwrap().len(),
            CLASSES.len() - 1
        );
        assert!(parse_classes("zk-cut", false)
            .unwrap_err()
            .contains("zookeeper"));
        assert!(parse_classes("flip", true)
            .unwrap_err()
            .contains("do not talk"));
        assert!(parse_classes("kill,typo", true)
            .unwrap_err()
            .contains("typo"));
        for c in CLASSES {
            let f = draw(3, &[c.to_string()], 3);
            assert!(f.iter().all(|f| f.class() == c), "{c}: {f:?}");
        }
    }

    #[test]
    fn the_log_names_joined_nodes_and_published_ids() {
        let log = "membership: compute node 1 joined with 8 coordinators\n\
                   membership: compute node 2 joined with 8 coordinators\n\
                   membership: failed ids of node 1 published 900 us after detection; stealing may start (ids [1, 2, 3])\n\
                   membership: compute node 1 comes back as compute node 40000\n";
        assert_eq!(joined_nodes(log), BTreeSet::from([1, 2]));
        assert_eq!(published_ids(log), vec![1, 2, 3]);
    }
}
