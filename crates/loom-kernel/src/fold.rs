//! The fold: an execution's state as a pure function of its log.
//!
//! [`ExecutionState::apply`] is `(state, event) -> state` with no clock, randomness or I/O, and
//! only ordered maps, so folding a log twice, or a prefix and then the rest, gives equal states.
//! An event that would break an invariant of the log is refused with a [`FoldError`] naming its
//! seq, and leaves the state as it was.
//!
//! The state records *where* results are (the seq of a step's outcome, of a decision) rather
//! than copying them: the replay engine reads values from the log, and the fold stays small
//! and fast whatever the payloads weigh.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::envelope::EventEnvelope;
use crate::event::{Event, Verdict};
use crate::id::ExecutionId;

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ExecutionStatus {
    /// No event folded yet.
    New,
    /// Started and not parked: a worker should be driving it.
    Running,
    /// The last thing it did was open a gate; it waits for a resume.
    Suspended,
    /// At least one step is in doubt (K9); it waits for an operator's verdict.
    InDoubt,
    Completed,
    Failed,
    Cancelled,
}

impl ExecutionStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
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
    pub effect: String,
    pub status: StepStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepStatus {
    /// STEP_STARTED is recorded and no outcome yet.
    Started { attempt: u32, seq: u64 },
    /// EFFECT_INDOUBT is recorded and no verdict yet.
    InDoubt { attempt: u32, seq: u64 },
    /// The outcome is the STEP_COMPLETED (or EFFECT_RESOLVED `completed`) at `seq`.
    Completed { seq: u64 },
    /// The outcome is the STEP_FAILED (or EFFECT_RESOLVED `failed`) at `seq`.
    Failed { seq: u64 },
}

impl StepStatus {
    pub fn has_outcome(self) -> bool {
        matches!(self, Self::Completed { .. } | Self::Failed { .. })
    }
}

/// A gate the execution waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingGate {
    pub event_type: String,
    pub correlation_key: String,
    /// The seq of its EXECUTION_SUSPENDED.
    pub seq: u64,
}

/// An execution's state, folded from its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionState {
    execution_id: Option<ExecutionId>,
    next_seq: u64,
    status: ExecutionStatus,
    flow: Option<(String, u32)>,
    capabilities: BTreeSet<String>,
    budget: Option<u64>,
    budget_spent: u64,
    steps: BTreeMap<String, StepRecord>,
    pending_gates: BTreeMap<String, PendingGate>,
    in_doubt: BTreeSet<String>,
    decisions: BTreeMap<String, u64>,
}

/// A log that breaks an invariant, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid log for execution {execution}: at seq {seq}: {violation}")]
pub struct FoldError {
    /// The execution the log belongs to (as far as the fold knows it).
    pub execution: String,
    pub seq: u64,
    /// Boxed: folds return `Result` on every event, and the happy path should stay small.
    pub violation: Box<Violation>,
}

/// The invariant an event breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    #[error("expected seq {expected}: the log has a gap or a repeat")]
    SeqGap { expected: u64 },
    #[error("event belongs to execution {found}")]
    ForeignExecution { found: String },
    #[error("the first event must be EXECUTION_STARTED, found {found}")]
    NotStarted { found: &'static str },
    #[error("EXECUTION_STARTED appears again")]
    StartedTwice,
    #[error("{found} after the execution ended ({status})")]
    AfterTerminal {
        found: &'static str,
        status: ExecutionStatus,
    },
    #[error("step '{step_id}' already has its outcome at seq {outcome_seq}")]
    DuplicateOutcome { step_id: String, outcome_seq: u64 },
    #[error("step '{step_id}' is recorded for effect '{recorded}', not '{found}'")]
    EffectMismatch {
        step_id: String,
        recorded: String,
        found: String,
    },
    #[error("EFFECT_INDOUBT for step '{step_id}', which has no STEP_STARTED awaiting an outcome")]
    InDoubtWithoutStart { step_id: String },
    #[error("{found} for step '{step_id}', which is in doubt and awaits an operator's verdict")]
    StepInDoubt {
        step_id: String,
        found: &'static str,
    },
    #[error("EFFECT_RESOLVED for step '{step_id}', which is not in doubt")]
    ResolvedNotInDoubt { step_id: String },
    #[error("decision '{step_id}' is already recorded at seq {first_seq}")]
    DuplicateDecision { step_id: String, first_seq: u64 },
    #[error("gate '{gate_id}' is already pending since seq {since}")]
    DuplicateGate { gate_id: String, since: u64 },
    #[error(
        "EXECUTION_RESUMED for gate '{gate_id}' ({event_type}, key '{correlation_key}'), which is not pending"
    )]
    ResumeWithoutGate {
        gate_id: String,
        event_type: String,
        correlation_key: String,
    },
    #[error(
        "EXECUTION_RESUMED for gate '{gate_id}' with ({event_type}, key '{correlation_key}'), but the gate waits for ({expected_event_type}, key '{expected_correlation_key}')"
    )]
    ResumeMismatch {
        gate_id: String,
        event_type: String,
        correlation_key: String,
        expected_event_type: String,
        expected_correlation_key: String,
    },
}

impl Default for ExecutionState {
    fn default() -> Self {
        Self::new()
    }
}

impl ExecutionState {
    /// The state of an empty log.
    pub fn new() -> Self {
        Self {
            execution_id: None,
            next_seq: 0,
            status: ExecutionStatus::New,
            flow: None,
            capabilities: BTreeSet::new(),
            budget: None,
            budget_spent: 0,
            steps: BTreeMap::new(),
            pending_gates: BTreeMap::new(),
            in_doubt: BTreeSet::new(),
            decisions: BTreeMap::new(),
        }
    }

    /// Folds a whole log.
    pub fn fold<'a>(
        events: impl IntoIterator<Item = &'a EventEnvelope>,
    ) -> Result<Self, FoldError> {
        let mut state = Self::new();
        state.apply_all(events)?;
        Ok(state)
    }

    /// Folds more of the log into this state, stopping at the first refused event.
    pub fn apply_all<'a>(
        &mut self,
        events: impl IntoIterator<Item = &'a EventEnvelope>,
    ) -> Result<(), FoldError> {
        events.into_iter().try_for_each(|event| self.apply(event))
    }

    pub fn execution_id(&self) -> Option<&ExecutionId> {
        self.execution_id.as_ref()
    }
    /// The seq the next event must have: the number of events folded.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    pub fn status(&self) -> ExecutionStatus {
        self.status
    }
    /// The flow's registered name and version, from EXECUTION_STARTED.
    pub fn flow(&self) -> Option<(&str, u32)> {
        self.flow
            .as_ref()
            .map(|(name, version)| (name.as_str(), *version))
    }
    pub fn capabilities(&self) -> &BTreeSet<String> {
        &self.capabilities
    }
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }
    pub fn budget_spent(&self) -> u64 {
        self.budget_spent
    }
    /// Every step the log mentions, by step id.
    pub fn steps(&self) -> &BTreeMap<String, StepRecord> {
        &self.steps
    }
    pub fn step(&self, step_id: &str) -> Option<&StepRecord> {
        self.steps.get(step_id)
    }
    /// Gates opened and not yet resumed, by gate id.
    pub fn pending_gates(&self) -> &BTreeMap<String, PendingGate> {
        &self.pending_gates
    }
    /// Steps in doubt awaiting an operator's verdict, by step id.
    pub fn steps_in_doubt(&self) -> &BTreeSet<String> {
        &self.in_doubt
    }
    /// The seq of each recorded decision, by its step id.
    pub fn decisions(&self) -> &BTreeMap<String, u64> {
        &self.decisions
    }

    fn refuse(&self, envelope: &EventEnvelope, violation: Violation) -> FoldError {
        FoldError {
            execution: self
                .execution_id
                .as_ref()
                .unwrap_or(&envelope.execution_id)
                .to_string(),
            seq: envelope.seq,
            violation: Box::new(violation),
        }
    }

    /// Folds one event. On error the state is unchanged.
    pub fn apply(&mut self, envelope: &EventEnvelope) -> Result<(), FoldError> {
        self.check(envelope)
            .map_err(|violation| self.refuse(envelope, violation))?;
        self.commit(envelope);
        Ok(())
    }

    /// Every check, before anything changes.
    fn check(&self, envelope: &EventEnvelope) -> Result<(), Violation> {
        let event = &envelope.event;
        if envelope.seq != self.next_seq {
            return Err(Violation::SeqGap {
                expected: self.next_seq,
            });
        }
        if let Some(id) = &self.execution_id
            && *id != envelope.execution_id
        {
            return Err(Violation::ForeignExecution {
                found: envelope.execution_id.to_string(),
            });
        }
        if self.status == ExecutionStatus::New {
            return match event {
                Event::ExecutionStarted(_) => Ok(()),
                other => Err(Violation::NotStarted {
                    found: other.type_name(),
                }),
            };
        }
        if self.status.is_terminal() {
            return Err(Violation::AfterTerminal {
                found: event.type_name(),
                status: self.status,
            });
        }
        match event {
            Event::ExecutionStarted(_) => Err(Violation::StartedTwice),
            Event::StepStarted(e) => self.check_step_open(&e.step_id, &e.effect, "STEP_STARTED"),
            Event::StepCompleted(e) => {
                self.check_step_open(&e.step_id, &e.effect, "STEP_COMPLETED")
            }
            Event::StepFailed(e) => self.check_step_open(&e.step_id, &e.effect, "STEP_FAILED"),
            Event::EffectInDoubt(e) => match self.steps.get(&e.step_id) {
                Some(StepRecord {
                    status: StepStatus::Started { .. },
                    ..
                }) => Ok(()),
                _ => Err(Violation::InDoubtWithoutStart {
                    step_id: e.step_id.clone(),
                }),
            },
            Event::EffectResolved(e) => {
                if self.in_doubt.contains(&e.step_id) {
                    Ok(())
                } else {
                    Err(Violation::ResolvedNotInDoubt {
                        step_id: e.step_id.clone(),
                    })
                }
            }
            Event::DecisionRecorded(e) => match self.decisions.get(&e.step_id) {
                Some(&first_seq) => Err(Violation::DuplicateDecision {
                    step_id: e.step_id.clone(),
                    first_seq,
                }),
                None => Ok(()),
            },
            Event::ExecutionSuspended(e) => match self.pending_gates.get(&e.gate_id) {
                Some(gate) => Err(Violation::DuplicateGate {
                    gate_id: e.gate_id.clone(),
                    since: gate.seq,
                }),
                None => Ok(()),
            },
            Event::ExecutionResumed(e) => match self.pending_gates.get(&e.gate_id) {
                None => Err(Violation::ResumeWithoutGate {
                    gate_id: e.gate_id.clone(),
                    event_type: e.event_type.clone(),
                    correlation_key: e.correlation_key.clone(),
                }),
                Some(gate)
                    if gate.event_type != e.event_type
                        || gate.correlation_key != e.correlation_key =>
                {
                    Err(Violation::ResumeMismatch {
                        gate_id: e.gate_id.clone(),
                        event_type: e.event_type.clone(),
                        correlation_key: e.correlation_key.clone(),
                        expected_event_type: gate.event_type.clone(),
                        expected_correlation_key: gate.correlation_key.clone(),
                    })
                }
                Some(_) => Ok(()),
            },
            Event::SurfacePatch(_)
            | Event::ExecutionCompleted(_)
            | Event::ExecutionFailed(_)
            | Event::ExecutionCancelled(_) => Ok(()),
        }
    }

    /// A step may start or end only if it has no outcome, is not in doubt, and keeps its effect.
    fn check_step_open(
        &self,
        step_id: &str,
        effect: &str,
        found: &'static str,
    ) -> Result<(), Violation> {
        let Some(record) = self.steps.get(step_id) else {
            return Ok(());
        };
        match record.status {
            StepStatus::Completed { seq } | StepStatus::Failed { seq } => {
                Err(Violation::DuplicateOutcome {
                    step_id: step_id.to_owned(),
                    outcome_seq: seq,
                })
            }
            StepStatus::InDoubt { .. } => Err(Violation::StepInDoubt {
                step_id: step_id.to_owned(),
                found,
            }),
            StepStatus::Started { .. } if record.effect != effect => {
                Err(Violation::EffectMismatch {
                    step_id: step_id.to_owned(),
                    recorded: record.effect.clone(),
                    found: effect.to_owned(),
                })
            }
            StepStatus::Started { .. } => Ok(()),
        }
    }

    /// Applies a checked event.
    fn commit(&mut self, envelope: &EventEnvelope) {
        let seq = envelope.seq;
        self.next_seq = seq + 1;
        match &envelope.event {
            Event::ExecutionStarted(e) => {
                self.execution_id = Some(envelope.execution_id.clone());
                self.flow = Some((e.flow.clone(), e.flow_version));
                self.capabilities = e.capabilities.clone();
                self.budget = e.budget;
                self.status = ExecutionStatus::Running;
            }
            Event::StepStarted(e) => {
                self.set_step(
                    &e.step_id,
                    &e.effect,
                    StepStatus::Started {
                        attempt: e.attempt,
                        seq,
                    },
                );
                self.status = self.active_status();
            }
            Event::StepCompleted(e) => {
                self.budget_spent = self.budget_spent.saturating_add(e.cost);
                self.set_step(&e.step_id, &e.effect, StepStatus::Completed { seq });
                self.status = self.active_status();
            }
            Event::StepFailed(e) => {
                self.budget_spent = self.budget_spent.saturating_add(e.cost);
                self.set_step(&e.step_id, &e.effect, StepStatus::Failed { seq });
                self.status = self.active_status();
            }
            Event::EffectInDoubt(e) => {
                if let Some(record) = self.steps.get_mut(&e.step_id) {
                    record.status = StepStatus::InDoubt {
                        attempt: e.attempt,
                        seq,
                    };
                }
                self.in_doubt.insert(e.step_id.clone());
                self.status = ExecutionStatus::InDoubt;
            }
            Event::EffectResolved(e) => {
                self.in_doubt.remove(&e.step_id);
                if let Some(record) = self.steps.get_mut(&e.step_id) {
                    record.status = match (&e.verdict, record.status) {
                        (Verdict::Retry, StepStatus::InDoubt { attempt, .. }) => {
                            StepStatus::Started { attempt, seq }
                        }
                        (Verdict::Retry, status) => status,
                        (Verdict::Completed { .. }, _) => StepStatus::Completed { seq },
                        (Verdict::Failed { .. }, _) => StepStatus::Failed { seq },
                    };
                }
                self.status = self.active_status();
            }
            Event::DecisionRecorded(e) => {
                self.decisions.insert(e.step_id.clone(), seq);
                self.status = self.active_status();
            }
            Event::ExecutionSuspended(e) => {
                self.pending_gates.insert(
                    e.gate_id.clone(),
                    PendingGate {
                        event_type: e.event_type.clone(),
                        correlation_key: e.correlation_key.clone(),
                        seq,
                    },
                );
                if self.in_doubt.is_empty() {
                    self.status = ExecutionStatus::Suspended;
                }
            }
            Event::ExecutionResumed(e) => {
                self.pending_gates.remove(&e.gate_id);
                self.status = self.active_status();
            }
            Event::SurfacePatch(_) => self.status = self.active_status(),
            Event::ExecutionCompleted(_) => self.status = ExecutionStatus::Completed,
            Event::ExecutionFailed(_) => self.status = ExecutionStatus::Failed,
            Event::ExecutionCancelled(_) => self.status = ExecutionStatus::Cancelled,
        }
    }

    fn set_step(&mut self, step_id: &str, effect: &str, status: StepStatus) {
        match self.steps.get_mut(step_id) {
            Some(record) => record.status = status,
            None => {
                self.steps.insert(
                    step_id.to_owned(),
                    StepRecord {
                        effect: effect.to_owned(),
                        status,
                    },
                );
            }
        }
    }

    /// The status after an event that shows the flow doing work: running, unless a step is
    /// still in doubt.
    fn active_status(&self) -> ExecutionStatus {
        if self.in_doubt.is_empty() {
            ExecutionStatus::Running
        } else {
            ExecutionStatus::InDoubt
        }
    }
}
