//! Why the fold refuses a log: the invariant an event breaks, and where.

use super::ExecutionStatus;

/// A log that breaks an invariant, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid log for execution {execution}: at seq {seq}: {violation}")]
pub struct FoldError {
    /// The execution the log belongs to (as far as the fold knows it).
    pub execution: String,
    /// The seq of the refused event.
    pub seq: u64,
    /// Boxed: folds return `Result` on every event, and the happy path should stay small.
    pub violation: Box<Violation>,
}

/// The invariant an event breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// The event's seq is not the next one.
    #[error("expected seq {expected}: the log has a gap or a repeat")]
    SeqGap {
        /// The seq the log expects next.
        expected: u64,
    },
    /// The event belongs to another execution.
    #[error("event belongs to execution {found}")]
    ForeignExecution {
        /// The id the event names.
        found: String,
    },
    /// The log does not start with EXECUTION_STARTED.
    #[error("the first event must be EXECUTION_STARTED, found {found}")]
    NotStarted {
        /// The type of the first event.
        found: &'static str,
    },
    /// A second EXECUTION_STARTED.
    #[error("EXECUTION_STARTED appears again")]
    StartedTwice,
    /// An event after the execution ended.
    #[error("{found} after the execution ended ({status})")]
    AfterTerminal {
        /// The type of the event.
        found: &'static str,
        /// How the execution ended.
        status: ExecutionStatus,
    },
    /// A second outcome for a step.
    #[error("step '{step_id}' already has its outcome at seq {outcome_seq}")]
    DuplicateOutcome {
        /// The step's id (ADR 0061).
        step_id: String,
        /// The seq of the outcome already recorded.
        outcome_seq: u64,
    },
    /// A step's event names another effect than its start.
    #[error("step '{step_id}' is recorded for effect '{recorded}', not '{found}'")]
    EffectMismatch {
        /// The step's id (ADR 0061).
        step_id: String,
        /// The effect of the step's start.
        recorded: String,
        /// The effect this event names.
        found: String,
    },
    /// EFFECT_INDOUBT for a step that is not started.
    #[error("EFFECT_INDOUBT for step '{step_id}', which has no STEP_STARTED awaiting an outcome")]
    InDoubtWithoutStart {
        /// The step's id (ADR 0061).
        step_id: String,
    },
    /// A step in doubt gets an event other than a verdict.
    #[error("{found} for step '{step_id}', which is in doubt and awaits an operator's verdict")]
    StepInDoubt {
        /// The step's id (ADR 0061).
        step_id: String,
        /// The type of the event.
        found: &'static str,
    },
    /// EFFECT_RESOLVED for a step that is not in doubt.
    #[error("EFFECT_RESOLVED for step '{step_id}', which is not in doubt")]
    ResolvedNotInDoubt {
        /// The step's id (ADR 0061).
        step_id: String,
    },
    /// A second decision under one step id.
    #[error("decision '{step_id}' is already recorded at seq {first_seq}")]
    DuplicateDecision {
        /// The step's id (ADR 0061).
        step_id: String,
        /// The seq of the first decision under this id.
        first_seq: u64,
    },
    /// A gate opened while a gate with that id is pending.
    #[error("gate '{gate_id}' is already pending since seq {since}")]
    DuplicateGate {
        /// The gate's id.
        gate_id: String,
        /// The seq of the EXECUTION_SUSPENDED that opened it.
        since: u64,
    },
    #[error(
        "EXECUTION_RESUMED for gate '{gate_id}' ({event_type}, key '{correlation_key}'), which is not pending"
    )]
    /// EXECUTION_RESUMED for a gate that is not pending.
    ResumeWithoutGate {
        /// The gate's id.
        gate_id: String,
        /// The resume's event type.
        event_type: String,
        /// The resume's correlation key.
        correlation_key: String,
    },
    #[error(
        "EXECUTION_RESUMED for gate '{gate_id}' with ({event_type}, key '{correlation_key}'), but the gate waits for ({expected_event_type}, key '{expected_correlation_key}')"
    )]
    /// EXECUTION_RESUMED whose event type or key differs from its gate's.
    ResumeMismatch {
        /// The gate's id.
        gate_id: String,
        /// The resume's event type.
        event_type: String,
        /// The resume's correlation key.
        correlation_key: String,
        /// The pending gate's event type.
        expected_event_type: String,
        /// The pending gate's correlation key.
        expected_correlation_key: String,
    },
}
