//! The operator's queue: every step in doubt, across executions (K9).

use loom_kernel::event::Event;
use loom_kernel::{ErrorInfo, EventStore, EventStoreExt, ExecutionId, FoldStoredError, ReadError};

/// A step that may or may not have run, waiting for a verdict (`Runtime::resolve`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InDoubtStep {
    pub execution: ExecutionId,
    pub step_id: String,
    pub effect: String,
    /// The dispatch that may or may not have run.
    pub attempt: u32,
    /// The seq of its `EFFECT_INDOUBT`.
    pub seq: u64,
    /// Why it is in doubt (absent in events written before reasons were recorded).
    pub reason: Option<ErrorInfo>,
}

impl InDoubtStep {
    /// The key the effect ran with: what to look for at the receiver before giving a verdict.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.execution, self.step_id)
    }
}

/// Why the steps in doubt could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListInDoubtError {
    #[error("cannot list executions: {0}")]
    List(#[source] ReadError),
    #[error(transparent)]
    Fold(#[from] FoldStoredError),
    #[error("cannot read EFFECT_INDOUBT of step '{step_id}' in execution {execution}: {source}")]
    Read {
        execution: ExecutionId,
        step_id: String,
        #[source]
        source: ReadError,
    },
}

/// Every step in doubt in the store, by execution id then step id.
///
/// It folds every execution in the store: O(events stored). Steps in doubt are rare and this is
/// an operator's query, not a hot path.
pub async fn steps_in_doubt<S: EventStore>(
    store: &S,
) -> Result<Vec<InDoubtStep>, ListInDoubtError> {
    use futures::TryStreamExt;
    let mut found = Vec::new();
    let mut executions = std::pin::pin!(store.executions());
    while let Some(summary) = executions
        .try_next()
        .await
        .map_err(ListInDoubtError::List)?
    {
        found.extend(in_execution(store, &summary.id).await?);
    }
    Ok(found)
}

/// The steps in doubt of one execution (none for an unknown one).
pub async fn in_execution<S: EventStore>(
    store: &S,
    execution: &ExecutionId,
) -> Result<Vec<InDoubtStep>, ListInDoubtError> {
    let state = store.fold(execution).await?;
    let mut found = Vec::new();
    for step_id in state.steps_in_doubt() {
        let Some(record) = state.step(step_id) else {
            continue;
        };
        let loom_kernel::fold::StepStatus::InDoubt { attempt, seq } = record.status else {
            continue;
        };
        let read =
            store
                .read(execution, seq, 1)
                .await
                .map_err(|source| ListInDoubtError::Read {
                    execution: execution.clone(),
                    step_id: step_id.clone(),
                    source,
                })?;
        let reason = match read.first().map(|envelope| &envelope.event) {
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
        });
    }
    Ok(found)
}
