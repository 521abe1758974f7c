//! Exported logs: JSON Lines, one execution per file.
//!
//! A file `<execution id>.jsonl` holds the execution's events in seq order, gapless from 0, one
//! envelope per line in the envelope form of `loom_kernel::EventEnvelope`:
//!
//! ```text
//! {"executionId":"order-42","seq":0,"schema":1,"recordedAtMs":1764490000000,"event":{"type":"EXECUTION_STARTED",...}}
//! {"executionId":"order-42","seq":1,"schema":1,"event":{"type":"STEP_COMPLETED",...}}
//! ```
//!
//! Every line ends with a newline; blank lines are not allowed. Reading checks that each line
//! belongs to the file's execution and has the next seq, so a truncated or spliced file is an
//! error naming the line.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use loom_kernel::kit::DecodeError;
use loom_kernel::{EventEnvelope, ExecutionId};

/// The file extension of exported logs.
pub const EXTENSION: &str = "jsonl";

/// Why an exported log could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not an event envelope.
    #[error("{path}:{line}: {source}")]
    Decode {
        /// The file concerned.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// The underlying error.
        #[source]
        source: DecodeError,
    },
    /// An event is not where the log needs it (another execution, or a seq out of order).
    #[error("{path}:{line}: expected seq {expected} of execution {execution}, found {found}")]
    OutOfPlace {
        /// The file concerned.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// The execution whose log the file holds.
        execution: String,
        /// The execution id or seq expected.
        expected: String,
        /// The execution id or seq found.
        found: String,
    },
    /// The file holds no event.
    #[error("{path}: the file holds no event")]
    Empty {
        /// The file concerned.
        path: PathBuf,
    },
}

/// The path of `execution`'s log in `dir`: `<execution id>.jsonl`, with `%`, `/` and `\\`
/// written as `%25`, `%2F` and `%5C`, so that every id (a child's, `<parent>/<flow>#<n>`, has a
/// `/`) names one file in `dir`. Reading takes the id from the file's content, not its name.
///
/// A name that would pass 200 bytes (file systems refuse names over 255 bytes,
/// and an id may have 256, more once escaped) keeps its first bytes and ends with `%H` and 16
/// hex digits of a hash of the whole id: no escaped name ends so, since an escaped name's `%`
/// is always followed by `25`, `2F` or `5C`.
pub fn path_for(dir: &Path, execution: &ExecutionId) -> PathBuf {
    let mut name = String::with_capacity(execution.as_str().len() + EXTENSION.len() + 1);
    for c in execution.as_str().chars() {
        match c {
            '%' => name.push_str("%25"),
            '/' => name.push_str("%2F"),
            '\\' => name.push_str("%5C"),
            c => name.push(c),
        }
    }
    if name.len() > MAX_NAME_STEM {
        let mut end = MAX_NAME_STEM - HASHED_SUFFIX_LEN;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        name.push_str(&format!("%H{:016x}", fnv1a(execution.as_str().as_bytes())));
    }
    name.push('.');
    name.push_str(EXTENSION);
    dir.join(name)
}

/// The most bytes of a log's file name before its extension: room for `.jsonl` within the
/// 255 bytes of a file name, with some to spare for file systems that count otherwise.
const MAX_NAME_STEM: usize = 200;

/// `%H` and 16 hex digits.
const HASHED_SUFFIX_LEN: usize = 18;

/// FNV-1a, 64 bits: stable across builds and platforms, so an id always names the same file.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Writes one execution's log to `dir` and returns the file's path.
pub fn write_log(dir: &Path, log: &[EventEnvelope]) -> Result<Option<PathBuf>, JsonlError> {
    let Some(first) = log.first() else {
        return Ok(None);
    };
    let path = path_for(dir, &first.execution_id);
    let io = |source| JsonlError::Io {
        path: path.clone(),
        source,
    };
    let file = std::fs::File::create(&path).map_err(io)?;
    let mut out = BufWriter::new(file);
    for envelope in log {
        out.write_all(envelope.to_json().as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(Some(path))
}

/// Reads one exported log.
pub fn read_log(path: &Path) -> Result<Vec<EventEnvelope>, JsonlError> {
    let io = |source| JsonlError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut log: Vec<EventEnvelope> = Vec::new();
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        let number = index + 1;
        let envelope = EventEnvelope::from_json(&line).map_err(|source| JsonlError::Decode {
            path: path.to_path_buf(),
            line: number,
            source,
        })?;
        let expected_seq = log.len() as u64;
        let expected_id = log.first().map(|first| &first.execution_id);
        if envelope.seq != expected_seq
            || expected_id.is_some_and(|id| *id != envelope.execution_id)
        {
            return Err(JsonlError::OutOfPlace {
                path: path.to_path_buf(),
                line: number,
                execution: expected_id.unwrap_or(&envelope.execution_id).to_string(),
                expected: expected_seq.to_string(),
                found: format!(
                    "seq {} of execution {}",
                    envelope.seq, envelope.execution_id
                ),
            });
        }
        log.push(envelope);
    }
    if log.is_empty() {
        return Err(JsonlError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(log)
}

/// The exported logs in `dir`, sorted by file name.
pub fn list_logs(dir: &Path) -> Result<Vec<PathBuf>, JsonlError> {
    let io = |source| JsonlError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_some_and(|ext| ext == EXTENSION) {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}
