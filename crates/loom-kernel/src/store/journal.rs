//! The embedded store's journal: one checksummed record per group commit, appended to a file
//! beside the store and made durable with one `fdatasync` before the commit is applied to the
//! redb tables without an fsync of their own (`docs/STORAGE.md`, "The journal"; LD-027).
//!
//! # File
//! A 32-byte header (`LOOMJNL1`, the generation, flags, a CRC-32C of the three), then records:
//! `[magic u32][payload length u32][generation u64][CRC-32C of those 16 bytes u32]`, the
//! payload, and the payload's CRC-32C (u32). The generation ties a record to its file: a
//! checkpoint starts a new file under the next generation (written aside, then renamed over
//! the old one), and the store's tables name the generation and the offset they cover.
//!
//! The file is grown ahead of its records (by as much as it holds, 64 KiB to 1 MiB at a time),
//! written with zeros in the same flush as a small record: the commits after it overwrite
//! blocks the file already has, and their `fdatasync` flushes the data alone (no new size, no
//! block allocation for the file system to journal). A record of 64 KiB or more extends the
//! file itself, with zeros after it too.
//!
//! Every journal written with the flag [`PADDED`] (all since it was introduced) therefore ends
//! with zeros after its last record, whatever the crash: the zeros are written before the
//! record they follow and a new file is written whole before it is renamed into place. A file
//! that ends exactly at a record boundary was cut short (by a copy, a restore, a file system):
//! the commits past the cut are gone, and no record says how many. A reader reports it
//! ([`Scanned::cut`]) and the store refuses to open it unless told to accept the loss. A
//! journal without the flag (written by an older build) is read as before: its ends cannot
//! tell.
//!
//! # What a reader accepts
//! Records are written one `pwrite` at a time, each made durable before the next is written,
//! so a crash can leave at most the last record incomplete. Past the last whole record the
//! file holds zeros (the room grown ahead), or a torn record: cut and reported. Damage anywhere
//! else (a bad record with whole ones after it, a bad header) is refused.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checksum::crc32c;

/// The length of the header; a journal of no records is this long.
pub(super) const HEADER_LEN: u64 = 32;
const MAGIC: &[u8; 8] = b"LOOMJNL1";
const RECORD_MAGIC: u32 = 0x4C4A_5243;
/// Magic, length, generation, header checksum.
const FRAME_HEAD: usize = 20;
/// The payload's checksum.
const FRAME_TAIL: usize = 4;
/// The file is grown (with zeros) ahead of its records by as much as it holds, at least
/// `MIN_GROWTH` and at most `MAX_GROWTH` at a time: a small store writes little, a busy one a
/// mebibyte per mebibyte of records.
const MIN_GROWTH: u64 = 64 << 10;
const MAX_GROWTH: u64 = 1 << 20;
/// Zeros after a large record or after the records of a new file: what marks the end of a
/// journal that was not cut.
const PAD: u64 = 4096;
/// Header flag: the journal always ends with zeros after its last record (see the module's
/// docs); stored in header bytes 16..24, covered by the header's checksum. Older builds
/// ignore the bytes, so they still read a journal that has it.
const PADDED: u64 = 1;

/// Why a journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(super) enum JournalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("journal {path} is damaged: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

/// The journal path of the store file `store`: its name with `.journal` added.
pub(super) fn journal_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

/// A journal open for appending.
#[derive(Debug)]
pub(super) struct Journal {
    file: File,
    path: PathBuf,
    generation: u64,
    end: u64,
    /// The file's length: zeros from `end` to here.
    grown: u64,
    frame: Vec<u8>,
    /// How long the last [`Journal::append`]'s `fdatasync` took (the store's metrics).
    last_sync: Duration,
}

/// What [`Journal::rotate_keeping`] carried over to the next generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Carried {
    /// How many records.
    pub(super) records: u64,
    /// How far their offsets moved: a record that ended at `x` ends at `x - shift` now.
    pub(super) shift: u64,
}

/// A journal read whole: its generation, and its records from some offset on.
#[derive(Debug)]
pub(super) struct Scanned {
    pub(super) generation: u64,
    /// Each whole record's payload and the offset just past it.
    pub(super) records: Vec<(Vec<u8>, u64)>,
    /// The offset just past the last whole record.
    pub(super) end: u64,
    /// How many bytes past `end` a torn last record left (0 if none).
    pub(super) torn: u64,
    /// The file ends exactly where its last whole record (or its header) ends, although it
    /// carries [`PADDED`]: it was cut short, and the commits past the cut are lost.
    pub(super) cut: bool,
}

impl Journal {
    /// Writes an empty journal of `generation` at `path`, replacing any file there at once
    /// (written aside, fsynced, renamed, directory fsynced): a crash leaves the old file or
    /// the new one, never a mix.
    pub(super) fn create(path: &Path, generation: u64) -> Result<Self, JournalError> {
        let (file, end) = write_aside_and_rename(path, generation, &[])?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            generation,
            end,
            grown: end + PAD,
            frame: Vec::new(),
            last_sync: Duration::ZERO,
        })
    }

    /// Starts the next generation in place of this one, carrying over the records from
    /// offset `keep_from` (a record boundary) to the end: the tables are durable up to
    /// `keep_from` in this generation, and the records past it are the ones they may lack.
    /// The new file is written aside and renamed over this one, as [`Journal::create`]
    /// does, so a crash leaves either file whole. An open that finds the tables at this
    /// generation and the file at the next applies every record of the file, which are then
    /// exactly the carried ones and those appended after.
    pub(super) fn rotate_keeping(&mut self, keep_from: u64) -> Result<Carried, JournalError> {
        let corrupt = |detail: String| JournalError::Corrupt {
            path: self.path.clone(),
            detail,
        };
        if keep_from < HEADER_LEN || keep_from > self.end {
            return Err(corrupt(format!(
                "a checkpoint at offset {keep_from} lies outside the journal's records ({HEADER_LEN} to {})",
                self.end
            )));
        }
        let length = usize::try_from(self.end - keep_from)
            .map_err(|_| corrupt("the records to carry over do not fit in memory".into()))?;
        let mut kept = vec![0u8; length];
        self.file
            .read_exact_at(&mut kept, keep_from)
            .map_err(|source| JournalError::Io {
                path: self.path.clone(),
                source,
            })?;
        let next = self.generation + 1;
        let mut carried = Vec::with_capacity(length);
        let mut records = 0;
        let mut at = 0;
        while at < kept.len() {
            let (payload, after) = frame_at(&kept, at, self.generation).ok_or_else(|| {
                corrupt(format!(
                    "the record at offset {} does not read back whole while it is carried over",
                    keep_from + at as u64
                ))
            })?;
            push_frame(&mut carried, next, payload);
            records += 1;
            at = after;
        }
        let (file, end) = write_aside_and_rename(&self.path, next, &carried)?;
        *self = Self {
            file,
            path: self.path.clone(),
            generation: next,
            end,
            grown: end + PAD,
            frame: std::mem::take(&mut self.frame),
            last_sync: Duration::ZERO,
        };
        Ok(Carried {
            records,
            shift: keep_from - HEADER_LEN,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The offset just past the last record.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// How long the last append's `fdatasync` took.
    pub(super) fn last_sync(&self) -> Duration {
        self.last_sync
    }

    /// Appends one record and makes it durable (one `pwrite`, one `fdatasync`). On error the
    /// journal's state on disk is unknown: the store stops writing (fail-stop).
    pub(super) fn append(&mut self, payload: &[u8]) -> Result<u64, JournalError> {
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let length = u32::try_from(payload.len()).map_err(|_| JournalError::Corrupt {
            path: self.path.clone(),
            detail: format!("a commit of {} bytes is too large", payload.len()),
        })?;
        self.frame.clear();
        push_frame_of(&mut self.frame, self.generation, length, payload);
        let end = self.end + self.frame.len() as u64;
        // `>=`: a record that would end exactly at the file's end grows it too, so that zeros
        // always follow the last record.
        if end >= self.grown && self.frame.len() as u64 >= MIN_GROWTH {
            // A large record extends the file itself: room ahead would double what its flush
            // writes, for a saving (the file system's metadata) that is small beside it. Only
            // the pad that marks the end goes after it, written first, so that the file's new
            // length never ends at the record whatever part of this flush a crash keeps.
            self.file
                .write_all_at(&[0u8; PAD as usize], end)
                .map_err(io)?;
            self.grown = end + PAD;
        } else if end >= self.grown {
            // Room ahead, zeroed, in the same flush as this record: the next commits overwrite
            // blocks the file has.
            let room = end.clamp(MIN_GROWTH, MAX_GROWTH);
            let grown = (end + room).div_ceil(MIN_GROWTH) * MIN_GROWTH;
            let zeros = vec![0u8; usize::try_from(grown - self.grown).unwrap_or(0)];
            self.file.write_all_at(&zeros, self.grown).map_err(io)?;
            self.grown = grown;
        }
        self.file.write_all_at(&self.frame, self.end).map_err(io)?;
        let syncing = Instant::now();
        self.file.sync_data().map_err(io)?;
        self.last_sync = syncing.elapsed();
        self.end += self.frame.len() as u64;
        Ok(self.end)
    }
}

/// Adds one record of `generation` holding `payload` to `bytes`. A payload of more than
/// `u32::MAX` bytes cannot be framed; only payloads read back from a frame are given here.
fn push_frame(bytes: &mut Vec<u8>, generation: u64, payload: &[u8]) {
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    push_frame_of(bytes, generation, length, payload);
}

fn push_frame_of(bytes: &mut Vec<u8>, generation: u64, length: u32, payload: &[u8]) {
    let start = bytes.len();
    bytes.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&generation.to_le_bytes());
    let head_crc = crc32c(&bytes[start..]);
    bytes.extend_from_slice(&head_crc.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes.extend_from_slice(&crc32c(payload).to_le_bytes());
}

/// Writes a journal of `generation` holding `records` (whole frames), then [`PAD`] zeros, at
/// `path`: aside first, fsynced, then renamed over whatever is there and the directory
/// fsynced. Returns the file, open for reading and writing, and the offset just past its
/// records.
fn write_aside_and_rename(
    path: &Path,
    generation: u64,
    records: &[u8],
) -> Result<(File, u64), JournalError> {
    let io = |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut aside = path.as_os_str().to_owned();
    aside.push(".new");
    let aside = PathBuf::from(aside);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&aside)
        .map_err(io)?;
    let end = HEADER_LEN as usize + records.len();
    let mut bytes = Vec::with_capacity(end + PAD as usize);
    bytes.extend_from_slice(&header(generation));
    bytes.extend_from_slice(records);
    bytes.resize(end + PAD as usize, 0);
    file.write_all_at(&bytes, 0).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&aside, path).map_err(io)?;
    sync_dir(path).map_err(io)?;
    Ok((file, end as u64))
}

fn header(generation: u64) -> [u8; HEADER_LEN as usize] {
    let mut bytes = [0u8; HEADER_LEN as usize];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&generation.to_le_bytes());
    bytes[16..24].copy_from_slice(&PADDED.to_le_bytes());
    let crc = crc32c(&bytes[..24]);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Reads the journal at `path` and its whole records from offset `from` on (`HEADER_LEN` for
/// all of them). `None` when there is no file.
pub(super) fn scan(path: &Path, from: u64) -> Result<Option<Scanned>, JournalError> {
    let corrupt = |detail: String| JournalError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut file) => file
            .read_to_end(&mut bytes)
            .map_err(|source| JournalError::Io {
                path: path.to_path_buf(),
                source,
            })?,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(JournalError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let header_len = HEADER_LEN as usize;
    let Some(head) = bytes.get(..header_len) else {
        return Err(corrupt(format!(
            "{} bytes long, shorter than its header: not a Loom journal",
            bytes.len()
        )));
    };
    if &head[..8] != MAGIC
        || read_u32(head, 24) != Some(crc32c(&head[..24]))
        || head[28..] != [0; 4]
    {
        return Err(corrupt("its header is not a Loom journal's".into()));
    }
    let generation = read_u64(head, 8).unwrap_or_default();
    let padded = read_u64(head, 16).unwrap_or_default() & PADDED != 0;
    let from = usize::try_from(from).unwrap_or(usize::MAX);
    if from < header_len || from > bytes.len() {
        return Err(corrupt(format!(
            "the store's tables cover it up to offset {from}, but it is {} bytes long",
            bytes.len()
        )));
    }
    let mut records = Vec::new();
    let mut at = from;
    while at < bytes.len() {
        if let Some((payload, next)) = frame_at(&bytes, at, generation) {
            records.push((payload.to_vec(), next as u64));
            at = next;
            continue;
        }
        // No whole record here: the zeroed room grown ahead, a torn last record, or damage.
        if bytes[at..].iter().all(|byte| *byte == 0) {
            break;
        }
        let magic = RECORD_MAGIC.to_le_bytes();
        let later_whole = bytes[at + 1..]
            .windows(magic.len())
            .enumerate()
            .filter(|(_, window)| *window == magic)
            .any(|(offset, _)| frame_at(&bytes, at + 1 + offset, generation).is_some());
        if later_whole {
            return Err(corrupt(format!(
                "the commit record at offset {at} is damaged and whole records follow it"
            )));
        }
        let written = bytes
            .iter()
            .rposition(|byte| *byte != 0)
            .map_or(at, |last| last + 1);
        return Ok(Some(Scanned {
            generation,
            records,
            end: at as u64,
            torn: (written - at) as u64,
            cut: false,
        }));
    }
    Ok(Some(Scanned {
        generation,
        records,
        end: at as u64,
        torn: 0,
        cut: padded && at == bytes.len(),
    }))
}

/// The record at `at`, whole and checked: its payload and the offset just past it. `None`
/// when the file ends inside it or it does not check out.
fn frame_at(bytes: &[u8], at: usize, generation: u64) -> Option<(&[u8], usize)> {
    let head = bytes.get(at..at + FRAME_HEAD)?;
    if read_u32(head, 0) != Some(RECORD_MAGIC)
        || read_u64(head, 8) != Some(generation)
        || read_u32(head, 16) != Some(crc32c(&head[..16]))
    {
        return None;
    }
    let length = read_u32(head, 4)? as usize;
    let start = at + FRAME_HEAD;
    let next = start + length + FRAME_TAIL;
    let payload = bytes.get(start..start + length)?;
    let crc = bytes.get(start + length..next)?;
    (read_u32(crc, 0) == Some(crc32c(payload))).then_some((payload, next))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// One request of a group commit, as the journal keeps it: enough to apply it again.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct JournaledAppend<'a> {
    pub(super) execution: &'a str,
    pub(super) expected_seq: u64,
    pub(super) recorded_at_ms: Option<u64>,
    pub(super) records: Vec<&'a [u8]>,
}

/// Adds one accepted request to a commit's payload (`payload` starts empty; the count of
/// requests is kept by [`finish_payload`]).
pub(super) fn push_append<'a>(
    payload: &mut Vec<u8>,
    execution: &str,
    expected_seq: u64,
    recorded_at_ms: Option<u64>,
    records: impl ExactSizeIterator<Item = &'a [u8]>,
) {
    if payload.is_empty() {
        payload.extend_from_slice(&0u32.to_le_bytes());
    }
    let count = read_u32(payload, 0).unwrap_or_default() + 1;
    payload[..4].copy_from_slice(&count.to_le_bytes());
    push_bytes(payload, execution.as_bytes());
    payload.extend_from_slice(&expected_seq.to_le_bytes());
    match recorded_at_ms {
        Some(ms) => {
            payload.push(1);
            payload.extend_from_slice(&ms.to_le_bytes());
        }
        None => payload.push(0),
    }
    payload.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for record in records {
        push_bytes(payload, record);
    }
}

fn push_bytes(payload: &mut Vec<u8>, bytes: &[u8]) {
    payload.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    payload.extend_from_slice(bytes);
}

/// The requests of a commit's payload; `None` for bytes [`push_append`] did not write.
pub(super) fn read_payload(payload: &[u8]) -> Option<Vec<JournaledAppend<'_>>> {
    let mut input = payload;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, rest) = input.split_at_checked(n)?;
        input = rest;
        Some(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?);
    let mut appends = Vec::new();
    for _ in 0..count {
        let id_len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let execution = std::str::from_utf8(take(id_len)?).ok()?;
        let expected_seq = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let recorded_at_ms = match take(1)?[0] {
            0 => None,
            1 => Some(u64::from_le_bytes(take(8)?.try_into().ok()?)),
            _ => return None,
        };
        let n = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let mut records = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            records.push(take(len)?);
        }
        appends.push(JournaledAppend {
            execution,
            expected_seq,
            recorded_at_ms,
            records,
        });
    }
    if !input.is_empty() {
        return None;
    }
    Some(appends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_with(records: &[&[u8]]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.journal");
        let mut journal = Journal::create(&path, 7).unwrap();
        for record in records {
            journal.append(record).unwrap();
        }
        (dir, path)
    }

    #[test]
    fn records_read_back_in_order_from_any_record_boundary() {
        let (_dir, path) = journal_with(&[b"one", b"two", b"three"]);
        let all = scan(&path, HEADER_LEN).unwrap().unwrap();
        assert_eq!(all.generation, 7);
        let payloads: Vec<&[u8]> = all.records.iter().map(|(p, _)| p.as_slice()).collect();
        assert_eq!(payloads, [&b"one"[..], b"two", b"three"]);
        assert_eq!(all.torn, 0);
        let after_first = all.records[0].1;
        let rest = scan(&path, after_first).unwrap().unwrap();
        assert_eq!(rest.records.len(), 2);
    }

    #[test]
    fn a_rotation_carries_the_records_past_the_checkpoint_to_the_next_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.journal");
        let mut journal = Journal::create(&path, 7).unwrap();
        let first = journal.append(b"one").unwrap();
        let second = journal.append(b"two").unwrap();
        journal.append(b"three").unwrap();
        let carried = journal.rotate_keeping(first).unwrap();
        assert_eq!(carried.records, 2);
        assert_eq!(journal.generation(), 8);
        let after_rotation = journal.append(b"four").unwrap();
        let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
        assert_eq!(scanned.generation, 8);
        let payloads: Vec<&[u8]> = scanned.records.iter().map(|(p, _)| p.as_slice()).collect();
        assert_eq!(payloads, [&b"two"[..], b"three", b"four"]);
        // Offsets moved by the shift: "two" ended at `second`, now at `second - shift`.
        assert_eq!(scanned.records[0].1, second - carried.shift);
        assert_eq!(scanned.records[2].1, after_rotation);
        assert!(!dir.path().join("s.journal.new").exists());

        // Nothing to carry: the next generation starts empty.
        let end = journal.end();
        let carried = journal.rotate_keeping(end).unwrap();
        assert_eq!(carried.records, 0);
        assert_eq!(journal.end(), HEADER_LEN);
        let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
        assert_eq!((scanned.generation, scanned.records.len()), (9, 0));

        // An offset outside the records is refused and changes nothing.
        journal.append(b"five").unwrap();
        for outside in [0, HEADER_LEN - 1, journal.end() + 1] {
            assert!(matches!(
                journal.rotate_keeping(outside),
                Err(JournalError::Corrupt { .. })
            ));
        }
        // So is one inside a record: the carried bytes must be whole records.
        assert!(matches!(
            journal.rotate_keeping(HEADER_LEN + 1),
            Err(JournalError::Corrupt { .. })
        ));
        assert_eq!(journal.generation(), 9);
        let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
        assert_eq!(scanned.records.len(), 1);
    }

    /// The journal's bytes, and where its last record starts and ends.
    fn written(path: &Path) -> (Vec<u8>, usize, usize) {
        let scanned = scan(path, HEADER_LEN).unwrap().unwrap();
        let ends: Vec<usize> = scanned
            .records
            .iter()
            .map(|(_, end)| *end as usize)
            .collect();
        let last_end = *ends.last().unwrap();
        let last_start = ends
            .len()
            .checked_sub(2)
            .map_or(HEADER_LEN as usize, |i| ends[i]);
        (std::fs::read(path).unwrap(), last_start, last_end)
    }

    /// Zeros follow the last record of every journal this build writes, whatever the sizes:
    /// a new or rotated file, small records, one that ends exactly where the room grown ahead
    /// ended, a large one. A file cut at a record boundary (or to its header) is reported as
    /// cut; one cut inside the zeros is not; a journal without the flag (an older build's) is
    /// never reported.
    #[test]
    fn a_journal_cut_at_a_record_boundary_is_reported_and_a_whole_one_never_is() {
        let ends_with_zeros = |path: &Path| {
            let scanned = scan(path, HEADER_LEN).unwrap().unwrap();
            let bytes = std::fs::read(path).unwrap();
            assert!(!scanned.cut, "a whole journal reads as cut");
            assert!(
                bytes.len() as u64 > scanned.end,
                "no zeros after the last record"
            );
            scanned
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.journal");
        let mut journal = Journal::create(&path, 1).unwrap();
        ends_with_zeros(&path);
        // Records that end exactly at the file's end before they are written.
        let frame = (FRAME_HEAD + FRAME_TAIL) as u64;
        let exact = usize::try_from(journal.grown - journal.end - frame).unwrap();
        journal.append(&vec![7u8; exact]).unwrap();
        ends_with_zeros(&path);
        for size in [1usize, 100, 5000, 70_000, 200_000, 3] {
            journal.append(&vec![1u8; size]).unwrap();
            ends_with_zeros(&path);
        }
        let exact = usize::try_from(journal.grown - journal.end - frame).unwrap();
        journal.append(&vec![9u8; exact]).unwrap();
        let scanned = ends_with_zeros(&path);
        journal.rotate_keeping(scanned.records[5].1).unwrap();
        let rotated = ends_with_zeros(&path);
        assert_eq!(rotated.records.len(), 2);

        let (_dir, path) = journal_with(&[b"one", b"two", b"three"]);
        let whole = std::fs::read(&path).unwrap();
        let all = scan(&path, HEADER_LEN).unwrap().unwrap();
        for (kept, (_, end)) in all.records.iter().enumerate() {
            std::fs::write(&path, &whole[..*end as usize]).unwrap();
            let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
            assert!(scanned.cut, "cut after record {kept}");
            assert_eq!(scanned.records.len(), kept + 1);
        }
        std::fs::write(&path, &whole[..HEADER_LEN as usize]).unwrap();
        assert!(
            scan(&path, HEADER_LEN).unwrap().unwrap().cut,
            "cut to its header"
        );
        let last_end = all.end as usize;
        std::fs::write(&path, &whole[..last_end + 1]).unwrap();
        assert!(
            !scan(&path, HEADER_LEN).unwrap().unwrap().cut,
            "one zero is enough"
        );

        // An older build's journal: no flag, so its end says nothing.
        let mut old = whole[..last_end].to_vec();
        old[16..24].fill(0);
        let crc = crc32c(&old[..24]);
        old[24..28].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &old).unwrap();
        let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
        assert!(!scanned.cut);
        assert_eq!(scanned.records.len(), 3);
    }

    #[test]
    fn a_torn_last_record_is_cut_and_reported() {
        let (_dir, path) = journal_with(&[b"one", b"two"]);
        let (whole, last_start, last_end) = written(&path);
        assert!(whole.len() > last_end, "room is grown ahead");
        assert!(whole[last_end..].iter().all(|b| *b == 0));
        for cut in 1..(last_end - last_start) {
            // The file ends inside the record...
            std::fs::write(&path, &whole[..last_end - cut]).unwrap();
            let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
            assert_eq!(scanned.records.len(), 1, "cut {cut}");
            assert!(scanned.torn > 0);
            // ...or its last bytes never reached the disk (zeros in the room grown ahead).
            let mut zeroed = whole.clone();
            zeroed[last_end - cut..last_end].fill(0);
            std::fs::write(&path, &zeroed).unwrap();
            let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
            assert_eq!(scanned.records.len(), 1, "zeroed {cut}");
        }
        // The last record's payload damaged in place: torn (it is the last write).
        let mut damaged = whole.clone();
        damaged[last_end - FRAME_TAIL - 1] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        assert_eq!(scan(&path, HEADER_LEN).unwrap().unwrap().records.len(), 1);
    }

    #[test]
    fn a_flipped_byte_before_the_last_record_is_refused() {
        let (_dir, path) = journal_with(&[b"one", b"two", b"three"]);
        let (whole, last_start, _) = written(&path);
        for at in 0..last_start {
            let mut damaged = whole.clone();
            damaged[at] ^= 0x10;
            std::fs::write(&path, &damaged).unwrap();
            assert!(
                matches!(scan(&path, HEADER_LEN), Err(JournalError::Corrupt { .. })),
                "byte {at}"
            );
        }
        // A stray byte in the room past the last record is damage too, never a torn tail.
        let mut damaged = whole.clone();
        let len = damaged.len();
        damaged[len - 10] = 1;
        std::fs::write(&path, &damaged).unwrap();
        let scanned = scan(&path, HEADER_LEN).unwrap().unwrap();
        assert_eq!(scanned.records.len(), 3);
        assert!(scanned.torn > 0, "reported");
    }

    #[test]
    fn a_payload_round_trips_and_garbage_does_not_read() {
        let mut payload = Vec::new();
        push_append(
            &mut payload,
            "a",
            0,
            Some(5),
            [&b"x"[..], b"yz"].into_iter(),
        );
        push_append(&mut payload, "b", 3, None, [&b"w"[..]].into_iter());
        let read = read_payload(&payload).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].execution, "a");
        assert_eq!(read[0].records, [&b"x"[..], b"yz"]);
        assert_eq!((read[1].expected_seq, read[1].recorded_at_ms), (3, None));
        for cut in 0..payload.len() {
            assert!(read_payload(&payload[..cut]).is_none(), "cut {cut}");
        }
    }
}
