//! The persistency mechanisms the machine can run (thesis §3.6.2):
//! NOP, the software baseline (Eager: clwb+sfence), the barrier family
//! (SB, BB and ARP on one epoch engine) and LRP (in `lrp_policy`).

use crate::machine::Core;

/// Why a dirty line leaves its core's L1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Its own core needs the way.
    Evict,
    /// Another core (the requester) reads or writes it.
    Downgrade(usize),
}

/// A persistency mechanism: hooks the machine calls around each access.
/// A hook that makes the core wait calls [`Core::stall`]; `write_back`
/// returns the time until which the core that caused it waits.
pub trait Policy {
    fn name(&self) -> &'static str;
    fn before_release(&mut self, _c: &mut Core, _t: usize) {}
    fn after_release(&mut self, _c: &mut Core, _t: usize, _line: u64) {}
    fn before_acquire(&mut self, _c: &mut Core, _t: usize) {}
    /// After an acquire read, or a successful RMW with acquire semantics (`rmw`).
    fn after_acquire(&mut self, _c: &mut Core, _t: usize, _line: u64, _rmw: bool) {}
    /// Core `t` touches `line` (before coherence).
    fn on_access(&mut self, _c: &mut Core, _t: usize, _line: u64) {}
    /// Core `t` is about to write into its way `way`.
    fn on_write(&mut self, _c: &mut Core, _t: usize, _way: usize, _release: bool) {}
    fn write_back(&mut self, c: &mut Core, owner: usize, line: u64, cause: Cause) -> u64;
}

/// Persist a dirty line's write-back with no ordering at all.
fn plain_write_back(c: &mut Core, owner: usize, line: u64) -> u64 {
    if let Some(way) = c.way(owner, line) {
        c.persist(owner, line);
        c.clean(owner, way);
    }
    c.now
}

/// Volatile execution: write-backs persist whenever they happen (thesis §3.6.2).
pub struct Nop;

impl Policy for Nop {
    fn name(&self) -> &'static str {
        "nop"
    }
    fn write_back(&mut self, c: &mut Core, owner: usize, line: u64, _: Cause) -> u64 {
        plain_write_back(c, owner, line)
    }
}

/// Software RP on x86-style clwb + sfence: flush every dirty line and fence
/// before a release, flush the released line and fence after it, and after
/// an acquire wait until the acquired line is durable (flush-on-read).
pub struct Eager;

impl Eager {
    fn flush_line(c: &mut Core, t: usize, line: u64) {
        if let Some(way) = c.way(t, line).filter(|&w| c.l1[t][w].dirty) {
            c.persist(t, line);
            c.clean(t, way);
        }
        let done = c.line_done[line as usize];
        c.stall(t, done);
    }
}

impl Policy for Eager {
    fn name(&self) -> &'static str {
        "eager"
    }
    fn before_release(&mut self, c: &mut Core, t: usize) {
        let dirty: Vec<(usize, u64)> = c.dirty(t).map(|(i, w)| (i, w.line)).collect();
        for (way, line) in dirty {
            c.persist(t, line);
            c.clean(t, way);
        }
        let fence = c.pending[t];
        c.stall(t, fence);
    }
    fn after_release(&mut self, c: &mut Core, t: usize, line: u64) {
        Self::flush_line(c, t, line);
    }
    fn after_acquire(&mut self, c: &mut Core, t: usize, line: u64, _rmw: bool) {
        Self::flush_line(c, t, line);
    }
    fn write_back(&mut self, c: &mut Core, owner: usize, line: u64, _: Cause) -> u64 {
        plain_write_back(c, owner, line)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// Strict full barrier: blocks until every earlier write persisted;
    /// a core touching another's unpersisted line waits for it.
    Sb,
    /// Buffered barrier (Joshi et al.): epochs persist in order, lazily,
    /// on conflicts; inter-thread order is tracked, not waited for.
    Bb,
    /// Acquire-release persistency's RCBSP implementation: a release raises
    /// a flag, the next acquire places a buffered barrier.
    Arp,
}

/// SB, BB and ARP: one epoch engine, three barrier placements (thesis §3.6.2).
pub struct Epochs {
    kind: Barrier,
    epoch: Vec<u64>,
    /// When the last epoch scheduled for persisting is acknowledged.
    chain: Vec<u64>,
    /// Inter-thread floor: this core's lines persist after this time.
    dep: Vec<u64>,
    flag: Vec<bool>,
}

impl Epochs {
    pub fn new(kind: Barrier, threads: usize) -> Epochs {
        Epochs {
            kind,
            epoch: vec![1; threads],
            chain: vec![0; threads],
            dep: vec![0; threads],
            flag: vec![false; threads],
        }
    }

    /// Persist `t`'s dirty lines of epochs up to `upto`, one epoch after
    /// another; returns when the last is acknowledged.
    fn flush(&mut self, c: &mut Core, t: usize, upto: u64) -> u64 {
        let mut lines: Vec<(u64, usize, u64)> = c
            .dirty(t)
            .filter(|(_, w)| w.epoch <= upto)
            .map(|(i, w)| (w.epoch, i, w.line))
            .collect();
        if lines.iter().any(|&(e, ..)| e == self.epoch[t]) {
            self.epoch[t] += 1;
        }
        lines.sort_unstable();
        let mut start = c.now.max(self.chain[t]).max(self.dep[t]);
        let mut i = 0;
        while i < lines.len() {
            let epoch = lines[i].0;
            let mut done = start;
            while i < lines.len() && lines[i].0 == epoch {
                done = done.max(c.persist_at(t, lines[i].2, start));
                c.clean(t, lines[i].1);
                i += 1;
            }
            start = done;
        }
        self.chain[t] = start;
        start
    }

    /// SB waits for everything before it. BB and ARP close the epoch and,
    /// as Joshi et al.'s proactive flushing does, start persisting it in
    /// the background, after the epochs before it.
    fn barrier(&mut self, c: &mut Core, t: usize) {
        if self.kind == Barrier::Sb {
            let done = self.flush(c, t, u64::MAX);
            c.stall(t, done);
        } else {
            let closed = self.epoch[t];
            self.flush(c, t, closed);
            self.epoch[t] = self.epoch[t].max(closed + 1);
        }
    }
}

impl Policy for Epochs {
    fn name(&self) -> &'static str {
        match self.kind {
            Barrier::Sb => "sb",
            Barrier::Bb => "bb",
            Barrier::Arp => "arp",
        }
    }
    fn before_release(&mut self, c: &mut Core, t: usize) {
        if self.kind != Barrier::Arp {
            self.barrier(c, t);
        }
    }
    fn after_release(&mut self, c: &mut Core, t: usize, _line: u64) {
        match self.kind {
            Barrier::Arp => self.flag[t] = true,
            _ => self.barrier(c, t),
        }
    }
    fn before_acquire(&mut self, c: &mut Core, t: usize) {
        match self.kind {
            Barrier::Bb => self.barrier(c, t),
            Barrier::Arp if self.flag[t] => {
                self.flag[t] = false;
                self.barrier(c, t);
            }
            _ => {}
        }
    }
    /// The thesis places no barrier after an acquire (its LFDs' RMWs are
    /// releases); an acquire-only RMW's write must still persist before the
    /// writes after it (rule 2), so a barrier follows it.
    fn after_acquire(&mut self, c: &mut Core, t: usize, _line: u64, rmw: bool) {
        if rmw && self.kind != Barrier::Arp {
            self.barrier(c, t);
        }
    }
    fn on_access(&mut self, c: &mut Core, t: usize, line: u64) {
        let done = c.line_done[line as usize];
        if done > c.now {
            match self.kind {
                Barrier::Sb => c.stall(t, done),
                _ => self.dep[t] = self.dep[t].max(done),
            }
        }
    }
    /// Writing a line that holds an older epoch: that epoch must persist
    /// first; a line whose persist is scheduled but not issued yet waits
    /// until its snapshot is taken.
    fn on_write(&mut self, c: &mut Core, t: usize, way: usize, _release: bool) {
        let w = c.l1[t][way];
        if w.dirty && w.epoch < self.epoch[t] {
            let done = self.flush(c, t, w.epoch);
            c.stall(t, done);
        }
        let issue = c.line_issue[w.line as usize];
        c.stall(t, issue);
        c.l1[t][way].epoch = self.epoch[t];
    }
    fn write_back(&mut self, c: &mut Core, owner: usize, line: u64, cause: Cause) -> u64 {
        let Some(way) = c.way(owner, line) else {
            return c.now;
        };
        let upto = if self.kind == Barrier::Sb {
            u64::MAX
        } else {
            c.l1[owner][way].epoch
        };
        let done = self.flush(c, owner, upto);
        match (cause, self.kind) {
            (Cause::Downgrade(req), Barrier::Bb | Barrier::Arp) => {
                self.dep[req] = self.dep[req].max(done);
                c.now
            }
            _ => done,
        }
    }
}
