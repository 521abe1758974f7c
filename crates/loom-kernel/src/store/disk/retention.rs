//! Retention's deletions: whole logs of executions that ended long enough ago, removed in one
//! durable commit, each checked against its tail first since nothing can undo it.

use redb::{Database, ReadableTable};

use super::PURGED;
use super::tables::WriteTables;
use super::wake::WAKE_ROWS;
use crate::id::ExecutionId;
use crate::store::StorageError;
use crate::store::journal::Journal;
use crate::store::tail::ExecutionTail;
use crate::store::wake;

/// Deletes up to `limit` executions that ended before `ended_before_ms`, whole, in one
/// transaction. Their feed rows are left: readers skip a row whose event is gone, and, through
/// `purged`, a row older than the deletion whose (id, seq) a later log of the same id reuses.
pub(super) fn delete_ended(
    db: &Database,
    journal: &Journal,
    ended_before_ms: u64,
    limit: usize,
) -> Result<Vec<ExecutionId>, StorageError> {
    // A durable commit: it also makes every journaled commit before it durable in the tables,
    // so it records the journal offset it covers.
    let txn = db.begin_write().map_err(StorageError::new)?;
    let deleted = {
        let mut tables = WriteTables::open(&txn)?;
        let wake_rows = txn.open_table(WAKE_ROWS).map_err(StorageError::new)?;
        let mut doomed = Vec::new();
        for entry in tables
            .ended
            .range(..(ended_before_ms, ""))
            .map_err(StorageError::new)?
        {
            if doomed.len() >= limit.max(1) {
                break;
            }
            let (key, _) = entry.map_err(StorageError::new)?;
            let (ended_at_ms, id) = key.value();
            let execution = ExecutionId::from_stored(id).map_err(StorageError::new)?;
            // A child whose parent still waits for its end is kept (`wake::awaiting_parent`).
            if let Some((parent, tag)) = wake::awaiting_parent(&execution)
                && wake_rows
                    .get((parent.as_str(), tag.as_str()))
                    .map_err(StorageError::new)?
                    .is_some()
            {
                continue;
            }
            doomed.push((ended_at_ms, execution));
        }
        drop(wake_rows);
        let feed_next = tables.feed_next()?;
        tables.set_position(feed_next, journal.generation(), journal.end())?;
        let mut purged = txn.open_table(PURGED).map_err(StorageError::new)?;
        for (ended_at_ms, execution) in &doomed {
            let id = execution.as_str();
            let tail = tables.tail(id)?;
            check_ended(id, *ended_at_ms, &tail)?;
            purged.insert(id, feed_next).map_err(StorageError::new)?;
            tables
                .listing
                .forget(id, &tail, &tables.events, &mut tables.meta)?;
            tables.refile(id, &tail, &ExecutionTail::new())?;
            tables.tails.remove(id).map_err(StorageError::new)?;
            tables.heads.remove(id).map_err(StorageError::new)?;
            tables
                .events
                .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)
                .map_err(StorageError::new)?;
        }
        doomed.into_iter().map(|(_, execution)| execution).collect()
    };
    txn.commit().map_err(StorageError::new)?;
    Ok(deleted)
}

/// Deleting a log is the one change nothing can undo, so the `ended` row that names it is not
/// trusted alone: the execution's tail (checked, LD-037) must say it ended at that moment. A
/// row that a damaged key moved onto another execution, or to an earlier time, then stops the
/// deletion instead of removing a log that is running or not old enough.
fn check_ended(id: &str, ended_at_ms: u64, tail: &ExecutionTail) -> Result<(), StorageError> {
    if tail.status().is_terminal() && tail.ended_at_ms() == Some(ended_at_ms) {
        return Ok(());
    }
    let found = match tail.ended_at_ms() {
        Some(at) => format!("{:?}, ended at {at} ms", tail.status()),
        None => format!("{:?}, without an end", tail.status()),
    };
    Err(StorageError::msg(format!(
        "the store file is damaged: the index of ended executions files {id} as ended at {ended_at_ms} ms, but its tail says {found}; nothing was deleted"
    )))
}
