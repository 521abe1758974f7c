//! A memory store whose appends the test decides, every other call going straight to the
//! store: the one place the tests implement `StoreHooks::append`. The kernel only, so that
//! other crates' tests include this file too (`#[path]`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use loom_kernel::conformance::{Hooked, StoreHooks};
use loom_kernel::{AppendError, Event, EventStore, ExecutionId, MemoryStore};

/// One append the store was asked for, with the memory store it would go to.
pub struct Append {
    pub inner: MemoryStore,
    pub execution: ExecutionId,
    pub expected_seq: u64,
    pub events: Vec<Event>,
}

impl Append {
    /// Makes the append on the memory store.
    pub async fn forward(&self) -> Result<u64, AppendError> {
        self.inner
            .append(&self.execution, self.expected_seq, &self.events)
            .await
    }
}

type AppendFuture = Pin<Box<dyn Future<Output = Result<u64, AppendError>> + Send>>;

/// Hooks that hand every append to a function of the test.
#[derive(Clone)]
pub struct OnAppend(Arc<dyn Fn(Append) -> AppendFuture + Send + Sync>);

/// A memory store whose appends a function of the test makes.
pub type AppendHooked = Hooked<MemoryStore, OnAppend>;

/// `inner`, each of its appends made by `decide` (which may [`Append::forward`] it, or not).
pub fn on_append<F, Fut>(inner: MemoryStore, decide: F) -> AppendHooked
where
    F: Fn(Append) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, AppendError>> + Send + 'static,
{
    let decide = move |append| -> AppendFuture { Box::pin(decide(append)) };
    Hooked::new(inner, OnAppend(Arc::new(decide)))
}

impl StoreHooks<MemoryStore> for OnAppend {
    async fn append(
        &self,
        inner: &MemoryStore,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        let append = Append {
            inner: inner.clone(),
            execution: execution.clone(),
            expected_seq,
            events: events.to_vec(),
        };
        (self.0)(append).await
    }
}
