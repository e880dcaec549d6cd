//! A recorded execution: events in each thread's program order, with the
//! write each read (or RMW) read from.

/// An event's index in [`Trace::events`].
pub type EventId = usize;

/// The synchronisation an access carries (Rust's `Ordering`; thesis §2.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    Plain,
    Acquire,
    Release,
    AcqRel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A read, and the write it read from (None: the initial value).
    Read {
        from: Option<EventId>,
    },
    Write,
    /// A read-modify-write (one event: its read and its write are atomic).
    Rmw {
        from: Option<EventId>,
    },
    /// An explicit persist barrier (epoch persistency's; `addr` unused).
    Fence,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub thread: u32,
    pub addr: u64,
    pub kind: Kind,
    pub sync: Sync,
}

impl Event {
    /// It writes memory (so it can persist).
    pub fn writes(&self) -> bool {
        matches!(self.kind, Kind::Write | Kind::Rmw { .. })
    }

    /// A release: a write or RMW with release semantics.
    pub fn is_release(&self) -> bool {
        self.writes() && matches!(self.sync, Sync::Release | Sync::AcqRel)
    }

    /// An acquire: a read or RMW with acquire semantics.
    pub fn is_acquire(&self) -> bool {
        matches!(self.kind, Kind::Read { .. } | Kind::Rmw { .. })
            && matches!(self.sync, Sync::Acquire | Sync::AcqRel)
    }

    /// The write it read from, if it reads.
    pub fn read_from(&self) -> Option<EventId> {
        match self.kind {
            Kind::Read { from } | Kind::Rmw { from } => from,
            Kind::Write | Kind::Fence => None,
        }
    }
}

/// Events in the order they were recorded; two events of one thread are
/// in program order (po) by their indices.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub events: Vec<Event>,
}

impl Trace {
    pub fn new() -> Trace {
        Trace::default()
    }

    fn push(&mut self, thread: u32, addr: u64, kind: Kind, sync: Sync) -> EventId {
        self.events.push(Event {
            thread,
            addr,
            kind,
            sync,
        });
        self.events.len() - 1
    }

    pub fn write(&mut self, thread: u32, addr: u64, sync: Sync) -> EventId {
        self.push(thread, addr, Kind::Write, sync)
    }

    pub fn read(&mut self, thread: u32, addr: u64, sync: Sync, from: Option<EventId>) -> EventId {
        self.push(thread, addr, Kind::Read { from }, sync)
    }

    pub fn rmw(&mut self, thread: u32, addr: u64, sync: Sync, from: Option<EventId>) -> EventId {
        self.push(thread, addr, Kind::Rmw { from }, sync)
    }

    /// A persist barrier: it ends the thread's epoch (for `Model::Bep`).
    pub fn fence(&mut self, thread: u32) -> EventId {
        self.push(thread, 0, Kind::Fence, Sync::Plain)
    }

    /// Each event's epoch: the persist barriers before it on its thread.
    pub fn epochs(&self) -> Vec<u32> {
        let mut count = std::collections::HashMap::new();
        self.events
            .iter()
            .map(|e| {
                let c = count.entry(e.thread).or_insert(0u32);
                let epoch = *c;
                if e.kind == Kind::Fence {
                    *c += 1;
                }
                epoch
            })
            .collect()
    }

    /// `a` precedes `b` in program order.
    pub fn po(&self, a: EventId, b: EventId) -> bool {
        a < b && self.events[a].thread == self.events[b].thread
    }

    /// The writes (what a crash image is made of).
    pub fn writes(&self) -> Vec<EventId> {
        (0..self.events.len())
            .filter(|&e| self.events[e].writes())
            .collect()
    }

    /// One event in words, for witnesses: `e12 (thread 0, release RMW of word 40)`.
    pub fn describe(&self, e: EventId) -> String {
        let ev = &self.events[e];
        let sync = match ev.sync {
            Sync::Plain => "plain",
            Sync::Acquire => "acquire",
            Sync::Release => "release",
            Sync::AcqRel => "acq-rel",
        };
        let kind = match ev.kind {
            Kind::Read { .. } => "read",
            Kind::Write => "write",
            Kind::Rmw { .. } => "RMW",
            Kind::Fence => return format!("e{e} (thread {}, persist barrier)", ev.thread),
        };
        format!(
            "e{e} (thread {}, {sync} {kind} of word {})",
            ev.thread, ev.addr
        )
    }
}
