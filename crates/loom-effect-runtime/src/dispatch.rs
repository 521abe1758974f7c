//! The middleware: how a registered definition answers the kernel's effect-dispatch trait.
//!
//! Before the step is recorded as started: K2 (the capability is granted; the kernel checks it
//! from [`Effect::capability`] for every effect), then `admit`: K3 (the cost fits what the
//! execution may still spend), the input schema, the definition's own check
//! ([`crate::EffectDef::admit`]). Then each dispatch
//! (`invoke`) runs attempts with a timeout and a cancellation signal, retries what may be
//! retried with backoff, and turns the last attempt into the recorded outcome:
//!
//! | attempt ended with | idempotent | not idempotent |
//! | --- | --- | --- |
//! | output (valid) | `STEP_COMPLETED` | `STEP_COMPLETED` |
//! | output not matching its schema | `STEP_FAILED` | `STEP_FAILED` |
//! | `Terminal` | `STEP_FAILED` | `STEP_FAILED` |
//! | `Retryable` | retry, then `STEP_FAILED` | retry, then `STEP_FAILED` |
//! | `InDoubt` | retry, then `STEP_FAILED` | `EFFECT_INDOUBT` |
//! | timeout | retry, then `STEP_FAILED` | `EFFECT_INDOUBT` |
//! | panic | `STEP_FAILED` | `EFFECT_INDOUBT` |
//!
//! K3: a step is charged its cost when an attempt may have done its work. A step whose every
//! attempt was `Retryable` (which says it did not happen) is charged nothing; an input that
//! does not decode is charged nothing.
//!
//! A timeout or a panic of a non-idempotent effect cannot tell whether the world changed, so it
//! is never retried without an operator (K9).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use loom_kernel::{Effect, EffectCall, EffectOutcome};
use loom_kernel::{ErrorInfo, Payload};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::EffectContext;
use crate::definition::CompiledDef;
use crate::error::{EffectError, codes};

/// A registered effect, as the kernel dispatches it.
#[derive(Debug, Clone)]
pub(crate) struct RegisteredEffect {
    pub(crate) def: Arc<CompiledDef>,
}

/// How one attempt ended, before the policy decides what follows.
enum Attempt {
    Output(Payload),
    Failed(EffectError),
    TimedOut,
    Panicked(String),
}

impl Attempt {
    /// How the attempt ended, for its log line (no payload: it may hold classified values).
    fn label(&self) -> &'static str {
        match self {
            Self::Output(_) => "output",
            Self::Failed(EffectError::Terminal(_)) => "failed",
            Self::Failed(EffectError::Retryable(_)) => "retryable",
            Self::Failed(EffectError::InDoubt(_)) => "in_doubt",
            Self::TimedOut => "timed_out",
            Self::Panicked(_) => "panicked",
        }
    }
}

impl Effect for RegisteredEffect {
    fn idempotent(&self) -> bool {
        self.def.def.idempotent
    }

    fn capability(&self) -> Option<&str> {
        Some(&self.def.def.capability)
    }

    /// K2 and K3 are checked by the kernel from [`Effect::capability`] and
    /// [`Effect::max_cost`] (the definition's cost) before this is called.
    fn admit(&self, call: &EffectCall) -> Result<(), ErrorInfo> {
        let def = &self.def.def;
        if let Some(schema) = &self.def.input {
            schema.check(&call.input.to_value()).map_err(|detail| {
                ErrorInfo::new(
                    codes::INVALID_INPUT,
                    format!("the input of effect '{}' is invalid: {detail}", def.name),
                )
            })?;
        }
        if let Some(check) = &def.admit {
            check(&call.input)?;
        }
        Ok(())
    }

    fn max_cost(&self) -> u64 {
        self.def.def.cost
    }

    fn invoke(&self, call: EffectCall) -> BoxFuture<'static, EffectOutcome> {
        let def = Arc::clone(&self.def);
        Box::pin(async move { run(&def, call).await })
    }
}

/// Runs the attempts of one dispatch and returns the outcome to record.
async fn run(compiled: &CompiledDef, call: EffectCall) -> EffectOutcome {
    let def = &compiled.def;
    let key = call.idempotency_key();
    // Cancelled when this future is dropped (the execution was cancelled): the current
    // attempt's token is its child.
    let dispatch_token = CancellationToken::new();
    let _cancel_on_drop = dispatch_token.clone().drop_guard();
    let mut attempt = 1;
    // Whether any attempt may have done its work (K3 charges a step only then): every attempt
    // but those that said they did not happen (`Retryable`).
    let mut may_have_run = false;
    loop {
        let token = dispatch_token.child_token();
        let span = tracing::info_span!(
            "effect",
            effect = %def.name,
            step = %call.step_id,
            key = %key,
            attempt,
            dispatch = call.attempt,
        );
        let ctx = EffectContext {
            execution_id: call.execution_id.clone(),
            step_id: call.step_id.clone(),
            effect: def.name.clone(),
            idempotency_key: key.clone(),
            attempt,
            dispatch: call.attempt,
            lease_token: call.lease_token,
            budget_remaining: call.budget_remaining,
            cancel: token.clone(),
            span: span.clone(),
        };
        let ended = match one_attempt(compiled, ctx, &call.input, &token)
            .instrument(span.clone())
            .await
        {
            Ok(ended) => ended,
            // The input does not decode: nothing ran, nothing is charged.
            Err(error) => return EffectOutcome::failed(error),
        };
        // The attempt's one line (README, "Logs"): the span alone prints nothing.
        span.in_scope(|| tracing::info!(outcome = ended.label(), "attempt ended"));
        let retry = match ended {
            Attempt::Output(payload) => return output(compiled, payload),
            Attempt::Failed(EffectError::Terminal(error)) => return ran(Err(error), def.cost),
            Attempt::Failed(EffectError::Retryable(error)) => error,
            Attempt::Failed(EffectError::InDoubt(error)) if !def.idempotent => {
                return EffectOutcome::in_doubt(error);
            }
            Attempt::Failed(EffectError::InDoubt(error)) => {
                may_have_run = true;
                error
            }
            Attempt::TimedOut => {
                may_have_run = true;
                let error = ErrorInfo::new(
                    codes::TIMEOUT,
                    format!(
                        "attempt {attempt} of effect '{}' ran past its timeout of {:?}",
                        def.name,
                        def.timeout.unwrap_or_default()
                    ),
                );
                if !def.idempotent {
                    return EffectOutcome::in_doubt(error);
                }
                error
            }
            Attempt::Panicked(detail) => {
                let error = ErrorInfo::new(
                    codes::PANICKED,
                    format!("effect '{}' panicked: {detail}", def.name),
                );
                if def.idempotent {
                    return ran(Err(error), def.cost);
                }
                return EffectOutcome::in_doubt(error);
            }
        };
        if attempt >= def.retry.max_attempts {
            let cost = if may_have_run { def.cost } else { 0 };
            return ran(Err(retry), cost);
        }
        let wait = def.retry.backoff(&key, attempt);
        span.in_scope(|| {
            tracing::warn!(code = %retry.code, ?wait, "attempt failed; retrying");
        });
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// One attempt under the timeout. `Err` when the input does not decode.
async fn one_attempt(
    compiled: &CompiledDef,
    ctx: EffectContext,
    input: &Payload,
    token: &CancellationToken,
) -> Result<Attempt, ErrorInfo> {
    // Armed before the handler is called: on a tokio runtime without a timer this panics (as
    // tokio's timers do) before anything of the effect has run.
    let deadline = compiled.def.timeout.map(tokio::time::sleep);
    let handler = &compiled.def.handler;
    let running = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(ctx, input))) {
        Ok(Ok(running)) => running,
        Ok(Err(error)) => return Err(error),
        Err(panic) => return Ok(Attempt::Panicked(panic_text(&panic))),
    };
    let caught = AssertUnwindSafe(running).catch_unwind();
    let result = match deadline {
        Some(deadline) => {
            tokio::select! {
                // The attempt first, as `tokio::time::timeout` does: one that is ready wins.
                biased;
                result = caught => result,
                () = deadline => {
                    token.cancel();
                    return Ok(Attempt::TimedOut);
                }
            }
        }
        None => caught.await,
    };
    Ok(match result {
        Ok(Ok(output)) => Attempt::Output(output),
        Ok(Err(error)) => Attempt::Failed(error),
        Err(panic) => Attempt::Panicked(panic_text(&panic)),
    })
}

/// The outcome of a handler's output: checked against the output schema.
fn output(compiled: &CompiledDef, output: Payload) -> EffectOutcome {
    let def = &compiled.def;
    if let Some(schema) = &compiled.output
        && let Err(detail) = schema.check(&output.to_value())
    {
        let error = ErrorInfo::new(
            codes::INVALID_OUTPUT,
            format!("the output of effect '{}' is invalid: {detail}", def.name),
        );
        return ran(Err(error), def.cost);
    }
    ran(Ok(output), def.cost)
}

/// The outcome of a step whose handler ran: it is charged.
fn ran(result: Result<Payload, ErrorInfo>, cost: u64) -> EffectOutcome {
    match result {
        Ok(output) => EffectOutcome::ok(output),
        Err(error) => EffectOutcome::failed(error),
    }
    .with_cost(cost)
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
