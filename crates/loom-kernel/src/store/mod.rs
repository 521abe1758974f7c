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

mod append;
mod claim;
mod decode;
mod disk;
mod encoded;
mod errors;
mod ext;
mod journal;
mod lease;
mod listing;
mod memory;
mod query;
mod stats;
pub(crate) mod tail;
pub mod wake;
mod watch;

use std::future::Future;

pub use append::{EncodedAppend, check_batch, wall_clock_ms};
pub use claim::NewClaim;
pub use decode::{decode_stored, start_of_first_record};
pub use disk::{
    DiskStore, DiskStoreConfig, OpenError, SalvageError, Salvaged, ScrubStatus, StoredLog,
};
pub use encoded::{EncodedRecords, RecordsIter};
pub use errors::{AppendError, FoldStoredError, ReadError, RetentionError, StorageError};
pub(crate) use ext::scan_wakeups;
pub use ext::{EventStoreExt, every_listed_execution};
pub use lease::{LeaseHold, LeaseInfo};
pub use listing::{ExecutionPage, ExecutionSummary, StatusFilter};
pub use memory::MemoryStore;
pub use query::{
    ExecutionCursor, ExecutionQuery, ExecutionQueryPage, ListedExecution, MAX_QUERY_LIMIT,
    StatusCounts, prefix_upper_bound,
};
pub use stats::{LATENCY_BOUNDS_US, LatencyHistogram, LatencyRecorder, StoreStats};
pub use tail::ExecutionTail;
use tail::TailChange;
pub use wake::{WakeReason, Wakeup};

use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::fold::ExecutionStatus;
#[cfg(doc)]
use crate::fold::FoldError;
use crate::id::ExecutionId;

/// How many events [`EventStoreExt::stream`] reads per page.
pub const STREAM_PAGE: usize = 4096;

/// One event with its position in the store-wide commit order, as read by
/// [`EventStore::read_feed`].
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// The event's position: pass `position + 1` as `from` to read what follows it.
    pub position: u64,
    /// The event.
    pub envelope: EventEnvelope,
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
        ext::list_by_fold(self, filter, after, limit)
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
    /// - An ended child whose parent still waits for its end (the parent's row of the wake-up
    ///   index for its child gate, [`wake::awaiting_parent`]) is kept until the parent has
    ///   heard of it or ended: without the child's log, `recover` would start it again.
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
