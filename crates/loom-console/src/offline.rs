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
//! A step in flight (started, no outcome) runs in no process here: the process that ran it
//! stopped (on PostgreSQL, a live worker's lease makes the append fail instead). A cancel, or
//! a verdict on that step, first records it in doubt, as recovery would for a non-idempotent
//! one (`loom.worker_stopped`); the log does not say whether the effect is idempotent, so an
//! idempotent one is put in doubt too, which asks an operator's word where recovery would have
//! run it again (issue 41, hole 12).
//!
//! A resume of one gate of a `first_of` closes the group's other gates in the same append, as
//! the runtime does: the group is recorded when it opens (`loom_kernel::first_of_closing`).
//!
//! What needs the flow code is refused with a message saying to use the admin API: a `retry`
//! verdict (it runs the effect again), and, in a log written before `first_of` groups were
//! recorded, a resume of a gate opened together with other pending gates (only the flow knows
//! whether they are one `first_of`, whose siblings the resume must close).

use loom_kernel::StepStatus;
use loom_kernel::{
    AppendError, Event, EventEnvelope, EventStore, EventStoreExt, ExecutionId, ExecutionState,
    Payload,
};
use loom_kernel::{
    EffectInDoubt, EffectResolved, ErrorInfo, ExecutionCancelled, ExecutionResumed, Verdict,
};

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
    open_state(id, store.fold(id).await?)
}

/// [`folded`], with the log it folds (read once).
async fn folded_log<S: EventStore>(
    store: &S,
    id: &ExecutionId,
) -> Result<(Vec<EventEnvelope>, ExecutionState), ConsoleError> {
    let log = store.read_all(id).await?;
    let state = ExecutionState::fold(&log).map_err(loom_kernel::FoldStoredError::from)?;
    Ok((log, open_state(id, state)?))
}

/// `state`, if its execution exists and has not ended.
fn open_state(id: &ExecutionId, state: ExecutionState) -> Result<ExecutionState, ConsoleError> {
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
    let stopped = match state.step(step_id).map(|record| record.status) {
        Some(StepStatus::Started { attempt, .. }) => Some(attempt),
        _ => None,
    };
    if stopped.is_none() && !state.steps_in_doubt().contains(step_id) {
        return Err(not_in_doubt(id, step_id, &state));
    }
    if matches!(verdict, Verdict::Retry) {
        return Err(ConsoleError::refused(format!(
            "a `retry` verdict runs effect '{}' again, which only the process that runs the flows can do: start it and resolve through its admin API (--admin URL --token TOKEN); nothing was recorded",
            state.step(step_id).map_or("?", |record| &record.effect)
        )));
    }
    let mut events = doubts_of_stopped_steps(&state, |step| step == step_id);
    events.push(Event::EffectResolved(EffectResolved {
        step_id: step_id.to_owned(),
        verdict,
        operator,
    }));
    append(store, id, &state, &events).await
}

/// The steps of `state` in flight that `which` names, put in doubt as recovery would put a
/// non-idempotent one (`loom.worker_stopped`), in step-id order: no process runs them (see the
/// module documentation).
fn doubts_of_stopped_steps(state: &ExecutionState, which: impl Fn(&str) -> bool) -> Vec<Event> {
    let mut stopped: Vec<(String, String, u32)> = state
        .steps()
        .into_iter()
        .filter(|(step_id, _)| which(step_id))
        .filter_map(|(step_id, record)| match record.status {
            StepStatus::Started { attempt, .. } => {
                Some((step_id.to_owned(), record.effect.to_string(), attempt))
            }
            _ => None,
        })
        .collect();
    stopped.sort();
    stopped
        .into_iter()
        .map(|(step_id, effect, attempt)| {
            Event::EffectInDoubt(EffectInDoubt {
                step_id,
                effect,
                attempt,
                reason: Some(ErrorInfo::new(
                    loom_kernel::codes::WORKER_STOPPED,
                    format!(
                        "the process running attempt {attempt} stopped before its outcome was recorded (recorded by an operator's offline write; the log does not say whether the effect is idempotent); the effect may or may not have run"
                    ),
                )),
            })
        })
        .collect()
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
    let (log, state) = folded_log(store, id).await?;
    let gate = state.gate_waiting_for(event_type, correlation_key);
    let Some((gate_id, gate)) = gate else {
        return Err(no_pending_gate(id, event_type, correlation_key, &state));
    };
    // A `first_of`'s note names its gates: the others are closed in the same append, as the
    // runtime does. A log without the note (from before it) cannot tell a `first_of` from
    // gates the flow joined, so gates opened together there are refused.
    let closing = loom_kernel::kit::first_of_closing(&log, &state, gate_id);
    if closing.is_none()
        && let Some(others) = opened_together(&state, gate.seq)
    {
        return Err(ConsoleError::refused(format!(
            "gate '{gate_id}' of execution {id} was opened together with {} (a first_of, whose first resume closes the others, or gates joined by the flow), in a log written before first_of groups were recorded: only the process that runs the flow knows which, so resume through its admin API (--admin URL --token TOKEN); nothing was recorded",
            others.join(", ")
        )));
    }
    let closed = closing.unwrap_or_default();
    // A deadline passed: the runtime times the gate out when it next runs, as a live resume
    // after it is refused as timed out. Recorded now, this resume would beat the deadline. A
    // group's deadline is on its first gate, which may be one of those closed.
    let mut gates = vec![gate.seq];
    for event in &closed {
        if let Event::ExecutionResumed(other) = event
            && let Some(pending) = state.pending_gates().get(&other.gate_id)
        {
            gates.push(pending.seq);
        }
    }
    for seq in gates {
        if let Some(deadline_ms) = gate_deadline(&log, seq)
            && crate::now_ms().is_some_and(|now| deadline_ms <= now)
        {
            return Err(ConsoleError::refused(format!(
                "gate '{gate_id}' of execution {id} timed out at {} UTC (its deadline passed): the runtime records the time-out when it next runs, and a resume now would beat it; nothing was recorded",
                crate::view::utc(deadline_ms)
            )));
        }
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
    let mut events = vec![Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate_id.clone(),
        event_type: event_type.to_owned(),
        correlation_key: correlation_key.to_owned(),
        payload,
    })];
    events.extend(closed);
    append(store, id, &state, &events).await
}

/// The deadline of the gate suspended at `seq` in `log`: the runtime records it as a
/// `loom.deadline` decision, under the gate's id, just before the gate's EXECUTION_SUSPENDED
/// (LD-009).
fn gate_deadline(log: &[EventEnvelope], seq: u64) -> Option<u64> {
    let at = usize::try_from(seq).ok()?;
    let Event::ExecutionSuspended(gate) = &log.get(at)?.event else {
        return None;
    };
    match &log.get(at.checked_sub(1)?)?.event {
        Event::DecisionRecorded(decision)
            if decision.kind == loom_kernel::kit::DEADLINE_KIND
                && decision.step_id == gate.gate_id =>
        {
            decision.value.to_value().get("deadlineMs")?.as_u64()
        }
        _ => None,
    }
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

/// Cancels `id`; the steps it has in flight are recorded in doubt first.
pub async fn cancel<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    reason: Option<String>,
) -> Result<(), ConsoleError> {
    let state = folded(store, id).await?;
    let children = awaited_children(&state);
    let mut events = doubts_of_stopped_steps(&state, |_| true);
    events.push(Event::ExecutionCancelled(ExecutionCancelled { reason }));
    append(store, id, &state, &events).await?;
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

/// As the runtime does when a parent ends while it waits for children: each is cancelled (the
/// steps it has in flight recorded in doubt first), and its own children after it (issue 41,
/// hole 6). Otherwise a child would stay parked, and once retention deleted the parent's log
/// nothing would ever cancel it. A child not started yet (no log) or ended already is left.
async fn cancel_children<S: EventStore>(
    store: &S,
    parent: &ExecutionId,
    children: Vec<ExecutionId>,
) -> Result<(), ConsoleError> {
    let mut pending: Vec<(ExecutionId, ExecutionId)> = children
        .into_iter()
        .map(|child| (parent.clone(), child))
        .collect();
    while let Some((parent, child)) = pending.pop() {
        let state = store.fold(&child).await?;
        if state.next_seq() == 0 || state.status().is_terminal() {
            continue;
        }
        let grandchildren = awaited_children(&state);
        let mut events = doubts_of_stopped_steps(&state, |_| true);
        events.push(Event::ExecutionCancelled(ExecutionCancelled {
            reason: Some(format!("parent {parent} ended")),
        }));
        append(store, &child, &state, &events).await?;
        pending.extend(grandchildren.into_iter().map(|next| (child.clone(), next)));
    }
    Ok(())
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
