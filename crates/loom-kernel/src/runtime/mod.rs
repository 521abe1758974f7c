//! The runtime: starts flows, drives them live, replays them after a crash, resumes their
//! gates, and stops them.
//!
//! One driver task per active execution is its only writer in this process (`driver/`);
//! several processes on one store are fenced by the store's expected-seq check. A driver
//! exits when its execution ends or parks (waits only for resumes or verdicts); a resume,
//! verdict or cancel starts a new one, which goes on from the parked flow the last one kept in
//! memory (`keep.rs`, LD-020) or, if none is kept, replays the log first.
//!
//! # Time
//! `ctx.sleep`, `ctx.sleep_until`, `ctx.suspend_with_timeout` and `ctx.first_of` (with a
//! timeout) record a deadline before the gate that waits for it; one task per runtime serves every pending deadline from one ordered
//! index, and `recover` arms them again from the logs (`timers.rs`, LD-009). A caller cannot
//! resume a timer, and a resume after a gate's deadline is refused with
//! [`ResumeError::TimedOut`].
//!
//! # Children and versions
//! `ctx.child` starts a flow as a child execution (`<parent>/<flow>#<n>`) once the parent's
//! `loom.child` decision and gate are durable, and the child's end resumes that gate; a parent
//! that ends cancels the children it waits for, and `recover` mends what a crash left between
//! the two logs (`children.rs`, LD-015). `ctx.patched` lets new code run under recorded
//! executions (`ctx/patched.rs`, LD-017).
//!
//! # Resumes that arrive early
//! A resume is matched against the gates the flow has opened *so far*; one that matches no
//! pending gate is refused with [`ResumeError::NoPendingGate`] and nothing is recorded. Loom
//! does not buffer early resumes: a buffer that is not in the log would be lost in a crash, and
//! one in the log would be an event the kernel does not have. A sender that can race its own
//! gate should retry; see `docs/decisions/LD-004-early-resumes-are-refused.md`.
//!
//! # Recovery and shutdown
//! `recover` lists, through the store's status index, the executions that need a driver and the
//! parked ones whose deadlines it arms again: ended executions cost nothing. `shutdown` refuses
//! new work, lets each driver's append in flight finish, and joins every task the runtime
//! spawned (LD-014).

mod authorize;
mod builder;
mod caller;
mod catchup;
mod child_runs;
mod children;
pub mod codes;
mod contain;
mod ctx;
mod deadlines;
mod digest;
mod driver;
mod effect;
mod errors;
mod execution;
mod expected;
mod flow;
mod handle;
mod history;
mod keep;
#[cfg(test)]
mod layering;
mod machine;
mod mailbox;
pub(crate) mod markers;
mod offline;
mod options;
mod parked;
mod plugin;
mod recent;
mod recovery;
mod replay;
mod requests;
mod slots;
#[cfg(test)]
mod slots_released;
mod start;
mod stats;
mod timers;
mod wait_ended;
mod wakeups;

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::oneshot;

pub use builder::RuntimeBuilder;
pub use caller::{
    AsyncResumeAuthenticator, Authorization, Caller, CallerError, MAX_CALLER_ATTRIBUTES,
    MAX_CALLER_TEXT, ResumeAuthenticator, ResumeRequest, StartRequest,
};
pub use catchup::{CatchUpError, FeedFollower, FeedProjection, FollowError, catch_up};
pub use children::{CHILD_EVENT_TYPE, CHILD_KEY, CHILD_KIND, child_end_resume, child_parent};
pub use ctx::ExecuteTarget;
pub use ctx::{ChildCall, PATCH_KIND};
pub use ctx::{Command, FirstOf, FlowCtx, GateOutcome, Selected, StepError, StepName, TimedGate};
pub use digest::{input_digest, stable_hash};
pub use effect::{Effect, EffectCall, EffectOutcome, EffectResult, FnEffect};
pub use errors::DriveError;
pub use errors::{
    CancelError, CompositionError, InboundError, ResolveError, ResumeError, StartError, WaitError,
};
pub(crate) use errors::{DRIVER_STOPPED, DriverFailure};
pub use expected::{PAYLOAD_SCHEMA_KIND, expected_payload, payload_schema_step_id};
pub use flow::{Flow, FlowError, FlowSet, FnFlow, flow_fn};
pub use handle::{DeclaredEffect, EffectHandle, TypedCommand, UsesEffects};
pub use history::NonDeterminism;
pub use keep::DEFAULT_MAX_PARKED_IN_MEMORY;
pub use offline::{OfflineRefusal, OfflineWrite, offline_cancel, offline_resolve, offline_resume};
pub use options::StartOptions;
pub use plugin::{AbiRange, Contributions, Inbound, InboundHandler, Plugin, Projection};
pub use recovery::{RecoveryReport, SkippedExecution, UnregisteredFlow};
pub use replay::{ReplayError, ReplayReport, Replayer};
pub use requests::{
    PendingRequest, REQUEST_KIND, pending_requests, pending_requests_of, request_gate_id,
    request_step_id,
};
pub use stats::RuntimeStats;
pub use timers::{
    CLOSED_KEY, Clock, DEADLINE_KIND, ManualClock, SystemClock, TIMED_OUT_KEY, TIMER_EVENT_TYPE,
};

use crate::event::Verdict;

use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::store::{EventStore, EventStoreExt, FoldStoredError, StatusFilter};
use mailbox::DriverMsg;
use slots::Inner;

/// Runs flows on a store. Cheap to clone.
pub struct Runtime<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Runtime<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> std::fmt::Debug for Runtime<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("flows", &self.inner.flows.keys().collect::<Vec<_>>())
            .field("effects", &self.inner.effects.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<S: EventStore> RuntimeBuilder<S> {
    /// Checks the composition and builds the runtime. Must be called within a tokio runtime
    /// when executions are then started or recovered.
    pub fn build(self) -> Result<Runtime<S>, CompositionError> {
        Ok(Runtime {
            inner: Arc::new(self.compose()?),
        })
    }
}

impl<S: EventStore> Runtime<S> {
    /// Starts composing a runtime on `store`.
    ///
    /// ```
    /// use loom_kernel::MemoryStore;
    /// use loom_kernel::{FlowCtx, FlowError, Runtime, flow_fn};
    ///
    /// async fn greet(_ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    ///     Ok(format!("hello, {name}"))
    /// }
    ///
    /// let runtime = Runtime::builder(MemoryStore::new())
    ///     .flow(flow_fn("greet", 1, greet))
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(store: S) -> RuntimeBuilder<S> {
        RuntimeBuilder::new(store)
    }

    /// Shuts the runtime down, in this order:
    /// 1. it stops accepting work: `start`, `resume`, `resolve` and `cancel` (on this runtime
    ///    and every clone of it) are refused with their `ShutDown` error, and `recover` does
    ///    nothing;
    /// 2. each driver lets its append in flight become durable (and answers the callers that
    ///    waited for it), then exits; what it had not appended, and the effects it was
    ///    running, are left in the log's terms, for `recover` to drive on, as after a crash
    ///    but with no append cut short;
    /// 3. it joins every driver task and the timer task.
    ///
    /// Once it returns, no task of the runtime holds the store: dropping this runtime (the
    /// last clone of it) releases the store, so a `DiskStore` file can be opened again at
    /// once by the same process. Calling it again (on a clone) is harmless: it waits for the
    /// same tasks. Dropping the returned future before it completes aborts the tasks not
    /// joined yet. See `docs/decisions/LD-014-shutdown-waits-for-appends-not-effects.md`.
    pub async fn shutdown(self) {
        let _one_at_a_time = self.inner.shutting.lock().await;
        if !self.inner.stop.send_replace(true) {
            tracing::info!("runtime shutting down");
        }
        self.inner.timers.close();
        // Kept parked flows stop with the drivers: the next process replays them.
        self.inner.kept.clear();
        loop {
            let mut tasks = std::mem::take(&mut *self.inner.tasks());
            if tasks.is_empty() {
                break;
            }
            while let Some(joined) = tasks.join_next().await {
                if let Err(error) = joined
                    && error.is_panic()
                {
                    tracing::error!(%error, "a runtime task panicked while shutting down");
                }
            }
        }
        tracing::debug!("runtime shut down: every task joined");
    }

    /// Whether [`Runtime::shutdown`] was called on this runtime or a clone of it.
    pub fn is_shut_down(&self) -> bool {
        self.inner.stopping()
    }

    /// How many deadlines (timers, gates with a timeout) this runtime holds armed.
    pub fn pending_timers(&self) -> usize {
        self.inner.timers.pending()
    }

    /// The store the runtime writes to.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The flows registered with this runtime, by name then version: what `start` accepts,
    /// and the input schema each declares ([`Flow::input_schema`]).
    ///
    /// ```
    /// use loom_kernel::{FlowCtx, FlowError, MemoryStore, Runtime, flow_fn};
    /// use serde_json::json;
    ///
    /// async fn greet(_ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    ///     Ok(format!("hello, {name}"))
    /// }
    ///
    /// let loom = Runtime::builder(MemoryStore::new())
    ///     .flow(flow_fn("greet", 1, greet).with_input_schema(json!({"type": "string"})))
    ///     .flow(flow_fn("greet", 2, greet))
    ///     .build()?;
    /// let flows: Vec<_> = loom
    ///     .registered_flows()
    ///     .map(|flow| (flow.name().to_owned(), flow.version(), flow.input_schema().cloned()))
    ///     .collect();
    /// assert_eq!(
    ///     flows,
    ///     [("greet".into(), 1, Some(json!({"type": "string"}))), ("greet".into(), 2, None)]
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn registered_flows(&self) -> impl Iterator<Item = &dyn Flow> {
        self.inner.flows.values().map(|flow| flow.as_ref())
    }

    /// What this runtime has counted of its steps since it was built (effects invoked, step
    /// outcomes made durable), for an operator's metrics. The store's own figures are
    /// [`EventStore::stats`].
    pub fn stats(&self) -> RuntimeStats {
        self.inner.steps.snapshot()
    }

    /// Starts `flow` with `input`. Returns once `EXECUTION_STARTED` is durable; the flow then
    /// runs on its own task. Until then the flow runs on the caller's task, so a short flow is
    /// often finished when `start` returns; if the caller drops `start`'s future early, the
    /// execution is left for `recover` (or the next resume) to drive on.
    ///
    /// Starting is idempotent on the execution id: if the execution exists, started by the
    /// same flow (and version, when `options` names one) with the same input, capabilities and
    /// budget, `start` returns its id and runs nothing; if it exists with another flow, input,
    /// capabilities or budget, `start` is refused with [`StartError::Conflict`] and runs
    /// nothing. This holds for starts one after another,
    /// concurrent ones, and starts on several runtimes over one store: no effect of a new
    /// execution runs before its `EXECUTION_STARTED` is durable.
    ///
    /// It holds as long as the log exists. Once retention has deleted an ended execution
    /// (`EventStore::delete_ended`, `loom purge`), nothing of it is kept: a `start` of its id
    /// is a new execution, which runs the flow again, and its steps get the same idempotency
    /// keys (`executionId:stepId`) as the deleted one's. Only a receiver that still remembers
    /// those keys (K9.1) keeps an effect from happening twice; keep ended executions at least
    /// as long as a caller may repeat a start, or choose ids that are never started again.
    ///
    /// ```
    /// use loom_kernel::{FlowCtx, FlowError, Runtime, StartError, StartOptions, flow_fn};
    /// use loom_kernel::{ExecutionId, ExecutionStatus, MemoryStore};
    ///
    /// async fn greet(_ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    ///     Ok(format!("hello, {name}"))
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let loom = Runtime::builder(MemoryStore::new())
    ///     .flow(flow_fn("greet", 1, greet))
    ///     .build()?;
    /// let id = ExecutionId::new("greet-ada")?;
    /// loom.start("greet", "ada", StartOptions::new(id.clone())).await?;
    /// let state = loom.wait(&id).await?;
    /// assert_eq!(state.status(), ExecutionStatus::Completed);
    /// assert_eq!(state.output().unwrap().decode::<String>()?, "hello, ada");
    ///
    /// // The same start again returns the execution; the flow does not run again.
    /// assert_eq!(loom.start("greet", "ada", StartOptions::new(id.clone())).await?, id);
    /// // Another input for the same id is refused, and says so.
    /// let refused = loom.start("greet", "bob", StartOptions::new(id.clone())).await;
    /// assert!(matches!(refused, Err(StartError::Conflict { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn start<I: Serialize + ?Sized>(
        &self,
        flow: &str,
        input: &I,
        options: StartOptions,
    ) -> Result<ExecutionId, StartError> {
        let input = serde_json::to_value(input)
            .map(|value| Payload::from_value(&value))
            .map_err(|err| err.to_string());
        self.inner.start(flow, input, options).await
    }

    /// Resumes the pending gate of `execution` that waits for `event_type` and
    /// `correlation_key`. Returns once `EXECUTION_RESUMED` is durable.
    ///
    /// ```
    /// use loom_kernel::{FlowCtx, FlowError, ResumeError, Runtime, StartOptions, flow_fn};
    /// use loom_kernel::{ExecutionId, ExecutionStatus, MemoryStore, Payload};
    /// use serde_json::{Value, json};
    ///
    /// async fn approve(ctx: FlowCtx, _input: Value) -> Result<Value, FlowError> {
    ///     let answer = ctx.suspend("Approval", "order-42").await?; // parks here
    ///     Ok(answer.to_value())
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let loom = Runtime::builder(MemoryStore::new())
    ///     .flow(flow_fn("approve", 1, approve))
    ///     .build()?;
    /// let id = ExecutionId::new("order-42")?;
    /// loom.start("approve", &json!({}), StartOptions::new(id.clone())).await?;
    /// let parked = loom.wait(&id).await?;
    /// assert_eq!(parked.status(), ExecutionStatus::Suspended);
    /// assert_eq!(parked.pending_gates().len(), 1);
    ///
    /// // A resume that matches no pending gate is refused, and nothing is recorded.
    /// let wrong = loom.resume(&id, "Approval", "order-7", Payload::from(json!("yes"))).await;
    /// assert!(matches!(wrong, Err(ResumeError::NoPendingGate { .. })));
    ///
    /// loom.resume(&id, "Approval", "order-42", Payload::from(json!("yes"))).await?;
    /// let done = loom.wait(&id).await?;
    /// assert_eq!(done.output().map(Payload::to_value), Some(json!("yes")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn resume(
        &self,
        execution: &ExecutionId,
        event_type: &str,
        correlation_key: &str,
        payload: Payload,
    ) -> Result<(), ResumeError> {
        self.resume_as(
            &Caller::anonymous(),
            execution,
            event_type,
            correlation_key,
            payload,
        )
        .await
    }

    /// [`Runtime::resume`] on behalf of `caller`, whom the application has identified
    /// (LD-019): the resume authenticator (K12.2) sees the caller with the request, and may take
    /// its time to decide; a refusal ([`ResumeError::Unauthorized`]) records nothing.
    pub async fn resume_as(
        &self,
        caller: &Caller,
        execution: &ExecutionId,
        event_type: &str,
        correlation_key: &str,
        payload: Payload,
    ) -> Result<(), ResumeError> {
        if self.inner.stopping() {
            return Err(ResumeError::ShutDown);
        }
        if markers::is_reserved_event_type(event_type) {
            return Err(ResumeError::ReservedGate {
                execution: execution.clone(),
                event_type: event_type.to_owned(),
            });
        }
        if markers::is_reserved_payload(&payload) {
            return Err(ResumeError::ReservedPayload {
                execution: execution.clone(),
            });
        }
        let approved_gate = self
            .approved_gate(execution, event_type, correlation_key)
            .await;
        let request = ResumeRequest {
            caller,
            execution,
            event_type,
            correlation_key,
            payload: &payload,
        };
        self.authorize_resume(request)
            .await
            .map_err(|reason| ResumeError::Unauthorized {
                execution: execution.clone(),
                reason,
            })?;
        let (reply, answer) = oneshot::channel();
        self.inner.send(
            execution,
            DriverMsg::Resume(mailbox::ResumeMsg {
                event_type: event_type.to_owned(),
                correlation_key: correlation_key.to_owned(),
                payload,
                gate_id: approved_gate,
                reply,
            }),
        );
        answer.await.unwrap_or_else(|_| {
            Err(DriverFailure::driver(
                execution.clone(),
                DRIVER_STOPPED.into(),
            ))
        })
    }

    /// Records an operator's verdict on a step in doubt (K9) and drives the flow on.
    pub async fn resolve(
        &self,
        execution: &ExecutionId,
        step_id: &str,
        verdict: Verdict,
        operator: Option<String>,
    ) -> Result<(), ResolveError> {
        if self.inner.stopping() {
            return Err(ResolveError::ShutDown);
        }
        let (reply, answer) = oneshot::channel();
        self.inner.send(
            execution,
            DriverMsg::Resolve(mailbox::ResolveMsg {
                step_id: step_id.to_owned(),
                verdict,
                operator,
                reply,
            }),
        );
        answer.await.unwrap_or_else(|_| {
            Err(DriverFailure::driver(
                execution.clone(),
                DRIVER_STOPPED.into(),
            ))
        })
    }

    /// Cancels an execution: records `EXECUTION_CANCELLED` and drops its running effects.
    pub async fn cancel(
        &self,
        execution: &ExecutionId,
        reason: Option<String>,
    ) -> Result<(), CancelError> {
        self.inner.cancel(execution, reason).await
    }

    /// Finds every execution that has not ended and is not parked, and drives it on by
    /// replay; arms again the recorded deadlines of parked executions. Call once at start-up.
    /// Returns how many it started. An execution whose log cannot be read or folded is
    /// skipped (and logged), never blocking the others; see [`Runtime::recover_report`] for
    /// which.
    ///
    /// It lists the executions that need driving through the store's status index
    /// ([`EventStore::list_by_status`]), and what parked executions need through its wake-up
    /// index ([`EventStore::list_wakeups`], LD-033): the parent-child links open now, the
    /// deadlines due within the next minute now and later ones as their time comes. Ended
    /// executions are never read, and a parked one only when something is due: its cost is in
    /// proportion to the work pending, not to the executions parked or the history stored.
    pub async fn recover(&self) -> Result<usize, FoldStoredError> {
        Ok(self.recover_report().await?.started)
    }

    /// [`Runtime::recover`], reporting the executions it skipped and why. Fails only when the
    /// store cannot list its executions. After [`Runtime::shutdown`] it does nothing.
    pub async fn recover_report(&self) -> Result<RecoveryReport, FoldStoredError> {
        use futures::TryStreamExt;
        let mut report = RecoveryReport::default();
        if self.inner.stopping() {
            tracing::warn!("recovery asked of a runtime that is shut down; nothing is started");
            return Ok(report);
        }
        let store = &self.inner.store;
        // First the executions a worker must drive on (running, or parked with a step in
        // flight); then, from the wake-up index, what the parked ones need (LD-033): their
        // child links now, their deadlines a window at a time. No other parked log is read.
        let mut seen = std::collections::BTreeSet::new();
        let mut listed = std::pin::pin!(store.executions_by_status(StatusFilter::NeedsDriving));
        while let Some(summary) = listed.try_next().await? {
            if !seen.insert(summary.id.clone()) {
                continue;
            }
            // A child whose parent ended while waiting for it is cancelled (LD-015).
            if child_runs::recover_child(&self.inner, &summary.id).await {
                report.started += 1;
                continue;
            }
            match store.fold(&summary.id).await {
                Ok(state) if state.needs_driving() => {
                    // A flow no build of this runtime has: a driver would fail at once, and
                    // the execution would look running forever with nothing said.
                    if let Some((flow, version)) = state.flow()
                        && !self.inner.flows.contains_key(&(flow.to_owned(), version))
                    {
                        tracing::warn!(
                            execution = %summary.id,
                            flow,
                            version,
                            "recovery leaves an execution whose flow this runtime does not register: it stays running until a runtime that registers flow '{flow}' version {version} recovers it"
                        );
                        report.unregistered.push(recovery::UnregisteredFlow {
                            execution: summary.id.clone(),
                            flow: flow.to_owned(),
                            version,
                        });
                        continue;
                    }
                    // On a store with leases, only the worker that holds the lease (or
                    // takes it now, from a worker that stopped) replays and runs effects.
                    if store.has_leases() && !self.claim(&summary.id, state.next_seq()).await {
                        report.elsewhere += 1;
                        continue;
                    }
                    self.inner.ensure_driver(&summary.id);
                    report.started += 1;
                }
                // Parked or ended after all (it changed since the listing): the index has
                // what a parked one needs.
                Ok(_) => {
                    seen.remove(&summary.id);
                }
                Err(error) => {
                    tracing::error!(execution = %summary.id, %error, "recovery skips an execution it cannot fold");
                    report.skipped.push(SkippedExecution {
                        execution: summary.id,
                        error,
                    });
                }
            }
        }
        let links = wakeups::recover_links(&self.inner, &seen, &mut report).await?;
        report.timers = wakeups::arm_deadlines(&self.inner, links).await?;
        report
            .skipped
            .sort_by(|a, b| a.execution.as_str().cmp(b.execution.as_str()));
        report
            .unregistered
            .sort_by(|a, b| a.execution.as_str().cmp(b.execution.as_str()));
        tracing::info!(
            recovered = report.started,
            timers = report.timers,
            skipped = report.skipped.len(),
            elsewhere = report.elsewhere,
            unregistered = report.unregistered.len(),
            "recovery started drivers"
        );
        Ok(report)
    }

    /// Whether this worker holds (or now took) `execution`'s lease, its log being at `head`.
    async fn claim(&self, execution: &ExecutionId, head: u64) -> bool {
        deadlines::claim(&*self.inner.store, execution, head).await
    }

    /// Replays a recorded log against the registered flow, running no effect and writing
    /// nothing, and reports whether the flow issues exactly the recorded commands.
    pub fn replay_log(
        &self,
        log: Vec<crate::envelope::EventEnvelope>,
    ) -> Result<ReplayReport, ReplayError> {
        replay::replay_log((&*self.inner).into(), log, None)
    }

    /// [`Runtime::replay_log`] for a log the caller has folded already (`folded` is that
    /// fold), so it is not folded again: the replay goes on from it, extending it as the flow
    /// issues its commands again, so it is taken, not borrowed.
    pub fn replay_folded_log(
        &self,
        log: Vec<crate::envelope::EventEnvelope>,
        folded: ExecutionState,
    ) -> Result<ReplayReport, ReplayError> {
        replay::replay_log((&*self.inner).into(), log, Some(folded))
    }

    /// The execution's state, folded from its log.
    pub async fn state(&self, execution: &ExecutionId) -> Result<ExecutionState, FoldStoredError> {
        self.inner.store.fold(execution).await
    }

    /// Waits until no driver runs for `execution` (it ended, parked, or its driver failed)
    /// and returns its state. A driver failure (non-determinism, store error) is returned as
    /// an error.
    pub async fn wait(&self, execution: &ExecutionId) -> Result<ExecutionState, WaitError> {
        let (mut settled, last_known) = {
            let slots = self.inner.slots(execution);
            match slots.get(execution) {
                // No slot: no driver runs; the state its last one left, if it is still kept.
                None => (None, self.inner.recent().take(execution)),
                Some(slot) => {
                    let receiver = slot.settled.subscribe();
                    // A closed sender is a driver that is gone without settling (its task was
                    // dropped): nothing will publish for it.
                    if slot.driver.as_ref().is_none_or(|sender| sender.is_closed()) {
                        let settled = receiver.borrow();
                        if let Some(error) = settled.error.clone() {
                            return Err(WaitError::Driver(error));
                        }
                        (None, settled.state.as_deref().cloned())
                    } else {
                        // Read under the lock the driver takes to publish its end, so that end
                        // cannot slip between this read and the wait.
                        let runs = receiver.borrow().runs;
                        (Some((receiver, runs)), None)
                    }
                }
            }
        };
        if let Some((mut receiver, runs)) = settled.take() {
            let outcome = receiver
                .wait_for(|settled| settled.runs > runs)
                .await
                .map(|settled| (settled.error.clone(), settled.state.as_deref().cloned()));
            // Let go of the slot before asking whether it is still needed.
            drop(receiver);
            self.inner.release_idle_slot(execution);
            match outcome {
                Ok((Some(error), _)) => return Err(WaitError::Driver(error)),
                Ok((None, Some(state))) => return Ok(state),
                _ => {}
            }
        }
        // A state a driver left, or the one a flow parked in memory carries (LD-020), is the
        // log's fold as long as the log has not grown since (or been deleted): one head read
        // and a copy instead of reading and folding the whole log.
        let known = match last_known {
            Some(state) => Some(state),
            None => self.inner.kept.state(execution),
        };
        if let Some(state) = known
            && self.inner.store.head(execution).await? == state.next_seq()
        {
            return Ok(state);
        }
        Ok(self.inner.store.fold(execution).await?)
    }

    /// Runs the inbound handler `name` on `message` and performs what it asks.
    pub async fn inbound(
        &self,
        name: &str,
        message: &serde_json::Value,
    ) -> Result<Inbound, InboundError> {
        self.inbound_as(&Caller::anonymous(), name, message).await
    }

    /// [`Runtime::inbound`] on behalf of `caller`, whom the application has identified (the
    /// message itself is not trusted to say): the handler sees the caller
    /// ([`InboundHandler::handle_from`]), and the resume or start it asks for is decided by
    /// the resume authenticator for that caller (LD-019).
    pub async fn inbound_as(
        &self,
        caller: &Caller,
        name: &str,
        message: &serde_json::Value,
    ) -> Result<Inbound, InboundError> {
        let handler = self
            .inner
            .inbound
            .get(name)
            .ok_or_else(|| InboundError::UnknownHandler(name.to_owned()))?;
        let action = contain::contain(|| handler.handle_from(caller, message))
            .map_err(InboundError::HandlerPanicked)?
            .map_err(InboundError::Refused)?;
        if let Inbound::Resume {
            execution,
            event_type,
            correlation_key,
            payload,
        } = &action
        {
            self.resume_as(
                caller,
                execution,
                event_type,
                correlation_key,
                payload.clone(),
            )
            .await?;
        }
        if let Inbound::Start {
            flow,
            input,
            options,
        } = &action
        {
            self.inbound_start(caller, flow, input, options).await?;
        }
        Ok(action)
    }
}
