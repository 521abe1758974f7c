//! A strict reader over a JSON object: every key is accounted for, every type checked, and each
//! refusal names the field by its JSON Pointer.

use serde_json::{Map, Value};

use super::WireError;

/// One JSON object being read field by field; `finish` refuses keys nobody asked for.
pub(crate) struct ObjectReader<'v> {
    at: String,
    object: &'v Map<String, Value>,
    seen: Vec<&'static str>,
}

impl<'v> ObjectReader<'v> {
    pub(crate) fn new(at: impl Into<String>, value: &'v Value) -> Result<Self, WireError> {
        let at = at.into();
        match value {
            Value::Object(object) => Ok(Self {
                at,
                object,
                seen: Vec::new(),
            }),
            other => Err(WireError::WrongType {
                at: display_at(&at),
                expected: "an object",
                found: json_type(other),
            }),
        }
    }

    pub(crate) fn field_at(&self, key: &str) -> String {
        format!("{}/{}", self.at, escape(key))
    }

    pub(crate) fn optional(&mut self, key: &'static str) -> Option<&'v Value> {
        self.seen.push(key);
        self.object.get(key)
    }

    pub(crate) fn required(&mut self, key: &'static str) -> Result<&'v Value, WireError> {
        self.optional(key).ok_or_else(|| WireError::MissingField {
            at: self.field_at(key),
        })
    }

    pub(crate) fn required_str(&mut self, key: &'static str) -> Result<String, WireError> {
        let value = self.required(key)?;
        as_str(&self.field_at(key), value)
    }

    pub(crate) fn optional_str(&mut self, key: &'static str) -> Result<Option<String>, WireError> {
        match self.optional(key) {
            None => Ok(None),
            Some(value) => as_str(&self.field_at(key), value).map(Some),
        }
    }

    pub(crate) fn optional_bool(&mut self, key: &'static str) -> Result<Option<bool>, WireError> {
        match self.optional(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(WireError::WrongType {
                at: self.field_at(key),
                expected: "a boolean",
                found: json_type(other),
            }),
        }
    }

    pub(crate) fn optional_object(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Map<String, Value>>, WireError> {
        match self.optional(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map.clone())),
            Some(other) => Err(WireError::WrongType {
                at: self.field_at(key),
                expected: "an object",
                found: json_type(other),
            }),
        }
    }

    /// Refuses the first key (in the object's order) that was not read.
    pub(crate) fn finish(self) -> Result<(), WireError> {
        match self
            .object
            .keys()
            .find(|k| !self.seen.contains(&k.as_str()))
        {
            Some(unknown) => Err(WireError::UnknownField {
                at: self.field_at(unknown),
            }),
            None => Ok(()),
        }
    }
}

pub(crate) fn as_str(at: &str, value: &Value) -> Result<String, WireError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(WireError::WrongType {
            at: display_at(at),
            expected: "a string",
            found: json_type(other),
        }),
    }
}

pub(crate) fn display_at(at: &str) -> String {
    if at.is_empty() {
        "/".to_owned()
    } else {
        at.to_owned()
    }
}

/// RFC 6901 escaping of one reference token.
pub(crate) fn escape(token: &str) -> String {
    if token.contains(['~', '/']) {
        token.replace('~', "~0").replace('/', "~1")
    } else {
        token.to_owned()
    }
}

/// The JSON type of a value, for errors that say what was found.
pub(crate) use loom_agent_surface::json_type_name as json_type;
