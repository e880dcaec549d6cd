//! The simulated network and NVM on a toy protocol: a node persists each
//! put, copies it to every other member, and replies once all of them
//! acknowledged having persisted it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use tandem_net::*;
use tandem_sim::Rng;

#[derive(Clone, Debug)]
struct Put {
    key: u64,
    #[allow(dead_code)]
    value: u64,
}

impl Durable for Put {
    type Slot = u64;
    fn slot(&self) -> u64 {
        self.key
    }
}

#[derive(Clone, Debug)]
enum Msg {
    Copy(Put, u64),
    Ack(u64),
}

struct Copier {
    me: NodeId,
    config: Config,
    next: u64,
    /// Per local put: (session, req, acks and own persist still missing).
    pending: BTreeMap<u64, (SessionId, u64, usize)>,
    recovered: usize,
}

impl Protocol for Copier {
    type Msg = Msg;
    type Op = Put;
    type Reply = ();
    type Record = Put;

    fn step(&mut self, _now: u64, input: Input<Self>, out: &mut Vec<Command<Self>>) {
        match input {
            Input::Client { session, req, op } => {
                let id = self.next;
                self.next += 1;
                self.pending
                    .insert(id, (session, req, self.config.members.len()));
                out.push(Command::Persist {
                    token: id,
                    record: op.clone(),
                });
                out.push(Command::Broadcast {
                    msg: Msg::Copy(op, id),
                });
            }
            Input::Recv {
                from,
                msg: Msg::Copy(put, id),
            } => {
                out.push(Command::Persist {
                    token: (from as u64 + 1) << 48 | id,
                    record: put,
                });
            }
            Input::PersistDone { token } if token >> 48 == 0 => self.count(token, out),
            Input::PersistDone { token } => out.push(Command::Send {
                to: ((token >> 48) - 1) as NodeId,
                msg: Msg::Ack(token & 0xFFFF_FFFF_FFFF),
            }),
            Input::Recv {
                msg: Msg::Ack(id), ..
            } => self.count(id, out),
            Input::Timer { .. } | Input::Config(_) => {}
        }
    }
}

impl Copier {
    fn count(&mut self, id: u64, out: &mut Vec<Command<Self>>) {
        let Some(p) = self.pending.get_mut(&id) else {
            return;
        };
        p.2 -= 1;
        if p.2 == 0 {
            let (session, req, _) = self.pending.remove(&id).unwrap();
            out.push(Command::Reply {
                session,
                req,
                result: (),
            });
        }
        let _ = self.me;
    }
}

struct Factory;
impl NodeFactory<Copier> for Factory {
    fn start(&self, me: NodeId, config: &Config) -> Copier {
        Copier {
            me,
            config: config.clone(),
            next: 0,
            pending: BTreeMap::new(),
            recovered: 0,
        }
    }
    fn recover(&self, me: NodeId, config: &Config, nvm: &Nvm<Put>) -> Copier {
        Copier {
            recovered: nvm.len(),
            ..self.start(me, config)
        }
    }
}

#[derive(Default)]
struct Log {
    done: Vec<(SessionId, u64, u64)>,
    lost: Vec<(SessionId, u64)>,
}

struct Clients {
    log: Rc<RefCell<Log>>,
    ops: u64,
}

impl Harness<Copier> for Clients {
    fn next_op(&mut self, session: SessionId, _now: u64, rng: &mut Rng) -> Option<Put> {
        if self.ops == 0 {
            return None;
        }
        self.ops -= 1;
        Some(Put {
            key: rng.below(8),
            value: session,
        })
    }
    fn completed(
        &mut self,
        session: SessionId,
        req: u64,
        _n: NodeId,
        _r: &(),
        now: u64,
        _nvm: &[Nvm<Put>],
    ) {
        self.log.borrow_mut().done.push((session, req, now));
    }
    fn lost(&mut self, session: SessionId, req: u64, _now: u64) {
        self.log.borrow_mut().lost.push((session, req));
    }
}

fn net(
    seed: u64,
    cfg: SimNetConfig,
    sessions: u64,
    ops: u64,
) -> (SimNet<Copier, Factory>, Rc<RefCell<Log>>) {
    let log = Rc::new(RefCell::new(Log::default()));
    let h = Box::new(Clients {
        log: log.clone(),
        ops,
    });
    (
        SimNet::new(
            seed,
            cfg,
            Config::new(1, vec![0, 1, 2]),
            Factory,
            h,
            sessions,
        ),
        log,
    )
}

#[test]
fn one_put_takes_the_modelled_time() {
    let cfg = SimNetConfig {
        jitter_ns: 0,
        cores: 1,
        ..SimNetConfig::default()
    };
    let (n, log) = net(1, cfg, 1, 1);
    n.start_clients();
    n.run_for(1_000_000);
    // client input (cpu) → copy travels (link) → follower cpu → persist → cpu
    // → ack travels (link) → coordinator cpu: 200+500+200+400+200+500+200,
    // and the second ack, arriving with the first, waits one more cpu slot.
    assert_eq!(log.borrow().done, vec![(0, 0, 2_400)]);
    let s = n.stats();
    assert_eq!((s.messages_sent, s.persists, s.replies), (4, 3, 1));
}

#[test]
fn a_node_with_more_cores_handles_inputs_at_once() {
    // The two acks arrive together: a second core takes the second at once.
    let cfg = SimNetConfig {
        jitter_ns: 0,
        cores: 2,
        ..SimNetConfig::default()
    };
    let (n, log) = net(1, cfg, 1, 1);
    n.start_clients();
    n.run_for(1_000_000);
    assert_eq!(log.borrow().done, vec![(0, 0, 2_200)]);
    // Under load, cores multiply what a node gets through in a given time.
    let done = |cores| {
        let cfg = SimNetConfig {
            cores,
            ..SimNetConfig::default()
        };
        let (n, log) = net(3, cfg, 60, 1_000_000);
        n.start_clients();
        n.run_for(200_000);
        let d = log.borrow().done.len();
        d
    };
    let (one, four) = (done(1), done(4));
    assert!(four > 2 * one, "4 cores: {four} puts, 1 core: {one}");
}

#[test]
fn a_seed_replays_identically_and_seeds_differ() {
    let cfg = SimNetConfig {
        drop: 0.0,
        duplicate: 0.1,
        delay: 0.2,
        delay_ns: 3_000,
        ..SimNetConfig::default()
    };
    let run = |seed| {
        let (n, log) = net(seed, cfg, 6, 300);
        n.start_clients();
        n.run_for(10_000_000);
        let done = log.borrow().done.clone();
        (done, n.stats().duplicated)
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).0, run(8).0);
    assert!(run(7).1 > 0, "duplicates were injected");
}

#[test]
fn nvm_pressure_queues_persists() {
    // One persist slot: a node's persists run one after another.
    // A cheap CPU, so that the NVM is the bottleneck.
    let many = SimNetConfig {
        cpu_ns: 20,
        ..SimNetConfig::default()
    };
    let one = SimNetConfig {
        persist_slots: 1,
        ..many
    };
    let elapsed = |cfg: SimNetConfig| {
        let (n, log) = net(3, cfg, 12, 240);
        n.start_clients();
        n.run_for(100_000_000);
        assert_eq!(log.borrow().done.len(), 240);
        let end = log.borrow().done.iter().map(|d| d.2).max().unwrap();
        end
    };
    let (slow, fast) = (elapsed(one), elapsed(many));
    assert!(
        slow > fast * 11 / 10,
        "one slot {slow} ns vs sixteen {fast} ns"
    );
}

#[test]
fn a_persist_of_many_lines_keeps_as_many_banks_busy() {
    // Sixteen banks: a persist of 16 lines takes all of them for one write,
    // as one slot would; one of 32 takes them for two.
    let cfg = |lines| SimNetConfig {
        cpu_ns: 20,
        persist_lines: lines,
        ..SimNetConfig::default()
    };
    let elapsed = |cfg: SimNetConfig| {
        let (n, log) = net(3, cfg, 12, 240);
        n.start_clients();
        n.run_for(100_000_000);
        assert_eq!(log.borrow().done.len(), 240);
        let end = log.borrow().done.iter().map(|d| d.2).max().unwrap();
        end
    };
    let one_slot = SimNetConfig {
        persist_slots: 1,
        ..cfg(1)
    };
    let (fast, sixteen, slot, thirty_two) =
        (elapsed(cfg(1)), elapsed(cfg(16)), elapsed(one_slot), elapsed(cfg(32)));
    assert!(sixteen > fast * 11 / 10, "16 lines {sixteen} ns vs 1 line {fast} ns");
    let near = |a: u64, b: u64| a.abs_diff(b) * 20 < b;
    assert!(near(sixteen, slot), "16 lines {sixteen} ns vs one slot {slot} ns");
    assert!(thirty_two > sixteen * 3 / 2, "32 lines {thirty_two} ns vs 16 {sixteen} ns");
}

#[test]
fn a_crash_keeps_nvm_loses_the_rest_and_a_restart_recovers_from_it() {
    let (n, log) = net(5, SimNetConfig::default(), 6, 100_000);
    n.start_clients();
    n.run_for(50_000);
    let before = n.nvm(1).len();
    n.crash(1);
    assert!(!n.is_up(1));
    assert!(n.nvm(1).len() >= before, "the NVM survives the crash");
    n.run_for(50_000);
    // Puts coordinated by the crashed node are lost to their clients; the
    // others wait for an ack that never comes (the toy has no epochs).
    assert!(!log.borrow().lost.is_empty());
    n.restart(1, &Config::new(2, vec![0, 1, 2]));
    assert_eq!(n.with_node(1, |p| p.unwrap().recovered), n.nvm(1).len());
    assert!(n.stats().crashes == 1 && n.stats().restarts == 1);
}

#[test]
fn in_flight_persists_land_or_not_when_the_cluster_loses_power() {
    let mut landed = 0;
    let mut lost = 0;
    for seed in 0..20 {
        // One core spreads the puts out in time, so some persist is in flight at the crash.
        let cfg = SimNetConfig {
            persist_ns: 5_000,
            cores: 1,
            ..SimNetConfig::default()
        };
        let (n, _) = net(seed, cfg, 12, 100_000);
        n.start_clients();
        n.run_for(20_000);
        n.crash_all();
        let s = n.stats();
        landed += s.persists - s.persists_lost;
        lost += s.persists_lost;
    }
    assert!(lost > 0 && landed > 0, "landed {landed}, lost {lost}");
}

#[test]
fn drops_and_partitions_stop_messages() {
    let (n, log) = net(
        9,
        SimNetConfig {
            drop: 1.0,
            ..SimNetConfig::default()
        },
        1,
        1,
    );
    n.start_clients();
    n.run_for(1_000_000);
    assert!(log.borrow().done.is_empty());
    assert_eq!(n.stats().dropped, 2);
    let (n, log) = net(9, SimNetConfig::default(), 1, 1);
    n.partition(0, 2, true);
    n.start_clients();
    n.run_for(1_000_000);
    assert!(log.borrow().done.is_empty(), "node 2 never got the copy");
    n.partition(0, 2, false);
}

/// One put on one core without jitter under `cfg`: (session, req, when done).
fn one_put(cfg: SimNetConfig) -> Vec<(SessionId, u64, u64)> {
    let cfg = SimNetConfig {
        jitter_ns: 0,
        cores: 1,
        ..cfg
    };
    let (n, log) = net(1, cfg, 1, 1);
    n.start_clients();
    n.run_for(1_000_000);
    let done = log.borrow().done.clone();
    done
}

#[test]
fn sends_and_the_application_cost_the_modelled_time() {
    // As `one_put_takes_the_modelled_time`, with 100 ns per message sent:
    // the two copies leave one after the other (300, 400), each follower's
    // ack 100 ns after its step, and the second ack again waits for the
    // first's CPU: 2,600 instead of 2,400.
    let done = one_put(SimNetConfig {
        send_ns: 100,
        ..SimNetConfig::default()
    });
    assert_eq!(done, vec![(0, 0, 2_600)]);
    // With 1,000 ns of application work on the client's request instead:
    // only that input pays it, not the copies, persists or acks.
    let done = one_put(SimNetConfig {
        app_ns: 1_000,
        ..SimNetConfig::default()
    });
    assert_eq!(done, vec![(0, 0, 3_400)], "the application cost");
}

/// Applies each put in one total order (as ZAB does) and answers it.
struct Orderer;

impl Protocol for Orderer {
    type Msg = ();
    type Op = Put;
    type Reply = ();
    type Record = Put;

    fn step(&mut self, _now: u64, input: Input<Self>, out: &mut Vec<Command<Self>>) {
        if let Input::Client { session, req, .. } = input {
            out.push(Command::InOrder { writes: 1 });
            out.push(Command::Reply {
                session,
                req,
                result: (),
            });
        }
    }
}

struct OrdererFactory;
impl NodeFactory<Orderer> for OrdererFactory {
    fn start(&self, _me: NodeId, _config: &Config) -> Orderer {
        Orderer
    }
    fn recover(&self, _me: NodeId, _config: &Config, _nvm: &Nvm<Put>) -> Orderer {
        Orderer
    }
}

impl Harness<Orderer> for Clients {
    fn next_op(&mut self, session: SessionId, now: u64, rng: &mut Rng) -> Option<Put> {
        <Clients as Harness<Copier>>::next_op(self, session, now, rng)
    }
    fn completed(&mut self, s: SessionId, req: u64, _: NodeId, _: &(), now: u64, _: &[Nvm<Put>]) {
        self.log.borrow_mut().done.push((s, req, now));
    }
}

#[test]
fn the_ordered_lane_serialises_the_writes_of_two_cores() {
    // Two sessions of one node issue at once; two cores handle both inputs
    // by 200 ns, but the lane takes their writes one after the other.
    let run = |lane_ns| {
        let cfg = SimNetConfig {
            jitter_ns: 0,
            cores: 2,
            lane_ns,
            ..SimNetConfig::default()
        };
        let log = Rc::new(RefCell::new(Log::default()));
        let h = Box::new(Clients {
            log: log.clone(),
            ops: 2,
        });
        let n = SimNet::new(1, cfg, Config::new(1, vec![0]), OrdererFactory, h, 2);
        n.start_clients();
        n.run_for(1_000_000);
        let mut at: Vec<u64> = log.borrow().done.iter().map(|d| d.2).collect();
        at.sort_unstable();
        at
    };
    assert_eq!(run(1_000), vec![1_200, 2_200]);
    assert_eq!(run(0), vec![200, 200], "no lane: both at once");
}
