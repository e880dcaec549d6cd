//! Tests of the memory-mapped NVM store (`tandem_net::nvm_file`).

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tandem_net::nvm_file::{
    corruption, move_aside, Corruption, Durability, NvmFile, OnCorrupt, FRAME_HEADER,
};
use tandem_net::{land, Durable, Nvm};

/// A test record: a versioned key-value entry (landing keeps the highest
/// version, like DDP) or an epoch (landing overwrites).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Rec {
    Kv {
        key: u32,
        version: u64,
        value: Vec<u8>,
    },
    Epoch(u64),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Kv(u32),
    Epoch,
}

impl Durable for Rec {
    type Slot = Slot;
    fn slot(&self) -> Slot {
        match self {
            Rec::Kv { key, .. } => Slot::Kv(*key),
            Rec::Epoch(_) => Slot::Epoch,
        }
    }
    fn land(slot: &mut Self, new: Self) {
        match (&*slot, &new) {
            (Rec::Kv { version: old, .. }, Rec::Kv { version, .. }) if version <= old => {}
            _ => *slot = new,
        }
    }
}

fn kv(key: u32, version: u64, len: usize) -> Rec {
    Rec::Kv {
        key,
        version,
        value: vec![(version % 251) as u8; len],
    }
}

/// The image that landing `records` in order yields.
fn expected(records: &[Rec]) -> Nvm<Rec> {
    let mut nvm = Nvm::new();
    for r in records {
        land(&mut nvm, r.clone());
    }
    nvm
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tandem-nvm-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn file(&self) -> PathBuf {
        self.0.join("nvm")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Open `path` and append `records`, returning each frame's start offset.
fn write_all(path: &Path, capacity: u64, records: &[Rec]) -> Vec<usize> {
    let (mut nvm, _) = NvmFile::<Rec>::open(path, capacity).unwrap();
    records
        .iter()
        .map(|r| {
            let at = nvm.used();
            nvm.append(r).unwrap();
            at
        })
        .collect()
}

fn reopen(path: &Path, capacity: u64) -> Nvm<Rec> {
    let (store, image) = NvmFile::<Rec>::open(path, capacity).unwrap();
    assert_eq!(store.image().unwrap(), image);
    image
}

/// Overwrite `bytes` at `offset` of the file at `path`.
fn poke(path: &Path, offset: usize, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset as u64)).unwrap();
    f.write_all(bytes).unwrap();
}

fn mixed_records(n: u64) -> Vec<Rec> {
    (0..n)
        .map(|i| {
            if i % 17 == 0 {
                Rec::Epoch(i)
            } else {
                kv((i * 7 % 50) as u32, i, (i % 40) as usize)
            }
        })
        .collect()
}

#[test]
fn round_trip_rebuilds_the_landed_image() {
    let dir = TempDir::new("round-trip");
    let records = mixed_records(5000);
    {
        let (mut store, image) = NvmFile::<Rec>::open(dir.file(), 1 << 20).unwrap();
        assert!(image.is_empty());
        for r in &records {
            store.append(r).unwrap();
        }
        assert_eq!(store.image().unwrap(), expected(&records));
        assert_eq!(store.compactions(), 0);
    }
    assert_eq!(reopen(&dir.file(), 1 << 20), expected(&records));
    // Reopening twice changes nothing, and appends continue after the log.
    let more = kv(999, 1, 3);
    {
        let (mut store, _) = NvmFile::<Rec>::open(dir.file(), 1 << 20).unwrap();
        store.append(&more).unwrap();
    }
    let mut all = records.clone();
    all.push(more);
    assert_eq!(reopen(&dir.file(), 1 << 20), expected(&all));
}

#[test]
fn replay_respects_land() {
    let dir = TempDir::new("land");
    let records = vec![
        kv(1, 10, 4),
        kv(1, 3, 8),
        Rec::Epoch(7),
        Rec::Epoch(2),
        kv(2, 1, 1),
        kv(1, 9, 2),
    ];
    write_all(&dir.file(), 4096, &records);
    let image = reopen(&dir.file(), 4096);
    assert_eq!(
        image[&Slot::Kv(1)],
        kv(1, 10, 4),
        "an older version must not regress the slot"
    );
    assert_eq!(
        image[&Slot::Epoch],
        Rec::Epoch(2),
        "Epoch lands by overwriting"
    );
    assert_eq!(image, expected(&records));
}

/// Write 200 records, damage the last frame with `damage(path, start,
/// end)`, and check that reopening yields the first 199 — and that the
/// store then continues cleanly.
fn check_torn_tail(name: &str, damage: impl Fn(&Path, usize, usize)) {
    let dir = TempDir::new(name);
    let records = mixed_records(200);
    let starts = write_all(&dir.file(), 1 << 16, &records);
    let last = *starts.last().unwrap();
    let end = {
        let (store, _) = NvmFile::<Rec>::open(dir.file(), 1 << 16).unwrap();
        store.used()
    };
    damage(&dir.file(), last, end);
    let (mut store, image) = NvmFile::<Rec>::open(dir.file(), 1 << 16).unwrap();
    assert_eq!(image, expected(&records[..199]), "{name}");
    assert_eq!(
        store.used(),
        last,
        "{name}: the tail is the torn frame's start"
    );
    let next = kv(7, 1_000_000, 1);
    store.append(&next).unwrap();
    drop(store);
    let mut want = records[..199].to_vec();
    want.push(next);
    assert_eq!(reopen(&dir.file(), 1 << 16), expected(&want), "{name}");
}

#[test]
fn torn_tail_partial_payload_is_dropped() {
    // The last frame's payload was only half written (the rest still zero).
    check_torn_tail("torn-payload", |path, start, end| {
        let half = start + FRAME_HEADER + (end - start - FRAME_HEADER) / 2;
        poke(path, half, &vec![0; end - half]);
    });
}

#[test]
fn torn_tail_zero_checksum_is_dropped() {
    check_torn_tail("torn-crc", |path, start, _| poke(path, start + 4, &[0; 4]));
}

#[test]
fn torn_tail_garbage_payload_is_dropped() {
    check_torn_tail("torn-garbage", |path, start, _| {
        poke(path, start + FRAME_HEADER, &[0xAB; 3])
    });
}

#[test]
fn torn_tail_header_only_is_dropped() {
    // Only the header landed: its payload bytes are all zero.
    check_torn_tail("torn-header", |path, start, end| {
        poke(
            path,
            start + FRAME_HEADER,
            &vec![0; end - start - FRAME_HEADER],
        )
    });
}

#[test]
fn torn_tail_payload_without_header_is_dropped() {
    // The writer writes the payload first: all of it landed, no header.
    check_torn_tail("torn-no-header", |path, start, _| {
        poke(path, start, &[0; FRAME_HEADER])
    });
}

#[test]
fn torn_tail_half_payload_without_header_is_dropped() {
    check_torn_tail("torn-half-no-header", |path, start, end| {
        let half = start + FRAME_HEADER + (end - start - FRAME_HEADER) / 2;
        poke(path, start, &[0; FRAME_HEADER]);
        poke(path, half, &vec![0; end - half]);
    });
}

#[test]
fn torn_tail_payload_and_checksum_without_length_is_dropped() {
    // Payload, then checksum; the length (written last) did not land.
    check_torn_tail("torn-no-len", |path, start, _| poke(path, start, &[0; 4]));
}

/// The `Corruption` inside `open`'s error, checking that the message names
/// the file and the offset.
fn corruption_of(path: &Path, err: &std::io::Error) -> Corruption {
    let msg = err.to_string();
    let c = corruption(err)
        .unwrap_or_else(|| panic!("not a corruption error: {msg}"))
        .clone();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("byte offset {}", c.offset)), "{msg}");
    c
}

#[test]
fn any_flipped_bit_in_any_frame_but_the_last_stops_open_and_leaves_the_file_alone() {
    let dir = TempDir::new("bitflip");
    let records: Vec<Rec> = (0..40)
        .map(|i| kv(i, u64::from(i) + 1, (i % 7) as usize))
        .collect();
    let starts = write_all(&dir.file(), 4096, &records);
    let end = NvmFile::<Rec>::open(dir.file(), 4096).unwrap().0.used();
    let clean = fs::read(dir.file()).unwrap();
    let mut opened = 0;
    for k in 0..40 {
        let frame_end = if k + 1 < 40 { starts[k + 1] } else { end };
        for byte in starts[k]..frame_end {
            for bit in 0..8 {
                let mut bytes = clean.clone();
                bytes[byte] ^= 1 << bit;
                fs::write(dir.file(), &bytes).unwrap();
                let result = NvmFile::<Rec>::open(dir.file(), 4096);
                opened += 1;
                if k == 39 {
                    // Damage to the last frame is a torn write: dropped, or
                    // (a shortened length field) refused; never misread.
                    if let Ok((_, image)) = result {
                        assert_eq!(image, expected(&records[..39]), "byte {byte} bit {bit}");
                    }
                    continue;
                }
                let err = result.err().unwrap_or_else(|| {
                    panic!("frame {k} byte {byte} bit {bit}: a flipped bit was accepted")
                });
                let c = corruption_of(&dir.file(), &err);
                assert_eq!(
                    c.offset, starts[k],
                    "frame {k} byte {byte} bit {bit}: {err}"
                );
                assert_eq!(
                    (c.first_after, c.frames_after),
                    (Some(starts[k + 1]), 39 - k),
                    "frame {k} byte {byte} bit {bit}: {err}"
                );
                assert!(
                    fs::read(dir.file()).unwrap() == bytes,
                    "frame {k} byte {byte} bit {bit}: open changed a corrupt file"
                );
            }
        }
    }
    println!("nvm_file: {opened} single-bit flips checked");
}

#[test]
fn a_frame_that_does_not_decode_stops_open() {
    // A frame with a right checksum whose payload is not a record (enum
    // variant 9 does not exist): refused as the last frame and in the
    // middle, never dropped as a torn write.
    for middle in [false, true] {
        let dir = TempDir::new(&format!("undecodable-{middle}"));
        let records: Vec<Rec> = (0..10).map(|i| kv(i, 1, 5)).collect();
        let starts = write_all(&dir.file(), 4096, &records);
        let bytes = fs::read(dir.file()).unwrap();
        let tail = starts[9] + (starts[9] - starts[8]);
        let payload = [9u8, 1, 2];
        let len = (payload.len() as u32).to_le_bytes();
        let mut h = crc32fast::Hasher::new();
        h.update(&len);
        h.update(&payload);
        let mut frame = len.to_vec();
        frame.extend_from_slice(&h.finalize().to_le_bytes());
        frame.extend_from_slice(&payload);
        let at = if middle { starts[5] } else { tail };
        let mut new = bytes[..at].to_vec();
        new.extend_from_slice(&frame);
        if middle {
            new.extend_from_slice(&bytes[starts[5]..tail]);
        }
        new.resize(bytes.len(), 0);
        fs::write(dir.file(), &new).unwrap();
        let err = NvmFile::<Rec>::open(dir.file(), 4096).unwrap_err();
        let c = corruption_of(&dir.file(), &err);
        assert_eq!(c.offset, at, "{err}");
        assert!(err.to_string().contains("does not decode"), "{err}");
        assert_eq!(c.frames_after, if middle { 5 } else { 0 }, "{err}");
        assert_eq!(fs::read(dir.file()).unwrap(), new, "the file was changed");
    }
}

#[test]
fn a_bad_magic_stops_open_and_leaves_the_file_alone() {
    let dir = TempDir::new("magic");
    write_all(&dir.file(), 4096, &mixed_records(20));
    let clean = fs::read(dir.file()).unwrap();
    for bit in 0..64 {
        let mut bytes = clean.clone();
        bytes[bit / 8] ^= 1 << (bit % 8);
        fs::write(dir.file(), &bytes).unwrap();
        let err = NvmFile::<Rec>::open(dir.file(), 4096).unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{msg}");
        assert!(msg.contains("bad magic"), "{msg}");
        assert!(msg.contains(&dir.file().display().to_string()), "{msg}");
        assert_eq!(
            fs::read(dir.file()).unwrap(),
            bytes,
            "bit {bit}: file changed"
        );
    }
}

#[test]
fn a_stray_byte_past_a_torn_frame_is_corruption() {
    // A torn last frame is recoverable only if nothing non-zero lies past
    // the extent it claims.
    let dir = TempDir::new("stray");
    let records = mixed_records(50);
    let starts = write_all(&dir.file(), 1 << 16, &records);
    let end = NvmFile::<Rec>::open(dir.file(), 1 << 16).unwrap().0.used();
    poke(&dir.file(), starts[49] + 4, &[0; 4]); // torn: no checksum
    poke(&dir.file(), end + 1000, &[0x40]);
    let bytes = fs::read(dir.file()).unwrap();
    let err = NvmFile::<Rec>::open(dir.file(), 1 << 16).unwrap_err();
    let c = corruption_of(&dir.file(), &err);
    assert_eq!(
        (c.offset, c.extent_end, c.nonzero_after),
        (starts[49], end, 1),
        "{err}"
    );
    assert_eq!(fs::read(dir.file()).unwrap(), bytes);
}

#[test]
fn a_stale_frame_past_a_hole_is_corruption() {
    // Open reads only the file's data extents after the tail; a frame
    // beyond a hole (never written) must still be found, and is reported,
    // not zeroed.
    let dir = TempDir::new("past-hole");
    let cap: usize = 4 << 20;
    let records: Vec<Rec> = (0..10).map(|i| kv(i, 1, 30)).collect();
    let starts = write_all(&dir.file(), cap as u64, &records);
    let frame = fs::read(dir.file()).unwrap()[starts[3]..starts[4]].to_vec();
    poke(&dir.file(), 2 << 20, &frame);
    let tail = starts[9] + (starts[9] - starts[8]);
    let bytes = fs::read(dir.file()).unwrap();
    let err = NvmFile::<Rec>::open(dir.file(), cap as u64).unwrap_err();
    let c = corruption_of(&dir.file(), &err);
    assert_eq!(
        (c.offset, c.first_after, c.frames_after),
        (tail, Some(2 << 20), 1),
        "{err}"
    );
    assert_eq!(
        c.nonzero_after,
        frame.iter().filter(|&&b| b != 0).count(),
        "{err}"
    );
    assert!(
        fs::read(dir.file()).unwrap() == bytes,
        "the file was changed"
    );
}

#[test]
fn move_aside_renames_and_a_fresh_file_opens() {
    let dir = TempDir::new("aside");
    let records: Vec<Rec> = (0..10).map(|i| kv(i, 1, 3)).collect();
    let starts = write_all(&dir.file(), 4096, &records);
    poke(&dir.file(), starts[2] + FRAME_HEADER, &[0xEE]);
    let bytes = fs::read(dir.file()).unwrap();
    let err = NvmFile::<Rec>::open(dir.file(), 4096).unwrap_err();
    assert!(corruption(&err).is_some(), "{err}");
    let aside = move_aside(&dir.file()).unwrap();
    let name = aside.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("nvm.corrupt-"), "{name}");
    assert_eq!(fs::read(&aside).unwrap(), bytes);
    let (_, image) = NvmFile::<Rec>::open(dir.file(), 4096).unwrap();
    assert!(image.is_empty());
    assert_eq!(OnCorrupt::parse("move-aside"), Ok(OnCorrupt::MoveAside));
    assert_eq!(OnCorrupt::parse("stop"), Ok(OnCorrupt::Stop));
    assert!(OnCorrupt::parse("zero").is_err());
}

#[test]
fn compaction_keeps_a_small_file_going() {
    let dir = TempDir::new("compact");
    let records: Vec<Rec> = (0..20_000u64).map(|i| kv((i % 8) as u32, i, 16)).collect();
    let compactions = {
        let (mut store, _) = NvmFile::<Rec>::open(dir.file(), 4096).unwrap();
        for r in &records {
            store.append(r).unwrap();
        }
        assert_eq!(store.image().unwrap(), expected(&records));
        assert!(!dir.0.join("nvm.tmp").exists());
        store.compactions()
    };
    assert!(
        compactions > 100,
        "expected many compactions, got {compactions}"
    );
    assert_eq!(fs::metadata(dir.file()).unwrap().len(), 4096);
    assert_eq!(reopen(&dir.file(), 4096), expected(&records));
}

#[test]
fn too_small_for_the_live_image_is_a_clear_error() {
    let dir = TempDir::new("full");
    let (mut store, _) = NvmFile::<Rec>::open(dir.file(), 4096).unwrap();
    let mut appended = Vec::new();
    let err = loop {
        let r = kv(appended.len() as u32, 1, 32);
        match store.append(&r) {
            Ok(()) => appended.push(r),
            Err(e) => break e,
        }
        assert!(
            appended.len() < 1000,
            "a 4 KiB file cannot hold 1000 distinct slots"
        );
    };
    let msg = err.to_string();
    assert!(msg.contains(&dir.file().display().to_string()), "{msg}");
    assert!(msg.contains("capacity 4096"), "{msg}");
    assert!(msg.contains("live image"), "{msg}");
    // The failed append changed nothing, in memory or on disk.
    assert_eq!(store.image().unwrap(), expected(&appended));
    drop(store);
    assert_eq!(reopen(&dir.file(), 4096), expected(&appended));
}

#[test]
fn machine_durability_round_trips() {
    let dir = TempDir::new("machine");
    let records = mixed_records(300);
    {
        let (mut store, _) =
            NvmFile::<Rec>::open_with(dir.file(), 4096, Durability::Machine).unwrap();
        let start = Instant::now();
        for r in &records {
            store.append(r).unwrap();
        }
        store.flush().unwrap();
        let secs = start.elapsed().as_secs_f64();
        let rate = records.len() as f64 / secs;
        println!(
            "nvm_file: {} Machine-durable appends ({} compactions) = {rate:.0} appends/s",
            records.len(),
            store.compactions()
        );
    }
    assert_eq!(reopen(&dir.file(), 4096), expected(&records));
}

#[test]
fn reopen_grows_but_never_shrinks() {
    let dir = TempDir::new("grow");
    let records = mixed_records(100);
    write_all(&dir.file(), 8192, &records);
    let (store, image) = NvmFile::<Rec>::open(dir.file(), 4096).unwrap();
    assert_eq!((store.capacity(), &image), (8192, &expected(&records)));
    drop(store);
    let (store, image) = NvmFile::<Rec>::open(dir.file(), 1 << 16).unwrap();
    assert_eq!((store.capacity(), image), (1 << 16, expected(&records)));
}

#[test]
fn a_foreign_file_is_rejected() {
    let dir = TempDir::new("foreign");
    fs::write(dir.file(), b"hello, this is not an NVM file").unwrap();
    let err = NvmFile::<Rec>::open(dir.file(), 4096).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let mut contents = String::new();
    fs::File::open(dir.file())
        .unwrap()
        .read_to_string(&mut contents)
        .unwrap();
    assert_eq!(
        contents, "hello, this is not an NVM file",
        "a foreign file is left alone"
    );
}

/// Environment variable that turns `kill_child_helper` into the child.
const CHILD_ENV: &str = "TANDEM_NVM_KILL_CHILD";
/// Records the child writes per slot cycle (slot = i % SLOTS).
const SLOTS: u64 = 64;

/// The child side of `sigkill_loses_nothing_that_was_appended`: append
/// `kv(i % SLOTS, i)` forever (to a small, compacting file), reporting
/// progress on stdout, until the parent kills it. A no-op as a normal test.
#[test]
fn kill_child_helper() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mut store, _) = NvmFile::<Rec>::open(&path, 16 * 1024).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0..50_000_000u64 {
        store.append(&kv((i % SLOTS) as u32, i, 8)).unwrap();
        if i % 1000 == 999 {
            writeln!(out, "appended {}", i + 1).unwrap();
            out.flush().unwrap();
        }
    }
    panic!("the parent never killed the child");
}

#[test]
fn sigkill_loses_nothing_that_was_appended() {
    let dir = TempDir::new("sigkill");
    for round in 0..3u64 {
        let _ = fs::remove_file(dir.file());
        let reported = run_and_kill(&dir.file(), 20_000 + round * 7_919);
        let image = reopen(&dir.file(), 16 * 1024);
        // The image is the landing of a prefix 0..n of the child's appends,
        // n ≥ what the child reported as appended.
        let n = image
            .values()
            .map(|r| {
                if let Rec::Kv { version, .. } = r {
                    *version + 1
                } else {
                    0
                }
            })
            .max()
            .unwrap();
        assert!(
            n >= reported,
            "round {round}: reported {reported} appends, recovered only {n}"
        );
        let prefix: Vec<Rec> = (0..n).map(|i| kv((i % SLOTS) as u32, i, 8)).collect();
        assert_eq!(image, expected(&prefix), "round {round}");
    }
}

/// Spawn the child on `path`, SIGKILL it once it reports `at_least`
/// appends, and return the last count it reported.
fn run_and_kill(path: &Path, at_least: u64) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "kill_child_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reported = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        if let Some(n) = line.unwrap().strip_prefix("appended ") {
            reported = n.parse().unwrap();
            if reported >= at_least {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    assert!(
        reported >= at_least,
        "the child exited early after {reported} appends"
    );
    reported
}

#[test]
fn measure_one_million_appends() {
    let dir = TempDir::new("measure");
    let n = 1_000_000u64;
    let (mut store, _) = NvmFile::<Rec>::open(dir.file(), 64 << 20).unwrap();
    let start = Instant::now();
    for i in 0..n {
        store.append(&kv((i % 1024) as u32, i, 8)).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "nvm_file: {n} appends ({} B used, {} compactions) in {secs:.3} s = {:.0} appends/s",
        store.used(),
        store.compactions(),
        n as f64 / secs
    );
    let (mut small, _) = NvmFile::<Rec>::open(dir.0.join("small"), 1 << 20).unwrap();
    let start = Instant::now();
    for i in 0..n {
        small.append(&kv((i % 1024) as u32, i, 8)).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "nvm_file: {n} appends into 1 MiB ({} compactions) in {secs:.3} s = {:.0} appends/s",
        small.compactions(),
        n as f64 / secs
    );
}

/// Environment variable that turns `disk_full_child_helper` into the
/// child: the directory of a 256 KiB tmpfs, mounted for it alone.
const DISK_FULL_ENV: &str = "TANDEM_NVM_DISK_FULL_CHILD";

/// The child side of `a_full_disk_is_a_clean_error_not_sigbus`: on a
/// 256 KiB tmpfs, (1) open a 1 MiB NVM file — it must fail with "no
/// space" (a sparse file would open, then die of SIGBUS when the appends
/// reach past 256 KiB; they are attempted if the open succeeds); (2) fill
/// a 160 KiB file until it compacts — the compaction's second 160 KiB
/// cannot be reserved, which must be a clean error that leaves the file
/// whole. Reports on stdout. A no-op as a normal test.
#[test]
fn disk_full_child_helper() {
    let Ok(dir) = std::env::var(DISK_FULL_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let big = dir.join("big");
    match NvmFile::<Rec>::open(&big, 1 << 20) {
        Err(e) => {
            println!("open: {e}");
            assert!(!big.exists(), "a failed create left {}", big.display());
            assert!(
                !dir.join("big.tmp").exists(),
                "a failed create left its tmp file"
            );
        }
        Ok((mut store, _)) => {
            println!("open: the 1 MiB file opened on a 256 KiB file system");
            for i in 0..100_000u64 {
                if let Err(e) = store.append(&kv(i as u32, i, 8)) {
                    println!("append: {e}");
                    break;
                }
            }
        }
    }
    let small = dir.join("small");
    let (mut store, _) = NvmFile::<Rec>::open(&small, 160 << 10).unwrap();
    let mut appended = Vec::new();
    let err = loop {
        let r = kv((appended.len() % 8) as u32, appended.len() as u64, 16);
        match store.append(&r) {
            Ok(()) => appended.push(r),
            Err(e) => break e,
        }
        assert!(appended.len() < 100_000, "a 160 KiB file never compacted");
    };
    println!("compact: {err}");
    assert_eq!(store.compactions(), 0);
    drop(store);
    assert!(
        !dir.join("small.tmp").exists(),
        "a failed compaction left its tmp file"
    );
    assert_eq!(reopen(&small, 160 << 10), expected(&appended));
    println!("child done");
}

#[test]
fn a_full_disk_is_a_clean_error_not_sigbus() {
    let probe = Command::new("unshare").args(["-m", "true"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "SKIPPED a_full_disk_is_a_clean_error_not_sigbus: `unshare -m` is not permitted here ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            println!("SKIPPED a_full_disk_is_a_clean_error_not_sigbus: cannot run unshare: {e}");
            return;
        }
    }
    let dir = TempDir::new("disk-full");
    let mnt = dir.0.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let exe = std::env::current_exe().unwrap();
    // The mount lives in the child's private mount namespace only, and
    // goes with it.
    let script = r#"mount -t tmpfs -o size=256k tmpfs "$1" || exit 97; exec "$2" --exact disk_full_child_helper --nocapture --test-threads=1"#;
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", script, "sh"])
        .arg(&mnt)
        .arg(&exe)
        .env(DISK_FULL_ENV, &mnt)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(97) {
        println!("SKIPPED a_full_disk_is_a_clean_error_not_sigbus: cannot mount a tmpfs: {stderr}");
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        None,
        "the child died of signal {:?} (7 is SIGBUS)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.signal()
    );
    assert!(
        out.status.success(),
        "the child failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let line = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(prefix).map(|i| &l[i + prefix.len()..]))
            .unwrap_or_else(|| panic!("no '{prefix}' line\nstdout:\n{stdout}"))
            .to_string()
    };
    let open = line("open: ");
    assert!(open.contains("no space left on device"), "{open}");
    assert!(open.contains("reserving 1048576 bytes"), "{open}");
    assert!(
        open.contains(&mnt.join("big").display().to_string()),
        "{open}"
    );
    let compact = line("compact: ");
    assert!(compact.contains("no space left on device"), "{compact}");
    assert!(
        compact.contains(&mnt.join("small.tmp").display().to_string()),
        "{compact}"
    );
    assert!(stdout.contains("child done"), "{stdout}");
    println!("nvm_file: on a full tmpfs: {open}; {compact}");
}
