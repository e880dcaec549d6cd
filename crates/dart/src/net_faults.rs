//! Network faults during a DART run over processes (`tandem dart --fabric
//! tcp --net-faults ...`): while the litmus workers run their transactions,
//! a seeded stream of faults hits them on a real network, so that workers
//! are suspected, revoked and fenced while alive and with transactions in
//! flight, and DART's checkers judge the histories they leave.
//!
//! The run is in a network namespace of its own (root), and each worker
//! dials from an address of its own (127.0.0.(w+2), `TANDEM_DIAL_FROM`), so
//! a rule can cut one worker off from the membership while it still
//! reaches the memory servers. The memory servers and the membership stay
//! on 127.0.0.1, told apart by their ports.
//!
//! Classes:
//! - `isolate`: a worker cut off from everyone;
//! - `manager-cut`: a worker cut off from the membership only: suspected
//!   while it still reads and writes the memory servers, until fenced;
//! - `loss`: 10–40 % of a worker's packets vanish;
//! - `pause`: `SIGSTOP` a worker (alive, silent), `SIGCONT` at the heal;
//! - `suspect`: `SIGSTOP` a worker for the first half while the
//!   membership's own links to the memory servers lose 30 % of their
//!   packets, so its revocation is slow; `SIGCONT` half-way, the loss
//!   still holding: the worker resumes with its transactions in flight.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_nemesis::{addr_of, Firewall};
use tandem_sim::Rng;

/// The classes `--net-faults` names.
pub const CLASSES: [&str; 5] = ["isolate", "manager-cut", "loss", "pause", "suspect"];

/// Healthy time before the first fault and between two.
const SETTLE: Duration = Duration::from_millis(300);

/// Which faults a run injects, and for how long each.
#[derive(Clone, Debug)]
pub struct NetFaults {
    pub classes: Vec<String>,
    pub fault_time: Duration,
}

impl NetFaults {
    /// Parse a `--net-faults` list (`all` for every class).
    pub fn parse(list: &str, fault_ms: u64) -> Result<NetFaults, String> {
        let classes: Vec<String> = match list {
            "all" => CLASSES.iter().map(|c| c.to_string()).collect(),
            _ => list.split(',').map(|c| c.trim().to_string()).collect(),
        };
        if let Some(c) = classes.iter().find(|c| !CLASSES.contains(&c.as_str())) {
            return Err(format!(
                "unknown --net-faults class '{c}' (one of: all, {})",
                CLASSES.join(", ")
            ));
        }
        Ok(NetFaults {
            classes,
            fault_time: Duration::from_millis(fault_ms.max(1)),
        })
    }
}

/// The address worker `w` (0-based) dials from.
pub fn worker_ip(w: u16) -> Ipv4Addr {
    addr_of(w as usize)
}

/// The processes the faults hit.
pub struct Targets {
    /// Each worker's pid, by worker (0-based).
    pub workers: Vec<u32>,
    pub membership: SocketAddr,
    pub memory: Vec<SocketAddr>,
}

/// Faults being injected on a thread of their own until [`Running::stop`].
pub struct Running {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<String>, String>>,
}

impl Running {
    /// Start injecting faults drawn from `seed`; the calling thread must be
    /// in the run's namespace.
    pub fn start(plan: &NetFaults, seed: u64, targets: Targets) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, plan) = (stop.clone(), plan.clone());
        let thread = std::thread::spawn(move || inject(&plan, seed, &targets, &flag));
        Running { stop, thread }
    }

    /// Heal everything and stop; the faults injected, in order.
    pub fn stop(self) -> Result<Vec<String>, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the network-fault thread panicked".to_string())?
    }
}

fn inject(
    plan: &NetFaults,
    seed: u64,
    t: &Targets,
    stop: &AtomicBool,
) -> Result<Vec<String>, String> {
    let mut fw = Firewall::new().map_err(|e| e.to_string())?;
    let mut rng = Rng::new(seed ^ 0x4E37_FA17);
    let mut done = Vec::new();
    let wait = |d: Duration| pause_unless(stop, d);
    while wait(SETTLE) {
        let class = &plan.classes[rng.below(plan.classes.len() as u64) as usize];
        let w = rng.below(t.workers.len() as u64) as u16;
        let pct = 10 + 10 * rng.below(4) as u32;
        let what = fault(&mut fw, t, class, w, pct).map_err(|e| e.to_string())?;
        let half = plan.fault_time / 2;
        let full = wait(half);
        if class == "suspect" {
            signal(t.workers[w as usize], libc::SIGCONT);
        }
        let full = full && wait(plan.fault_time - half);
        fw.heal().map_err(|e| e.to_string())?;
        signal(t.workers[w as usize], libc::SIGCONT);
        done.push(what);
        if !full {
            break;
        }
    }
    Ok(done)
}

/// Inject one fault of `class` on worker `w`; what it was.
fn fault(fw: &mut Firewall, t: &Targets, class: &str, w: u16, pct: u32) -> std::io::Result<String> {
    let (ip, pid) = (worker_ip(w), t.workers[w as usize]);
    let node = w + 1;
    Ok(match class {
        "isolate" => {
            fw.isolate(ip)?;
            format!("isolate worker {node}")
        }
        "manager-cut" => {
            fw.cut_service(ip, t.membership.port(), 100)?;
            format!("cut worker {node} from the membership")
        }
        "loss" => {
            fw.lossy(ip, pct)?;
            format!("{pct}% loss on worker {node}'s links")
        }
        "pause" => {
            signal(pid, libc::SIGSTOP);
            format!("SIGSTOP worker {node}")
        }
        "suspect" => {
            for m in &t.memory {
                fw.cut_service(Ipv4Addr::LOCALHOST, m.port(), 30)?;
            }
            signal(pid, libc::SIGSTOP);
            format!("SIGSTOP worker {node} for half the time, the membership's links 30% lossy")
        }
        other => unreachable!("checked class {other}"),
    })
}

/// Sleep `d`, or less if `stop` is set; whether the whole time passed.
fn pause_unless(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10).min(end - Instant::now()));
    }
    !stop.load(Ordering::Relaxed)
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a pid of this run's own children.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}
