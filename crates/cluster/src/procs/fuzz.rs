//! Fuzz targets (see `tandem_fuzz` for the engine, the budget and how to
//! run long): the membership's message lines, read as `serve_compute` reads
//! them and stepped into a membership state machine as its leader steps
//! them; and the states a membership service or a DDP configuration
//! manager reads back from ZooKeeper (`zk::decode_record`).

use std::io::BufReader;

use tandem_fabric::auth::{Peer, Role};
use tandem_fuzz::{Fuzz, Rng};
use tandem_membership::{Event, Fleet, FleetEvent, Membership, MembershipConfig, MembershipState};
use tandem_net::manager::{check_state, Manager, ManagerConfig};
use tandem_net::manager_store::ManagerState;

use super::trust::{line_max, next_line};
use super::ToMembership;
use crate::zk::decode_record;

fn gen_msg(rng: &mut Rng) -> ToMembership {
    let node = if rng.one_in(4) {
        rng.interesting_u64() as u16
    } else {
        rng.below(6) as u16
    };
    match rng.below(7) {
        0 => ToMembership::Join {
            node,
            coordinators: rng.interesting_u64() as u16,
            layout: rng.interesting_u64(),
        },
        1 => ToMembership::Heartbeat(node),
        2 => ToMembership::Leave(node),
        3 => ToMembership::Relay {
            replica: rng.below(4) as u8,
            nodes: (0..rng.len(8)).map(|_| rng.below(8) as u16).collect(),
        },
        4 => ToMembership::Incarnation { of: node },
        5 => ToMembership::Applied {
            node,
            epoch: rng.interesting_u64(),
        },
        _ => ToMembership::Replacement {
            node: rng.below(4) as u16,
            addr: format!("127.0.0.1:{}", rng.u8()),
        },
    }
}

/// `[speaker role][speaker id]` then lines of JSON messages.
fn gen_lines(rng: &mut Rng) -> Vec<u8> {
    let first = gen_msg(rng);
    let (role, id) = first.speaker();
    let mut b = vec![role as u8, id as u8];
    for m in std::iter::once(first).chain((0..rng.len(5)).map(|_| gen_msg(rng))) {
        b.extend(serde_json::to_vec(&m).unwrap());
        b.push(b'\n');
    }
    b
}

fn membership() -> Membership {
    let mut m = Membership::new(MembershipConfig {
        heartbeat_timeout_ns: 100,
        id_space: 64,
        fd_replicas: 3,
        ..MembershipConfig::default()
    });
    m.attach_fleet(Fleet::new(
        vec!["10.0.0.1:1".into(), "10.0.0.2:1".into()],
        50,
    ));
    m
}

/// Read lines as `serve_compute` does (bounded by the speaker's role, UTF-8,
/// JSON, spoken for the authenticated peer only) and step each into the
/// state machine as `serve_as_leader` does. The connection closes at the
/// first refused line, as the server closes it.
fn check_lines(b: &[u8]) -> String {
    if b.len() < 2 {
        return "short".into();
    }
    let Some(role) = Role::from_u8(b[0] % 6) else {
        return "no role".into();
    };
    let who = Peer {
        role,
        id: b[1] as u64,
    };
    let mut reader = BufReader::with_capacity(64, &b[2..]);
    let mut buf = Vec::new();
    let mut m = membership();
    let mut now = 0;
    let mut label = String::new();
    loop {
        let line = match next_line(&mut reader, &mut buf, line_max(who.role)) {
            Ok(Some(l)) => l,
            Ok(None) => return label + "end",
            Err(e) => return label + &format!("{:?}", e.kind()),
        };
        assert!(line.len() <= line_max(who.role));
        let msg = match serde_json::from_str::<ToMembership>(&line) {
            Ok(msg) if msg.allowed_from(who) => msg,
            Ok(_) => return label + "not theirs",
            Err(e) => return label + &format!("{:?}", e.classify()),
        };
        now += 10;
        label += &format!("{:?}", msg).chars().take(4).collect::<String>();
        match msg {
            ToMembership::Join {
                node, coordinators, ..
            } => {
                m.step(now, Event::Join { node, coordinators });
            }
            ToMembership::Heartbeat(node) => {
                m.step(now, Event::Heartbeat { node });
            }
            ToMembership::Leave(node) => {
                m.step(now, Event::Leave { node });
            }
            ToMembership::Relay { replica, nodes } => {
                m.step(now, Event::Relay { replica, nodes });
            }
            ToMembership::Incarnation { .. } => {
                let _ = m.new_incarnation();
            }
            ToMembership::Applied { node, epoch } => {
                m.step_fleet(
                    now,
                    FleetEvent::Applied {
                        compute: node,
                        epoch,
                    },
                    u16::MAX,
                );
            }
            ToMembership::Replacement { node, addr } => {
                m.step_fleet(now, FleetEvent::Replacement { node, addr }, u16::MAX);
            }
        }
        m.step(now, Event::Tick);
        m.step_fleet(now, FleetEvent::Tick, u16::MAX);
    }
}

#[test]
fn fuzz_membership_lines() {
    Fuzz::new("membership ToMembership lines -> Membership::step")
        .max_len(8192)
        .run(gen_lines, check_lines);
}

/// A znode's bytes: `[kind]` then the JSON record. Kind 0 is the membership
/// state (restored, then its fleet), kind 1 the DDP manager's (resumed).
fn gen_record(rng: &mut Rng) -> Vec<u8> {
    let cluster = if rng.bool() { "c1" } else { "other" };
    let (kind, state) = if rng.bool() {
        let mut m = membership();
        for i in 0..rng.len(30) {
            let node = rng.below(5) as u16;
            let e = match rng.below(5) {
                0 => Event::Join {
                    node,
                    coordinators: 1 + rng.below(4) as u16,
                },
                1 => Event::Tick,
                2 => Event::LinksTerminated { node },
                3 => Event::RecoveryDone { node },
                _ => Event::Heartbeat { node },
            };
            m.step(i as u64 * 60, e);
        }
        (0u8, serde_json::to_value(m.snapshot()).unwrap())
    } else {
        let st = ManagerState {
            epoch: rng.interesting_u64(),
            members: (0..rng.len(5)).map(|_| rng.below(6) as u16).collect(),
            boots: (0..rng.len(3))
                .map(|_| (rng.below(6) as u16, rng.next_u64()))
                .collect(),
            joined: (0..rng.len(3))
                .map(|_| (rng.below(6) as u16, rng.interesting_u64()))
                .collect(),
        };
        (1u8, serde_json::to_value(st).unwrap())
    };
    let mut b = vec![kind];
    b.extend(
        serde_json::to_vec(&serde_json::json!({ "cluster": cluster, "state": state })).unwrap(),
    );
    b
}

fn check_record(b: &[u8]) -> String {
    let Some((&kind, data)) = b.split_first() else {
        return "empty".into();
    };
    if kind % 2 == 0 {
        let (cluster, state) = match decode_record::<MembershipState>(data) {
            Ok(r) => r,
            Err(e) => return format!("{:?}", e.classify()),
        };
        if cluster != "c1" {
            return "another cluster".into();
        }
        let cfg = MembershipConfig {
            id_space: 64,
            fd_replicas: 3,
            ..MembershipConfig::default()
        };
        let mut m = match Membership::restore(cfg, state.clone(), 0) {
            Ok(m) => m,
            Err(_) => return "refused".into(),
        };
        m.attach_fleet(match state.memory {
            Some(c) => Fleet::restore(c, 50),
            None => Fleet::new(vec!["10.0.0.1:1".into()], 50),
        });
        m.reissue_after_restore();
        for i in 0..4u64 {
            m.step(i * 1_000_000, Event::Tick);
            m.step_fleet(i * 1_000_000, FleetEvent::Tick, u16::MAX);
        }
        "restored".into()
    } else {
        let (_, state) = match decode_record::<ManagerState>(data) {
            Ok(r) => r,
            Err(e) => return format!("manager {:?}", e.classify()),
        };
        // `manager::serve` checks a stored state, then resumes from it.
        let nodes = 6u16;
        if check_state(&state, &(0..nodes).collect::<Vec<_>>()).is_err() {
            return "manager refused".into();
        }
        let cfg = ManagerConfig {
            lease_ns: 100,
            margin_ns: 10,
            startup_ns: 0,
        };
        let mut m = Manager::resume(cfg, &state, 0);
        for (i, n) in (0..nodes).enumerate() {
            let _ = m.linked(n, i as u64);
            let _ = m.heartbeat(i as u64 * 10, n);
            let _ = m.tick(i as u64 * 200);
        }
        assert!(m.config().epoch >= state.epoch);
        "manager resumed".into()
    }
}

#[test]
fn fuzz_zookeeper_records() {
    Fuzz::new("zookeeper records (decode_record -> restore / resume)")
        .max_len(8192)
        .run(gen_record, check_record);
}

/// Crashes the fuzzer found, as it shrank them.
#[test]
fn regression_a_manager_state_at_the_end_of_its_epochs_is_refused() {
    // `{"cluster":"","state":{"boots":{"4":8},"epoch":18446744073709551615,"members":[]}}`:
    // the resumed manager's next change overflowed its epoch.
    let b = tandem_fuzz::unhex(
        "017b22636c7573746572223a22222c227374617465223a7b22626f6f7473223a7b2234223a387d2c2265706f6368223a31383434363734343037333730393535313631352c226d656d62657273223a5b5d7d7d",
    );
    assert_eq!(check_record(&b), "manager refused");
}
