//! Bounded waiting for peers (docs/DESIGN.md §1, principle 5): a process
//! started before the peers it needs (the membership before the memory servers,
//! a compute server before either) retries, says what it waits for at most once
//! a second, and gives up after its patience with a message that names the
//! address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long processes wait for their peers unless told otherwise.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(30);

/// Pause between attempts.
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// One bounded wait: `who` waits for peers until `patience` has passed.
pub struct Waiting {
    who: String,
    patience: Duration,
    until: Instant,
    last_said: Option<Instant>,
}

impl Waiting {
    pub fn new(who: impl Into<String>, patience: Duration) -> Waiting {
        Waiting {
            who: who.into(),
            patience,
            until: Instant::now() + patience,
            last_said: None,
        }
    }

    /// An attempt to reach `what` (e.g. "memory server 127.0.0.1:7401")
    /// failed with `why`. Within the patience: say so (at most once a
    /// second), pause, and return `Ok` to try again. Past it: the error.
    pub fn again(&mut self, what: &str, why: &str) -> Result<(), String> {
        if Instant::now() >= self.until {
            return Err(format!(
                "{what} did not answer within {:.0} s: {why}",
                self.patience.as_secs_f64()
            ));
        }
        if !matches!(self.last_said, Some(t) if t.elapsed() < Duration::from_secs(1)) {
            let left = self
                .until
                .saturating_duration_since(Instant::now())
                .as_secs_f64();
            eprintln!(
                "{}: waiting for {what} ({why}); giving up in {left:.0} s",
                self.who
            );
            self.last_said = Some(Instant::now());
        }
        std::thread::sleep(RETRY_EVERY);
        Ok(())
    }
}

/// Wait until every one of `addrs` accepts a TCP connection: `what` names
/// the role in messages ("memory server").
pub fn wait_for_listeners(
    who: &str,
    what: &str,
    addrs: &[SocketAddr],
    patience: Duration,
) -> Result<(), String> {
    let mut waiting = Waiting::new(who, patience);
    for addr in addrs {
        loop {
            match tandem_fabric::auth::dial::connect_timeout(*addr, Duration::from_secs(1)) {
                Ok(probe) => {
                    let _ = probe.shutdown(std::net::Shutdown::Both);
                    break;
                }
                Err(e) => waiting.again(&format!("{what} {addr}"), &e.to_string())?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_that_never_listens_is_named_when_patience_runs_out() {
        // A port nobody listens on: bind, note it, close.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let t = Instant::now();
        let e = wait_for_listeners("test", "memory server", &[addr], Duration::from_millis(300))
            .unwrap_err();
        assert!(
            e.contains(&format!("memory server {addr} did not answer within")),
            "{e}"
        );
        assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_peer_that_starts_late_is_waited_for() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let l = std::net::TcpListener::bind(addr).unwrap();
            let _ = l.accept();
        });
        wait_for_listeners("test", "memory server", &[addr], Duration::from_secs(10)).unwrap();
        late.join().unwrap();
    }
}
