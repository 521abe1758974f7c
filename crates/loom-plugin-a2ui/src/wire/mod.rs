//! The A2UI v1.0 wire, as the reference SDK `a2ui-core` 0.4.0 accepts it: every message in both
//! directions, serialized to JSON and parsed strictly.
//!
//! Parsing refuses what the schemas forbid (unknown keys, a wrong `version`, a missing
//! required field, a wrong type) with a [`WireError`] naming the field by its JSON Pointer, and
//! never panics: input nested deeper than `serde_json`'s limit is a [`WireError::Json`].

mod reader;

use serde_json::{Map, Value};
use thiserror::Error;

use reader::{ObjectReader, as_str, json_type};

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

const AGENT_KINDS: [&str; 6] = [
    "createSurface",
    "updateComponents",
    "updateDataModel",
    "deleteSurface",
    "callRendererFunction",
    "agentFunctionResponse",
];
const RENDERER_KINDS: [&str; 4] = [
    "action",
    "callAgentFunction",
    "rendererFunctionResponse",
    "error",
];
const VALIDATION_CODES: [&str; 3] = ["VALIDATION_FAILED", "UNALLOWED_PARENT", "UNALLOWED_CHILD"];

fn envelope(kind: &str, body: Value) -> Value {
    let mut map = Map::with_capacity(2);
    map.insert(
        "version".to_owned(),
        Value::String(PROTOCOL_VERSION.to_owned()),
    );
    map.insert(kind.to_owned(), body);
    Value::Object(map)
}

fn insert_opt<T: Into<Value>>(map: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value.into());
    }
}

impl UpdateDataModel {
    /// What a renderer does with this message: writes the value at the pointer in `model`
    /// (the whole model for no pointer or `/`; a new key, or an index equal to an array's
    /// length, appends), or removes what is there when the value is `null`. Returns whether
    /// the pointer's parent exists and can hold the value; when it does not, `model` is left
    /// as it was.
    pub fn apply_to(self, model: &mut Value) -> bool {
        let value = self.value;
        let path = self.path.as_deref().unwrap_or("/");
        if path == "/" || path.is_empty() {
            *model = value;
            return true;
        }
        let Some((parent, last)) = path.rsplit_once('/') else {
            return false;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        match model.pointer_mut(parent) {
            Some(Value::Object(map)) => {
                if value.is_null() {
                    map.remove(&last);
                } else {
                    map.insert(last, value);
                }
                true
            }
            Some(Value::Array(items)) => {
                let Ok(index) = last.parse::<usize>() else {
                    return false;
                };
                if value.is_null() {
                    if index < items.len() {
                        items.remove(index);
                    }
                } else if index == items.len() {
                    items.push(value);
                } else if let Some(item) = items.get_mut(index) {
                    *item = value;
                } else {
                    return false;
                }
                true
            }
            _ => false,
        }
    }
}

impl FunctionCall {
    /// The wire form.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("@call".to_owned(), Value::String(self.name.clone()));
        insert_opt(&mut map, "catalogId", self.catalog_id.clone());
        insert_opt(&mut map, "args", self.args.clone().map(Value::Object));
        Value::Object(map)
    }

    fn read(at: String, value: &Value) -> Result<Self, WireError> {
        let mut r = ObjectReader::new(at, value)?;
        let name = r.required_str("@call")?;
        let catalog_id = r.optional_str("catalogId")?;
        let args = r.optional_object("args")?;
        r.finish()?;
        Ok(Self {
            name,
            catalog_id,
            args,
        })
    }
}

impl FunctionResponse {
    /// The wire form of the response body.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert(
            "functionCallId".to_owned(),
            Value::String(self.function_call_id.clone()),
        );
        match &self.outcome {
            FunctionOutcome::Value(value) => {
                map.insert("value".to_owned(), value.clone());
            }
            FunctionOutcome::Error(error) => {
                let mut e = Map::new();
                e.insert("code".to_owned(), Value::String(error.code.clone()));
                e.insert("message".to_owned(), Value::String(error.message.clone()));
                map.insert("error".to_owned(), Value::Object(e));
            }
        }
        Value::Object(map)
    }

    fn read(at: String, value: &Value) -> Result<Self, WireError> {
        let mut r = ObjectReader::new(at.clone(), value)?;
        let function_call_id = r.required_str("functionCallId")?;
        let result = r.optional("value");
        let error = r.optional("error");
        let outcome = match (result, error) {
            (Some(_), Some(_)) => {
                return Err(WireError::InvalidValue {
                    at: format!("{at}/error"),
                    detail: "a response carries `value` or `error`, not both".into(),
                });
            }
            (None, None) => {
                return Err(WireError::MissingField {
                    at: format!("{at}/value"),
                });
            }
            (Some(value), None) => FunctionOutcome::Value(value.clone()),
            (None, Some(error)) => {
                let mut e = ObjectReader::new(format!("{at}/error"), error)?;
                let code = e.required_str("code")?;
                let message = e.required_str("message")?;
                e.finish()?;
                FunctionOutcome::Error(FunctionError { code, message })
            }
        };
        r.finish()?;
        Ok(Self {
            function_call_id,
            outcome,
        })
    }
}

fn read_components(at: String, value: &Value) -> Result<Vec<Value>, WireError> {
    let Value::Array(items) = value else {
        return Err(WireError::WrongType {
            at,
            expected: "an array of components",
            found: json_type(value),
        });
    };
    if items.is_empty() {
        return Err(WireError::InvalidValue {
            at,
            detail: "a component list holds at least one component".into(),
        });
    }
    for (index, item) in items.iter().enumerate() {
        let item_at = format!("{at}/{index}");
        let Value::Object(map) = item else {
            return Err(WireError::WrongType {
                at: item_at,
                expected: "an object",
                found: json_type(item),
            });
        };
        for key in ["id", "component"] {
            match map.get(key) {
                Some(Value::String(_)) => {}
                Some(other) => {
                    return Err(WireError::WrongType {
                        at: format!("{item_at}/{key}"),
                        expected: "a string",
                        found: json_type(other),
                    });
                }
                None => {
                    return Err(WireError::MissingField {
                        at: format!("{item_at}/{key}"),
                    });
                }
            }
        }
    }
    Ok(items.clone())
}

/// Reads the envelope: an object with `version: "v1.0"` and exactly one of `kinds`.
fn read_envelope<'v>(
    value: &'v Value,
    kinds: &'static [&'static str],
    expected: &'static str,
) -> Result<(&'static str, &'v Value), WireError> {
    let Value::Object(map) = value else {
        return Err(WireError::WrongType {
            at: "/".into(),
            expected: "an object",
            found: json_type(value),
        });
    };
    match map.get("version") {
        None => {
            return Err(WireError::MissingField {
                at: "/version".into(),
            });
        }
        Some(Value::String(v)) if v == PROTOCOL_VERSION => {}
        Some(other) => {
            return Err(WireError::WrongVersion {
                found: other.to_string(),
            });
        }
    }
    let mut found: Option<(&'static str, &Value)> = None;
    for (key, body) in map {
        if key == "version" {
            continue;
        }
        let Some(kind) = kinds.iter().find(|k| **k == key) else {
            return Err(WireError::UnknownField {
                at: format!("/{}", reader::escape(key)),
            });
        };
        if let Some((first, _)) = found {
            return Err(WireError::SeveralMessages {
                first: first.to_owned(),
                second: (*kind).to_owned(),
            });
        }
        found = Some((kind, body));
    }
    found.ok_or(WireError::NoMessage { expected })
}

fn push_json(out: &mut String, text: &str) {
    out.push_str(&Value::String(text.to_owned()).to_string());
}

fn parse_json(bytes: &[u8]) -> Result<Value, WireError> {
    serde_json::from_slice(bytes).map_err(|err| WireError::Json {
        detail: err.to_string(),
    })
}

impl AgentMessage {
    /// The surface this message is about, if it names one.
    pub fn surface_id(&self) -> Option<&str> {
        match self {
            Self::CreateSurface(m) => Some(&m.surface_id),
            Self::UpdateComponents(m) => Some(&m.surface_id),
            Self::UpdateDataModel(m) => Some(&m.surface_id),
            Self::DeleteSurface(m) => Some(&m.surface_id),
            Self::CallRendererFunction(m) => m.surface_id.as_deref(),
            Self::AgentFunctionResponse(_) => None,
        }
    }

    /// The wire form, as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Self::CreateSurface(m) => {
                let mut map = Map::new();
                map.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
                insert_opt(&mut map, "catalogId", m.catalog_id.clone());
                insert_opt(&mut map, "sendDataModel", m.send_data_model);
                insert_opt(
                    &mut map,
                    "components",
                    m.components.clone().map(Value::Array),
                );
                insert_opt(
                    &mut map,
                    "dataModel",
                    m.data_model.clone().map(Value::Object),
                );
                insert_opt(&mut map, "metadata", m.metadata.clone().map(Value::Object));
                envelope("createSurface", Value::Object(map))
            }
            Self::UpdateComponents(m) => {
                let mut map = Map::new();
                map.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
                map.insert("components".into(), Value::Array(m.components.clone()));
                envelope("updateComponents", Value::Object(map))
            }
            Self::UpdateDataModel(m) => {
                let mut map = Map::new();
                map.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
                insert_opt(&mut map, "path", m.path.clone());
                map.insert("value".into(), m.value.clone());
                envelope("updateDataModel", Value::Object(map))
            }
            Self::DeleteSurface(m) => {
                let mut map = Map::new();
                map.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
                envelope("deleteSurface", Value::Object(map))
            }
            Self::CallRendererFunction(m) => {
                let mut map = Map::new();
                map.insert(
                    "functionCallId".into(),
                    Value::String(m.function_call_id.clone()),
                );
                insert_opt(&mut map, "surfaceId", m.surface_id.clone());
                map.insert("callFunction".into(), m.call.to_value());
                envelope("callRendererFunction", Value::Object(map))
            }
            Self::AgentFunctionResponse(m) => envelope("agentFunctionResponse", m.to_value()),
        }
    }

    /// The wire form, as JSON text.
    pub fn to_json(&self) -> String {
        match self {
            // The hot path of egress: written straight out, without building a value tree.
            Self::UpdateDataModel(m) => {
                let mut out = String::with_capacity(64 + m.surface_id.len());
                out.push_str("{\"version\":\"v1.0\",\"updateDataModel\":{\"surfaceId\":");
                push_json(&mut out, &m.surface_id);
                if let Some(path) = &m.path {
                    out.push_str(",\"path\":");
                    push_json(&mut out, path);
                }
                out.push_str(",\"value\":");
                out.push_str(&m.value.to_string());
                out.push_str("}}");
                out
            }
            _ => self.to_value().to_string(),
        }
    }

    /// Parses an agent-to-renderer message from JSON bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        Self::from_value(&parse_json(bytes)?)
    }

    /// Reads an agent-to-renderer message from a JSON value.
    pub fn from_value(value: &Value) -> Result<Self, WireError> {
        let (kind, body) = read_envelope(
            value,
            &AGENT_KINDS,
            "createSurface, updateComponents, updateDataModel, deleteSurface, callRendererFunction, agentFunctionResponse",
        )?;
        let at = format!("/{kind}");
        match kind {
            "createSurface" => {
                let mut r = ObjectReader::new(at.clone(), body)?;
                let surface_id = r.required_str("surfaceId")?;
                let catalog_id = r.optional_str("catalogId")?;
                let send_data_model = r.optional_bool("sendDataModel")?;
                let components = match r.optional("components") {
                    None => None,
                    Some(v) => Some(read_components(format!("{at}/components"), v)?),
                };
                let data_model = r.optional_object("dataModel")?;
                let metadata = r.optional_object("metadata")?;
                r.finish()?;
                Ok(Self::CreateSurface(CreateSurface {
                    surface_id,
                    catalog_id,
                    send_data_model,
                    components,
                    data_model,
                    metadata,
                }))
            }
            "updateComponents" => {
                let mut r = ObjectReader::new(at.clone(), body)?;
                let surface_id = r.required_str("surfaceId")?;
                let components =
                    read_components(format!("{at}/components"), r.required("components")?)?;
                r.finish()?;
                Ok(Self::UpdateComponents(UpdateComponents {
                    surface_id,
                    components,
                }))
            }
            "updateDataModel" => {
                let mut r = ObjectReader::new(at, body)?;
                let surface_id = r.required_str("surfaceId")?;
                let path = r.optional_str("path")?;
                let value = r.required("value")?.clone();
                r.finish()?;
                Ok(Self::UpdateDataModel(UpdateDataModel {
                    surface_id,
                    path,
                    value,
                }))
            }
            "deleteSurface" => {
                let mut r = ObjectReader::new(at, body)?;
                let surface_id = r.required_str("surfaceId")?;
                r.finish()?;
                Ok(Self::DeleteSurface(DeleteSurface { surface_id }))
            }
            "callRendererFunction" => {
                let mut r = ObjectReader::new(at.clone(), body)?;
                let function_call_id = r.required_str("functionCallId")?;
                let surface_id = r.optional_str("surfaceId")?;
                let call =
                    FunctionCall::read(format!("{at}/callFunction"), r.required("callFunction")?)?;
                if call.catalog_id.is_none() {
                    return Err(WireError::MissingField {
                        at: format!("{at}/callFunction/catalogId"),
                    });
                }
                r.finish()?;
                Ok(Self::CallRendererFunction(CallRendererFunction {
                    function_call_id,
                    surface_id,
                    call,
                }))
            }
            _ => Ok(Self::AgentFunctionResponse(FunctionResponse::read(
                at, body,
            )?)),
        }
    }
}

impl RendererMessage {
    /// Parses a renderer-to-agent message from JSON bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        Self::from_value(&parse_json(bytes)?)
    }

    /// Reads a renderer-to-agent message from a JSON value.
    pub fn from_value(value: &Value) -> Result<Self, WireError> {
        let (kind, body) = read_envelope(
            value,
            &RENDERER_KINDS,
            "action, callAgentFunction, rendererFunctionResponse, error",
        )?;
        let at = format!("/{kind}");
        match kind {
            "action" => {
                let mut r = ObjectReader::new(at.clone(), body)?;
                let name = r.required_str("name")?;
                let surface_id = r.required_str("surfaceId")?;
                let source_component_id = r.required_str("sourceComponentId")?;
                let timestamp = r.required_str("timestamp")?;
                let context = match r.required("context")? {
                    Value::Object(map) => map.clone(),
                    other => {
                        return Err(WireError::WrongType {
                            at: format!("{at}/context"),
                            expected: "an object",
                            found: json_type(other),
                        });
                    }
                };
                let user_message = r.optional_str("userMessage")?;
                let metadata = r.optional_object("metadata")?;
                let catalog_id = r.optional_str("catalogId")?;
                // The schema leaves `action` open: other keys are allowed and ignored.
                Ok(Self::Action(Action {
                    catalog_id,
                    name,
                    surface_id,
                    source_component_id,
                    timestamp,
                    context,
                    user_message,
                    metadata,
                }))
            }
            "callAgentFunction" => {
                let mut r = ObjectReader::new(at.clone(), body)?;
                let surface_id = r.required_str("surfaceId")?;
                let function_call_id = r.required_str("functionCallId")?;
                let call =
                    FunctionCall::read(format!("{at}/callFunction"), r.required("callFunction")?)?;
                r.finish()?;
                Ok(Self::CallAgentFunction(CallAgentFunction {
                    surface_id,
                    function_call_id,
                    call,
                }))
            }
            "rendererFunctionResponse" => Ok(Self::RendererFunctionResponse(
                FunctionResponse::read(at, body)?,
            )),
            _ => read_error(at, body).map(Self::Error),
        }
    }

    /// The wire form, as a JSON value (for tests and tools that play the renderer).
    pub fn to_value(&self) -> Value {
        match self {
            Self::Action(a) => {
                let mut map = Map::new();
                map.insert("name".into(), Value::String(a.name.clone()));
                map.insert("surfaceId".into(), Value::String(a.surface_id.clone()));
                map.insert(
                    "sourceComponentId".into(),
                    Value::String(a.source_component_id.clone()),
                );
                map.insert("timestamp".into(), Value::String(a.timestamp.clone()));
                map.insert("context".into(), Value::Object(a.context.clone()));
                insert_opt(&mut map, "userMessage", a.user_message.clone());
                insert_opt(&mut map, "metadata", a.metadata.clone().map(Value::Object));
                insert_opt(&mut map, "catalogId", a.catalog_id.clone());
                envelope("action", Value::Object(map))
            }
            Self::CallAgentFunction(c) => {
                let mut map = Map::new();
                map.insert("surfaceId".into(), Value::String(c.surface_id.clone()));
                map.insert(
                    "functionCallId".into(),
                    Value::String(c.function_call_id.clone()),
                );
                map.insert("callFunction".into(), c.call.to_value());
                envelope("callAgentFunction", Value::Object(map))
            }
            Self::RendererFunctionResponse(r) => envelope("rendererFunctionResponse", r.to_value()),
            Self::Error(e) => {
                let mut map = Map::new();
                map.insert("code".into(), Value::String(e.code.clone()));
                map.insert("message".into(), Value::String(e.message.clone()));
                insert_opt(&mut map, "surfaceId", e.surface_id.clone());
                insert_opt(&mut map, "functionCallId", e.function_call_id.clone());
                insert_opt(&mut map, "path", e.path.clone());
                envelope("error", Value::Object(map))
            }
        }
    }
}

fn read_error(at: String, body: &Value) -> Result<RendererError, WireError> {
    let Value::Object(map) = body else {
        return Err(WireError::WrongType {
            at,
            expected: "an object",
            found: json_type(body),
        });
    };
    let text = |key: &str| -> Result<Option<String>, WireError> {
        map.get(key)
            .map(|v| as_str(&format!("{at}/{key}"), v))
            .transpose()
    };
    let code = text("code")?.ok_or_else(|| WireError::MissingField {
        at: format!("{at}/code"),
    })?;
    let message = text("message")?.ok_or_else(|| WireError::MissingField {
        at: format!("{at}/message"),
    })?;
    let surface_id = text("surfaceId")?;
    let function_call_id = text("functionCallId")?;
    let path = text("path")?;
    if VALIDATION_CODES.contains(&code.as_str()) {
        // The validation-failed shape is closed and names its surface and field.
        if surface_id.is_none() {
            return Err(WireError::MissingField {
                at: format!("{at}/surfaceId"),
            });
        }
        if path.is_none() {
            return Err(WireError::MissingField {
                at: format!("{at}/path"),
            });
        }
        if let Some(unknown) = map
            .keys()
            .find(|k| !["code", "message", "surfaceId", "path"].contains(&k.as_str()))
        {
            return Err(WireError::UnknownField {
                at: format!("{at}/{}", reader::escape(unknown)),
            });
        }
    } else if surface_id.is_some() == function_call_id.is_some() {
        return Err(WireError::InvalidValue {
            at,
            detail: "a generic error names exactly one of `surfaceId` and `functionCallId`".into(),
        });
    }
    Ok(RendererError {
        code,
        message,
        surface_id,
        function_call_id,
        path,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn update(path: Option<&str>, value: Value) -> UpdateDataModel {
        UpdateDataModel {
            surface_id: "s".to_owned(),
            path: path.map(str::to_owned),
            value,
        }
    }

    #[test]
    fn apply_to_writes_removes_and_appends_as_a_renderer_does() {
        let mut model = json!({});
        assert!(update(None, json!({"a": {"b": 1}, "list": [1]})).apply_to(&mut model));
        assert!(update(Some("/a/c~1d"), json!(2)).apply_to(&mut model));
        assert!(update(Some("/a/b"), Value::Null).apply_to(&mut model));
        assert!(update(Some("/list/1"), json!(2)).apply_to(&mut model));
        assert!(update(Some("/list/0"), json!(0)).apply_to(&mut model));
        assert_eq!(model, json!({"a": {"c/d": 2}, "list": [0, 2]}));
        assert!(update(Some("/list/0"), Value::Null).apply_to(&mut model));
        assert!(update(Some("/"), json!({"x": 1})).apply_to(&mut model));
        assert_eq!(model, json!({"x": 1}));
    }

    #[test]
    fn apply_to_leaves_the_model_alone_where_the_pointer_cannot_go() {
        let mut model = json!({"list": [1], "text": "t"});
        let before = model.clone();
        for path in [
            "/missing/key",
            "/list/5",
            "/list/x",
            "/text/key",
            "no-slash",
        ] {
            assert!(!update(Some(path), json!(1)).apply_to(&mut model), "{path}");
        }
        assert_eq!(model, before);
    }
}
