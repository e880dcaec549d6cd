//! Data commands as Pandora transactions: one command, or a `MULTI` block,
//! is one strictly serializable transaction, run again on an OCC abort.
//! `WATCH`ed keys are read inside it, so they join its read set, and a
//! stamp that changed since the `WATCH` makes `EXEC` answer nil.

use std::cell::Cell;

use tandem_dkvs::{AbortReason, Coordinator, TableId, Transaction, TxError};
use tandem_fabric::Fabric;
use tandem_resp::Reply;

use super::command::{integer, Cmd, Cond};
use super::record::{capacity, slot_key, Record};

/// The table a RESP front end keeps its keys in, and how.
pub struct Keyspace {
    pub table: TableId,
    pub value_size: usize,
    /// This compute server's node id (the high bits of every stamp).
    pub node: u16,
    stamps: Cell<u64>,
    pub retries: Cell<u64>,
    /// A verb came back `Revoked`: this compute node was fenced.
    pub revoked: Cell<bool>,
}

/// How many times an aborted transaction is run again before the client
/// is told to retry (with [`backoff`], about two seconds).
const MAX_TRIES: u32 = 2000;

/// Before attempt `n` after an abort: give way at once a few times, then
/// sleep longer and longer (up to 1 ms). A transaction of another serving
/// thread that holds a lock may be descheduled for milliseconds; retrying
/// at full speed would use up every attempt meanwhile.
async fn backoff(n: u32) {
    match n {
        0..=3 => tokio::task::yield_now().await,
        _ => {
            let us = 1u64 << (n - 4).min(10);
            tokio::time::sleep(std::time::Duration::from_micros(us)).await
        }
    }
}

/// A watched key and its stamp when it was watched (`None`: absent).
pub type Watched = (Vec<u8>, Option<u64>);

impl Keyspace {
    pub fn new(table: TableId, value_size: usize, node: u16) -> Keyspace {
        Keyspace {
            table,
            value_size,
            node,
            stamps: Cell::new(first_stamp()),
            retries: Cell::new(0),
            revoked: Cell::new(false),
        }
    }

    /// A stamp no other write of this store carries (as far as 64 random
    /// bits go: a restarted process may reuse its node id, so stamps start
    /// at a random point).
    fn stamp(&self) -> u64 {
        self.stamps.set(self.stamps.get().wrapping_add(1));
        self.stamps.get()
    }
}

/// Where a front end's stamps start: the clock and the process id, mixed.
fn first_stamp() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    tandem_sim::Rng::new(t ^ (std::process::id() as u64) << 32).next_u64()
}

/// What ended a transaction's attempt early.
enum Stop {
    /// Run it again (an OCC abort).
    Retry,
    /// A watched key changed: `EXEC` answers nil.
    Watched,
    /// Answer this and stop.
    Fail(Reply),
    /// This compute node was fenced; nothing was written.
    Revoked,
}

fn stop(e: TxError) -> Stop {
    match e {
        // Not a conflict: running it again cannot help.
        TxError::Aborted(AbortReason::TableFull) => Stop::Fail(Reply::err(
            "OOM the store is full: its table holds the keys it was sized for (tandem serve --keys); nothing was written",
        )),
        TxError::Aborted(_) | TxError::AlreadyExists | TxError::NotFound | TxError::Finished => {
            Stop::Retry
        }
        TxError::Revoked => Stop::Revoked,
        TxError::Unavailable => Stop::Fail(Reply::err(
            "TRYAGAIN a memory node is unavailable; nothing was written",
        )),
    }
}

/// Run `cmds` in one transaction (after checking `watched`); their
/// replies, or nil (`Reply::NilArray`) if a watched key changed.
pub async fn transact<F: Fabric>(
    c: &mut Coordinator<F>,
    ks: &Keyspace,
    watched: &[Watched],
    cmds: &[Cmd],
) -> Result<Vec<Reply>, Reply> {
    for n in 0..MAX_TRIES {
        if n > 0 {
            backoff(n).await;
        }
        let mut tx = c.begin();
        let attempt = attempt(&mut tx, ks, watched, cmds).await;
        let replies = match attempt {
            Ok(r) => r,
            Err(s) => {
                let _ = tx.abort().await;
                match s {
                    Stop::Retry => {
                        ks.retries.set(ks.retries.get() + 1);
                        continue;
                    }
                    Stop::Watched => return Err(Reply::NilArray),
                    Stop::Fail(r) => return Err(r),
                    Stop::Revoked => {
                        ks.revoked.set(true);
                        return Err(Reply::err("CLUSTERDOWN this compute server was declared failed; nothing was written; retry, or reconnect to another"));
                    }
                }
            }
        };
        match tx.commit().await {
            Ok(()) => return Ok(replies),
            Err(TxError::Aborted(_)) => ks.retries.set(ks.retries.get() + 1),
            Err(e) => {
                ks.revoked.set(e == TxError::Revoked);
                return Err(Reply::err(format!(
                    "INDOUBT the transaction's outcome is unknown ({e}): it may or may not have committed"
                )));
            }
        }
    }
    Err(Reply::err(format!(
        "TRYAGAIN the transaction aborted {MAX_TRIES} times on conflicts; nothing was written"
    )))
}

async fn attempt<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    watched: &[Watched],
    cmds: &[Cmd],
) -> Result<Vec<Reply>, Stop> {
    for (key, seen) in watched {
        if read(tx, ks, key).await?.map(|r| r.writes) != *seen {
            return Err(Stop::Watched);
        }
    }
    let mut replies = Vec::with_capacity(cmds.len());
    for cmd in cmds {
        replies.push(one(tx, ks, cmd).await?);
    }
    Ok(replies)
}

/// The stamp of `key` now (`WATCH`), read in a transaction of its own.
pub async fn stamp_of<F: Fabric>(
    c: &mut Coordinator<F>,
    ks: &Keyspace,
    key: &[u8],
) -> Result<Option<u64>, Reply> {
    let mut r = transact(c, ks, &[], &[Cmd::Stamp(key.to_vec())]).await?;
    match r.pop() {
        // The stamp's bits, carried as an integer reply.
        Some(Reply::Int(s)) => Ok(Some(s as u64)),
        _ => Ok(None),
    }
}

/// `key`'s record, if present (another key's record in its slot: absent).
async fn read<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    key: &[u8],
) -> Result<Option<Record>, Stop> {
    let raw = tx.read(ks.table, slot_key(key)).await.map_err(stop)?;
    Ok(raw
        .and_then(|b| Record::decode(&b))
        .filter(|r| r.key == key))
}

/// Why a write cannot be stored (answered, nothing written).
fn unstorable(ks: &Keyspace, key: &[u8], value: &[u8]) -> Option<Reply> {
    if key.len() + value.len() > capacity(ks.value_size) {
        return Some(Reply::err(format!(
            "ERR key and value of {} bytes together: this store's slots hold at most {}",
            key.len() + value.len(),
            capacity(ks.value_size)
        )));
    }
    None
}

/// Store `value` under `key`: overwrite, insert, or refuse a key whose
/// slot another key holds.
async fn store<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    key: &[u8],
    value: Vec<u8>,
) -> Result<Option<Reply>, Stop> {
    if let Some(r) = unstorable(ks, key, &value) {
        return Ok(Some(r));
    }
    let slot = slot_key(key);
    let held = tx.read(ks.table, slot).await.map_err(stop)?;
    let rec = Record {
        key: key.to_vec(),
        value,
        writes: ks.stamp(),
    };
    let bytes = rec.encode(ks.value_size).expect("size checked");
    match held.map(|b| Record::decode(&b).filter(|r| r.key == key)) {
        Some(Some(_)) => tx.write(ks.table, slot, &bytes).await.map_err(stop)?,
        Some(None) => {
            return Ok(Some(Reply::err(
                "ERR this key's 64-bit hash is another stored key's; the key cannot be stored",
            )))
        }
        None => tx.insert(ks.table, slot, &bytes).await.map_err(stop)?,
    }
    Ok(None)
}

async fn one<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    cmd: &Cmd,
) -> Result<Reply, Stop> {
    Ok(match cmd {
        Cmd::Get(k) => read(tx, ks, k)
            .await?
            .map_or(Reply::Nil, |r| Reply::Bulk(r.value)),
        Cmd::Set {
            key,
            value,
            cond,
            get,
        } => set(tx, ks, key, value, *cond, *get).await?,
        Cmd::Del(keys) => {
            let mut n = 0;
            for k in keys {
                if read(tx, ks, k).await?.is_some() {
                    tx.delete(ks.table, slot_key(k)).await.map_err(stop)?;
                    n += 1;
                }
            }
            Reply::Int(n)
        }
        Cmd::Exists(keys) => {
            let mut n = 0;
            for k in keys {
                n += read(tx, ks, k).await?.is_some() as i64;
            }
            Reply::Int(n)
        }
        Cmd::MGet(keys) => {
            let mut out = Vec::with_capacity(keys.len());
            for k in keys {
                out.push(
                    read(tx, ks, k)
                        .await?
                        .map_or(Reply::Nil, |r| Reply::Bulk(r.value)),
                );
            }
            Reply::Array(out)
        }
        Cmd::MSet(pairs) => mset(tx, ks, pairs).await?,
        Cmd::IncrBy(k, by) => incr(tx, ks, k, *by).await?,
        Cmd::Stamp(k) => read(tx, ks, k)
            .await?
            .map_or(Reply::Nil, |r| Reply::Int(r.writes as i64)),
    })
}

async fn set<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    key: &[u8],
    value: &[u8],
    cond: Cond,
    get: bool,
) -> Result<Reply, Stop> {
    let old = read(tx, ks, key).await?;
    let go = match cond {
        Cond::Always => true,
        Cond::Absent => old.is_none(),
        Cond::Present => old.is_some(),
    };
    if go {
        if let Some(refused) = store(tx, ks, key, value.to_vec()).await? {
            return Ok(refused);
        }
    }
    Ok(match (get, go) {
        (true, _) => old.map_or(Reply::Nil, |r| Reply::Bulk(r.value)),
        (false, true) => Reply::ok(),
        (false, false) => Reply::Nil,
    })
}

/// All or nothing: a pair that cannot be stored refuses the whole `MSET`.
async fn mset<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    pairs: &[(Vec<u8>, Vec<u8>)],
) -> Result<Reply, Stop> {
    if let Some(r) = pairs.iter().find_map(|(k, v)| unstorable(ks, k, v)) {
        return Ok(r);
    }
    for (k, v) in pairs {
        if let Some(refused) = store(tx, ks, k, v.clone()).await? {
            // Written pairs are undone with the transaction.
            return Err(Stop::Fail(refused));
        }
    }
    Ok(Reply::ok())
}

async fn incr<F: Fabric>(
    tx: &mut Transaction<'_, F>,
    ks: &Keyspace,
    key: &[u8],
    by: i64,
) -> Result<Reply, Stop> {
    let now = match read(tx, ks, key).await? {
        None => 0,
        Some(r) => match integer(&r.value) {
            Some(n) => n,
            None => return Ok(Reply::err("ERR value is not an integer or out of range")),
        },
    };
    let Some(next) = now.checked_add(by) else {
        return Ok(Reply::err("ERR increment or decrement would overflow"));
    };
    match store(tx, ks, key, next.to_string().into_bytes()).await? {
        Some(refused) => Ok(refused),
        None => Ok(Reply::Int(next)),
    }
}
