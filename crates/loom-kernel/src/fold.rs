//! The fold: an execution's state as a pure function of its log.
//!
//! [`ExecutionState::apply`] is `(state, event) -> state` with no clock, randomness or I/O, and
//! only ordered maps, so folding a log twice, or a prefix and then the rest, gives equal states.
//! An event that would break an invariant of the log is refused with a [`FoldError`] naming its
//! seq, and leaves the state as it was.
//!
//! Steps and decisions, which grow with the log, sit in hash maps for lookup only: nothing
//! iterates them in hash order (the accessors sort), so hashing never reaches an output. The
//! hasher is a fixed function (no per-process seed), so even memory layout is the same in every
//! run. Keys are step, decision and gate ids minted by flow code, not by clients, so a fast
//! unkeyed hash is safe here.
//!
//! The state records *where* results are (the seq of a step's outcome, of a decision) rather
//! than copying them: the replay engine reads values from the log, and the fold stays small
//! and fast whatever the payloads weigh.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, btree_map, hash_map};
use std::fmt;
use std::hash::BuildHasherDefault;

use crate::hash::{IdHasher, IdKey};
use std::sync::Arc;

use crate::envelope::EventEnvelope;
use crate::event::{ErrorInfo, Event, Verdict};
use crate::id::ExecutionId;
use crate::payload::Payload;

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
    steps: LookupMap<StepRecord>,
    pending_gates: BTreeMap<String, PendingGate>,
    in_doubt: BTreeSet<String>,
    /// K3: the `max_cost` of steps started with one and without an outcome yet, by step id:
    /// what a `completed` verdict charges (LD-024).
    held: BTreeMap<String, u64>,
    /// K3: the part of `held` that steps started and not in doubt hold: what the budget cannot
    /// give to another step while they run.
    held_running: u64,
    /// Steps started and without an outcome, not in doubt: work a worker must drive on.
    in_flight: usize,
    decisions: LookupMap<u64>,
    /// Effect names and gate event types: a handful of distinct strings shared by every step.
    names: HashSet<Arc<str>, BuildHasherDefault<IdHasher>>,
    /// How the execution ended, once it has: the one payload the state copies (once, at the
    /// end), so that a caller of `wait` need not read the log for it.
    ended: Option<Ended>,
}

/// What the terminal event of a log recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ended {
    Completed(Payload),
    Failed(ErrorInfo),
    Cancelled(Option<String>),
}

/// A map by id that is only ever looked up, never iterated in its own order.
type LookupMap<V> = HashMap<IdKey, V, BuildHasherDefault<IdHasher>>;

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
            steps: LookupMap::default(),
            pending_gates: BTreeMap::new(),
            in_doubt: BTreeSet::new(),
            held: BTreeMap::new(),
            held_running: 0,
            in_flight: 0,
            decisions: LookupMap::default(),
            names: HashSet::default(),
            ended: None,
        }
    }

    /// Folds a whole log.
    pub fn fold<'a>(
        events: impl IntoIterator<Item = &'a EventEnvelope>,
    ) -> Result<Self, FoldError> {
        let events = events.into_iter();
        let mut state = Self::new();
        // Most events of a log are steps': the map is sized once instead of rehashed as it
        // grows (up to a bound, so that a long log of other events does not reserve much).
        state.steps.reserve(events.size_hint().0.min(4096));
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

    /// The execution's id, once EXECUTION_STARTED is folded.
    pub fn execution_id(&self) -> Option<&ExecutionId> {
        self.execution_id.as_ref()
    }
    /// The seq the next event must have: the number of events folded.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    /// Where the execution stands.
    pub fn status(&self) -> ExecutionStatus {
        self.status
    }
    /// The flow's registered name and version, from EXECUTION_STARTED.
    pub fn flow(&self) -> Option<(&str, u32)> {
        self.flow
            .as_ref()
            .map(|(name, version)| (name.as_str(), *version))
    }
    /// K2: the capabilities granted at start.
    pub fn capabilities(&self) -> &BTreeSet<String> {
        &self.capabilities
    }
    /// K3: the budget given at start, if any.
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }
    /// K3: what the recorded outcomes cost so far.
    pub fn budget_spent(&self) -> u64 {
        self.budget_spent
    }

    /// K3: what the steps started and neither ended nor in doubt hold (their `max_cost`).
    pub(crate) fn held_running(&self) -> u64 {
        self.held_running
    }
    /// Every step the log mentions, in step id order.
    pub fn steps(&self) -> BTreeMap<&str, &StepRecord> {
        self.steps
            .iter()
            .map(|(id, record)| (id.as_str(), record))
            .collect()
    }
    /// How many steps the log mentions.
    pub fn step_count(&self) -> usize {
        self.steps.len()
    }
    /// What the log says about one step.
    pub fn step(&self, step_id: &str) -> Option<&StepRecord> {
        self.steps.get(step_id)
    }
    /// Gates opened and not yet resumed, by gate id.
    pub fn pending_gates(&self) -> &BTreeMap<String, PendingGate> {
        &self.pending_gates
    }
    /// The pending gate that a resume of `(event_type, correlation_key)` reaches: of the gates
    /// waiting on that pair, the one opened first.
    pub fn gate_waiting_for(
        &self,
        event_type: &str,
        correlation_key: &str,
    ) -> Option<(&String, &PendingGate)> {
        self.pending_gates
            .iter()
            .filter(|(_, gate)| {
                &*gate.event_type == event_type && gate.correlation_key == correlation_key
            })
            .min_by_key(|(_, gate)| gate.seq)
    }
    /// Steps in doubt awaiting an operator's verdict, by step id.
    pub fn steps_in_doubt(&self) -> &BTreeSet<String> {
        &self.in_doubt
    }
    /// How many steps are started and have neither an outcome nor a doubt recorded.
    pub fn steps_in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether a worker should drive this execution on: it has not ended, and it is running or
    /// has steps in flight (a suspended execution whose effect was running when the worker died
    /// must be driven too). Parked executions (waiting only for resumes or verdicts) need not.
    pub fn needs_driving(&self) -> bool {
        !self.status.is_terminal()
            && self.status != ExecutionStatus::New
            && (self.status == ExecutionStatus::Running || self.in_flight > 0)
    }

    /// The seq of each recorded decision, in step id order.
    pub fn decisions(&self) -> BTreeMap<&str, u64> {
        self.decisions
            .iter()
            .map(|(id, seq)| (id.as_str(), *seq))
            .collect()
    }
    /// The seq of the decision recorded under `step_id`.
    pub fn decision(&self, step_id: &str) -> Option<u64> {
        self.decisions.get(step_id).copied()
    }

    /// The flow's output, once the execution has completed (`None` before, or if it failed or
    /// was cancelled). Decode it with [`Payload::decode`] or read it with
    /// [`Payload::to_value`].
    ///
    /// ```
    /// # use loom_kernel::{Event, EventEnvelope, ExecutionId, ExecutionState};
    /// # use loom_kernel::{ExecutionCompleted, ExecutionStarted};
    /// # use serde_json::json;
    /// # let id = ExecutionId::new("order-42").unwrap();
    /// # let started = Event::ExecutionStarted(ExecutionStarted {
    /// #     flow: "checkout".into(), flow_version: 1, input: json!({}).into(),
    /// #     capabilities: Default::default(), budget: None,
    /// # });
    /// # let done = Event::ExecutionCompleted(ExecutionCompleted { output: json!({"total": 7}).into() });
    /// # let log = [EventEnvelope::new(id.clone(), 0, started), EventEnvelope::new(id, 1, done)];
    /// let state = ExecutionState::fold(&log)?;
    /// let output = state.output().expect("completed");
    /// assert_eq!(output.to_value()["total"], 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn output(&self) -> Option<&Payload> {
        match &self.ended {
            Some(Ended::Completed(output)) => Some(output),
            _ => None,
        }
    }

    /// Why the execution failed, once it has (`None` otherwise): the flow's error, with its
    /// code and message.
    pub fn failure(&self) -> Option<&ErrorInfo> {
        match &self.ended {
            Some(Ended::Failed(error)) => Some(error),
            _ => None,
        }
    }

    /// The reason given when the execution was cancelled: `Some(None)` for a cancel without
    /// a reason, `None` if it was not cancelled.
    pub fn cancel_reason(&self) -> Option<Option<&str>> {
        match &self.ended {
            Some(Ended::Cancelled(reason)) => Some(reason.as_deref()),
            _ => None,
        }
    }

    fn refuse(&self, execution_id: &ExecutionId, seq: u64, violation: Violation) -> FoldError {
        FoldError {
            execution: self
                .execution_id
                .as_ref()
                .unwrap_or(execution_id)
                .to_string(),
            seq,
            violation: Box::new(violation),
        }
    }

    /// Folds one event. On error the state is unchanged: every branch checks before it
    /// writes, and looks each map up once (the fold is the hot path of recovery and replay).
    pub fn apply(&mut self, envelope: &EventEnvelope) -> Result<(), FoldError> {
        self.apply_at(&envelope.execution_id, envelope.seq, &envelope.event)
    }

    /// Folds an event a live execution issues, numbered as its log will number it: next,
    /// except the outcome of a step whose `STEP_STARTED`, at or after `unsent` (the first seq
    /// not yet handed to an append), is not written yet: the log records such a quick step by
    /// its outcome alone, in its start's place, and the state is the one that outcome alone
    /// gives. The same checks as [`ExecutionState::apply`], without an envelope.
    pub(crate) fn apply_issued(
        &mut self,
        execution_id: &ExecutionId,
        event: &Event,
        unsent: u64,
    ) -> Result<(), FoldError> {
        let in_place = match event {
            Event::StepCompleted(e) => {
                self.outcome_in_place(&e.step_id, &e.effect, e.cost, unsent, |seq| {
                    StepStatus::Completed { seq }
                })
            }
            Event::StepFailed(e) => {
                self.outcome_in_place(&e.step_id, &e.effect, e.cost, unsent, |seq| {
                    StepStatus::Failed { seq }
                })
            }
            _ => false,
        };
        if in_place {
            return Ok(());
        }
        self.apply_at(execution_id, self.next_seq, event)
    }

    /// The outcome of a step started at or after `unsent`, folded in its start's place (see
    /// [`ExecutionState::apply_issued`]); false, with nothing changed, for any other step (the
    /// outcome is then folded, or refused, as the next event).
    fn outcome_in_place(
        &mut self,
        step_id: &str,
        effect: &str,
        cost: u64,
        unsent: u64,
        status: impl FnOnce(u64) -> StepStatus,
    ) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        let Some(record) = self.steps.get_mut(&IdKey::new(step_id)) else {
            return false;
        };
        let StepStatus::Started { seq, .. } = record.status else {
            return false;
        };
        if seq < unsent || *record.effect != *effect {
            return false;
        }
        record.status = status(seq);
        self.in_flight -= 1;
        self.release(step_id);
        self.budget_spent = self.budget_spent.saturating_add(cost);
        self.status = self.active_status();
        true
    }

    fn apply_at(
        &mut self,
        execution_id: &ExecutionId,
        seq: u64,
        event: &Event,
    ) -> Result<(), FoldError> {
        self.apply_checked(execution_id, seq, event)
            .map_err(|violation| self.refuse(execution_id, seq, violation))?;
        self.next_seq = seq + 1;
        Ok(())
    }

    fn apply_checked(
        &mut self,
        execution_id: &ExecutionId,
        seq: u64,
        event: &Event,
    ) -> Result<(), Violation> {
        if seq != self.next_seq {
            return Err(Violation::SeqGap {
                expected: self.next_seq,
            });
        }
        if let Some(id) = &self.execution_id
            && id != execution_id
        {
            return Err(Violation::ForeignExecution {
                found: execution_id.to_string(),
            });
        }
        if self.status == ExecutionStatus::New {
            let Event::ExecutionStarted(e) = event else {
                return Err(Violation::NotStarted {
                    found: event.type_name(),
                });
            };
            self.execution_id = Some(execution_id.clone());
            self.flow = Some((e.flow.clone(), e.flow_version));
            self.capabilities = e.capabilities.clone();
            self.budget = e.budget;
            self.status = ExecutionStatus::Running;
            return Ok(());
        }
        if self.status.is_terminal() {
            return Err(Violation::AfterTerminal {
                found: event.type_name(),
                status: self.status,
            });
        }
        match event {
            Event::ExecutionStarted(_) => return Err(Violation::StartedTwice),
            Event::StepStarted(e) => {
                let status = StepStatus::Started {
                    attempt: e.attempt,
                    seq,
                };
                self.record_step(&e.step_id, &e.effect, status, "STEP_STARTED")?;
                // A step started again (a re-run, a retry) held its previous attempt's cost.
                let before = if e.max_cost == 0 {
                    self.held.remove(&e.step_id)
                } else {
                    self.held.insert(e.step_id.clone(), e.max_cost)
                };
                self.held_running = (self.held_running.saturating_sub(before.unwrap_or(0)))
                    .saturating_add(e.max_cost);
            }
            Event::StepCompleted(e) => {
                let status = StepStatus::Completed { seq };
                self.record_step(&e.step_id, &e.effect, status, "STEP_COMPLETED")?;
                self.release(&e.step_id);
                self.budget_spent = self.budget_spent.saturating_add(e.cost);
            }
            Event::StepFailed(e) => {
                let status = StepStatus::Failed { seq };
                self.record_step(&e.step_id, &e.effect, status, "STEP_FAILED")?;
                self.release(&e.step_id);
                self.budget_spent = self.budget_spent.saturating_add(e.cost);
            }
            Event::EffectInDoubt(e) => {
                match self.steps.get_mut(e.step_id.as_str()) {
                    Some(record) if matches!(record.status, StepStatus::Started { .. }) => {
                        record.status = StepStatus::InDoubt {
                            attempt: e.attempt,
                            seq,
                        };
                        self.in_flight -= 1;
                        // In doubt, a step holds nothing against what others may spend.
                        let held = self.held.get(&e.step_id).copied().unwrap_or(0);
                        self.held_running = self.held_running.saturating_sub(held);
                    }
                    _ => {
                        return Err(Violation::InDoubtWithoutStart {
                            step_id: e.step_id.clone(),
                        });
                    }
                }
                self.in_doubt.insert(e.step_id.clone());
                self.status = ExecutionStatus::InDoubt;
                return Ok(());
            }
            Event::EffectResolved(e) => {
                if !self.in_doubt.remove(&e.step_id) {
                    return Err(Violation::ResolvedNotInDoubt {
                        step_id: e.step_id.clone(),
                    });
                }
                if let Some(record) = self.steps.get_mut(e.step_id.as_str()) {
                    record.status = match (&e.verdict, record.status) {
                        (Verdict::Retry, StepStatus::InDoubt { attempt, .. }) => {
                            self.in_flight += 1;
                            let held = self.held.get(&e.step_id).copied().unwrap_or(0);
                            self.held_running = self.held_running.saturating_add(held);
                            StepStatus::Started { attempt, seq }
                        }
                        (Verdict::Retry, status) => status,
                        (Verdict::Completed { .. }, _) => StepStatus::Completed { seq },
                        (Verdict::Failed { .. }, _) => StepStatus::Failed { seq },
                    };
                }
                // K3 (LD-024): the effect ran, so the step is charged what its attempt held; a
                // `failed` verdict charges nothing, a `retry` waits for the next outcome.
                match e.verdict {
                    Verdict::Retry => {}
                    Verdict::Completed { .. } => {
                        let cost = self.held.remove(&e.step_id).unwrap_or(0);
                        self.budget_spent = self.budget_spent.saturating_add(cost);
                    }
                    Verdict::Failed { .. } => {
                        self.held.remove(&e.step_id);
                    }
                }
            }
            Event::DecisionRecorded(e) => match self.decisions.entry(IdKey::new(&e.step_id)) {
                hash_map::Entry::Occupied(first) => {
                    return Err(Violation::DuplicateDecision {
                        step_id: e.step_id.clone(),
                        first_seq: *first.get(),
                    });
                }
                hash_map::Entry::Vacant(slot) => {
                    slot.insert(seq);
                }
            },
            Event::ExecutionSuspended(e) => {
                match self.pending_gates.entry(e.gate_id.clone()) {
                    btree_map::Entry::Occupied(gate) => {
                        return Err(Violation::DuplicateGate {
                            gate_id: e.gate_id.clone(),
                            since: gate.get().seq,
                        });
                    }
                    btree_map::Entry::Vacant(slot) => {
                        let event_type = intern(&mut self.names, &e.event_type);
                        slot.insert(PendingGate {
                            event_type,
                            correlation_key: e.correlation_key.clone(),
                            seq,
                        });
                    }
                }
                self.status = self.active_status();
                return Ok(());
            }
            Event::ExecutionResumed(e) => {
                match self.pending_gates.get(&e.gate_id) {
                    None => {
                        return Err(Violation::ResumeWithoutGate {
                            gate_id: e.gate_id.clone(),
                            event_type: e.event_type.clone(),
                            correlation_key: e.correlation_key.clone(),
                        });
                    }
                    Some(gate)
                        if *gate.event_type != *e.event_type
                            || gate.correlation_key != e.correlation_key =>
                    {
                        return Err(Violation::ResumeMismatch {
                            gate_id: e.gate_id.clone(),
                            event_type: e.event_type.clone(),
                            correlation_key: e.correlation_key.clone(),
                            expected_event_type: gate.event_type.to_string(),
                            expected_correlation_key: gate.correlation_key.clone(),
                        });
                    }
                    Some(_) => {}
                }
                self.pending_gates.remove(&e.gate_id);
            }
            Event::SurfacePatch(_) => {}
            Event::ExecutionCompleted(e) => {
                self.status = ExecutionStatus::Completed;
                self.ended = Some(Ended::Completed(e.output.clone()));
                return Ok(());
            }
            Event::ExecutionFailed(e) => {
                self.status = ExecutionStatus::Failed;
                self.ended = Some(Ended::Failed(e.error.clone()));
                return Ok(());
            }
            Event::ExecutionCancelled(e) => {
                self.status = ExecutionStatus::Cancelled;
                self.ended = Some(Ended::Cancelled(e.reason.clone()));
                return Ok(());
            }
        }
        self.status = self.active_status();
        Ok(())
    }

    /// Records a step's start or outcome. A step may start or end only if it has no outcome,
    /// is not in doubt, and keeps its effect.
    fn record_step(
        &mut self,
        step_id: &str,
        effect: &str,
        status: StepStatus,
        found: &'static str,
    ) -> Result<(), Violation> {
        let starts = matches!(status, StepStatus::Started { .. });
        // One lookup by key (comparing keys compares bytes, with no UTF-8 check), which a new
        // step's record is inserted at.
        let record = match self.steps.entry(IdKey::new(step_id)) {
            hash_map::Entry::Occupied(record) => record.into_mut(),
            hash_map::Entry::Vacant(slot) => {
                let effect = intern(&mut self.names, effect);
                slot.insert(StepRecord { effect, status });
                self.in_flight += usize::from(starts);
                return Ok(());
            }
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
            StepStatus::Started { .. } if *record.effect != *effect => {
                Err(Violation::EffectMismatch {
                    step_id: step_id.to_owned(),
                    recorded: record.effect.to_string(),
                    found: effect.to_owned(),
                })
            }
            StepStatus::Started { .. } => {
                record.status = status;
                // Started -> started again keeps the count; started -> outcome ends the flight.
                self.in_flight -= usize::from(!starts);
                Ok(())
            }
        }
    }

    /// A step's outcome is recorded: what it held is released (it was running: a step in
    /// doubt gets a verdict, not an outcome).
    fn release(&mut self, step_id: &str) {
        if let Some(held) = self.held.remove(step_id) {
            self.held_running = self.held_running.saturating_sub(held);
        }
    }

    /// The status of an execution that has not ended: in doubt while a step awaits a verdict,
    /// suspended while a gate is pending, running otherwise.
    fn active_status(&self) -> ExecutionStatus {
        if !self.in_doubt.is_empty() {
            ExecutionStatus::InDoubt
        } else if !self.pending_gates.is_empty() {
            ExecutionStatus::Suspended
        } else {
            ExecutionStatus::Running
        }
    }
}

/// The shared copy of `name`, made on first sight.
fn intern(names: &mut HashSet<Arc<str>, BuildHasherDefault<IdHasher>>, name: &str) -> Arc<str> {
    if let Some(shared) = names.get(name) {
        return Arc::clone(shared);
    }
    let shared: Arc<str> = Arc::from(name);
    names.insert(Arc::clone(&shared));
    shared
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ExecutionStarted, StepCompleted, StepStarted};

    fn id() -> ExecutionId {
        ExecutionId::new("x").expect("a valid id")
    }

    fn start() -> Event {
        Event::ExecutionStarted(ExecutionStarted {
            flow: "f".into(),
            flow_version: 1,
            input: Payload::null(),
            capabilities: BTreeSet::new(),
            budget: Some(10),
        })
    }

    fn started(step: &str, max_cost: u64) -> Event {
        Event::StepStarted(StepStarted {
            step_id: step.into(),
            effect: "e".into(),
            input_digest: "d".into(),
            attempt: 1,
            max_cost,
        })
    }

    fn completed(step: &str, cost: u64) -> Event {
        Event::StepCompleted(StepCompleted {
            step_id: step.into(),
            effect: "e".into(),
            input_digest: "d".into(),
            output: Payload::null(),
            cost,
        })
    }

    fn fold_log(events: Vec<Event>) -> ExecutionState {
        let log: Vec<EventEnvelope> = (0..)
            .zip(events)
            .map(|(seq, event)| EventEnvelope::new(id(), seq, event))
            .collect();
        ExecutionState::fold(&log).expect("a valid log")
    }

    #[test]
    fn a_quick_step_folded_as_issued_is_the_fold_of_its_outcome_alone_in_its_start_s_place() {
        let mut issued = ExecutionState::new();
        let events = [start(), started("a", 4), started("b", 2), completed("a", 3)];
        for event in &events {
            issued.apply_issued(&id(), event, 1).expect("accepted");
        }
        assert_eq!(issued.held_running(), 2, "b still holds its max_cost");
        let log = fold_log(vec![start(), completed("a", 3), started("b", 2)]);
        assert_eq!(issued, log);
        // Once its start is handed to an append, the outcome is the next event.
        let mut issued = ExecutionState::new();
        issued.apply_issued(&id(), &start(), 0).expect("accepted");
        issued
            .apply_issued(&id(), &started("a", 4), 0)
            .expect("accepted");
        issued
            .apply_issued(&id(), &completed("a", 3), 2)
            .expect("accepted");
        let log = fold_log(vec![start(), started("a", 4), completed("a", 3)]);
        assert_eq!(issued, log);
        // A second outcome is refused and changes nothing.
        let before = issued.clone();
        assert!(issued.apply_issued(&id(), &completed("a", 3), 0).is_err());
        assert_eq!(issued, before);
    }
}
