//! The 25 ⟨consistency, persistency⟩ models and the rules each one fixes
//! (docs/DDP.md has the rule tables). The engine reads a [`Rules`]
//! value, never the model name: one engine, 25 protocols.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Consistency {
    Lin,
    Re,
    Trans,
    Causal,
    Eventual,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Persistency {
    Strict,
    Synch,
    Re,
    Scope,
    Eventual,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Model {
    pub c: Consistency,
    pub p: Persistency,
}

impl Consistency {
    pub const ALL: [Consistency; 5] = [
        Consistency::Lin,
        Consistency::Re,
        Consistency::Trans,
        Consistency::Causal,
        Consistency::Eventual,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Consistency::Lin => "lin",
            Consistency::Re => "re",
            Consistency::Trans => "trans",
            Consistency::Causal => "causal",
            Consistency::Eventual => "eventual",
        }
    }
}

impl Persistency {
    pub const ALL: [Persistency; 5] = [
        Persistency::Strict,
        Persistency::Synch,
        Persistency::Re,
        Persistency::Scope,
        Persistency::Eventual,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Persistency::Strict => "strict",
            Persistency::Synch => "synch",
            Persistency::Re => "re",
            Persistency::Scope => "scope",
            Persistency::Eventual => "eventual",
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.c.name(), self.p.name())
    }
}

impl Model {
    pub const LIN_SYNCH: Model = Model {
        c: Consistency::Lin,
        p: Persistency::Synch,
    };

    pub fn all() -> Vec<Model> {
        Consistency::ALL
            .iter()
            .flat_map(|&c| Persistency::ALL.iter().map(move |&p| Model { c, p }))
            .collect()
    }

    /// Models the engine runs: all 25 (the INV/ACK/VAL family for Lin and
    /// RE, the UPD family for Causal and Eventual, transactions for Trans).
    pub fn implemented(self) -> bool {
        true
    }

    /// `lin-synch`, `causal-eventual`, …; `re` alone is ambiguous, so the
    /// consistency part comes first and the persistency part last.
    pub fn parse(name: &str) -> Result<Model, String> {
        let lower = name.trim().to_ascii_lowercase();
        for c in Consistency::ALL {
            for p in Persistency::ALL {
                if lower == format!("{}-{}", c.name(), p.name()) {
                    return Ok(Model { c, p });
                }
            }
        }
        Err(format!("unknown model '{name}': expected CONSISTENCY-PERSISTENCY with consistency lin|re|trans|causal|eventual and persistency strict|synch|re|scope|eventual (e.g. lin-synch), or all"))
    }

    /// A comma-separated list, or `all`.
    pub fn parse_list(list: &str) -> Result<Vec<Model>, String> {
        if list.trim().eq_ignore_ascii_case("all") {
            return Ok(Model::all());
        }
        list.split(',').map(Model::parse).collect()
    }

    pub fn rules(self) -> Rules {
        Rules::of(self)
    }
}

/// When a follower acknowledges an INV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckMode {
    /// One ACK once the version is applied and persisted (Synch).
    Combined,
    /// ACK_c at apply, ACK_p once persisted (Strict, RE-p).
    Split,
    /// ACK_c at apply only; persistence is not acknowledged per write.
    ConsistencyOnly,
}

/// When a node issues the persist of a version it applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistIssue {
    /// On receipt, before and independent of apply (Strict).
    OnReceipt,
    /// When it applies the version (Synch, RE-p).
    AtApply,
    /// All writes of a scope at once, when its `[PERSIST]s` arrives (Scope).
    AtScope,
    /// Lazily, by a periodic write-back of dirty keys (Eventual-p).
    Lazy,
}

/// What a write's completion waits for: C = every replica applied it,
/// P = every replica (and the coordinator) persisted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Immediate,
    C,
    P,
    CP,
}

impl Gate {
    pub fn holds(self, c: bool, p: bool) -> bool {
        match self {
            Gate::Immediate => true,
            Gate::C => c,
            Gate::P => p,
            Gate::CP => c && p,
        }
    }
}

/// When a follower may apply an UPD (docs/DDP.md open point 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepGate {
    /// Eventual consistency: on arrival.
    None,
    /// Causal with Scope or Eventual persistency: once its cauhist is applied here.
    Applied,
    /// Causal with Strict, Synch or RE-p: once its cauhist is persisted here (DDP §8.1.2).
    Persisted,
}

/// What a read of the UPD family returns (docs/DDP.md open point 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdRead {
    /// The latest visible version, at once (Strict, Scope, Eventual-p).
    Latest,
    /// The latest persisted version (Synch), at once once the session's
    /// causal past is persisted here (Causal) or, for Eventual, the
    /// session's own newer write.
    Persisted,
    /// The latest visible version once it is persisted here (RE-p, DDP §5.3).
    LatestPersisted,
}

/// The per-model rules of the UPD family (the Causal and Eventual models).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdRules {
    /// Causal: UPDs carry a cauhist and sessions a causal past.
    pub causal: bool,
    pub gate: DepGate,
    pub read: UpdRead,
    /// UPDs go out with the write; else lazily, batched per tick (Eventual).
    pub eager: bool,
    /// Strict: followers ACK_p each UPD and the write waits for all of them.
    pub strict: bool,
}

impl UpdRules {
    fn of(m: Model) -> UpdRules {
        use Persistency as P;
        let causal = m.c == Consistency::Causal;
        let gate = match (causal, m.p) {
            (false, _) => DepGate::None,
            (true, P::Strict | P::Synch | P::Re) => DepGate::Persisted,
            (true, _) => DepGate::Applied,
        };
        let read = match m.p {
            P::Synch => UpdRead::Persisted,
            P::Re => UpdRead::LatestPersisted,
            _ => UpdRead::Latest,
        };
        UpdRules {
            causal,
            gate,
            read,
            eager: causal || m.p == P::Strict,
            strict: m.p == P::Strict,
        }
    }
}

/// The per-model rules of Transactional consistency (the five trans-*
/// models; DDP §5.4; the decisions are in `trans/mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransRules {
    /// Strict, Synch: INITX is persisted before its ACK, a follower persists
    /// the transaction's writes before it votes at ENDX, and the decider
    /// persists the commit before End replies.
    pub durable: bool,
    /// Strict: a follower persists each write on its INV and ACK_p's it;
    /// the write replies after every ACK_p and the local persist.
    pub strict: bool,
    /// RE-p: every node persists a committed transaction at once and
    /// ACK_p's it; the decider sends VAL_p; reads wait for it.
    pub read_persisted: bool,
    /// Eventual-p: committed transactions are persisted lazily.
    pub lazy: bool,
}

impl TransRules {
    fn of(p: Persistency) -> TransRules {
        use Persistency as P;
        TransRules {
            durable: matches!(p, P::Strict | P::Synch),
            strict: p == P::Strict,
            read_persisted: p == P::Re,
            lazy: p == P::Eventual,
        }
    }
}

/// The per-model rules. The fields describe the INV/ACK/VAL family (the
/// Lin and RE models); `upd` is set for the UPD family (Causal, Eventual), which
/// reads of the other fields only `persist` and `reply` (`read` is
/// `Immediate`: it has no VALs); `trans` for Transactional consistency
/// (trans-*), whose keys use the INV family's VALs only to validate
/// versions after a crash under RE-p (a replay, as re-re does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub upd: Option<UpdRules>,
    pub trans: Option<TransRules>,
    pub ack: AckMode,
    pub persist: PersistIssue,
    /// When the coordinator replies to the client's write.
    pub reply: Gate,
    /// Which VALs are sent: VAL_c when C holds, VAL_p when P holds. With
    /// `combined_val`, one VAL (c and p) once both hold (Synch).
    pub val_c: bool,
    pub val_p: bool,
    pub combined_val: bool,
    /// What a node needs before it serves the newest version of a key. In
    /// this family a node applies on INV, so a VAL_p validates apply too.
    pub read: Gate,
}

impl Rules {
    fn of(m: Model) -> Rules {
        use Persistency as P;
        if matches!(m.c, Consistency::Causal | Consistency::Eventual) {
            return Rules::upd(m);
        }
        if m.c == Consistency::Trans {
            return Rules::trans(m);
        }
        let lin = m.c == Consistency::Lin;
        let base = Rules {
            upd: None,
            trans: None,
            ack: AckMode::ConsistencyOnly,
            persist: PersistIssue::Lazy,
            reply: Gate::C,
            val_c: true,
            val_p: false,
            combined_val: false,
            read: Gate::C,
        };
        match m.p {
            // Rows 1 and 6: two ACKs, two VALs; the write waits for every persist.
            P::Strict => Rules {
                ack: AckMode::Split,
                persist: PersistIssue::OnReceipt,
                reply: if lin { Gate::CP } else { Gate::P },
                val_p: true,
                ..base
            },
            // Rows 2 and 7: one ACK after apply and persist, one VAL.
            P::Synch => Rules {
                ack: AckMode::Combined,
                persist: PersistIssue::AtApply,
                reply: if lin { Gate::CP } else { Gate::Immediate },
                val_c: false,
                combined_val: true,
                read: Gate::CP,
                ..base
            },
            // Rows 3 and 8: reads wait for VAL_p (persisted everywhere).
            P::Re => Rules {
                ack: if lin {
                    AckMode::Split
                } else {
                    AckMode::Combined
                },
                persist: PersistIssue::AtApply,
                reply: if lin { Gate::C } else { Gate::Immediate },
                val_c: false,
                val_p: lin,
                combined_val: !lin,
                read: if lin { Gate::P } else { Gate::CP },
                ..base
            },
            // Rows 4 and 9: per-write consistency round; persistence per scope.
            P::Scope => Rules {
                persist: PersistIssue::AtScope,
                reply: if lin { Gate::C } else { Gate::Immediate },
                ..base
            },
            // Rows 5 and 10: persistence is lazy and never awaited.
            P::Eventual => Rules {
                reply: if lin { Gate::C } else { Gate::Immediate },
                ..base
            },
        }
    }

    /// Rows 16–25: the persist issue point, and Strict's reply after every ACK_p.
    fn upd(m: Model) -> Rules {
        use Persistency as P;
        let persist = match m.p {
            P::Strict => PersistIssue::OnReceipt,
            P::Synch | P::Re => PersistIssue::AtApply,
            P::Scope => PersistIssue::AtScope,
            P::Eventual => PersistIssue::Lazy,
        };
        let reply = if m.p == P::Strict {
            Gate::P
        } else {
            Gate::Immediate
        };
        let upd = Some(UpdRules::of(m));
        Rules {
            upd,
            trans: None,
            ack: AckMode::ConsistencyOnly,
            persist,
            reply,
            val_c: false,
            val_p: false,
            combined_val: false,
            read: Gate::Immediate,
        }
    }

    /// Rows 11–15. The INV-family fields serve the replay that validates a
    /// key after a crash (RE-p: reads wait until it is persisted
    /// everywhere) and say whether versions adopted from a copy are persisted.
    fn trans(m: Model) -> Rules {
        let persist = if m.p == Persistency::Scope {
            PersistIssue::AtScope
        } else {
            PersistIssue::AtApply
        };
        let read = if m.p == Persistency::Re {
            Gate::P
        } else {
            Gate::Immediate
        };
        let trans = Some(TransRules::of(m.p));
        Rules {
            upd: None,
            trans,
            ack: AckMode::Combined,
            persist,
            reply: Gate::Immediate,
            val_c: false,
            val_p: false,
            combined_val: true,
            read,
        }
    }
}
