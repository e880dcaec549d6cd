//! `tandem resp-bench`: a closed-loop Redis benchmark for what
//! `redis-benchmark` cannot send: a `MULTI`/`EXEC` block per request, and a
//! write followed by `WAIT`. The protocol is a third party's (the `redis`
//! crate, unmodified); this file only drives it, the same way against any
//! server, so that one client serves both sides of a comparison.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use redis::{Connection, Pipeline, Value};
use serde::Serialize;
use tandem_sim::Rng;

#[derive(Args)]
pub struct RespBenchArgs {
    /// The server's port (on --host).
    #[arg(long, short = 'p')]
    port: u16,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// `AUTH` password (Tandem: the client key of `tandem keys split`).
    #[arg(long, short = 'a')]
    password: Option<String>,
    /// What each request is.
    #[arg(long, value_enum, default_value = "set")]
    workload: Workload,
    /// Connections, each a thread with one pipeline in flight.
    #[arg(long, short = 'c', default_value_t = 50)]
    clients: u32,
    /// Requests per round trip.
    #[arg(long, short = 'P', default_value_t = 1)]
    pipeline: u32,
    /// Keys `PREFIX000000000000` .. (as redis-benchmark's `-r` names them).
    #[arg(long, short = 'r', default_value_t = 100_000)]
    keys: u64,
    /// The keys' prefix (a transfer needs keys no other run wrote text into).
    #[arg(long, default_value = "key:")]
    prefix: String,
    /// The value SET writes (an integer: every Tandem store takes one).
    #[arg(long, default_value = "42")]
    value: String,
    /// set-wait: the replicas `WAIT` asks for after each SET.
    #[arg(long, default_value_t = 2)]
    replicas: u32,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Workload {
    /// `SET key v`.
    Set,
    /// `SET key v` then `WAIT replicas 0`, sent together: one request.
    SetWait,
    /// `MULTI`, `INCRBY a 1`, `INCRBY b -1`, `EXEC` on two random keys: one request.
    Transfer,
}

/// What a run measured (one JSON line on stdout).
#[derive(Serialize)]
struct Report {
    workload: Workload,
    clients: u32,
    pipeline: u32,
    keys: u64,
    seconds: f64,
    requests: u64,
    requests_per_s: f64,
    /// Round trips' latency (a pipeline's), µs.
    p50_us: u32,
    p99_us: u32,
    /// Requests answered with an error (or a WAIT short of its replicas).
    errors: u64,
    first_error: Option<String>,
}

/// One connection's tally.
#[derive(Default)]
struct Tally {
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    rtts_us: Vec<u32>,
}

pub fn run(a: RespBenchArgs) -> Result<(), String> {
    let url = match &a.password {
        Some(pw) => format!("redis://:{pw}@{}:{}/", a.host, a.port),
        None => format!("redis://{}:{}/", a.host, a.port),
    };
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    // One connection first: a wrong address or password fails here, at once.
    drop(connect(&client)?);
    let (a, stop, client) = (
        Arc::new(a),
        Arc::new(AtomicBool::new(false)),
        Arc::new(client),
    );
    let start = Instant::now();
    let threads: Vec<_> = (0..a.clients as u64)
        .map(|i| {
            let (a, stop, client) = (a.clone(), stop.clone(), client.clone());
            std::thread::spawn(move || drive(&a, &client, i, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    stop.store(true, Ordering::Relaxed);
    let tallies: Vec<Tally> = threads
        .into_iter()
        .map(|t| t.join().expect("a connection thread panicked"))
        .collect();
    let report = summarise(&a, tallies, start.elapsed());
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    match (report.requests, report.errors, &report.first_error) {
        (0, _, why) => Err(format!(
            "no request completed ({})",
            why.as_deref().unwrap_or("no error either")
        )),
        (_, 0, _) => Ok(()),
        (n, e, why) => Err(format!(
            "{e} of {n} requests failed; the first: {}",
            why.as_deref().unwrap_or("?")
        )),
    }
}

/// A connection whose answers may take up to [`ANSWER_PATIENCE`]: a request
/// that gets none by then counts as an error, and the connection is made again.
fn connect(client: &redis::Client) -> Result<Connection, String> {
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| format!("cannot connect: {e}"))?;
    con.set_read_timeout(Some(ANSWER_PATIENCE))
        .map_err(|e| e.to_string())?;
    Ok(con)
}

const ANSWER_PATIENCE: Duration = Duration::from_secs(5);

/// One connection's closed loop: a pipeline of requests, its answers
/// checked, until `stop`. A connection that broke or went silent is made again.
fn drive(a: &RespBenchArgs, client: &redis::Client, i: u64, stop: &AtomicBool) -> Tally {
    let mut rng = Rng::new(a.seed ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (mut t, mut con) = (Tally::default(), None);
    while !stop.load(Ordering::Relaxed) {
        let c = match con.as_mut() {
            Some(c) => c,
            None => match connect(client) {
                Ok(c) => con.insert(c),
                Err(e) => {
                    t.first_error.get_or_insert(e);
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            },
        };
        let pipe = pipeline(a, &mut rng);
        let sent = Instant::now();
        let answer = pipe.query::<Vec<Value>>(c);
        t.rtts_us
            .push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
        let bad = match answer {
            Ok(values) => check(a, &values),
            Err(e) => {
                if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                    con = None;
                }
                Some(e.to_string())
            }
        };
        t.requests += a.pipeline as u64;
        if let Some(why) = bad {
            t.errors += a.pipeline as u64;
            t.first_error.get_or_insert(why);
        }
    }
    t
}

fn key(a: &RespBenchArgs, rng: &mut Rng) -> String {
    format!("{}{:012}", a.prefix, rng.below(a.keys.max(1)))
}

/// `a.pipeline` requests of the workload, each its commands in order.
fn pipeline(a: &RespBenchArgs, rng: &mut Rng) -> Pipeline {
    let mut p = redis::pipe();
    for _ in 0..a.pipeline {
        match a.workload {
            Workload::Set => {
                p.cmd("SET").arg(key(a, rng)).arg(&a.value);
            }
            Workload::SetWait => {
                p.cmd("SET").arg(key(a, rng)).arg(&a.value);
                p.cmd("WAIT").arg(a.replicas).arg(0);
            }
            Workload::Transfer => {
                let (from, to) = (key(a, rng), key(a, rng));
                p.cmd("MULTI");
                p.cmd("INCRBY").arg(from).arg(-1);
                p.cmd("INCRBY").arg(to).arg(1);
                p.cmd("EXEC");
            }
        }
    }
    p
}

/// Why a pipeline's answers are not what its requests should get, if so.
fn check(a: &RespBenchArgs, values: &[Value]) -> Option<String> {
    let per = match a.workload {
        Workload::Set => 1,
        Workload::SetWait => 2,
        Workload::Transfer => 4,
    };
    if values.len() != per * a.pipeline as usize {
        return Some(format!(
            "{} answers to {} requests",
            values.len(),
            a.pipeline
        ));
    }
    values.chunks(per).find_map(|r| match (a.workload, r) {
        (Workload::Set, [Value::Okay]) => None,
        (Workload::SetWait, [Value::Okay, Value::Int(n)]) if *n >= a.replicas as i64 => None,
        (Workload::SetWait, [Value::Okay, Value::Int(n)]) => Some(format!(
            "WAIT {} answered {n}: fewer replicas hold the write",
            a.replicas
        )),
        (Workload::Transfer, [Value::Okay, _, _, Value::Array(two)]) if two.len() == 2 => None,
        _ => Some(format!("unexpected answer {r:?}")),
    })
}

fn summarise(a: &RespBenchArgs, tallies: Vec<Tally>, took: Duration) -> Report {
    let mut rtts: Vec<u32> = Vec::new();
    let (mut requests, mut errors, mut first_error) = (0, 0, None);
    for t in tallies {
        requests += t.requests;
        errors += t.errors;
        first_error = first_error.or(t.first_error);
        rtts.extend(t.rtts_us);
    }
    rtts.sort_unstable();
    let pct = |q: f64| match rtts.len() {
        0 => 0,
        n => rtts[((n - 1) as f64 * q) as usize],
    };
    let seconds = took.as_secs_f64();
    Report {
        workload: a.workload,
        clients: a.clients,
        pipeline: a.pipeline,
        keys: a.keys,
        seconds,
        requests,
        requests_per_s: (requests - errors) as f64 / seconds,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        errors,
        first_error,
    }
}
