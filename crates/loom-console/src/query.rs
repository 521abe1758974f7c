//! The operator's reads over any [`EventStore`]: listings by status (through the store's
//! status index), one execution in full, a log from a seq on, and the steps in doubt.

use futures::TryStreamExt;
use loom_kernel::DataClassification;
use loom_kernel::StepStatus;
use loom_kernel::{Event, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, StatusFilter};

use crate::error::ConsoleError;
use crate::view::{
    EventsPage, ExecutionView, InDoubtView, STATUSES, ShowView, event_view, state_view, status_name,
};

/// Which executions [`list_executions`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this status; every status when `None`.
    pub status: Option<ExecutionStatus>,
    /// Only executions of this flow.
    pub flow: Option<String>,
    /// At most this many (after the other filters); no limit when `None`.
    pub limit: Option<usize>,
}

/// Executions matching `filter`, in id order. Statuses come from the store's status index, so
/// no log is folded; each listed execution costs two one-event reads (its first and last).
pub async fn list_executions<S: EventStore>(
    store: &S,
    filter: &ListFilter,
) -> Result<Vec<ExecutionView>, ConsoleError> {
    let statuses: Vec<ExecutionStatus> = match filter.status {
        Some(status) => vec![status],
        None => STATUSES.to_vec(),
    };
    let mut found = Vec::new();
    for status in statuses {
        let mut listed = std::pin::pin!(store.executions_by_status(StatusFilter::Status(status)));
        while let Some(summary) = listed.try_next().await? {
            found.push((summary.id, summary.head, status));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut views = Vec::new();
    for (id, head, status) in found {
        if filter.limit.is_some_and(|limit| views.len() >= limit) {
            break;
        }
        let view = execution_view(store, &id, head, status).await?;
        if filter
            .flow
            .as_deref()
            .is_some_and(|flow| view.flow.as_deref() != Some(flow))
        {
            continue;
        }
        views.push(view);
    }
    Ok(views)
}

async fn execution_view<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    head: u64,
    status: ExecutionStatus,
) -> Result<ExecutionView, ConsoleError> {
    let first = store.read(id, 0, 1).await?.into_iter().next();
    let last = match head {
        0 | 1 => None,
        _ => store.read(id, head - 1, 1).await?.into_iter().next(),
    };
    let (flow, flow_version) = match first.as_ref().map(|envelope| &envelope.event) {
        Some(Event::ExecutionStarted(started)) => {
            (Some(started.flow.clone()), Some(started.flow_version))
        }
        _ => (None, None),
    };
    let started_at_ms = first.as_ref().and_then(|envelope| envelope.recorded_at_ms);
    Ok(ExecutionView {
        id: id.to_string(),
        status: status_name(status).to_owned(),
        flow,
        flow_version,
        events: head,
        started_at_ms,
        last_event_at_ms: last
            .as_ref()
            .map_or(started_at_ms, |envelope| envelope.recorded_at_ms),
    })
}

/// Parses an execution id given by a person or a URL.
pub fn execution_id(id: &str) -> Result<ExecutionId, ConsoleError> {
    Ok(ExecutionId::new(id)?)
}

/// One execution: its folded state, then its whole log, payloads masked.
pub async fn show<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    classification: &DataClassification,
) -> Result<ShowView, ConsoleError> {
    let log = store.read_all(id).await?;
    if log.is_empty() {
        return Err(ConsoleError::unknown_execution(id.as_str()));
    }
    let state = loom_kernel::ExecutionState::fold(&log).map_err(|error| {
        ConsoleError::internal(format!(
            "the log of execution {id} cannot be folded: {error}"
        ))
    })?;
    let head = state.next_seq();
    let execution = ExecutionView {
        id: id.to_string(),
        status: status_name(state.status()).to_owned(),
        flow: state.flow().map(|(name, _)| name.to_owned()),
        flow_version: state.flow().map(|(_, version)| version),
        events: head,
        started_at_ms: log.first().and_then(|envelope| envelope.recorded_at_ms),
        last_event_at_ms: log.last().and_then(|envelope| envelope.recorded_at_ms),
    };
    let mut state_view = state_view(&state);
    step_times(&mut state_view.steps, &log);
    crate::view::gate_requests(classification, &state, &log, &mut state_view.pending_gates);
    Ok(ShowView {
        execution,
        state: state_view,
        events: log
            .iter()
            .map(|envelope| event_view(classification, envelope))
            .collect(),
    })
}

/// Fills in when each step started and ended, from the log's `recordedAtMs` (for latency).
fn step_times(steps: &mut [crate::view::StepView], log: &[loom_kernel::EventEnvelope]) {
    let mut started = std::collections::BTreeMap::new();
    for envelope in log {
        if let Event::StepStarted(event) = &envelope.event {
            started
                .entry(event.step_id.as_str())
                .or_insert(envelope.recorded_at_ms);
        }
    }
    for step in steps {
        step.started_at_ms = started.get(step.step_id.as_str()).copied().flatten();
        if matches!(step.status.as_str(), "completed" | "failed") {
            step.ended_at_ms = usize::try_from(step.seq)
                .ok()
                .and_then(|seq| log.get(seq))
                .and_then(|envelope| envelope.recorded_at_ms);
        }
    }
}

/// Up to `limit` events of `id` from seq `from` on, payloads masked. An unknown execution is
/// an error.
pub async fn events_from<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    from: u64,
    limit: usize,
    classification: &DataClassification,
) -> Result<EventsPage, ConsoleError> {
    let head = store.head(id).await?;
    if head == 0 {
        return Err(ConsoleError::unknown_execution(id.as_str()));
    }
    let events = store.read(id, from, limit.max(1)).await?;
    let ended = match head {
        0 => false,
        _ => store
            .read(id, head - 1, 1)
            .await?
            .first()
            .is_some_and(|envelope| envelope.event.is_terminal()),
    };
    Ok(EventsPage {
        events: events
            .iter()
            .map(|envelope| event_view(classification, envelope))
            .collect(),
        head,
        ended,
    })
}

/// Every step in doubt, by execution id then step id, with how long it has waited (measured
/// against this machine's clock at `now_ms`). Executions come from the status index (only
/// those in doubt and those cancelled are folded): a cancel can leave a step in doubt, and
/// the operator must still learn that its effect may have happened.
pub async fn in_doubt<S: EventStore>(
    store: &S,
    now_ms: Option<u64>,
) -> Result<Vec<InDoubtView>, ConsoleError> {
    let mut views = Vec::new();
    for status in [ExecutionStatus::InDoubt, ExecutionStatus::Cancelled] {
        in_doubt_of(store, status, now_ms, &mut views).await?;
    }
    views.sort_by(|a, b| (&a.execution, &a.step_id).cmp(&(&b.execution, &b.step_id)));
    Ok(views)
}

async fn in_doubt_of<S: EventStore>(
    store: &S,
    status: ExecutionStatus,
    now_ms: Option<u64>,
    views: &mut Vec<InDoubtView>,
) -> Result<(), ConsoleError> {
    let mut listed = std::pin::pin!(store.executions_by_status(StatusFilter::Status(status)));
    while let Some(summary) = listed.try_next().await? {
        let id = summary.id;
        let state = match store.fold(&id).await {
            Ok(state) => state,
            Err(error) => {
                tracing::warn!(execution = %id, %error, "in-doubt listing skips an execution it cannot fold");
                continue;
            }
        };
        for step_id in state.steps_in_doubt() {
            let Some(record) = state.step(step_id) else {
                continue;
            };
            let StepStatus::InDoubt { attempt, seq } = record.status else {
                continue;
            };
            let envelope = store.read(&id, seq, 1).await?.into_iter().next();
            let since = envelope
                .as_ref()
                .and_then(|envelope| envelope.recorded_at_ms);
            let reason = match envelope.map(|envelope| envelope.event) {
                Some(Event::EffectInDoubt(event)) => event.reason,
                _ => None,
            };
            views.push(InDoubtView {
                execution: id.to_string(),
                step_id: step_id.clone(),
                effect: record.effect.to_string(),
                attempt,
                idempotency_key: loom_kernel::idempotency_key(&id, step_id),
                seq,
                in_doubt_since_ms: since,
                waiting_ms: since
                    .zip(now_ms)
                    .map(|(since, now)| now.saturating_sub(since)),
                reason,
                cancelled: state.status() == ExecutionStatus::Cancelled,
            });
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch on this machine, for "how long has it waited".
pub fn now_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|elapsed| u64::try_from(elapsed.as_millis()).ok())
}
