//! The runtime's bound on parked flows kept in memory and what it reports of them
//! (LD-020; the table is `keep.rs`'s).

use crate::fold::ExecutionState;
use crate::id::ExecutionId;
#[cfg(doc)]
use crate::runtime::keep::DEFAULT_MAX_PARKED_IN_MEMORY;
use crate::runtime::{Runtime, RuntimeBuilder};
use crate::store::EventStore;

impl<S> RuntimeBuilder<S> {
    /// How many parked executions the runtime keeps in memory with their flow, so that their
    /// next resume, verdict, deadline or cancel goes on without replaying their log
    /// (LD-020). Past the bound, the least recently parked are dropped and replay when needed.
    /// `0` keeps none (every resume replays). The default is
    /// [`DEFAULT_MAX_PARKED_IN_MEMORY`].
    pub fn max_parked_in_memory(mut self, max: usize) -> Self {
        self.max_parked_in_memory = max;
        self
    }
}

impl<S: EventStore> Runtime<S> {
    /// How many parked executions this runtime keeps in memory (at most the bound set by
    /// [`RuntimeBuilder::max_parked_in_memory`]). No task runs for them.
    pub fn parked_in_memory(&self) -> usize {
        self.inner.kept.len()
    }

    /// The state an execution parked in memory carries, if it is kept: the fold of its log,
    /// which its next driver goes on from without reading the log (for checks and
    /// diagnostics; `wait` returns the same once no driver runs).
    pub fn parked_state(&self, execution: &ExecutionId) -> Option<ExecutionState> {
        self.inner.kept.state(execution)
    }
}
