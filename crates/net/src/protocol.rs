//! The sans-IO protocol surface (docs/DESIGN.md §7.1): a node is a value with
//! `step(now, input, out)`. It never reads a clock, draws randomness or
//! touches a socket; the host (simulator or process) feeds it inputs and
//! carries out its commands.
//!
//! **Durability is a command.** A node asks for a record to be made durable
//! with [`Command::Persist`] and learns it landed from [`Input::PersistDone`].
//! An output that a model makes depend on durability is emitted only in the
//! step that handles the last `PersistDone` (or acknowledgement) it waits for.

use std::collections::BTreeMap;
use std::fmt::Debug;

/// A node of the replicated store (a process in deployments).
pub type NodeId = u16;
/// A client session: closed loop, one outstanding request at a time.
pub type SessionId = u64;
/// Names a persist or a timer so its completion can be matched.
pub type Token = u64;

/// A configuration: who is a member, in which epoch (Hermes-style, bumped
/// by the configuration manager on every membership change).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    pub epoch: u64,
    pub members: Vec<NodeId>,
    /// Members the manager added back after removing them, each with the
    /// epoch of its latest add. A member cut off from the manager never
    /// hears its own removal: it learns it from here, as an add in an
    /// epoch past the last one it saw, and catches up before it serves.
    pub joined: Vec<(NodeId, u64)>,
}

impl Config {
    pub fn new(epoch: u64, members: Vec<NodeId>) -> Self {
        Config {
            epoch,
            members,
            joined: Vec::new(),
        }
    }

    /// The epoch in which `node` was last added (0: a first member, or
    /// not known).
    pub fn joined_at(&self, node: NodeId) -> u64 {
        self.joined
            .iter()
            .find(|&&(n, _)| n == node)
            .map_or(0, |&(_, e)| e)
    }

    /// Whether `node`, which last saw epoch `seen`, was removed and added
    /// back since then without hearing of it.
    pub fn missed_removal(&self, node: NodeId, seen: u64) -> bool {
        seen > 0 && self.joined_at(node) > seen
    }

    /// Members other than `me`.
    pub fn others(&self, me: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().copied().filter(move |&m| m != me)
    }
}

/// What the host hands a node.
#[derive(Debug)]
pub enum Input<P: Protocol> {
    /// A client request from `session`; `req` numbers it within the session.
    Client {
        session: SessionId,
        req: u64,
        op: P::Op,
    },
    Recv {
        from: NodeId,
        msg: P::Msg,
    },
    /// The persist named `token` is durable.
    PersistDone {
        token: Token,
    },
    Timer {
        token: Token,
    },
    /// A new configuration from the configuration manager.
    Config(Config),
}

/// What a node asks the host to do.
#[derive(Debug)]
pub enum Command<P: Protocol> {
    Send {
        to: NodeId,
        msg: P::Msg,
    },
    /// To every other member of the node's current configuration.
    Broadcast {
        msg: P::Msg,
    },
    /// Make `record` durable; answer with `PersistDone { token }`, unless
    /// `token` is [`NO_ANSWER`] (a persist nothing waits for).
    Persist {
        token: Token,
        record: P::Record,
    },
    Reply {
        session: SessionId,
        req: u64,
        result: P::Reply,
    },
    /// Deliver `Timer { token }` at `at_ns` (host time).
    SetTimer {
        token: Token,
        at_ns: u64,
    },
    /// Something an operator should see (a recovery ended, and how): a
    /// process host logs it, the simulator leaves it to its harness.
    Note {
        text: String,
    },
    /// The step applied `writes` writes of a total order, each only after
    /// the one before it (ZAB's ordered apply). The simulator passes them
    /// through the node's one ordered lane and holds the commands that
    /// follow this one until the lane is through; a process host has real
    /// threads and does nothing.
    InOrder {
        writes: u32,
    },
}

impl<P: Protocol> Clone for Input<P> {
    fn clone(&self) -> Self {
        match self {
            Input::Client { session, req, op } => Input::Client {
                session: *session,
                req: *req,
                op: op.clone(),
            },
            Input::Recv { from, msg } => Input::Recv {
                from: *from,
                msg: msg.clone(),
            },
            Input::PersistDone { token } => Input::PersistDone { token: *token },
            Input::Timer { token } => Input::Timer { token: *token },
            Input::Config(c) => Input::Config(c.clone()),
        }
    }
}

impl<P: Protocol> Clone for Command<P> {
    fn clone(&self) -> Self {
        match self {
            Command::Send { to, msg } => Command::Send {
                to: *to,
                msg: msg.clone(),
            },
            Command::Broadcast { msg } => Command::Broadcast { msg: msg.clone() },
            Command::Persist { token, record } => Command::Persist {
                token: *token,
                record: record.clone(),
            },
            Command::Reply {
                session,
                req,
                result,
            } => Command::Reply {
                session: *session,
                req: *req,
                result: result.clone(),
            },
            Command::SetTimer { token, at_ns } => Command::SetTimer {
                token: *token,
                at_ns: *at_ns,
            },
            Command::Note { text } => Command::Note { text: text.clone() },
            Command::InOrder { writes } => Command::InOrder { writes: *writes },
        }
    }
}

/// A record a node persists. The NVM is a set of slots; a record names the
/// slot it is written to, and [`Durable::land`] says how a landing record
/// combines with what the slot holds (by default it overwrites it). Slots
/// keep the NVM bounded by the data, not by the number of writes.
pub trait Durable: Clone + Debug {
    type Slot: Ord + Clone + Debug;
    fn slot(&self) -> Self::Slot;
    fn land(slot: &mut Self, new: Self) {
        *slot = new;
    }
}

/// A node's non-volatile memory: what survives a crash.
pub type Nvm<R> = BTreeMap<<R as Durable>::Slot, R>;

/// Write `record` into `nvm` the way a landing persist does.
pub fn land<R: Durable>(nvm: &mut Nvm<R>, record: R) {
    match nvm.entry(record.slot()) {
        std::collections::btree_map::Entry::Occupied(mut old) => R::land(old.get_mut(), record),
        std::collections::btree_map::Entry::Vacant(slot) => {
            slot.insert(record);
        }
    }
}

/// A message-passing protocol as a sans-IO state machine.
/// The token of a persist whose landing nothing waits for: no `PersistDone`.
pub const NO_ANSWER: Token = Token::MAX;

pub trait Protocol: Sized {
    type Msg: Clone + Debug;
    type Op: Clone + Debug;
    type Reply: Clone + Debug;
    type Record: Durable;

    /// Handle one input at host time `now_ns`, appending commands to `out`.
    fn step(&mut self, now_ns: u64, input: Input<Self>, out: &mut Vec<Command<Self>>);

    /// Whether the node holds every acknowledged write, i.e. is not
    /// catching up after being (re-)added; reported to the configuration
    /// manager, which keeps a caught-up member in every configuration.
    fn caught_up(&self) -> bool {
        true
    }

    /// How many entries `msg` carries: the simulator charges CPU per entry
    /// at both ends, so a bulk transfer (a full copy) costs what it moves.
    fn weight(_msg: &Self::Msg) -> u64 {
        1
    }
}

/// Builds nodes: fresh at start, or rebuilt from NVM after a crash.
pub trait NodeFactory<P: Protocol> {
    fn start(&self, id: NodeId, config: &Config) -> P;
    /// A node restarting after a crash: its volatile state is gone, `nvm`
    /// is what its persists left.
    fn recover(&self, id: NodeId, config: &Config, nvm: &Nvm<P::Record>) -> P;
}
