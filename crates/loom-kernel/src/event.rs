//! The events of an execution's log (EVENT_SCHEMA 1) and the versions the kernel speaks.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::payload::Payload;

/// The version of the event format this build writes, and the newest it reads.
///
/// Every envelope records the version it was written with; an event from a newer schema is
/// refused on decode with [`crate::kit::DecodeError::UnsupportedSchema`] rather than misread.
pub const EVENT_SCHEMA: u32 = 1;

/// A semantic version, as plugins use it to say which kernel they were built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AbiVersion {
    /// Incompatible changes.
    pub major: u16,
    /// Compatible additions.
    pub minor: u16,
    /// Fixes.
    pub patch: u16,
}

impl AbiVersion {
    /// The version `major.minor.patch`.
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The kernel ABI plugins compile against (ADR 0043).
pub const KERNEL_ABI: AbiVersion = AbiVersion::new(1, 1, 0);

/// One fact in an execution's log.
///
/// The JSON form is an object whose `type` names the event in SCREAMING_SNAKE case and whose
/// other fields are the payload's, in camelCase:
/// `{"type":"STEP_COMPLETED","stepId":"charge#1","effect":"payments.charge",...}`.
///
/// Decoding reads `type` first when it comes first (as Loom always writes it) and then the
/// payload straight into its struct; an object with `type` elsewhere is buffered and decoded
/// the same way (see `event_decode.rs`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Event {
    /// `EXECUTION_STARTED`: always the first event of a log.
    ExecutionStarted(ExecutionStarted),
    /// `STEP_STARTED`: an effect invocation begins (durable before a non-idempotent effect runs).
    StepStarted(StepStarted),
    /// `STEP_COMPLETED`: the effect's output.
    StepCompleted(StepCompleted),
    /// `STEP_FAILED`: the effect's error.
    StepFailed(StepFailed),
    /// `EFFECT_INDOUBT`: whether the effect ran is unknown; an operator decides (K9).
    #[serde(rename = "EFFECT_INDOUBT")]
    EffectInDoubt(EffectInDoubt),
    /// `EFFECT_RESOLVED`: an operator's verdict on a step in doubt.
    EffectResolved(EffectResolved),
    /// `DECISION_RECORDED`: a value read from the world once (ADR 0016).
    DecisionRecorded(DecisionRecorded),
    /// `EXECUTION_SUSPENDED`: a gate opened.
    ExecutionSuspended(ExecutionSuspended),
    /// `EXECUTION_RESUMED`: a gate was resumed.
    ExecutionResumed(ExecutionResumed),
    /// `SURFACE_PATCH`: ops on an agent surface (opaque to the kernel).
    SurfacePatch(SurfacePatch),
    /// `EXECUTION_COMPLETED`: the flow's output; the log ends.
    ExecutionCompleted(ExecutionCompleted),
    /// `EXECUTION_FAILED`: the flow's error; the log ends.
    ExecutionFailed(ExecutionFailed),
    /// `EXECUTION_CANCELLED`: the execution was cancelled; the log ends.
    ExecutionCancelled(ExecutionCancelled),
}

impl Event {
    /// The flow an `EXECUTION_STARTED` starts; `None` for any other event.
    pub fn started_flow(&self) -> Option<&str> {
        match self {
            Event::ExecutionStarted(started) => Some(&started.flow),
            _ => None,
        }
    }

    /// The event's `type` name as it appears in JSON, e.g. `STEP_COMPLETED`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::ExecutionStarted(_) => "EXECUTION_STARTED",
            Event::StepStarted(_) => "STEP_STARTED",
            Event::StepCompleted(_) => "STEP_COMPLETED",
            Event::StepFailed(_) => "STEP_FAILED",
            Event::EffectInDoubt(_) => "EFFECT_INDOUBT",
            Event::EffectResolved(_) => "EFFECT_RESOLVED",
            Event::DecisionRecorded(_) => "DECISION_RECORDED",
            Event::ExecutionSuspended(_) => "EXECUTION_SUSPENDED",
            Event::ExecutionResumed(_) => "EXECUTION_RESUMED",
            Event::SurfacePatch(_) => "SURFACE_PATCH",
            Event::ExecutionCompleted(_) => "EXECUTION_COMPLETED",
            Event::ExecutionFailed(_) => "EXECUTION_FAILED",
            Event::ExecutionCancelled(_) => "EXECUTION_CANCELLED",
        }
    }

    /// Whether this event ends the execution.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::ExecutionCompleted(_) | Event::ExecutionFailed(_) | Event::ExecutionCancelled(_)
        )
    }
}

/// An error as the log records it: a stable machine-readable code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorInfo {
    /// A stable, machine-readable code (`flow.error`, `effect.timeout`, ...).
    pub code: String,
    /// What happened, for people.
    pub message: String,
}

impl ErrorInfo {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// The first event of every log: which flow runs, with what input and what grants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionStarted {
    /// The flow's registered name.
    pub flow: String,
    /// The flow's version.
    pub flow_version: u32,
    /// The flow's input.
    pub input: Payload,
    /// K2: the capabilities granted to this execution's effects.
    #[serde(default)]
    pub capabilities: BTreeSet<String>,
    /// K3: the most this execution may spend; `None` is unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
}

/// Intent: made durable before a non-idempotent effect runs (K9), so a crash leaves a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepStarted {
    /// The step's id (ADR 0061).
    pub step_id: String,
    /// The effect's registered name.
    pub effect: String,
    /// A digest of the step's input, compared on replay.
    pub input_digest: String,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// K3: the most the attempt may cost (the effect's `max_cost`), what a `completed` verdict
    /// charges if the step ends in doubt (LD-024). JSON omits it when 0; absent in events
    /// written before the field existed, where it reads as 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_cost: u64,
}

/// Whether a count is 0 (left out of the JSON form).
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A step's successful outcome, with what it cost (K3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCompleted {
    /// The step's id (ADR 0061).
    pub step_id: String,
    /// The effect's registered name.
    pub effect: String,
    /// A digest of the step's input, compared on replay.
    pub input_digest: String,
    /// The effect's output.
    pub output: Payload,
    /// What the step cost (K3).
    #[serde(default)]
    pub cost: u64,
}

/// A step's failed outcome, with what it cost (K3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepFailed {
    /// The step's id (ADR 0061).
    pub step_id: String,
    /// The effect's registered name.
    pub effect: String,
    /// A digest of the step's input, compared on replay.
    pub input_digest: String,
    /// The effect's error.
    pub error: ErrorInfo,
    /// What the step cost (K3).
    #[serde(default)]
    pub cost: u64,
}

/// K9: a non-idempotent step was started and may or may not have run; the execution parks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectInDoubt {
    /// The step's id (ADR 0061).
    pub step_id: String,
    /// The effect's registered name.
    pub effect: String,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// Why it is in doubt, for the operator: the worker stopped while it ran
    /// (`loom.worker_stopped`), an attempt timed out, the effect panicked. Absent in events
    /// written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ErrorInfo>,
}

/// K9: an operator's verdict on a step in doubt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectResolved {
    /// The step's id (ADR 0061).
    pub step_id: String,
    /// The operator's verdict.
    pub verdict: Verdict,
    /// Who gave the verdict, for the audit trail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
}

/// What the operator decided about a step in doubt.
///
/// JSON: `{"kind":"retry"}`, `{"kind":"completed","output":...}`, `{"kind":"failed","error":...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "VerdictRepr", into = "VerdictRepr")]
pub enum Verdict {
    /// Run the effect again (with the same idempotency key).
    Retry,
    /// The effect did run; this is its output.
    Completed {
        /// The output the step completes with.
        output: Payload,
    },
    /// The effect did not run, or failed; the step fails with this error.
    Failed {
        /// The error the step fails with.
        error: ErrorInfo,
    },
}

/// The flat JSON form of a [`Verdict`]. Payloads cannot pass through serde's buffering of
/// internally tagged enums, so the tag is read as a plain field.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VerdictRepr {
    kind: VerdictKind,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_payload"
    )]
    output: Option<Payload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorInfo>,
}

/// A present `output` is a payload even when it is `null`, which `Option` would read as absent.
fn present_payload<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Payload>, D::Error> {
    Payload::deserialize(deserializer).map(Some)
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum VerdictKind {
    Retry,
    Completed,
    Failed,
}

impl From<Verdict> for VerdictRepr {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Retry => Self {
                kind: VerdictKind::Retry,
                output: None,
                error: None,
            },
            Verdict::Completed { output } => Self {
                kind: VerdictKind::Completed,
                output: Some(output),
                error: None,
            },
            Verdict::Failed { error } => Self {
                kind: VerdictKind::Failed,
                output: None,
                error: Some(error),
            },
        }
    }
}

impl TryFrom<VerdictRepr> for Verdict {
    type Error = &'static str;
    fn try_from(repr: VerdictRepr) -> Result<Self, Self::Error> {
        match repr {
            VerdictRepr {
                kind: VerdictKind::Retry,
                ..
            } => Ok(Verdict::Retry),
            VerdictRepr {
                kind: VerdictKind::Completed,
                output: Some(output),
                ..
            } => Ok(Verdict::Completed { output }),
            VerdictRepr {
                kind: VerdictKind::Completed,
                output: None,
                ..
            } => Err("a `completed` verdict needs an `output`"),
            VerdictRepr {
                kind: VerdictKind::Failed,
                error: Some(error),
                ..
            } => Ok(Verdict::Failed { error }),
            VerdictRepr {
                kind: VerdictKind::Failed,
                error: None,
                ..
            } => Err("a `failed` verdict needs an `error`"),
        }
    }
}

/// ADR 0016: a value the flow read from the world (time, randomness, ids, a custom decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecorded {
    /// The decision's step id.
    pub step_id: String,
    /// `now`, `random`, `uuid`, or the name of a custom decision.
    pub kind: String,
    /// The value decided.
    pub value: Payload,
}

/// A gate opened: the flow waits for a resume with this event type and correlation key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionSuspended {
    /// The gate's id (ADR 0061).
    pub gate_id: String,
    /// The kind of event that resumes it.
    pub event_type: String,
    /// The key a resume must carry.
    pub correlation_key: String,
}

/// A pending gate was resumed with a payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionResumed {
    /// The gate resumed.
    pub gate_id: String,
    /// The resume's event type.
    pub event_type: String,
    /// The resume's correlation key.
    pub correlation_key: String,
    /// What the resume carried, handed to the flow.
    pub payload: Payload,
}

/// Changes to one agent surface. The kernel treats `ops` (a JSON array) as opaque.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SurfacePatch {
    /// The step id of the patch (ADR 0061).
    pub step_id: String,
    /// The surface patched.
    pub surface_id: String,
    /// The ops, a JSON array (their meaning is in `loom-agent-surface`).
    pub ops: Payload,
}

/// `EXECUTION_COMPLETED`: the flow returned its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionCompleted {
    /// The flow's output.
    pub output: Payload,
}

/// `EXECUTION_FAILED`: the flow returned an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionFailed {
    /// The flow's error.
    pub error: ErrorInfo,
}

/// `EXECUTION_CANCELLED`: the execution was cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionCancelled {
    /// The reason given with the cancel, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_names_are_screaming_snake_and_match_serde() {
        let events = [
            Event::ExecutionCancelled(ExecutionCancelled { reason: None }),
            Event::EffectInDoubt(EffectInDoubt {
                step_id: "charge#1".into(),
                effect: "payments.charge".into(),
                attempt: 1,
                reason: None,
            }),
            Event::ExecutionCompleted(ExecutionCompleted {
                output: json!(1).into(),
            }),
        ];
        for event in events {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json["type"], event.type_name());
        }
    }

    #[test]
    fn json_form_is_flat_camel_case() {
        let event = Event::StepCompleted(StepCompleted {
            step_id: "charge#1".into(),
            effect: "payments.charge".into(),
            input_digest: "abc".into(),
            output: json!({"ok": true}).into(),
            cost: 3,
        });
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"type": "STEP_COMPLETED", "stepId": "charge#1", "effect": "payments.charge",
                   "inputDigest": "abc", "output": {"ok": true}, "cost": 3})
        );
        let verdict = Event::EffectResolved(EffectResolved {
            step_id: "charge#1".into(),
            verdict: Verdict::Completed {
                output: json!(7).into(),
            },
            operator: Some("ops@example.com".into()),
        });
        let json = serde_json::to_value(&verdict).unwrap();
        assert_eq!(json["verdict"], json!({"kind": "completed", "output": 7}));
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), verdict);
    }

    #[test]
    fn kernel_abi_is_1_1_0() {
        assert_eq!(KERNEL_ABI.to_string(), "1.1.0");
    }
}
