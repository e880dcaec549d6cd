//! The write load of `experiment heal-peers`: a few client threads that
//! together write at a fixed rate (open loop: a thread that fell behind
//! its schedule writes back to back until it is on time again), each to
//! one member that is up, uniform keys. The same load for every system.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One client connection of a system.
pub trait Writer {
    /// Write `value` to `key` (created if absent); `Ok` once acknowledged.
    fn put(&mut self, key: u64, value: u64) -> Result<(), String>;
}

/// Opens client `thread`'s connection (each system spreads them over the members that are up).
pub type Connect = Arc<dyn Fn(usize) -> Result<Box<dyn Writer>, String> + Send + Sync>;

/// Client threads of the load.
pub const THREADS: usize = 8;

/// The running load.
pub struct Writers {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
    threads: Vec<JoinHandle<()>>,
}

/// What one thread shares with the others.
#[derive(Clone)]
struct Shared {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl Shared {
    fn failed(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap() = Some(e);
    }
}

impl Writers {
    /// `rate` writes per second in all, over `keys` keys.
    pub fn start(rate: f64, keys: u64, connect: Connect) -> Writers {
        let sh = Shared {
            stop: Arc::default(),
            acked: Arc::default(),
            errors: Arc::default(),
            last_error: Arc::default(),
        };
        let period = Duration::from_secs_f64(THREADS as f64 / rate);
        let epoch = Instant::now();
        let threads = (0..THREADS)
            .map(|t| {
                let (sh, connect) = (sh.clone(), connect.clone());
                // Staggered, so that the writes are spread over each period.
                let first = epoch + period.mul_f64(t as f64 / THREADS as f64);
                std::thread::spawn(move || write_loop(t, first, period, keys, &*connect, &sh))
            })
            .collect();
        Writers {
            stop: sh.stop,
            acked: sh.acked,
            errors: sh.errors,
            last_error: sh.last_error,
            threads,
        }
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap().clone()
    }
}

/// Dropped: stop writing (each thread finishes the write it is in).
impl Drop for Writers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn write_loop(
    t: usize,
    mut next: Instant,
    period: Duration,
    keys: u64,
    connect: &dyn Fn(usize) -> Result<Box<dyn Writer>, String>,
    sh: &Shared,
) {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut w: Option<Box<dyn Writer>> = None;
    let mut value = (t as u64) << 48;
    while !sh.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        if w.is_none() {
            match connect(t) {
                Ok(c) => w = Some(c),
                Err(e) => {
                    sh.failed(e);
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
        }
        next += period;
        value += 1;
        match w
            .as_mut()
            .expect("connected above")
            .put(xorshift(&mut rng) % keys, value)
        {
            Ok(()) => drop(sh.acked.fetch_add(1, Ordering::Relaxed)),
            Err(e) => {
                sh.failed(e);
                w = None;
            }
        }
    }
}

pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Write every key once, from `THREADS` clients, retrying a failed write
/// (a cluster that just started may refuse the first ones).
pub fn preload(keys: u64, connect: Connect) -> Result<(), String> {
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let connect = connect.clone();
            std::thread::spawn(move || preload_slice(t, keys, &*connect))
        })
        .collect();
    // Join every thread before giving the first error.
    let done: Vec<Result<(), String>> = threads
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err("a preload thread panicked".into()))
        })
        .collect();
    done.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

fn preload_slice(
    t: usize,
    keys: u64,
    connect: &dyn Fn(usize) -> Result<Box<dyn Writer>, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut w: Option<Box<dyn Writer>> = None;
    let mut key = t as u64;
    while key < keys {
        let r = match w.as_mut() {
            Some(c) => c.put(key, key).map(|()| key += THREADS as u64),
            None => connect(t).map(|c| w = Some(c)),
        };
        if let Err(e) = r {
            if Instant::now() > deadline {
                return Err(format!("preloading key {key}: {e}"));
            }
            w = None;
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}
