//! A history that survives `kill -9` of the process recording it (TANDEM
//! thesis §5.2.1: crashes "after any operation"; docs/DESIGN.md §5, crash
//! injection over processes).
//!
//! A `tandem litmus-worker` process appends one JSON line per event to a file
//! opened in append mode, each with a single `write(2)`: the line reaches the
//! page cache before the operation it announces is issued, so it outlives a
//! SIGKILL of the writer (not a machine crash, which DART does not inject).
//! Writes are journaled *before* they are posted (a killed worker's posted
//! write may still land), reads after they return, the outcome after the
//! transaction ends. [`read`] folds the lines back into [`TxRecord`]s: a
//! transaction with an `invoke` line but no `complete` line was in flight
//! when the worker died, so its outcome is unknown.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::history::{Op, Outcome, TxRecord};

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "lowercase")]
enum Line {
    /// The coordinator ids the membership service assigned to the worker.
    Ids(Vec<u16>),
    Invoke {
        id: u64,
        client: u32,
        invoke_ns: u64,
    },
    Op {
        id: u64,
        op: Op,
    },
    /// The last op of `id` took no effect (a refused insert or delete).
    Unop {
        id: u64,
    },
    Complete(TxRecord),
    /// An assert transaction committed and its verdict was taken.
    Checked {
        id: u64,
    },
    Violation {
        test: String,
        what: String,
    },
}

/// The writing end: one per worker process, shared by its clients.
pub struct Journal {
    file: Mutex<File>,
}

impl Journal {
    pub fn create(path: &Path) -> Result<Journal, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open journal {}: {e}", path.display()))?;
        Ok(Journal {
            file: Mutex::new(file),
        })
    }

    fn put(&self, line: &Line) {
        let mut s = serde_json::to_vec(line).expect("journal lines serialize");
        s.push(b'\n');
        // One write per line: a SIGKILL leaves whole lines only. A journal
        // that cannot be written makes the run unverifiable: stop loudly.
        self.file
            .lock()
            .expect("journal")
            .write_all(&s)
            .expect("journal write");
    }

    pub fn ids(&self, ids: &[u16]) {
        self.put(&Line::Ids(ids.to_vec()));
    }
    pub fn invoke(&self, id: u64, client: u32, invoke_ns: u64) {
        self.put(&Line::Invoke {
            id,
            client,
            invoke_ns,
        });
    }
    pub fn op(&self, id: u64, op: &Op) {
        self.put(&Line::Op { id, op: op.clone() });
    }
    pub fn unop(&self, id: u64) {
        self.put(&Line::Unop { id });
    }
    pub fn complete(&self, r: &TxRecord) {
        self.put(&Line::Complete(r.clone()));
    }
    pub fn checked(&self, id: u64) {
        self.put(&Line::Checked { id });
    }
    pub fn violation(&self, test: &str, what: &str) {
        self.put(&Line::Violation {
            test: test.into(),
            what: what.into(),
        });
    }
}

/// What a journal holds, folded.
#[derive(Debug, Default)]
pub struct JournalContents {
    pub ids: Vec<u16>,
    /// In invocation order; in-flight ones are `unknown` with no completion.
    pub records: Vec<TxRecord>,
    /// Transactions with an `invoke` line and no `complete` line.
    pub in_flight: u64,
    pub asserts_checked: u64,
    pub violations: Vec<(String, String)>,
    /// Invocations so far (the parent counts them to time its kill).
    pub invokes: u64,
}

/// Fold a journal file. A torn last line (impossible with one `write` per
/// line on a local file system, but cheap to tolerate) is ignored.
pub fn read(path: &Path) -> Result<JournalContents, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read journal {}: {e}", path.display()))?;
    parse(&text)
}

pub fn parse(text: &str) -> Result<JournalContents, String> {
    let mut c = JournalContents::default();
    let mut open: BTreeMap<u64, TxRecord> = BTreeMap::new();
    let mut order: Vec<u64> = Vec::new();
    let mut done: BTreeMap<u64, TxRecord> = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let line: Line = match serde_json::from_str(l) {
            Ok(x) => x,
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(e) => return Err(format!("journal line {}: {e}", i + 1)),
        };
        match line {
            Line::Ids(ids) => c.ids = ids,
            Line::Invoke {
                id,
                client,
                invoke_ns,
            } => {
                c.invokes += 1;
                order.push(id);
                open.insert(id, TxRecord::new(id, client, invoke_ns));
            }
            Line::Op { id, op } => open
                .get_mut(&id)
                .ok_or(format!(
                    "journal line {}: op of an unknown transaction",
                    i + 1
                ))?
                .ops
                .push(op),
            Line::Unop { id } => {
                open.get_mut(&id)
                    .ok_or(format!(
                        "journal line {}: unop of an unknown transaction",
                        i + 1
                    ))?
                    .ops
                    .pop();
            }
            Line::Complete(r) => {
                open.remove(&r.id);
                done.insert(r.id, r);
            }
            Line::Checked { .. } => c.asserts_checked += 1,
            Line::Violation { test, what } => c.violations.push((test, what)),
        }
    }
    for id in order {
        if let Some(r) = done.remove(&id) {
            c.records.push(r);
        } else if let Some(r) = open.remove(&id) {
            debug_assert_eq!(r.outcome, Outcome::Unknown);
            c.in_flight += 1;
            c.records.push(r);
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    #[test]
    fn an_invocation_without_completion_is_unknown_with_its_posted_writes() {
        let dir = std::env::temp_dir().join(format!("dart-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("j.jsonl");
        let _ = std::fs::remove_file(&path);
        let j = Journal::create(&path).unwrap();
        j.ids(&[3, 4]);
        j.invoke(1, 0, 10);
        j.op(1, &Op::read(5, Some(Value::initial(0))));
        let mut r = TxRecord::new(1, 0, 10);
        r.ops.push(Op::read(5, Some(Value::initial(0))));
        r.outcome = Outcome::Committed;
        r.complete_ns = Some(20);
        j.complete(&r);
        j.checked(1);
        j.invoke(2, 0, 30);
        j.op(2, &Op::write(6, None));
        j.op(2, &Op::write(7, None));
        j.unop(2);
        drop(j);
        // A torn tail is ignored.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"invo");
        let c = parse(&text).unwrap();
        assert_eq!(c.ids, vec![3, 4]);
        assert_eq!((c.invokes, c.in_flight, c.asserts_checked), (2, 1, 1));
        assert_eq!(c.records[0], r);
        assert_eq!(c.records[1].outcome, Outcome::Unknown);
        assert_eq!(c.records[1].complete_ns, None);
        assert_eq!(c.records[1].ops, vec![Op::write(6, None)]);
        // A corrupt line in the middle is an error, not silently dropped.
        assert!(parse("{\"x\":1}\n{\"checked\":{\"id\":1}}\n").is_err());
    }
}
