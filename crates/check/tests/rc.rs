//! The release-consistency checker on hand-written Kite histories (the
//! litmus tests L1–L3 and the invariants listed in `src/rc.rs`), each bad
//! one failing for its intended reason, then on randomized sequential
//! histories of a correct in-memory store, and one corruption of them.

use std::collections::HashMap;

use tandem_check::{
    check_rc, parse_rc_jsonl, rc_to_jsonl, Class, RcKind, RcOp, RcReport, RcViolation,
    RcViolationKind, Version,
};

/// Keys: a data item and two flags.
const X: u64 = 1;
const F: u64 = 2;
const G: u64 = 3;

fn v(n: u32) -> Version {
    Version(n, 0, 0)
}

fn op(session: u64, kind: RcKind, invoke: u64, complete: u64) -> RcOp {
    RcOp {
        session,
        node: session as u16,
        kind,
        invoke_ns: invoke,
        complete_ns: Some(complete),
    }
}

fn pending(mut op: RcOp) -> RcOp {
    op.complete_ns = None;
    op
}

fn write(s: u64, key: u64, value: u64, version: Version, t: (u64, u64)) -> RcOp {
    op(
        s,
        RcKind::Write {
            key,
            value,
            version,
        },
        t.0,
        t.1,
    )
}

fn read(s: u64, key: u64, value: u64, version: Version, t: (u64, u64)) -> RcOp {
    op(
        s,
        RcKind::Read {
            key,
            value,
            version,
        },
        t.0,
        t.1,
    )
}

fn release(s: u64, key: u64, value: u64, version: Version, t: (u64, u64)) -> RcOp {
    op(
        s,
        RcKind::Release {
            key,
            value,
            version,
        },
        t.0,
        t.1,
    )
}

fn acquire(s: u64, key: u64, value: u64, version: Version, t: (u64, u64)) -> RcOp {
    op(
        s,
        RcKind::Acquire {
            key,
            value,
            version,
        },
        t.0,
        t.1,
    )
}

fn rmw(
    s: u64,
    key: u64,
    (old, old_version): (u64, Version),
    (new, version): (u64, Version),
    t: (u64, u64),
) -> RcOp {
    op(
        s,
        RcKind::Rmw {
            key,
            old,
            old_version,
            new,
            version,
        },
        t.0,
        t.1,
    )
}

fn cas_fail(
    s: u64,
    key: u64,
    expected: u64,
    (value, version): (u64, Version),
    local: bool,
    t: (u64, u64),
) -> RcOp {
    op(
        s,
        RcKind::CasFail {
            key,
            expected,
            value,
            version,
            local,
        },
        t.0,
        t.1,
    )
}

/// The violation, asserting its kind.
fn fails(ops: &[RcOp], kind: RcViolationKind) -> RcViolation {
    let v = check_rc(ops).expect_err("the history should fail");
    assert_eq!(v.kind, kind, "{v}");
    v
}

fn passes(ops: &[RcOp]) -> RcReport {
    check_rc(ops).unwrap_or_else(|v| panic!("the history should pass:\n{v}"))
}

/// L1 (Kite paper §4.1, Fig. 1): S1 writes X then releases the flag; S2 acquires the
/// flag, then reads X (returning `x`, at `xv`).
fn l1(x: u64, xv: Version) -> Vec<RcOp> {
    vec![
        write(1, X, 1, v(1), (0, 10)),
        release(1, F, 1, v(1), (11, 20)),
        acquire(2, F, 1, v(1), (21, 30)),
        read(2, X, x, xv, (31, 35)),
    ]
}

#[test]
fn l1_producer_consumer_passes() {
    let report = passes(&l1(1, v(1)));
    assert_eq!(
        report,
        RcReport {
            ops: 4,
            keys: 2,
            sync_ops: 2,
            reads_checked: 1
        }
    );
}

#[test]
fn empty_history_passes() {
    assert_eq!(passes(&[]), RcReport::default());
}

#[test]
fn l1_passes_when_the_acquire_overlaps_the_release() {
    let mut ops = l1(1, v(1));
    ops[2].invoke_ns = 15;
    passes(&ops);
}

#[test]
fn l1_stale_read_after_the_acquire_fails_barrier() {
    let v = fails(&l1(0, Version::default()), RcViolationKind::Barrier);
    assert_eq!(v.key, Some(X));
    assert_eq!(
        v.ops,
        l1(0, Version::default()),
        "the whole chain W, release, acquire, R: {v}"
    );
    let shown = v.to_string();
    assert!(
        shown.starts_with("Barrier: key 1: session 2 read version 0.0.0"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "failing piece (4 ops):\n    session 1 @node 1: write k1 := 1 @1.0.0  [0, 10]"
        ),
        "{shown}"
    );
}

/// L2 (the Kite paper's supplementary material, Fig. 3): W(x) in S1, release
/// f1; S2 acquires f1, releases G; S3 acquires G, reads X. The ops overlap so
/// that no real-time edge links S1 to S3: the chain is reads-from and session
/// order only.
fn l2(x: u64, xv: Version) -> Vec<RcOp> {
    vec![
        write(1, X, 1, v(1), (0, 5)),
        release(1, F, 1, v(1), (10, 100)),
        acquire(2, F, 1, v(1), (20, 90)),
        release(2, G, 1, v(1), (91, 200)),
        acquire(3, G, 1, v(1), (85, 190)),
        read(3, X, x, xv, (191, 195)),
    ]
}

#[test]
fn l2_transitive_chain_fresh_passes() {
    assert_eq!(passes(&l2(1, v(1))).reads_checked, 1);
}

#[test]
fn l2_transitive_chain_stale_fails_barrier_with_the_chain() {
    let v = fails(&l2(0, Version::default()), RcViolationKind::Barrier);
    assert_eq!(
        v.ops.len(),
        6,
        "W, release f1, acquire f1, release G, acquire G, R: {v}"
    );
}

#[test]
fn l2_pipelined_session_chain_stale_fails_barrier() {
    // S2's release G is invoked before its acquire of F completes (an async
    // session): only session order links them, not real time.
    let mut ops = l2(0, Version::default());
    ops[2].complete_ns = Some(95);
    fails(&ops, RcViolationKind::Barrier);
    ops[5] = read(3, X, 1, v(1), (191, 195));
    passes(&ops);
}

#[test]
fn l2_sequential_chain_stale_fails_barrier() {
    let ops = vec![
        write(1, X, 1, v(1), (0, 5)),
        release(1, F, 1, v(1), (10, 20)),
        acquire(2, F, 1, v(1), (30, 40)),
        release(2, G, 1, v(1), (50, 60)),
        acquire(3, G, 1, v(1), (70, 80)),
        read(3, X, 0, Version::default(), (90, 95)),
    ];
    fails(&ops, RcViolationKind::Barrier);
}

#[test]
fn stale_read_without_an_acquire_passes() {
    let ops = vec![
        write(1, X, 1, v(1), (0, 10)),
        release(1, F, 1, v(1), (11, 20)),
        read(2, X, 0, Version::default(), (30, 35)),
    ];
    assert_eq!(passes(&ops).reads_checked, 0);
}

#[test]
fn stale_read_after_an_acquire_of_an_older_flag_passes() {
    // The acquire overlaps the release and reads the flag before it.
    let ops = vec![
        write(1, X, 1, v(1), (0, 5)),
        release(1, F, 1, v(1), (10, 50)),
        acquire(2, F, 0, Version::default(), (20, 40)),
        read(2, X, 0, Version::default(), (41, 45)),
    ];
    assert_eq!(passes(&ops).reads_checked, 1);
}

#[test]
fn stale_read_of_a_write_after_the_release_passes() {
    // The write follows the release in S1: nothing orders it before S2's read.
    let ops = vec![
        release(1, F, 1, v(1), (0, 10)),
        write(1, X, 1, v(1), (11, 15)),
        acquire(2, F, 1, v(1), (20, 30)),
        read(2, X, 0, Version::default(), (31, 35)),
    ];
    passes(&ops);
}

#[test]
fn real_time_edge_to_an_acquire_of_another_flag_fails_barrier() {
    // L3 across keys: the release completed before S2's acquire of G began.
    let ops = vec![
        write(1, X, 1, v(1), (0, 5)),
        release(1, F, 1, v(1), (10, 20)),
        acquire(2, G, 0, Version::default(), (30, 40)),
        read(2, X, 0, Version::default(), (41, 45)),
    ];
    let v = fails(&ops, RcViolationKind::Barrier);
    assert_eq!(v.ops, ops, "{v}");
}

#[test]
fn acquire_after_a_completed_release_reading_older_fails_linearizability() {
    // L3: RC_Lin, not just RC_SC.
    let ops = vec![
        release(1, F, 1, v(1), (0, 10)),
        acquire(2, F, 0, Version::default(), (20, 30)),
    ];
    let v = fails(&ops, RcViolationKind::NotLinearizable);
    assert_eq!((v.key, v.ops.len()), (Some(F), 2), "{v}");
}

#[test]
fn release_after_a_completed_acquire_writing_older_fails_linearizability() {
    let ops = vec![
        release(1, F, 1, v(5), (0, 10)),
        acquire(2, F, 1, v(5), (20, 30)),
        release(3, F, 2, v(3), (40, 50)),
    ];
    fails(&ops, RcViolationKind::NotLinearizable);
}

#[test]
fn happens_before_cycle_fails_linearizability() {
    // Pipelined sessions: each release follows, in session order, an
    // acquire that read the other session's release.
    let ops = vec![
        acquire(1, F, 1, v(1), (0, 100)),
        release(1, G, 1, v(1), (1, 20)),
        acquire(2, G, 1, v(1), (0, 100)),
        release(2, F, 1, v(1), (2, 30)),
    ];
    let v = fails(&ops, RcViolationKind::NotLinearizable);
    assert!(v.message.contains("cycle"), "{v}");
    assert_eq!(v.ops.len(), 4, "{v}");
}

#[test]
fn two_rmws_reading_the_same_version_fail_atomicity() {
    let ops = vec![
        rmw(
            1,
            F,
            (0, Version::default()),
            (1, Version(0, 0, 1)),
            (0, 10),
        ),
        rmw(
            2,
            F,
            (0, Version::default()),
            (5, Version(0, 0, 2)),
            (0, 10),
        ),
    ];
    let v = fails(&ops, RcViolationKind::RmwAtomicity);
    assert!(v.message.contains("same version"), "{v}");
}

#[test]
fn rmw_skipping_a_known_write_fails_atomicity() {
    let ops = vec![
        write(1, F, 7, v(1), (0, 5)),
        rmw(2, F, (0, Version::default()), (1, v(2)), (10, 20)),
    ];
    let v = fails(&ops, RcViolationKind::RmwAtomicity);
    assert!(v.message.contains("skipping the write of 1.0.0"), "{v}");
    assert_eq!(v.ops.len(), 2);
}

#[test]
fn rmw_skipping_a_known_write_passes_with_a_pending_rmw() {
    let ops = vec![
        write(1, F, 7, v(1), (0, 5)),
        rmw(2, F, (0, Version::default()), (1, v(2)), (10, 20)),
        pending(rmw(
            3,
            F,
            (0, Version::default()),
            (0, Version::default()),
            (0, 0),
        )),
    ];
    passes(&ops);
}

#[test]
fn rmw_writing_no_newer_version_fails_atomicity() {
    let ops = vec![
        write(1, F, 7, v(2), (0, 5)),
        rmw(2, F, (7, v(2)), (8, v(1)), (10, 20)),
    ];
    assert!(fails(&ops, RcViolationKind::RmwAtomicity)
        .message
        .contains("not newer"));
}

#[test]
fn cas_failing_on_its_expected_value_fails_atomicity() {
    let ops = vec![cas_fail(1, F, 0, (0, Version::default()), false, (0, 10))];
    fails(&ops, RcViolationKind::RmwAtomicity);
}

/// A counter: FAA by 1 from sessions 1..=3, in turn.
fn counter() -> Vec<RcOp> {
    vec![
        rmw(
            1,
            G,
            (0, Version::default()),
            (1, Version(0, 0, 1)),
            (0, 10),
        ),
        rmw(2, G, (1, Version(0, 0, 1)), (2, Version(0, 0, 2)), (20, 30)),
        rmw(3, G, (2, Version(0, 0, 2)), (3, Version(0, 0, 3)), (40, 50)),
        cas_fail(1, G, 0, (3, Version(0, 0, 3)), true, (60, 61)),
        read(2, G, 3, Version(0, 0, 3), (70, 71)),
    ]
}

#[test]
fn counter_passes() {
    let report = passes(&counter());
    assert_eq!((report.sync_ops, report.reads_checked), (3, 2));
}

#[test]
fn counter_with_duplicate_counts_fails() {
    // A pending increment explains the third one's read (any value, any
    // version), so only the counter check sees two increments read 1.
    let mut ops = counter();
    ops[2] = rmw(3, G, (1, Version(5, 0, 0)), (2, Version(5, 0, 1)), (40, 50));
    ops.truncate(3);
    ops.push(pending(rmw(
        4,
        G,
        (0, Version::default()),
        (0, Version::default()),
        (0, 0),
    )));
    let v = fails(&ops, RcViolationKind::Counter);
    assert!(v.message.contains("same count 1"), "{v}");
    assert_eq!(v.ops.len(), 2);
}

#[test]
fn read_of_a_never_written_value_fails_thin_air() {
    let ops = vec![write(1, X, 1, v(1), (0, 10)), read(2, X, 5, v(2), (20, 30))];
    let v = fails(&ops, RcViolationKind::ThinAir);
    assert_eq!((v.key, v.ops.len()), (Some(X), 1), "{v}");
}

#[test]
fn read_of_a_version_with_another_value_fails_thin_air() {
    let ops = vec![write(1, X, 1, v(1), (0, 10)), read(2, X, 2, v(1), (20, 30))];
    assert!(fails(&ops, RcViolationKind::ThinAir)
        .message
        .contains("wrote 1"));
}

#[test]
fn read_of_a_write_invoked_after_it_completed_fails_thin_air() {
    let ops = vec![read(2, X, 1, v(1), (0, 10)), write(1, X, 1, v(1), (20, 30))];
    assert!(fails(&ops, RcViolationKind::ThinAir)
        .message
        .contains("invoked after"));
}

#[test]
fn initial_version_with_another_value_fails_thin_air() {
    fails(
        &[acquire(1, F, 3, Version::default(), (0, 10))],
        RcViolationKind::ThinAir,
    );
}

#[test]
fn pending_write_explains_a_read() {
    let ops = vec![
        pending(write(1, X, 7, Version::default(), (0, 0))),
        pending(release(3, F, 9, Version::default(), (0, 0))),
        read(2, X, 7, v(3), (10, 20)),
        acquire(2, F, 9, v(4), (30, 40)),
    ];
    let report = passes(&ops);
    assert_eq!(
        report,
        RcReport {
            ops: 4,
            keys: 2,
            sync_ops: 1,
            reads_checked: 0
        }
    );
}

#[test]
fn pending_write_invoked_after_the_read_explains_nothing() {
    let ops = vec![
        read(2, X, 7, v(3), (10, 20)),
        pending(write(1, X, 7, Version::default(), (30, 0))),
    ];
    fails(&ops, RcViolationKind::ThinAir);
}

#[test]
fn duplicate_versions_fail() {
    let ops = vec![write(1, X, 1, v(1), (0, 10)), write(2, X, 2, v(1), (0, 10))];
    assert_eq!(fails(&ops, RcViolationKind::DuplicateVersion).ops.len(), 2);
    fails(
        &[write(1, X, 1, Version::default(), (0, 10))],
        RcViolationKind::DuplicateVersion,
    );
}

#[test]
fn session_reading_below_its_own_write_fails() {
    let ops = vec![
        write(2, X, 9, v(1), (0, 5)),
        write(1, X, 1, v(2), (10, 15)),
        read(1, X, 9, v(1), (20, 25)),
    ];
    let v = fails(&ops, RcViolationKind::SessionOrder);
    assert_eq!(v.ops, ops[1..].to_vec(), "{v}");
}

#[test]
fn session_writing_below_what_it_read_fails() {
    let ops = vec![
        write(2, X, 9, v(2), (0, 5)),
        read(1, X, 9, v(2), (10, 15)),
        write(1, X, 1, v(1), (20, 25)),
    ];
    assert!(fails(&ops, RcViolationKind::SessionOrder)
        .message
        .contains("not newer"));
}

#[test]
fn failed_cas_acquires_and_local_failed_cas_reads() {
    // A non-local failed CAS acquires the flag; a local one is a relaxed read.
    let ops = vec![
        write(1, X, 1, v(1), (0, 10)),
        release(1, F, 1, v(1), (11, 20)),
        cas_fail(2, F, 5, (1, v(1)), false, (21, 30)),
        cas_fail(2, X, 5, (0, Version::default()), true, (31, 35)),
    ];
    assert!(fails(&ops, RcViolationKind::Barrier)
        .message
        .contains("session 2 read version 0.0.0"));
}

#[test]
fn rmws_synchronize_both_ways() {
    let ops = vec![
        write(1, X, 1, v(1), (0, 10)),
        rmw(
            1,
            F,
            (0, Version::default()),
            (1, Version(0, 0, 1)),
            (11, 20),
        ),
        rmw(2, F, (1, Version(0, 0, 1)), (2, Version(0, 0, 2)), (15, 30)),
        read(2, X, 0, Version::default(), (31, 35)),
    ];
    fails(&ops, RcViolationKind::Barrier);
}

#[test]
fn pending_ops_constrain_nothing() {
    let mut ops = l1(1, v(1));
    ops.push(pending(acquire(2, F, 77, v(9), (36, 0))));
    ops.push(pending(read(3, X, 55, v(0), (0, 0))));
    passes(&ops);
}

#[test]
fn json_lines_round_trip() {
    let mut ops = l2(1, v(1));
    ops.push(pending(rmw(
        4,
        G,
        (0, Version::default()),
        (0, Version(1, 2, 3)),
        (5, 0),
    )));
    ops.push(cas_fail(4, G, 9, (1, v(1)), true, (300, 301)));
    let text = rc_to_jsonl(&ops);
    assert_eq!(text.lines().count(), ops.len());
    assert_eq!(parse_rc_jsonl(text.as_bytes()).unwrap(), ops);
    passes(&ops);
}

#[test]
fn the_format_example_passes() {
    let text = r#"{"session":1,"node":0,"op":"write","key":7,"value":42,"version":[3,0,0],"invoke_ns":100,"complete_ns":250}
{"session":1,"node":0,"op":"release","key":1,"value":43,"version":[1,0,0],"invoke_ns":260,"complete_ns":900}
{"session":2,"node":1,"op":"acquire","key":1,"value":43,"version":[1,0,0],"invoke_ns":950,"complete_ns":1700}
{"session":2,"node":1,"op":"read","key":7,"value":42,"version":[3,0,0],"invoke_ns":1710,"complete_ns":1720}
{"session":3,"node":2,"op":"rmw","key":9,"old":0,"old_version":[0,0,0],"new":1,"version":[0,0,1],"invoke_ns":5,"complete_ns":80}
{"session":4,"node":3,"op":"cas_fail","key":9,"expected":5,"value":1,"version":[0,0,1],"local":true,"invoke_ns":90,"complete_ns":91}
"#;
    let ops = parse_rc_jsonl(text.as_bytes()).unwrap();
    assert_eq!(
        passes(&ops),
        RcReport {
            ops: 6,
            keys: 3,
            sync_ops: 3,
            reads_checked: 1
        }
    );
    let mut stale = ops.clone();
    stale[3].kind = RcKind::Read {
        key: 7,
        value: 0,
        version: Version::default(),
    };
    fails(&stale, RcViolationKind::Barrier);
}

// ---- randomized sequential histories ----

/// splitmix64: small, seeded, good enough for test histories.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A correct, sequential in-memory RC store: one op at a time, every read
/// sees the latest write. Versions are Lamport-like (op number, node) for
/// plain writes and the base's clock with the next slot for RMWs.
#[derive(Default)]
struct Store {
    latest: HashMap<u64, (u64, Version)>,
    /// Per key, every (value, version) it held, oldest first.
    history: HashMap<u64, Vec<(u64, Version)>>,
}

impl Store {
    fn get(&self, key: u64) -> (u64, Version) {
        self.latest
            .get(&key)
            .copied()
            .unwrap_or((0, Version::default()))
    }

    fn put(&mut self, key: u64, value: u64, version: Version) {
        self.latest.insert(key, (value, version));
        self.history
            .entry(key)
            .or_insert_with(|| vec![(0, Version::default())])
            .push((value, version));
    }

    /// Run op number `n` of session `s` (node `s`): returns its kind.
    fn step(&mut self, rng: &mut Rng, n: u32, s: u64, key: u64) -> RcKind {
        let (cur, cur_v) = self.get(key);
        let fresh = Version(n, s as u16, 0);
        let value = 1000 + u64::from(n);
        let kind = match rng.below(10) {
            0..=3 => RcKind::Read {
                key,
                value: cur,
                version: cur_v,
            },
            4 | 5 => RcKind::Write {
                key,
                value,
                version: fresh,
            },
            6 => RcKind::Acquire {
                key,
                value: cur,
                version: cur_v,
            },
            7 => RcKind::Release {
                key,
                value,
                version: fresh,
            },
            8 => RcKind::Rmw {
                key,
                old: cur,
                old_version: cur_v,
                new: cur + 1,
                version: Version(cur_v.0, cur_v.1, cur_v.2 + 1),
            },
            _ => RcKind::CasFail {
                key,
                expected: cur + 1,
                value: cur,
                version: cur_v,
                local: rng.below(2) == 0,
            },
        };
        if let Some((version, value)) = kind.written() {
            self.put(key, value, version);
        }
        kind
    }
}

/// `n` sequential ops (op i runs over [10 i, 10 i + 5]) by `sessions`
/// sessions on `keys` keys, with the store that ran them.
fn sequential(seed: u64, n: u32, sessions: u64, keys: u64) -> (Vec<RcOp>, Store) {
    let (mut rng, mut store) = (Rng(seed), Store::default());
    let ops = (1..=n)
        .map(|i| {
            let (s, key) = (1 + rng.below(sessions), rng.below(keys));
            let kind = store.step(&mut rng, i, s, key);
            op(s, kind, 10 * u64::from(i), 10 * u64::from(i) + 5)
        })
        .collect();
    (ops, store)
}

/// Make one relaxed read stale so that the barrier is broken: a read R of
/// key x in session j whose last acquire A read a release (or RMW) of
/// session i ≠ j, where a relaxed write W to x by i precedes that release.
/// R is set to an older version of x than W's, but no older than what j
/// saw of x before (so only the barrier check can catch it). Returns the
/// index of R, or `None` if the history has no such read.
fn corrupt(ops: &mut [RcOp], store: &Store) -> Option<usize> {
    for r in 0..ops.len() {
        let RcKind::Read { key: x, .. } = ops[r].kind else {
            continue;
        };
        let j = ops[r].session;
        let is_acquire = |a: &usize| {
            ops[*a].session == j && matches!(ops[*a].kind.class(), Class::Acquire | Class::Rmw)
        };
        let Some(a) = (0..r).rev().find(is_acquire) else {
            continue;
        };
        let Some(w_version) = missed_write(ops, a, x) else {
            continue;
        };
        let floor = (0..r)
            .filter(|&k| ops[k].session == j && ops[k].key() == x)
            .map(|k| level(&ops[k]))
            .max()
            .unwrap_or_default();
        let older = store.history[&x]
            .iter()
            .find(|&&(_, ver)| ver >= floor && ver < w_version);
        if let Some(&(value, version)) = older {
            ops[r].kind = RcKind::Read {
                key: x,
                value,
                version,
            };
            return Some(r);
        }
    }
    None
}

/// The newest relaxed write to `x` that precedes, in its session, the
/// release that acquire-type op `a` read (if that is another session's).
fn missed_write(ops: &[RcOp], a: usize, x: u64) -> Option<Version> {
    let (read_v, _) = ops[a].kind.read()?;
    let rel = (0..a).find(|&k| {
        ops[k].key() == ops[a].key() && ops[k].kind.written().map(|w| w.0) == Some(read_v)
    })?;
    let i = ops[rel].session;
    if i == ops[a].session || !matches!(ops[rel].kind, RcKind::Release { .. } | RcKind::Rmw { .. })
    {
        return None;
    }
    (0..rel)
        .filter(|&k| {
            ops[k].session == i && ops[k].key() == x && matches!(ops[k].kind, RcKind::Write { .. })
        })
        .map(|k| ops[k].kind.written().expect("a write").0)
        .max()
}

fn level(op: &RcOp) -> Version {
    [op.kind.read(), op.kind.written()]
        .into_iter()
        .flatten()
        .map(|x| x.0)
        .max()
        .unwrap_or_default()
}

#[test]
fn random_sequential_histories_pass_and_a_stale_read_fails_barrier() {
    let mut corrupted = 0;
    for seed in 0..60 {
        let (mut ops, store) = sequential(seed, 300, 4, 3);
        let report = passes(&ops);
        assert!(
            report.reads_checked > 0 && report.sync_ops > 0,
            "seed {seed}: {report:?}"
        );
        let Some(r) = corrupt(&mut ops, &store) else {
            continue;
        };
        corrupted += 1;
        let v = check_rc(&ops).expect_err("a stale read after an acquire must fail");
        assert_eq!(v.kind, RcViolationKind::Barrier, "seed {seed}: {v}");
        assert!(
            v.ops.contains(&ops[r]),
            "seed {seed}: the piece names the stale read: {v}"
        );
        assert_eq!(
            check_rc(&parse_rc_jsonl(rc_to_jsonl(&ops).as_bytes()).unwrap()).unwrap_err(),
            v
        );
    }
    assert!(
        corrupted >= 30,
        "only {corrupted} of 60 seeds had a read to corrupt"
    );
}

#[test]
fn a_long_sequential_history_passes() {
    let (ops, _) = sequential(7, 20_000, 16, 8);
    let report = passes(&ops);
    assert_eq!((report.ops, report.keys), (20_000, 8));
}
