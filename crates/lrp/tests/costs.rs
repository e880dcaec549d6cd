//! What the cost model charges, on whole structures (`tandem lrp bench`).

use tandem_lrp::bench::{bench, BenchOpts};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::PolicyKind;

fn cycles(lfd: LfdKind, policy: PolicyKind, threads: usize) -> (u64, u64) {
    let r = bench(&BenchOpts {
        lfd,
        policy,
        threads,
        size: 8192,
        ops: 100,
        nvm: 120,
        ret_watermark: 4,
        seed: 1,
    });
    (r.cycles, r.stats.stall_directory)
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
