//! The envelope every message shares (`version` and exactly one kind), and the JSON helpers
//! both directions write and parse with.

use serde_json::{Map, Value};

use super::reader::{self, json_type};
use super::{PROTOCOL_VERSION, WireError};

pub(super) fn envelope(kind: &str, body: Value) -> Value {
    let mut map = Map::with_capacity(2);
    map.insert(
        "version".to_owned(),
        Value::String(PROTOCOL_VERSION.to_owned()),
    );
    map.insert(kind.to_owned(), body);
    Value::Object(map)
}

pub(super) fn insert_opt<T: Into<Value>>(
    map: &mut Map<String, Value>,
    key: &str,
    value: Option<T>,
) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value.into());
    }
}

/// Reads the envelope: an object with `version: "v1.0"` and exactly one of `kinds`.
pub(super) fn read_envelope<'v>(
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

pub(super) fn push_json(out: &mut String, text: &str) {
    out.push_str(&Value::String(text.to_owned()).to_string());
}

pub(super) fn parse_json(bytes: &[u8]) -> Result<Value, WireError> {
    serde_json::from_slice(bytes).map_err(|err| WireError::Json {
        detail: err.to_string(),
    })
}
