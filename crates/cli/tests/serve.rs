//! `tandem serve`: Pandora behind Redis's protocol, driven by clients
//! nobody here wrote (Debian's `redis-cli` and `redis-benchmark`), by raw
//! sockets for `WATCH`, and by a hostile client.
//!
//! `redis-cli` comes from `scripts/peers.sh install redis`; if it cannot be
//! installed the tests that need it fail under CI (`CI` set) and skip
//! otherwise.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `tandem serve` process; killed when dropped.
struct Serve {
    child: Child,
    port: u16,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tandem serve --port 0 EXTRA`: the port it bound, from its first line
/// (a port picked here and bound there could be taken meanwhile, by a
/// server of another test).
fn serve(extra: &[&str]) -> Serve {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--port", "0"])
        .args(extra)
        .env_remove("TANDEM_SECRET")
        .env_remove("TANDEM_KEYRING")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port = line
        .split(" on 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("tandem serve did not say where it listens: {line:?}"));
    std::thread::spawn(move || for _ in out.lines() {});
    Serve { child, port }
}

use common::call;

fn connect(s: &Serve) -> TcpStream {
    TcpStream::connect(("127.0.0.1", s.port)).unwrap()
}

/// Redis's tools, installed by the project's script; `None`: skip.
fn redis_tools() -> Option<()> {
    if Command::new("redis-cli").arg("--version").output().is_ok() {
        return Some(());
    }
    let out = Command::new("bash")
        .arg(common::workspace().join("scripts/peers.sh"))
        .args(["install", "redis"])
        .output()
        .unwrap();
    match out.status.success() {
        true => Some(()),
        false if std::env::var_os("CI").is_some() => panic!(
            "cannot install redis-tools: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        false => {
            eprintln!("SKIPPED: redis-tools cannot be installed here");
            None
        }
    }
}

fn redis_cli(s: &Serve, script: &str) -> String {
    let mut c = Command::new("redis-cli")
        .args(["-p", &s.port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scripted `redis-cli` session: Redis's answers, line for line.
#[test]
fn redis_cli_runs_a_session_with_redis_semantics() {
    let Some(()) = redis_tools() else { return };
    let s = serve(&[]);
    let script = "PING\nSET k v\nGET k\nSET k w NX\nSET n 1 XX\nMSET a 1 b 2\nMGET a b zz\n\
                  INCR a\nINCRBY a 10\nINCR k\nDEL a zz\nEXISTS a b k\nSET t 1 EX 5\n\
                  MULTI\nSET m 5\nINCR m\nGET m\nEXEC\nGET m\nQUIT\n";
    let out = redis_cli(&s, script);
    // (redis-cli prints a blank line after an error, and nothing for QUIT.)
    let want = [
        "PONG",
        "OK",
        "v",
        "",
        "",
        "OK",
        "1",
        "2",
        "",
        "2",
        "12",
        "ERR value is not an integer or out of range",
        "",
        "1",
        "2",
        "ERR this store's keys do not expire (EX, PX, EXAT, PXAT and KEEPTTL are refused)",
        "",
        "OK",
        "QUEUED",
        "QUEUED",
        "QUEUED",
        "OK",
        "6",
        "6",
        "6",
    ];
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got, want, "{out}");
}

/// README's lines, as written, on their own port.
#[test]
fn the_readme_serve_lines_run_as_written() {
    let Some(()) = redis_tools() else { return };
    let readme = std::fs::read_to_string(common::workspace().join("README.md")).unwrap();
    let serve_line = readme
        .lines()
        .find(|l| l.starts_with("tandem serve"))
        .unwrap();
    let cli_line = readme
        .lines()
        .find(|l| l.starts_with("redis-cli -p"))
        .unwrap();
    let args: Vec<&str> = serve_line
        .split('#')
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .collect();
    assert_eq!(
        args,
        ["serve"],
        "README's serve line takes no flags: {serve_line}"
    );
    let cli: Vec<&str> = cli_line
        .split('#')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(&cli[..3], ["redis-cli", "-p", "7379"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(&args)
        .env_remove("TANDEM_SECRET")
        .env_remove("TANDEM_KEYRING")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let o = Command::new(cli[0]).args(&cli[1..]).output().unwrap();
        if o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("refused") {
            break String::from_utf8_lossy(&o.stdout).into_owned();
        }
        assert!(
            Instant::now() < until,
            "tandem serve did not answer on 7379"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.trim(), "OK");
}

/// `WATCH`: a key written by another client since makes `EXEC` answer nil
/// and run nothing; unchanged keys let it run. A write of the same value
/// counts as a change.
#[test]
fn watch_aborts_exec_when_another_client_wrote_the_key() {
    let s = serve(&[]);
    let (mut a, mut b) = (connect(&s), connect(&s));
    assert_eq!(call(&mut a, b"SET k 1\r\n"), "+OK\r\n");
    assert_eq!(call(&mut a, b"WATCH k\r\n"), "+OK\r\n");
    assert_eq!(call(&mut b, b"SET k 1\r\n"), "+OK\r\n");
    let out = call(&mut a, b"MULTI\r\nINCR k\r\nEXEC\r\n");
    assert_eq!(out, "+OK\r\n+QUEUED\r\n*-1\r\n");
    assert_eq!(call(&mut a, b"GET k\r\n"), "$1\r\n1\r\n");
    assert_eq!(
        call(&mut a, b"WATCH k\r\nMULTI\r\nINCR k\r\nEXEC\r\n"),
        "+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n:2\r\n"
    );
    // A refused command discards the block.
    let out = call(&mut a, b"MULTI\r\nINCR k\r\nGET\r\nEXEC\r\nGET k\r\n");
    assert!(
        out.ends_with(
            "-EXECABORT Transaction discarded because of previous errors.\r\n$1\r\n2\r\n"
        ),
        "{out}"
    );
}

/// Credentials: with a secret, nothing runs before `AUTH` with the client
/// key; a wrong one is refused.
#[test]
fn with_credentials_commands_wait_for_auth_with_the_client_key() {
    let secret = "00112233445566778899aabbccddeeff";
    let s = serve(&["--secret", secret]);
    let keys = tandem_fabric::auth::Keyring::from_master_hex(secret).unwrap();
    let client = keys.get(tandem_fabric::auth::Role::Client).unwrap();
    let key = tandem_fabric::auth::keys::to_hex(client.bytes());
    let mut c = connect(&s);
    assert!(call(&mut c, b"GET k\r\n").starts_with("-NOAUTH"));
    assert!(call(&mut c, b"AUTH nope\r\n").starts_with("-WRONGPASS"));
    assert_eq!(
        call(&mut c, format!("AUTH {key}\r\nSET k v\r\n").as_bytes()),
        "+OK\r\n+OK\r\n"
    );
}

/// `redis-benchmark`, unmodified, against the store.
#[test]
fn redis_benchmark_runs_against_the_store() {
    let Some(()) = redis_tools() else { return };
    let s = serve(&[]);
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &s.port.to_string(),
            "-t",
            "ping,set,get,incr,mset",
            "-n",
            "2000",
            "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for t in ["SET", "GET", "INCR", "MSET"] {
        assert!(
            text.lines()
                .any(|l| l.contains(t) && l.contains("requests per second")),
            "{t}: {text}"
        );
    }
}

/// A hostile client: garbage, lengths far past the limits, arrays nested
/// a hundred thousand deep, a million empty lines, a request a byte at a
/// time, a pipeline that is never read, more connections than allowed. Each is refused or
/// bounded, and the process keeps serving the others.
#[test]
fn a_hostile_client_leaves_the_store_alive_and_serving_others() {
    let mut s = serve(&["--max-clients", "8"]);
    let port = s.port;
    common::resp_attack(port, None, 8, &mut || s.child.try_wait().unwrap().is_none());
}

/// redis-py (from PyPI, by `scripts/pyredis.sh`) runs its checks through
/// its own API: commands, its transactional pipeline, `WATCH` with its
/// `WatchError`, its optimistic-locking helper from four threads (no
/// increment lost), plain pipelining; with credentials, through `AUTH`.
#[test]
fn a_python_redis_client_runs_its_checks_against_the_store() {
    let ws = common::workspace();
    let Some(dir) = common::pyredis_dir() else {
        return;
    };
    let secret = "0123456789abcdef0123456789abcdef";
    let keys = tandem_fabric::auth::Keyring::from_master_hex(secret).unwrap();
    let client = tandem_fabric::auth::keys::to_hex(
        keys.get(tandem_fabric::auth::Role::Client).unwrap().bytes(),
    );
    for (flags, password) in [(vec![], None), (vec!["--secret", secret], Some(client))] {
        let s = serve(&flags);
        let mut cmd = Command::new("python3");
        cmd.arg(ws.join("scripts/resp_client_check.py"))
            .arg(s.port.to_string())
            .args(password)
            .env("PYTHONPATH", &dir);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("ok: 21 checks"),
            "{text}"
        );
    }
}

/// A store filled past what it was sized for answers `-OOM` at once for
/// each new key (as Redis past its memory limit does), not a retry that
/// can never succeed; keys already there still take writes.
#[test]
fn a_full_store_answers_oom_not_a_retry() {
    let s = serve(&["--keys", "50"]);
    let mut c = connect(&s);
    let wire: String = (0..400).map(|i| format!("SET k{i} v\r\n")).collect();
    let t = Instant::now();
    let out = call(&mut c, wire.as_bytes());
    assert!(out.contains("-OOM the store is full"), "{out}");
    assert!(!out.contains("TRYAGAIN"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(
        call(&mut c, b"SET k0 w\r\nGET k0\r\n"),
        "+OK\r\n$1\r\nw\r\n"
    );
}

/// Bad options are refused before anything listens.
#[test]
fn bad_options_are_refused_before_anything_listens() {
    common::fails_with(&["serve", "--keys", "0"], "--keys must be at least 1");
    common::fails_with(&["serve", "--slot-bytes", "10"], "must be 16..=4096");
    common::fails_with(&["serve", "--system", "etcd"], "pandora, ddp, kite or zab");
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--bind", "0.0.0.0", "--port", "0"])
        .env_remove("TANDEM_SECRET")
        .env_remove("TANDEM_KEYRING")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs credentials"),
        "{err}"
    );
}

/// `tandem serve --system ddp|kite|zab`: three nodes in the process, node 0
/// behind the port; each store's own semantics through `redis-cli`.
#[test]
fn serve_embeds_ddp_kite_and_zab_nodes() {
    let Some(()) = redis_tools() else { return };
    let cases: [(&[&str], &str); 4] = [
        (
            &["--system", "ddp"],
            "set k 42\nget k\nset k hello\nincr k\n",
        ),
        (
            &["--system", "ddp", "--model", "trans-synch"],
            "set k 42\nincr k\nmset a 1 b 2\nmget a b\n",
        ),
        (
            &["--system", "kite"],
            "get k\nkite.release k 42\nkite.acquire k\nincr k\nkite.cas k 43 7\nget k\n",
        ),
        (&["--system", "zab"], "set k 42\nget k\nincr k\n"),
    ];
    let want = [
        "OK\n42\nERR DDP's engine stores 64-bit integers; 'hello' is not one (values are written as Redis writes integers)\n\nERR this command reads or writes several keys at once (or reads and writes one), which needs a transaction; model lin-synch has none\n\n",
        "OK\n43\nOK\n1\n2\n",
        "\nOK\n42\n43\n1\n7\n",
        "OK\n42\nERR the ZAB baseline has no read-modify-write (Kite's benchmark runs its fetch-and-add and compare-and-swap as plain writes); INCR and KITE.CAS are Kite's\n\n",
    ];
    // (redis-cli follows an error with an empty line when not on a terminal.)
    for ((flags, script), want) in cases.into_iter().zip(want) {
        let s = serve(flags);
        assert_eq!(redis_cli(&s, script), want, "{flags:?}");
    }
}

/// redis-py's own API against the integer stores (`tandem serve --system
/// ddp --model trans-synch`, `--system kite`): values, refusals raised as
/// its errors, pipelining, MULTI/EXEC or Kite's commands, and increments
/// from four threads with none lost (`scripts/resp_client_check_int.py`).
#[test]
fn a_python_redis_client_runs_its_checks_against_ddp_and_kite() {
    let ws = common::workspace();
    let Some(dir) = common::pyredis_dir() else {
        return;
    };
    for (flags, system) in [
        (&["--system", "ddp", "--model", "trans-synch"][..], "ddp"),
        (&["--system", "kite"][..], "kite"),
    ] {
        let s = serve(flags);
        let out = Command::new("python3")
            .arg(ws.join("scripts/resp_client_check_int.py"))
            .args([s.port.to_string(), system.to_string()])
            .env("PYTHONPATH", &dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("ok: "),
            "{system}: {text}"
        );
    }
}

/// `tandem resp-bench`, the client for what redis-benchmark cannot send:
/// its MULTI/EXEC transfers against `tandem serve` all commit, and as each
/// moved one unit between two keys, the keys still sum to zero. A request
/// the store refuses (Pandora has no replicas for `WAIT` to count) is an
/// error the run reports, and it fails.
#[test]
fn resp_bench_sends_multi_exec_blocks_and_reports_refusals() {
    let s = serve(&["--keys", "1000"]);
    let port = s.port.to_string();
    let bench = |extra: &[&str]| {
        let mut args = vec!["resp-bench", "-p", &port, "-r", "50"];
        args.extend_from_slice(extra);
        let out = common::tandem(&args);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.success(), report)
    };
    let (ok, r) = bench(&[
        "--workload",
        "transfer",
        "-c",
        "4",
        "-P",
        "4",
        "--seconds",
        "1",
    ]);
    assert!(
        ok && r["errors"] == 0 && r["requests"].as_u64() > Some(100),
        "{r}"
    );
    let mut wire = b"*51\r\n$4\r\nMGET\r\n".to_vec();
    for k in 0..50 {
        wire.extend_from_slice(format!("$16\r\nkey:{k:012}\r\n").as_bytes());
    }
    let answer = call(&mut connect(&s), &wire);
    let values: Vec<i64> = answer
        .lines()
        .filter(|l| !l.starts_with(['*', '$']))
        .map(|l| l.parse().unwrap_or_else(|_| panic!("{l:?} in {answer}")))
        .collect();
    assert!(
        values.len() > 40,
        "the transfers touched most keys: {answer}"
    );
    assert_eq!(values.iter().sum::<i64>(), 0, "{answer}");
    let (ok, r) = bench(&["--workload", "set-wait", "-c", "1", "--seconds", "0.3"]);
    assert!(!ok, "a run with errors must fail: {r}");
    assert!(r["errors"].as_u64() > Some(0), "{r}");
    assert!(r["first_error"].as_str().unwrap().contains("WAIT"), "{r}");
}
