//! Tier 1: the history checker on hand-built histories, one per phenomenon
//! of Adya's DSG with real-time edges (thesis §2.5.1, Defs. 2.5.6–2.5.10),
//! plus histories it must accept (serial, concurrent, unknown outcomes).

use tandem_dart::checker::{AnomalyKind, Checker};
use tandem_dart::history::{Op, Outcome, TxRecord};
use tandem_dart::value::{Value, LOADER_TX, PREV_UNKNOWN};

const X: u64 = 1;
const Y: u64 = 2;

/// A transaction: id, [invoke, complete], outcome, ops.
fn tx(id: u64, invoke: u64, complete: u64, outcome: Outcome, ops: Vec<Op>) -> TxRecord {
    TxRecord {
        id,
        client: id as u32,
        invoke_ns: invoke,
        complete_ns: (outcome != Outcome::Unknown).then_some(complete),
        outcome,
        ops,
    }
}
/// A read of the loaded version.
fn r0(key: u64) -> Op {
    Op::read(key, Some(Value::initial(0)))
}
fn w(key: u64, me: u64, payload: i64, prev: u64) -> Op {
    Op::write(
        key,
        Some(Value {
            payload,
            writer: me,
            prev,
        }),
    )
}
use Outcome::{Aborted, Committed, Unknown};

fn kinds(h: &[TxRecord]) -> Vec<AnomalyKind> {
    Checker::check(h).anomalies.iter().map(|a| a.kind).collect()
}

// Reads must show exactly what was written: build reads from the writes.
fn rw(key: u64, writer: u64, payload: i64, prev: u64) -> Op {
    Op::read(
        key,
        Some(Value {
            payload,
            writer,
            prev,
        }),
    )
}

#[test]
fn serial_and_concurrent_serializable_histories_pass() {
    let h = vec![
        tx(10, 0, 10, Committed, vec![r0(X), w(X, 10, 1, LOADER_TX)]),
        tx(
            11,
            20,
            30,
            Committed,
            vec![
                rw(X, 10, 1, LOADER_TX),
                w(X, 11, 2, 10),
                r0(Y),
                w(Y, 11, 2, LOADER_TX),
            ],
        ),
        // Overlapping read-only transactions may see either side of 12.
        tx(
            12,
            40,
            50,
            Committed,
            vec![rw(X, 11, 2, 10), w(X, 12, 3, 11)],
        ),
        tx(
            13,
            41,
            49,
            Committed,
            vec![rw(X, 11, 2, 10), rw(Y, 11, 2, LOADER_TX)],
        ),
        tx(14, 45, 60, Committed, vec![rw(X, 12, 3, 11)]),
        // Aborted transactions and their reads do not count.
        tx(15, 42, 43, Aborted, vec![r0(X), w(X, 15, 9, LOADER_TX)]),
    ];
    assert_eq!(kinds(&h), vec![]);
}

#[test]
fn g0_write_cycle() {
    // 1 then 2 on X, but 2 then 1 on Y.
    let h = vec![
        tx(
            1,
            0,
            10,
            Committed,
            vec![w(X, 1, 1, LOADER_TX), w(Y, 1, 1, 2)],
        ),
        tx(
            2,
            0,
            10,
            Committed,
            vec![w(X, 2, 2, 1), w(Y, 2, 2, LOADER_TX)],
        ),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G0]);
}

#[test]
fn g1a_aborted_read_and_garbage_read() {
    let h = vec![
        tx(1, 0, 10, Aborted, vec![w(X, 1, 1, PREV_UNKNOWN)]),
        tx(2, 5, 15, Committed, vec![rw(X, 1, 1, PREV_UNKNOWN)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G1a]);
    // A value nobody wrote (a torn read mixing two versions).
    let h = vec![
        tx(1, 0, 10, Committed, vec![w(X, 1, 1, PREV_UNKNOWN)]),
        tx(2, 20, 30, Committed, vec![rw(X, 1, 77, PREV_UNKNOWN)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G1a]);
    let h = vec![tx(2, 20, 30, Committed, vec![rw(X, 99, 1, PREV_UNKNOWN)])];
    assert_eq!(kinds(&h), vec![AnomalyKind::G1a]);
}

#[test]
fn g1b_intermediate_read() {
    let h = vec![
        tx(
            1,
            0,
            10,
            Committed,
            vec![w(X, 1, 1, PREV_UNKNOWN), w(X, 1, 2, PREV_UNKNOWN)],
        ),
        tx(2, 5, 15, Committed, vec![rw(X, 1, 1, PREV_UNKNOWN)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G1b]);
}

#[test]
fn g1c_circular_information_flow() {
    let h = vec![
        tx(
            1,
            0,
            10,
            Committed,
            vec![w(X, 1, 1, PREV_UNKNOWN), rw(Y, 2, 2, PREV_UNKNOWN)],
        ),
        tx(
            2,
            0,
            10,
            Committed,
            vec![w(Y, 2, 2, PREV_UNKNOWN), rw(X, 1, 1, PREV_UNKNOWN)],
        ),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G1c]);
}

#[test]
fn g2_write_skew_and_lost_update() {
    // Litmus 2 (Pandora paper Fig. 5(b)): both read 0, both set their object.
    let h = vec![
        tx(
            1,
            0,
            10,
            Committed,
            vec![r0(X), r0(Y), w(Y, 1, 1, LOADER_TX)],
        ),
        tx(
            2,
            0,
            10,
            Committed,
            vec![r0(Y), r0(X), w(X, 2, 1, LOADER_TX)],
        ),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G2]);
    // Two increments of the same version: a lost update.
    let h = vec![
        tx(1, 0, 10, Committed, vec![r0(X), w(X, 1, 1, LOADER_TX)]),
        tx(2, 0, 10, Committed, vec![r0(X), w(X, 2, 1, LOADER_TX)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G2]);
}

#[test]
fn g2_lost_update_through_a_delete() {
    // Seed 212 of litmus-1-insert-delete: two transactions read the same
    // version of a pair; one deletes both keys, the other overwrites both. The delete names the
    // version it removed, so the two anti-depend on each other.
    let v1 = |k| rw(k, 1, 1, PREV_UNKNOWN);
    let h = vec![
        tx(
            1,
            0,
            10,
            Committed,
            vec![w(X, 1, 1, PREV_UNKNOWN), w(Y, 1, 1, PREV_UNKNOWN)],
        ),
        tx(
            2,
            20,
            40,
            Committed,
            vec![v1(X), v1(Y), Op::delete(X, 1), Op::delete(Y, 1)],
        ),
        tx(
            3,
            20,
            40,
            Committed,
            vec![v1(X), v1(Y), w(X, 3, 3, 1), w(Y, 3, 3, 1)],
        ),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G2]);
    // Serial, it is fine; a blind delete adds no edge.
    let mut ok = h.clone();
    (ok[2].invoke_ns, ok[2].complete_ns) = (50, Some(60));
    ok[2].ops = vec![w(X, 3, 3, PREV_UNKNOWN), w(Y, 3, 3, PREV_UNKNOWN)];
    assert_eq!(kinds(&ok), vec![]);
    let mut blind = h.clone();
    blind[1].ops = vec![Op::delete(X, PREV_UNKNOWN), Op::delete(Y, PREV_UNKNOWN)];
    assert_eq!(kinds(&blind), vec![]);
}

#[test]
fn real_time_violations_are_strict_serializability_violations() {
    // A stale read after the write completed: serializable, not strict.
    let h = vec![
        tx(1, 0, 10, Committed, vec![r0(X), w(X, 1, 1, LOADER_TX)]),
        tx(2, 20, 30, Committed, vec![r0(X)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G2Realtime]);
    // Overlapping: fine.
    let h = vec![
        tx(1, 0, 10, Committed, vec![r0(X), w(X, 1, 1, LOADER_TX)]),
        tx(2, 5, 30, Committed, vec![r0(X)]),
    ];
    assert_eq!(kinds(&h), vec![]);
    // A blind write ordered after a later-invoked one's read of it: wr + rt.
    let h = vec![
        tx(1, 0, 10, Committed, vec![rw(X, 2, 5, PREV_UNKNOWN)]),
        tx(2, 20, 30, Committed, vec![w(X, 2, 5, PREV_UNKNOWN)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G1cRealtime]);
}

#[test]
fn unknown_outcomes_are_never_assumed_absent() {
    // Unobserved unknown writer: it may have aborted; no violation.
    let h = vec![
        tx(1, 0, 0, Unknown, vec![r0(X), w(X, 1, 1, LOADER_TX)]),
        tx(2, 20, 30, Committed, vec![r0(X)]),
    ];
    assert_eq!(kinds(&h), vec![]);
    // Observed: it committed, so its other effects count too — here a lost update.
    let h = vec![
        tx(1, 0, 0, Unknown, vec![r0(X), w(X, 1, 1, LOADER_TX)]),
        tx(2, 20, 30, Committed, vec![rw(X, 1, 1, LOADER_TX)]),
        tx(3, 0, 30, Committed, vec![r0(X), w(X, 3, 1, LOADER_TX)]),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::G2]);
}

#[test]
fn a_cycle_report_names_its_transactions_and_edges() {
    let h = vec![
        tx(
            1,
            0,
            10,
            Committed,
            vec![r0(X), r0(Y), w(Y, 1, 1, LOADER_TX)],
        ),
        tx(
            2,
            0,
            10,
            Committed,
            vec![r0(Y), r0(X), w(X, 2, 1, LOADER_TX)],
        ),
    ];
    let rep = Checker::check(&h);
    let a = &rep.anomalies[0];
    assert_eq!(a.txs.len(), 2);
    assert!(a.description.contains("-rw(key"), "{}", a.description);
    assert_eq!(rep.nodes, 2);
}
