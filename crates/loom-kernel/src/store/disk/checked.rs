//! Values stored with a check of the key they are stored under (layout 5, LD-037): a `u64` (the
//! `heads` values and every `meta` value but `"format"`), and an execution's tail in `tails`.
//!
//! The value sits in the low 48 bits and, above them, the high 16 bits of a CRC-32C of the key
//! and the value (never 0). So a value read under another key (a damaged key) or with a
//! flipped bit is refused, whatever the open's `verify_on_open`. A stored value whose top 16
//! bits are 0 was written by layout 4 or before and reads as it is. `"format"` stays a bare
//! number: it is what an older build reads to refuse the file.

use redb::ReadableTable;

use crate::checksum::crc32c_of_parts;
use crate::store::{ExecutionTail, StorageError};

/// The bits below the check: no head, feed position, journal offset or count reaches 2^48.
const VALUE_BITS: u32 = 48;
pub(super) const VALUE_MASK: u64 = (1 << VALUE_BITS) - 1;

fn check(key: &str, value: u64) -> u64 {
    let crc = crc32c_of_parts(&[key.as_bytes(), &value.to_le_bytes()]);
    // The high half, never 0, so that 0 keeps meaning "written before the check".
    u64::from((crc >> 16).max(1) as u16)
}

/// What stores `value` under `key`; `None` for a value past 48 bits.
pub(super) fn encode(key: &str, value: u64) -> Option<u64> {
    (value <= VALUE_MASK).then(|| check(key, value) << VALUE_BITS | value)
}

/// The value `stored` holds under `key`; `None` when it does not match its check.
pub(super) fn decode(key: &str, stored: u64) -> Option<u64> {
    let value = stored & VALUE_MASK;
    let found = stored >> VALUE_BITS;
    (found == 0 || found == check(key, value)).then_some(value)
}

/// Whether `stored` carries its check (it was written by layout 5).
pub(super) fn is_checked(stored: u64) -> bool {
    stored >> VALUE_BITS != 0
}

/// The value of `key` in `meta`.
pub(super) fn read_meta(
    meta: &impl ReadableTable<&'static str, u64>,
    key: &str,
) -> Result<Option<u64>, StorageError> {
    let Some(stored) = meta.get(key).map_err(StorageError::new)? else {
        return Ok(None);
    };
    decode(key, stored.value()).map(Some).ok_or_else(|| {
        StorageError::msg(format!(
            "the store file is damaged: its {key} in `meta` does not match its check"
        ))
    })
}

/// Stores `value` under `key` in `meta`.
pub(super) fn write_meta(
    meta: &mut redb::Table<'_, &'static str, u64>,
    key: &str,
    value: u64,
) -> Result<(), StorageError> {
    let stored = encode(key, value).ok_or_else(|| {
        StorageError::msg(format!("{key} would be {value}, past what the store keeps"))
    })?;
    meta.insert(key, stored).map_err(StorageError::new)?;
    Ok(())
}

/// The first byte of a `tails` value written by layout 5: a tail encoded by layout 4 or before
/// begins with its own layout byte (1), and reads as it is.
const TAIL_MARKER: u8 = 0xC5;

/// The `tails` value that stores `tail` for `id`: the marker, a CRC-32C of the id and the
/// encoded tail, then the encoded tail.
pub(super) fn tail_value(id: &str, tail: &ExecutionTail) -> Vec<u8> {
    let mut value = Vec::with_capacity(24);
    value.extend_from_slice(&[TAIL_MARKER, 0, 0, 0, 0]);
    tail.encode_into(&mut value);
    let crc = crc32c_of_parts(&[id.as_bytes(), &value[5..]]);
    value[1..5].copy_from_slice(&crc.to_le_bytes());
    value
}

/// Whether a `tails` value carries its frame (it was written by layout 5).
pub(super) fn is_framed_tail(value: &[u8]) -> bool {
    value.first() == Some(&TAIL_MARKER)
}

/// The tail a `tails` value stores for `id`; an error naming the damage when it does not decode
/// or does not match its check.
pub(super) fn tail(id: &str, value: &[u8]) -> Result<ExecutionTail, StorageError> {
    let encoded = match value.split_first() {
        Some((&TAIL_MARKER, rest)) => rest
            .split_first_chunk::<4>()
            .filter(|(crc, encoded)| {
                u32::from_le_bytes(**crc) == crc32c_of_parts(&[id.as_bytes(), encoded])
            })
            .map(|(_, encoded)| encoded),
        _ => Some(value),
    };
    encoded
        .and_then(ExecutionTail::decode)
        .ok_or_else(|| StorageError::msg(format!("the stored tail of execution {id} is damaged")))
}

/// `id`'s tail in `tails`; a new one for a log the tables do not hold.
pub(super) fn tail_of(
    tails: &impl ReadableTable<&'static str, &'static [u8]>,
    id: &str,
) -> Result<ExecutionTail, StorageError> {
    match tails.get(id).map_err(StorageError::new)? {
        None => Ok(ExecutionTail::new()),
        Some(value) => tail(id, value.value()),
    }
}

/// Whether the meta key `flag` (what a one-time build sets once done) is in the file, read in a
/// read transaction (`false` in a file of an older build).
pub(super) fn flag_set(
    txn: &redb::ReadTransaction,
    flag: &str,
) -> Result<bool, crate::store::ReadError> {
    use crate::store::ReadError;
    let meta = txn.open_table(super::META).map_err(ReadError::storage)?;
    Ok(meta.get(flag).map_err(ReadError::storage)?.is_some())
}

/// Sets the meta key `flag` and commits `txn`: a one-time build is done.
pub(super) fn commit_with_flag(
    txn: redb::WriteTransaction,
    flag: &str,
) -> Result<(), StorageError> {
    {
        let mut meta = txn.open_table(super::META).map_err(StorageError::new)?;
        write_meta(&mut meta, flag, 1)?;
    }
    txn.commit().map_err(StorageError::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_reads_back_under_its_key_only() {
        for value in [0, 1, 7, 1_000_000, VALUE_MASK] {
            let stored = encode("order-17", value).unwrap();
            assert!(is_checked(stored));
            assert_eq!(decode("order-17", stored), Some(value));
            assert_eq!(decode("order-18", stored), None, "another key, {value}");
        }
    }

    #[test]
    fn every_flipped_bit_is_refused_or_harmless() {
        let stored = encode("e", 41).unwrap();
        for bit in 0..64 {
            // Only a flip that leaves the value alone may pass: one that clears a check of a
            // single bit reads as a value written before the check.
            if let Some(value) = decode("e", stored ^ (1 << bit)) {
                assert_eq!(value, 41, "bit {bit}");
            }
        }
    }

    #[test]
    fn a_value_written_before_the_check_reads_as_it_is() {
        assert!(!is_checked(41));
        assert_eq!(decode("e", 41), Some(41));
    }

    #[test]
    fn a_tail_reads_back_under_its_id_only_and_any_flipped_bit_is_refused() {
        use crate::conformance::{started, step_started};
        let mut tail = ExecutionTail::new();
        for event in [started("f"), step_started("a")] {
            tail.apply(&event, Some(7)).unwrap();
        }
        let value = tail_value("order-17", &tail);
        assert_eq!(self::tail("order-17", &value).unwrap(), tail);
        let err = self::tail("order-18", &value).unwrap_err();
        assert!(
            err.to_string()
                .contains("the stored tail of execution order-18 is damaged"),
            "{err}"
        );
        for bit in 0..value.len() * 8 {
            let mut flipped = value.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(self::tail("order-17", &flipped).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_tail_written_before_the_check_reads_as_it_is() {
        let tail = ExecutionTail::new();
        assert_eq!(self::tail("e", &tail.encode()).unwrap(), tail);
    }

    #[test]
    fn a_value_past_48_bits_is_refused() {
        assert_eq!(encode("e", VALUE_MASK + 1), None);
    }
}
