//! What the cost model charges, on whole structures (`tandem lrp bench`).

use tandem_lrp::bench::{bench, BenchOpts};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::PolicyKind;

fn opts(lfd: LfdKind, policy: PolicyKind, threads: usize) -> BenchOpts {
    BenchOpts {
        lfd,
        policy,
        threads,
        size: 8192,
        ops: 100,
        nvm: 120,
        hop: 0,
        driver: false,
        ret_watermark: 4,
        seed: 1,
    }
}

fn cycles(lfd: LfdKind, policy: PolicyKind, threads: usize) -> (u64, u64) {
    let r = bench(&opts(lfd, policy, threads));
    (r.cycles, r.stats.stall_directory)
}

/// Synchrobench's driver rewrites each thread's seed and counters every
/// operation. Under BB each rewrite of a line from an older, unpersisted
/// epoch waits for that epoch's persist (an intra-thread conflict, thesis
/// §3.2.2.1); under LRP plain writes coalesce, so on one core it still costs LRP
/// exactly what it costs NOP.
#[test]
fn the_drivers_rewrites_cost_bb_and_not_lrp() {
    let run = |policy, driver| {
        bench(&BenchOpts {
            driver,
            ..opts(LfdKind::Hash, policy, 1)
        })
        .cycles
    };
    let [nop, lrp, bb] = [PolicyKind::Nop, PolicyKind::Lrp, PolicyKind::Bb];
    let (nop_d, nop_n) = (run(nop, true), run(nop, false));
    assert!(
        nop_d > nop_n,
        "the driver's accesses cost nothing: {nop_d} vs {nop_n}"
    );
    assert_eq!(
        run(lrp, true),
        nop_d,
        "LRP waited for its own driver stores"
    );
    let (bb_d, bb_n) = (run(bb, true), run(bb, false));
    assert!(
        bb_d - bb_n > 2 * (nop_d - nop_n),
        "BB paid {} cycles for the driver, NOP {}",
        bb_d - bb_n,
        nop_d - nop_n
    );
}

/// The mesh (Table 3.1) charges distance: the farther a line's directory
/// or its owner, the longer an access, so every structure slows as the
/// cycles per hop grow; with no hop latency the network is left out.
#[test]
fn the_mesh_charges_each_hop() {
    let run = |hop| {
        bench(&BenchOpts {
            hop,
            ..opts(LfdKind::Bst, PolicyKind::Nop, 4)
        })
        .cycles
    };
    let [h0, h1, h2] = [0, 1, 2].map(run);
    assert!(
        h0 < h1 && h1 < h2,
        "cycles by hop latency 0, 1, 2: {h0}, {h1}, {h2}"
    );
}

/// One thread has no inter-thread dependency, so LRP has nothing to wait
/// for: a release to a line the core holds persists the old contents in
/// place, and the core keeps the line exclusively (MESI's E), so its next
/// write to it is a silent upgrade, not a request the directory holds
/// (I4). The MS queue releases `head` and `tail` on every operation: when
/// every such write waited for the directory, LRP ran at 9.9x NOP here.
#[test]
fn a_lone_core_never_waits_for_its_own_write_backs() {
    for lfd in [LfdKind::Queue, LfdKind::Hash, LfdKind::Bst] {
        let (nop, _) = cycles(lfd, PolicyKind::Nop, 1);
        let (lrp, held) = cycles(lfd, PolicyKind::Lrp, 1);
        assert_eq!(held, 0, "{lfd:?}: {held} cycles held by the directory");
        assert_eq!(lrp, nop, "{lfd:?}: LRP {lrp} cycles, NOP {nop}");
    }
}
