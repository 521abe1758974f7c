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
//! - **Fail-stop.** A store error is returned, never hidden; a batch that failed to commit is
//!   not visible, in whole or in part.
//!
//! Implementations: [`MemoryStore`] (the reference twin for tests) and [`DiskStore`] (the
//! embedded default, on redb). [`crate::conformance`] checks any implementation against this
//! contract.

mod disk;
mod memory;
mod watch;

use std::future::Future;

use futures::Stream;

pub use disk::{DiskStore, DiskStoreConfig, OpenError, StoredLog};
pub use memory::MemoryStore;

use crate::envelope::{DecodeError, EventEnvelope};
use crate::event::Event;
use crate::fold::{ExecutionState, FoldError};
use crate::id::ExecutionId;

/// How many events [`EventStoreExt::stream`] reads per page.
pub const STREAM_PAGE: usize = 4096;

/// Executions per listing page in [`EventStoreExt::executions`].
const LIST_PAGE: usize = 256;

/// Why an append did not happen. Nothing of the batch is stored when this is returned, except
/// for [`AppendError::Storage`] after the commit started, where the store could not tell (the
/// caller learns the truth by reading the head).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    #[error(
        "append conflict on execution {execution}: expected next seq {expected_seq}, but the log is at {actual_seq}"
    )]
    Conflict {
        execution: ExecutionId,
        expected_seq: u64,
        actual_seq: u64,
    },
    #[error("append to execution {execution} with no events")]
    EmptyBatch { execution: ExecutionId },
    #[error("storage failed appending to execution {execution}: {detail}")]
    Storage {
        execution: ExecutionId,
        detail: String,
    },
    #[error("the store is closed")]
    Closed,
}

/// Why a read did not return the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("event {seq} of execution {execution} cannot be decoded: {source}")]
    Decode {
        execution: ExecutionId,
        seq: u64,
        #[source]
        source: DecodeError,
    },
    #[error("storage failed reading: {detail}")]
    Storage { detail: String },
    #[error("the store is closed")]
    Closed,
}

/// Why a stored execution could not be folded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FoldStoredError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Fold(#[from] FoldError),
}

/// One execution as listed by [`EventStore::list_executions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    pub id: ExecutionId,
    /// The next seq: how many events the log holds.
    pub head: u64,
}

/// A page of executions, in id order (byte order of the ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionPage {
    pub executions: Vec<ExecutionSummary>,
    /// Pass as `after` to get the next page; `None` when no execution follows this page.
    pub next: Option<ExecutionId>,
}

impl ExecutionPage {
    /// A page from up to `limit + 1` summaries: the extra one only says that more follow.
    pub(crate) fn from_one_extra(mut executions: Vec<ExecutionSummary>, limit: usize) -> Self {
        let more = executions.len() > limit;
        executions.truncate(limit);
        let next = more
            .then(|| executions.last().map(|summary| summary.id.clone()))
            .flatten();
        Self { executions, next }
    }
}

/// Where execution logs live. See the module documentation for the contract.
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
}

/// Conveniences over any [`EventStore`].
pub trait EventStoreExt: EventStore {
    /// The log from `from` on, read a page at a time: memory stays flat however long it is.
    fn stream<'a>(
        &'a self,
        execution: &'a ExecutionId,
        from: u64,
    ) -> impl Stream<Item = Result<EventEnvelope, ReadError>> + Send + 'a {
        use futures::StreamExt;
        futures::stream::try_unfold(Some(from), move |next| async move {
            let Some(next) = next else { return Ok(None) };
            let page = self.read(execution, next, STREAM_PAGE).await?;
            let after = (page.len() == STREAM_PAGE).then(|| next + page.len() as u64);
            Ok(Some((
                futures::stream::iter(page.into_iter().map(Ok)),
                after,
            )))
        })
        .map(|page| match page {
            Ok(events) => events.left_stream(),
            Err(err) => futures::stream::once(async move { Err(err) }).right_stream(),
        })
        .flatten()
    }

    /// Every execution in the store, in id order, listed a page at a time: memory stays flat
    /// however many there are.
    fn executions(&self) -> impl Stream<Item = Result<ExecutionSummary, ReadError>> + Send + '_ {
        use futures::StreamExt;
        futures::stream::try_unfold(
            Some(None),
            move |after: Option<Option<ExecutionId>>| async move {
                let Some(after) = after else { return Ok(None) };
                let page = self.list_executions(after.as_ref(), LIST_PAGE).await?;
                let next = page.next.map(Some);
                Ok(Some((
                    futures::stream::iter(page.executions.into_iter().map(Ok)),
                    next,
                )))
            },
        )
        .map(|page| match page {
            Ok(summaries) => summaries.left_stream(),
            Err(err) => futures::stream::once(async move { Err(err) }).right_stream(),
        })
        .flatten()
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

/// Milliseconds since the Unix epoch, for `recorded_at_ms` metadata only.
pub(crate) fn wall_clock_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}
