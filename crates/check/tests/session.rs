//! Hand-written good and bad sessions for read-your-writes and monotonic
//! reads.

use std::collections::HashMap;

use tandem_check::{
    check_session, check_sessions, version_order, HistOp, VersionOrder, ViolationKind,
};

/// Key 1's versions, oldest first: 10, 11, 12.
fn order() -> VersionOrder {
    version_order(&HashMap::from([(1, vec![10, 11, 12]), (2, vec![20])]))
}

fn w(session: u64, value: u64, t: u64) -> HistOp {
    HistOp::write(session, 0, 1, value, t, t + 5)
}

fn r(session: u64, value: Option<u64>, t: u64) -> HistOp {
    HistOp::read(session, 0, 1, value, t, t + 5)
}

fn session_violation(ops: &[HistOp]) -> tandem_check::Violation {
    let v = check_sessions(ops, &order()).unwrap_err();
    assert_eq!((v.kind, v.key), (ViolationKind::Session, Some(1)), "{v}");
    v
}

#[test]
fn reading_own_write_or_newer_passes() {
    let ops = [
        w(1, 11, 0),
        r(1, Some(11), 10),
        r(1, Some(12), 20),
        r(1, Some(12), 30),
    ];
    let stats = check_session(&ops, 1, &order()).unwrap();
    assert_eq!((stats.keys, stats.ops), (1, 4));
}

#[test]
fn reading_older_than_own_write_fails() {
    let v = session_violation(&[w(1, 11, 0), r(1, Some(10), 10)]);
    assert!(v.message.contains("own write"), "{v}");
    assert_eq!(v.ops, vec![w(1, 11, 0), r(1, Some(10), 10)]);
}

#[test]
fn reading_initial_value_after_own_write_fails() {
    session_violation(&[w(1, 10, 0), r(1, None, 10)]);
}

#[test]
fn non_monotonic_reads_fail() {
    let v = session_violation(&[r(1, Some(12), 0), r(1, Some(11), 10)]);
    assert!(v.message.contains("earlier read"), "{v}");
}

#[test]
fn other_sessions_and_keys_do_not_constrain() {
    let other_key = HistOp::read(1, 0, 2, None, 10, 15);
    let ops = [w(1, 12, 0), r(2, Some(10), 10), other_key, r(3, None, 20)];
    check_sessions(&ops, &order()).unwrap();
}

#[test]
fn failed_and_pending_ops_are_skipped() {
    let ops = [
        w(1, 12, 0).failed(),
        r(1, Some(11), 10),
        r(1, Some(10), 20).pending(),
    ];
    check_session(&ops, 1, &order()).unwrap();
}

#[test]
fn value_missing_from_the_order_is_bad_input() {
    let v = check_session(&[r(1, Some(99), 0)], 1, &order()).unwrap_err();
    assert_eq!(v.kind, ViolationKind::BadInput, "{v}");
}
