//! Recovery of parked executions from the store's wake-up index (LD-033): `recover` reads no
//! parked execution's log unless it must act on it.
//!
//! - **Child links** (rows at time 0): a parent waiting on a child gets its child ensured
//!   (started if missing, its end delivered if it ended); a child whose parent ended while
//!   waiting for it is cancelled. Read once, at recovery: in proportion to the parent-child
//!   links open, not to the executions parked.
//! - **Deadlines** are armed a time window at a time: those due before `now + LOOKAHEAD_MS` at
//!   recovery, then the next window as time passes (one task, asleep between windows). A
//!   deadline far in the future costs nothing in memory until its window comes. A store
//!   without the index ([`EventStore::indexes_wakeups`] false) is read whole, once.
//!
//! On a store with leases, arming takes nothing: the worker that fires a due deadline first
//! holds or takes the parked execution's lease (`timers.rs`, `claim_and_fire`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tracing::Instrument;

use crate::id::ExecutionId;
use crate::runtime::child_runs;
use crate::runtime::deadlines;
use crate::runtime::recovery::{RecoveryReport, SkippedExecution};
use crate::runtime::slots::Inner;
use crate::runtime::timers;
use crate::store::{EventStore, EventStoreExt, FoldStoredError, ReadError, WakeReason, Wakeup};

/// How far ahead of the clock deadlines are armed.
pub(crate) const LOOKAHEAD_MS: u64 = 60_000;

/// Rows per read of the index.
const PAGE: usize = 1024;

/// How long the loader waits before it reads again after a read failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where the deadline loader stands: every row up to `cursor` has been read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cursor {
    last: Option<Wakeup>,
}

/// Acts on every child link of the index (rows at time 0), skipping the executions in `seen`
/// (recovery drove them already). Returns where the links end, for the deadline loader.
pub(crate) async fn recover_links<S: EventStore>(
    inner: &Arc<Inner<S>>,
    seen: &BTreeSet<ExecutionId>,
    report: &mut RecoveryReport,
) -> Result<Cursor, ReadError> {
    let mut cursor = Cursor::default();
    let mut parents_done = BTreeSet::new();
    loop {
        let page = inner
            .store
            .list_wakeups(1, cursor.last.as_ref(), PAGE)
            .await?;
        let full = page.len() >= PAGE;
        for row in page {
            cursor.last = Some(row.clone());
            if seen.contains(&row.execution) {
                continue;
            }
            match row.reason {
                // A child whose parent ended while waiting for it is cancelled (LD-015).
                WakeReason::IsChild if child_runs::recover_child(inner, &row.execution).await => {
                    report.started += 1;
                }
                WakeReason::AwaitsChild { .. } if parents_done.insert(row.execution.clone()) => {
                    recover_parent(inner, &row.execution, report).await;
                }
                // A deadline at time 0 is due at once: armed with the others.
                _ => {}
            }
        }
        if !full {
            return Ok(cursor);
        }
    }
}

/// A parked parent: its awaited children are started if missing, their ends delivered if
/// they have ended (LD-015).
async fn recover_parent<S: EventStore>(
    inner: &Arc<Inner<S>>,
    parent: &ExecutionId,
    report: &mut RecoveryReport,
) {
    let state = match inner.store.fold(parent).await {
        Ok(state) => state,
        Err(error) => {
            tracing::error!(execution = %parent, %error, "recovery skips an execution it cannot fold");
            report.skipped.push(SkippedExecution {
                execution: parent.clone(),
                error,
            });
            return;
        }
    };
    if state.status().is_terminal() || state.needs_driving() {
        return;
    }
    if let Err(error) = child_runs::recover_parent(inner, parent, &state).await {
        tracing::error!(execution = %parent, %error, "recovery skips an execution whose children it cannot read");
        report.skipped.push(SkippedExecution {
            execution: parent.clone(),
            error: FoldStoredError::Read(error),
        });
    }
}

/// Arms the deadlines of the index due before `before_ms`, after `cursor`, at most a page
/// (`limit`). Returns how many it armed and whether the page was full (more may follow).
async fn arm_page<S: EventStore>(
    inner: &Arc<Inner<S>>,
    cursor: &mut Cursor,
    before_ms: u64,
    limit: usize,
) -> Result<(usize, bool), ReadError> {
    let page = inner
        .store
        .list_wakeups(before_ms, cursor.last.as_ref(), limit)
        .await?;
    let full = page.len() >= limit;
    let mut armed = 0;
    for row in page {
        if let WakeReason::Deadline { gate_id } = &row.reason {
            deadlines::arm_deadline(inner, &row.execution, gate_id, row.at_ms);
            armed += 1;
        }
        cursor.last = Some(row);
    }
    Ok((armed, full))
}

/// Arms the deadlines of the first window (all of them for a store without the index), and
/// leaves the later windows to a loader task. Returns how many it armed.
pub(crate) async fn arm_deadlines<S: EventStore>(
    inner: &Arc<Inner<S>>,
    mut cursor: Cursor,
) -> Result<usize, ReadError> {
    if !inner.store.indexes_wakeups() {
        // The default listing reads every parked log per call: one call reads them all.
        let (armed, _) = arm_page(inner, &mut cursor, u64::MAX, usize::MAX).await?;
        return Ok(armed);
    }
    let now = inner.timers.clock.now_ms();
    let mut armed = 0;
    let full = loop {
        let (found, full) =
            arm_page(inner, &mut cursor, now.saturating_add(LOOKAHEAD_MS), PAGE).await?;
        armed += found;
        // More rows in the window: read on while they are due, leave the rest to the loader.
        if !full || cursor.last.as_ref().is_some_and(|row| row.at_ms > now) {
            break full;
        }
    };
    spawn_loader(inner, cursor, full, now);
    Ok(armed)
}

/// Says, when dropped (the loader ended, or was never started), that no loader runs.
struct LoaderRuns(Arc<timers::Timers>);

impl Drop for LoaderRuns {
    fn drop(&mut self) {
        self.0.loading.store(false, Ordering::Release);
    }
}

/// When the loader reads next, having read up to `cursor` at `now`.
fn next_read(cursor: &Cursor, full: bool, now: u64) -> u64 {
    match &cursor.last {
        // The rows it read reach this far: read on once they come due.
        Some(last) if full => last.at_ms.max(now),
        _ => now.saturating_add(LOOKAHEAD_MS / 2),
    }
}

/// The task that arms each next window of deadlines as the clock reaches it. It holds the
/// runtime weakly: once the runtime is dropped or shut down, it ends.
fn spawn_loader<S: EventStore>(inner: &Arc<Inner<S>>, mut cursor: Cursor, full: bool, now: u64) {
    if inner.timers.loading.swap(true, Ordering::AcqRel) {
        // A loader runs already (an earlier `recover`): it reads on from its own cursor.
        return;
    }
    let loading = LoaderRuns(Arc::clone(&inner.timers));
    let runtime: Weak<Inner<S>> = Arc::downgrade(inner);
    let clock = Arc::clone(&inner.timers.clock);
    let mut stop = inner.stop.subscribe();
    let mut read_at = next_read(&cursor, full, now);
    let task = async move {
        let _loading = loading;
        loop {
            tokio::select! {
                () = clock.sleep_until(read_at) => {}
                _ = stop.wait_for(|stopping| *stopping) => return,
            }
            let now = clock.now_ms();
            if now < read_at {
                continue;
            }
            let Some(inner) = runtime.upgrade() else {
                return;
            };
            let read = arm_page(&inner, &mut cursor, now.saturating_add(LOOKAHEAD_MS), PAGE).await;
            drop(inner);
            read_at = match read {
                Ok((armed, full)) => {
                    tracing::debug!(armed, "deadlines of the next window armed");
                    next_read(&cursor, full, now)
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot read the next deadlines; reading again soon");
                    let retry = u64::try_from(RETRY_AFTER.as_millis()).unwrap_or(u64::MAX);
                    now.saturating_add(retry)
                }
            };
        }
    };
    inner.spawn(task.instrument(tracing::info_span!(parent: None, "deadline_loader")));
}
