//! An append's records encoded one after another in one buffer: two allocations whatever the
//! number of events, where a `Vec` per record and one to list them made `n + 1` (the records
//! are made on the caller's thread for every append of the disk and PostgreSQL stores).

use crate::event::Event;

/// Records (the record form of [`crate::record`]) in seq order, one after another in one
/// buffer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EncodedRecords {
    bytes: Vec<u8>,
    /// Where each record ends in `bytes`.
    ends: Vec<usize>,
}

/// Room reserved per event before encoding: a step's record (its id, effect, input digest and
/// a small output) fits, and the buffer grows for larger ones.
const BYTES_PER_EVENT: usize = 128;

impl EncodedRecords {
    /// No records.
    pub const fn new() -> Self {
        Self {
            bytes: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// `events` encoded in order, each stamped with `recorded_at_ms`.
    pub fn encode(events: &[Event], recorded_at_ms: Option<u64>) -> Self {
        let mut bytes = Vec::with_capacity(events.len().saturating_mul(BYTES_PER_EVENT));
        let mut ends = Vec::with_capacity(events.len());
        for event in events {
            crate::record::encode_into(&mut bytes, event, recorded_at_ms);
            ends.push(bytes.len());
        }
        Self { bytes, ends }
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The records' bytes together.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// The record at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        let end = *self.ends.get(index)?;
        let start = match index.checked_sub(1) {
            Some(before) => self.ends[before],
            None => 0,
        };
        self.bytes.get(start..end)
    }

    /// Each record, in order.
    pub fn iter(&self) -> RecordsIter<'_> {
        RecordsIter {
            records: self,
            next: 0,
        }
    }
}

/// The records of an [`EncodedRecords`], in order.
#[derive(Debug, Clone)]
pub struct RecordsIter<'a> {
    records: &'a EncodedRecords,
    next: usize,
}

impl<'a> Iterator for RecordsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let record = self.records.get(self.next)?;
        self.next += 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.records.len().saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for RecordsIter<'_> {}

impl<'a> IntoIterator for &'a EncodedRecords {
    type Item = &'a [u8];
    type IntoIter = RecordsIter<'a>;

    fn into_iter(self) -> RecordsIter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{completed, started, step_completed};

    #[test]
    fn each_record_is_the_one_the_codec_writes_alone() {
        let events = vec![started("flow"), step_completed("a#1"), completed()];
        let records = EncodedRecords::encode(&events, Some(42));
        assert_eq!(records.len(), 3);
        let alone: Vec<Vec<u8>> = events
            .iter()
            .map(|event| crate::record::encode(event, Some(42)))
            .collect();
        let together: Vec<&[u8]> = records.iter().collect();
        assert_eq!(
            together,
            alone.iter().map(Vec::as_slice).collect::<Vec<_>>()
        );
        assert_eq!(
            records.byte_len(),
            alone.iter().map(Vec::len).sum::<usize>()
        );
        assert_eq!(records.get(3), None);
        assert_eq!(records.iter().len(), 3);
    }

    #[test]
    fn no_events_are_no_records() {
        let records = EncodedRecords::encode(&[], None);
        assert!(records.is_empty());
        assert_eq!(records.get(0), None);
        assert_eq!(records.iter().next(), None);
    }
}
