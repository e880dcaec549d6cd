//! Every deliberate bug of spec §5.2 is caught within a fixed seed budget:
//! the mechanism's by the image check on litmus or random programs, the
//! data structures' by the crash checker.

use tandem_lrp::check::{check, CheckOpts};
use tandem_lrp::lfd::LfdKind;
use tandem_lrp::litmus::{explore, random_program, Instr::*, Program};
use tandem_lrp::machine::Config;
use tandem_lrp::{Mutant, PolicyKind, Sync::*};
use tandem_sim::Rng;

fn caught(p: &Program, m: Option<Mutant>, seeds: u64) -> bool {
    explore(p, PolicyKind::Lrp, m, 0..seeds, 64, |_, _, _| {}).illegal().next().is_some()
}

/// The program must be clean without the mutant and caught with it.
fn assert_caught(p: &Program, m: Mutant, seeds: u64) {
    assert!(!caught(p, None, seeds), "{}: the program is illegal even without the mutant", m.name());
    assert!(caught(p, Some(m), seeds), "{} not caught in {seeds} seeds", m.name());
}

/// Random programs (3 threads, up to 6 accesses on 4 words) until one is caught.
fn caught_by_random_programs(m: Mutant, budget: usize) -> bool {
    let mut rng = Rng::new(7);
    (0..budget).any(|_| caught(&random_program(&mut rng, 3, 6, 4), Some(m), 20))
}

#[test]
fn m1_m3_m4_m5_m8_m9_and_coalescing_are_caught_by_random_programs() {
    for m in [Mutant::ReleasesFirst, Mutant::DowngradeNoWait, Mutant::NoDirectoryBlock, Mutant::NoI3, Mutant::ScanCompare, Mutant::NoMinEpoch, Mutant::CoalesceRelease] {
        assert!(caught_by_random_programs(m, 60), "{} survived 60 random programs × 20 seeds", m.name());
    }
}

/// M2: with a RET big enough to hold two older releases, evicting a third
/// persists them newest first.
#[test]
fn m2_releases_out_of_epoch_order() {
    let mut p = Program::new(vec![vec![Store(8, 1, Release), Store(16, 1, Release), Store(24, 1, Release), Fill(3, 2)]], &[8, 16, 24]);
    p.tweak = Some(|c: &mut Config| (c.ret_size, c.ret_watermark) = (8, 6));
    assert_caught(&p, Mutant::ReleaseOrder, 20);
}

/// M6: 4-bit epochs wrap after 15 releases. Without the flush, x keeps
/// min-epoch 14 while the releases after the wrap get epochs 1 and 2, so
/// the engine persisting them skips x (and the release before them).
#[test]
fn m6_epoch_wrap_without_flush() {
    let mut t0: Vec<_> = (1..=14).map(|i| Store(32, i, Release)).collect();
    t0.insert(13, Store(8, 1, Plain));
    t0.extend([Store(24, 1, Release), Store(16, 1, Release), Fill(2, 2)]);
    let mut p = Program::new(vec![t0], &[32, 8, 24, 16]);
    p.tweak = Some(|c: &mut Config| (c.ret_size, c.ret_watermark) = (8, 6));
    assert_caught(&p, Mutant::EpochWrap, 20);
}

/// M7: five releases in a 4-entry RET; the dropped one is later persisted
/// without the write before it.
#[test]
fn m7_ret_overflow_loses_a_release() {
    let t0 = vec![Store(32, 1, Plain), Store(8, 1, Release), Store(16, 1, Release), Store(24, 1, Release), Store(64, 1, Release), Store(72, 1, Release), Fill(1, 2)];
    assert_caught(&Program::new(vec![t0], &[32, 8, 16, 24, 64, 72]), Mutant::RetOverflow, 20);
}

fn lfd_caught(lfd: LfdKind, m: Mutant, seeds: u64) -> bool {
    let mut o = CheckOpts::new(lfd, PolicyKind::Lrp);
    o.mutant = Some(m);
    check(&o, 1, seeds, |_, _| {}).violating_seeds > 0
}

#[test]
fn data_structure_mutants_are_caught_by_the_crash_checker() {
    assert!(lfd_caught(LfdKind::List, Mutant::ListRelaxedLink, 10));
    assert!(lfd_caught(LfdKind::Queue, Mutant::QueueRelaxedLink, 10));
    assert!(lfd_caught(LfdKind::List, Mutant::ListUnlinkUnmarked, 20));
    assert!(lfd_caught(LfdKind::Bst, Mutant::BstEarlyPublish, 20));
}
