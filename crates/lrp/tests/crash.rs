//! The crash checker on every data structure: LRP, SB, BB and eager
//! flushing give no violation at any crash point of any seed; NOP (and
//! ARP, which the thesis rules out) do, which shows the checker has teeth.

use tandem_lrp::check::{check, CheckOpts, Report};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::PolicyKind;

/// Seeds per (structure, policy); `LRP_SEEDS` raises it.
fn seeds() -> u64 {
    std::env::var("LRP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

fn run(lfd: LfdKind, policy: PolicyKind, seeds: u64) -> Report {
    check(&CheckOpts::new(lfd, policy), 1, seeds, |_, _| {})
}

#[test]
fn the_rp_policies_never_leave_an_unrecoverable_image() {
    for lfd in LfdKind::ALL {
        for policy in [
            PolicyKind::Lrp,
            PolicyKind::Sb,
            PolicyKind::Bb,
            PolicyKind::Eager,
        ] {
            let r = run(lfd, policy, seeds());
            assert!(
                r.crash_points > 0 && r.images > r.crash_points,
                "{} {}: images were checked",
                lfd.name(),
                policy.name()
            );
            if let Some(v) = r.violations.first() {
                panic!(
                    "{} under {}: {} violation at t={}: {}\nreplay: {}",
                    lfd.name(),
                    policy.name(),
                    v.level,
                    v.time,
                    v.detail,
                    v.replay
                );
            }
        }
    }
}

#[test]
fn nop_and_arp_leave_unrecoverable_images() {
    for lfd in LfdKind::ALL {
        for policy in [PolicyKind::Nop, PolicyKind::Arp] {
            let r = run(lfd, policy, 10);
            assert!(
                r.violating_seeds > 0,
                "{} under {}: no violation in 10 seeds",
                lfd.name(),
                policy.name()
            );
        }
    }
}

/// The replay command names everything needed: running it again finds the same violation.
#[test]
fn a_violation_replays_from_its_seed() {
    let mut o = CheckOpts::new(LfdKind::Queue, PolicyKind::Nop);
    o.ops = 8;
    let first = check(&o, 3, 1, |_, _| {});
    let again = check(&o, 3, 1, |_, _| {});
    let (a, b) = (&first.violations[0], &again.violations[0]);
    assert_eq!((a.time, &a.detail), (b.time, &b.detail));
    assert!(
        a.replay.contains("--seed 3")
            && a.replay.contains("--policy nop")
            && a.replay.contains("--lfd queue")
    );
}
