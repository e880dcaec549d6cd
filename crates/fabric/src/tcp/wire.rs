//! The tcp backend's wire format: length-prefixed little-endian frames that
//! carry doorbell batches of one-sided verbs and their completions, plus the
//! handshake and control messages of a memory server (docs/DESIGN.md §3, "tcp").
//!
//! A frame is `len: u32` (body bytes, at most [`FRAME_BYTES_MAX`]) followed by
//! the body: one opcode byte, then the message fields. Everything a peer sends
//! is untrusted: decoding checks every length before it allocates or slices,
//! and any malformed body (unknown opcode or tag, truncated field, trailing
//! bytes, a batch whose answer could not fit in one frame) is a
//! [`FrameError`], never a panic. A framing error closes that one connection.
//!
//! The format guarantees that the `Done` answer to every well-formed `Batch`
//! fits in one frame, so a server never has to refuse work it has accepted;
//! clients check [`batch_fits`] before they post.

use std::fmt;
use std::io::{self, Read};

use crate::memory::RegionKey;
use crate::verb::{Completion, Completions, ComputeNodeId, Verb, VerbError, VerbOutput, VerbRef};

/// Largest frame body. Bounds every buffer a peer can make us allocate.
pub const FRAME_BYTES_MAX: usize = 4 << 20;
/// Bytes of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;
/// Version byte carried by `Hello` and `Admin`: peers of different versions
/// fail the handshake instead of misreading each other's frames.
pub const PROTOCOL_VERSION: u8 = 4;

// Client-to-server opcodes.
const OP_HELLO: u8 = 0x01;
const OP_BATCH: u8 = 0x02;
const OP_ADMIN: u8 = 0x10;
const OP_REGISTER: u8 = 0x11;
const OP_REVOKE: u8 = 0x12;
const OP_INFO: u8 = 0x13;
// Server-to-client opcodes: a disjoint range, so a reflected frame is garbage.
const OP_HELLO_OK: u8 = 0x81;
const OP_DONE: u8 = 0x82;
const OP_ADMIN_OK: u8 = 0x90;
const OP_REGISTERED: u8 = 0x91;
const OP_REVOKED: u8 = 0x92;
const OP_INFO_REPLY: u8 = 0x93;
const OP_REJECT: u8 = 0xEE;

const VERB_READ: u8 = 0;
const VERB_WRITE: u8 = 1;
const VERB_CAS: u8 = 2;
const VERB_FAA: u8 = 3;

const DONE_READ: u8 = 0;
const DONE_WRITE: u8 = 1;
const DONE_CAS: u8 = 2;
const DONE_FAA: u8 = 3;
const DONE_ERR_REVOKED: u8 = 0x10;
const DONE_ERR_OUT_OF_RANGE: u8 = 0x11;
const DONE_ERR_MISALIGNED: u8 = 0x12;
const DONE_ERR_UNAVAILABLE: u8 = 0x13;

/// Opcode + req_id + verb count: the fixed part of `Batch` and `Done`.
const BATCH_HEAD_BYTES: usize = 1 + 8 + 4;
/// Smallest encoded verb (a read: tag, addr, len), used to bound a claimed count.
const VERB_BYTES_MIN: usize = 1 + 8 + 4;
/// Largest encoded non-read completion (tag + u64).
const COMPLETION_FIXED_BYTES_MAX: usize = 1 + 8;

/// Why a frame was refused. Every variant closes the connection it arrived on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A zero length prefix: every body holds at least an opcode.
    Empty,
    /// A length prefix above [`FRAME_BYTES_MAX`].
    Oversized {
        len: usize,
    },
    /// The stream ended inside a frame, or a field runs past the body.
    Truncated,
    /// Bytes left over after the last field.
    TrailingBytes {
        extra: usize,
    },
    UnknownOpcode(u8),
    UnknownVerb(u8),
    UnknownCompletion(u8),
    UnknownRejectReason(u8),
    /// A handshake from a different protocol version.
    Version(u8),
    /// A batch whose completions could not fit in one frame.
    ResponseTooLarge,
    /// A flag byte that is neither 0 nor 1.
    BadFlag(u8),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Empty => write!(f, "empty frame"),
            FrameError::Oversized { len } => {
                write!(f, "frame of {len} bytes exceeds {FRAME_BYTES_MAX}")
            }
            FrameError::Truncated => write!(f, "truncated frame"),
            FrameError::TrailingBytes { extra } => {
                write!(f, "{extra} trailing bytes after message")
            }
            FrameError::UnknownOpcode(op) => write!(f, "unknown opcode {op:#04x}"),
            FrameError::UnknownVerb(t) => write!(f, "unknown verb tag {t:#04x}"),
            FrameError::UnknownCompletion(t) => write!(f, "unknown completion tag {t:#04x}"),
            FrameError::UnknownRejectReason(r) => write!(f, "unknown reject reason {r:#04x}"),
            FrameError::Version(v) => {
                write!(f, "protocol version {v}, expected {PROTOCOL_VERSION}")
            }
            FrameError::BadFlag(b) => write!(f, "flag byte {b} is neither 0 nor 1"),
            FrameError::ResponseTooLarge => write!(f, "batch response would exceed one frame"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Why a server refused a handshake or a request before closing the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// `Hello` with a key that is not (or no longer) the compute node's key.
    BadKey = 1,
    /// `Admin` on a connection that did not authenticate as the admin role.
    NotAdmin = 2,
    /// A frame that is well formed but not allowed here (e.g. `Batch` before `Hello`).
    Protocol = 3,
    /// The server is at its connection limit.
    Busy = 4,
    /// `Register` of a compute-node incarnation that was revoked: fencing is
    /// for good, the node must rejoin under a new identity.
    Fenced = 5,
}

impl RejectReason {
    fn from_u8(r: u8) -> Result<Self, FrameError> {
        Ok(match r {
            1 => RejectReason::BadKey,
            2 => RejectReason::NotAdmin,
            3 => RejectReason::Protocol,
            4 => RejectReason::Busy,
            5 => RejectReason::Fenced,
            other => return Err(FrameError::UnknownRejectReason(other)),
        })
    }
}

/// Messages a compute node (or an administrator) sends to a memory server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMsg {
    /// First frame of a data connection: "I am `compute`, holding `key`".
    /// A `priority` connection (a recovery coordinator's) is served before
    /// the others in each of the server's polling rounds.
    Hello {
        compute: ComputeNodeId,
        key: RegionKey,
        priority: bool,
    },
    /// One doorbell batch; answered by one `Done` with the same `req_id`.
    Batch {
        req_id: u64,
        verbs: Vec<Verb>,
    },
    /// First frame of a control connection (one authenticated as admin).
    Admin,
    Register {
        compute: ComputeNodeId,
    },
    Revoke {
        compute: ComputeNodeId,
    },
    Info,
}

/// Messages a memory server sends back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMsg {
    HelloOk,
    /// One completion per verb of the batch `req_id`, in order.
    Done {
        req_id: u64,
        completions: Completions,
    },
    AdminOk,
    Registered {
        key: RegionKey,
    },
    /// The acknowledgement of `Revoke`: sent after the key is dead.
    Revoked,
    Info {
        size_bytes: u64,
    },
    /// Sent just before the server closes the connection.
    Reject {
        reason: RejectReason,
    },
}

/// Bytes `verb` takes on the wire.
fn verb_bytes(verb: &Verb) -> usize {
    match verb {
        Verb::Read { .. } => 1 + 8 + 4,
        Verb::Write { data, .. } => 1 + 8 + 4 + data.len(),
        Verb::Cas { .. } => 1 + 8 + 8 + 8,
        Verb::Faa { .. } => 1 + 8 + 8,
    }
}

/// Largest number of bytes the completion of `verb` can take on the wire.
fn completion_bytes_max(verb: &Verb) -> usize {
    completion_bytes_max_ref(verb.as_ref())
}

fn completion_bytes_max_ref(verb: VerbRef<'_>) -> usize {
    match verb {
        VerbRef::Read { len, .. } => 1 + 4 + len as usize,
        _ => COMPLETION_FIXED_BYTES_MAX,
    }
}

/// Whether a batch and its answer each fit in one frame. A client completes a
/// batch that does not fit locally (with `OutOfRange`) instead of sending it.
pub fn batch_fits(verbs: &[Verb]) -> bool {
    let mut request = BATCH_HEAD_BYTES;
    let mut response = BATCH_HEAD_BYTES;
    for v in verbs {
        request = request.saturating_add(verb_bytes(v));
        response = response.saturating_add(completion_bytes_max(v));
    }
    request <= FRAME_BYTES_MAX && response <= FRAME_BYTES_MAX
}

/// Start a frame in `out`: a placeholder length and the opcode. Returns where
/// the frame starts, for [`end_frame`].
pub fn begin_frame(out: &mut Vec<u8>, op: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    out.push(op);
    start
}

/// Patch the length prefix of the frame begun at `start`.
pub fn end_frame(out: &mut [u8], start: usize) {
    let len = out.len() - start - FRAME_HEADER_BYTES;
    debug_assert!(len <= FRAME_BYTES_MAX, "encoded a frame of {len} bytes");
    out[start..start + FRAME_HEADER_BYTES].copy_from_slice(&(len as u32).to_le_bytes());
}

/// Append a whole `Batch` frame, encoding straight from the caller's verbs so
/// the client's post path copies each verb once. The caller checked [`batch_fits`].
pub fn encode_batch(out: &mut Vec<u8>, req_id: u64, verbs: &[Verb]) {
    out.reserve(
        FRAME_HEADER_BYTES + BATCH_HEAD_BYTES + verbs.iter().map(verb_bytes).sum::<usize>(),
    );
    let start = begin_frame(out, OP_BATCH);
    out.extend_from_slice(&req_id.to_le_bytes());
    out.extend_from_slice(&(verbs.len() as u32).to_le_bytes());
    for v in verbs {
        encode_verb(out, v);
    }
    end_frame(out, start);
}

fn encode_verb(out: &mut Vec<u8>, verb: &Verb) {
    match verb {
        Verb::Read { addr, len } => {
            out.push(VERB_READ);
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
        Verb::Write { addr, data } => {
            out.push(VERB_WRITE);
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        Verb::Cas {
            addr,
            expected,
            new,
        } => {
            out.push(VERB_CAS);
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&expected.to_le_bytes());
            out.extend_from_slice(&new.to_le_bytes());
        }
        Verb::Faa { addr, add } => {
            out.push(VERB_FAA);
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(&add.to_le_bytes());
        }
    }
}

/// Start a `Done` frame for `count` completions; append each with
/// [`encode_completion`] and close it with [`end_frame`]. The server writes
/// completions straight into its coalesced output buffer this way.
pub fn begin_done(out: &mut Vec<u8>, req_id: u64, count: usize) -> usize {
    let start = begin_frame(out, OP_DONE);
    out.extend_from_slice(&req_id.to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
    start
}

pub fn encode_completion(out: &mut Vec<u8>, c: &Completion) {
    match c {
        Ok(VerbOutput::Read(data)) => {
            out.push(DONE_READ);
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        Ok(VerbOutput::Write) => out.push(DONE_WRITE),
        Ok(VerbOutput::Cas(old)) => {
            out.push(DONE_CAS);
            out.extend_from_slice(&old.to_le_bytes());
        }
        Ok(VerbOutput::Faa(old)) => {
            out.push(DONE_FAA);
            out.extend_from_slice(&old.to_le_bytes());
        }
        Err(VerbError::Revoked) => out.push(DONE_ERR_REVOKED),
        Err(VerbError::OutOfRange) => out.push(DONE_ERR_OUT_OF_RANGE),
        Err(VerbError::Misaligned) => out.push(DONE_ERR_MISALIGNED),
        Err(VerbError::Unavailable) => out.push(DONE_ERR_UNAVAILABLE),
    }
}

impl ClientMsg {
    /// Append this message as one frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ClientMsg::Batch { req_id, verbs } => encode_batch(out, *req_id, verbs),
            ClientMsg::Hello {
                compute,
                key,
                priority,
            } => {
                let start = begin_frame(out, OP_HELLO);
                out.push(PROTOCOL_VERSION);
                out.extend_from_slice(&compute.to_le_bytes());
                out.extend_from_slice(&key.to_le_bytes());
                out.push(*priority as u8);
                end_frame(out, start);
            }
            ClientMsg::Admin => {
                let start = begin_frame(out, OP_ADMIN);
                out.push(PROTOCOL_VERSION);
                end_frame(out, start);
            }
            ClientMsg::Register { compute } | ClientMsg::Revoke { compute } => {
                let op = if matches!(self, ClientMsg::Register { .. }) {
                    OP_REGISTER
                } else {
                    OP_REVOKE
                };
                let start = begin_frame(out, op);
                out.extend_from_slice(&compute.to_le_bytes());
                end_frame(out, start);
            }
            ClientMsg::Info => {
                let start = begin_frame(out, OP_INFO);
                end_frame(out, start);
            }
        }
    }

    /// Decode one frame body (without its length prefix).
    pub fn decode(body: &[u8]) -> Result<Self, FrameError> {
        let mut c = Cursor::new(body);
        let msg = match c.u8()? {
            OP_HELLO => {
                check_version(c.u8()?)?;
                ClientMsg::Hello {
                    compute: c.u16()?,
                    key: c.u128()?,
                    priority: match c.u8()? {
                        0 => false,
                        1 => true,
                        b => return Err(FrameError::BadFlag(b)),
                    },
                }
            }
            OP_BATCH => {
                let b = parse_batch(body)?;
                let verbs = b.verbs().map(VerbRef::to_verb).collect();
                return Ok(ClientMsg::Batch {
                    req_id: b.req_id,
                    verbs,
                });
            }
            OP_ADMIN => {
                check_version(c.u8()?)?;
                ClientMsg::Admin
            }
            OP_REGISTER => ClientMsg::Register { compute: c.u16()? },
            OP_REVOKE => ClientMsg::Revoke { compute: c.u16()? },
            OP_INFO => ClientMsg::Info,
            op => return Err(FrameError::UnknownOpcode(op)),
        };
        c.finish()?;
        Ok(msg)
    }
}

fn check_version(v: u8) -> Result<(), FrameError> {
    if v == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(FrameError::Version(v))
    }
}

/// Whether a frame body is a `Batch` (see [`parse_batch`]).
pub fn is_batch(body: &[u8]) -> bool {
    body.first() == Some(&OP_BATCH)
}

/// A `Batch` frame checked whole (every verb well formed, its answer
/// within one frame, no trailing byte) and read where it lies: a memory
/// server executes its verbs without copying them out of the frame.
#[derive(Clone, Copy, Debug)]
pub struct BatchRef<'a> {
    pub req_id: u64,
    count: usize,
    verbs: &'a [u8],
}

impl<'a> BatchRef<'a> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The verbs, in order.
    pub fn verbs(&self) -> BatchVerbs<'a> {
        BatchVerbs {
            c: Cursor::new(self.verbs),
            left: self.count,
        }
    }
}

/// The verbs of a [`BatchRef`].
#[derive(Clone)]
pub struct BatchVerbs<'a> {
    c: Cursor<'a>,
    left: usize,
}

impl<'a> Iterator for BatchVerbs<'a> {
    type Item = VerbRef<'a>;

    fn next(&mut self) -> Option<VerbRef<'a>> {
        self.left = self.left.checked_sub(1)?;
        // `parse_batch` decoded every verb once already.
        decode_verb(&mut self.c).ok()
    }
}

/// Check a `Batch` frame body whole, without copying anything out of it.
pub fn parse_batch(body: &[u8]) -> Result<BatchRef<'_>, FrameError> {
    let mut c = Cursor::new(body);
    match c.u8()? {
        OP_BATCH => {}
        op => return Err(FrameError::UnknownOpcode(op)),
    }
    let req_id = c.u64()?;
    let count = c.u32()? as usize;
    // A claimed count the body cannot hold is garbage: refuse it
    // before reserving memory for it.
    if count > c.remaining() / VERB_BYTES_MIN {
        return Err(FrameError::Truncated);
    }
    let verbs = &body[c.pos..];
    let mut response = BATCH_HEAD_BYTES;
    for _ in 0..count {
        let v = decode_verb(&mut c)?;
        response += completion_bytes_max_ref(v);
        if response > FRAME_BYTES_MAX {
            return Err(FrameError::ResponseTooLarge);
        }
    }
    c.finish()?;
    Ok(BatchRef {
        req_id,
        count,
        verbs,
    })
}

fn decode_verb<'a>(c: &mut Cursor<'a>) -> Result<VerbRef<'a>, FrameError> {
    Ok(match c.u8()? {
        VERB_READ => VerbRef::Read {
            addr: c.u64()?,
            len: c.u32()?,
        },
        VERB_WRITE => {
            let addr = c.u64()?;
            let len = c.u32()? as usize;
            VerbRef::Write {
                addr,
                data: c.bytes(len)?,
            }
        }
        VERB_CAS => VerbRef::Cas {
            addr: c.u64()?,
            expected: c.u64()?,
            new: c.u64()?,
        },
        VERB_FAA => VerbRef::Faa {
            addr: c.u64()?,
            add: c.u64()?,
        },
        t => return Err(FrameError::UnknownVerb(t)),
    })
}

fn decode_completion(c: &mut Cursor<'_>) -> Result<Completion, FrameError> {
    Ok(match c.u8()? {
        DONE_READ => {
            let len = c.u32()? as usize;
            Ok(VerbOutput::Read(c.bytes(len)?.to_vec()))
        }
        DONE_WRITE => Ok(VerbOutput::Write),
        DONE_CAS => Ok(VerbOutput::Cas(c.u64()?)),
        DONE_FAA => Ok(VerbOutput::Faa(c.u64()?)),
        DONE_ERR_REVOKED => Err(VerbError::Revoked),
        DONE_ERR_OUT_OF_RANGE => Err(VerbError::OutOfRange),
        DONE_ERR_MISALIGNED => Err(VerbError::Misaligned),
        DONE_ERR_UNAVAILABLE => Err(VerbError::Unavailable),
        t => return Err(FrameError::UnknownCompletion(t)),
    })
}

impl ServerMsg {
    /// Append this message as one frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start;
        match self {
            ServerMsg::Done {
                req_id,
                completions,
            } => {
                start = begin_done(out, *req_id, completions.len());
                for c in completions {
                    encode_completion(out, c);
                }
            }
            ServerMsg::HelloOk => start = begin_frame(out, OP_HELLO_OK),
            ServerMsg::AdminOk => start = begin_frame(out, OP_ADMIN_OK),
            ServerMsg::Registered { key } => {
                start = begin_frame(out, OP_REGISTERED);
                out.extend_from_slice(&key.to_le_bytes());
            }
            ServerMsg::Revoked => start = begin_frame(out, OP_REVOKED),
            ServerMsg::Info { size_bytes } => {
                start = begin_frame(out, OP_INFO_REPLY);
                out.extend_from_slice(&size_bytes.to_le_bytes());
            }
            ServerMsg::Reject { reason } => {
                start = begin_frame(out, OP_REJECT);
                out.push(*reason as u8);
            }
        }
        end_frame(out, start);
    }

    /// Decode one frame body (without its length prefix).
    pub fn decode(body: &[u8]) -> Result<Self, FrameError> {
        let mut c = Cursor::new(body);
        let msg = match c.u8()? {
            OP_DONE => {
                let req_id = c.u64()?;
                let count = c.u32()? as usize;
                // Every completion takes at least one byte.
                if count > c.remaining() {
                    return Err(FrameError::Truncated);
                }
                let mut completions = Completions::with_capacity(count);
                for _ in 0..count {
                    completions.push(decode_completion(&mut c)?);
                }
                ServerMsg::Done {
                    req_id,
                    completions,
                }
            }
            OP_HELLO_OK => ServerMsg::HelloOk,
            OP_ADMIN_OK => ServerMsg::AdminOk,
            OP_REGISTERED => ServerMsg::Registered { key: c.u128()? },
            OP_REVOKED => ServerMsg::Revoked,
            OP_INFO_REPLY => ServerMsg::Info {
                size_bytes: c.u64()?,
            },
            OP_REJECT => ServerMsg::Reject {
                reason: RejectReason::from_u8(c.u8()?)?,
            },
            op => return Err(FrameError::UnknownOpcode(op)),
        };
        c.finish()?;
        Ok(msg)
    }
}

impl ClientMsg {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ClientMsg::Hello { .. } => "Hello",
            ClientMsg::Batch { .. } => "Batch",
            ClientMsg::Admin => "Admin",
            ClientMsg::Register { .. } => "Register",
            ClientMsg::Revoke { .. } => "Revoke",
            ClientMsg::Info => "Info",
        }
    }
}

/// Check a length prefix; returns the body length.
pub fn frame_len(header: [u8; FRAME_HEADER_BYTES]) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len == 0 {
        Err(FrameError::Empty)
    } else if len > FRAME_BYTES_MAX {
        Err(FrameError::Oversized { len })
    } else {
        Ok(len)
    }
}

/// Why reading a frame from a blocking stream failed.
#[derive(Debug)]
pub enum ReadFrameError {
    Io(io::Error),
    Frame(FrameError),
}

impl fmt::Display for ReadFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadFrameError::Io(e) => write!(f, "{e}"),
            ReadFrameError::Frame(e) => write!(f, "{e}"),
        }
    }
}

/// Read one frame body into `body` from a blocking reader. Returns `Ok(false)`
/// on a clean end of stream at a frame boundary. A stream that ends inside a
/// frame is [`FrameError::Truncated`]. The length is checked before the body
/// buffer grows, so an oversized prefix costs no memory.
pub fn read_frame<R: Read>(r: &mut R, body: &mut Vec<u8>) -> Result<bool, ReadFrameError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ReadFrameError::Frame(FrameError::Truncated)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadFrameError::Io(e)),
        }
    }
    let len = frame_len(header).map_err(ReadFrameError::Frame)?;
    body.clear();
    body.resize(len, 0);
    r.read_exact(body).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ReadFrameError::Frame(FrameError::Truncated),
        _ => ReadFrameError::Io(e),
    })?;
    Ok(true)
}

/// A bounds-checked reader over one frame body.
#[derive(Clone)]
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.remaining() {
            return Err(FrameError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn u128(&mut self) -> Result<u128, FrameError> {
        Ok(u128::from_le_bytes(self.array()?))
    }

    fn finish(self) -> Result<(), FrameError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(FrameError::TrailingBytes { extra }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_samples() -> Vec<ClientMsg> {
        vec![
            ClientMsg::Hello {
                compute: 7,
                key: 0xDEAD_BEEF_0123_4567,
                priority: false,
            },
            ClientMsg::Hello {
                compute: 8,
                key: 1,
                priority: true,
            },
            ClientMsg::Batch {
                req_id: 0,
                verbs: vec![],
            },
            ClientMsg::Batch {
                req_id: u64::MAX,
                verbs: vec![
                    Verb::read(8, 24),
                    Verb::write(3, vec![1, 2, 3, 4, 5]),
                    Verb::write(0, vec![]),
                    Verb::cas(16, 1, 2),
                    Verb::faa(u64::MAX, u64::MAX),
                ],
            },
            ClientMsg::Admin,
            ClientMsg::Register { compute: u16::MAX },
            ClientMsg::Revoke { compute: 0 },
            ClientMsg::Info,
        ]
    }

    fn server_samples() -> Vec<ServerMsg> {
        vec![
            ServerMsg::HelloOk,
            ServerMsg::Done {
                req_id: 3,
                completions: crate::batch![],
            },
            ServerMsg::Done {
                req_id: 9,
                completions: crate::batch![
                    Ok(VerbOutput::Read(vec![9; 17])),
                    Ok(VerbOutput::Read(vec![])),
                    Ok(VerbOutput::Write),
                    Ok(VerbOutput::Cas(5)),
                    Ok(VerbOutput::Faa(u64::MAX)),
                    Err(VerbError::Revoked),
                    Err(VerbError::OutOfRange),
                    Err(VerbError::Misaligned),
                    Err(VerbError::Unavailable),
                ],
            },
            ServerMsg::AdminOk,
            ServerMsg::Registered { key: 77 },
            ServerMsg::Revoked,
            ServerMsg::Info {
                size_bytes: 1 << 30,
            },
            ServerMsg::Reject {
                reason: RejectReason::BadKey,
            },
            ServerMsg::Reject {
                reason: RejectReason::NotAdmin,
            },
            ServerMsg::Reject {
                reason: RejectReason::Protocol,
            },
            ServerMsg::Reject {
                reason: RejectReason::Busy,
            },
            ServerMsg::Reject {
                reason: RejectReason::Fenced,
            },
        ]
    }

    /// Split an encoded frame into its checked length and body.
    fn body_of(frame: &[u8]) -> &[u8] {
        let len = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(
            len,
            frame.len() - 4,
            "length prefix covers exactly the body"
        );
        &frame[4..]
    }

    #[test]
    fn every_message_round_trips() {
        for m in client_samples() {
            let mut buf = Vec::new();
            m.encode(&mut buf);
            assert_eq!(ClientMsg::decode(body_of(&buf)), Ok(m.clone()), "{m:?}");
            // Through the blocking stream reader as well.
            let mut body = Vec::new();
            let mut r = &buf[..];
            assert!(matches!(read_frame(&mut r, &mut body), Ok(true)));
            assert_eq!(ClientMsg::decode(&body), Ok(m));
            assert!(
                matches!(read_frame(&mut r, &mut body), Ok(false)),
                "clean end of stream"
            );
        }
        for m in server_samples() {
            let mut buf = Vec::new();
            m.encode(&mut buf);
            assert_eq!(ServerMsg::decode(body_of(&buf)), Ok(m.clone()), "{m:?}");
        }
    }

    #[test]
    fn every_truncation_and_any_trailing_byte_is_an_error() {
        let mut frames: Vec<(Vec<u8>, bool)> = Vec::new();
        for m in client_samples() {
            let mut b = Vec::new();
            m.encode(&mut b);
            frames.push((b, true));
        }
        for m in server_samples() {
            let mut b = Vec::new();
            m.encode(&mut b);
            frames.push((b, false));
        }
        for (frame, is_client) in frames {
            let body = &frame[4..];
            let decode = |b: &[u8]| {
                if is_client {
                    ClientMsg::decode(b).err()
                } else {
                    ServerMsg::decode(b).err()
                }
            };
            for cut in 0..body.len() {
                assert!(
                    decode(&body[..cut]).is_some(),
                    "prefix {cut} of {body:?} decoded"
                );
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert_eq!(
                decode(&longer),
                Some(FrameError::TrailingBytes { extra: 1 })
            );
            // A stream that ends inside the frame is truncated, not a clean end.
            for cut in 1..frame.len() {
                let mut r = &frame[..cut];
                let got = read_frame(&mut r, &mut Vec::new());
                assert!(
                    matches!(got, Err(ReadFrameError::Frame(FrameError::Truncated))),
                    "cut {cut}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn bad_lengths_opcodes_and_tags_are_errors() {
        assert_eq!(frame_len(0u32.to_le_bytes()), Err(FrameError::Empty));
        assert_eq!(
            frame_len((FRAME_BYTES_MAX as u32).to_le_bytes()),
            Ok(FRAME_BYTES_MAX)
        );
        let big = FRAME_BYTES_MAX + 1;
        assert_eq!(
            frame_len((big as u32).to_le_bytes()),
            Err(FrameError::Oversized { len: big })
        );
        let mut r = &u32::MAX.to_le_bytes()[..];
        assert!(matches!(
            read_frame(&mut r, &mut Vec::new()),
            Err(ReadFrameError::Frame(FrameError::Oversized { .. }))
        ));

        assert_eq!(ClientMsg::decode(&[]), Err(FrameError::Truncated));
        assert_eq!(
            ClientMsg::decode(&[0x7F]),
            Err(FrameError::UnknownOpcode(0x7F))
        );
        // A server message is not a client message and vice versa.
        assert_eq!(
            ClientMsg::decode(&[OP_HELLO_OK]),
            Err(FrameError::UnknownOpcode(OP_HELLO_OK))
        );
        assert_eq!(
            ServerMsg::decode(&[OP_INFO]),
            Err(FrameError::UnknownOpcode(OP_INFO))
        );
        assert_eq!(
            ClientMsg::decode(&[OP_HELLO, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(FrameError::Version(9))
        );

        let mut batch = vec![OP_BATCH];
        batch.extend_from_slice(&1u64.to_le_bytes());
        batch.extend_from_slice(&1u32.to_le_bytes());
        let mut bad_verb = batch.clone();
        bad_verb.push(9);
        bad_verb.extend_from_slice(&[0; 12]);
        assert_eq!(
            ClientMsg::decode(&bad_verb),
            Err(FrameError::UnknownVerb(9))
        );
        // A count the body cannot hold is refused before anything is reserved.
        let mut huge_count = vec![OP_BATCH];
        huge_count.extend_from_slice(&1u64.to_le_bytes());
        huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ClientMsg::decode(&huge_count), Err(FrameError::Truncated));
        // A write whose length runs past the body.
        let mut long_write = batch.clone();
        long_write.push(VERB_WRITE);
        long_write.extend_from_slice(&0u64.to_le_bytes());
        long_write.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ClientMsg::decode(&long_write), Err(FrameError::Truncated));

        let mut bad_done = vec![OP_DONE];
        bad_done.extend_from_slice(&1u64.to_le_bytes());
        bad_done.extend_from_slice(&1u32.to_le_bytes());
        bad_done.push(0x55);
        assert_eq!(
            ServerMsg::decode(&bad_done),
            Err(FrameError::UnknownCompletion(0x55))
        );
        assert_eq!(
            ServerMsg::decode(&[OP_REJECT, 0]),
            Err(FrameError::UnknownRejectReason(0))
        );
    }

    #[test]
    fn a_batch_whose_answer_cannot_fit_is_refused_on_both_sides() {
        let verbs = vec![Verb::read(0, FRAME_BYTES_MAX as u32)];
        assert!(!batch_fits(&verbs));
        let mut buf = Vec::new();
        encode_batch(&mut buf, 1, &verbs);
        assert_eq!(
            ClientMsg::decode(body_of(&buf)),
            Err(FrameError::ResponseTooLarge)
        );

        let fits = vec![Verb::read(
            0,
            (FRAME_BYTES_MAX - BATCH_HEAD_BYTES - 5) as u32,
        )];
        assert!(batch_fits(&fits));
        buf.clear();
        encode_batch(&mut buf, 1, &fits);
        assert!(ClientMsg::decode(body_of(&buf)).is_ok());

        assert!(!batch_fits(&[Verb::write(0, vec![0; FRAME_BYTES_MAX])]));
        assert!(batch_fits(&[Verb::write(0, vec![0; 1024])]));
    }

    #[test]
    fn random_bytes_never_panic() {
        // xorshift64*: a fixed seed keeps the test reproducible.
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            s.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut body = Vec::new();
        for i in 0..20_000 {
            let len = (next() % 64) as usize;
            body.clear();
            body.extend((0..len).map(|_| next() as u8));
            // Bias the first byte towards real opcodes so decoding goes deep.
            if i % 2 == 0 && !body.is_empty() {
                let ops = [
                    OP_HELLO,
                    OP_BATCH,
                    OP_ADMIN,
                    OP_REGISTER,
                    OP_DONE,
                    OP_REJECT,
                    OP_INFO_REPLY,
                ];
                body[0] = ops[(next() % ops.len() as u64) as usize];
            }
            let _ = ClientMsg::decode(&body);
            let _ = ServerMsg::decode(&body);
            let _ = read_frame(&mut &body[..], &mut Vec::new());
        }
    }
}
