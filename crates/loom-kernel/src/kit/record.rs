//! The record codec: the bytes a store keeps for one event under `(execution, seq)`.
//!
//! Public on purpose: every store writes the same records (the embedded one, the PostgreSQL
//! one), so tools such as `replay-check` read any of them alike. A store calls [`encode`] (or
//! [`encode_into`] to reuse a buffer) when appending and [`decode`] — or
//! [`crate::envelope::decode_record`], which also reads the JSON records of older builds — when
//! reading. The execution id and the seq are not in the record: the store's key holds them.
//!
//! JSON is the envelope's public form (exports, tools); inside a store the envelope's structure
//! is written in a compact binary layout and only the payloads stay JSON text, so reading a log
//! does not parse field names, escapes and numbers for every event (LD-005).
//!
//! # Forms, told apart by the first byte
//! - [`CHECKED_RECORD`] (`0xB2`, written by this build): the marker, the CRC-32C of the body
//!   (`u32`), then the body. A mismatch is refused as [`DecodeError::ChecksumMismatch`] before
//!   anything else is read (LD-007).
//! - [`BINARY_RECORD`] (`0xB1`, earlier builds): the marker, then the body, unchecked.
//! - `{`: the JSON record of the earliest builds (read by `decode_record` only).
//!
//! # Body (little-endian)
//! `schema: u32`, `recorded_at: u8 (0|1) [u64]`, `type: u8`, then the event's fields in
//! declaration order: strings and payloads as `len: u32` + UTF-8 bytes, integers at their
//! width, options as `u8 (0|1)` + value, sets as `count: u32` + items. A field added within a
//! schema gets a new type tag for the new layout, and the old tag stays readable
//! (`EFFECT_INDOUBT`: tag 4 without `reason`, tag 13 with it; `STEP_STARTED`: tag 1 without
//! `max_cost`, tag 14 with it, written only when it is not 0), so a truncated record never
//! reads as an older complete one. The schema comes first, so an event of a newer schema is
//! refused before anything else is read.
//!
//! # Errors
//! Decoding never panics: any byte string gives an event or a [`DecodeError`].

use std::collections::BTreeSet;

use crate::envelope::{DecodeError, EventEnvelope};
use crate::event::*;
use crate::id::ExecutionId;
use crate::payload::Payload;

/// The first byte of a binary record without a checksum, as builds before LD-007 wrote it
/// (a JSON record starts with `{`). Still read.
pub const BINARY_RECORD: u8 = 0xB1;

/// The first byte of a checksummed binary record, the form this build writes: the marker,
/// then the CRC-32C of everything after the checksum (`u32`, little-endian), then the same
/// layout as a [`BINARY_RECORD`] after its marker. See LD-007.
pub const CHECKED_RECORD: u8 = 0xB2;

/// Bytes before a checked record's body: the marker and the checksum.
const CHECKED_HEADER: usize = 5;

/// Encodes `event` as a checksummed binary record stamped with the current [`EVENT_SCHEMA`].
pub fn encode(event: &Event, recorded_at_ms: Option<u64>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(128);
    encode_into(&mut bytes, event, recorded_at_ms);
    bytes
}

/// [`encode`], appending to `bytes`: a caller encoding many events reuses one buffer.
pub fn encode_into(bytes: &mut Vec<u8>, event: &Event, recorded_at_ms: Option<u64>) {
    let start = bytes.len();
    bytes.push(CHECKED_RECORD);
    bytes.extend_from_slice(&[0; 4]);
    encode_body(bytes, event, recorded_at_ms);
    let checksum = crate::checksum::crc32c(&bytes[start + CHECKED_HEADER..]);
    bytes[start + 1..start + CHECKED_HEADER].copy_from_slice(&checksum.to_le_bytes());
}

/// Encodes `event` as a binary record without a checksum, the form builds before LD-007
/// wrote (kept for tests of backward compatibility).
pub fn encode_unchecked(event: &Event, recorded_at_ms: Option<u64>) -> Vec<u8> {
    let mut bytes = vec![BINARY_RECORD];
    encode_body(&mut bytes, event, recorded_at_ms);
    bytes
}

/// The layout after the marker (and checksum): schema, recorded-at, type, fields.
fn encode_body(bytes: &mut Vec<u8>, event: &Event, recorded_at_ms: Option<u64>) {
    let mut out = Writer(bytes);
    out.u32(EVENT_SCHEMA);
    out.opt_u64(recorded_at_ms);
    match event {
        Event::ExecutionStarted(e) => {
            out.u8(0);
            out.str(&e.flow);
            out.u32(e.flow_version);
            out.payload(&e.input);
            out.len(e.capabilities.len());
            for capability in &e.capabilities {
                out.str(capability);
            }
            out.opt_u64(e.budget);
        }
        Event::StepStarted(e) => {
            // Tag 1 is the layout without `max_cost`, still written when it is 0 (LD-024).
            out.u8(if e.max_cost == 0 { 1 } else { 14 });
            out.str(&e.step_id);
            out.str(&e.effect);
            out.str(&e.input_digest);
            out.u32(e.attempt);
            if e.max_cost != 0 {
                out.u64(e.max_cost);
            }
        }
        Event::StepCompleted(e) => {
            out.u8(2);
            out.str(&e.step_id);
            out.str(&e.effect);
            out.str(&e.input_digest);
            out.payload(&e.output);
            out.u64(e.cost);
        }
        Event::StepFailed(e) => {
            out.u8(3);
            out.str(&e.step_id);
            out.str(&e.effect);
            out.str(&e.input_digest);
            out.error(&e.error);
            out.u64(e.cost);
        }
        Event::EffectInDoubt(e) => {
            // Tag 4 is the layout without `reason`, written by earlier builds.
            out.u8(13);
            out.str(&e.step_id);
            out.str(&e.effect);
            out.u32(e.attempt);
            match &e.reason {
                Some(reason) => {
                    out.u8(1);
                    out.error(reason);
                }
                None => out.u8(0),
            }
        }
        Event::EffectResolved(e) => {
            out.u8(5);
            out.str(&e.step_id);
            match &e.verdict {
                Verdict::Retry => out.u8(0),
                Verdict::Completed { output } => {
                    out.u8(1);
                    out.payload(output);
                }
                Verdict::Failed { error } => {
                    out.u8(2);
                    out.error(error);
                }
            }
            out.opt_str(e.operator.as_deref());
        }
        Event::DecisionRecorded(e) => {
            out.u8(6);
            out.str(&e.step_id);
            out.str(&e.kind);
            out.payload(&e.value);
        }
        Event::ExecutionSuspended(e) => {
            out.u8(7);
            out.str(&e.gate_id);
            out.str(&e.event_type);
            out.str(&e.correlation_key);
        }
        Event::ExecutionResumed(e) => {
            out.u8(8);
            out.str(&e.gate_id);
            out.str(&e.event_type);
            out.str(&e.correlation_key);
            out.payload(&e.payload);
        }
        Event::SurfacePatch(e) => {
            out.u8(9);
            out.str(&e.step_id);
            out.str(&e.surface_id);
            out.payload(&e.ops);
        }
        Event::ExecutionCompleted(e) => {
            out.u8(10);
            out.payload(&e.output);
        }
        Event::ExecutionFailed(e) => {
            out.u8(11);
            out.error(&e.error);
        }
        Event::ExecutionCancelled(e) => {
            out.u8(12);
            out.opt_str(e.reason.as_deref());
        }
    }
}

/// Decodes a binary record (checksummed or not) stored under `(execution_id, seq)`. A
/// checksummed record whose bytes do not match its checksum is refused
/// ([`DecodeError::ChecksumMismatch`]) before anything else is read.
pub fn decode(
    execution_id: &ExecutionId,
    seq: u64,
    bytes: &[u8],
) -> Result<EventEnvelope, DecodeError> {
    let body = match bytes.first() {
        Some(&BINARY_RECORD) => &bytes[1..],
        Some(&CHECKED_RECORD) => {
            let (Some(stored), Some(body)) =
                (bytes.get(1..CHECKED_HEADER), bytes.get(CHECKED_HEADER..))
            else {
                return Err(invalid("the record ends early"));
            };
            let mut expected = [0u8; 4];
            expected.copy_from_slice(stored);
            let expected = u32::from_le_bytes(expected);
            let found = crate::checksum::crc32c(body);
            if found != expected {
                return Err(DecodeError::ChecksumMismatch { expected, found });
            }
            body
        }
        _ => return Err(invalid("not a binary record")),
    };
    let mut input = Reader::new(body);
    let schema = input.u32()?;
    if schema > EVENT_SCHEMA {
        return Err(DecodeError::UnsupportedSchema {
            found: schema,
            supported: EVENT_SCHEMA,
        });
    }
    let recorded_at_ms = input.opt_u64()?;
    input.read_text_ahead();
    let event = match input.u8()? {
        0 => Event::ExecutionStarted(ExecutionStarted {
            flow: input.string()?,
            flow_version: input.u32()?,
            input: input.payload()?,
            capabilities: {
                let count = input.len()?;
                let mut capabilities = BTreeSet::new();
                for _ in 0..count {
                    capabilities.insert(input.string()?);
                }
                capabilities
            },
            budget: input.opt_u64()?,
        }),
        1 => Event::StepStarted(StepStarted {
            step_id: input.string()?,
            effect: input.string()?,
            input_digest: input.string()?,
            attempt: input.u32()?,
            max_cost: 0,
        }),
        14 => Event::StepStarted(StepStarted {
            step_id: input.string()?,
            effect: input.string()?,
            input_digest: input.string()?,
            attempt: input.u32()?,
            max_cost: input.u64()?,
        }),
        2 => Event::StepCompleted(StepCompleted {
            step_id: input.string()?,
            effect: input.string()?,
            input_digest: input.string()?,
            output: input.payload()?,
            cost: input.u64()?,
        }),
        3 => Event::StepFailed(StepFailed {
            step_id: input.string()?,
            effect: input.string()?,
            input_digest: input.string()?,
            error: input.error()?,
            cost: input.u64()?,
        }),
        4 => Event::EffectInDoubt(EffectInDoubt {
            step_id: input.string()?,
            effect: input.string()?,
            attempt: input.u32()?,
            reason: None,
        }),
        13 => Event::EffectInDoubt(EffectInDoubt {
            step_id: input.string()?,
            effect: input.string()?,
            attempt: input.u32()?,
            reason: match input.u8()? {
                0 => None,
                1 => Some(input.error()?),
                other => return Err(invalid(&format!("bad option tag {other}"))),
            },
        }),
        5 => Event::EffectResolved(EffectResolved {
            step_id: input.string()?,
            verdict: match input.u8()? {
                0 => Verdict::Retry,
                1 => Verdict::Completed {
                    output: input.payload()?,
                },
                2 => Verdict::Failed {
                    error: input.error()?,
                },
                other => return Err(invalid(&format!("unknown verdict {other}"))),
            },
            operator: input.opt_string()?,
        }),
        6 => Event::DecisionRecorded(DecisionRecorded {
            step_id: input.string()?,
            kind: input.string()?,
            value: input.payload()?,
        }),
        7 => Event::ExecutionSuspended(ExecutionSuspended {
            gate_id: input.string()?,
            event_type: input.string()?,
            correlation_key: input.string()?,
        }),
        8 => Event::ExecutionResumed(ExecutionResumed {
            gate_id: input.string()?,
            event_type: input.string()?,
            correlation_key: input.string()?,
            payload: input.payload()?,
        }),
        9 => Event::SurfacePatch(SurfacePatch {
            step_id: input.string()?,
            surface_id: input.string()?,
            ops: input.payload()?,
        }),
        10 => Event::ExecutionCompleted(ExecutionCompleted {
            output: input.payload()?,
        }),
        11 => Event::ExecutionFailed(ExecutionFailed {
            error: input.error()?,
        }),
        12 => Event::ExecutionCancelled(ExecutionCancelled {
            reason: input.opt_string()?,
        }),
        other => return Err(invalid(&format!("unknown event type {other}"))),
    };
    if !input.rest().is_empty() {
        return Err(invalid("bytes left after the event"));
    }
    Ok(EventEnvelope {
        execution_id: execution_id.clone(),
        seq,
        schema,
        recorded_at_ms,
        event,
    })
}

fn invalid(detail: &str) -> DecodeError {
    DecodeError::InvalidRecord {
        detail: detail.to_owned(),
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn len(&mut self, len: usize) {
        // Lengths beyond u32 cannot occur: redb refuses values over 3 GiB.
        self.u32(u32::try_from(len).unwrap_or(u32::MAX));
    }
    fn str(&mut self, value: &str) {
        self.len(value.len());
        self.0.extend_from_slice(value.as_bytes());
    }
    fn opt_str(&mut self, value: Option<&str>) {
        match value {
            Some(value) => {
                self.u8(1);
                self.str(value);
            }
            None => self.u8(0),
        }
    }
    fn opt_u64(&mut self, value: Option<u64>) {
        match value {
            Some(value) => {
                self.u8(1);
                self.u64(value);
            }
            None => self.u8(0),
        }
    }
    fn payload(&mut self, payload: &Payload) {
        self.str(payload.as_json());
    }
    fn error(&mut self, error: &ErrorInfo) {
        self.str(&error.code);
        self.str(&error.message);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// `bytes[text_at..]` as text, when it is all UTF-8: strings are then sliced from it rather
    /// than each checked on its own (short strings are checked a byte at a time).
    text: Option<&'a str>,
    text_at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            at: 0,
            text: None,
            text_at: 0,
        }
    }

    /// Checks the rest of the record as UTF-8 in one go. After the header, a record usually is:
    /// its strings and payloads are, and so are small lengths and integers. When it is not,
    /// each string is checked on its own.
    fn read_text_ahead(&mut self) {
        self.text = std::str::from_utf8(self.rest()).ok();
        self.text_at = self.at;
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.at..).unwrap_or_default()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let rest = self.rest();
        if rest.len() < n {
            return Err(invalid("the record ends early"));
        }
        self.at += n;
        Ok(&rest[..n])
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(bytes))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }
    fn len(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.u32()?).map_err(|_| invalid("length out of range"))
    }
    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let len = self.len()?;
        let start = self.at;
        let bytes = self.take(len)?;
        match self.text {
            // A slice of UTF-8 text is UTF-8 exactly when both its ends are char boundaries,
            // which `get` checks.
            Some(text) => text
                .get(start - self.text_at..start - self.text_at + len)
                .ok_or_else(|| invalid("a string is not UTF-8")),
            None => std::str::from_utf8(bytes).map_err(|_| invalid("a string is not UTF-8")),
        }
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        self.str().map(str::to_owned)
    }
    fn opt_string(&mut self) -> Result<Option<String>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.string().map(Some),
            other => Err(invalid(&format!("bad option tag {other}"))),
        }
    }
    fn opt_u64(&mut self) -> Result<Option<u64>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.u64().map(Some),
            other => Err(invalid(&format!("bad option tag {other}"))),
        }
    }
    fn payload(&mut self) -> Result<Payload, DecodeError> {
        Ok(Payload::from_stored_json(self.string()?)?)
    }
    fn error(&mut self) -> Result<ErrorInfo, DecodeError> {
        Ok(ErrorInfo {
            code: self.string()?,
            message: self.string()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(step_id: &str, cost: u64) -> Event {
        Event::StepCompleted(StepCompleted {
            step_id: step_id.into(),
            effect: "pay".into(),
            input_digest: "cbf29ce484222325".into(),
            output: Payload::from_json(r#"{"é":[1,2.5]}"#).unwrap(),
            cost,
        })
    }

    #[test]
    fn strings_decode_whether_or_not_the_whole_record_is_text() {
        let id = ExecutionId::new("e").unwrap();
        // Cost 0 leaves the record after its header all UTF-8; a cost of u64::MAX does not.
        for cost in [0, 7, u64::MAX] {
            for recorded_at in [None, Some(u64::MAX)] {
                let event = completed("charge#1é", cost);
                let bytes = encode(&event, recorded_at);
                let envelope = decode(&id, 3, &bytes).unwrap();
                assert_eq!(envelope.event, event);
                assert_eq!(envelope.recorded_at_ms, recorded_at);
            }
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_checked_record_is_refused() {
        let id = ExecutionId::new("e").unwrap();
        let bytes = encode(&completed("charge#1", 42), Some(7));
        assert_eq!(bytes[0], CHECKED_RECORD);
        for byte in 1..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[byte] ^= 1 << bit;
                assert!(
                    decode(&id, 0, &flipped).is_err(),
                    "byte {byte} bit {bit} read as an event"
                );
            }
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 4;
        assert!(matches!(
            decode(&id, 0, &flipped),
            Err(DecodeError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn unchecked_records_of_earlier_builds_still_read() {
        let id = ExecutionId::new("e").unwrap();
        let event = completed("charge#1", 42);
        let old = encode_unchecked(&event, Some(7));
        assert_eq!(old[0], BINARY_RECORD);
        assert_eq!(decode(&id, 0, &old).unwrap().event, event);
        assert_eq!(
            decode(&id, 0, &encode(&event, Some(7))).unwrap().event,
            event
        );
    }

    #[test]
    fn a_string_cut_inside_a_character_is_refused() {
        let id = ExecutionId::new("e").unwrap();
        for cost in [0, u64::MAX] {
            let mut bytes = encode_unchecked(&completed("éa", cost), None);
            // Header: marker, schema, no recorded-at, type; then the step id's length (3).
            assert_eq!(bytes[7..11], [3, 0, 0, 0]);
            bytes[7] = 1;
            let err = decode(&id, 0, &bytes).unwrap_err();
            assert!(err.to_string().contains("not UTF-8"), "{err}");
        }
    }
}
