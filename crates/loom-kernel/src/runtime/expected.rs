//! Gates that declare the payload they expect (LD-031): a JSON Schema recorded in the log with
//! the gate's opening, so that whoever resumes the gate (an operator's `loom resume`, the admin
//! API, the web console) can check a payload before anything is recorded, and show the shape
//! to give, without the flow's code.
//!
//! The schema is a `DECISION_RECORDED` of kind [`PAYLOAD_SCHEMA_KIND`] under the step id
//! `<gate id>:payloadSchema`, queued just before the gate's `EXECUTION_SUSPENDED` (one batch).
//! It is a note on the gate, not a command of the flow: replay neither matches nor serves it.
//! So a log recorded before a gate declared its schema replays against code that declares it
//! (nothing is recorded for a gate that replays), and a log that holds a schema replays
//! against code that no longer declares it. The schema is recorded only when the gate opens
//! live.
//!
//! The kernel records the schema and never reads it: checking a payload against a JSON Schema
//! is the job of the layer that takes the payload from a person (`loom-console`), which keeps
//! a schema validator out of the kernel's dependencies.

use crate::event::Event;
use crate::fold::ExecutionState;
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::store::{EventStore, ReadError};

pub use crate::runtime::markers::{PAYLOAD_SCHEMA_KIND, payload_schema_step_id};

/// The JSON Schema the pending gate `gate_id` of `execution` (folded as `state`) declared for
/// its payload, as recorded; `None` when it declared none (a gate opened by code that did
/// not, or by a build before gates could). One read of one event.
pub async fn expected_payload<S: EventStore>(
    store: &S,
    execution: &ExecutionId,
    state: &ExecutionState,
    gate_id: &str,
) -> Result<Option<Payload>, ReadError> {
    let Some(seq) = state.decision(&payload_schema_step_id(gate_id)) else {
        return Ok(None);
    };
    let recorded = store.read(execution, seq, 1).await?;
    Ok(match recorded.first().map(|e| &e.event) {
        Some(Event::DecisionRecorded(decision)) if decision.kind == PAYLOAD_SCHEMA_KIND => {
            Some(decision.value.clone())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::markers::schema_gate_id;

    #[test]
    fn a_schema_id_names_its_gate_and_no_counted_id_looks_like_one() {
        let id = payload_schema_step_id("A2UIFunctionResult#2");
        assert_eq!(id, "A2UIFunctionResult#2:payloadSchema");
        assert_eq!(schema_gate_id(&id), Some("A2UIFunctionResult#2"));
        assert_eq!(schema_gate_id("payloadSchema#1"), None);
        assert_eq!(schema_gate_id("Approval#1:request"), None);
    }
}
