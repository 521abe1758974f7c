//! What renderers send to a surface: actions and replies to its calls, checked before
//! anything is recorded, and what they become for the caller to resume a gate with.

use serde_json::{Map, Value, json};

use super::{A2UISurfaceBridge, IngestError};
use crate::action_binding::check_action_binding;
use crate::wire::{FunctionError, FunctionOutcome, RendererMessage};

/// A user action, normalized for the caller to resume a gate (`A2UIAction`, keyed by the
/// action's name) or to start an execution.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundAction {
    /// The action's name.
    pub name: String,
    /// The surface it came from.
    pub surface_id: String,
    /// The component that triggered it.
    pub source_component_id: String,
    /// The resolved context.
    pub context: Map<String, Value>,
    /// The optional human-readable description.
    pub user_message: Option<String>,
}

impl InboundAction {
    /// The gate event type actions resume.
    pub const EVENT_TYPE: &'static str = "A2UIAction";

    /// The correlation key of the gate it resumes: the action's name.
    pub fn correlation_key(&self) -> &str {
        &self.name
    }

    /// The resume payload. The renderer's timestamp is left out: it is client-controlled and
    /// nothing recorded should depend on it.
    pub fn payload(&self) -> Value {
        let mut map = Map::new();
        map.insert("name".into(), Value::String(self.name.clone()));
        map.insert("surfaceId".into(), Value::String(self.surface_id.clone()));
        map.insert(
            "sourceComponentId".into(),
            Value::String(self.source_component_id.clone()),
        );
        map.insert("context".into(), Value::Object(self.context.clone()));
        if let Some(text) = &self.user_message {
            map.insert("userMessage".into(), Value::String(text.clone()));
        }
        Value::Object(map)
    }
}

/// A checked reply to a call this bridge issued, with the surface and function filled in from
/// the bridge's own record (the wire reply names neither).
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionResult {
    /// The call id.
    pub call_id: String,
    /// The surface the call was made on.
    pub surface_id: String,
    /// The function's catalog.
    pub catalog_id: String,
    /// The function's name.
    pub name: String,
    /// The value (checked against the return schema) or the renderer's error.
    pub outcome: FunctionOutcome,
}

impl FunctionResult {
    /// The gate payload for grain A and the effect output for grain B.
    pub fn payload(&self) -> Value {
        let mut map = Map::new();
        map.insert("functionCallId".into(), Value::String(self.call_id.clone()));
        map.insert("surfaceId".into(), Value::String(self.surface_id.clone()));
        map.insert("name".into(), Value::String(self.name.clone()));
        match &self.outcome {
            FunctionOutcome::Value(value) => {
                map.insert("value".into(), value.clone());
            }
            FunctionOutcome::Error(error) => {
                map.insert(
                    "error".into(),
                    json!({"code": error.code, "message": error.message}),
                );
            }
        }
        Value::Object(map)
    }
}

impl A2UISurfaceBridge {
    /// Parses an `action` for this surface: refused unless a component of the surface with
    /// that id declares that action and the context is what its bindings give over the masked
    /// model (`action_binding`).
    pub fn ingest_action(&self, message: &[u8]) -> Result<InboundAction, IngestError> {
        match RendererMessage::parse(message)? {
            RendererMessage::Action(action) => {
                if action.surface_id != self.wire_id {
                    return Err(IngestError::WrongSurface {
                        expected: self.wire_id.clone(),
                        got: action.surface_id,
                    });
                }
                check_action_binding(&self.components, &self.masked_model(), &action)?;
                Ok(InboundAction {
                    name: action.name,
                    surface_id: self.surface_id.clone(),
                    source_component_id: action.source_component_id,
                    context: action.context,
                    user_message: action.user_message,
                })
            }
            other => Err(IngestError::UnexpectedKind {
                expected: "an action",
                got: kind_of(&other),
            }),
        }
    }

    /// Checks a reply (`rendererFunctionResponse`, or a top-level `error` naming the call)
    /// against the call this bridge issued as `expected_call_id`: the id must match, the call
    /// must be pending, and a value must fit the function's return schema. On success the call
    /// is marked answered; on error nothing changes.
    pub fn ingest_function_response(
        &mut self,
        message: &[u8],
        expected_call_id: &str,
    ) -> Result<FunctionResult, IngestError> {
        let (call_id, outcome) = parse_reply(message)?;
        if call_id != expected_call_id {
            return Err(IngestError::MismatchedCallId {
                expected: expected_call_id.to_owned(),
                got: call_id,
            });
        }
        let result = self.check_reply(call_id, outcome)?;
        self.mark_answered(&result.call_id);
        Ok(result)
    }

    pub(crate) fn check_reply(
        &self,
        call_id: String,
        outcome: FunctionOutcome,
    ) -> Result<FunctionResult, IngestError> {
        let Some(call) = self.calls.get(&call_id) else {
            return Err(IngestError::UnknownCallId { call_id });
        };
        if call.answered {
            return Err(IngestError::AlreadyAnswered { call_id });
        }
        if let FunctionOutcome::Value(value) = &outcome {
            self.catalogs
                .check_result(&call.catalog_id, &call.name, value)
                .map_err(|detail| IngestError::InvalidResult {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    detail,
                })?;
        }
        Ok(FunctionResult {
            call_id,
            surface_id: self.surface_id.clone(),
            catalog_id: call.catalog_id.clone(),
            name: call.name.clone(),
            outcome,
        })
    }
}

/// Reads a reply to a call: both error shapes are accepted.
pub(crate) fn parse_reply(message: &[u8]) -> Result<(String, FunctionOutcome), IngestError> {
    match RendererMessage::parse(message)? {
        RendererMessage::RendererFunctionResponse(response) => {
            Ok((response.function_call_id, response.outcome))
        }
        RendererMessage::Error(error) => match error.function_call_id {
            Some(call_id) => Ok((
                call_id,
                FunctionOutcome::Error(FunctionError {
                    code: error.code,
                    message: error.message,
                }),
            )),
            None => Err(IngestError::UnexpectedKind {
                expected: "a function response",
                got: "error without functionCallId",
            }),
        },
        other => Err(IngestError::UnexpectedKind {
            expected: "a function response",
            got: kind_of(&other),
        }),
    }
}

pub(crate) fn kind_of(message: &RendererMessage) -> &'static str {
    match message {
        RendererMessage::Action(_) => "action",
        RendererMessage::CallAgentFunction(_) => "callAgentFunction",
        RendererMessage::RendererFunctionResponse(_) => "rendererFunctionResponse",
        RendererMessage::Error(_) => "error",
        #[allow(unreachable_patterns)]
        _ => "unknown",
    }
}
