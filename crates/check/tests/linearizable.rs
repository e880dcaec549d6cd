//! Hand-written good and bad histories for per-key linearizability.

use tandem_check::{check_linearizable, check_linearizable_with, HistOp, LinConfig, ViolationKind};

fn w(session: u64, key: u64, value: u64, invoke: u64, complete: u64) -> HistOp {
    HistOp::write(session, 0, key, value, invoke, complete)
}

fn r(session: u64, key: u64, value: Option<u64>, invoke: u64, complete: u64) -> HistOp {
    HistOp::read(session, 0, key, value, invoke, complete)
}

/// The search alone, without the zone pre-check.
fn search_only() -> LinConfig {
    LinConfig {
        zone_precheck: false,
        ..LinConfig::default()
    }
}

/// Fails with and without the zone pre-check, with the same key; returns
/// the default check's violation.
fn fails(ops: &[HistOp]) -> tandem_check::Violation {
    let v = check_linearizable(ops).expect_err("history should not be linearizable");
    assert_eq!(v.kind, ViolationKind::NotLinearizable, "{v}");
    let s =
        check_linearizable_with(ops, &search_only()).expect_err("the search alone should fail too");
    assert_eq!((s.kind, s.key), (v.kind, v.key), "{s}");
    v
}

#[test]
fn empty_and_sequential_histories_pass() {
    assert_eq!(check_linearizable(&[]).unwrap().ops, 0);
    let h = [
        r(1, 0, None, 0, 5),
        w(1, 0, 1, 10, 20),
        r(2, 0, Some(1), 30, 40),
        w(2, 0, 2, 50, 60),
        r(1, 0, Some(2), 70, 80),
    ];
    let stats = check_linearizable(&h).unwrap();
    assert_eq!((stats.keys, stats.ops), (1, 5));
}

#[test]
fn stale_read_after_completed_write_fails() {
    let h = [
        w(1, 0, 1, 0, 10),
        w(1, 0, 2, 20, 30),
        r(2, 0, Some(1), 40, 50),
    ];
    let v = fails(&h);
    assert_eq!(v.key, Some(0));
    assert_eq!(v.ops.len(), 3, "{v}");
}

#[test]
fn initial_value_after_completed_write_fails() {
    fails(&[w(1, 0, 1, 0, 10), r(2, 0, None, 20, 30)]);
}

#[test]
fn read_concurrent_with_write_may_see_either() {
    assert!(check_linearizable(&[w(1, 0, 1, 0, 100), r(2, 0, None, 10, 20)]).is_ok());
    assert!(check_linearizable(&[w(1, 0, 1, 0, 100), r(2, 0, Some(1), 10, 20)]).is_ok());
}

#[test]
fn concurrent_writes_with_reads_in_both_orders_pass() {
    let writes = [w(1, 0, 1, 0, 100), w(2, 0, 2, 0, 100)];
    for (a, b) in [(1, 2), (2, 1)] {
        let mut h = writes.to_vec();
        h.extend([
            r(3, 0, Some(a), 10, 20),
            r(3, 0, Some(b), 30, 40),
            r(4, 0, Some(b), 200, 210),
        ]);
        check_linearizable(&h).unwrap_or_else(|v| panic!("order {a},{b}: {v}"));
    }
}

#[test]
fn flip_flop_between_concurrent_writes_fails() {
    let h = [
        w(1, 0, 1, 0, 100),
        w(2, 0, 2, 0, 100),
        r(3, 0, Some(1), 10, 20),
        r(3, 0, Some(2), 30, 40),
        r(3, 0, Some(1), 50, 60),
    ];
    fails(&h);
}

#[test]
fn touching_intervals_count_as_concurrent() {
    // The read completes at 10, exactly when the write is invoked.
    assert!(check_linearizable(&[r(1, 0, Some(1), 0, 10), w(2, 0, 1, 10, 20)]).is_ok());
    fails(&[r(1, 0, Some(1), 0, 9), w(2, 0, 1, 10, 20)]);
}

#[test]
fn pending_write_observed_later_passes() {
    let h = [
        w(1, 0, 1, 0, 10),
        w(2, 0, 2, 20, 0).pending(),
        r(3, 0, Some(2), 1_000, 1_010),
        r(3, 0, Some(2), 2_000, 2_010),
    ];
    check_linearizable(&h).unwrap();
}

#[test]
fn pending_write_never_observed_passes() {
    let h = [
        w(1, 0, 1, 0, 10),
        w(2, 0, 2, 20, 0).pending(),
        r(3, 0, Some(1), 1_000, 1_010),
    ];
    check_linearizable(&h).unwrap();
}

#[test]
fn pending_write_observed_then_old_value_again_fails() {
    let h = [
        w(1, 0, 1, 0, 10),
        w(2, 0, 2, 20, 0).pending(),
        r(3, 0, Some(2), 100, 110),
        r(3, 0, Some(1), 200, 210),
    ];
    let v = fails(&h);
    assert_eq!(v.ops.len(), 4, "{v}");
}

#[test]
fn pending_write_cannot_act_before_its_invocation() {
    fails(&[r(3, 0, Some(2), 0, 10), w(2, 0, 2, 20, 0).pending()]);
}

#[test]
fn failed_write_is_dropped() {
    check_linearizable(&[w(1, 0, 1, 0, 10).failed(), r(2, 0, None, 20, 30)]).unwrap();
    fails(&[w(1, 0, 1, 0, 10).failed(), r(2, 0, Some(1), 20, 30)]);
}

#[test]
fn unknown_read_imposes_nothing() {
    let h = [
        w(1, 0, 1, 0, 10),
        r(2, 0, Some(99), 20, 0).pending(),
        r(3, 0, None, 30, 0).pending(),
    ];
    assert_eq!(check_linearizable(&h).unwrap().ops, 1);
}

#[test]
fn keys_are_checked_separately() {
    // Value 1 was written to key 0; reading it from key 1 is a violation on key 1.
    let h = [
        w(1, 0, 1, 0, 10),
        r(2, 0, Some(1), 20, 30),
        r(2, 1, Some(1), 40, 50),
        w(3, 2, 3, 0, 10),
    ];
    let v = fails(&h);
    assert_eq!(v.key, Some(1));
    assert_eq!(v.ops.len(), 1, "{v}");
    let stats = check_linearizable(&h[..2]).unwrap();
    assert_eq!(stats.keys, 1);
}

#[test]
fn failing_piece_is_trimmed() {
    // A long good run, then one stale read, then more good operations.
    let mut h = Vec::new();
    for i in 0..500u64 {
        h.push(w(1, 7, i + 1, 100 * i, 100 * i + 40));
        h.push(r(2, 7, Some(i + 1), 100 * i + 50, 100 * i + 90));
    }
    h.push(r(3, 7, Some(250), 50_000, 50_010));
    for i in 0..100u64 {
        h.push(w(1, 7, 1_000 + i, 60_000 + 100 * i, 60_000 + 100 * i + 40));
    }
    let stale = r(3, 7, Some(250), 50_000, 50_010);
    for cfg in [LinConfig::default(), search_only()] {
        let v = check_linearizable_with(&h, &cfg).unwrap_err();
        assert_eq!(
            (v.kind, v.key),
            (ViolationKind::NotLinearizable, Some(7)),
            "{v}"
        );
        assert_eq!(v.ops.len(), 3, "{v}");
        assert!(
            v.ops.contains(&stale) && v.ops.contains(&w(1, 7, 250, 24_900, 24_940)),
            "{v}"
        );
        assert!(v.to_string().contains("not linearizable"), "{v}");
    }
}

/// Ten mutually concurrent writes, then two reads that pin their order:
/// linearizable, but only after a search through many subsets.
fn hard_key() -> Vec<HistOp> {
    let mut h: Vec<HistOp> = (0..10).map(|i| w(i, 0, i + 1, 0, 1_000)).collect();
    h.push(r(99, 0, Some(1), 10, 20));
    h.push(r(99, 0, Some(2), 30, 40));
    h
}

#[test]
fn search_budget_reports_undecided() {
    let cfg = LinConfig {
        max_states: 50,
        ..LinConfig::default()
    };
    let v = check_linearizable_with(&hard_key(), &cfg).unwrap_err();
    assert!(v.is_undecided(), "{v}");
    assert!(
        v.message.contains("undecided after 51 search states"),
        "{v}"
    );
    assert_eq!(v.kind, ViolationKind::Undecided);
    let stats = check_linearizable(&hard_key()).unwrap();
    assert!(stats.states > 50, "{stats:?}");
}

#[test]
fn violation_beats_undecided_on_another_key() {
    let mut h = hard_key();
    h.extend([w(1, 5, 100, 0, 10), r(2, 5, None, 20, 30)]);
    for zone_precheck in [true, false] {
        let cfg = LinConfig {
            max_states: 50,
            zone_precheck,
            ..LinConfig::default()
        };
        let v = check_linearizable_with(&h, &cfg).unwrap_err();
        assert_eq!(
            (v.kind, v.key),
            (ViolationKind::NotLinearizable, Some(5)),
            "{v}"
        );
    }
}

/// Twenty writes that never completed and that no read observed (their
/// coordinators crashed): they may all take effect after everything, so
/// they cost the search nothing, and they hide no violation.
#[test]
fn unobserved_pending_writes_cost_the_search_nothing() {
    let mut h: Vec<HistOp> = (0..20)
        .map(|i| w(10 + i, 0, 100 + i, 5 + i, 0).pending())
        .collect();
    h.extend([w(1, 0, 1, 0, 10), r(2, 0, Some(1), 100, 110)]);
    let cfg = LinConfig {
        max_states: 50,
        ..search_only()
    };
    let stats = check_linearizable_with(&h, &cfg).unwrap();
    assert!(stats.states < 50, "{stats:?}");
    // A stale read among them is still caught.
    h.push(r(3, 0, None, 200, 210));
    fails(&h);
    // One of them observed counts again, and so does its order.
    h.pop();
    h.extend([r(4, 0, Some(105), 300, 310), r(4, 0, Some(1), 400, 410)]);
    fails(&h);
}
