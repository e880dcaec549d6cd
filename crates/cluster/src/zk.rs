//! The failure detector's state in ZooKeeper (Pandora paper §3.2.4): the
//! membership state lives in one znode, written with compare-and-set before
//! any of its effects can be observed, and — with several membership
//! replicas — an ephemeral leader znode elects the one replica that acts.
//! The others only receive heartbeats and relay them to the leader
//! (`procs::Replica`), so heartbeats reach a majority of failure-detector
//! replicas.

use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tandem_membership::MembershipState;
use tokio::sync::{mpsc, oneshot};
use zookeeper_client as zk;

/// ZooKeeper's acknowledgement of one state write.
pub(crate) type Ack = oneshot::Receiver<Result<(), String>>;

/// Leader election among membership replicas: the replica that creates the
/// ephemeral znode `<state path>-leader` acts; the others wait for it to
/// vanish (its session expired: the leader died or was cut off).
pub struct Campaign {
    /// What the leader znode says about this replica (its address).
    pub me: String,
    /// Told who leads whenever that is learnt (what the znode holds).
    pub on_leader: Box<dyn Fn(&str) + Send>,
}

/// What the znode holds: the membership state, and which cluster it belongs to
/// (a state is never applied to another cluster's memory servers).
#[derive(Serialize, Deserialize)]
struct ZkRecord<S> {
    cluster: String,
    state: S,
}

/// A znode's bytes as written by [`ZkState`]: the cluster they belong to,
/// and the state.
pub(crate) fn decode_record<S: DeserializeOwned>(data: &[u8]) -> serde_json::Result<(String, S)> {
    serde_json::from_slice::<ZkRecord<S>>(data).map(|r| (r.cluster, r.state))
}

/// What a znode can hold: Pandora's membership state, or the DDP
/// configuration manager's (`tandem ddp manager --zookeeper`).
pub trait ZkStored: Serialize + DeserializeOwned + Clone + Send + 'static {}
impl<S: Serialize + DeserializeOwned + Clone + Send + 'static> ZkStored for S {}

struct ZkWrite {
    /// `None`: a barrier, acknowledged once every write before it is.
    data: Option<Vec<u8>>,
    done: oneshot::Sender<Result<(), String>>,
}

/// The membership state in a ZooKeeper znode (Pandora paper §3.2.4). A
/// thread of its own runs the client (`zookeeper-client` on a tokio
/// current-thread runtime) and applies writes in the order they were queued,
/// each a compare-and-set on the znode version: a second membership process
/// writing the same znode makes the other's next write fail, and a failed
/// write stops the service that issued it.
pub struct ZkState<S: ZkStored = MembershipState> {
    hosts: String,
    path: String,
    restored: Option<S>,
    tx: mpsc::UnboundedSender<ZkWrite>,
    cluster: String,
    fatal: Arc<Mutex<Option<String>>>,
}

impl<S: ZkStored> ZkState<S> {
    /// Connect to `hosts` (`host:port[,host:port...]`) and read `path`.
    /// `cluster` names the memory servers; a state stored for another
    /// cluster is refused.
    ///
    /// With a `campaign`, first win the leader election (blocking until this
    /// replica leads), then read the state.
    pub fn open(
        hosts: &str,
        path: &str,
        cluster: &str,
        session: Duration,
        campaign: Option<Campaign>,
    ) -> Result<ZkState<S>, String> {
        if !path.starts_with('/') || path.ends_with('/') {
            return Err(format!(
                "ZooKeeper path '{path}' must start with '/' and not end with it"
            ));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (init_tx, init_rx) = std_mpsc::channel();
        let fatal: Arc<Mutex<Option<String>>> = Arc::default();
        let (h, p, c, f) = (
            hosts.to_string(),
            path.to_string(),
            cluster.to_string(),
            fatal.clone(),
        );
        std::thread::Builder::new()
            .name("zookeeper".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return drop(init_tx.send(Err(e.to_string()))),
                };
                rt.block_on(zk_writer::<S>(h, p, c, session, campaign, init_tx, rx, f));
            })
            .map_err(|e| e.to_string())?;
        let restored = init_rx
            .recv()
            .map_err(|_| "the ZooKeeper thread died".to_string())??;
        Ok(ZkState {
            hosts: hosts.to_string(),
            path: path.to_string(),
            restored,
            tx,
            cluster: cluster.to_string(),
            fatal,
        })
    }

    /// The state found in ZooKeeper when opened, if any.
    pub fn restored(&self) -> Option<&S> {
        self.restored.as_ref()
    }

    pub fn describe(&self) -> String {
        format!("{}{}", self.hosts, self.path)
    }

    /// Queue a write of `state` (or, with `None`, a barrier); the receiver
    /// answers once ZooKeeper acknowledged it and every write before it.
    pub(crate) fn write(&self, state: Option<&S>) -> Ack {
        let (done, ack) = oneshot::channel();
        let data = match state
            .map(|s| {
                serde_json::to_vec(&ZkRecord {
                    cluster: self.cluster.clone(),
                    state: s.clone(),
                })
            })
            .transpose()
        {
            Ok(data) => data,
            Err(e) => {
                let _ = done.send(Err(e.to_string()));
                return ack;
            }
        };
        if let Err(mpsc::error::SendError(w)) = self.tx.send(ZkWrite { data, done }) {
            let _ = w.done.send(Err("the ZooKeeper writer stopped".into()));
        }
        ack
    }

    /// Write `state` and wait until ZooKeeper acknowledged it (outside an
    /// async runtime).
    pub fn save_blocking(&self, state: &S) -> Result<(), String> {
        self.write(Some(state))
            .blocking_recv()
            .map_err(|_| "the ZooKeeper writer stopped".to_string())?
    }

    /// Why writing stopped, once it has.
    pub(crate) fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap().clone()
    }
}

#[allow(clippy::too_many_arguments)]
async fn zk_writer<S: ZkStored>(
    hosts: String,
    path: String,
    cluster: String,
    session: Duration,
    campaign: Option<Campaign>,
    init: std_mpsc::Sender<Result<Option<S>, String>>,
    mut rx: mpsc::UnboundedReceiver<ZkWrite>,
    fatal: Arc<Mutex<Option<String>>>,
) {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    // A follower whose session expires (it was paused longer than the
    // session timeout) is no worse off than a fresh one: connect again and
    // keep campaigning. A leader never gets here (its expiry is fatal below).
    let mut failing_since = None;
    let client = loop {
        let client = match connect_patiently(&hosts, session).await {
            Ok(c) => c,
            Err(e) => return drop(init.send(Err(e))),
        };
        let Some(c) = &campaign else { break client };
        // A slow ZooKeeper (a loaded machine) fails a round with a timeout:
        // start over with a fresh session; a persistent failure shows up as
        // a connect that gives up.
        let why = match campaign_for_leader(&client, &path, &options, c).await {
            Ok(()) => break client,
            Err(e) => format!("leader election in ZooKeeper at {hosts}: {e}"),
        };
        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() > ZK_CONNECT_PATIENCE {
            return drop(init.send(Err(format!(
                "{why} (failing for {} s)",
                ZK_CONNECT_PATIENCE.as_secs()
            ))));
        }
        eprintln!("membership: {why}; reconnecting to ZooKeeper");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut session_state = client.state_watcher();
    let mut version = match client.get_data(&path).await {
        Ok((data, stat)) => match decode_record::<S>(&data) {
            Ok((theirs, state)) if theirs == cluster => {
                let _ = init.send(Ok(Some(state)));
                Some(stat.version)
            }
            Ok((theirs, _)) => {
                return drop(init.send(Err(format!(
                    "ZooKeeper {hosts}{path} holds the state of another cluster ({theirs}); use another --zk-path"
                ))))
            }
            Err(e) => return drop(init.send(Err(format!("ZooKeeper {hosts}{path} holds no state of this kind: {e}")))),
        },
        Err(zk::Error::NoNode) => {
            // Created with the first write; its parent now.
            let parent = &path[..path.rfind('/').unwrap_or(0)];
            if !parent.is_empty() {
                if let Err(e) = client.mkdir(parent, &options).await {
                    return drop(init.send(Err(format!("cannot create {parent} in ZooKeeper at {hosts}: {e}"))));
                }
            }
            let _ = init.send(Ok(None));
            None
        }
        Err(e) => return drop(init.send(Err(format!("cannot read {path} from ZooKeeper at {hosts}: {e}")))),
    };
    loop {
        // A leader whose session expired has lost its ephemeral znode, and
        // another replica may lead already: stop acting at once.
        let first = tokio::select! {
            w = rx.recv() => match w {
                Some(w) => w,
                None => return,
            },
            state = session_state.changed() => {
                if state.is_terminated() {
                    let why = format!("the ZooKeeper session ended ({state:?})");
                    eprintln!("membership: {why}; stopping");
                    *fatal.lock().unwrap() = Some(why);
                }
                continue;
            }
        };
        // Writes queued meanwhile carry newer states: the last one covers them all.
        let mut batch = vec![first];
        while let Ok(w) = rx.try_recv() {
            batch.push(w);
        }
        let stopped = fatal.lock().unwrap().clone();
        let result = match (stopped, batch.iter().rev().find_map(|w| w.data.as_ref())) {
            (Some(e), _) => Err(e),
            (None, None) => Ok(()), // barriers only: everything before them is acknowledged
            (None, Some(data)) => {
                let r = zk_put(&client, &path, data, &options, &mut version).await;
                if let Err(e) = &r {
                    eprintln!("membership: {e}; stopping");
                    *fatal.lock().unwrap() = Some(e.clone());
                }
                r
            }
        };
        for w in batch {
            let _ = w.done.send(result.clone());
        }
    }
}

/// How long a membership replica keeps trying to reach ZooKeeper.
const ZK_CONNECT_PATIENCE: Duration = Duration::from_secs(30);

/// Connect to ZooKeeper, retrying for [`ZK_CONNECT_PATIENCE`]: at start-up
/// it may not listen yet, and on a loaded machine a connect attempt (or a
/// follower's reconnect after its session expired) can time out.
async fn connect_patiently(hosts: &str, session: Duration) -> Result<zk::Client, String> {
    let give_up = tokio::time::Instant::now() + ZK_CONNECT_PATIENCE;
    let mut said = false;
    loop {
        let connect = zk::Client::connector()
            .with_session_timeout(session)
            .connect(hosts);
        let why = match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_string(),
        };
        if tokio::time::Instant::now() >= give_up {
            return Err(format!(
                "cannot connect to ZooKeeper at {hosts} (tried for {} s): {why}",
                ZK_CONNECT_PATIENCE.as_secs()
            ));
        }
        if !said {
            eprintln!(
                "membership: waiting for ZooKeeper at {hosts} ({why}); retrying for up to {} s",
                ZK_CONNECT_PATIENCE.as_secs()
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One compare-and-set write of the znode (a create if there is none yet).
/// A lost connection leaves the outcome unknown: read back and decide.
async fn zk_put(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    options: &zk::CreateOptions<'_>,
    version: &mut Option<i32>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = match *version {
            None => client
                .create(path, data, options)
                .await
                .map(|(stat, _)| stat.version),
            Some(v) => client
                .set_data(path, data, Some(v))
                .await
                .map(|stat| stat.version),
        };
        match r {
            Ok(v) => {
                *version = Some(v);
                return Ok(());
            }
            Err(zk::Error::BadVersion) | Err(zk::Error::NodeExists) => {
                return Err(format!("another membership process wrote {path} in ZooKeeper (CAS on version {version:?} failed)"))
            }
            // Anything else while the session lives (a lost connection, a
            // client-side timeout on a busy machine) leaves the outcome
            // unknown: read back and decide.
            Err(e) if !definite(&e) && !client.state().is_terminated() && Instant::now() < deadline => {
                log::warn!("membership: ZooKeeper write of {path}: {e}; checking what it holds");
                tokio::time::sleep(Duration::from_millis(50)).await;
                match client.get_data(path).await {
                    // Our write went through before the connection dropped.
                    Ok((held, stat)) if held == data && Some(stat.version) != *version => {
                        *version = Some(stat.version);
                        return Ok(());
                    }
                    Ok((_, stat)) if Some(stat.version) == *version => continue,
                    Err(zk::Error::NoNode) if version.is_none() => continue,
                    Err(e) if !definite(&e) => continue,
                    Ok(_) => return Err(format!("another membership process wrote {path} in ZooKeeper")),
                    Err(e) => return Err(format!("cannot read {path} back from ZooKeeper: {e}")),
                }
            }
            Err(e) => return Err(format!("cannot write {path} to ZooKeeper: {e}")),
        }
    }
}

/// Block until this replica holds the ephemeral leader znode.
async fn campaign_for_leader(
    client: &zk::Client,
    path: &str,
    options: &zk::CreateOptions<'_>,
    c: &Campaign,
) -> Result<(), String> {
    let leader = format!("{path}-leader");
    let parent = &path[..path.rfind('/').unwrap_or(0)];
    if !parent.is_empty() {
        client
            .mkdir(parent, options)
            .await
            .map_err(|e| format!("cannot create {parent}: {e}"))?;
    }
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let mut announced = String::new();
    loop {
        match client.create(&leader, c.me.as_bytes(), &ephemeral).await {
            Ok(_) => {
                (c.on_leader)(&c.me);
                return Ok(());
            }
            Err(zk::Error::NodeExists) => match client.get_and_watch_data(&leader).await {
                Ok((who, _, watcher)) => {
                    let who = String::from_utf8_lossy(&who).to_string();
                    if who != announced {
                        eprintln!("membership: following the leader at {who}");
                        announced = who.clone();
                    }
                    (c.on_leader)(&who);
                    let ev = watcher.changed().await;
                    if ev.session_state.is_terminated() {
                        return Err(format!(
                            "the ZooKeeper session ended ({:?})",
                            ev.session_state
                        ));
                    }
                }
                Err(zk::Error::NoNode) => continue, // it just went away: run again
                Err(e) if !client.state().is_terminated() => {
                    log::warn!("membership: leader election: cannot read {leader}: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => return Err(format!("cannot read {leader}: {e}")),
            },
            // A lost connection may hide a create that went through: the
            // znode then names us, which the next round finds.
            Err(e) if !client.state().is_terminated() => {
                log::warn!("membership: leader election: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Ok((who, _)) = client.get_data(&leader).await {
                    if who == c.me.as_bytes() {
                        (c.on_leader)(&c.me);
                        return Ok(());
                    }
                }
            }
            Err(e) => return Err(format!("cannot create {leader}: {e}")),
        }
    }
}

/// Errors that say what happened to a request (it certainly did not apply).
fn definite(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::BadVersion
            | zk::Error::NodeExists
            | zk::Error::NoNode
            | zk::Error::BadArguments(_)
            | zk::Error::NoAuth
            | zk::Error::InvalidAcl
            | zk::Error::SessionExpired
            | zk::Error::AuthFailed
    )
}
