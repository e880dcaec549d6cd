//! The axiomatic side of the persistency models (thesis §3.4): which
//! writes must persist before which, and which crash images are legal.
//!
//! An image is the set of writes that reached NVM. It is legal under a
//! model when it is downward-closed under the model's persist order: no
//! write survives while one that must persist before it is lost (thesis
//! §3.2.3 and §3.4.1, "consistent cut"). Any suffix may be lost: none of these models
//! has a durability deadline.

use std::collections::BTreeSet;

use crate::trace::{EventId, Trace};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Release persistency, rules 1–4 of §1.3 (rule 5 holds by
    /// construction: an RMW is one event), closed transitively through
    /// acquires as the thesis's note on acquires asks.
    Rp,
    /// Acquire-release persistency (Kolli et al., §1.5): only
    /// `W -po-> Rel -sw-> Acq -po-> W'` orders `W` before `W'`.
    Arp,
    /// Strict persistency (§1.5): writes persist in the order they become
    /// visible: program order, and a write before every read of it.
    Strict,
    /// Buffered epoch persistency (§1.5): persist barriers (`Kind::Fence`)
    /// split each thread into epochs; writes of different epochs of a thread
    /// persist in epoch order, and a read of another thread's write orders
    /// that write's epoch (and those before it) before the reader's epoch
    /// (and those after it).
    Bep,
}

/// A persist order over a trace's events, transitively closed.
#[derive(Clone, Debug)]
pub struct PersistOrder {
    n: usize,
    before: Vec<bool>,
}

impl PersistOrder {
    fn new(n: usize) -> PersistOrder {
        PersistOrder {
            n,
            before: vec![false; n * n],
        }
    }

    fn add(&mut self, a: EventId, b: EventId) {
        if a != b {
            self.before[a * self.n + b] = true;
        }
    }

    /// `a` must persist before `b`.
    pub fn before(&self, a: EventId, b: EventId) -> bool {
        self.before[a * self.n + b]
    }

    fn close(&mut self) {
        let n = self.n;
        for k in 0..n {
            for i in 0..n {
                if self.before[i * n + k] {
                    for j in 0..n {
                        if self.before[k * n + j] {
                            self.before[i * n + j] = true;
                        }
                    }
                }
            }
        }
    }
}

/// The release `r` synchronizes with the acquire `a` (another thread's
/// acquire that read from it).
fn sw(t: &Trace, r: EventId, a: EventId) -> bool {
    let (er, ea) = (&t.events[r], &t.events[a]);
    er.is_release() && ea.is_acquire() && er.thread != ea.thread && ea.read_from() == Some(r)
}

/// The persist order `model` implies for `t`.
pub fn persist_order(t: &Trace, model: Model) -> PersistOrder {
    let n = t.events.len();
    let mut p = PersistOrder::new(n);
    for a in 0..n {
        for b in 0..n {
            if edge(t, model, a, b) {
                p.add(a, b);
            }
        }
    }
    if model == Model::Arp {
        arp_edges(t, &mut p);
    }
    if model == Model::Bep {
        bep_edges(t, &mut p);
    }
    p.close();
    p
}

/// A direct persist-order edge `a -> b` under `model` (ARP's come from `arp_edges`).
fn edge(t: &Trace, model: Model, a: EventId, b: EventId) -> bool {
    let (ea, eb) = (&t.events[a], &t.events[b]);
    match model {
        Model::Rp => {
            let po = t.po(a, b);
            (po && ea.writes() && eb.is_release()) // rule 1
                || (po && ea.is_acquire() && eb.writes()) // rule 2
                || sw(t, a, b) // rule 3
                || (po && ea.writes() && eb.writes() && ea.addr == eb.addr) // rule 4
        }
        Model::Strict => t.po(a, b) || eb.read_from() == Some(a),
        Model::Arp | Model::Bep => false,
    }
}

/// BEP: epoch order within a thread, and across threads through reads.
fn bep_edges(t: &Trace, p: &mut PersistOrder) {
    let epoch = t.epochs();
    let writes = t.writes();
    for &a in &writes {
        for &b in writes
            .iter()
            .filter(|&&b| t.po(a, b) && epoch[a] < epoch[b])
        {
            p.add(a, b);
        }
    }
    for (r, ev) in t.events.iter().enumerate() {
        let Some(w) = ev.read_from().filter(|&w| t.events[w].thread != ev.thread) else {
            continue;
        };
        let source = writes
            .iter()
            .filter(|&&a| t.events[a].thread == t.events[w].thread && epoch[a] <= epoch[w]);
        for &a in source {
            for &b in writes
                .iter()
                .filter(|&&b| t.events[b].thread == ev.thread && epoch[b] >= epoch[r])
            {
                p.add(a, b);
            }
        }
    }
}

/// ARP: `W -po-> Rel -sw-> Acq -po-> W'` gives `W -> W'`.
fn arp_edges(t: &Trace, p: &mut PersistOrder) {
    let n = t.events.len();
    for rel in 0..n {
        for acq in (0..n).filter(|&a| sw(t, rel, a)) {
            for w in (0..n).filter(|&w| t.events[w].writes() && t.po(w, rel)) {
                for w2 in (0..n).filter(|&w2| t.events[w2].writes() && t.po(acq, w2)) {
                    p.add(w, w2);
                }
            }
        }
    }
}

/// Why an image is illegal: `missing` must persist before `present`, and
/// only `present` survived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Witness {
    pub missing: EventId,
    pub present: EventId,
}

impl PersistOrder {
    /// Whether the surviving writes `image` form a legal crash image; if
    /// not, the first pair (by event order) that shows it.
    pub fn check(&self, t: &Trace, image: &BTreeSet<EventId>) -> Result<(), Witness> {
        for &present in image {
            if let Some(missing) = t
                .writes()
                .into_iter()
                .find(|&w| !image.contains(&w) && self.before(w, present))
            {
                return Err(Witness { missing, present });
            }
        }
        Ok(())
    }
}

/// Every legal crash image of a small program (at most 20 writes).
pub fn legal_images(t: &Trace, model: Model) -> Result<Vec<BTreeSet<EventId>>, String> {
    let writes = t.writes();
    if writes.len() > 20 {
        return Err(format!(
            "{} writes: enumerating every image is for programs of at most 20",
            writes.len()
        ));
    }
    let p = persist_order(t, model);
    let images = (0u32..1 << writes.len()).map(|mask| {
        writes
            .iter()
            .enumerate()
            .filter(|(i, _)| mask >> i & 1 == 1)
            .map(|(_, &w)| w)
            .collect::<BTreeSet<_>>()
    });
    Ok(images.filter(|img| p.check(t, img).is_ok()).collect())
}
