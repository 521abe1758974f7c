//! `Runtime::wait_ended`: waits for an execution's end across its parks, for callers (tests,
//! examples, a parent's caller) that want the output of a flow that waits for children or
//! timers, where `Runtime::wait` returns at the first park.

use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::runtime::slots::new_slot;
use crate::runtime::{Runtime, WaitError};
use crate::store::EventStore;

impl<S: EventStore> Runtime<S> {
    /// Waits until `execution` has ended (completed, failed or cancelled) and returns its
    /// state. Unlike [`Runtime::wait`], which returns when the execution parks, this waits
    /// through parks: the end of a child, a timer or a resume drives it on, and this returns
    /// once a driver has left it ended. An execution that never ends (a gate no one resumes)
    /// makes it wait forever: bound it with `tokio::time::timeout`. A driver failure is
    /// returned as [`WaitError::Driver`]; an execution that does not exist, as its empty state
    /// at once (`next_seq() == 0`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
    /// use loom_kernel::{ExecutionId, ExecutionStatus, ManualClock, MemoryStore};
    ///
    /// async fn nap(ctx: FlowCtx, _: ()) -> Result<&'static str, FlowError> {
    ///     ctx.sleep(Duration::from_secs(3600)).await?; // parks at a timer
    ///     Ok("rested")
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// // A clock the example moves, so that the timer fires when it says, not when a busy
    /// // machine gets to it.
    /// let clock = ManualClock::new(1_800_000_000_000);
    /// let loom = Runtime::builder(MemoryStore::new())
    ///     .flow(flow_fn("nap", 1, nap))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let id = ExecutionId::new("nap-1")?;
    /// loom.start("nap", &(), StartOptions::new(id.clone())).await?;
    /// assert_eq!(loom.wait(&id).await?.status(), ExecutionStatus::Suspended);
    /// clock.advance(Duration::from_secs(3600));
    /// assert_eq!(loom.wait_ended(&id).await?.status(), ExecutionStatus::Completed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn wait_ended(&self, execution: &ExecutionId) -> Result<ExecutionState, WaitError> {
        let ended = loop {
            // Subscribed before the state is read, so a driver run that ends after the read
            // is seen.
            let mut runs = {
                let mut slots = self.inner.slots(execution);
                let slot = slots.entry(execution.clone()).or_insert_with(new_slot);
                slot.settled.subscribe()
            };
            let state = match self.wait(execution).await {
                Ok(state) => state,
                Err(error) => break Err(error),
            };
            // Ended, or no such execution (an empty log): nothing more to wait for.
            if state.status().is_terminal() || state.next_seq() == 0 {
                break Ok(state);
            }
            if runs.changed().await.is_err() {
                break Err(WaitError::Fold(crate::store::FoldStoredError::Read(
                    crate::store::ReadError::Closed,
                )));
            }
        };
        // The slot this wait kept is dropped if nothing else needs it.
        self.inner.release_idle_slot(execution);
        ended
    }
}
