//! Retention: deleting ended executions older than a cutoff, in bounded batches
//! (`loom purge`, and the admin API's `/admin/v1/retention/*`).
//!
//! The stores do the deleting ([`EventStore::delete_ended`]): each call is one atomic commit of
//! at most `batch` executions, oldest end first, so live work waits at most for one such
//! commit. [`purge`] loops until a batch comes back short, yielding between batches. Only
//! ended executions (completed, failed, cancelled) whose terminal event was recorded before the
//! cutoff, by the store's clock, are deleted; running, suspended and in-doubt ones never are.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::TryStreamExt;
use loom_kernel::StatusFilter;
use loom_kernel::kit::RetentionError;
use loom_kernel::{EventStore, EventStoreExt, ExecutionId, ExecutionStatus};

use crate::error::ConsoleError;

/// How many executions one batch deletes unless told otherwise.
pub const DEFAULT_BATCH: usize = 500;
/// The largest batch the admin API accepts: one commit stays short.
pub const MAX_BATCH: usize = 10_000;

/// Parses an age: a number with a unit, `s`, `m`, `h`, `d` or `w` (`30d`, `12h`, `0s`).
pub fn parse_age(text: &str) -> Result<Duration, ConsoleError> {
    let bad = || {
        ConsoleError::bad_request(format!(
            "'{text}' is not an age: give a number and a unit, s, m, h, d or w (30d, 12h, 90m)"
        ))
    };
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

/// Milliseconds since the Unix epoch, now, by this machine's clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The cutoff for executions that ended more than `age` ago.
pub fn cutoff_ms(age: Duration) -> u64 {
    now_ms().saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX))
}

/// A store's refusal, as the console says it.
pub fn retention_error(error: RetentionError) -> ConsoleError {
    match error {
        RetentionError::Unsupported => {
            ConsoleError::refused("this store cannot delete executions; nothing was deleted")
        }
        other => ConsoleError::unavailable(format!("{other}; nothing more was deleted")),
    }
}

/// One batch: deletes up to `batch` executions that ended before `ended_before_ms`.
pub async fn delete_batch<S: EventStore>(
    store: &S,
    ended_before_ms: u64,
    batch: usize,
) -> Result<Vec<ExecutionId>, ConsoleError> {
    store
        .delete_ended(ended_before_ms, batch.clamp(1, MAX_BATCH))
        .await
        .map_err(retention_error)
}

/// Deletes every execution that ended before `ended_before_ms`, `batch` at a time, calling
/// `deleted` with each batch's ids as it is committed; returns how many were deleted. Yields
/// to other work between batches.
pub async fn purge<S: EventStore>(
    store: &S,
    ended_before_ms: u64,
    batch: usize,
    mut deleted: impl FnMut(&[ExecutionId]),
) -> Result<usize, ConsoleError> {
    let batch = batch.clamp(1, MAX_BATCH);
    let mut total = 0;
    loop {
        let ids = delete_batch(store, ended_before_ms, batch).await?;
        total += ids.len();
        deleted(&ids);
        if ids.len() < batch {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

/// What [`purge`] would delete, in id order, deleting nothing: the ended executions (through
/// the status index) whose terminal event was recorded before `ended_before_ms`. Reads one
/// event per ended execution.
pub async fn would_purge<S: EventStore>(
    store: &S,
    ended_before_ms: u64,
) -> Result<Vec<ExecutionId>, ConsoleError> {
    let mut found = Vec::new();
    for status in [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
    ] {
        let ended: Vec<_> = store
            .executions_by_status(StatusFilter::Status(status))
            .try_collect()
            .await?;
        for summary in ended {
            let Some(last) = summary.head.checked_sub(1) else {
                continue;
            };
            let tail = store.read(&summary.id, last, 1).await?;
            let old = tail.first().is_some_and(|envelope| {
                envelope
                    .recorded_at_ms
                    .is_some_and(|at| at < ended_before_ms)
            });
            if old {
                found.push(summary.id);
            }
        }
    }
    found.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Ok(found)
}
