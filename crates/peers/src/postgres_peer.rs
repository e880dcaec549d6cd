//! PostgreSQL at SERIALIZABLE (SSI): one table per workload table,
//! `(id bigint primary key, bal bigint)`. A transaction reads each key with a
//! prepared `SELECT`, writes with a prepared `UPDATE`, and commits; a
//! serialization failure (40001) or a deadlock (40P01) at any statement is an
//! abort, and the client moves on to its next transaction as Tandem's do.

use std::collections::BTreeMap;

use postgres::error::SqlState;
use postgres::{Client, IsolationLevel, NoTls, Statement};

use crate::system::{Durability, PeerSystem};
use crate::workload::{Decision, Executed, PeerConn, PeerError, PeerWorkload, Table, TxPlan};

const TABLES: [Table; 3] = [Table::Savings, Table::Checking, Table::Micro];

pub struct PostgresSystem {
    port: u16,
}

impl PostgresSystem {
    pub fn new(port: u16) -> Self {
        PostgresSystem { port }
    }

    fn client(&self) -> Result<Client, String> {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=5",
            self.port
        );
        Client::connect(&conn, NoTls).map_err(|e| {
            format!(
                "cannot connect to PostgreSQL on 127.0.0.1:{}: {e}",
                self.port
            )
        })
    }
}

fn err(e: postgres::Error) -> String {
    describe(&e)
}

/// The error with the server's SQLSTATE and message when it sent one
/// (`postgres::Error`'s own text is just "db error" then).
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({}): {}", e, d.code().code(), d.message()),
        None => e.to_string(),
    }
}

impl PeerSystem for PostgresSystem {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn connect(&self, _client: usize) -> Result<Box<dyn PeerConn>, String> {
        let mut client = self.client()?;
        let mut select = Vec::new();
        let mut update = Vec::new();
        for t in TABLES {
            select.push(
                client
                    .prepare(&format!("SELECT bal FROM {} WHERE id = $1", t.sql()))
                    .map_err(err)?,
            );
            update.push(
                client
                    .prepare(&format!("UPDATE {} SET bal = $2 WHERE id = $1", t.sql()))
                    .map_err(err)?,
            );
        }
        Ok(Box::new(PgConn {
            client,
            select,
            update,
        }))
    }

    fn load(&self, w: &PeerWorkload) -> Result<(), String> {
        let mut c = self.client()?;
        for t in TABLES {
            c.batch_execute(&format!("DROP TABLE IF EXISTS {}; CREATE TABLE {} (id bigint PRIMARY KEY, bal bigint NOT NULL)", t.sql(), t.sql()))
                .map_err(err)?;
        }
        for (t, rows) in w.tables() {
            let init = w.initial_value();
            c.execute(&format!("INSERT INTO {} SELECT g, $1::bigint FROM generate_series(0::bigint, $2::bigint - 1) g", t.sql()), &[&init, &(rows as i64)])
                .map_err(err)?;
            // Standard benchmark hygiene (pgbench does the same): statistics
            // and the visibility map ready, no checkpoint owed from the load.
            c.batch_execute(&format!("VACUUM ANALYZE {}", t.sql()))
                .map_err(err)?;
        }
        c.batch_execute("CHECKPOINT").map_err(err)?;
        Ok(())
    }

    fn snapshot(&self, table: Table, _rows: u64) -> Result<BTreeMap<u64, i64>, String> {
        let mut c = self.client()?;
        let rows = c
            .query(&format!("SELECT id, bal FROM {}", table.sql()), &[])
            .map_err(err)?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1)))
            .collect())
    }

    fn durability(&self) -> Result<Durability, String> {
        let mut c = self.client()?;
        let show = |c: &mut Client, what: &str| -> Result<String, String> {
            let r = c.query_one(&format!("SHOW {what}"), &[]).map_err(err)?;
            Ok(r.get::<_, String>(0))
        };
        let version = show(&mut c, "server_version")?;
        let fsync = show(&mut c, "fsync")?;
        let sync_commit = show(&mut c, "synchronous_commit")?;
        let standbys = c
            .query_one("SELECT count(*) FROM pg_stat_replication", &[])
            .map_err(err)?
            .get::<_, i64>(0);
        Ok(Durability {
            version: format!("PostgreSQL {version}"),
            persistence: if fsync == "on" && sync_commit == "on" {
                "WAL on local disk, flushed before every commit is acknowledged (fsync=on, synchronous_commit=on)".into()
            } else {
                format!("WAL on local disk, NOT flushed before acknowledging (fsync={fsync}, synchronous_commit={sync_commit}): a crash of the machine can lose acknowledged commits")
            },
            replication: if standbys == 0 {
                "none (one server)".into()
            } else {
                format!("{standbys} streaming standbys")
            },
        })
    }
}

struct PgConn {
    client: Client,
    select: Vec<Statement>,
    update: Vec<Statement>,
}

fn slot(t: Table) -> usize {
    TABLES.iter().position(|x| *x == t).expect("known table")
}

/// 40001 / 40P01: the transaction lost a conflict; anything else is a failure.
fn is_abort(e: &postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

impl PeerConn for PgConn {
    fn execute(&mut self, plan: &TxPlan) -> Result<Executed, PeerError> {
        let fail = |e: postgres::Error| {
            if is_abort(&e) {
                Ok(Executed::Aborted)
            } else {
                Err(PeerError::Failed(format!("postgres: {}", describe(&e))))
            }
        };
        let mut tx = match self
            .client
            .build_transaction()
            .isolation_level(IsolationLevel::Serializable)
            .start()
        {
            Ok(tx) => tx,
            Err(e) => return fail(e),
        };
        let mut values = Vec::with_capacity(plan.reads.len());
        for k in &plan.reads {
            match tx.query_opt(&self.select[slot(k.table)], &[&(k.id as i64)]) {
                Ok(Some(row)) => values.push(row.get::<_, i64>(0)),
                Ok(None) => {
                    return Err(PeerError::Failed(format!(
                        "postgres: row {} missing",
                        k.name()
                    )))
                }
                Err(e) => return fail(e),
            }
        }
        let decision = plan.decide(&values);
        match &decision {
            Decision::Rollback => {
                tx.rollback().map_err(|e| {
                    PeerError::Failed(format!("postgres: rollback: {}", describe(&e)))
                })?;
                return Ok(Executed::RolledBack);
            }
            Decision::ReadOnly => {}
            Decision::Write(w) => {
                for (k, v) in w {
                    if let Err(e) = tx.execute(&self.update[slot(k.table)], &[&(k.id as i64), v]) {
                        return fail(e);
                    }
                }
            }
        }
        match tx.commit() {
            Ok(()) => Ok(Executed::Committed { values, decision }),
            Err(e) if is_abort(&e) => Ok(Executed::Aborted),
            Err(e) => Err(PeerError::InDoubt {
                error: format!("postgres: {}", describe(&e)),
                values,
                decision,
            }),
        }
    }
}
