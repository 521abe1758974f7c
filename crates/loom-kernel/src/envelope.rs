//! The envelope every stored event travels in, and its two JSON encodings.
//!
//! - The *envelope form* (`to_json` / `from_json`) is self-describing:
//!   `{"executionId":"..","seq":0,"schema":1,"recordedAtMs":..,"event":{"type":..}}`. Exports
//!   and tools use it.
//! - The *record form* (`encode_record` / `decode_record`) is what a store keeps under the key
//!   `(execution, seq)`: the same object without `executionId` and `seq`, which the key holds.
//!
//! Both are decoded in two steps: the header first, so that an event written by a newer
//! [`EVENT_SCHEMA`] is refused as such instead of failing on a field this build does not know.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::event::{EVENT_SCHEMA, Event};
use crate::id::ExecutionId;

/// One event at its place in one execution's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEnvelope {
    pub execution_id: ExecutionId,
    /// Gapless from 0 within the execution.
    pub seq: u64,
    /// The [`EVENT_SCHEMA`] the event was written with.
    pub schema: u32,
    /// Wall-clock milliseconds since the Unix epoch when the store accepted the event.
    /// Metadata for people and tools: no fold reads it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_at_ms: Option<u64>,
    pub event: Event,
}

/// Why stored or exported bytes are not an event this build can use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error(
        "event written with EVENT_SCHEMA {found}, but this build reads up to {supported}; upgrade Loom to read it"
    )]
    UnsupportedSchema { found: u32, supported: u32 },
    #[error("malformed event: {0}")]
    Malformed(#[from] serde_json::Error),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordHeader<'a> {
    schema: u32,
    #[serde(default)]
    recorded_at_ms: Option<u64>,
    #[serde(borrow)]
    event: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeHeader<'a> {
    execution_id: ExecutionId,
    seq: u64,
    schema: u32,
    #[serde(default)]
    recorded_at_ms: Option<u64>,
    #[serde(borrow)]
    event: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RecordRef<'a> {
    schema: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    recorded_at_ms: Option<u64>,
    event: &'a Event,
}

fn decode_event(schema: u32, raw: &RawValue) -> Result<Event, DecodeError> {
    if schema > EVENT_SCHEMA {
        return Err(DecodeError::UnsupportedSchema {
            found: schema,
            supported: EVENT_SCHEMA,
        });
    }
    Ok(serde_json::from_str(raw.get())?)
}

/// Encodes `event` in the record form, stamped with the current [`EVENT_SCHEMA`].
pub fn encode_record(event: &Event, recorded_at_ms: Option<u64>) -> Vec<u8> {
    let record = RecordRef {
        schema: EVENT_SCHEMA,
        recorded_at_ms,
        event,
    };
    // Serializing these types cannot fail: every map key is a string and no value is a
    // non-finite float (serde_json::Value cannot hold one).
    serde_json::to_vec(&record).unwrap_or_default()
}

/// Decodes a record stored under `(execution_id, seq)`.
pub fn decode_record(
    execution_id: &ExecutionId,
    seq: u64,
    bytes: &[u8],
) -> Result<EventEnvelope, DecodeError> {
    let header: RecordHeader<'_> = serde_json::from_slice(bytes)?;
    Ok(EventEnvelope {
        execution_id: execution_id.clone(),
        seq,
        schema: header.schema,
        recorded_at_ms: header.recorded_at_ms,
        event: decode_event(header.schema, header.event)?,
    })
}

impl EventEnvelope {
    /// The self-describing envelope form, one line of JSON.
    pub fn to_json(&self) -> String {
        // See `encode_record` for why this cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Decodes the envelope form, refusing events from a newer [`EVENT_SCHEMA`].
    pub fn from_json(json: &str) -> Result<Self, DecodeError> {
        let header: EnvelopeHeader<'_> = serde_json::from_str(json)?;
        Ok(Self {
            event: decode_event(header.schema, header.event)?,
            execution_id: header.execution_id,
            seq: header.seq,
            schema: header.schema,
            recorded_at_ms: header.recorded_at_ms,
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
            output: json!({"total": 1.1}),
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
