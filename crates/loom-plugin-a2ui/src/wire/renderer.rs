//! Messages from the renderer to the agent: written and parsed.

use serde_json::{Map, Value};

use super::envelope::{envelope, insert_opt, parse_json, read_envelope};
use super::reader::{self, ObjectReader, as_str, json_type};
use super::{
    Action, CallAgentFunction, FunctionCall, FunctionResponse, RendererError, RendererMessage,
    WireError,
};

const RENDERER_KINDS: [&str; 4] = [
    "action",
    "callAgentFunction",
    "rendererFunctionResponse",
    "error",
];
const VALIDATION_CODES: [&str; 3] = ["VALIDATION_FAILED", "UNALLOWED_PARENT", "UNALLOWED_CHILD"];

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
