//! The documents' command blocks, run as written, so the docs cannot rot:
//! - every `tandem` command line of README.md names real subcommands and flags;
//! - the multi-process blocks of docs/PANDORA.md run with bash, and every
//!   `check-cluster` in them passes (fixed loopback ports 7300-7303, 7401-7404);
//! - the multi-process block of docs/DDP.md runs, and its history checks out.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The ```sh blocks of docs/PANDORA.md that start compute servers, in order.
fn multi_process_blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace().join("docs/PANDORA.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in readme.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(b), "```") => {
                let block = b.join("\n");
                if block.contains("compute-server") {
                    blocks.push(block);
                }
                current = None;
            }
            (Some(b), l) => b.push(l),
            (None, _) => {}
        }
    }
    blocks
}

/// Runs in a process group of its own; on drop, the whole group is killed
/// (servers a failed block left running) and ZooKeeper is stopped.
struct Run {
    child: Child,
    dir: PathBuf,
    zk_port: u16,
}

impl Run {
    /// The script's exit status, or None if it ran past `limit`.
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
        let _ = Command::new("bash")
            .arg("scripts/zookeeper.sh")
            .arg("stop")
            .current_dir(&self.dir)
            .env("ZK_PORT", self.zk_port.to_string())
            .output();
    }
}

fn free_port() -> u16 {
    tandem_net::ports::reserve_loopback().unwrap().port()
}

/// Wait (bounded) until nothing listens on the README's ports: another run
/// of these blocks may be finishing.
fn wait_for_readme_ports() {
    let until = Instant::now() + Duration::from_secs(60);
    for port in [7300, 7301, 7302, 7303, 7401, 7402, 7403, 7404] {
        while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "127.0.0.1:{port} stays in use; the README blocks need it"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Whether ZooKeeper can run here (`scripts/zookeeper.sh install`; exit 3:
/// it cannot be installed). Under CI it must.
fn zookeeper_available(dir: &Path) -> bool {
    let out = Command::new("bash")
        .arg("scripts/zookeeper.sh")
        .arg("install")
        .current_dir(dir)
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => true,
        Some(3) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "SKIPPED the ZooKeeper block: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            false
        }
        _ => panic!(
            "scripts/zookeeper.sh install failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn the_pandora_doc_blocks_run_as_written_and_the_cluster_checks_out() {
    let mut blocks = multi_process_blocks();
    assert!(
        blocks.len() >= 2,
        "docs/PANDORA.md lost its multi-process blocks: {blocks:?}"
    );
    assert!(
        blocks.iter().all(|b| b.contains("check-cluster")),
        "every multi-process block ends in check-cluster: {blocks:?}"
    );
    // A fresh directory laid out as the README expects: ./target/release/tandem, scripts/.
    let dir = std::env::temp_dir().join(format!("tandem-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_tandem"),
        dir.join("target/release/tandem"),
    )
    .unwrap();
    std::fs::copy(
        workspace().join("scripts/zookeeper.sh"),
        dir.join("scripts/zookeeper.sh"),
    )
    .unwrap();
    if !zookeeper_available(&dir) {
        blocks.retain(|b| !b.contains("--zookeeper"));
    }
    std::fs::write(dir.join("readme.sh"), blocks.join("\n")).unwrap();
    wait_for_readme_ports();
    let zk_port = free_port();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let child = Command::new("bash")
        .args(["-e", "readme.sh"])
        .current_dir(&dir)
        .env("ZK_PORT", zk_port.to_string())
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .process_group(0)
        .spawn()
        .unwrap();
    let mut run = Run {
        child,
        dir: dir.clone(),
        zk_port,
    };
    let status = run.wait(Duration::from_secs(240));
    let log = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "the README blocks failed ({status:?}):\n{log}"
    );
    let passed = log.matches("counters consistent").count();
    assert_eq!(
        passed,
        blocks.len(),
        "one passing check-cluster per block:\n{log}"
    );
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The DDP block of docs/DDP.md (five `tandem node` processes, a manager, a
/// load with a kill -9 and a rejoin) runs as written and its history checks out.
#[test]
fn the_ddp_doc_block_runs_as_written() {
    let readme = std::fs::read_to_string(workspace().join("docs/DDP.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .find(|b| b.contains("ddp manager"))
        .expect("docs/DDP.md has its multi-process block")
        .to_string();
    let dir = std::env::temp_dir().join(format!("tandem-readme-ddp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_tandem"),
        dir.join("target/release/tandem"),
    )
    .unwrap();
    std::fs::write(dir.join("readme.sh"), &block).unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    for port in 7500..=7505 {
        while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "127.0.0.1:{port} stays in use; the README's DDP block needs it"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let child = Command::new("bash")
        .args(["-e", "readme.sh"])
        .current_dir(&dir)
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .process_group(0)
        .spawn()
        .unwrap();
    let mut run = Run {
        child,
        dir: dir.clone(),
        zk_port: 0,
    };
    let status = run.wait(Duration::from_secs(120));
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let log = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "the README's DDP block failed ({status:?}):\n{stdout}\n{log}"
    );
    assert!(stdout.contains("linearizable:"), "{stdout}\n{log}");
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `tandem ...` lines of README.md's ```sh blocks, as argument lists
/// (the comment after `#` cut off).
fn readme_command_lines() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let mut lines = Vec::new();
    let mut inside = false;
    for line in readme.lines() {
        match (inside, line.trim_end()) {
            (false, "```sh") => inside = true,
            (true, "```") => inside = false,
            (true, l) => {
                let command = l.split(" #").next().unwrap_or("").trim();
                let words: Vec<String> = command.split_whitespace().map(String::from).collect();
                if words.first().map(String::as_str) == Some("tandem") {
                    lines.push(words[1..].to_vec());
                }
            }
            _ => {}
        }
    }
    lines
}

/// Each README command, with `--help` appended, is accepted by the parser:
/// clap rejects an unknown subcommand or flag, or a bad value, before it
/// reaches the `--help`. Nothing runs.
#[test]
fn every_readme_command_names_real_subcommands_and_flags() {
    let lines = readme_command_lines();
    assert!(lines.len() >= 20, "README.md lost its commands: {lines:?}");
    for args in lines {
        let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README: `tandem {}` does not parse:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
