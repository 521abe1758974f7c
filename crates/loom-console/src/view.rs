//! What the console shows: executions, their folded state, their events and the steps in
//! doubt, as serializable views. The admin API answers with them, the CLI prints them, and
//! every payload in them is masked (K10-R6) before it leaves.

use loom_kernel::DataClassification;
use loom_kernel::{ErrorInfo, Event, EventEnvelope, ExecutionStatus};
use loom_kernel::{ExecutionState, StepStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ConsoleError;

/// The statuses an execution can be listed by, in the order `loom executions` lists them.
pub const STATUSES: [ExecutionStatus; 6] = ExecutionStatus::STARTED;

/// The name of a status on the command line and in the admin API.
pub fn status_name(status: ExecutionStatus) -> &'static str {
    match status {
        ExecutionStatus::New => "new",
        ExecutionStatus::Running => "running",
        ExecutionStatus::Suspended => "suspended",
        ExecutionStatus::InDoubt => "in-doubt",
        ExecutionStatus::Completed => "completed",
        ExecutionStatus::Failed => "failed",
        ExecutionStatus::Cancelled => "cancelled",
        _ => "unknown",
    }
}

/// The status named `name` (`in-doubt`, `in_doubt` and `indoubt` are one).
pub fn parse_status(name: &str) -> Result<ExecutionStatus, ConsoleError> {
    let wanted = name.trim().to_ascii_lowercase().replace(['_', ' '], "-");
    let wanted = if wanted == "indoubt" {
        "in-doubt".to_owned()
    } else {
        wanted
    };
    STATUSES
        .into_iter()
        .find(|status| status_name(*status) == wanted)
        .ok_or_else(|| {
            let names: Vec<_> = STATUSES.into_iter().map(status_name).collect();
            ConsoleError::bad_request(format!(
                "unknown status '{name}': use one of {}",
                names.join(", ")
            ))
        })
}

/// One execution in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionView {
    /// The execution's id.
    pub id: String,
    /// `running`, `suspended`, `in-doubt`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The flow's name, once `EXECUTION_STARTED` is read.
    pub flow: Option<String>,
    /// The flow's version.
    pub flow_version: Option<u32>,
    /// How many events the log holds.
    pub events: u64,
    /// When `EXECUTION_STARTED` was recorded (Unix ms, the store's clock), if known.
    pub started_at_ms: Option<u64>,
    /// When the last event was recorded, if known.
    pub last_event_at_ms: Option<u64>,
    /// Listed through a server (the admin API) whose runtime does not register this
    /// execution's flow (by name in a listing, name and version in `show`), and not ended:
    /// nothing on that server drives it; it waits for one that registers the flow. Always
    /// false when read from a store, which knows no flows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flow_not_registered: bool,
}

/// An execution in full: its folded state, then its log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShowView {
    /// The execution as listed.
    pub execution: ExecutionView,
    /// How it started and how it ended, masked.
    #[serde(default)]
    pub outcome: OutcomeView,
    /// Its folded state.
    pub state: StateView,
    /// Its log, masked.
    pub events: Vec<EventView>,
    /// Its lease, on a store with leases (PostgreSQL): who holds it or held it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseView>,
}

/// An execution's lease on a store with leases: the worker that holds it or held it last,
/// its fencing token, and whether it is live. A step in doubt whose worker's lease is still
/// live was started by a worker that may be paused, not dead, and may still send its call
/// (`docs/EFFECTS.md`, "Paused workers").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// The worker that holds the lease, or held it last.
    pub holder: String,
    /// The fencing token of that holder's lease.
    pub token: u64,
    /// Whether the lease is live now (by the store's clock).
    pub live: bool,
    /// While live, how long until it runs out unless renewed.
    pub expires_in_ms: Option<u64>,
}

impl From<loom_kernel::kit::LeaseInfo> for LeaseView {
    fn from(info: loom_kernel::kit::LeaseInfo) -> Self {
        Self {
            holder: info.holder,
            token: info.token,
            live: info.live,
            expires_in_ms: info.expires_in_ms,
        }
    }
}

impl LeaseView {
    /// In a few words: `w1 (token 5), live` or `w1 (token 5), not live`.
    pub fn summary(&self) -> String {
        let liveness = match (self.live, self.expires_in_ms) {
            (true, Some(ms)) => format!("live, runs out in {ms} ms unless renewed"),
            (true, None) => "live".to_owned(),
            (false, _) => "not live (given back or ran out)".to_owned(),
        };
        format!("{} (token {}), {liveness}", self.holder, self.token)
    }
}

/// A page of whole logs, unmasked, as `GET /admin/v1/export` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportPage {
    /// Each execution's log as JSON Lines (one envelope a line, the `replay-check --logs`
    /// format).
    pub logs: Vec<String>,
    /// Pass as `after` for the next page; `None` on the last.
    pub next: Option<String>,
}

/// What an execution was given and what it came to: what `show` says first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeView {
    /// The flow's input, masked.
    #[serde(default)]
    pub input: Option<Value>,
    /// The flow's output, masked, once it completed.
    #[serde(default)]
    pub output: Option<Value>,
    /// Why it failed (code and message), once it failed.
    #[serde(default)]
    pub failure: Option<ErrorInfo>,
    /// The reason given when it was cancelled, if any.
    #[serde(default)]
    pub cancel_reason: Option<String>,
    /// The execution that started this one as its child (LD-015), if any.
    #[serde(default)]
    pub parent: Option<String>,
    /// The children it started, in the order it started them.
    #[serde(default)]
    pub children: Vec<ChildView>,
}

/// A child execution, as its parent's log names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    /// The child's execution id.
    pub id: String,
    /// The parent's gate that waits for it.
    pub gate_id: String,
    /// Whether the child's end has reached the parent (its gate was resumed).
    pub ended: bool,
}

/// What the fold says about an execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateView {
    /// K2: the capabilities granted at start.
    pub capabilities: Vec<String>,
    /// K3: the budget given at start, if any.
    pub budget: Option<u64>,
    /// K3: what the recorded outcomes cost so far.
    pub budget_spent: u64,
    /// Every step, in step id order.
    pub steps: Vec<StepView>,
    /// Gates opened and not resumed, in gate id order.
    pub pending_gates: Vec<GateView>,
    /// Steps waiting for an operator's verdict.
    pub steps_in_doubt: Vec<String>,
    /// Steps started with no outcome (running, or cut off by a worker that stopped).
    pub steps_in_flight: usize,
    /// Recorded decisions, in step id order.
    pub decisions: Vec<DecisionView>,
}

/// One step of an execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepView {
    /// The step's id.
    pub step_id: String,
    /// The effect it invokes.
    pub effect: String,
    /// `started`, `in-doubt`, `completed` or `failed`.
    pub status: String,
    /// The step's last attempt (from 1: a `retry` verdict dispatches it again), whatever its
    /// status; absent only in a log that records neither a start nor a doubt of the step.
    pub attempt: Option<u32>,
    /// The seq of the event that gave the step this status.
    pub seq: u64,
    /// When its first attempt's `STEP_STARTED` was recorded (absent for a quick step, recorded
    /// by its outcome alone, and in logs without times).
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// When its outcome was recorded, if it has one.
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
    /// How long its attempts ran, from each `STEP_STARTED` to the outcome or doubt that ended
    /// it (ms), attempts still running left out; absent when no attempt's start was recorded.
    #[serde(default)]
    pub running_ms: Option<u64>,
    /// How long it waited in doubt for verdicts (ms), a doubt still open left out.
    #[serde(default)]
    pub in_doubt_ms: Option<u64>,
    /// When the doubt it is in now was recorded.
    #[serde(default)]
    pub in_doubt_since_ms: Option<u64>,
    /// How long it waited neither running nor in doubt (ms), from its first start to its
    /// outcome: a retry's backoff, the time until a worker took it up again after a crash.
    /// Only for an ended step whose first start is recorded.
    #[serde(default)]
    pub waiting_ms: Option<u64>,
}

/// A gate the execution waits on: resume it with `loom resume <id> <eventType> <key> <json>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateView {
    /// The gate's id.
    pub gate_id: String,
    /// The event type that resumes it.
    pub event_type: String,
    /// The correlation key a resume must carry.
    pub correlation_key: String,
    /// The seq of its `EXECUTION_SUSPENDED`.
    pub seq: u64,
    /// When it opened (its `EXECUTION_SUSPENDED` was recorded), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at_ms: Option<u64>,
    /// What the flow asked for with this gate (`ctx.suspend_with_request`, LD-018), masked;
    /// absent for a gate that asks nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// What its resume payload must fit, when the flow declared it (`ctx.suspend_expecting`,
    /// LD-031): the JSON Schema and an example; absent for a gate that declared nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expects: Option<crate::expected::ExpectedPayload>,
}

/// A recorded decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionView {
    /// The decision's step id.
    pub step_id: String,
    /// The seq of its `DECISION_RECORDED`.
    pub seq: u64,
}

/// One event of a log, masked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// The event's seq.
    pub seq: u64,
    /// The event type (`STEP_STARTED`, ...).
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the store recorded it (Unix ms, the store's clock), if known.
    pub recorded_at_ms: Option<u64>,
    /// The event in its JSON form (with `type`), classified values masked.
    pub event: Value,
}

/// Events of one log from a seq on, as `tail` reads them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPage {
    /// The events, in seq order.
    pub events: Vec<EventView>,
    /// The log's length when read.
    pub head: u64,
    /// Whether the execution has ended (a terminal event is in the log).
    pub ended: bool,
}

/// A step in doubt, waiting for a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InDoubtView {
    /// The execution's id.
    pub execution: String,
    /// The step's id.
    pub step_id: String,
    /// The effect it invoked.
    pub effect: String,
    /// The attempt that may or may not have happened.
    pub attempt: u32,
    /// The key the effect ran with (`executionId:stepId`): look for it at the receiver before
    /// giving a verdict.
    pub idempotency_key: String,
    /// The seq of its `EFFECT_INDOUBT`.
    pub seq: u64,
    /// When the doubt was recorded (Unix ms, the store's clock), if known.
    pub in_doubt_since_ms: Option<u64>,
    /// How long it has waited when listed, if known.
    pub waiting_ms: Option<u64>,
    /// Why it is in doubt, as recorded, if a reason was given.
    pub reason: Option<ErrorInfo>,
    /// The execution was cancelled with this step in doubt: no verdict can be recorded, but
    /// the effect may have happened; settle it with the receiver.
    #[serde(default)]
    pub cancelled: bool,
    /// The execution has ended with this step in doubt (cancelled, or its flow returned while
    /// the effect ran): as for `cancelled`, no verdict can be recorded.
    #[serde(default)]
    pub ended: bool,
    /// Not in doubt yet: the step was running when the process that ran it stopped (listed by
    /// the `loom` CLI on a store file no process holds). `seq` is its `STEP_STARTED`'s. An
    /// offline verdict or cancel records it in doubt first; a restart's `recover` puts it in
    /// doubt (not idempotent) or runs it again (idempotent).
    #[serde(default)]
    pub stopped: bool,
    /// The execution's lease when listed, on a store with leases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseView>,
}

/// The fields of an event's JSON form that hold payloads (user data).
const PAYLOAD_FIELDS: [&str; 5] = ["input", "output", "value", "payload", "ops"];

/// An event's JSON form with every payload masked by `classification`: the flow's input and
/// output, step outputs, decision values, resume payloads, a `completed` verdict's output, and
/// surface patch ops (whose values are masked as living at their op's path).
pub fn masked_event(classification: &DataClassification, event: &Event) -> Value {
    let mut value = serde_json::to_value(event).unwrap_or_else(
        |error| serde_json::json!({"type": event.type_name(), "unreadable": error.to_string()}),
    );
    mask_event_value(classification, &mut value);
    value
}

/// Masks the payload fields of an event's JSON form in place (see [`masked_event`]).
pub fn mask_event_value(classification: &DataClassification, event: &mut Value) {
    if classification.is_empty() {
        return;
    }
    let Value::Object(fields) = event else {
        return;
    };
    for name in PAYLOAD_FIELDS {
        if let Some(payload) = fields.get_mut(name) {
            *payload = classification.mask_message_value(payload);
        }
    }
    if let Some(Value::Object(verdict)) = fields.get_mut("verdict")
        && let Some(output) = verdict.get_mut("output")
    {
        *output = classification.mask_message_value(output);
    }
}

/// The view of one stored event.
pub fn event_view(classification: &DataClassification, envelope: &EventEnvelope) -> EventView {
    EventView {
        seq: envelope.seq,
        event_type: envelope.event.type_name().to_owned(),
        recorded_at_ms: envelope.recorded_at_ms,
        event: masked_event(classification, &envelope.event),
    }
}

/// The view of a folded state.
pub fn state_view(state: &ExecutionState) -> StateView {
    let steps = state
        .steps()
        .into_iter()
        .map(|(step_id, record)| {
            let (status, attempt, seq) = match record.status {
                StepStatus::Started { attempt, seq } => ("started", Some(attempt), seq),
                StepStatus::InDoubt { attempt, seq } => ("in-doubt", Some(attempt), seq),
                StepStatus::Completed { seq } => ("completed", None, seq),
                StepStatus::Failed { seq } => ("failed", None, seq),
                _ => ("unknown", None, 0),
            };
            StepView {
                step_id: step_id.to_owned(),
                effect: record.effect.to_string(),
                status: status.to_owned(),
                attempt,
                seq,
                started_at_ms: None,
                ended_at_ms: None,
                running_ms: None,
                in_doubt_ms: None,
                in_doubt_since_ms: None,
                waiting_ms: None,
            }
        })
        .collect();
    StateView {
        capabilities: state.capabilities().iter().cloned().collect(),
        budget: state.budget(),
        budget_spent: state.budget_spent(),
        steps,
        pending_gates: state
            .pending_gates()
            .iter()
            .map(|(gate_id, gate)| GateView {
                gate_id: gate_id.clone(),
                event_type: gate.event_type.to_string(),
                correlation_key: gate.correlation_key.clone(),
                seq: gate.seq,
                opened_at_ms: None,
                request: None,
                expects: None,
            })
            .collect(),
        steps_in_doubt: state.steps_in_doubt().iter().cloned().collect(),
        steps_in_flight: state.steps_in_flight(),
        decisions: state
            .decisions()
            .into_iter()
            .map(|(step_id, seq)| DecisionView {
                step_id: step_id.to_owned(),
                seq,
            })
            .collect(),
    }
}

/// Fills in the request of each pending gate that has one (LD-018), masked, from `log`.
pub fn gate_requests(
    classification: &DataClassification,
    state: &ExecutionState,
    log: &[EventEnvelope],
    gates: &mut [GateView],
) {
    for gate in gates {
        let Some(seq) = state.decision(&loom_kernel::kit::request_step_id(&gate.gate_id)) else {
            continue;
        };
        if let Some(Event::DecisionRecorded(decision)) = usize::try_from(seq)
            .ok()
            .and_then(|at| log.get(at))
            .map(|e| &e.event)
            && decision.kind == loom_kernel::kit::REQUEST_KIND
        {
            gate.request = Some(classification.mask_message_value(&decision.value.to_value()));
        }
    }
}

/// Masks the payloads of views a client received (a second classification on top of the
/// server's, for the CLI's `--mask`).
pub fn mask_events(classification: &DataClassification, events: &mut [EventView]) {
    for event in events {
        mask_event_value(classification, &mut event.event);
    }
}

/// `word` as one shell word: as is when it holds only characters no shell treats specially,
/// else in single quotes (a `'` inside written `'\''`). For the commands the console prints.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@%+=,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) for Unix milliseconds.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// A count as the CLI and the web console print it: `5000` as `5,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

#[cfg(test)]
mod thousands_tests {
    #[test]
    fn counts_are_grouped_by_three_digits() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (1_000_000, "1,000,000"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(super::thousands(n), text);
        }
    }
}
