//! The litmus programs of `src/litmus.rs` on the operational machine: each image is
//! reachable or not exactly as RP and the mechanism say, under every seed
//! and every subset of the persists in flight at every step.

use tandem_lrp::litmus::{explore, Instr, Instr::*, Outcomes, Program};
use tandem_lrp::{persist_order, Model, Mutant, PolicyKind, Sync::*};

// Words on lines of their own: line k is L1 set k mod 4 in the check geometry.
const X: u64 = 8; // set 1
const Y: u64 = 16; // set 2
const Z: u64 = 24; // set 3
const W: u64 = 32; // set 0
const V: u64 = 40; // set 1

const SEEDS: u64 = 150;

fn prog(threads: Vec<Vec<Instr>>, watch: &[u64]) -> Program {
    Program::new(threads, watch)
}

fn run(p: &Program, policy: PolicyKind, mutant: Option<Mutant>) -> Outcomes {
    explore(p, policy, mutant, 0..SEEDS, 64, |_, _, _| {})
}

fn assert_legal(o: &Outcomes, what: &str) {
    if let Some((img, w)) = o.illegal().next() {
        panic!("{what}: image {img:?} is illegal under RP: {w}");
    }
}

/// MP-persist: T0 writes x, releases y; T1 acquires y, writes z.
fn mp() -> Program {
    prog(
        vec![
            vec![Store(X, 1, Plain), Store(Y, 1, Release), Fill(1, 2)],
            vec![Await(Y, 1), Store(Z, 1, Plain), Fill(3, 2)],
        ],
        &[X, Y, Z],
    )
}

#[test]
fn mp_persist_allows_exactly_the_prefixes_of_the_chain() {
    let o = run(&mp(), PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    let got: Vec<_> = o.images.keys().cloned().collect();
    assert_eq!(
        got,
        vec![vec![0, 0, 0], vec![1, 0, 0], vec![1, 1, 0], vec![1, 1, 1]],
        "LRP reaches every allowed image of x -p-> y -p-> z and no other"
    );
}

#[test]
fn without_a_persistency_model_the_consumer_can_outlive_the_producer() {
    let o = run(&mp(), PolicyKind::Nop, None);
    assert!(
        o.illegal().next().is_some(),
        "NOP must reach an image RP forbids (spec §5.2 litmus 4); got {:?}",
        o.images.keys()
    );
}

#[test]
fn release_barriers_are_one_way() {
    let after = prog(
        vec![vec![
            Store(X, 1, Plain),
            Store(Y, 1, Release),
            Store(W, 1, Plain),
            Fill(0, 2),
        ]],
        &[X, Y, W],
    );
    let o = run(&after, PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    assert!(o.reachable(&[0, 0, 1]), "a write after a release may persist before it and before what preceded it; LRP too strict: {:?}", o.images.keys());
    let before = prog(
        vec![
            vec![Store(Y, 1, Release)],
            vec![
                Store(V, 1, Plain),
                Await(Y, 1),
                Store(Z, 1, Plain),
                Fill(3, 2),
            ],
        ],
        &[V, Y, Z],
    );
    let o = run(&before, PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    assert!(
        o.reachable(&[0, 1, 1]),
        "a write before an acquire need not persist before the writes after it: {:?}",
        o.images.keys()
    );
}

#[test]
fn arp_persists_a_release_before_what_it_publishes_and_only_the_rp_checker_objects() {
    let p = prog(
        vec![
            vec![Store(X, 1, Plain), Store(Y, 1, Release), Fill(0, 1)],
            vec![Await(Y, 1), Fill(3, 1)],
        ],
        &[X, Y],
    );
    let mut arp_accepts = 0;
    let o = explore(
        &p,
        PolicyKind::Arp,
        None,
        0..SEEDS,
        64,
        |trace, present, _| {
            let writes: Vec<_> = present.iter().map(|&e| trace.events[e].addr).collect();
            if writes.contains(&Y) && !writes.contains(&X) {
                assert!(
                    persist_order(trace, Model::Arp)
                        .check(trace, present)
                        .is_ok(),
                    "the ARP rule allows the link before the node"
                );
                arp_accepts += 1;
            }
        },
    );
    assert!(
        matches!(o.images.get(&vec![0, 1]), Some(Err(_))),
        "ARP reaches {{y}} without x and RP flags it: {:?}",
        o.images
    );
    assert!(arp_accepts > 0);
    let o = run(&p, PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    assert!(!o.reachable(&[0, 1]));
}

#[test]
fn writes_to_one_word_persist_in_order() {
    let p = prog(
        vec![vec![
            Store(X, 1, Plain),
            Fill(1, 2),
            Store(X, 2, Plain),
            Fill(1, 2),
        ]],
        &[X],
    );
    for policy in PolicyKind::ALL {
        let o = run(&p, policy, None);
        assert_legal(&o, policy.name());
        assert_eq!(
            o.images.len(),
            3,
            "{}: x = 0, 1 and 2 all reachable: {:?}",
            policy.name(),
            o.images.keys()
        );
    }
}

/// A release to a line that holds an earlier release persists the line
/// first (§3.5.2.2 case 2); coalescing lets the second release persist
/// without the write between them.
#[test]
fn a_release_to_a_dirty_line_persists_the_line_first() {
    let (a, b, c) = (X, X + 1, Z);
    let p = prog(
        vec![vec![
            Store(a, 1, Release),
            Store(c, 1, Plain),
            Store(b, 1, Release),
            Fill(1, 2),
        ]],
        &[a, b, c],
    );
    let o = run(&p, PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    assert!(
        o.reachable(&[1, 0, 0]),
        "the first release persisted alone: {:?}",
        o.images.keys()
    );
    let o = run(&p, PolicyKind::Lrp, Some(Mutant::CoalesceRelease));
    assert!(
        matches!(o.images.get(&vec![1, 1, 0]), Some(Err(_))),
        "coalescing reaches b without c: {:?}",
        o.images
    );
}

/// I3: a successful acquire-RMW persists before the writes after it.
#[test]
fn an_acquire_rmw_persists_before_what_follows_it() {
    let p = prog(
        vec![
            vec![Store(X, 1, Plain), Store(Y, 1, Release)],
            vec![
                Await(Y, 1),
                Cas(Y, 1, 2, AcqRel),
                Store(Z, 1, Plain),
                Fill(3, 2),
            ],
        ],
        &[X, Y, Z],
    );
    let o = run(&p, PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    assert!(o.reachable(&[1, 2, 1]));
    let o = run(&p, PolicyKind::Lrp, Some(Mutant::NoI3));
    assert!(
        matches!(o.images.get(&vec![1, 1, 1]), Some(Err(_))),
        "without I3, z persists before the RMW: {:?}",
        o.images
    );
}

/// Every RET watermark keeps RP, down to 1 (persist the previous release at
/// each new one): the release being made must not be "persisted" before its
/// value is written (found in review; MP failed at watermark 1).
#[test]
fn every_ret_watermark_keeps_rp() {
    let tweaks: [fn(&mut tandem_lrp::machine::Config); 3] = [
        |c| c.ret_watermark = 1,
        |c| c.ret_watermark = 2,
        |c| (c.ret_size, c.ret_watermark) = (32, 28),
    ];
    for tweak in tweaks {
        let mut p = mp();
        p.tweak = Some(tweak);
        let o = run(&p, PolicyKind::Lrp, None);
        assert_legal(&o, "LRP with a tweaked RET");
        assert!(o.reachable(&[1, 1, 1]));
    }
}

/// I4 holds every request the directory sees, forwarded ones included.
/// T0's release of x is persisted in place (the RET reaches its watermark)
/// and T0 writes the line again: a silent E→M upgrade, so the line is
/// only-written in T0's L1 while the release is still in flight. T1's
/// acquire of x goes through the directory, which holds it until the
/// release has persisted; served at once by T0, T1 could persist z first.
#[test]
fn a_forwarded_request_waits_for_the_lines_persist_in_flight() {
    let p = prog(
        vec![
            vec![
                Store(X, 1, Release),
                Store(Y, 1, Release),
                Store(W, 1, Release),
                Store(X + 1, 1, Plain),
            ],
            vec![Fill(4, 3), Await(X, 1), Store(Z, 1, Plain), Fill(3, 2)],
        ],
        &[X, Z],
    );
    let o = run(&p, PolicyKind::Lrp, None);
    assert_legal(&o, "LRP");
    let o = run(&p, PolicyKind::Lrp, Some(Mutant::NoDirectoryBlock));
    assert!(
        matches!(o.images.get(&vec![0, 1]), Some(Err(_))),
        "without I4, z persists before the release it depends on: {:?}",
        o.images
    );
}
