//! The disk store's reads: a log from the tables and from the events held for them, whole
//! logs as stored, a head, and the listings and the feed read from the tables once they hold
//! every acknowledged event.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use redb::{ReadableTable, ReadableTableMetadata};
use tokio::sync::oneshot;

use super::checked::tail_of;
use super::heads::{self, head_of};
use super::pending::{Pending, PendingRecords};
use super::writer::WriteRequest;
use super::{
    BY_STATUS, Db, DiskStore, EVENTS, FEED, HEADS, META, PURGED, PURGES_RECORDED, Shared, TAILS,
    checked, listing, panic_message, runs, snapshot,
};
use crate::envelope::EventEnvelope;
use crate::id::ExecutionId;
use crate::store::tail::filter_code;
use crate::store::{
    ExecutionPage, ExecutionSummary, ReadError, STREAM_PAGE, StatusFilter, StorageError,
    decode_stored,
};

/// Records of one execution copied out of a read transaction, undecoded.
#[derive(Debug, Clone)]
pub(super) struct RawPage {
    bytes: Vec<u8>,
    records: Vec<(u64, std::ops::Range<usize>)>,
}

/// One execution's whole log as the store keeps it: each event's record, not decoded. For
/// tools that look at the records themselves: `replay-check` compares every event, encoded
/// again, with the record it was read from.
#[derive(Debug, Clone)]
pub struct StoredLog {
    execution: ExecutionId,
    page: RawPage,
}

impl StoredLog {
    /// The execution this tail describes.
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution
    }

    /// How many events the log holds.
    pub fn len(&self) -> usize {
        self.page.records.len()
    }

    /// Whether the execution has no event.
    pub fn is_empty(&self) -> bool {
        self.page.records.is_empty()
    }

    /// The record of the event at `index` (its seq, in a log read whole), in the record form
    /// of [`crate::kit::record`].
    pub fn record(&self, index: usize) -> Option<&[u8]> {
        let (_, range) = self.page.records.get(index)?;
        self.page.bytes.get(range.clone())
    }

    /// The events.
    pub fn decode(&self) -> Result<Vec<EventEnvelope>, ReadError> {
        self.page.decode(&self.execution)
    }
}

impl RawPage {
    /// `execution`'s records from `from` on (at most `limit`): the tables', then those held
    /// in `pending` past them.
    pub(super) fn fetch(
        db: &Db,
        pending: &Pending,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Self, ReadError> {
        let mut stale = None;
        for _ in 0..READ_ATTEMPTS {
            // Copied before the tables are read: an apply in between moves nothing out of sight.
            let held = pending.copy(execution.as_str(), from, limit);
            let txn = db.begin_read().map_err(ReadError::storage)?;
            let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
            let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
            let head = head_of(&heads, execution.as_str()).map_err(ReadError::storage)?;
            let mut page = Self::fetch_from(&events, execution, from, limit, head)?;
            match held.map(|held| page.extend_held(execution, held, from, limit)) {
                Some(Err(gap)) => stale = Some(gap),
                None | Some(Ok(())) => return Ok(page),
            }
        }
        Err(stale.unwrap_or_else(|| ReadError::storage(StorageError::msg("no read"))))
    }

    /// Whether the tables hold no event of `execution` at or past `from` (the caller found
    /// none held, and looks here after). Two lookups in pages every commit touches and redb's
    /// cache keeps: the head, and the first stored seq from `from` on (a stray one, past a
    /// damaged head, is reported as damage).
    pub(super) fn nothing_from(
        shared: &Shared,
        execution: &ExecutionId,
        from: u64,
    ) -> Result<bool, ReadError> {
        on_callers_thread(|| {
            let tables = last_commit_tables(shared)?;
            let head = head_of(&tables.heads, execution.as_str()).map_err(ReadError::storage)?;
            if head > from {
                return Ok(false);
            }
            Self::fetch_from(&tables.events, execution, from, 0, head)?;
            Ok(true)
        })
    }

    /// A page of records held in memory only, seqs `held.first_seq..`.
    pub(super) fn held(held: PendingRecords) -> Self {
        let mut records = Vec::with_capacity(held.len());
        let mut start = 0;
        for (seq, record) in held.records() {
            records.push((seq, start..start + record.len()));
            start += record.len();
        }
        RawPage {
            bytes: held.into_bytes(),
            records,
        }
    }

    /// Adds the held records that follow this page (read from `from`), up to `limit` in all.
    /// Held records the page already has were applied between the two reads.
    fn extend_held(
        &mut self,
        execution: &ExecutionId,
        held: PendingRecords,
        from: u64,
        limit: usize,
    ) -> Result<(), ReadError> {
        let mut due = from + self.records.len() as u64;
        for (seq, record) in held.records() {
            if self.records.len() >= limit {
                break;
            }
            if seq < due {
                continue;
            }
            if seq > due {
                // Held records begin where the tables end, unless the log was applied and then
                // deleted (retention) between the two reads: the caller reads again; a gap
                // that stays means the tables and the memory disagree.
                return Err(ReadError::Storage {
                    source: StorageError::msg(format!(
                        "execution {execution}: the tables end at seq {due} but the events held for them begin at {seq}"
                    )),
                });
            }
            let start = self.bytes.len();
            self.bytes.extend_from_slice(record);
            self.records.push((seq, start..self.bytes.len()));
            due += 1;
        }
        Ok(())
    }

    fn fetch_from(
        events: &redb::ReadOnlyTable<(&'static str, u64), &'static [u8]>,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
        head: u64,
    ) -> Result<Self, ReadError> {
        // Every seq from `from` up to the head (or `limit` of them) is read, each where it
        // belongs: a key damaged at rest shows as a missing or misplaced seq (or a run that
        // does not match its key), and is reported instead of shortening the log.
        let wanted = usize::try_from(head.saturating_sub(from))
            .unwrap_or(usize::MAX)
            .min(limit);
        let id = execution.as_str();
        let first_row = row_holding(events, id, from)?;
        let range = events
            .range((id, first_row)..=(id, u64::MAX))
            .map_err(ReadError::storage)?;
        let mut page = RawPage {
            bytes: Vec::new(),
            records: Vec::with_capacity(wanted.min(STREAM_PAGE)),
        };
        // One past the wanted ones: a stray seq past the head is reported too.
        let to_the_head = head.saturating_sub(from) == wanted as u64;
        'rows: for entry in range {
            if page.records.len() == wanted && !to_the_head {
                break;
            }
            let (key, value) = entry.map_err(ReadError::storage)?;
            let row_seq = key.value().1;
            let records = runs::split(id, row_seq, value.value()).map_err(damaged_run)?;
            if page.bytes.is_empty() {
                // Sized from the first row, rather than doubled through many reallocations.
                let per_record = value.value().len() / records.record_count().max(1);
                page.bytes
                    .reserve(per_record.saturating_mul(wanted).min(1 << 20));
            }
            for (seq, record) in (row_seq..).zip(records) {
                if seq < from {
                    continue;
                }
                if page.records.len() == wanted {
                    if to_the_head {
                        return Err(damaged_log(execution, seq, head));
                    }
                    break 'rows;
                }
                let due = from + page.records.len() as u64;
                if seq != due || seq >= head {
                    return Err(damaged_log(execution, due, head));
                }
                let start = page.bytes.len();
                page.bytes.extend_from_slice(record);
                page.records.push((seq, start..page.bytes.len()));
            }
        }
        if page.records.len() != wanted {
            return Err(damaged_log(
                execution,
                from + page.records.len() as u64,
                head,
            ));
        }
        Ok(page)
    }

    pub(super) fn decode(&self, execution: &ExecutionId) -> Result<Vec<EventEnvelope>, ReadError> {
        // Sized once: collecting `Result`s would grow the vector by doubling, copying every
        // envelope several times.
        let mut events = Vec::with_capacity(self.records.len());
        for (seq, range) in &self.records {
            let bytes = self.bytes.get(range.clone()).unwrap_or_default();
            events.push(decode_stored(execution, *seq, bytes)?);
        }
        Ok(events)
    }
}

impl DiskStore {
    /// The whole logs of several executions as stored, not decoded (an unknown one is
    /// empty), in the order asked: one read transaction and one trip to the blocking pool for
    /// the whole batch.
    pub async fn read_stored_logs(
        &self,
        executions: &[ExecutionId],
    ) -> Result<Vec<StoredLog>, ReadError> {
        let ids = executions.to_vec();
        let pending = Arc::clone(&self.shared.pending);
        self.blocking_read(move |db| {
            let mut stale = None;
            for _ in 0..READ_ATTEMPTS {
                // What the tables lack is copied before they are read (pending.rs).
                let held: Vec<_> = ids
                    .iter()
                    .map(|execution| pending.copy(execution.as_str(), 0, usize::MAX))
                    .collect();
                let txn = db.begin_read().map_err(ReadError::storage)?;
                let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
                let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
                let mut logs = Vec::with_capacity(ids.len());
                for (execution, held) in ids.iter().zip(held) {
                    // The head is the length of the log: the index is sized once, and every
                    // seq below it must be read back where it belongs.
                    let head = head_of(&heads, execution.as_str()).map_err(ReadError::storage)?;
                    let mut page = RawPage::fetch_from(&events, execution, 0, usize::MAX, head)?;
                    if let Some(held) = held
                        && let Err(gap) = page.extend_held(execution, held, 0, usize::MAX)
                    {
                        stale = Some(gap);
                        break;
                    }
                    logs.push(StoredLog {
                        execution: execution.clone(),
                        page,
                    });
                }
                if logs.len() == ids.len() {
                    return Ok(logs);
                }
            }
            Err(stale.unwrap_or_else(|| ReadError::storage(StorageError::msg("no read"))))
        })
        .await
    }

    /// Waits until the tables hold every event acknowledged so far: the indexes (listing,
    /// status, wake-ups, feed) are read from the tables only, and the writer applies its queue
    /// to them lazily (LD-035).
    pub(super) async fn settled(&self) -> Result<(), ReadError> {
        if self.shared.pending.is_empty() {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        self.send(WriteRequest::Apply(reply))
            .map_err(|_| ReadError::Closed)?;
        // This store is open (the caller holds it): an answer that never comes is a writer or
        // applier thread that is gone, a storage failure.
        answer
            .await
            .unwrap_or_else(|_| {
                Err(StorageError::msg(
                    "the store's writer or applier thread is gone; open the store again",
                ))
            })
            .map_err(|source| ReadError::Storage { source })
    }

    pub(super) async fn blocking_read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Db) -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let db = Arc::clone(&self.shared.db);
        tokio::task::spawn_blocking(move || read(&db))
            .await
            .map_err(|err| ReadError::Storage {
                source: StorageError::new(err),
            })?
    }
}

/// How many times a log is read when the events held for it do not follow the tables (they
/// were copied just before an apply and a deletion of that log).
const READ_ATTEMPTS: usize = 3;

/// The seq of the row of `id` that holds `seq`, or would: a row holds an append's events, so
/// it may begin before `seq`. One lookup, only when `seq` is past the log's first row.
fn row_holding(
    events: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    id: &str,
    seq: u64,
) -> Result<u64, ReadError> {
    if seq == 0 {
        return Ok(0);
    }
    let before = events
        .range((id, 0)..=(id, seq))
        .map_err(ReadError::storage)?
        .next_back()
        .transpose()
        .map_err(ReadError::storage)?;
    Ok(before.map_or(seq, |(key, _)| key.value().1))
}

/// A row that does not split into records: the file is damaged.
fn damaged_run(damaged: runs::DamagedRun) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(format!("the store file is damaged: {damaged}")),
    }
}

/// A feed row that does not fit the feed or the logs: the file is damaged.
fn damaged_feed(position: u64, why: &str) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(format!(
            "the store file is damaged: the feed row at position {position} does not fit ({why})"
        )),
    }
}

/// A log whose stored events do not run gapless up to its head: the file is damaged.
fn damaged_log(execution: &ExecutionId, seq: u64, head: u64) -> ReadError {
    ReadError::Storage {
        source: StorageError::msg(format!(
            "the store file is damaged: the events of execution {execution} do not run gapless up to its head {head} (at seq {seq})"
        )),
    }
}

pub(super) fn read_head(shared: &Shared, execution: &ExecutionId) -> Result<u64, ReadError> {
    // The held head first: it is past the tables' whenever there is one. Then the tables, as
    // looked at after it (`snapshot.rs`).
    if let Some(head) = shared.pending.head(execution.as_str()) {
        return Ok(head);
    }
    on_callers_thread(|| {
        let tables = last_commit_tables(shared)?;
        head_of(&tables.heads, execution.as_str()).map_err(ReadError::storage)
    })
}

/// Runs a lookup in the tables on the caller's thread. redb may panic on a damaged page that
/// it was not asked to verify (`verify_on_open` off): that is reported as a damaged file, as a
/// read on the blocking pool reports it, instead of unwinding into the caller's task.
fn on_callers_thread<T>(lookup: impl FnOnce() -> Result<T, ReadError>) -> Result<T, ReadError> {
    catch_unwind(AssertUnwindSafe(lookup)).unwrap_or_else(|panic| {
        Err(ReadError::Storage {
            source: StorageError::msg(panic_message(&panic)),
        })
    })
}

/// `heads` and `events` for a new execution's lookups: the last commit's snapshot, or, where
/// none is kept (a store opened read-only, a snapshot that could not be taken), a read
/// transaction begun now.
fn last_commit_tables(shared: &Shared) -> Result<Arc<snapshot::Tables>, ReadError> {
    if let Some(tables) = shared.last_commit.current() {
        return Ok(tables);
    }
    let txn = shared.db.begin_read().map_err(ReadError::storage)?;
    let tables = snapshot::Tables::of(&txn).map_err(ReadError::storage)?;
    Ok(Arc::new(tables))
}

/// One page of the listing of every execution, in id order, from `heads`.
pub(super) fn list_heads(
    db: &Db,
    after: Option<ExecutionId>,
    limit: usize,
) -> Result<ExecutionPage, ReadError> {
    use std::ops::Bound;
    let txn = db.begin_read().map_err(ReadError::storage)?;
    let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
    let lower = after
        .as_ref()
        .map_or(Bound::Unbounded, |id| Bound::Excluded(id.as_str()));
    let limit = limit.max(1);
    let mut executions = Vec::new();
    for entry in heads
        .range::<&str>((lower, Bound::Unbounded))
        .map_err(ReadError::storage)?
        .take(limit + 1)
    {
        let (id, head) = entry.map_err(ReadError::storage)?;
        let head = heads::decode(id.value(), head.value()).map_err(ReadError::storage)?;
        let id = ExecutionId::from_stored(id.value()).map_err(ReadError::storage)?;
        executions.push(ExecutionSummary { id, head });
    }
    Ok(ExecutionPage::from_one_extra(executions, limit))
}

/// One page of the executions filed under `filter` in the status index, each checked
/// against its head and its tail.
pub(super) fn list_status(
    db: &Db,
    filter: StatusFilter,
    after: Option<ExecutionId>,
    limit: usize,
) -> Result<Option<ExecutionPage>, ReadError> {
    use std::ops::Bound;
    let code = filter_code(filter);
    let txn = db.begin_read().map_err(ReadError::storage)?;
    if filter == StatusFilter::StepsInDoubt && !super::in_doubt::is_built(&txn)? {
        return Ok(None);
    }
    let by_status = txn.open_table(BY_STATUS).map_err(ReadError::storage)?;
    let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
    let tails = txn.open_table(TAILS).map_err(ReadError::storage)?;
    let lower = after.as_ref().map_or(Bound::Included((code, "")), |id| {
        Bound::Excluded((code, id.as_str()))
    });
    let limit = limit.max(1);
    let mut executions = Vec::new();
    for entry in by_status
        .range::<(u8, &str)>((lower, Bound::Excluded((code + 1, ""))))
        .map_err(ReadError::storage)?
        .take(limit + 1)
    {
        let (key, _) = entry.map_err(ReadError::storage)?;
        let id = key.value().1;
        let head = head_of(&heads, id).map_err(ReadError::storage)?;
        if head == 0 {
            // Every filed execution has events (a deletion unfiles it in the same
            // commit): an id without is a damaged key, not an execution to list.
            return Err(ReadError::Storage {
                source: StorageError::msg(format!(
                    "the store file is damaged: the status index files execution {id}, which has no log"
                )),
            });
        }
        // A damaged key may still name an execution that is there, under a status it
        // does not have: its tail (checked) says where it belongs.
        let tail = tail_of(&tails, id).map_err(ReadError::storage)?;
        if !tail.index_codes().any(|filed| filed == code) {
            return Err(ReadError::Storage {
                source: StorageError::msg(format!(
                    "the store file is damaged: the status index files execution {id} under code {code}, but its tail says {:?}",
                    tail.status()
                )),
            });
        }
        executions.push(ExecutionSummary {
            id: ExecutionId::from_stored(id).map_err(ReadError::storage)?,
            head,
        });
    }
    // A whole status in one page is checked against its count: a damaged page of the
    // index (its header) may hide entries.
    if after.is_none()
        && executions.len() <= limit
        && let StatusFilter::Status(status) = filter
        && let Some(count) = listing::count_of(&txn, status)?
        && count != executions.len() as u64
    {
        return Err(ReadError::Storage {
            source: StorageError::msg(format!(
                "the store file is damaged: the status index files {} executions as {status:?}, its count says {count}",
                executions.len()
            )),
        });
    }
    Ok(Some(ExecutionPage::from_one_extra(executions, limit)))
}

/// A feed record as copied out on the blocking pool, to be decoded on the caller's thread:
/// `(position, execution id, seq, record)`.
pub(super) type FeedRow = (u64, String, u64, Vec<u8>);

/// The feed's records from position `from` on (at most `limit`), undecoded.
pub(super) fn feed_rows(db: &Db, from: u64, limit: usize) -> Result<Vec<FeedRow>, ReadError> {
    let txn = db.begin_read().map_err(ReadError::storage)?;
    let feed = txn.open_table(FEED).map_err(ReadError::storage)?;
    let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
    let heads = txn.open_table(HEADS).map_err(ReadError::storage)?;
    let purges_recorded = checked::read_meta(
        &txn.open_table(META).map_err(ReadError::storage)?,
        PURGES_RECORDED,
    )
    .map_err(ReadError::storage)?
    .is_some();
    // A file opened read-only from before `purged` existed has deleted nothing
    // since; an empty table costs no lookup per row.
    let purged = match txn.open_table(PURGED) {
        Ok(table) if !table.is_empty().map_err(ReadError::storage)? => Some(table),
        Ok(_) | Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(error) => return Err(ReadError::storage(error)),
    };
    let limit = limit.max(1);
    let mut found = Vec::new();
    // A feed row covers its events row's events: the one holding `from` may begin
    // before it.
    let first_row = feed
        .range(..=from)
        .map_err(ReadError::storage)?
        .next_back()
        .transpose()
        .map_err(ReadError::storage)?
        .map_or(from, |(position, _)| position.value());
    // Rows of deleted executions are skipped and do not count towards `limit`:
    // a page is empty only at the end of the feed.
    // Positions run gapless, each row from where the one before ends: a damaged
    // row (its position, or a value naming other events) breaks that, or names
    // events a log that is there does not have, and is reported.
    let mut ends_at: Option<u64> = None;
    'rows: for entry in feed.range(first_row..).map_err(ReadError::storage)? {
        let (position, row) = entry.map_err(ReadError::storage)?;
        let position = position.value();
        let (id, first_seq) = row.value();
        if let Some(end) = ends_at.take()
            && end != position
        {
            return Err(damaged_feed(
                position,
                &format!("the row before it ends at {end}"),
            ));
        }
        if let Some(purged) = &purged
            && let Some(deleted_at) = purged.get(id).map_err(ReadError::storage)?
            && position < deleted_at.value()
        {
            // A row of a deleted log, whose (id, seq) a later log of that id reuses.
            continue;
        }
        let Some(value) = events.get((id, first_seq)).map_err(ReadError::storage)? else {
            // Its log was deleted (and no other began under its id), unless the
            // log is there and reaches that seq, or is there at all in a file that
            // records every deletion (the rows of a deleted log were skipped above).
            let head = head_of(&heads, id).map_err(ReadError::storage)?;
            if head > first_seq || (purges_recorded && head > 0) {
                return Err(damaged_feed(
                    position,
                    &format!("execution {id} has no events row at seq {first_seq}"),
                ));
            }
            continue;
        };
        let records = runs::split(id, first_seq, value.value()).map_err(damaged_run)?;
        ends_at = Some(position + records.record_count() as u64);
        for (offset, record) in (0u64..).zip(records) {
            let at = position + offset;
            if at < from {
                continue;
            }
            found.push((at, id.to_owned(), first_seq + offset, record.to_vec()));
            if found.len() == limit {
                break 'rows;
            }
        }
    }
    Ok(found)
}
