//! One <Causal, Synch> follower driven by hand, as in the paper's Fig. 2(f)
//! (DDP §5.2): an UPD that arrives before its cauhist is buffered
//! until the cauhist is applied *and persisted* (DDP §8.1.2), and reads return
//! the latest persisted version, once the session's past is persisted here.

use tandem_ddp::{
    Bugs, DdpNode, Model, Msg, Op, Origin, Params, Reply, Ts, Upd, UpdId, Vector, Version,
};
use tandem_net::{Command, Config, Input, Protocol, Token};

const A: Origin = Origin { node: 0, since: 1 };
const B: Origin = Origin { node: 2, since: 1 };

fn upd(origin: Origin, key: u64, value: u64, deps: &[UpdId]) -> Upd {
    let mut v = Vector::default();
    deps.iter().for_each(|&d| v.add(d));
    let ts = Ts {
        version: 1,
        node: origin.node,
    };
    Upd {
        id: UpdId { origin, seq: 1 },
        v: Version { key, ts, value },
        deps: v,
        scope: None,
    }
}

/// The persists a step issued, with their tokens.
fn persists(out: &[Command<DdpNode>]) -> Vec<(Token, u64)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Persist {
                token,
                record: tandem_ddp::Record::Key(v),
            } => Some((*token, v.key)),
            _ => None,
        })
        .collect()
}

fn replies(out: &[Command<DdpNode>]) -> Vec<Reply> {
    out.iter()
        .filter_map(|c| {
            if let Command::Reply { result, .. } = c {
                Some(result.clone())
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn an_update_waits_until_its_cauhist_is_persisted_and_reads_return_persisted_versions() {
    let model = Model::parse("causal-synch").unwrap();
    let mut f = DdpNode::new(
        1,
        model,
        Params::SIM,
        Bugs::default(),
        Config::new(1, vec![0, 1, 2]),
    );
    let d1 = upd(A, 1, 10, &[]);
    let d2 = upd(B, 2, 20, &[d1.id]);
    let step = |f: &mut DdpNode, now, input| {
        let mut out = Vec::new();
        f.step(now, input, &mut out);
        out
    };

    // d2 first: buffered, nothing applied or persisted.
    let out = step(
        &mut f,
        1,
        Input::Recv {
            from: 2,
            msg: Msg::Upd {
                upds: vec![d2.clone()],
            },
        },
    );
    assert!(f.applied_now().is_empty() && persists(&out).is_empty());

    // d1: applied and persisted at once; d2 still waits for d1's persist.
    let out = step(
        &mut f,
        2,
        Input::Recv {
            from: 0,
            msg: Msg::Upd {
                upds: vec![d1.clone()],
            },
        },
    );
    assert_eq!(f.applied_now(), &[d1.v]);
    let p1 = persists(&out);
    assert_eq!(p1.iter().map(|p| p.1).collect::<Vec<_>>(), vec![1]);

    // A read that has seen d1 waits; one that has not gets the persisted (initial) version.
    let mut past = Vector::default();
    past.add(d1.id);
    let out = step(
        &mut f,
        3,
        Input::Client {
            session: 7,
            req: 0,
            op: Op::Read {
                key: 1,
                after: past,
                tx: None,
            },
        },
    );
    assert!(replies(&out).is_empty());
    let out = step(
        &mut f,
        3,
        Input::Client {
            session: 8,
            req: 0,
            op: Op::read(1),
        },
    );
    assert_eq!(
        replies(&out),
        vec![Reply::Read {
            value: None,
            ts: Ts::ZERO,
            id: None
        }]
    );

    // d1 lands: the waiting read gets it, and d2 is applied and persisted.
    let out = step(&mut f, 4, Input::PersistDone { token: p1[0].0 });
    assert_eq!(
        replies(&out),
        vec![Reply::Read {
            value: Some(10),
            ts: d1.v.ts,
            id: Some(d1.id)
        }]
    );
    assert_eq!(f.applied_now(), &[d2.v]);
    assert_eq!(
        persists(&out).iter().map(|p| p.1).collect::<Vec<_>>(),
        vec![2]
    );
}
