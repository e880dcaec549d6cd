//! Memory-server membership (docs/DESIGN.md §4.6; Pandora paper §3.2.5): which
//! memory servers are down, where each one listens, and the reconfigurations
//! that move primaries and bring a replacement in.
//!
//! Every change of the configuration goes through a *hold*:
//! 1. [`FleetCommand::Reconfigure`] tells every compute node the new
//!    configuration. A compute node stops starting transactions, cuts its
//!    links to the memory nodes now down (their pending verbs fail at once),
//!    lets its in-flight transactions finish (each commits if every live
//!    replica took its writes, else aborts), applies the configuration and
//!    answers [`FleetEvent::Applied`]. It keeps holding.
//! 2. Once every live compute node applied the epoch, and no failed compute
//!    node is still being revoked or recovered, the fleet either resumes
//!    ([`FleetCommand::Resume`]) or, when a replacement is due, has it filled
//!    while nothing runs ([`FleetCommand::Rereplicate`], then a second hold
//!    that admits it).
//!
//! Why a hold is enough, even when a memory server is only slow (suspected,
//! not dead): no transaction runs under the new configuration until every
//! compute node has stopped running under the old one. In between, a
//! transaction that skipped a cut memory node still held the locks it took
//! there, and those locks are never released on the cut node: any
//! transaction that still reads through it finds them and aborts.
//!
//! Sans-IO like [`crate::Membership`]: time comes in as an argument, and the
//! caller passes which compute nodes must apply (`alive`) and whether any
//! compute recovery is still under way (`busy`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::ids::NodeId;

/// A memory node's index (its place in the address list).
pub type MemNode = u16;

/// The durable part: stored with the membership state before anyone is told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// Bumped by every reconfiguration; compute nodes apply epochs in order.
    pub epoch: u64,
    /// Where each memory node listens, in memory-node order.
    pub addrs: Vec<String>,
    /// Memory nodes declared failed and not replaced yet.
    pub down: BTreeSet<MemNode>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetEvent {
    /// Memory node `node` answered a heartbeat probe.
    Heard { node: MemNode },
    /// Time passed.
    Tick,
    /// Compute node `compute` applied configuration `epoch` and drained.
    Applied { compute: NodeId, epoch: u64 },
    /// A replacement server for down memory node `node` listens at `addr`.
    Replacement { node: MemNode, addr: String },
    /// Re-replication onto the replacement finished (`ok`) or failed.
    Copied { node: MemNode, epoch: u64, ok: bool },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetCommand {
    /// Tell every compute node (and the service's own recovery coordinator)
    /// this configuration; each holds, applies, drains and answers `Applied`.
    Reconfigure { config: MemoryConfig },
    /// Everyone holds under `epoch`: copy every partition `node` replicates
    /// onto the server at `addr`, then answer `Copied`.
    Rereplicate {
        node: MemNode,
        addr: String,
        epoch: u64,
    },
    /// Transactions may start again under `epoch`.
    Resume { epoch: u64 },
    /// A replacement that cannot be taken (its node is not down).
    Refuse { node: MemNode, reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum After {
    Resume,
    Copy { node: MemNode, addr: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Steady,
    Holding {
        epoch: u64,
        then: After,
    },
    Copying {
        node: MemNode,
        addr: String,
        epoch: u64,
    },
}

#[derive(Clone, Debug)]
pub struct Fleet {
    timeout_ns: u64,
    config: MemoryConfig,
    /// When each memory node last answered (`None`: not probed yet).
    heard_ns: Vec<Option<u64>>,
    phase: Phase,
    /// Replacements announced while another reconfiguration ran.
    queued: VecDeque<(MemNode, String)>,
    /// The newest epoch each compute node applied. A hold ends when every
    /// compute node alive *then* has applied its epoch, joiners included.
    applied: BTreeMap<NodeId, u64>,
    /// Declarations of memory nodes failed, for reports.
    pub declared: u64,
    /// Memory nodes that may be down at once: one fewer than the copies of
    /// each partition ([`Fleet::tolerating`]; unlimited by default).
    tolerates: usize,
}

impl Fleet {
    /// A fleet of memory servers at `addrs`, all up; a node that answers no
    /// probe for `timeout_ns` is declared failed.
    pub fn new(addrs: Vec<String>, timeout_ns: u64) -> Fleet {
        let config = MemoryConfig {
            epoch: 0,
            addrs,
            down: BTreeSet::new(),
        };
        Fleet::with_config(config, timeout_ns, Phase::Steady)
    }

    /// A fleet resumed from stored `config` by a restarted service. If the
    /// configuration ever changed, compute nodes may be holding, or running
    /// under different epochs: the first step holds everyone again under a
    /// new epoch before anything resumes.
    pub fn restore(config: MemoryConfig, timeout_ns: u64) -> Fleet {
        let phase = if config.epoch > 0 {
            Phase::Holding {
                epoch: u64::MAX, // replaced on the first step
                then: After::Resume,
            }
        } else {
            Phase::Steady
        };
        Fleet::with_config(config, timeout_ns, phase)
    }

    fn with_config(config: MemoryConfig, timeout_ns: u64, phase: Phase) -> Fleet {
        Fleet {
            timeout_ns,
            heard_ns: vec![None; config.addrs.len()],
            config,
            phase,
            queued: VecDeque::new(),
            applied: BTreeMap::new(),
            declared: 0,
            tolerates: usize::MAX,
        }
    }

    /// Never have more than `f` memory nodes down at once: with `f + 1`
    /// copies of each partition, declaring one more failed could leave a
    /// partition with no copy. Silence beyond that is more likely this
    /// service's own network than `f + 1` failures; those nodes wait to be
    /// heard again (a replacement admitted makes room).
    pub fn tolerating(mut self, f: usize) -> Fleet {
        self.tolerates = f;
        self
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// Whether transactions must hold (a reconfiguration is under way).
    pub fn holding(&self) -> bool {
        self.phase != Phase::Steady
    }

    /// Whether every compute node in `alive` applied the current hold: no
    /// transaction runs anywhere (a replacement's copy counts too).
    pub fn quiesced(&self, alive: &BTreeSet<NodeId>) -> bool {
        match &self.phase {
            Phase::Holding { epoch, .. } => *epoch != u64::MAX && self.all_applied(*epoch, alive),
            Phase::Copying { .. } => true,
            Phase::Steady => false,
        }
    }

    fn all_applied(&self, epoch: u64, alive: &BTreeSet<NodeId>) -> bool {
        alive
            .iter()
            .all(|c| self.applied.get(c).is_some_and(|&e| e >= epoch))
    }

    /// The epoch transactions may run under, once steady.
    pub fn resumed_epoch(&self) -> Option<u64> {
        (self.phase == Phase::Steady).then_some(self.config.epoch)
    }

    /// Step. `alive`: compute nodes that must apply each reconfiguration;
    /// `busy`: a failed compute node is still being revoked or recovered
    /// (nothing resumes, and nothing is copied, until it is done).
    pub fn step(
        &mut self,
        now_ns: u64,
        event: FleetEvent,
        alive: &BTreeSet<NodeId>,
        busy: bool,
    ) -> Vec<FleetCommand> {
        let mut out = Vec::new();
        if matches!(&self.phase, Phase::Holding { epoch, .. } if *epoch == u64::MAX) {
            self.hold(After::Resume, &mut out);
        }
        match event {
            FleetEvent::Heard { node } => {
                if let Some(h) = self.heard_ns.get_mut(node as usize) {
                    *h = Some(now_ns);
                }
            }
            FleetEvent::Tick => self.detect(now_ns, &mut out),
            FleetEvent::Applied { compute, epoch } => {
                let e = self.applied.entry(compute).or_default();
                *e = (*e).max(epoch);
            }
            FleetEvent::Replacement { node, addr } => self.replacement(node, addr, &mut out),
            FleetEvent::Copied { node, epoch, ok } => {
                self.copied(now_ns, node, epoch, ok, &mut out)
            }
        }
        self.progress(alive, busy, &mut out);
        out
    }

    /// Declare every memory node that stayed silent past the timeout.
    fn detect(&mut self, now_ns: u64, out: &mut Vec<FleetCommand>) {
        let mut failed = Vec::new();
        for (n, h) in self.heard_ns.iter_mut().enumerate() {
            let n = n as MemNode;
            if self.config.down.contains(&n) {
                continue;
            }
            let last = *h.get_or_insert(now_ns);
            if now_ns.saturating_sub(last) > self.timeout_ns {
                failed.push(n);
            }
        }
        if failed.is_empty() || self.config.down.len() + failed.len() > self.tolerates {
            return;
        }
        self.config.down.extend(failed.iter().copied());
        self.declared += failed.len() as u64;
        // A copy under way may have lost its source: it reports back, and
        // its replacement is announced again.
        let then = match &self.phase {
            Phase::Holding { then, .. } => then.clone(),
            _ => After::Resume,
        };
        self.hold(then, out);
    }

    /// A new epoch, held until every compute node in `alive` applied it.
    fn hold(&mut self, then: After, out: &mut Vec<FleetCommand>) {
        self.config.epoch += 1;
        self.phase = Phase::Holding {
            epoch: self.config.epoch,
            then,
        };
        out.push(FleetCommand::Reconfigure {
            config: self.config.clone(),
        });
    }

    fn replacement(&mut self, node: MemNode, addr: String, out: &mut Vec<FleetCommand>) {
        let copying = matches!(&self.phase, Phase::Copying { node: n, .. } if *n == node)
            || matches!(&self.phase, Phase::Holding { then: After::Copy { node: n, .. }, .. } if *n == node);
        if !self.config.down.contains(&node) || copying {
            let reason = if copying {
                format!("memory node {node} is being replaced already")
            } else {
                format!("memory node {node} is not down")
            };
            out.push(FleetCommand::Refuse { node, reason });
            return;
        }
        self.queued.retain(|(n, _)| *n != node);
        self.queued.push_back((node, addr));
    }

    fn copied(
        &mut self,
        now_ns: u64,
        node: MemNode,
        epoch: u64,
        ok: bool,
        out: &mut Vec<FleetCommand>,
    ) {
        let Phase::Copying {
            node: n,
            addr,
            epoch: e,
        } = &self.phase
        else {
            return;
        };
        if *n != node || *e != epoch {
            return;
        }
        if ok {
            self.config.addrs[node as usize] = addr.clone();
            self.config.down.remove(&node);
        }
        // The copy read from every live node, however long it took (the
        // runtime may not have stepped their probe answers meanwhile).
        for (n, h) in self.heard_ns.iter_mut().enumerate() {
            if !self.config.down.contains(&(n as MemNode)) {
                *h = Some(now_ns);
            }
        }
        // Admitted (or not): a second hold puts everyone on the new epoch.
        self.hold(After::Resume, out);
    }

    /// Finish a hold once everyone applied it and no compute recovery is
    /// under way; start a queued replacement when steady.
    fn progress(&mut self, alive: &BTreeSet<NodeId>, busy: bool, out: &mut Vec<FleetCommand>) {
        loop {
            let before = self.phase.clone();
            self.progress_once(alive, busy, out);
            if self.phase == before {
                return;
            }
        }
    }

    fn progress_once(&mut self, alive: &BTreeSet<NodeId>, busy: bool, out: &mut Vec<FleetCommand>) {
        self.applied.retain(|c, _| alive.contains(c));
        if let Phase::Holding { epoch, then } = &self.phase {
            let epoch = *epoch;
            if busy || !self.all_applied(epoch, alive) {
                return;
            }
            match then.clone() {
                After::Resume => {
                    self.phase = Phase::Steady;
                    out.push(FleetCommand::Resume { epoch });
                }
                After::Copy { node, addr } if self.config.down.contains(&node) => {
                    self.phase = Phase::Copying {
                        node,
                        addr: addr.clone(),
                        epoch,
                    };
                    out.push(FleetCommand::Rereplicate { node, addr, epoch });
                }
                After::Copy { .. } => {
                    self.phase = Phase::Steady;
                    out.push(FleetCommand::Resume { epoch });
                }
            }
        }
        if self.phase == Phase::Steady {
            if let Some((node, addr)) = self.queued.pop_front() {
                self.hold(After::Copy { node, addr }, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 100;

    fn fleet() -> Fleet {
        Fleet::new(vec!["a".into(), "b".into(), "c".into()], T)
    }

    fn alive(nodes: &[NodeId]) -> BTreeSet<NodeId> {
        nodes.iter().copied().collect()
    }

    /// Probe answers from every node but `silent` at each tick up to `until`.
    fn run(
        f: &mut Fleet,
        from: u64,
        until: u64,
        silent: &[MemNode],
        c: &BTreeSet<NodeId>,
    ) -> Vec<FleetCommand> {
        let mut out = Vec::new();
        for t in (from..=until).step_by(10) {
            for n in 0..3 {
                if !silent.contains(&n) {
                    out.extend(f.step(t, FleetEvent::Heard { node: n }, c, false));
                }
            }
            out.extend(f.step(t, FleetEvent::Tick, c, false));
        }
        out
    }

    #[test]
    fn a_silent_memory_node_is_declared_and_everyone_holds_until_all_applied() {
        let (mut f, c) = (fleet(), alive(&[1, 2]));
        assert!(run(&mut f, 0, 90, &[], &c).is_empty(), "everyone answers");
        let out = run(&mut f, 100, 250, &[1], &c);
        let config = MemoryConfig {
            epoch: 1,
            addrs: vec!["a".into(), "b".into(), "c".into()],
            down: [1].into(),
        };
        assert_eq!(out, vec![FleetCommand::Reconfigure { config }]);
        assert!(f.holding());
        assert!(f
            .step(
                260,
                FleetEvent::Applied {
                    compute: 1,
                    epoch: 1
                },
                &c,
                false
            )
            .is_empty());
        // A stale answer does not count.
        assert!(f
            .step(
                261,
                FleetEvent::Applied {
                    compute: 2,
                    epoch: 0
                },
                &c,
                false
            )
            .is_empty());
        // Node 2 applied, but a compute recovery is under way: still holding.
        assert!(f
            .step(
                262,
                FleetEvent::Applied {
                    compute: 2,
                    epoch: 1
                },
                &c,
                true
            )
            .is_empty());
        assert_eq!(
            f.step(263, FleetEvent::Tick, &c, false),
            vec![FleetCommand::Resume { epoch: 1 }]
        );
        assert_eq!(f.resumed_epoch(), Some(1));
        assert_eq!(f.declared, 1);
    }

    /// A membership cut off from every memory server hears none of them.
    /// Declaring them all failed would throw away every copy of the data
    /// (the nemesis's `manager` fault did, over real processes): no more
    /// than the replicas tolerate are ever down at once, and silent nodes
    /// beyond that wait to be heard again.
    #[test]
    fn no_more_memory_nodes_are_declared_than_the_replicas_tolerate() {
        let (mut f, c) = (fleet().tolerating(1), alive(&[1]));
        assert!(run(&mut f, 0, 300, &[0, 1, 2], &c).is_empty());
        assert!(f.config().down.is_empty() && !f.holding());
        // Heard again: nothing happened. Then one falls silent: declared.
        assert!(run(&mut f, 310, 400, &[], &c).is_empty());
        let out = run(&mut f, 410, 600, &[2], &c);
        assert!(
            matches!(&out[..], [FleetCommand::Reconfigure { config }] if config.down == [2].into())
        );
        // A second one falls silent too: not declared while 2 is down.
        run(&mut f, 610, 900, &[1, 2], &c);
        assert_eq!(f.config().down, [2].into());
        assert_eq!(f.declared, 1);
    }

    /// A compute node that joins during a hold may have been told the old
    /// configuration and resumed under it: it must apply the new one too.
    #[test]
    fn a_compute_node_that_joins_during_a_hold_is_waited_for() {
        let (mut f, c) = (fleet(), alive(&[1]));
        run(&mut f, 0, 250, &[2], &c);
        let joined = alive(&[1, 3]);
        assert!(f
            .step(
                260,
                FleetEvent::Applied {
                    compute: 1,
                    epoch: 1
                },
                &joined,
                false
            )
            .is_empty());
        assert!(!f.quiesced(&joined));
        let out = f.step(
            261,
            FleetEvent::Applied {
                compute: 3,
                epoch: 1,
            },
            &joined,
            false,
        );
        assert_eq!(out, vec![FleetCommand::Resume { epoch: 1 }]);
    }

    #[test]
    fn a_compute_node_that_fails_during_a_hold_is_not_waited_for() {
        let (mut f, c) = (fleet(), alive(&[1, 2]));
        run(&mut f, 0, 250, &[0], &c);
        f.step(
            260,
            FleetEvent::Applied {
                compute: 1,
                epoch: 1,
            },
            &c,
            false,
        );
        let out = f.step(270, FleetEvent::Tick, &alive(&[1]), false);
        assert_eq!(out, vec![FleetCommand::Resume { epoch: 1 }]);
    }

    #[test]
    fn a_replacement_is_filled_while_everyone_holds_then_admitted_under_a_new_epoch() {
        let (mut f, c) = (fleet(), alive(&[7]));
        run(&mut f, 0, 250, &[2], &c);
        f.step(
            251,
            FleetEvent::Applied {
                compute: 7,
                epoch: 1,
            },
            &c,
            false,
        );
        assert!(!f.holding());
        // A replacement for a node that is up is refused.
        let out = f.step(
            252,
            FleetEvent::Replacement {
                node: 0,
                addr: "x".into(),
            },
            &c,
            false,
        );
        assert!(matches!(&out[..], [FleetCommand::Refuse { node: 0, .. }]));
        let out = f.step(
            253,
            FleetEvent::Replacement {
                node: 2,
                addr: "d".into(),
            },
            &c,
            false,
        );
        assert!(
            matches!(&out[..], [FleetCommand::Reconfigure { config }] if config.epoch == 2 && config.down.contains(&2))
        );
        let out = f.step(
            254,
            FleetEvent::Applied {
                compute: 7,
                epoch: 2,
            },
            &c,
            false,
        );
        assert_eq!(
            out,
            vec![FleetCommand::Rereplicate {
                node: 2,
                addr: "d".into(),
                epoch: 2
            }]
        );
        let out = f.step(
            255,
            FleetEvent::Copied {
                node: 2,
                epoch: 2,
                ok: true,
            },
            &c,
            false,
        );
        let admitted = MemoryConfig {
            epoch: 3,
            addrs: vec!["a".into(), "b".into(), "d".into()],
            down: BTreeSet::new(),
        };
        assert_eq!(out, vec![FleetCommand::Reconfigure { config: admitted }]);
        let out = f.step(
            256,
            FleetEvent::Applied {
                compute: 7,
                epoch: 3,
            },
            &c,
            false,
        );
        assert_eq!(out, vec![FleetCommand::Resume { epoch: 3 }]);
        // The replacement is probed from now on like the others.
        assert!(run(&mut f, 260, 400, &[], &c).is_empty());
    }

    #[test]
    fn a_failed_copy_resumes_degraded_and_a_restored_fleet_holds_first() {
        let (mut f, c) = (fleet(), alive(&[]));
        run(&mut f, 0, 250, &[1], &c);
        f.step(
            253,
            FleetEvent::Replacement {
                node: 1,
                addr: "d".into(),
            },
            &c,
            false,
        );
        let out = f.step(
            255,
            FleetEvent::Copied {
                node: 1,
                epoch: 2,
                ok: false,
            },
            &c,
            false,
        );
        assert!(
            matches!(&out[..], [FleetCommand::Reconfigure { config }, FleetCommand::Resume { epoch: 3 }] if config.down.contains(&1))
        );
        let mut r = Fleet::restore(f.config().clone(), T);
        assert!(r.holding());
        let out = r.step(0, FleetEvent::Tick, &alive(&[4]), false);
        assert!(matches!(&out[..], [FleetCommand::Reconfigure { config }] if config.epoch == 4));
        let out = r.step(
            1,
            FleetEvent::Applied {
                compute: 4,
                epoch: 4,
            },
            &alive(&[4]),
            false,
        );
        assert_eq!(out, vec![FleetCommand::Resume { epoch: 4 }]);
    }
}
