//! The embedded disk store, on redb, with group commit.
//!
//! # Layout
//! - `events`: `(execution id, seq) -> record` (the record form of [`crate::envelope`]).
//! - `heads`: `execution id -> next seq`, read to fence appends and to list executions.
//! - `meta`: `"format" -> STORE_FORMAT`, so a file from an incompatible build is refused.
//!
//! # Group commit
//! One writer thread owns every write transaction. Callers encode their events on their own
//! task, send the bytes to the writer and wait. The writer takes every request queued at that
//! moment (up to [`DiskStoreConfig::max_batch_events`]), checks each one's expected seq against
//! the heads (including heads moved earlier in the same batch), inserts the ones that pass, and
//! commits once: one fsync for the whole batch. Replies go out only after the commit returned,
//! so `append` returning `Ok` means the events are on disk. A conflicting request is answered
//! with [`AppendError::Conflict`] and takes no part in the batch; a failed commit fails every
//! request of the batch and none of its events is visible.
//!
//! # Crash safety
//! redb commits are atomic and durable (`Durability::Immediate`: the commit fsyncs before it
//! returns). After a `kill -9`, opening the file again recovers the last committed
//! transaction, so every batch is there in whole or not at all. See `docs/STORAGE.md`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use super::watch::{HeadWatch, WaitError};
use super::{AppendError, EventStore, ExecutionPage, ExecutionSummary, ReadError, wall_clock_ms};
use crate::envelope::{EventEnvelope, decode_record, encode_record};
use crate::event::Event;
use crate::id::ExecutionId;

const EVENTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("events");
const HEADS: TableDefinition<&str, u64> = TableDefinition::new("heads");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The layout version of the file. A file with another one is refused on open.
pub const STORE_FORMAT: u64 = 1;

/// Settings of a [`DiskStore`].
#[derive(Debug, Clone)]
pub struct DiskStoreConfig {
    /// Memory redb may use to cache pages. It bounds the store's share of the process's
    /// memory whatever the size of the file.
    pub cache_size_bytes: usize,
    /// The most events one group commit takes. Larger batches amortise the fsync further but
    /// make the first caller in a batch wait for more inserts.
    pub max_batch_events: usize,
    /// Verify every page's checksum when opening, so that a damaged file is refused at open
    /// instead of failing (or worse) on a later read. Costs a read of the whole file.
    pub verify_on_open: bool,
}

impl Default for DiskStoreConfig {
    fn default() -> Self {
        Self {
            cache_size_bytes: 64 * 1024 * 1024,
            max_batch_events: 8192,
            verify_on_open: true,
        }
    }
}

/// Why a store file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("cannot open store file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store file {path} is open in another process or store")]
    AlreadyOpen { path: PathBuf },
    #[error("store file {path} is damaged or not a Loom store: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "store file {path} has layout version {found}; this build reads version {STORE_FORMAT}"
    )]
    UnsupportedFormat { path: PathBuf, found: u64 },
    #[error("cannot start the store's writer thread: {0}")]
    Writer(#[source] std::io::Error),
}

/// Event logs in one redb file. Cheap to clone; clones share the file and the writer.
#[derive(Debug, Clone)]
pub struct DiskStore {
    shared: Arc<Shared>,
}

struct Shared {
    db: Arc<Database>,
    path: PathBuf,
    requests: Mutex<Option<mpsc::Sender<WriteRequest>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    watch: Arc<HeadWatch>,
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
    }
}

struct WriteRequest {
    execution: ExecutionId,
    expected_seq: u64,
    records: Vec<Vec<u8>>,
    reply: oneshot::Sender<Result<u64, AppendError>>,
}

impl DiskStore {
    /// Opens the store at `path`, creating it if the file does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, DiskStoreConfig::default())
    }

    pub fn open_with(path: impl AsRef<Path>, config: DiskStoreConfig) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let db = Arc::new(open_database(&path, &config)?);
        let watch = Arc::new(HeadWatch::default());
        let (sender, receiver) = mpsc::channel();
        let writer = {
            let db = Arc::clone(&db);
            let watch = Arc::clone(&watch);
            let max_batch_events = config.max_batch_events.max(1);
            std::thread::Builder::new()
                .name("loom-store-writer".into())
                .spawn(move || write_loop(&db, &receiver, &watch, max_batch_events))
                .map_err(OpenError::Writer)?
        };
        tracing::debug!(path = %path.display(), "disk store opened");
        Ok(Self {
            shared: Arc::new(Shared {
                db,
                path,
                requests: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(writer)),
                watch,
            }),
        })
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The whole logs of several executions as stored, not decoded (an unknown one is
    /// empty), in the order asked: one read transaction and one trip to the blocking pool for
    /// the whole batch.
    pub async fn read_stored_logs(
        &self,
        executions: &[ExecutionId],
    ) -> Result<Vec<StoredLog>, ReadError> {
        let ids = executions.to_vec();
        self.blocking_read(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let events = txn.open_table(EVENTS).map_err(storage)?;
            let heads = txn.open_table(HEADS).map_err(storage)?;
            ids.into_iter()
                .map(|execution| {
                    // The head is the length of the log: the index is sized once. Every record
                    // is read all the same, whatever the head says.
                    let len = heads
                        .get(execution.as_str())
                        .map_err(storage)?
                        .map_or(0, |head| head.value());
                    let expected = usize::try_from(len).ok();
                    let page = RawPage::fetch_from(&events, &execution, 0, usize::MAX, expected)?;
                    Ok(StoredLog { execution, page })
                })
                .collect()
        })
        .await
    }

    async fn blocking_read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Database) -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let db = Arc::clone(&self.shared.db);
        tokio::task::spawn_blocking(move || read(&db))
            .await
            .map_err(|err| ReadError::Storage {
                detail: format!("read task failed: {err}"),
            })?
    }
}

fn open_database(path: &Path, config: &DiskStoreConfig) -> Result<Database, OpenError> {
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let mut builder = Database::builder();
    builder
        .set_cache_size(config.cache_size_bytes)
        .set_check_integrity_on_open(config.verify_on_open);
    // redb documents that a plain open of an altered file may panic; a damaged file must be an
    // error, never a crash of the embedding process.
    let opened = catch_unwind(AssertUnwindSafe(|| builder.create(path)))
        .map_err(|panic| corrupt(panic_message(&panic)))?;
    let db = opened.map_err(|err| match err {
        redb::DatabaseError::DatabaseAlreadyOpen => OpenError::AlreadyOpen {
            path: path.to_path_buf(),
        },
        redb::DatabaseError::Storage(redb::StorageError::Io(source))
            if source.kind() == std::io::ErrorKind::InvalidData =>
        {
            corrupt(source.to_string())
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(source)) => OpenError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => corrupt(other.to_string()),
    })?;
    let format = catch_unwind(AssertUnwindSafe(|| init_tables(&db)))
        .map_err(|panic| corrupt(panic_message(&panic)))?
        .map_err(corrupt)?;
    if format != STORE_FORMAT {
        return Err(OpenError::UnsupportedFormat {
            path: path.to_path_buf(),
            found: format,
        });
    }
    Ok(db)
}

/// Creates the tables of a new file and returns the file's layout version.
fn init_tables(db: &Database) -> Result<u64, String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    let format = {
        txn.open_table(EVENTS).map_err(|e| e.to_string())?;
        txn.open_table(HEADS).map_err(|e| e.to_string())?;
        let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
        let existing = meta
            .get("format")
            .map_err(|e| e.to_string())?
            .map(|v| v.value());
        match existing {
            Some(format) => format,
            None => {
                meta.insert("format", STORE_FORMAT)
                    .map_err(|e| e.to_string())?;
                STORE_FORMAT
            }
        }
    };
    txn.commit().map_err(|e| e.to_string())?;
    Ok(format)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    format!("the storage engine failed on this file: {message}")
}

fn write_loop(
    db: &Database,
    requests: &mpsc::Receiver<WriteRequest>,
    watch: &HeadWatch,
    max_batch_events: usize,
) {
    while let Ok(first) = requests.recv() {
        let mut events = first.records.len();
        let mut batch = vec![first];
        while events < max_batch_events {
            match requests.try_recv() {
                Ok(request) => {
                    events += request.records.len();
                    batch.push(request);
                }
                Err(_) => break,
            }
        }
        let _span = tracing::debug_span!("group_commit", requests = batch.len(), events).entered();
        let outcome = catch_unwind(AssertUnwindSafe(|| commit_batch(db, &batch)))
            .unwrap_or_else(|panic| Err(panic_message(&panic)));
        match outcome {
            Ok(heads) => {
                for (request, head) in batch.into_iter().zip(heads) {
                    if let Ok(head) = head {
                        watch.publish(&request.execution, head);
                    }
                    let _ = request.reply.send(head);
                }
            }
            Err(detail) => {
                tracing::error!(%detail, "group commit failed");
                for request in batch {
                    let _ = request.reply.send(Err(AppendError::Storage {
                        execution: request.execution,
                        detail: detail.clone(),
                    }));
                }
            }
        }
    }
}

/// Writes every non-conflicting request of the batch in one durable transaction.
fn commit_batch(
    db: &Database,
    batch: &[WriteRequest],
) -> Result<Vec<Result<u64, AppendError>>, String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    let outcomes = {
        let mut events = txn.open_table(EVENTS).map_err(|e| e.to_string())?;
        let mut heads = txn.open_table(HEADS).map_err(|e| e.to_string())?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for request in batch {
            let id = request.execution.as_str();
            let actual_seq = heads
                .get(id)
                .map_err(|e| e.to_string())?
                .map_or(0, |v| v.value());
            if actual_seq != request.expected_seq {
                outcomes.push(Err(AppendError::Conflict {
                    execution: request.execution.clone(),
                    expected_seq: request.expected_seq,
                    actual_seq,
                }));
                continue;
            }
            for (seq, record) in (request.expected_seq..).zip(&request.records) {
                events
                    .insert((id, seq), record.as_slice())
                    .map_err(|e| e.to_string())?;
            }
            let head = request.expected_seq + request.records.len() as u64;
            heads.insert(id, head).map_err(|e| e.to_string())?;
            outcomes.push(Ok(head));
        }
        outcomes
    };
    txn.commit().map_err(|e| e.to_string())?;
    Ok(outcomes)
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
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution
    }

    /// How many events the log holds.
    pub fn len(&self) -> usize {
        self.page.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.page.records.is_empty()
    }

    /// The record of the event at `index` (its seq, in a log read whole), in the record form
    /// of [`crate::envelope`].
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
    fn fetch(
        db: &Database,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Self, ReadError> {
        let txn = db.begin_read().map_err(storage)?;
        let events = txn.open_table(EVENTS).map_err(storage)?;
        Self::fetch_from(&events, execution, from, limit, None)
    }

    fn fetch_from(
        events: &redb::ReadOnlyTable<(&'static str, u64), &'static [u8]>,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
        expected: Option<usize>,
    ) -> Result<Self, ReadError> {
        let id = execution.as_str();
        let range = events.range((id, from)..=(id, u64::MAX)).map_err(storage)?;
        let mut page = RawPage {
            bytes: Vec::new(),
            records: Vec::with_capacity(expected.unwrap_or(limit).min(super::STREAM_PAGE)),
        };
        for entry in range.take(limit) {
            let (key, value) = entry.map_err(storage)?;
            if let Some(expected) = expected
                && page.bytes.is_empty()
            {
                // Sized from the first record, rather than doubled through many reallocations.
                let estimate = value.value().len().saturating_mul(expected);
                page.bytes.reserve(estimate.min(1 << 20));
            }
            let start = page.bytes.len();
            page.bytes.extend_from_slice(value.value());
            page.records.push((key.value().1, start..page.bytes.len()));
        }
        Ok(page)
    }

    fn decode(&self, execution: &ExecutionId) -> Result<Vec<EventEnvelope>, ReadError> {
        // Sized once: collecting `Result`s would grow the vector by doubling, copying every
        // envelope several times.
        let mut events = Vec::with_capacity(self.records.len());
        for (seq, range) in &self.records {
            let bytes = self.bytes.get(range.clone()).unwrap_or_default();
            let event =
                decode_record(execution, *seq, bytes).map_err(|source| ReadError::Decode {
                    execution: execution.clone(),
                    seq: *seq,
                    source,
                })?;
            events.push(event);
        }
        Ok(events)
    }
}

fn storage(err: impl std::fmt::Display) -> ReadError {
    ReadError::Storage {
        detail: err.to_string(),
    }
}

fn read_head(db: &Database, execution: &ExecutionId) -> Result<u64, ReadError> {
    let txn = db.begin_read().map_err(storage)?;
    let heads = txn.open_table(HEADS).map_err(storage)?;
    Ok(heads
        .get(execution.as_str())
        .map_err(storage)?
        .map_or(0, |v| v.value()))
}

impl EventStore for DiskStore {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        if events.is_empty() {
            return Err(AppendError::EmptyBatch {
                execution: execution.clone(),
            });
        }
        let recorded_at_ms = wall_clock_ms();
        let records = events
            .iter()
            .map(|event| encode_record(event, recorded_at_ms))
            .collect();
        let (reply, answer) = oneshot::channel();
        let request = WriteRequest {
            execution: execution.clone(),
            expected_seq,
            records,
            reply,
        };
        {
            let requests = self
                .shared
                .requests
                .lock()
                .map_err(|_| AppendError::Closed)?;
            let sender = requests.as_ref().ok_or(AppendError::Closed)?;
            sender.send(request).map_err(|_| AppendError::Closed)?;
        }
        answer.await.map_err(|_| AppendError::Closed)?
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
        let raw = {
            let execution = execution.clone();
            self.blocking_read(move |db| RawPage::fetch(db, &execution, from, limit))
                .await?
        };
        raw.decode(execution)
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        let execution = execution.clone();
        self.blocking_read(move |db| read_head(db, &execution))
            .await
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
        use std::ops::Bound;
        let after = after.cloned();
        self.blocking_read(move |db| {
            let txn = db.begin_read().map_err(storage)?;
            let heads = txn.open_table(HEADS).map_err(storage)?;
            let lower = after
                .as_ref()
                .map_or(Bound::Unbounded, |id| Bound::Excluded(id.as_str()));
            let limit = limit.max(1);
            let mut executions = Vec::new();
            for entry in heads
                .range::<&str>((lower, Bound::Unbounded))
                .map_err(storage)?
                .take(limit + 1)
            {
                let (id, head) = entry.map_err(storage)?;
                let id = ExecutionId::new(id.value()).map_err(storage)?;
                executions.push(ExecutionSummary {
                    id,
                    head: head.value(),
                });
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
            .map_err(|err| match err {
                WaitError::Read(err) => err,
                WaitError::Closed => ReadError::Closed,
            })
    }
}
