//! The A2UI v1.0 wire, as the reference SDK `a2ui-core` 0.4.0 accepts it: every message in both
//! directions, serialized to JSON and parsed strictly.
//!
//! Parsing refuses what the schemas forbid (unknown keys, a wrong `version`, a missing
//! required field, a wrong type) with a [`WireError`] naming the field by its JSON Pointer, and
//! never panics: input nested deeper than `serde_json`'s limit is a [`WireError::Json`].

mod agent;
mod data_model;
mod envelope;
mod functions;
mod reader;
mod renderer;

use serde_json::{Map, Value};
use thiserror::Error;

/// The `version` every v1.0 message carries.
pub const PROTOCOL_VERSION: &str = "v1.0";

/// A message could not be read as an A2UI v1.0 message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes are not JSON (or are nested deeper than the parser allows).
    #[error("not a JSON document: {detail}")]
    Json {
        /// What the JSON parser said.
        detail: String,
    },
    /// `version` is present but is not `v1.0`.
    #[error("`/version` is {found}, expected \"v1.0\"")]
    WrongVersion {
        /// The version the message names.
        found: String,
    },
    /// A required field is absent.
    #[error("`{at}` is required and missing")]
    MissingField {
        /// The path of the missing field.
        at: String,
    },
    /// A key the schema does not allow.
    #[error("`{at}` is not a field of this message")]
    UnknownField {
        /// The path of the unknown field.
        at: String,
    },
    /// A field has the wrong JSON type.
    #[error("`{at}` must be {expected}, found {found}")]
    WrongType {
        /// Where in the message, as a JSON path.
        at: String,
        /// The JSON type expected.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// A field has the right type but a value the schema forbids.
    #[error("`{at}` is invalid: {detail}")]
    InvalidValue {
        /// Where in the message, as a JSON path.
        at: String,
        /// Why the value is not valid.
        detail: String,
    },
    /// The envelope names none of the message kinds of its direction.
    #[error("the message names no known message kind (expected one of {expected})")]
    NoMessage {
        /// The kind of message expected.
        expected: &'static str,
    },
    /// The envelope names several message kinds.
    #[error("the message names several message kinds: `{first}` and `{second}`")]
    SeveralMessages {
        /// The first message found.
        first: String,
        /// The second message found.
        second: String,
    },
}

/// A function call as it appears on the wire: `{"@call": name, "catalogId"?, "args"?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    /// The function's name in its catalog.
    pub name: String,
    /// The catalog that defines it (required on `callRendererFunction`).
    pub catalog_id: Option<String>,
    /// The arguments, if any.
    pub args: Option<Map<String, Value>>,
}

/// A function's error as the renderer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionError {
    /// A machine-readable code, such as `INVALID_FUNCTION_CALL`.
    pub code: String,
    /// A human-readable explanation.
    pub message: String,
}

/// How a function call ended: a value or an error.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionOutcome {
    /// The function returned this value.
    Value(Value),
    /// The function failed.
    Error(FunctionError),
}

/// `rendererFunctionResponse` / `agentFunctionResponse`: the answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionResponse {
    /// The id of the call this answers.
    pub function_call_id: String,
    /// What the function gave back.
    pub outcome: FunctionOutcome,
}

/// `createSurface`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CreateSurface {
    /// The surface's id, unique for the renderer's lifetime.
    pub surface_id: String,
    /// The default catalog of the surface's components and function calls.
    pub catalog_id: Option<String>,
    /// Whether the renderer sends its data model back with every message.
    pub send_data_model: Option<bool>,
    /// The component tree, one of which has id `root`.
    pub components: Option<Vec<Value>>,
    /// The initial data model (masked on the way out).
    pub data_model: Option<Map<String, Value>>,
    /// Surface-level metadata.
    pub metadata: Option<Map<String, Value>>,
}

/// `updateComponents`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateComponents {
    /// The surface to update.
    pub surface_id: String,
    /// Components to add or replace, by id.
    pub components: Vec<Value>,
}

/// `updateDataModel`: the value at one JSON Pointer; `null` removes it.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateDataModel {
    /// The surface to update.
    pub surface_id: String,
    /// The JSON Pointer written; `None` or `/` is the whole model.
    pub path: Option<String>,
    /// The new value; `null` removes the key.
    pub value: Value,
}

/// `deleteSurface`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteSurface {
    /// The surface to delete.
    pub surface_id: String,
}

/// `callRendererFunction`: the agent asks the renderer to run a catalog function.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRendererFunction {
    /// The call id the renderer copies into its reply.
    pub function_call_id: String,
    /// The surface whose data model is the call's context.
    pub surface_id: Option<String>,
    /// What to call; `catalog_id` is required here.
    pub call: FunctionCall,
}

/// A message from the agent (Loom) to the renderer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AgentMessage {
    /// `createSurface`.
    CreateSurface(CreateSurface),
    /// `updateComponents`.
    UpdateComponents(UpdateComponents),
    /// `updateDataModel`.
    UpdateDataModel(UpdateDataModel),
    /// `deleteSurface`.
    DeleteSurface(DeleteSurface),
    /// `callRendererFunction`.
    CallRendererFunction(CallRendererFunction),
    /// `agentFunctionResponse`.
    AgentFunctionResponse(FunctionResponse),
}

/// `action`: a user interaction reported by the renderer.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// The action's name, from the component's `action.event.name`.
    pub name: String,
    /// The surface it came from.
    pub surface_id: String,
    /// The component that triggered it.
    pub source_component_id: String,
    /// The renderer's timestamp, as sent (never read by a fold).
    pub timestamp: String,
    /// The resolved action context.
    pub context: Map<String, Value>,
    /// An optional human-readable description.
    pub user_message: Option<String>,
    /// Optional client metadata.
    pub metadata: Option<Map<String, Value>>,
    /// The catalog of the action, when the renderer names it.
    pub catalog_id: Option<String>,
}

/// `callAgentFunction`: the renderer asks the agent to run a function.
#[derive(Debug, Clone, PartialEq)]
pub struct CallAgentFunction {
    /// The surface the call came from.
    pub surface_id: String,
    /// The id the agent copies into its reply.
    pub function_call_id: String,
    /// What to call.
    pub call: FunctionCall,
}

/// A top-level `error` reported by the renderer.
#[derive(Debug, Clone, PartialEq)]
pub struct RendererError {
    /// The error code.
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// The surface concerned, if the error is about a surface.
    pub surface_id: Option<String>,
    /// The call concerned, if the error answers a function call.
    pub function_call_id: Option<String>,
    /// The failing field, for validation errors.
    pub path: Option<String>,
}

/// A message from the renderer to the agent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RendererMessage {
    /// `action`.
    Action(Action),
    /// `callAgentFunction`.
    CallAgentFunction(CallAgentFunction),
    /// `rendererFunctionResponse`.
    RendererFunctionResponse(FunctionResponse),
    /// A top-level `error`.
    Error(RendererError),
}
