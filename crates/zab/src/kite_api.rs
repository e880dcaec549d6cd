//! The ZAB baseline behind Kite's client API (docs/DESIGN.md §7.5):
//! [`crate::node`]'s leader-based log without NVM (zxids, a proposal
//! to every follower, commit at a quorum of ACKs, in zxid order, local
//! reads), taking Kite's [`Op`] and answering Kite's [`Reply`]. One
//! adapter serves the simulator (`kite bench --net sim`) and the node
//! processes (`tandem node --system zab`), so every system of the
//! benchmark is driven by the same clients and the same request mapping.
//!
//! ZAB has no release, acquire or RMW of its own: a read or an acquire is
//! a local read, anything that writes is a write through the leader (the
//! paper's ZAB "totally orders all writes … and does local (SC) reads").

use crate::node::{ZabMsg, ZabRecord};
use crate::{ZabFactory, ZabNode, ZabParams};
use tandem_kite::{Op, Reply};
use tandem_net::{Command, Config, Input, NodeFactory, NodeId, Nvm, Protocol};

/// A ZAB ensemble member speaking Kite's client API.
pub struct KiteZabNode {
    inner: ZabNode,
    /// The inner node's commands of the current step (kept to reuse its buffer).
    scratch: Vec<Command<ZabNode>>,
}

/// Kite's operation as the leader-based log runs it.
fn to_leader(op: Op) -> tandem_ddp::Op {
    match op {
        Op::Read(key) | Op::Acquire(key) => tandem_ddp::Op::read(key),
        Op::Write(key, value) | Op::Release(key, value) => tandem_ddp::Op::write(key, value, 0),
        Op::Faa(key, delta) => tandem_ddp::Op::write(key, delta, 0),
        Op::Cas { key, new, .. } => tandem_ddp::Op::write(key, new, 0),
    }
}

/// The log's answer as Kite's: the version is the zxid of the write read or made.
fn to_kite(r: tandem_ddp::Reply) -> Reply {
    let version = |zxid: u64| tandem_check::Version(zxid as u32, 0, 0);
    match r {
        tandem_ddp::Reply::Read { value, ts, .. } => Reply::Value {
            value: value.unwrap_or(0),
            version: version(ts.version),
        },
        tandem_ddp::Reply::Written { ts, .. } => Reply::Written {
            version: version(ts.version),
        },
        // `to_leader` only makes reads and writes, which the log answers with the two above.
        other => unreachable!("the leader-based log answered a read or write with {other:?}"),
    }
}

fn input(i: Input<KiteZabNode>) -> Input<ZabNode> {
    match i {
        Input::Client { session, req, op } => Input::Client {
            session,
            req,
            op: to_leader(op),
        },
        Input::Recv { from, msg } => Input::Recv { from, msg },
        Input::PersistDone { token } => Input::PersistDone { token },
        Input::Timer { token } => Input::Timer { token },
        Input::Config(c) => Input::Config(c),
    }
}

fn command(c: Command<ZabNode>) -> Command<KiteZabNode> {
    match c {
        Command::Reply {
            session,
            req,
            result,
        } => Command::Reply {
            session,
            req,
            result: to_kite(result),
        },
        Command::Send { to, msg } => Command::Send { to, msg },
        Command::Broadcast { msg } => Command::Broadcast { msg },
        Command::Persist { token, record } => Command::Persist { token, record },
        Command::SetTimer { token, at_ns } => Command::SetTimer { token, at_ns },
        Command::Note { text } => Command::Note { text },
        Command::InOrder { writes } => Command::InOrder { writes },
    }
}

impl Protocol for KiteZabNode {
    type Msg = ZabMsg;
    type Op = Op;
    type Reply = Reply;
    type Record = ZabRecord;

    fn step(&mut self, now_ns: u64, i: Input<Self>, out: &mut Vec<Command<Self>>) {
        self.inner.step(now_ns, input(i), &mut self.scratch);
        out.extend(self.scratch.drain(..).map(command));
    }

    fn weight(msg: &ZabMsg) -> u64 {
        ZabNode::weight(msg)
    }
}

/// Builds in-memory ZAB members (node 0 leads; nothing is logged to NVM).
#[derive(Clone, Debug)]
pub struct KiteZabFactory(ZabFactory);

impl Default for KiteZabFactory {
    fn default() -> Self {
        KiteZabFactory(ZabFactory {
            params: ZabParams {
                volatile: true,
                ..ZabParams::default()
            },
        })
    }
}

impl KiteZabFactory {
    /// Members with these knobs (nothing is logged to NVM whatever they say).
    pub fn with(params: ZabParams) -> KiteZabFactory {
        KiteZabFactory(ZabFactory {
            params: ZabParams {
                volatile: true,
                ..params
            },
        })
    }
}

impl NodeFactory<KiteZabNode> for KiteZabFactory {
    fn start(&self, id: NodeId, config: &Config) -> KiteZabNode {
        KiteZabNode {
            inner: self.0.start(id, config),
            scratch: Vec::new(),
        }
    }

    fn recover(&self, id: NodeId, config: &Config, nvm: &Nvm<ZabRecord>) -> KiteZabNode {
        KiteZabNode {
            inner: self.0.recover(id, config, nvm),
            scratch: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write answered at the leader, then read back locally at a follower.
    #[test]
    fn a_write_through_the_leader_is_read_back_at_a_follower() {
        let cfg = Config::new(1, vec![0, 1, 2]);
        let f = KiteZabFactory::default();
        let mut nodes: Vec<KiteZabNode> = (0..3).map(|i| f.start(i, &cfg)).collect();
        let mut queue: Vec<(NodeId, Input<KiteZabNode>)> = vec![(
            1,
            Input::Client {
                session: 7,
                req: 0,
                op: Op::Release(5, 42),
            },
        )];
        let mut replies = Vec::new();
        while let Some((at, i)) = queue.pop() {
            let mut out = Vec::new();
            nodes[at as usize].step(0, i, &mut out);
            for c in out {
                match c {
                    Command::Send { to, msg } => {
                        queue.insert(0, (to, Input::Recv { from: at, msg }))
                    }
                    Command::Broadcast { msg } => (0..3).filter(|&n| n != at).for_each(|n| {
                        queue.insert(
                            0,
                            (
                                n,
                                Input::Recv {
                                    from: at,
                                    msg: msg.clone(),
                                },
                            ),
                        )
                    }),
                    Command::Reply { result, .. } => replies.push((at, result)),
                    _ => {}
                }
            }
        }
        assert!(
            matches!(replies[..], [(1, Reply::Written { version })] if version.0 == 1),
            "{replies:?}"
        );
        let mut out = Vec::new();
        nodes[2].step(
            0,
            Input::Client {
                session: 8,
                req: 0,
                op: Op::Acquire(5),
            },
            &mut out,
        );
        let read: Vec<Reply> = out
            .into_iter()
            .filter_map(|c| {
                if let Command::Reply { result, .. } = c {
                    Some(result)
                } else {
                    None
                }
            })
            .collect();
        assert!(
            matches!(read[..], [Reply::Value { value: 42, .. }]),
            "{read:?}"
        );
    }

    /// Every member applies committed writes through its ordered lane: the
    /// leader says so before it answers and commits, a follower that
    /// applies two writes in one step says two, before its answer.
    #[test]
    fn applying_in_zxid_order_goes_through_the_lane() {
        let cfg = Config::new(1, vec![0, 1, 2]);
        let f = KiteZabFactory::default();
        let mut nodes: Vec<KiteZabNode> = (0..3).map(|i| f.start(i, &cfg)).collect();
        let step = |n: &mut KiteZabNode, i: Input<KiteZabNode>| {
            let mut out = Vec::new();
            n.step(0, i, &mut out);
            out
        };
        let mut proposals = Vec::new();
        for (req, key) in [(0, 5), (1, 6)] {
            let op = Op::Write(key, 1);
            let fwd = step(
                &mut nodes[1],
                Input::Client {
                    session: 7,
                    req,
                    op,
                },
            );
            let [Command::Send { msg, .. }] = &fwd[..] else {
                panic!("{} commands", fwd.len())
            };
            let prop = step(
                &mut nodes[0],
                Input::Recv {
                    from: 1,
                    msg: msg.clone(),
                },
            );
            proposals.push(prop);
        }
        let mut leader = Vec::new();
        for zxid in [1, 2] {
            for from in [1, 2] {
                let ack = Input::Recv {
                    from,
                    msg: ZabMsg::Ack { zxid },
                };
                leader.extend(step(&mut nodes[0], ack));
            }
        }
        let lanes = |out: &[Command<KiteZabNode>]| -> Vec<u32> {
            out.iter()
                .filter_map(|c| match c {
                    Command::InOrder { writes } => Some(*writes),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            lanes(&leader),
            vec![1, 1],
            "the leader applies each write as it commits"
        );
        assert!(
            matches!(leader[0], Command::InOrder { .. }),
            "the lane before the commit"
        );
        for p in proposals.concat() {
            if let Command::Send { to: 1, msg } = p {
                step(&mut nodes[1], Input::Recv { from: 0, msg });
            }
        }
        let out = step(
            &mut nodes[1],
            Input::Recv {
                from: 0,
                msg: ZabMsg::Commit { upto: 2 },
            },
        );
        assert_eq!(lanes(&out), vec![2], "{} commands", out.len());
        assert!(matches!(out[0], Command::InOrder { writes: 2 }));
        assert_eq!(
            out.iter()
                .filter(|c| matches!(c, Command::Reply { .. }))
                .count(),
            2
        );
    }
}
