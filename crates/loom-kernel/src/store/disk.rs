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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, TableDefinition};
use tokio::sync::oneshot;

mod apply;
mod checked;
mod checkpoint;
mod config;
mod heads;
mod in_doubt;
mod listing;
mod open;
mod open_error;
mod overlay;
mod pending;
mod read_only;
mod reads;
mod retention;
mod runs;
mod salvage;
mod scrub;
mod snapshot;
mod tables;
mod wake;
mod writer;
use apply::Applied;
pub use config::DiskStoreConfig;
use open::{check_not_empty, open_database};
pub use open_error::OpenError;
use pending::Pending;
pub use reads::StoredLog;
use reads::{RawPage, read_head};
pub use salvage::{SalvageError, Salvaged};
pub use scrub::ScrubStatus;
use snapshot::LastCommit;
use writer::{Append, DeleteRequest, WriteRequest, Writer};

use super::claim::{ClaimTable, NewClaim};
use super::journal;
#[cfg(doc)]
use super::tail::ExecutionTail;
use super::watch::{FeedWatch, HeadWatch};
use super::{
    AppendError, EncodedAppend, EventStore, ExecutionPage, ExecutionQuery, ExecutionQueryPage,
    FeedEvent, LatencyRecorder, ReadError, RetentionError, StatusCounts, StatusFilter, StoreStats,
    decode_stored,
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
        let after = after.cloned();
        self.blocking_read(move |db| reads::list_heads(db, after, limit))
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
        let asked_after = after;
        let after = after.cloned();
        let page = self
            .blocking_read(move |db| reads::list_status(db, filter, after, limit))
            .await?;
        match page {
            Some(page) => Ok(page),
            // A file of an older build, opened read-only: its index may lack an execution
            // that ended with a step in doubt.
            None => super::ext::list_by_fold(self, filter, asked_after, limit).await,
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
            .blocking_read(move |db| reads::feed_rows(db, from, limit))
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
