//! A node's NVM for real processes: a log of [`Durable`] records in a
//! memory-mapped file (docs/DESIGN.md §7.1).
//!
//! [`NvmFile::append`] is what a `Persist` does: it writes one frame at the
//! tail of the mapped region, and nothing else (no in-memory mirror to
//! keep up on the persist path). [`NvmFile::open`] replays the valid frames
//! through [`land`] to rebuild the image after a crash; compaction and
//! [`NvmFile::image`] replay the same way.
//!
//! # File format
//!
//! ```text
//! file   = MAGIC ("TNDMNVM1", 8 bytes) frame* zero*      (fixed length = capacity)
//! frame  = len: u32 LE | crc: u32 LE | payload: len bytes
//! crc    = CRC-32 (IEEE) of the 4 `len` bytes followed by the payload
//! payload = bincode 1.x (`DefaultOptions`: varint, little endian) of the record
//! ```
//!
//! The checksum covers the length too, so an all-zero header never
//! validates (CRC-32 of four zero bytes is not zero): the zeroed region
//! after the log reads as "end". [`NvmFile::append`] writes the payload,
//! then the checksum, then the length — the header last. Recovery does not
//! rely on that order (a power loss may land a frame's pages in any
//! order); it relies on what follows the last valid frame.
//!
//! # Torn tail or corruption
//!
//! Nothing past the tail is ever non-zero except the frame being written
//! (a fresh file and a compacted one are zero after their log, and `open`
//! zeroes a torn frame before appending again). So when replay meets a
//! frame at offset `T` whose bounds or checksum are wrong (the "bad
//! frame"), `open` classifies everything from `T` to the end of the file:
//!
//! - **Clean end**: every byte from `T` on is zero.
//! - **Torn tail** — the last append was cut short; the bad frame is
//!   dropped (its bytes zeroed) and the log goes on from `T` — when both:
//!   1. no valid frame (a header whose length fits the file and whose
//!      checksum matches) starts at any offset after `T`; and
//!   2. if the bad frame's length field `L` is non-zero, its claimed
//!      extent `[T, T + 8 + L)` fits in the file and every byte after it
//!      is zero. If `L` is zero the header has not landed (the writer
//!      writes it last, and a power loss may keep a later page of the
//!      frame but not the header's), so the torn payload's length is
//!      unknown and rule 1 alone decides.
//! - **Corruption**, in every other case: a valid frame follows the bad
//!   one (the damage is in the middle of the log), a non-zero byte lies
//!   past the extent the bad frame claims, or its length runs past the end
//!   of the file. A frame whose checksum is right but whose payload does
//!   not decode as the record type is corruption too, wherever it is, and
//!   so is a bad magic.
//!
//! On corruption `open` fails with an error ([`Corruption`], kind
//! `InvalidData`) naming the file, the bad frame's byte offset, how many
//! apparently valid frames follow it and how many non-zero bytes lie after
//! it, and leaves the file untouched: nothing is written, zeroed, grown or
//! compacted, so the evidence survives. (The operator may then move the
//! file aside and start the node with an empty NVM: see
//! [`move_aside`].) A single flipped bit in any frame but the last is
//! always corruption: the checksum catches it and the next frame is
//! intact. Damage to the last frame is indistinguishable from a torn
//! write and is dropped as one. A torn payload that happens to hold the
//! bytes of a valid frame (a stored value that embeds one) is reported as
//! corruption: a false stop, never a silent loss.
//!
//! **Space.** The file's capacity is reserved with `fallocate` when it is
//! created, grown or opened (and so is the compaction's new file), so a
//! full device is a clean error naming the file and the bytes it needed,
//! at open or at compaction, never a `SIGBUS` from a store into a hole the
//! file system cannot fill. (On a file system without `fallocate` the file
//! is extended sparse, as before, and a warning is logged.)
//!
//! **Failed flushes.** An `msync` or `fsync` that fails may have dropped
//! dirty pages, and Linux reports such a failure once: a retry can succeed
//! with the data gone. So after one failure every later `append`,
//! `flush` and `sync_appended` of the store fails too; the host stops the
//! node on the first.
//!
//! **Compaction.** When a frame does not fit, the live image (one frame per
//! slot) is written to a fresh `<path>.tmp` of the same capacity, which is
//! `rename`d over `<path>` (atomic) and remapped. If even the compacted
//! image plus the new frame does not fit, `append` fails with an error
//! naming the file, the capacity and the live size, and changes nothing.
//!
//! # What survives what
//!
//! - **`kill -9` / panic / abort of the process** ([`Durability::Process`],
//!   the default): every `append` that returned survives. The mapping is
//!   `MAP_SHARED`, so its stores are in the kernel page cache the moment
//!   they are made; the kernel writes them back whether or not the process
//!   lives. A kill in the middle of an `append` leaves at most one torn
//!   frame at the tail, which recovery detects and drops — so exactly the
//!   unpersisted state is lost. A kill during compaction leaves either the
//!   old file or the complete new one at `<path>` (rename is atomic).
//! - **Power loss / kernel crash** ([`Durability::Machine`], `--fsync`):
//!   every `append` msyncs its frame before returning, and creation,
//!   growth, recovery and compaction fsync the file and its directory, so
//!   every `append` that returned survives. In `Process` mode nothing is
//!   promised across a machine crash (the page cache may be lost in any
//!   order, and an unsynced compaction may lose the whole file); call
//!   [`NvmFile::flush`] to make everything so far durable.
//!
//! Only one `NvmFile` may have a given path open at a time (in any
//! process): the file is not locked, and a second writer would corrupt it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use bincode::Options;
use memmap2::MmapMut;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::protocol::{land, Durable, Nvm};

/// First bytes of every NVM file; the last byte is the format version.
const MAGIC: [u8; 8] = *b"TNDMNVM1";
/// Bytes before the first frame.
const FILE_HEADER: usize = MAGIC.len();
/// Bytes of a frame before its payload: `len: u32` and `crc: u32`.
pub const FRAME_HEADER: usize = 8;
/// Granularity of the scan for non-zero bytes after the tail.
const ZERO_CHUNK: usize = 64 * 1024;

/// What an `append` must survive before it returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Survive the process dying (`kill -9`): no msync, the page cache
    /// holds the data.
    #[default]
    Process,
    /// Survive the machine dying (power loss): msync after every append.
    Machine,
}

/// What a node does when its NVM file is corrupt (see the module
/// documentation for what counts as corrupt).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnCorrupt {
    /// Refuse to start: the error names the file and the offset, and the
    /// file is left as it is for inspection.
    #[default]
    Stop,
    /// Rename the file aside ([`move_aside`]) and start with an empty NVM:
    /// the node's local NVM is treated as lost and it must rejoin by a
    /// full copy from the live members.
    MoveAside,
}

impl OnCorrupt {
    /// `stop` or `move-aside`.
    pub fn parse(s: &str) -> Result<OnCorrupt, String> {
        match s {
            "stop" => Ok(OnCorrupt::Stop),
            "move-aside" => Ok(OnCorrupt::MoveAside),
            other => Err(format!(
                "unknown NVM corruption policy '{other}': stop or move-aside"
            )),
        }
    }
}

/// Why [`NvmFile::open`] refused a file whose log is damaged (not torn):
/// the error inside the `io::Error` (kind `InvalidData`) it returns; see
/// [`corruption`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corruption {
    pub path: PathBuf,
    /// Byte offset of the bad frame.
    pub offset: usize,
    /// What is wrong with it.
    pub what: String,
    /// Apparently valid frames after it (the first run of consecutive
    /// valid frames found after it), and where that run starts.
    pub frames_after: usize,
    pub first_after: Option<usize>,
    /// Non-zero bytes after the bad frame's claimed extent (after its
    /// header when its length is zero or runs past the file).
    pub nonzero_after: usize,
    /// Where the count of `nonzero_after` starts.
    pub extent_end: usize,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NVM file {} is corrupt at byte offset {}: {}; {} apparently valid frame(s) follow it",
            self.path.display(),
            self.offset,
            self.what,
            self.frames_after
        )?;
        if let Some(at) = self.first_after {
            write!(f, " (from offset {at})")?;
        }
        write!(
            f,
            ", and {} byte(s) after offset {} are non-zero. Not a torn write: the file was left untouched",
            self.nonzero_after, self.extent_end
        )
    }
}

impl std::error::Error for Corruption {}

/// The [`Corruption`] inside `e`, if `e` is `open`'s refusal of a damaged
/// log (not a bad magic or an I/O error).
pub fn corruption(e: &io::Error) -> Option<&Corruption> {
    e.get_ref()?.downcast_ref::<Corruption>()
}

/// Rename the file at `path` to `<path>.corrupt-<unix seconds>` (with a
/// `.N` suffix if that exists) and make the rename durable. Returns the
/// new name.
pub fn move_aside(path: &Path) -> io::Result<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut base = path.as_os_str().to_owned();
    base.push(format!(".corrupt-{secs}"));
    let mut aside = PathBuf::from(&base);
    let mut n = 1;
    while aside.exists() {
        let mut s = base.clone();
        s.push(format!(".{n}"));
        aside = PathBuf::from(s);
        n += 1;
    }
    fs::rename(path, &aside).map_err(|e| annotate(path, e))?;
    sync_dir(path)?;
    Ok(aside)
}

/// A log-structured, memory-mapped store of `R` records. See the module
/// documentation.
pub struct NvmFile<R: Durable> {
    path: PathBuf,
    file: File,
    map: MmapMut,
    /// Offset just past the last complete frame.
    tail: usize,
    durability: Durability,
    compactions: u64,
    /// What [`NvmFile::sync_appended`] made durable: the tail it reached,
    /// in the file of which compaction.
    synced: (usize, u64),
    /// An msync or fsync failed: what it said. Every later write or flush
    /// fails (a retry could succeed with the data lost).
    failed: Option<String>,
    /// Reused serialization buffer.
    scratch: Vec<u8>,
    _records: std::marker::PhantomData<R>,
}

impl<R: Durable + Serialize + DeserializeOwned> NvmFile<R> {
    /// Open (or create, with `capacity_bytes`) the NVM file at `path` with
    /// [`Durability::Process`]. Returns the store and the recovered image.
    pub fn open(path: impl AsRef<Path>, capacity_bytes: u64) -> io::Result<(Self, Nvm<R>)> {
        Self::open_with(path, capacity_bytes, Durability::Process)
    }

    /// [`NvmFile::open`] with an explicit durability. Frames are replayed
    /// through [`land`]; a torn tail is dropped (its bytes zeroed), and
    /// corruption is an error ([`Corruption`]) that leaves the file
    /// untouched (see the module documentation). Then an existing file
    /// smaller than `capacity_bytes` is grown; a larger one keeps its size
    /// (see [`NvmFile::capacity`]); either way its space is reserved.
    pub fn open_with(
        path: impl AsRef<Path>,
        capacity_bytes: u64,
        durability: Durability,
    ) -> io::Result<(Self, Nvm<R>)> {
        let path = path.as_ref().to_path_buf();
        let capacity = check_capacity(&path, capacity_bytes)?;
        remove_if_exists(&tmp_path(&path))?;
        let (file, map, image, tail) = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => open_existing::<R>(&path, file, capacity, durability)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (file, map) = create_fresh(&path, capacity, &[], durability, &path)?;
                (file, map, Nvm::new(), FILE_HEADER)
            }
            Err(e) => return Err(annotate(&path, e)),
        };
        let mut store = NvmFile {
            path,
            file,
            map,
            tail,
            durability,
            compactions: 0,
            synced: (0, u64::MAX),
            failed: None,
            scratch: Vec::new(),
            _records: std::marker::PhantomData,
        };
        if durability == Durability::Machine {
            store.flush()?;
        }
        Ok((store, image))
    }

    /// Persist `record`: write its frame at the tail (compacting first if
    /// it does not fit), and msync it under [`Durability::Machine`]. On
    /// error nothing has changed (but after a failed msync the store
    /// refuses every later append).
    pub fn append(&mut self, record: &R) -> io::Result<()> {
        self.check_failed()?;
        self.scratch.clear();
        encode_into(&mut self.scratch, record).map_err(|e| annotate(&self.path, e))?;
        let frame_len = frame_len(&self.path, self.scratch.len())?;
        if self.tail + frame_len > self.map.len() {
            self.compact(frame_len)?;
        }
        write_frame(&mut self.map[self.tail..], &self.scratch);
        if self.durability == Durability::Machine {
            let r = self.map.flush_range(self.tail, frame_len);
            self.note(r)?;
        }
        self.tail += frame_len;
        Ok(())
    }

    /// The live image: every appended record landed (replayed from the
    /// mapped log; what a restart would recover).
    pub fn image(&self) -> io::Result<Nvm<R>> {
        replay::<R>(&self.path, &self.map).map(|r| r.0)
    }

    /// Make everything appended so far survive a machine crash: msync the
    /// whole mapping and fsync the file and its directory.
    pub fn flush(&mut self) -> io::Result<()> {
        self.check_failed()?;
        let r = self.map.flush();
        self.note(r)?;
        let r = self.file.sync_all();
        self.note(r)?;
        let r = sync_dir(&self.path);
        self.note(r)
    }

    /// Group commit under [`Durability::Process`]: make every frame
    /// appended since the last call survive a machine crash, by an msync of
    /// just those pages (of the whole file after a compaction, or the
    /// first time).
    pub fn sync_appended(&mut self) -> io::Result<()> {
        self.check_failed()?;
        let (at, file) = self.synced;
        if file != self.compactions {
            self.flush()?;
        } else if self.tail > at {
            let r = self.map.flush_range(at, self.tail - at);
            self.note(r)?;
        }
        self.synced = (self.tail, self.compactions);
        Ok(())
    }

    /// The current durability mode.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Change the durability mode. Switching to [`Durability::Machine`]
    /// flushes first, so everything appended before is durable too.
    pub fn set_durability(&mut self, durability: Durability) -> io::Result<()> {
        if durability == Durability::Machine && self.durability != Durability::Machine {
            self.flush()?;
        }
        self.durability = durability;
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's (fixed) size in bytes.
    pub fn capacity(&self) -> usize {
        self.map.len()
    }

    /// Bytes in use: the file header plus every frame up to the tail.
    pub fn used(&self) -> usize {
        self.tail
    }

    /// Another handle on the current file (to flush it from another thread).
    pub fn file_handle(&self) -> io::Result<File> {
        self.file.try_clone().map_err(|e| annotate(&self.path, e))
    }

    /// How many compactions this store has run since it was opened.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    /// Fail if an earlier msync or fsync failed.
    fn check_failed(&self) -> io::Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(e) => Err(io::Error::other(format!(
                "NVM file {}: an earlier flush to the device failed ({e}); what it held may be lost, so the store takes no more writes",
                self.path.display()
            ))),
        }
    }

    /// Pass on the result of an msync or fsync, remembering a failure.
    fn note(&mut self, r: io::Result<()>) -> io::Result<()> {
        r.map_err(|e| {
            self.failed = Some(e.to_string());
            annotate(&self.path, e)
        })
    }

    /// Rewrite the image into a fresh file so that a frame of `frame_len`
    /// bytes fits after it, or fail without changing anything.
    fn compact(&mut self, frame_len: usize) -> io::Result<()> {
        let image = self.image()?;
        let body = encode_image(&self.path, &image)?;
        let live = FILE_HEADER + body.len();
        if live + frame_len > self.map.len() {
            return Err(self.full_error(live, image.len(), frame_len));
        }
        let tmp = tmp_path(&self.path);
        let (file, map) = create_fresh(&self.path, self.map.len(), &body, self.durability, &tmp)?;
        self.file = file;
        self.map = map;
        self.tail = live;
        self.compactions += 1;
        Ok(())
    }

    /// The error for "the live image plus the new frame exceed the file".
    fn full_error(&self, live: usize, slots: usize, frame_len: usize) -> io::Error {
        let msg = format!(
            "NVM file {} is full: capacity {} bytes cannot hold the live image ({} bytes, {} slots) plus a {}-byte frame",
            self.path.display(),
            self.map.len(),
            live,
            slots,
            frame_len
        );
        io::Error::other(msg)
    }
}

impl<R: Durable> std::fmt::Debug for NvmFile<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmFile")
            .field("path", &self.path)
            .field("capacity", &self.map.len())
            .field("used", &self.tail)
            .field("durability", &self.durability)
            .field("compactions", &self.compactions)
            .finish()
    }
}

/// The bincode configuration of payloads.
fn codec() -> impl Options {
    bincode::DefaultOptions::new()
}

/// Append the encoding of `record` to `buf`.
fn encode_into<R: Serialize>(buf: &mut Vec<u8>, record: &R) -> io::Result<()> {
    codec()
        .serialize_into(buf, record)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The size of the frame holding a `payload_len`-byte payload, or an
/// error if the length does not fit the `u32` length field.
fn frame_len(path: &Path, payload_len: usize) -> io::Result<usize> {
    if u32::try_from(payload_len).is_err() {
        let msg = format!("record of {payload_len} bytes is too large for a frame");
        return Err(annotate(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, msg),
        ));
    }
    Ok(FRAME_HEADER + payload_len)
}

/// The checksum of a frame: CRC-32 of its length bytes, then its payload.
fn checksum(len: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(len);
    h.update(payload);
    h.finalize()
}

/// The 8-byte header of a frame holding `payload`.
fn frame_header(payload: &[u8]) -> [u8; FRAME_HEADER] {
    let len = (payload.len() as u32).to_le_bytes();
    let crc = checksum(&len, payload).to_le_bytes();
    let mut header = [0; FRAME_HEADER];
    header[..4].copy_from_slice(&len);
    header[4..].copy_from_slice(&crc);
    header
}

/// Write the frame of `payload` at the start of `buf`: payload first, then
/// the checksum, then the length.
fn write_frame(buf: &mut [u8], payload: &[u8]) {
    let header = frame_header(payload);
    buf[FRAME_HEADER..FRAME_HEADER + payload.len()].copy_from_slice(payload);
    buf[4..8].copy_from_slice(&header[4..]);
    buf[..4].copy_from_slice(&header[..4]);
}

/// The length field of the frame at `at`, if its header fits in `map`.
fn len_field(map: &[u8], at: usize) -> Option<usize> {
    let bytes = map.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?) as usize)
}

/// The payload range of the frame at `at`, if it is complete and valid.
fn read_frame(map: &[u8], at: usize) -> Option<Range<usize>> {
    let start = at.checked_add(FRAME_HEADER).filter(|&s| s <= map.len())?;
    let len_bytes = &map[at..at + 4];
    let len = len_field(map, at)?;
    let crc = u32::from_le_bytes(map[at + 4..start].try_into().ok()?);
    let end = start.checked_add(len).filter(|&e| e <= map.len())?;
    (checksum(len_bytes, &map[start..end]) == crc).then_some(start..end)
}

/// Rebuild the image from the valid frames of `map`; also returns the
/// offset after the last valid frame. A valid frame that does not decode
/// (a different record type) is corruption, not a torn write.
fn replay<R: Durable + DeserializeOwned>(path: &Path, map: &[u8]) -> io::Result<(Nvm<R>, usize)> {
    check_magic(path, map)?;
    let mut image = Nvm::new();
    let mut at = FILE_HEADER;
    while let Some(payload) = read_frame(map, at) {
        let record = codec()
            .deserialize::<R>(&map[payload.clone()])
            .map_err(|e| {
                let after = payload.end;
                corrupt(Corruption {
                    path: path.to_path_buf(),
                    offset: at,
                    what: format!("its checksum is right but its payload does not decode: {e}"),
                    frames_after: valid_run(map, after),
                    first_after: read_frame(map, after).map(|_| after),
                    nonzero_after: count_nonzero(&map[after..]),
                    extent_end: after,
                })
            })?;
        land(&mut image, record);
        at = payload.end;
    }
    Ok((image, at))
}

/// `c` as an `io::Error`.
fn corrupt(c: Corruption) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, c)
}

/// How many consecutive valid frames start at `at`.
fn valid_run(map: &[u8], mut at: usize) -> usize {
    let mut n = 0;
    while let Some(p) = read_frame(map, at) {
        n += 1;
        at = p.end;
    }
    n
}

/// Whether every byte of `b` is zero (word at a time).
fn is_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(16);
    let acc = words.by_ref().fold(0u128, |a, w| {
        a | u128::from_ne_bytes(w.try_into().expect("16 bytes"))
    });
    acc == 0 && words.remainder().iter().all(|&x| x == 0)
}

fn count_nonzero(b: &[u8]) -> usize {
    b.iter().filter(|&&x| x != 0).count()
}

/// The offset of the last non-zero byte of `map[from..]` (the mapping of
/// `file`), reading only the file's data extents.
fn last_nonzero(file: &File, map: &[u8], from: usize) -> Option<usize> {
    for range in data_ranges(file, from, map.len()).into_iter().rev() {
        let mut end = range.end;
        while end > range.start {
            let start = range.start.max(end.saturating_sub(ZERO_CHUNK));
            let chunk = &map[start..end];
            if !is_zero(chunk) {
                let i = chunk.iter().rposition(|&b| b != 0).expect("non-zero");
                return Some(start + i);
            }
            end = start;
        }
    }
    None
}

/// CRC-32 of `n` zero bytes as a hasher, to extend a checksum over the
/// zeros after the last non-zero byte without reading them.
struct Zeros(Vec<crc32fast::Hasher>);

impl Zeros {
    fn new() -> Zeros {
        let mut one = crc32fast::Hasher::new();
        one.update(&[0]);
        let mut pows = vec![one];
        for _ in 1..48 {
            let mut h = pows.last().expect("non-empty").clone();
            h.combine(&pows[pows.len() - 1]);
            pows.push(h);
        }
        Zeros(pows)
    }

    /// Extend `h` by `n` zero bytes.
    fn extend(&self, h: &mut crc32fast::Hasher, n: usize) {
        for (i, pow) in self.0.iter().enumerate() {
            if n >> i & 1 == 1 {
                h.combine(pow);
            }
        }
    }
}

/// The first offset in `(after, upto]` where a valid frame starts, given
/// that every byte of `map` past `upto` is zero.
fn first_valid_after(map: &[u8], after: usize, upto: usize) -> Option<usize> {
    let zeros = Zeros::new();
    let data_end = upto + 1;
    let last = upto.min(map.len().checked_sub(FRAME_HEADER)?);
    (after + 1..=last).find(|&s| {
        let header = &map[s..s + FRAME_HEADER];
        if is_zero(header) {
            return false; // never valid: CRC-32 of a zero length is not zero
        }
        let len = len_field(map, s).expect("header fits");
        let start = s + FRAME_HEADER;
        let Some(end) = start.checked_add(len).filter(|&e| e <= map.len()) else {
            return false;
        };
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let mut h = crc32fast::Hasher::new();
        h.update(&header[..4]);
        let real = end.min(data_end.max(start));
        h.update(&map[start..real]);
        zeros.extend(&mut h, end - real);
        h.finalize() == crc
    })
}

/// Classify `map[tail..]` after the last valid frame (see the module
/// documentation): `Ok(None)` if it is all zero, `Ok(Some(end))` if
/// `tail..end` is a torn frame, else the corruption.
fn classify_tail(path: &Path, file: &File, map: &[u8], tail: usize) -> io::Result<Option<usize>> {
    let Some(last) = last_nonzero(file, map, tail) else {
        return Ok(None);
    };
    let follows = first_valid_after(map, tail, last);
    let len = len_field(map, tail).unwrap_or(0);
    let claimed = (tail + FRAME_HEADER)
        .checked_add(len)
        .filter(|&e| e <= map.len());
    let (torn, extent_end, what) = match (len, claimed) {
        _ if tail + FRAME_HEADER > map.len() => (
            false,
            tail,
            "non-zero bytes where no frame header fits".to_string(),
        ),
        (0, _) => (
            follows.is_none(),
            tail + FRAME_HEADER,
            "its header is zero but non-zero bytes follow".to_string(),
        ),
        (len, None) => (
            false,
            tail + FRAME_HEADER,
            format!("its length field claims {len} bytes, past the end of the file"),
        ),
        (len, Some(end)) => (
            follows.is_none() && last < end,
            end,
            format!("its checksum does not match its {len}-byte payload"),
        ),
    };
    if torn {
        return Ok(Some(last + 1));
    }
    let nonzero_after = if extent_end <= last {
        data_ranges(file, extent_end, map.len())
            .into_iter()
            .map(|r| count_nonzero(&map[r]))
            .sum()
    } else {
        0
    };
    Err(corrupt(Corruption {
        path: path.to_path_buf(),
        offset: tail,
        what,
        frames_after: follows.map_or(0, |at| valid_run(map, at)),
        first_after: follows,
        nonzero_after,
        extent_end,
    }))
}

/// The compacted log body of `image`: one frame per slot.
fn encode_image<R: Durable + Serialize>(path: &Path, image: &Nvm<R>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut payload = Vec::new();
    for record in image.values() {
        payload.clear();
        encode_into(&mut payload, record).map_err(|e| annotate(path, e))?;
        frame_len(path, payload.len())?;
        body.extend_from_slice(&frame_header(&payload));
        body.extend_from_slice(&payload);
    }
    Ok(body)
}

/// The parts of `[from, end)` that may hold data: the file's data extents
/// there (`SEEK_DATA`/`SEEK_HOLE`, which count pages written through the
/// mapping but not yet written back), or all of it where the file system
/// cannot tell.
fn data_ranges(file: &File, from: usize, end: usize) -> Vec<Range<usize>> {
    use std::os::fd::AsRawFd;
    let seek = |at: usize, whence| {
        // SAFETY: lseek on a descriptor this store owns; it moves only
        // that descriptor's offset, which nothing else here uses.
        unsafe { libc::lseek(file.as_raw_fd(), at as libc::off_t, whence) }
    };
    let mut ranges = Vec::new();
    let mut at = from;
    while at < end {
        let data = seek(at, libc::SEEK_DATA);
        if data < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break; // no data after `at`
            }
            return vec![from..end];
        }
        let hole = seek(data as usize, libc::SEEK_HOLE);
        if hole < 0 {
            return vec![from..end];
        }
        let (data, hole) = ((data as usize).min(end), (hole as usize).min(end));
        if data < hole {
            ranges.push(data..hole);
        }
        at = hole.max(data + 1);
    }
    ranges
}

/// Fail unless `map` starts with the NVM magic.
fn check_magic(path: &Path, map: &[u8]) -> io::Result<()> {
    if map.len() >= FILE_HEADER && map[..FILE_HEADER] == MAGIC {
        return Ok(());
    }
    let e = io::Error::new(
        io::ErrorKind::InvalidData,
        "not a Tandem NVM file (bad magic at byte offset 0); left untouched",
    );
    Err(annotate(path, e))
}

/// `capacity_bytes` as a mapping length, if it can hold the file header.
fn check_capacity(path: &Path, capacity_bytes: u64) -> io::Result<usize> {
    match usize::try_from(capacity_bytes) {
        Ok(c) if c >= FILE_HEADER + FRAME_HEADER => Ok(c),
        _ => {
            let msg = format!("capacity {capacity_bytes} bytes is out of range");
            Err(annotate(
                path,
                io::Error::new(io::ErrorKind::InvalidInput, msg),
            ))
        }
    }
}

/// Recover an existing NVM file: check the magic, replay and classify its
/// tail at its current size (a bad magic or corruption returns here, the
/// file untouched), zero a torn frame, then reserve the space of
/// `capacity` (or of the file's size, if larger) and map it all.
fn open_existing<R: Durable + DeserializeOwned>(
    path: &Path,
    mut file: File,
    capacity: usize,
    durability: Durability,
) -> io::Result<(File, MmapMut, Nvm<R>, usize)> {
    let mut magic = [0; FILE_HEADER];
    match file.read_exact(&mut magic) {
        Err(e) if e.kind() != io::ErrorKind::UnexpectedEof => return Err(annotate(path, e)),
        _ => check_magic(path, &magic)?,
    }
    let mut map = map_file(path, &file)?;
    let (image, tail) = replay::<R>(path, &map)?;
    if let Some(end) = classify_tail(path, &file, &map, tail)? {
        log::warn!(
            "NVM file {}: dropped a torn frame at byte offset {tail} ({} bytes)",
            path.display(),
            end - tail
        );
        map[tail..end].fill(0);
    }
    let len = map.len().max(capacity);
    reserve(path, &file, len)?;
    if len > map.len() {
        if durability == Durability::Machine {
            file.sync_all().map_err(|e| annotate(path, e))?;
        }
        map = map_file(path, &file)?;
    }
    Ok((file, map, image, tail))
}

/// Allocate the first `len` bytes of `file` on its device (growing it to
/// `len` if smaller), so stores through the mapping never fault for want
/// of space. Where the file system has no `fallocate`, only grow it.
fn reserve(path: &Path, file: &File, len: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on a descriptor we own; mode 0 allocates blocks
    // (and extends the size), never changing data already there.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
            log::warn!(
                "NVM file {}: the file system cannot reserve space (fallocate: {e}); the file is sparse, and a full device will kill the process",
                path.display()
            );
            let size = file.metadata().map_err(|e| annotate(path, e))?.len();
            if size < len as u64 {
                file.set_len(len as u64).map_err(|e| annotate(path, e))?;
            }
            Ok(())
        }
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => Err(annotate(
            path,
            io::Error::new(
                e.kind(),
                format!(
                    "no space left on device (reserving {len} bytes; os error {})",
                    e.raw_os_error().unwrap_or(0)
                ),
            ),
        )),
        _ => Err(annotate(
            path,
            io::Error::new(e.kind(), format!("cannot reserve {len} bytes: {e}")),
        )),
    }
}

/// Write a fresh file of `capacity` bytes holding `body` after the magic
/// to `<path>.tmp`, then rename it over `path`. Under
/// [`Durability::Machine`] the file and the rename are made durable. If
/// the space cannot be reserved, the tmp file is removed, `path` is left
/// as it was, and the error names `name` (the file the caller is making).
fn create_fresh(
    path: &Path,
    capacity: usize,
    body: &[u8],
    durability: Durability,
    name: &Path,
) -> io::Result<(File, MmapMut)> {
    let tmp = tmp_path(path);
    let opts = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .clone();
    let file = opts.open(&tmp).map_err(|e| annotate(&tmp, e))?;
    if let Err(e) = reserve(name, &file, capacity) {
        drop(file);
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    let mut map = map_file(&tmp, &file)?;
    map[..FILE_HEADER].copy_from_slice(&MAGIC);
    map[FILE_HEADER..FILE_HEADER + body.len()].copy_from_slice(body);
    if durability == Durability::Machine {
        map.flush().map_err(|e| annotate(&tmp, e))?;
        file.sync_all().map_err(|e| annotate(&tmp, e))?;
    }
    fs::rename(&tmp, path).map_err(|e| annotate(path, e))?;
    if durability == Durability::Machine {
        sync_dir(path)?;
    }
    Ok((file, map))
}

/// Map `file` read-write and shared.
fn map_file(path: &Path, file: &File) -> io::Result<MmapMut> {
    // SAFETY: the mapping is only accessed through `NvmFile`, which owns
    // it; the file is private to this store (one opener per path, see the
    // module docs), so no one truncates or writes it behind our back.
    // Not populated: faulting in the whole capacity took 6–7 ms of every
    // restart of a 64 MiB file, while faulting pages as the tail reaches
    // them costs the persist path next to nothing (`measure_one_million_appends`:
    // 45 ms with the mapping populated, 47 ms without).
    unsafe { memmap2::MmapOptions::new().map_mut(file) }.map_err(|e| annotate(path, e))
}

/// fsync the directory holding `path`, making a create or rename durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| annotate(dir, e))
}

/// `<path>.tmp`, where compaction builds the new file.
fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Remove `path`, ignoring "not found" (a leftover of a crashed compaction).
fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(annotate(path, e)),
        _ => Ok(()),
    }
}

/// `e` with the file it concerns in its message.
fn annotate(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("NVM file {}: {e}", path.display()))
}
