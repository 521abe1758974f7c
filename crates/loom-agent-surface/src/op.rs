//! The op vocabulary of `SURFACE_PATCH` events and its JSON form.
//!
//! The kernel stores ops as opaque JSON; this module is the one place that gives that JSON a
//! meaning, in both directions ([`SurfaceOp::to_value`], [`SurfaceOp::from_value`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};
use thiserror::Error;

use crate::path::{PathError, SurfacePath};

/// One change to a surface's data model.
///
/// JSON forms, one per variant:
/// `{"op":"set","path":"order.status","value":"pending"}`,
/// `{"op":"merge","path":"order","value":{"note":"gift"}}`,
/// `{"op":"append","path":"order.items","value":{"sku":"A1"}}`,
/// `{"op":"remove","path":"order.note"}`,
/// `{"op":"increment","path":"order.count","by":1}`.
#[derive(Debug, Clone, PartialEq)]
pub enum SurfaceOp {
    /// Puts `value` at `path`, replacing whatever was there.
    Set {
        /// The dot-path of the op.
        path: SurfacePath,
        /// The new value.
        value: Value,
    },
    /// Shallow merge: each top-level key of `value` replaces the same key of the object at `path`.
    Merge {
        /// Where to merge.
        path: SurfacePath,
        /// The members to set, shallowly, on the object at `path`.
        value: Map<String, Value>,
    },
    /// Pushes `value` onto the array at `path`.
    Append {
        /// The dot-path of the op.
        path: SurfacePath,
        /// The value to append.
        value: Value,
    },
    /// Deletes the object key or array item at `path`.
    Remove {
        /// The dot-path of the op.
        path: SurfacePath,
    },
    /// Adds `by` to the number at `path`.
    Increment {
        /// The dot-path of the op.
        path: SurfacePath,
        /// The amount to add.
        by: Number,
    },
}

/// The name of an op, as its JSON `op` field spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// `set`.
    Set,
    /// `merge`.
    Merge,
    /// `append`.
    Append,
    /// `remove`.
    Remove,
    /// `increment`.
    Increment,
}

impl OpKind {
    /// Every kind, in the order of the docs.
    pub const ALL: [OpKind; 5] = [
        OpKind::Set,
        OpKind::Merge,
        OpKind::Append,
        OpKind::Remove,
        OpKind::Increment,
    ];

    /// The op's name in its JSON form (`set`, `merge`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Set => "set",
            OpKind::Merge => "merge",
            OpKind::Append => "append",
            OpKind::Remove => "remove",
            OpKind::Increment => "increment",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a JSON value is not a [`SurfaceOp`].
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum OpDecodeError {
    /// The op is not a JSON object.
    #[error("a surface op must be a JSON object, got {found}")]
    NotAnObject {
        /// The JSON type it is instead.
        found: &'static str,
    },
    /// The op has no `op` member.
    #[error("a surface op needs a string field `op`")]
    MissingOp,
    /// The `op` member names no known op.
    #[error("unknown surface op `{op}` (expected set, merge, append, remove or increment)")]
    UnknownOp {
        /// The name found.
        op: String,
    },
    /// A member the op needs is missing.
    #[error("surface op `{op}` needs a field `{field}`")]
    MissingField {
        /// The op's kind.
        op: OpKind,
        /// The field's name.
        field: &'static str,
    },
    /// The op has a member it does not take.
    #[error("surface op `{op}` has an unexpected field `{field}`")]
    UnexpectedField {
        /// The op's kind.
        op: OpKind,
        /// The field's name.
        field: String,
    },
    /// A member has the wrong JSON type.
    #[error("field `{field}` of surface op `{op}` must be {expected}, got {found}")]
    WrongType {
        /// The op's kind.
        op: OpKind,
        /// The field's name.
        field: &'static str,
        /// What was expected.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// The op's path is not a dot-path.
    #[error("surface op `{op}` has a bad path: {source}")]
    BadPath {
        /// The op's kind.
        op: OpKind,
        /// Why the path is not valid.
        #[source]
        source: PathError,
    },
}

impl SurfaceOp {
    /// The op's kind.
    pub fn kind(&self) -> OpKind {
        match self {
            SurfaceOp::Set { .. } => OpKind::Set,
            SurfaceOp::Merge { .. } => OpKind::Merge,
            SurfaceOp::Append { .. } => OpKind::Append,
            SurfaceOp::Remove { .. } => OpKind::Remove,
            SurfaceOp::Increment { .. } => OpKind::Increment,
        }
    }

    /// The dot-path the op writes.
    pub fn path(&self) -> &SurfacePath {
        match self {
            SurfaceOp::Set { path, .. }
            | SurfaceOp::Merge { path, .. }
            | SurfaceOp::Append { path, .. }
            | SurfaceOp::Remove { path }
            | SurfaceOp::Increment { path, .. } => path,
        }
    }

    /// The op's JSON form, as stored in a `SURFACE_PATCH` event.
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        out.insert("op".into(), Value::String(self.kind().as_str().into()));
        out.insert("path".into(), Value::String(self.path().to_string()));
        match self {
            SurfaceOp::Set { value, .. } | SurfaceOp::Append { value, .. } => {
                out.insert("value".into(), value.clone());
            }
            SurfaceOp::Merge { value, .. } => {
                out.insert("value".into(), Value::Object(value.clone()));
            }
            SurfaceOp::Remove { .. } => {}
            SurfaceOp::Increment { by, .. } => {
                out.insert("by".into(), Value::Number(by.clone()));
            }
        }
        Value::Object(out)
    }

    /// Reads an op from its JSON form. Unknown fields are refused, so that a typo such as
    /// `"vaule"` fails here instead of silently setting `null`.
    pub fn from_value(value: &Value) -> Result<Self, OpDecodeError> {
        let Value::Object(fields) = value else {
            return Err(OpDecodeError::NotAnObject {
                found: json_type_name(value),
            });
        };
        let Some(Value::String(name)) = fields.get("op") else {
            return Err(OpDecodeError::MissingOp);
        };
        let kind =
            OpKind::parse(name).ok_or_else(|| OpDecodeError::UnknownOp { op: name.clone() })?;
        let payload_field = match kind {
            OpKind::Set | OpKind::Merge | OpKind::Append => Some("value"),
            OpKind::Increment => Some("by"),
            OpKind::Remove => None,
        };
        if let Some(field) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "op" | "path") && Some(k.as_str()) != payload_field)
        {
            return Err(OpDecodeError::UnexpectedField {
                op: kind,
                field: field.clone(),
            });
        }
        let path = match fields.get("path") {
            None => {
                return Err(OpDecodeError::MissingField {
                    op: kind,
                    field: "path",
                });
            }
            Some(Value::String(text)) => SurfacePath::parse(text)
                .map_err(|source| OpDecodeError::BadPath { op: kind, source })?,
            Some(other) => {
                return Err(OpDecodeError::WrongType {
                    op: kind,
                    field: "path",
                    expected: "a string",
                    found: json_type_name(other),
                });
            }
        };
        let payload = |field: &'static str| {
            fields
                .get(field)
                .ok_or(OpDecodeError::MissingField { op: kind, field })
        };
        Ok(match kind {
            OpKind::Set => SurfaceOp::Set {
                path,
                value: payload("value")?.clone(),
            },
            OpKind::Append => SurfaceOp::Append {
                path,
                value: payload("value")?.clone(),
            },
            OpKind::Merge => match payload("value")? {
                Value::Object(map) => SurfaceOp::Merge {
                    path,
                    value: map.clone(),
                },
                other => {
                    return Err(OpDecodeError::WrongType {
                        op: kind,
                        field: "value",
                        expected: "an object",
                        found: json_type_name(other),
                    });
                }
            },
            OpKind::Increment => match payload("by")? {
                Value::Number(by) => SurfaceOp::Increment {
                    path,
                    by: by.clone(),
                },
                other => {
                    return Err(OpDecodeError::WrongType {
                        op: kind,
                        field: "by",
                        expected: "a number",
                        found: json_type_name(other),
                    });
                }
            },
            OpKind::Remove => SurfaceOp::Remove { path },
        })
    }
}

impl Serialize for SurfaceOp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SurfaceOp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// The JSON type of a value with its article (`"a string"`, `"null"`), for error messages
/// that say what was found.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
