//! What the cost model charges, on whole structures (`tandem lrp bench`).

use tandem_lrp::bench::{bench, BenchOpts};
use tandem_lrp::experiment::Order;
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::machine::{Config, Core, DEFAULT_HOP, LINE_WORDS};
use tandem_lrp::policy::Nop;
use tandem_lrp::sim::Machine;
use tandem_lrp::{PolicyKind, Sync};

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
        stack_alloc: false,
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

/// The mesh charges distance (8x8, core `t` on tile `t`, line `l`'s
/// directory on tile `l mod 64`). Core 0 reading a line homed on its own
/// tile pays the LLC and the line's 16 flits; one homed on tile 63, 14
/// hops away, pays two 14-hop trips more. A forward goes requester →
/// directory → owner → requester, and a write-back crosses to the
/// directory before NVM's latency. Without the mesh, only the LLC and NVM.
#[test]
fn the_mesh_charges_the_distance_each_message_travels() {
    let core = |hop| {
        Core::new(Config {
            hop,
            ..Config::thesis(64, 4096)
        })
    };
    let read = |hop, t: usize, line: u64| {
        let mut c = core(hop);
        c.access(&mut Nop, t, line, false);
        c.clock[t]
    };
    assert_eq!([read(0, 0, 0), read(0, 0, 63)], [15, 15]);
    assert_eq!(
        [read(2, 0, 0), read(2, 0, 63)],
        [15 + 16, 15 + 2 * 14 * 2 + 16]
    );
    // Core 63 holds line 0 dirty; core 7 reads it: 7 + 14 + 7 hops.
    let mut c = core(2);
    let way = c.access(&mut Nop, 63, 0, true);
    c.dirty_way(63, way);
    // Core 7 asks once core 63 is done, as the scheduler would run it.
    let before = c.clock[63];
    c.clock[7] = before;
    c.advance(before);
    c.access(&mut Nop, 7, 0, false);
    assert_eq!(
        c.clock[7] - before,
        15 + 28 * 2 + 16,
        "a forward across the mesh"
    );
    assert_eq!(core(0).persist_at(0, 63, 0), 120);
    assert_eq!(core(2).persist_at(0, 63, 0), 14 * 2 + 16 + 120);
}

/// The thesis's machine has a mesh (Table 3.1), and the tables charge it:
/// 1 cycle per hop, as in PriME's configuration (`DEFAULT_HOP`). Core 0
/// reading a line homed 14 hops away pays the round trip at that rate;
/// the checker's geometry leaves the mesh out.
#[test]
fn the_default_mesh_charges_one_cycle_per_hop() {
    assert_eq!(DEFAULT_HOP, 1);
    let cfg = Config::thesis(64, 4096);
    assert_eq!(cfg.hop, 1, "the thesis machine's hop latency");
    assert_eq!(Config::check(3, 4096, 1).hop, 0, "the checker's mesh");
    let mut c = Core::new(cfg);
    c.access(&mut Nop, 0, 63, false);
    assert_eq!(
        c.clock[0],
        15 + 2 * 14 + 16,
        "a read across the default mesh"
    );
}

/// A whole-binary trace has each operation's call frames and malloc's
/// bookkeeping (`stack_alloc`). On one core they are 8 stores and 8 loads
/// on the stack per operation, plus a load and a store of the free list's
/// head and count per allocation (one per hash-set insert that adds its
/// key). They cost NOP their accesses. Under BB an operation that rewrites
/// the stack line while an older epoch holding it is still queued to
/// persist waits for it; under LRP plain writes coalesce, so on one core
/// LRP still costs what NOP does.
#[test]
fn the_stack_and_allocator_stores_cost_bb_and_not_lrp() {
    let run = |policy, stack_alloc| {
        bench(&BenchOpts {
            stack_alloc,
            ..opts(LfdKind::Hash, policy, 1)
        })
    };
    let [nop, lrp, bb] = [PolicyKind::Nop, PolicyKind::Lrp, PolicyKind::Bb];
    let (with, without) = (run(nop, true), run(nop, false));
    let ops = 100;
    let extra = with.stats.accesses - without.stats.accesses;
    let mallocs = (extra - 16 * ops) / 4;
    assert!(
        extra >= 16 * ops + 4 && extra <= 20 * ops && (extra - 16 * ops) % 4 == 0,
        "{extra} accesses more with the stack and the allocator, for {ops} operations"
    );
    assert!(
        (ops / 4..=ops * 3 / 4).contains(&mallocs),
        "{mallocs} allocations in {ops} operations, half of them inserts"
    );
    assert!(
        with.cycles > without.cycles,
        "the stack's accesses cost nothing"
    );
    assert_eq!(
        run(lrp, true).cycles,
        with.cycles,
        "LRP waited for its own stack"
    );
    let bb_extra = run(bb, true).cycles - run(bb, false).cycles;
    let nop_extra = with.cycles - without.cycles;
    assert!(
        bb_extra > nop_extra + nop_extra / 2,
        "BB paid {bb_extra} cycles for the stack and the allocator, NOP {nop_extra}"
    );
}

/// The thesis's order SB > BB > LRP > NOP, judged with ties: a cost within
/// 1 % of the one it should exceed is a tie, not a reversal.
#[test]
fn the_order_counts_a_one_percent_gap_as_a_tie() {
    assert_eq!(Order::of(1.5, 1.2, 1.1), Order::Holds);
    assert_eq!(Order::of(1.5, 1.095, 1.1), Order::Tie, "BB 0.5 % under LRP");
    assert_eq!(
        Order::of(1.5, 1.2, 0.995),
        Order::Tie,
        "LRP 0.5 % under NOP"
    );
    assert_eq!(Order::of(1.5, 1.08, 1.1), Order::Fails, "BB 2 % under LRP");
    assert_eq!(Order::of(1.0, 1.2, 1.1), Order::Fails, "SB under BB");
}

/// A core waiting at a barrier issues no coherence request: SB's barrier
/// before a release stalls until the core's dirty lines persist, and only
/// then does the release ask for its line. Core 1 keeps its copy of that
/// line while core 0 waits, and loses it when the release is retried and
/// performed. (Issuing the request during the wait took the line away from
/// the other cores and held the directory twice per release: SB on the
/// queue ran at 2.95x NOP at 2 cycles per hop.)
#[test]
fn a_core_waiting_at_a_barrier_sends_no_request() {
    let mut m = Machine::new(Config::thesis(2, 1024), PolicyKind::Sb);
    let (data, flag) = (0, 4 * LINE_WORDS);
    assert_eq!(m.load(1, flag, Sync::Plain), Some(0));
    assert_eq!(m.store(0, data, 1, Sync::Plain), Some(()));
    let accesses = m.core.stats.accesses;
    assert_eq!(m.store(0, flag, 1, Sync::Release), None, "no barrier wait");
    assert!(
        m.core.way(1, flag / LINE_WORDS).is_some(),
        "core 1 lost its copy during the wait"
    );
    assert_eq!(m.core.stats.accesses, accesses, "an access during the wait");
    assert_eq!(m.store(0, flag, 1, Sync::Release), Some(()));
    assert!(
        m.core.way(1, flag / LINE_WORDS).is_none(),
        "the release left core 1's copy"
    );
}
