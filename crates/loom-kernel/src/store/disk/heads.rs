//! The values of the `heads` table (layout 5, LD-037): an execution's head with a check that
//! binds it to its id.
//!
//! A value holds the head in its low 48 bits and, above them, 16 bits of a CRC-32C of the
//! execution id and the head. So a value read under another id (a damaged key: an execution
//! listed that is not there) or with a flipped bit (a head one off, a log read short or long)
//! is refused, whatever the open's `verify_on_open`. The tag is never 0: a value whose top 16
//! bits are 0 was written by layout 4 or before and reads as the head it is (a file opened
//! read-only, or one whose values [`ensure_checked`] has not reached yet).

use std::ops::Bound;

use redb::{Database, ReadableTable};

use super::{HEADS, META};
use crate::checksum::crc32c_of_parts;
use crate::store::StorageError;

/// The meta key saying every value of `heads` carries its check.
const CHECKED: &str = "heads_checked";

/// How many values one commit of [`ensure_checked`] rewrites.
const AT_ONCE: usize = 16_384;

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

/// Gives every `heads` value written before layout 5 its check, once per file (meta key
/// `"heads_checked"`): run by an open for writing, after the journal is applied and before the
/// store's threads start. Many commits of [`AT_ONCE`] values each, so the rewrite needs no copy
/// of every id in memory and redb reuses the pages each commit frees (one transaction for a
/// million heads doubled a file's size); a crash between them leaves a layout 5 file whose
/// values are some checked, some not, both read as they are, and the next open goes on. A
/// value that is checked already is left as it is, and one that fails its check refuses the
/// open. A new file has nothing to rewrite and is marked at once.
pub(super) fn ensure_checked(db: &Database) -> Result<(), StorageError> {
    let mut after: Option<String> = None;
    let mut rewritten = 0u64;
    loop {
        let txn = db.begin_write().map_err(StorageError::new)?;
        let done = {
            let mut meta = txn.open_table(META).map_err(StorageError::new)?;
            if meta.get(CHECKED).map_err(StorageError::new)?.is_some() {
                None
            } else {
                let mut heads = txn.open_table(HEADS).map_err(StorageError::new)?;
                let lower = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                let mut unchecked = Vec::new();
                let mut last = None;
                for entry in heads
                    .range::<&str>((lower, Bound::Unbounded))
                    .map_err(StorageError::new)?
                    .take(AT_ONCE)
                {
                    let (id, value) = entry.map_err(StorageError::new)?;
                    let (id, value) = (id.value(), value.value());
                    let head = decode(id, value)?;
                    if value >> HEAD_BITS == 0 {
                        unchecked.push((id.to_owned(), head));
                    }
                    last = Some(id.to_owned());
                }
                for (id, head) in &unchecked {
                    heads
                        .insert(id.as_str(), encode(id, *head)?)
                        .map_err(StorageError::new)?;
                }
                rewritten += unchecked.len() as u64;
                if last.is_none() {
                    meta.insert(CHECKED, 1).map_err(StorageError::new)?;
                }
                Some(last)
            }
        };
        let Some(last) = done else {
            txn.abort().map_err(StorageError::new)?;
            return Ok(());
        };
        txn.commit().map_err(StorageError::new)?;
        match last {
            Some(id) => after = Some(id),
            None => {
                if rewritten > 0 {
                    tracing::info!(rewritten, "every head of the store file carries its check");
                }
                return Ok(());
            }
        }
    }
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

    /// A database with `count` heads written before the check and, every seventh, one
    /// written with it (a rewrite a crash cut short), and no mark.
    fn half_checked(count: usize) -> (Database, Vec<(String, u64)>) {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        let mut expected = Vec::new();
        {
            txn.open_table(META).unwrap();
            let mut heads = txn.open_table(HEADS).unwrap();
            for n in 0..count {
                let (id, head) = (format!("e{n:06}"), n as u64 % 97);
                let value = if n % 7 == 0 {
                    encode(&id, head).unwrap()
                } else {
                    head
                };
                heads.insert(id.as_str(), value).unwrap();
                expected.push((id, head));
            }
        }
        txn.commit().unwrap();
        (db, expected)
    }

    fn stored(db: &Database) -> (Vec<(String, u64)>, bool) {
        use redb::ReadableDatabase;
        let txn = db.begin_read().unwrap();
        let heads = txn.open_table(HEADS).unwrap();
        let values = heads
            .iter()
            .unwrap()
            .map(|entry| {
                let (id, value) = entry.unwrap();
                (id.value().to_owned(), value.value())
            })
            .collect();
        let checked = txn
            .open_table(META)
            .unwrap()
            .get(CHECKED)
            .unwrap()
            .is_some();
        (values, checked)
    }

    #[test]
    fn every_head_gets_its_check_over_many_commits_and_once() {
        let (db, expected) = half_checked(2 * AT_ONCE + 5);
        ensure_checked(&db).unwrap();
        let (values, checked) = stored(&db);
        assert!(checked);
        assert_eq!(values.len(), expected.len());
        for ((id, value), (same, head)) in values.iter().zip(&expected) {
            assert_eq!(id, same);
            assert_ne!(value >> HEAD_BITS, 0, "{id} checked");
            assert_eq!(decode(id, *value).unwrap(), *head, "{id}");
        }
        ensure_checked(&db).unwrap();
        assert_eq!(stored(&db).0, values, "a second run changes nothing");
    }

    #[test]
    fn a_value_failing_its_check_refuses_the_rewrite() {
        let (db, _) = half_checked(10);
        let txn = db.begin_write().unwrap();
        {
            let mut heads = txn.open_table(HEADS).unwrap();
            let value = encode("e000003", 3).unwrap();
            heads.insert("e000004", value).unwrap();
        }
        txn.commit().unwrap();
        let err = ensure_checked(&db).unwrap_err();
        assert!(err.to_string().contains("execution e000004"), "{err}");
        assert!(!stored(&db).1, "not marked");
    }

    #[test]
    fn a_head_past_48_bits_is_refused() {
        assert!(encode("e", HEAD_MASK + 1).is_err());
    }
}
