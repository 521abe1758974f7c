//! Gates that carry a request (LD-018): what the flow asks the outside for, recorded in the
//! log just before the gate that waits for the answer.
//!
//! A requested gate is two events (three with a timeout), queued in one poll and therefore
//! appended in one batch: a `DECISION_RECORDED` of kind [`REQUEST_KIND`] under the id
//! `<gate id>:request` whose value is the request, then (with a timeout) the gate's
//! `loom.deadline` decision, then its `EXECUTION_SUSPENDED`. The request is checked (it must
//! serialize, and nest no deeper than [`crate::payload::MAX_DEPTH`]) before anything is queued,
//! so a request the log could not hold is refused when the flow makes it, never later.

use serde::Serialize;

use super::Command;
use super::{Deadline, FlowCtx, StepError, TimedGate};
use crate::payload::Payload;

impl FlowCtx {
    /// Opens a gate like [`FlowCtx::suspend`] and records `request` with it: what the flow
    /// asks the outside for (an approval form, a message to a partner system). The request is
    /// in the log before the gate is (one batch), so a process that restarts finds it with
    /// [`crate::runtime::Runtime::pending_requests`] and can send it again, with the same
    /// correlation key, for as long as the gate waits. Returns the resume's payload.
    ///
    /// A request that does not serialize, or nests deeper than
    /// [`crate::payload::MAX_DEPTH`], is refused here ([`StepError::InvalidRequest`]) and
    /// nothing is recorded. On replay the recorded request stands (it is not compared with the
    /// one the code builds now): what was asked was asked.
    pub fn suspend_with_request<R: Serialize + ?Sized>(
        &self,
        event_type: &str,
        correlation_key: &str,
        request: &R,
    ) -> Command {
        self.requested_gate(event_type, correlation_key, encode_request(request), None)
    }

    /// [`FlowCtx::suspend_with_request`] with a timeout, as
    /// [`FlowCtx::suspend_with_timeout`]: whichever comes first, a resume or the deadline, is
    /// recorded; a request whose gate timed out is no longer pending.
    pub fn suspend_with_request_and_timeout<R: Serialize + ?Sized>(
        &self,
        event_type: &str,
        correlation_key: &str,
        request: &R,
        timeout: std::time::Duration,
    ) -> TimedGate {
        TimedGate {
            command: self.requested_gate(
                event_type,
                correlation_key,
                encode_request(request),
                Some(Deadline::After(timeout)),
            ),
        }
    }

    /// [`FlowCtx::suspend_with_request`] for a gate that also declares the JSON Schema its
    /// resume payload is expected to match, as [`FlowCtx::suspend_expecting`] does (LD-031):
    /// the request, the schema and the gate are recorded in one batch. On replay the recorded
    /// request stands and the schema is neither matched nor written.
    pub fn suspend_with_request_expecting<R: Serialize + ?Sized>(
        &self,
        event_type: &str,
        correlation_key: &str,
        request: &R,
        schema: &serde_json::Value,
    ) -> Command {
        let mut state = self.state();
        let slot = state.new_slot();
        let classification = &self.shared.classification;
        let outcome = state.requested_expecting_gate(
            slot,
            event_type,
            correlation_key,
            encode_request(request),
            super::expecting::encode_schema(schema),
            classification,
        );
        self.command(state, slot, outcome)
    }

    fn requested_gate(
        &self,
        event_type: &str,
        correlation_key: &str,
        request: Result<Payload, StepError>,
        deadline: Option<Deadline>,
    ) -> Command {
        let mut state = self.state();
        let slot = state.new_slot();
        let live = deadline.map(|deadline| self.live_deadline(deadline));
        let classification = &self.shared.classification;
        let outcome = state.requested_gate(
            slot,
            event_type,
            correlation_key,
            request,
            live,
            classification,
        );
        self.command(state, slot, outcome)
    }
}

/// The request as the log will hold it, or why it cannot be recorded.
fn encode_request<R: Serialize + ?Sized>(request: &R) -> Result<Payload, StepError> {
    let value = serde_json::to_value(request)
        .map_err(|err| StepError::InvalidRequest(format!("it does not serialize: {err}")))?;
    Payload::try_from_value(&value).map_err(|err| StepError::InvalidRequest(err.to_string()))
}
