//! Anti-entropy after a partition, one <Causal, Eventual> node driven by
//! hand. A member cut off for a while lacks thousands of updates; under
//! Causal it holds the later ones of each origin until that origin's gap
//! closes. Each resend must therefore carry every origin's first missing
//! update, not only the lowest ids of the log: the processes once stayed
//! diverged for good after a 1.5 s one-way cut, every resend filled with
//! one origin's updates while another origin's gap never closed.

use tandem_ddp::{Bugs, DdpNode, Model, Msg, Origin, Params, Ts, Upd, UpdId, Vector, Version};
use tandem_net::{Command, Config, Input, Protocol};

const A: Origin = Origin { node: 1, since: 1 };
const B: Origin = Origin { node: 2, since: 1 };
const LATE: Origin = Origin { node: 3, since: 1 };

/// Update `seq` of `origin`, writing key `seq` (its cauhist is its
/// origin's earlier updates, implied by the order).
fn upd(origin: Origin, seq: u64) -> Upd {
    Upd {
        id: UpdId { origin, seq },
        v: Version {
            key: seq,
            ts: Ts {
                version: seq,
                node: origin.node,
            },
            value: seq,
        },
        deps: Vector::default(),
        scope: None,
    }
}

fn step(n: &mut DdpNode, now: u64, input: Input<DdpNode>) -> Vec<Command<DdpNode>> {
    let mut out = Vec::new();
    n.step(now, input, &mut out);
    out
}

/// The ids a step resent to node `to`.
fn resent_to(out: &[Command<DdpNode>], to: u16) -> Vec<UpdId> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send {
                to: t,
                msg: Msg::Upd { upds },
            } if *t == to => Some(upds.iter().map(|u| u.id).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn every_origins_first_missing_update_is_resent_to_a_member_that_lacks_it() {
    let model = Model::parse("causal-eventual").unwrap();
    let mut n = DdpNode::new(
        0,
        model,
        Params::SIM,
        Bugs::default(),
        Config::new(1, vec![0, 1, 2, 3]),
    );
    let from_a: Vec<Upd> = (1..=1_000).map(|s| upd(A, s)).collect();
    step(
        &mut n,
        1,
        Input::Recv {
            from: 1,
            msg: Msg::Upd { upds: from_a },
        },
    );
    let from_b: Vec<Upd> = (1..=5).map(|s| upd(B, s)).collect();
    step(
        &mut n,
        2,
        Input::Recv {
            from: 2,
            msg: Msg::Upd { upds: from_b },
        },
    );
    // Node 3 has applied nothing (it holds A's updates, waiting on B's gap).
    let sync = Msg::UpdSync {
        origin: LATE,
        applied: Vector::default(),
        extra: Vec::new(),
    };
    step(&mut n, 3, Input::Recv { from: 3, msg: sync });
    let due = 3 + 4 * Params::SIM.retry_ns;
    let out = step(&mut n, due, Input::Timer { token: 0 });
    let sent = resent_to(&out, 3);
    assert!(
        sent.contains(&UpdId { origin: B, seq: 1 }),
        "B's first update, the head of node 3's gap, was not resent ({} others were)",
        sent.len()
    );
    assert!(sent.contains(&UpdId { origin: A, seq: 1 }), "{sent:?}");
}
