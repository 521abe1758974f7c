//! v1.0 messages onto v0.9, and v0.9 renderer messages back into v1.0 ones.
//!
//! Outbound: `createSurface` becomes `createSurface` (the v0.9 basic catalog), then
//! `updateComponents` and `updateDataModel` at `/` for what v1.0 carries inline; bindings
//! `{"@path"}` become `{"path"}`, calls `{"@call"}` become `{"call"}`; Loom's `Badge` becomes
//! a caption `Text`; `updateDataModel` with `null` omits `value` (v0.9's removal). Inbound:
//! `action` and `error` keep their fields and take the v1.0 envelope, so that the v1.0 parser
//! and the edge's binding rules judge them exactly as they judge a v1.0 renderer's.

use serde_json::{Map, Value};
use thiserror::Error;

use super::PROTOCOL_VERSION_V0_9;
use crate::catalog::{BASIC_CATALOG_ID, LOOM_CATALOG_ID};
use crate::wire::{AgentMessage, PROTOCOL_VERSION, WireError};

/// The id of the v0.9 basic catalog, every v0.9 surface's catalog.
pub const BASIC_CATALOG_V0_9_ID: &str =
    "https://a2ui.org/specification/v0_9/catalogs/basic/catalog.json";

/// A message a v0.9 session cannot carry: refused for that session, nothing sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProjectionError {
    /// v0.9 has no such message (`callRendererFunction`, `agentFunctionResponse`).
    #[error(
        "A2UI v0.9 cannot carry `{kind}`{call}: this session's renderer speaks v0.9, which has no function calls; answer it from a v1.0 session",
        call = call_id.as_deref().map(|id| format!(" (call {id})")).unwrap_or_default()
    )]
    NoSuchMessage {
        /// The v1.0 message kind.
        kind: &'static str,
        /// The call it concerns.
        call_id: Option<String>,
    },
    /// A component of a catalog v0.9's basic catalog does not hold.
    #[error(
        "component `{id}` ({component} of catalog {catalog}) has no counterpart in the A2UI v0.9 basic catalog"
    )]
    UnsupportedComponent {
        /// The component's id.
        id: String,
        /// Its type.
        component: String,
        /// Its catalog.
        catalog: String,
    },
    /// The projected message fails the v0.9 schema (a property v0.9's catalog lacks, ...).
    #[error("the v0.9 form of `{kind}` fails the v0.9 schema: {}", errors.join("; "))]
    Invalid {
        /// The v0.9 message kind.
        kind: String,
        /// What the schema says.
        errors: Vec<String>,
    },
    /// The v0.9 schemas did not compile (a defect of this crate, reported instead of a panic).
    #[error("the A2UI v0.9 schemas do not compile: {0}")]
    Schema(String),
}

/// The v0.9 messages for one v1.0 message, in order, or why a v0.9 renderer cannot have it.
/// Pure: the caller checks the result against [`super::V0_9Schema`] (a session does).
pub fn project_v0_9(message: &AgentMessage) -> Result<Vec<Value>, ProjectionError> {
    match message {
        AgentMessage::CreateSurface(m) => {
            let mut create = Map::new();
            create.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
            create.insert(
                "catalogId".into(),
                Value::String(BASIC_CATALOG_V0_9_ID.to_owned()),
            );
            if let Some(send) = m.send_data_model {
                create.insert("sendDataModel".into(), Value::Bool(send));
            }
            let mut out = vec![envelope("createSurface", create)];
            if let Some(components) = &m.components {
                out.push(update_components(&m.surface_id, components)?);
            }
            if let Some(model) = &m.data_model {
                let mut update = Map::new();
                update.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
                update.insert("path".into(), Value::String("/".into()));
                update.insert("value".into(), Value::Object(model.clone()));
                out.push(envelope("updateDataModel", update));
            }
            Ok(out)
        }
        AgentMessage::UpdateComponents(m) => {
            Ok(vec![update_components(&m.surface_id, &m.components)?])
        }
        AgentMessage::UpdateDataModel(m) => {
            let mut update = Map::new();
            update.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
            if let Some(path) = &m.path {
                update.insert("path".into(), Value::String(path.clone()));
            }
            // v0.9 removes the key at `path` when `value` is omitted; v1.0 sends `null`.
            if !m.value.is_null() {
                update.insert("value".into(), m.value.clone());
            }
            Ok(vec![envelope("updateDataModel", update)])
        }
        AgentMessage::DeleteSurface(m) => {
            let mut delete = Map::new();
            delete.insert("surfaceId".into(), Value::String(m.surface_id.clone()));
            Ok(vec![envelope("deleteSurface", delete)])
        }
        AgentMessage::CallRendererFunction(m) => Err(ProjectionError::NoSuchMessage {
            kind: "callRendererFunction",
            call_id: Some(m.function_call_id.clone()),
        }),
        AgentMessage::AgentFunctionResponse(m) => Err(ProjectionError::NoSuchMessage {
            kind: "agentFunctionResponse",
            call_id: Some(m.function_call_id.clone()),
        }),
    }
}

/// A v0.9 renderer message (`action` or `error`) as the v1.0 value the edge reads, or why it
/// is not one. The fields are kept as sent: the v1.0 parser checks them.
pub fn renderer_message_from_v0_9(value: &Value) -> Result<Value, WireError> {
    let Value::Object(map) = value else {
        return Err(WireError::WrongType {
            at: "/".into(),
            expected: "an object",
            found: super::negotiate::json_type(value),
        });
    };
    match map.get("version") {
        None => {
            return Err(WireError::MissingField {
                at: "/version".into(),
            });
        }
        Some(Value::String(v)) if v == PROTOCOL_VERSION_V0_9 => {}
        Some(other) => {
            return Err(WireError::WrongVersion {
                found: other.to_string(),
            });
        }
    }
    let mut kind = None;
    for key in map.keys() {
        match key.as_str() {
            "version" => {}
            "action" | "error" => {
                if let Some(first) = kind.replace(key.clone()) {
                    return Err(WireError::SeveralMessages {
                        first,
                        second: key.clone(),
                    });
                }
            }
            other => {
                return Err(WireError::UnknownField {
                    at: format!("/{}", other.replace('~', "~0").replace('/', "~1")),
                });
            }
        }
    }
    let Some(kind) = kind else {
        return Err(WireError::NoMessage {
            expected: "action, error (v0.9)",
        });
    };
    // v0.9's action has these fields only (`@a2ui/web_core` reads it strictly too); v1.0's
    // others (`userMessage`, `metadata`, `catalogId`) are no part of it.
    if let (true, Some(Value::Object(action))) = (kind == "action", map.get("action")) {
        const ACTION_FIELDS: [&str; 5] = [
            "name",
            "surfaceId",
            "sourceComponentId",
            "timestamp",
            "context",
        ];
        if let Some(extra) = action.keys().find(|k| !ACTION_FIELDS.contains(&k.as_str())) {
            return Err(WireError::UnknownField {
                at: format!("/action/{}", extra.replace('~', "~0").replace('/', "~1")),
            });
        }
    }
    let mut out = Map::with_capacity(2);
    out.insert("version".into(), Value::String(PROTOCOL_VERSION.to_owned()));
    out.insert(kind.clone(), map[&kind].clone());
    Ok(Value::Object(out))
}

fn envelope(kind: &str, body: Map<String, Value>) -> Value {
    let mut map = Map::with_capacity(2);
    map.insert(
        "version".into(),
        Value::String(PROTOCOL_VERSION_V0_9.to_owned()),
    );
    map.insert(kind.to_owned(), Value::Object(body));
    Value::Object(map)
}

fn update_components(surface_id: &str, components: &[Value]) -> Result<Value, ProjectionError> {
    let components = components
        .iter()
        .map(component)
        .collect::<Result<Vec<_>, _>>()?;
    let mut update = Map::new();
    update.insert("surfaceId".into(), Value::String(surface_id.to_owned()));
    update.insert("components".into(), Value::Array(components));
    Ok(envelope("updateComponents", update))
}

/// One component: its catalog must be the basic one (or Loom's, whose Badge is a caption).
fn component(value: &Value) -> Result<Value, ProjectionError> {
    let Value::Object(map) = value else {
        // The bridge checked every component against its catalog; not an object cannot
        // happen, and the schema check refuses it if it does.
        return Ok(convert(value));
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).unwrap_or_default();
    let id = text("id").to_owned();
    let kind = text("component").to_owned();
    let catalog = map
        .get("catalogId")
        .and_then(Value::as_str)
        .unwrap_or(BASIC_CATALOG_ID);
    if catalog == LOOM_CATALOG_ID && kind == "Badge" {
        let mut caption = Map::new();
        caption.insert("id".into(), Value::String(id));
        caption.insert("component".into(), Value::String("Text".into()));
        if let Some(text) = map.get("text") {
            caption.insert("text".into(), convert(text));
        }
        caption.insert("variant".into(), Value::String("caption".into()));
        return Ok(Value::Object(caption));
    }
    if catalog != BASIC_CATALOG_ID {
        return Err(ProjectionError::UnsupportedComponent {
            id,
            component: kind,
            catalog: catalog.to_owned(),
        });
    }
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        if key != "catalogId" {
            out.insert(key.clone(), convert(value));
        }
    }
    Ok(Value::Object(out))
}

/// Bindings and calls in v0.9's spelling, everywhere in a value.
fn convert(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(convert).collect()),
        Value::Object(map) => {
            if let (1, Some(path)) = (map.len(), map.get("@path")) {
                let mut binding = Map::with_capacity(1);
                binding.insert("path".into(), path.clone());
                return Value::Object(binding);
            }
            if let Some(name) = map.get("@call") {
                let mut call = Map::with_capacity(2);
                call.insert("call".into(), name.clone());
                if let Some(args) = map.get("args") {
                    call.insert("args".into(), convert(args));
                }
                return Value::Object(call);
            }
            Value::Object(
                map.iter()
                    .map(|(key, value)| (key.clone(), convert(value)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}
