//! Grain B: the `a2ui.callFunction` effect (ADR 0070, LD-008).
//!
//! A flow writes `ctx.call("a2ui.callFunction", &input)`; the effect sends a
//! `callRendererFunction` over the injected [`Transport`] with the step's idempotency key
//! (`executionId:stepId`) as the call id, checks the reply against the request, validates the
//! value against the function's declared return schema, and returns it as the step's output.
//! It is not idempotent: a crash mid-call parks the step in doubt for an operator (K9), and K2
//! (capability) and K3 (cost) apply as to any effect.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use loom_effect_runtime::{EffectContext, EffectDef, EffectError, EffectRegistry, RegistryError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::bridge::{BridgeError, IngestError, check_args, check_callable, parse_reply};
use crate::catalog::Catalogs;
use crate::wire::{AgentMessage, CallRendererFunction, FunctionCall, FunctionOutcome};

/// The effect's name (and default capability).
pub const CALL_FUNCTION_EFFECT: &str = "a2ui.callFunction";

/// The error codes the effect records in `STEP_FAILED`.
pub mod codes {
    /// The function is unknown or `rendererOnly`, or its args fail the args schema: nothing
    /// was sent.
    pub const REFUSED: &str = "a2ui.call_refused";
    /// No reply came within `request_timeout`. The renderer may have run the function.
    pub const REQUEST_TIMEOUT: &str = "a2ui.request_timeout";
    /// The renderer answered with an error.
    pub const FUNCTION_ERROR: &str = "a2ui.function_error";
    /// The value fails the function's declared return schema; it is not recorded.
    pub const INVALID_RESULT: &str = "a2ui.invalid_result";
    /// The reply is not a valid answer to this call (wrong id, not a reply, not A2UI).
    pub const BAD_REPLY: &str = "a2ui.bad_reply";
    /// The transport lost the request after it may have left.
    pub const TRANSPORT_LOST: &str = "a2ui.transport_lost";
    /// The transport could not send the request; it did not leave.
    pub const NOT_DELIVERED: &str = "a2ui.not_delivered";
}

/// What went wrong in a transport.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The request did not leave (no connection): safe to try again.
    #[error("the request was not delivered: {0}")]
    NotDelivered(String),
    /// The request may have reached the renderer but no reply came back.
    #[error("the request may have been delivered, but the reply was lost: {0}")]
    Lost(String),
}

/// Carries a `callRendererFunction` to the renderer and brings back the reply's raw bytes
/// (a `rendererFunctionResponse` or a top-level `error` naming the call). The plugin ships no
/// transport; an application brings one (a WebSocket, an SSE stream with a POST back).
///
/// # As a seam
/// - **Replay:** never called for a call whose outcome is recorded; `call` runs only when the
///   `a2ui.callFunction` step runs (a new step, or after a `retry` verdict: the effect is not
///   idempotent, so a crash mid-call parks it in doubt instead of calling again).
/// - **Task:** the returned future is polled by the execution's driver task, as the effect's
///   own work; it is dropped (after `cancel` fires) when the request times out, the execution
///   is cancelled or the runtime shuts down.
/// - **Panic:** contained as a panic of the effect: the step is recorded in doubt
///   (`EFFECT_INDOUBT`), since the request may have left.
/// - **Errors:** [`TransportError::NotDelivered`] is retried (nothing left);
///   [`TransportError::Lost`] and a reply that is not an answer to this call id park the step
///   in doubt.
/// - **Other processes:** the request's `functionCallId` is the step's idempotency key, the
///   same in every process that runs the step; a reply must carry it back.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request` and resolves with the reply to it. `cancel` fires when the effect gives
    /// up (timeout, cancellation): drop the waiter then.
    fn call(
        &self,
        request: AgentMessage,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Vec<u8>, TransportError>>;
}

/// The options of [`register_a2ui_call_function`].
#[derive(Debug, Clone)]
pub struct CallFunctionOptions {
    /// The catalogs the called functions come from.
    pub catalogs: Catalogs,
    /// How long to wait for a reply before the step fails.
    pub request_timeout: Duration,
    /// The K2 capability a flow needs (default: the effect's name).
    pub capability: Option<String>,
    /// The K3 cost of one call.
    pub cost: u64,
}

impl CallFunctionOptions {
    /// Options with `catalogs`, a 30 s request timeout, the default capability and cost 0.
    pub fn new(catalogs: Catalogs) -> Self {
        Self {
            catalogs,
            request_timeout: Duration::from_secs(30),
            capability: None,
            cost: 0,
        }
    }

    /// Sets the request timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// The effect's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallFunctionInput {
    /// The surface whose data model is the call's context.
    pub surface_id: String,
    /// The function's catalog (the catalogs' default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_id: Option<String>,
    /// The function's name.
    pub name: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// Registering the effect failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The registry refused the definition.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Registers `a2ui.callFunction` (not idempotent) in `effects`, sending over `transport`.
pub fn register_a2ui_call_function(
    effects: &mut EffectRegistry,
    transport: Arc<dyn Transport>,
    options: CallFunctionOptions,
) -> Result<(), RegisterError> {
    let catalogs = options.catalogs.clone();
    let admission = options.catalogs.clone();
    let timeout = options.request_timeout;
    let def = EffectDef::new(
        CALL_FUNCTION_EFFECT,
        move |ctx: EffectContext, input: CallFunctionInput| {
            call_once(ctx, input, catalogs.clone(), transport.clone(), timeout)
        },
    )
    .capability(
        options
            .capability
            .clone()
            .unwrap_or_else(|| CALL_FUNCTION_EFFECT.to_owned()),
    )
    // The function and its args are checked before the step is recorded as started: a call
    // that cannot be made is the step's failure, never a step that may have run.
    .admit(move |input| admit_call(&admission, input))
    .cost(options.cost)
    // `request_timeout` bounds the wait and fails the step; the per-attempt timeout of the
    // effect runtime (which would park the step in doubt) is not used on top of it.
    .without_timeout();
    effects.register(def)?;
    Ok(())
}

/// A call the catalogs refuse (unknown or renderer-only function, args failing the args
/// schema), as the step's refusal.
fn admit_call(
    catalogs: &Catalogs,
    input: &loom_kernel::Payload,
) -> Result<(), loom_kernel::ErrorInfo> {
    let refused = |detail: String| loom_kernel::ErrorInfo::new(codes::REFUSED, detail);
    let input: CallFunctionInput = input.decode().map_err(|err| {
        refused(format!(
            "the input of {CALL_FUNCTION_EFFECT} does not decode: {}",
            loom_kernel::Payload::describe_decode_error(&err)
        ))
    })?;
    checked_catalog(catalogs, &input)
        .map(drop)
        .map_err(|err| refused(err.to_string()))
}

/// The catalog `input` calls its function in (the catalogs' default when it names none), once
/// the function is found callable by the agent and its args fit the args schema.
fn checked_catalog(catalogs: &Catalogs, input: &CallFunctionInput) -> Result<String, BridgeError> {
    let catalog = input
        .catalog_id
        .clone()
        .unwrap_or_else(|| catalogs.default_catalog().to_owned());
    check_callable(catalogs, &catalog, &input.name)
        .and_then(|()| check_args(catalogs, &catalog, &input.name, &input.args))?;
    Ok(catalog)
}

async fn call_once(
    ctx: EffectContext,
    input: CallFunctionInput,
    catalogs: Catalogs,
    transport: Arc<dyn Transport>,
    timeout: Duration,
) -> Result<Value, EffectError> {
    let call_id = ctx.idempotency_key().to_owned();
    // Checked at admission already; again here for a dispatch admission does not see (a
    // `retry` verdict, a re-run after a crash), since the catalogs may have changed since.
    let catalog = checked_catalog(&catalogs, &input)
        .map_err(|err| EffectError::terminal(codes::REFUSED, err.to_string()))?;
    let request = AgentMessage::CallRendererFunction(CallRendererFunction {
        function_call_id: call_id.clone(),
        surface_id: Some(input.surface_id.clone()),
        call: FunctionCall {
            name: input.name.clone(),
            catalog_id: Some(catalog.clone()),
            args: Some(input.args.clone()),
        },
    });
    let cancel = ctx.cancellation().clone();
    let reply = tokio::select! {
        reply = transport.call(request, cancel.clone()) => reply,
        () = tokio::time::sleep(timeout) => {
            cancel.cancel();
            return Err(EffectError::terminal(
                codes::REQUEST_TIMEOUT,
                format!(
                    "no reply to call `{call_id}` ({}) within {timeout:?}; the renderer may have run it, and a late reply is refused",
                    input.name
                ),
            ));
        }
    };
    let bytes = reply.map_err(|err| match err {
        TransportError::NotDelivered(detail) => {
            EffectError::retryable(codes::NOT_DELIVERED, detail)
        }
        TransportError::Lost(detail) => EffectError::in_doubt(codes::TRANSPORT_LOST, detail),
    })?;
    let (reply_id, outcome) = parse_reply(&bytes).map_err(|err: IngestError| {
        // The request went out and no usable answer came back: whether it ran is unknown.
        EffectError::in_doubt(codes::BAD_REPLY, err.to_string())
    })?;
    if reply_id != call_id {
        return Err(EffectError::in_doubt(
            codes::BAD_REPLY,
            IngestError::MismatchedCallId {
                expected: call_id,
                got: reply_id,
            }
            .to_string(),
        ));
    }
    match outcome {
        FunctionOutcome::Value(value) => {
            catalogs
                .check_result(&catalog, &input.name, &value)
                .map_err(|detail| {
                    EffectError::terminal(
                        codes::INVALID_RESULT,
                        IngestError::InvalidResult {
                            call_id: call_id.clone(),
                            name: input.name.clone(),
                            detail,
                        }
                        .to_string(),
                    )
                })?;
            Ok(value)
        }
        FunctionOutcome::Error(error) => Err(EffectError::terminal(
            codes::FUNCTION_ERROR,
            format!("{}: {}", error.code, error.message),
        )),
    }
}
