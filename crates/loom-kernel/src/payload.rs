//! Payloads: JSON documents the kernel stores and serves without interpreting them.
//!
//! Inputs, outputs, decision values, resume payloads and surface ops are kept as the JSON text
//! they were recorded as. Reading a log then only checks that text, instead of building a tree
//! of `serde_json::Value`s nobody may look at; a flow that wants its typed output decodes the
//! text straight into its own type with [`Payload::decode`].

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// One JSON document, as text. Equality is equality of the text: Loom writes payloads in
/// serde_json's compact form, so equal values recorded by Loom compare equal.
#[derive(Clone)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// JSON `null`.
    pub fn null() -> Self {
        Self::from_value(&Value::Null)
    }

    /// The compact JSON text of `value`.
    pub fn from_value(value: &Value) -> Self {
        // A `Value` always serializes: its map keys are strings and it holds no NaN.
        Self(serde_json::value::to_raw_value(value).unwrap_or_else(|_| null_raw()))
    }

    /// Serializes any value (for example a flow's typed output).
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// Checks that `text` is one JSON document and keeps it as it is.
    pub fn from_json(text: impl Into<String>) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text.into()).map(Self)
    }

    /// Decodes into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The document as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        // The text was checked when the payload was made, so it always parses.
        self.decode().unwrap_or(Value::Null)
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }
}

fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable_null())
}

#[cold]
fn unreachable_null() -> Box<RawValue> {
    // `null` is valid JSON; this branch exists only because the constructor is fallible.
    serde_json::from_str("null").unwrap_or_else(|_| unreachable_null())
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        Self::from_value(&value)
    }
}

impl From<&Value> for Payload {
    fn from(value: &Value) -> Self {
        Self::from_value(value)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.as_json() == other.as_json()
    }
}

impl Eq for Payload {}

impl std::hash::Hash for Payload {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_json().hash(state);
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_text_and_decodes() {
        let payload = Payload::from(json!({"b": [1, 2.5], "a": "x"}));
        assert_eq!(payload.as_json(), r#"{"a":"x","b":[1,2.5]}"#);
        assert_eq!(payload, json!({"a": "x", "b": [1, 2.5]}));
        let back: std::collections::BTreeMap<String, Value> = payload.decode().unwrap();
        assert_eq!(back["a"], "x");
        assert_eq!(Payload::null().as_json(), "null");
    }

    #[test]
    fn refuses_text_that_is_not_one_document() {
        assert!(Payload::from_json("{").is_err());
        assert!(Payload::from_json("1 2").is_err());
        assert_eq!(Payload::from_json(" [1] ").unwrap().to_value(), json!([1]));
    }

    #[test]
    fn decodes_from_a_value_tree_too() {
        let payload: Payload = serde_json::from_value(json!({"k": [true]})).unwrap();
        assert_eq!(payload.as_json(), r#"{"k":[true]}"#);
    }
}
