//! The operational machine against the axiomatic model (spec §5.2,
//! "refinement / differential"): on random small programs every image the
//! LRP machine reaches is RP-legal, the linear-time check agrees with the
//! closure on every image of every policy, and the reachable images are a
//! strict subset of the legal ones (reported: how much smaller).

use std::collections::{BTreeMap, BTreeSet};

use tandem_lrp::cut::Cut;
use tandem_lrp::litmus::{explore, explore_seed, random_program, Program};
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
            let (th, addr, sync) = (rng.below(3) as u32, rng.below(4), syncs[rng.below(4) as usize]);
            let ws = writes.entry(addr).or_default();
            let from = if ws.is_empty() || rng.chance(0.2) { None } else { Some(ws[rng.below(ws.len() as u64) as usize]) };
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
            let survived: Vec<usize> = cut.by_addr.iter().map(|(_, w)| rng.below(w.len() as u64 + 1) as usize).collect();
            let present: BTreeSet<EventId> = cut.by_addr.iter().zip(&survived).flat_map(|((_, w), &k)| w[..k].iter().copied()).collect();
            let fast = cut.check(&survived, &mut Vec::new());
            let slow = p.check(&t, &present);
            assert_eq!(fast.is_ok(), slow.is_ok(), "trace {t:?}, image {present:?}: linear {fast:?}, closure {slow:?}");
            if let Err((missing, present_w)) = fast {
                assert!(p.before(missing, present_w), "the witness is a real persist-order pair");
                illegal += 1;
            } else {
                legal += 1;
            }
        }
    }
    assert!(legal > 1000 && illegal > 1000, "both verdicts exercised: {legal} legal, {illegal} illegal");
}

#[test]
fn every_policy_agrees_with_the_closure_and_the_rp_policies_stay_legal() {
    let mut rng = Rng::new(5);
    for i in 0..60 {
        let p = random_program(&mut rng, 3, 6, 4);
        for policy in PolicyKind::ALL {
            let o = explore(&p, policy, None, 0..6, 32, |trace, present, legal| {
                let slow = persist_order(trace, Model::Rp).check(trace, present);
                assert_eq!(legal, slow.is_ok(), "program {i} under {}: linear and closure checks disagree on {present:?}", policy.name());
            });
            if policy.enforces_rp() {
                if let Some((img, w)) = o.illegal().next() {
                    panic!("program {i} {p:?} under {}: image {img:?}: {w}", policy.name());
                }
            }
        }
    }
}

/// The legal images of one execution, each as the surviving write of every
/// watched word (None: its initial value).
fn legal_images(t: &Trace, watch: &[u64]) -> Option<BTreeSet<Vec<Option<EventId>>>> {
    let p = persist_order(t, Model::Rp);
    let per: Vec<Vec<EventId>> = watch.iter().map(|&a| t.writes().into_iter().filter(|&w| t.events[w].addr == a).collect()).collect();
    let total: usize = per.iter().map(|w| w.len() + 1).product();
    if total > 4096 {
        return None;
    }
    let mut out = BTreeSet::new();
    for mut k in 0..total {
        let survived: Vec<usize> = per.iter().map(|w| {
            let c = k % (w.len() + 1);
            k /= w.len() + 1;
            c
        }).collect();
        let held: BTreeSet<EventId> = per.iter().zip(&survived).flat_map(|(w, &c)| w[..c].iter().copied()).collect();
        let watched: BTreeSet<EventId> = per.iter().flatten().copied().collect();
        let needs_missing = held.iter().any(|&w| watched.iter().any(|&a| !held.contains(&a) && p.before(a, w)));
        if !needs_missing {
            out.insert(per.iter().zip(&survived).map(|(w, &c)| c.checked_sub(1).map(|i| w[i])).collect());
        }
    }
    Some(out)
}

#[test]
fn lrp_reaches_a_strict_subset_of_the_legal_images() {
    let mut rng = Rng::new(9);
    let (mut reached_total, mut legal_total, mut runs) = (0usize, 0usize, 0);
    for _ in 0..80 {
        let p: Program = random_program(&mut rng, 2, 5, 3);
        for seed in 0..4 {
            let mut reached = BTreeSet::new();
            let mut count = 0;
            let (trace, _) = explore_seed(&p, PolicyKind::Lrp, None, seed, 4096, &mut count, |t, present, _| {
                reached.insert(p.watch.iter().map(|&a| present.iter().rev().copied().find(|&e| t.events[e].addr == a)).collect::<Vec<_>>());
            });
            let Some(legal) = legal_images(&trace, &p.watch) else { continue };
            assert!(reached.is_subset(&legal), "reached {reached:?} not within legal {legal:?}");
            reached_total += reached.len();
            legal_total += legal.len();
            runs += 1;
        }
    }
    eprintln!("LRP reached {reached_total} of {legal_total} RP-legal images ({:.1} %) over {runs} executions", 100.0 * reached_total as f64 / legal_total as f64);
    assert!(reached_total < legal_total, "the machine is stricter than the model somewhere");
    assert!(reached_total * 4 > legal_total, "but not by much");
}
