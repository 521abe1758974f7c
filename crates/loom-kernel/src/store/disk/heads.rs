//! The values of the `heads` table (layout 5, LD-037): an execution's head with a check that
//! binds it to its id.
//!
//! A value holds the head in its low 48 bits and, above them, 16 bits of a CRC-32C of the
//! execution id and the head. So a value read under another id (a damaged key: an execution
//! listed that is not there) or with a flipped bit (a head one off, a log read short or long)
//! is refused, whatever the open's `verify_on_open`. The tag is never 0: a value whose top 16
//! bits are 0 was written by layout 4 or before and reads as the head it is (a file opened
//! read-only; one opened for writing has every value rewritten when it is brought to layout 5,
//! `open.rs`).

use crate::checksum::crc32c_of_parts;
use crate::store::StorageError;

/// The bits below the tag: no log reaches 2^48 events.
const HEAD_BITS: u32 = 48;
const HEAD_MASK: u64 = (1 << HEAD_BITS) - 1;

fn tag(id: &str, head: u64) -> u64 {
    let crc = crc32c_of_parts(&[id.as_bytes(), &head.to_le_bytes()]);
    // The high half, never 0, so that 0 keeps meaning "written before the tag".
    u64::from((crc >> 16).max(1) as u16)
}

/// The value that stores `head` for `id`.
pub(super) fn encode(id: &str, head: u64) -> Result<u64, StorageError> {
    if head > HEAD_MASK {
        return Err(StorageError::msg(format!(
            "the log of execution {id} would reach {head} events, past what the store keeps"
        )));
    }
    Ok(tag(id, head) << HEAD_BITS | head)
}

/// The head a value stores for `id`; an error naming the damage when it does not belong there.
pub(super) fn decode(id: &str, value: u64) -> Result<u64, StorageError> {
    let head = value & HEAD_MASK;
    let stored = value >> HEAD_BITS;
    if stored == 0 || stored == tag(id, head) {
        return Ok(head);
    }
    Err(StorageError::msg(format!(
        "the store file is damaged: the head stored for execution {id} does not match its check"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_back_under_its_id_only() {
        for head in [0, 1, 7, 1_000_000, HEAD_MASK] {
            let value = encode("order-17", head).unwrap();
            assert_eq!(decode("order-17", value).unwrap(), head);
            assert!(
                decode("order-18", value).is_err(),
                "another id, head {head}"
            );
        }
    }

    #[test]
    fn every_flipped_bit_of_a_value_is_refused_or_harmless() {
        let value = encode("e", 41).unwrap();
        for bit in 0..64 {
            match decode("e", value ^ (1 << bit)) {
                Err(_) => {}
                // Only a flip that leaves the head alone may pass: one that clears a tag of
                // a single bit reads as a value written before the tag.
                Ok(head) => assert_eq!(head, 41, "bit {bit}"),
            }
        }
    }

    #[test]
    fn a_value_written_before_the_tag_reads_as_it_is() {
        assert_eq!(decode("e", 41).unwrap(), 41);
    }

    #[test]
    fn a_head_past_48_bits_is_refused() {
        assert!(encode("e", HEAD_MASK + 1).is_err());
    }
}
