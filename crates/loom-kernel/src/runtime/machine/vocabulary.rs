//! The words the machine and the flow's context share: why a command gave the flow no result
//! ([`StepError`]), why a flow failed ([`FlowError`]), how a command is named ([`StepName`]), and what a parent asked to start
//! ([`ChildSpec`]). The public ones are re-exported where flow authors find them
//! (`loom_kernel::StepError`, `loom_kernel::StepName`).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::event::ErrorInfo;
use crate::id::ExecutionId;
use crate::payload::Payload;

/// Why a command did not give the flow a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The effect failed (or an operator's verdict said so); this is recorded.
    #[error("step failed: {0:?}")]
    Failed(ErrorInfo),
    /// Two steps of the execution have this explicit id (ADR 0061).
    #[error("step id '{0}' is used twice in this execution")]
    DuplicateStepId(String),
    /// A gate with this event type and key is already pending.
    #[error("a gate for ({event_type}, key '{correlation_key}') is already pending")]
    DuplicateGate {
        /// The gate's event type.
        event_type: String,
        /// The gate's correlation key.
        correlation_key: String,
    },
    /// The input or value does not serialize to JSON.
    #[error("the input or value does not serialize to JSON: {0}")]
    Encode(String),
    /// The recorded value does not decode to the type asked for.
    #[error("the recorded value of '{step_id}' does not decode: {detail}")]
    Decode {
        /// The step's id (ADR 0061).
        step_id: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The replayed flow diverged from its log; the runtime stops the execution.
    #[error("the flow diverged from its recorded history")]
    Diverged,
    /// Gate event types starting with `loom.` belong to the runtime (`loom.timer` is a
    /// timer's); a flow cannot open such a gate.
    #[error("gate event type '{0}' is reserved for the runtime (it starts with 'loom.')")]
    ReservedEventType(String),
    /// `first_of` was given no gate.
    #[error("first_of needs at least one gate")]
    NoGates,
    /// A gate's request ([`crate::FlowCtx::suspend_with_request`]) cannot be recorded; nothing was.
    #[error("the gate's request cannot be recorded: {0}")]
    InvalidRequest(String),
    /// A gate's payload schema ([`crate::FlowCtx::suspend_expecting`]) cannot be recorded;
    /// nothing was.
    #[error("the gate's payload schema cannot be recorded: {0}")]
    InvalidSchema(String),
    /// `ctx.patched(change_id)` after `ctx.deprecate_patch(change_id)` in the same run: the
    /// change was declared always on, so nothing would record which branch ran.
    #[error(
        "change '{0}' was deprecated in this run (deprecate_patch): patched cannot answer for it"
    )]
    DeprecatedPatch(String),
    /// The flow called the context from inside a decision's closure (`decide`, `now`, ...):
    /// replay serves the decision without running the closure, so what it issued would be
    /// missing there. Make the value from the world alone, and call the context outside.
    #[error(
        "the context was called inside the closure of decision '{0}': a decision's value must come from the world alone"
    )]
    InsideDecision(String),
    /// `ctx.child` cannot derive a valid execution id for the child.
    #[error("cannot start flow '{flow}' as a child: {detail}")]
    ChildId {
        /// The flow asked for.
        flow: String,
        /// Why, in words.
        detail: String,
    },
}

/// How a step is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepName {
    /// `name#n`: the n-th call with this name in the execution.
    Counted(String),
    /// Exactly this id; using it twice is an error.
    Explicit(String),
}

/// What a parent asked to start, as its `loom.child` decision records it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChildSpec {
    pub(crate) execution: ExecutionId,
    pub(crate) flow: String,
    pub(crate) input: Payload,
    /// The parent's grants (K2), inherited.
    pub(crate) capabilities: BTreeSet<String>,
    /// What the parent had left to spend (K3) when it asked, if it has a budget.
    pub(crate) budget: Option<u64>,
}

impl ChildSpec {
    /// The recorded value: `{"executionId", "flow", "input", "capabilities", "budget"}`.
    pub(crate) fn to_value(&self) -> Value {
        json!({
            "executionId": self.execution.as_str(),
            "flow": self.flow,
            "input": self.input.to_value(),
            "capabilities": self.capabilities,
            "budget": self.budget,
        })
    }

    /// Reads a recorded value back.
    pub(crate) fn from_value(value: &Value) -> Option<Self> {
        let execution = ExecutionId::from_stored(value.get("executionId")?.as_str()?).ok()?;
        let capabilities = value
            .get("capabilities")?
            .as_array()?
            .iter()
            .map(|c| c.as_str().map(str::to_owned))
            .collect::<Option<BTreeSet<_>>>()?;
        Some(Self {
            execution,
            flow: value.get("flow")?.as_str()?.to_owned(),
            input: Payload::from_value(value.get("input")?),
            capabilities,
            budget: value.get("budget").and_then(Value::as_u64),
        })
    }
}

/// Why a flow failed. Recorded as `EXECUTION_FAILED` with its code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct FlowError {
    /// A stable, machine-readable code.
    pub code: String,
    /// What happened, for people.
    pub message: String,
}

impl FlowError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl From<FlowError> for ErrorInfo {
    fn from(error: FlowError) -> Self {
        ErrorInfo::new(error.code, error.message)
    }
}

impl From<StepError> for FlowError {
    fn from(error: StepError) -> Self {
        match error {
            StepError::Failed(info) => FlowError::new(info.code, info.message),
            other => FlowError::new("loom.step", other.to_string()),
        }
    }
}

impl From<serde_json::Error> for FlowError {
    fn from(error: serde_json::Error) -> Self {
        FlowError::new("loom.serde", error.to_string())
    }
}

/// A child to start once its gate is durable: its gate id and what to start.
pub(crate) type ChildStart = (String, ChildSpec);
