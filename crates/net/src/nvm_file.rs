//! A node's NVM for real processes: a log of [`Durable`] records in a
//! memory-mapped file (DESIGN.md §7.1).
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
//! then the checksum, then the length — the header last — but recovery
//! does not rely on that order: it stops at the first frame whose bounds or
//! checksum are wrong and ignores everything after it.
//!
//! **Stale bytes.** Nothing past the tail is ever non-zero except the frame
//! being written. `open` re-establishes this after a crash by zeroing
//! everything after the last valid frame (only the file's data extents are
//! read, holes being zero, and only chunks that hold a non-zero byte are
//! written, so a clean file is barely touched), and compaction writes a
//! fresh zero-filled file. So no frame from an earlier history can ever
//! follow the tail and be mistaken for a new one; no generation number is
//! needed.
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
/// Granularity of the scan that zeroes stale bytes after the tail.
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

    /// [`NvmFile::open`] with an explicit durability. An existing file
    /// smaller than `capacity_bytes` is grown; a larger one keeps its size
    /// (see [`NvmFile::capacity`]). Frames are replayed through [`land`]
    /// up to the first torn or corrupt one; everything after it is zeroed.
    pub fn open_with(
        path: impl AsRef<Path>,
        capacity_bytes: u64,
        durability: Durability,
    ) -> io::Result<(Self, Nvm<R>)> {
        let path = path.as_ref().to_path_buf();
        let capacity = check_capacity(&path, capacity_bytes)?;
        remove_if_exists(&tmp_path(&path))?;
        let (file, mut map) = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => map_existing(&path, file, capacity, durability)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_fresh(&path, capacity, &[], durability)?
            }
            Err(e) => return Err(annotate(&path, e)),
        };
        let (image, tail) = replay::<R>(&path, &map)?;
        zero_from(&file, &mut map, tail);
        let store = NvmFile {
            path,
            file,
            map,
            tail,
            durability,
            compactions: 0,
            synced: (0, u64::MAX),
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
    /// error nothing has changed.
    pub fn append(&mut self, record: &R) -> io::Result<()> {
        self.scratch.clear();
        encode_into(&mut self.scratch, record).map_err(|e| annotate(&self.path, e))?;
        let frame_len = frame_len(&self.path, self.scratch.len())?;
        if self.tail + frame_len > self.map.len() {
            self.compact(frame_len)?;
        }
        write_frame(&mut self.map[self.tail..], &self.scratch);
        if self.durability == Durability::Machine {
            self.map
                .flush_range(self.tail, frame_len)
                .map_err(|e| annotate(&self.path, e))?;
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
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush().map_err(|e| annotate(&self.path, e))?;
        self.file.sync_all().map_err(|e| annotate(&self.path, e))?;
        sync_dir(&self.path)
    }

    /// Group commit under [`Durability::Process`]: make every frame
    /// appended since the last call survive a machine crash, by an msync of
    /// just those pages (of the whole file after a compaction, or the
    /// first time).
    pub fn sync_appended(&mut self) -> io::Result<()> {
        let (at, file) = self.synced;
        if file != self.compactions {
            self.flush()?;
        } else if self.tail > at {
            self.map
                .flush_range(at, self.tail - at)
                .map_err(|e| annotate(&self.path, e))?;
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

    /// How many compactions this store has run since it was opened.
    /// Another handle on the current file (to flush it from another thread).
    pub fn file_handle(&self) -> io::Result<File> {
        self.file.try_clone().map_err(|e| annotate(&self.path, e))
    }

    pub fn compactions(&self) -> u64 {
        self.compactions
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
        let (file, map) = create_fresh(&self.path, self.map.len(), &body, self.durability)?;
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

/// The payload range of the frame at `at`, if it is complete and valid.
fn read_frame(map: &[u8], at: usize) -> Option<Range<usize>> {
    let start = at.checked_add(FRAME_HEADER).filter(|&s| s <= map.len())?;
    let len_bytes = &map[at..at + 4];
    let len = u32::from_le_bytes(len_bytes.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(map[at + 4..start].try_into().ok()?);
    let end = start.checked_add(len).filter(|&e| e <= map.len())?;
    (checksum(len_bytes, &map[start..end]) == crc).then_some(start..end)
}

/// Rebuild the image from the valid frames of `map`; also returns the
/// offset after the last valid frame. A valid frame that does not decode
/// (a different record type) is an error, not a torn write.
fn replay<R: Durable + DeserializeOwned>(path: &Path, map: &[u8]) -> io::Result<(Nvm<R>, usize)> {
    check_magic(path, map)?;
    let mut image = Nvm::new();
    let mut at = FILE_HEADER;
    while let Some(payload) = read_frame(map, at) {
        let record = codec()
            .deserialize::<R>(&map[payload.clone()])
            .map_err(|e| {
                let msg = format!("frame at offset {at} does not decode: {e}");
                annotate(path, io::Error::new(io::ErrorKind::InvalidData, msg))
            })?;
        land(&mut image, record);
        at = payload.end;
    }
    Ok((image, at))
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

/// Zero `map[from..]` (the mapping of `file`), writing only the chunks
/// that hold a non-zero byte. Only the file's data extents are read: a
/// hole reads as zero, and most of a fresh file is one (its pages were
/// never written), so a restart does not read the whole capacity.
fn zero_from(file: &File, map: &mut [u8], from: usize) {
    for range in data_ranges(file, from, map.len()) {
        for chunk in map[range].chunks_mut(ZERO_CHUNK) {
            if chunk.iter().any(|&b| b != 0) {
                chunk.fill(0);
            }
        }
    }
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
        ranges.push(data..hole);
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
        "not a Tandem NVM file (bad magic)",
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

/// Map an existing NVM file, first growing it to `capacity` if smaller.
/// A file without the magic is rejected untouched.
fn map_existing(
    path: &Path,
    mut file: File,
    capacity: usize,
    durability: Durability,
) -> io::Result<(File, MmapMut)> {
    let mut magic = [0; FILE_HEADER];
    match file.read_exact(&mut magic) {
        Err(e) if e.kind() != io::ErrorKind::UnexpectedEof => return Err(annotate(path, e)),
        _ => check_magic(path, &magic)?,
    }
    let len = file.metadata().map_err(|e| annotate(path, e))?.len();
    if len < capacity as u64 {
        file.set_len(capacity as u64)
            .map_err(|e| annotate(path, e))?;
        if durability == Durability::Machine {
            file.sync_all().map_err(|e| annotate(path, e))?;
        }
    }
    let map = map_file(path, &file)?;
    Ok((file, map))
}

/// Write a fresh file of `capacity` bytes holding `body` after the magic
/// to `<path>.tmp`, then rename it over `path`. Under
/// [`Durability::Machine`] the file and the rename are made durable.
fn create_fresh(
    path: &Path,
    capacity: usize,
    body: &[u8],
    durability: Durability,
) -> io::Result<(File, MmapMut)> {
    let tmp = tmp_path(path);
    let opts = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .clone();
    let file = opts.open(&tmp).map_err(|e| annotate(&tmp, e))?;
    file.set_len(capacity as u64)
        .map_err(|e| annotate(&tmp, e))?;
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
