//! CPU time, the one clock the harnesses read that the protocols never do:
//! work is measured as CPU time per unit (a transaction, a message), which
//! moves far less from host to host than wall-clock throughput.

use std::time::Duration;

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_ns() -> u64 {
    read(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// CPU time consumed so far by this whole process.
pub fn process_ns() -> u64 {
    read(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0)
}

/// CPU time consumed so far by process `pid`, all its threads (`None`
/// when the process is gone or its clock cannot be read).
pub fn pid_ns(pid: u32) -> Option<u64> {
    let mut id: libc::clockid_t = 0;
    // SAFETY: id is a valid, writable clockid_t.
    let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut id) };
    (rc == 0).then_some(())?;
    read(id)
}

/// The CPU clock of one thread, readable from any other thread of the
/// process while that thread lives.
#[derive(Clone, Copy, Debug)]
pub struct ThreadClock(libc::clockid_t);

impl ThreadClock {
    /// The clock of the thread behind `handle`; `None` once it has ended.
    pub fn of<T>(handle: &std::thread::JoinHandle<T>) -> Option<ThreadClock> {
        use std::os::unix::thread::JoinHandleExt;
        let mut id: libc::clockid_t = 0;
        // SAFETY: the handle is joinable, so its pthread_t is valid.
        let rc = unsafe { libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut id) };
        (rc == 0).then_some(ThreadClock(id))
    }

    /// The calling thread's clock.
    pub fn current() -> ThreadClock {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_self is always valid for the calling thread.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        assert_eq!(rc, 0, "pthread_getcpuclockid on the calling thread");
        ThreadClock(id)
    }

    /// CPU time the thread has consumed (0 if it has ended).
    pub fn ns(&self) -> u64 {
        read(self.0).unwrap_or(0)
    }
}

fn read(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU time spent by the calling thread in `f`, and its result.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t0 = thread_ns();
    let v = f();
    (v, Duration::from_nanos(thread_ns().saturating_sub(t0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_accrues_cpu_and_a_sleeping_one_does_not() {
        // Spin until this thread's clock shows 15 ms, bounded in wall time:
        // a clock that does not advance fails; one that runs ahead of the
        // wall (a process or machine clock) fails too. Neighbours may take
        // the core meanwhile, so the wall time is not the CPU time.
        let wall = std::time::Instant::now();
        let (_, busy) = timed(|| {
            let (mut x, start) = (1u64, thread_ns());
            while thread_ns() - start < 15_000_000 {
                assert!(wall.elapsed() < Duration::from_secs(20), "the thread clock stalls");
                for _ in 0..1_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
        });
        assert!(busy >= Duration::from_millis(15), "spun to 15 ms: {busy:?}");
        assert!(busy <= wall.elapsed(), "{busy:?} of CPU in {:?}", wall.elapsed());
        let h = std::thread::spawn(|| std::thread::sleep(Duration::from_millis(50)));
        let clock = ThreadClock::of(&h).expect("a live thread has a clock");
        let before = clock.ns();
        std::thread::sleep(Duration::from_millis(20));
        assert!(clock.ns() - before < 5_000_000, "a sleeping thread");
        h.join().unwrap();
        assert!(ThreadClock::current().ns() > 0 && process_ns() > 0);
    }
}
