//! The operator's queue: every step in doubt, across executions (K9).

use loom_kernel::StatusFilter;
use loom_kernel::{
    ErrorInfo, EventStore, EventStoreExt, ExecutionId, ExecutionState, ExecutionStatus,
    FoldStoredError, ReadError,
};
use loom_kernel::{Event, EventEnvelope};

/// A step that may or may not have run, waiting for a verdict (`Runtime::resolve`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InDoubtStep {
    /// The execution the step belongs to.
    pub execution: ExecutionId,
    /// The step's id.
    pub step_id: String,
    /// The effect it invoked.
    pub effect: String,
    /// The dispatch that may or may not have run.
    pub attempt: u32,
    /// The seq of its `EFFECT_INDOUBT`.
    pub seq: u64,
    /// Why it is in doubt (absent in events written before reasons were recorded).
    pub reason: Option<ErrorInfo>,
    /// The execution was cancelled with this step in doubt: its log is closed, so no verdict
    /// can be recorded (`Runtime::resolve` says so), but the effect may have happened and is
    /// settled with the receiver.
    pub cancelled: bool,
    /// The execution has ended with this step in doubt (cancelled, or its flow returned while
    /// the effect ran, K9): as for `cancelled`, no verdict can be recorded.
    pub ended: bool,
}

impl InDoubtStep {
    /// The key the effect ran with: what to look for at the receiver before giving a verdict.
    pub fn idempotency_key(&self) -> String {
        loom_kernel::idempotency_key(&self.execution, &self.step_id)
    }
}

/// Why the steps in doubt could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListInDoubtError {
    /// The store could not list its executions.
    #[error("cannot list executions: {0}")]
    List(#[source] ReadError),
    /// An execution could not be folded.
    #[error(transparent)]
    Fold(#[from] FoldStoredError),
}

/// Every step in doubt in the store, by execution id then step id.
///
/// It lists the executions with a step in doubt through the store's index
/// ([`StatusFilter::StepsInDoubt`]), a page at a time with one read of the page's logs
/// ([`EventStore::read_logs`]), and folds only those: the ones waiting for a verdict, and
/// the ones that ended with a step in doubt (a cancel, or a flow that returned while the
/// effect ran, K9), since the operator must still learn that the effect may have happened:
/// those steps are listed with [`InDoubtStep::ended`] set. Its cost is in proportion to what
/// it returns, however many other executions the store holds. An execution listed whose log
/// cannot be read or folded is skipped (and logged), never hiding the others;
/// [`steps_in_doubt_report`] says which. Fails only when the store cannot list its
/// executions.
pub async fn steps_in_doubt<S: EventStore>(
    store: &S,
) -> Result<Vec<InDoubtStep>, ListInDoubtError> {
    Ok(steps_in_doubt_report(store).await?.steps)
}

/// The steps in doubt, and the executions that could not be looked at.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct InDoubtReport {
    /// Every step in doubt found, by execution id then step id.
    pub steps: Vec<InDoubtStep>,
    /// Executions whose log could not be read or folded, in id order, with why.
    pub skipped: Vec<(ExecutionId, ListInDoubtError)>,
}

/// How many executions [`steps_in_doubt_report`] lists, and reads the logs of, at a time.
const PAGE: usize = 256;

/// [`steps_in_doubt`], with the executions it skipped.
pub async fn steps_in_doubt_report<S: EventStore>(
    store: &S,
) -> Result<InDoubtReport, ListInDoubtError> {
    let mut report = InDoubtReport::default();
    let mut after: Option<ExecutionId> = None;
    loop {
        let page = store
            .list_by_status(StatusFilter::StepsInDoubt, after.as_ref(), PAGE)
            .await
            .map_err(ListInDoubtError::List)?;
        let ids: Vec<ExecutionId> = page.executions.into_iter().map(|s| s.id).collect();
        let found: Vec<_> = store
            .read_listed_logs(ids)
            .await
            .into_iter()
            .map(|(id, log)| {
                let steps = log
                    .map_err(|error| ListInDoubtError::Fold(FoldStoredError::Read(error)))
                    .and_then(|log| in_log(&id, &log));
                (id, steps)
            })
            .collect();
        for (id, steps) in found {
            match steps {
                Ok(steps) => report.steps.extend(steps),
                Err(error) => {
                    tracing::error!(execution = %id, %error, "steps in doubt: skipping an execution that cannot be folded");
                    report.skipped.push((id, error));
                }
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    report
        .steps
        .sort_by(|a, b| (&a.execution, &a.step_id).cmp(&(&b.execution, &b.step_id)));
    report.skipped.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(report)
}

/// The steps in doubt of one execution (none for an unknown one).
pub async fn in_execution<S: EventStore>(
    store: &S,
    execution: &ExecutionId,
) -> Result<Vec<InDoubtStep>, ListInDoubtError> {
    // One read of the log: the fold, and each doubt's reason from its EFFECT_INDOUBT.
    let log = store
        .read_all(execution)
        .await
        .map_err(FoldStoredError::Read)?;
    in_log(execution, &log)
}

/// The steps in doubt of `execution`, from its whole log.
fn in_log(
    execution: &ExecutionId,
    log: &[EventEnvelope],
) -> Result<Vec<InDoubtStep>, ListInDoubtError> {
    let state = ExecutionState::fold(log).map_err(FoldStoredError::Fold)?;
    let mut found = Vec::new();
    for step_id in state.steps_in_doubt() {
        let Some(record) = state.step(step_id) else {
            continue;
        };
        let loom_kernel::StepStatus::InDoubt { attempt, seq } = record.status else {
            continue;
        };
        let recorded = usize::try_from(seq).ok().and_then(|at| log.get(at));
        let reason = match recorded.map(|envelope| &envelope.event) {
            Some(Event::EffectInDoubt(event)) => event.reason.clone(),
            _ => None,
        };
        found.push(InDoubtStep {
            execution: execution.clone(),
            step_id: step_id.clone(),
            effect: record.effect.to_string(),
            attempt,
            seq,
            reason,
            cancelled: state.status() == ExecutionStatus::Cancelled,
            ended: state.status().is_terminal(),
        });
    }
    Ok(found)
}
