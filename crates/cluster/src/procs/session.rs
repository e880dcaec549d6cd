//! The compute side of the membership protocol ([`super`]): joining,
//! heartbeats, failure notices, rejoining when the service goes away, and
//! learning that this node was fenced (docs/DESIGN.md §4.5).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tandem_dkvs::FailedIds;
use tandem_membership::MemoryConfig;

use super::wait::Waiting;
use super::{send_line, FromMembership, ToMembership};

/// A compute node's membership: its coordinator ids, the failed ids the
/// service announces, heartbeats to every replica from threads of their own,
/// and rejoining (same ids) when the service goes away. Dropping it without
/// [`MembershipSession::leave`] looks like a crash to the service.
///
/// Join only once registered with the memory servers: the
/// detector's clock starts at the join, and a node it judges must already
/// hold the keys that its revocation takes away.
pub struct MembershipSession {
    pub node: u16,
    pub ids: Vec<u16>,
    /// Coordinators whose stray locks may be stolen (PILL).
    pub failed: FailedIds,
    link: Arc<MembershipLink>,
    stop: Arc<AtomicBool>,
}

/// Why a compute node must stop using its ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// It was declared failed: told so, its ids published as failed, or its
    /// rejoin refused. It comes back as a new incarnation.
    Fenced(String),
    /// The service refused it otherwise, or lost its state.
    Lost(String),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Fenced(why) => write!(f, "fenced: {why}"),
            Stop::Lost(why) => f.write_str(why),
        }
    }
}

/// The memory configuration as the service announces it (docs/DESIGN.md §4.6),
/// for the task that applies it; and the way to answer that it did.
#[derive(Clone)]
pub struct MemorySignal(Arc<MembershipLink>);

impl MemorySignal {
    /// A signal that announced `config`, with no membership behind it.
    #[cfg(test)]
    pub(super) fn announcing(config: MemoryConfig) -> MemorySignal {
        MemorySignal(Arc::new(MembershipLink {
            conn: Mutex::new(None),
            stopped: Mutex::new(None),
            is_stopped: AtomicBool::new(false),
            memory: Mutex::new(Some(config)),
            resumed: Mutex::new(None),
        }))
    }

    /// The newest configuration announced.
    pub fn latest(&self) -> Option<MemoryConfig> {
        self.0.memory.lock().unwrap().clone()
    }

    /// The newest epoch transactions may run under.
    pub fn resumed(&self) -> Option<u64> {
        *self.0.resumed.lock().unwrap()
    }

    /// Tell the service this node applied `epoch` and drained (`false`: not
    /// connected now; the rejoin brings the configuration again).
    pub fn applied(&self, node: u16, epoch: u64) -> bool {
        match self.0.conn.lock().unwrap().as_mut() {
            Some(w) => send_line(w, &ToMembership::Applied { node, epoch }).is_ok(),
            None => false,
        }
    }
}

/// [`MembershipSession::stopped`], for a task that does not own the session.
#[derive(Clone)]
pub struct StopSignal(Arc<MembershipLink>);

impl StopSignal {
    pub fn get(&self) -> Option<Stop> {
        self.0.stopped()
    }
}

/// Who joins: a compute node, its coordinators, and how it lays the store
/// out ([`tandem_dkvs::Layout::digest`]; 0: not checked).
#[derive(Clone, Copy, Debug)]
pub struct Joiner {
    pub node: u16,
    pub coordinators: u16,
    pub layout: u64,
}

impl Joiner {
    pub fn new(node: u16, coordinators: u16) -> Joiner {
        Joiner {
            node,
            coordinators,
            layout: 0,
        }
    }
}

/// Why a join did not succeed.
#[derive(Debug)]
pub enum JoinError {
    /// Worth retrying: the service is down, electing, or went away mid-join.
    Unreachable(String),
    /// The node was declared failed (or left): come back under a new node id.
    Fenced(String),
    /// The service answered, with a no.
    Refused(String),
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::Unreachable(e) | JoinError::Fenced(e) | JoinError::Refused(e) => {
                f.write_str(e)
            }
        }
    }
}

impl MembershipSession {
    /// [`MembershipSession::join_within`] 10 s.
    pub fn join(
        membership: &[SocketAddr],
        node: u16,
        coordinators: u16,
        heartbeat_every: Duration,
    ) -> Result<MembershipSession, String> {
        Self::join_within(
            membership,
            Joiner::new(node, coordinators),
            heartbeat_every,
            Duration::from_secs(10),
        )
        .map_err(|e| e.to_string())
    }

    /// Start heartbeats, join through whichever replica leads (retrying for
    /// up to `patience` while the service starts or elects a leader), and
    /// follow its failure notices.
    pub fn join_within(
        membership: &[SocketAddr],
        joiner: Joiner,
        heartbeat_every: Duration,
        patience: Duration,
    ) -> Result<MembershipSession, JoinError> {
        let node = joiner.node;
        let stop = Arc::new(AtomicBool::new(false));
        // They start before the join: its answer waits for ZooKeeper, and the
        // detector's clock for this node starts when the join is stepped.
        start_heartbeats(membership, node, heartbeat_every, &stop);
        let (conn, lines, ids) = join_patiently(membership, joiner, patience)
            .inspect_err(|_| stop.store(true, Ordering::SeqCst))?;
        let failed = FailedIds::new();
        let link = Arc::new(MembershipLink {
            conn: Mutex::new(Some(conn)),
            stopped: Mutex::new(None),
            is_stopped: AtomicBool::new(false),
            memory: Mutex::new(None),
            resumed: Mutex::new(None),
        });
        let notices = Notices {
            joiner,
            ids: ids.clone(),
            addrs: membership.to_vec(),
            failed: failed.clone(),
            link: link.clone(),
            stop: stop.clone(),
        };
        std::thread::spawn(move || notices.follow(lines));
        Ok(MembershipSession {
            node,
            ids,
            failed,
            link,
            stop,
        })
    }

    /// Why this node must stop using its ids, once it must.
    pub fn stopped(&self) -> Option<Stop> {
        self.link.stopped()
    }

    /// A handle that tells [`MembershipSession::stopped`] from elsewhere.
    pub fn signal(&self) -> StopSignal {
        StopSignal(self.link.clone())
    }

    /// The memory configurations the service announces to this node.
    pub fn memory(&self) -> MemorySignal {
        MemorySignal(self.link.clone())
    }

    /// Why this node was fenced, if it was.
    pub fn fenced(&self) -> Option<String> {
        match self.stopped() {
            Some(Stop::Fenced(why)) => Some(why),
            _ => None,
        }
    }

    /// Why this node must stop, once the service refused it or lost its ids.
    pub fn lost(&self) -> Option<String> {
        match self.stopped() {
            Some(Stop::Lost(why)) => Some(why),
            _ => None,
        }
    }

    /// Every transaction finished: leave, so the silence that follows is not
    /// taken for a crash (waiting a little if a rejoin is under way).
    /// Heartbeats stop only once the leave is on its way: no silence before it.
    pub fn leave(self) {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(w) = self.link.conn.lock().unwrap().as_mut() {
                let _ = send_line(w, &ToMembership::Leave(self.node));
                break;
            }
            if Instant::now() > until || self.link.is_stopped.load(Ordering::SeqCst) {
                eprintln!("compute node {}: not connected to the membership service; it will take this exit for a crash", self.node);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Drop for MembershipSession {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Ask the membership service for a node id to come back under, after
/// compute node `of` was fenced (retrying for up to `patience`).
pub fn new_incarnation(
    membership: &[SocketAddr],
    of: u16,
    patience: Duration,
) -> Result<u16, String> {
    let mut waiting = Waiting::new(format!("compute node {of}"), patience);
    loop {
        match ask_any(membership, &ToMembership::Incarnation { of }) {
            Ok((_, _, FromMembership::Node(id))) => return Ok(id),
            Ok((_, _, FromMembership::Reject(why))) => {
                return Err(format!("the membership service gave no new node id: {why}"))
            }
            Ok((_, _, other)) => {
                return Err(format!(
                    "the membership service answered a request for a new node id with {other:?}"
                ))
            }
            Err(JoinError::Unreachable(e)) => waiting.again("the membership service", &e)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Announce a replacement memory server for memory node `node`, listening at
/// `addr`, to whichever replica leads (retrying for up to `patience`).
pub fn announce_replacement(
    membership: &[SocketAddr],
    node: u16,
    addr: &str,
    patience: Duration,
) -> Result<(), String> {
    let who = format!("the replacement for memory node {node}");
    let mut waiting = Waiting::new(who, patience);
    let msg = ToMembership::Replacement {
        node,
        addr: addr.to_string(),
    };
    loop {
        match ask_any(membership, &msg) {
            Ok((_, _, FromMembership::Replacing(_))) => return Ok(()),
            // Started right after the server it replaces died: wait for the verdict.
            Ok((_, _, FromMembership::NotDown(why))) => {
                waiting.again("the membership service to declare it failed", &why)?
            }
            Ok((_, _, FromMembership::Reject(why))) => {
                return Err(format!(
                    "the membership service refused the replacement: {why}"
                ))
            }
            Ok((_, _, other)) => {
                return Err(format!(
                    "the membership service answered a replacement with {other:?}"
                ))
            }
            Err(JoinError::Unreachable(e)) => waiting.again("the membership service", &e)?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Heartbeats to every membership replica (Pandora paper §3.2.4: to reach
/// a majority), each from a thread of its own on a connection of its own,
/// so a replica that is down or slow delays no other; until `stop`.
fn start_heartbeats(membership: &[SocketAddr], node: u16, every: Duration, stop: &Arc<AtomicBool>) {
    for &addr in membership {
        let stop = stop.clone();
        std::thread::spawn(move || {
            crate::runner::prioritise_current_thread();
            let mut conn: Option<TcpStream> = None;
            while !stop.load(Ordering::Relaxed) {
                if conn.is_none() {
                    let hb = ToMembership::Heartbeat(node);
                    match super::trust::dial(addr, Duration::from_millis(500), &hb) {
                        Ok(c) => {
                            let _ = c.set_nodelay(true);
                            conn = Some(c);
                        }
                        Err(e) => {
                            log::debug!(
                                "compute node {node}: cannot reach membership replica {addr}: {e}"
                            );
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    }
                }
                if let Some(c) = conn.as_mut() {
                    if send_line(c, &ToMembership::Heartbeat(node)).is_err() {
                        conn = None;
                    }
                }
                std::thread::sleep(every);
            }
        });
    }
}

/// The service may be starting, loading or electing a leader: retry for up
/// to `patience`, saying what we wait for.
fn join_patiently(
    addrs: &[SocketAddr],
    joiner: Joiner,
    patience: Duration,
) -> Result<(TcpStream, Lines, Vec<u16>), JoinError> {
    let mut waiting = Waiting::new(format!("compute node {}", joiner.node), patience);
    loop {
        match join_membership(addrs, joiner) {
            Err(JoinError::Unreachable(e)) => waiting
                .again("the membership service", &e)
                .map_err(JoinError::Refused)?,
            other => return other,
        }
    }
}

/// The compute server's side of its membership connection.
struct MembershipLink {
    /// The current connection (writes: heartbeats, leave); `None` while rejoining.
    conn: Mutex<Option<TcpStream>>,
    /// Why this compute server must stop using its ids.
    stopped: Mutex<Option<Stop>>,
    is_stopped: AtomicBool,
    /// The newest memory configuration announced, and the newest epoch resumed.
    memory: Mutex<Option<MemoryConfig>>,
    resumed: Mutex<Option<u64>>,
}

impl MembershipLink {
    fn stopped(&self) -> Option<Stop> {
        if self.is_stopped.load(Ordering::Relaxed) {
            self.stopped.lock().unwrap().clone()
        } else {
            None
        }
    }

    /// The first reason sticks.
    fn stop_with(&self, why: Stop) {
        let mut s = self.stopped.lock().unwrap();
        if s.is_none() {
            *s = Some(why);
            self.is_stopped.store(true, Ordering::SeqCst);
        }
    }
}

/// The thread that follows the service's notices for one session.
struct Notices {
    joiner: Joiner,
    ids: Vec<u16>,
    addrs: Vec<SocketAddr>,
    failed: FailedIds,
    link: Arc<MembershipLink>,
    stop: Arc<AtomicBool>,
}

impl Notices {
    /// Failure notices (stray locks of these coordinators may now be
    /// stolen; our own ids among them: we were fenced), and rejoining when
    /// the membership service goes away.
    fn follow(self, mut lines: Lines) {
        let node = self.joiner.node;
        loop {
            for line in &mut lines {
                let Ok(line) = line else { break };
                self.on_notice(&line);
                if self.link.stopped().is_some() {
                    return;
                }
            }
            if let Some(c) = self.link.conn.lock().unwrap().take() {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            eprintln!("compute node {node}: lost the membership service; rejoining");
            match rejoin_membership(&self.addrs, self.joiner, &self.ids, &self.stop) {
                Ok(Some((conn, more))) => {
                    eprintln!("compute node {node}: rejoined the membership service");
                    *self.link.conn.lock().unwrap() = Some(conn);
                    lines = more;
                }
                Ok(None) => return,
                Err(why) => {
                    eprintln!(
                        "compute node {node}: {}",
                        match &why {
                            Stop::Fenced(w) | Stop::Lost(w) => w,
                        }
                    );
                    self.link.stop_with(why);
                    return;
                }
            }
        }
    }

    fn on_notice(&self, line: &str) {
        match serde_json::from_str(line) {
            Ok(FromMembership::Failed(ids)) => {
                for &id in &ids {
                    self.failed.insert(id);
                }
                if let Some(own) = ids.iter().find(|id| self.ids.contains(id)) {
                    self.link.stop_with(Stop::Fenced(format!(
                        "its coordinator {own} was published as failed"
                    )));
                }
            }
            Ok(FromMembership::Fenced(why)) => self.link.stop_with(Stop::Fenced(why)),
            Ok(FromMembership::Memory(config)) => {
                let mut m = self.link.memory.lock().unwrap();
                if m.as_ref().is_none_or(|c| c.epoch < config.epoch) {
                    *m = Some(config);
                }
            }
            Ok(FromMembership::Resume(epoch)) => {
                let mut r = self.link.resumed.lock().unwrap();
                *r = Some(r.map_or(epoch, |e| e.max(epoch)));
            }
            _ => {}
        }
    }
}

type Lines = std::io::Lines<BufReader<TcpStream>>;

/// Join through whichever replica leads: the connection, its reader
/// positioned after the answer, the ids.
fn join_membership(
    addrs: &[SocketAddr],
    joiner: Joiner,
) -> Result<(TcpStream, Lines, Vec<u16>), JoinError> {
    let Joiner {
        node,
        coordinators,
        layout,
    } = joiner;
    let join = ToMembership::Join {
        node,
        coordinators,
        layout,
    };
    let (conn, lines, answer) = ask_any(addrs, &join)?;
    match answer {
        FromMembership::Assign(ids) => Ok((conn, lines, ids)),
        FromMembership::Reject(why) => Err(JoinError::Refused(format!(
            "membership rejected compute node {node}: {why}"
        ))),
        FromMembership::Fenced(why) => Err(JoinError::Fenced(format!(
            "membership rejected compute node {node}: {why}"
        ))),
        other => Err(JoinError::Refused(format!(
            "membership answered a join with {other:?}"
        ))),
    }
}

/// Send `msg` to whichever replica leads; its connection, the reader
/// positioned after the answer, and the answer.
fn ask_any(
    addrs: &[SocketAddr],
    msg: &ToMembership,
) -> Result<(TcpStream, Lines, FromMembership), JoinError> {
    let mut why = Vec::new();
    for &addr in addrs {
        match ask_one(addr, msg) {
            Err(JoinError::Unreachable(e)) => why.push(e),
            other => return other,
        }
    }
    Err(JoinError::Unreachable(why.join("; ")))
}

fn ask_one(
    addr: SocketAddr,
    msg: &ToMembership,
) -> Result<(TcpStream, Lines, FromMembership), JoinError> {
    let unreachable = |e: std::io::Error| {
        JoinError::Unreachable(format!("cannot reach membership at {addr}: {e}"))
    };
    let mut conn = super::trust::dial(addr, Duration::from_secs(2), msg).map_err(|e| {
        match e.kind() {
            // A membership that does not hold our key, or we lack one: waiting won't help.
            std::io::ErrorKind::PermissionDenied => JoinError::Refused(e.to_string()),
            _ => unreachable(e),
        }
    })?;
    send_line(&mut conn, msg).map_err(unreachable)?;
    let mut lines = BufReader::new(conn.try_clone().map_err(unreachable)?).lines();
    let first = match lines.next() {
        Some(Ok(l)) => l,
        Some(Err(e)) => return Err(unreachable(e)),
        None => {
            return Err(JoinError::Unreachable(format!(
                "membership at {addr} closed the connection"
            )))
        }
    };
    match serde_json::from_str::<FromMembership>(&first) {
        // A replica that does not lead (yet): try the others, and retry.
        Ok(FromMembership::NotLeader(leader)) => Err(JoinError::Unreachable(format!(
            "membership replica {addr} does not lead (leader: {})",
            leader
                .as_deref()
                .unwrap_or("being elected, or the service is still loading")
        ))),
        Ok(answer) => Ok((conn, lines, answer)),
        Err(e) => Err(JoinError::Refused(format!(
            "membership at {addr} answered '{first}': {e}"
        ))),
    }
}

/// Rejoin with bounded exponential backoff until the service answers (or
/// `stop`: `Ok(None)`). A live node's retried join gets the same ids; other
/// ids mean the service lost its state, a refusal that this node was
/// declared failed: either way it must stop using its ids (`Err`).
fn rejoin_membership(
    addrs: &[SocketAddr],
    joiner: Joiner,
    ids: &[u16],
    stop: &AtomicBool,
) -> Result<Option<(TcpStream, Lines)>, Stop> {
    let node = joiner.node;
    let mut backoff = Duration::from_millis(5);
    let mut attempts = 0u64;
    while !stop.load(Ordering::SeqCst) {
        attempts += 1;
        match join_membership(addrs, joiner) {
            Ok((conn, lines, again)) if again == ids => return Ok(Some((conn, lines))),
            Ok((_, _, other)) => {
                return Err(Stop::Lost(format!("the membership service answered the rejoin with ids {other:?}, not {ids:?}: it lost its state; stopping")))
            }
            Err(JoinError::Fenced(why)) => return Err(Stop::Fenced(why)),
            Err(JoinError::Refused(why)) => return Err(Stop::Lost(format!("{why}; stopping"))),
            Err(JoinError::Unreachable(e)) => {
                if attempts == 20 {
                    log::warn!("compute node {node}: still rejoining after 20 attempts: {e}");
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notices(ids: Vec<u16>) -> Notices {
        let link = Arc::new(MembershipLink {
            conn: Mutex::new(None),
            stopped: Mutex::new(None),
            is_stopped: AtomicBool::new(false),
            memory: Mutex::new(None),
            resumed: Mutex::new(None),
        });
        Notices {
            joiner: Joiner::new(1, 2),
            ids,
            addrs: Vec::new(),
            failed: FailedIds::new(),
            link,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A node learns it was fenced from its own ids among the published
    /// failed ids, or from being told; others' failures only open their
    /// stray locks to stealing.
    #[test]
    fn own_ids_published_as_failed_or_a_fenced_notice_fence_the_node() {
        let n = notices(vec![3, 4]);
        n.on_notice(r#"{"failed":[1,2]}"#);
        assert!(n.failed.contains(1) && n.failed.contains(2));
        assert_eq!(n.link.stopped(), None, "someone else failed");
        n.on_notice(r#"{"failed":[4]}"#);
        assert!(
            matches!(n.link.stopped(), Some(Stop::Fenced(why)) if why.contains("coordinator 4"))
        );
        let n = notices(vec![3, 4]);
        n.on_notice(r#"{"fenced":"compute node 1 was declared failed and its access revoked"}"#);
        assert!(
            matches!(n.link.stopped(), Some(Stop::Fenced(why)) if why.contains("declared failed"))
        );
        // The first reason sticks.
        n.on_notice(r#"{"failed":[3]}"#);
        assert!(
            matches!(n.link.stopped(), Some(Stop::Fenced(why)) if why.contains("declared failed"))
        );
    }
}
