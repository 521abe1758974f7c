//! The driver: one task per active execution, the only writer of its log in this process.
//!
//! It replays the flow against the recorded history, then keeps polling it live:
//! 1. poll the flow; the commands it issued queue events and effects;
//! 2. start idempotent effects at once, and hold non-idempotent ones until their
//!    `STEP_STARTED` is durable (K9);
//! 3. append what is queued, one append in flight at a time, so everything that piles up while
//!    the disk is busy goes out in the next append;
//! 4. wait for an append, an effect, a message (resume, verdict, cancel) or the flow's waker.
//!
//! Idempotent effects may run before the events that led to them are durable: after a crash
//! they are simply run again with the same idempotency key. Anything a caller or an operator
//! can observe (a resume accepted, a verdict, the end of the execution, parking) waits until
//! the events behind it are durable. See `docs/decisions/LD-003-durability-barriers.md`.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::envelope::EventEnvelope;
use crate::event::*;
use crate::fold::ExecutionState;
use crate::hash::IdKey;
use crate::id::ExecutionId;
use crate::runtime::child_runs;
use crate::runtime::codes;
use crate::runtime::contain::{contain, contain_future};
use crate::runtime::ctx::ChildStart;
use crate::runtime::effect::{EffectOutcome, EffectResult};
use crate::runtime::errors::DriveError;
use crate::runtime::execution::Execution;
use crate::runtime::flow::FlowError;
use crate::runtime::history::History;
use crate::runtime::machine::Dispatch;
use crate::runtime::mailbox::{DriverReceiver, Exit, FlowWaker, NewExecution, Reply, refuse_ended};
use crate::runtime::markers::timed_out_gates;
use crate::runtime::slots::Inner;
use crate::runtime::slots::Launcher;
use crate::store::{AppendError, EventStore, EventStoreExt, FoldStoredError, LeaseHold};

mod kept;
mod run;

/// What the runtime's slots run for an execution (`slots.rs`): this module's driver, and the
/// delivery of a child's end to its parent once its driver saw it end.
pub(crate) fn launcher<S: EventStore>() -> Launcher<S> {
    Launcher {
        drive: |inner, execution, messages, new| {
            run::drive(inner, execution, messages, new).boxed()
        },
        ended: |inner, execution, state| child_runs::ended(inner, execution, state).boxed(),
    }
}

/// The flow's failure when it panicked.
pub(crate) fn flow_panicked(detail: &str) -> FlowError {
    FlowError::new(codes::FLOW_PANICKED, format!("the flow panicked: {detail}"))
}

/// An append in flight: its first seq, the head after it, and its events.
type Append = BoxFuture<'static, Result<(u64, u64, Vec<Event>), AppendError>>;

type Loaded = (ExecutionStarted, History, ExecutionState);

/// The recorded log of an execution that already exists, or how the driver should exit.
async fn load<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    messages: &mut DriverReceiver,
) -> Result<Result<Loaded, Exit>, DriveError> {
    let log = inner
        .store
        .read_all(execution)
        .await
        .map_err(|err| DriveError::Log {
            execution: execution.clone(),
            detail: err.to_string(),
        })?;
    if log.is_empty() {
        return Ok(Err(Exit::Unknown));
    }
    let state = ExecutionState::fold(&log).map_err(|err| DriveError::Log {
        execution: execution.clone(),
        detail: FoldStoredError::from(err).to_string(),
    })?;
    if state.status().is_terminal() {
        // A resume waiting for this driver is told if its gate timed out.
        if !messages.is_empty() {
            let timed_out = timed_out_gates(&log);
            while let Ok(message) = messages.try_recv() {
                inner.timers.forget(execution, &message);
                refuse_ended(execution, *message, &timed_out, state.steps_in_doubt());
            }
        }
        return Ok(Err(Exit::Ended(Box::new(state))));
    }
    let Some(Event::ExecutionStarted(started)) = log.first().map(|e| &e.event) else {
        return Err(DriveError::Log {
            execution: execution.clone(),
            detail: "the first event is not EXECUTION_STARTED".into(),
        });
    };
    let started = started.clone();
    let history = History::from_events(log.into_iter().map(|e| (e.seq, e.event)));
    Ok(Ok((started, history, state)))
}

/// What a dispatch came back with.
pub(crate) enum Ran {
    /// The handler ran (or was refused by its own checks) and ended so.
    Outcome(EffectOutcome),
    /// The handler was not called: this worker does not hold the execution's lease (or could
    /// not find out), and the step is left for the lease's holder.
    NotHeld(String),
}

/// Runs one dispatch. A non-idempotent one (its STEP_STARTED is durable here) first makes
/// sure this worker still holds the execution's lease, `head` being the durable head: a worker
/// paused past its lease must not call a handler another worker may already have run. The
/// check is the store's I/O, never the fold's. An idempotent one runs at once (running it
/// twice is harmless).
fn invoke<S: EventStore>(
    inner: &Arc<Inner<S>>,
    dispatch: Dispatch,
    head: u64,
) -> BoxFuture<'static, (IdKey, Ran)> {
    // Keys, not copies: short ids live inline, so a step's dispatch allocates no name.
    let step_id = IdKey::new(&dispatch.call.step_id);
    let effect = IdKey::new(&dispatch.call.effect);
    let span = tracing::debug_span!(
        "step",
        step = %dispatch.call.step_id,
        effect = %dispatch.call.effect,
        attempt = dispatch.call.attempt
    );
    let handler = dispatch.effect;
    let mut call = dispatch.call;
    if !dispatch.durable_before {
        inner.steps.started();
        let running = contain(|| handler.invoke(call));
        return Box::pin(tracing::Instrument::instrument(
            async move {
                let outcome = match running {
                    Ok(running) => contain_future(running).await,
                    Err(panic) => Err(panic),
                };
                let outcome =
                    outcome.unwrap_or_else(|panic| effect_panicked(effect.as_str(), true, &panic));
                log_step_outcome(&outcome);
                (step_id, Ran::Outcome(outcome))
            },
            span,
        ));
    }
    let store = Arc::clone(&inner.store);
    let inner = Arc::clone(inner);
    Box::pin(tracing::Instrument::instrument(
        async move {
            match store.hold_lease(&call.execution_id, head).await {
                Ok(LeaseHold::NotHeld) => {
                    tracing::warn!(
                        "the execution's lease is not this worker's; the effect is not invoked"
                    );
                    return (
                        step_id,
                        Ran::NotHeld("another worker holds its lease".into()),
                    );
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot confirm the execution's lease; the effect is not invoked");
                    return (
                        step_id,
                        Ran::NotHeld(format!("its lease could not be confirmed: {err}")),
                    );
                }
                Ok(hold) => call.lease_token = hold.token(),
            }
            inner.steps.started();
            let outcome = match contain(|| handler.invoke(call)) {
                Ok(running) => contain_future(running).await,
                Err(panic) => Err(panic),
            };
            let outcome =
                outcome.unwrap_or_else(|panic| effect_panicked(effect.as_str(), false, &panic));
            log_step_outcome(&outcome);
            (step_id, Ran::Outcome(outcome))
        },
        span,
    ))
}

/// The step's one line at debug, in its span: the span alone prints nothing (README, "Logs").
fn log_step_outcome(outcome: &EffectOutcome) {
    match &outcome.result {
        EffectResult::Completed(_) => tracing::debug!(cost = outcome.cost, "step completed"),
        EffectResult::Failed(error) => {
            tracing::debug!(code = %error.code, cost = outcome.cost, "step failed");
        }
        EffectResult::InDoubt(reason) => tracing::debug!(code = %reason.code, "step in doubt"),
    }
}

/// The outcome of an effect whose handler panicked: a failure if running it again is
/// harmless, in doubt if not (it may have done its work before panicking: K9).
fn effect_panicked(effect: &str, idempotent: bool, panic: &str) -> EffectOutcome {
    tracing::warn!(effect, "an effect panicked");
    let error = ErrorInfo::new(
        codes::EFFECT_PANICKED,
        format!("effect '{effect}' panicked: {panic}"),
    );
    if idempotent {
        EffectOutcome::failed(error)
    } else {
        EffectOutcome::in_doubt(error)
    }
}

/// The fold of what is durable, for a driver that stops with events not yet written: the log
/// read again (what `recover` will find), or, if it cannot be read, the fold of what was issued.
async fn durable_state<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    exec: &mut Execution,
) -> ExecutionState {
    let log = inner.store.read_all(execution).await;
    match log.ok().map(|log| ExecutionState::fold(&log)) {
        Some(Ok(state)) => state,
        _ => exec.take_fold(),
    }
}

/// Shows durable events to the projections (the flow's side folded them when it issued them).
fn publish<S: EventStore>(
    inner: &Inner<S>,
    execution: &ExecutionId,
    first: u64,
    events: Vec<Event>,
) {
    if inner.projections.is_empty() {
        return;
    }
    for (seq, event) in (first..).zip(events) {
        let envelope = EventEnvelope::new(execution.clone(), seq, event);
        for projection in inner.projections.iter() {
            // A projection cannot refuse a durable event; its panic is its own failure.
            if contain(|| projection.apply(&envelope)).is_err() {
                tracing::error!(
                    seq,
                    "a projection panicked on an event; it missed that event"
                );
            }
        }
    }
}

/// Starts a child whose gate is durable, on its own task (LD-015).
fn start_child<S: EventStore>(inner: &Arc<Inner<S>>, execution: &ExecutionId, start: ChildStart) {
    let (gate_id, spec) = start;
    inner.spawn(child_runs::ensure(
        Arc::clone(inner),
        execution.clone(),
        gate_id,
        spec,
    ));
}
