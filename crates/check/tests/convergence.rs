//! Hand-written good and bad final states for eventual convergence.

use std::collections::HashMap;

use tandem_check::{check_convergence, FinalStates, HistOp, ViolationKind};

fn w(key: u64, value: u64) -> HistOp {
    HistOp::write(1, 0, key, value, 0, 10)
}

/// A node and its final `(key, value)` pairs.
type Node<'a> = (u16, &'a [(u64, Option<u64>)]);

fn finals(nodes: &[Node]) -> FinalStates {
    nodes
        .iter()
        .map(|&(n, kv)| (n, kv.iter().copied().collect::<HashMap<_, _>>()))
        .collect()
}

#[test]
fn agreeing_written_values_pass() {
    let ops = [w(1, 10), w(1, 11), w(2, 20)];
    let f = finals(&[
        (0, &[(1, Some(11)), (2, Some(20))]),
        (1, &[(1, Some(11)), (2, Some(20))]),
        (2, &[(1, Some(11)), (2, Some(20))]),
    ]);
    let stats = check_convergence(&f, &ops).unwrap();
    assert_eq!(stats.keys, 2);
}

#[test]
fn disagreeing_nodes_fail() {
    let ops = [w(1, 10), w(1, 11)];
    let f = finals(&[
        (0, &[(1, Some(11))]),
        (1, &[(1, Some(10))]),
        (2, &[(1, Some(11))]),
    ]);
    let v = check_convergence(&f, &ops).unwrap_err();
    assert_eq!((v.kind, v.key), (ViolationKind::Divergent, Some(1)), "{v}");
    assert!(v.message.contains("node 1: 10"), "{v}");
    assert_eq!(v.ops.len(), 2);
}

#[test]
fn missing_key_counts_as_absent() {
    let f = finals(&[(0, &[(1, Some(10))]), (1, &[])]);
    let v = check_convergence(&f, &[w(1, 10)]).unwrap_err();
    assert_eq!(v.kind, ViolationKind::Divergent, "{v}");
    check_convergence(&finals(&[(0, &[(3, None)]), (1, &[])]), &[]).unwrap();
}

#[test]
fn agreed_value_from_thin_air_fails() {
    let f = finals(&[(0, &[(1, Some(99))]), (1, &[(1, Some(99))])]);
    let v = check_convergence(&f, &[w(1, 10)]).unwrap_err();
    assert_eq!((v.kind, v.key), (ViolationKind::ThinAir, Some(1)), "{v}");
    // Value 10 was written, but to key 2.
    let f = finals(&[(0, &[(1, Some(10))]), (1, &[(1, Some(10))])]);
    assert_eq!(
        check_convergence(&f, &[w(2, 10)]).unwrap_err().kind,
        ViolationKind::ThinAir
    );
}

#[test]
fn failed_write_value_fails_but_pending_write_value_passes() {
    let f = finals(&[(0, &[(1, Some(10))]), (1, &[(1, Some(10))])]);
    assert_eq!(
        check_convergence(&f, &[w(1, 10).failed()])
            .unwrap_err()
            .kind,
        ViolationKind::ThinAir
    );
    check_convergence(&f, &[w(1, 10).pending()]).unwrap();
}

#[test]
fn absent_everywhere_after_a_completed_write_fails() {
    let f = finals(&[(0, &[(1, None)]), (1, &[])]);
    let v = check_convergence(&f, &[w(1, 10)]).unwrap_err();
    assert_eq!(v.kind, ViolationKind::Divergent, "{v}");
    assert!(v.message.contains("absent everywhere"), "{v}");
    // A write with no reply, or one that failed, may never have taken effect.
    check_convergence(&f, &[w(1, 10).pending(), w(1, 11).failed()]).unwrap();
}
