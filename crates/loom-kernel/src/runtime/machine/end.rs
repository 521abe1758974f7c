//! The flow's end: recorded commands it did not issue again are a divergence; its result is
//! the execution's terminal event, unless the execution has ended already.

use super::state::FlowState;
use super::vocabulary::FlowError;
use super::{Held, Machine};
use crate::event::{Event, ExecutionCompleted, ExecutionFailed};
use crate::payload::Payload;
use crate::runtime::history::{Attempted, NonDeterminism};

impl<R, D: Held, C> Machine<R, D, C> {
    /// The flow returned: its terminal event is queued, unless the execution has ended.
    /// Returns whether it was (the driver then drops the effects it runs).
    #[cfg(test)]
    pub(crate) fn flow_returned(&mut self, result: Result<Payload, FlowError>) -> bool {
        self.ended_with(Vec::new(), terminal(result))
    }

    /// The flow's end: the doubts of the steps it left running (`FlowState::doubts_cut_off`),
    /// then `terminal` (both folded already on the flow's side), queued unless the execution
    /// has ended. Returns whether they were (the driver then drops the effects it runs).
    pub(crate) fn ended_with(&mut self, doubts: Vec<Event>, terminal: Event) -> bool {
        if self.ended {
            return false;
        }
        self.queued.extend(doubts);
        self.queued.push(terminal);
        self.end();
        true
    }

    pub(super) fn end(&mut self) {
        self.ended = true;
        self.held.clear();
        self.held_children.clear();
    }
}

/// The event that ends an execution whose flow returned `result`.
pub(crate) fn terminal(result: Result<Payload, FlowError>) -> Event {
    match result {
        Ok(output) => Event::ExecutionCompleted(ExecutionCompleted { output }),
        Err(error) => Event::ExecutionFailed(ExecutionFailed {
            error: error.into(),
        }),
    }
}

impl FlowState {
    /// Called when the flow returns or waits: recorded commands it did not issue again are a
    /// divergence.
    pub(crate) fn check_end(&mut self, attempted: Attempted<'_>) {
        if self.divergence.is_some() {
            return;
        }
        if let Some((seq, recorded)) = self.history.commands.get(self.cursor) {
            self.divergence = Some(NonDeterminism {
                seq: *seq,
                recorded: recorded.to_string(),
                attempted: attempted.to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::runtime::history::History;

    #[test]
    fn the_flow_s_result_is_its_terminal_event() {
        let mut m = M::new(1);
        assert!(m.flow_returned(Err(FlowError::new("x", "y"))));
        let events = m.take_append().unwrap().events;
        assert!(matches!(events.as_slice(), [Event::ExecutionFailed(_)]));
    }

    #[test]
    fn a_flow_that_returns_before_its_recorded_commands_diverged() {
        let mut s = flow_state_with(History::from_events(vec![(1, started("a"))]));
        assert!(s.replaying());
        s.check_end(Attempted::Complete);
        assert_eq!(s.divergence().map(|d| d.seq), Some(1));
        assert!(!s.replaying());
    }
}
