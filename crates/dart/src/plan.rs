//! What a seed plans for the failures of one simulated run: crash points
//! weighted toward the protocol's windows (docs/DESIGN.md §5).
//!
//! Uniform crash points land after any verb, so the windows where recovery
//! is fragile are rarely hit. Weighted ones pick a [`Window`] first, then
//! the victim's first doorbell in it after a random time:
//! - between the replica writes of one commit (half-replicated objects);
//! - just before a lock release (everything written, every lock held);
//! - right after a log or undo record (logged, nothing written yet);
//! - right after a lock CAS (locked, nothing logged or written yet);
//!
//! and in about a third of the runs they crash the recovery coordinator once
//! too: between its restores, before its unlocks, at any of its doorbells,
//! or around the publication of the failed ids (just before, so recovery is
//! re-run from scratch; or just after, so the re-run overlaps live
//! coordinators stealing the failed node's locks). A quarter of the crashes
//! get a slow recovery coordinator ([`crate::slow`]). A weighted run crashes
//! up to three times: after each recovery a replacement compute node joins
//! with fresh coordinator ids (the paper's "reuse", Fig. 8), so later crashes
//! meet stray locks, replacements and recovered state.

use tandem_sim::Rng;

use crate::tripwire::Window;

/// How crash points are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CrashPoints {
    /// After any verb of the victim (or at a random instant); recovery never crashes.
    Uniform,
    /// Toward the protocol's windows (the default).
    #[default]
    Weighted,
}

impl std::str::FromStr for CrashPoints {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(CrashPoints::Uniform),
            "weighted" => Ok(CrashPoints::Weighted),
            o => Err(format!(
                "unknown crash points '{o}' (expected uniform or weighted)"
            )),
        }
    }
}

impl std::fmt::Display for CrashPoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CrashPoints::Uniform => "uniform",
            CrashPoints::Weighted => "weighted",
        })
    }
}

/// A crash of the recovery coordinator (once per run at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecovererCrash {
    /// At its first doorbell in this window.
    During(Window),
    /// After its last step, before the failed ids are published: the
    /// membership re-issues recovery, which re-runs from the start.
    BeforePublication,
    /// Right after the failed ids reached the survivors: the re-issued
    /// recovery runs beside live coordinators stealing stray locks.
    AfterPublication,
}

/// One crash a seed plans: which node, when, where, and how recovery goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPlan {
    /// Index into the compute nodes still running at `at_ns` (modulo their number).
    pub node: u16,
    pub at_ns: u64,
    pub detect_ns: u64,
    /// `None`: exactly at `at_ns`; else at the victim's first doorbell in
    /// this window at or after `at_ns`.
    pub window: Option<Window>,
    pub recoverer: Option<RecovererCrash>,
    /// Delay of every doorbell of the recovery coordinator (0: none).
    pub slow_recovery_ns: u64,
    /// Seeds the tripwires' draws.
    pub wire_seed: u64,
}

/// Pick from `(weight, item)` pairs.
fn pick<T: Copy>(rng: &mut Rng, mix: &[(u32, T)]) -> T {
    let total: u32 = mix.iter().map(|m| m.0).sum();
    let mut x = rng.below(total as u64) as u32;
    for &(w, t) in mix {
        if x < w {
            return t;
        }
        x -= w;
    }
    unreachable!("x < total")
}

const VICTIM_WINDOWS: [(u32, Option<Window>); 6] = [
    (10, None),
    (20, Some(Window::AnyVerb)),
    (30, Some(Window::BetweenReplicaWrites)),
    (15, Some(Window::BeforeUnlock)),
    (10, Some(Window::AfterLog)),
    (15, Some(Window::AfterLock)),
];

/// The recovery coordinator's crash; `BeforeRound(0)` stands for a step
/// drawn uniformly from the 2nd to the [`RECOVERY_ROUNDS`]-th.
const RECOVERER_CRASHES: [(u32, RecovererCrash); 5] = [
    (25, RecovererCrash::During(Window::BetweenReplicaWrites)),
    (10, RecovererCrash::During(Window::BeforeUnlock)),
    (35, RecovererCrash::During(Window::BeforeRound(0))),
    (15, RecovererCrash::BeforePublication),
    (15, RecovererCrash::AfterPublication),
];

/// Steps of one log recovery: read logs, read locks and versions, restore,
/// unlock, invalidate (a sixth if a log needs a second read).
const RECOVERY_ROUNDS: u64 = 6;

fn recoverer_crash(rng: &mut Rng) -> RecovererCrash {
    match pick(rng, &RECOVERER_CRASHES) {
        RecovererCrash::During(Window::BeforeRound(_)) => RecovererCrash::During(
            Window::BeforeRound(rng.range_inclusive(2, RECOVERY_ROUNDS) as u32),
        ),
        c => c,
    }
}

/// How many crashes a weighted run plans.
const CRASHES: [(u32, usize); 3] = [(40, 1), (35, 2), (25, 3)];
pub const MAX_CRASHES: usize = 3;

/// The crashes a seed plans, in time order: somewhere in the busy part of
/// the run (about 30 µs of simulated time per transaction of a client), with
/// a quick or a slow verdict, so revocation races the victim's verbs in
/// flight. `slow_recovery_ns` forces a slow recovery coordinator on every crash.
pub fn plans_for_seed(
    seed: u64,
    txs_per_client: u64,
    points: CrashPoints,
    slow_recovery_ns: Option<u64>,
) -> Vec<CrashPlan> {
    let mut rng = Rng::new(seed ^ 0xDA27_C4A5);
    let busy_ns = (txs_per_client * 30_000).max(4_000);
    let n = if points == CrashPoints::Weighted {
        pick(&mut rng, &CRASHES)
    } else {
        1
    };
    let mut plans: Vec<CrashPlan> = (0..n)
        .map(|_| CrashPlan::draw(&mut rng, busy_ns, points))
        .collect();
    plans.sort_by_key(|p| p.at_ns);
    // One detector timeout per run (the membership's), quick or slow as
    // the first crash's window suggests.
    let quick = rng.chance(if matches!(plans[0].window, None | Some(Window::AnyVerb)) {
        0.5
    } else {
        0.2
    });
    let detect_ns = if quick {
        400 + rng.below(1_600)
    } else {
        20_000
    };
    for p in &mut plans {
        p.detect_ns = detect_ns;
        if let Some(ns) = slow_recovery_ns {
            p.slow_recovery_ns = ns;
        }
    }
    plans
}

impl CrashPlan {
    fn draw(rng: &mut Rng, busy_ns: u64, points: CrashPoints) -> CrashPlan {
        let at_ns = rng.range_inclusive(1_000, busy_ns * 3 / 4);
        let node = rng.below(1 << 15) as u16;
        let window = match points {
            CrashPoints::Uniform => rng.chance(0.75).then_some(Window::AnyVerb),
            CrashPoints::Weighted => pick(rng, &VICTIM_WINDOWS),
        };
        let mut plan = CrashPlan {
            node,
            at_ns,
            detect_ns: 0,
            window,
            recoverer: None,
            slow_recovery_ns: 0,
            wire_seed: rng.next_u64(),
        };
        if points == CrashPoints::Weighted {
            plan.recoverer = rng.chance(0.35).then(|| recoverer_crash(rng));
            plan.slow_recovery_ns = if rng.chance(0.25) {
                rng.range_inclusive(20_000, 250_000)
            } else {
                0
            };
        }
        plan
    }

    /// A short description for the replay message.
    pub fn describe(&self) -> String {
        let at = match self.window {
            None => format!("at {} ns", self.at_ns),
            Some(w) => format!("at its first doorbell {w:?} after {} ns", self.at_ns),
        };
        let mut s = format!("a compute node crashed {at}");
        if let Some(r) = self.recoverer {
            s += &format!("; the recovery coordinator crashed {r:?}");
        }
        if self.slow_recovery_ns > 0 {
            s += &format!(
                "; recovery slowed by {} ns per doorbell",
                self.slow_recovery_ns
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_plans_reach_every_window_and_uniform_ones_none() {
        let plans: Vec<CrashPlan> = (0..300)
            .flat_map(|s| plans_for_seed(s, 60, CrashPoints::Weighted, None))
            .collect();
        for (_, w) in VICTIM_WINDOWS {
            assert!(plans.iter().any(|p| p.window == w), "{w:?}");
        }
        for (_, r) in RECOVERER_CRASHES {
            let same = |p: &CrashPlan| match (p.recoverer, r) {
                (
                    Some(RecovererCrash::During(Window::BeforeRound(n))),
                    RecovererCrash::During(Window::BeforeRound(_)),
                ) => n >= 2,
                (x, r) => x == Some(r),
            };
            assert!(plans.iter().any(same), "{r:?}");
        }
        assert!(plans.iter().any(|p| p.slow_recovery_ns > 0));
        assert!((0..100)
            .any(|s| plans_for_seed(s, 60, CrashPoints::Weighted, None).len() == MAX_CRASHES));
        for s in 0..100 {
            let u = plans_for_seed(s, 60, CrashPoints::Uniform, None);
            assert_eq!(u.len(), 1);
            assert!(
                u[0].recoverer.is_none()
                    && u[0].slow_recovery_ns == 0
                    && matches!(u[0].window, None | Some(Window::AnyVerb))
            );
        }
        assert_eq!(
            plans_for_seed(3, 60, CrashPoints::Uniform, Some(7))[0].slow_recovery_ns,
            7
        );
    }
}
