//! The states that drivers left executions in a moment ago, kept after their slots are gone,
//! so that `Runtime::wait` right after `Runtime::start` does not read and fold a log its
//! driver has just folded.
//!
//! The common case is an execution whose whole run is one append: its driver ends (and its
//! slot goes) before `start` returns, so the `wait` that follows finds no slot. Without this
//! table it reads the log back and folds it again, which was a tenth of the runtime's CPU under
//! 1,000 concurrent short executions.
//!
//! An entry is a hint, never the truth: `wait` takes it out and serves it only if the log's
//! head is still the state's `next_seq` (a log only grows, so the same head is the same log).
//! The one way around that is retention: a log deleted and started again under the same id
//! *by another process* on a shared store, up to the same head, between the driver's end and
//! the `wait`, would be answered with the earlier run's state. In this process, a driver that
//! starts for an execution drops its entry first.
//!
//! The table is bounded by count, and a state is kept only if it is small (few steps, a small
//! output), so what it holds stays a few MiB whatever the flows do.

use std::collections::{HashMap, VecDeque};

use crate::fold::ExecutionState;
use crate::id::ExecutionId;

/// At most this many states are kept; the oldest goes first.
const RECENT_STATES: usize = 1_024;

/// A state with more steps than this is not kept (its fold is rare enough to pay for).
const MAX_KEPT_STEPS: usize = 256;

/// A state whose output is longer than this (bytes of JSON) is not kept.
const MAX_KEPT_OUTPUT: usize = 16 * 1024;

/// The recently settled states, by execution, oldest first.
#[derive(Default)]
pub(crate) struct RecentStates {
    /// The state and the number of the entry that put it there.
    states: HashMap<ExecutionId, (u64, ExecutionState)>,
    /// Entries in the order they were made; one whose number no longer matches `states` was
    /// taken or replaced and is skipped.
    order: VecDeque<(u64, ExecutionId)>,
    next: u64,
}

impl RecentStates {
    /// Keeps `state` as `execution`'s last settled state, replacing an older one, if it is
    /// small enough to be worth keeping.
    pub(crate) fn keep(&mut self, execution: &ExecutionId, state: ExecutionState) {
        if !worth_keeping(&state) {
            self.states.remove(execution);
            return;
        }
        let number = self.next;
        self.next += 1;
        self.states.insert(execution.clone(), (number, state));
        self.order.push_back((number, execution.clone()));
        while self.states.len() > RECENT_STATES || self.order.len() > 2 * RECENT_STATES {
            let Some((number, oldest)) = self.order.pop_front() else {
                break;
            };
            if self
                .states
                .get(&oldest)
                .is_some_and(|(kept, _)| *kept == number)
            {
                self.states.remove(&oldest);
            }
        }
    }

    /// Takes `execution`'s kept state out, if there is one.
    pub(crate) fn take(&mut self, execution: &ExecutionId) -> Option<ExecutionState> {
        self.states.remove(execution).map(|(_, state)| state)
    }

    /// Forgets `execution`'s kept state: a new driver runs for it.
    pub(crate) fn forget(&mut self, execution: &ExecutionId) {
        self.states.remove(execution);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.states.len()
    }
}

fn worth_keeping(state: &ExecutionState) -> bool {
    state.step_count() <= MAX_KEPT_STEPS
        && state
            .output()
            .is_none_or(|output| output.as_json().len() <= MAX_KEPT_OUTPUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::id;

    #[test]
    fn a_kept_state_is_taken_once() {
        let mut recent = RecentStates::default();
        let a = id("a");
        recent.keep(&a, ExecutionState::new());
        assert!(recent.take(&a).is_some());
        assert!(recent.take(&a).is_none());
    }

    #[test]
    fn the_oldest_goes_first_and_a_replaced_entry_is_not_evicted_by_its_old_place() {
        let mut recent = RecentStates::default();
        let first = id("first");
        recent.keep(&first, ExecutionState::new());
        for n in 0..RECENT_STATES - 1 {
            recent.keep(&id(&format!("e{n}")), ExecutionState::new());
        }
        // Kept again: its first place in the order no longer counts.
        recent.keep(&first, ExecutionState::new());
        recent.keep(&id("one-more"), ExecutionState::new());
        assert_eq!(recent.len(), RECENT_STATES);
        assert!(recent.take(&first).is_some(), "the newer entry stays");
        assert!(recent.take(&id("e0")).is_none(), "the oldest went");
        assert!(recent.take(&id("e1")).is_some());
    }

    #[test]
    fn the_order_stays_bounded_when_states_are_taken_as_fast_as_they_come() {
        let mut recent = RecentStates::default();
        for n in 0..10 * RECENT_STATES {
            let execution = id(&format!("e{n}"));
            recent.keep(&execution, ExecutionState::new());
            recent.take(&execution);
        }
        assert!(recent.order.len() <= 2 * RECENT_STATES);
        assert_eq!(recent.len(), 0);
    }

    #[test]
    fn forget_drops_a_kept_state() {
        let mut recent = RecentStates::default();
        let a = id("a");
        recent.keep(&a, ExecutionState::new());
        recent.forget(&a);
        assert!(recent.take(&a).is_none());
    }
}
