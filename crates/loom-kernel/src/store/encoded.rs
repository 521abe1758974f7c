//! An append's records encoded one after another in one buffer: two allocations whatever the
//! number of events, where a `Vec` per record and one to list them made `n + 1` (the records
//! are made on the caller's thread for every append of the disk and PostgreSQL stores).

use std::ops::Range;

use crate::event::Event;

/// Records (the record form of [`crate::kit::record`]) in seq order, one after another in one
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
    /// `events` encoded in order, each stamped with `recorded_at_ms`.
    pub fn encode(events: &[Event], recorded_at_ms: Option<u64>) -> Self {
        let mut bytes = Vec::with_capacity(events.len().saturating_mul(BYTES_PER_EVENT));
        let mut ends = Vec::with_capacity(events.len());
        for event in events {
            crate::kit::record::encode_into(&mut bytes, event, recorded_at_ms);
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
        self.bytes.get(self.start_of(index)..end)
    }

    /// Each record, in order.
    pub fn iter(&self) -> RecordsIter<'_> {
        self.iter_range(0..self.len())
    }

    /// The records at the indexes of `range` (cut at the last record), in order.
    pub fn iter_range(&self, range: Range<usize>) -> RecordsIter<'_> {
        RecordsIter {
            records: self,
            next: range.start,
            end: range.end.min(self.len()),
        }
    }

    /// Adds one record after the others.
    pub(crate) fn push(&mut self, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push(self.bytes.len());
    }

    /// Room for `records` more records of `bytes` in all.
    pub(crate) fn reserve(&mut self, records: usize, bytes: usize) {
        self.ends.reserve(records);
        self.bytes.reserve(bytes);
    }

    /// Forgets the first `count` records (all of them, if there are fewer).
    pub(crate) fn forget_first(&mut self, count: usize) {
        let count = count.min(self.len());
        let Some(cut) = count.checked_sub(1).map(|last| self.ends[last]) else {
            return;
        };
        self.bytes.drain(..cut);
        self.ends.drain(..count);
        for end in &mut self.ends {
            *end -= cut;
        }
    }

    /// A copy of the records at the indexes of `range` (cut at the last record).
    pub(crate) fn copy_range(&self, range: Range<usize>) -> Self {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        let base = self.start_of(start);
        Self {
            bytes: self.bytes[base..self.start_of(end)].to_vec(),
            ends: self.ends[start..end].iter().map(|at| at - base).collect(),
        }
    }

    /// The records' bytes, one after another.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Where the record at `index` starts in `bytes` (the end of all when `index` is the count).
    fn start_of(&self, index: usize) -> usize {
        index.checked_sub(1).map_or(0, |before| self.ends[before])
    }
}

/// The records of an [`EncodedRecords`], in order.
#[derive(Debug, Clone)]
pub struct RecordsIter<'a> {
    records: &'a EncodedRecords,
    next: usize,
    end: usize,
}

impl<'a> Iterator for RecordsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.next >= self.end {
            return None;
        }
        let record = self.records.get(self.next)?;
        self.next += 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end.saturating_sub(self.next);
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
            .map(|event| crate::kit::record::encode(event, Some(42)))
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
        assert_eq!(records.iter_range(1..9).collect::<Vec<_>>(), together[1..]);
        let (start, end) = (2, 1);
        assert_eq!(records.iter_range(start..end).len(), 0, "a range backwards");
    }

    #[test]
    fn records_added_forgotten_and_copied_keep_their_bytes() {
        let mut records = EncodedRecords::default();
        for record in [&b"x"[..], b"yy", b"zzz", b"wwww"] {
            records.push(record);
        }
        let copied = records.copy_range(1..3);
        assert_eq!(copied.iter().collect::<Vec<_>>(), [&b"yy"[..], b"zzz"]);
        assert_eq!(copied.into_bytes(), b"yyzzz");
        assert!(records.copy_range(3..9).iter().eq([&b"wwww"[..]]));
        assert!(records.copy_range(5..9).is_empty());
        records.forget_first(2);
        assert_eq!(records.iter().collect::<Vec<_>>(), [&b"zzz"[..], b"wwww"]);
        records.forget_first(0);
        assert_eq!(records.len(), 2);
        records.forget_first(9);
        assert!(records.is_empty() && records.byte_len() == 0);
    }

    #[test]
    fn no_events_are_no_records() {
        let records = EncodedRecords::encode(&[], None);
        assert!(records.is_empty());
        assert_eq!(records.get(0), None);
        assert_eq!(records.iter().next(), None);
    }
}
