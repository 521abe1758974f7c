//! The embedded disk store, on redb, with a journal and group commit (layout 5: LD-027, LD-036,
//! LD-037).
//!
//! # Layout
//! - `events`: `(execution id, first seq) -> ` the records of one append (`disk/runs.rs`), in the
//!   record form of [`crate::envelope`]; a row written by layout 3 or before holds one record.
//! - `heads`: `execution id -> next seq` with a check of the id and the head (`disk/heads.rs`;
//!   read to fence appends and to list executions).
//! - `tails`: `execution id -> ` its [`ExecutionTail`] with a check of the id and the tail
//!   (`disk/checked.rs`; read to validate appends).
//! - `by_status`: `(index code, execution id)`, one range per status listing.
//! - `ended`: `(ended at ms, execution id)`, read by retention, oldest first; a deletion checks
//!   each row against the execution's tail before it removes a log.
//! - `feed`: `position -> (execution id, first seq)`, the store-wide commit order: one row per
//!   events row, covering as many positions as the row holds events.
//! - `purged`: `execution id -> feed position` when retention last deleted it: the feed rows
//!   before it belong to the deleted log, not to a later one started under the same id.
//! - `wakeups` and `wake_rows`: the wake-up index (`disk/wake.rs`, LD-033), built on open for a
//!   file from before it (meta key `"wake_index"`).
//! - `meta`: `"format" -> STORE_FORMAT`, so a file from an incompatible build is refused;
//!   `"feed_next"`, the next feed position; `"journal_generation"` and `"journal_end"`, where
//!   the tables stand in the journal; the counts per status (`disk/listing.rs`);
//!   `"values_checked"`, every head and meta value carries its check; `"purges_recorded"`,
//!   `purged` names every deletion since the file was created. Every value but the format
//!   carries a check of its key and value (`disk/checked.rs`).
//!
//! Beside the file, its journal (`journal.rs`): every commit is one record there, durable
//! before the commit is applied to the tables. Files of layouts 1 to 4 are brought to layout 5
//! when opened for writing (`open.rs`); layouts 3 and 4 by their version alone (layout 3's rows
//! are rows of one event), their `heads`, `tails` and `meta` values then given their check
//! (`disk/heads.rs`).
//!
//! # Group commit
//! One writer thread owns the journal. Callers encode their events on their own task, send the
//! bytes to the writer and wait. The writer takes every request queued at that moment (up to
//! [`DiskStoreConfig::max_batch_events`]), checks each one's expected seq and its batch against
//! the log's head and tail as they stand after every commit so far (including those earlier in
//! the same batch), writes the ones that pass as one journal record (one `pwrite`, one
//! `fdatasync`), holds their events in memory for readers (`disk/pending.rs`) and answers. So
//! `append` returning `Ok` means the events are on disk and visible. A conflicting request is
//! answered with [`AppendError::Conflict`] and takes no part in the batch; a commit that failed
//! before its journal record was written fails every request of the batch and none of its events
//! is visible; one that failed after stops the writer until the store is opened again.
//!
//! # The tables behind the journal
//! The applier thread (`disk/apply.rs`, LD-035) applies what the writer committed to the redb
//! tables later, many commits in one redb commit without an fsync; the store then forgets those
//! events from memory. A reader of a log or a head looks at what is held, then at the tables; a
//! reader of an index (status, listing, counts, feed, wake-ups) first has the applier apply
//! everything acknowledged.
//!
//! # Crash safety
//! After a `kill -9`, the tables are at their last durable redb commit (a checkpoint), which
//! names the journal offset it covers; opening the file again applies the journal records past
//! it, so every acknowledged batch is there in whole and none in part. See `docs/STORAGE.md`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use tokio::sync::oneshot;

mod apply;
mod checked;
mod checkpoint;
mod heads;
mod in_doubt;
mod listing;
mod open;
mod overlay;
mod pending;
mod read_only;
mod runs;
mod salvage;
mod scrub;
mod snapshot;
mod wake;
use apply::{Applied, Chunk, FlushReply, ToApplier};
use checkpoint::{checkpoint, record_journal_position};
use open::{check_not_empty, open_database};
use pending::{Pending, PendingRecords};
pub use salvage::{SalvageError, Salvaged};
pub use scrub::ScrubStatus;
use snapshot::LastCommit;

use super::claim::{ClaimTable, FirstAppend, NewClaim};
use super::journal::{self, Journal};
use super::tail::{ExecutionTail, filter_code};
use super::watch::{FeedWatch, HeadWatch};
use super::{
    AppendError, EncodedAppend, EventStore, ExecutionPage, ExecutionQuery, ExecutionQueryPage,
    ExecutionSummary, FeedEvent, LatencyRecorder, ReadError, RetentionError, StatusCounts,
    StatusFilter, StorageError, StoreStats, decode_stored,
};
use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::id::ExecutionId;

const EVENTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("events");
const HEADS: TableDefinition<&str, u64> = TableDefinition::new("heads");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Execution id -> its [`ExecutionTail`], encoded.
const TAILS: TableDefinition<&str, &[u8]> = TableDefinition::new("tails");
/// `(index code, execution id)` for every index code of each execution's tail.
const BY_STATUS: TableDefinition<(u8, &str), ()> = TableDefinition::new("by_status");
/// `(ended at ms, execution id)` for every ended execution with an end time.
const ENDED: TableDefinition<(u64, &str), ()> = TableDefinition::new("ended");
/// Feed position -> `(execution id, first seq)` of an events row.
const FEED: TableDefinition<u64, (&str, u64)> = TableDefinition::new("feed");

/// Execution id -> the next feed position when its log was last deleted. Written by
/// retention only (nothing on the append path); a file without it has deleted nothing since.
const PURGED: TableDefinition<&str, u64> = TableDefinition::new("purged");

/// The meta key of the next feed position.
const FEED_NEXT: &str = "feed_next";

/// The meta key saying `purged` names every log deleted since the file was created (written
/// when a file is created, from layout 5 on): a feed row naming a seq that a log still there
/// lacks is then damage, not a row of a log deleted before `purged` was kept.
const PURGES_RECORDED: &str = "purges_recorded";

/// The meta keys of where the tables stand in the journal: its generation, and the offset
/// just past the last record they hold.
const JOURNAL_GENERATION: &str = "journal_generation";
const JOURNAL_END: &str = "journal_end";

/// The layout version of the file: 5, the tables of layout 3 (those of layout 2 with a journal
/// in front, LD-027) with one events row and one feed row per append (layout 4, LD-036) and
/// `heads` values that carry a check of their id and head (LD-037, `disk/heads.rs`). A file
/// with another one is refused on open, except files of versions 1 to 4, which are brought to
/// this one when opened for writing (versions 2 to 4 are also read as they are, read-only).
pub(super) const STORE_FORMAT: u64 = 5;

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

/// Event logs in one redb file. Cheap to clone; clones share the file and the writer.
#[derive(Debug, Clone)]
pub struct DiskStore {
    shared: Arc<Shared>,
}

struct Shared {
    db: Arc<Db>,
    path: PathBuf,
    requests: Mutex<Option<mpsc::Sender<WriteRequest>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    watch: Arc<HeadWatch>,
    /// The next feed position, published after each commit.
    feed_head: Arc<FeedWatch>,
    /// New ids claimed for their first append ([`EventStore::claim_new`]); the writer admits
    /// first appends against it.
    claims: Arc<ClaimTable>,
    /// Acknowledged events the tables do not hold yet (LD-035).
    pending: Arc<Pending>,
    /// The tables as the last commit of `heads` or `events` left them, for the lookups of a
    /// new execution (`snapshot.rs`).
    last_commit: Arc<LastCommit>,
    /// Checkpoints taken since the store opened ([`DiskStore::checkpoints`]).
    checkpoints: Arc<AtomicU64>,
    /// The scrub's status and stop flag, and its thread, when one runs.
    scrub: Option<Arc<scrub::Scrub>>,
    scrubber: Mutex<Option<JoinHandle<()>>>,
    /// What the writer counts as it commits ([`DiskStore::stats`]).
    stats: Arc<WriterStats>,
}

/// What the writer counts as it commits, for [`DiskStore::stats`]: relaxed atomic adds, one
/// clock reading around each group commit and one around its `fdatasync`.
#[derive(Debug, Default)]
struct WriterStats {
    commits: AtomicU64,
    appends: AtomicU64,
    commit_latency: LatencyRecorder,
    fsync_latency: LatencyRecorder,
}

/// The database, opened for writing or read-only.
enum Db {
    Write(Database),
    Read(redb::ReadOnlyDatabase),
    /// Read-only, over a file that was not closed cleanly: redb's repair and the journal's
    /// commits the tables lacked applied in memory (`overlay.rs`), the file untouched.
    Snapshot(Database),
}

impl Db {
    fn begin_read(&self) -> Result<redb::ReadTransaction, redb::TransactionError> {
        match self {
            Self::Write(db) | Self::Snapshot(db) => db.begin_read(),
            Self::Read(db) => db.begin_read(),
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("path", &self.path)
            .finish()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The scrub holds the database too: stopped and joined first, so the file is released
        // when this returns.
        if let Some(scrub) = &self.scrub {
            scrub.stop();
        }
        if let Ok(mut scrubber) = self.scrubber.lock()
            && let Some(handle) = scrubber.take()
        {
            let _ = handle.join();
        }
        // Closing the channel ends the writer once it has answered what is queued; joining it
        // releases its handle on the file, so the path can be opened again at once.
        if let Ok(mut requests) = self.requests.lock() {
            requests.take();
        }
        if let Ok(mut writer) = self.writer.lock()
            && let Some(handle) = writer.take()
        {
            let _ = handle.join();
        }
        self.last_commit.clear();
    }
}

enum WriteRequest {
    Append(Append),
    Delete(DeleteRequest),
    /// A claim was given back: first appends waiting for it may go ahead.
    ClaimReleased,
    /// A reader of an index needs the tables to hold every acknowledged event.
    Apply(oneshot::Sender<Result<(), StorageError>>),
}

/// An append, with the token of the claim it was made under (a claimed first append).
struct Append {
    encoded: EncodedAppend,
    claim: Option<u64>,
}

impl Append {
    /// Answers the caller, letting go of the writer's share of the records first: the caller,
    /// who encoded them and keeps its own share until answered, frees them on its thread
    /// (freeing another thread's memory takes that thread's arena lock in glibc's allocator).
    fn answer(self, outcome: Result<u64, AppendError>) {
        let EncodedAppend { records, reply, .. } = self.encoded;
        drop(records);
        let _ = reply.send(outcome);
    }
}

struct DeleteRequest {
    ended_before_ms: u64,
    limit: usize,
    reply: oneshot::Sender<Result<Vec<ExecutionId>, RetentionError>>,
}

impl DiskStore {
    /// Opens the store at `path`, creating it if the file does not exist. A 0-byte file is
    /// refused ([`OpenError::EmptyFile`]), never taken for a new store.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, DiskStoreConfig::default())
    }

    /// [`DiskStore::open`] with settings.
    pub fn open_with(path: impl AsRef<Path>, config: DiskStoreConfig) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        check_not_empty(&path, false, true)?;
        Self::start(path, &config, Mode::CreateOrOpen)
    }

    /// Opens the store at `path` for writing, refusing a missing file
    /// ([`OpenError::Missing`]) instead of creating one.
    pub fn open_existing(
        path: impl AsRef<Path>,
        config: DiskStoreConfig,
    ) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        check_not_empty(&path, true, true)?;
        Self::start(path, &config, Mode::OpenExisting)
    }

    /// Opens the store at `path` for reading only: nothing is written to the file or its
    /// journal (appends and deletions fail with `Closed` / [`RetentionError::Closed`]), a
    /// missing or empty file is refused, and so is a file of an older layout that would need
    /// bringing up to date. For tools that inspect a store, such as `replay-check` and the
    /// `loom` CLI's read commands.
    ///
    /// A store that was not closed cleanly (a SIGKILL, a crash, a power loss) reads as of its
    /// journal's last durable commit: redb's repair and the commits its tables lack are applied
    /// in memory (the memory is what they touch, not the file's size), and the file stays as it
    /// was for the next writer to recover. A writer that holds the file refuses the open
    /// ([`OpenError::AlreadyOpen`]); other readers do not. The pages are not checked
    /// whatever [`DiskStoreConfig::verify_on_open`] says (redb's check repairs what it finds,
    /// which a read-only open must not): the store's own checks of what it reads still apply.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        config: DiskStoreConfig,
    ) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        check_not_empty(&path, true, false)?;
        Self::start(path, &config, Mode::ReadOnly)
    }

    /// Checks every page of the store file at `path` (redb's page checksums and allocator
    /// state) without writing to it: what a crash left is repaired in memory first. `Ok(true)`
    /// when all is whole, `Ok(false)` when only the allocator state needed repair (space
    /// leaked, no data lost: the next open for writing repairs it), an error naming the
    /// damage otherwise ([`OpenError::Corrupt`]). It reads the whole file (`loom store
    /// check`); a writer that holds the file refuses it ([`OpenError::AlreadyOpen`]).
    pub fn check_pages(path: impl AsRef<Path>) -> Result<bool, OpenError> {
        let path = path.as_ref();
        check_not_empty(path, true, false)?;
        read_only::check_pages(path)
    }

    /// Reads every event log it can from the store file at `path` and its journal without
    /// redb and without writing: for a file redb refuses to open (a damaged root or branch
    /// page), when [`DiskStore::open_read_only`] cannot read it. Each log comes back from seq 0
    /// up to its first missing event; `progress` is told the bytes read and the file's length
    /// (`salvage.rs`; `loom store salvage`).
    pub fn salvage(
        path: impl AsRef<Path>,
        progress: impl FnMut(u64, u64),
    ) -> Result<Salvaged, SalvageError> {
        salvage::salvage(path.as_ref(), progress)
    }

    fn start(path: PathBuf, config: &DiskStoreConfig, mode: Mode) -> Result<Self, OpenError> {
        let (db, feed_next, journal) = open_database(&path, config, mode)?;
        let db = Arc::new(db);
        let watch = Arc::new(HeadWatch::default());
        let feed_head = Arc::new(FeedWatch::new(feed_next));
        let claims = Arc::new(ClaimTable::default());
        let pending = Arc::new(Pending::default());
        let last_commit = Arc::new(LastCommit::default());
        let checkpoints = Arc::new(AtomicU64::new(0));
        let stats = Arc::new(WriterStats::default());
        if let Db::Write(db) = &*db {
            last_commit.replace(db);
        }
        let (requests, writer) = if matches!(*db, Db::Write(_)) {
            let (sender, receiver) = mpsc::channel();
            let db = Arc::clone(&db);
            let watch = Arc::clone(&watch);
            let feed_head = Arc::clone(&feed_head);
            let claims = Arc::clone(&claims);
            let pending = Arc::clone(&pending);
            let applied = Arc::new(Applied::default());
            let (to_applier, applier_requests) = mpsc::channel();
            let last = Arc::clone(&last_commit);
            let applier = {
                let db = Arc::clone(&db);
                let pending = Arc::clone(&pending);
                let applied = Arc::clone(&applied);
                let last_commit = Arc::clone(&last_commit);
                std::thread::Builder::new()
                    .name("loom-store-applier".into())
                    .spawn(move || {
                        if let Db::Write(db) = &*db {
                            apply::run(db, &pending, &last_commit, &applied, &applier_requests);
                        }
                    })
                    .map_err(OpenError::Writer)?
            };
            let journal = journal.ok_or_else(|| OpenError::Corrupt {
                path: path.clone(),
                detail: "no journal was opened for writing".into(),
            })?;
            let max_batch_events = config.max_batch_events.max(1);
            let checkpoint_commits = config.checkpoint_commits.max(1);
            let checkpoint_count = Arc::clone(&checkpoints);
            let writer_stats = Arc::clone(&stats);
            let writer = std::thread::Builder::new()
                .name("loom-store-writer".into())
                .spawn(move || {
                    if let Db::Write(db) = &*db {
                        let mut writer = Writer {
                            db,
                            requests: &receiver,
                            watch: &watch,
                            feed_head: &feed_head,
                            claims: &claims,
                            pending: &pending,
                            last_commit: &last,
                            to_applier: Some(to_applier),
                            applier: Some(applier),
                            applied: &applied,
                            max_batch_events,
                            journal,
                            since_checkpoint: 0,
                            checkpoint_commits,
                            checkpoint_asked: false,
                            handed_generation: None,
                            durable_end: journal::HEADER_LEN,
                            checkpoints: &checkpoint_count,
                            stats: &writer_stats,
                            commits: 0,
                            pruned_at: 0,
                            queue: Vec::new(),
                            queued_events: 0,
                            queued_bytes: 0,
                            queued_end: 0,
                            decided: HashMap::new(),
                            feed_next,
                            payload: Vec::new(),
                            poisoned: None,
                        };
                        writer.run();
                    }
                })
                .map_err(OpenError::Writer)?;
            (Some(sender), Some(writer))
        } else {
            (None, None)
        };
        let (scrub, scrubber) = match &*db {
            Db::Write(_) if config.scrub_after_open => {
                let scrub = Arc::new(scrub::Scrub::default());
                let thread = {
                    let (db, scrub, path) = (Arc::clone(&db), Arc::clone(&scrub), path.clone());
                    std::thread::Builder::new()
                        .name("loom-store-scrub".into())
                        .spawn(move || {
                            if let Db::Write(db) = &*db {
                                scrub::run(db, &scrub, &path);
                            }
                        })
                        .map_err(OpenError::Writer)?
                };
                (Some(scrub), Some(thread))
            }
            _ => (None, None),
        };
        tracing::debug!(path = %path.display(), "disk store opened");
        Ok(Self {
            shared: Arc::new(Shared {
                db,
                path,
                requests: Mutex::new(requests),
                writer: Mutex::new(writer),
                watch,
                feed_head,
                claims,
                pending,
                last_commit,
                checkpoints,
                stats,
                scrub,
                scrubber: Mutex::new(scrubber),
            }),
        })
    }

    /// How far the scrub that reads every row after an open for writing has gone, and the
    /// damage it found ([`DiskStoreConfig::scrub_after_open`]); `None` when none runs (a
    /// read-only open, or the scrub turned off).
    pub fn scrub_status(&self) -> Option<ScrubStatus> {
        self.shared.scrub.as_ref().map(|scrub| scrub.status())
    }

    fn send(&self, request: WriteRequest) -> Result<(), ()> {
        let requests = self.shared.requests.lock().map_err(|_| ())?;
        let sender = requests.as_ref().ok_or(())?;
        sender.send(request).map_err(|_| ())
    }

    /// An append, claimed (`claim`: its token) or not, through the writer.
    async fn append_as(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
        claim: Option<u64>,
    ) -> Result<u64, AppendError> {
        let (encoded, answer) = EncodedAppend::new(execution, expected_seq, events)?;
        let records = Arc::clone(&encoded.records);
        self.send(WriteRequest::Append(Append { encoded, claim }))
            .map_err(|_| AppendError::Closed)?;
        let answered = answer.await;
        // The last share, freed here (`Append::answer`).
        drop(records);
        answered.map_err(|_| AppendError::Closed)?
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// How many checkpoints have completed since this store was opened (the tables made
    /// durable, then the journal's next generation begun; the close's is not counted): what a
    /// load test plots against its latencies.
    pub fn checkpoints(&self) -> u64 {
        self.shared.checkpoints.load(Ordering::Relaxed)
    }

    /// What the writer has counted since this store was opened: commits (journal records),
    /// the appends they made durable, and the latency of each commit and of its
    /// `fdatasync`. A store opened read-only commits nothing: its figures stay 0.
    pub fn stats(&self) -> StoreStats {
        let stats = &self.shared.stats;
        StoreStats {
            commits: Some(stats.commits.load(Ordering::Relaxed)),
            appends: Some(stats.appends.load(Ordering::Relaxed)),
            commit_latency: Some(stats.commit_latency.snapshot()),
            fsync_latency: Some(stats.fsync_latency.snapshot()),
            lease_takeovers: None,
        }
    }

    /// The whole logs of several executions as stored, not decoded (an unknown one is
    /// empty), in the order asked: one read transaction and one trip to the blocking pool for
    /// the whole batch.
    pub async fn read_stored_logs(
        &self,
        executions: &[ExecutionId],
    ) -> Result<Vec<StoredLog>, ReadError> {
        let ids = executions.to_vec();
        let pending = Arc::clone(&self.shared.pending);
        self.blocking_read(move |db| {
            let mut stale = None;
            for _ in 0..READ_ATTEMPTS {
                // What the tables lack is copied before they are read (pending.rs).
                let held: Vec<_> = ids
                    .iter()
                    .map(|execution| pending.copy(execution.as_str(), 0, usize::MAX))
                    .collect();
                let txn = db.begin_read().map_err(ReadError::storage)?;
                let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
                let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
                let mut logs = Vec::with_capacity(ids.len());
                for (execution, held) in ids.iter().zip(held) {
                    // The head is the length of the log: the index is sized once, and every
                    // seq below it must be read back where it belongs.
                    let head = head_of(&heads, execution.as_str()).map_err(ReadError::storage)?;
                    let mut page = RawPage::fetch_from(&events, execution, 0, usize::MAX, head)?;
                    if let Some(held) = held
                        && let Err(gap) = page.extend_held(execution, held, 0, usize::MAX)
                    {
                        stale = Some(gap);
                        break;
                    }
                    logs.push(StoredLog {
                        execution: execution.clone(),
                        page,
                    });
                }
                if logs.len() == ids.len() {
                    return Ok(logs);
                }
            }
            Err(stale.unwrap_or_else(|| ReadError::storage(StorageError::msg("no read"))))
        })
        .await
    }

    /// Waits until the tables hold every event acknowledged so far: the indexes (listing,
    /// status, wake-ups, feed) are read from the tables only, and the writer applies its queue
    /// to them lazily (LD-035).
    async fn settled(&self) -> Result<(), ReadError> {
        if self.shared.pending.is_empty() {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        self.send(WriteRequest::Apply(reply))
            .map_err(|_| ReadError::Closed)?;
        // This store is open (the caller holds it): an answer that never comes is a writer or
        // applier thread that is gone, a storage failure.
        answer
            .await
            .unwrap_or_else(|_| {
                Err(StorageError::msg(
                    "the store's writer or applier thread is gone; open the store again",
                ))
            })
            .map_err(|source| ReadError::Storage { source })
    }

    async fn blocking_read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Db) -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let db = Arc::clone(&self.shared.db);
        tokio::task::spawn_blocking(move || read(&db))
            .await
            .map_err(|err| ReadError::Storage {
                source: StorageError::new(err),
            })?
    }
}

/// How a store file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    CreateOrOpen,
    OpenExisting,
    ReadOnly,
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    format!("the storage engine failed on this file: {message}")
}

/// The writer thread: the journal, and the store's durable redb commits (checkpoints, deletions);
/// the applier thread (`apply.rs`) makes the non-durable ones.
struct Writer<'a> {
    db: &'a Database,
    requests: &'a mpsc::Receiver<WriteRequest>,
    watch: &'a HeadWatch,
    feed_head: &'a FeedWatch,
    claims: &'a ClaimTable,
    /// Acknowledged events the tables do not hold yet, as readers see them.
    pending: &'a Pending,
    /// Replaced after each deletion (`snapshot.rs`).
    last_commit: &'a LastCommit,
    /// The applier thread (`apply.rs`): what is handed to it, and what it reports.
    to_applier: Option<mpsc::Sender<ToApplier>>,
    applier: Option<JoinHandle<()>>,
    applied: &'a Applied,
    max_batch_events: usize,
    journal: Journal,
    /// Journaled commits the durable tables may lack: since the last checkpoint, counting
    /// those a rotation carried over.
    since_checkpoint: u64,
    /// Commits between checkpoints ([`DiskStoreConfig::checkpoint_commits`]).
    checkpoint_commits: u64,
    /// A checkpoint was asked of the applier and the journal has not started its next
    /// generation yet.
    checkpoint_asked: bool,
    /// The generation of the journal when a chunk was last handed to the applier.
    handed_generation: Option<u64>,
    /// An offset of the journal's current generation the tables are known to be durable up to
    /// (a deletion's commit): a rotation carries over nothing before it.
    durable_end: u64,
    /// Checkpoints taken since the store opened, as [`DiskStore::checkpoints`] reports them.
    checkpoints: &'a AtomicU64,
    /// Commits, appends and latencies, as [`DiskStore::stats`] reports them.
    stats: &'a WriterStats,
    /// Journaled commits since the store opened: the applier reports the last one it applied.
    commits: u64,
    /// Journaled appends not handed to the applier yet, in commit order.
    queue: Vec<Queued>,
    /// Events and record bytes in `queue`.
    queued_events: usize,
    queued_bytes: usize,
    /// The journal offset just past the last queued commit's record.
    queued_end: u64,
    /// The head and tail of each execution appended to by a commit the tables may not hold
    /// yet, as they stand after it, and the number of that commit: what the next append is
    /// decided against (the tables lag behind the journal).
    decided: HashMap<String, (u64, ExecutionTail, u64)>,
    /// The last commit the applier had applied when `decided` was last pruned.
    pruned_at: u64,
    /// The next feed position, counting the queued appends.
    feed_next: u64,
    /// The journal record being built, kept to reuse its allocation.
    payload: Vec<u8>,
    /// Set when the journal and the tables may disagree (a failed journal write, or an apply
    /// that failed after its journal records were durable): every later write fails with it,
    /// and the next open brings the tables up to the journal.
    poisoned: Option<StorageError>,
}

/// An append durable in the journal, waiting to be applied to the tables.
#[derive(Debug)]
struct Queued {
    execution: ExecutionId,
    expected_seq: u64,
    /// How many records it appends. The records themselves are in [`Pending`] from
    /// `expected_seq` on until the tables hold them: readers need that copy anyway, so the
    /// writer keeps no second one for the applier (in a burst of new executions, that second
    /// copy was the memory of a tenth of the page faults).
    record_count: usize,
    changes: Vec<super::TailChange>,
    recorded_at_ms: Option<u64>,
}

/// The queue is handed to the applier once it holds this many events...
const APPLY_EVENTS: usize = 65_536;
/// ...or this many bytes of records, or this many appends (so that the checkpoint, every
/// `CHECKPOINT_COMMITS`, finds most of them applied already)...
const APPLY_BYTES: usize = 16 << 20;
const APPLY_APPENDS: usize = 2048;
/// ...or once no request came for this long: an idle store's tables catch up, and a reader of
/// an index then finds nothing to wait for.
const APPLY_WHEN_IDLE: std::time::Duration = std::time::Duration::from_millis(20);
/// The writer waits for the applier once this many events are held for it: what the tables
/// lack stays bounded in memory when the applier falls behind.
const MAX_HELD_EVENTS: usize = 262_144;

impl Writer<'_> {
    fn run(&mut self) {
        // Requests met while gathering a batch that are not appends (a deletion, an apply)
        // wait until that batch is committed, in the order they came.
        let mut held_back: VecDeque<WriteRequest> = VecDeque::new();
        // First appends of ids another caller claimed, until that claim is over.
        let mut waiting: Vec<Append> = Vec::new();
        loop {
            self.rotate_if_durable();
            let mut batch = Vec::new();
            let mut events = 0;
            for append in std::mem::take(&mut waiting) {
                self.admit(append, &mut batch, &mut waiting, &mut events);
            }
            if batch.is_empty() {
                let request = match held_back.pop_front() {
                    Some(request) => request,
                    None => match self.next_request() {
                        Some(request) => request,
                        None => {
                            self.close();
                            return;
                        }
                    },
                };
                match request {
                    WriteRequest::Append(append) => {
                        self.admit(append, &mut batch, &mut waiting, &mut events);
                    }
                    WriteRequest::Delete(delete) => {
                        self.delete(delete);
                        continue;
                    }
                    WriteRequest::Apply(reply) => {
                        self.hand_over();
                        self.ask_applier(ToApplier::Flush(FlushReply::Task(reply)));
                        continue;
                    }
                    WriteRequest::ClaimReleased => continue,
                }
                if batch.is_empty() {
                    continue;
                }
            }
            while held_back.is_empty() && events < self.max_batch_events {
                match self.requests.try_recv() {
                    Ok(WriteRequest::Append(append)) => {
                        self.admit(append, &mut batch, &mut waiting, &mut events);
                    }
                    Ok(WriteRequest::ClaimReleased) => {}
                    Ok(other) => held_back.push_back(other),
                    Err(_) => break,
                }
            }
            self.commit(batch, events);
        }
    }

    /// The next request; while appends wait to be applied, a moment without requests applies
    /// them first. `None` once the store is dropped.
    fn next_request(&mut self) -> Option<WriteRequest> {
        if self.queue.is_empty() || self.poisoned.is_some() {
            return self.requests.recv().ok();
        }
        match self.requests.recv_timeout(APPLY_WHEN_IDLE) {
            Ok(request) => Some(request),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.hand_over();
                self.requests.recv().ok()
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Puts `append` in the batch, unless it is the first append of an id another caller
    /// holds (a claim, or an unclaimed first append earlier in this batch): it then waits.
    fn admit(
        &self,
        append: Append,
        batch: &mut Vec<Append>,
        waiting: &mut Vec<Append>,
        events: &mut usize,
    ) {
        let first = append.encoded.expected_seq == 0;
        if first && self.claims.admit(&append.encoded.execution, append.claim) == FirstAppend::Wait
        {
            waiting.push(append);
            return;
        }
        *events += append.encoded.records.len();
        batch.push(append);
    }

    /// The store is closed: what is queued goes to the tables and a last checkpoint is taken,
    /// so that the journal holds nothing the tables lack (a read-only open then needs no
    /// replay). Then the applier ends.
    fn close(&mut self) {
        if self.poisoned.is_none() && self.since_checkpoint > 0 {
            let closed = self
                .flush()
                .and_then(|()| checkpoint(self.db, &mut self.journal));
            if let Err(detail) = closed {
                tracing::warn!(%detail, "the closing checkpoint failed; the next open replays the journal");
            }
        }
        self.to_applier.take();
        if let Some(applier) = self.applier.take() {
            let _ = applier.join();
        }
    }

    /// Hands the queue to the applier, which applies it to the tables in its own time.
    fn hand_over(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let chunk = Chunk {
            appends: std::mem::take(&mut self.queue),
            generation: self.journal.generation(),
            journal_end: self.queued_end,
            feed_next: self.feed_next,
            last_commit: self.commits,
        };
        self.queued_events = 0;
        self.queued_bytes = 0;
        self.handed_generation = Some(self.journal.generation());
        self.ask_applier(ToApplier::Chunk(chunk));
    }

    fn ask_applier(&mut self, request: ToApplier) {
        let sent = self
            .to_applier
            .as_ref()
            .is_some_and(|applier| applier.send(request).is_ok());
        if !sent && self.poisoned.is_none() {
            self.poisoned = Some(StorageError::msg(
                "the store stopped writing: its applier thread is gone; open it again to recover",
            ));
        }
    }

    /// Hands the queue over and waits until the tables hold every commit; a failure stops the
    /// writer (the journal holds what the tables lack, and the next open applies it).
    fn flush(&mut self) -> Result<(), StorageError> {
        if let Some(poisoned) = &self.poisoned {
            return Err(poisoned.clone());
        }
        self.hand_over();
        let (reply, answer) = mpsc::sync_channel(1);
        self.ask_applier(ToApplier::Flush(FlushReply::Thread(reply)));
        let outcome = answer
            .recv()
            .unwrap_or_else(|_| Err(StorageError::msg("the store's applier thread is gone")));
        if let Err(detail) = &outcome {
            self.poisoned.get_or_insert_with(|| detail.clone());
        }
        outcome
    }

    /// More events are held than [`MAX_HELD_EVENTS`]: waits, transaction by transaction of the
    /// applier's, until they are back under it. Not a flush: the commits behind wait for the
    /// applier's next transaction, not for all it has to do (which took 1.4 s once at 20,000
    /// executions/s, `docs/PERFORMANCE.md`, "Sustained load").
    fn wait_for_applier(&mut self) {
        self.hand_over();
        while self.pending.len() >= MAX_HELD_EVENTS && self.poisoned.is_none() {
            if let Some(failed) = self.applied.failure() {
                self.poisoned = Some(failed.clone());
                break;
            }
            let applied = self.applied.last_commit();
            self.applied
                .wait_past(applied, std::time::Duration::from_millis(50));
        }
    }

    /// Forgets the decided heads and tails of executions whose last commit the tables hold.
    fn prune_decided(&mut self) {
        let applied = self.applied.last_commit();
        if applied != self.pruned_at {
            self.decided.retain(|_, (_, _, commit)| *commit > applied);
            self.pruned_at = applied;
        }
    }

    fn delete(&mut self, delete: DeleteRequest) {
        let outcome = self.flush().and_then(|()| {
            catch_unwind(AssertUnwindSafe(|| {
                delete_ended(self.db, &self.journal, delete.ended_before_ms, delete.limit)
            }))
            .unwrap_or_else(|panic| Err(StorageError::msg(panic_message(&panic))))
        });
        // Before the answer: no lookup made after it sees a deleted log.
        self.last_commit.replace(self.db);
        if outcome.is_ok() {
            // That commit was durable: the journal up to here is covered.
            self.since_checkpoint = 0;
            self.durable_end = self.journal.end();
        }
        let _ = delete.reply.send(outcome.map_err(|detail| {
            tracing::error!(%detail, "deleting ended executions failed");
            RetentionError::Storage { source: detail }
        }));
    }

    fn commit(&mut self, mut batch: Vec<Append>, events: usize) {
        let _span = tracing::debug_span!("group_commit", requests = batch.len(), events).entered();
        let started = std::time::Instant::now();
        let commits_before = self.commits;
        if self.poisoned.is_none()
            && let Some(failed) = self.applied.failure()
        {
            self.poisoned = Some(failed.clone());
        }
        self.prune_decided();
        let outcome = match &self.poisoned {
            Some(poisoned) => Err(poisoned.clone()),
            None => catch_unwind(AssertUnwindSafe(|| self.commit_batch(&mut batch)))
                .unwrap_or_else(|panic| {
                    // Where it panicked is unknown: past the journal write, perhaps.
                    Err(CommitError::Journal(StorageError::msg(panic_message(
                        &panic,
                    ))))
                })
                .map_err(|error| match error {
                    CommitError::Before(detail) => detail,
                    CommitError::Journal(detail) => {
                        let poisoned = StorageError::msg(format!(
                            "the store stopped writing after a failed commit ({detail}); open it again to recover"
                        ));
                        self.poisoned = Some(poisoned);
                        detail
                    }
                }),
        };
        let committed = outcome.is_ok();
        // The first appends of the batch are over, committed or not: their ids are free again
        // (a committed log fences later first appends by its head).
        for append in &batch {
            if append.encoded.expected_seq == 0 {
                self.claims.settle(&append.encoded.execution);
            }
        }
        match outcome {
            Ok(heads) => {
                // The batch's one line at debug (README, "Logs"): the span alone prints nothing.
                tracing::debug!("group committed");
                self.feed_head.publish(self.feed_next);
                for (append, head) in batch.into_iter().zip(heads) {
                    if let Ok(head) = head {
                        self.watch.publish(&append.encoded.execution, head);
                    }
                    append.answer(head);
                }
            }
            Err(detail) => {
                tracing::error!(%detail, "group commit failed");
                for append in batch {
                    let execution = append.encoded.execution.clone();
                    append.answer(Err(AppendError::Storage {
                        execution,
                        source: detail.clone(),
                    }));
                }
            }
        }
        if self.commits != commits_before {
            // A batch of conflicts alone wrote no record: it is no commit.
            self.stats.commit_latency.record(started.elapsed());
        }
        // After the replies: the batch is durable whatever a checkpoint or a wait for the
        // applier takes.
        if committed {
            self.since_checkpoint += 1;
            self.ask_checkpoint();
            if self.pending.len() >= MAX_HELD_EVENTS {
                self.wait_for_applier();
            } else if self.queued_events >= APPLY_EVENTS
                || self.queued_bytes >= APPLY_BYTES
                || self.queue.len() >= APPLY_APPENDS
            {
                self.hand_over();
            }
        }
    }

    /// Decides every request of the batch against the heads and tails as they stand after
    /// the queue (a conflict or a refused batch takes no part), writes the accepted ones to the
    /// journal as one record made durable there, then queues them for the tables and hands
    /// their records to readers. Returns each request's outcome. The batch's changes are moved
    /// into the queue; its records are copied to `pending`.
    fn commit_batch(
        &mut self,
        batch: &mut [Append],
    ) -> Result<Vec<Result<u64, AppendError>>, CommitError> {
        let mut stored: Option<StoredState> = None;
        // Heads and tails this batch moved, ahead of `decided` until the record is durable.
        let mut staged: HashMap<&str, (u64, ExecutionTail)> = HashMap::new();
        let mut outcomes = Vec::with_capacity(batch.len());
        self.payload.clear();
        for append in batch.iter() {
            let request = &append.encoded;
            let id = request.execution.as_str();
            let decided = match staged.get(id) {
                Some((head, tail)) => Some((*head, tail.clone())),
                None => self
                    .decided
                    .get(id)
                    .map(|(head, tail, _)| (*head, tail.clone())),
            };
            let (head, mut tail) = match decided {
                Some(decided) => decided,
                None => {
                    let stored = match &mut stored {
                        Some(stored) => stored,
                        None => stored.insert(StoredState::open(self.db)?),
                    };
                    stored.head_and_tail(id)?
                }
            };
            if head != request.expected_seq {
                outcomes.push(Err(AppendError::Conflict {
                    execution: request.execution.clone(),
                    expected_seq: request.expected_seq,
                    actual_seq: head,
                }));
                continue;
            }
            if let Err(refused) = tail.apply_changes(&request.changes, request.recorded_at_ms) {
                outcomes.push(Err(
                    refused.into_append_error(&request.execution, request.expected_seq)
                ));
                continue;
            }
            let new_head = head + request.records.len() as u64;
            staged.insert(id, (new_head, tail));
            journal::push_append(
                &mut self.payload,
                id,
                request.expected_seq,
                request.recorded_at_ms,
                request.records.iter(),
            );
            outcomes.push(Ok(new_head));
        }
        if self.payload.is_empty() {
            // Nothing accepted: nothing to write.
            return Ok(outcomes);
        }
        self.queued_end = self
            .journal
            .append(&self.payload)
            .map_err(|error| CommitError::Journal(StorageError::new(error)))?;
        self.commits += 1;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        self.stats.fsync_latency.record(self.journal.last_sync());
        let accepted = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        self.stats
            .appends
            .fetch_add(accepted as u64, Ordering::Relaxed);
        for (id, (head, tail)) in staged {
            self.decided
                .insert(id.to_owned(), (head, tail, self.commits));
        }
        for (append, outcome) in batch.iter_mut().zip(&outcomes) {
            if outcome.is_err() {
                continue;
            }
            let request = &mut append.encoded;
            let records = &request.records;
            let record_count = records.len();
            self.feed_next += record_count as u64;
            self.queued_events += record_count;
            self.queued_bytes += records.byte_len();
            self.pending.push(
                request.execution.as_str(),
                request.expected_seq,
                records.iter(),
            );
            self.queue.push(Queued {
                execution: request.execution.clone(),
                expected_seq: request.expected_seq,
                record_count,
                changes: std::mem::take(&mut request.changes),
                recorded_at_ms: request.recorded_at_ms,
            });
        }
        Ok(outcomes)
    }
}

/// The heads and tails the tables hold, read by the writer for executions the queue does not
/// touch.
struct StoredState {
    heads: redb::ReadOnlyTable<&'static str, u64>,
    tails: redb::ReadOnlyTable<&'static str, &'static [u8]>,
}

impl StoredState {
    fn open(db: &Database) -> Result<Self, CommitError> {
        let txn = db.begin_read().map_err(CommitError::before)?;
        Ok(Self {
            heads: txn.open_table(HEADS).map_err(CommitError::before)?,
            tails: txn.open_table(TAILS).map_err(CommitError::before)?,
        })
    }

    fn head_and_tail(&self, id: &str) -> Result<(u64, ExecutionTail), CommitError> {
        let head = head_of(&self.heads, id).map_err(CommitError::before)?;
        let tail = tail_of(&self.tails, id).map_err(CommitError::Before)?;
        Ok((head, tail))
    }
}

/// Why a group commit failed, and whether its batch may be in the journal.
#[derive(Debug)]
enum CommitError {
    /// Before the journal was written: nothing of the batch is stored.
    Before(StorageError),
    /// Writing the journal failed: its state on disk is unknown.
    Journal(StorageError),
}

impl CommitError {
    fn before(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Before(StorageError::new(error))
    }
}

/// The tables an append writes, open in one write transaction.
struct WriteTables<'txn> {
    events: redb::Table<'txn, (&'static str, u64), &'static [u8]>,
    heads: redb::Table<'txn, &'static str, u64>,
    tails: redb::Table<'txn, &'static str, &'static [u8]>,
    by_status: redb::Table<'txn, (u8, &'static str), ()>,
    ended: redb::Table<'txn, (u64, &'static str), ()>,
    feed: redb::Table<'txn, u64, (&'static str, u64)>,
    meta: redb::Table<'txn, &'static str, u64>,
    listing: listing::ListingTables<'txn>,
    wake: wake::WakeTables<'txn>,
    /// The run being written, reused from one append to the next.
    run: Vec<u8>,
}

impl<'txn> WriteTables<'txn> {
    fn open(txn: &'txn redb::WriteTransaction) -> Result<Self, StorageError> {
        Ok(Self {
            meta: txn.open_table(META).map_err(StorageError::new)?,
            events: txn.open_table(EVENTS).map_err(StorageError::new)?,
            heads: txn.open_table(HEADS).map_err(StorageError::new)?,
            tails: txn.open_table(TAILS).map_err(StorageError::new)?,
            by_status: txn.open_table(BY_STATUS).map_err(StorageError::new)?,
            ended: txn.open_table(ENDED).map_err(StorageError::new)?,
            feed: txn.open_table(FEED).map_err(StorageError::new)?,
            listing: listing::ListingTables::open(txn)?,
            wake: wake::WakeTables::open(txn)?,
            run: Vec::new(),
        })
    }

    fn feed_next(&self) -> Result<u64, StorageError> {
        Ok(checked::read_meta(&self.meta, FEED_NEXT)?.unwrap_or(0))
    }

    /// Records the next feed position and the journal offset the tables now cover.
    fn set_position(
        &mut self,
        feed_next: u64,
        generation: u64,
        journal_end: u64,
    ) -> Result<(), StorageError> {
        checked::write_meta(&mut self.meta, FEED_NEXT, feed_next)?;
        checked::write_meta(&mut self.meta, JOURNAL_GENERATION, generation)?;
        checked::write_meta(&mut self.meta, JOURNAL_END, journal_end)
    }

    /// Applies appends the writer accepted (or the open replays from the journal), in commit
    /// order for each execution, with each execution's head and tail read and written once and
    /// its events inserted together, executions in id order: fewer B-tree operations, each near
    /// the one before. Feed rows follow commit order from `position`. An append that does not
    /// follow the tables (its seq, or its tail's checks) is an error: the writer decided it
    /// against the same heads and tails.
    fn apply_accepted<'q>(
        &mut self,
        appends: impl Iterator<Item = &'q Queued> + Clone,
        pending: &Pending,
        position: &mut u64,
    ) -> Result<(), StorageError> {
        let mut by_execution: BTreeMap<&str, Vec<&Queued>> = BTreeMap::new();
        for queued in appends.clone() {
            let id = queued.execution.as_str();
            // One row for the append's events, which take as many positions.
            if queued.record_count > 0 {
                self.feed
                    .insert(*position, (id, queued.expected_seq))
                    .map_err(StorageError::new)?;
                *position += queued.record_count as u64;
            }
            by_execution.entry(id).or_default().push(queued);
        }
        for (id, group) in by_execution {
            let mut head = head_of(&self.heads, id).map_err(StorageError::new)?;
            let old_tail = self.tail(id)?;
            let mut tail = old_tail.clone();
            for queued in group {
                if head != queued.expected_seq {
                    return Err(StorageError::msg(format!(
                        "a journaled append to execution {id} at seq {} does not follow the tables (head {head})",
                        queued.expected_seq
                    )));
                }
                let before = tail.clone();
                tail.apply_changes(&queued.changes, queued.recorded_at_ms)
                    .map_err(|refused| {
                        StorageError::msg(format!(
                            "a journaled append does not follow the tables: {}",
                            refused.into_append_error(&queued.execution, queued.expected_seq)
                        ))
                    })?;
                if queued.record_count > 0 {
                    let count = queued.record_count;
                    if !pending.encode_run(id, queued.expected_seq, count, &mut self.run) {
                        return Err(StorageError::msg(format!(
                            "the {count} records of a journaled append to execution {id} at seq {} are not held for the tables",
                            queued.expected_seq
                        )));
                    }
                    self.events
                        .insert((id, queued.expected_seq), self.run.as_slice())
                        .map_err(StorageError::new)?;
                }
                head += queued.record_count as u64;
                self.listing.refile(
                    id,
                    &before,
                    &tail,
                    &queued.changes,
                    queued.recorded_at_ms,
                    &self.events,
                    &mut self.meta,
                )?;
                self.wake.apply(&queued.execution, &queued.changes)?;
            }
            self.heads
                .insert(id, heads::encode(id, head)?)
                .map_err(StorageError::new)?;
            self.tails
                .insert(id, checked::tail_value(id, &tail).as_slice())
                .map_err(StorageError::new)?;
            // The status index and the end times are functions of the tail: from the first
            // to the last is what each step in between would have come to.
            self.refile(id, &old_tail, &tail)?;
        }
        Ok(())
    }

    fn tail(&self, id: &str) -> Result<ExecutionTail, StorageError> {
        tail_of(&self.tails, id)
    }

    /// Moves `id` in the status index from what `old` filed it under to what `new` does.
    fn refile(
        &mut self,
        id: &str,
        old: &ExecutionTail,
        new: &ExecutionTail,
    ) -> Result<(), StorageError> {
        let (old_codes, new_codes): (Vec<u8>, Vec<u8>) =
            (old.index_codes().collect(), new.index_codes().collect());
        if old_codes != new_codes {
            for code in &old_codes {
                self.by_status
                    .remove((*code, id))
                    .map_err(StorageError::new)?;
            }
            for code in &new_codes {
                self.by_status
                    .insert((*code, id), ())
                    .map_err(StorageError::new)?;
            }
        }
        if old.ended_at_ms() != new.ended_at_ms() {
            if let Some(at) = old.ended_at_ms() {
                self.ended.remove((at, id)).map_err(StorageError::new)?;
            }
            if let Some(at) = new.ended_at_ms() {
                self.ended.insert((at, id), ()).map_err(StorageError::new)?;
            }
        }
        Ok(())
    }
}

/// Deletes up to `limit` executions that ended before `ended_before_ms`, whole, in one
/// transaction. Their feed rows are left: readers skip a row whose event is gone, and, through
/// `purged`, a row older than the deletion whose (id, seq) a later log of the same id reuses.
fn delete_ended(
    db: &Database,
    journal: &Journal,
    ended_before_ms: u64,
    limit: usize,
) -> Result<Vec<ExecutionId>, StorageError> {
    // A durable commit: it also makes every journaled commit before it durable in the tables,
    // so it records the journal offset it covers.
    let txn = db.begin_write().map_err(StorageError::new)?;
    let deleted = {
        let mut tables = WriteTables::open(&txn)?;
        let mut doomed = Vec::new();
        for entry in tables
            .ended
            .range(..(ended_before_ms, ""))
            .map_err(StorageError::new)?
            .take(limit.max(1))
        {
            let (key, _) = entry.map_err(StorageError::new)?;
            let (ended_at_ms, id) = key.value();
            doomed.push((
                ended_at_ms,
                ExecutionId::from_stored(id).map_err(StorageError::new)?,
            ));
        }
        let feed_next = tables.feed_next()?;
        tables.set_position(feed_next, journal.generation(), journal.end())?;
        let mut purged = txn.open_table(PURGED).map_err(StorageError::new)?;
        for (ended_at_ms, execution) in &doomed {
            let id = execution.as_str();
            let tail = tables.tail(id)?;
            check_ended(id, *ended_at_ms, &tail)?;
            purged.insert(id, feed_next).map_err(StorageError::new)?;
            tables
                .listing
                .forget(id, &tail, &tables.events, &mut tables.meta)?;
            tables.refile(id, &tail, &ExecutionTail::new())?;
            tables.tails.remove(id).map_err(StorageError::new)?;
            tables.heads.remove(id).map_err(StorageError::new)?;
            tables
                .events
                .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)
                .map_err(StorageError::new)?;
        }
        doomed.into_iter().map(|(_, execution)| execution).collect()
    };
    txn.commit().map_err(StorageError::new)?;
    Ok(deleted)
}

/// Deleting a log is the one change nothing can undo, so the `ended` row that names it is not
/// trusted alone: the execution's tail (checked, LD-037) must say it ended at that moment. A
/// row that a damaged key moved onto another execution, or to an earlier time, then stops the
/// deletion instead of removing a log that is running or not old enough.
fn check_ended(id: &str, ended_at_ms: u64, tail: &ExecutionTail) -> Result<(), StorageError> {
    if tail.status().is_terminal() && tail.ended_at_ms() == Some(ended_at_ms) {
        return Ok(());
    }
    let found = match tail.ended_at_ms() {
        Some(at) => format!("{:?}, ended at {at} ms", tail.status()),
        None => format!("{:?}, without an end", tail.status()),
    };
    Err(StorageError::msg(format!(
        "the store file is damaged: the index of ended executions files {id} as ended at {ended_at_ms} ms, but its tail says {found}; nothing was deleted"
    )))
}

/// Records of one execution copied out of a read transaction, undecoded.
#[derive(Debug, Clone)]
struct RawPage {
    bytes: Vec<u8>,
    records: Vec<(u64, std::ops::Range<usize>)>,
}

/// One execution's whole log as the store keeps it: each event's record, not decoded. For
/// tools that look at the records themselves: `replay-check` compares every event, encoded
/// again, with the record it was read from.
#[derive(Debug, Clone)]
pub struct StoredLog {
    execution: ExecutionId,
    page: RawPage,
}

impl StoredLog {
    /// The execution this tail describes.
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution
    }

    /// How many events the log holds.
    pub fn len(&self) -> usize {
        self.page.records.len()
    }

    /// Whether the execution has no event.
    pub fn is_empty(&self) -> bool {
        self.page.records.is_empty()
    }

    /// The record of the event at `index` (its seq, in a log read whole), in the record form
    /// of [`crate::record`].
    pub fn record(&self, index: usize) -> Option<&[u8]> {
        let (_, range) = self.page.records.get(index)?;
        self.page.bytes.get(range.clone())
    }

    /// The events.
    pub fn decode(&self) -> Result<Vec<EventEnvelope>, ReadError> {
        self.page.decode(&self.execution)
    }
}

impl RawPage {
    /// `execution`'s records from `from` on (at most `limit`): the tables', then those held
    /// in `pending` past them.
    fn fetch(
        db: &Db,
        pending: &Pending,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Self, ReadError> {
        let mut stale = None;
        for _ in 0..READ_ATTEMPTS {
            // Copied before the tables are read: an apply in between moves nothing out of sight.
            let held = pending.copy(execution.as_str(), from, limit);
            let txn = db.begin_read().map_err(ReadError::storage)?;
            let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
            let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
            let head = head_of(&heads, execution.as_str()).map_err(ReadError::storage)?;
            let mut page = Self::fetch_from(&events, execution, from, limit, head)?;
            match held.map(|held| page.extend_held(execution, held, from, limit)) {
                Some(Err(gap)) => stale = Some(gap),
                None | Some(Ok(())) => return Ok(page),
            }
        }
        Err(stale.unwrap_or_else(|| ReadError::storage(StorageError::msg("no read"))))
    }

    /// Whether the tables hold no event of `execution` at or past `from` (the caller found
    /// none held, and looks here after). Two lookups in pages every commit touches and redb's
    /// cache keeps: the head, and the first stored seq from `from` on (a stray one, past a
    /// damaged head, is reported as damage).
    fn nothing_from(
        shared: &Shared,
        execution: &ExecutionId,
        from: u64,
    ) -> Result<bool, ReadError> {
        on_callers_thread(|| {
            let tables = last_commit_tables(shared)?;
            let head = head_of(&tables.heads, execution.as_str()).map_err(ReadError::storage)?;
            if head > from {
                return Ok(false);
            }
            Self::fetch_from(&tables.events, execution, from, 0, head)?;
            Ok(true)
        })
    }

    /// A page of records held in memory only, seqs `held.first_seq..`.
    fn held(held: PendingRecords) -> Self {
        let mut records = Vec::with_capacity(held.len());
        let mut start = 0;
        for (seq, record) in held.records() {
            records.push((seq, start..start + record.len()));
            start += record.len();
        }
        RawPage {
            bytes: held.into_bytes(),
            records,
        }
    }

    /// Adds the held records that follow this page (read from `from`), up to `limit` in all.
    /// Held records the page already has were applied between the two reads.
    fn extend_held(
        &mut self,
        execution: &ExecutionId,
        held: PendingRecords,
        from: u64,
        limit: usize,
    ) -> Result<(), ReadError> {
        let mut due = from + self.records.len() as u64;
        for (seq, record) in held.records() {
            if self.records.len() >= limit {
                break;
            }
            if seq < due {
                continue;
            }
            if seq > due {
                // Held records begin where the tables end, unless the log was applied and then
                // deleted (retention) between the two reads: the caller reads again; a gap
                // that stays means the tables and the memory disagree.
                return Err(ReadError::Storage {
                    source: StorageError::msg(format!(
                        "execution {execution}: the tables end at seq {due} but the events held for them begin at {seq}"
                    )),
                });
            }
            let start = self.bytes.len();
            self.bytes.extend_from_slice(record);
            self.records.push((seq, start..self.bytes.len()));
            due += 1;
        }
        Ok(())
    }

    fn fetch_from(
        events: &redb::ReadOnlyTable<(&'static str, u64), &'static [u8]>,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
        head: u64,
    ) -> Result<Self, ReadError> {
        // Every seq from `from` up to the head (or `limit` of them) is read, each where it
        // belongs: a key damaged at rest shows as a missing or misplaced seq (or a run that
        // does not match its key), and is reported instead of shortening the log.
        let wanted = usize::try_from(head.saturating_sub(from))
            .unwrap_or(usize::MAX)
            .min(limit);
        let id = execution.as_str();
        let first_row = row_holding(events, id, from)?;
        let range = events
            .range((id, first_row)..=(id, u64::MAX))
            .map_err(ReadError::storage)?;
        let mut page = RawPage {
            bytes: Vec::new(),
            records: Vec::with_capacity(wanted.min(super::STREAM_PAGE)),
        };
        // One past the wanted ones: a stray seq past the head is reported too.
        let to_the_head = head.saturating_sub(from) == wanted as u64;
        'rows: for entry in range {
            if page.records.len() == wanted && !to_the_head {
                break;
            }
            let (key, value) = entry.map_err(ReadError::storage)?;
            let row_seq = key.value().1;
            let records = runs::split(id, row_seq, value.value()).map_err(damaged_run)?;
            if page.bytes.is_empty() {
                // Sized from the first row, rather than doubled through many reallocations.
                let per_record = value.value().len() / records.record_count().max(1);
                page.bytes
                    .reserve(per_record.saturating_mul(wanted).min(1 << 20));
            }
            for (seq, record) in (row_seq..).zip(records) {
                if seq < from {
                    continue;
                }
                if page.records.len() == wanted {
                    if to_the_head {
                        return Err(damaged_log(execution, seq, head));
                    }
                    break 'rows;
                }
                let due = from + page.records.len() as u64;
                if seq != due || seq >= head {
                    return Err(damaged_log(execution, due, head));
                }
                let start = page.bytes.len();
                page.bytes.extend_from_slice(record);
                page.records.push((seq, start..page.bytes.len()));
            }
        }
        if page.records.len() != wanted {
            return Err(damaged_log(
                execution,
                from + page.records.len() as u64,
                head,
            ));
        }
        Ok(page)
    }

    fn decode(&self, execution: &ExecutionId) -> Result<Vec<EventEnvelope>, ReadError> {
        // Sized once: collecting `Result`s would grow the vector by doubling, copying every
        // envelope several times.
        let mut events = Vec::with_capacity(self.records.len());
        for (seq, range) in &self.records {
            let bytes = self.bytes.get(range.clone()).unwrap_or_default();
            events.push(decode_stored(execution, *seq, bytes)?);
        }
        Ok(events)
    }
}

/// `id`'s tail in `tails`; a new one for a log the tables do not hold.
fn tail_of(
    tails: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> Result<ExecutionTail, StorageError> {
    match tails.get(id).map_err(StorageError::new)? {
        None => Ok(ExecutionTail::new()),
        Some(value) => checked::tail(id, value.value()),
    }
}

/// The head of `id`'s log in `heads` (its length), 0 for a log the tables do not hold; an
/// error when the stored value does not belong to `id` (`disk/heads.rs`).
fn head_of(heads: &impl ReadableTable<&'static str, u64>, id: &str) -> Result<u64, StorageError> {
    match heads.get(id).map_err(StorageError::new)? {
        Some(value) => heads::decode(id, value.value()),
        None => Ok(0),
    }
}

/// How many times a log is read when the events held for it do not follow the tables (they
/// were copied just before an apply and a deletion of that log).
const READ_ATTEMPTS: usize = 3;

/// The seq of the row of `id` that holds `seq`, or would: a row holds an append's events, so
/// it may begin before `seq`. One lookup, only when `seq` is past the log's first row.
fn row_holding(
    events: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    id: &str,
    seq: u64,
) -> Result<u64, ReadError> {
    if seq == 0 {
        return Ok(0);
    }
    let before = events
        .range((id, 0)..=(id, seq))
        .map_err(ReadError::storage)?
        .next_back()
        .transpose()
        .map_err(ReadError::storage)?;
    Ok(before.map_or(seq, |(key, _)| key.value().1))
}

/// A row that does not split into records: the file is damaged.
fn damaged_run(damaged: runs::DamagedRun) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(format!("the store file is damaged: {damaged}")),
    }
}

/// A feed row that does not fit the feed or the logs: the file is damaged.
fn damaged_feed(position: u64, why: &str) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(format!(
            "the store file is damaged: the feed row at position {position} does not fit ({why})"
        )),
    }
}

/// A log whose stored events do not run gapless up to its head: the file is damaged.
fn damaged_log(execution: &ExecutionId, seq: u64, head: u64) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(format!(
            "the store file is damaged: the events of execution {execution} do not run gapless up to its head {head} (at seq {seq})"
        )),
    }
}

fn read_head(shared: &Shared, execution: &ExecutionId) -> Result<u64, ReadError> {
    // The held head first: it is past the tables' whenever there is one. Then the tables, as
    // looked at after it (`snapshot.rs`).
    if let Some(head) = shared.pending.head(execution.as_str()) {
        return Ok(head);
    }
    on_callers_thread(|| {
        let tables = last_commit_tables(shared)?;
        head_of(&tables.heads, execution.as_str()).map_err(ReadError::storage)
    })
}

/// Runs a lookup in the tables on the caller's thread. redb may panic on a damaged page that
/// it was not asked to verify (`verify_on_open` off): that is reported as a damaged file, as a
/// read on the blocking pool reports it, instead of unwinding into the caller's task.
fn on_callers_thread<T>(lookup: impl FnOnce() -> Result<T, ReadError>) -> Result<T, ReadError> {
    catch_unwind(AssertUnwindSafe(lookup)).unwrap_or_else(|panic| {
        Err(ReadError::Storage {
            source: StorageError::msg(panic_message(&panic)),
        })
    })
}

/// `heads` and `events` for a new execution's lookups: the last commit's snapshot, or, where
/// none is kept (a store opened read-only, a snapshot that could not be taken), a read
/// transaction begun now.
fn last_commit_tables(shared: &Shared) -> Result<Arc<snapshot::Tables>, ReadError> {
    if let Some(tables) = shared.last_commit.current() {
        return Ok(tables);
    }
    let txn = shared.db.begin_read().map_err(ReadError::storage)?;
    let tables = snapshot::Tables::of(&txn).map_err(ReadError::storage)?;
    Ok(Arc::new(tables))
}

impl EventStore for DiskStore {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        self.append_as(execution, expected_seq, events, None).await
    }

    async fn claim_new(&self, execution: &ExecutionId) -> Result<Option<NewClaim>, ReadError> {
        if !matches!(*self.shared.db, Db::Write(_)) {
            return Ok(None);
        }
        let Some(token) = self.shared.claims.try_claim(execution) else {
            return Ok(None);
        };
        let claim = NewClaim::new(execution.clone(), token, {
            let store = self.clone();
            let id = execution.clone();
            move || {
                if store.shared.claims.release(&id, token) {
                    // A first append of the id by someone else may be waiting for this claim.
                    let _ = store.send(WriteRequest::ClaimReleased);
                }
            }
        });
        // Read once the id is held: a first append the writer admitted before is committed
        // (or failed) by the time the claim is granted, and none is admitted after. Read here,
        // not on the blocking pool: one lookup in `heads`, whose pages every commit touches
        // and redb's cache keeps; a trip to the pool per new execution cost more (threads
        // woken and started, `docs/PERFORMANCE.md`).
        if read_head(&self.shared, execution)? > 0 {
            return Ok(None);
        }
        Ok(Some(claim))
    }

    async fn append_claimed(&self, claim: &NewClaim, events: &[Event]) -> Result<u64, AppendError> {
        self.append_as(claim.execution(), 0, events, Some(claim.token()))
            .await
    }

    async fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        // The blocking thread only copies the raw records out; decoding happens here, on the
        // caller's thread, where the envelopes will also be used and freed. Handing thousands of
        // small allocations from one thread to another costs more than decoding them.
        match self.shared.pending.copy(execution.as_str(), from, limit) {
            // Every record asked for is held in memory (the tables end at or before `from`):
            // no trip to the blocking pool.
            Some(held) if held.first_seq == from => return RawPage::held(held).decode(execution),
            // Held records past the tables: the tables have the first ones.
            Some(_) => {}
            // Nothing held: nothing at or past `from` in the tables either (a new execution's
            // first read, a tail read that is up to date) is answered here, as `claim_new`'s
            // lookup is, without a trip to the blocking pool.
            None => {
                if RawPage::nothing_from(&self.shared, execution, from)? {
                    return Ok(Vec::new());
                }
            }
        }
        let raw = {
            let execution = execution.clone();
            let pending = Arc::clone(&self.shared.pending);
            self.blocking_read(move |db| RawPage::fetch(db, &pending, &execution, from, limit))
                .await?
        };
        raw.decode(execution)
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        // One lookup in `heads`, whose pages every commit touches and redb's cache keeps:
        // answered here, as a new execution's first read is, without a trip to the blocking
        // pool (`Runtime::wait` asks it of every execution that just ended).
        read_head(&self.shared, execution)
    }

    async fn read_logs(
        &self,
        executions: &[ExecutionId],
    ) -> Result<Vec<Vec<EventEnvelope>>, ReadError> {
        // Decoding happens here, on the caller's thread.
        self.read_stored_logs(executions)
            .await?
            .iter()
            .map(StoredLog::decode)
            .collect()
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.settled().await?;
        use std::ops::Bound;
        let after = after.cloned();
        self.blocking_read(move |db| {
            let txn = db.begin_read().map_err(ReadError::storage)?;
            let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
            let lower = after
                .as_ref()
                .map_or(Bound::Unbounded, |id| Bound::Excluded(id.as_str()));
            let limit = limit.max(1);
            let mut executions = Vec::new();
            for entry in heads
                .range::<&str>((lower, Bound::Unbounded))
                .map_err(ReadError::storage)?
                .take(limit + 1)
            {
                let (id, head) = entry.map_err(ReadError::storage)?;
                let head = heads::decode(id.value(), head.value()).map_err(ReadError::storage)?;
                let id = ExecutionId::from_stored(id.value()).map_err(ReadError::storage)?;
                executions.push(ExecutionSummary { id, head });
            }
            Ok(ExecutionPage::from_one_extra(executions, limit))
        })
        .await
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        self.shared
            .watch
            .wait_for(execution, seq, self.head(execution))
            .await
    }

    async fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.settled().await?;
        use std::ops::Bound;
        let asked_after = after;
        let after = after.cloned();
        let code = filter_code(filter);
        let page = self.blocking_read(move |db| {
            let txn = db.begin_read().map_err(ReadError::storage)?;
            if filter == StatusFilter::StepsInDoubt && !in_doubt::is_built(&txn)? {
                return Ok(None);
            }
            let by_status = txn.open_table(BY_STATUS).map_err(ReadError::storage)?;
            let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
            let tails = txn.open_table(TAILS).map_err(ReadError::storage)?;
            let lower = after.as_ref().map_or(Bound::Included((code, "")), |id| {
                Bound::Excluded((code, id.as_str()))
            });
            let limit = limit.max(1);
            let mut executions = Vec::new();
            for entry in by_status
                .range::<(u8, &str)>((lower, Bound::Excluded((code + 1, ""))))
                .map_err(ReadError::storage)?
                .take(limit + 1)
            {
                let (key, _) = entry.map_err(ReadError::storage)?;
                let id = key.value().1;
                let head = head_of(&heads, id).map_err(ReadError::storage)?;
                if head == 0 {
                    // Every filed execution has events (a deletion unfiles it in the same
                    // commit): an id without is a damaged key, not an execution to list.
                    return Err(ReadError::Storage {
                        source: StorageError::msg(format!(
                            "the store file is damaged: the status index files execution {id}, which has no log"
                        )),
                    });
                }
                // A damaged key may still name an execution that is there, under a status it
                // does not have: its tail (checked) says where it belongs.
                let tail = tail_of(&tails, id).map_err(ReadError::storage)?;
                if !tail.index_codes().any(|filed| filed == code) {
                    return Err(ReadError::Storage {
                        source: StorageError::msg(format!(
                            "the store file is damaged: the status index files execution {id} under code {code}, but its tail says {:?}",
                            tail.status()
                        )),
                    });
                }
                executions.push(ExecutionSummary {
                    id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
                    head,
                });
            }
            // A whole status in one page is checked against its count: a damaged page of the
            // index (its header) may hide entries.
            if after.is_none()
                && executions.len() <= limit
                && let StatusFilter::Status(status) = filter
                && let Some(count) = listing::count_of(&txn, status)?
                && count != executions.len() as u64
            {
                return Err(ReadError::Storage {
                    source: StorageError::msg(format!(
                        "the store file is damaged: the status index files {} executions as {status:?}, its count says {count}",
                        executions.len()
                    )),
                });
            }
            Ok(Some(ExecutionPage::from_one_extra(executions, limit)))
        })
        .await?;
        match page {
            Some(page) => Ok(page),
            // A file of an older build, opened read-only: its index may lack an execution
            // that ended with a step in doubt.
            None => super::list_by_fold(self, filter, asked_after, limit).await,
        }
    }

    async fn query_executions(
        &self,
        query: &ExecutionQuery,
    ) -> Result<ExecutionQueryPage, ReadError> {
        self.settled().await?;
        let asked = query.clone();
        let page = self
            .blocking_read(move |db| {
                let txn = db.begin_read().map_err(ReadError::storage)?;
                if !listing::is_built(&txn)? {
                    return Ok(None);
                }
                listing::query(&txn, &asked).map(Some)
            })
            .await?;
        match page {
            Some(page) => Ok(page),
            // A file of an older build, opened read-only: no index to answer from.
            None => Ok(query.select(super::every_listed_execution(self).await?)),
        }
    }

    async fn count_by_status(&self) -> Result<StatusCounts, ReadError> {
        self.settled().await?;
        let counts = self
            .blocking_read(move |db| {
                let txn = db.begin_read().map_err(ReadError::storage)?;
                if !listing::is_built(&txn)? {
                    return Ok(None);
                }
                listing::counts(&txn).map(Some)
            })
            .await?;
        match counts {
            Some(counts) => Ok(counts),
            None => Ok(StatusCounts::of(
                &super::every_listed_execution(self).await?,
            )),
        }
    }

    async fn list_wakeups(
        &self,
        before_ms: u64,
        after: Option<&super::Wakeup>,
        limit: usize,
    ) -> Result<Vec<super::Wakeup>, ReadError> {
        self.settled().await?;
        let after_row = after.cloned();
        let indexed = self
            .blocking_read(move |db| {
                let txn = db.begin_read().map_err(ReadError::storage)?;
                wake::list(&txn, before_ms, after_row.as_ref(), limit)
            })
            .await?;
        match indexed {
            Some(rows) => Ok(rows),
            None => super::scan_wakeups(self, before_ms, after, limit).await,
        }
    }

    fn indexes_wakeups(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<StoreStats> {
        Some(DiskStore::stats(self))
    }

    async fn read_feed(&self, from: u64, limit: usize) -> Result<Vec<FeedEvent>, ReadError> {
        self.settled().await?;
        let raw = self
            .blocking_read(move |db| {
                let txn = db.begin_read().map_err(ReadError::storage)?;
                let feed = txn.open_table(FEED).map_err(ReadError::storage)?;
                let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
                let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
                let purges_recorded = checked::read_meta(
                    &txn.open_table(META).map_err(ReadError::storage)?,
                    PURGES_RECORDED,
                )
                .map_err(ReadError::storage)?
                .is_some();
                // A file opened read-only from before `purged` existed has deleted nothing
                // since; an empty table costs no lookup per row.
                let purged = match txn.open_table(PURGED) {
                    Ok(table) if !table.is_empty().map_err(ReadError::storage)? => Some(table),
                    Ok(_) | Err(redb::TableError::TableDoesNotExist(_)) => None,
                    Err(error) => return Err(ReadError::storage(error)),
                };
                let limit = limit.max(1);
                let mut found = Vec::new();
                // A feed row covers its events row's events: the one holding `from` may begin
                // before it.
                let first_row = feed
                    .range(..=from)
                    .map_err(ReadError::storage)?
                    .next_back()
                    .transpose()
                    .map_err(ReadError::storage)?
                    .map_or(from, |(position, _)| position.value());
                // Rows of deleted executions are skipped and do not count towards `limit`:
                // a page is empty only at the end of the feed.
                // Positions run gapless, each row from where the one before ends: a damaged
                // row (its position, or a value naming other events) breaks that, or names
                // events a log that is there does not have, and is reported.
                let mut ends_at: Option<u64> = None;
                'rows: for entry in feed.range(first_row..).map_err(ReadError::storage)? {
                    let (position, row) = entry.map_err(ReadError::storage)?;
                    let position = position.value();
                    let (id, first_seq) = row.value();
                    if let Some(end) = ends_at.take()
                        && end != position
                    {
                        return Err(damaged_feed(
                            position,
                            &format!("the row before it ends at {end}"),
                        ));
                    }
                    if let Some(purged) = &purged
                        && let Some(deleted_at) = purged.get(id).map_err(ReadError::storage)?
                        && position < deleted_at.value()
                    {
                        // A row of a deleted log, whose (id, seq) a later log of that id reuses.
                        continue;
                    }
                    let Some(value) = events.get((id, first_seq)).map_err(ReadError::storage)?
                    else {
                        // Its log was deleted (and no other began under its id), unless the
                        // log is there and reaches that seq, or is there at all in a file that
                        // records every deletion (the rows of a deleted log were skipped above).
                        let head = head_of(&heads, id).map_err(ReadError::storage)?;
                        if head > first_seq || (purges_recorded && head > 0) {
                            return Err(damaged_feed(
                                position,
                                &format!("execution {id} has no events row at seq {first_seq}"),
                            ));
                        }
                        continue;
                    };
                    let records = runs::split(id, first_seq, value.value()).map_err(damaged_run)?;
                    ends_at = Some(position + records.record_count() as u64);
                    for (offset, record) in (0u64..).zip(records) {
                        let at = position + offset;
                        if at < from {
                            continue;
                        }
                        found.push((at, id.to_owned(), first_seq + offset, record.to_vec()));
                        if found.len() == limit {
                            break 'rows;
                        }
                    }
                }
                Ok(found)
            })
            .await?;
        raw.into_iter()
            .map(|(position, id, seq, record)| {
                let execution = ExecutionId::from_stored(&id).map_err(ReadError::storage)?;
                let envelope = decode_stored(&execution, seq, &record)?;
                Ok(FeedEvent { position, envelope })
            })
            .collect()
    }

    async fn wait_for_feed(&self, position: u64) -> Result<(), ReadError> {
        self.shared.feed_head.wait_past(position).await
    }

    async fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<ExecutionId>, RetentionError> {
        let (reply, answer) = oneshot::channel();
        self.send(WriteRequest::Delete(DeleteRequest {
            ended_before_ms,
            limit,
            reply,
        }))
        .map_err(|_| RetentionError::Closed)?;
        answer.await.map_err(|_| RetentionError::Closed)?
    }
}
