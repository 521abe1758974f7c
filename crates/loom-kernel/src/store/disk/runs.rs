//! The rows of the `events` table (layout 4, LD-036): one row per append, under the seq of
//! its first event, holding the append's records, so that the applier writes one B-tree entry
//! per append instead of one per event. A row of an older layout holds one bare record.
//!
//! # A run (the first byte tells it from a bare record, whose first byte is a record's)
//! `0xB3`, then the CRC-32C (`u32`, little-endian) of the execution id, the row's first seq
//! (`u64`, little-endian) and the framing that follows, then the framing: the count (`u32`)
//! and each record's length (`u32`), then the records, back to back. The checksum binds the
//! row to its key: a row moved under another id or seq by a damaged key, or a damaged count or
//! length, is refused, never read as other events. Each record keeps its own checksum (LD-007),
//! checked when it is decoded, so the run's covers the framing only.
//!
//! Splitting never panics: any bytes give the records or a [`DamagedRun`].

use crate::checksum::crc32c_of_parts;

/// The first byte of a run. Records begin with `0xB1`, `0xB2` or `{`.
pub(super) const RUN: u8 = 0xB3;

/// Bytes before the framing: the marker and the checksum.
const HEADER: usize = 5;

/// Why a row does not split into records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the events row of execution {execution} at seq {seq} is damaged: {why}")]
pub(super) struct DamagedRun {
    pub(super) execution: String,
    pub(super) seq: u64,
    pub(super) why: &'static str,
}

/// Writes the run of `records` (an append to `id` from `first_seq`) into `out`, replacing
/// what it held. Counts and lengths fit a `u32`: the journal refuses a commit of 4 GiB or more
/// before its appends reach the tables.
pub(super) fn encode<'r>(
    id: &str,
    first_seq: u64,
    records: impl ExactSizeIterator<Item = &'r [u8]> + Clone,
    out: &mut Vec<u8>,
) {
    out.clear();
    let framing = 4 + 4 * records.len();
    let body: usize = records.clone().map(<[u8]>::len).sum();
    out.reserve(HEADER + framing + body);
    out.push(RUN);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(
        &u32::try_from(records.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for record in records.clone() {
        out.extend_from_slice(
            &u32::try_from(record.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
    }
    let checksum = checksum(id, first_seq, &out[HEADER..HEADER + framing]);
    out[1..HEADER].copy_from_slice(&checksum.to_le_bytes());
    for record in records {
        out.extend_from_slice(record);
    }
}

fn checksum(id: &str, first_seq: u64, framing: &[u8]) -> u32 {
    crc32c_of_parts(&[id.as_bytes(), &first_seq.to_le_bytes(), framing])
}

/// Every event of `id`'s log, decoded from its rows in `events`, for the builds of an index
/// from the logs of an older file; `None` when a row or a record is damaged (the fold reports
/// such a log when it is read).
pub(super) fn decoded_log(
    events: &impl redb::ReadableTable<(&'static str, u64), &'static [u8]>,
    execution: &crate::id::ExecutionId,
) -> Result<Option<Vec<crate::envelope::EventEnvelope>>, crate::store::StorageError> {
    use crate::store::StorageError;
    let id = execution.as_str();
    let mut log = Vec::new();
    for row in events
        .range::<(&str, u64)>((id, 0)..=(id, u64::MAX))
        .map_err(StorageError::new)?
    {
        let (key, row) = row.map_err(StorageError::new)?;
        let first_seq = key.value().1;
        let Ok(records) = split(id, first_seq, row.value()) else {
            return Ok(None);
        };
        for (seq, record) in (first_seq..).zip(records) {
            match crate::envelope::decode_record(execution, seq, record) {
                Ok(envelope) => log.push(envelope),
                Err(_) => return Ok(None),
            }
        }
    }
    Ok(Some(log))
}

/// The records of the row `(id, first_seq)`, in seq order from `first_seq`.
pub(super) fn split<'a>(
    id: &str,
    first_seq: u64,
    row: &'a [u8],
) -> Result<Records<'a>, DamagedRun> {
    if row.first() != Some(&RUN) {
        // A row of an older layout: one record, checked when it is decoded.
        return Ok(Records {
            lengths: &[],
            rest: row,
            single: true,
        });
    }
    let damaged = |why| DamagedRun {
        execution: id.to_owned(),
        seq: first_seq,
        why,
    };
    let stored = row
        .get(1..HEADER)
        .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| damaged("it is cut short"))?;
    let count = row
        .get(HEADER..HEADER + 4)
        .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| damaged("it is cut short"))?;
    let framing_end = usize::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(4))
        .and_then(|lengths| lengths.checked_add(HEADER + 4))
        .filter(|end| *end <= row.len())
        .ok_or_else(|| damaged("its count runs past its end"))?;
    if checksum(id, first_seq, &row[HEADER..framing_end]) != stored {
        return Err(damaged(
            "its checksum does not match (its key or framing changed)",
        ));
    }
    if count == 0 {
        return Err(damaged("it holds no record"));
    }
    let lengths = &row[HEADER + 4..framing_end];
    let rest = &row[framing_end..];
    let total = lengths
        .chunks_exact(4)
        .try_fold(0usize, |sum, length| {
            let length = u32::from_le_bytes([length[0], length[1], length[2], length[3]]);
            sum.checked_add(usize::try_from(length).ok()?)
        })
        .ok_or_else(|| damaged("its lengths overflow"))?;
    if total != rest.len() {
        return Err(damaged("its records do not fill it exactly"));
    }
    Ok(Records {
        lengths,
        rest,
        single: false,
    })
}

/// The records of one row, in seq order.
pub(super) struct Records<'a> {
    lengths: &'a [u8],
    rest: &'a [u8],
    single: bool,
}

impl Records<'_> {
    /// How many records the row holds.
    pub(super) fn record_count(&self) -> usize {
        if self.single {
            1
        } else {
            self.lengths.len() / 4
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.single {
            self.single = false;
            return Some(std::mem::take(&mut self.rest));
        }
        let (length, lengths) = self.lengths.split_first_chunk::<4>()?;
        self.lengths = lengths;
        // Checked by `split`: the lengths add up to what is left.
        let length = usize::try_from(u32::from_le_bytes(*length)).unwrap_or(usize::MAX);
        let (record, rest) = self.rest.split_at(length.min(self.rest.len()));
        self.rest = rest;
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<Vec<u8>> {
        vec![vec![0xB2, 1, 2, 3], vec![], vec![0xB2; 300], vec![7]]
    }

    #[test]
    fn a_run_splits_into_its_records() {
        let mut row = Vec::new();
        encode("e", 5, records().iter().map(Vec::as_slice), &mut row);
        let split = split("e", 5, &row).unwrap();
        assert_eq!(split.record_count(), 4);
        assert_eq!(split.map(<[u8]>::to_vec).collect::<Vec<_>>(), records());
    }

    #[test]
    fn a_bare_record_is_one_record() {
        let split = split("e", 0, &[0xB2, 9, 9]).unwrap();
        assert_eq!(split.record_count(), 1);
        assert_eq!(split.collect::<Vec<_>>(), vec![&[0xB2, 9, 9][..]]);
    }

    #[test]
    fn a_run_under_another_key_is_refused() {
        let mut row = Vec::new();
        encode("e", 5, records().iter().map(Vec::as_slice), &mut row);
        assert!(split("e", 6, &row).is_err());
        assert!(split("f", 5, &row).is_err());
        assert!(split("", 5, &row).is_err());
    }

    #[test]
    fn every_flipped_bit_of_the_header_and_framing_and_every_cut_is_refused() {
        let mut row = Vec::new();
        encode("e", 5, records().iter().map(Vec::as_slice), &mut row);
        let framing_end = HEADER + 4 + 4 * records().len();
        for byte in 1..framing_end {
            for bit in 0..8 {
                let mut flipped = row.clone();
                flipped[byte] ^= 1 << bit;
                assert!(split("e", 5, &flipped).is_err(), "byte {byte} bit {bit}");
            }
        }
        for cut in 1..row.len() {
            assert!(split("e", 5, &row[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = row.clone();
        longer.push(0);
        assert!(split("e", 5, &longer).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_records_split_back_as_they_were(
            records in proptest::collection::vec(proptest::collection::vec(0u8..=255, 0..64), 1..12),
            first_seq in 0u64..u64::MAX / 2,
        ) {
            let mut row = Vec::new();
            encode("run", first_seq, records.iter().map(Vec::as_slice), &mut row);
            let split = split("run", first_seq, &row).unwrap();
            proptest::prop_assert_eq!(split.record_count(), records.len());
            proptest::prop_assert_eq!(split.map(<[u8]>::to_vec).collect::<Vec<_>>(), records);
        }

        #[test]
        fn any_bytes_split_or_are_refused_without_a_panic(
            mut bytes in proptest::collection::vec(0u8..=255, 0..96),
            as_run in proptest::bool::ANY,
        ) {
            if as_run && !bytes.is_empty() {
                bytes[0] = RUN;
            }
            if let Ok(records) = split("any", 7, &bytes) {
                let total: usize = records.map(<[u8]>::len).sum();
                proptest::prop_assert!(total <= bytes.len());
            }
        }
    }

    #[test]
    fn an_empty_run_and_a_huge_count_are_refused() {
        let mut row = Vec::new();
        encode("e", 0, std::iter::empty(), &mut row);
        assert!(split("e", 0, &row).is_err());
        let mut huge = vec![RUN, 0, 0, 0, 0];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(split("e", 0, &huge).is_err());
    }
}
