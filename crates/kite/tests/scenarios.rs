//! Hand-scheduled interleavings on five Kite nodes (sans-IO: the test is
//! the network). Each reproduces a bug found in review: it failed before
//! the fix named in its doc, and passes after.

use std::cell::Cell;

use tandem_kite::node::TICK;
use tandem_kite::{KiteConfig, KiteNode, Msg, Mutant, Op, Reply};

thread_local! {
    /// The bug planted in every node of the scenario (None: the protocol).
    static MUTANT: Cell<Option<Mutant>> = const { Cell::new(None) };
}
use tandem_net::{Command, Config, Input, NodeId, Protocol, SessionId};

struct Cluster {
    nodes: Vec<KiteNode>,
    now: u64,
    wire: Vec<(NodeId, NodeId, Msg)>,
    replies: Vec<(NodeId, SessionId, Reply)>,
}

impl Cluster {
    fn new(n: u16) -> Cluster {
        let config = Config::new(1, (0..n).collect());
        let mutant = MUTANT.with(|m| m.get());
        let cfg = KiteConfig {
            mutant,
            // With a bug planted, the scenario's own checks must fail, not
            // the node's assertions (tests/assertions.rs runs those).
            assertions: Some(mutant.is_none()),
            ..KiteConfig::default()
        };
        let nodes = (0..n).map(|i| KiteNode::new(i, &config, cfg)).collect();
        Cluster {
            nodes,
            now: 1,
            wire: Vec::new(),
            replies: Vec::new(),
        }
    }

    fn step(&mut self, node: NodeId, input: Input<KiteNode>) {
        self.now += 10;
        let mut out = Vec::new();
        self.nodes[node as usize].step(self.now, input, &mut out);
        for c in out {
            match c {
                Command::Send { to, msg } => self.wire.push((node, to, msg)),
                Command::Reply {
                    session, result, ..
                } => self.replies.push((node, session, result)),
                _ => {}
            }
        }
    }

    fn client(&mut self, node: NodeId, session: SessionId, op: Op) {
        self.step(
            node,
            Input::Client {
                session,
                req: 0,
                op,
            },
        );
    }

    /// Deliver in-flight messages matching `f`, and what they cause, until
    /// none matches.
    fn deliver(&mut self, f: impl Fn(NodeId, NodeId, &Msg) -> bool) {
        while let Some(i) = self.wire.iter().position(|(a, b, m)| f(*a, *b, m)) {
            let (from, to, msg) = self.wire.remove(i);
            self.step(to, Input::Recv { from, msg });
        }
    }

    /// Time passes beyond every time-out; each node ticks.
    fn time_out(&mut self) {
        self.now += 10_000_000;
        for n in 0..self.nodes.len() as NodeId {
            self.step(n, Input::Timer { token: TICK });
        }
    }

    fn reply(&mut self, session: SessionId) -> Option<Reply> {
        let i = self.replies.iter().position(|r| r.1 == session)?;
        Some(self.replies.remove(i).2)
    }

    fn value(&mut self, session: SessionId) -> u64 {
        match self.reply(session) {
            Some(Reply::Value { value, .. }) => value,
            r => panic!("session {session}: expected a value, got {r:?}"),
        }
    }
}

const K: u64 = 1; // a data key
const F: u64 = 2; // a flag / RMW key

/// Node 0's session 0 writes K (node 4 misses it and is timed out, so it
/// is delinquent for session 0's next release).
fn write_missing_node_4(c: &mut Cluster) {
    c.client(0, 0, Op::Write(K, 7));
    assert!(matches!(c.reply(0), Some(Reply::Written { .. })));
    c.deliver(|_, to, m| to != 4 && matches!(m, Msg::Write { .. } | Msg::WriteAck { .. }));
    c.wire.retain(|(_, to, _)| *to != 4);
    c.time_out();
    c.wire
        .retain(|(_, to, m)| !(*to == 4 && matches!(m, Msg::Write { .. })));
    c.deliver(|_, _, m| matches!(m, Msg::Ping | Msg::Pong)); // node 4 is back in broadcasts
}

/// An RMW whose propose starts before the slow release naming its node
/// arrives there, and whose quorum misses every replica that could flag
/// it, must still learn it is delinquent from its own bit.
/// Fixed by the own-bit check after the propose (review finding 3).
#[test]
fn rmw_checks_its_own_bit_after_the_propose() {
    let mut c = Cluster::new(5);
    write_missing_node_4(&mut c);
    c.client(4, 40, Op::Faa(F, 1)); // its proposes wait on the wire
    let held: Vec<_> = c.wire.drain(..).collect();
    c.client(0, 0, Op::Release(F, 100));
    c.deliver(|_, _, m| {
        matches!(m, Msg::ReadTs { .. } | Msg::Rep { .. })
            && !matches!(
                m,
                Msg::Rep {
                    rep: tandem_kite::types::Rep::Value { .. },
                    ..
                }
            )
    });
    // The DM-set {4} reaches a quorum {0, 1, 4}; the value reaches {0, 2, 3}.
    c.deliver(|_, to, m| matches!(m, Msg::SlowRelease { .. }) && (to == 1 || to == 4));
    c.deliver(|from, to, m| matches!(m, Msg::Rep { .. }) && to == 0 && (from == 1 || from == 4));
    c.deliver(|_, to, m| {
        matches!(m, Msg::Write { .. } | Msg::WriteAck { .. }) && (to == 2 || to == 3 || to == 0)
    });
    assert!(
        matches!(c.reply(0), Some(Reply::Written { .. })),
        "the release completes"
    );
    c.wire.retain(|(from, to, _)| *from == 4 || *to == 4);
    // Node 4's FAA now reaches {2, 3}: it reads the release, unflagged.
    c.wire
        .extend(held.into_iter().filter(|(_, to, _)| *to == 2 || *to == 3));
    c.deliver(|from, to, _| [2, 3, 4].contains(&from) && [2, 3, 4].contains(&to));
    match c.reply(40) {
        Some(Reply::Rmw { old, .. }) => assert_eq!(old, 100, "the FAA read the release"),
        r => panic!("FAA: {r:?}"),
    }
    c.client(4, 40, Op::Read(K));
    c.deliver(|from, to, _| [2, 3, 4].contains(&from) && [2, 3, 4].contains(&to));
    assert_eq!(
        c.value(40),
        7,
        "a read after the FAA that read the release sees the write before it"
    );
}

/// A helper that commits another proposer's accepted RMW must carry its
/// DM-set (review finding 2).
#[test]
fn helped_rmw_keeps_its_dm_set() {
    let mut c = Cluster::new(5);
    write_missing_node_4(&mut c);
    c.client(0, 0, Op::Faa(F, 1));
    c.deliver(|from, to, m| {
        (matches!(m, Msg::Propose { .. }) && to != 4)
            || (matches!(m, Msg::Rep { .. }) && from != 4 && to == 0)
    });
    // Its accept (DM-set {4}) reaches node 1 only.
    c.deliver(|_, to, m| matches!(m, Msg::Accept { .. }) && to == 1);
    c.wire.clear();
    // Node 3 proposes on F with {1, 2, 3}, finds the accepted value at 1, helps it.
    c.client(3, 30, Op::Faa(F, 1));
    let q = |n: NodeId| [1, 2, 3].contains(&n);
    c.deliver(|from, to, _| q(from) && q(to));
    c.wire.clear();
    // Node 4 acquires F with {2, 3, 4}, reading the helped value.
    c.client(4, 40, Op::Acquire(F));
    let q = |n: NodeId| [2, 3, 4].contains(&n);
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(c.value(40), 1, "the acquire reads node 0's FAA");
    c.client(4, 40, Op::Read(K));
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(
        c.value(40),
        7,
        "a read after that acquire sees the write before the FAA"
    );
}

/// Node 0's session `s` writes `key` missing node 4, then releases `flag`:
/// the DM-set {4} goes to `dm_to`, the value to `value_to` (with node 0).
fn slow_release(
    c: &mut Cluster,
    s: SessionId,
    key: u64,
    flag: u64,
    dm_to: &[NodeId],
    value_to: &[NodeId],
) {
    c.client(0, s, Op::Write(key, 7));
    assert!(matches!(c.reply(s), Some(Reply::Written { .. })));
    c.deliver(|_, to, m| to != 4 && matches!(m, Msg::Write { .. } | Msg::WriteAck { .. }));
    c.wire.retain(|(_, to, _)| *to != 4);
    c.time_out();
    c.wire
        .retain(|(_, to, m)| !(*to == 4 && matches!(m, Msg::Write { .. })));
    c.deliver(|_, _, m| matches!(m, Msg::Ping | Msg::Pong));
    c.client(0, s, Op::Release(flag, 100));
    c.deliver(|from, to, m| {
        matches!(m, Msg::ReadTs { .. }) || (to == 0 && from != 4 && matches!(m, Msg::Rep { .. }))
    });
    let dm: Vec<NodeId> = dm_to.to_vec();
    c.deliver(|from, to, m| {
        (matches!(m, Msg::SlowRelease { .. }) && dm.contains(&to))
            || (to == 0 && dm.contains(&from) && matches!(m, Msg::Rep { .. }))
    });
    let v: Vec<NodeId> = value_to.to_vec();
    c.deliver(|from, to, m| {
        (matches!(m, Msg::Write { .. }) && v.contains(&to))
            || (to == 0 && v.contains(&from) && matches!(m, Msg::WriteAck { .. }))
    });
    assert!(
        matches!(c.reply(s), Some(Reply::Written { .. })),
        "the release completes"
    );
    c.wire.retain(|(from, _, _)| *from != 0);
}

/// An acquire told it is delinquent must bump the epoch even if another
/// session bumped it since the acquire started: a key refreshed in
/// between may be stale again (review finding 1; fixed by bumping always).
#[test]
fn delinquent_acquire_bumps_even_after_a_concurrent_bump() {
    const F2: u64 = 3;
    let mut c = Cluster::new(5);
    // An old DM-set {4} reaches 1, 2, 3 (not 4).
    slow_release(&mut c, 9, 5, F2, &[1, 2, 3], &[1, 2]);
    c.client(4, 40, Op::Acquire(F)); // A: its reads wait on the wire
    let held: Vec<_> = c.wire.drain(..).collect();
    // B: told delinquent by 1 and 2, bumps the epoch, resets those bits.
    c.client(4, 41, Op::Acquire(F2));
    let q = |n: NodeId| [1, 2, 4].contains(&n);
    c.deliver(|from, to, _| q(from) && q(to));
    c.value(41);
    // C: refreshes K on the slow path (value 0), back in epoch.
    c.client(4, 42, Op::Read(K));
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(c.value(42), 0);
    c.wire.clear();
    // A new DM-set {4} and the release of F reach 1, 2, 3 and 1, 2.
    slow_release(&mut c, 0, K, F, &[1, 2, 3], &[1, 2]);
    c.wire
        .extend(held.into_iter().filter(|(_, to, _)| *to == 1 || *to == 2));
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(c.value(40), 100, "A reads the release");
    c.client(4, 40, Op::Read(K));
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(
        c.value(40),
        7,
        "a read after A sees the write before the release"
    );
}

/// An RMW that learns another node already committed it must not complete
/// before a majority has the commit (review finding 4).
#[test]
fn rmw_committed_by_a_helper_completes_after_a_majority() {
    let mut c = Cluster::new(5);
    let q012 = |n: NodeId| [0, 1, 2].contains(&n);
    c.client(0, 0, Op::Faa(F, 1));
    c.deliver(|from, to, m| q012(from) && q012(to) && !matches!(m, Msg::Accept { .. }));
    c.deliver(|_, to, m| matches!(m, Msg::Accept { .. }) && (to == 1 || to == 2));
    c.wire.clear(); // the accept's acks are lost
                    // Node 1 helps node 0's value with {1, 2, 3}; its commits are lost.
    c.client(1, 10, Op::Faa(F, 1));
    let q123 = |n: NodeId| [1, 2, 3].contains(&n);
    c.deliver(|from, to, m| q123(from) && q123(to) && !matches!(m, Msg::Commit { .. }));
    c.wire
        .retain(|(from, _, m)| *from != 1 || !matches!(m, Msg::Commit { .. }));
    let between_1_and_23 = |a: NodeId, b: NodeId| a == 1 && [2, 3].contains(&b);
    c.wire
        .retain(|(from, to, _)| !between_1_and_23(*from, *to) && !between_1_and_23(*to, *from));
    // Node 0 retries its accept: 1 says "committed (yours)", 2 says "higher ballot".
    c.time_out();
    // Only node 0's messages and the answers to them (not node 1's
    // retransmitted commits).
    let to_0 = |m: &Msg| matches!(m, Msg::Rep { .. } | Msg::WriteAck { .. });
    let from_0 = |m: &Msg| matches!(m, Msg::Accept { .. } | Msg::Commit { .. });
    c.deliver(|from, to, m| {
        q012(from) && q012(to) && ((from == 0 && from_0(m)) || (to == 0 && to_0(m)))
    });
    let done = c.reply(0);
    assert!(
        matches!(done, Some(Reply::Rmw { .. })),
        "the FAA completes: {done:?}"
    );
    if let Some(Reply::Rmw { new, .. }) = done {
        // Completed: then an acquire by anyone must see it.
        c.wire.clear();
        c.client(4, 40, Op::Acquire(F));
        let q234 = |n: NodeId| [2, 3, 4].contains(&n);
        c.deliver(|from, to, _| q234(from) && q234(to));
        assert_eq!(
            c.value(40),
            new,
            "an acquire after the FAA completed sees it"
        );
    }
}

/// A reset-bit goes only to the replicas whose counted replies said
/// "delinquent": sent to all, it can clear a bit a later slow release set
/// at a replica the acquire's late read reached after it (review finding 5).
#[test]
fn reset_bit_clears_only_what_the_acquire_saw() {
    const F2: u64 = 3;
    let mut c = Cluster::new(5);
    slow_release(&mut c, 9, 5, F2, &[1, 2, 3], &[1, 2]);
    // Ax on node 4: told delinquent by 1 and 2; its read to 3 and its
    // reset-bit to 3 are late.
    c.client(4, 40, Op::Acquire(F2));
    let q = |n: NodeId| [1, 2, 4].contains(&n);
    c.deliver(|from, to, _| q(from) && q(to));
    c.value(40);
    let held: Vec<_> = c
        .wire
        .iter()
        .filter(|(f, t, _)| *f == 4 && *t == 3)
        .cloned()
        .collect();
    c.wire.clear();
    c.client(4, 41, Op::Read(K)); // refreshed after the bump: 0
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(c.value(41), 0);
    c.wire.clear();
    // A new DM-set {4} reaches 1 and 3; the release of F reaches 1 and 2.
    slow_release(&mut c, 0, K, F, &[1, 3], &[1, 2]);
    let (reads, resets): (Vec<_>, Vec<_>) = held
        .into_iter()
        .partition(|m| matches!(m.2, Msg::Read { .. }));
    c.wire.extend(reads);
    c.deliver(|_, to, m| to == 3 && matches!(m, Msg::Read { .. }));
    c.wire.clear();
    c.wire.extend(resets);
    c.deliver(|_, to, _| to == 3);
    // Ay on node 4 reads F with {2, 3, 4}, then K.
    let q = |n: NodeId| [2, 3, 4].contains(&n);
    c.client(4, 40, Op::Acquire(F));
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(c.value(40), 100, "Ay reads the release");
    c.client(4, 40, Op::Read(K));
    c.deliver(|from, to, _| q(from) && q(to));
    assert_eq!(
        c.value(40),
        7,
        "a read after Ay sees the write before the release"
    );
}

/// Each scenario fails with its finding planted back as a mutant: the
/// scenario reproduces that bug, and the mutant is that bug.
#[test]
fn each_scenario_fails_with_its_bug_planted() {
    let cases: [(fn(), Mutant); 4] = [
        (
            rmw_checks_its_own_bit_after_the_propose,
            Mutant::NoOwnBitAfterPropose,
        ),
        (helped_rmw_keeps_its_dm_set, Mutant::HelperDropsDm),
        (
            rmw_committed_by_a_helper_completes_after_a_majority,
            Mutant::CompleteOnMine,
        ),
        (reset_bit_clears_only_what_the_acquire_saw, Mutant::ResetAll),
    ];
    for (scenario, mutant) in cases {
        MUTANT.with(|m| m.set(Some(mutant)));
        let failed = std::panic::catch_unwind(scenario).is_err();
        MUTANT.with(|m| m.set(None));
        assert!(failed, "the scenario passed with {} planted", mutant.name());
    }
}
