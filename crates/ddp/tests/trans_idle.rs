//! Transactional consistency with clients that vanish, on three nodes
//! driven by hand (persists land at once, messages arrive in order, time
//! advances by one tick per round): an abandoned transaction does not hold
//! its keys forever (`Params::idle_ns`), and decisions are forgotten once
//! nobody can ask about them (`Params::forget_ns`).

use std::collections::VecDeque;

use tandem_ddp::{Bugs, DdpNode, Model, Msg, Op, Params, Reply};
use tandem_net::{Command, Config, Input, NodeId, Protocol};

struct Cluster {
    nodes: Vec<DdpNode>,
    queue: VecDeque<(NodeId, Input<DdpNode>)>,
    replies: Vec<(u64, Reply)>,
    now: u64,
}

impl Cluster {
    fn new(model: &str) -> Cluster {
        let (model, config) = (Model::parse(model).unwrap(), Config::new(1, vec![0, 1, 2]));
        let nodes = (0..3)
            .map(|n| DdpNode::new(n, model, Params::SIM, Bugs::default(), config.clone()))
            .collect();
        Cluster {
            nodes,
            queue: VecDeque::new(),
            replies: Vec::new(),
            now: 0,
        }
    }

    fn client(&mut self, node: NodeId, session: u64, op: Op) {
        self.queue.push_back((
            node,
            Input::Client {
                session,
                req: 0,
                op,
            },
        ));
        self.pump();
    }

    /// Deliver everything queued, and what it causes.
    fn pump(&mut self) {
        while let Some((n, input)) = self.queue.pop_front() {
            let mut out = Vec::new();
            self.nodes[n as usize].step(self.now, input, &mut out);
            for c in out {
                self.command(n, c);
            }
        }
    }

    fn command(&mut self, n: NodeId, c: Command<DdpNode>) {
        match c {
            Command::Send { to, msg } => self.queue.push_back((to, Input::Recv { from: n, msg })),
            Command::Broadcast { msg } => (0..3).filter(|&o| o != n).for_each(|o| {
                self.queue.push_back((
                    o,
                    Input::Recv {
                        from: n,
                        msg: msg.clone(),
                    },
                ))
            }),
            Command::Persist { token, .. } => {
                self.queue.push_back((n, Input::PersistDone { token }))
            }
            Command::Reply {
                session, result, ..
            } => self.replies.push((session, result)),
            Command::SetTimer { .. } | Command::Note { .. } | Command::InOrder { .. } => {}
        }
    }

    /// One tick of time at every node.
    fn tick(&mut self) {
        self.now += Params::SIM.tick_ns;
        (0..3).for_each(|n| self.queue.push_back((n, Input::Timer { token: 0 })));
        self.pump();
    }

    fn last(&self, session: u64) -> Option<&Reply> {
        self.replies
            .iter()
            .rev()
            .find(|r| r.0 == session)
            .map(|r| &r.1)
    }
}

fn write(key: u64, value: u64, tx: u64) -> Op {
    Op::Write {
        key,
        value,
        scope: 0,
        after: Default::default(),
        tx: Some(tx),
    }
}

/// Session 2, at `node`, runs Begin, a write of key 7 and End, restarting
/// when squashed, until it commits or `ticks` run out; returns its attempts.
fn commit_eventually(c: &mut Cluster, node: NodeId, ticks: u64) -> Option<u64> {
    for attempt in 0..ticks {
        c.client(node, 2, Op::Begin { tx: attempt });
        c.client(node, 2, write(7, 100 + attempt, attempt));
        while !matches!(
            c.last(2),
            Some(Reply::Written { .. } | Reply::Aborted { .. })
        ) && c.now < ticks * Params::SIM.tick_ns
        {
            c.tick();
        }
        c.client(node, 2, Op::End { tx: attempt });
        while !matches!(
            c.last(2),
            Some(Reply::Committed { .. } | Reply::Aborted { .. })
        ) && c.now < ticks * Params::SIM.tick_ns
        {
            c.tick();
        }
        match c.last(2) {
            Some(Reply::Committed { .. }) => return Some(attempt + 1),
            _ if c.now >= ticks * Params::SIM.tick_ns => return None,
            _ => c.tick(),
        }
    }
    None
}

/// Session 1 begins a transaction at node 0, writes key 7 and vanishes.
fn abandoned(model: &str) -> Cluster {
    let mut c = Cluster::new(model);
    c.client(0, 1, Op::Begin { tx: 0 });
    c.client(0, 1, write(7, 1, 0));
    assert!(
        matches!(c.last(1), Some(Reply::Written { .. })),
        "{:?}",
        c.replies
    );
    c
}

#[test]
fn an_abandoned_transaction_is_squashed_and_a_conflicting_one_commits() {
    let ticks = 3 * Params::SIM.idle_ns / Params::SIM.tick_ns;
    for model in ["trans-synch", "trans-strict", "trans-eventual"] {
        // At the same coordinator, the younger write waits for the older
        // transaction; at another, its ENDX meets it there and dies.
        for node in [0, 1] {
            let mut c = abandoned(model);
            let attempts = commit_eventually(&mut c, node, ticks);
            assert!(
                attempts.is_some(),
                "{model}: session 2 at node {node} never committed: {:?}",
                c.replies
            );
            assert!(c.nodes[0].trans_stats().squashes.values().sum::<u64>() >= 1);
        }
    }
}

#[test]
fn decisions_are_forgotten_and_a_late_message_does_not_hold_a_transaction() {
    let mut c = Cluster::new("trans-synch");
    for tx in 0..20 {
        c.client(0, 1, Op::Begin { tx });
        c.client(0, 1, write(tx % 3, tx, tx));
        c.client(0, 1, Op::End { tx });
        assert!(
            matches!(c.last(1), Some(Reply::Committed { .. })),
            "{:?}",
            c.last(1)
        );
    }
    assert!(
        c.nodes.iter().all(|n| n.trans_memory() >= 20),
        "decisions are remembered for a while"
    );
    // A duplicate INITX of a decided transaction, after it was forgotten.
    let late = Msg::InitX {
        tx: tandem_ddp::TxHdr {
            id: tandem_ddp::TxId { session: 1, seq: 3 },
            coord: 0,
            born: 4,
            epoch: 1,
        },
        epoch: 1,
    };
    while c.now < Params::SIM.forget_ns + Params::SIM.tick_ns {
        c.tick();
    }
    assert!(
        c.nodes.iter().all(|n| n.trans_memory() == 0),
        "{:?}",
        c.nodes.iter().map(|n| n.trans_memory()).collect::<Vec<_>>()
    );
    c.queue.push_back((1, Input::Recv { from: 0, msg: late }));
    c.pump();
    assert_eq!(c.nodes[1].trans_memory(), 1, "the late INITX is held again");
    while c.now < 3 * Params::SIM.forget_ns + 2 * Params::SIM.tick_ns {
        c.tick();
    }
    assert!(c
        .nodes
        .iter()
        .all(|n| n.trans_memory() == 0 && n.is_settled()));
}
