//! Revocation must not starve the verb it waits for. The runner's
//! membership thread is SCHED_FIFO; when it revoked a node whose verb was in
//! flight on the same core, `MemoryNode::revoke` spun until the kernel's
//! real-time throttling paused it (~950 ms later), so a falsely suspected
//! node's recovery took a second and CI's planned crash hit a node that was
//! still being recovered. Reproduced here with both threads pinned to one
//! core: the revoker at real-time priority, the verb at normal priority.

#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_fabric::{MemoryNode, Verb, VerbError};

const ROUNDS: u16 = 20;
const REGION: u64 = 1 << 20;

fn pin_to_cpu0() {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "pin to CPU 0"
        );
    }
}

/// Real-time priority for this thread, if the kernel lets us (root or
/// CAP_SYS_NICE) and real-time throttling bounds a spinning bug.
fn real_time() -> bool {
    let throttled = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us")
        .is_ok_and(|s| s.trim() != "-1");
    throttled
        && unsafe {
            libc::sched_setscheduler(
                0,
                libc::SCHED_FIFO,
                &libc::sched_param { sched_priority: 10 },
            ) == 0
        }
}

#[test]
fn a_real_time_revoker_lets_the_verb_it_waits_for_finish() {
    let node = Arc::new(MemoryNode::new(REGION));
    // The incarnation the compute thread has registered: none yet. (Starting
    // at 1 let a slow-starting compute thread be revoked before it registered.)
    let current = Arc::new(AtomicU16::new(0));
    // The compute node: long reads (so a revocation likely finds one in
    // flight), moving to the next incarnation once revoked.
    let verbs = {
        let (node, current) = (node.clone(), current.clone());
        std::thread::spawn(move || {
            pin_to_cpu0();
            for c in 1..=ROUNDS {
                let key = node.register(c).expect("a fresh incarnation registers");
                current.store(c, Ordering::SeqCst);
                while node.execute(c, key, &Verb::read(0, REGION as u32)) != Err(VerbError::Revoked)
                {
                }
            }
        })
    };
    let revoker = std::thread::spawn(move || {
        pin_to_cpu0();
        if !real_time() {
            eprintln!("not shown here: this machine refuses a SCHED_FIFO thread (it needs CAP_SYS_NICE and RT throttling)");
        }
        let mut slowest = Duration::ZERO;
        for c in 1..=ROUNDS {
            // Bounded: a compute thread that died or moved past `c` must
            // fail the test, not hang it.
            let give_up = Instant::now() + Duration::from_secs(30);
            while current.load(Ordering::SeqCst) != c {
                assert!(
                    Instant::now() < give_up,
                    "incarnation {c} never came up (the compute thread is at {})",
                    current.load(Ordering::SeqCst)
                );
                std::thread::sleep(Duration::from_micros(100));
            }
            // Wake up later, in the middle of one of its reads.
            std::thread::sleep(Duration::from_micros(300 + 37 * c as u64));
            let t = Instant::now();
            node.revoke(c);
            slowest = slowest.max(t.elapsed());
        }
        slowest
    });
    let slowest = revoker.join().unwrap();
    verbs.join().unwrap();
    assert!(
        slowest < Duration::from_millis(100),
        "a revocation took {slowest:?}: the revoker starved the verb it waited for"
    );
}
