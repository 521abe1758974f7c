//! The operator's reads over any [`EventStore`]: listings by status (through the store's
//! status index), one execution in full, a log from a seq on, and the steps in doubt.

use futures::{StreamExt, TryStreamExt};
use loom_kernel::DataClassification;
use loom_kernel::StepStatus;
use loom_kernel::kit::{ExecutionCursor, ExecutionQuery, ListedExecution, StatusCounts};
use loom_kernel::{
    Event, EventEnvelope, EventStore, EventStoreExt, ExecutionId, ExecutionStatus, StatusFilter,
};
use serde::{Deserialize, Serialize};

use crate::error::ConsoleError;
use crate::view::{
    ChildView, EventsPage, ExecutionView, InDoubtView, LeaseView, OutcomeView, STATUSES, ShowView,
    event_view, state_view, status_name,
};

/// How many executions a listing shows when not told: a page, not the store.
pub const DEFAULT_LIST_LIMIT: usize = 50;
/// The most executions one page shows.
pub const MAX_LIST_LIMIT: usize = loom_kernel::kit::MAX_QUERY_LIMIT;

/// How many executions of a page have their last event read at once.
const VIEW_READS_AT_ONCE: usize = 16;

/// Which executions [`list_executions`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this status; every status when `None`.
    pub status: Option<ExecutionStatus>,
    /// Only executions of this flow.
    pub flow: Option<String>,
    /// At most this many (after the other filters), 1 to [`MAX_LIST_LIMIT`];
    /// [`DEFAULT_LIST_LIMIT`] when `None`. 0 is refused.
    pub limit: Option<usize>,
    /// The cursor: only executions listed after it (older, newest first), as a previous
    /// page's [`ExecutionList::next_before`] gives it. An execution id is taken too: the
    /// executions listed after that one.
    pub before: Option<String>,
    /// Only executions whose id starts with this.
    pub id_prefix: Option<String>,
    /// Only the children of this execution (ids `<parent>/...`).
    pub parent: Option<String>,
    /// Only executions started at or after this time (Unix ms).
    pub started_from_ms: Option<u64>,
    /// Only executions started before this time (Unix ms).
    pub started_before_ms: Option<u64>,
    /// Only executions that ended at or after this time (Unix ms).
    pub ended_from_ms: Option<u64>,
    /// Only executions that ended before this time (Unix ms).
    pub ended_before_ms: Option<u64>,
    /// Leave out the counts per status (and so the total): on PostgreSQL they cost a scan of
    /// the status index, far more than the page (`docs/PERFORMANCE.md`).
    pub without_counts: bool,
}

impl ListFilter {
    /// Whether a filter other than the status is set: then how many match in all is not
    /// known without reading every match.
    fn narrows_beyond_status(&self) -> bool {
        self.flow.is_some()
            || self.id_prefix.is_some()
            || self.parent.is_some()
            || self.started_from_ms.is_some()
            || self.started_before_ms.is_some()
            || self.ended_from_ms.is_some()
            || self.ended_before_ms.is_some()
    }
}

/// One page of executions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionList {
    /// The page: newest start first (ties by id, greatest first; executions started without
    /// a clock reading come last).
    pub executions: Vec<ExecutionView>,
    /// How many executions match, on every page together, when the store can tell at once:
    /// with no filter or a status filter alone. `None` with other filters.
    pub total: Option<u64>,
    /// How many matches come after this page, when known: on the first page when `total`
    /// is, and 0 on the last page.
    pub remaining: Option<u64>,
    /// Pass as `before` for the next page (an opaque cursor); `None` on the last page.
    pub next_before: Option<String>,
    /// How many executions each status holds in the store (status name -> count); `None`
    /// when left out ([`ListFilter::without_counts`]).
    pub counts: Option<std::collections::BTreeMap<String, u64>>,
}

/// Executions matching `filter`, newest start first, one page from the cursor on, from the
/// store's listing index ([`EventStore::query_executions`]) and its counts per status; each
/// execution shown that has not ended costs one more read (its last event, for its time).
pub async fn list_executions<S: EventStore>(
    store: &S,
    filter: &ListFilter,
) -> Result<ExecutionList, ConsoleError> {
    let limit = list_limit(filter.limit)?;
    let before = match filter.before.as_deref() {
        None => None,
        Some(text) => Some(match ExecutionCursor::decode(text) {
            Some(cursor) => cursor,
            None => cursor_of_id(store, text).await?,
        }),
    };
    let id_prefix = match (&filter.id_prefix, &filter.parent) {
        (Some(_), Some(_)) => {
            return Err(ConsoleError::bad_request(
                "give an id prefix or a parent, not both",
            ));
        }
        (Some(prefix), None) => Some(prefix.clone()),
        (None, Some(parent)) => Some(format!("{}/", execution_id(parent)?)),
        (None, None) => None,
    };
    let query = ExecutionQuery {
        status: filter.status,
        flow: filter.flow.clone(),
        id_prefix,
        started_from_ms: filter.started_from_ms,
        started_before_ms: filter.started_before_ms,
        ended_from_ms: filter.ended_from_ms,
        ended_before_ms: filter.ended_before_ms,
        before,
        limit,
    };
    let (page, counts) = if filter.without_counts {
        (store.query_executions(&query).await?, None)
    } else {
        let (page, counts) =
            futures::try_join!(store.query_executions(&query), store.count_by_status())?;
        (page, Some(counts))
    };
    let total = counts
        .filter(|_| !filter.narrows_beyond_status())
        .map(|counts| match filter.status {
            Some(status) => counts.get(status),
            None => counts.total(),
        });
    let shown = page.executions.len() as u64;
    let remaining = match (&page.next, &query.before, total) {
        (None, _, _) => Some(0),
        (Some(_), None, Some(total)) => Some(total.saturating_sub(shown)),
        _ => None,
    };
    // One read per execution not ended (its last event): a few at once, in page order. The
    // futures are made in a loop, not a closure, so that the handler's future stays `Send`.
    let mut reads = Vec::with_capacity(page.executions.len());
    for listed in &page.executions {
        reads.push(execution_view(store, listed));
    }
    let executions: Vec<ExecutionView> = futures::stream::iter(reads)
        .buffered(VIEW_READS_AT_ONCE)
        .try_collect()
        .await?;
    Ok(ExecutionList {
        executions,
        total,
        remaining,
        next_before: page.next.as_ref().map(ExecutionCursor::encode),
        counts: counts.map(|counts| counts_by_name(&counts)),
    })
}

/// The counts per status, by status name.
pub fn counts_by_name(counts: &StatusCounts) -> std::collections::BTreeMap<String, u64> {
    STATUSES
        .into_iter()
        .map(|status| (status_name(status).to_owned(), counts.get(status)))
        .collect()
}

/// How many executions each status holds, by name, and in all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CountsView {
    /// Status name -> count.
    pub counts: std::collections::BTreeMap<String, u64>,
    /// Every execution.
    pub total: u64,
}

/// The counts per status of `store`.
pub async fn execution_counts<S: EventStore>(store: &S) -> Result<CountsView, ConsoleError> {
    let counts = store.count_by_status().await?;
    Ok(CountsView {
        counts: counts_by_name(&counts),
        total: counts.total(),
    })
}

/// The cursor just past execution `id` (a `before` given as an id).
async fn cursor_of_id<S: EventStore>(store: &S, id: &str) -> Result<ExecutionCursor, ConsoleError> {
    let id = execution_id(id)?;
    let Some(started) = store.read(&id, 0, 1).await?.into_iter().next() else {
        return Err(ConsoleError::bad_request(format!(
            "no execution {id} to list before: pass the cursor a listing gave (nextBefore) or an id it showed"
        )));
    };
    Ok(ExecutionCursor {
        started_at_ms: started.recorded_at_ms.unwrap_or(0),
        id,
    })
}

/// A listing's page size: 1 to [`MAX_LIST_LIMIT`], [`DEFAULT_LIST_LIMIT`] when not given.
pub fn list_limit(limit: Option<usize>) -> Result<usize, ConsoleError> {
    match limit {
        None => Ok(DEFAULT_LIST_LIMIT),
        Some(limit) if (1..=MAX_LIST_LIMIT).contains(&limit) => Ok(limit),
        Some(limit) => Err(ConsoleError::bad_request(format!(
            "limit {limit} is out of range: list 1 to {MAX_LIST_LIMIT} executions a page"
        ))),
    }
}

async fn execution_view<S: EventStore>(
    store: &S,
    listed: &ListedExecution,
) -> Result<ExecutionView, ConsoleError> {
    let last_event_at_ms = match (listed.ended_at_ms, listed.head) {
        (Some(ended), _) => Some(ended),
        (None, 0 | 1) => listed.started_at_ms,
        (None, head) => store
            .read(&listed.id, head - 1, 1)
            .await?
            .into_iter()
            .next()
            .and_then(|envelope| envelope.recorded_at_ms),
    };
    Ok(ExecutionView {
        id: listed.id.to_string(),
        status: status_name(listed.status).to_owned(),
        flow: (!listed.flow.is_empty()).then(|| listed.flow.clone()),
        // Not in the listing index: `show` gives it.
        flow_version: None,
        events: listed.head,
        started_at_ms: listed.started_at_ms,
        last_event_at_ms,
        flow_not_registered: false,
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
        flow_not_registered: false,
    };
    let mut state_view = state_view(&state);
    step_times(&mut state_view.steps, &log);
    gate_times(&mut state_view.pending_gates, &log);
    crate::view::gate_requests(classification, &state, &log, &mut state_view.pending_gates);
    crate::expected::gate_expectations(&state, &log, &mut state_view.pending_gates);
    let outcome = outcome_view(store, id, &log, classification).await?;
    let lease = store.lease_info(id).await?.map(LeaseView::from);
    Ok(ShowView {
        execution,
        outcome,
        state: state_view,
        events: log
            .iter()
            .map(|envelope| event_view(classification, envelope))
            .collect(),
        lease,
    })
}

/// What the log says of one step's attempts and times.
#[derive(Debug, Default)]
struct StepTiming {
    attempt: Option<u32>,
    first_start: Option<u64>,
    started: bool,
    running: u64,
    /// The attempt running now: when it started (if the log has times).
    running_since: Option<Option<u64>>,
    in_doubt: u64,
    doubted: bool,
    /// The doubt open now: when it was recorded (if the log has times).
    doubt_since: Option<Option<u64>>,
}

impl StepTiming {
    fn saw_attempt(&mut self, attempt: u32) {
        self.attempt = Some(self.attempt.map_or(attempt, |seen| seen.max(attempt)));
    }

    fn end_run(&mut self, at: Option<u64>) {
        if let Some(since) = self.running_since.take()
            && let (Some(since), Some(at)) = (since, at)
        {
            self.running += at.saturating_sub(since);
        }
    }

    fn end_doubt(&mut self, at: Option<u64>) {
        if let Some(since) = self.doubt_since.take()
            && let (Some(since), Some(at)) = (since, at)
        {
            self.in_doubt += at.saturating_sub(since);
        }
    }
}

/// Fills in each step's last attempt and its times from the log's `recordedAtMs`: when it
/// started and ended, how long its attempts ran and how long it waited in doubt.
fn step_times(steps: &mut [crate::view::StepView], log: &[EventEnvelope]) {
    let mut timings: std::collections::BTreeMap<&str, StepTiming> =
        std::collections::BTreeMap::new();
    for envelope in log {
        let at = envelope.recorded_at_ms;
        match &envelope.event {
            Event::StepStarted(event) => {
                let timing = timings.entry(event.step_id.as_str()).or_default();
                timing.saw_attempt(event.attempt);
                if !timing.started {
                    timing.first_start = at;
                }
                timing.started = true;
                // A `retry` verdict's new attempt ends the doubt.
                timing.end_doubt(at);
                timing.running_since = Some(at);
            }
            Event::EffectInDoubt(event) => {
                let timing = timings.entry(event.step_id.as_str()).or_default();
                timing.saw_attempt(event.attempt);
                timing.end_run(at);
                timing.doubted = true;
                timing.doubt_since = Some(at);
            }
            Event::EffectResolved(event) => {
                timings
                    .entry(event.step_id.as_str())
                    .or_default()
                    .end_doubt(at);
            }
            Event::StepCompleted(loom_kernel::StepCompleted { step_id, .. })
            | Event::StepFailed(loom_kernel::StepFailed { step_id, .. }) => {
                let timing = timings.entry(step_id.as_str()).or_default();
                timing.end_run(at);
                timing.end_doubt(at);
            }
            _ => {}
        }
    }
    for step in steps {
        let timing = timings.remove(step.step_id.as_str()).unwrap_or_default();
        let ended = matches!(step.status.as_str(), "completed" | "failed");
        // A step recorded by its outcome alone (no STEP_STARTED) ran once.
        step.attempt = timing.attempt.or(step.attempt).or(ended.then_some(1));
        step.started_at_ms = timing.first_start;
        if ended {
            step.ended_at_ms = usize::try_from(step.seq)
                .ok()
                .and_then(|seq| log.get(seq))
                .and_then(|envelope| envelope.recorded_at_ms);
        }
        step.running_ms = timing.first_start.map(|_| timing.running);
        step.in_doubt_ms = timing.doubted.then_some(timing.in_doubt);
        step.in_doubt_since_ms = timing.doubt_since.flatten();
        if let (Some(start), Some(end)) = (step.started_at_ms, step.ended_at_ms) {
            let busy = timing.running.saturating_add(timing.in_doubt);
            step.waiting_ms = Some(end.saturating_sub(start).saturating_sub(busy));
        }
    }
}

/// When each pending gate opened, from its `EXECUTION_SUSPENDED`'s recorded time.
fn gate_times(gates: &mut [crate::view::GateView], log: &[EventEnvelope]) {
    for gate in gates {
        gate.opened_at_ms = usize::try_from(gate.seq)
            .ok()
            .and_then(|seq| log.get(seq))
            .and_then(|envelope| envelope.recorded_at_ms);
    }
}

/// What the execution was given and came to, its parent and its children, from its log (and
/// its parent's), payloads masked.
async fn outcome_view<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    log: &[EventEnvelope],
    classification: &DataClassification,
) -> Result<OutcomeView, ConsoleError> {
    let mut outcome = OutcomeView::default();
    let mut resumed = std::collections::BTreeSet::new();
    for envelope in log {
        match &envelope.event {
            Event::ExecutionStarted(started) => {
                outcome.input = Some(classification.mask_message_value(&started.input.to_value()));
            }
            Event::ExecutionCompleted(completed) => {
                outcome.output =
                    Some(classification.mask_message_value(&completed.output.to_value()));
            }
            Event::ExecutionFailed(failed) => outcome.failure = Some(failed.error.clone()),
            Event::ExecutionCancelled(cancelled) => {
                outcome.cancel_reason = cancelled.reason.clone();
            }
            Event::ExecutionSuspended(gate)
                if gate.event_type == loom_kernel::kit::CHILD_EVENT_TYPE =>
            {
                outcome.children.push(ChildView {
                    id: gate.correlation_key.clone(),
                    gate_id: gate.gate_id.clone(),
                    ended: false,
                });
            }
            Event::ExecutionResumed(resume) => {
                resumed.insert(resume.gate_id.as_str());
            }
            _ => {}
        }
    }
    for child in &mut outcome.children {
        child.ended = resumed.contains(child.gate_id.as_str());
    }
    outcome.parent = parent_of(store, id).await?;
    Ok(outcome)
}

/// The parent of a child execution (`<parent>/<flow>#<n>`, LD-015), if the parent's log
/// has the gate that waits for it: an id of that form a user chose has no parent.
async fn parent_of<S: EventStore>(
    store: &S,
    id: &ExecutionId,
) -> Result<Option<String>, ConsoleError> {
    let Some((parent, rest)) = id.as_str().rsplit_once('/') else {
        return Ok(None);
    };
    let is_child_form = rest.rsplit_once('#').is_some_and(|(flow, n)| {
        !flow.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    });
    let Ok(parent) = ExecutionId::new(parent) else {
        return Ok(None);
    };
    if !is_child_form {
        return Ok(None);
    }
    let waits = store.read_all(&parent).await?.iter().any(|envelope| {
        matches!(&envelope.event, Event::ExecutionSuspended(gate)
            if gate.event_type == loom_kernel::kit::CHILD_EVENT_TYPE
                && gate.correlation_key == id.as_str())
    });
    Ok(waits.then(|| parent.to_string()))
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
/// against this machine's clock at `now_ms`). Executions come from the store's index of those
/// with a step in doubt (`StatusFilter::StepsInDoubt`), ended ones included: a cancel, or a
/// flow that returned while the effect ran, can leave a step in doubt, and the operator must
/// still learn that its effect may have happened.
pub async fn in_doubt<S: EventStore>(
    store: &S,
    now_ms: Option<u64>,
) -> Result<Vec<InDoubtView>, ConsoleError> {
    let mut views = Vec::new();
    let mut pages = FoldedPages::new(store, StatusFilter::StepsInDoubt);
    while let Some(page) = pages.next().await? {
        for (id, log, state) in page {
            // Each doubt's time and reason from its EFFECT_INDOUBT.
            in_doubt_views(store, &id, &log, &state, now_ms, &mut views).await?;
        }
    }
    views.sort_by(|a, b| (&a.execution, &a.step_id).cmp(&(&b.execution, &b.step_id)));
    Ok(views)
}

/// How many executions a listing of steps lists, and reads the logs of, at a time.
const LISTED_PAGE: usize = 256;

/// An execution listed, with its log and its fold.
type Folded = (
    ExecutionId,
    Vec<loom_kernel::EventEnvelope>,
    loom_kernel::ExecutionState,
);

/// The executions `filter` lists, a page at a time, each with its log (a page's logs read in
/// one go) and its fold. One that cannot be read or folded is left out, logged ([`folded`]).
struct FoldedPages<'a, S> {
    store: &'a S,
    filter: StatusFilter,
    /// Where the next page starts; `None` once the last was read.
    after: Option<Option<ExecutionId>>,
}

impl<'a, S: EventStore> FoldedPages<'a, S> {
    fn new(store: &'a S, filter: StatusFilter) -> Self {
        Self {
            store,
            filter,
            after: Some(None),
        }
    }

    async fn next(&mut self) -> Result<Option<Vec<Folded>>, ConsoleError> {
        let Some(after) = self.after.take() else {
            return Ok(None);
        };
        let page = self
            .store
            .list_by_status(self.filter, after.as_ref(), LISTED_PAGE)
            .await?;
        self.after = page.next.map(Some);
        let ids: Vec<ExecutionId> = page.executions.into_iter().map(|s| s.id).collect();
        let folded = self
            .store
            .read_listed_logs(ids)
            .await
            .into_iter()
            .filter_map(|(id, log)| {
                let (log, state) = folded(&id, log)?;
                Some((id, log, state))
            })
            .collect();
        Ok(Some(folded))
    }
}

/// The views of the steps in doubt of `id`, added to `views`.
async fn in_doubt_views<S: EventStore>(
    store: &S,
    id: &ExecutionId,
    log: &[loom_kernel::EventEnvelope],
    state: &loom_kernel::ExecutionState,
    now_ms: Option<u64>,
    views: &mut Vec<InDoubtView>,
) -> Result<(), ConsoleError> {
    let lease = match state.steps_in_doubt().is_empty() {
        true => None,
        false => store.lease_info(id).await?.map(LeaseView::from),
    };
    for step_id in state.steps_in_doubt() {
        let Some(record) = state.step(step_id) else {
            continue;
        };
        let StepStatus::InDoubt { attempt, seq } = record.status else {
            continue;
        };
        let envelope = usize::try_from(seq)
            .ok()
            .and_then(|at| log.get(at))
            .cloned();
        let since = envelope
            .as_ref()
            .and_then(|envelope| envelope.recorded_at_ms);
        let reason = match envelope.map(|envelope| envelope.event) {
            Some(Event::EffectInDoubt(event)) => event.reason,
            _ => None,
        };
        views.push(InDoubtView {
            reason,
            cancelled: state.status() == ExecutionStatus::Cancelled,
            ended: state.status().is_terminal(),
            lease: lease.clone(),
            ..step_view(id, step_id, &record.effect, attempt, seq, since, now_ms)
        });
    }
    Ok(())
}

/// The steps in flight of the executions that need driving, for a store no process runs (a
/// store file the `loom` CLI holds): each was running when the process that ran it stopped (a
/// shutdown or a crash mid-effect), and is listed marked `stopped`, with how long ago it started
/// (issue 41, hole 12). Read from the index of executions that need driving.
pub async fn stopped_steps<S: EventStore>(
    store: &S,
    now_ms: Option<u64>,
) -> Result<Vec<InDoubtView>, ConsoleError> {
    let mut views = Vec::new();
    let mut pages = FoldedPages::new(store, StatusFilter::NeedsDriving);
    while let Some(page) = pages.next().await? {
        for (id, log, state) in &page {
            stopped_views(id, log, state, now_ms, &mut views);
        }
    }
    Ok(views)
}

/// The views of the steps in flight of `id`, marked `stopped`, added to `views`.
fn stopped_views(
    id: &ExecutionId,
    log: &[loom_kernel::EventEnvelope],
    state: &loom_kernel::ExecutionState,
    now_ms: Option<u64>,
    views: &mut Vec<InDoubtView>,
) {
    for (step_id, record) in state.steps() {
        let StepStatus::Started { attempt, seq } = record.status else {
            continue;
        };
        let since = usize::try_from(seq)
            .ok()
            .and_then(|at| log.get(at))
            .and_then(|envelope| envelope.recorded_at_ms);
        views.push(InDoubtView {
            stopped: true,
            ..step_view(id, step_id, &record.effect, attempt, seq, since, now_ms)
        });
    }
}

/// A listed execution's log, read, and its fold; `None`, logged, for one that could not be
/// read or folded: a listing skips it and shows the others.
fn folded(
    id: &ExecutionId,
    log: Result<Vec<loom_kernel::EventEnvelope>, loom_kernel::ReadError>,
) -> Option<(Vec<loom_kernel::EventEnvelope>, loom_kernel::ExecutionState)> {
    let folded = match log {
        Ok(log) => loom_kernel::ExecutionState::fold(&log)
            .map(|state| (log, state))
            .map_err(loom_kernel::FoldStoredError::from),
        Err(error) => Err(error.into()),
    };
    folded
        .inspect_err(|error| {
            tracing::warn!(execution = %id, %error, "a listing of steps skips an execution it cannot fold");
        })
        .ok()
}

/// A listed step, waiting since `since` as of `now_ms`: neither ended nor stopped, with no
/// reason nor lease (the callers set what they know).
fn step_view(
    id: &ExecutionId,
    step_id: &str,
    effect: &str,
    attempt: u32,
    seq: u64,
    since: Option<u64>,
    now_ms: Option<u64>,
) -> InDoubtView {
    InDoubtView {
        execution: id.to_string(),
        step_id: step_id.to_owned(),
        effect: effect.to_owned(),
        attempt,
        idempotency_key: loom_kernel::idempotency_key(id, step_id),
        seq,
        in_doubt_since_ms: since,
        waiting_ms: since
            .zip(now_ms)
            .map(|(since, now)| now.saturating_sub(since)),
        reason: None,
        cancelled: false,
        ended: false,
        stopped: false,
        lease: None,
    }
}

/// Milliseconds since the Unix epoch on this machine, for "how long has it waited".
pub fn now_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|elapsed| u64::try_from(elapsed.as_millis()).ok())
}
