//! The `EventStore` trait: where execution logs live.
//!
//! # Contract
//! - **Logs.** One log per execution; seqs are gapless from 0; an appended event never changes.
//! - **Append** (`append(execution, expected_seq, events)`) is atomic: every event of the batch
//!   is stored at `expected_seq, expected_seq + 1, ...`, or none is. It fails with
//!   [`AppendError::Conflict`] when the log's next seq is not `expected_seq` (another writer got
//!   there first): this optimistic check is the fence that makes two workers on one execution
//!   safe. When `append` returns `Ok`, the events are durable as far as the store promises
//!   (the disk store: fsynced).
//! - **Reads** see every append that has returned. `read(execution, from, limit)` returns the
//!   events with `seq >= from`, in order, at most `limit` of them; an unknown execution reads as
//!   an empty log.
//! - **Valid logs only.** An append that would make the log unreadable as a whole is refused
//!   with [`AppendError::Invalid`] and stores nothing of its batch: a first event that is not
//!   `EXECUTION_STARTED`, a second `EXECUTION_STARTED`, any event after a terminal one
//!   (`EXECUTION_COMPLETED`, `EXECUTION_FAILED`, `EXECUTION_CANCELLED`). The check costs no
//!   fold: stores keep each execution's [`ExecutionTail`] and apply the batch to it.
//! - **Status index.** [`EventStore::list_by_status`] lists the executions of one status (or
//!   those a worker must drive on) at a cost in proportion to what it returns. The index is
//!   written in the same atomic commit as the events, so it always agrees with the logs.
//! - **Queries.** [`EventStore::query_executions`] lists executions newest start first,
//!   filtered, a page at a time behind a cursor, and [`EventStore::count_by_status`] counts
//!   them per status; a store with the indexes answers both in proportion to the page.
//! - **Feed.** Every stored event also has a *position* in the store-wide commit order;
//!   [`EventStore::read_feed`] reads events from a position, so a reader (a projection) can
//!   follow the whole store and resume after a restart from the last position it handled.
//! - **Retention.** [`EventStore::delete_ended`] deletes ended executions whose end is older
//!   than a given time, a bounded batch at a time.
//! - **Fail-stop.** A store error is returned, never hidden; a batch that failed to commit is
//!   not visible, in whole or in part.
//! - **Leases.** A store shared by several workers may hand each execution to one worker at a
//!   time; [`EventStore::hold_lease`] says whether this worker still holds it, so that nothing
//!   the runtime cannot undo (a non-idempotent effect) starts on a lease another worker took.
//!   A store that one process writes at a time holds every execution (the default).
//!
//! Implementations: [`MemoryStore`] (the reference twin for tests) and [`DiskStore`] (the
//! embedded default, on redb). `loom_kernel::conformance` (feature `testkit`) checks any
//! implementation against this contract.

mod claim;
mod disk;
mod encoded;
mod journal;
mod memory;
mod query;
mod stats;
pub(crate) mod tail;
pub mod wake;
mod watch;

use std::future::Future;
use std::sync::Arc;

use futures::Stream;

pub use claim::NewClaim;
pub use disk::{
    DiskStore, DiskStoreConfig, OpenError, SalvageError, Salvaged, ScrubStatus, StoredLog,
};
pub use encoded::{EncodedRecords, RecordsIter};
pub use memory::MemoryStore;
pub use query::{
    ExecutionCursor, ExecutionQuery, ExecutionQueryPage, ListedExecution, MAX_QUERY_LIMIT,
    StatusCounts, prefix_upper_bound,
};
pub use stats::{LATENCY_BOUNDS_US, LatencyHistogram, LatencyRecorder, StoreStats};
pub use tail::ExecutionTail;
use tail::TailChange;
pub use wake::{WakeReason, Wakeup};

use crate::envelope::{DecodeError, EventEnvelope};
use crate::event::Event;
use crate::fold::{ExecutionState, ExecutionStatus, FoldError, Violation};
use crate::id::ExecutionId;

/// How many events [`EventStoreExt::stream`] reads per page.
pub const STREAM_PAGE: usize = 4096;

/// Executions per listing page in [`EventStoreExt::executions`].
const LIST_PAGE: usize = 256;

/// Why an append did not happen. Nothing of the batch is stored when this is returned, except
/// for [`AppendError::Storage`] after the commit started, where the store could not tell (the
/// caller learns the truth by reading the head).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    #[error(
        "append conflict on execution {execution}: expected next seq {expected_seq}, but the log is at {actual_seq}"
    )]
    /// Another writer appended first: the log is not at `expected_seq`.
    Conflict {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq the caller expected to write next.
        expected_seq: u64,
        /// The seq the log is actually at.
        actual_seq: u64,
    },
    /// The batch is empty.
    #[error("append to execution {execution} with no events")]
    EmptyBatch {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// An event of the batch holds a payload nested deeper than
    /// [`crate::payload::MAX_DEPTH`], which no reader could parse back; nothing is stored.
    #[error(
        "append to execution {execution} refused: the event at seq {seq} holds a payload nested deeper than {} levels",
        crate::payload::MAX_DEPTH
    )]
    PayloadTooDeep {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq of the event concerned.
        seq: u64,
    },
    /// The batch would make the log invalid (see the module documentation); nothing of it
    /// is stored. `seq` is where the offending event would have gone.
    #[error(
        "append to execution {execution} refused: the event at seq {seq} would make the log invalid: {violation}"
    )]
    Invalid {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq of the event concerned.
        seq: u64,
        /// The invariant the event would break.
        #[source]
        violation: Box<Violation>,
    },
    /// The storage failed; nothing of the batch is stored.
    #[error("storage failed appending to execution {execution}: {source}")]
    Storage {
        /// The execution concerned.
        execution: ExecutionId,
        /// What the storage reported.
        #[source]
        source: StorageError,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
}

/// What a storage backend reported (redb, PostgreSQL, the file system), kept as the
/// `source()` of [`AppendError::Storage`], [`ReadError::Storage`] and
/// [`RetentionError::Storage`] rather than flattened to words. Its `Display` is the backend's
/// message; [`StorageError::get_ref`] gives the backend's error itself, to downcast. Cheap to
/// clone: one failed group commit answers every append in it with the same error.
#[derive(Clone)]
pub struct StorageError(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl StorageError {
    /// The backend's error, kept whole.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// A failure no backend error describes (a task that stopped, a panic in the storage
    /// code), in words.
    pub fn msg(detail: impl Into<String>) -> Self {
        Self(Arc::new(Message(detail.into())))
    }

    /// The backend's error (for a [`StorageError::msg`], a private type holding the words).
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl std::fmt::Debug for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The words of a [`StorageError::msg`].
#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// Why a read did not return the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A stored event does not decode.
    #[error("event {seq} of execution {execution} cannot be decoded: {source}")]
    Decode {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq of the event concerned.
        seq: u64,
        /// The underlying error.
        #[source]
        source: DecodeError,
    },
    /// The storage failed.
    #[error("storage failed reading: {source}")]
    Storage {
        /// What the storage reported.
        #[source]
        source: StorageError,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
    /// The store does not implement this operation (a trait method with no default body
    /// that a store left out).
    #[error("this store does not support {operation}")]
    Unsupported {
        /// The operation asked for.
        operation: &'static str,
    },
}

impl ReadError {
    /// A storage failure: what the backend reported, kept as the source.
    pub fn storage(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Storage {
            source: StorageError::new(err),
        }
    }
}

/// Decodes a stored record (the record form of [`crate::record`]): a record that does not
/// decode is a [`ReadError::Decode`] naming the execution and the seq.
pub fn decode_stored(
    execution: &ExecutionId,
    seq: u64,
    record: &[u8],
) -> Result<EventEnvelope, ReadError> {
    crate::envelope::decode_record(execution, seq, record).map_err(|source| ReadError::Decode {
        execution: execution.clone(),
        seq,
        source,
    })
}

/// When and as which flow an execution started, from its first event's record as stored: its
/// `recordedAtMs` and its flow, `0` and `""` where the record does not say (one that does not
/// decode, or is not a start, is listed so rather than refused: the listing is an index, the
/// log decides).
pub fn start_of_first_record(execution: &ExecutionId, record: &[u8]) -> (u64, String) {
    decode_stored(execution, 0, record).map_or((0, String::new()), |envelope| {
        let flow = envelope.event.started_flow().unwrap_or_default().to_owned();
        (envelope.recorded_at_ms.unwrap_or(0), flow)
    })
}

/// Why [`EventStore::delete_ended`] deleted nothing. A failed call deletes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// The storage failed.
    #[error("storage failed deleting ended executions: {source}")]
    Storage {
        /// What the storage reported.
        #[source]
        source: StorageError,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
    /// The store cannot delete executions.
    #[error("this store does not support deleting executions")]
    Unsupported,
}

/// Which executions [`EventStore::list_by_status`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusFilter {
    /// The executions whose status ([`ExecutionState::status`]) is this one. `New` lists
    /// nothing: an execution with no events is not stored.
    Status(ExecutionStatus),
    /// The executions a worker must drive on ([`ExecutionState::needs_driving`]): running, or
    /// parked with a step in flight. What `Runtime::recover` starts.
    NeedsDriving,
    /// The executions with a step in doubt ([`ExecutionState::steps_in_doubt`]), whatever
    /// their status: those waiting for a verdict, and those that ended with one (a cancel, or
    /// a flow that returned, while the effect ran), whose effect may have happened. What the
    /// in-doubt listings read, in proportion to what they return.
    StepsInDoubt,
}

impl StatusFilter {
    /// Whether an execution with this tail is listed.
    pub fn matches_tail(self, tail: &ExecutionTail) -> bool {
        match self {
            Self::Status(status) => status != ExecutionStatus::New && tail.status() == status,
            Self::NeedsDriving => tail.needs_driving(),
            Self::StepsInDoubt => tail.has_steps_in_doubt(),
        }
    }

    /// Whether an execution with this folded state is listed.
    pub fn matches_state(self, state: &ExecutionState) -> bool {
        match self {
            Self::Status(status) => status != ExecutionStatus::New && state.status() == status,
            Self::NeedsDriving => state.needs_driving(),
            Self::StepsInDoubt => !state.steps_in_doubt().is_empty(),
        }
    }
}

/// This worker's hold on an execution, as [`EventStore::hold_lease`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseHold {
    /// The store has no leases: one process writes to it at a time (the embedded store's file
    /// lock, a memory store's process), so that process holds every execution.
    Exclusive,
    /// This worker holds the execution's lease under this fencing token. The token grows each
    /// time the execution changes hands, so a receiver that remembers the highest token it saw
    /// for an execution can refuse work sent under a lower one (a worker that was paused past
    /// its lease).
    Held {
        /// The fencing token.
        token: u64,
    },
    /// This worker does not hold the lease and could not take it: another worker holds it, or
    /// the log moved past the head the caller saw. Whatever the caller was about to start is
    /// left to the lease's holder.
    NotHeld,
}

impl LeaseHold {
    /// Whether the caller may go ahead (`Exclusive` or `Held`).
    pub fn is_held(self) -> bool {
        !matches!(self, Self::NotHeld)
    }

    /// The fencing token, for a store with leases.
    pub fn token(self) -> Option<u64> {
        match self {
            Self::Held { token } => Some(token),
            Self::Exclusive | Self::NotHeld => None,
        }
    }
}

/// An execution's lease as a store with leases records it ([`EventStore::lease_info`]): who
/// holds it or held it last, under which fencing token, and whether it is live now (by the
/// store's clock). What an operator looks at before a `retry` verdict: a worker whose lease is
/// still live may still be sending (`docs/EFFECTS.md`, "Paused workers").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The worker that holds the lease, or held it last (it gave the lease back when the
    /// execution parked, or the lease ran out).
    pub holder: String,
    /// The fencing token of that holder's lease.
    pub token: u64,
    /// Whether the holder's lease is live now.
    pub live: bool,
    /// While live, how long until it runs out unless renewed, in milliseconds.
    pub expires_in_ms: Option<u64>,
}

/// One event with its position in the store-wide commit order, as read by
/// [`EventStore::read_feed`].
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// The event's position: pass `position + 1` as `from` to read what follows it.
    pub position: u64,
    /// The event.
    pub envelope: EventEnvelope,
}

/// Why a stored execution could not be folded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FoldStoredError {
    /// The log could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The log does not fold.
    #[error(transparent)]
    Fold(#[from] FoldError),
}

/// One execution as listed by [`EventStore::list_executions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    /// The execution's id.
    pub id: ExecutionId,
    /// The next seq: how many events the log holds.
    pub head: u64,
}

/// A page of executions, in id order (byte order of the ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionPage {
    /// The executions of the page, in id order.
    pub executions: Vec<ExecutionSummary>,
    /// Pass as `after` to get the next page; `None` when no execution follows this page.
    pub next: Option<ExecutionId>,
}

impl ExecutionPage {
    /// A page from up to `limit + 1` summaries: the extra one only says that more follow. A
    /// store lists `limit + 1` executions and hands them here.
    pub fn from_one_extra(mut executions: Vec<ExecutionSummary>, limit: usize) -> Self {
        let more = executions.len() > limit;
        executions.truncate(limit);
        let next = more
            .then(|| executions.last().map(|summary| summary.id.clone()))
            .flatten();
        Self { executions, next }
    }
}

/// Where execution logs live. See the module documentation for the contract.
///
/// # As a seam
/// - **Replay:** replay reads (`read`, `read_all`); it never appends.
/// - **Task:** called from any task of the runtime (drivers, the timer task, `recover`) and
///   from the callers of `start`, `resume` and the like, concurrently: implementations are
///   `Send + Sync` and must not block the executor.
/// - **Panic:** not contained: a store must return errors, never panic (a panic inside a
///   driver ends that driver's task and is logged when the runtime joins it).
/// - **Other processes:** whether another process's appends are seen is the store's: the
///   `MemoryStore` is one process's, a `DiskStore` file is held by one process at a time, and
///   a shared store (PostgreSQL) shows every worker's committed appends. The expected-seq check
///   fences writers in every case.
pub trait EventStore: Send + Sync + 'static {
    /// Appends `events` atomically at `expected_seq` and returns the log's new head.
    fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> impl Future<Output = Result<u64, AppendError>> + Send;

    /// Up to `limit` events with `seq >= from`, in order.
    fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<EventEnvelope>, ReadError>> + Send;

    /// The log's next seq (its length); 0 for an unknown execution.
    fn head(&self, execution: &ExecutionId) -> impl Future<Output = Result<u64, ReadError>> + Send;

    /// Up to `limit` executions with ids after `after`, in id order. A `limit` of 0 is read
    /// as 1. An execution with no events is not listed.
    fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> impl Future<Output = Result<ExecutionPage, ReadError>> + Send;

    /// The whole logs of several executions (an unknown one reads as empty), for tools that
    /// go through many small logs. A store may read them in one go; the default reads them
    /// one after another.
    fn read_logs(
        &self,
        executions: &[ExecutionId],
    ) -> impl Future<Output = Result<Vec<Vec<EventEnvelope>>, ReadError>> + Send {
        async move {
            let mut logs = Vec::with_capacity(executions.len());
            for execution in executions {
                logs.push(self.read_all(execution).await?);
            }
            Ok(logs)
        }
    }

    /// Resolves once the log holds an event at `seq` (at once if it already does).
    fn wait_for(
        &self,
        execution: &ExecutionId,
        seq: u64,
    ) -> impl Future<Output = Result<(), ReadError>> + Send;

    /// Up to `limit` executions matching `filter` with ids after `after`, in id order (byte
    /// order of the ids), each with its head. A `limit` of 0 is read as 1.
    ///
    /// - **Cost.** A store with a status index answers in proportion to the page it returns,
    ///   however many executions it holds in other statuses. The default body (for stores
    ///   without an index) lists every execution and folds each: correct, but proportional
    ///   to every event stored.
    /// - **Consistency.** The listing reflects every append that returned before the call; an
    ///   execution whose status changes while pages are read may be listed on no page or, if
    ///   its status changes back, twice, as with any paged listing. A log the store holds
    ///   from before it validated appends (and that the fold refuses) is listed as the index
    ///   saw it: callers fold what they list and handle a [`FoldError`] per execution.
    /// - **Processes.** A store shared by several processes lists what all of them appended.
    fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> impl Future<Output = Result<ExecutionPage, ReadError>> + Send {
        list_by_fold(self, filter, after, limit)
    }

    /// A page of executions, newest start first, matching `query` (see
    /// [`ExecutionQuery::select`], the reference every store agrees with).
    ///
    /// - **Cost.** A store with a start-time index answers the newest page, of every status
    ///   or of one, in proportion to the page; the other filters (flow, id prefix, end time)
    ///   skip index entries without reading a log. The default body folds every execution
    ///   stored: correct, but proportional to every event.
    /// - **Consistency.** As [`EventStore::list_by_status`]: an execution started while pages
    ///   are read sorts before the cursor and is not listed on later pages; one whose status
    ///   changes between pages may be missed by a status filter, or listed twice.
    fn query_executions(
        &self,
        query: &ExecutionQuery,
    ) -> impl Future<Output = Result<ExecutionQueryPage, ReadError>> + Send {
        async move { Ok(query.select(every_listed_execution(self).await?)) }
    }

    /// How many executions each status holds. A store with counts kept beside its status
    /// index answers at once; the default counts through [`EventStore::list_by_status`].
    fn count_by_status(&self) -> impl Future<Output = Result<StatusCounts, ReadError>> + Send {
        async move {
            use futures::TryStreamExt;
            let mut counts = StatusCounts::default();
            for status in ExecutionStatus::STARTED {
                let mut listed = self.executions_by_status(StatusFilter::Status(status));
                let mut count = 0;
                while listed.try_next().await?.is_some() {
                    count += 1;
                }
                counts.set(status, count);
            }
            Ok(counts)
        }
    }

    /// Up to `limit` stored events with a feed position `>= from`, in position order.
    ///
    /// - **Positions** are assigned when a batch commits, in commit order, increasing within
    ///   a batch with its seqs. They may have gaps (a store need not number densely, and
    ///   [`EventStore::delete_ended`] leaves holes), but never go back: once a reader has seen
    ///   position `p`, no event committed later gets a position `<= p`. Hence, read from the
    ///   position after the last one handled, a reader sees every durable event exactly once,
    ///   and each execution's events in seq order; positions are durable, so this holds across
    ///   restarts of the store and of the reader.
    /// - **Visibility.** Every append that returned `Ok` before the call is readable, and only
    ///   committed events are (a failed batch never shows). A store shared by several
    ///   processes shows all of their events.
    /// - **Default.** Fails with [`ReadError::Unsupported`]: the other methods cannot give a
    ///   store-wide order.
    fn read_feed(
        &self,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<FeedEvent>, ReadError>> + Send {
        let _ = (from, limit);
        async {
            Err(ReadError::Unsupported {
                operation: "read_feed",
            })
        }
    }

    /// Resolves once the feed may hold an event at a position `>= position` (at once if it
    /// already does). It may resolve early (a reader then reads an empty page and waits
    /// again), never late for an append through this store. A store shared by several
    /// processes must also wake for their appends, at worst by polling.
    ///
    /// The default fails with [`ReadError::Unsupported`].
    fn wait_for_feed(&self, position: u64) -> impl Future<Output = Result<(), ReadError>> + Send {
        let _ = position;
        async {
            Err(ReadError::Unsupported {
                operation: "wait_for_feed",
            })
        }
    }

    /// Deletes up to `limit` ended executions (completed, failed or cancelled) whose terminal
    /// event was recorded before `ended_before_ms` (milliseconds since the Unix epoch, the
    /// store's clock), oldest end first, and returns their ids. Fewer than `limit` ids means
    /// no such execution is left. A `limit` of 0 is read as 1.
    ///
    /// - Each call is one atomic commit: an execution is deleted whole (events, index
    ///   entries) or not at all. Live work is not blocked longer than one such commit, which
    ///   `limit` bounds; operators loop until the returned list is short.
    /// - Only executions whose end time the store recorded are deleted: one ended without a
    ///   clock reading is kept.
    /// - A deleted execution reads as unknown (empty log, head 0); its feed positions stay
    ///   unused. Appending to its id at seq 0 starts a new execution.
    /// - The default fails with [`RetentionError::Unsupported`].
    fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ExecutionId>, RetentionError>> + Send {
        let _ = (ended_before_ms, limit);
        async { Err(RetentionError::Unsupported) }
    }

    /// Up to `limit` rows of the wake-up index with a time before `before_ms` (every row when
    /// it is `u64::MAX`: [`wake::listed_before`]) and a key after
    /// `after`, in key order ([`Wakeup`]'s order): the deadlines of parked executions, and
    /// their child links (at time 0). See [`wake`] for what is indexed. A `limit` of 0 is
    /// read as 1. What `Runtime::recover` reads instead of every parked execution's log.
    ///
    /// - **Consistency.** The rows are written in the same atomic commit as the events that
    ///   add or remove them: the listing reflects every append that returned before the call.
    /// - **Cost.** A store with the index ([`EventStore::indexes_wakeups`]) answers in
    ///   proportion to the page. The default body lists the parked executions and reads each
    ///   log: correct, but in proportion to every parked execution's log.
    fn list_wakeups(
        &self,
        before_ms: u64,
        after: Option<&Wakeup>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Wakeup>, ReadError>> + Send {
        scan_wakeups(self, before_ms, after, limit)
    }

    /// Whether [`EventStore::list_wakeups`] reads an index (in proportion to the page asked
    /// for) rather than every parked log. The runtime then reads deadlines a time window at a
    /// time; otherwise it reads them all once, at recovery. The default is `false`.
    fn indexes_wakeups(&self) -> bool {
        false
    }

    /// Whether this worker holds `execution`'s lease, taking it if nobody holds it and the log
    /// is still at `head` (the head the caller last saw). The runtime asks right before it
    /// invokes a non-idempotent effect, after the step's `STEP_STARTED` is durable, and invokes
    /// it only on [`LeaseHold::Exclusive`] or [`LeaseHold::Held`] (handing the token to the
    /// effect); on [`LeaseHold::NotHeld`] or an error it invokes nothing and records nothing,
    /// and its driver stops: the step is the lease holder's to recover.
    ///
    /// - **Cost.** On the path of every non-idempotent step. A store with leases answers from
    ///   memory while its lease is known to be fresh, and asks its server only when the lease
    ///   may have lapsed (renewing it, or taking it if it is free and the log is at `head`).
    /// - **Meaning.** `Held` holds when the call returns; a worker paused after it may still
    ///   lose the lease before its effect reaches a receiver, which is why the token goes with
    ///   the effect.
    /// - **Default.** [`LeaseHold::Exclusive`], at once: for stores one process writes at a
    ///   time.
    fn hold_lease(
        &self,
        execution: &ExecutionId,
        head: u64,
    ) -> impl Future<Output = Result<LeaseHold, ReadError>> + Send {
        let _ = (execution, head);
        std::future::ready(Ok(LeaseHold::Exclusive))
    }

    /// Who holds `execution`'s lease, or held it last, for operators (`loom show`, the
    /// in-doubt listing). `None` for a store without leases, or an execution never leased.
    /// Not for deciding anything in the runtime: by the time it is read it may have changed.
    fn lease_info(
        &self,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<Option<LeaseInfo>, ReadError>> + Send {
        let _ = execution;
        std::future::ready(Ok(None))
    }

    /// Claims `execution`, which has no events, for the caller's first append, in the
    /// store's memory: `Some` when the id is the caller's. While the claim lives, a first
    /// append of the id by anyone else waits until the claimant's first append
    /// ([`EventStore::append_claimed`]) has committed (it then conflicts) or the claim is
    /// dropped. So a new execution whose claim is granted runs its idempotent effects before
    /// its `EXECUTION_STARTED` is durable: no other start of that id can take it meanwhile.
    ///
    /// - **`None`** when the execution has events, another caller holds the claim, or the
    ///   store cannot claim ids in memory (several processes write to it: the default). The
    ///   runtime then holds every effect until the start is durable.
    /// - **Cost.** Answered from memory, with at most one read of the log's head.
    fn claim_new(
        &self,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<Option<NewClaim>, ReadError>> + Send {
        let _ = execution;
        std::future::ready(Ok(None))
    }

    /// The first append of a claimed execution ([`EventStore::claim_new`]): `events` at seq 0.
    /// The default is a plain [`EventStore::append`] at seq 0.
    fn append_claimed(
        &self,
        claim: &NewClaim,
        events: &[Event],
    ) -> impl Future<Output = Result<u64, AppendError>> + Send {
        self.append(claim.execution(), 0, events)
    }

    /// Whether this store hands executions to one worker at a time (then
    /// [`EventStore::hold_lease`] may answer [`LeaseHold::NotHeld`]). The runtime then claims
    /// an execution's lease before it drives one that `recover` found, or fires a deadline of
    /// a parked one, so that of several workers that all armed a deadline or listed an
    /// execution, one replays it and runs its effects. The default, `false`, is for stores one
    /// process writes at a time: the runtime then does neither, and asks nothing.
    fn has_leases(&self) -> bool {
        false
    }

    /// What the store counts of its own work since it was opened in this process (commits,
    /// their latency, lease take-overs), for an operator's metrics: plain numbers, each
    /// `None` where the store keeps no such figure. Never used to decide anything.
    ///
    /// - **Cost.** A few atomic loads: a store keeps these as it goes, never reads them from
    ///   its backend for this call.
    /// - **Default.** `None`: the store reports nothing.
    fn stats(&self) -> Option<StoreStats> {
        None
    }
}

/// Conveniences over any [`EventStore`].
pub trait EventStoreExt: EventStore {
    /// The log from `from` on, read a page at a time: memory stays flat however long it is.
    /// The stream is `Unpin`: poll it with `futures::TryStreamExt::try_next`, no pinning.
    fn stream<'a>(
        &'a self,
        execution: &'a ExecutionId,
        from: u64,
    ) -> impl Stream<Item = Result<EventEnvelope, ReadError>> + Send + Unpin + 'a {
        flatten_pages(futures::stream::try_unfold(
            Some(from),
            move |next| async move {
                let Some(next) = next else { return Ok(None) };
                let page = self.read(execution, next, STREAM_PAGE).await?;
                let after = (page.len() == STREAM_PAGE).then(|| next + page.len() as u64);
                Ok(Some((page, after)))
            },
        ))
    }

    /// Every execution in the store, in id order, in one `Vec`: the plain call for a listing
    /// that fits in memory. [`EventStoreExt::executions`] streams the same a page at a time.
    ///
    /// ```
    /// use loom_kernel::{EventStoreExt, MemoryStore};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// for summary in store.list_all_executions().await? {
    ///     println!("{} has {} events", summary.id, summary.head);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    fn list_all_executions(
        &self,
    ) -> impl Future<Output = Result<Vec<ExecutionSummary>, ReadError>> + Send {
        futures::TryStreamExt::try_collect(self.executions())
    }

    /// Every execution in the store, in id order, listed a page at a time: memory stays flat
    /// however many there are. The stream is `Unpin`: no pinning is needed to poll it.
    ///
    /// ```
    /// use futures::TryStreamExt;
    /// use loom_kernel::{EventStoreExt, MemoryStore};
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// let mut executions = store.executions();
    /// while let Some(summary) = executions.try_next().await? {
    ///     println!("{}", summary.id);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    fn executions(
        &self,
    ) -> impl Stream<Item = Result<ExecutionSummary, ReadError>> + Send + Unpin + '_ {
        every_execution(self, None)
    }

    /// Every execution matching `filter`, in id order, listed a page at a time through
    /// [`EventStore::list_by_status`].
    fn executions_by_status(
        &self,
        filter: StatusFilter,
    ) -> impl Stream<Item = Result<ExecutionSummary, ReadError>> + Send + Unpin + '_ {
        listed(None, move |after| async move {
            self.list_by_status(filter, after.as_ref(), LIST_PAGE).await
        })
    }

    /// Follows the feed from position `from`: every stored event once, in position order,
    /// then every event appended later, as it commits. Never ends by itself; an error ends it
    /// (resume from the position after the last event received).
    fn follow(
        &self,
        from: u64,
    ) -> impl Stream<Item = Result<FeedEvent, ReadError>> + Send + Unpin + '_ {
        flatten_pages(futures::stream::try_unfold(
            Some(from),
            move |next| async move {
                let Some(mut next) = next else {
                    return Ok(None);
                };
                loop {
                    let page = self.read_feed(next, STREAM_PAGE).await?;
                    if let Some(last) = page.last() {
                        next = last.position + 1;
                        return Ok(Some((page, Some(next))));
                    }
                    self.wait_for_feed(next).await?;
                }
            },
        ))
    }

    /// The whole log in memory. Prefer [`EventStoreExt::fold`] or `stream` for long logs. The
    /// next page is read while the current one is added.
    fn read_all(
        &self,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<Vec<EventEnvelope>, ReadError>> + Send {
        async move {
            let mut all = Vec::new();
            for_each_page(self, execution, |page| {
                all.extend(page);
                Ok::<(), ReadError>(())
            })
            .await?;
            Ok(all)
        }
    }

    /// Folds a stored execution page by page, without holding the log in memory. The next
    /// page is read while the current one is folded. An unknown execution folds to the empty
    /// state (status `New`).
    fn fold(
        &self,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<ExecutionState, FoldStoredError>> + Send {
        async move {
            let mut state = ExecutionState::new();
            for_each_page(self, execution, |page| {
                state.apply_all(&page).map_err(FoldStoredError::from)
            })
            .await?;
            Ok(state)
        }
    }
}

/// [`EventStore::list_by_status`] without an index: lists every execution and folds each.
pub(crate) async fn list_by_fold<S: EventStore + ?Sized>(
    store: &S,
    filter: StatusFilter,
    after: Option<&ExecutionId>,
    limit: usize,
) -> Result<ExecutionPage, ReadError> {
    use futures::TryStreamExt;
    let limit = limit.max(1);
    let mut listing = every_execution(store, after.cloned());
    let mut found = Vec::new();
    while let Some(summary) = listing.try_next().await? {
        // An execution the fold refuses is listed as running: it is open as far as anyone
        // can tell, and the caller reports it when folding.
        let listed = match store.fold(&summary.id).await {
            Ok(state) => filter.matches_state(&state),
            Err(FoldStoredError::Fold(_)) => matches!(
                filter,
                StatusFilter::NeedsDriving | StatusFilter::Status(ExecutionStatus::Running)
            ),
            Err(FoldStoredError::Read(err)) => return Err(err),
        };
        if listed {
            found.push(summary);
            if found.len() > limit {
                break;
            }
        }
    }
    Ok(ExecutionPage::from_one_extra(found, limit))
}

/// [`EventStore::list_wakeups`] without an index: the parked executions listed, and each log
/// read. The default body, and the disk store's for a file opened read-only from before its
/// index.
pub(crate) async fn scan_wakeups<S: EventStore + ?Sized>(
    store: &S,
    before_ms: u64,
    after: Option<&Wakeup>,
    limit: usize,
) -> Result<Vec<Wakeup>, ReadError> {
    use futures::TryStreamExt;
    let mut rows = std::collections::BTreeSet::new();
    let filters = [
        StatusFilter::NeedsDriving,
        StatusFilter::Status(ExecutionStatus::Suspended),
        StatusFilter::Status(ExecutionStatus::InDoubt),
    ];
    for filter in filters {
        let mut listed = std::pin::pin!(store.executions_by_status(filter));
        while let Some(summary) = listed.try_next().await? {
            let log = store.read_all(&summary.id).await?;
            let found = wake::rows_of_log(&summary.id, log.iter().map(|e| &e.event));
            rows.extend(
                found.into_iter().filter_map(|(tag, at_ms)| {
                    Wakeup::from_stored(at_ms, summary.id.clone(), &tag)
                }),
            );
        }
    }
    Ok(wake::page_of(rows, before_ms, after, limit))
}

/// Hands the log to `consume` a page at a time, reading the next page while `consume` works
/// on the current one.
async fn for_each_page<S, E>(
    store: &S,
    execution: &ExecutionId,
    mut consume: impl FnMut(Vec<EventEnvelope>) -> Result<(), E> + Send,
) -> Result<(), E>
where
    S: EventStore + ?Sized,
    E: From<ReadError>,
{
    let mut from = 0u64;
    let mut page = store.read(execution, from, STREAM_PAGE).await?;
    loop {
        if page.len() < STREAM_PAGE {
            return consume(page);
        }
        from += page.len() as u64;
        let (next, consumed) = futures::join!(store.read(execution, from, STREAM_PAGE), async {
            consume(page)
        });
        consumed?;
        page = next?;
    }
}

impl<S: EventStore + ?Sized> EventStoreExt for S {}

/// The items of a stream of pages, in order; an error ends it. The stream is `Unpin`.
fn flatten_pages<'a, T: Send + 'a>(
    pages: impl Stream<Item = Result<Vec<T>, ReadError>> + Send + 'a,
) -> impl Stream<Item = Result<T, ReadError>> + Send + Unpin + 'a {
    use futures::StreamExt;
    pages
        .map(|page| match page {
            Ok(items) => futures::stream::iter(items.into_iter().map(Ok)).left_stream(),
            Err(err) => futures::stream::once(async move { Err(err) }).right_stream(),
        })
        .flatten()
        .boxed()
}

/// Every execution a paged listing (`list`, called with the id to list after) gives after
/// `after`, a page of [`LIST_PAGE`] at a time.
fn listed<'a, F, Fut>(
    after: Option<ExecutionId>,
    list: F,
) -> impl Stream<Item = Result<ExecutionSummary, ReadError>> + Send + Unpin + 'a
where
    F: Fn(Option<ExecutionId>) -> Fut + Send + 'a,
    Fut: Future<Output = Result<ExecutionPage, ReadError>> + Send + 'a,
{
    flatten_pages(futures::stream::try_unfold(
        Some(after),
        move |after: Option<Option<ExecutionId>>| {
            let page = after.map(&list);
            async move {
                let Some(page) = page else { return Ok(None) };
                let page = page.await?;
                Ok(Some((page.executions, page.next.map(Some))))
            }
        },
    ))
}

/// Every execution of `store` after `after`, through [`EventStore::list_executions`].
fn every_execution<S: EventStore + ?Sized>(
    store: &S,
    after: Option<ExecutionId>,
) -> impl Stream<Item = Result<ExecutionSummary, ReadError>> + Send + Unpin + '_ {
    listed(after, move |after| async move {
        store.list_executions(after.as_ref(), LIST_PAGE).await
    })
}

/// Every stored execution as a query lists it, each log folded: what a store without the
/// indexes of [`EventStore::query_executions`] answers from, and the reference of its tests.
pub async fn every_listed_execution<S: EventStore + ?Sized>(
    store: &S,
) -> Result<Vec<ListedExecution>, ReadError> {
    use futures::TryStreamExt;
    let mut rows = Vec::new();
    let mut listing = every_execution(store, None);
    while let Some(summary) = listing.try_next().await? {
        let log = store.read_all(&summary.id).await?;
        let Some(first) = log.first() else { continue };
        let mut state = ExecutionState::new();
        // A log the fold refuses is listed as running, as the status index files it.
        let status = match state.apply_all(&log) {
            Ok(()) => state.status(),
            Err(_) => ExecutionStatus::Running,
        };
        let flow = first.event.started_flow().unwrap_or_default().to_owned();
        let ended_at_ms = if status.is_terminal() {
            log.last().and_then(|last| last.recorded_at_ms)
        } else {
            None
        };
        rows.push(ListedExecution {
            id: summary.id,
            status,
            flow,
            started_at_ms: first.recorded_at_ms,
            ended_at_ms,
            head: log.len() as u64,
        });
    }
    Ok(rows)
}

/// Refuses an empty batch ([`AppendError::EmptyBatch`]) and a batch holding a payload no
/// reader could parse back ([`AppendError::PayloadTooDeep`]). Every store calls it before
/// anything else, on the caller's task.
pub fn check_batch(
    execution: &ExecutionId,
    expected_seq: u64,
    events: &[Event],
) -> Result<(), AppendError> {
    use crate::event::Verdict;
    if events.is_empty() {
        return Err(AppendError::EmptyBatch {
            execution: execution.clone(),
        });
    }
    for (seq, event) in (expected_seq..).zip(events) {
        let too_deep = match event {
            Event::ExecutionStarted(e) => e.input.is_too_deep(),
            Event::StepCompleted(e) => e.output.is_too_deep(),
            Event::EffectResolved(e) => match &e.verdict {
                Verdict::Completed { output } => output.is_too_deep(),
                _ => false,
            },
            Event::DecisionRecorded(e) => e.value.is_too_deep(),
            Event::ExecutionResumed(e) => e.payload.is_too_deep(),
            Event::SurfacePatch(e) => e.ops.is_too_deep(),
            Event::ExecutionCompleted(e) => e.output.is_too_deep(),
            Event::StepStarted(_)
            | Event::StepFailed(_)
            | Event::EffectInDoubt(_)
            | Event::ExecutionSuspended(_)
            | Event::ExecutionFailed(_)
            | Event::ExecutionCancelled(_) => false,
        };
        if too_deep {
            return Err(AppendError::PayloadTooDeep {
                execution: execution.clone(),
                seq,
            });
        }
    }
    Ok(())
}

/// An append checked and encoded on the caller's task, for a store whose writer task commits
/// it: the records (the record form of [`crate::record`]) stamped with the store's clock, what
/// each event changes in the execution's tail, and where the writer answers.
#[derive(Debug)]
pub struct EncodedAppend {
    /// The execution appended to.
    pub execution: ExecutionId,
    /// The seq the first record goes to.
    pub expected_seq: u64,
    /// The events, encoded, in seq order. Shared: a caller that keeps a share frees them on
    /// its own thread once answered, whatever thread the store's writer runs on.
    pub records: Arc<EncodedRecords>,
    /// What each event changes in the execution's tail, in order.
    pub changes: Vec<TailChange>,
    /// The time stamped on the records ([`wall_clock_ms`]).
    pub recorded_at_ms: Option<u64>,
    /// Where the writer sends the log's new head, or why nothing was appended.
    pub reply: tokio::sync::oneshot::Sender<Result<u64, AppendError>>,
}

impl EncodedAppend {
    /// Refuses what [`check_batch`] refuses, then stamps and encodes `events`. The receiver
    /// gets the writer's answer; a store reads a dropped sender as [`AppendError::Closed`].
    pub fn new(
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<
        (
            Self,
            tokio::sync::oneshot::Receiver<Result<u64, AppendError>>,
        ),
        AppendError,
    > {
        check_batch(execution, expected_seq, events)?;
        let recorded_at_ms = wall_clock_ms();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let append = Self {
            execution: execution.clone(),
            expected_seq,
            records: Arc::new(EncodedRecords::encode(events, recorded_at_ms)),
            changes: events.iter().map(TailChange::of).collect(),
            recorded_at_ms,
            reply,
        };
        Ok((append, answer))
    }
}

/// Milliseconds since the Unix epoch, for the `recorded_at_ms` metadata a store stamps on the
/// events it appends, and for nothing else.
pub fn wall_clock_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}

#[cfg(test)]
mod start_of_first_record_tests {
    use super::*;
    use crate::conformance::{completed, id, started};
    use crate::envelope::encode_record;

    #[test]
    fn a_start_gives_its_time_and_flow_anything_else_zero_and_nothing() {
        let e = id("first");
        let record = encode_record(&started("checkout"), Some(1_234));
        assert_eq!(
            start_of_first_record(&e, &record),
            (1_234, "checkout".into())
        );
        // Not a start, no time, cut short, empty, not a record at all: listed as 0 and "".
        let not_a_start = encode_record(&completed(), Some(9));
        assert_eq!(start_of_first_record(&e, &not_a_start), (9, String::new()));
        let no_time = encode_record(&started("checkout"), None);
        assert_eq!(start_of_first_record(&e, &no_time), (0, "checkout".into()));
        for damaged in [
            &record[..record.len() / 2],
            &[][..],
            b"{\"nested\":[[[[".as_slice(),
        ] {
            assert_eq!(start_of_first_record(&e, damaged), (0, String::new()));
        }
    }
}
