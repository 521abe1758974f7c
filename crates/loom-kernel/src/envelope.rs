//! The envelope every stored event travels in, and its two JSON encodings.
//!
//! - The *envelope form* (`to_json` / `from_json`) is self-describing:
//!   `{"executionId":"..","seq":0,"schema":1,"recordedAtMs":..,"event":{"type":..}}`. Exports
//!   and tools use it.
//! - The *record form* (`encode_record` / `decode_record`) is what a store keeps under the key
//!   `(execution, seq)`: the envelope without `executionId` and `seq`, which the key holds, in
//!   the binary layout of `record.rs`. Records that earlier builds wrote as JSON (the envelope
//!   object without those two fields) are still read.
//!
//! Both are decoded with the schema checked before the event is read, so that an event written
//! by a newer [`EVENT_SCHEMA`] is refused as such instead of failing on a field this build does
//! not know.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::event::{EVENT_SCHEMA, Event};
use crate::id::ExecutionId;

/// One event at its place in one execution's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEnvelope {
    /// The execution whose log holds the event.
    pub execution_id: ExecutionId,
    /// Gapless from 0 within the execution.
    pub seq: u64,
    /// The [`EVENT_SCHEMA`] the event was written with.
    pub schema: u32,
    /// Wall-clock milliseconds since the Unix epoch when the store accepted the event.
    /// Metadata for people and tools: no fold reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_at_ms: Option<u64>,
    /// The event itself.
    pub event: Event,
}

/// Why stored or exported bytes are not an event this build can use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error(
        "event written with EVENT_SCHEMA {found}, but this build reads up to {supported}; upgrade Loom to read it"
    )]
    /// The event was written with an `EVENT_SCHEMA` this build does not know.
    UnsupportedSchema {
        /// The schema of the event.
        found: u32,
        /// The newest schema this build reads.
        supported: u32,
    },
    /// The JSON is not an envelope.
    #[error("malformed event: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The stored record is not a valid record.
    #[error("invalid record: {detail}")]
    InvalidRecord {
        /// What went wrong, in words.
        detail: String,
    },
    /// The record's bytes changed since it was written (a flipped bit on disk, a torn write
    /// the storage engine did not catch).
    #[error(
        "record checksum mismatch: stored {expected:#010x}, computed {found:#010x}: the record is damaged"
    )]
    ChecksumMismatch {
        /// The checksum stored with the record.
        expected: u32,
        /// The checksum of the bytes read.
        found: u32,
    },
}

/// The fields of either form, decoded in one pass: when `schema` comes before `event` (as Loom
/// writes it) the event is checked and decoded in place; otherwise it is kept raw and decoded
/// once the schema is known.
#[derive(Default)]
struct Fields {
    execution_id: Option<ExecutionId>,
    seq: Option<u64>,
    schema: Option<u32>,
    recorded_at_ms: Option<u64>,
    event: Option<Event>,
    deferred: Option<Box<RawValue>>,
    too_new: bool,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Key {
    ExecutionId,
    Seq,
    Schema,
    RecordedAtMs,
    Event,
    #[serde(other)]
    Other,
}

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an event record object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::ExecutionId => fields.execution_id = Some(map.next_value()?),
                Key::Seq => fields.seq = Some(map.next_value()?),
                Key::Schema => fields.schema = Some(map.next_value()?),
                Key::RecordedAtMs => fields.recorded_at_ms = map.next_value()?,
                Key::Event => match fields.schema {
                    Some(schema) if schema > EVENT_SCHEMA => {
                        map.next_value::<IgnoredAny>()?;
                        fields.too_new = true;
                    }
                    Some(_) => fields.event = Some(map.next_value()?),
                    None => fields.deferred = Some(map.next_value()?),
                },
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(FieldsVisitor)
    }
}

impl Fields {
    fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        // Validating the whole record once is cheaper than serde_json validating each string.
        let text = std::str::from_utf8(bytes).map_err(|err| {
            <serde_json::Error as serde::de::Error>::custom(format_args!(
                "record is not UTF-8: {err}"
            ))
        })?;
        let fields: Fields = serde_json::from_str(text)?;
        let schema = fields
            .schema
            .ok_or_else(|| <serde_json::Error as serde::de::Error>::missing_field("schema"))?;
        if fields.too_new || schema > EVENT_SCHEMA {
            return Err(DecodeError::UnsupportedSchema {
                found: schema,
                supported: EVENT_SCHEMA,
            });
        }
        Ok(fields)
    }

    fn into_event(self) -> Result<Event, DecodeError> {
        match (self.event, self.deferred) {
            (Some(event), _) => Ok(event),
            (None, Some(raw)) => Ok(serde_json::from_str(raw.get())?),
            (None, None) => {
                Err(<serde_json::Error as serde::de::Error>::missing_field("event").into())
            }
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RecordRef<'a> {
    schema: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    recorded_at_ms: Option<u64>,
    event: &'a Event,
}

/// Encodes `event` in the record form, stamped with the current [`EVENT_SCHEMA`].
pub fn encode_record(event: &Event, recorded_at_ms: Option<u64>) -> Vec<u8> {
    crate::kit::record::encode(event, recorded_at_ms)
}

/// [`encode_record`], appended to `bytes`.
pub fn encode_record_into(bytes: &mut Vec<u8>, event: &Event, recorded_at_ms: Option<u64>) {
    crate::kit::record::encode_into(bytes, event, recorded_at_ms);
}

/// Encodes `event` as a JSON record, the form earlier builds wrote (kept for tests of
/// backward compatibility).
pub fn encode_json_record(event: &Event, recorded_at_ms: Option<u64>) -> Vec<u8> {
    let record = RecordRef {
        schema: EVENT_SCHEMA,
        recorded_at_ms,
        event,
    };
    // Serializing these types cannot fail: every map key is a string and no value is a
    // non-finite float (serde_json::Value cannot hold one).
    serde_json::to_vec(&record).unwrap_or_default()
}

/// Decodes a record stored under `(execution_id, seq)`, binary or JSON.
pub fn decode_record(
    execution_id: &ExecutionId,
    seq: u64,
    bytes: &[u8],
) -> Result<EventEnvelope, DecodeError> {
    if matches!(
        bytes.first(),
        Some(&crate::kit::record::BINARY_RECORD | &crate::kit::record::CHECKED_RECORD)
    ) {
        return crate::kit::record::decode(execution_id, seq, bytes);
    }
    let fields = Fields::parse(bytes)?;
    Ok(EventEnvelope {
        execution_id: execution_id.clone(),
        seq,
        schema: fields.schema.unwrap_or(EVENT_SCHEMA),
        recorded_at_ms: fields.recorded_at_ms,
        event: fields.into_event()?,
    })
}

impl EventEnvelope {
    /// `event` at `seq` of `execution_id`, in the current [`EVENT_SCHEMA`], with no
    /// recorded-at time.
    pub fn new(execution_id: ExecutionId, seq: u64, event: Event) -> Self {
        Self {
            execution_id,
            seq,
            schema: EVENT_SCHEMA,
            recorded_at_ms: None,
            event,
        }
    }

    /// The self-describing envelope form, one line of JSON.
    pub fn to_json(&self) -> String {
        // See `encode_record` for why this cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Decodes the envelope form, refusing events from a newer [`EVENT_SCHEMA`].
    pub fn from_json(json: &str) -> Result<Self, DecodeError> {
        use serde::de::Error as _;
        let mut fields = Fields::parse(json.as_bytes())?;
        let execution_id = fields
            .execution_id
            .take()
            .ok_or_else(|| serde_json::Error::missing_field("executionId"))?;
        let seq = fields
            .seq
            .ok_or_else(|| serde_json::Error::missing_field("seq"))?;
        Ok(Self {
            execution_id,
            seq,
            schema: fields.schema.unwrap_or(EVENT_SCHEMA),
            recorded_at_ms: fields.recorded_at_ms,
            event: fields.into_event()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ExecutionCompleted;
    use serde_json::json;

    fn completed() -> Event {
        Event::ExecutionCompleted(ExecutionCompleted {
            output: json!({"total": 1.1}).into(),
        })
    }

    #[test]
    fn record_round_trips() {
        let id = ExecutionId::new("e1").unwrap();
        let bytes = encode_record(&completed(), Some(5));
        let envelope = decode_record(&id, 3, &bytes).unwrap();
        assert_eq!(envelope.seq, 3);
        assert_eq!(envelope.schema, EVENT_SCHEMA);
        assert_eq!(envelope.recorded_at_ms, Some(5));
        assert_eq!(envelope.event, completed());
    }

    #[test]
    fn envelope_round_trips() {
        let envelope = EventEnvelope {
            execution_id: ExecutionId::new("e1").unwrap(),
            seq: 0,
            schema: EVENT_SCHEMA,
            recorded_at_ms: None,
            event: completed(),
        };
        let json = envelope.to_json();
        assert!(
            json.starts_with(
                r#"{"executionId":"e1","seq":0,"schema":1,"event":{"type":"EXECUTION_COMPLETED""#
            ),
            "{json}"
        );
        assert_eq!(EventEnvelope::from_json(&json).unwrap(), envelope);
    }

    #[test]
    fn newer_schema_is_refused_before_the_event_is_read() {
        let json =
            r#"{"executionId":"e1","seq":0,"schema":2,"event":{"type":"EXECUTION_TELEPORTED"}}"#;
        let err = EventEnvelope::from_json(json).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::UnsupportedSchema {
                found: 2,
                supported: 1
            }
        ));
        assert!(err.to_string().contains("EVENT_SCHEMA 2"), "{err}");
        let err = decode_record(
            &ExecutionId::new("e1").unwrap(),
            0,
            br#"{"schema":9,"event":{}}"#,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            DecodeError::UnsupportedSchema { found: 9, .. }
        ));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let id = ExecutionId::new("e1").unwrap();
        for bad in [
            &b""[..],
            b"{",
            b"null",
            b"{\"schema\":1}",
            b"{\"schema\":1,\"event\":{\"type\":\"NOPE\"}}",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(decode_record(&id, 0, bad), Err(DecodeError::Malformed(_))),
                "{bad:?}"
            );
        }
    }
}
