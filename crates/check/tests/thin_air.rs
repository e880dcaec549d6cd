//! Hand-written good and bad histories for "no value from thin air".

use tandem_check::{check_no_thin_air, HistOp, ViolationKind};

fn w(key: u64, value: u64, invoke: u64, complete: u64) -> HistOp {
    HistOp::write(1, 0, key, value, invoke, complete)
}

fn r(key: u64, value: Option<u64>, invoke: u64, complete: u64) -> HistOp {
    HistOp::read(2, 1, key, value, invoke, complete)
}

fn reason(ops: &[HistOp]) -> String {
    let v = check_no_thin_air(ops).unwrap_err();
    assert_eq!(v.kind, ViolationKind::ThinAir, "{v}");
    v.message
}

#[test]
fn written_and_initial_values_pass() {
    let ops = [
        r(1, None, 0, 5),
        w(1, 10, 10, 20),
        r(1, Some(10), 15, 18),
        r(1, Some(10), 30, 40),
    ];
    assert_eq!(check_no_thin_air(&ops).unwrap().ops, 2);
}

#[test]
fn value_of_a_pending_write_passes() {
    check_no_thin_air(&[w(1, 10, 10, 0).pending(), r(1, Some(10), 100, 110)]).unwrap();
}

#[test]
fn value_nobody_wrote_fails() {
    assert!(reason(&[w(1, 10, 0, 10), r(1, Some(11), 20, 30)]).contains("no write wrote"));
}

#[test]
fn value_written_to_another_key_fails() {
    assert!(reason(&[w(2, 10, 0, 10), r(1, Some(10), 20, 30)]).contains("another key"));
}

#[test]
fn value_of_a_failed_write_fails() {
    assert!(reason(&[w(1, 10, 0, 10).failed(), r(1, Some(10), 20, 30)]).contains("failed"));
}

#[test]
fn value_written_only_after_the_read_fails() {
    let ops = [r(1, Some(10), 0, 10), w(1, 10, 20, 30)];
    assert!(reason(&ops).contains("invoked after"));
    let v = check_no_thin_air(&ops).unwrap_err();
    assert_eq!(v.ops.len(), 2, "{v}");
}

#[test]
fn reads_without_reply_or_failed_are_ignored() {
    check_no_thin_air(&[r(1, Some(7), 0, 0).pending(), r(1, Some(8), 0, 10).failed()]).unwrap();
}
