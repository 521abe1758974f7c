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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasherDefault;

use crate::hash::{IdHasher, IdKey};
use std::sync::Arc;

use crate::envelope::EventEnvelope;
use crate::event::ErrorInfo;
use crate::id::ExecutionId;
use crate::payload::Payload;

mod apply;
mod status;
mod violation;
pub use status::{ExecutionStatus, PendingGate, StepRecord, StepStatus};
pub use violation::{FoldError, Violation};

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
        self.status.needs_driving(self.in_flight > 0)
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
}

#[cfg(test)]
mod tests;
