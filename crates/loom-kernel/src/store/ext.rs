//! Conveniences over any store, built on the trait's calls alone: logs streamed or folded a
//! page at a time, every execution listed, and the answers a store without an index gives.

use std::future::Future;

use futures::Stream;

use super::{
    EventStore, ExecutionPage, ExecutionSummary, FeedEvent, FoldStoredError, ListedExecution,
    ReadError, STREAM_PAGE, StatusFilter, Wakeup, wake,
};
use crate::envelope::EventEnvelope;
use crate::fold::{ExecutionState, ExecutionStatus};
use crate::id::ExecutionId;

/// Executions per listing page in [`EventStoreExt::executions`].
const LIST_PAGE: usize = 256;

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

    /// The logs of `executions`, each with its id: in one [`EventStore::read_logs`] (one round
    /// trip on a shared store), or, should that fail, each on its own, so that a log that
    /// cannot be read costs its own entry, not the others'. For listings that read what an
    /// index listed, a page at a time.
    fn read_listed_logs(
        &self,
        executions: Vec<ExecutionId>,
    ) -> impl Future<Output = Vec<(ExecutionId, Result<Vec<EventEnvelope>, ReadError>)>> + Send
    {
        async move {
            match self.read_logs(&executions).await {
                Ok(logs) if logs.len() == executions.len() => executions
                    .into_iter()
                    .zip(logs.into_iter().map(Ok))
                    .collect(),
                _ => {
                    let mut logs = Vec::with_capacity(executions.len());
                    for execution in executions {
                        let log = self.read_all(&execution).await;
                        logs.push((execution, log));
                    }
                    logs
                }
            }
        }
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

/// [`EventStore::list_by_status`] without an index: lists every execution and folds each. The
/// default body, and the disk store's for a filter a file opened read-only from before its
/// index cannot answer.
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
pub(super) fn every_execution<S: EventStore + ?Sized>(
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
