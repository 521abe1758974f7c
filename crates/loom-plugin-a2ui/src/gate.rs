//! Grain A: a function call answered through a gate (ADR 0070; durable request, LD-008).
//!
//! `call_and_wait` records the request as the kernel's durable gate request (LD-018: a
//! `loom.request` decision under `<gate id>:request`, behind `ctx.patched(`[`KERNEL_REQUEST`]`)`;
//! executions recorded before keep the plugin's own `DECISION_RECORDED` of kind
//! [`REQUEST_DECISION`]) and opens the gate (`A2UIFunctionResult`, keyed by the call id) in the
//! same poll of the flow, so the kernel appends both in one batch. The [`SurfaceHub`]
//! projection sends the request only once it sees that batch durable; after a crash the
//! request is read back from the log and sent again with the same call id.
//!
//! [`SurfaceHub`]: crate::SurfaceHub

use std::future::Future;

use loom_kernel::{FlowCtx, StepError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::bridge::{BridgeError, check_args, check_callable};
use crate::catalog::{Catalogs, FunctionDef};
use crate::wire::FunctionError;

/// The gate event type a function result resumes.
pub const FUNCTION_RESULT_EVENT: &str = "A2UIFunctionResult";
/// The decision kind that carries a grain-A request in the log.
pub const REQUEST_DECISION: &str = "a2ui.functionRequest";
/// The change id (`ctx.patched`) under which a grain-A call with args that fail the
/// function's args schema is refused; it is recorded only when that happens.
pub const ARGS_CHECKED: &str = "a2ui.call-args-checked";
/// The change id (`ctx.patched`) under which a grain-A call records its request as the
/// kernel's durable gate request (a `loom.request` decision under `<gate id>:request`, LD-018)
/// instead of the plugin's own [`REQUEST_DECISION`]; executions recorded before replay the
/// plugin's decision, and the hub reads both.
pub const KERNEL_REQUEST: &str = "a2ui.kernel-gate-request";
/// The decision kind that deletes a surface (its value is the surface id).
pub const DELETE_DECISION: &str = "a2ui.deleteSurface";
/// The decision kind that changes a surface's components (its value is a
/// [`ComponentsUpdate`]).
pub const COMPONENTS_DECISION: &str = "a2ui.updateComponents";

/// A change of a surface's component tree, as the log records it: components added, or
/// replacing the one of the same id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentsUpdate {
    /// The surface, as the flow names it.
    pub surface_id: String,
    /// The components, each with an `id`.
    pub components: Vec<Value>,
}

/// Changes `surface_id`'s components: each one is added, or replaces the component of the
/// same id. Checked against `catalogs` first (a refusal records nothing), then recorded as a
/// `DECISION_RECORDED` of kind [`COMPONENTS_DECISION`]; the [`SurfaceHub`](crate::SurfaceHub)
/// sends `updateComponents` once it is durable, and later subscribers get the changed tree in
/// `createSurface`. On replay the recorded components are served, so a build that computes
/// them differently does not change what the surface showed.
pub fn update_components(
    ctx: &FlowCtx,
    catalogs: &Catalogs,
    surface_id: &str,
    components: Vec<Value>,
) -> Result<(), ComponentsUpdateError> {
    if components.is_empty() {
        return Ok(());
    }
    catalogs
        .check_components(&components, false)
        .map_err(|source| BridgeError::Component {
            surface_id: surface_id.to_owned(),
            source,
        })?;
    ctx.decide(COMPONENTS_DECISION, || ComponentsUpdate {
        surface_id: surface_id.to_owned(),
        components,
    })?;
    Ok(())
}

/// Deletes `surface_id` from the renderers showing it: records a `DECISION_RECORDED` of kind
/// [`DELETE_DECISION`]; the [`SurfaceHub`](crate::SurfaceHub) sends `deleteSurface` once it is
/// durable, ends the surface's subscriptions, and gives later subscribers nothing. The model is
/// kept (the hub still answers `model` and `masked_model`).
pub fn delete_surface(ctx: &FlowCtx, surface_id: &str) -> Result<(), StepError> {
    ctx.decide(DELETE_DECISION, || surface_id.to_owned())?;
    Ok(())
}

/// Why a surface's components were not changed; nothing was recorded.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ComponentsUpdateError {
    /// A component does not fit its catalog.
    #[error(transparent)]
    Refused(#[from] BridgeError),
    /// Recording the change failed.
    #[error(transparent)]
    Step(#[from] StepError),
}

impl From<ComponentsUpdateError> for loom_kernel::FlowError {
    fn from(error: ComponentsUpdateError) -> Self {
        match error {
            ComponentsUpdateError::Step(step) => step.into(),
            ComponentsUpdateError::Refused(refused) => {
                Self::new("a2ui.components_refused", refused.to_string())
            }
        }
    }
}

/// A grain-A request as the log records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionRequest {
    /// `executionId:name#n`, call-site-unique (ADR 0070 caveat 1).
    pub call_id: String,
    /// The surface whose data model is the call's context.
    pub surface_id: String,
    /// The function's catalog.
    pub catalog_id: String,
    /// The function's name.
    pub name: String,
    /// Its arguments.
    pub args: Map<String, Value>,
}

/// Why a grain-A call gave no value.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum CallAndWaitError {
    /// The call was refused before anything was recorded or sent (unknown or `rendererOnly`
    /// function).
    #[error(transparent)]
    Refused(#[from] BridgeError),
    /// Recording the request or waiting on the gate failed.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The renderer answered with an error.
    #[error("the renderer answered call `{call_id}` with {}: {}", .error.code, .error.message)]
    Function {
        /// The function call's id.
        call_id: String,
        /// The error the renderer answered.
        error: FunctionError,
    },
    /// The resume payload is not a function result (only a resume that bypassed the hub can
    /// cause this).
    #[error("the resume of call `{call_id}` is not a function result: {detail}")]
    BadPayload {
        /// The function call's id.
        call_id: String,
        /// What went wrong, in words.
        detail: String,
    },
}

#[derive(Default)]
struct CallCounters(std::collections::BTreeMap<String, u32>);

/// Calls `name` (of `catalog_id`, or the surface default) on the renderer showing
/// `surface_id`, and waits on a gate for its answer. The call id is
/// `executionId:name#n` (the n-th call of `name` in the execution), so it is the same on
/// every replay and unique per call site.
///
/// The checks and the recording happen when this is called; the returned future only waits.
pub fn call_and_wait(
    ctx: &FlowCtx,
    catalogs: &Catalogs,
    surface_id: &str,
    catalog_id: Option<&str>,
    name: &str,
    args: Map<String, Value>,
) -> impl Future<Output = Result<Value, CallAndWaitError>> + Send + 'static {
    let catalog = catalog_id.unwrap_or(catalogs.default_catalog()).to_owned();
    let prepared = check_callable(catalogs, &catalog, name)
        .map_err(CallAndWaitError::from)
        .and_then(|()| {
            if let Err(invalid) = check_args(catalogs, &catalog, name, &args) {
                // Executions recorded before args were checked replay their call as it was.
                if ctx.patched(ARGS_CHECKED)? {
                    return Err(invalid.into());
                }
            }
            let n = ctx.with_local::<CallCounters, _>(|counters| {
                let n = counters.0.entry(name.to_owned()).or_insert(0);
                *n += 1;
                *n
            });
            let call_id = loom_kernel::idempotency_key(ctx.execution_id(), &format!("{name}#{n}"));
            let request = FunctionRequest {
                call_id: call_id.clone(),
                surface_id: surface_id.to_owned(),
                catalog_id: catalog,
                name: name.to_owned(),
                args,
            };
            let expected =
                function_result_schema(catalogs.function(Some(&request.catalog_id), name));
            // Recorded and opened in one poll: one append batch, durable together. The gate
            // says what its resume carries (LD-031), for an operator who answers in the
            // renderer's place; replay neither matches nor serves it.
            let gate = if ctx.patched(KERNEL_REQUEST)? {
                // The kernel's durable gate request: `loom show` and `pending_requests` list
                // the call beside its gate.
                ctx.suspend_with_request_expecting(
                    FUNCTION_RESULT_EVENT,
                    &call_id,
                    &request,
                    &expected,
                )
            } else {
                ctx.decide(REQUEST_DECISION, || request)?;
                ctx.suspend_expecting(FUNCTION_RESULT_EVENT, &call_id, &expected)
            };
            Ok((call_id, gate))
        });
    async move {
        let (call_id, gate) = prepared?;
        let payload: Value = gate
            .await?
            .decode()
            .map_err(|err| CallAndWaitError::BadPayload {
                call_id: call_id.clone(),
                detail: loom_kernel::Payload::describe_decode_error(&err),
            })?;
        if let Some(value) = payload.get("value") {
            return Ok(value.clone());
        }
        match payload.get("error") {
            Some(error) => Err(CallAndWaitError::Function {
                call_id,
                error: FunctionError {
                    code: error
                        .get("code")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                },
            }),
            None => Err(CallAndWaitError::BadPayload {
                call_id,
                detail: "neither `value` nor `error`".into(),
            }),
        }
    }
}

/// The JSON Schema of a function-result gate's resume payload (LD-031): `{"value": ...}` with
/// what the function returns (its `returnType` and return schema), or
/// `{"error": {"code", "message"}}`; the hub's own replies add the call's `functionCallId`,
/// `surfaceId` and `name`. An unknown function's value may be anything.
pub fn function_result_schema(function: Option<&FunctionDef>) -> Value {
    let value = match function {
        Some(function) => {
            let typed = match function.return_type() {
                "string" | "number" | "boolean" | "array" | "object" => {
                    Some(json!({"type": function.return_type()}))
                }
                "validationResult" => Some(json!({"type": "object"})),
                "void" => Some(json!({"type": "null"})),
                _ => None,
            };
            let declared = function.return_schema();
            let declared = (declared != &json!({}) && declared != &json!(true)).then_some(declared);
            match (typed, declared) {
                (Some(typed), Some(declared)) => json!({"allOf": [typed, declared]}),
                (Some(only), None) => only,
                (None, Some(declared)) => declared.clone(),
                (None, None) => json!({}),
            }
        }
        None => json!({}),
    };
    let title = function.map_or_else(
        || "The result of an A2UI function call".to_owned(),
        |f| format!("The result of A2UI function `{}`", f.name()),
    );
    let call = json!({
        "functionCallId": {"type": "string"},
        "surfaceId": {"type": "string"},
        "name": {"type": "string"},
    });
    let with = |field: &str, schema: Value| {
        let mut properties = call.clone();
        if let Value::Object(map) = &mut properties {
            map.insert(field.to_owned(), schema);
        }
        json!({"type": "object", "properties": properties, "required": [field]})
    };
    json!({
        "title": title,
        "oneOf": [
            with("value", value),
            with("error", json!({
                "type": "object",
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"],
            })),
        ],
    })
}

impl From<CallAndWaitError> for loom_kernel::FlowError {
    fn from(error: CallAndWaitError) -> Self {
        match error {
            CallAndWaitError::Step(step) => step.into(),
            CallAndWaitError::Function { error, .. } => Self::new(
                crate::effect::codes::FUNCTION_ERROR,
                format!("{}: {}", error.code, error.message),
            ),
            other => Self::new("a2ui.call", other.to_string()),
        }
    }
}
