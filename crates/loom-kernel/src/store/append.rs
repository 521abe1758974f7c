//! What every store does to an append before its writer sees it: the batch checked, its
//! records stamped with the store's clock and encoded, on the caller's task.

use std::sync::Arc;

use super::{AppendError, EncodedRecords, TailChange};
use crate::event::Event;
use crate::id::ExecutionId;

/// Refuses an empty batch ([`AppendError::EmptyBatch`]) and a batch holding a payload no
/// reader could parse back ([`AppendError::PayloadTooDeep`]). Every store calls it before
/// anything else, on the caller's task.
pub fn check_batch(
    execution: &ExecutionId,
    expected_seq: u64,
    events: &[Event],
) -> Result<(), AppendError> {
    use crate::event::Verdict;
    if events.is_empty() {
        return Err(AppendError::EmptyBatch {
            execution: execution.clone(),
        });
    }
    for (seq, event) in (expected_seq..).zip(events) {
        let too_deep = match event {
            Event::ExecutionStarted(e) => e.input.is_too_deep(),
            Event::StepCompleted(e) => e.output.is_too_deep(),
            Event::EffectResolved(e) => match &e.verdict {
                Verdict::Completed { output } => output.is_too_deep(),
                _ => false,
            },
            Event::DecisionRecorded(e) => e.value.is_too_deep(),
            Event::ExecutionResumed(e) => e.payload.is_too_deep(),
            Event::SurfacePatch(e) => e.ops.is_too_deep(),
            Event::ExecutionCompleted(e) => e.output.is_too_deep(),
            Event::StepStarted(_)
            | Event::StepFailed(_)
            | Event::EffectInDoubt(_)
            | Event::ExecutionSuspended(_)
            | Event::ExecutionFailed(_)
            | Event::ExecutionCancelled(_) => false,
        };
        if too_deep {
            return Err(AppendError::PayloadTooDeep {
                execution: execution.clone(),
                seq,
            });
        }
    }
    Ok(())
}

/// An append checked and encoded on the caller's task, for a store whose writer task commits
/// it: the records (the record form of [`crate::kit::record`]) stamped with the store's clock, what
/// each event changes in the execution's tail, and where the writer answers.
#[derive(Debug)]
pub struct EncodedAppend {
    /// The execution appended to.
    pub execution: ExecutionId,
    /// The seq the first record goes to.
    pub expected_seq: u64,
    /// The events, encoded, in seq order. Shared: a caller that keeps a share frees them on
    /// its own thread once answered, whatever thread the store's writer runs on.
    pub records: Arc<EncodedRecords>,
    /// What each event changes in the execution's tail, in order.
    pub changes: Vec<TailChange>,
    /// The time stamped on the records ([`wall_clock_ms`]).
    pub recorded_at_ms: Option<u64>,
    /// Where the writer sends the log's new head, or why nothing was appended.
    pub reply: tokio::sync::oneshot::Sender<Result<u64, AppendError>>,
}

impl EncodedAppend {
    /// Refuses what [`check_batch`] refuses, then stamps and encodes `events`. The receiver
    /// gets the writer's answer; a store reads a dropped sender as [`AppendError::Closed`].
    pub fn new(
        execution: &ExecutionId,
        expected_seq: u64,
        events: &[Event],
    ) -> Result<
        (
            Self,
            tokio::sync::oneshot::Receiver<Result<u64, AppendError>>,
        ),
        AppendError,
    > {
        check_batch(execution, expected_seq, events)?;
        let recorded_at_ms = wall_clock_ms();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let append = Self {
            execution: execution.clone(),
            expected_seq,
            records: Arc::new(EncodedRecords::encode(events, recorded_at_ms)),
            changes: events.iter().map(TailChange::of).collect(),
            recorded_at_ms,
            reply,
        };
        Ok((append, answer))
    }
}

/// Milliseconds since the Unix epoch, for the `recorded_at_ms` metadata a store stamps on the
/// events it appends, and for nothing else.
pub fn wall_clock_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}
