//! Application-side state shared by the clients of one run, which the
//! scalable assertions need (thesis §5.4, Fig. 5.2: asserts that never fail
//! on a correct store at any instance count):
//! - the real-time floor of litmus 3: the largest X acknowledged so far per
//!   (test, instance); an assert that begins later must see at least that
//!   (real-time order, thesis Def. 2.5.8);
//! - the pairs of the insert/delete variant of litmus 1: each new pair gets
//!   fresh keys, so inserts go to never-used slots (FORD's "missing actions"
//!   bug, the Pandora paper §5.1, only skips the undo entry of such inserts).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Pairs per insert/delete test (the key layout's instance field).
pub const MAX_PAIRS: u32 = 1 << 16;

#[derive(Default)]
struct Inner {
    floors: HashMap<(u32, u32), i64>,
    pairs: HashMap<u32, u32>,
    /// Pair numbers start here: worker processes that share no board get
    /// disjoint ranges, so their fresh pairs never collide.
    pair_base: u32,
}

#[derive(Clone, Default)]
pub struct Board(Arc<Mutex<Inner>>);

impl Board {
    pub fn floor(&self, test: u32, instance: u32) -> i64 {
        self.0
            .lock()
            .expect("board")
            .floors
            .get(&(test, instance))
            .copied()
            .unwrap_or(0)
    }

    pub fn raise_floor(&self, test: u32, instance: u32, x: i64) {
        let mut b = self.0.lock().expect("board");
        let f = b.floors.entry((test, instance)).or_insert(0);
        *f = (*f).max(x);
    }

    /// A board whose pairs are numbered from `base` (one worker process's range).
    pub fn with_pair_base(base: u32) -> Board {
        assert!(base < MAX_PAIRS, "pair base {base} out of range");
        Board(Arc::new(Mutex::new(Inner {
            pair_base: base,
            ..Inner::default()
        })))
    }

    /// The number of the `i`-th pair of this board.
    pub fn pair(&self, i: u32) -> u32 {
        (self.0.lock().expect("board").pair_base + i) % MAX_PAIRS
    }

    /// Make at least `n` pairs of `test` known (a checker that did not hand
    /// them out, after the run).
    pub fn note_pairs(&self, test: u32, n: u32) {
        let mut b = self.0.lock().expect("board");
        let p = b.pairs.entry(test).or_insert(0);
        *p = (*p).max(n.min(MAX_PAIRS));
    }

    /// Pairs of `test` handed out so far.
    pub fn pairs(&self, test: u32) -> u32 {
        self.0
            .lock()
            .expect("board")
            .pairs
            .get(&test)
            .copied()
            .unwrap_or(0)
    }

    /// A fresh pair of `test` (wraps around after [`MAX_PAIRS`]).
    pub fn new_pair(&self, test: u32) -> u32 {
        let mut b = self.0.lock().expect("board");
        let base = b.pair_base;
        let n = b.pairs.entry(test).or_insert(0);
        let p = *n % MAX_PAIRS;
        *n = (*n + 1).min(MAX_PAIRS);
        (base + p) % MAX_PAIRS
    }
}
