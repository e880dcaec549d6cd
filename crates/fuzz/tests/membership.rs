//! Fuzz target: the membership state a restarted membership service reads
//! back from ZooKeeper (JSON of `MembershipState`, as `tandem_cluster::zk`
//! stores it), restored with `Membership::restore` and its memory fleet
//! with `Fleet::restore`, then stepped. A state is refused with a clean
//! error, or restored into one whose invariants hold (the state machine
//! checks them on every durable change) and that keeps them as it runs.

use std::collections::BTreeSet;

use tandem_fuzz::{Fuzz, Rng};
use tandem_membership::{
    Event, Fleet, FleetEvent, Membership, MembershipConfig, MembershipState, MemoryConfig,
    NodeStatus,
};

/// Separates the state's JSON from the event bytes (never in UTF-8).
const SEP: u8 = 0xFF;

fn cfg(replicas: u8) -> MembershipConfig {
    MembershipConfig {
        heartbeat_timeout_ns: 100,
        id_space: 64,
        recycle_threshold: 0.5,
        restore_grace_ns: 10,
        fd_replicas: replicas,
        self_replica: 0,
    }
}

fn event(rng: &mut Rng) -> Event {
    let node = rng.below(6) as u16;
    match rng.below(8) {
        0 => Event::Join {
            node,
            coordinators: 1 + rng.below(6) as u16,
        },
        1 => Event::Heartbeat { node },
        2 => Event::Relay {
            replica: rng.below(3) as u8,
            nodes: vec![node],
        },
        3 => Event::Leave { node },
        4 => Event::Tick,
        5 => Event::LinksTerminated { node },
        6 => Event::RecoveryDone { node },
        _ => Event::ScanDone {
            ids: (0..rng.len(4)).map(|_| rng.below(70) as u16).collect(),
        },
    }
}

fn fleet_event(rng: &mut Rng) -> FleetEvent {
    let node = rng.below(5) as u16;
    match rng.below(5) {
        0 => FleetEvent::Heard { node },
        1 => FleetEvent::Tick,
        2 => FleetEvent::Applied {
            compute: rng.below(6) as u16,
            epoch: rng.below(8) as u64,
        },
        3 => FleetEvent::Replacement {
            node,
            addr: format!("127.0.0.1:{}", rng.below(9)),
        },
        _ => FleetEvent::Copied {
            node,
            epoch: rng.below(8) as u64,
            ok: rng.bool(),
        },
    }
}

/// A state a real service reached, sometimes with one field pushed to a
/// boundary, as JSON; then random event bytes.
fn gen_state(rng: &mut Rng) -> Vec<u8> {
    let mut m = Membership::new(cfg(1));
    let addrs: Vec<String> = (0..1 + rng.below(4))
        .map(|i| format!("10.0.0.{i}:7000"))
        .collect();
    m.attach_fleet(Fleet::new(addrs, 50));
    let mut now = 0;
    for _ in 0..rng.len(60) {
        now += rng.below(80) as u64;
        if rng.one_in(4) {
            m.step_fleet(now, fleet_event(rng), u16::MAX);
        } else {
            m.step(now, event(rng));
        }
    }
    let mut s = m.snapshot();
    match rng.below(12) {
        0 => s.next_id = rng.interesting_u64() as u32,
        1 => s.incarnations = rng.interesting_u64() as u32,
        2 => s.version_blocks = rng.interesting_u64(),
        3 => {
            if let Some(mem) = s.memory.as_mut() {
                mem.epoch = rng.interesting_u64();
            }
        }
        4 => {
            if let Some(mem) = s.memory.as_mut() {
                mem.down.insert(rng.interesting_u64() as u16 % 8);
            }
        }
        5 => {
            s.failed_ids.insert(rng.below(70) as u16);
        }
        6 => {
            s.recycled.insert(rng.below(70) as u16);
        }
        7 => {
            if let Some(n) = s.nodes.values_mut().next() {
                n.ids.push(rng.below(70) as u16);
                n.status = *rng.pick(&[
                    NodeStatus::Alive,
                    NodeStatus::Revoking,
                    NodeStatus::Recovering,
                ]);
            }
        }
        8 => {
            s.memory = Some(MemoryConfig {
                epoch: rng.below(3) as u64,
                addrs: vec![],
                down: BTreeSet::from([0]),
            })
        }
        _ => {}
    }
    let mut b = serde_json::to_vec(&s).unwrap();
    b.push(SEP);
    let n = rng.len(64);
    b.extend(rng.bytes(n));
    b
}

fn check(b: &[u8]) -> String {
    let (json, events) = match b.iter().position(|&x| x == SEP) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &[][..]),
    };
    let state: MembershipState = match serde_json::from_slice(json) {
        Ok(s) => s,
        Err(e) => return format!("json {:?}", e.classify()),
    };
    let replicas = 1 + events.first().map_or(0, |e| e % 3);
    let mut m = match Membership::restore(cfg(replicas), state.clone(), 1_000) {
        Ok(m) => m,
        Err(e) => {
            return format!(
                "refused {}",
                e.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
            )
        }
    };
    // As `run_membership_server` does after a restore.
    let memory = state.memory.clone();
    m.attach_fleet(match memory {
        Some(config) => Fleet::restore(config, 50),
        None => Fleet::new(vec!["10.0.0.1:7000".into()], 50),
    });
    m.reissue_after_restore();
    let mut rng = Rng::new(
        events
            .iter()
            .fold(7u64, |h, &x| h.wrapping_mul(31) ^ x as u64),
    );
    let mut now = 1_000;
    for &e in events.iter().take(48) {
        now += rng.below(60) as u64;
        match e % 5 {
            0 => {
                m.step_fleet(now, fleet_event(&mut rng), u16::MAX);
            }
            1 => {
                let _ = m.new_incarnation();
                m.reserve_version_block();
            }
            _ => {
                m.step(now, event(&mut rng));
            }
        }
    }
    // What it would store now restores again.
    // (Unless a counter started within a run's reach of its refusal bound.)
    let snap = m.snapshot();
    let near = |x: u64| x > u64::MAX / 2 - 1_000;
    let near_limit =
        near(state.version_blocks) || state.memory.as_ref().is_some_and(|c| near(c.epoch));
    match Membership::restore(cfg(replicas), snap.clone(), now) {
        Ok(again) => assert_eq!(again.snapshot().failed_ids, snap.failed_ids),
        Err(e) if near_limit && e.contains("out of range") => {}
        Err(e) => panic!("a restored service's own state is refused: {e}\n{snap:?}"),
    }
    format!(
        "restored {} {}",
        state.nodes.len().min(4),
        state.memory.is_some()
    )
}

#[test]
fn fuzz_membership_restore() {
    Fuzz::new("membership restore (MembershipState JSON -> restore -> step)")
        .budget_times(2.0)
        .max_len(8192)
        .run(gen_state, check);
}

/// Crashes the fuzzer found, as it shrank them.
#[test]
fn regression_an_incarnation_count_past_its_range_is_refused() {
    // `"incarnations": 4294967295`: the next incarnation's id overflowed
    // (wrapping, in a release build, to an id below the reserved range).
    let b = tandem_fuzz::unhex(
        "7b226e6578745f6964223a362c2272656379636c6564223a5b5d2c226661696c65645f696473223a5b5d2c226e6f646573223a7b2230223a7b22696473223a5b5d2c22737461747573223a22616c697665227d2c2235223a7b22696473223a5b5d2c22737461747573223a22616c697665227d7d2c22223a302c22696e6361726e6174696f6e73223a343239343936373239352c22223a7b22223a302c22223a5b22225d2c22223a5b5d7d7dff4c",
    );
    assert!(check(&b).starts_with("refused"));
}

#[test]
fn regression_a_memory_configuration_that_names_a_node_it_lacks_is_refused() {
    // A stored fleet with memory node 3 down among 2: a replacement for it,
    // once copied, indexed past the address list.
    let mut s = Membership::new(cfg(1)).snapshot();
    s.memory = Some(MemoryConfig {
        epoch: 2,
        addrs: vec!["a:1".into(), "b:1".into()],
        down: BTreeSet::from([3]),
    });
    let e = Membership::restore(cfg(1), s.clone(), 0)
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("memory node 3"), "{e}");
    // And an epoch at the end of its range (the next hold overflowed it).
    s.memory = Some(MemoryConfig {
        epoch: u64::MAX,
        addrs: vec!["a:1".into()],
        down: BTreeSet::new(),
    });
    assert!(Membership::restore(cfg(1), s, 0).is_err());
}
