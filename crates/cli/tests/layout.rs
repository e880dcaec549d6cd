//! The workspace's layering rules (ARCHITECTURE.md, docs/DESIGN.md §2),
//! checked on the sources so that they cannot drift:
//! - the protocol crates open no socket, start no thread and read no clock;
//! - no crate depends on a crate of its floor or above.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The crates by floor, as ARCHITECTURE.md draws them.
const FLOORS: &[(&str, u32)] = &[
    ("sim", 0),
    ("auth", 0),
    ("resp", 0),
    ("check", 0),
    ("report", 0),
    ("membership", 0),
    ("fuzz", 0),
    ("fabric", 1),
    ("net", 1),
    ("ycsb", 1),
    ("lrp", 1),
    ("dkvs", 2),
    ("ddp", 2),
    ("kite", 2),
    ("nemesis", 2),
    ("workloads", 3),
    ("zab", 3),
    ("cluster", 4),
    ("peers", 4),
    ("dart", 5),
    ("pandora-lab", 5),
    ("ddp-lab", 5),
    ("kite-lab", 5),
    ("cli", 6),
];

const PROTOCOL_CRATES: &[&str] = &["dkvs", "membership", "ddp", "zab", "kite"];

/// What a protocol crate must not name: sockets, threads, clocks, runtimes.
const FORBIDDEN: &[&str] = &[
    "std::net",
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "UnixStream",
    "std::thread",
    "thread::spawn",
    "thread::sleep",
    "Instant::now",
    "SystemTime",
    "sim::cpu",
    "thread_ns",
    "tokio::",
    "mio::",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a line: what precedes a `//` comment.
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// Lines of the crate's sources (tests excluded: `#[cfg(test)]` modules
/// come after the code, so the file's lines before `mod tests` count).
fn offending_lines(krate: &str) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(
        &workspace().join("crates").join(krate).join("src"),
        &mut files,
    );
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if let Some(bad) = FORBIDDEN.iter().find(|b| code(line).contains(*b)) {
                found.push(format!("{}:{}: {bad}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn protocol_crates_open_no_socket_start_no_thread_and_read_no_clock() {
    for krate in PROTOCOL_CRATES {
        let found = offending_lines(krate);
        assert!(
            found.is_empty(),
            "{krate} does I/O itself:\n{}",
            found.join("\n")
        );
    }
}

/// The `tandem-*` crates a manifest's `[dependencies]` names.
fn dependencies(krate: &str) -> Vec<String> {
    let manifest = workspace().join("crates").join(krate).join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut inside = false;
    let mut deps = Vec::new();
    for line in text.lines() {
        if line.starts_with('[') {
            inside = line.trim() == "[dependencies]";
        } else if inside {
            if let Some(name) = line.trim().strip_prefix("tandem-") {
                deps.push(name.split(['.', ' ', '=']).next().unwrap().to_string());
            }
        }
    }
    deps
}

fn floor(krate: &str) -> u32 {
    FLOORS
        .iter()
        .find(|(k, _)| *k == krate)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("crate {krate} has no floor in this test and ARCHITECTURE.md"))
}

#[test]
fn no_crate_depends_on_its_floor_or_above() {
    let mut crates: Vec<String> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    for krate in &crates {
        for dep in dependencies(krate) {
            assert!(
                floor(&dep) < floor(krate),
                "{krate} (floor {}) depends on {dep} (floor {})",
                floor(krate),
                floor(&dep)
            );
        }
    }
}
