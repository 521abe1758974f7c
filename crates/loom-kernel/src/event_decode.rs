//! Decoding an [`Event`] from its JSON form without buffering the payload.
//!
//! serde's derived internally tagged enums buffer every object into an intermediate tree
//! before picking the variant. Loom always writes `type` first, so this visitor reads the tag,
//! then hands the rest of the same map to the payload struct's own `Deserialize`. Reading the
//! log is the hot path of recovery and replay, and this halves its cost.

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::event::*;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum EventKind {
    ExecutionStarted,
    StepStarted,
    StepCompleted,
    StepFailed,
    #[serde(rename = "EFFECT_INDOUBT")]
    EffectInDoubt,
    EffectResolved,
    DecisionRecorded,
    ExecutionSuspended,
    ExecutionResumed,
    SurfacePatch,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionCancelled,
}

/// Decodes the payload of a `kind` event from `payload` (an object without `type`).
fn payload<'de, D: Deserializer<'de>>(kind: EventKind, payload: D) -> Result<Event, D::Error> {
    Ok(match kind {
        EventKind::ExecutionStarted => Event::ExecutionStarted(Deserialize::deserialize(payload)?),
        EventKind::StepStarted => Event::StepStarted(Deserialize::deserialize(payload)?),
        EventKind::StepCompleted => Event::StepCompleted(Deserialize::deserialize(payload)?),
        EventKind::StepFailed => Event::StepFailed(Deserialize::deserialize(payload)?),
        EventKind::EffectInDoubt => Event::EffectInDoubt(Deserialize::deserialize(payload)?),
        EventKind::EffectResolved => Event::EffectResolved(Deserialize::deserialize(payload)?),
        EventKind::DecisionRecorded => Event::DecisionRecorded(Deserialize::deserialize(payload)?),
        EventKind::ExecutionSuspended => {
            Event::ExecutionSuspended(Deserialize::deserialize(payload)?)
        }
        EventKind::ExecutionResumed => Event::ExecutionResumed(Deserialize::deserialize(payload)?),
        EventKind::SurfacePatch => Event::SurfacePatch(Deserialize::deserialize(payload)?),
        EventKind::ExecutionCompleted => {
            Event::ExecutionCompleted(Deserialize::deserialize(payload)?)
        }
        EventKind::ExecutionFailed => Event::ExecutionFailed(Deserialize::deserialize(payload)?),
        EventKind::ExecutionCancelled => {
            Event::ExecutionCancelled(Deserialize::deserialize(payload)?)
        }
    })
}

/// An object key, without allocating when it is `type`.
enum FirstKey {
    Type,
    Other(String),
}

impl<'de> Deserialize<'de> for FirstKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = FirstKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<FirstKey, E> {
                Ok(if key == "type" {
                    FirstKey::Type
                } else {
                    FirstKey::Other(key.to_owned())
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = Event;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an event object with a `type`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
        let first = match map.next_key::<FirstKey>()? {
            None => return Err(de::Error::missing_field("type")),
            Some(FirstKey::Type) => {
                let kind: EventKind = map.next_value()?;
                return payload(kind, MapAccessDeserializer::new(map));
            }
            Some(FirstKey::Other(key)) => key,
        };
        // `type` is not first: buffer the object, then decode it the same way.
        let mut rest = Map::new();
        rest.insert(first, map.next_value::<Value>()?);
        while let Some((key, value)) = map.next_entry::<String, Value>()? {
            rest.insert(key, value);
        }
        let tag = rest
            .remove("type")
            .ok_or_else(|| de::Error::missing_field("type"))?;
        let kind = EventKind::deserialize(tag).map_err(de::Error::custom)?;
        payload(kind, Value::Object(rest)).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EventVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_anywhere_decodes_the_same() {
        let first = r#"{"type":"EXECUTION_RESUMED","gateId":"g#1","eventType":"T","correlationKey":"k","payload":{"a":[1]}}"#;
        let last = r#"{"gateId":"g#1","eventType":"T","correlationKey":"k","payload":{"a":[1]},"type":"EXECUTION_RESUMED"}"#;
        let a: Event = serde_json::from_str(first).unwrap();
        let b: Event = serde_json::from_str(last).unwrap();
        assert_eq!(a, b);
        assert_eq!(serde_json::to_string(&a).unwrap(), first);
    }

    #[test]
    fn clear_errors_for_bad_events() {
        let err = serde_json::from_str::<Event>(r#"{"type":"NOPE"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown variant `NOPE`"), "{err}");
        let err = serde_json::from_str::<Event>(r#"{"stepId":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `type`"), "{err}");
        let err =
            serde_json::from_str::<Event>(r#"{"type":"STEP_STARTED","stepId":1}"#).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        assert!(serde_json::from_value::<Event>(json!([])).is_err());
    }
}
