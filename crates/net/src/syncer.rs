//! Group commit for `--fsync` nodes: a thread makes the NVM file durable
//! (`fdatasync`, which writes back the pages the mapping dirtied) while
//! the event loop goes on. The loop hands it batch numbers; a sync covers
//! every batch requested before it started, and its completion wakes the
//! loop, which then completes the persists of those batches. One sync is in
//! flight at a time, so the persists that arrive meanwhile form the next
//! batch.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

use mio::Waker;

enum Job {
    Sync(u64),
    /// After a compaction the log lives in a new file.
    File(File),
}

pub(crate) struct Syncer {
    tx: Sender<Job>,
    done: Arc<AtomicU64>,
}

impl Syncer {
    pub(crate) fn spawn(file: File, waker: Arc<Waker>, what: String) -> Syncer {
        let (tx, rx) = channel();
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        std::thread::spawn(move || {
            let mut file = file;
            while let Ok(job) = rx.recv() {
                let mut upto = match job {
                    Job::File(f) => {
                        file = f;
                        continue;
                    }
                    Job::Sync(b) => b,
                };
                // Batches requested meanwhile are covered by this sync too.
                while let Ok(job) = rx.try_recv() {
                    match job {
                        Job::Sync(b) => upto = upto.max(b),
                        Job::File(f) => file = f,
                    }
                }
                if let Err(e) = file.sync_data() {
                    eprintln!("{what}: cannot flush the NVM file to the device: {e}");
                    std::process::exit(2);
                }
                d.store(upto, Ordering::Release);
                let _ = waker.wake();
            }
        });
        Syncer { tx, done }
    }

    /// Make everything written so far durable; batch `b` (numbered from 1) is done once [`Syncer::done`] reaches it.
    pub(crate) fn request(&self, b: u64) {
        let _ = self.tx.send(Job::Sync(b));
    }

    pub(crate) fn use_file(&self, f: File) {
        let _ = self.tx.send(Job::File(f));
    }

    /// The last batch made durable.
    pub(crate) fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }
}
