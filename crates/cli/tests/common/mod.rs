//! Helpers shared by the CLI tests that run `tandem` and read its output.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run `tandem args` from the workspace root.
pub fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("run tandem")
}

/// `tandem args` must fail, saying `message`.
pub fn fails_with(args: &[&str], message: &str) {
    let out = tandem(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        stderr.contains(message),
        "{args:?}: expected '{message}' in:\n{stderr}"
    );
}
