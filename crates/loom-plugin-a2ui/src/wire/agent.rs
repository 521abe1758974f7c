//! Messages from the agent to the renderer: written and parsed.

use serde_json::{Map, Value};

use super::envelope::{envelope, insert_opt, parse_json, push_json, read_envelope};
use super::reader::{ObjectReader, json_type};
use super::{
    AgentMessage, CallRendererFunction, CreateSurface, DeleteSurface, FunctionCall,
    FunctionResponse, UpdateComponents, UpdateDataModel, WireError,
};

const AGENT_KINDS: [&str; 6] = [
    "createSurface",
    "updateComponents",
    "updateDataModel",
    "deleteSurface",
    "callRendererFunction",
    "agentFunctionResponse",
];

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
