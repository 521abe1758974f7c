//! What the fold tells of an execution, its steps and its gates.

use std::fmt;
use std::sync::Arc;

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ExecutionStatus {
    /// No event folded yet.
    New,
    /// Started, with no gate pending and no step in doubt.
    Running,
    /// At least one gate is pending (and no step is in doubt).
    Suspended,
    /// At least one step is in doubt (K9); it waits for an operator's verdict.
    InDoubt,
    /// Ended with an output (`EXECUTION_COMPLETED`).
    Completed,
    /// Ended with an error (`EXECUTION_FAILED`).
    Failed,
    /// Ended by a cancel (`EXECUTION_CANCELLED`).
    Cancelled,
}

impl ExecutionStatus {
    /// The one rule for the status of an execution that has started and not ended: in doubt
    /// while a step is in doubt (K9), suspended while a gate is pending, running otherwise.
    /// The fold and the stores' tails both use it.
    pub(crate) fn active(steps_in_doubt: bool, gates_pending: bool) -> Self {
        if steps_in_doubt {
            Self::InDoubt
        } else if gates_pending {
            Self::Suspended
        } else {
            Self::Running
        }
    }

    /// The one rule for whether a worker must drive an execution on: it has started and not
    /// ended, and it is running or has a step in flight (a suspended execution whose effect
    /// was running when its worker died must be driven too). Parked executions (waiting only
    /// for resumes or verdicts) need not be.
    pub(crate) fn needs_driving(self, steps_in_flight: bool) -> bool {
        !self.is_terminal() && self != Self::New && (self == Self::Running || steps_in_flight)
    }

    /// Every status a started execution can have, in lifecycle order (`New` left out).
    pub const STARTED: [ExecutionStatus; 6] = [
        Self::Running,
        Self::Suspended,
        Self::InDoubt,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Whether the execution has ended (completed, failed or cancelled).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::New => "new",
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::InDoubt => "in doubt",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        })
    }
}

/// What the log says about one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    /// The effect the step invoked.
    pub effect: Arc<str>,
    /// Where the step stands.
    pub status: StepStatus,
}

/// Where one step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepStatus {
    /// STEP_STARTED is recorded and no outcome yet.
    Started {
        /// The attempt started.
        attempt: u32,
        /// The seq of its STEP_STARTED (or of the `retry` verdict).
        seq: u64,
    },
    /// EFFECT_INDOUBT is recorded and no verdict yet.
    InDoubt {
        /// The attempt in doubt.
        attempt: u32,
        /// The seq of its EFFECT_INDOUBT.
        seq: u64,
    },
    /// The outcome is the STEP_COMPLETED (or EFFECT_RESOLVED `completed`) at `seq`.
    Completed {
        /// The seq of the outcome.
        seq: u64,
    },
    /// The outcome is the STEP_FAILED (or EFFECT_RESOLVED `failed`) at `seq`.
    Failed {
        /// The seq of the outcome.
        seq: u64,
    },
}

impl StepStatus {
    /// Whether the step has an outcome (completed or failed).
    pub fn has_outcome(self) -> bool {
        matches!(self, Self::Completed { .. } | Self::Failed { .. })
    }
}

/// A gate the execution waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingGate {
    /// The kind of event that resumes it.
    pub event_type: Arc<str>,
    /// The key a resume must carry.
    pub correlation_key: String,
    /// The seq of its EXECUTION_SUSPENDED.
    pub seq: u64,
}
