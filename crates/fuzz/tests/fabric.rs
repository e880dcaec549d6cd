//! Fuzz targets: the memory servers' wire (`tandem_fabric::tcp::wire`), both
//! directions, and the authentication handshake (`tandem_auth::handshake`).
//! See `tandem_fuzz` for the engine, the budget and how to run long.

use std::io::{self, Read};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tandem_auth::handshake::{Next, HELLO_BYTES, PROOF_BYTES};
use tandem_auth::{AuthError, ClientHandshake, Keyring, Role, ServerHandshake, CHALLENGE_BYTES};
use tandem_fabric::tcp::wire::{
    frame_len, read_frame, ClientMsg, FrameError, ReadFrameError, RejectReason, ServerMsg,
    FRAME_BYTES_MAX, FRAME_HEADER_BYTES,
};
use tandem_fabric::{Completion, Verb, VerbError, VerbOutput};
use tandem_fuzz::{peak_alloc, Fuzz, Rng};

// ---------------------------------------------------------------- generators

fn gen_verb(rng: &mut Rng) -> Verb {
    let addr = rng.interesting_u64();
    match rng.below(4) {
        0 => Verb::read(addr, rng.interesting_u64() as u32 % (1 << 16)),
        1 => {
            let n = rng.len(64);
            Verb::write(addr, rng.bytes(n))
        }
        2 => Verb::cas(addr, rng.interesting_u64(), rng.interesting_u64()),
        _ => Verb::faa(addr, rng.interesting_u64()),
    }
}

fn gen_client(rng: &mut Rng) -> ClientMsg {
    match rng.below(6) {
        0 => ClientMsg::Hello {
            compute: rng.interesting_u64() as u16,
            key: (rng.interesting_u64() as u128) << 64 | rng.interesting_u64() as u128,
            priority: rng.bool(),
        },
        1 | 2 => ClientMsg::Batch {
            req_id: rng.interesting_u64(),
            verbs: (0..rng.len(12)).map(|_| gen_verb(rng)).collect(),
        },
        3 => ClientMsg::Admin,
        4 => match rng.bool() {
            true => ClientMsg::Register {
                compute: rng.u8() as u16,
            },
            false => ClientMsg::Revoke {
                compute: rng.interesting_u64() as u16,
            },
        },
        _ => ClientMsg::Info,
    }
}

fn gen_completion(rng: &mut Rng) -> Completion {
    match rng.below(8) {
        0 | 1 => {
            let n = rng.len(64);
            Ok(VerbOutput::Read(rng.bytes(n)))
        }
        2 => Ok(VerbOutput::Write),
        3 => Ok(VerbOutput::Cas(rng.interesting_u64())),
        4 => Ok(VerbOutput::Faa(rng.interesting_u64())),
        _ => Err(*rng.pick(&[
            VerbError::Revoked,
            VerbError::OutOfRange,
            VerbError::Misaligned,
            VerbError::Unavailable,
        ])),
    }
}

fn gen_server(rng: &mut Rng) -> ServerMsg {
    match rng.below(7) {
        0 | 1 => ServerMsg::Done {
            req_id: rng.interesting_u64(),
            completions: (0..rng.len(12)).map(|_| gen_completion(rng)).collect(),
        },
        2 => ServerMsg::HelloOk,
        3 => ServerMsg::AdminOk,
        4 => ServerMsg::Registered {
            key: (rng.next_u64() as u128) << 64 | rng.interesting_u64() as u128,
        },
        5 => ServerMsg::Info {
            size_bytes: rng.interesting_u64(),
        },
        _ => ServerMsg::Reject {
            reason: *rng.pick(&[
                RejectReason::BadKey,
                RejectReason::NotAdmin,
                RejectReason::Protocol,
                RejectReason::Busy,
                RejectReason::Fenced,
            ]),
        },
    }
}

/// One or a few whole frames, each checked to round-trip as it is made.
fn client_frames(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let m = gen_client(rng);
        let at = out.len();
        m.encode(&mut out);
        assert_eq!(
            ClientMsg::decode(&out[at + FRAME_HEADER_BYTES..]).as_ref(),
            Ok(&m),
            "round trip"
        );
    }
    out
}

fn server_frames(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let m = gen_server(rng);
        let at = out.len();
        m.encode(&mut out);
        assert_eq!(
            ServerMsg::decode(&out[at + FRAME_HEADER_BYTES..]).as_ref(),
            Ok(&m),
            "round trip"
        );
    }
    out
}

// ---------------------------------------------------------------- properties

/// A reader that hands out what it holds in random short pieces, with an
/// `Interrupted` now and then, as a socket may.
struct Trickle<'a> {
    data: &'a [u8],
    rng: Rng,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.rng.one_in(8) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = (1 + self.rng.below(64)).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Decode every frame of `stream` as `read_frame` cuts them, and each body
/// with `decode`; check the allocation bounds and that whatever decodes
/// encodes back to the same bytes (the format has one encoding per message).
fn check_stream<M: PartialEq + std::fmt::Debug>(
    stream: &[u8],
    decode: impl Fn(&[u8]) -> Result<M, FrameError>,
    encode: impl Fn(&M, &mut Vec<u8>),
    decoded_bytes_max: impl Fn(usize) -> usize,
) -> String {
    let mut r = Trickle {
        data: stream,
        rng: Rng::new(stream.len() as u64),
    };
    let mut body = Vec::new();
    let mut label = String::new();
    loop {
        let claimed = stream.len().checked_sub(r.data.len()).and_then(|at| {
            let h = stream.get(at..at + 4)?;
            Some(u32::from_le_bytes(h.try_into().unwrap()) as usize)
        });
        let (got, a) = peak_alloc(|| read_frame(&mut r, &mut body));
        // The body grows to the checked length, never beyond; an oversized
        // or empty prefix costs nothing.
        // (A `Vec<u8>` allocates at least 8 bytes.)
        let bound = claimed
            .filter(|&c| c > 0 && c <= FRAME_BYTES_MAX)
            .map_or(0, |c| c.max(8));
        assert!(
            a.peak <= bound,
            "read_frame held {} bytes for a {claimed:?}-byte prefix",
            a.peak
        );
        match got {
            Ok(true) => {}
            Ok(false) => return label + "end",
            Err(ReadFrameError::Frame(e)) => return label + &short(format!("{e:?}"), 6),
            Err(ReadFrameError::Io(e)) => panic!("in-memory read failed: {e}"),
        }
        let (m, a) = peak_alloc(|| decode(&body));
        let limit = decoded_bytes_max(body.len());
        assert!(
            a.peak <= limit,
            "decoding {} bytes held {} (bound {limit})",
            body.len(),
            a.peak
        );
        match m {
            Ok(m) => {
                let mut again = Vec::new();
                encode(&m, &mut again);
                assert_eq!(
                    &again[FRAME_HEADER_BYTES..],
                    &body[..],
                    "{m:?} re-encodes differently"
                );
                assert_eq!(decode(&again[FRAME_HEADER_BYTES..]).as_ref(), Ok(&m));
                label += &short(format!("{m:?}"), 4);
            }
            Err(e) => label += &short(format!("{e:?}"), 5),
        }
        label.truncate(64);
    }
}

fn short(s: String, n: usize) -> String {
    s.chars().take(n).collect()
}

/// What decoding a body may hold: its bytes again (read and write data are
/// copied out), plus one in-memory element per element the body can hold.
fn client_bound(len: usize) -> usize {
    len + (len / 13 + 1) * std::mem::size_of::<Verb>() + 256
}

fn server_bound(len: usize) -> usize {
    len + (len + 1) * std::mem::size_of::<Completion>() + 256
}

#[test]
fn fuzz_fabric_client_msg() {
    Fuzz::new("fabric ClientMsg::decode + read_frame").run(client_frames, |b| {
        // As a whole stream, and as one body without its prefix.
        let mut label = check_stream(b, ClientMsg::decode, |m, o| m.encode(o), client_bound);
        let (m, a) = peak_alloc(|| ClientMsg::decode(b));
        assert!(
            a.peak <= client_bound(b.len()),
            "{} bytes held for {}",
            a.peak,
            b.len()
        );
        label += &format!("{:?}", m.map(|m| m.name()));
        label
    });
}

#[test]
fn fuzz_fabric_server_msg() {
    Fuzz::new("fabric ServerMsg::decode + read_frame").run(server_frames, |b| {
        let mut label = check_stream(b, ServerMsg::decode, |m, o| m.encode(o), server_bound);
        let (m, a) = peak_alloc(|| ServerMsg::decode(b));
        assert!(
            a.peak <= server_bound(b.len()),
            "{} bytes held for {}",
            a.peak,
            b.len()
        );
        label += &format!("{:?}", m.map(|m| std::mem::discriminant(&m)));
        label
    });
}

#[test]
fn fuzz_fabric_frame_len() {
    Fuzz::new("fabric frame_len").max_len(4).run(
        |rng| rng.interesting_u64().to_le_bytes()[..4].to_vec(),
        |b| {
            let mut h = [0u8; 4];
            h[..b.len()].copy_from_slice(b);
            let len = u32::from_le_bytes(h) as usize;
            match frame_len(h) {
                Ok(n) => assert!(n == len && (1..=FRAME_BYTES_MAX).contains(&n)),
                Err(FrameError::Empty) => assert_eq!(len, 0),
                Err(FrameError::Oversized { len: l }) => assert!(l == len && l > FRAME_BYTES_MAX),
                Err(e) => panic!("frame_len gave {e:?}"),
            }
            frame_len(h).is_ok()
        },
    );
}

// ---------------------------------------------------------------- handshake

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The listener's side, driven by an attacker who does not hold the key:
/// input = `[roles mask][strategy][HELLO (56)][PROOF (32)]`. Whatever it
/// sends, the listener never authenticates it. One execution in eight is a
/// control run by a dialer that holds the key, which must succeed.
#[test]
fn fuzz_auth_server_handshake() {
    let keys = Keyring::from_master(&[7u8; 16]).unwrap();
    let wrong = Keyring::from_master(&[8u8; 16]).unwrap();
    let hello_seed = |rng: &mut Rng| {
        let role = *rng.pick(&Role::ALL);
        let ring = if rng.bool() { &keys } else { &wrong };
        let (_, hello) = ClientHandshake::start(ring, role, rng.interesting_u64()).unwrap();
        let mut b = vec![rng.u8(), rng.u8()];
        b.extend_from_slice(&hello);
        b.extend(rng.bytes(PROOF_BYTES));
        b
    };
    Fuzz::new("auth ServerHandshake::take")
        .max_len(2 + HELLO_BYTES + PROOF_BYTES + 8)
        .run(hello_seed, |b| {
            let mut b = b.to_vec();
            b.resize(2 + HELLO_BYTES + PROOF_BYTES, 0);
            let allowed: Vec<Role> = Role::ALL
                .into_iter()
                .filter(|r| b[0] >> (*r as u8) & 1 == 1)
                .collect();
            let mut s = ServerHandshake::new(&keys, &allowed);
            assert_eq!(s.need(), HELLO_BYTES);
            let hello: [u8; HELLO_BYTES] = b[2..2 + HELLO_BYTES].try_into().unwrap();
            let ch = match s.take(&hello) {
                Ok(Next::Send(ch)) => ch,
                Ok(Next::Done(p)) => panic!("authenticated {p:?} on a hello alone"),
                Err(e) => {
                    assert_eq!(s.need(), 0, "a refused handshake takes nothing more");
                    return format!("{e:?}");
                }
            };
            assert_eq!(s.need(), PROOF_BYTES);
            let role = Role::from_u8(hello[9]).expect("a challenge only for a known role");
            assert!(
                allowed.contains(&role),
                "a challenge for a role not allowed"
            );
            // What an attacker without the key can send as its proof.
            let given = &b[2 + HELLO_BYTES..];
            let (nonce, mac_l) = ch.split_at(32);
            let proof: [u8; PROOF_BYTES] = match b[1] % 6 {
                0 => given.try_into().unwrap(),
                // The listener's own MAC or nonce reflected.
                1 => mac_l.try_into().unwrap(),
                2 => nonce.try_into().unwrap(),
                // The right transcript under another key, or under the right
                // key with the listener's label (a reflection attack).
                3 => hmac(
                    wrong.get(role).unwrap().bytes(),
                    &[b"tandem/v1/dialer", &hello, nonce, mac_l],
                ),
                4 => hmac(
                    keys.get(role).unwrap().bytes(),
                    &[b"tandem/v1/listener", &hello, nonce, mac_l],
                ),
                // Another role's key.
                _ => {
                    let other = Role::ALL[(role as usize) % Role::ALL.len()];
                    hmac(
                        keys.get(other).unwrap().bytes(),
                        &[b"tandem/v1/dialer", &hello, nonce, mac_l],
                    )
                }
            };
            let r = s.take(&proof);
            assert_eq!(
                r,
                Err(AuthError::BadProof),
                "strategy {}: the listener accepted a forged proof",
                b[1] % 6
            );
            assert_eq!(s.need(), 0);
            // Control: the same listener settings and a dialer that holds the key.
            if b[1] % 8 == 7 {
                let (c, hello) = ClientHandshake::start(&keys, role, 9).unwrap();
                let mut s = ServerHandshake::new(&keys, &allowed);
                let Ok(Next::Send(ch)) = s.take(&hello) else {
                    panic!("the control was refused")
                };
                let proof = c.challenge(&ch).expect("the listener holds the key");
                assert!(matches!(s.take(&proof), Ok(Next::Done(p)) if p.role == role && p.id == 9));
            }
            format!("{role:?} {}", b[1] % 6)
        });
}

/// The dialer's side: a CHALLENGE from a listener that does not hold the
/// key, or a real one altered, never draws a proof.
#[test]
fn fuzz_auth_client_challenge() {
    let keys = Keyring::from_master(&[7u8; 16]).unwrap();
    let wrong = Keyring::from_master(&[8u8; 16]).unwrap();
    let (client, hello) = ClientHandshake::start(&keys, Role::Compute, 3).unwrap();
    let real = {
        let mut s = ServerHandshake::new(&keys, &[Role::Compute]);
        let Ok(Next::Send(ch)) = s.take(&hello) else {
            panic!()
        };
        ch
    };
    assert!(client.challenge(&real).is_ok(), "the control");
    let forged = |rng: &mut Rng| {
        // A challenge made by a listener without the key, or by one with
        // it for another hello (a replay).
        let (_, other_hello) = ClientHandshake::start(&keys, Role::Compute, 3).unwrap();
        let (ring, h) = if rng.bool() {
            (&wrong, hello)
        } else {
            (&keys, other_hello)
        };
        let mut s = ServerHandshake::new(ring, &[Role::Compute]);
        match s.take(&h) {
            Ok(Next::Send(ch)) if ch != real => ch.to_vec(),
            _ => rng.bytes(CHALLENGE_BYTES),
        }
    };
    Fuzz::new("auth ClientHandshake::challenge")
        .max_len(CHALLENGE_BYTES + 8)
        .seeds([real.to_vec()])
        .run(forged, |b| {
            let mut msg = [0u8; CHALLENGE_BYTES];
            let n = b.len().min(CHALLENGE_BYTES);
            msg[..n].copy_from_slice(&b[..n]);
            let r = client.challenge(&msg);
            if msg == real {
                assert!(r.is_ok());
                "real"
            } else {
                assert_eq!(
                    r,
                    Err(AuthError::BadProof),
                    "a proof for a forged challenge"
                );
                "refused"
            }
        });
}
