//! The operational persistency machine (docs/LRP.md, "The layers"): per-thread L1 caches
//! at 64-byte line granularity, a directory, NVM, and the persists in
//! flight between them, with a cycle cost model (thesis Table 3.1).
//!
//! Memory is sequentially consistent: every access sees the latest value,
//! the machine executes one access at a time in time order. What the
//! machine decides is *persistence*: a dirty line reaches NVM only when it
//! is written back (eviction, or another thread's access) or when a
//! [`Policy`] persists it. A crash keeps NVM and any per-line prefix of the
//! persists issued but not yet acknowledged (docs/LRP.md decision 4: completed but
//! unacknowledged persists may land; the NVM controller is FIFO per line).

use tandem_sim::Rng;

use crate::policy::{Cause, Policy};
use crate::trace::{EventId, Kind, Sync, Trace};

pub const LINE_WORDS: u64 = 8;
/// `writer` of a word nobody wrote: poison (an unallocated node's field).
pub const UNWRITTEN: u32 = 0;
/// `writer` of a word written before the run (the prefilled structure).
pub const INITIAL: u32 = 1;
const NONE: u8 = u8::MAX;

pub fn writer_of(e: EventId) -> u32 {
    e as u32 + 2
}

/// The event that wrote a word, if a traced event did.
pub fn event_of(writer: u32) -> Option<EventId> {
    (writer >= 2).then(|| writer as usize - 2)
}

/// Cycles per mesh hop. The thesis names a 2D mesh of 64 tiles with 32-bit
/// flits and links (Table 3.1) but not its latency. Its simulator, PriME
/// (Fu and Wentzlaff, ISPASS 2014), charges a hop as a router delay plus a
/// link delay per flit, with the message's flits pipelined behind its head,
/// and its released configuration sets them to 0 and 1 cycles: 1 cycle per
/// hop. Table 3.1 shares several of that configuration's values (64 cores
/// at 2.5 GHz, a 32 KB 8-way L1 of 64-byte lines, 120-cycle memory), so 1
/// is the likeliest value; 2 (a one-cycle router) is the top of the
/// plausible range, 1-2 cycles (docs/LRP.md, "The mesh").
pub const DEFAULT_HOP: u64 = 1;

/// The machine's parameters. [`Config::thesis`] is Table 3.1; [`Config::check`]
/// shrinks caches and tables so small runs exercise every mechanism.
#[derive(Clone, Debug)]
pub struct Config {
    pub threads: usize,
    pub words: u64,
    pub l1_sets: usize,
    pub l1_ways: usize,
    pub hit: u64,
    pub llc: u64,
    /// A line fetched from another core's L1.
    pub c2c: u64,
    /// NVM write latency: 120 cycles cached mode, 350 uncached (Table 3.1).
    pub nvm: u64,
    /// The on-chip network (Table 3.1: a 2D mesh, 32-bit flits and links):
    /// cycles per hop ([`DEFAULT_HOP`]; 0 leaves the network out, flits
    /// too), the mesh's width in tiles (core `t` sits on tile `t`, line
    /// `l`'s directory and LLC bank on tile `l mod tiles`), and the flits a
    /// 64-byte line adds to a message (a cycle each on a 32-bit link,
    /// charged once per message, as a pipelined network does). A read miss
    /// is granted S, never E, so a read and then a write pay an upgrade: a
    /// round trip to the directory (MESI's E would make it silent: the mesh
    /// overcharges read-then-CAS somewhat).
    pub hop: u64,
    pub mesh_width: u64,
    pub line_flits: u64,
    pub epoch_bits: u32,
    pub ret_size: usize,
    pub ret_watermark: usize,
    /// Up to this many extra cycles on every access and persist (seeded),
    /// so different seeds interleave threads and persists differently.
    pub jitter: u64,
    /// Chance per access that a thread is delayed by 50 accesses' worth of
    /// cycles (a preempted or slow core).
    pub slow: f64,
    pub seed: u64,
    /// Record the trace the checker reads (off for benchmarks).
    pub record: bool,
    pub mutant: Option<crate::Mutant>,
}

impl Config {
    pub fn thesis(threads: usize, words: u64) -> Config {
        Config {
            threads,
            words,
            l1_sets: 64,
            l1_ways: 8,
            hit: 2,
            llc: 15,
            c2c: 15,
            nvm: 120,
            // `experiment lrp` reports how the ratios move with it (0-2).
            hop: DEFAULT_HOP,
            mesh_width: 8,
            line_flits: 16,
            epoch_bits: 8,
            ret_size: 32,
            // Not given by the thesis (docs/LRP.md decision 5); `experiment lrp` sweeps it.
            ret_watermark: 4,
            jitter: 0,
            slow: 0.0,
            seed: 0,
            record: false,
            mutant: None,
        }
    }

    /// Small caches, a 4-entry RET and 4-bit epochs: evictions, RET
    /// pressure and epoch overflow all happen within a few dozen operations.
    /// No mesh: the checker judges persist order, not cost, and its jitter
    /// already varies every latency.
    pub fn check(threads: usize, words: u64, seed: u64) -> Config {
        Config {
            hop: 0,
            l1_sets: 4,
            l1_ways: 2,
            epoch_bits: 4,
            ret_size: 4,
            ret_watermark: 3,
            jitter: 40,
            slow: 0.02,
            seed,
            record: true,
            ..Config::thesis(threads, words)
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Way {
    pub line: u64,
    pub valid: bool,
    pub dirty: bool,
    /// Held exclusively (MESI's E or M): written here, and no other core
    /// has asked for the line since. A write-back that leaves the line in
    /// this L1 (a persist in place) keeps it, so a later write is a silent
    /// E→M upgrade, not a request the directory sees (and I4 holds).
    pub excl: bool,
    /// LRP: written by a release. Epoch policies: unused.
    pub released: bool,
    /// LRP: min-epoch. Epoch policies: the epoch of the last write.
    pub epoch: u64,
    lru: u64,
}

/// One write-back on its way to NVM: a snapshot of the line when it was
/// taken, issued at `issue` (it can land from then on), acknowledged at `done`.
#[derive(Clone, Debug)]
pub struct Persist {
    pub line: u64,
    pub issue: u64,
    pub done: u64,
    pub issuer: usize,
    pub words: [u64; LINE_WORDS as usize],
    pub writers: [u32; LINE_WORDS as usize],
    waited: bool,
}

/// Why a core stalls (for the stall breakdown).
#[derive(Clone, Copy, Debug)]
pub enum Why {
    Downgrade,
    Directory,
    Evict,
    Policy,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    pub accesses: u64,
    pub persists: u64,
    /// Persists their own core stalled for (the thesis's "write-backs on the
    /// critical path of the processor doing the write-back").
    pub critical: u64,
    pub stall: u64,
    /// Stall cycles by cause: a request waiting for another core's line (I2),
    /// the directory holding a line (I4), an eviction (I1), and the
    /// policy's own waits (barriers, fences, I3, epoch conflicts).
    pub stall_downgrade: u64,
    pub stall_directory: u64,
    pub stall_evict: u64,
    pub stall_policy: u64,
    /// Cycles waiting behind another core's transaction on the same line (contention, not persistency).
    pub queued: u64,
    pub engine_scans: u64,
    pub ret_persists: u64,
    pub epoch_overflows: u64,
    pub evictions: u64,
    pub downgrades: u64,
}

/// The machine state every policy acts on.
pub struct Core {
    pub cfg: Config,
    pub rng: Rng,
    pub clock: Vec<u64>,
    pub now: u64,
    pub l1: Vec<Vec<Way>>,
    lru_tick: u64,
    /// The core holding the line dirty (M), if any.
    pub owner: Vec<u8>,
    sharers: Vec<u64>,
    /// I4: requests for the line wait until this time (its write-back persisted).
    pub blocked_until: Vec<u64>,
    /// When the line's last issued persist is acknowledged (per-line FIFO).
    pub line_done: Vec<u64>,
    /// When the line's last scheduled persist is issued (its snapshot is final).
    pub line_issue: Vec<u64>,
    /// When the directory finishes the line's last coherence transaction:
    /// it serves one transaction per line at a time.
    line_busy: Vec<u64>,
    /// When everything a core has issued is acknowledged (pending-persists == 0).
    pub pending: Vec<u64>,
    pub mem: Vec<u64>,
    pub writer: Vec<u32>,
    pub nvm: Vec<u64>,
    pub nvm_writer: Vec<u32>,
    pub inflight: Vec<Persist>,
    min_done: u64,
    pub stats: Stats,
    pub trace: Trace,
    /// The current access stalled (set by [`Core::stall`]).
    pub stalled: bool,
}

impl Core {
    pub fn new(cfg: Config) -> Core {
        let lines = cfg.words.div_ceil(LINE_WORDS) as usize;
        let words = (lines as u64 * LINE_WORDS) as usize;
        Core {
            rng: Rng::new(cfg.seed ^ 0x9e37_79b9),
            clock: vec![0; cfg.threads],
            now: 0,
            l1: vec![vec![Way::default(); cfg.l1_sets * cfg.l1_ways]; cfg.threads],
            lru_tick: 0,
            owner: vec![NONE; lines],
            sharers: vec![0; lines],
            blocked_until: vec![0; lines],
            line_done: vec![0; lines],
            line_issue: vec![0; lines],
            line_busy: vec![0; lines],
            pending: vec![0; cfg.threads],
            mem: vec![0; words],
            writer: vec![UNWRITTEN; words],
            nvm: vec![0; words],
            nvm_writer: vec![UNWRITTEN; words],
            inflight: Vec::new(),
            min_done: u64::MAX,
            stats: Stats::default(),
            trace: Trace::new(),
            stalled: false,
            cfg,
        }
    }

    pub fn mutant(&self, m: crate::Mutant) -> bool {
        self.cfg.mutant == Some(m)
    }

    fn jitter(&mut self) -> u64 {
        if self.cfg.jitter == 0 {
            0
        } else {
            self.rng.below(self.cfg.jitter + 1)
        }
    }

    /// Persists acknowledged by `t` reach NVM.
    pub fn advance(&mut self, t: u64) {
        self.now = t;
        if self.min_done > t {
            return;
        }
        let (mem, wr) = (&mut self.nvm, &mut self.nvm_writer);
        let mut min_done = u64::MAX;
        self.inflight.retain(|p| {
            if p.done > t {
                min_done = min_done.min(p.done);
                return true;
            }
            let base = (p.line * LINE_WORDS) as usize;
            mem[base..base + LINE_WORDS as usize].copy_from_slice(&p.words);
            wr[base..base + LINE_WORDS as usize].copy_from_slice(&p.writers);
            false
        });
        self.min_done = min_done;
    }

    /// Issue a persist of `line`'s current contents by core `by` at time
    /// `at` (now or later); returns when NVM acknowledges it.
    pub fn persist_at(&mut self, by: usize, line: u64, at: u64) -> u64 {
        let base = (line * LINE_WORDS) as usize;
        let mut words = [0; LINE_WORDS as usize];
        let mut writers = [0; LINE_WORDS as usize];
        words.copy_from_slice(&self.mem[base..base + LINE_WORDS as usize]);
        writers.copy_from_slice(&self.writer[base..base + LINE_WORDS as usize]);
        let at = at.max(self.now);
        // The write-back crosses the mesh to the line's directory, on its way to NVM.
        let path = self.one_way(by as u64, self.home(line));
        let done =
            (at + path + self.cfg.nvm + self.jitter()).max(self.line_done[line as usize] + 1);
        self.line_done[line as usize] = done;
        self.line_issue[line as usize] = at;
        self.pending[by] = self.pending[by].max(done);
        self.min_done = self.min_done.min(done);
        self.inflight.push(Persist {
            line,
            issue: at,
            done,
            issuer: by,
            words,
            writers,
            waited: false,
        });
        self.stats.persists += 1;
        done
    }

    pub fn persist(&mut self, by: usize, line: u64) -> u64 {
        self.persist_at(by, line, self.now)
    }

    /// Core `t` stalls until `until`; its own persists acknowledged by then
    /// count as on its critical path.
    pub fn stall(&mut self, t: usize, until: u64) {
        self.stall_for(t, until, Why::Policy);
    }

    pub fn stall_for(&mut self, t: usize, until: u64, why: Why) {
        if until <= self.clock[t] {
            return;
        }
        let d = until - self.clock[t];
        self.stats.stall += d;
        *match why {
            Why::Downgrade => &mut self.stats.stall_downgrade,
            Why::Directory => &mut self.stats.stall_directory,
            Why::Evict => &mut self.stats.stall_evict,
            Why::Policy => &mut self.stats.stall_policy,
        } += d;
        self.stalled = true;
        let from = self.clock[t];
        // On the critical path of the core that did the write-back (thesis Fig. 3.5).
        for p in self
            .inflight
            .iter_mut()
            .filter(|p| p.issuer == t && !p.waited && p.done > from && p.done <= until)
        {
            p.waited = true;
            self.stats.critical += 1;
        }
        self.clock[t] = until;
        // Whatever the stalled core does next, it does at its new time.
        self.now = self.now.max(until);
    }

    pub fn way(&self, t: usize, line: u64) -> Option<usize> {
        let set = (line as usize % self.cfg.l1_sets) * self.cfg.l1_ways;
        (set..set + self.cfg.l1_ways).find(|&i| self.l1[t][i].valid && self.l1[t][i].line == line)
    }

    /// The dirty lines in `t`'s L1.
    pub fn dirty(&self, t: usize) -> impl Iterator<Item = (usize, Way)> + '_ {
        self.l1[t]
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, w)| w.valid && w.dirty)
    }

    /// The line is no longer dirty in `t`'s L1 (its contents are on their way to NVM).
    pub fn clean(&mut self, t: usize, way: usize) {
        let w = &mut self.l1[t][way];
        w.dirty = false;
        w.released = false;
        let line = w.line as usize;
        if self.owner[line] == t as u8 {
            self.owner[line] = NONE;
        }
    }

    fn drop_line(&mut self, t: usize, line: u64) {
        if let Some(i) = self.way(t, line) {
            self.l1[t][i].valid = false;
        }
        self.sharers[line as usize] &= !(1 << t);
    }

    /// Bring `line` into `t`'s L1 for a read or a write: coherence with
    /// other cores, I4, eviction, and the access's cost. Returns the way.
    pub fn access(&mut self, pol: &mut dyn Policy, t: usize, line: u64, write: bool) -> usize {
        self.stats.accesses += 1;
        let owner = self.owner[line as usize];
        let forwarded = owner != NONE && owner as usize != t;
        let held = self.way(t, line);
        let transaction =
            forwarded || held.is_none() || (write && held.is_some_and(|w| !self.l1[t][w].excl));
        // I4 holds a request for write-backs already in flight when it
        // reaches the directory (one this request causes is I2's to wait for).
        let blocked = self.blocked_until[line as usize];
        if transaction {
            self.queue_behind(t, line);
            self.share(t, line);
        }
        let mut cost = self.cfg.hit;
        if transaction && held.is_some() && !forwarded {
            // An upgrade of a shared copy: a round trip to the directory.
            cost += self.network(t, line, None, false);
        }
        if forwarded {
            // Data from the owning core (I2 decides its wait), through the
            // directory (I4 below).
            cost = self.cfg.c2c + self.network(t, line, Some(owner as usize), true);
            self.stats.downgrades += 1;
            let until = pol.write_back(self, owner as usize, line, Cause::Downgrade(t));
            self.stall_for(t, until, Why::Downgrade);
        }
        if write {
            self.invalidate_others(t, line);
        }
        if transaction {
            // I4: the directory holds every request it sees (misses,
            // forwards, and upgrades of a shared copy to M) while the
            // line's write-back persists; a silent E→M upgrade never
            // reaches it. The owner may hold the line only-written again
            // while its released contents are still persisting.
            self.stall_for(t, blocked, Why::Directory);
        }
        let way = match held {
            Some(i) => i,
            None => {
                cost = cost.max(self.cfg.llc + self.network(t, line, None, true));
                self.fill(pol, t, line)
            }
        };
        self.sharers[line as usize] |= 1 << t;
        self.lru_tick += 1;
        self.l1[t][way].lru = self.lru_tick;
        let slow = if self.rng.chance(self.cfg.slow) {
            50 * self.cfg.llc
        } else {
            0
        };
        self.clock[t] += cost + self.jitter() + slow;
        if transaction {
            self.line_busy[line as usize] = self.clock[t];
        }
        way
    }

    /// Mesh hops between two tiles (X-Y routing).
    fn hops(&self, a: u64, b: u64) -> u64 {
        let w = self.cfg.mesh_width;
        (a % w).abs_diff(b % w) + (a / w % w).abs_diff(b / w % w)
    }

    /// Cycles of a message carrying a line from tile `a` to tile `b`.
    fn one_way(&self, a: u64, b: u64) -> u64 {
        match self.cfg.hop {
            0 => 0,
            hop => self.hops(a, b) * hop + self.cfg.line_flits,
        }
    }

    /// The tile of `line`'s directory and LLC bank (address-interleaved).
    fn home(&self, line: u64) -> u64 {
        line % (self.cfg.mesh_width * self.cfg.mesh_width)
    }

    /// Network cycles of core `t`'s request for `line`: to the line's
    /// directory, on to the owner if one holds it, and the reply back to
    /// `t`, carrying the line if `data`.
    fn network(&self, t: usize, line: u64, owner: Option<usize>, data: bool) -> u64 {
        let (home, t) = (self.home(line), t as u64);
        let hops = match owner {
            Some(o) => self.hops(t, home) + self.hops(home, o as u64) + self.hops(o as u64, t),
            None => 2 * self.hops(t, home),
        };
        let flits = if data { self.cfg.line_flits } else { 0 };
        (hops * self.cfg.hop + flits) * (self.cfg.hop > 0) as u64
    }

    /// The directory serves one transaction per line at a time: wait for
    /// the one in progress. No retry is needed, as every other access to
    /// the line queues behind this one in turn.
    fn queue_behind(&mut self, t: usize, line: u64) {
        let busy = self.line_busy[line as usize];
        if busy > self.clock[t] {
            self.stats.queued += busy - self.clock[t];
            self.clock[t] = busy;
            self.now = self.now.max(busy);
        }
    }

    /// Another core's request for `line` ends every exclusive copy but `t`'s.
    fn share(&mut self, t: usize, line: u64) {
        let others = self.sharers[line as usize] & !(1 << t);
        for o in (0..self.cfg.threads).filter(|o| others >> o & 1 == 1) {
            if let Some(i) = self.way(o, line) {
                self.l1[o][i].excl = false;
            }
        }
    }

    fn invalidate_others(&mut self, t: usize, line: u64) {
        let others = self.sharers[line as usize] & !(1 << t);
        for o in (0..self.cfg.threads).filter(|o| others >> o & 1 == 1) {
            self.drop_line(o, line);
        }
    }

    /// A free or least-recently-used way for `line`, evicting its occupant.
    fn fill(&mut self, pol: &mut dyn Policy, t: usize, line: u64) -> usize {
        let set = (line as usize % self.cfg.l1_sets) * self.cfg.l1_ways;
        let ways = set..set + self.cfg.l1_ways;
        let victim = ways
            .clone()
            .find(|&i| !self.l1[t][i].valid)
            .unwrap_or_else(|| ways.min_by_key(|&i| self.l1[t][i].lru).unwrap());
        let old = self.l1[t][victim];
        if old.valid {
            if old.dirty {
                self.stats.evictions += 1;
                let until = pol.write_back(self, t, old.line, Cause::Evict);
                self.stall_for(t, until, Why::Evict);
            }
            self.drop_line(t, old.line);
        }
        self.l1[t][victim] = Way {
            line,
            valid: true,
            ..Way::default()
        };
        victim
    }

    /// Mark the way dirty and owned by `t` after a write.
    pub fn dirty_way(&mut self, t: usize, way: usize) {
        self.l1[t][way].dirty = true;
        self.l1[t][way].excl = true;
        self.owner[self.l1[t][way].line as usize] = t as u8;
    }

    pub fn record(&mut self, t: usize, addr: u64, kind: Kind, sync: Sync) -> Option<EventId> {
        if !self.cfg.record {
            return None;
        }
        let id = match kind {
            Kind::Write => self.trace.write(t as u32, addr, sync),
            Kind::Read { from } => self.trace.read(t as u32, addr, sync, from),
            Kind::Rmw { from } => self.trace.rmw(t as u32, addr, sync, from),
            Kind::Fence => self.trace.fence(t as u32),
        };
        Some(id)
    }

    /// The write event that produced `addr`'s current value, if traced.
    pub fn source(&self, addr: u64) -> Option<EventId> {
        event_of(self.writer[addr as usize])
    }
}
