//! Randomized histories: a sequential register simulation whose operations
//! get random overlapping windows around their linearization points (so the
//! history is linearizable by construction), then one read mutated.

use std::collections::HashMap;
use std::time::Instant;

use tandem_check::{
    check_convergence, check_linearizable, check_linearizable_with, check_no_thin_air,
    check_sessions, version_order, FinalStates, HistOp, LinConfig, OpKind, ViolationKind,
};

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

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A generated history with what the simulation knows about it.
struct Sim {
    ops: Vec<HistOp>,
    /// Per key, the values in the order they took effect.
    versions: HashMap<u64, Vec<u64>>,
}

/// `n` operations on `keys` keys. Operation `i` takes effect at `10 i + 5`;
/// its interval reaches up to `window` slots either side. A few writes get
/// no reply (half of those never take effect), a few fail; a few reads get
/// no reply. Sessions are closed loop: an operation goes to a session that
/// is idle at its invocation.
fn generate(seed: u64, n: u64, keys: u64, window: u64) -> Sim {
    let mut rng = Rng(seed);
    let mut sim = Sim {
        ops: Vec::new(),
        versions: HashMap::new(),
    };
    let mut busy_until: Vec<u64> = Vec::new();
    for i in 0..n {
        let at = 10 * i + 5;
        let invoke = at.saturating_sub(rng.below(10 * window + 1));
        let complete = at + rng.below(10 * window + 1);
        let key = rng.below(keys);
        let mut op = if rng.chance(40) {
            write_op(&mut rng, &mut sim, key, i + 1, invoke, complete)
        } else {
            read_op(&mut rng, &sim, key, invoke, complete)
        };
        op.session = idle_session(&mut busy_until, invoke, op.complete_ns);
        op.node = (op.session % 3) as u16;
        sim.ops.push(op);
    }
    sim
}

fn write_op(
    rng: &mut Rng,
    sim: &mut Sim,
    key: u64,
    value: u64,
    invoke: u64,
    complete: u64,
) -> HistOp {
    let op = HistOp::write(0, 0, key, value, invoke, complete);
    let (op, applies) = match rng.below(100) {
        0 | 1 => (op.failed(), false),
        2 => (op.pending(), false),
        3 => (op.pending(), true),
        _ => (op, true),
    };
    if applies {
        sim.versions.entry(key).or_default().push(value);
    }
    op
}

fn read_op(rng: &mut Rng, sim: &Sim, key: u64, invoke: u64, complete: u64) -> HistOp {
    let value = sim.versions.get(&key).and_then(|v| v.last().copied());
    let op = HistOp::read(0, 0, key, value, invoke, complete);
    if rng.chance(1) {
        op.pending()
    } else {
        op
    }
}

/// A session idle at `invoke`, busy until `complete` (forever if `None`).
fn idle_session(busy_until: &mut Vec<u64>, invoke: u64, complete: Option<u64>) -> u64 {
    let s = busy_until
        .iter()
        .position(|&b| b < invoke)
        .unwrap_or_else(|| {
            busy_until.push(0);
            busy_until.len() - 1
        });
    busy_until[s] = complete.unwrap_or(u64::MAX);
    s as u64
}

/// Change one completed read's value to another value written to its key.
/// `None` if the history has no such read.
fn mutate_one_read(rng: &mut Rng, ops: &mut [HistOp]) -> Option<usize> {
    let reads: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].is_ok() && matches!(ops[i].kind, OpKind::Read { .. }))
        .collect();
    for _ in 0..100 {
        let i = reads[rng.below(reads.len() as u64) as usize];
        let OpKind::Read { key, value } = ops[i].kind else {
            unreachable!()
        };
        let written: Vec<u64> = ops
            .iter()
            .filter(|o| !o.is_failed())
            .filter_map(|o| match o.kind {
                OpKind::Write { key: k, value: v } if k == key && Some(v) != value => Some(v),
                _ => None,
            })
            .collect();
        if !written.is_empty() {
            let v = written[rng.below(written.len() as u64) as usize];
            ops[i].kind = OpKind::Read {
                key,
                value: Some(v),
            };
            return Some(i);
        }
    }
    None
}

#[test]
fn generated_histories_pass_every_checker() {
    for seed in 0..40 {
        let sim = generate(seed, 600, 3, 4);
        check_linearizable(&sim.ops).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        check_no_thin_air(&sim.ops).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        check_sessions(&sim.ops, &version_order(&sim.versions))
            .unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        let finals: HashMap<u64, Option<u64>> = sim
            .versions
            .iter()
            .map(|(&k, v)| (k, v.last().copied()))
            .collect();
        let nodes: FinalStates = (0..3).map(|n| (n, finals.clone())).collect();
        check_convergence(&nodes, &sim.ops).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    }
}

#[test]
fn a_mutated_read_is_caught_for_seed_7() {
    let mut sim = generate(7, 600, 3, 4);
    let i = mutate_one_read(&mut Rng(7_007), &mut sim.ops).unwrap();
    for zone_precheck in [true, false] {
        let v = check_linearizable_with(
            &sim.ops,
            &LinConfig {
                zone_precheck,
                ..LinConfig::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            (v.kind, v.key),
            (ViolationKind::NotLinearizable, Some(sim.ops[i].key())),
            "{v}"
        );
        assert!(
            v.ops.contains(&sim.ops[i]),
            "the failing piece holds the mutated read: {v}"
        );
        assert!(v.ops.len() <= 8, "{v}");
        eprintln!("zone pre-check {zone_precheck}: {v}");
    }
}

#[test]
fn mutated_reads_are_caught_most_of_the_time() {
    let (mut caught, tries) = (0, 100);
    let search_only = LinConfig {
        zone_precheck: false,
        ..LinConfig::default()
    };
    for seed in 0..tries {
        let mut sim = generate(seed, 300, 2, 4);
        mutate_one_read(&mut Rng(seed ^ 0xabcd), &mut sim.ops).unwrap();
        let with_zones = check_linearizable(&sim.ops).map_err(|v| v.kind);
        assert_eq!(
            with_zones,
            check_linearizable_with(&sim.ops, &search_only).map_err(|v| v.kind),
            "seed {seed}"
        );
        match with_zones {
            Err(ViolationKind::NotLinearizable) => caught += 1,
            Err(kind) => panic!("seed {seed}: {kind:?}"),
            Ok(_) => {}
        }
    }
    eprintln!("caught {caught} of {tries} mutated histories");
    assert!(caught >= 80, "caught only {caught} of {tries}");
}

fn time_check(what: &str, ops: &[HistOp]) {
    let start = Instant::now();
    let stats = check_linearizable(ops).unwrap();
    let took = start.elapsed();
    eprintln!(
        "{what}: {} ops, {} keys, {} states in {took:?}",
        stats.ops, stats.keys, stats.states
    );
    assert!(took.as_secs() < 20, "{what} took {took:?}");
}

#[test]
fn twenty_thousand_ops_check_quickly() {
    time_check("20k ops, 8 keys, window 4", &generate(1, 20_000, 8, 4).ops);
    time_check("20k ops, 1 key, window 4", &generate(2, 20_000, 1, 4).ops);
    time_check("20k ops, 1 key, window 8", &generate(3, 20_000, 1, 8).ops);
}

#[test]
fn twenty_thousand_ops_with_one_stale_read_fail_fast_thanks_to_zones() {
    let mut sim = generate(4, 20_000, 1, 4);
    mutate_one_read(&mut Rng(44), &mut sim.ops).unwrap();
    for zone_precheck in [true, false] {
        let start = Instant::now();
        let max_states = if zone_precheck { 1_000_000 } else { 100_000 };
        let v = check_linearizable_with(
            &sim.ops,
            &LinConfig {
                zone_precheck,
                max_states,
                ..LinConfig::default()
            },
        )
        .unwrap_err();
        let took = start.elapsed();
        eprintln!("20k ops, 1 key, mutated, zone pre-check {zone_precheck}: {:?}, {} ops in the piece, in {took:?}", v.kind, v.ops.len());
        assert_eq!(
            v.kind,
            if zone_precheck {
                ViolationKind::NotLinearizable
            } else {
                ViolationKind::Undecided
            },
            "{v}"
        );
    }
}
