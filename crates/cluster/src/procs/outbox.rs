//! The membership's announcements to admitted compute servers (failed ids,
//! memory configurations, fencing), one outbox per server.
//!
//! The failure detector's loop announces while it holds the subscribers'
//! lock, so an announcement must never wait for a socket: a server that
//! stops reading (stopped, swapped out, behind a partition) would freeze
//! detection for everyone. Each server therefore gets a bounded queue of
//! lines and a writer thread of its own, whose writes give up after
//! [`WRITE_TIMEOUT`]. A server whose queue is full, or whose stream broke,
//! is dropped: its stream is shut down, so it sees the end of its
//! subscription, rejoins, and on rejoining is told everything announced so
//! far. Announcing thus costs a `try_send` per server, whatever they do.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// Lines a server may leave unwritten before it is dropped.
pub(super) const BACKLOG_LINES: usize = 1024;
/// How long one write to a server may block its writer thread.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

struct Outbox {
    node: u16,
    lines: SyncSender<Arc<str>>,
    /// To shut the stream down from the announcing side.
    stream: TcpStream,
}

/// The outboxes of every admitted compute server.
#[derive(Default)]
pub(super) struct Outboxes {
    list: Vec<Outbox>,
}

/// One message as the line the servers read.
pub(super) fn line<T: Serialize>(msg: &T) -> Arc<str> {
    let mut s = serde_json::to_string(msg).expect("announcements serialize");
    s.push('\n');
    s.into()
}

impl Outboxes {
    /// Admit `node` on `stream`; `first` are its first lines (what was
    /// announced before it came).
    pub(super) fn add(
        &mut self,
        node: u16,
        stream: TcpStream,
        first: Vec<Arc<str>>,
    ) -> std::io::Result<()> {
        let (tx, rx) = sync_channel(BACKLOG_LINES.max(first.len()));
        for l in first {
            tx.try_send(l).expect("room for the first lines");
        }
        let writer = stream.try_clone()?;
        std::thread::Builder::new()
            .name(format!("announce-{node}"))
            .spawn(move || write_lines(node, rx, writer))?;
        self.list.push(Outbox {
            node,
            lines: tx,
            stream,
        });
        Ok(())
    }

    /// Queue `lines` for every server; drop those that cannot take them.
    pub(super) fn send_all(&mut self, lines: &[Arc<str>]) {
        self.list.retain(|o| {
            let ok = lines.iter().all(|l| o.offer(l.clone()));
            if !ok {
                o.drop_slow();
            }
            ok
        });
    }

    /// Queue `line` for `node` alone, then drop it: its writer sends what
    /// is queued and closes.
    pub(super) fn send_last(&mut self, node: u16, line: Arc<str>) {
        for o in self.list.iter().filter(|o| o.node == node) {
            if !o.offer(line.clone()) {
                o.drop_slow();
            }
        }
        self.list.retain(|o| o.node != node);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }
}

impl Outbox {
    /// Queue without waiting; false if the queue is full or the writer gone.
    fn offer(&self, line: Arc<str>) -> bool {
        match self.lines.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Cut a server that does not keep up: it sees its subscription end.
    fn drop_slow(&self) {
        eprintln!(
            "membership: compute node {} does not read its announcements ({BACKLOG_LINES} lines behind, or its stream broke); closing its subscription",
            self.node
        );
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// A server's writer thread: its lines, in order, each write bounded.
fn write_lines(node: u16, rx: Receiver<Arc<str>>, mut stream: TcpStream) {
    if stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err() {
        return;
    }
    for l in rx {
        if let Err(e) = stream.write_all(l.as_bytes()) {
            log::debug!("announcements to compute node {node}: {e}");
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    /// A stream whose other end never reads, with buffers as small as the
    /// kernel allows, so that a few kilobytes fill it.
    fn never_read() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        peer.set_recv_buffer_size(1).unwrap();
        peer.connect(&l.local_addr().unwrap().into()).unwrap();
        let (ours, _) = l.accept().unwrap();
        socket2::SockRef::from(&ours)
            .set_send_buffer_size(1)
            .unwrap();
        (ours, peer.into())
    }

    /// Announcing to a server that stopped reading returns at once, every
    /// time, and the server is dropped once its backlog is full; a server
    /// that reads keeps getting every line.
    #[test]
    fn a_server_that_stops_reading_never_holds_up_an_announcement() {
        let mut boxes = Outboxes::default();
        let (ours, _silent) = never_read();
        boxes.add(1, ours, vec![]).unwrap();
        let (good_ours, good) = TcpStream::connect_pair();
        boxes.add(2, good_ours, vec![]).unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(good).lines().count()
        });
        let msg = line(&"failed ids 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20");
        let sent = BACKLOG_LINES + 500;
        // The announcing loop on a thread of its own: if it blocks, the test
        // says so instead of hanging.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            for i in 0..sent {
                let t = Instant::now();
                boxes.send_all(std::slice::from_ref(&msg));
                slowest = slowest.max(t.elapsed());
                if i % 100 == 99 {
                    std::thread::sleep(Duration::from_millis(1)); // the reader keeps up
                }
            }
            let _ = done.send((boxes, slowest));
        });
        let Ok((mut boxes, slowest)) = finished.recv_timeout(Duration::from_secs(10)) else {
            panic!("announcing {sent} lines blocked for 10 s on a server that does not read");
        };
        assert!(
            slowest <= Duration::from_millis(100),
            "an announcement waited {slowest:?} for a server that does not read"
        );
        assert_eq!(
            boxes.len(),
            1,
            "the silent server is dropped, the reader kept"
        );
        boxes.send_last(2, line(&"bye"));
        assert_eq!(
            reader.join().unwrap(),
            sent + 1,
            "the reader got every line"
        );
    }

    trait Pair: Sized {
        fn connect_pair() -> (Self, Self);
    }

    impl Pair for TcpStream {
        fn connect_pair() -> (TcpStream, TcpStream) {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let theirs = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (l.accept().unwrap().0, theirs)
        }
    }
}
