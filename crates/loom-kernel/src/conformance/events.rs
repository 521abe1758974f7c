//! Events and ids for tests: what the checks, and the tests of code built on the kernel, write
//! logs with.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::envelope::EventEnvelope;
use crate::event::{
    EffectInDoubt, EffectResolved, Event, ExecutionCompleted, ExecutionResumed, ExecutionStarted,
    ExecutionSuspended, StepCompleted, StepStarted, SurfacePatch, Verdict,
};
use crate::id::ExecutionId;

/// A JSON value `depth` arrays deep around the number 1: what tests of the payload depth limit
/// (`MAX_PAYLOAD_DEPTH`) record.
pub fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// An id for tests; panics on an invalid literal.
pub fn id(name: &str) -> ExecutionId {
    ExecutionId::new(name).expect("test execution id")
}

/// `events` as the log of `execution`, from seq 0.
pub fn log_of(
    execution: &ExecutionId,
    events: impl IntoIterator<Item = Event>,
) -> Vec<EventEnvelope> {
    (0..)
        .zip(events)
        .map(|(seq, event)| EventEnvelope::new(execution.clone(), seq, event))
        .collect()
}

/// An EXECUTION_STARTED event for tests.
pub fn started(flow: &str) -> Event {
    Event::ExecutionStarted(ExecutionStarted {
        flow: flow.into(),
        flow_version: 1,
        input: Value::Null.into(),
        capabilities: BTreeSet::new(),
        budget: None,
    })
}

/// A SURFACE_PATCH carrying `tag`, so a test can tell events apart.
pub fn tagged(tag: Value) -> Event {
    Event::SurfacePatch(SurfacePatch {
        step_id: "tag".into(),
        surface_id: "test".into(),
        ops: Value::Array(vec![tag]).into(),
    })
}

pub(super) fn tag_of(event: &Event) -> Option<Value> {
    match event {
        Event::SurfacePatch(patch) => patch.ops.to_value().get(0).cloned(),
        _ => None,
    }
}

/// EXECUTION_COMPLETED with a null output.
pub fn completed() -> Event {
    Event::ExecutionCompleted(ExecutionCompleted {
        output: Value::Null.into(),
    })
}

/// STEP_STARTED of `step_id` (effect `pay`, attempt 1).
pub fn step_started(step_id: &str) -> Event {
    Event::StepStarted(StepStarted {
        step_id: step_id.into(),
        effect: "pay".into(),
        input_digest: "0".into(),
        attempt: 1,
        max_cost: 0,
    })
}

/// STEP_COMPLETED of `step_id` (effect `pay`).
pub fn step_completed(step_id: &str) -> Event {
    Event::StepCompleted(StepCompleted {
        step_id: step_id.into(),
        effect: "pay".into(),
        input_digest: "0".into(),
        output: Value::Null.into(),
        cost: 0,
    })
}

/// EFFECT_INDOUBT of `step_id` (effect `pay`, attempt 1).
pub fn in_doubt(step_id: &str) -> Event {
    Event::EffectInDoubt(EffectInDoubt {
        step_id: step_id.into(),
        effect: "pay".into(),
        attempt: 1,
        reason: None,
    })
}

/// EFFECT_RESOLVED of `step_id` with `verdict`.
pub fn resolved(step_id: &str, verdict: Verdict) -> Event {
    Event::EffectResolved(EffectResolved {
        step_id: step_id.into(),
        verdict,
        operator: None,
    })
}

/// EXECUTION_SUSPENDED at `gate_id` (event type `approval`, key `k`).
pub fn suspended(gate_id: &str) -> Event {
    Event::ExecutionSuspended(ExecutionSuspended {
        gate_id: gate_id.into(),
        event_type: "approval".into(),
        correlation_key: "k".into(),
    })
}

/// EXECUTION_RESUMED of `gate_id`, matching [`suspended`].
pub fn resumed(gate_id: &str) -> Event {
    Event::ExecutionResumed(ExecutionResumed {
        gate_id: gate_id.into(),
        event_type: "approval".into(),
        correlation_key: "k".into(),
        payload: Value::Null.into(),
    })
}

/// `DECISION_RECORDED` of a gate's deadline (`loom.deadline`).
pub fn deadline(gate_id: &str, deadline_ms: u64) -> Event {
    Event::DecisionRecorded(crate::event::DecisionRecorded {
        step_id: gate_id.into(),
        kind: crate::runtime::DEADLINE_KIND.into(),
        value: serde_json::json!({ "deadlineMs": deadline_ms }).into(),
    })
}

/// A parked execution's whole log: started (flow `nap`), then asleep on the timer `timer#1`
/// due at `deadline_ms`, as `ctx.sleep` records it.
pub fn asleep_on_timer(deadline_ms: u64) -> Vec<Event> {
    vec![
        started("nap"),
        deadline("timer#1", deadline_ms),
        Event::ExecutionSuspended(crate::event::ExecutionSuspended {
            gate_id: "timer#1".into(),
            event_type: crate::runtime::TIMER_EVENT_TYPE.into(),
            correlation_key: "timer#1".into(),
        }),
    ]
}
