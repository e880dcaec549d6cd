//! The runtime's ceiling for DDP, like for like: a node that carries the
//! messages of a ⟨Lin, Synch⟩ write and does nothing else. A client's
//! write is sent to every other member (INV, with the key, a timestamp and
//! the value, as DDP's is); each answers it (ACK); once all have, the
//! writer answers its client and tells the others (VAL).
//!
//! Requests wait where ⟨Lin, Synch⟩'s writer makes them wait, so that the
//! sessions keep no more messages in flight per link than the model lets
//! them: a read or a write of a key this node is writing (INV sent, an ACK
//! missing) waits until its last ACK, in arrival order; any other read is
//! answered at once. ⟨Lin, Synch⟩ also holds a request at the other members
//! from a key's INV to its VAL; the echo does not (that wait depends on
//! timestamps it does not keep), so it waits less than the model and stays
//! a ceiling. No versions, no NVM, no model: the same load process,
//! sessions, processes, links and messages per write, through the same
//! runtime. `tandem ddp bench --net tcp` runs it in the rounds of the
//! models (`tandem node --system ddp-echo`) and sets each model's
//! throughput and CPU per message beside it.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tandem_ddp::{Op, Reply, Ts};
use tandem_net::echo::NoRecord;
use tandem_net::protocol::{Command, Config, Input, NodeFactory, NodeId, Nvm, Protocol, SessionId};

/// DDP's INV, ACK and VAL with their fields' sizes, none of their meaning.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum EchoMsg {
    Inv {
        key: u64,
        ts: Ts,
        value: u64,
        n: u64,
    },
    Ack {
        key: u64,
        ts: Ts,
        n: u64,
    },
    Val {
        key: u64,
        ts: Ts,
        n: u64,
    },
}

/// A write waiting for its ACKs.
#[derive(Debug)]
struct Pending {
    session: SessionId,
    req: u64,
    acks: usize,
}

/// A key this node is writing, and the requests waiting for it to be
/// quiet again.
#[derive(Debug, Default)]
struct Busy {
    /// Own writes waiting for ACKs.
    open: u32,
    waiting: VecDeque<(SessionId, u64, Op)>,
}

/// One node of the echo.
#[derive(Debug)]
pub struct DdpEcho {
    me: NodeId,
    members: Vec<NodeId>,
    next: u64,
    pending: HashMap<u64, Pending>,
    /// Only keys with a write of this node open (an entry goes once it is quiet).
    busy: HashMap<u64, Busy>,
}

impl DdpEcho {
    fn others(&self) -> usize {
        self.members.iter().filter(|&&m| m != self.me).count()
    }

    fn client(&mut self, session: SessionId, req: u64, op: Op, out: &mut Vec<Command<Self>>) {
        if let Op::Read { key, .. } | Op::Write { key, .. } = op {
            if let Some(b) = self.busy.get_mut(&key) {
                return b.waiting.push_back((session, req, op));
            }
        }
        self.serve(session, req, op, out);
    }

    fn serve(&mut self, session: SessionId, req: u64, op: Op, out: &mut Vec<Command<Self>>) {
        let reply = |result| Command::Reply {
            session,
            req,
            result,
        };
        match op {
            Op::Read { .. } => out.push(reply(Reply::Read {
                value: None,
                ts: Ts::ZERO,
                id: None,
            })),
            Op::Write { key, value, .. } if self.others() > 0 => {
                self.next += 1;
                let n = self.next;
                let ts = Ts::ZERO;
                out.push(Command::Broadcast {
                    msg: EchoMsg::Inv { key, ts, value, n },
                });
                let acks = self.others();
                self.pending.insert(n, Pending { session, req, acks });
                self.open(key);
            }
            Op::Write { .. } => out.push(reply(Reply::Written {
                ts: Ts::ZERO,
                id: None,
            })),
            Op::Persist { scope, .. } => out.push(reply(Reply::Persisted { seq: scope })),
            Op::Begin { .. } | Op::End { .. } => out.push(reply(Reply::Error {
                msg: "the echo runs no transactions".into(),
            })),
        }
    }

    fn open(&mut self, key: u64) {
        self.busy.entry(key).or_default().open += 1;
    }

    /// One write on `key` is closed here: once none is open, serve what
    /// waited, in order, until one of them opens a write again.
    fn close(&mut self, key: u64, out: &mut Vec<Command<Self>>) {
        let Some(b) = self.busy.get_mut(&key) else {
            return;
        };
        b.open = b.open.saturating_sub(1);
        while let Some(b) = self.busy.get_mut(&key).filter(|b| b.open == 0) {
            let Some((session, req, op)) = b.waiting.pop_front() else {
                self.busy.remove(&key);
                return;
            };
            self.serve(session, req, op, out);
        }
    }

    fn recv(&mut self, from: NodeId, msg: EchoMsg, out: &mut Vec<Command<Self>>) {
        match msg {
            EchoMsg::Inv { key, ts, n, .. } => out.push(Command::Send {
                to: from,
                msg: EchoMsg::Ack { key, ts, n },
            }),
            EchoMsg::Ack { key, ts, n } => {
                let Some(p) = self.pending.get_mut(&n) else {
                    return;
                };
                p.acks -= 1;
                if p.acks > 0 {
                    return;
                }
                let p = self.pending.remove(&n).expect("just found");
                out.push(Command::Broadcast {
                    msg: EchoMsg::Val { key, ts, n },
                });
                out.push(Command::Reply {
                    session: p.session,
                    req: p.req,
                    result: Reply::Written { ts, id: None },
                });
                self.close(key, out);
            }
            EchoMsg::Val { .. } => {}
        }
    }
}

impl Protocol for DdpEcho {
    type Msg = EchoMsg;
    type Op = Op;
    type Reply = Reply;
    type Record = NoRecord;

    fn step(&mut self, _now: u64, input: Input<Self>, out: &mut Vec<Command<Self>>) {
        match input {
            Input::Client { session, req, op } => self.client(session, req, op, out),
            Input::Recv { from, msg } => self.recv(from, msg, out),
            Input::Config(c) => self.members = c.members,
            Input::PersistDone { .. } | Input::Timer { .. } => {}
        }
    }
}

/// Builds [`DdpEcho`] nodes (nothing survives a restart: there is nothing).
pub struct DdpEchoFactory;

impl NodeFactory<DdpEcho> for DdpEchoFactory {
    fn start(&self, me: NodeId, config: &Config) -> DdpEcho {
        DdpEcho {
            me,
            members: config.members.clone(),
            next: 0,
            pending: HashMap::new(),
            busy: HashMap::new(),
        }
    }
    fn recover(&self, me: NodeId, config: &Config, _nvm: &Nvm<NoRecord>) -> DdpEcho {
        self.start(me, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(me: NodeId) -> DdpEcho {
        DdpEchoFactory.start(me, &Config::new(1, vec![0, 1, 2]))
    }

    fn write(n: &mut DdpEcho, out: &mut Vec<Command<DdpEcho>>) {
        let op = Op::write(7, 9, 0);
        n.step(
            0,
            Input::Client {
                session: 3,
                req: 1,
                op,
            },
            out,
        );
    }

    /// A write costs what ⟨Lin, Synch⟩'s does in messages: an INV to each
    /// other member, an ACK from each, a VAL to each, and its reply only
    /// after the last ACK.
    #[test]
    fn a_write_is_inv_ack_val_and_answered_after_the_last_ack() {
        let (mut a, mut out) = (node(0), Vec::new());
        write(&mut a, &mut out);
        let Some(Command::Broadcast { msg: inv }) = out.pop() else {
            panic!("no INV broadcast: {out:?}");
        };
        let mut b = node(1);
        b.step(0, Input::Recv { from: 0, msg: inv }, &mut out);
        let Some(Command::Send { to: 0, msg: ack }) = out.pop() else {
            panic!("no ACK: {out:?}");
        };
        a.step(
            0,
            Input::Recv {
                from: 1,
                msg: ack.clone(),
            },
            &mut out,
        );
        assert!(out.is_empty(), "answered before every ACK: {out:?}");
        a.step(0, Input::Recv { from: 2, msg: ack }, &mut out);
        assert!(
            matches!(
                out[0],
                Command::Broadcast {
                    msg: EchoMsg::Val { .. }
                }
            ),
            "{out:?}"
        );
        assert!(
            matches!(
                out[1],
                Command::Reply {
                    session: 3,
                    req: 1,
                    ..
                }
            ),
            "{out:?}"
        );
    }

    #[test]
    fn a_read_is_answered_at_once() {
        let (mut a, mut out) = (node(0), Vec::new());
        a.step(
            0,
            Input::Client {
                session: 1,
                req: 4,
                op: Op::read(7),
            },
            &mut out,
        );
        assert!(
            matches!(out[..], [Command::Reply { req: 4, .. }]),
            "{out:?}"
        );
    }

    fn read(n: &mut DdpEcho, req: u64, out: &mut Vec<Command<DdpEcho>>) {
        let op = Op::read(7);
        n.step(0, Input::Client { session: 5, req, op }, out);
    }

    /// The writer's waits of ⟨Lin, Synch⟩: a read or a write of the key it
    /// is writing waits for the last ACK; another member answers a read at
    /// once (the echo waits less than the model, never more).
    #[test]
    fn requests_for_a_key_being_written_wait_at_the_writer() {
        let (mut a, mut b, mut out) = (node(0), node(1), Vec::new());
        write(&mut a, &mut out);
        let Some(Command::Broadcast { msg: inv }) = out.pop() else {
            panic!("no INV broadcast: {out:?}");
        };
        read(&mut a, 8, &mut out);
        write(&mut a, &mut out);
        assert!(out.is_empty(), "a request at the writer did not wait: {out:?}");
        b.step(0, Input::Recv { from: 0, msg: inv }, &mut out);
        let Some(Command::Send { msg: ack, .. }) = out.pop() else {
            panic!("no ACK: {out:?}");
        };
        read(&mut b, 9, &mut out);
        assert!(matches!(out[..], [Command::Reply { req: 9, .. }]), "{out:?}");
        out.clear();
        for from in [1, 2] {
            let msg = ack.clone();
            a.step(0, Input::Recv { from, msg }, &mut out);
        }
        let replies: Vec<u64> = out
            .iter()
            .filter_map(|c| match c {
                Command::Reply { req, .. } => Some(*req),
                _ => None,
            })
            .collect();
        assert_eq!(replies, [1, 8], "the write, then the read that waited");
        let invs = out
            .iter()
            .filter(|c| matches!(c, Command::Broadcast { msg: EchoMsg::Inv { .. } }))
            .count();
        assert_eq!(invs, 1, "the write that waited starts after them: {out:?}");
        assert_eq!(a.busy[&7].open, 1, "and holds the key in its turn");
    }
}
