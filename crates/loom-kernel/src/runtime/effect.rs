//! The effect-dispatch seam: how the runtime asks the world to do something.
//!
//! The kernel defines what an effect looks like from the replay engine's side and ships no
//! real effects; `loom-effect-runtime` implements [`Effect`] with definitions, middleware and
//! authorization, and plugins contribute effects at composition.

use std::collections::BTreeSet;

use futures::future::BoxFuture;

use crate::event::ErrorInfo;
use crate::id::ExecutionId;
use crate::payload::Payload;

/// One invocation of an effect.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EffectCall {
    pub execution_id: ExecutionId,
    pub step_id: String,
    pub effect: String,
    pub input: Payload,
    /// 1 for the first dispatch; one more for each re-dispatch after a crash or a `retry`
    /// verdict.
    pub attempt: u32,
    /// K2: the capabilities granted to the execution.
    pub capabilities: BTreeSet<String>,
    /// K3: what the execution may still spend; `None` is unlimited.
    pub budget_remaining: Option<u64>,
}

impl EffectCall {
    /// `executionId:stepId`: the same on every attempt and after every crash (K9).
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.execution_id, self.step_id)
    }
}

/// What an effect invocation ended with, and what it cost (K3).
#[derive(Debug, Clone, PartialEq)]
pub struct EffectOutcome {
    pub result: Result<Payload, ErrorInfo>,
    pub cost: u64,
}

impl EffectOutcome {
    pub fn ok(output: Payload) -> Self {
        Self {
            result: Ok(output),
            cost: 0,
        }
    }

    pub fn failed(error: ErrorInfo) -> Self {
        Self {
            result: Err(error),
            cost: 0,
        }
    }
}

/// Something a flow can ask the world to do through `ctx.execute`.
pub trait Effect: Send + Sync + 'static {
    /// Whether running it twice with the same idempotency key is harmless (K9). A non-idempotent
    /// effect found started but without an outcome after a crash is never run again without an
    /// operator's verdict.
    fn idempotent(&self) -> bool;

    /// Runs one attempt. The future is dropped if the execution is cancelled.
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
