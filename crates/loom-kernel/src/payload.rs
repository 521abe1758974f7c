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

/// The deepest nesting of arrays and objects a payload may have: the deepest document
/// serde_json parses into a `Value` (its recursion limit of 128 counts one level more). A
/// deeper document can be written but not parsed back, so neither [`Payload`]'s
/// checked constructors nor the stores accept one: the log never holds what the fold and its
/// readers cannot read.
pub const MAX_DEPTH: usize = 127;

/// Why a value could not be made a payload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// Arrays and objects nest deeper than [`MAX_DEPTH`].
    #[error(
        "the payload nests arrays and objects deeper than {MAX_DEPTH} levels, which no reader of the log can parse"
    )]
    TooDeep,
    /// The value does not serialize, or the text is not one JSON document.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// One JSON document, as text. Equality is equality of the text: Loom writes payloads in
/// serde_json's compact form, so equal values recorded by Loom compare equal.
#[derive(Clone)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// JSON `null`.
    pub fn null() -> Self {
        Self::from_value(&Value::Null)
    }

    /// The compact JSON text of `value`, refusing a value nested deeper than [`MAX_DEPTH`].
    /// Prefer it to [`Payload::from_value`] for values that come from outside.
    pub fn try_from_value(value: &Value) -> Result<Self, PayloadError> {
        if value_depth_exceeds(value, MAX_DEPTH) {
            return Err(PayloadError::TooDeep);
        }
        Ok(Self::from_value(value))
    }

    /// Whether `value` nests arrays and objects deeper than [`MAX_DEPTH`], walked without
    /// recursion: what [`Payload::try_from_value`] refuses. For a reader that must not
    /// descend into a value built in memory that may be nested far deeper than the stack
    /// allows.
    pub fn value_is_too_deep(value: &Value) -> bool {
        value_depth_exceeds(value, MAX_DEPTH)
    }

    /// The compact JSON text of `value`. A value nested deeper than [`MAX_DEPTH`] makes a
    /// payload every store refuses to append ([`Payload::is_too_deep`]); use
    /// [`Payload::try_from_value`] to learn it here.
    pub fn from_value(value: &Value) -> Self {
        // A `Value` always serializes: its map keys are strings and it holds no NaN.
        Self(serde_json::value::to_raw_value(value).unwrap_or_else(|_| null_raw()))
    }

    /// Serializes any value (for example a flow's typed output), refusing one nested deeper
    /// than [`MAX_DEPTH`].
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        let payload = serde_json::value::to_raw_value(value).map(Self)?;
        if payload.is_too_deep() {
            return Err(<serde_json::Error as serde::ser::Error>::custom(
                PayloadError::TooDeep,
            ));
        }
        Ok(payload)
    }

    /// Whether the document nests arrays and objects deeper than [`MAX_DEPTH`]: one scan of
    /// the text, no parse.
    pub fn is_too_deep(&self) -> bool {
        text_depth_exceeds(self.as_json(), MAX_DEPTH)
    }

    /// Checks that `text` is one JSON document, nested no deeper than [`MAX_DEPTH`], and keeps
    /// it as it is.
    pub fn from_json(text: impl Into<String>) -> Result<Self, serde_json::Error> {
        let payload = Self::from_stored_json(text)?;
        if payload.is_too_deep() {
            return Err(<serde_json::Error as serde::de::Error>::custom(
                PayloadError::TooDeep,
            ));
        }
        Ok(payload)
    }

    /// A payload read back from a store: checked as one JSON document, but not for depth, so
    /// that a record written before depth was checked still reads.
    pub(crate) fn from_stored_json(text: impl Into<String>) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text.into()).map(Self)
    }

    /// Decodes into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// Why [`Payload::decode`] failed, in words that never quote the payload: serde's text
    /// names the value it met (`invalid type: string "4111 1111 1111 1111", expected u32`),
    /// and a decode error travels in errors and traces, where a classified value must not go
    /// (K10-R6). Kept: the kind of value met, what was expected, a field's name, where.
    pub fn describe_decode_error(error: &serde_json::Error) -> String {
        let text = error.to_string();
        // serde_json appends " at line L column C" to the message.
        let (message, position) = match text.rfind(" at line ") {
            Some(at) => text.split_at(at),
            None => (text.as_str(), ""),
        };
        let described = describe_serde_message(message).unwrap_or_else(|| {
            "a value that does not fit the type (its text is withheld: it may quote the value)"
                .to_owned()
        });
        format!("{described}{position}")
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

/// serde's message for a value of the wrong shape with the value left out; `None` for a
/// message of another form (a custom one may quote anything).
fn describe_serde_message(message: &str) -> Option<String> {
    for lead in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(lead) {
            let (met, expected) = rest.split_once(", expected ")?;
            return Some(format!("{lead}{}, expected {expected}", kind_of(met)?));
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (_, expected) = rest.split_once("`, expected ")?;
        return Some(format!("unknown variant, expected {expected}"));
    }
    let names_a_field = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .any(|lead| message.starts_with(lead));
    let counts = message.starts_with("invalid length ")
        && message["invalid length ".len()..]
            .split_once(", expected ")
            .is_some_and(|(length, _)| length.bytes().all(|b| b.is_ascii_digit()));
    (names_a_field || counts || message == "EOF while parsing a value").then(|| message.to_owned())
}

/// The kind of value serde's `Unexpected` names (`string "…"` is a string), without the value.
fn kind_of(met: &str) -> Option<&'static str> {
    const KINDS: [&str; 13] = [
        "string",
        "integer",
        "floating point",
        "boolean",
        "character",
        "byte array",
        "unit variant",
        "newtype variant",
        "tuple variant",
        "struct variant",
        "null",
        "map",
        "sequence",
    ];
    KINDS
        .into_iter()
        .find(|kind| met == *kind || met.starts_with(&format!("{kind} ")))
        .or(match met {
            "unit value" => Some("unit value"),
            "Option value" => Some("Option value"),
            "newtype struct" => Some("newtype struct"),
            _ => None,
        })
}

/// Whether the JSON `text` nests arrays and objects deeper than `max`. Brackets inside
/// strings do not count.
fn text_depth_exceeds(text: &str, max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Whether `value` nests arrays and objects deeper than `max`, walked without recursion (a
/// value built in memory can be nested far deeper than the stack allows).
fn value_depth_exceeds(value: &Value, max: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        let depth = depth + 1;
        if depth > max {
            return true;
        }
        stack.extend(children.map(|child| (child, depth)));
    }
    false
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

    /// Each form of serde's message keeps what it says of the type and loses the value.
    #[test]
    fn a_decode_error_is_described_without_the_value() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Card {
            number: u64,
            kind: Kind,
            tags: [u8; 2],
        }
        #[derive(Debug, serde::Deserialize)]
        enum Kind {
            Visa,
        }
        let described = |value: serde_json::Value| {
            let payload = Payload::from_value(&value);
            let error = payload.decode::<Card>().unwrap_err();
            Payload::describe_decode_error(&error)
        };
        let secret = "4111 1111 1111 1111";
        let cases = [
            (
                serde_json::json!({"number": secret, "kind": "Visa", "tags": [1, 2]}),
                "invalid type: string, expected u64",
            ),
            (
                serde_json::json!({"number": -4111, "kind": "Visa", "tags": [1, 2]}),
                "invalid value: integer, expected u64",
            ),
            (
                serde_json::json!({"number": 1, "kind": secret, "tags": [1, 2]}),
                "unknown variant, expected `Visa`",
            ),
            (
                serde_json::json!({"number": 1, "kind": "Visa", "tags": [1]}),
                "invalid length 1, expected an array of length 2",
            ),
            (
                serde_json::json!({"number": 1, "kind": "Visa"}),
                "missing field `tags`",
            ),
            (
                serde_json::json!({"number": 1, "kind": "Visa", "tags": [1, 2], "cvv": 4111}),
                "unknown field `cvv`",
            ),
        ];
        for (value, expected) in cases {
            let text = described(value);
            assert!(text.starts_with(expected), "{text}");
            assert!(!text.contains("4111"), "{text}");
            assert!(text.contains(" at line "), "{text}");
        }
        // Input nested past serde's recursion limit: an error of no known form, withheld.
        let deep = format!("{}\"{secret}\"{}", "[".repeat(10_000), "]".repeat(10_000));
        let error = serde_json::from_str::<Value>(&deep).unwrap_err();
        let text = Payload::describe_decode_error(&error);
        assert!(
            !text.contains("4111") && text.contains(" at line "),
            "{text}"
        );
        let custom = <serde_json::Error as serde::de::Error>::custom(format!("bad card {secret}"));
        let text = Payload::describe_decode_error(&custom);
        assert!(
            !text.contains("4111"),
            "a message of another form is withheld: {text}"
        );
    }
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

    fn nested(depth: usize) -> Value {
        let mut value = json!("leaf");
        for level in 0..depth {
            value = if level % 2 == 0 {
                Value::Array(vec![value])
            } else {
                json!({ "k": value })
            };
        }
        value
    }

    /// The limit is serde_json's own: a payload at the limit parses back, one level deeper
    /// does not, and exactly those are refused.
    #[test]
    fn payloads_deeper_than_serde_json_reads_are_refused() {
        let at_limit = nested(MAX_DEPTH);
        let payload = Payload::try_from_value(&at_limit).unwrap();
        assert!(!payload.is_too_deep());
        assert_eq!(payload.to_value(), at_limit);
        assert!(Payload::from_json(payload.as_json()).is_ok());

        let too_deep = nested(MAX_DEPTH + 1);
        assert!(matches!(
            Payload::try_from_value(&too_deep),
            Err(PayloadError::TooDeep)
        ));
        let unchecked = Payload::from_value(&too_deep);
        assert!(unchecked.is_too_deep());
        assert!(serde_json::from_str::<Value>(unchecked.as_json()).is_err());
        assert!(Payload::from_json(unchecked.as_json()).is_err());
        assert!(Payload::encode(&too_deep).is_err());
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let text = format!("[{:?}]", "[{".repeat(500) + "\\\"");
        let payload = Payload::from_json(text).unwrap();
        assert!(!payload.is_too_deep());
    }

    #[test]
    fn a_value_nested_10000_deep_is_refused_without_overflowing_the_stack() {
        let mut value = json!(1);
        for _ in 0..10_000 {
            value = Value::Array(vec![value]);
        }
        assert!(matches!(
            Payload::try_from_value(&value),
            Err(PayloadError::TooDeep)
        ));
        // Dropping a 10,000-deep Value recurses in serde_json; unwind it by hand.
        let mut current = value;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn decodes_from_a_value_tree_too() {
        let payload: Payload = serde_json::from_value(json!({"k": [true]})).unwrap();
        assert_eq!(payload.as_json(), r#"{"k":[true]}"#);
    }
}
