//! The front door of a thread-per-connection listener: at most `max`
//! connections in their handshake at once. A new one sheds the oldest that
//! has not delivered its whole hello (a real dialer sends it at once; a
//! hello waiting unread in the kernel counts), else the oldest. So sockets
//! that trickle bytes never crowd out the members.

use std::collections::VecDeque;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::handshake::{AuthError, Peer, HELLO_BYTES};
use crate::keys::{Keyring, Role};

pub struct Gate {
    max: usize,
    pending: Mutex<VecDeque<Entry>>,
    next: AtomicU64,
}

struct Entry {
    id: u64,
    stream: TcpStream,
    heard: Arc<AtomicBool>,
}

/// A connection let in to run its handshake ([`Gate::authenticate`]).
pub struct Ticket {
    id: u64,
    heard: Arc<AtomicBool>,
}

impl Gate {
    pub fn new(max: usize) -> Gate {
        Gate {
            max,
            pending: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
        }
    }

    /// Let `stream` in, shedding another if the gate is full.
    pub fn admit(&self, stream: &TcpStream) -> std::io::Result<Ticket> {
        let (id, heard) = (
            self.next.fetch_add(1, Ordering::Relaxed),
            Arc::new(AtomicBool::new(false)),
        );
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= self.max {
            let quiet = |e: &Entry| {
                !e.heard.load(Ordering::Relaxed) && bytes_waiting(&e.stream) < HELLO_BYTES
            };
            let i = pending.iter().position(quiet).unwrap_or(0);
            if let Some(e) = pending.remove(i) {
                let _ = e.stream.shutdown(Shutdown::Both);
            }
        }
        let entry = Entry {
            id,
            stream: stream.try_clone()?,
            heard: heard.clone(),
        };
        pending.push_back(entry);
        Ok(Ticket { id, heard })
    }

    /// Run the handshake for a ticket's stream by `deadline`; an error if it
    /// fails or the connection was shed meanwhile.
    pub fn authenticate(
        &self,
        ticket: Ticket,
        stream: &mut TcpStream,
        keys: &Keyring,
        allowed: &[Role],
        deadline: Instant,
    ) -> Result<Peer, AuthError> {
        let heard = || ticket.heard.store(true, Ordering::Relaxed);
        let r = crate::io::accept_then(stream, keys, allowed, deadline, heard);
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let before = pending.len();
        pending.retain(|e| e.id != ticket.id);
        match (r, pending.len() < before) {
            (Ok(peer), true) => Ok(peer),
            (Ok(_), false) => Err(AuthError::Io("shed to make room".into())),
            (Err(e), _) => Err(e),
        }
    }
}

/// Bytes received on `s` and not read yet (`FIONREAD`).
pub fn bytes_waiting(s: &impl std::os::fd::AsRawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer; the fd is open (we hold `s`).
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) };
    if r == 0 {
        n.max(0) as usize
    } else {
        0
    }
}
