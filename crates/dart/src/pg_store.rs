//! The [`TransactionalStore`] adapter for PostgreSQL (docs/DESIGN.md §5: a
//! real-world control that Tandem's authors did not write; SERIALIZABLE must
//! pass, weaker isolation must be caught).
//!
//! One session is one connection (the synchronous `postgres` crate); every
//! transaction runs at the chosen isolation level. Serialization failures
//! and deadlocks (SQLSTATE 40001, 40P01), and a unique violation from a racing
//! insert, are aborts; a lost connection is an unknown outcome. Its futures
//! never wait, so the litmus scripts run under a trivial `block_on`.

use std::fmt;
use std::str::FromStr;

use postgres::error::SqlState;
use postgres::{IsolationLevel, NoTls};

use crate::store::{StoreTx, TransactionalStore, TxFailure};
use crate::value::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    Serializable,
    RepeatableRead,
    ReadCommitted,
}

impl Isolation {
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Serializable => "serializable",
            Isolation::RepeatableRead => "repeatable-read",
            Isolation::ReadCommitted => "read-committed",
        }
    }
    fn level(self) -> IsolationLevel {
        match self {
            Isolation::Serializable => IsolationLevel::Serializable,
            Isolation::RepeatableRead => IsolationLevel::RepeatableRead,
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "serializable" => Ok(Isolation::Serializable),
            "repeatable-read" => Ok(Isolation::RepeatableRead),
            "read-committed" => Ok(Isolation::ReadCommitted),
            o => Err(format!("unknown isolation '{o}' (expected serializable, repeatable-read or read-committed)")),
        }
    }
}

/// Connect, with an error message that says how to get a server.
pub fn connect(url: &str) -> Result<postgres::Client, String> {
    postgres::Client::connect(url, NoTls)
        .map_err(|e| format!("cannot connect to PostgreSQL at '{url}': {e}; start a local server with `bash scripts/postgres.sh start`"))
}

fn classify(e: postgres::Error) -> TxFailure {
    if e.is_closed() {
        return TxFailure::Unknown(format!("connection lost: {e}"));
    }
    match e.code() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::UNIQUE_VIOLATION =>
        {
            TxFailure::Aborted(format!("SQLSTATE {}", c.code()))
        }
        Some(c) => TxFailure::Aborted(format!("SQLSTATE {}: {e}", c.code())),
        None => TxFailure::Unknown(e.to_string()),
    }
}

/// One PostgreSQL connection as a DART session over table `table`.
pub struct PgStore {
    client: postgres::Client,
    isolation: Isolation,
    table: String,
}

impl PgStore {
    pub fn new(client: postgres::Client, isolation: Isolation, table: &str) -> Self {
        PgStore {
            client,
            isolation,
            table: table.to_string(),
        }
    }

    /// Create `table` afresh and load `rows`.
    pub fn create_table(
        client: &mut postgres::Client,
        table: &str,
        rows: &[(u64, Value)],
    ) -> Result<(), String> {
        let ddl = format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (k BIGINT PRIMARY KEY, payload BIGINT NOT NULL, writer BIGINT NOT NULL, prev BIGINT NOT NULL)"
        );
        client
            .batch_execute(&ddl)
            .map_err(|e| format!("cannot create table {table}: {e}"))?;
        let ins = format!("INSERT INTO {table} (k, payload, writer, prev) VALUES ($1, $2, $3, $4)");
        let mut tx = client.transaction().map_err(|e| e.to_string())?;
        for (k, v) in rows {
            tx.execute(
                &ins,
                &[
                    &(*k as i64),
                    &v.payload,
                    &(v.writer as i64),
                    &(v.prev as i64),
                ],
            )
            .map_err(|e| e.to_string())?;
        }
        tx.commit().map_err(|e| e.to_string())
    }

    pub fn drop_table(client: &mut postgres::Client, table: &str) {
        let _ = client.batch_execute(&format!("DROP TABLE IF EXISTS {table}"));
    }
}

impl TransactionalStore for PgStore {
    type Tx<'a> = PgTx<'a>;

    async fn begin(&mut self) -> Result<PgTx<'_>, TxFailure> {
        let tx = self
            .client
            .build_transaction()
            .isolation_level(self.isolation.level())
            .start()
            .map_err(classify)?;
        Ok(PgTx {
            tx,
            table: &self.table,
        })
    }
}

pub struct PgTx<'a> {
    tx: postgres::Transaction<'a>,
    table: &'a str,
}

impl<'a> StoreTx for PgTx<'a> {
    async fn read(&mut self, key: u64) -> Result<Option<Value>, TxFailure> {
        let q = format!(
            "SELECT payload, writer, prev FROM {} WHERE k = $1",
            self.table
        );
        let row = self.tx.query_opt(&q, &[&(key as i64)]).map_err(classify)?;
        Ok(row.map(|r| Value {
            payload: r.get(0),
            writer: r.get::<_, i64>(1) as u64,
            prev: r.get::<_, i64>(2) as u64,
        }))
    }

    async fn write(&mut self, key: u64, v: Value) -> Result<(), TxFailure> {
        let q = format!(
            "UPDATE {} SET payload = $2, writer = $3, prev = $4 WHERE k = $1",
            self.table
        );
        let n = self
            .tx
            .execute(
                &q,
                &[
                    &(key as i64),
                    &v.payload,
                    &(v.writer as i64),
                    &(v.prev as i64),
                ],
            )
            .map_err(classify)?;
        if n == 0 {
            return Err(TxFailure::NotFound);
        }
        Ok(())
    }

    async fn insert(&mut self, key: u64, v: Value) -> Result<(), TxFailure> {
        let q = format!(
            "INSERT INTO {} (k, payload, writer, prev) VALUES ($1, $2, $3, $4)",
            self.table
        );
        self.tx
            .execute(
                &q,
                &[
                    &(key as i64),
                    &v.payload,
                    &(v.writer as i64),
                    &(v.prev as i64),
                ],
            )
            .map_err(classify)?;
        Ok(())
    }

    async fn delete(&mut self, key: u64) -> Result<(), TxFailure> {
        let q = format!("DELETE FROM {} WHERE k = $1", self.table);
        let n = self.tx.execute(&q, &[&(key as i64)]).map_err(classify)?;
        if n == 0 {
            return Err(TxFailure::NotFound);
        }
        Ok(())
    }

    async fn commit(self) -> Result<(), TxFailure> {
        self.tx.commit().map_err(|e| match classify(e) {
            // A commit whose reply was lost may have happened.
            TxFailure::Unknown(r) => TxFailure::Unknown(r),
            other => other,
        })
    }

    async fn abort(self) {
        let _ = self.tx.rollback();
    }
}
