//! The values of the `heads` table (layout 5, LD-037): an execution's head with a check that
//! binds it to its id; and the pass that gives a file from before layout 5 its checks (its
//! heads, tails and `meta` values: [`ensure_checked`]).
//!
//! A value holds the head with a check of the execution id and the head (`checked.rs`). So a
//! value read under another id (a damaged key: an execution listed that is not there) or with
//! a flipped bit (a head one off, a log read short or long) is refused, whatever the open's
//! `verify_on_open`. A value written by layout 4 or before reads as the head it is (a file
//! opened read-only, or one whose values [`ensure_checked`] has not reached yet).

use std::ops::Bound;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::{HEADS, META, TAILS, checked};
use crate::store::StorageError;

/// The meta key saying every `heads`, `tails` and `meta` value carries its check.
const CHECKED: &str = "values_checked";

/// How many values one commit of [`ensure_checked`] rewrites.
const AT_ONCE: usize = 16_384;

/// The value that stores `head` for `id`.
pub(super) fn encode(id: &str, head: u64) -> Result<u64, StorageError> {
    checked::encode(id, head).ok_or_else(|| {
        StorageError::msg(format!(
            "the log of execution {id} would reach {head} events, past what the store keeps"
        ))
    })
}

/// The head a value stores for `id`; an error naming the damage when it does not belong there.
pub(super) fn decode(id: &str, value: u64) -> Result<u64, StorageError> {
    checked::decode(id, value).ok_or_else(|| {
        StorageError::msg(format!(
            "the store file is damaged: the head stored for execution {id} does not match its check"
        ))
    })
}

/// Gives every `heads` value written before layout 5 its check, then every `tails` value its
/// frame, then every `meta` value but `"format"` its check (and a count of 0 to each status
/// without one), once per file (meta key `"values_checked"`): run by an open for writing, after
/// the journal is applied and before the store's threads start. Many commits of [`AT_ONCE`]
/// values each, so the rewrite needs no copy of every id in memory and redb reuses the pages
/// each commit frees (one transaction for a million heads doubled a file's size); a crash
/// between them leaves a layout 5 file whose values are some checked, some not, both read as
/// they are, and the next open goes on. A value that is checked already is left as it is, and
/// one that fails its check refuses the open. A new file has nothing to rewrite and is marked at
/// once.
pub(super) fn ensure_checked(db: &Database) -> Result<(), StorageError> {
    {
        let txn = db.begin_read().map_err(StorageError::new)?;
        if all_checked(&txn.open_table(META).map_err(StorageError::new)?)? {
            return Ok(());
        }
    }
    let heads = in_chunks(db, |txn, after| {
        let mut heads = txn.open_table(HEADS).map_err(StorageError::new)?;
        let (unchecked, last) = stale_in_chunk(&heads, after, |id, value| {
            let head = decode(id, value)?;
            Ok((!checked::is_checked(value)).then_some(head))
        })?;
        for (id, head) in &unchecked {
            heads
                .insert(id.as_str(), encode(id, *head)?)
                .map_err(StorageError::new)?;
        }
        Ok((last, unchecked.len() as u64))
    })?;
    let tails = in_chunks(db, |txn, after| {
        let mut tails = txn.open_table(TAILS).map_err(StorageError::new)?;
        let (unframed, last) = stale_in_chunk(&tails, after, |id, value| {
            let tail = checked::tail(id, value)?;
            Ok((!checked::is_framed_tail(value)).then_some(tail))
        })?;
        for (id, tail) in &unframed {
            tails
                .insert(id.as_str(), checked::tail_value(id, tail).as_slice())
                .map_err(StorageError::new)?;
        }
        Ok((last, unframed.len() as u64))
    })?;
    let txn = db.begin_write().map_err(StorageError::new)?;
    {
        let mut meta = txn.open_table(META).map_err(StorageError::new)?;
        super::listing::write_missing_counts(&mut meta)?;
        check_meta(&mut meta)?;
        checked::write_meta(&mut meta, CHECKED, 1)?;
    }
    txn.commit().map_err(StorageError::new)?;
    if heads + tails > 0 {
        tracing::info!(
            heads,
            tails,
            "every head, tail and meta value of the store file carries its check"
        );
    }
    Ok(())
}

/// Runs `step` in one commit after another, each from just past the last key the one before
/// reached (`step` returns it, or `None` once it found nothing more, and how many values it
/// rewrote), until `step` reaches the end. Returns how many values were rewritten in all.
fn in_chunks(
    db: &Database,
    step: impl Fn(&redb::WriteTransaction, Bound<&str>) -> Result<(Option<String>, u64), StorageError>,
) -> Result<u64, StorageError> {
    let mut after: Option<String> = None;
    let mut rewritten = 0;
    loop {
        let txn = db.begin_write().map_err(StorageError::new)?;
        let lower = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let (last, count) = step(&txn, lower)?;
        txn.commit().map_err(StorageError::new)?;
        rewritten += count;
        match last {
            Some(id) => after = Some(id),
            None => return Ok(rewritten),
        }
    }
}

/// What [`stale_in_chunk`] found: the values to rewrite, by key, and the last key read.
type StaleChunk<T> = (Vec<(String, T)>, Option<String>);

/// The next [`AT_ONCE`] entries of `table` from `after`: those `stale` says need rewriting, with
/// what to rewrite them from (`stale` also refuses a value that fails its check), and the last
/// key read (`None` past the end).
fn stale_in_chunk<V: redb::Value + 'static, T>(
    table: &redb::Table<'_, &'static str, V>,
    after: Bound<&str>,
    stale: impl Fn(&str, V::SelfType<'_>) -> Result<Option<T>, StorageError>,
) -> Result<StaleChunk<T>, StorageError> {
    let mut found = Vec::new();
    let mut last = None;
    for entry in table
        .range::<&str>((after, Bound::Unbounded))
        .map_err(StorageError::new)?
        .take(AT_ONCE)
    {
        let (id, value) = entry.map_err(StorageError::new)?;
        let id = id.value();
        if let Some(from) = stale(id, value.value())? {
            found.push((id.to_owned(), from));
        }
        last = Some(id.to_owned());
    }
    Ok((found, last))
}

/// Whether every `heads` and `meta` value of the file carries its check (an open for writing
/// has run [`ensure_checked`] on it): from then on every count per status is in `meta`.
pub(super) fn all_checked(
    meta: &impl ReadableTable<&'static str, u64>,
) -> Result<bool, StorageError> {
    Ok(meta.get(CHECKED).map_err(StorageError::new)?.is_some())
}

/// Gives every `meta` value but `"format"` its check (`checked.rs`): the journal position, the
/// next feed position and the counts of a file from before layout 5.
fn check_meta(meta: &mut redb::Table<'_, &'static str, u64>) -> Result<(), StorageError> {
    let mut unchecked = Vec::new();
    for entry in meta.iter().map_err(StorageError::new)? {
        let (key, stored) = entry.map_err(StorageError::new)?;
        let (key, stored) = (key.value(), stored.value());
        if key != "format" && !checked::is_checked(stored) {
            unchecked.push((key.to_owned(), stored));
        }
    }
    for (key, value) in unchecked {
        checked::write_meta(meta, &key, value)?;
    }
    Ok(())
}

/// The head of `id`'s log in `heads` (its length), 0 for a log the tables do not hold; an
/// error when the stored value does not belong to `id`.
pub(super) fn head_of(
    heads: &impl ReadableTable<&'static str, u64>,
    id: &str,
) -> Result<u64, StorageError> {
    match heads.get(id).map_err(StorageError::new)? {
        Some(value) => decode(id, value.value()),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_reads_back_under_its_id_only_and_a_damaged_one_is_named() {
        let value = encode("order-17", 41).unwrap();
        assert_eq!(decode("order-17", value).unwrap(), 41);
        let err = decode("order-18", value).unwrap_err();
        assert!(
            err.to_string()
                .contains("the head stored for execution order-18 does not match its check"),
            "{err}"
        );
        assert!(encode("e", checked::VALUE_MASK + 1).is_err());
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
            let mut tails = txn.open_table(TAILS).unwrap();
            let tail = crate::store::ExecutionTail::new();
            for n in 0..count {
                let (id, head) = (format!("e{n:06}"), n as u64 % 97);
                let value = if n % 7 == 0 {
                    encode(&id, head).unwrap()
                } else {
                    head
                };
                heads.insert(id.as_str(), value).unwrap();
                let tail_value = if n % 5 == 0 {
                    checked::tail_value(&id, &tail)
                } else {
                    tail.encode()
                };
                tails.insert(id.as_str(), tail_value.as_slice()).unwrap();
                expected.push((id, head));
            }
        }
        txn.commit().unwrap();
        (db, expected)
    }

    fn stored(db: &Database) -> (Vec<(String, u64)>, bool) {
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
        let (values, marked) = stored(&db);
        assert!(marked);
        assert_eq!(values.len(), expected.len());
        for ((id, value), (same, head)) in values.iter().zip(&expected) {
            assert_eq!(id, same);
            assert!(checked::is_checked(*value), "{id} checked");
            assert_eq!(decode(id, *value).unwrap(), *head, "{id}");
        }
        {
            let txn = db.begin_read().unwrap();
            let tails = txn.open_table(TAILS).unwrap();
            for entry in tails.iter().unwrap() {
                let (id, value) = entry.unwrap();
                assert!(
                    checked::is_framed_tail(value.value()),
                    "{} framed",
                    id.value()
                );
            }
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
}
