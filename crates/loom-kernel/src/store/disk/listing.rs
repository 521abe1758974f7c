//! The table behind [`crate::EventStore::query_executions`] and
//! [`crate::EventStore::count_by_status`] in the embedded store: executions keyed by status
//! and start time, and a count per status kept in `meta`.
//!
//! Written in the same redb transaction as the events, and only by appends that start an
//! execution or change its status or end (most appends change neither, and write nothing
//! here). Each commit copies every B-tree page it dirties, so this index is one table, not
//! four: every status newest first merges the six status ranges; an id prefix walks `tails`;
//! the start time and flow come from the log's first event. A file written before it gets it
//! built on its first open for writing ([`ensure_built`]); a file opened read-only without it
//! is answered by folding.

use std::ops::Bound;

use redb::{Database, ReadableTable, TableDefinition};

use super::{EVENTS, META, TAILS, checked, heads};
use crate::fold::ExecutionStatus;
use crate::id::ExecutionId;
use crate::store::query::{ExecutionQuery, ExecutionQueryPage, ListedExecution, StatusCounts};
use crate::store::tail::{ExecutionTail, TailChange, status_code, status_from_code};
use crate::store::{ReadError, StorageError};

/// `(status code, start time, execution id)` -> `(ended at, flow)`: the one table a start or a
/// status change writes. Every status newest first is the six status ranges merged, so no
/// table keyed by start time alone is written; an execution's start time and flow are read
/// from its log's first event when its status changes, so no table keyed by id is either.
const BY_STATUS_START: TableDefinition<(u8, u64, &str), (Option<u64>, &str)> =
    TableDefinition::new("by_status_start");

/// The meta keys holding how many executions have each status, by status code (0, `New`, is
/// never counted). In `meta`, whose page every commit writes anyway, not in a table of their
/// own: a start or a status change then dirties one more table, not two.
const COUNT_KEYS: [&str; 7] = [
    "count_new",
    "count_running",
    "count_suspended",
    "count_in_doubt",
    "count_completed",
    "count_failed",
    "count_cancelled",
];

/// The status codes of started executions, the ranges a listing of every status merges.
fn started_codes() -> [u8; 6] {
    ExecutionStatus::STARTED.map(status_code)
}

/// The meta key saying the tables above are built for every execution in the file.
const BUILT: &str = "listing_index";

/// The listing table, open in a write transaction. The counts live in `meta`, and the start
/// times in the logs: the caller has both open and passes them in.
pub(super) struct ListingTables<'txn> {
    txn: &'txn redb::WriteTransaction,
    /// Opened by the first append of the commit that starts, moves or ends an execution: a
    /// commit of steps alone does not open it.
    by_status_start: Option<ByStatusStart<'txn>>,
}

/// The `meta` table, open in a write transaction.
pub(super) type MetaTable<'txn> = redb::Table<'txn, &'static str, u64>;

/// `by_status_start`, open in a write transaction.
type ByStatusStart<'txn> = redb::Table<'txn, (u8, u64, &'static str), (Option<u64>, &'static str)>;

impl<'txn> ListingTables<'txn> {
    pub(super) fn open(txn: &'txn redb::WriteTransaction) -> Result<Self, StorageError> {
        Ok(Self {
            txn,
            by_status_start: None,
        })
    }

    fn table(&mut self) -> Result<&mut ByStatusStart<'txn>, StorageError> {
        if self.by_status_start.is_none() {
            self.by_status_start = Some(
                self.txn
                    .open_table(BY_STATUS_START)
                    .map_err(StorageError::new)?,
            );
        }
        self.by_status_start
            .as_mut()
            .ok_or_else(|| StorageError::msg("the listing table did not open"))
    }

    /// Files `id` as its tail went from `old` to `new` through `changes`, committed at
    /// `recorded_at_ms`. Writes nothing unless the execution started, changed status or ended.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refile(
        &mut self,
        id: &str,
        old: &ExecutionTail,
        new: &ExecutionTail,
        changes: &[TailChange],
        recorded_at_ms: Option<u64>,
        events: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
        meta: &mut MetaTable<'_>,
    ) -> Result<(), StorageError> {
        if old.status() == new.status() && old.ended_at_ms() == new.ended_at_ms() {
            return Ok(());
        }
        let (start, flow) = match changes.iter().find_map(TailChange::started_flow) {
            Some(flow) if old.status() == ExecutionStatus::New => {
                (recorded_at_ms.unwrap_or(0), flow.to_owned())
            }
            _ => first_event_start(events, id)?,
        };
        self.remove_rows(id, start, old, meta)?;
        self.insert_rows(id, start, &flow, new, meta)
    }

    /// Takes `id` out of the listing (its log is being deleted; its events are still there).
    pub(super) fn forget(
        &mut self,
        id: &str,
        old: &ExecutionTail,
        events: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
        meta: &mut MetaTable<'_>,
    ) -> Result<(), StorageError> {
        let (start, _) = first_event_start(events, id)?;
        self.remove_rows(id, start, old, meta)
    }

    fn remove_rows(
        &mut self,
        id: &str,
        start: u64,
        old: &ExecutionTail,
        meta: &mut MetaTable<'_>,
    ) -> Result<(), StorageError> {
        if old.status() == ExecutionStatus::New {
            return Ok(());
        }
        let code = status_code(old.status());
        // Counted down only for a row that was there (a file whose listing is not built yet
        // has none; the build counts afresh).
        let removed = self
            .table()?
            .remove((code, start, id))
            .map_err(StorageError::new)?;
        match removed {
            Some(_) => add_count(meta, code, -1),
            None => Ok(()),
        }
    }

    fn insert_rows(
        &mut self,
        id: &str,
        start: u64,
        flow: &str,
        new: &ExecutionTail,
        meta: &mut MetaTable<'_>,
    ) -> Result<(), StorageError> {
        if new.status() == ExecutionStatus::New {
            return Ok(());
        }
        let code = status_code(new.status());
        self.table()?
            .insert((code, start, id), (new.ended_at_ms(), flow))
            .map_err(StorageError::new)?;
        add_count(meta, code, 1)
    }
}

fn add_count(meta: &mut MetaTable<'_>, code: u8, delta: i64) -> Result<(), StorageError> {
    let key = COUNT_KEYS[usize::from(code)];
    let count = checked::read_meta(meta, key)?.unwrap_or(0);
    checked::write_meta(meta, key, count.saturating_add_signed(delta))
}

/// Builds the listing tables from the tails and the first event of each log, unless the file
/// says they are built. Run on each open for writing, after the journal is applied.
pub(super) fn ensure_built(db: &Database) -> Result<(), StorageError> {
    let txn = db.begin_write().map_err(StorageError::new)?;
    let mut meta = txn.open_table(META).map_err(StorageError::new)?;
    if meta.get(BUILT).map_err(StorageError::new)?.is_some() {
        drop(meta);
        txn.abort().map_err(StorageError::new)?;
        return Ok(());
    }
    checked::write_meta(&mut meta, BUILT, 1)?;
    // What recovery may have filed before the build is dropped and filed again.
    for key in COUNT_KEYS {
        meta.remove(key).map_err(StorageError::new)?;
    }
    txn.delete_table(BY_STATUS_START)
        .map_err(StorageError::new)?;
    let mut built = 0u64;
    {
        let tails = txn.open_table(TAILS).map_err(StorageError::new)?;
        let events = txn.open_table(EVENTS).map_err(StorageError::new)?;
        let mut listing = ListingTables::open(&txn)?;
        for entry in tails.iter().map_err(StorageError::new)? {
            let (id, value) = entry.map_err(StorageError::new)?;
            let id = id.value();
            let tail = checked::tail(id, value.value())?;
            if tail.status() == ExecutionStatus::New {
                continue;
            }
            let (start, flow) = first_event_start(&events, id)?;
            listing.insert_rows(id, start, &flow, &tail, &mut meta)?;
            built += 1;
        }
    }
    write_missing_counts(&mut meta)?;
    drop(meta);
    txn.commit().map_err(StorageError::new)?;
    tracing::info!(executions = built, "listing index built");
    Ok(())
}

/// The start time and flow of `id`, from its log's first event (0 and no flow when it cannot
/// be read: a log the fold refuses is still listed, as the status index files it).
fn first_event_start(
    events: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    id: &str,
) -> Result<(u64, String), StorageError> {
    let execution = ExecutionId::from_stored(id).map_err(StorageError::new)?;
    let Some(row) = events.get((id, 0)).map_err(StorageError::new)? else {
        return Ok((0, String::new()));
    };
    // A damaged row is listed as a damaged first record is: with no start.
    let first = super::runs::split(id, 0, row.value())
        .ok()
        .and_then(|mut records| records.next());
    Ok(first.map_or((0, String::new()), |record| {
        super::super::start_of_first_record(&execution, record)
    }))
}

/// Whether the file holds built listing tables (a file of an older build opened read-only
/// may not).
pub(super) fn is_built(txn: &redb::ReadTransaction) -> Result<bool, ReadError> {
    checked::flag_set(txn, BUILT)
}

/// One page of `query`, from the listing tables.
pub(super) fn query(
    txn: &redb::ReadTransaction,
    query: &ExecutionQuery,
) -> Result<ExecutionQueryPage, ReadError> {
    let heads = txn.open_table(super::HEADS).map_err(ReadError::storage)?;
    let tails = txn.open_table(TAILS).map_err(ReadError::storage)?;
    let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
    let table = txn
        .open_table(BY_STATUS_START)
        .map_err(ReadError::storage)?;
    let limit = query.page_size();
    let head_of = |id: &str| super::heads::head_of(&heads, id).map_err(ReadError::storage);
    let row_of = |code: u8, start: u64, id: &str, ended: Option<u64>, flow: &str| {
        let status = status_from_code(code).ok_or_else(|| {
            ReadError::storage(StorageError::msg(format!(
                "the listing of execution {id} holds no status ({code})"
            )))
        })?;
        Ok::<_, ReadError>(ListedExecution {
            id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
            status,
            flow: flow.to_owned(),
            started_at_ms: (start != 0).then_some(start),
            ended_at_ms: ended,
            head: head_of(id)?,
        })
    };
    if let Some(prefix) = query.id_prefix.as_deref() {
        // The ids with the prefix, from the id-ordered table: in proportion to how many there
        // are (a parent's children: a few), not to every execution started since.
        let mut found = Vec::new();
        for entry in tails.range::<&str>(prefix..).map_err(ReadError::storage)? {
            let (id, tail) = entry.map_err(ReadError::storage)?;
            let id = id.value();
            if !id.starts_with(prefix) {
                break;
            }
            let tail = checked::tail(id, tail.value()).map_err(ReadError::storage)?;
            if tail.status() == ExecutionStatus::New {
                continue;
            }
            let (start, flow) = first_event_start(&events, id).map_err(ReadError::storage)?;
            let row = row_of(
                status_code(tail.status()),
                start,
                id,
                tail.ended_at_ms(),
                &flow,
            )?;
            if query.matches(&row) && query.after_cursor(&row) {
                found.push(row);
            }
        }
        found.sort_by_key(|row| std::cmp::Reverse(row.cursor()));
        found.truncate(limit + 1);
        return Ok(query.page_of(found));
    }
    let from_ms = query.started_from_ms.unwrap_or(0);
    let codes: Vec<u8> = match query.status {
        Some(status) => vec![status_code(status)],
        None => started_codes().to_vec(),
    };
    // One range per status, newest first; the page is their merge by (start, id), descending.
    let mut ranges = Vec::with_capacity(codes.len());
    for code in codes {
        let lower = Bound::Included((code, from_ms, ""));
        let upper = upper_bound(query, query.started_before_ms, |start, id| {
            (code, start, id)
        })
        .unwrap_or(Bound::Excluded((code + 1, 0, "")));
        ranges.push(
            table
                .range((lower, upper))
                .map_err(ReadError::storage)?
                .rev()
                .peekable(),
        );
    }
    let mut rows = Vec::with_capacity(limit + 1);
    while rows.len() <= limit {
        let mut newest: Option<(usize, (u64, String))> = None;
        for (at, range) in ranges.iter_mut().enumerate() {
            let key = match range.peek() {
                None => continue,
                Some(Err(_)) => {
                    let Some(Err(error)) = range.next() else {
                        unreachable!("peeked an error")
                    };
                    return Err(ReadError::storage(error));
                }
                Some(Ok((key, _))) => {
                    let (_, start, id) = key.value();
                    (start, id.to_owned())
                }
            };
            if newest.as_ref().is_none_or(|(_, best)| key > *best) {
                newest = Some((at, key));
            }
        }
        let Some((at, _)) = newest else {
            break;
        };
        let Some(Ok((key, value))) = ranges[at].next() else {
            break;
        };
        let (code, start, id) = key.value();
        let (ended, flow) = value.value();
        let row = row_of(code, start, id, ended, flow)?;
        if query.matches(&row) {
            // A damaged row may still name an execution that is there: its tail (checked) must
            // agree with the status and end the row files, its first record (checked) with the
            // start and flow. Only a row the page returns is checked; one it skips costs nothing.
            let tail = super::checked::tail_of(&tails, id).map_err(ReadError::storage)?;
            let (first_start, first_flow) =
                first_event_start(&events, id).map_err(ReadError::storage)?;
            if status_code(tail.status()) != code
                || tail.ended_at_ms() != ended
                || first_start != start
                || first_flow != flow
            {
                return Err(ReadError::storage(StorageError::msg(format!(
                    "the store file is damaged: the listing files execution {id} under code {code}, started at {start} ms by flow '{flow}', ended at {ended:?}, but its log says {:?}, started at {first_start} ms by flow '{first_flow}', ended at {:?}",
                    tail.status(),
                    tail.ended_at_ms()
                ))));
            }
            rows.push(row);
        }
    }
    Ok(query.page_of(rows))
}

/// The upper bound of a range in newest-first order: the cursor or the start-time limit,
/// whichever is smaller; `None` when neither is given.
fn upper_bound<'a, K>(
    query: &'a ExecutionQuery,
    started_before_ms: Option<u64>,
    key: impl Fn(u64, &'a str) -> K,
) -> Option<Bound<K>> {
    let cursor = query
        .before
        .as_ref()
        .map(|cursor| (cursor.started_at_ms, cursor.id.as_str()));
    let limit = started_before_ms.map(|before| (before, ""));
    let bound = match (cursor, limit) {
        (Some(cursor), Some(limit)) => cursor.min(limit),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => return None,
    };
    Some(Bound::Excluded(key(bound.0, bound.1)))
}

/// Writes a count of 0 for every status that has none: from layout 5 on, every count is there
/// once the listing is built, so a missing one is a damaged key, not a status nobody has.
pub(super) fn write_missing_counts(meta: &mut MetaTable<'_>) -> Result<(), StorageError> {
    for status in ExecutionStatus::STARTED {
        let key = COUNT_KEYS[usize::from(status_code(status))];
        if meta.get(key).map_err(StorageError::new)?.is_none() {
            checked::write_meta(meta, key, 0)?;
        }
    }
    Ok(())
}

/// The count of executions with `status`, where the file keeps every count checked (`heads.rs`):
/// `None` for a file from before (or one whose listing is not built), whose counts a listing
/// is not checked against.
pub(super) fn count_of(
    txn: &redb::ReadTransaction,
    status: ExecutionStatus,
) -> Result<Option<u64>, ReadError> {
    let meta = txn.open_table(META).map_err(ReadError::storage)?;
    if status == ExecutionStatus::New || !heads::all_checked(&meta).map_err(ReadError::storage)? {
        return Ok(None);
    }
    let key = COUNT_KEYS[usize::from(status_code(status))];
    match checked::read_meta(&meta, key).map_err(ReadError::storage)? {
        Some(count) => Ok(Some(count)),
        None => Err(ReadError::storage(StorageError::msg(format!(
            "the store file is damaged: its {key} is missing from `meta`"
        )))),
    }
}

/// The count of each status.
pub(super) fn counts(txn: &redb::ReadTransaction) -> Result<StatusCounts, ReadError> {
    let meta = txn.open_table(META).map_err(ReadError::storage)?;
    // A file whose meta values all carry their check has every count (`heads.rs`).
    let all_there = heads::all_checked(&meta).map_err(ReadError::storage)?;
    let mut counts = StatusCounts::default();
    for status in ExecutionStatus::STARTED {
        let key = COUNT_KEYS[usize::from(status_code(status))];
        let count = match checked::read_meta(&meta, key).map_err(ReadError::storage)? {
            Some(count) => count,
            None if all_there => {
                return Err(ReadError::storage(StorageError::msg(format!(
                    "the store file is damaged: its {key} is missing from `meta`"
                ))));
            }
            None => 0,
        };
        counts.set(status, count);
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{completed, id, started, suspended};
    use crate::store::{DiskStore, EventStore, every_listed_execution};

    /// Makes `path` look like a file of the build before the listing tables: none of them,
    /// and no mark that they are built.
    fn strip_listing(path: &std::path::Path) {
        let db = Database::open(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.delete_table(BY_STATUS_START).unwrap();
        let mut meta = txn.open_table(META).unwrap();
        meta.remove(BUILT).unwrap();
        for key in COUNT_KEYS {
            meta.remove(key).unwrap();
        }
        drop(meta);
        txn.commit().unwrap();
    }

    async fn fill(store: &DiskStore) {
        for n in 0..30 {
            let e = id(&format!("e{n:02}"));
            let flow = if n % 3 == 0 { "refund" } else { "checkout" };
            store.append(&e, 0, &[started(flow)]).await.unwrap();
            match n % 4 {
                0 => drop(store.append(&e, 1, &[completed()]).await.unwrap()),
                1 => drop(store.append(&e, 1, &[suspended("g")]).await.unwrap()),
                _ => {}
            }
        }
    }

    async fn agrees(store: &DiskStore) {
        let reference = every_listed_execution(store).await.unwrap();
        assert_eq!(reference.len(), 30);
        for status in [None, Some(ExecutionStatus::Completed)] {
            let query = ExecutionQuery {
                status,
                limit: 7,
                ..ExecutionQuery::default()
            };
            assert_eq!(
                store.query_executions(&query).await.unwrap(),
                query.select(reference.clone())
            );
        }
        assert_eq!(
            store.count_by_status().await.unwrap(),
            StatusCounts::of(&reference)
        );
    }

    #[tokio::test]
    async fn a_file_without_the_listing_gets_it_built_on_open_and_is_read_by_folding_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        let store = DiskStore::open(&path).unwrap();
        fill(&store).await;
        drop(store);
        strip_listing(&path);

        let read_only =
            DiskStore::open_read_only(&path, crate::store::DiskStoreConfig::default()).unwrap();
        agrees(&read_only).await;
        drop(read_only);

        let store = DiskStore::open(&path).unwrap();
        agrees(&store).await;
        // Built once: later appends keep it up to date, and a second open changes nothing.
        store
            .append(&id("e01"), 2, &[crate::conformance::resumed("g")])
            .await
            .unwrap();
        drop(store);
        let store = DiskStore::open(&path).unwrap();
        agrees(&store).await;
    }
}
