//! The recorded history of a run (thesis §2.5: Adya's histories, with the
//! invocation and completion times that real-time order needs, Def. 2.5.8).
//!
//! One [`TxRecord`] per transaction a client began: when it was invoked and
//! completed (on the harness's clock: simulated ns, or ns since the run
//! started), what it read and wrote, and how it ended. A transaction cut by a
//! crash or a lost connection is `unknown`: it may have committed or not, and
//! the checker never assumes it absent. `--history FILE` exports JSON lines.

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::value::{Value, PREV_UNKNOWN};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Committed,
    Aborted,
    Unknown,
}

/// One operation: `f` is `r` or `w`; a `w` with no value is a delete, an `r`
/// with no value read an absent key. A delete's `prev` names the writer of
/// the version it removed, when the transaction read that version first
/// (a write carries the same in its value's `prev`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub f: String,
    pub key: u64,
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<u64>,
}

impl Op {
    pub fn read(key: u64, value: Option<Value>) -> Op {
        Op {
            f: "r".into(),
            key,
            value,
            prev: None,
        }
    }
    pub fn write(key: u64, value: Option<Value>) -> Op {
        Op {
            f: "w".into(),
            key,
            value,
            prev: None,
        }
    }
    /// A delete of the version `prev` wrote ([`PREV_UNKNOWN`]: a blind delete).
    pub fn delete(key: u64, prev: u64) -> Op {
        Op {
            f: "w".into(),
            key,
            value: None,
            prev: (prev != PREV_UNKNOWN).then_some(prev),
        }
    }
    pub fn is_read(&self) -> bool {
        self.f == "r"
    }
    /// For a write or delete: the writer of the version it replaced, if the
    /// transaction read it first (`None`: a blind write).
    pub fn replaced(&self) -> Option<u64> {
        match self.value {
            Some(v) => Some(v.prev).filter(|&p| p != PREV_UNKNOWN),
            None => self.prev,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxRecord {
    /// Unique in the run; also the `writer` of every value it wrote.
    pub id: u64,
    pub client: u32,
    pub invoke_ns: u64,
    /// `None` while running, and forever for an unknown outcome.
    pub complete_ns: Option<u64>,
    pub outcome: Outcome,
    pub ops: Vec<Op>,
}

impl TxRecord {
    pub fn new(id: u64, client: u32, invoke_ns: u64) -> TxRecord {
        TxRecord {
            id,
            client,
            invoke_ns,
            complete_ns: None,
            outcome: Outcome::Unknown,
            ops: Vec::new(),
        }
    }
}

/// Write `records` as JSON lines.
pub fn write_json_lines(out: &mut impl Write, records: &[TxRecord]) -> std::io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut *out, r)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Parse JSON lines written by [`write_json_lines`].
pub fn read_json_lines(text: &str) -> Result<Vec<TxRecord>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_round_trips_through_json_lines() {
        let mut t = TxRecord::new(7, 1, 100);
        t.ops.push(Op::read(3, Some(Value::initial(0))));
        t.ops.push(Op::write(4, None));
        t.complete_ns = Some(200);
        t.outcome = Outcome::Committed;
        let mut buf = Vec::new();
        write_json_lines(&mut buf, &[t.clone(), TxRecord::new(8, 2, 150)]).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains("\"outcome\":\"committed\""),
            "{text}"
        );
        assert!(text.contains("\"f\":\"r\""));
        assert_eq!(
            read_json_lines(&text).unwrap(),
            vec![t, TxRecord::new(8, 2, 150)]
        );
    }
}
