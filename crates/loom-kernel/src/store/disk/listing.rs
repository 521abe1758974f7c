//! The tables behind [`crate::EventStore::query_executions`] and
//! [`crate::EventStore::count_by_status`] in the embedded store: executions keyed by start
//! time, of every status and per status, and the count of each status.
//!
//! They are written in the same redb transaction as the events, and only by appends that start
//! an execution or change its status or end (most appends change neither, and write nothing
//! here). A file written before these tables existed gets them built on its first open for
//! writing ([`ensure_built`]); a file opened read-only without them is answered by folding.

use std::ops::Bound;

use redb::{Database, ReadableTable, TableDefinition};

use super::{EVENTS, META, TAILS};
use crate::fold::ExecutionStatus;
use crate::id::ExecutionId;
use crate::store::query::{ExecutionQuery, ExecutionQueryPage, ListedExecution, StatusCounts};
use crate::store::tail::{ExecutionTail, TailChange, status_code, status_from_code};
use crate::store::{ReadError, StorageError};

/// Execution id -> `(start time, flow)`: what the two listings key and carry, kept so that a
/// status change finds its rows.
const STARTS: TableDefinition<&str, (u64, &str)> = TableDefinition::new("starts");
/// `(start time, execution id)` -> `(status code, ended at, flow)`, every status.
const BY_START: TableDefinition<(u64, &str), (u8, Option<u64>, &str)> =
    TableDefinition::new("by_start");
/// `(status code, start time, execution id)` -> `(ended at, flow)`.
const BY_STATUS_START: TableDefinition<(u8, u64, &str), (Option<u64>, &str)> =
    TableDefinition::new("by_status_start");
/// Status code -> how many executions have it.
const STATUS_COUNTS: TableDefinition<u8, u64> = TableDefinition::new("status_counts");

/// The meta key saying the tables above are built for every execution in the file.
const BUILT: &str = "listing_built";

/// The listing tables, open in a write transaction.
pub(super) struct ListingTables<'txn> {
    starts: redb::Table<'txn, &'static str, (u64, &'static str)>,
    by_start: redb::Table<'txn, (u64, &'static str), (u8, Option<u64>, &'static str)>,
    by_status_start: redb::Table<'txn, (u8, u64, &'static str), (Option<u64>, &'static str)>,
    counts: redb::Table<'txn, u8, u64>,
}

impl<'txn> ListingTables<'txn> {
    pub(super) fn open(txn: &'txn redb::WriteTransaction) -> Result<Self, StorageError> {
        Ok(Self {
            starts: txn.open_table(STARTS).map_err(StorageError::new)?,
            by_start: txn.open_table(BY_START).map_err(StorageError::new)?,
            by_status_start: txn.open_table(BY_STATUS_START).map_err(StorageError::new)?,
            counts: txn.open_table(STATUS_COUNTS).map_err(StorageError::new)?,
        })
    }

    /// Files `id` as its tail went from `old` to `new` through `changes`, committed at
    /// `recorded_at_ms`. Writes nothing unless the execution started, changed status or ended.
    pub(super) fn refile(
        &mut self,
        id: &str,
        old: &ExecutionTail,
        new: &ExecutionTail,
        changes: &[TailChange],
        recorded_at_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        if old.status() == new.status() && old.ended_at_ms() == new.ended_at_ms() {
            return Ok(());
        }
        let started = match changes.iter().find_map(TailChange::started_flow) {
            Some(flow) if old.status() == ExecutionStatus::New => {
                let start = recorded_at_ms.unwrap_or(0);
                self.starts
                    .insert(id, (start, flow))
                    .map_err(StorageError::new)?;
                Some((start, flow.to_owned()))
            }
            _ => self.start_of(id)?,
        };
        // An execution the index never saw start (mid-build): the build files it.
        let Some((start, flow)) = started else {
            return Ok(());
        };
        self.remove_rows(id, start, old)?;
        self.insert_rows(id, start, &flow, new)
    }

    /// Takes `id` out of every listing (its log is being deleted).
    pub(super) fn forget(&mut self, id: &str, old: &ExecutionTail) -> Result<(), StorageError> {
        if let Some((start, _)) = self.start_of(id)? {
            self.remove_rows(id, start, old)?;
            self.starts.remove(id).map_err(StorageError::new)?;
        }
        Ok(())
    }

    fn start_of(&self, id: &str) -> Result<Option<(u64, String)>, StorageError> {
        Ok(self.starts.get(id).map_err(StorageError::new)?.map(|v| {
            let (start, flow) = v.value();
            (start, flow.to_owned())
        }))
    }

    fn remove_rows(
        &mut self,
        id: &str,
        start: u64,
        old: &ExecutionTail,
    ) -> Result<(), StorageError> {
        if old.status() == ExecutionStatus::New {
            return Ok(());
        }
        let code = status_code(old.status());
        self.by_status_start
            .remove((code, start, id))
            .map_err(StorageError::new)?;
        self.by_start
            .remove((start, id))
            .map_err(StorageError::new)?;
        self.add_count(code, -1)
    }

    fn insert_rows(
        &mut self,
        id: &str,
        start: u64,
        flow: &str,
        new: &ExecutionTail,
    ) -> Result<(), StorageError> {
        if new.status() == ExecutionStatus::New {
            return Ok(());
        }
        let code = status_code(new.status());
        let ended = new.ended_at_ms();
        self.by_status_start
            .insert((code, start, id), (ended, flow))
            .map_err(StorageError::new)?;
        self.by_start
            .insert((start, id), (code, ended, flow))
            .map_err(StorageError::new)?;
        self.add_count(code, 1)
    }

    fn add_count(&mut self, code: u8, delta: i64) -> Result<(), StorageError> {
        let count = self
            .counts
            .get(code)
            .map_err(StorageError::new)?
            .map_or(0, |v| v.value());
        let count = count.saturating_add_signed(delta);
        self.counts.insert(code, count).map_err(StorageError::new)?;
        Ok(())
    }
}

/// Builds the listing tables from the tails and the first event of each log, unless the file
/// says they are built. Run on each open for writing, after the journal is applied.
pub(super) fn ensure_built(db: &Database) -> Result<(), StorageError> {
    let txn = db.begin_write().map_err(StorageError::new)?;
    {
        let mut meta = txn.open_table(META).map_err(StorageError::new)?;
        if meta.get(BUILT).map_err(StorageError::new)?.is_some() {
            drop(meta);
            txn.abort().map_err(StorageError::new)?;
            return Ok(());
        }
        meta.insert(BUILT, 1).map_err(StorageError::new)?;
    }
    // What recovery may have filed before the build is dropped and filed again.
    txn.delete_table(STARTS).map_err(StorageError::new)?;
    txn.delete_table(BY_START).map_err(StorageError::new)?;
    txn.delete_table(BY_STATUS_START)
        .map_err(StorageError::new)?;
    txn.delete_table(STATUS_COUNTS).map_err(StorageError::new)?;
    let mut built = 0u64;
    {
        let tails = txn.open_table(TAILS).map_err(StorageError::new)?;
        let events = txn.open_table(EVENTS).map_err(StorageError::new)?;
        let mut listing = ListingTables::open(&txn)?;
        for entry in tails.iter().map_err(StorageError::new)? {
            let (id, bytes) = entry.map_err(StorageError::new)?;
            let id = id.value();
            let Some(tail) = ExecutionTail::decode(bytes.value()) else {
                return Err(StorageError::msg(format!(
                    "the stored tail of execution {id} is damaged"
                )));
            };
            if tail.status() == ExecutionStatus::New {
                continue;
            }
            let execution = ExecutionId::from_stored(id).map_err(StorageError::new)?;
            let (start, flow) = match events.get((id, 0)).map_err(StorageError::new)? {
                Some(record) => match crate::envelope::decode_record(&execution, 0, record.value())
                {
                    Ok(envelope) => {
                        let flow = match envelope.event {
                            crate::event::Event::ExecutionStarted(started) => started.flow,
                            _ => String::new(),
                        };
                        (envelope.recorded_at_ms.unwrap_or(0), flow)
                    }
                    // A log the fold refuses is still listed, as the status index files it.
                    Err(_) => (0, String::new()),
                },
                None => (0, String::new()),
            };
            listing
                .starts
                .insert(id, (start, flow.as_str()))
                .map_err(StorageError::new)?;
            listing.insert_rows(id, start, &flow, &tail)?;
            built += 1;
        }
    }
    txn.commit().map_err(StorageError::new)?;
    tracing::info!(executions = built, "listing index built");
    Ok(())
}

/// Whether the file holds built listing tables (a file of an older build opened read-only
/// may not).
pub(super) fn is_built(txn: &redb::ReadTransaction) -> Result<bool, ReadError> {
    let meta = txn.open_table(META).map_err(ReadError::storage)?;
    Ok(meta.get(BUILT).map_err(ReadError::storage)?.is_some())
}

/// One page of `query`, from the listing tables.
pub(super) fn query(
    txn: &redb::ReadTransaction,
    query: &ExecutionQuery,
) -> Result<ExecutionQueryPage, ReadError> {
    let heads = txn.open_table(super::HEADS).map_err(ReadError::storage)?;
    let limit = query.page_size();
    let mut rows = Vec::with_capacity(limit + 1);
    let mut keep = |row: ListedExecution| -> bool {
        if query.matches(&row) {
            rows.push(row);
        }
        rows.len() <= limit
    };
    let from_ms = query.started_from_ms.unwrap_or(0);
    let upper_start = query.started_before_ms;
    let head_of = |id: &str| -> Result<u64, ReadError> {
        Ok(heads
            .get(id)
            .map_err(ReadError::storage)?
            .map_or(0, |v| v.value()))
    };
    let started = |start: u64| (start != 0).then_some(start);
    if let Some(prefix) = query.id_prefix.as_deref() {
        // The ids with the prefix, from the id-ordered table: in proportion to how many there
        // are (a parent's children: a few), not to every execution started since.
        let starts = txn.open_table(STARTS).map_err(ReadError::storage)?;
        let by_start = txn.open_table(BY_START).map_err(ReadError::storage)?;
        let mut found = Vec::new();
        for entry in starts.range::<&str>(prefix..).map_err(ReadError::storage)? {
            let (id, value) = entry.map_err(ReadError::storage)?;
            let id = id.value();
            if !id.starts_with(prefix) {
                break;
            }
            let (start, _) = value.value();
            let Some(listed) = by_start.get((start, id)).map_err(ReadError::storage)? else {
                continue;
            };
            let (code, ended, flow) = listed.value();
            let Some(status) = status_from_code(code) else {
                continue;
            };
            let row = ListedExecution {
                id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
                status,
                flow: flow.to_owned(),
                started_at_ms: started(start),
                ended_at_ms: ended,
                head: head_of(id)?,
            };
            if query.matches(&row) && query.after_cursor(&row) {
                found.push(row);
            }
        }
        found.sort_by_key(|row| std::cmp::Reverse(row.cursor()));
        found.truncate(limit + 1);
        return Ok(query.page_of(found));
    }
    match query.status {
        Some(status) => {
            let code = status_code(status);
            let table = txn
                .open_table(BY_STATUS_START)
                .map_err(ReadError::storage)?;
            let lower = Bound::Included((code, from_ms, ""));
            let upper = upper_bound(query, upper_start, |start, id| (code, start, id))
                .unwrap_or(Bound::Excluded((code + 1, 0, "")));
            for entry in table
                .range((lower, upper))
                .map_err(ReadError::storage)?
                .rev()
            {
                let (key, value) = entry.map_err(ReadError::storage)?;
                let (_, start, id) = key.value();
                let (ended, flow) = value.value();
                let row = ListedExecution {
                    id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
                    status,
                    flow: flow.to_owned(),
                    started_at_ms: started(start),
                    ended_at_ms: ended,
                    head: head_of(id)?,
                };
                if !keep(row) {
                    break;
                }
            }
        }
        None => {
            let table = txn.open_table(BY_START).map_err(ReadError::storage)?;
            let lower = Bound::Included((from_ms, ""));
            let upper = upper_bound(query, upper_start, |start, id| (start, id))
                .unwrap_or(Bound::Unbounded);
            for entry in table
                .range((lower, upper))
                .map_err(ReadError::storage)?
                .rev()
            {
                let (key, value) = entry.map_err(ReadError::storage)?;
                let (start, id) = key.value();
                let (code, ended, flow) = value.value();
                let status = status_from_code(code).ok_or_else(|| {
                    ReadError::storage(StorageError::msg(format!(
                        "the listing of execution {id} holds no status ({code})"
                    )))
                })?;
                let row = ListedExecution {
                    id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
                    status,
                    flow: flow.to_owned(),
                    started_at_ms: started(start),
                    ended_at_ms: ended,
                    head: head_of(id)?,
                };
                if !keep(row) {
                    break;
                }
            }
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

/// The count of each status.
pub(super) fn counts(txn: &redb::ReadTransaction) -> Result<StatusCounts, ReadError> {
    let table = txn.open_table(STATUS_COUNTS).map_err(ReadError::storage)?;
    let mut counts = StatusCounts::default();
    for entry in table.iter().map_err(ReadError::storage)? {
        let (code, count) = entry.map_err(ReadError::storage)?;
        if let Some(status) = status_from_code(code.value())
            && status != ExecutionStatus::New
        {
            counts.set(status, count.value());
        }
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
        txn.delete_table(STARTS).unwrap();
        txn.delete_table(BY_START).unwrap();
        txn.delete_table(BY_STATUS_START).unwrap();
        txn.delete_table(STATUS_COUNTS).unwrap();
        txn.open_table(META).unwrap().remove(BUILT).unwrap();
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
