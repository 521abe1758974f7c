//! The status each append leaves an execution in, for the status index and for leases.
//!
//! The store folds what it appends onto the state it last saw of the execution (read and
//! folded once when this process first appends to an execution it did not start). The status
//! goes into `loom_executions.status` in the same transaction as the events, and decides
//! whether the writer keeps its lease: an execution that needs no driving (ended, or parked on
//! gates and verdicts) is released at once, so that any worker can resume it.

use std::collections::HashMap;
use std::sync::Mutex;

use loom_kernel::{Event, EventEnvelope, ExecutionId, ExecutionState, ExecutionStatus};

/// `loom_executions.status` for a log the fold refuses: listed under no status, and its
/// lease kept while somebody appends to it.
pub(crate) const UNKNOWN_STATUS: i16 = -1;

/// The column value of a status.
pub(crate) fn status_code(status: ExecutionStatus) -> i16 {
    match status {
        ExecutionStatus::New => 0,
        ExecutionStatus::Running => 1,
        ExecutionStatus::Suspended => 2,
        ExecutionStatus::InDoubt => 3,
        ExecutionStatus::Completed => 4,
        ExecutionStatus::Failed => 5,
        ExecutionStatus::Cancelled => 6,
        // A status added to the kernel later is kept with the lease, as for running.
        _ => 1,
    }
}

/// What an append will leave behind, worked out before it is sent.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The state after the append, when the fold accepted every event.
    pub(crate) state: Option<ExecutionState>,
    /// The status column's new value.
    pub(crate) status: i16,
    /// Whether the writer keeps the execution's lease (it still needs driving).
    pub(crate) keep_lease: bool,
}

/// The last state this process saw of the executions it appends to.
#[derive(Debug, Default)]
pub(crate) struct StatusCache {
    states: Mutex<HashMap<ExecutionId, ExecutionState>>,
}

impl StatusCache {
    fn states(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, ExecutionState>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state at `expected_seq`, if this process knows it.
    pub(crate) fn state_at(
        &self,
        execution: &ExecutionId,
        expected_seq: u64,
    ) -> Option<ExecutionState> {
        if expected_seq == 0 {
            return Some(ExecutionState::new());
        }
        self.states()
            .get(execution)
            .filter(|state| state.next_seq() == expected_seq)
            .cloned()
    }

    /// Keeps `state` as the latest known, unless a later one is known; forgets ended ones.
    pub(crate) fn remember(&self, execution: &ExecutionId, state: ExecutionState) {
        let mut states = self.states();
        if state.status().is_terminal() {
            states.remove(execution);
            return;
        }
        match states.get(execution) {
            Some(known) if known.next_seq() >= state.next_seq() => {}
            _ => {
                states.insert(execution.clone(), state);
            }
        }
    }
}

/// Folds `events` at `expected_seq` onto `before` (`None`: the earlier log could not be
/// folded).
pub(crate) fn outcome(
    execution: &ExecutionId,
    before: Option<ExecutionState>,
    expected_seq: u64,
    events: &[Event],
) -> Outcome {
    let folded = before.and_then(|mut state| {
        for (seq, event) in (expected_seq..).zip(events) {
            let envelope = EventEnvelope::new(execution.clone(), seq, event.clone());
            state.apply(&envelope).ok()?;
        }
        Some(state)
    });
    match folded {
        Some(state) => Outcome {
            status: status_code(state.status()),
            keep_lease: state.needs_driving(),
            state: Some(state),
        },
        None => Outcome {
            state: None,
            status: UNKNOWN_STATUS,
            keep_lease: true,
        },
    }
}
