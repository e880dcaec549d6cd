//! Fuzz targets of the message-passing runtime (`tandem-net`) and the
//! protocols on it: the stream hello and the configuration manager's
//! frames, frame cutting, DDP and Kite peer messages fed to live nodes, NVM
//! files replayed by `NvmFile::open`, and DDP nodes recovered from
//! arbitrary NVM images. See `tandem_fuzz` for the engine and the budget.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tandem_ddp::{DdpFactory, DdpNode, HealOpts, Model, Params};
use tandem_fuzz::{peak_alloc, Fuzz, Rng};
use tandem_kite::simcheck::KiteFactory;
use tandem_kite::{KiteConfig, KiteNode};
use tandem_net::conn::{cut_frames, decode};
use tandem_net::nvm_file::NvmFile;
use tandem_net::protocol::{land, Command, Input, NodeFactory, Nvm, Protocol, NO_ANSWER};
use tandem_net::wire::{frame, put, ClientReq, Frames, FromManager, Heartbeat, Hello, MAX_FRAME};
use tandem_net::{Config, NodeId};

// ------------------------------------------------------ a tiny in-memory cluster

/// Nodes of one protocol wired together in memory: messages, persists and
/// timers are delivered in a seeded order. Used to make real messages,
/// records and warmed-up node states for the targets below.
struct Cluster<P: Protocol> {
    nodes: Vec<P>,
    nvm: Vec<Nvm<P::Record>>,
    config: Config,
    now: u64,
    queue: VecDeque<(NodeId, NodeId, P::Msg)>,
    done: VecDeque<(NodeId, u64)>,
    timers: BinaryHeap<Reverse<(u64, NodeId, u64)>>,
    /// Every message sent, as sent.
    sent: Vec<P::Msg>,
    records: Vec<P::Record>,
}

impl<P: Protocol> Cluster<P> {
    fn new(f: &impl NodeFactory<P>, n: u16) -> Self {
        let config = Config::new(1, (0..n).collect());
        Cluster {
            nodes: (0..n).map(|i| f.start(i, &config)).collect(),
            nvm: (0..n).map(|_| Nvm::new()).collect(),
            config,
            now: 1,
            queue: VecDeque::new(),
            done: VecDeque::new(),
            timers: BinaryHeap::new(),
            sent: Vec::new(),
            records: Vec::new(),
        }
    }

    fn step(&mut self, n: NodeId, input: Input<P>) {
        let mut out = Vec::new();
        self.nodes[n as usize].step(self.now, input, &mut out);
        for c in out {
            match c {
                Command::Send { to, msg } => {
                    self.sent.push(msg.clone());
                    self.queue.push_back((to, n, msg));
                }
                Command::Broadcast { msg } => {
                    self.sent.push(msg.clone());
                    for o in self.config.others(n) {
                        self.queue.push_back((o, n, msg.clone()));
                    }
                }
                Command::Persist { token, record } => {
                    self.records.push(record.clone());
                    land(&mut self.nvm[n as usize], record);
                    if token != NO_ANSWER {
                        self.done.push_back((n, token));
                    }
                }
                Command::SetTimer { token, at_ns } => self.timers.push(Reverse((at_ns, n, token))),
                Command::Reply { .. } | Command::Note { .. } | Command::InOrder { .. } => {}
            }
        }
    }

    /// Run `steps` deliveries, issuing `op(rng)` to a random node now and then.
    fn run(&mut self, rng: &mut Rng, steps: usize, mut op: impl FnMut(&mut Rng, u64) -> P::Op) {
        let n = self.nodes.len() as u16;
        for i in 0..steps {
            self.now += 1_000;
            match rng.below(8) {
                0 => {
                    let node = rng.below(n as usize) as NodeId;
                    let session = 1 + rng.below(4) as u64 + 100 * node as u64;
                    let o = op(rng, i as u64);
                    self.step(
                        node,
                        Input::Client {
                            session,
                            req: i as u64,
                            op: o,
                        },
                    );
                }
                1 | 2 => {
                    if let Some((node, token)) = self.done.pop_front() {
                        self.step(node, Input::PersistDone { token });
                    }
                }
                3 => {
                    if let Some(Reverse((at, node, token))) = self.timers.pop() {
                        self.now = self.now.max(at);
                        self.step(node, Input::Timer { token });
                    }
                }
                _ => {
                    if let Some((to, from, msg)) = self.queue.pop_front() {
                        self.step(to, Input::Recv { from, msg });
                    }
                }
            }
        }
    }
}

fn ddp_op(rng: &mut Rng, i: u64) -> tandem_ddp::Op {
    use tandem_ddp::Op;
    let key = rng.below(8) as u64;
    let tx = 1 + i / 4;
    match rng.below(7) {
        0 => Op::read(key),
        1 | 2 => Op::write(key, rng.next_u64(), 1 + i / 8),
        3 => Op::Persist {
            scope: 1 + i / 8,
            writes: rng.below(3) as u32,
        },
        4 => Op::Begin { tx },
        5 => Op::Write {
            key,
            value: i,
            scope: 0,
            after: Default::default(),
            tx: Some(tx),
        },
        _ => Op::End { tx },
    }
}

fn kite_op(rng: &mut Rng, i: u64) -> tandem_kite::Op {
    use tandem_kite::Op;
    let key = rng.below(8) as u64;
    match rng.below(6) {
        0 => Op::Read(key),
        1 => Op::Write(key, i),
        2 => Op::Acquire(key),
        3 => Op::Release(key, i),
        4 => Op::Faa(key, 1),
        _ => Op::Cas {
            key,
            expected: rng.below(3) as u64,
            new: i,
            weak: rng.bool(),
        },
    }
}

/// The engines' handler assertions assume the protocol's fault model: peers
/// that crash but follow the protocol (every link is authenticated first).
/// A forged peer message may contradict what the node knows and trip one,
/// stopping the node (fail-stop); that is not what these targets look for.
/// They step arbitrary messages with the assertions off and check that
/// nothing else panics and the node's own invariants hold.
const FUZZ_PARAMS: Params = Params {
    assertions: false,
    ..Params::SIM
};

/// DDP under every model (and HEAL recovery for the models it supports).
fn ddp_factories() -> Vec<(String, DdpFactory)> {
    let mut v = Vec::new();
    for m in Model::all() {
        v.push((format!("{m:?}"), DdpFactory::new(m, FUZZ_PARAMS)));
        if HealOpts::supports(m) {
            let mut f = DdpFactory::new(m, FUZZ_PARAMS);
            f.heal = Some(HealOpts::default());
            v.push((format!("{m:?}+heal"), f));
        }
    }
    v
}

/// A warmed-up 3-node DDP cluster per configuration: its node 0, and the
/// messages and records the run made.
struct DdpWarm {
    name: String,
    factory: DdpFactory,
    node: DdpNode,
    msgs: Vec<tandem_ddp::Msg>,
    records: Vec<tandem_ddp::Record>,
    nvm: Nvm<tandem_ddp::Record>,
}

fn ddp_warm() -> Vec<DdpWarm> {
    {
        ddp_factories()
            .into_iter()
            .enumerate()
            .map(|(i, (name, factory))| {
                let mut c = Cluster::new(&factory, 3);
                c.run(&mut Rng::new(i as u64), 600, ddp_op);
                DdpWarm {
                    name,
                    node: c.nodes[0].clone(),
                    msgs: c.sent,
                    records: c.records,
                    nvm: c.nvm[0].clone(),
                    factory,
                }
            })
            .collect()
    }
}

fn kite_msgs() -> &'static [tandem_kite::Msg] {
    static M: OnceLock<Vec<tandem_kite::Msg>> = OnceLock::new();
    M.get_or_init(|| {
        let mut c = Cluster::new(&KiteFactory(KiteConfig::default()), 3);
        c.run(&mut Rng::new(5), 2_000, kite_op);
        c.sent
    })
}

// ------------------------------------------------------ hello, manager, cutting

/// Peak bytes a decode of `len` input bytes may hold: serde preallocates at
/// most 1 MiB per sequence from a claimed length (`size_hint::cautious`),
/// and no more than a few sequences are open at once; the rest is in
/// proportion to the input.
fn decode_bound(len: usize) -> usize {
    64 * len + (4 << 20)
}

fn bincode_target<T: Serialize + DeserializeOwned + std::fmt::Debug>(
    name: &str,
    samples: impl Fn(&mut Rng) -> T + 'static,
) {
    Fuzz::new(name).run(
        move |rng| bincode::serialize(&samples(rng)).unwrap(),
        |b| {
            let (r, a) = peak_alloc(|| decode::<T>(b));
            assert!(
                a.peak <= decode_bound(b.len()),
                "{} bytes held decoding {}",
                a.peak,
                b.len()
            );
            match r {
                Ok(v) => {
                    // What decodes encodes back to what it decoded from
                    // (bincode may accept trailing bytes: compare the prefix).
                    let again = bincode::serialize(&v).unwrap();
                    let back: T = decode(&again).expect("re-encoding decodes");
                    assert_eq!(format!("{back:?}"), format!("{v:?}"));
                    format!(
                        "ok {}",
                        format!("{v:?}").chars().take(8).collect::<String>()
                    )
                }
                Err(e) => e.to_string().chars().take(24).collect(),
            }
        },
    );
}

fn gen_hello(rng: &mut Rng) -> Hello {
    match rng.below(4) {
        0 => Hello::Peer {
            node: rng.interesting_u64() as u16,
        },
        1 => Hello::Client,
        2 => Hello::ToManager {
            node: rng.below(8) as u16,
            boot: rng.interesting_u64(),
        },
        _ => Hello::Stats,
    }
}

#[test]
fn fuzz_net_hello() {
    bincode_target::<Hello>("net Hello (conn::decode)", gen_hello);
}

#[test]
fn fuzz_net_client_req() {
    bincode_target::<ClientReq<tandem_ddp::Op>>("net ClientReq<ddp Op>", |rng| {
        let i = rng.below(100) as u64;
        ClientReq {
            session: rng.interesting_u64(),
            req: rng.next_u64(),
            op: ddp_op(rng, i),
        }
    });
}

#[test]
fn fuzz_net_from_manager() {
    bincode_target::<FromManager>("net FromManager", |rng| match rng.bool() {
        true => FromManager::Lease {
            seq: rng.interesting_u64(),
        },
        false => FromManager::Config(Config::new(
            rng.interesting_u64(),
            (0..rng.len(8))
                .map(|_| rng.interesting_u64() as u16)
                .collect(),
        )),
    });
}

/// A reader that hands out its bytes in random short pieces.
struct Trickle<'a> {
    data: &'a [u8],
    rng: Rng,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.rng.one_in(10) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = (1 + self.rng.below(300))
            .min(buf.len())
            .min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The configuration manager's side of a node's stream, as `manager.rs`
/// reads it: a `Hello::ToManager`, then heartbeats, through `Frames`.
/// Memory stays in proportion to the bytes that arrived.
#[test]
fn fuzz_net_manager_stream() {
    let gen = |rng: &mut Rng| {
        let mut b = Vec::new();
        put(
            &mut b,
            &Hello::ToManager {
                node: rng.below(4) as u16,
                boot: rng.next_u64(),
            },
        );
        for _ in 0..rng.len(6) {
            put(
                &mut b,
                &Heartbeat {
                    seq: rng.interesting_u64(),
                    caught_up: rng.next_u64() % 2 == 0,
                    epoch: rng.interesting_u64(),
                },
            );
        }
        b
    };
    Fuzz::new("net manager stream (Frames: Hello::ToManager, Heartbeat)").run(gen, |b| {
        let ((label, got), a) = peak_alloc(|| {
            // The reader's own buffer is the `BufReader`'s 256 KiB, made at
            // `Frames::new`; what `next` holds beyond it is measured.
            let mut frames = Frames::new(Trickle {
                data: b,
                rng: Rng::new(b.len() as u64),
            });
            let mut got = 0;
            let label = match frames.next::<Hello>() {
                Ok(Some(Hello::ToManager { .. })) => loop {
                    match frames.next::<Heartbeat>() {
                        Ok(Some(_)) => got += 1,
                        Ok(None) => break "heartbeats, end".to_string(),
                        Err(e) => break format!("heartbeats, {:?}", e.kind()),
                    }
                },
                Ok(Some(h)) => format!("another hello {:?}", h.speaker().0),
                Ok(None) => "empty".into(),
                Err(e) => format!("{:?}", e.kind()),
            };
            (label, got)
        });
        assert!(
            a.peak <= (256 << 10) + 2 * b.len() + 4096,
            "{} bytes held for a {}-byte stream",
            a.peak,
            b.len()
        );
        format!("{label} {}", got.min(3))
    });
}

/// Frame cutting (`conn::cut_frames`, what `Conn::read_frames` runs on every
/// read) against a plain reference, fed in random pieces as reads land; and
/// the real `Conn` over a socket pair for the same bytes.
#[test]
fn fuzz_net_frame_cutting() {
    let gen = |rng: &mut Rng| {
        let mut b = Vec::new();
        for _ in 0..1 + rng.len(8) {
            let n = if rng.one_in(16) {
                40_000 + rng.below(60_000)
            } else {
                rng.len(200)
            };
            put(&mut b, &rng.bytes(n));
        }
        b
    };
    Fuzz::new("net frame cutting (cut_frames, Conn::read_frames)")
        .max_len(300_000)
        .run(gen, |b| {
            // The reference: whole frames, in order, until a partial one or an
            // oversized prefix.
            let mut want: Vec<&[u8]> = Vec::new();
            let mut at = 0;
            let mut bad = false;
            while b.len() - at >= 4 {
                let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
                if len > MAX_FRAME {
                    bad = true;
                    break;
                }
                if b.len() - at - 4 < len {
                    break;
                }
                want.push(&b[at + 4..at + 4 + len]);
                at += 4 + len;
            }
            // Cut as the bytes arrive, keeping the unconsumed tail.
            let mut rng = Rng::new(b.len() as u64 ^ 0x55);
            let (mut buf, mut got, mut failed, mut fed) =
                (Vec::new(), Vec::<Vec<u8>>::new(), false, 0);
            while fed < b.len() && !failed {
                let n = (1 + rng.below(5000)).min(b.len() - fed);
                buf.extend_from_slice(&b[fed..fed + n]);
                fed += n;
                let cut = cut_frames(&buf, &mut |f| got.push(f.to_vec()));
                failed = cut.error.is_some();
                buf.drain(..cut.consumed);
            }
            assert_eq!(
                failed, bad,
                "an oversized prefix is an error, and only that"
            );
            assert_eq!(got.len(), want.len());
            assert!(got.iter().zip(&want).all(|(g, w)| g == w), "frames differ");
            // The real connection, over a socket pair, when the input is small
            // enough for the socket buffer.
            if b.len() <= 100_000 && !bad {
                let real = read_through_conn(b);
                assert_eq!(real.len(), want.len(), "Conn::read_frames cut differently");
                assert!(real.iter().zip(&want).all(|(g, w)| g == w));
            }
            format!("{} {}", want.len().min(4), bad)
        });
}

fn read_through_conn(b: &[u8]) -> Vec<Vec<u8>> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let (mut w, r) = std::os::unix::net::UnixStream::pair().unwrap();
    r.set_nonblocking(true).unwrap();
    // SAFETY: the descriptor is a connected stream socket we own; `TcpStream`
    // only reads and writes it (its TCP options fail harmlessly).
    let std_stream = unsafe { std::net::TcpStream::from_raw_fd(r.into_raw_fd()) };
    let mut c = tandem_net::conn::Conn::new(mio::net::TcpStream::from_std(std_stream));
    w.write_all(b).unwrap();
    drop(w);
    let mut got = Vec::new();
    loop {
        match c.read_frames(|f| got.push(f.to_vec())) {
            Ok(tandem_net::conn::ReadEnd::Closed) | Err(_) => return got,
            Ok(tandem_net::conn::ReadEnd::Open) => {}
        }
    }
}

// ------------------------------------------------------ peer messages to live nodes

/// Input: `[configuration][sender][peer stream]`. The stream is cut into
/// frames as the host cuts it; every frame that decodes as a DDP message is
/// stepped into a warmed-up node as `Input::Recv` from a member, as the
/// host does; a frame that does not decode ends the stream, as the host
/// closes it. The node's persists are acknowledged and its timers fired.
#[test]
fn fuzz_ddp_peer_messages() {
    let warm = &ddp_warm()[..];
    let gen = move |rng: &mut Rng| {
        let w = rng.below(warm.len());
        let mut b = vec![w as u8, rng.u8()];
        for _ in 0..1 + rng.len(6) {
            if warm[w].msgs.is_empty() {
                break;
            }
            put(&mut b, rng.pick(&warm[w].msgs));
        }
        b
    };
    Fuzz::new("ddp peer messages -> DdpNode::step")
        .budget_times(3.0)
        .max_len(8192)
        .run(gen, |b| ddp_check(warm, b));
}

fn ddp_check(warm: &[DdpWarm], b: &[u8]) -> String {
    if b.len() < 2 {
        return "short".to_string();
    }
    let w = &warm[b[0] as usize % warm.len()];
    let from = 1 + (b[1] % 2) as NodeId;
    let mut node = w.node.clone();
    let msgs = decode_stream::<tandem_ddp::Msg>(&b[2..]);
    let label = format!("{} {}", b[0] as usize % warm.len(), kinds(&msgs));
    drive(&mut node, from, msgs);
    label
}

/// The variant names of the first few messages: an outcome label.
fn kinds<M: std::fmt::Debug>(msgs: &[M]) -> String {
    msgs.iter()
        .take(3)
        .map(|m| {
            format!("{m:?}")
                .chars()
                .take_while(|c| c.is_alphanumeric())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Crashes the fuzzer found, as it shrank them.
#[test]
fn regression_a_lin_node_drops_upd_messages() {
    // `[Lin, Strict][from 1][frame: Msg::Upd { upds: [one zeroed Upd] }]`:
    // a node of the INV family stepped into the UPD family's handler and
    // panicked ("a UPD-family model").
    let b = tandem_fuzz::unhex(
        "0000410000000600000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    );
    ddp_check(&ddp_warm(), &b);
}

#[test]
fn regression_a_kite_replica_refuses_a_proposal_for_slot_0() {
    // A Read, then a Propose for slot 0 of a key with nothing committed:
    // the replica panicked ("a committed slot has its RMW").
    let b = tandem_fuzz::unhex(
        "0025000000040000000000000000000000000000000000000000000000000000000000000000000000004000000008000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    );
    kite_check(&b);
}

/// The same for a Kite node (fresh: Kite nodes are not `Clone`, so the
/// stream itself carries the traffic that builds its state).
#[test]
fn fuzz_kite_peer_messages() {
    let msgs = kite_msgs();
    let gen = move |rng: &mut Rng| {
        let mut b = vec![rng.u8()];
        for _ in 0..1 + rng.len(10) {
            put(&mut b, rng.pick(msgs));
        }
        b
    };
    Fuzz::new("kite peer messages -> KiteNode::step")
        .budget_times(2.0)
        .max_len(8192)
        .run(gen, kite_check);
}

fn kite_check(b: &[u8]) -> String {
    if b.is_empty() {
        return String::new();
    }
    let config = Config::new(1, vec![0, 1, 2]);
    // Assertions off, as for DDP (see `FUZZ_PARAMS`).
    let kcfg = KiteConfig {
        assertions: Some(false),
        ..KiteConfig::default()
    };
    let mut node = KiteNode::new(0, &config, kcfg);
    let from = 1 + (b[0] % 2) as NodeId;
    let msgs = decode_stream::<tandem_kite::Msg>(&b[1..]);
    let label = kinds(&msgs);
    drive(&mut node, from, msgs);
    node.check_invariants().expect("Kite invariants");
    label
}

/// The messages of a peer stream, as the host decodes them (it stops at the
/// first frame that does not decode, or an oversized prefix).
fn decode_stream<M: DeserializeOwned>(stream: &[u8]) -> Vec<M> {
    let mut frames = Vec::new();
    cut_frames(stream, &mut |f| frames.push(f.to_vec()));
    let mut msgs = Vec::new();
    for f in frames {
        match decode::<M>(&f) {
            Ok(m) => msgs.push(m),
            Err(_) => break,
        }
    }
    msgs
}

/// Step `msgs` from `from` into `node`, then answer what it asked for: its
/// persists land and its timers fire (a few rounds).
fn drive<P: Protocol>(node: &mut P, from: NodeId, msgs: Vec<P::Msg>) {
    let mut now = 10_000_000;
    let mut out = Vec::new();
    for msg in msgs {
        now += 1_000;
        node.step(now, Input::Recv { from, msg }, &mut out);
    }
    for _ in 0..3 {
        let cmds = std::mem::take(&mut out);
        for c in cmds {
            match c {
                Command::Persist { token, .. } if token != NO_ANSWER => {
                    node.step(now, Input::PersistDone { token }, &mut out)
                }
                Command::SetTimer { token, at_ns } => {
                    now = now.max(at_ns);
                    node.step(now, Input::Timer { token }, &mut out)
                }
                _ => {}
            }
        }
        out.truncate(10_000);
    }
}

// ------------------------------------------------------ NVM files and images

/// NVM files built by `NvmFile` from real DDP records, then damaged
/// (input: `[capacity selector][file bytes]`). `open` returns the image or a
/// clean error; an opened file opens again to the same image, and takes
/// an append.
#[test]
fn fuzz_nvm_file_open() {
    let warm = &ddp_warm()[..];
    let dir = std::env::temp_dir().join(format!("tandem-fuzz-nvm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.nvm");
    let gen = {
        let path = path.clone();
        move |rng: &mut Rng| {
            let _ = std::fs::remove_file(&path);
            let (mut f, _) = NvmFile::<tandem_ddp::Record>::open(&path, 4096).unwrap();
            let w = rng.pick(warm);
            for _ in 0..rng.len(20) {
                if w.records.is_empty() {
                    break;
                }
                if f.append(rng.pick(&w.records)).is_err() {
                    break;
                }
            }
            let used = f.used();
            drop(f);
            let mut bytes = std::fs::read(&path).unwrap();
            // Mostly the log and a little of the zeros after it.
            bytes.truncate(used + rng.len(64));
            let mut b = vec![rng.u8()];
            b.extend(bytes);
            b
        }
    };
    Fuzz::new("nvm NvmFile::open on damaged files")
        .max_len(8192)
        .budget_times(2.0)
        .run(gen, |b| {
            if b.is_empty() {
                return "empty".to_string();
            }
            let capacity = [16u64, 64, 4096, 8192][b[0] as usize % 4];
            std::fs::write(&path, &b[1..]).unwrap();
            let label = match NvmFile::<tandem_ddp::Record>::open(&path, capacity) {
                Ok((mut f, image)) => {
                    drop(f);
                    let (g, again) = NvmFile::<tandem_ddp::Record>::open(&path, capacity)
                        .expect("a file that opened opens again");
                    assert_eq!(again, image, "a second open recovers the same image");
                    f = g;
                    let r = tandem_ddp::Record::Incarnation(7);
                    if f.append(&r).is_ok() {
                        drop(f);
                        let (_, after) =
                            NvmFile::<tandem_ddp::Record>::open(&path, capacity).unwrap();
                        let mut want = image.clone();
                        land(&mut want, r);
                        assert_eq!(after, want, "the append landed on the recovered image");
                    }
                    format!("ok {}", image.len().min(5))
                }
                Err(e) => format!(
                    "{:?} {}",
                    e.kind(),
                    tandem_net::nvm_file::corruption(&e).map_or(0, |c| c.what.len() % 5)
                ),
            };
            let _ = std::fs::remove_file(&path);
            label
        });
    let _ = std::fs::remove_dir_all(&dir);
}

/// DDP nodes recovered (`NodeFactory::recover`) from arbitrary but
/// well-typed NVM images (input: `[configuration][bincode of Vec<Record>]`,
/// landed in order as persists land), then stepped through their restart:
/// timers, a few peer messages, a new configuration.
#[test]
fn fuzz_ddp_recover_from_image() {
    let warm = &ddp_warm()[..];
    let gen = move |rng: &mut Rng| {
        let w = rng.below(warm.len());
        let mut recs: Vec<tandem_ddp::Record> = warm[w].nvm.values().cloned().collect();
        for _ in 0..rng.len(8) {
            if !warm[w].records.is_empty() {
                recs.push(rng.pick(&warm[w].records).clone());
            }
        }
        let mut b = vec![w as u8];
        b.extend(bincode::serialize(&recs).unwrap());
        b
    };
    Fuzz::new("ddp recover(id, config, image)")
        .budget_times(2.0)
        .max_len(8192)
        .run(gen, |b| {
            if b.is_empty() {
                return "empty".to_string();
            }
            let w = &warm[b[0] as usize % warm.len()];
            let Ok(recs) = decode::<Vec<tandem_ddp::Record>>(&b[1..]) else {
                return "not records".into();
            };
            let mut image = Nvm::new();
            for r in recs {
                land(&mut image, r);
            }
            let config = Config::new(3, vec![0, 1, 2]);
            let mut node = w.factory.recover(0, &config, &image);
            let mut out = Vec::new();
            node.step(
                20_000_000,
                Input::Config(Config::new(4, vec![0, 1, 2])),
                &mut out,
            );
            let msgs: Vec<tandem_ddp::Msg> = w.msgs.iter().take(8).cloned().collect();
            drive(&mut node, 1, msgs);
            format!("{} {}", w.name.len() % 5, image.len().min(6))
        });
}

#[test]
fn warm_clusters_made_traffic() {
    let warm = &ddp_warm()[..];
    let silent: Vec<&str> = warm
        .iter()
        .filter(|w| w.msgs.is_empty())
        .map(|w| w.name.as_str())
        .collect();
    assert!(
        silent.len() < warm.len() / 2,
        "most warm-ups sent nothing: {silent:?}"
    );
    assert!(!kite_msgs().is_empty());
    // A frame helper sanity check: `frame` is `put` into a new buffer.
    let mut b = Vec::new();
    put(
        &mut b,
        &Heartbeat {
            seq: 3,
            caught_up: true,
            epoch: 4,
        },
    );
    assert_eq!(
        b,
        frame(&Heartbeat {
            seq: 3,
            caught_up: true,
            epoch: 4,
        })
    );
}

#[test]
fn regression_a_frame_prefix_alone_costs_no_memory() {
    // A stream of one length prefix claiming `MAX_FRAME` (64 MiB) and
    // nothing after it: `Frames::next` resized its buffer to the claimed
    // length before reading, before the manager checked any secret.
    let b = (MAX_FRAME as u32).to_le_bytes();
    let (r, a) = peak_alloc(|| Frames::new(&b[..]).next::<Hello>().map(|_| ()));
    assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    assert!(
        a.peak < 1 << 20,
        "{} bytes held for a 4-byte stream",
        a.peak
    );
}
