//! A test store made of another store and the few calls a test changes.
//!
//! Tests of recovery, batching and crashes need a store that does one thing differently (dies
//! at an append, serves one bad log, counts reads). [`Hooked`] forwards every [`EventStore`]
//! call to its inner store except those its [`StoreHooks`] replace, so each test writes only
//! the call it changes.

use std::future::Future;

use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::id::ExecutionId;
use crate::store::{
    AppendError, EventStore, ExecutionPage, FeedEvent, LeaseHold, ReadError, RetentionError,
    StatusFilter,
};

use super::started;

/// What a test store does differently from the store `S` it wraps. Every method forwards to
/// `inner` unless the test replaces it.
pub trait StoreHooks<S: EventStore>: Send + Sync + 'static {
    /// In place of [`EventStore::append`].
    fn append(
        &self,
        inner: &S,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> impl Future<Output = Result<u64, AppendError>> + Send {
        inner.append(execution, expected_seq, events)
    }

    /// In place of [`EventStore::read`].
    fn read(
        &self,
        inner: &S,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<EventEnvelope>, ReadError>> + Send {
        inner.read(execution, from, limit)
    }

    /// In place of [`EventStore::head`].
    fn head(
        &self,
        inner: &S,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<u64, ReadError>> + Send {
        inner.head(execution)
    }

    /// In place of [`EventStore::list_by_status`].
    fn list_by_status(
        &self,
        inner: &S,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> impl Future<Output = Result<ExecutionPage, ReadError>> + Send {
        inner.list_by_status(filter, after, limit)
    }

    /// In place of [`EventStore::hold_lease`].
    fn hold_lease(
        &self,
        inner: &S,
        execution: &ExecutionId,
        head: u64,
    ) -> impl Future<Output = Result<LeaseHold, ReadError>> + Send {
        inner.hold_lease(execution, head)
    }
}

/// A store that is `inner` but for what `hooks` replace.
#[derive(Debug, Clone, Default)]
pub struct Hooked<S, H> {
    /// The store every call not replaced goes to.
    pub inner: S,
    /// The calls this store does differently, and what the test reads back from them.
    pub hooks: H,
}

impl<S, H> Hooked<S, H> {
    /// `inner`, changed by `hooks`.
    pub fn new(inner: S, hooks: H) -> Self {
        Self { inner, hooks }
    }
}

impl<S: EventStore, H: StoreHooks<S>> EventStore for Hooked<S, H> {
    fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> impl Future<Output = Result<u64, AppendError>> + Send {
        self.hooks
            .append(&self.inner, execution, expected_seq, events)
    }

    fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<EventEnvelope>, ReadError>> + Send {
        self.hooks.read(&self.inner, execution, from, limit)
    }

    fn head(&self, execution: &ExecutionId) -> impl Future<Output = Result<u64, ReadError>> + Send {
        self.hooks.head(&self.inner, execution)
    }

    fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> impl Future<Output = Result<ExecutionPage, ReadError>> + Send {
        self.inner.list_executions(after, limit)
    }

    fn wait_for(
        &self,
        execution: &ExecutionId,
        seq: u64,
    ) -> impl Future<Output = Result<(), ReadError>> + Send {
        self.inner.wait_for(execution, seq)
    }

    fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> impl Future<Output = Result<ExecutionPage, ReadError>> + Send {
        self.hooks.list_by_status(&self.inner, filter, after, limit)
    }

    fn read_feed(
        &self,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<FeedEvent>, ReadError>> + Send {
        self.inner.read_feed(from, limit)
    }

    fn wait_for_feed(&self, position: u64) -> impl Future<Output = Result<(), ReadError>> + Send {
        self.inner.wait_for_feed(position)
    }

    fn list_wakeups(
        &self,
        before_ms: u64,
        after: Option<&crate::store::Wakeup>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<crate::store::Wakeup>, ReadError>> + Send {
        self.inner.list_wakeups(before_ms, after, limit)
    }

    fn indexes_wakeups(&self) -> bool {
        self.inner.indexes_wakeups()
    }

    fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ExecutionId>, RetentionError>> + Send {
        self.inner.delete_ended(ended_before_ms, limit)
    }

    fn hold_lease(
        &self,
        execution: &ExecutionId,
        head: u64,
    ) -> impl Future<Output = Result<LeaseHold, ReadError>> + Send {
        self.hooks.hold_lease(&self.inner, execution, head)
    }

    fn has_leases(&self) -> bool {
        self.inner.has_leases()
    }

    fn stats(&self) -> Option<crate::store::StoreStats> {
        self.inner.stats()
    }

    fn lease_info(
        &self,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<Option<crate::store::LeaseInfo>, ReadError>> + Send {
        self.inner.lease_info(execution)
    }
}

/// Hooks that serve one execution's log as two `EXECUTION_STARTED` events (head 2), as a store
/// that acknowledged an invalid append would: for tests that one bad log is reported and
/// skipped, never blocking the others.
#[derive(Debug, Clone)]
pub struct OneBadLog {
    /// The execution whose log is bad.
    pub bad: ExecutionId,
}

impl OneBadLog {
    fn log(&self, from: u64, limit: usize) -> Vec<EventEnvelope> {
        (0..2u64)
            .map(|seq| EventEnvelope::new(self.bad.clone(), seq, started("one")))
            .skip(from as usize)
            .take(limit)
            .collect()
    }
}

impl<S: EventStore> StoreHooks<S> for OneBadLog {
    async fn read(
        &self,
        inner: &S,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        if *execution == self.bad {
            return Ok(self.log(from, limit));
        }
        inner.read(execution, from, limit).await
    }

    async fn head(&self, inner: &S, execution: &ExecutionId) -> Result<u64, ReadError> {
        if *execution == self.bad {
            return Ok(2);
        }
        inner.head(execution).await
    }
}
