//! What renderers send back: replies to function calls and actions, checked against what the
//! hub has folded before the gate waiting for them is resumed.

use loom_kernel::{Caller, EventStore, ExecutionId, Payload, Runtime};

use super::{HubError, SurfaceHub};
use crate::bridge::{FunctionResult, InboundAction, IngestError, parse_reply};
use crate::gate::FUNCTION_RESULT_EVENT;

impl SurfaceHub {
    /// Checks a reply that arrived on `surface_id` against the call it names: the call must
    /// be one this hub sent on that surface, still open, and its value must fit the return
    /// schema. Gives the execution to resume and the result; records nothing.
    pub fn ingest_function_response(
        &self,
        surface_id: &str,
        message: &[u8],
    ) -> Result<(ExecutionId, FunctionResult), IngestError> {
        self.ingest_reply(None, surface_id, message)
    }

    /// [`SurfaceHub::ingest_function_response`] for a reply that arrived on `execution`'s
    /// surface `surface_id` (a renderer session bound to it): a call another execution issued
    /// is unknown here.
    pub fn ingest_function_response_on(
        &self,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<FunctionResult, IngestError> {
        self.ingest_reply(Some(execution), surface_id, message)
            .map(|(_, result)| result)
    }

    fn ingest_reply(
        &self,
        bound_to: Option<&ExecutionId>,
        surface_id: &str,
        message: &[u8],
    ) -> Result<(ExecutionId, FunctionResult), IngestError> {
        let (call_id, outcome) = parse_reply(message)?;
        let state = self.state();
        let execution = state
            .call_owner
            .get(&call_id)
            .filter(|owner| bound_to.is_none_or(|bound| bound == *owner))
            .cloned()
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        let exec = state
            .executions
            .get(&execution)
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        let request = exec
            .requests
            .get(&call_id)
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        if request.surface_id != surface_id {
            return Err(IngestError::WrongSurface {
                expected: request.surface_id.clone(),
                got: surface_id.to_owned(),
            });
        }
        if !exec.open_calls.contains_key(&call_id) {
            // Either never sent (its gate is not durable) or already answered.
            let answered = exec
                .surfaces
                .get(surface_id)
                .is_some_and(|s| !s.bridge.is_pending(&call_id));
            return Err(if answered {
                IngestError::AlreadyAnswered { call_id }
            } else {
                IngestError::UnknownCallId { call_id }
            });
        }
        let surface = exec
            .surfaces
            .get(surface_id)
            .ok_or_else(|| IngestError::UnknownCallId {
                call_id: call_id.clone(),
            })?;
        let result = surface.bridge.check_reply(call_id, outcome)?;
        Ok((execution, result))
    }

    /// Checks a reply and resumes the gate waiting for it. Only the first of several replies
    /// to one call is recorded; the others are refused.
    pub async fn deliver_function_response<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        surface_id: &str,
        message: &[u8],
    ) -> Result<FunctionResult, HubError> {
        self.deliver_function_response_as(runtime, &Caller::anonymous(), surface_id, message)
            .await
    }

    /// [`SurfaceHub::deliver_function_response`] from `caller` (the renderer session the
    /// application identified), whom the runtime's resume authenticator sees (K12.2, LD-019).
    pub async fn deliver_function_response_as<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        caller: &Caller,
        surface_id: &str,
        message: &[u8],
    ) -> Result<FunctionResult, HubError> {
        let (execution, result) = self.ingest_function_response(surface_id, message)?;
        let payload = Payload::encode(&result.payload()).map_err(|err| {
            HubError::Ingest(IngestError::InvalidResult {
                call_id: result.call_id.clone(),
                name: result.name.clone(),
                detail: err.to_string(),
            })
        })?;
        runtime
            .resume_as(
                caller,
                &execution,
                FUNCTION_RESULT_EVENT,
                &result.call_id,
                payload,
            )
            .await
            .map_err(|source| HubError::Resume { source })?;
        Ok(result)
    }

    /// Parses an action sent on `execution`'s surface `surface_id`, and checks that the
    /// surface could have sent it: a component of the surface declares it, its context is what
    /// the component binds over the masked model, and a gate of the execution waits for it.
    pub fn ingest_action(
        &self,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<InboundAction, HubError> {
        let state = self.state();
        let surface = state
            .executions
            .get(execution)
            .and_then(|e| e.surfaces.get(surface_id))
            .ok_or_else(|| HubError::UnknownSurface {
                execution: execution.clone(),
                surface_id: surface_id.to_owned(),
            })?;
        let action = surface.bridge.ingest_action(message)?;
        let waiting = state
            .executions
            .get(execution)
            .is_some_and(|e| e.waiting_actions.contains_key(&action.name));
        if !waiting {
            return Err(IngestError::NoGateWaiting { name: action.name }.into());
        }
        Ok(action)
    }

    /// Parses an action and resumes the `A2UIAction` gate keyed by its name.
    pub async fn deliver_action<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<InboundAction, HubError> {
        self.deliver_action_as(
            runtime,
            &Caller::anonymous(),
            execution,
            surface_id,
            message,
        )
        .await
    }

    /// [`SurfaceHub::deliver_action`] from `caller` (the renderer session the application
    /// identified), whom the runtime's resume authenticator sees (K12.2, LD-019).
    pub async fn deliver_action_as<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        caller: &Caller,
        execution: &ExecutionId,
        surface_id: &str,
        message: &[u8],
    ) -> Result<InboundAction, HubError> {
        let action = self.ingest_action(execution, surface_id, message)?;
        let payload = Payload::encode(&action.payload()).map_err(|err| {
            HubError::Ingest(IngestError::InvalidResult {
                call_id: String::new(),
                name: action.name.clone(),
                detail: err.to_string(),
            })
        })?;
        runtime
            .resume_as(
                caller,
                execution,
                InboundAction::EVENT_TYPE,
                action.correlation_key(),
                payload,
            )
            .await
            .map_err(|source| HubError::Resume { source })?;
        Ok(action)
    }
}
