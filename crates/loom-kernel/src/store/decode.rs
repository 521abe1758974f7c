//! Stored records read back: the one decoding every store does, its failure naming the
//! execution and the seq.

use super::ReadError;
use crate::envelope::EventEnvelope;
use crate::id::ExecutionId;

/// Decodes a stored record (the record form of [`crate::kit::record`]): a record that does not
/// decode is a [`ReadError::Decode`] naming the execution and the seq.
pub fn decode_stored(
    execution: &ExecutionId,
    seq: u64,
    record: &[u8],
) -> Result<EventEnvelope, ReadError> {
    crate::envelope::decode_record(execution, seq, record).map_err(|source| ReadError::Decode {
        execution: execution.clone(),
        seq,
        source,
    })
}

/// When and as which flow an execution started, from its first event's record as stored: its
/// `recordedAtMs` and its flow, `0` and `""` where the record does not say (one that does not
/// decode, or is not a start, is listed so rather than refused: the listing is an index, the
/// log decides).
pub fn start_of_first_record(execution: &ExecutionId, record: &[u8]) -> (u64, String) {
    decode_stored(execution, 0, record).map_or((0, String::new()), |envelope| {
        let flow = envelope.event.started_flow().unwrap_or_default().to_owned();
        (envelope.recorded_at_ms.unwrap_or(0), flow)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{completed, id, started};
    use crate::envelope::encode_record;

    #[test]
    fn a_start_gives_its_time_and_flow_anything_else_zero_and_nothing() {
        let e = id("first");
        let record = encode_record(&started("checkout"), Some(1_234));
        assert_eq!(
            start_of_first_record(&e, &record),
            (1_234, "checkout".into())
        );
        // Not a start, no time, cut short, empty, not a record at all: listed as 0 and "".
        let not_a_start = encode_record(&completed(), Some(9));
        assert_eq!(start_of_first_record(&e, &not_a_start), (9, String::new()));
        let no_time = encode_record(&started("checkout"), None);
        assert_eq!(start_of_first_record(&e, &no_time), (0, "checkout".into()));
        for damaged in [
            &record[..record.len() / 2],
            &[][..],
            b"{\"nested\":[[[[".as_slice(),
        ] {
            assert_eq!(start_of_first_record(&e, damaged), (0, String::new()));
        }
    }
}
