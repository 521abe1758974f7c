//! Gates that declare the payload they expect (LD-031): the JSON Schema is recorded with the
//! gate's opening, for whoever resumes it to check a payload against before anything is
//! recorded (`loom resume`, the admin API, the web console).

use serde_json::Value;

use super::Command;
use super::{FlowCtx, StepError};
use crate::payload::Payload;

impl FlowCtx {
    /// Opens a gate like [`FlowCtx::suspend`] and records `schema`, the JSON Schema its resume
    /// payload is expected to match, with it (one batch). The kernel does not check resumes
    /// against it; the operator's tools do, and refuse a payload that does not match before
    /// anything is recorded, saying what shape is expected. Returns the resume's payload.
    ///
    /// Replay neither matches nor serves the schema: a log recorded before the gate declared a
    /// schema replays as it did, and a changed schema changes nothing for gates already open
    /// (they keep the schema recorded with them). A schema the log could not hold (nested
    /// deeper than [`crate::payload::MAX_DEPTH`]) is refused here
    /// ([`StepError::InvalidSchema`]) and nothing is recorded.
    pub fn suspend_expecting(
        &self,
        event_type: &str,
        correlation_key: &str,
        schema: &Value,
    ) -> Command {
        let mut state = self.state();
        let slot = state.new_slot();
        let classification = &self.shared.classification;
        let outcome = state.expecting_gate(
            slot,
            event_type,
            correlation_key,
            encode_schema(schema),
            classification,
        );
        self.command(state, slot, outcome)
    }
}

/// A gate's payload schema as the log holds it; one the log could not hold (nested deeper than
/// [`crate::payload::MAX_DEPTH`]) is [`StepError::InvalidSchema`].
pub(super) fn encode_schema(schema: &Value) -> Result<Payload, StepError> {
    Payload::try_from_value(schema).map_err(|err| StepError::InvalidSchema(err.to_string()))
}
