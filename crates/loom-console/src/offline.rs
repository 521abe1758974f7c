//! Verdicts, resumes and cancels on a store that no process runs flows on (the `loom` CLI with
//! `--store` when the file is free), or on PostgreSQL (where the append's lease and fence keep
//! it safe beside running workers). See `docs/decisions/LD-011-operator-admin-api.md`.
//!
//! Without the flow code, the console asks the execution's machine, taken up from the log
//! alone (`loom_kernel::kit::offline_resume`, `offline_resolve`, `offline_cancel`): it decides
//! exactly what the kernel's driver would record for the request, or refuses it, and the
//! console appends that at the head it read. The append is fenced by the expected seq and
//! checked by the store's fold, so a log that moved meanwhile is not written. The process that
//! runs the flows drives the execution on when it next starts (`Runtime::recover`), replaying
//! the recorded verdict or resume.
//!
//! A step in flight (started, no outcome) runs in no process here: the process that ran it
//! stopped (on PostgreSQL, a live worker's lease makes the append fail instead). A cancel, or
//! a verdict on that step, first records it in doubt, as recovery would for a non-idempotent
//! one (`loom.worker_stopped`); the log does not say whether the effect is idempotent, so an
//! idempotent one is put in doubt too, which asks an operator's word where recovery would have
//! run it again (issue 41, hole 12).
//!
//! A resume of one gate of a `first_of` closes the group's other gates in the same append, as
//! the runtime does: the group is recorded when it opens. A gate whose deadline has passed is
//! refused as timed out: the runtime records the time-out when it next runs.
//!
//! What needs the flow code is refused with a message saying to use the admin API: a `retry`
//! verdict (it runs the effect again), and, in a log written before `first_of` groups were
//! recorded, a resume of a gate opened together with other pending gates (only the flow knows
//! whether they are one `first_of`, whose siblings the resume must close).

use loom_kernel::kit::{OfflineRefusal, OfflineWrite};
use loom_kernel::{
    AppendError, CancelError, EventEnvelope, EventStore, EventStoreExt, ExecutionId,
    ExecutionState, Payload, ResolveError, ResumeError, StepStatus, Verdict,
};

use crate::error::ConsoleError;
use crate::view::status_name;

/// What to say after a write on PostgreSQL.
pub const GOES_ON_WHEN_RECOVERED_POSTGRES: &str = "recorded; the execution goes on when a worker next recovers it (Runtime::recover); to have a running worker drive it at once, go through its admin API (--admin)";

/// What to say after an offline write.
pub const GOES_ON_WHEN_RECOVERED: &str = "recorded; the execution goes on when the process that runs its flow next starts (Runtime::recover drives it)";

/// The log of `id` and its fold (read once): the machine decides on the log, the messages
/// say what the fold holds.
async fn read_log<S: EventStore>(
    store: &S,
    id: &ExecutionId,
) -> Result<(Vec<EventEnvelope>, ExecutionState), ConsoleError> {
    let log = store.read_all(id).await?;
    let state = ExecutionState::fold(&log).map_err(loom_kernel::FoldStoredError::from)?;
    Ok((log, state))
}

/// Appends what the machine decided, at the head it read.
async fn append<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    write: &OfflineWrite,
) -> Result<(), ConsoleError> {
    if write.events.is_empty() {
        return Ok(());
    }
    match store.append(id, write.expected, &write.events).await {
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

/// What the operator is told when the machine refuses: the refusal, said with what the log
/// holds.
fn refused(id: &ExecutionId, refusal: OfflineRefusal, state: &ExecutionState) -> ConsoleError {
    match refusal {
        OfflineRefusal::UnknownExecution { .. } => ConsoleError::unknown_execution(id.as_str()),
        OfflineRefusal::Log { detail, .. } => {
            ConsoleError::internal(format!("cannot read the log of execution {id}: {detail}"))
        }
        OfflineRefusal::Ended { status, .. } => ConsoleError::refused(format!(
            "execution {id} has already ended ({}); nothing was recorded",
            status_name(status)
        )),
        OfflineRefusal::Resume(ResumeError::ReservedGate { event_type, .. }) => {
            ConsoleError::refused(format!(
                "gates of type '{event_type}' belong to the runtime (a timer's, a child's); execution {id} cannot be resumed on one; nothing was recorded"
            ))
        }
        OfflineRefusal::Resume(ResumeError::ReservedPayload { .. }) => {
            ConsoleError::refused(format!(
                "a resume payload of execution {id} may not be a runtime marker (an object whose only key starts with 'loom.'); nothing was recorded"
            ))
        }
        OfflineRefusal::Resume(ResumeError::TimedOut {
            event_type,
            correlation_key,
            ..
        }) => ConsoleError::refused(format!(
            "the gate of execution {id} for ({event_type}, key '{correlation_key}') timed out (its deadline passed first); nothing was recorded"
        )),
        OfflineRefusal::Resume(ResumeError::NoPendingGate {
            event_type,
            correlation_key,
            ..
        }) => no_pending_gate(id, &event_type, &correlation_key, state),
        OfflineRefusal::TimedOut {
            gate_id,
            deadline_ms,
            ..
        } => ConsoleError::refused(format!(
            "gate '{gate_id}' of execution {id} timed out at {} UTC (its deadline passed): the runtime records the time-out when it next runs, and a resume now would beat it; nothing was recorded",
            crate::view::utc(deadline_ms)
        )),
        OfflineRefusal::GroupUnknown {
            gate_id, others, ..
        } => {
            let others: Vec<String> = others.iter().map(|other| format!("'{other}'")).collect();
            ConsoleError::refused(format!(
                "gate '{gate_id}' of execution {id} was opened together with {} (a first_of, whose first resume closes the others, or gates joined by the flow), in a log written before first_of groups were recorded: only the process that runs the flow knows which, so resume through its admin API (--admin URL --token TOKEN); nothing was recorded",
                others.join(", ")
            ))
        }
        OfflineRefusal::Resolve(ResolveError::NotInDoubt { step_id, .. }) => {
            not_in_doubt(id, &step_id, state)
        }
        OfflineRefusal::RetryNeedsRuntime { effect, .. } => ConsoleError::refused(format!(
            "a `retry` verdict runs effect '{effect}' again, which only the process that runs the flows can do: start it and resolve through its admin API (--admin URL --token TOKEN); nothing was recorded"
        )),
        OfflineRefusal::Cancel(CancelError::Ended { .. }) => ConsoleError::refused(format!(
            "execution {id} has already ended ({}); nothing was recorded",
            status_name(state.status())
        )),
        other => ConsoleError::refused(format!("{other}; nothing was recorded")),
    }
}

/// Records an operator's verdict on step `step_id`, which must be in doubt (or in flight in
/// no process: it is recorded in doubt first).
pub async fn resolve<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    step_id: &str,
    verdict: Verdict,
    operator: Option<String>,
) -> Result<(), ConsoleError> {
    let (log, state) = read_log(store, id).await?;
    match loom_kernel::kit::offline_resolve(id, &log, step_id, verdict, operator) {
        Ok(write) => append(store, id, &write).await,
        // As `Runtime::resolve`: a step a cancel left in doubt is named, not denied.
        Err(OfflineRefusal::Ended { steps_in_doubt, .. }) if steps_in_doubt.contains(step_id) => {
            Err(ConsoleError::refused(format!(
                "step '{step_id}' of execution {id} was in doubt when the execution was cancelled: its log is closed and no verdict can be recorded; the effect may have happened, so settle it with the receiver under idempotency key '{}'",
                loom_kernel::idempotency_key(id, step_id)
            )))
        }
        Err(refusal) => Err(refused(id, refusal, &state)),
    }
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
    let (log, state) = read_log(store, id).await?;
    let now = crate::now_ms().unwrap_or(0);
    let value = payload.to_value();
    let write =
        loom_kernel::kit::offline_resume(id, &log, event_type, correlation_key, payload, now)
            .map_err(|refusal| refused(id, refusal, &state))?;
    // What the gate declared it expects (LD-031), checked before anything is recorded.
    crate::expected::check_resume(store, id, &state, event_type, correlation_key, &value).await?;
    append(store, id, &write).await
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
    let (log, state) = read_log(store, id).await?;
    let write = loom_kernel::kit::offline_cancel(id, &log, reason)
        .map_err(|refusal| refused(id, refusal, &state))?;
    append(store, id, &write).await?;
    tell_parent(store, id).await?;
    cancel_children(store, id, awaited_children(&state)).await
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
        let (log, state) = read_log(store, &child).await?;
        if state.next_seq() == 0 || state.status().is_terminal() {
            continue;
        }
        let reason = Some(format!("parent {parent} ended"));
        let write = loom_kernel::kit::offline_cancel(&child, &log, reason)
            .map_err(|refusal| refused(&child, refusal, &state))?;
        append(store, &child, &write).await?;
        let grandchildren = awaited_children(&state);
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
    let write = OfflineWrite {
        expected: parent_state.next_seq(),
        events: vec![event],
    };
    append(store, &parent, &write)
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
