//! The settings a disk store is opened with.

#[cfg(doc)]
use super::{DiskStore, OpenError};

/// Settings of a [`DiskStore`].
#[derive(Debug, Clone)]
pub struct DiskStoreConfig {
    /// Memory redb may use to cache pages. It bounds the store's share of the process's
    /// memory whatever the size of the file.
    pub cache_size_bytes: usize,
    /// The most events one group commit takes. Larger batches amortise the fsync further but
    /// make the first caller in a batch wait for more inserts.
    pub max_batch_events: usize,
    /// Verify every page's checksum when opening for writing, so that a damaged file is
    /// refused at open instead of failing (or worse) on a later read. Costs a read of the
    /// whole file, outside the page cache, before the open returns: in proportion to the file
    /// (docs/PERFORMANCE.md). Off by default since LD-039: the open costs what the journal
    /// holds, and [`DiskStoreConfig::scrub_after_open`] reads every row once in the background.
    ///
    /// Off, the store trusts the file's pages until the scrub has read them: its own checks
    /// still refuse a damaged record, head, tail, count or feed row where it is read
    /// (docs/STORAGE.md, "Damaged and foreign files"), and a panic of the storage engine on a
    /// damaged page is reported as a damaged file, but a damaged branch page can send a lookup
    /// astray unnoticed, and the engine may panic again while such a panic unwinds, which ends
    /// the process. Turn it on where a file may be damaged at rest and a slower open is fine.
    pub verify_on_open: bool,
    /// After an open for writing, a thread of low priority reads every row of the store's
    /// tables once and checks each (`disk/scrub.rs`): damage at rest is logged as an error and
    /// reported by [`DiskStore::scrub_status`] without the open waiting for it. On by default.
    pub scrub_after_open: bool,
    /// A checkpoint is taken after this many commits (or once the journal holds 16 MiB): it
    /// bounds what an open after a crash applies from the journal, and how much the tables'
    /// durable commit writes at once. The applier thread makes the tables durable, then the
    /// writer starts the journal again with what they lack, so commits do not wait for it
    /// (docs/STORAGE.md, "The journal"); but that commit's writes share the disk with the
    /// journal's, and a sustained load's p99.9 follows its size (1,024 by default: 8,192 held
    /// it near 30 ms, docs/PERFORMANCE.md, "Sustained load").
    pub checkpoint_commits: u64,
    /// Opens a store whose journal was cut short ([`OpenError::JournalCut`]) as of the cut,
    /// losing the commits written after it, instead of refusing it. Off by default: the loss
    /// is the operator's to accept, once a copy of the whole journal is known to be gone.
    pub accept_cut_journal: bool,
}

impl Default for DiskStoreConfig {
    fn default() -> Self {
        Self {
            cache_size_bytes: 64 * 1024 * 1024,
            max_batch_events: 8192,
            verify_on_open: false,
            scrub_after_open: true,
            checkpoint_commits: 1024,
            accept_cut_journal: false,
        }
    }
}
