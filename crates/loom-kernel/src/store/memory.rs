//! The in-memory store: the reference twin of the disk store, for tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::watch::{HeadWatch, WaitError};
use super::{AppendError, EventStore, ExecutionPage, ExecutionSummary, ReadError, wall_clock_ms};
use crate::envelope::EventEnvelope;
use crate::event::Event;
use crate::id::ExecutionId;

/// Logs in a map behind a mutex. Cheap to clone; clones share the logs.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    logs: Mutex<BTreeMap<ExecutionId, Vec<EventEnvelope>>>,
    watch: HeadWatch,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, BTreeMap<ExecutionId, Vec<EventEnvelope>>> {
        // A panic while holding the lock cannot leave a log half-appended: appends extend the
        // vector only after every check, so the data is consistent even if poisoned.
        self.inner.logs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl EventStore for MemoryStore {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        if events.is_empty() {
            return Err(AppendError::EmptyBatch {
                execution: execution.clone(),
            });
        }
        let recorded_at_ms = wall_clock_ms();
        let head = {
            let mut logs = self.logs();
            let log = logs.entry(execution.clone()).or_default();
            let actual_seq = log.len() as u64;
            if actual_seq != expected_seq {
                return Err(AppendError::Conflict {
                    execution: execution.clone(),
                    expected_seq,
                    actual_seq,
                });
            }
            log.extend(
                (expected_seq..)
                    .zip(events)
                    .map(|(seq, event)| EventEnvelope {
                        recorded_at_ms,
                        ..EventEnvelope::new(execution.clone(), seq, event.clone())
                    }),
            );
            log.len() as u64
        };
        self.inner.watch.publish(execution, head);
        Ok(head)
    }

    async fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        let logs = self.logs();
        let Some(log) = logs.get(execution) else {
            return Ok(Vec::new());
        };
        let start = usize::try_from(from).unwrap_or(usize::MAX).min(log.len());
        Ok(log[start..].iter().take(limit).cloned().collect())
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        Ok(self.logs().get(execution).map_or(0, |log| log.len() as u64))
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        use std::ops::Bound;
        let logs = self.logs();
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let limit = limit.max(1);
        let executions: Vec<ExecutionSummary> = logs
            .range::<ExecutionId, _>((lower, Bound::Unbounded))
            .filter(|(_, log)| !log.is_empty())
            .take(limit + 1)
            .map(|(id, log)| ExecutionSummary {
                id: id.clone(),
                head: log.len() as u64,
            })
            .collect();
        Ok(ExecutionPage::from_one_extra(executions, limit))
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        self.inner
            .watch
            .wait_for(execution, seq, self.head(execution))
            .await
            .map_err(|err| match err {
                WaitError::Read(err) => err,
                WaitError::Closed => ReadError::Closed,
            })
    }
}
