//! Applying durable events in seq order: each execution's surfaces, requests and open calls
//! updated, and what changed sent to every subscriber.

use std::sync::atomic::Ordering;

use loom_kernel::{Event, EventEnvelope, ExecutionId};

use super::SurfaceHub;
use super::state::{
    ExecState, HubState, Shared, SurfaceState, evict_if_done, request_message, surface_entry,
};
use crate::bridge::InboundAction;
use crate::gate::{
    COMPONENTS_DECISION, ComponentsUpdate, DELETE_DECISION, FUNCTION_RESULT_EVENT, FunctionRequest,
    REQUEST_DECISION,
};
use crate::wire::AgentMessage;

impl SurfaceHub {
    /// Takes one durable event: applied if next in seq order, skipped if already applied,
    /// held if it arrives ahead of a gap.
    pub(super) fn offer(&self, state: &mut HubState, envelope: EventEnvelope) {
        let execution = envelope.execution_id.clone();
        let exec = state.executions.entry(execution.clone()).or_default();
        if envelope.seq < exec.next_seq {
            return;
        }
        if envelope.seq > exec.next_seq {
            exec.ahead.insert(envelope.seq, envelope);
            return;
        }
        self.continue_offer(state, &execution, Some(envelope));
    }

    fn continue_offer(
        &self,
        state: &mut HubState,
        execution: &ExecutionId,
        mut next: Option<EventEnvelope>,
    ) {
        let mut ended = false;
        while let Some(envelope) = next {
            let exec = state.executions.entry(execution.clone()).or_default();
            let owned = apply_one(&self.shared, exec, &envelope);
            exec.next_seq = envelope.seq + 1;
            if envelope.event.is_terminal() {
                exec.ended = true;
                ended = true;
            }
            next = exec.ahead.remove(&exec.next_seq);
            for call_id in owned {
                state
                    .call_owner
                    .entry(call_id)
                    .or_insert_with(|| execution.clone());
            }
        }
        if ended {
            // Seen once, then retained among the most recently ended; the oldest past the
            // retention is forgotten unless someone watches it (then when they leave).
            if let Some(exec) = state.executions.get_mut(execution)
                && !exec.retained
            {
                exec.retained = true;
                state.recently_ended.push_back(execution.clone());
            }
            let retention = self.shared.ended_retention.load(Ordering::Relaxed);
            while state.recently_ended.len() > retention {
                let Some(oldest) = state.recently_ended.pop_front() else {
                    break;
                };
                if let Some(exec) = state.executions.get_mut(&oldest) {
                    exec.retained = false;
                }
                // The execution being offered may be about to get a subscriber (a subscribe
                // catches up first): it goes when its last subscriber leaves.
                if oldest != *execution {
                    evict_if_done(state, &oldest);
                }
            }
        }
    }
}

/// Whether a kernel gate request (`<gate id>:request`) is one of an `A2UIFunctionResult` gate:
/// a grain-A call recorded on the kernel's requests.
fn is_function_request_step(step_id: &str) -> bool {
    loom_kernel::kit::request_gate_id(step_id)
        .and_then(|gate| gate.strip_prefix(FUNCTION_RESULT_EVENT))
        .is_some_and(|n| n.starts_with('#'))
}

fn broadcast(surface: &mut SurfaceState, messages: &[AgentMessage]) {
    if messages.is_empty() {
        return;
    }
    surface
        .subscribers
        .retain(|s| messages.iter().all(|m| s.send(m)));
}

/// Applies one event in order; returns the call ids it introduced.
fn apply_one(shared: &Shared, exec: &mut ExecState, envelope: &EventEnvelope) -> Vec<String> {
    match &envelope.event {
        Event::SurfacePatch(patch) => {
            let surface = surface_entry(shared, &envelope.execution_id, exec, &patch.surface_id);
            match surface.bridge.apply_event(&envelope.event) {
                Ok(messages) => broadcast(surface, &messages),
                Err(error) => tracing::error!(
                    %error,
                    execution = %envelope.execution_id,
                    seq = envelope.seq,
                    "a durable SURFACE_PATCH does not fold; the surface keeps its model"
                ),
            }
            Vec::new()
        }
        Event::DecisionRecorded(decision)
            if decision.kind == REQUEST_DECISION
                || (decision.kind == loom_kernel::kit::REQUEST_KIND
                    && is_function_request_step(&decision.step_id)) =>
        {
            let request: FunctionRequest = match decision.value.decode() {
                Ok(request) => request,
                Err(error) => {
                    tracing::error!(error = %loom_kernel::Payload::describe_decode_error(&error), seq = envelope.seq, "an A2UI function request in the log does not decode");
                    return Vec::new();
                }
            };
            let surface = surface_entry(shared, &envelope.execution_id, exec, &request.surface_id);
            if let Err(error) = surface.bridge.record_call(
                Some(&request.catalog_id),
                &request.name,
                &request.call_id,
            ) {
                tracing::error!(%error, seq = envelope.seq, "an A2UI function request cannot be recorded");
            }
            let call_id = request.call_id.clone();
            exec.requests.insert(call_id.clone(), request);
            vec![call_id]
        }
        Event::DecisionRecorded(decision) if decision.kind == DELETE_DECISION => {
            let surface_id: String = match decision.value.decode() {
                Ok(surface_id) => surface_id,
                Err(error) => {
                    tracing::error!(error = %loom_kernel::Payload::describe_decode_error(&error), seq = envelope.seq, "an A2UI surface deletion in the log does not decode");
                    return Vec::new();
                }
            };
            let surface = surface_entry(shared, &envelope.execution_id, exec, &surface_id);
            surface.deleted = true;
            if surface.bridge.is_created()
                && let Ok(message) = surface.bridge.delete_surface()
            {
                broadcast(surface, &[message]);
            }
            // Ends every subscription: their `next` gives `None`.
            surface.subscribers.clear();
            Vec::new()
        }
        Event::DecisionRecorded(decision) if decision.kind == COMPONENTS_DECISION => {
            let update: ComponentsUpdate = match decision.value.decode() {
                Ok(update) => update,
                Err(error) => {
                    tracing::error!(error = %loom_kernel::Payload::describe_decode_error(&error), seq = envelope.seq, "an A2UI components update in the log does not decode");
                    return Vec::new();
                }
            };
            let surface = surface_entry(shared, &envelope.execution_id, exec, &update.surface_id);
            if surface.deleted {
                return Vec::new();
            }
            // A subscriber that comes later gets the merged tree in `createSurface`; those
            // subscribed now get the change.
            let outcome = if surface.bridge.is_created() {
                surface
                    .bridge
                    .update_components(update.components)
                    .map(|message| broadcast(surface, &[message]))
            } else {
                surface.bridge.merge_components(&update.components)
            };
            if let Err(error) = outcome {
                tracing::error!(
                    %error,
                    execution = %envelope.execution_id,
                    seq = envelope.seq,
                    "a durable A2UI components update does not fit the catalogs; the surface keeps its components"
                );
            }
            Vec::new()
        }
        Event::ExecutionSuspended(gate) if gate.event_type == FUNCTION_RESULT_EVENT => {
            let Some(request) = exec.requests.get(&gate.correlation_key) else {
                return Vec::new();
            };
            // The request and its gate are durable: now it may go out.
            exec.open_calls.insert(gate.correlation_key.clone(), ());
            if let Ok(message) = request_message(&exec.surfaces, request) {
                let surface_id = request.surface_id.clone();
                if let Some(surface) = exec.surfaces.get_mut(&surface_id) {
                    broadcast(surface, &[message]);
                }
            }
            Vec::new()
        }
        Event::ExecutionSuspended(gate) if gate.event_type == InboundAction::EVENT_TYPE => {
            *exec
                .waiting_actions
                .entry(gate.correlation_key.clone())
                .or_default() += 1;
            Vec::new()
        }
        Event::ExecutionResumed(resumed) if resumed.event_type == InboundAction::EVENT_TYPE => {
            if let Some(count) = exec.waiting_actions.get_mut(&resumed.correlation_key) {
                *count -= 1;
                if *count == 0 {
                    exec.waiting_actions.remove(&resumed.correlation_key);
                }
            }
            Vec::new()
        }
        Event::ExecutionResumed(resumed) if resumed.event_type == FUNCTION_RESULT_EVENT => {
            exec.open_calls.remove(&resumed.correlation_key);
            if let Some(request) = exec.requests.get(&resumed.correlation_key)
                && let Some(surface) = exec.surfaces.get_mut(&request.surface_id)
            {
                surface.bridge.mark_answered(&resumed.correlation_key);
            }
            Vec::new()
        }
        _ => Vec::new(),
    }
}
