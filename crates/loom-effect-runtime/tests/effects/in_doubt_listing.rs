//! The operator's list of steps in doubt: one execution whose log cannot be folded is
//! reported and skipped, never hiding the others.

use loom_effect_runtime::{steps_in_doubt, steps_in_doubt_report};
use std::future::Future;

use loom_kernel::conformance::{Hooked, OneBadLog, StoreHooks, id, started};
use loom_kernel::kit::{ExecutionPage, ExecutionSummary};
use loom_kernel::{EffectInDoubt, Event, StepStarted};
use loom_kernel::{EventEnvelope, EventStore, ExecutionId, MemoryStore};
use loom_kernel::{ReadError, StatusFilter};

/// A store with one bad log (a second `EXECUTION_STARTED`) whose index files that execution
/// as in doubt, as a store whose log was damaged after its index was written would, so the
/// listing reaches it.
struct BadLogFiledInDoubt(OneBadLog);

impl StoreHooks<MemoryStore> for BadLogFiledInDoubt {
    fn read(
        &self,
        inner: &MemoryStore,
        execution: &ExecutionId,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<EventEnvelope>, ReadError>> + Send {
        StoreHooks::<MemoryStore>::read(&self.0, inner, execution, from, limit)
    }

    fn head(
        &self,
        inner: &MemoryStore,
        execution: &ExecutionId,
    ) -> impl Future<Output = Result<u64, ReadError>> + Send {
        StoreHooks::<MemoryStore>::head(&self.0, inner, execution)
    }

    async fn list_by_status(
        &self,
        inner: &MemoryStore,
        filter: StatusFilter,
        after: Option<&ExecutionId>,
        limit: usize,
    ) -> Result<ExecutionPage, ReadError> {
        let bad = &self.0.bad;
        let mut page = inner.list_by_status(filter, after, limit).await?;
        if filter == StatusFilter::StepsInDoubt && after.is_none_or(|after| after < bad) {
            page.executions.insert(
                0,
                ExecutionSummary {
                    id: bad.clone(),
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
    let store = Hooked::new(inner, BadLogFiledInDoubt(OneBadLog { bad: bad.clone() }));
    let report = steps_in_doubt_report(&store).await.unwrap();
    assert_eq!(report.steps.len(), 1);
    assert_eq!(report.steps[0].execution, doubtful);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].0, bad);
    assert_eq!(steps_in_doubt(&store).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_step_left_in_doubt_by_an_end_is_still_listed_as_ended() {
    use loom_kernel::ExecutionCancelled;
    let store = MemoryStore::new();
    let doubted = |execution: &str, end: Option<Event>| {
        let mut events = vec![
            started("pay"),
            loom_kernel::conformance::step_started("charge#1"),
            loom_kernel::conformance::in_doubt("charge#1"),
        ];
        events.extend(end);
        (id(execution), events)
    };
    let cancelled = Event::ExecutionCancelled(ExecutionCancelled { reason: None });
    // A flow that returned while the effect ran (K9, issue 41 hole 1).
    let completed = loom_kernel::conformance::completed();
    for (execution, events) in [
        doubted("a-cancelled", Some(cancelled)),
        doubted("b-waiting", None),
        doubted("c-completed", Some(completed)),
    ] {
        store.append(&execution, 0, &events).await.unwrap();
    }
    let listed = steps_in_doubt(&store).await.unwrap();
    let seen: Vec<(&str, bool, bool)> = listed
        .iter()
        .map(|step| (step.execution.as_str(), step.cancelled, step.ended))
        .collect();
    assert_eq!(
        seen,
        [
            ("a-cancelled", true, true),
            ("b-waiting", false, false),
            ("c-completed", false, true)
        ]
    );
}
