//! Salvage: the event logs that can still be read from a store file redb refuses to open (a
//! damaged root, a damaged branch page), its journal included (`docs/STORAGE.md`, "Salvage").
//!
//! It reads the file's pages directly instead of through redb's trees, so no damaged page on
//! the way to a leaf can hide it: every 4 KiB-aligned page that has the shape of a redb leaf
//! is read for pairs whose key is an event key (an execution id and a seq) and whose value
//! splits into that append's records (`runs.rs`, its checksum binding it to the key), each
//! decoding with its own checksum. Garbage and other tables' rows never pass those checks. The journal's records (the commits since the last checkpoint) are read
//! after and win. Each log is then taken from seq 0 up to its first missing seq.
//!
//! Old copies of pages that redb has since replaced hold the same records (an event never
//! changes once written), so they add nothing wrong, with one exception: the pages of an
//! execution deleted by retention may still be in the file, and its log comes back. The
//! report says which logs have gaps; nothing is written to the damaged file.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::super::journal;
use crate::envelope::{EventEnvelope, decode_record};
use crate::id::ExecutionId;

/// The unit pages are aligned to; redb's pages are multiples of it.
const PAGE: u64 = 4096;
/// redb's leaf page type.
const LEAF: u8 = 1;
/// The most a leaf is read for: a leaf holding one very large event.
const MAX_LEAF: u64 = 64 << 20;

/// Why a salvage could not run at all (a page or record it cannot read is skipped, not an
/// error).
#[derive(Debug, thiserror::Error)]
pub enum SalvageError {
    /// The store file could not be read.
    #[error("cannot read store file {path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// What `salvage` found.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Salvaged {
    /// Each log found, from seq 0 up to its first gap, in execution id order.
    pub logs: Vec<Vec<EventEnvelope>>,
    /// Logs with a gap: the execution, how many events were kept (up to the gap), and how
    /// many more were found past it (left out: a log must be whole from its start).
    pub gaps: Vec<(ExecutionId, u64, u64)>,
    /// The bytes of the store file read.
    pub bytes_read: u64,
    /// The event records found in the file's pages (each once).
    pub from_pages: u64,
    /// The event records read from the journal.
    pub from_journal: u64,
    /// Two different records found for one event (an execution deleted, then started again
    /// under the same id): the journal's, or the one read first, is kept.
    pub conflicts: u64,
    /// Why the journal could not be read, if it could not (the pages are salvaged anyway).
    pub journal_error: Option<String>,
}

/// Every event record found, by execution and seq: its bytes, and whether the journal gave it.
type Found = BTreeMap<(String, u64), (Vec<u8>, bool)>;

/// Reads every event log it can from the store file at `path` and its journal, without redb
/// and without writing; `progress` is told the bytes read so far and the file's length, about
/// every 64 MiB.
pub(super) fn salvage(
    path: &Path,
    progress: impl FnMut(u64, u64),
) -> Result<Salvaged, SalvageError> {
    let mut found = Found::new();
    let mut salvaged = Salvaged::default();
    from_pages(path, progress, &mut found, &mut salvaged).map_err(|source| SalvageError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    salvaged.from_pages = found.len() as u64;
    from_journal(path, &mut found, &mut salvaged);
    assemble(found, &mut salvaged);
    Ok(salvaged)
}

/// The records of every leaf page of the file that holds event rows.
fn from_pages(
    path: &Path,
    mut progress: impl FnMut(u64, u64),
    found: &mut Found,
    salvaged: &mut Salvaged,
) -> std::io::Result<()> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut page = vec![0u8; PAGE as usize];
    let (mut at, mut reported) = (0, 0);
    while at + PAGE <= len {
        file.read_exact_at(&mut page, at)?;
        if page[0] == LEAF {
            let leaf = read_leaf(&file, at, len, &page)?;
            for (key, value) in leaf_pairs(&leaf) {
                // A row holds an append's records under its first seq (`runs.rs`), each
                // record with its own checksum; the run's binds it to its key.
                let Some((execution, first)) = event_key(key) else {
                    continue;
                };
                let Ok(records) = super::runs::split(execution.as_str(), first, value) else {
                    continue;
                };
                for (seq, record) in (first..).zip(records) {
                    if decodes(&execution, seq, record) {
                        add(found, salvaged, execution.clone(), seq, record, false);
                    }
                }
            }
        }
        at += PAGE;
        if at - reported >= 64 << 20 {
            reported = at;
            progress(at, len);
        }
    }
    salvaged.bytes_read = at.min(len);
    progress(salvaged.bytes_read, len);
    Ok(())
}

/// The records of the journal beside the file (the commits since the last checkpoint), which
/// win over the pages'; a journal that cannot be read is reported, not an error.
fn from_journal(path: &Path, found: &mut Found, salvaged: &mut Salvaged) {
    let scanned = match journal::scan(&journal::journal_path(path), journal::HEADER_LEN) {
        Ok(Some(scanned)) => scanned,
        Ok(None) => {
            salvaged.journal_error = Some("the journal is missing".into());
            return;
        }
        Err(error) => {
            salvaged.journal_error = Some(error.to_string());
            return;
        }
    };
    for (payload, _) in &scanned.records {
        let Some(appends) = journal::read_payload(payload) else {
            continue;
        };
        for append in appends {
            let Ok(execution) = ExecutionId::from_stored(append.execution) else {
                continue;
            };
            for (seq, record) in (append.expected_seq..).zip(&append.records) {
                if decodes(&execution, seq, record) {
                    salvaged.from_journal += 1;
                    add(found, salvaged, execution.clone(), seq, record, true);
                }
            }
        }
    }
}

/// The leaf page at `at`, read whole: its first block is `first`; a leaf of one large pair
/// spans more.
fn read_leaf(file: &File, at: u64, len: u64, first: &[u8]) -> std::io::Result<Vec<u8>> {
    let pairs = usize::from(u16::from_le_bytes([first[2], first[3]]));
    // The last value's end, when the offsets fit in the first block.
    let last_end = 4 + 8 * pairs;
    let extent = match first.get(last_end - 4..last_end) {
        Some(end) if pairs > 0 => u64::from(u32::from_le_bytes([end[0], end[1], end[2], end[3]])),
        _ => return Ok(Vec::new()),
    };
    let extent = extent.min(MAX_LEAF).min(len - at).max(PAGE);
    if extent == PAGE {
        return Ok(first.to_vec());
    }
    let mut leaf = vec![0u8; usize::try_from(extent).unwrap_or(PAGE as usize)];
    file.read_exact_at(&mut leaf, at)?;
    Ok(leaf)
}

/// The (key, value) pairs of a leaf with variable-width keys and values: a pair count, then
/// each key's end, each value's end, the keys, the values. Anything out of bounds or out of
/// order ends the reading.
fn leaf_pairs(leaf: &[u8]) -> Vec<(&[u8], &[u8])> {
    let Some(count) = leaf.get(2..4) else {
        return Vec::new();
    };
    let pairs = usize::from(u16::from_le_bytes([count[0], count[1]]));
    let offset = |index: usize| -> Option<usize> {
        let at = 4 + 4 * index;
        let bytes = leaf.get(at..at + 4)?;
        usize::try_from(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])).ok()
    };
    let mut found = Vec::new();
    let mut key_start = 4 + 8 * pairs;
    let Some(mut value_start) = pairs.checked_sub(1).and_then(offset) else {
        return found;
    };
    for index in 0..pairs {
        let (Some(key_end), Some(value_end)) = (offset(index), offset(pairs + index)) else {
            break;
        };
        let (Some(key), Some(value)) = (
            leaf.get(key_start..key_end),
            leaf.get(value_start..value_end),
        ) else {
            break;
        };
        found.push((key, value));
        key_start = key_end;
        value_start = value_end;
    }
    found
}

/// An event key, `(&str, u64)` as redb encodes it: the string's length (one byte under 254,
/// else a marker and two or four bytes), the string, the seq.
fn event_key(key: &[u8]) -> Option<(ExecutionId, u64)> {
    let (len, skip) = match *key.first()? {
        254 => (
            usize::from(u16::from_le_bytes([*key.get(1)?, *key.get(2)?])),
            3,
        ),
        255 => (
            usize::try_from(u32::from_le_bytes(key.get(1..5)?.try_into().ok()?)).ok()?,
            5,
        ),
        short => (usize::from(short), 1),
    };
    let id = std::str::from_utf8(key.get(skip..skip + len)?).ok()?;
    let seq = key.get(skip + len..)?;
    if seq.len() != 8 {
        return None;
    }
    let seq = u64::from_le_bytes(seq.try_into().ok()?);
    Some((ExecutionId::from_stored(id).ok()?, seq))
}

fn decodes(execution: &ExecutionId, seq: u64, record: &[u8]) -> bool {
    decode_record(execution, seq, record).is_ok()
}

fn add(
    found: &mut Found,
    salvaged: &mut Salvaged,
    execution: ExecutionId,
    seq: u64,
    record: &[u8],
    from_journal: bool,
) {
    let key = (execution.as_str().to_owned(), seq);
    match found.get_mut(&key) {
        None => {
            found.insert(key, (record.to_vec(), from_journal));
        }
        Some((kept, _)) if kept.as_slice() == record => {}
        Some((kept, kept_from_journal)) => {
            salvaged.conflicts += 1;
            if from_journal && !*kept_from_journal {
                *kept = record.to_vec();
                *kept_from_journal = true;
            }
        }
    }
}

/// Each execution's records from seq 0 up to the first missing one, decoded.
fn assemble(found: Found, salvaged: &mut Salvaged) {
    let mut current: Option<(ExecutionId, Vec<EventEnvelope>, u64)> = None;
    let finish = |done: Option<(ExecutionId, Vec<EventEnvelope>, u64)>, salvaged: &mut Salvaged| {
        if let Some((execution, log, beyond)) = done {
            if beyond > 0 {
                salvaged.gaps.push((execution, log.len() as u64, beyond));
            }
            if !log.is_empty() {
                salvaged.logs.push(log);
            }
        }
    };
    for ((id, seq), (record, _)) in found {
        let Ok(execution) = ExecutionId::from_stored(&id) else {
            continue;
        };
        if current
            .as_ref()
            .is_none_or(|(open, _, _)| open.as_str() != id)
        {
            finish(current.take(), salvaged);
            current = Some((execution.clone(), Vec::new(), 0));
        }
        let Some((_, log, beyond)) = current.as_mut() else {
            continue;
        };
        if *beyond == 0
            && seq == log.len() as u64
            && let Ok(envelope) = decode_record(&execution, seq, &record)
        {
            log.push(envelope);
        } else {
            *beyond += 1;
        }
    }
    finish(current.take(), salvaged);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_keys_read_as_redb_encodes_them_and_anything_else_does_not() {
        use redb::Value;
        // Ids up to the longest allowed, whose length takes one byte or three.
        let longest = "x".repeat(crate::id::MAX_EXECUTION_ID_LEN);
        for id in ["a", &"w".repeat(253), longest.as_str()] {
            let encoded = <(&str, u64)>::as_bytes(&(id, 42));
            let (execution, seq) = event_key(&encoded).expect("an event key");
            assert_eq!((execution.as_str(), seq), (id, 42));
        }
        // Longer than an id may be: not an event key, read without a panic.
        let encoded = <(&str, u64)>::as_bytes(&("y".repeat(70_000).as_str(), 42));
        assert!(event_key(&encoded).is_none());
        assert!(event_key(&[]).is_none());
        assert!(event_key(&[3, b'a', b'b']).is_none());
        assert!(event_key(&[255, 255, 255, 255, 255]).is_none());
        let mut too_long = <(&str, u64)>::as_bytes(&("a", 1));
        too_long.push(0);
        assert!(event_key(&too_long).is_none());
    }

    #[test]
    fn a_leaf_of_garbage_yields_nothing_and_does_not_panic() {
        let mut leaf = vec![0u8; PAGE as usize];
        leaf[0] = LEAF;
        leaf[2] = 0xff;
        leaf[3] = 0xff;
        for byte in leaf.iter_mut().skip(4) {
            *byte = 0xA5;
        }
        let pairs = leaf_pairs(&leaf);
        assert!(pairs.iter().all(|(key, _)| event_key(key).is_none()));
        assert!(leaf_pairs(&[LEAF]).is_empty());
    }
}
