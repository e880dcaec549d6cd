//! RP legality of a crash image in linear time (docs/LRP.md, "The layers"), for traces
//! too long for the closure in `axiom`.
//!
//! Under RP every write needs a *prefix* of each thread's writes to have
//! persisted before it: a release needs all of its thread's earlier writes
//! (rule 1) and what its thread had acquired; an acquire that reads another
//! thread's release inherits that release's needs and the release itself
//! (rule 3), and every later write of the acquiring thread carries them
//! (rule 2). Rule 4 (and coherence order across threads, docs/LRP.md decision 1) is
//! covered by how the image's write set is built: a word's surviving write
//! brings every write to that word before it. So a vector of prefix lengths
//! per write decides legality: the image is legal iff no surviving write
//! needs a thread's prefix beyond that thread's first lost write.

use crate::trace::{EventId, Trace};

pub struct Cut {
    threads: usize,
    /// Per write event: its thread and its index among that thread's writes.
    pos: Vec<(u32, u32)>,
    /// Per write event: `threads` prefix lengths it needs.
    need: Vec<u32>,
    /// Per write event: acquire-RMWs it needs beyond the prefixes.
    extra: Vec<Vec<EventId>>,
    /// Per thread: its writes by index.
    by_thread: Vec<Vec<EventId>>,
    /// Per written address: its writes in coherence (execution) order.
    pub by_addr: Vec<(u64, Vec<EventId>)>,
    /// Per write event: its address's index in `by_addr`, and its index there.
    slot: Vec<(u32, u32)>,
}

const NOT_A_WRITE: (u32, u32) = (u32::MAX, u32::MAX);

impl Cut {
    pub fn new(t: &Trace, threads: usize) -> Cut {
        let n = t.events.len();
        let mut cut = Cut {
            threads,
            pos: vec![NOT_A_WRITE; n],
            need: vec![0; n * threads],
            extra: vec![Vec::new(); n],
            by_thread: vec![Vec::new(); threads],
            by_addr: Vec::new(),
            slot: vec![(0, 0); n],
        };
        let mut acquired = vec![vec![0u32; threads]; threads];
        let mut acquired_extra: Vec<Vec<EventId>> = vec![Vec::new(); threads];
        let mut addr_index = std::collections::HashMap::new();
        for (e, ev) in t.events.iter().enumerate() {
            let th = ev.thread as usize;
            if let Some(r) = ev.read_from().filter(|&r| {
                ev.is_acquire() && t.events[r].is_release() && t.events[r].thread != ev.thread
            }) {
                let (rt, rp) = cut.pos[r];
                for u in 0..threads {
                    acquired[th][u] = acquired[th][u].max(cut.need[r * threads + u]);
                }
                acquired[th][rt as usize] = acquired[th][rt as usize].max(rp + 1);
                for &x in &cut.extra[r] {
                    if !acquired_extra[th].contains(&x) {
                        acquired_extra[th].push(x);
                    }
                }
            }
            if !ev.writes() {
                continue;
            }
            let p = cut.by_thread[th].len() as u32;
            cut.pos[e] = (ev.thread, p);
            cut.by_thread[th].push(e);
            let need = &mut cut.need[e * threads..(e + 1) * threads];
            need.copy_from_slice(&acquired[th]);
            if ev.is_release() {
                need[th] = need[th].max(p);
            }
            cut.extra[e].clone_from(&acquired_extra[th]);
            if ev.is_acquire() && ev.is_release() {
                // An acq-rel RMW: later writes need it (rule 2) and, through
                // it, every write before it (rule 1).
                acquired[th][th] = acquired[th][th].max(p + 1);
            } else if ev.is_acquire() {
                // An acquire-RMW's own write precedes the thread's later writes (rule 2).
                acquired_extra[th].push(e);
            }
            let i = *addr_index.entry(ev.addr).or_insert_with(|| {
                cut.by_addr.push((ev.addr, Vec::new()));
                cut.by_addr.len() - 1
            });
            cut.by_addr[i].1.push(e);
            cut.slot[e] = (i as u32, cut.by_addr[i].1.len() as u32 - 1);
        }
        cut
    }

    /// Check an image given, for each address of `by_addr` (same order), how
    /// many of its writes survived (a prefix: the surviving one and those
    /// before it). Err((missing, present)): `missing` must persist before
    /// `present`, and only `present` survived.
    pub fn check(
        &self,
        survived: &[usize],
        scratch: &mut Vec<u32>,
    ) -> Result<(), (EventId, EventId)> {
        scratch.clear();
        scratch.resize(self.threads, u32::MAX);
        let first_lost = scratch;
        for ((_, writes), &k) in self.by_addr.iter().zip(survived) {
            for &e in &writes[k..] {
                let (th, p) = self.pos[e];
                first_lost[th as usize] = first_lost[th as usize].min(p);
            }
        }
        for ((_, writes), &k) in self.by_addr.iter().zip(survived) {
            for &e in &writes[..k] {
                let need = &self.need[e * self.threads..(e + 1) * self.threads];
                if let Some(u) = (0..self.threads).find(|&u| need[u] > first_lost[u]) {
                    return Err((self.by_thread[u][first_lost[u] as usize], e));
                }
                if let Some(&x) = self.extra[e].iter().find(|&&x| !self.present(x, survived)) {
                    return Err((x, e));
                }
            }
        }
        Ok(())
    }

    /// How many of `addr_index`'s writes survived when `writer` (an event,
    /// or None for the initial value) is the one in NVM.
    pub fn survived(&self, writer: Option<EventId>) -> usize {
        writer.map_or(0, |w| self.slot[w].1 as usize + 1)
    }

    /// Whether write `e` is in the image described by `survived`.
    pub fn present(&self, e: EventId, survived: &[usize]) -> bool {
        let (a, i) = self.slot[e];
        survived[a as usize] > i as usize
    }
}
