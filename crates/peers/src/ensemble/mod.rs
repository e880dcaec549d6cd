//! Foreign replicated stores run as ensembles on loopback, for the
//! comparisons that kill and restart one of their members: ZooKeeper
//! (three members, `scripts/zookeeper.sh`) and etcd (three members,
//! `scripts/peers.sh`), each behind the [`Peer`] trait, and the open-loop
//! write load ([`writers`]) every system of such a comparison gets.

pub mod etcd;
pub mod writers;
pub mod zookeeper;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use writers::Connect;

pub enum Started {
    Up,
    /// The system is not installed and cannot be (its script's exit 3).
    CannotInstall(String),
}

/// What a follower's log says about its catch-up.
pub struct Notes {
    pub how: String,
    pub extra: Value,
}

/// One replicated system. Members are numbered from 0.
pub trait Peer {
    fn name(&self) -> &'static str;
    /// A fresh cluster, serving.
    fn start(&mut self) -> Result<Started, String>;
    /// The member to stop: a follower.
    fn follower(&mut self) -> Result<usize, String>;
    fn member_name(&self, m: usize) -> String;
    /// An index as the system shows it.
    fn fmt_index(&self, i: u64) -> String {
        i.to_string()
    }
    /// Client connections to the members other than `follower`.
    fn connect(&self, follower: usize) -> Connect;
    /// How far member `m` has applied (ZooKeeper's zxid, etcd's applied index; HEAL has none).
    fn follower_index(&self, m: usize) -> Option<u64>;
    /// How far the leader is (ZooKeeper's zxid, etcd's Raft index; HEAL: none).
    fn leader_index(&self) -> Result<Option<u64>, String>;
    fn kill(&mut self, m: usize) -> Result<(), String>;
    /// Start `m` again and return at once.
    fn restart(&mut self, m: usize) -> Result<(), String>;
    /// The restarted process answers at all.
    fn answers(&self, m: usize) -> bool;
    /// It has caught up with `target` (what `leader_index` said at the restart).
    fn caught_up(&self, m: usize, target: u64) -> bool;
    /// After the catch-up: how it went.
    fn notes(&mut self, m: usize) -> Result<Notes, String>;
    fn stop(&mut self);
}

pub enum ScriptError {
    CannotInstall(String),
    Failed(String),
}

impl From<ScriptError> for String {
    fn from(e: ScriptError) -> String {
        match e {
            ScriptError::CannotInstall(m) | ScriptError::Failed(m) => m,
        }
    }
}

impl ScriptError {
    /// A start that failed: skip the system if it cannot be installed, else an error.
    pub fn started(self) -> Result<Started, String> {
        match self {
            ScriptError::CannotInstall(m) => Ok(Started::CannotInstall(m)),
            ScriptError::Failed(m) => Err(m),
        }
    }
}

fn script_command(root: &Path, script: &str, args: &[&str], env: &[(&str, String)]) -> Command {
    let mut c = Command::new("bash");
    c.arg(root.join(script))
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Run `bash script args` and wait; exit 3 means "cannot be installed".
pub fn run_script(
    root: &Path,
    script: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> Result<(), ScriptError> {
    let out = script_command(root, script, args, env)
        .output()
        .map_err(|e| ScriptError::Failed(format!("cannot run {script}: {e}")))?;
    let why = || {
        format!(
            "`bash {script} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    };
    match out.status.code() {
        Some(0) => Ok(()),
        Some(3) => Err(ScriptError::CannotInstall(why())),
        _ => Err(ScriptError::Failed(why())),
    }
}

/// Start `bash script args` without waiting for it.
pub fn spawn_script(
    root: &Path,
    script: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> Result<Child, String> {
    script_command(root, script, args, env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {script}: {e}"))
}

/// Wait for a script started by [`spawn_script`]; its failure is an error.
pub fn wait_script(child: Option<Child>) -> Result<(), String> {
    let Some(c) = child else { return Ok(()) };
    let out = c.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "restarting the follower failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

pub fn log_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// A log's text from byte `from` on.
pub fn log_since(path: &Path, from: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(bytes.get(from as usize..).unwrap_or_default()).into_owned()
}
