//! Where a renderer message goes, for the session it came on: every rule of the binding in one
//! place, used to refuse early with a typed error and again by the kernel's inbound seam,
//! which decides.

use loom_kernel::{Caller, Inbound, InboundHandler, Payload, ResumeAuthenticator, ResumeRequest};
use serde_json::Value;

use crate::InboundAction;
use crate::bridge::IngestError;
use crate::catalog::{AllowedCallers, Catalogs};
use crate::edge::auth::Binding;
use crate::edge::registry::Handoff;
use crate::edge::{EdgeInner, Received, Refused, SESSION_ATTRIBUTE};
use crate::gate::FUNCTION_RESULT_EVENT;
use crate::hub::HubError;
use crate::wire::{
    AgentMessage, CallAgentFunction, FunctionError, FunctionOutcome, FunctionResponse,
    RendererMessage,
};

/// The error codes of an `agentFunctionResponse` this agent answers with (A2UI v1.0).
pub mod agent_function_codes {
    /// No function of that name is known, or this agent implements none of that name.
    pub const UNKNOWN_FUNCTION: &str = "UNKNOWN_FUNCTION";
    /// The call is not one the renderer may make: a `rendererOnly` or `agentOnly` function,
    /// or a call for another surface.
    pub const INVALID_FUNCTION_CALL: &str = "INVALID_FUNCTION_CALL";
}

/// What the kernel is asked to do with an accepted message.
pub(crate) enum Route {
    /// Resume a gate of the session's execution.
    Resume {
        event_type: &'static str,
        correlation_key: String,
        payload: Value,
        received: Received,
    },
    /// Hand a reply to the grain-B step waiting for it.
    StepReply { call_id: String },
    /// Nothing to record; `received` says what the session does.
    Nothing { received: Received },
}

/// Routes `message`, which arrived as `bytes` on session `session` of `binding`.
pub(crate) fn route(
    edge: &EdgeInner,
    session: u64,
    binding: &Binding,
    message: RendererMessage,
    bytes: &[u8],
) -> Result<Route, Refused> {
    match message {
        RendererMessage::Action(_) => {
            within(bytes, edge.limits.max_reply_bytes, "action")?;
            let action = edge
                .hub
                .ingest_action(&binding.execution, &binding.surface_id, bytes)
                .map_err(refused_by_hub)?;
            Ok(Route::Resume {
                event_type: InboundAction::EVENT_TYPE,
                correlation_key: action.correlation_key().to_owned(),
                payload: action.payload(),
                received: Received::Action { name: action.name },
            })
        }
        RendererMessage::RendererFunctionResponse(response) => {
            reply_route(edge, session, binding, &response.function_call_id, bytes)
        }
        RendererMessage::Error(error) => match &error.function_call_id {
            Some(call_id) => reply_route(edge, session, binding, call_id, bytes),
            None => Ok(Route::Nothing {
                received: Received::RendererError {
                    code: error.code,
                    message: error.message,
                },
            }),
        },
        RendererMessage::CallAgentFunction(call) => Ok(Route::Nothing {
            received: Received::Answered(answer_agent_call(
                edge.hub.catalogs(),
                &edge.hub.wire_id(&binding.execution, &binding.surface_id),
                &call,
            )),
        }),
        #[allow(unreachable_patterns)]
        _ => Err(Refused::Ingest(IngestError::UnexpectedKind {
            expected: "an action, a function reply, an error or callAgentFunction",
            got: "another message",
        })),
    }
}

/// A reply (or an error) to call `call_id`: accepted only from a session that answers the
/// function and, for grain B, only from the session the call was sent (or re-sent) to; to any
/// other session the call does not exist.
fn reply_route(
    edge: &EdgeInner,
    session: u64,
    binding: &Binding,
    call_id: &str,
    bytes: &[u8],
) -> Result<Route, Refused> {
    let unknown = || {
        Refused::Ingest(IngestError::UnknownCallId {
            call_id: call_id.to_owned(),
        })
    };
    within(bytes, edge.limits.max_reply_bytes, "function reply")?;
    match edge.registry.check_reply(session, call_id) {
        Handoff::Delivered(function) => {
            reply_within(edge, &function, bytes)?;
            return Ok(Route::StepReply {
                call_id: call_id.to_owned(),
            });
        }
        Handoff::OtherSession => return Err(unknown()),
        Handoff::NotInFlight => {}
    }
    let result = edge
        .hub
        .ingest_function_response_on(&binding.execution, &binding.surface_id, bytes)
        .map_err(Refused::Ingest)?;
    // Grain A: the request is shown to every session of the binding, but only one that
    // answers the function may reply (a v0.9 session answers none).
    if !edge.registry.answers(session, &result.name) {
        return Err(unknown());
    }
    reply_within(edge, &result.name, bytes)?;
    Ok(Route::Resume {
        event_type: FUNCTION_RESULT_EVENT,
        correlation_key: result.call_id.clone(),
        payload: result.payload(),
        received: Received::FunctionReply {
            call_id: result.call_id,
            name: result.name,
        },
    })
}

/// Refuses `bytes` over `limit`.
fn within(bytes: &[u8], limit: usize, what: &str) -> Result<(), Refused> {
    if bytes.len() > limit {
        return Err(Refused::TooLarge {
            what: what.to_owned(),
            bytes: bytes.len(),
            limit,
        });
    }
    Ok(())
}

/// Refuses a reply to `function` over the bound its definition declares.
fn reply_within(edge: &EdgeInner, function: &str, bytes: &[u8]) -> Result<(), Refused> {
    match edge.hub.catalogs().reply_bound(function) {
        Some(limit) => within(bytes, limit, &format!("reply to `{function}`")),
        None => Ok(()),
    }
}

fn refused_by_hub(error: HubError) -> Refused {
    match error {
        HubError::Ingest(error) => Refused::Ingest(error),
        other => Refused::Hub(other.to_string()),
    }
}

/// The in-band answer to a renderer's `callAgentFunction`. This agent implements no function
/// for the renderer to call, so it is always an error; which one says why.
pub(crate) fn answer_agent_call(
    catalogs: &Catalogs,
    wire_id: &str,
    call: &CallAgentFunction,
) -> AgentMessage {
    use agent_function_codes::{INVALID_FUNCTION_CALL, UNKNOWN_FUNCTION};
    let name = &call.call.name;
    let (code, message) = if call.surface_id != wire_id {
        (
            INVALID_FUNCTION_CALL,
            format!("this session shows surface `{wire_id}`"),
        )
    } else {
        match catalogs
            .function(call.call.catalog_id.as_deref(), name)
            .map(|f| f.callers())
        {
            None => (UNKNOWN_FUNCTION, format!("no function `{name}` is known")),
            Some(AllowedCallers::RendererOnly) => (
                INVALID_FUNCTION_CALL,
                format!("`{name}` is rendererOnly: it runs on the renderer"),
            ),
            Some(AllowedCallers::AgentOnly) => (
                INVALID_FUNCTION_CALL,
                format!("`{name}` is agentOnly: the agent calls it on the renderer"),
            ),
            Some(_) => (
                UNKNOWN_FUNCTION,
                format!("this agent implements no function `{name}`"),
            ),
        }
    };
    AgentMessage::AgentFunctionResponse(FunctionResponse {
        function_call_id: call.function_call_id.clone(),
        outcome: FunctionOutcome::Error(FunctionError {
            code: code.to_owned(),
            message,
        }),
    })
}

/// The session a caller speaks for, if the edge opened it.
fn session_of(caller: &Caller) -> Option<Result<u64, String>> {
    let id = caller.attribute(SESSION_ATTRIBUTE)?;
    Some(
        id.parse()
            .map_err(|_| format!("`{id}` is not a renderer session id")),
    )
}

/// The kernel's inbound seam for renderer messages: the authority on what a message of a
/// session may do. Called by `Runtime::inbound_as` with the session's caller.
pub(crate) struct EdgeInbound(pub(crate) std::sync::Arc<EdgeInner>);

impl InboundHandler for EdgeInbound {
    fn handle(&self, _message: &Value) -> Result<Inbound, String> {
        Err("an A2UI message needs the renderer session it came on".to_owned())
    }

    fn handle_from(&self, caller: &Caller, message: &Value) -> Result<Inbound, String> {
        let id = session_of(caller)
            .ok_or_else(|| "an A2UI message needs the renderer session it came on".to_owned())??;
        let binding = self
            .0
            .registry
            .binding_of(id)
            .ok_or_else(|| format!("renderer session #{id} is closed"))?;
        let bytes = message.to_string().into_bytes();
        let parsed = RendererMessage::from_value(message).map_err(|e| e.to_string())?;
        match route(&self.0, id, &binding, parsed, &bytes).map_err(|e| e.to_string())? {
            Route::Resume {
                event_type,
                correlation_key,
                payload,
                ..
            } => Ok(Inbound::Resume {
                execution: binding.execution,
                event_type: event_type.to_owned(),
                correlation_key,
                payload: Payload::encode(&payload).map_err(|e| e.to_string())?,
            }),
            Route::StepReply { call_id } => match self.0.registry.hand_off(id, &call_id, bytes) {
                Handoff::Delivered(_) => Ok(Inbound::Ignore),
                Handoff::OtherSession | Handoff::NotInFlight => {
                    Err(IngestError::UnknownCallId { call_id }.to_string())
                }
            },
            Route::Nothing { .. } => Ok(Inbound::Ignore),
        }
    }
}

/// The resume rule for renderer sessions: a session's caller may resume only the A2UI gates
/// of the execution it is bound to, and only while it is open. Callers the edge did not open
/// (the application's own code, an operator) are not its business.
pub(crate) fn authorize(edge: &EdgeInner, request: &ResumeRequest<'_>) -> Result<(), String> {
    let Some(id) = session_of(request.caller) else {
        return Ok(());
    };
    let id = id?;
    let binding = edge
        .registry
        .binding_of(id)
        .ok_or_else(|| format!("renderer session #{id} is closed"))?;
    if binding.execution != *request.execution {
        return Err(format!(
            "renderer session #{id} is bound to execution {}, not {}",
            binding.execution, request.execution
        ));
    }
    if request.event_type != InboundAction::EVENT_TYPE
        && request.event_type != FUNCTION_RESULT_EVENT
    {
        return Err(format!(
            "renderer session #{id} may not resume a `{}` gate",
            request.event_type
        ));
    }
    Ok(())
}

/// The edge as the runtime's resume authenticator (when the application has no other).
impl ResumeAuthenticator for crate::RendererEdge {
    fn authorize(&self, request: &ResumeRequest<'_>) -> Result<(), String> {
        authorize(&self.inner, request)
    }
}
