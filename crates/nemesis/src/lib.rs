//! Real network faults, as a real network has them: packets that vanish,
//! not sockets closed politely.
//!
//! A run gets a network namespace of its own ([`enter_fresh_netns`]), so
//! nothing it does reaches the host's network. Inside it every process
//! listens on, and dials from, an address of its own in 127.0.0.0/8, so
//! that a rule can tell processes apart. [`Firewall`] drops their packets
//! with nftables: a partition (both ways or one way), a blackhole, loss at
//! a rate. Healing removes every rule at once. Delay and jitter, which no
//! rule can make here, come from a [`proxy::Proxy`] on every link.
//!
//! Packets are dropped where they arrive (the `input` hook), never where
//! they leave: a packet a local `output` rule drops fails the sender's
//! transmit with `EPERM`, and the sender's TCP then retries at once as if
//! its own queue were full. That is not a network losing a packet; the
//! sender must believe the packet left.
//!
//! The tools come from `scripts/netfault.sh install` (nftables, iproute2);
//! creating a namespace needs root.

pub mod drive;
pub mod proxy;
pub mod schedule;

use std::io;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The nftables table this crate owns inside a namespace.
const TABLE: &str = "tandem_nemesis";

/// Move the calling thread into a new, empty network namespace with its
/// loopback up. Threads and processes it starts afterwards are in it too;
/// the rest of the process is not.
pub fn enter_fresh_netns() -> io::Result<()> {
    // SAFETY: unshare only changes the calling thread's namespaces.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot create a network namespace (root needed): {e}"),
        ));
    }
    run("ip", &["link", "set", "lo", "up"])
}

/// Install what the faults need if it is missing (`scripts/netfault.sh
/// install` under `repo`, the Tandem checkout), once per process.
pub fn install_tools(repo: &std::path::Path) -> io::Result<()> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let script = repo.join("scripts/netfault.sh");
    DONE.get_or_init(|| {
        let out = Command::new("bash")
            .arg(&script)
            .arg("install")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "{} install failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    })
    .clone()
    .map_err(io::Error::other)
}

/// The address of process `i` (0-based) of a run: 127.0.0.(i+2). 127.0.0.1
/// is left to the harness itself (its probes and its clients).
pub fn addr_of(i: usize) -> Ipv4Addr {
    assert!(i < 250, "at most 250 processes per namespace");
    Ipv4Addr::new(127, 0, 0, i as u8 + 2)
}

/// `<dir>/<name>.log`, opened for appending: where a run's process writes
/// its stderr.
pub fn log_file(dir: &std::path::Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .map_err(|e| format!("{name}.log: {e}"))
}

/// A link between two addresses, for the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub from: Ipv4Addr,
    pub to: Ipv4Addr,
}

/// The packet rules of the namespace the calling thread is in, and the
/// delays of its proxy, if the run has one.
pub struct Firewall {
    rules: Vec<String>,
    counters: usize,
    proxy: Option<std::sync::Arc<proxy::Proxy>>,
}

/// A packet counter [`Firewall::count_syns`] set up.
#[derive(Clone, Copy, Debug)]
pub struct Counter(usize);

impl Firewall {
    /// Create the table (empty: every packet passes).
    pub fn new() -> io::Result<Firewall> {
        let _ = run("nft", &["delete", "table", "ip", TABLE]);
        nft(&format!(
            "add table ip {TABLE}\n\
             add chain ip {TABLE} drops {{ type filter hook input priority 0; policy accept; }}\n\
             add chain ip {TABLE} watch {{ type filter hook output priority -10; policy accept; }}\n"
        ))?;
        Ok(Firewall {
            rules: Vec::new(),
            counters: 0,
            proxy: None,
        })
    }

    /// Delay links through `proxy` too (it carries the run's links).
    pub fn with_proxy(mut self, proxy: Option<std::sync::Arc<proxy::Proxy>>) -> Firewall {
        self.proxy = proxy;
        self
    }

    /// Slow links down through the run's proxy.
    pub fn slow(&mut self, s: proxy::Slow) -> io::Result<()> {
        let p = self.proxy.as_ref().ok_or_else(|| {
            io::Error::other("a delay needs the proxy, started before the run's processes")
        })?;
        self.rules.push(format!("{s:?}"));
        p.slow(s);
        Ok(())
    }

    /// Drop every packet from `l.from` to `l.to` (one way).
    pub fn drop_one_way(&mut self, l: Link) -> io::Result<()> {
        self.add(&format!("ip saddr {} ip daddr {} drop", l.from, l.to))
    }

    /// Answer every TCP segment between `a` and `b` (either way) with a
    /// reset, as a middlebox that dropped the flows' state does: open
    /// streams die at both ends, new connects are refused.
    pub fn reset(&mut self, a: Ipv4Addr, b: Ipv4Addr) -> io::Result<()> {
        let rule =
            |x, y| format!("ip saddr {x} ip daddr {y} meta l4proto tcp reject with tcp reset");
        self.add(&rule(a, b))?;
        self.add(&rule(b, a))
    }

    /// Drop every packet between `a` and `b`, both ways.
    pub fn partition(&mut self, a: Ipv4Addr, b: Ipv4Addr) -> io::Result<()> {
        self.drop_one_way(Link { from: a, to: b })?;
        self.drop_one_way(Link { from: b, to: a })
    }

    /// Cut `group` off from `others`, both ways.
    pub fn split(&mut self, group: &[Ipv4Addr], others: &[Ipv4Addr]) -> io::Result<()> {
        for &a in group {
            for &b in others {
                self.partition(a, b)?;
            }
        }
        Ok(())
    }

    /// Cut `a` off from every other address, both ways.
    pub fn isolate(&mut self, a: Ipv4Addr) -> io::Result<()> {
        self.add(&format!("ip saddr {a} drop"))?;
        self.add(&format!("ip daddr {a} drop"))
    }

    /// Drop `percent` % of the packets from `l.from` to `l.to`, at random.
    pub fn loss(&mut self, l: Link, percent: u32) -> io::Result<()> {
        assert!(percent <= 100);
        self.add(&format!(
            "ip saddr {} ip daddr {} numgen random mod 100 < {percent} drop",
            l.from, l.to
        ))
    }

    /// Drop `pct` % of every packet from or to `a`, at random.
    pub fn lossy(&mut self, a: Ipv4Addr, pct: u32) -> io::Result<()> {
        assert!(pct <= 100);
        self.add(&format!("ip saddr {a} numgen random mod 100 < {pct} drop"))?;
        self.add(&format!("ip daddr {a} numgen random mod 100 < {pct} drop"))
    }

    /// Cut `a` off from the service listening on TCP `port` (of any
    /// address), both ways; `pct` below 100 drops that share instead.
    pub fn cut_service(&mut self, a: Ipv4Addr, port: u16, pct: u32) -> io::Result<()> {
        assert!(pct <= 100);
        let odds = match pct {
            100 => String::new(),
            p => format!("numgen random mod 100 < {p} "),
        };
        self.add(&format!("ip saddr {a} tcp dport {port} {odds}drop"))?;
        self.add(&format!("ip daddr {a} tcp sport {port} {odds}drop"))
    }

    /// New connections to `to` get no answer (their SYNs vanish); streams
    /// already open keep working.
    pub fn blackhole_connects(&mut self, to: Ipv4Addr) -> io::Result<()> {
        self.add(&format!(
            "ip daddr {to} tcp flags & (syn | ack) == syn drop"
        ))
    }

    /// Count the connection attempts (SYNs) to `to` from now on, dropped or
    /// not; [`Firewall::heal`] keeps counting.
    pub fn count_syns(&mut self, to: Ipv4Addr) -> io::Result<Counter> {
        let c = Counter(self.counters);
        self.counters += 1;
        nft(&format!(
            "add counter ip {TABLE} c{0}\n\
             add rule ip {TABLE} watch ip daddr {to} tcp flags & (syn | ack) == syn counter name c{0}\n",
            c.0
        ))?;
        Ok(c)
    }

    /// Packets `c` counted so far.
    pub fn counted(&self, c: Counter) -> io::Result<u64> {
        let out = Command::new("nft")
            .args(["list", "counter", "ip", TABLE, &format!("c{}", c.0)])
            .output()
            .map_err(|e| tool_missing("nft", e))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let packets = text
            .split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|n| n.parse().ok());
        packets.ok_or_else(|| io::Error::other(format!("no counter c{} in {text:?}", c.0)))
    }

    /// Remove every rule and delay: the network is whole again.
    pub fn heal(&mut self) -> io::Result<()> {
        nft(&format!("flush chain ip {TABLE} drops\n"))?;
        if let Some(p) = &self.proxy {
            p.heal();
        }
        self.rules.clear();
        Ok(())
    }

    /// The rules in force, as nftables reads them.
    pub fn rules(&self) -> &[String] {
        &self.rules
    }

    fn add(&mut self, rule: &str) -> io::Result<()> {
        nft(&format!("add rule ip {TABLE} drops {rule}\n"))?;
        self.rules.push(rule.to_string());
        Ok(())
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = run("nft", &["delete", "table", "ip", TABLE]);
    }
}

/// Feed a script to `nft -f -`.
fn nft(script: &str) -> io::Result<()> {
    use std::io::Write;
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| tool_missing("nft", e))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "nft failed on {script:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn run(tool: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| tool_missing(tool, e))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{tool} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn tool_missing(tool: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("cannot run {tool}: {e} (install it with: bash scripts/netfault.sh install)"),
    )
}
