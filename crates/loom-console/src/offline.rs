//! Verdicts, resumes and cancels on a store that no process runs flows on (the `loom` CLI with
//! `--store` when the file is free), or on PostgreSQL (where the append's lease and fence keep
//! it safe beside running workers). See `docs/decisions/LD-011-operator-admin-api.md`.
//!
//! Without the flow code, the console records exactly the one event the kernel's driver would
//! record for the request, and only when the fold says the driver would accept it:
//! `EFFECT_RESOLVED` for a step in doubt (a `completed` or `failed` verdict), `EXECUTION_RESUMED`
//! for a pending gate, `EXECUTION_CANCELLED` for an execution with no step in flight. The
//! append is fenced by the expected seq and checked by the store's fold, so a log that moved
//! meanwhile is not written. The process that runs the flows drives the execution on when it
//! next starts (`Runtime::recover`), replaying the recorded verdict or resume.
//!
//! What needs the flow code is refused with a message saying to use the admin API: a `retry`
//! verdict (it runs the effect again), a cancel while steps are in flight (only the effect's
//! definition says whether the cut-off attempt must be recorded in doubt), and a resume of a
//! gate opened together with other pending gates (only the flow knows whether they are one
//! `first_of`, whose siblings the resume must close).

use loom_kernel::StepStatus;
use loom_kernel::{
    AppendError, Event, EventStore, EventStoreExt, ExecutionId, ExecutionState, Payload,
};
use loom_kernel::{EffectResolved, ExecutionCancelled, ExecutionResumed, Verdict};

use crate::error::ConsoleError;
use crate::view::status_name;

/// What to say after a write on PostgreSQL.
pub const GOES_ON_WHEN_RECOVERED_POSTGRES: &str = "recorded; the execution goes on when a worker next recovers it (Runtime::recover); to have a running worker drive it at once, go through its admin API (--admin)";

/// What to say after an offline write.
pub const GOES_ON_WHEN_RECOVERED: &str = "recorded; the execution goes on when the process that runs its flow next starts (Runtime::recover drives it)";

async fn folded<S: EventStore>(
    store: &S,
    id: &ExecutionId,
) -> Result<ExecutionState, ConsoleError> {
    let state = store.fold(id).await?;
    if state.next_seq() == 0 {
        return Err(ConsoleError::unknown_execution(id.as_str()));
    }
    if state.status().is_terminal() {
        return Err(ConsoleError::refused(format!(
            "execution {id} has already ended ({}); nothing was recorded",
            status_name(state.status())
        )));
    }
    Ok(state)
}

async fn append<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    state: &ExecutionState,
    events: &[Event],
) -> Result<(), ConsoleError> {
    match store.append(id, state.next_seq(), events).await {
        Ok(_) => Ok(()),
        Err(AppendError::Conflict { .. }) => Err(ConsoleError::refused(format!(
            "the log of execution {id} moved while this was recorded (another writer), or on PostgreSQL a running worker drives it (then go through its admin API, --admin): nothing was recorded; look at it again with `loom show {id}`"
        ))),
        Err(AppendError::Invalid { violation, .. }) => Err(ConsoleError::refused(format!(
            "the store refused the event for execution {id}: {violation}; nothing was recorded"
        ))),
        Err(AppendError::Closed) => Err(ConsoleError::unavailable(
            "the store was opened read-only or is closed; nothing was recorded",
        )),
        Err(error) => Err(ConsoleError::internal(format!(
            "cannot record on execution {id}: {error}"
        ))),
    }
}

/// Records an operator's verdict on step `step_id`, which must be in doubt.
pub async fn resolve<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    step_id: &str,
    verdict: Verdict,
    operator: Option<String>,
) -> Result<(), ConsoleError> {
    let state = match folded(store, id).await {
        Err(error) if error.kind == crate::error::ErrorKind::Refused => {
            // As `Runtime::resolve`: a step a cancel left in doubt is named, not denied.
            let state = store.fold(id).await?;
            if state.steps_in_doubt().contains(step_id) {
                return Err(ConsoleError::refused(format!(
                    "step '{step_id}' of execution {id} was in doubt when the execution was cancelled: its log is closed and no verdict can be recorded; the effect may have happened, so settle it with the receiver under idempotency key '{}'",
                    loom_kernel::idempotency_key(id, step_id)
                )));
            }
            return Err(error);
        }
        other => other?,
    };
    if !state.steps_in_doubt().contains(step_id) {
        return Err(not_in_doubt(id, step_id, &state));
    }
    if matches!(verdict, Verdict::Retry) {
        return Err(ConsoleError::refused(format!(
            "a `retry` verdict runs effect '{}' again, which only the process that runs the flows can do: start it and resolve through its admin API (--admin URL --token TOKEN); nothing was recorded",
            state.step(step_id).map_or("?", |record| &record.effect)
        )));
    }
    let event = Event::EffectResolved(EffectResolved {
        step_id: step_id.to_owned(),
        verdict,
        operator,
    });
    append(store, id, &state, &[event]).await
}

/// Why a step is not in doubt, said with what it is.
pub fn not_in_doubt(id: &ExecutionId, step_id: &str, state: &ExecutionState) -> ConsoleError {
    let status = match state.step(step_id).map(|record| record.status) {
        None => "no such step".to_owned(),
        Some(StepStatus::Completed { seq }) => format!("completed at seq {seq}"),
        Some(StepStatus::Failed { seq }) => format!("failed at seq {seq}"),
        Some(StepStatus::Started { attempt, .. }) => format!("attempt {attempt} is running"),
        Some(_) => "not in doubt".to_owned(),
    };
    ConsoleError::refused(format!(
        "step '{step_id}' of execution {id} is not in doubt ({status}); nothing was recorded. If it was listed in doubt, that list is stale: the step was settled since (by another operator, or a worker that took the execution over). List the steps in doubt again with `loom in-doubt` and look at this one with `loom show {id}`"
    ))
}

/// Resumes the pending gate of `id` that waits for (`event_type`, `correlation_key`), the one
/// opened first if several do.
pub async fn resume<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    event_type: &str,
    correlation_key: &str,
    payload: Payload,
) -> Result<(), ConsoleError> {
    // As `Runtime::resume`: a timer's or a child's gate (`loom.` types) and the runtime's
    // markers are the runtime's to record.
    if event_type.starts_with("loom.") {
        return Err(ConsoleError::refused(format!(
            "gates of type '{event_type}' belong to the runtime (a timer's, a child's); execution {id} cannot be resumed on one; nothing was recorded"
        )));
    }
    if matches!(payload.to_value(), serde_json::Value::Object(map)
        if map.len() == 1 && map.keys().all(|key| key.starts_with("loom.")))
    {
        return Err(ConsoleError::refused(format!(
            "a resume payload of execution {id} may not be a runtime marker (an object whose only key starts with 'loom.'); nothing was recorded"
        )));
    }
    let state = folded(store, id).await?;
    let gate = state.gate_waiting_for(event_type, correlation_key);
    let Some((gate_id, gate)) = gate else {
        return Err(no_pending_gate(id, event_type, correlation_key, &state));
    };
    if let Some(others) = opened_together(&state, gate.seq) {
        return Err(ConsoleError::refused(format!(
            "gate '{gate_id}' of execution {id} was opened together with {} (a first_of, whose first resume closes the others, or gates joined by the flow): only the process that runs the flow knows which, so resume through its admin API (--admin URL --token TOKEN); nothing was recorded",
            others.join(", ")
        )));
    }
    // A deadline passed: the runtime times the gate out when it next runs, as a live resume
    // after it is refused as timed out. Recorded now, this resume would beat the deadline.
    if let Some(deadline_ms) = gate_deadline(store, id, gate_id, gate.seq).await?
        && crate::now_ms().is_some_and(|now| deadline_ms <= now)
    {
        return Err(ConsoleError::refused(format!(
            "gate '{gate_id}' of execution {id} timed out at {} UTC (its deadline passed): the runtime records the time-out when it next runs, and a resume now would beat it; nothing was recorded",
            crate::view::utc(deadline_ms)
        )));
    }
    // What the gate declared it expects (LD-031), checked before anything is recorded.
    crate::expected::check_resume(
        store,
        id,
        &state,
        event_type,
        correlation_key,
        &payload.to_value(),
    )
    .await?;
    let event = Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate_id.clone(),
        event_type: event_type.to_owned(),
        correlation_key: correlation_key.to_owned(),
        payload,
    });
    append(store, id, &state, &[event]).await
}

/// The deadline gate `gate_id` (suspended at `seq`) was opened with: the runtime records it as
/// a `loom.deadline` decision just before the gate's EXECUTION_SUSPENDED (LD-009).
async fn gate_deadline<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    gate_id: &str,
    seq: u64,
) -> Result<Option<u64>, ConsoleError> {
    let Some(before) = seq.checked_sub(1) else {
        return Ok(None);
    };
    let read = store.read(id, before, 1).await?;
    Ok(read.first().and_then(|envelope| match &envelope.event {
        Event::DecisionRecorded(decision)
            if decision.kind == loom_kernel::kit::DEADLINE_KIND && decision.step_id == gate_id =>
        {
            decision.value.to_value().get("deadlineMs")?.as_u64()
        }
        _ => None,
    }))
}

/// The other pending gates opened in the same batch as the gate at `seq`: gates recorded
/// at consecutive seqs, all still pending. The log does not say whether they are the gates of
/// one `first_of` (whose first resume must close the others in the same batch, as the driver
/// does) or gates the flow joined (each resumed on its own); resuming one without the flow
/// could leave a `first_of` with two winners or a sibling open forever, so such a gate is
/// refused here. `None` when the gate was opened alone.
fn opened_together(state: &ExecutionState, seq: u64) -> Option<Vec<String>> {
    let by_seq: std::collections::BTreeMap<u64, &str> = state
        .pending_gates()
        .iter()
        .map(|(id, gate)| (gate.seq, id.as_str()))
        .collect();
    let mut others = Vec::new();
    let mut before = seq;
    while let Some(previous) = before.checked_sub(1)
        && let Some(other) = by_seq.get(&previous)
    {
        others.push(format!("'{other}'"));
        before = previous;
    }
    let mut after = seq + 1;
    while let Some(other) = by_seq.get(&after) {
        others.push(format!("'{other}'"));
        after += 1;
    }
    others.sort();
    (!others.is_empty()).then_some(others)
}

/// Why a resume matched no gate, with the gates that are pending.
pub fn no_pending_gate(
    id: &ExecutionId,
    event_type: &str,
    correlation_key: &str,
    state: &ExecutionState,
) -> ConsoleError {
    let pending: Vec<String> = state
        .pending_gates()
        .values()
        .map(|gate| format!("({}, key '{}')", gate.event_type, gate.correlation_key))
        .collect();
    let pending = match pending.is_empty() {
        true => "no gate is pending".to_owned(),
        false => format!("pending: {}", pending.join(", ")),
    };
    ConsoleError::refused(format!(
        "execution {id} has no pending gate for ({event_type}, key '{correlation_key}') ({pending}); nothing was recorded"
    ))
}

/// Cancels `id`, which must have no step in flight.
pub async fn cancel<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    reason: Option<String>,
) -> Result<(), ConsoleError> {
    let state = folded(store, id).await?;
    if state.steps_in_flight() > 0 {
        let running: Vec<String> = state
            .steps()
            .into_iter()
            .filter(|(_, record)| matches!(record.status, StepStatus::Started { .. }))
            .map(|(step_id, _)| format!("'{step_id}'"))
            .collect();
        return Err(ConsoleError::refused(format!(
            "execution {id} has steps in flight ({}): a worker stopped while they ran, and only the process that runs the flows knows which of them must be recorded in doubt. Start it and cancel through its admin API (--admin URL --token TOKEN); nothing was recorded",
            running.join(", ")
        )));
    }
    let children = awaited_children(&state);
    let event = Event::ExecutionCancelled(ExecutionCancelled { reason });
    append(store, id, &state, &[event]).await?;
    tell_parent(store, id).await?;
    cancel_children(store, id, children).await
}

/// The children `state` waits for (its pending child gates, keyed by the child's id).
fn awaited_children(state: &ExecutionState) -> Vec<ExecutionId> {
    state
        .pending_gates()
        .values()
        .filter(|gate| &*gate.event_type == loom_kernel::kit::CHILD_EVENT_TYPE)
        .filter_map(|gate| ExecutionId::from_stored(&gate.correlation_key).ok())
        .collect()
}

/// As the runtime does when a parent ends while it waits for children: each is cancelled, and
/// its own children after it (issue 41, hole 6). Otherwise a child would stay parked, and once
/// retention deleted the parent's log nothing would ever cancel it. A child not started yet
/// (no log) or ended already is left; one with steps in flight is refused as its own cancel
/// would be, and the error names it.
async fn cancel_children<S: EventStore>(
    store: &S,
    parent: &ExecutionId,
    children: Vec<ExecutionId>,
) -> Result<(), ConsoleError> {
    let mut pending: Vec<(ExecutionId, ExecutionId)> = children
        .into_iter()
        .map(|child| (parent.clone(), child))
        .collect();
    let mut refused = Vec::new();
    while let Some((parent, child)) = pending.pop() {
        let state = store.fold(&child).await?;
        if state.next_seq() == 0 || state.status().is_terminal() {
            continue;
        }
        if state.steps_in_flight() > 0 {
            refused.push(child.to_string());
            continue;
        }
        let grandchildren = awaited_children(&state);
        let event = Event::ExecutionCancelled(ExecutionCancelled {
            reason: Some(format!("parent {parent} ended")),
        });
        append(store, &child, &state, &[event]).await?;
        pending.extend(grandchildren.into_iter().map(|next| (child.clone(), next)));
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(ConsoleError::refused(format!(
            "execution {parent} was cancelled, but its children {} have steps in flight and were not: cancel them through the admin API of the process that runs the flows (its recover() cancels them too), and do not purge {parent} before",
            refused.join(", ")
        )))
    }
}

/// As the runtime does when a child ends: the parent waiting for `child` has its child gate
/// resumed with the child's end. Otherwise the parent would still wait, and once retention
/// deleted the child's log, `recover` would take the gate for a child never started and start
/// it again.
async fn tell_parent<S: EventStore>(store: &S, child: &ExecutionId) -> Result<(), ConsoleError> {
    let Some(parent) = loom_kernel::kit::child_parent(child) else {
        return Ok(());
    };
    let child_state = store.fold(child).await?;
    let parent_state = store.fold(&parent).await?;
    let Some(event) = loom_kernel::kit::child_end_resume(child, &child_state, &parent_state) else {
        return Ok(());
    };
    append(store, &parent, &parent_state, &[event])
        .await
        .map_err(|error| {
            ConsoleError::new(
                error.kind,
                format!(
                    "execution {child} was cancelled, but its parent {parent} could not be told: {}; run the process that runs the flows (Runtime::recover tells it) before purging {child}",
                    error.message
                ),
            )
        })
}
