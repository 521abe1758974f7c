//! What a handler knows about the invocation it serves.

use loom_kernel::ExecutionId;
use tokio_util::sync::CancellationToken;

/// One attempt of one step, as its handler sees it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct EffectContext {
    pub(crate) execution_id: ExecutionId,
    pub(crate) step_id: String,
    pub(crate) effect: String,
    pub(crate) idempotency_key: String,
    pub(crate) attempt: u32,
    pub(crate) dispatch: u32,
    pub(crate) lease_token: Option<u64>,
    pub(crate) budget_remaining: Option<u64>,
    pub(crate) cancel: CancellationToken,
    pub(crate) span: tracing::Span,
}

impl EffectContext {
    /// `executionId:stepId`: the same on every attempt, every retry and after every crash,
    /// never random (K9). Pass it to the receiver so that it can drop duplicates (K9.1).
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// The attempt within this dispatch, from 1; the retry middleware counts it.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The dispatch of the step, from 1: one more each time the step is started again after a
    /// crash (idempotent effects) or on an operator's `retry` verdict.
    pub fn dispatch(&self) -> u32 {
        self.dispatch
    }

    /// The fencing token of the execution's lease this dispatch runs under, on a store with
    /// leases (PostgreSQL); `None` on a store one process writes at a time. The runtime
    /// confirmed the lease right before calling a non-idempotent handler; idempotent ones get
    /// `None`. Pass it, with the idempotency key and [`EffectContext::dispatch`], to a receiver
    /// that fences: one that remembers the highest token seen per execution and refuses a
    /// lower one turns away a worker that was paused past its lease while another worker took
    /// the execution over (`docs/EFFECTS.md`, "Paused workers").
    pub fn lease_token(&self) -> Option<u64> {
        self.lease_token
    }

    /// The execution the effect runs for.
    pub fn execution_id(&self) -> &ExecutionId {
        &self.execution_id
    }

    /// The step id of this invocation (ADR 0061).
    pub fn step_id(&self) -> &str {
        &self.step_id
    }

    /// The effect's registered name.
    pub fn effect(&self) -> &str {
        &self.effect
    }

    /// K3: what the execution could still spend when this dispatch began (its budget less what
    /// was spent and what other running steps held), this step included; `None` is unlimited.
    pub fn budget_remaining(&self) -> Option<u64> {
        self.budget_remaining
    }

    /// Fired when the attempt times out, when the execution is cancelled, and once the step's
    /// dispatch is over (its outcome is on its way to the log). Work the handler hands to other
    /// tasks should stop when it fires; the handler's own future is dropped anyway.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the attempt was cancelled (a timeout, or the execution was cancelled): stop soon.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves once the attempt is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// The attempt's span (effect, step, idempotency key, attempt), for work on other tasks.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }
}
