//! The effect-dispatch seam: how the runtime asks the world to do something.
//!
//! The kernel defines what an effect looks like from the replay engine's side and ships no
//! real effects; `loom-effect-runtime` implements [`Effect`] with definitions, middleware and
//! authorization, and plugins contribute effects at composition.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::event::ErrorInfo;
use crate::id::ExecutionId;
use crate::payload::Payload;

/// One invocation of an effect.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EffectCall {
    /// The execution the effect runs for.
    pub execution_id: ExecutionId,
    /// The step's id (ADR 0061).
    pub step_id: String,
    /// The effect's registered name.
    pub effect: String,
    /// The input the flow gave.
    pub input: Payload,
    /// 1 for the first dispatch; one more for each re-dispatch after a crash or a `retry`
    /// verdict.
    pub attempt: u32,
    /// K2: the capabilities granted to the execution (shared by all its steps).
    pub capabilities: Arc<BTreeSet<String>>,
    /// K3: what the execution may still spend (its budget less what it spent and what the
    /// steps running beside this one hold); `None` is unlimited.
    pub budget_remaining: Option<u64>,
    /// The fencing token of the execution's lease under which this dispatch runs, on a store
    /// with leases ([`crate::kit::LeaseHold::Held`]); `None` on a store one process writes at a
    /// time. Set for a non-idempotent step, whose lease the runtime confirms right before the
    /// call. A receiver that remembers the highest token seen per execution can refuse a call
    /// under a lower one: it comes from a worker that lost the execution (paused past its
    /// lease) and another worker may have run the step since.
    pub lease_token: Option<u64>,
}

impl EffectCall {
    /// A first dispatch with no capabilities and no budget; for dispatchers and tests outside
    /// the runtime (the runtime fills every field itself).
    pub fn new(
        execution_id: ExecutionId,
        step_id: impl Into<String>,
        effect: impl Into<String>,
        input: Payload,
    ) -> Self {
        Self {
            execution_id,
            step_id: step_id.into(),
            effect: effect.into(),
            input,
            attempt: 1,
            capabilities: Arc::default(),
            budget_remaining: None,
            lease_token: None,
        }
    }

    /// The attempt number, from 1.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// K2: the capabilities the execution was granted.
    pub fn with_capabilities(mut self, capabilities: BTreeSet<String>) -> Self {
        self.capabilities = Arc::new(capabilities);
        self
    }

    /// K3: what the execution may still spend (`None`: no budget).
    pub fn with_budget_remaining(mut self, budget_remaining: Option<u64>) -> Self {
        self.budget_remaining = budget_remaining;
        self
    }

    /// The fencing token of the execution's lease (see [`EffectCall::lease_token`]).
    pub fn with_lease_token(mut self, lease_token: Option<u64>) -> Self {
        self.lease_token = lease_token;
        self
    }

    /// `executionId:stepId`: the same on every attempt and after every crash (K9).
    pub fn idempotency_key(&self) -> String {
        crate::id::idempotency_key(&self.execution_id, &self.step_id)
    }
}

/// How an effect invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectResult {
    /// It ran and produced this output: recorded as `STEP_COMPLETED`.
    Completed(Payload),
    /// It failed, and the world is as if it never ran, or it ran and failed for good:
    /// recorded as `STEP_FAILED`.
    Failed(ErrorInfo),
    /// It may or may not have run (a timed-out or panicked non-idempotent attempt): recorded
    /// as `EFFECT_INDOUBT` with this reason, and the step waits for an operator's verdict (K9).
    InDoubt(ErrorInfo),
}

/// What an effect invocation ended with, and what it cost (K3).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EffectOutcome {
    /// Completed, failed, or in doubt.
    pub result: EffectResult,
    /// Recorded with the outcome and added to the execution's budget spent. An outcome in
    /// doubt records no cost.
    pub cost: u64,
}

impl EffectOutcome {
    /// The effect ran and returned `output`.
    pub fn ok(output: Payload) -> Self {
        Self {
            result: EffectResult::Completed(output),
            cost: 0,
        }
    }

    /// The effect failed with `error`.
    pub fn failed(error: ErrorInfo) -> Self {
        Self {
            result: EffectResult::Failed(error),
            cost: 0,
        }
    }

    /// Whether the effect ran is unknown: the step is recorded in doubt (K9).
    pub fn in_doubt(reason: ErrorInfo) -> Self {
        Self {
            result: EffectResult::InDoubt(reason),
            cost: 0,
        }
    }

    /// The outcome with this cost.
    pub fn with_cost(mut self, cost: u64) -> Self {
        self.cost = cost;
        self
    }
}

/// Something a flow can ask the world to do through `ctx.execute`.
///
/// # As a seam
/// - **Replay:** never called for a step whose outcome is recorded; `invoke` runs only for a
///   new step, or for one started without an outcome (again if idempotent, only after a
///   `retry` verdict if not). `admit` runs only for a new step.
/// - **Task:** `admit` runs where the flow issues the step (the driver's task); the future of
///   `invoke` is polled by the execution's driver task beside the flow, and is dropped if the
///   execution is cancelled or the runtime shut down.
/// - **Panic:** contained. In `admit`: the step is refused (`STEP_FAILED`). In `invoke`: an
///   idempotent step fails; a non-idempotent one is recorded in doubt (`EFFECT_INDOUBT`), since
///   it may have done its work.
/// - **Other processes:** an effect sees only its call; the idempotency key is the same in
///   every process that runs the step.
pub trait Effect: Send + Sync + 'static {
    /// Whether running it twice with the same idempotency key is harmless (K9). A non-idempotent
    /// effect found started but without an outcome after a crash is never run again without an
    /// operator's verdict.
    fn idempotent(&self) -> bool;

    /// K2: the capability an execution must have been granted for a step of this effect to
    /// start. `None` (the default) names the effect by what it is registered as: a raw effect
    /// registered as `"mail.send"` needs `"mail.send"` granted. The runtime checks it for every
    /// new step, before [`Effect::admit`]; a step refused for it is recorded as `STEP_FAILED`
    /// with code `loom.capability_denied` and the effect never runs.
    fn capability(&self) -> Option<&str> {
        None
    }

    /// Checks made before the step is recorded as started (K2 authorization, K3 budget, input
    /// validation). A refusal is recorded as `STEP_FAILED` without a `STEP_STARTED`, costs
    /// nothing, and the effect never runs. Only a new step is admitted: a step re-run after a
    /// crash or on an operator's `retry` verdict was admitted when it first started.
    fn admit(&self, call: &EffectCall) -> Result<(), ErrorInfo> {
        let _ = call;
        Ok(())
    }

    /// The most one dispatch may cost (K3). The runtime holds it against the budget while the
    /// step runs, so steps running side by side cannot overspend together, and counts the
    /// outcome's recorded cost once the step ends.
    fn max_cost(&self) -> u64 {
        0
    }

    /// Runs one dispatch. The future is dropped if the execution is cancelled.
    fn invoke(&self, call: EffectCall) -> BoxFuture<'static, EffectOutcome>;
}

/// An [`Effect`] from a closure, for tests and small compositions.
pub struct FnEffect<F> {
    idempotent: bool,
    run: F,
}

impl<F> std::fmt::Debug for FnEffect<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnEffect")
            .field("idempotent", &self.idempotent)
            .finish()
    }
}

impl<F, Fut> FnEffect<F>
where
    F: Fn(EffectCall) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = EffectOutcome> + Send + 'static,
{
    /// An effect from an async function; `idempotent` says whether running it twice is harmless.
    pub fn new(idempotent: bool, run: F) -> Self {
        Self { idempotent, run }
    }
}

impl<F, Fut> Effect for FnEffect<F>
where
    F: Fn(EffectCall) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = EffectOutcome> + Send + 'static,
{
    fn idempotent(&self) -> bool {
        self.idempotent
    }

    fn invoke(&self, call: EffectCall) -> BoxFuture<'static, EffectOutcome> {
        Box::pin((self.run)(call))
    }
}
