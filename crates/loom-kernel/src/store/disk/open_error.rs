//! Why a store file could not be opened: every way an open is refused, each naming the file.

use std::path::PathBuf;

use super::STORE_FORMAT;
#[cfg(doc)]
use super::{DiskStore, DiskStoreConfig};

/// Why a store file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A file operation failed.
    #[error("cannot open store file {path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Another process (or store) has the file open.
    #[error("store file {path} is open in another process or store")]
    AlreadyOpen {
        /// The file concerned.
        path: PathBuf,
    },
    /// The file is not a valid store.
    #[error("store file {path} is damaged or not a Loom store: {detail}")]
    Corrupt {
        /// The file concerned.
        path: PathBuf,
        /// What went wrong, in words.
        detail: String,
    },
    #[error(
        "store file {path} has layout version {found}; this build reads version {STORE_FORMAT}"
    )]
    /// The file has a layout this build does not read.
    UnsupportedFormat {
        /// The file concerned.
        path: PathBuf,
        /// The layout version found.
        found: u64,
    },
    /// The writer thread could not be started.
    #[error("cannot start the store's writer thread: {0}")]
    Writer(#[source] std::io::Error),
    /// Opening an existing store ([`DiskStore::open_existing`], [`DiskStore::open_read_only`])
    /// found no file.
    #[error("store file {path} does not exist")]
    Missing {
        /// The file concerned.
        path: PathBuf,
    },
    /// The file is 0 bytes long: not a store (a store file is never empty), and not opened
    /// as an empty one, which would hide the loss of a store behind an empty listing.
    #[error("store file {path} is empty (0 bytes): not a Loom store")]
    EmptyFile {
        /// The file concerned.
        path: PathBuf,
    },
    /// The store's journal ends exactly where a record ends, although this build always leaves
    /// zeros after its last record: it was cut short (by a copy, a restore, a file system), and
    /// the commits written after the cut are lost, how many unknown. Refused unless
    /// [`DiskStoreConfig::accept_cut_journal`].
    #[error(
        "the journal {journal} of store file {path} was cut short at offset {end}, after {records} commit records the tables lack: the commits written after the cut are lost and nothing says how many; put back the whole journal if a copy has it, or open as of the cut with DiskStoreConfig::accept_cut_journal (`loom --accept-cut-journal`)"
    )]
    JournalCut {
        /// The store file concerned.
        path: PathBuf,
        /// Its journal.
        journal: PathBuf,
        /// The offset where the journal ends.
        end: u64,
        /// The whole records it holds past the tables' position.
        records: usize,
    },
    /// A file of an older layout cannot be brought up to date when opened read-only.
    #[error(
        "store file {path} has layout version {found}; open it for writing once to bring it to version {STORE_FORMAT}"
    )]
    NeedsUpgrade {
        /// The file concerned.
        path: PathBuf,
        /// The layout version found.
        found: u64,
    },
}
