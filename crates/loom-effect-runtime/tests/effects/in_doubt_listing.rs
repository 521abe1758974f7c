//! The operator's list of steps in doubt: one execution whose log cannot be folded is
//! reported and skipped, never hiding the others.

use loom_effect_runtime::{steps_in_doubt, steps_in_doubt_report};
use loom_kernel::conformance::{id, started};
use loom_kernel::{AppendError, ExecutionPage, ExecutionSummary, ReadError, StatusFilter};
use loom_kernel::{EffectInDoubt, Event, StepStarted};
use loom_kernel::{EventEnvelope, EventStore, ExecutionId, ExecutionStatus, MemoryStore};

/// A memory store that serves one execution's log with a second `EXECUTION_STARTED`, as a
/// store that acknowledged an invalid append would.
struct OneBadLog {
    inner: MemoryStore,
    bad: ExecutionId,
}

impl EventStore for OneBadLog {
    async fn append(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<u64, AppendError> {
        self.inner.append(execution, expected_seq, events).await
    }

    async fn read(
        &self,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<EventEnvelope>, ReadError> {
        if *execution != self.bad {
            return self.inner.read(execution, from, limit).await;
        }
        Ok((0..2u64)
            .map(|seq| EventEnvelope::new(self.bad.clone(), seq, started("f")))
            .skip(from as usize)
            .take(limit)
            .collect())
    }

    async fn head(&self, execution: &ExecutionId) -> Result<u64, ReadError> {
        if *execution == self.bad {
            return Ok(2);
        }
        self.inner.head(execution).await
    }

    async fn list_executions(
        &self,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        self.inner.list_executions(after, limit).await
    }

    async fn wait_for(&self, execution: &ExecutionId, seq: u64) -> Result<(), ReadError> {
        self.inner.wait_for(execution, seq).await
    }

    /// Its index files the bad execution as in doubt (as a store whose log was damaged after
    /// its index was written would), so the listing reaches it.
    async fn list_by_status(
        &self,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        let mut page = self.inner.list_by_status(filter, after, limit).await?;
        if filter == StatusFilter::Status(ExecutionStatus::InDoubt)
            && after.is_none_or(|after| *after < self.bad)
        {
            page.executions.insert(
                0,
                ExecutionSummary {
                    id: self.bad.clone(),
                    head: 2,
                },
            );
        }
        Ok(page)
    }
}

#[tokio::test]
async fn a_bad_log_is_reported_and_skipped_and_the_other_doubts_are_listed() {
    let inner = MemoryStore::new();
    let bad = id("a-bad");
    let doubtful = id("b-doubt");
    inner.append(&bad, 0, &[started("f")]).await.unwrap();
    inner
        .append(
            &doubtful,
            0,
            &[
                started("f"),
                Event::StepStarted(StepStarted {
                    step_id: "pay#1".into(),
                    effect: "pay".into(),
                    input_digest: "d".into(),
                    attempt: 1,
                    max_cost: 0,
                }),
                Event::EffectInDoubt(EffectInDoubt {
                    step_id: "pay#1".into(),
                    effect: "pay".into(),
                    attempt: 1,
                    reason: None,
                }),
            ],
        )
        .await
        .unwrap();
    let store = OneBadLog {
        inner,
        bad: bad.clone(),
    };
    let report = steps_in_doubt_report(&store).await.unwrap();
    assert_eq!(report.steps.len(), 1);
    assert_eq!(report.steps[0].execution, doubtful);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].0, bad);
    assert_eq!(steps_in_doubt(&store).await.unwrap().len(), 1);
}
