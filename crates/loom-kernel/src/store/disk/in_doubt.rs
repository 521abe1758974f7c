//! The `StepsInDoubt` rows (`StatusFilter::StepsInDoubt`) of executions that ended with a step
//! in doubt before tails kept such steps past the end: a file of an older build gets them once,
//! at its first open for writing. Until then a read-only open lists those executions by
//! folding (`DiskStore::list_by_status`).

use redb::{Database, ReadableTable};

use super::{BY_STATUS, EVENTS, META, TAILS, checked};
use crate::fold::ExecutionStatus;
use crate::id::ExecutionId;
use crate::store::tail::{ExecutionTail, filter_code, status_code};
use crate::store::{StatusFilter, StorageError};

/// The meta key set once every execution with a step in doubt is filed under
/// `StepsInDoubt`.
const BUILT: &str = "in_doubt_index";

/// Files under `StepsInDoubt` the executions of an older file that have a step in doubt: those
/// in doubt (their tail says so), and the cancelled ones that ended with one (before this
/// index, a cancel was the usual way to end with one), reading only the logs of cancelled
/// executions; returns how many it filed.
pub(super) fn backfill(db: &Database) -> Result<usize, StorageError> {
    let txn = db.begin_write().map_err(StorageError::new)?;
    let built = {
        let meta = txn.open_table(META).map_err(StorageError::new)?;
        meta.get(BUILT).map_err(StorageError::new)?.is_some()
    };
    if built {
        txn.abort().map_err(StorageError::new)?;
        return Ok(0);
    }
    let mut filed = 0;
    {
        let mut by_status = txn.open_table(BY_STATUS).map_err(StorageError::new)?;
        let mut tails = txn.open_table(TAILS).map_err(StorageError::new)?;
        let events = txn.open_table(EVENTS).map_err(StorageError::new)?;
        let filed_under = |code: u8| -> Result<Vec<String>, StorageError> {
            by_status
                .range::<(u8, &str)>((code, "")..(code + 1, ""))
                .map_err(StorageError::new)?
                .map(|entry| entry.map(|(key, _)| key.value().1.to_owned()))
                .collect::<Result<_, _>>()
                .map_err(StorageError::new)
        };
        let in_doubt = filed_under(status_code(ExecutionStatus::InDoubt))?;
        let cancelled = filed_under(status_code(ExecutionStatus::Cancelled))?;
        let code = filter_code(StatusFilter::StepsInDoubt);
        for id in in_doubt {
            by_status
                .insert((code, id.as_str()), ())
                .map_err(StorageError::new)?;
            filed += 1;
        }
        for id in cancelled {
            let execution = ExecutionId::from_stored(&id).map_err(StorageError::new)?;
            // A log that does not decode keeps its tail: the fold reports it when it is read.
            let Some(log) = super::runs::decoded_log(&events, &execution)? else {
                continue;
            };
            let mut tail = ExecutionTail::new();
            let applied = log
                .iter()
                .all(|envelope| tail.apply(&envelope.event, envelope.recorded_at_ms).is_ok());
            if !applied || !tail.has_steps_in_doubt() {
                continue;
            }
            tails
                .insert(id.as_str(), checked::tail_value(&id, &tail).as_slice())
                .map_err(StorageError::new)?;
            by_status
                .insert((code, id.as_str()), ())
                .map_err(StorageError::new)?;
            filed += 1;
        }
    }
    checked::commit_with_flag(txn, BUILT)?;
    if filed > 0 {
        tracing::info!(
            executions = filed,
            "executions with a step in doubt filed under the in-doubt index"
        );
    }
    Ok(filed)
}

/// Whether the file files every execution with a step in doubt under `StepsInDoubt` (a file
/// of an older build opened read-only may not).
pub(super) fn is_built(txn: &redb::ReadTransaction) -> Result<bool, crate::store::ReadError> {
    checked::flag_set(txn, BUILT)
}
