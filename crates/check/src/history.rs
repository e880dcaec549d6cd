//! The history of a run of a key-value store: one [`HistOp`] per client
//! operation, with its invocation and completion times on the harness's
//! clock (simulated ns, or ns since the run started).
//!
//! # JSON lines
//! One operation per line, the operation's kind flattened into the object
//! under the tag `"op"` (`"read"` or `"write"`):
//!
//! ```text
//! {"session":1,"node":0,"op":"write","key":7,"value":42,"invoke_ns":100,"complete_ns":250,"ok":true}
//! {"session":2,"node":1,"op":"read","key":7,"value":null,"invoke_ns":120,"complete_ns":180,"ok":true}
//! {"session":3,"node":2,"op":"write","key":7,"value":43,"invoke_ns":300,"complete_ns":null,"ok":false}
//! ```
//!
//! A read's `"value": null` read an absent key (the initial value). A
//! missing or null `complete_ns` means no reply came: the outcome is
//! unknown and `ok` is ignored. Blank lines are skipped.

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One client operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistOp {
    /// Client session (closed loop: one outstanding operation per session).
    pub session: u64,
    /// The node that served it.
    pub node: u16,
    #[serde(flatten)]
    pub kind: OpKind,
    pub invoke_ns: u64,
    /// `None`: no reply (node crashed, or the run ended): outcome unknown.
    #[serde(default)]
    pub complete_ns: Option<u64>,
    /// `false`: failed definitively, did not take effect. Ignored when
    /// `complete_ns` is `None`.
    pub ok: bool,
}

/// What an operation did. Write values are unique per write across the
/// whole history (writers make them so); the checkers rely on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum OpKind {
    /// `value: None`: the key was absent (the initial value).
    Read {
        key: u64,
        value: Option<u64>,
    },
    Write {
        key: u64,
        value: u64,
    },
}

impl OpKind {
    pub fn key(&self) -> u64 {
        match *self {
            OpKind::Read { key, .. } | OpKind::Write { key, .. } => key,
        }
    }
}

impl HistOp {
    /// A completed, successful read.
    pub fn read(
        session: u64,
        node: u16,
        key: u64,
        value: Option<u64>,
        invoke_ns: u64,
        complete_ns: u64,
    ) -> HistOp {
        HistOp {
            session,
            node,
            kind: OpKind::Read { key, value },
            invoke_ns,
            complete_ns: Some(complete_ns),
            ok: true,
        }
    }

    /// A completed, successful write.
    pub fn write(
        session: u64,
        node: u16,
        key: u64,
        value: u64,
        invoke_ns: u64,
        complete_ns: u64,
    ) -> HistOp {
        HistOp {
            session,
            node,
            kind: OpKind::Write { key, value },
            invoke_ns,
            complete_ns: Some(complete_ns),
            ok: true,
        }
    }

    /// This operation with no reply (outcome unknown).
    pub fn pending(mut self) -> HistOp {
        self.complete_ns = None;
        self
    }

    /// This operation, failed definitively (did not take effect).
    pub fn failed(mut self) -> HistOp {
        self.ok = false;
        self
    }

    pub fn key(&self) -> u64 {
        self.kind.key()
    }

    /// Completed with a reply saying it failed: it did not take effect.
    pub fn is_failed(&self) -> bool {
        self.complete_ns.is_some() && !self.ok
    }

    /// Completed and took effect.
    pub fn is_ok(&self) -> bool {
        self.complete_ns.is_some() && self.ok
    }

    /// No reply: it may or may not have taken effect.
    pub fn is_pending(&self) -> bool {
        self.complete_ns.is_none()
    }
}

impl fmt::Display for HistOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session {} @node {}: ", self.session, self.node)?;
        match self.kind {
            OpKind::Read {
                key,
                value: Some(v),
            } => write!(f, "read k{key} -> {v}")?,
            OpKind::Read { key, value: None } => write!(f, "read k{key} -> none")?,
            OpKind::Write { key, value } => write!(f, "write k{key} := {value}")?,
        }
        match self.complete_ns {
            None => write!(f, "  [{}, ?) no reply", self.invoke_ns),
            Some(c) if self.ok => write!(f, "  [{}, {}]", self.invoke_ns, c),
            Some(c) => write!(f, "  [{}, {}] FAILED", self.invoke_ns, c),
        }
    }
}

/// Parse JSON lines; an error names the (1-based) line and what is wrong.
pub fn parse_jsonl(reader: impl BufRead) -> Result<Vec<HistOp>, String> {
    let mut ops = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let op = serde_json::from_str(&line)
            .map_err(|e| format!("line {}: {e}: {}", i + 1, clip(&line)))?;
        ops.push(op);
    }
    Ok(ops)
}

fn clip(line: &str) -> String {
    let mut s: String = line.chars().take(120).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

/// Read a history file of JSON lines (see the module doc for the format).
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<HistOp>, String> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_jsonl(BufReader::new(file)).map_err(|e| format!("{}: {e}", path.display()))
}

/// Serialize to JSON lines, one operation per line.
pub fn to_jsonl(ops: &[HistOp]) -> String {
    let mut out = String::new();
    for op in ops {
        out.push_str(&serde_json::to_string(op).expect("a HistOp always serializes"));
        out.push('\n');
    }
    out
}

/// Write a history file of JSON lines.
pub fn write_jsonl(path: impl AsRef<Path>, ops: &[HistOp]) -> Result<(), String> {
    let path = path.as_ref();
    let mut file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(to_jsonl(ops).as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}
