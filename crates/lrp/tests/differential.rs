//! The operational machine against the axiomatic model (refinement): on random
//! small programs every image the LRP machine reaches is RP-legal, the
//! linear-time check agrees with the closure on every image of every policy,
//! and the reachable images are a strict subset of the legal ones (reported:
//! how much smaller).

use std::collections::{BTreeMap, BTreeSet};

use tandem_lrp::cut::Cut;
use tandem_lrp::litmus::{differential, explore, random_program};
use tandem_lrp::{persist_order, EventId, Model, PolicyKind, Sync, Trace};
use tandem_sim::Rng;

/// A random trace (reads from any earlier write to their word, or the
/// initial value) and random images of it: the checks must agree.
#[test]
fn the_linear_check_agrees_with_the_closure_on_random_traces() {
    let mut rng = Rng::new(11);
    let syncs = [Sync::Plain, Sync::Acquire, Sync::Release, Sync::AcqRel];
    let (mut legal, mut illegal) = (0, 0);
    for _ in 0..400 {
        let mut t = Trace::new();
        let mut writes: BTreeMap<u64, Vec<EventId>> = BTreeMap::new();
        for _ in 0..4 + rng.below(14) {
            let (th, addr, sync) = (
                rng.below(3) as u32,
                rng.below(4),
                syncs[rng.below(4) as usize],
            );
            let ws = writes.entry(addr).or_default();
            let from = if ws.is_empty() || rng.chance(0.2) {
                None
            } else {
                Some(ws[rng.below(ws.len() as u64) as usize])
            };
            match rng.below(3) {
                0 => ws.push(t.write(th, addr, sync)),
                1 => {
                    t.read(th, addr, sync, from);
                }
                _ => ws.push(t.rmw(th, addr, sync, from)),
            }
        }
        let cut = Cut::new(&t, 3);
        let p = persist_order(&t, Model::Rp);
        for _ in 0..20 {
            let survived: Vec<usize> = cut
                .by_addr
                .iter()
                .map(|(_, w)| rng.below(w.len() as u64 + 1) as usize)
                .collect();
            let present: BTreeSet<EventId> = cut
                .by_addr
                .iter()
                .zip(&survived)
                .flat_map(|((_, w), &k)| w[..k].iter().copied())
                .collect();
            let fast = cut.check(&survived, &mut Vec::new());
            let slow = p.check(&t, &present);
            assert_eq!(
                fast.is_ok(),
                slow.is_ok(),
                "trace {t:?}, image {present:?}: linear {fast:?}, closure {slow:?}"
            );
            if let Err((missing, present_w)) = fast {
                assert!(
                    p.before(missing, present_w),
                    "the witness is a real persist-order pair"
                );
                illegal += 1;
            } else {
                legal += 1;
            }
        }
    }
    assert!(
        legal > 1000 && illegal > 1000,
        "both verdicts exercised: {legal} legal, {illegal} illegal"
    );
}

#[test]
fn every_policy_agrees_with_the_closure_and_the_rp_policies_stay_legal() {
    let mut rng = Rng::new(5);
    for i in 0..60 {
        let p = random_program(&mut rng, 3, 6, 4);
        for policy in PolicyKind::ALL {
            let o = explore(&p, policy, None, 0..6, 32, |trace, present, legal| {
                let slow = persist_order(trace, Model::Rp).check(trace, present);
                assert_eq!(
                    legal,
                    slow.is_ok(),
                    "program {i} under {}: linear and closure checks disagree on {present:?}",
                    policy.name()
                );
            });
            if policy.enforces_rp() {
                if let Some((img, w)) = o.illegal().next() {
                    panic!(
                        "program {i} {p:?} under {}: image {img:?}: {w}",
                        policy.name()
                    );
                }
            }
        }
    }
}

#[test]
fn lrp_reaches_a_strict_subset_of_the_legal_images() {
    let d = differential(9, 80, 4);
    eprintln!(
        "LRP reached {} of {} RP-legal images ({:.1} %) over {} executions",
        d.reached,
        d.legal,
        100.0 * d.reached as f64 / d.legal as f64,
        d.executions
    );
    assert_eq!(d.reached_illegal, 0);
    assert!(d.executions > 200);
    assert!(
        d.reached < d.legal,
        "the machine is stricter than the model somewhere"
    );
    assert!(d.reached * 4 > d.legal, "but not by much");
}
