//! The kernel's reserved words in the log: the gate event types, decision kinds and payload
//! markers that only the runtime writes (they start with `loom.`), with what builds and reads
//! them: a leaf module (it imports only ids and payloads), the vocabulary of the machine and of
//! the log's view (`history.rs`); the I/O modules (timers, children, requests, payload
//! schemas, the flow's context) take them from here and re-export the public ones.

use crate::id::ExecutionId;
use crate::payload::Payload;

/// The gate event type of a timer (`ctx.sleep`): a gate only the runtime resumes, at its
/// deadline. Event types starting with `loom.` are reserved for the kernel: a flow cannot open
/// such a gate and a caller cannot resume one.
pub const TIMER_EVENT_TYPE: &str = "loom.timer";

/// The kind of the `DECISION_RECORDED` that holds a gate's deadline; its step id is the gate's
/// id and its value `{"deadlineMs": <unix ms>}`.
pub const DEADLINE_KIND: &str = "loom.deadline";

/// The key of the payload the runtime resumes a gate with when its deadline passes first:
/// `{"loom.timedOut": {"deadlineMs": <unix ms>}}`. A caller's resume may not carry it.
pub const TIMED_OUT_KEY: &str = "loom.timedOut";

/// Whether gate event types of this name belong to the kernel.
pub(crate) fn is_reserved_event_type(event_type: &str) -> bool {
    event_type.starts_with("loom.")
}

/// The recorded value of a deadline decision.
pub(crate) fn deadline_value(deadline_ms: u64) -> serde_json::Value {
    serde_json::json!({ "deadlineMs": deadline_ms })
}

/// The deadline a deadline decision's value holds.
pub(crate) fn parse_deadline(value: &Payload) -> Option<u64> {
    value.to_value().get("deadlineMs")?.as_u64()
}

/// The payload a gate is resumed with when its deadline passes first.
pub(crate) fn timed_out_payload(deadline_ms: u64) -> Payload {
    Payload::from_value(&serde_json::json!({ TIMED_OUT_KEY: { "deadlineMs": deadline_ms } }))
}

/// The key of the payload the runtime closes the other gates of a `first_of` with when one of
/// them is resumed: `{"loom.closed": {"by": <the winning gate's id>}}`.
pub const CLOSED_KEY: &str = "loom.closed";

/// The payload a losing gate of a `first_of` is closed with.
pub(crate) fn closed_payload(by_gate: &str) -> Payload {
    Payload::from_value(&serde_json::json!({ CLOSED_KEY: { "by": by_gate } }))
}

/// Whether `payload` is one of the runtime's markers (an object whose only key starts with
/// `loom.`): a caller's resume may not carry one.
///
/// The keys are compared after parsing: `{"loom\u002etimedOut": ...}` is the same object as
/// the runtime's marker to every reader of the log, so it is refused too. The raw-text test
/// only skips payloads that cannot be an object or hold neither the prefix nor an escape.
pub(crate) fn is_reserved_payload(payload: &Payload) -> bool {
    let json = payload.as_json();
    if !json.trim_start().starts_with('{') || !(json.contains("loom.") || json.contains('\\')) {
        return false;
    }
    matches!(payload.to_value(), serde_json::Value::Object(map)
        if map.len() == 1 && map.keys().all(|key| key.starts_with("loom.")))
}

/// Whether `payload` is the marker of a gate closed because another gate of its `first_of`
/// was resumed.
pub(crate) fn is_closed_payload(payload: &Payload) -> bool {
    if !payload.as_json().contains(CLOSED_KEY) {
        return false;
    }
    matches!(payload.to_value(), serde_json::Value::Object(map)
        if map.len() == 1 && map.contains_key(CLOSED_KEY))
}

/// Whether `payload` is the runtime's timeout marker (an object whose only key is
/// [`TIMED_OUT_KEY`]).
pub(crate) fn is_timed_out_payload(payload: &Payload) -> bool {
    // Cheap test first: almost every payload does not mention the key at all.
    if !payload.as_json().contains(TIMED_OUT_KEY) {
        return false;
    }
    matches!(payload.to_value(), serde_json::Value::Object(map)
        if map.len() == 1 && map.contains_key(TIMED_OUT_KEY))
}

/// The gate event type a parent waits on for its child; reserved (it starts with `loom.`), so
/// only the runtime resumes it.
pub const CHILD_EVENT_TYPE: &str = "loom.child";

/// The kind of the `DECISION_RECORDED` that holds what a parent asked to start; its step id is
/// the gate's id.
pub const CHILD_KIND: &str = "loom.child";

/// The key of the marker a child's gate is resumed with.
pub const CHILD_KEY: &str = "loom.child";

/// The prefix of a child's gate id in its parent: `child:<flow>#<n>`.
pub(crate) const GATE_PREFIX: &str = "child:";

/// The id of the child that the parent `parent` starts as gate `child:<flow>#<n>`:
/// `<parent>/<flow>#<n>`. `None` when the flow's name has a `/` (the separator) or the id is
/// not a valid [`ExecutionId`] (too long, or the name has a `:` or a control character).
pub(crate) fn child_id(parent: &ExecutionId, gate_id: &str) -> Option<ExecutionId> {
    let rest = gate_id.strip_prefix(GATE_PREFIX)?;
    let (flow, _) = rest.rsplit_once('#')?;
    if flow.is_empty() || flow.contains('/') {
        return None;
    }
    ExecutionId::from_stored(format!("{parent}/{rest}")).ok()
}

/// The parent and gate a child id was derived from, if it has the child form
/// (`<parent>/<flow>#<n>`). A user's id of that form parses too: callers check the parent's
/// log before they act on it.
pub(crate) fn parent_of(child: &ExecutionId) -> Option<(ExecutionId, String)> {
    let (parent, rest) = child.as_str().rsplit_once('/')?;
    let (flow, n) = rest.rsplit_once('#')?;
    if flow.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let parent = ExecutionId::from_stored(parent).ok()?;
    Some((parent, format!("{GATE_PREFIX}{rest}")))
}

/// The kind of the `DECISION_RECORDED` that holds a gate's request; its step id is
/// `<gate id>:request` (see [`request_step_id`]) and its value the request.
pub const REQUEST_KIND: &str = "loom.request";

/// The step id of the request decision of the gate `gate_id`: `<gate id>:request`. No counted
/// id (`name#n`) ends this way, so it cannot be taken by another decision.
pub fn request_step_id(gate_id: &str) -> String {
    let mut id = String::with_capacity(gate_id.len() + REQUEST_SUFFIX.len());
    id.push_str(gate_id);
    id.push_str(REQUEST_SUFFIX);
    id
}

/// What [`request_step_id`] appends to a gate id.
const REQUEST_SUFFIX: &str = ":request";

/// The gate whose request decision `step_id` is, when it is one ([`request_step_id`]'s
/// inverse).
pub fn request_gate_id(step_id: &str) -> Option<&str> {
    step_id.strip_suffix(REQUEST_SUFFIX)
}

/// The kind of the `DECISION_RECORDED` marker `ctx.patched` records; its step id is
/// `patch:<change id>` and its value `{}`.
pub const PATCH_KIND: &str = "loom.patch";

/// The kind of the `DECISION_RECORDED` that holds the JSON Schema a gate's resume payload is
/// expected to match; its step id is `<gate id>:payloadSchema` (see
/// [`payload_schema_step_id`]).
pub const PAYLOAD_SCHEMA_KIND: &str = "loom.payloadSchema";

/// The suffix of a schema decision's step id.
const SUFFIX: &str = ":payloadSchema";

/// The step id of the schema decision of the gate `gate_id`: `<gate id>:payloadSchema`. No
/// counted id (`name#n`) ends this way, so no other decision can take it.
pub fn payload_schema_step_id(gate_id: &str) -> String {
    let mut id = String::with_capacity(gate_id.len() + SUFFIX.len());
    id.push_str(gate_id);
    id.push_str(SUFFIX);
    id
}

/// The gate a schema decision's step id belongs to (`None` for another id).
pub(crate) fn schema_gate_id(step_id: &str) -> Option<&str> {
    step_id.strip_suffix(SUFFIX)
}

/// The kind of the note that names a `first_of`'s gates, written before them: the note is no
/// command (replay neither matches nor serves it, so a log from before it replays as before);
/// it lets a reader of the log alone (an offline write, `machine/offline.rs`) close the other
/// gates of the one it resumes, as the runtime does.
pub(crate) const FIRST_OF_KIND: &str = "loom.firstOf";

/// What [`first_of_step_id`] appends to the first gate's id.
const FIRST_OF_SUFFIX: &str = ":firstOf";

/// The step id of the note of the group whose first gate is `first_gate`.
pub(crate) fn first_of_step_id(first_gate: &str) -> String {
    format!("{first_gate}{FIRST_OF_SUFFIX}")
}

/// Whether `step_id` is a group note's (a counted id never ends this way).
pub(crate) fn is_first_of_step_id(step_id: &str) -> bool {
    step_id.ends_with(FIRST_OF_SUFFIX)
}

/// The note's value for the gates `ids`.
pub(crate) fn first_of_note(ids: &[String]) -> Payload {
    Payload::from_value(&serde_json::json!({ "gates": ids }))
}

/// The gates a note's value names, in order ([`first_of_note`] read back); none from a value
/// of another shape.
pub(crate) fn first_of_gates(value: &Payload) -> Vec<String> {
    let value = value.to_value();
    let Some(gates) = value.get("gates").and_then(serde_json::Value::as_array) else {
        return Vec::new();
    };
    gates
        .iter()
        .filter_map(|gate| gate.as_str().map(str::to_owned))
        .collect()
}

/// The gates (event type, correlation key) of `log` that their deadline closed: each resume
/// that carries the timeout marker.
pub(crate) fn timed_out_gates(
    log: &[crate::envelope::EventEnvelope],
) -> std::collections::BTreeSet<(String, String)> {
    log.iter()
        .filter_map(|envelope| match &envelope.event {
            crate::event::Event::ExecutionResumed(r) if is_timed_out_payload(&r.payload) => {
                Some((r.event_type.clone(), r.correlation_key.clone()))
            }
            _ => None,
        })
        .collect()
}
